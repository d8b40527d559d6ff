//! Log puts in flight: a commit segment's syncs that overlap.
//!
//! A sync of a commit segment is one log entry. Waiting for each put before
//! numbering the next would allow one commit per round trip; instead the
//! entry gets its number at once and its put runs on one of a few *putter*
//! threads while the engine prepares the next commit. Entries are settled
//! ("retired") strictly in log order: an entry counts as durable only when
//! its own put and every earlier one in flight succeeded, since a reader of
//! the log stops at the first number it does not find. After a failure the
//! log is fenced again from the first failed number (see `Inner::refence`),
//! so that the later entries, landed or not, fall in that fence's dead zone
//! and are never read.

use crate::remote::{Created, Remote};
use bytes::Bytes;
use kivi_storage::IoError;
use parking_lot::{Condvar, Mutex};
use std::sync::{mpsc, Arc};

/// Log puts in flight at once, at most. Every one of them must fit in a
/// fence's dead zone (`format::DEAD_ZONE`), with room to spare for the
/// blocking entries (segment creation) that may follow them.
pub const MAX_IN_FLIGHT: usize = 16;
const _: () = assert!((MAX_IN_FLIGHT as u64) * 2 < crate::format::DEAD_ZONE);

/// One put in flight: its answer, set by the putter thread, and then its
/// outcome in log order, set when it is retired.
#[derive(Default)]
pub struct PutCell {
    state: Mutex<PutState>,
    done: Condvar,
}

#[derive(Default)]
struct PutState {
    answer: Option<Result<Created, IoError>>,
    /// Set once retired (and stays set when the outcome is taken: other
    /// threads may be waiting on this entry as the oldest in flight).
    retired: bool,
    outcome: Option<Result<(), IoError>>,
}

impl PutCell {
    fn answer(&self, answer: Result<Created, IoError>) {
        self.state.lock().answer = Some(answer);
        self.done.notify_all();
    }

    /// Waits for the put's answer (not taking it).
    pub fn wait_answer(&self) {
        let mut st = self.state.lock();
        while st.answer.is_none() && !st.retired {
            self.done.wait(&mut st);
        }
    }

    /// The put's answer, if it came (taken: retiring uses it once).
    pub fn take_answer(&self) -> Option<Result<Created, IoError>> {
        self.state.lock().answer.take()
    }

    pub fn set_outcome(&self, outcome: Result<(), IoError>) {
        let mut st = self.state.lock();
        st.retired = true;
        st.outcome = Some(outcome);
        drop(st);
        self.done.notify_all();
    }

    /// The entry's outcome once retired (taken: one waiter per entry).
    pub fn take_outcome(&self) -> Option<Result<(), IoError>> {
        self.state.lock().outcome.take()
    }
}

struct Job {
    name: String,
    bytes: Bytes,
    cell: Arc<PutCell>,
}

/// The threads that make the puts in flight: `Remote::put_create` blocks
/// (retries with back-off, reading back to settle ambiguous answers), so
/// each put in flight holds a thread. They end when this is dropped.
pub struct Putters {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Putters {
    pub fn start(remote: Arc<Remote>) -> Putters {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..MAX_IN_FLIGHT {
            let (rx, remote) = (rx.clone(), remote.clone());
            std::thread::Builder::new()
                .name(format!("kivi-log-put-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock().recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    };
                    job.cell.answer(remote.put_create(&job.name, job.bytes));
                })
                .expect("spawn a log putter thread");
        }
        Putters {
            jobs: Mutex::new(tx),
        }
    }

    pub fn put(&self, name: String, bytes: Bytes, cell: Arc<PutCell>) {
        let job = Job { name, bytes, cell };
        if let Err(mpsc::SendError(job)) = self.jobs.lock().send(job) {
            // Only if every putter died (a panic): fail the entry.
            job.cell.answer(Err(crate::remote::other(
                "put",
                job.name,
                "the log putter threads are gone".into(),
            )));
        }
    }
}

impl std::fmt::Debug for Putters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Putters")
    }
}
