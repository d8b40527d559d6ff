//! The group-commit queue.
//!
//! Writers enqueue a ticket and wait. Whoever finds no leader becomes the
//! leader: it takes every queued ticket up to a size limit as one group,
//! commits the group with one append and one fdatasync, answers each ticket
//! (through a notifier thread, so waking the writers overlaps the next
//! group's sync), and hands leadership to the next waiting writer. So
//! concurrent writers share syncs, and each is answered only after the sync
//! that holds its batch. The queue is bounded in batches and bytes; writers
//! beyond the bound wait for room.
//!
//! On storage that overlaps syncs (an object store, where each is a
//! request), a leader hands leadership on as soon as its group is prepared
//! and in flight, then waits for the group's durability outside it: the
//! next leader prepares the next group meanwhile (see `commit`).

use crate::batch::{BatchOp, WriteBatch};
use crate::error::Result;
use crate::limits::{MAX_GROUP_BYTES, MAX_QUEUED_BATCHES, MAX_QUEUED_BYTES};
use crate::version::Epoch;
use kivi_log::CheckpointRecord;
use kivi_storage::SegmentId;
use kivi_tree::TreeWrite;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};

pub(crate) enum Request {
    Write(WriteBatch),
    /// Commit a checkpoint record (from the checkpointer) whose pages were
    /// written as checkpoint `generation`.
    Checkpoint {
        record: CheckpointRecord,
        generation: u64,
        /// Records the checkpoint copied out of segments being cleaned.
        moved: Box<TreeWrite>,
        /// Put the record in a new commit segment, so that every older one
        /// can go (compaction).
        fresh_segment: bool,
    },
}

impl Request {
    /// Whether it is a checkpoint, or a write that clears the store: such
    /// a group commits whole, never in flight (see `commit`).
    pub fn checkpoints_or_clears(&self) -> bool {
        match self {
            Request::Checkpoint { .. } => true,
            Request::Write(b) => b.ops.iter().any(|op| matches!(op, BatchOp::Clear)),
        }
    }
}

/// Result of a write batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Every operation was applied.
    Applied,
    /// Operation `op` (index in the batch) found its condition false; nothing
    /// in the batch was applied.
    ConditionFailed {
        /// The index of the operation in the batch, counting from 0 in the
        /// order the operations were added.
        op: usize,
    },
}

pub(crate) enum Reply {
    Write(WriteOutcome),
    /// The checkpoint is durable; these commit segments are no longer
    /// needed, and versions of this epoch (or older) may still read segments
    /// the checkpoint no longer references.
    Checkpoint {
        obsolete: Vec<SegmentId>,
        old_epoch: Weak<Epoch>,
    },
}

/// Groups of answers waiting for the notifier thread, at most.
const NOTIFY_QUEUE: usize = 256;

/// Groups a leader commits for others after its own batch is answered.
const MAX_EXTRA_GROUPS: u32 = 8;

/// What committing a group gave: its replies, one per ticket in order, or
/// a group in flight, whose replies come from finishing it.
pub(crate) enum Committed<'a> {
    Done(Vec<Result<Reply>>),
    /// Prepared, its sync started: finishing it (waiting for durability,
    /// publishing in commit order) needs no leadership.
    InFlight(Box<dyn FnOnce() -> Vec<Result<Reply>> + 'a>),
}

/// Commits groups for the pipeline.
pub(crate) trait Committer {
    /// Waits until another group may be started (commits in flight below
    /// their limit), before the group is taken: it gathers meanwhile.
    fn wait_for_room(&self);
    /// Commits one group, or starts to.
    fn commit<'s>(&'s self, group: &[Arc<Ticket>]) -> Committed<'s>;
}

pub(crate) struct Ticket {
    pub request: Request,
    bytes: usize,
    state: Mutex<TicketState>,
    wake: Condvar,
}

#[derive(Default)]
struct TicketState {
    reply: Option<Result<Reply>>,
    /// Leadership was handed to this ticket's writer.
    lead: bool,
}

impl Ticket {
    /// Answers the ticket and wakes its writer.
    fn answer(&self, reply: Result<Reply>) {
        self.state.lock().reply = Some(reply);
        self.wake.notify_one();
    }

