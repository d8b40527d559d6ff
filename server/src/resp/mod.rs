//! The RESP listener: what Redis clients speak. Replies go out in the
//! order the commands came in. Plain writes are pipelined (queued for the
//! next group commit without waiting for the one before); any other
//! command first waits for the connection's earlier writes, so it sees
//! them. At most `MAX_PIPELINE` commands are unanswered per connection;
//! past that the connection is not read until they are answered.

pub mod commands;
pub mod config;
pub mod glob;
pub mod other_types;
pub mod parser;
pub mod random_key;
pub mod reply;
pub mod scripts;
pub mod transaction;

use crate::committer::Done;
use crate::counters::{CommandTally, Counters};
use crate::listen::Stream;
use crate::Shared;
use commands::{Answer, Session};
use kivi::WriteOutcome;
use parser::Args;
use reply::Reply;
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

/// Commands a connection may have unanswered.
pub const MAX_PIPELINE: usize = 4096;
/// Replies are written out once this many bytes are waiting.
const OUT_FLUSH: usize = 256 << 10;
/// What an idle connection's read buffer keeps, so that many idle
/// connections cost little.
const IDLE_BUFFER: usize = 4 << 10;
/// A read that fills the buffer doubles it, up to this: a client that
/// pipelines faster than it is answered has its commands read in large
/// chunks, which share one group commit (at 4 KiB a read, a pipeline of
/// SETs got about 25 commands per commit, one fsync each).
const BUSY_BUFFER: usize = 1 << 20;

enum Slot {
    Ready(Reply),
    Pending(oneshot::Receiver<kivi::Result<WriteOutcome>>, Answer),
    /// Consecutive plain writes (SET, MSET: no conditions, answered +OK)
    /// merged into one batch: this many replies.
    Group(oneshot::Receiver<kivi::Result<WriteOutcome>>, usize),
}

/// Plain writes merged into one batch stay below this size.
const MAX_GROUP_BYTES: usize = 1 << 20;

fn write_failed(e: &kivi::Error) -> Reply {
    if e.is_full() {
        Reply::err(format!("disk full, write refused: {e}"))
    } else {
        Reply::err(format!("write failed: {e}"))
    }
}

/// Queues the open group of plain writes, if any, and its slot.
fn close_group(
    group: &mut Option<(kivi::WriteBatch, usize)>,
    writes: &mut Vec<(kivi::WriteBatch, Done)>,
    slots: &mut VecDeque<Slot>,
) {
    if let Some((batch, n)) = group.take() {
        let (tx, rx) = oneshot::channel();
        writes.push((
            batch,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        ));
        slots.push_back(Slot::Group(rx, n));
    }
}

/// Queues every write gathered so far, the open group included.
async fn queue(
    shared: &Shared,
    group: &mut Option<(kivi::WriteBatch, usize)>,
    writes: &mut Vec<(kivi::WriteBatch, Done)>,
    slots: &mut VecDeque<Slot>,
) {
    close_group(group, writes, slots);
    shared.committer.submit_all(std::mem::take(writes)).await;
}

/// Writes `out` to the client: false when the client is gone, or has not
/// taken it within `Shared::output_timeout` (a client that sends and never
/// reads its replies is let go, rather than holding a connection forever).
/// Flushed: a TLS stream may keep what the socket did not take at once
/// (a no-op on a plain socket).
async fn send(shared: &Shared, stream: &mut Box<dyn Stream>, out: &[u8]) -> bool {
    let limit = shared.live.output_timeout();
    let written = async {
        stream.write_all(out).await?;
        stream.flush().await
    };
    match tokio::time::timeout(limit, written).await {
        Ok(r) => r.is_ok(),
        Err(_) => {
            tracing::info!(
                timeout = ?limit,
                "closed a RESP connection that read none of its replies"
            );
            false
        }
    }
}

