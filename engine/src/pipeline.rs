//! The group-commit queue.
//!
//! Writers enqueue a ticket and wait. Whoever finds no leader becomes the
//! leader: it takes every queued ticket up to a size limit as one group,
//! commits the group with one append and one fdatasync, answers each ticket,
//! and hands leadership to the next waiting writer. So concurrent writers
//! share syncs, and each is answered only after the sync that holds its
//! batch. The queue is bounded in batches and bytes; writers beyond the bound
//! wait for room.

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::limits::{MAX_GROUP_BYTES, MAX_QUEUED_BATCHES, MAX_QUEUED_BYTES};
use kivi_log::CheckpointRecord;
use kivi_storage::SegmentId;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;

pub(crate) enum Request {
    Write(WriteBatch),
    /// Commit a checkpoint record (from the checkpointer) whose pages were
    /// written as checkpoint `generation`.
    Checkpoint {
        record: CheckpointRecord,
        generation: u64,
    },
}

/// Result of a write batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Every operation was applied.
    Applied,
    /// Operation `op` (index in the batch) found its condition false; nothing
    /// in the batch was applied.
    ConditionFailed { op: usize },
}

pub(crate) enum Reply {
    Write(WriteOutcome),
    /// The checkpoint is durable; these commit segments are no longer needed.
    Checkpoint(Vec<SegmentId>),
}

/// Commits one group and returns one reply per ticket, in order.
pub(crate) type CommitFn<'a> = dyn Fn(&[Arc<Ticket>]) -> Vec<Result<Reply>> + 'a;

pub(crate) struct Ticket {
    pub request: Request,
    bytes: usize,
    reply: Mutex<Option<Result<Reply>>>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Arc<Ticket>>,
    queued_bytes: usize,
    leader: bool,
}

#[derive(Default)]
pub(crate) struct Pipeline {
    state: Mutex<State>,
    room: Condvar,
}

impl Pipeline {
    /// Queues `request` and returns its reply once committed. `commit`
    /// commits one group and returns one reply per ticket, in order.
    pub fn submit(&self, request: Request, commit: &CommitFn<'_>) -> Result<Reply> {
        let bytes = match &request {
            Request::Write(b) => b.size_bytes() + 16 * b.len(),
            Request::Checkpoint { .. } => 64,
        };
        let ticket = Arc::new(Ticket {
            request,
            bytes,
            reply: Mutex::new(None),
            done: Condvar::new(),
        });
        let mut st = self.state.lock();
        while !st.queue.is_empty()
            && (st.queued_bytes + bytes > MAX_QUEUED_BYTES || st.queue.len() >= MAX_QUEUED_BATCHES)
        {
            self.room.wait(&mut st);
        }
        st.queue.push_back(ticket.clone());
        st.queued_bytes += bytes;
        loop {
            if let Some(reply) = ticket.reply.lock().take() {
                return reply;
            }
            if !st.leader {
                st.leader = true;
                drop(st);
                self.lead(&ticket, commit);
                st = self.state.lock();
                continue;
            }
            ticket.done.wait(&mut st);
        }
    }

    /// Commits groups until `mine` is answered, then passes leadership on.
    fn lead(&self, mine: &Arc<Ticket>, commit: &CommitFn<'_>) {
        loop {
            let mut st = self.state.lock();
            let mut group = Vec::new();
            let mut bytes = 0;
            while let Some(t) = st.queue.front() {
                if !group.is_empty() && bytes + t.bytes > MAX_GROUP_BYTES {
                    break;
                }
                bytes += t.bytes;
                group.push(st.queue.pop_front().expect("front exists"));
            }
            st.queued_bytes -= bytes;
            self.room.notify_all();
            drop(st);

            let replies = commit(&group);
            assert_eq!(replies.len(), group.len(), "one reply per ticket");
            for (t, r) in group.iter().zip(replies) {
                *t.reply.lock() = Some(r);
            }
            let mut st = self.state.lock();
            for t in &group {
                if !Arc::ptr_eq(t, mine) {
                    t.done.notify_one();
                }
            }
            if group.iter().any(|t| Arc::ptr_eq(t, mine)) {
                st.leader = false;
                if let Some(next) = st.queue.front() {
                    next.done.notify_one();
                }
                return;
            }
        }
    }
}