    fn hand_leadership(&self) {
        self.state.lock().lead = true;
        self.wake.notify_one();
    }
}

#[derive(Default)]
struct Queue {
    tickets: VecDeque<Arc<Ticket>>,
    bytes: usize,
    leader: bool,
}

/// Answers handed to the notifier thread, so that waking writers (one
/// system call each) overlaps the leader's next group instead of delaying it.
type Answers = Vec<(Arc<Ticket>, Result<Reply>)>;

pub(crate) struct Pipeline {
    queue: Mutex<Queue>,
    room: Condvar,
    notifier: Mutex<Option<std::sync::mpsc::SyncSender<Answers>>>,
    /// How long a leader lets writes gather before it takes a group.
    group_wait: std::time::Duration,
}

impl Pipeline {
    /// A pipeline whose leaders wait `group_wait` before taking each group.
    pub fn new(group_wait: std::time::Duration) -> Self {
        // Each waiting writer has one ticket, so the answers in flight are
        // bounded by the writers anyway; the bound makes a slow notifier slow
        // the leader down rather than pile up.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Answers>(NOTIFY_QUEUE);
        std::thread::Builder::new()
            .name("kivi-notify".into())
            .spawn(move || {
                // Ends when the pipeline (and with it the sender) is dropped.
                for answers in rx {
                    for (ticket, reply) in answers {
                        ticket.answer(reply);
                    }
                }
            })
            .expect("spawn notifier thread");
        Pipeline {
            queue: Mutex::default(),
            room: Condvar::new(),
            notifier: Mutex::new(Some(tx)),
            group_wait,
        }
    }
}

/// What a request counts for against the queue's byte bounds.
fn request_bytes(request: &Request) -> usize {
    match request {
        Request::Write(b) => b.size_bytes() + 16 * b.len(),
        Request::Checkpoint { .. } => 64,
    }
}

impl Pipeline {
    /// Queues `request` and returns its reply once committed. `commit`
    /// commits one group and returns one reply per ticket, in order.
    pub fn submit(&self, request: Request, commit: &dyn Committer) -> Result<Reply> {
        let bytes = request_bytes(&request);
        let ticket = Arc::new(Ticket {
            request,
            bytes,
            state: Mutex::default(),
            wake: Condvar::new(),
        });
        let lead_now = {
            let mut q = self.queue.lock();
            while !q.tickets.is_empty()
                && (q.bytes + bytes > MAX_QUEUED_BYTES || q.tickets.len() >= MAX_QUEUED_BATCHES)
            {
                self.room.wait(&mut q);
            }
            q.tickets.push_back(ticket.clone());
            q.bytes += bytes;
            !std::mem::replace(&mut q.leader, true)
        };
        if !lead_now {
            let mut st = ticket.state.lock();
            while st.reply.is_none() && !st.lead {
                ticket.wake.wait(&mut st);
            }
            if let Some(reply) = st.reply.take() {
                return reply;
            }
        }
        self.lead(&ticket, commit)
    }

