//! The kvlds listener: kivaloo's binary protocol, byte for byte as
//! `shared/specs/kivaloo-protocol.md` gives it. Requests are answered in
//! any order: reads at once, writes once the commit holding them is
//! durable. A connection keeps at most `MAX_IN_FLIGHT` requests
//! unanswered; past that it is not read until answers go out.

pub mod packet;
pub mod request;

use crate::committer::Done;
use crate::listen::Stream;
use crate::Shared;
use kivi::{WriteBatch, WriteOutcome};
use request::{Request, MAX_LEN, NOT_DONE, OK};
use std::ops::Bound;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

/// Requests a connection may have unanswered (kivaloo's tools keep 4,096).
pub const MAX_IN_FLIGHT: usize = 4096;
/// A RANGE answer holds at most this many bytes of pairs, whatever budget
/// the request gives.
pub const MAX_RANGE_BYTES: u32 = 4 << 20;
/// Answers are gathered up to this many bytes per socket write.
const WRITE_CHUNK: usize = 256 << 10;
/// What an idle connection's read buffer keeps, so that many idle
/// connections cost little.
const IDLE_BUFFER: usize = 4 << 10;

enum Out {
    /// A response packet; the permit is its request's place in flight.
    Packet(Vec<u8>, OwnedSemaphorePermit),
    /// Several response packets, one after another, and their permits.
    Packets(Vec<u8>, Vec<OwnedSemaphorePermit>),
    /// Close the connection after what was sent before, logging why.
    Close(String),
}

/// Serves one connection until the peer closes it, it breaks the protocol,
/// or the server stops (then requests already read are answered first).
pub async fn serve(stream: Box<dyn Stream>, peer: String, shared: Arc<Shared>) {
    let (mut rd, wr) = tokio::io::split(stream);
    let (out, out_rx) = mpsc::unbounded_channel::<Out>();
    let (closed_tx, mut closed) = watch::channel(false);
    let writer = tokio::spawn(write_loop(wr, out_rx, peer.clone(), closed_tx));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut stop = shared.stop.clone();
    let mut buf: Vec<u8> = Vec::with_capacity(IDLE_BUFFER);
    let mut writes = Vec::new();
    let mut group: Option<PlainGroup> = None;
    'conn: loop {
        let mut used = 0;
        loop {
            let packet = match packet::parse(&buf[used..]) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => {
                    let _ = out.send(Out::Close(format!("malformed packet: {e}")));
                    break 'conn;
                }
            };
            used += packet.len;
            let (id, record) = (packet.id, packet.record);
            let permit = match in_flight.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    // The writes gathered so far hold permits too: queue
                    // them before waiting for answers to free one.
                    queue(&shared, &out, &mut group, &mut writes).await;
                    tokio::select! {
                        p = in_flight.clone().acquire_owned() => p.expect("never closed"),
                        _ = closed.changed() => break 'conn,
                    }
                }
            };
            match handle(&shared, &out, id, record, permit) {
                Ok(Handled::Answered) => {}
                Ok(Handled::Conditional(b, done)) => {
                    close_group(&out, &mut group, &mut writes);
                    writes.push((b, done));
                }
                Ok(Handled::Plain(b, id, permit)) => match &mut group {
                    Some((gb, ids)) if gb.size_bytes() + b.size_bytes() <= MAX_GROUP_BYTES => {
                        gb.append(b).expect("groups stay far below the batch limit");
                        ids.push((id, permit));
                    }
                    _ => {
                        if let Some(g) = group.replace((b, vec![(id, permit)])) {
                            writes.push(plain_group(&out, g));
                        }
                    }
                },
                Err(reason) => {
                    queue(&shared, &out, &mut group, &mut writes).await;
                    let _ = out.send(Out::Close(reason));
                    break 'conn;
                }
            }
        }
        // Every write this read brought in, queued at once.
        queue(&shared, &out, &mut group, &mut writes).await;
        buf.drain(..used);
        tokio::select! {
            r = rd.read_buf(&mut buf) => match r {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    let _ = out.send(Out::Close(format!("read failed: {e}")));
                    break;
                }
            },
            _ = closed.changed() => break,
            _ = stop.changed() => break,
        }
    }
    // The writer ends once every answer in flight has been sent (the
    // pending writes hold senders of `out`).
    drop(out);
    let _ = writer.await;
}

