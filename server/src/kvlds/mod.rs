//! The kvlds listener: kivaloo's binary protocol, byte for byte as
//! docs/kvlds-protocol.md describes it. Requests are answered in any order:
//! reads at once, writes once the commit holding them is durable.
//!
//! One task serves a connection, reading and writing both, so a read is
//! answered where it was parsed: its answer packet is built in place in the
//! connection's output buffer, and what one read of the socket brought in
//! goes out in one write. kivaloo's clients keep thousands of requests in
//! flight but send a new one as each answer arrives, so requests come a few
//! dozen per read and each answer is wanted at once; a hand-off to another
//! task, a message and an allocation per answer cost more than the lookup.
//! The GETs of one read are looked up together (`Db::get_each`), so their
//! waits for memory overlap. Only write completions cross threads (from the
//! commit thread), one message per group of writes.
//!
//! Limits per connection: at most `MAX_IN_FLIGHT` writes unanswered, and
//! at most `MAX_UNSENT` bytes of answers not yet taken by the socket (plus
//! one answer); past either the socket is not read until answers go out,
//! which is how a client that does not read its answers is held back.

pub use kivi_kvlds_wire::{packet, request};

use crate::committer::Done;
use crate::counters::KVLDS_REQUESTS;
use crate::listen::Stream;
use crate::Shared;
use kivi::{WriteBatch, WriteOutcome};
use request::{Request, MAX_LEN, NOT_DONE, OK};
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Writes a connection may have unanswered (kivaloo's tools keep 4,096
/// requests in flight).
pub const MAX_IN_FLIGHT: usize = 4096;
/// A RANGE answer holds at most this many bytes of pairs, whatever budget
/// the request gives.
pub const MAX_RANGE_BYTES: u32 = 4 << 20;
/// Answers not yet taken by the socket, at most, before the connection
/// stops reading (one answer may go past it).
const MAX_UNSENT: usize = 256 << 10;
/// What an idle connection's read buffer keeps, so that many idle
/// connections cost little.
const IDLE_BUFFER: usize = 4 << 10;
/// A busy connection's reads grow up to this, so that requests piling up
/// in the socket are taken in few reads.
const MAX_READ: usize = 64 << 10;
/// Plain writes merged into one batch stay below this size.
const MAX_GROUP_BYTES: usize = 1 << 20;
/// GETs looked up together, at most (their answers are about 300 bytes
/// each at most, so `MAX_UNSENT` holds with room).
const MAX_GETS_AT_ONCE: usize = 256;

/// A group of writes answered, sent from the commit thread.
enum Completed {
    /// Plain writes (SET, DELETE), all applied: each ID is answered OK.
    Plain(Vec<u64>),
    /// A conditional write: its ID and the status to answer.
    Conditional(u64, u32),
    /// `count` writes failed; the protocol has no error status, so the
    /// connection closes rather than answer anything wrong.
    Failed(usize, String),
}

/// Plain writes gathered from one read: one batch, and each one's request
/// ID, answered together.
struct PlainGroup {
    batch: WriteBatch,
    ids: Vec<u64>,
}

/// One connection's state between socket reads.
struct Conn {
    shared: Arc<Shared>,
    completed: mpsc::UnboundedSender<Completed>,
    /// Answer packets not yet written, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    /// Writes read and not yet answered.
    pending: usize,
    /// The open group of plain writes, and the writes ready to queue.
    group: Option<PlainGroup>,
    writes: Vec<(WriteBatch, Done)>,
    /// Reused by RANGE (the pairs).
    scratch: Vec<u8>,
    /// Why the connection must close once what came before is answered.
    close: Option<String>,
    /// Requests by type since the last read (`KVLDS_REQUESTS`' order).
    tally: [u64; KVLDS_REQUESTS.len()],
}

/// Serves one connection until the peer closes it, it breaks the protocol,
/// or the server stops (then requests already read are answered first).
pub async fn serve(stream: Box<dyn Stream>, peer: String, shared: Arc<Shared>) {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (completed, mut completions) = mpsc::unbounded_channel();
    let mut stop = shared.stop.clone();
    let mut c = Conn {
        shared,
        completed,
        out: Vec::new(),
        sent: 0,
        pending: 0,
        group: None,
        writes: Vec::new(),
        scratch: Vec::new(),
        close: None,
        tally: [0; KVLDS_REQUESTS.len()],
    };
    let mut buf: Vec<u8> = Vec::with_capacity(IDLE_BUFFER);
    let mut read_size = IDLE_BUFFER;
    let mut reading = true;
    // When the client last took answers (or had none owed): a client that
    // sends and never reads is let go after the output timeout, as on
    // RESP, rather than holding its connection slot forever. (RESP's idle
    // timeout does not apply: kivaloo's front ends keep one connection for
    // their life, idle or not.)
    let mut last_taken = tokio::time::Instant::now();
    loop {
        // Every complete request read so far, within the limits.
        let mut used = 0;
        let mut gets = Vec::new();
        while c.close.is_none() && c.pending < MAX_IN_FLIGHT && c.unsent() < MAX_UNSENT {
            match packet::parse(&buf[used..]) {
                Ok(Some(p)) => {
                    used += p.len;
                    if let Err(reason) = c.handle(p.id, p.record, &mut gets) {
                        c.close = Some(reason);
                    }
                    if gets.len() == MAX_GETS_AT_ONCE {
                        c.answer_gets(&mut gets);
                    }
                }
                Ok(None) => break,
                Err(e) => c.close = Some(format!("malformed packet: {e}")),
            }
        }
        c.answer_gets(&mut gets);
        buf.drain(..used);
        c.shared.kvlds_requests.fold(&mut c.tally);
        // The writes this read brought in, queued at once.
        c.queue().await;
        while let Ok(done) = completions.try_recv() {
            c.complete(done);
        }
        if c.close.is_some() {
            reading = false;
        }
        if !reading && c.pending == 0 && c.unsent() == 0 {
            break;
        }
        if c.unsent() == 0 {
            last_taken = tokio::time::Instant::now();
        }
        let output_timeout = c.shared.live.output_timeout();
        let can_read = reading && c.pending < MAX_IN_FLIGHT && c.unsent() < MAX_UNSENT;
        if can_read {
            if buf.is_empty() && buf.capacity() > 2 * read_size {
                buf = Vec::with_capacity(read_size);
            }
            buf.reserve(read_size);
        }
        tokio::select! {
            // Answers first: what this turn answered goes out before the
            // next read.
            biased;
            w = wr.write(&c.out[c.sent..]), if c.unsent() > 0 => match w {
                Ok(n) if n > 0 => {
                    last_taken = tokio::time::Instant::now();
                    c.sent += n;
                    if c.sent == c.out.len() {
                        c.out.clear();
                        c.sent = 0;
                    }
                }
                // The peer is gone: nobody to answer.
                _ => break,
            },
            Some(done) = completions.recv(), if c.pending > 0 => c.complete(done),
            r = rd.read_buf(&mut buf), if can_read => match r {
                Ok(0) => reading = false,
                Ok(n) => {
                    // Grow reads while they come back full; shrink them
                    // back when the connection quiets down.
                    if n >= read_size {
                        read_size = (2 * read_size).min(MAX_READ);
                    } else if n < read_size / 4 {
                        read_size = (read_size / 2).max(IDLE_BUFFER);
                    }
                }
                Err(e) => c.close = Some(format!("read failed: {e}")),
            },
            _ = stop.changed(), if reading => reading = false,
            // Not polled unless the write above is blocked, so the timer
            // costs nothing while the client keeps up.
            _ = tokio::time::sleep_until(last_taken + output_timeout), if c.unsent() > 0 => {
                c.close = Some(format!("read none of its answers for {output_timeout:?}"));
                break;
            }
        }
    }
    if let Some(reason) = &c.close {
        tracing::info!(%peer, %reason, "closed a kvlds connection");
    }
    let _ = wr.shutdown().await;
}

impl Conn {
    fn unsent(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Answers one read at once, into `out`, or gathers it into `gets`
    /// (answered together); gathers a write for the commit; or says why the
    /// connection must close.
    fn handle<'r>(
        &mut self,
        id: u64,
        record: &'r [u8],
        gets: &mut Vec<(u64, &'r [u8])>,
    ) -> Result<(), String> {
        let req = request::parse(record).map_err(|e| format!("malformed request: {e}"))?;
        // The index in `KVLDS_REQUESTS`.
        self.tally[match req {
            Request::Params => 0,
            Request::Get { .. } => 1,
            Request::Range { .. } => 2,
            Request::Set { .. } => 3,
            Request::Cas { .. } => 4,
            Request::Add { .. } => 5,
            Request::Modify { .. } => 6,
            Request::Delete { .. } => 7,
            Request::Cad { .. } => 8,
        }] += 1;
        let mut b = WriteBatch::new();
        let built = match req {
            Request::Params => {
                packet::write(&mut self.out, id, &request::params());
                return Ok(());
            }
            Request::Get { key } => {
                gets.push((id, key));
                return Ok(());
            }
            Request::Range {
                max_bytes,
                start,
                end,
            } => return self.range(id, max_bytes, start, end),
            Request::Set { key, value } => b.put(key, value).map(|_| ()),
            Request::Cas { key, old, new } => b.compare_and_swap(key, old, new).map(|_| ()),
            Request::Add { key, value } => b.insert_if_absent(key, value).map(|_| ()),
            Request::Modify { key, value } => b.update_if_present(key, value).map(|_| ()),
            Request::Delete { key } => b.delete(key).map(|_| ()),
            Request::Cad { key, old } => b.compare_and_delete(key, old).map(|_| ()),
        };
        // Keys and values of at most 255 bytes are within kivi's limits.
        built.map_err(|e| format!("request refused: {e}"))?;
        self.pending += 1;
        if !b.has_conditions() {
            match &mut self.group {
                Some(g) if g.batch.size_bytes() + b.size_bytes() <= MAX_GROUP_BYTES => {
                    g.batch
                        .append(b)
                        .expect("groups stay far below the batch limit");
                    g.ids.push(id);
                }
                _ => {
                    self.close_group();
                    self.group = Some(PlainGroup {
                        batch: b,
                        ids: vec![id],
                    });
                }
            }
            return Ok(());
        }
        self.close_group();
        let tx = self.completed.clone();
        let done: Done = Box::new(move |r: kivi::Result<WriteOutcome>| {
            let _ = tx.send(match r {
                Ok(WriteOutcome::Applied) => Completed::Conditional(id, OK),
                Ok(WriteOutcome::ConditionFailed { .. }) => Completed::Conditional(id, NOT_DONE),
                Err(e) => Completed::Failed(1, format!("a write failed: {e}")),
            });
        });
        self.writes.push((b, done));
        Ok(())
    }

    /// Answers the GETs gathered, looked up side by side (`Db::get_each`:
    /// their waits for memory overlap); a failure closes the connection.
    fn answer_gets(&mut self, gets: &mut Vec<(u64, &[u8])>) {
        if gets.is_empty() {
            return;
        }
        let keys: Vec<&[u8]> = gets.iter().map(|&(_, k)| k).collect();
        let out = &mut self.out;
        let mut too_long = None;
        let looked_up = self.shared.db.get_each(&keys, |i, value| {
            let id = gets[i].0;
            match value {
                Some(v) if v.len() > MAX_LEN => {
                    too_long.get_or_insert(v.len());
                }
                Some(v) => packet::write_with(out, id, |out| {
                    out.extend_from_slice(&OK.to_be_bytes());
                    request::push_string(out, v);
                }),
                None => packet::write(out, id, &NOT_DONE.to_be_bytes()),
            }
            // kvlds values are at most 255 bytes: `MAX_GETS_AT_ONCE` of
            // them stay far below `MAX_UNSENT`.
            ControlFlow::Continue(())
        });
        gets.clear();
        if let Err(e) = looked_up {
            self.close.get_or_insert(format!("GET failed: {e}"));
        } else if let Some(len) = too_long {
            self.close.get_or_insert(format!(
                "GET: a value is {len} bytes, more than this protocol carries ({MAX_LEN})"
            ));
        }
    }

    /// A RANGE answer: pairs with start <= key < end (to the end of the
    /// keyspace if `end` is empty), filling the byte budget; at least one
    /// pair if any is in range. `next` is where the next request continues:
    /// the first key not returned, or when done, `end` (empty for an empty
    /// end).
    fn range(&mut self, id: u64, max_bytes: u32, start: &[u8], end: &[u8]) -> Result<(), String> {
        let budget = max_bytes.min(MAX_RANGE_BYTES) as usize;
        let upper = if end.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(end)
        };
        let pairs = &mut self.scratch;
        pairs.clear();
        let mut count = 0u32;
        let mut stopped_at = None;
        if end.is_empty() || start < end {
            for item in self
                .shared
                .db
                .range::<&[u8], _>((Bound::Included(start), upper))
            {
                let (k, v) = item.map_err(|e| format!("RANGE failed: {e}"))?;
                if k.len() > MAX_LEN || v.len() > MAX_LEN {
                    return Err(format!(
                        "RANGE: a pair of {}+{} bytes is more than this protocol carries ({MAX_LEN})",
                        k.len(),
                        v.len()
                    ));
                }
                let size = 2 + k.len() + v.len();
                if count > 0 && pairs.len() + size > budget {
                    stopped_at = Some(k);
                    break;
                }
                request::push_string(pairs, &k);
                request::push_string(pairs, &v);
                count += 1;
            }
        }
        let next: &[u8] = stopped_at.as_deref().unwrap_or(end);
        packet::write_with(&mut self.out, id, |out| {
            request::write_range(out, count, next, pairs)
        });
        Ok(())
    }

    /// Moves the open group of plain writes, if any, to the writes to queue.
    fn close_group(&mut self) {
        let Some(PlainGroup { batch, ids }) = self.group.take() else {
            return;
        };
        let tx = self.completed.clone();
        let done: Done = Box::new(move |r: kivi::Result<WriteOutcome>| {
            let _ = tx.send(match r {
                // Unconditional writes always apply.
                Ok(_) => Completed::Plain(ids),
                Err(e) => Completed::Failed(ids.len(), format!("a write failed: {e}")),
            });
        });
        self.writes.push((batch, done));
    }

    /// Queues every write gathered so far, the open group included.
    async fn queue(&mut self) {
        self.close_group();
        if !self.writes.is_empty() {
            let writes = std::mem::take(&mut self.writes);
            self.shared.committer.submit_all(writes).await;
        }
    }

    /// Answers writes the commit thread finished.
    fn complete(&mut self, done: Completed) {
        let answered = match done {
            Completed::Plain(ids) => {
                let ok = OK.to_be_bytes();
                for &id in &ids {
                    packet::write(&mut self.out, id, &ok);
                }
                ids.len()
            }
            Completed::Conditional(id, status) => {
                packet::write(&mut self.out, id, &status.to_be_bytes());
                1
            }
            Completed::Failed(count, reason) => {
                self.close.get_or_insert(reason);
                count
            }
        };
        debug_assert!(answered <= self.pending, "more answers than writes");
        self.pending -= answered;
    }
}