/// Waits until `timeout` after `since`, or forever without a timeout.
async fn idle(since: tokio::time::Instant, timeout: Option<std::time::Duration>) {
    match timeout {
        Some(t) => tokio::time::sleep_until(since + t).await,
        None => std::future::pending().await,
    }
}

/// GETs looked up together, at most.
const MAX_GETS_AT_ONCE: usize = 256;

/// A GET that can be gathered: a key too long to be stored is refused by
/// the lookup, and alone, so it goes the way of any other command (else its
/// error would be every gathered GET's).
fn is_plain_get(args: Args<'_>) -> bool {
    args[0].eq_ignore_ascii_case(b"GET")
        && commands::arity(b"GET").is_some_and(|a| a.allows(args.len()))
        && args[1].len() <= kivi::limits::MAX_KEY_LEN
}

/// Answers the GETs gathered (every command before them is answered), looked
/// up together so that their waits for memory overlap (`Db::get_each`).
/// Replies past `OUT_FLUSH` bytes are written out before the next lookups,
/// as one GET after another would: values are up to 16 MiB. Returns false
/// when the client is gone.
async fn answer_gets(
    shared: &Shared,
    stream: &mut Box<dyn Stream>,
    gets: &mut Vec<Vec<u8>>,
    out: &mut Vec<u8>,
    resp3: bool,
) -> bool {
    let keys: Vec<&[u8]> = gets.iter().map(|k| k.as_slice()).collect();
    let mut answered = 0;
    while answered < keys.len() {
        let looked_up = shared.db.get_each(&keys[answered..], |_, value| {
            shared.counters.note_lookup(value.is_some());
            match value {
                Some(v) => reply::write_bulk(out, v),
                None => reply::write_null(out, resp3),
            }
            answered += 1;
            if out.len() >= OUT_FLUSH {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        if let Err(e) = looked_up {
            // Every GET gets its reply, in order: the failed ones an error.
            for _ in answered..keys.len() {
                Reply::err(e.to_string()).write(out, resp3);
            }
            break;
        }
        if answered < keys.len() {
            if !send(shared, stream, out).await {
                return false;
            }
            out.clear();
        }
    }
    gets.clear();
    true
}

/// Writes the replies of every slot, in order, waiting for pending writes.
async fn settle(slots: &mut VecDeque<Slot>, out: &mut Vec<u8>, resp3: bool) {
    while let Some(slot) = slots.pop_front() {
        let reply = match slot {
            Slot::Ready(r) => r,
            Slot::Pending(rx, answer) => match rx.await {
                Ok(Ok(outcome)) => answer(outcome),
                Ok(Err(e)) => write_failed(&e),
                Err(_) => Reply::err("write failed: the server is stopping"),
            },
            Slot::Group(rx, n) => {
                let reply = match rx.await {
                    Ok(Ok(_)) => Reply::ok(),
                    Ok(Err(e)) => write_failed(&e),
                    Err(_) => Reply::err("write failed: the server is stopping"),
                };
                for _ in 1..n {
                    reply.write(out, resp3);
                }
                reply
            }
        };
        reply.write(out, resp3);
    }
}

/// Serves one connection until the peer closes it, sends a malformed
/// frame, says QUIT, or the server stops (commands already read are
/// answered first).
pub async fn serve(mut stream: Box<dyn Stream>, peer: String, shared: Arc<Shared>) {
    let mut session = Session {
        id: shared.next_client_id(),
        identity: shared.users.initial(),
        peer: peer.clone(),
        ..Session::default()
    };
    let mut stop = shared.stop.clone();
    let mut settings = shared.live.subscribe();
    let mut buf: Vec<u8> = Vec::with_capacity(IDLE_BUFFER);
    let mut out: Vec<u8> = Vec::new();
    let mut slots: VecDeque<Slot> = VecDeque::new();
    let mut writes: Vec<(kivi::WriteBatch, Done)> = Vec::new();
    let mut group: Option<(kivi::WriteBatch, usize)> = None;
    let mut gets: Vec<Vec<u8>> = Vec::new();
    // Keeps its place in a command not all read yet.
    let mut parser = parser::Parser::default();
    // Commands read and not yet added to `total_commands_processed`: added
    // once per read rather than once per command, so pipelined commands
    // do not all touch the one shared counter.
    let mut uncounted: u64 = 0;
    // The same, by name, for the metrics endpoint.
    let mut tally = CommandTally::default();
    // Refused commands (NOAUTH, NOPERM) are logged once per connection.
    let mut refusal_logged = false;
    // Whether the last read filled the buffer (more was likely waiting).
    let mut filled = false;
    loop {
        let mut used = 0;
        let mut need = None;
        let mut fatal = None;
        loop {
            let frame = &buf[used..];
            let parsed = match parser.parse(frame) {
                Ok(Ok(p)) => p,
                Ok(Err(n)) => {
                    need = n;
                    break;
                }
                Err(e) => {
                    fatal = Some(e);
                    break;
                }
            };
            used += parsed.len;
            let args = Args::of(&parsed, frame, parser.spans());
            if args.is_empty() {
                continue;
            }
            uncounted += 1;
            tally.note(&args[0]);
            if let Some(refusal) =
                crate::auth::refusal(session.identity.as_ref(), args, shared.refuses_writes())
            {
                if !refusal_logged {
                    refusal_logged = true;
                    tracing::warn!(
                        %peer,
                        command = %String::from_utf8_lossy(&args[0]),
                        reason = if session.identity.is_none() {
                            "not authenticated (NOAUTH)"
                        } else if shared.refuses_writes() && crate::auth::writes_data(args) {
                            "a write on a follower (READONLY)"
                        } else {
                            "not permitted for the user's role (NOPERM)"
                        },
                        "refused a command; later refusals on this connection are not logged"
                    );
                }
                // Answered in its place, after everything before it.
                if !answer_gets(&shared, &mut stream, &mut gets, &mut out, session.resp3).await {
                    return;
                }
                close_group(&mut group, &mut writes, &mut slots);
                if let Some(tx) = &mut session.multi {
                    // As any command refused while queuing: EXEC aborts.
                    transaction::abort(tx);
                }
                slots.push_back(Slot::Ready(refusal));
                // At most MAX_PIPELINE unanswered, refusals too.
                if slots.len() >= MAX_PIPELINE {
                    queue(&shared, &mut group, &mut writes, &mut slots).await;
                    settle(&mut slots, &mut out, session.resp3).await;
                    if !send(&shared, &mut stream, &out).await {
                        return;
                    }
                    out.clear();
                }
                continue;
            }
            // Inside MULTI every command but the transaction's own is
            // queued, not run (MULTI answered everything before it, so
            // nothing else is pending but replies).
            if let Some(tx) = &mut session.multi {
                if !transaction::controls_transaction(&args[0]) {
                    debug_assert!(gets.is_empty() && group.is_none() && writes.is_empty());
                    let reply = transaction::queue(tx, args.to_vecs());
                    slots.push_back(Slot::Ready(reply));
                    if slots.len() >= MAX_PIPELINE {
                        settle(&mut slots, &mut out, session.resp3).await;
                    }
                    continue;
                }
            }
            // A GET with nothing of this connection's still unanswered
            // before it waits to be looked up with the GETs after it.
            if is_plain_get(args) && slots.is_empty() && group.is_none() && writes.is_empty() {
                if gets.len() == MAX_GETS_AT_ONCE
                    && !answer_gets(&shared, &mut stream, &mut gets, &mut out, session.resp3).await
                {
                    return;
                }
                gets.push(args[1].to_vec());
                continue;
            }
            if !answer_gets(&shared, &mut stream, &mut gets, &mut out, session.resp3).await {
                return;
            }
            match commands::write_plan(args, shared.db.clock()) {
                Some(Ok((batch, _))) if !batch.has_conditions() => match &mut group {
                    Some((g, n)) if g.size_bytes() + batch.size_bytes() <= MAX_GROUP_BYTES => {
                        g.append(batch)
                            .expect("groups stay far below the batch limit");
                        *n += 1;
                    }
                    _ => {
                        close_group(&mut group, &mut writes, &mut slots);
                        group = Some((batch, 1));
                    }
                },
                Some(Ok((batch, answer))) => {
                    close_group(&mut group, &mut writes, &mut slots);
                    let (tx, rx) = oneshot::channel();
                    writes.push((
                        batch,
                        Box::new(move |r| {
                            let _ = tx.send(r);
                        }) as Done,
                    ));
                    slots.push_back(Slot::Pending(rx, answer));
                }
                Some(Err(reply)) => {
                    close_group(&mut group, &mut writes, &mut slots);
                    slots.push_back(Slot::Ready(reply));
                }
                None => {
                    queue(&shared, &mut group, &mut writes, &mut slots).await;
                    settle(&mut slots, &mut out, session.resp3).await;
                    // The commands before this one are counted before it
                    // runs (an INFO sees them); this one after, as Redis
                    // counts a command once it has run.
                    Counters::add(&shared.counters.commands_processed, uncounted - 1);
                    uncounted = 1;
                    let reply = commands::execute(&shared, &mut session, args.to_vecs()).await;
                    reply.write(&mut out, session.resp3);
                    if session.quit {
                        break;
                    }
                }
            }
            if slots.len() >= MAX_PIPELINE || out.len() >= OUT_FLUSH {
                queue(&shared, &mut group, &mut writes, &mut slots).await;
                settle(&mut slots, &mut out, session.resp3).await;
                if !send(&shared, &mut stream, &out).await {
                    return;
                }
                out.clear();
            }
        }
        buf.drain(..used);
        Counters::add(&shared.counters.commands_processed, uncounted);
        uncounted = 0;
        shared.commands.fold(&mut tally);
        if !answer_gets(&shared, &mut stream, &mut gets, &mut out, session.resp3).await {
            return;
        }
        // Every write this read brought in, queued at once.
        queue(&shared, &mut group, &mut writes, &mut slots).await;
        settle(&mut slots, &mut out, session.resp3).await;
        if let Some(e) = &fatal {
            Reply::err(e.to_string()).write(&mut out, session.resp3);
            tracing::info!(%peer, reason = %e, "closed a RESP connection");
        }
        if !out.is_empty() {
            if !send(&shared, &mut stream, &out).await {
                return;
            }
            out.clear();
        }
        if fatal.is_some() || session.quit {
            let _ = stream.shutdown().await;
            return;
        }
        if buf.is_empty() && !filled && buf.capacity() > 16 * IDLE_BUFFER {
            buf = Vec::with_capacity(IDLE_BUFFER);
        }
        if let Some(n) = need {
            buf.reserve(n);
        }
        if filled && buf.capacity() < BUSY_BUFFER {
            buf.reserve(buf.capacity());
        }
        if buf.capacity() == buf.len() {
            buf.reserve(IDLE_BUFFER);
        }
        let room = buf.capacity() - buf.len();
        let waiting_since = tokio::time::Instant::now();
        loop {
            let timeout = shared.live.idle_timeout();
            tokio::select! {
                r = stream.read_buf(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        filled = n == room;
                        break;
                    }
                },
                _ = stop.changed() => {
                    let _ = stream.shutdown().await;
                    return;
                }
                // CONFIG SET changed the timeout: wait again, under the
                // new one, counted from the same moment (read_buf is
                // cancel-safe: nothing read is lost).
                _ = settings.changed() => continue,
                // Nothing is pending here (every reply is written): the
                // client has sent nothing, or not the rest of a command,
                // for that long.
                _ = idle(waiting_since, timeout) => {
                    tracing::info!(%peer, idle = ?timeout.unwrap_or_default(),
                        "closed an idle RESP connection");
                    let _ = stream.shutdown().await;
                    return;
                }
            }
        }
    }
}