/// What became of one request.
enum Handled {
    /// A read, answered.
    Answered,
    /// A write with a condition, to be queued with its own answer.
    Conditional(WriteBatch, Done),
    /// A write without one (SET, DELETE): answered OK once durable, so the
    /// plain writes of one read share one batch and one answer message.
    Plain(WriteBatch, u64, OwnedSemaphorePermit),
}

/// Plain writes gathered from one read: one batch, and each one's request
/// ID and place in flight.
type PlainGroup = (WriteBatch, Vec<(u64, OwnedSemaphorePermit)>);

/// Plain writes merged into one batch stay below this size.
const MAX_GROUP_BYTES: usize = 1 << 20;

/// Moves the open group of plain writes, if any, to `writes`.
fn close_group(
    out: &mpsc::UnboundedSender<Out>,
    group: &mut Option<PlainGroup>,
    writes: &mut Vec<(WriteBatch, Done)>,
) {
    if let Some(g) = group.take() {
        writes.push(plain_group(out, g));
    }
}

/// Queues every write gathered so far, the open group included.
async fn queue(
    shared: &Shared,
    out: &mpsc::UnboundedSender<Out>,
    group: &mut Option<PlainGroup>,
    writes: &mut Vec<(WriteBatch, Done)>,
) {
    close_group(out, group, writes);
    shared.committer.submit_all(std::mem::take(writes)).await;
}

/// The write and its answer for a group of plain writes.
fn plain_group(out: &mpsc::UnboundedSender<Out>, (batch, ids): PlainGroup) -> (WriteBatch, Done) {
    let out = out.clone();
    let done: Done = Box::new(move |r: kivi::Result<WriteOutcome>| {
        let msg = match r {
            Ok(_) => {
                // Unconditional writes always apply.
                let ok = request::status(OK);
                let mut bytes = Vec::with_capacity(ids.len() * (packet::HEADER_LEN + 8));
                let mut permits = Vec::with_capacity(ids.len());
                for (id, permit) in ids {
                    packet::write(&mut bytes, id, &ok);
                    permits.push(permit);
                }
                Out::Packets(bytes, permits)
            }
            Err(e) => Out::Close(format!("a write failed: {e}")),
        };
        let _ = out.send(msg);
    });
    (batch, done)
}