    /// Queues every request in order, consecutive in the queue unless room
    /// runs out, and returns their replies once committed. One caller can
    /// so keep thousands of batches in flight (a server's pipelined
    /// clients) and have them share groups, each with its own outcome.
    ///
    /// The caller leads whenever leadership reaches one of its tickets.
    /// While the queue is full it first settles the tickets it queued: a
    /// leader hands leadership to the front ticket, which may be one of
    /// ours, so waiting for room with ours queued could wait forever.
    ///
    /// `queued` is called once every request has its place in the queue
    /// (before any is answered): requests queued by others after that are
    /// committed after these.
    pub fn submit_many(
        &self,
        requests: Vec<Request>,
        commit: &dyn Committer,
        queued: Option<Box<dyn FnOnce() + '_>>,
    ) -> Vec<Result<Reply>> {
        let mut queued = queued;
        let mut replies = Vec::with_capacity(requests.len());
        let mut requests = requests.into_iter().peekable();
        while requests.peek().is_some() {
            let mut mine = Vec::new();
            let lead_now = {
                let mut q = self.queue.lock();
                while let Some(request) = requests.peek() {
                    let bytes = request_bytes(request);
                    let full =
                        q.bytes + bytes > MAX_QUEUED_BYTES || q.tickets.len() >= MAX_QUEUED_BATCHES;
                    if full && !q.tickets.is_empty() {
                        if !mine.is_empty() {
                            break;
                        }
                        self.room.wait(&mut q);
                        continue;
                    }
                    let request = requests.next().expect("peeked");
                    let ticket = Arc::new(Ticket {
                        request,
                        bytes,
                        state: Mutex::default(),
                        wake: Condvar::new(),
                    });
                    q.tickets.push_back(ticket.clone());
                    q.bytes += bytes;
                    mine.push(ticket);
                }
                debug_assert!(!mine.is_empty());
                !std::mem::replace(&mut q.leader, true)
            };
            if requests.peek().is_none() {
                if let Some(queued) = queued.take() {
                    queued();
                }
            }
            let mut lead_next = lead_now;
            for ticket in &mine {
                if !lead_next {
                    let mut st = ticket.state.lock();
                    while st.reply.is_none() && !st.lead {
                        ticket.wake.wait(&mut st);
                    }
                    if let Some(reply) = st.reply.take() {
                        replies.push(reply);
                        continue;
                    }
                }
                // Ours to lead: commit until this ticket is answered.
                lead_next = false;
                replies.push(self.lead(ticket, commit));
            }
        }
        replies
    }

    /// Commits groups until `mine` is answered and then, while batches are
    /// waiting, a few more (handing leadership to a sleeping thread costs a
    /// wake-up during which the disk would idle); then passes leadership on.
    fn lead(&self, mine: &Arc<Ticket>, commit: &dyn Committer) -> Result<Reply> {
        let mut my_reply = None;
        let mut extra_groups = 0;
        loop {
            if !self.group_wait.is_zero() {
                std::thread::sleep(self.group_wait);
            }
            commit.wait_for_room();
            let group = {
                let mut q = self.queue.lock();
                let mut group = Vec::new();
                let mut bytes = 0;
                while let Some(t) = q.tickets.front() {
                    if !group.is_empty() && bytes + t.bytes > MAX_GROUP_BYTES {
                        break;
                    }
                    bytes += t.bytes;
                    group.push(q.tickets.pop_front().expect("front exists"));
                }
                q.bytes -= bytes;
                self.room.notify_all();
                group
            };
            let (replies, in_flight) = match commit.commit(&group) {
                Committed::Done(replies) => (replies, false),
                Committed::InFlight(finish) => {
                    // The next group can be prepared while this one is in
                    // flight: leadership goes on now, and this thread
                    // finishes its own group (which holds its ticket: the
                    // group starts at the front, where the leader's is).
                    self.pass_leadership();
                    (finish(), true)
                }
            };
            assert_eq!(replies.len(), group.len(), "one reply per ticket");
            let mut answers = Vec::with_capacity(group.len());
            for (t, r) in group.into_iter().zip(replies) {
                if Arc::ptr_eq(&t, mine) {
                    my_reply = Some(r);
                } else {
                    answers.push((t, r));
                }
            }
            self.deliver(answers);
            if in_flight {
                return my_reply.expect("the leader's ticket is in this group or was answered");
            }
            if let Some(reply) = my_reply.take() {
                let mut q = self.queue.lock();
                if q.tickets.is_empty() || extra_groups == MAX_EXTRA_GROUPS {
                    match q.tickets.front() {
                        Some(next) => next.hand_leadership(),
                        None => q.leader = false,
                    }
                    return reply;
                }
                my_reply = Some(reply);
                extra_groups += 1;
            }
        }
    }

    /// Hands leadership to the first waiting ticket, or leaves it free.
    fn pass_leadership(&self) {
        let mut q = self.queue.lock();
        match q.tickets.front() {
            Some(next) => next.hand_leadership(),
            None => q.leader = false,
        }
    }

    fn deliver(&self, answers: Answers) {
        if answers.is_empty() {
            return;
        }
        let unsent = match &*self.notifier.lock() {
            Some(tx) => tx.send(answers).err().map(|e| e.0),
            None => Some(answers),
        };
        // The notifier is gone (only while shutting down): answer here.
        for (t, r) in unsent.into_iter().flatten() {
            t.answer(r);
        }
    }
}