/// Answers one read at once; returns a write, to be queued with the
/// others of the same read; or says why the connection must close.
fn handle(
    shared: &Shared,
    out: &mpsc::UnboundedSender<Out>,
    id: u64,
    record: &[u8],
    permit: OwnedSemaphorePermit,
) -> Result<Handled, String> {
    let req = request::parse(record).map_err(|e| format!("malformed request: {e}"))?;
    let reply = move |record: Vec<u8>, permit| {
        let mut p = Vec::with_capacity(packet::HEADER_LEN + record.len() + 4);
        packet::write(&mut p, id, &record);
        Out::Packet(p, permit)
    };
    if !req.is_write() {
        let record = match req {
            Request::Params => request::params(),
            Request::Get { key } => match shared.db.get(key) {
                Ok(Some(v)) if v.len() > MAX_LEN => {
                    return Err(format!(
                        "GET: the value is {} bytes, more than this protocol carries ({MAX_LEN})",
                        v.len()
                    ))
                }
                Ok(Some(v)) => request::get_found(&v),
                Ok(None) => request::status(NOT_DONE),
                Err(e) => return Err(format!("GET failed: {e}")),
            },
            Request::Range {
                max_bytes,
                start,
                end,
            } => range(shared, max_bytes, start, end)?,
            _ => unreachable!("writes are handled below"),
        };
        let _ = out.send(reply(record, permit));
        return Ok(Handled::Answered);
    }
    let mut b = WriteBatch::new();
    let built = match req {
        Request::Set { key, value } => b.put(key, value).map(|_| ()),
        Request::Cas { key, old, new } => b.compare_and_swap(key, old, new).map(|_| ()),
        Request::Add { key, value } => b.insert_if_absent(key, value).map(|_| ()),
        Request::Modify { key, value } => b.update_if_present(key, value).map(|_| ()),
        Request::Delete { key } => b.delete(key).map(|_| ()),
        Request::Cad { key, old } => b.compare_and_delete(key, old).map(|_| ()),
        _ => unreachable!("reads are handled above"),
    };
    // Keys and values of at most 255 bytes are within kivi's limits.
    built.map_err(|e| format!("request refused: {e}"))?;
    if !b.has_conditions() {
        return Ok(Handled::Plain(b, id, permit));
    }
    let out = out.clone();
    let done: Done = Box::new(move |r: kivi::Result<WriteOutcome>| {
        let msg = match r {
            Ok(WriteOutcome::Applied) => reply(request::status(OK), permit),
            Ok(WriteOutcome::ConditionFailed { .. }) => reply(request::status(NOT_DONE), permit),
            // The protocol has no error status: close rather than answer
            // anything wrong.
            Err(e) => Out::Close(format!("a write failed: {e}")),
        };
        let _ = out.send(msg);
    });
    Ok(Handled::Conditional(b, done))
}

/// A RANGE answer: pairs with start <= key < end (to the end of the
/// keyspace if `end` is empty), filling the byte budget; at least one pair
/// if any is in range. `next` is where the next request continues: the
/// first key not returned, or when done, `end` (empty for an empty end).
fn range(shared: &Shared, max_bytes: u32, start: &[u8], end: &[u8]) -> Result<Vec<u8>, String> {
    let budget = max_bytes.min(MAX_RANGE_BYTES) as usize;
    let upper = if end.is_empty() {
        Bound::Unbounded
    } else {
        Bound::Excluded(end)
    };
    let mut pairs = Vec::new();
    let mut count = 0u32;
    let mut next: &[u8] = end;
    let mut stopped_at = None;
    if end.is_empty() || start < end {
        for item in shared.db.range::<&[u8], _>((Bound::Included(start), upper)) {
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
            request::push_string(&mut pairs, &k);
            request::push_string(&mut pairs, &v);
            count += 1;
        }
    }
    if let Some(k) = &stopped_at {
        next = k;
    }
    Ok(request::range(count, next, &pairs))
}

async fn write_loop(
    mut wr: WriteHalf<Box<dyn Stream>>,
    mut rx: mpsc::UnboundedReceiver<Out>,
    peer: String,
    closed: watch::Sender<bool>,
) {
    let mut buf = Vec::with_capacity(WRITE_CHUNK);
    let mut permits = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut close = None;
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Out::Packet(p, permit) => {
                    buf.extend_from_slice(&p);
                    permits.push(permit);
                }
                Out::Packets(p, mut ps) => {
                    buf.extend_from_slice(&p);
                    permits.append(&mut ps);
                }
                Out::Close(reason) => {
                    close = Some(reason);
                    break;
                }
            }
            if buf.len() < WRITE_CHUNK {
                next = rx.try_recv().ok();
            }
        }
        if wr.write_all(&buf).await.is_err() {
            break;
        }
        buf.clear();
        permits.clear();
        if let Some(reason) = close {
            eprintln!("kivi serve: kvlds connection from {peer} closed: {reason}");
            break;
        }
    }
    let _ = wr.shutdown().await;
    let _ = closed.send(true);
}
