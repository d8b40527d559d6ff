//! The write stage: every connection's writes, of either protocol, go
//! through one queue to one thread that hands all it finds waiting to
//! `Db::write_each`, so they share group commits. Each write is answered
//! (its `done` called) only after the commit holding it is durable.
//!
//! One thread keeps the order simple: writes enter the store in the order
//! they entered the queue, so a connection's writes take effect in the
//! order it sent them (the kvlds contract, and read-your-writes for RESP
//! pipelines). While one call to `write_each` waits for its sync, the next
//! groups gather in the queue.

use kivi::{Db, WriteBatch, WriteOutcome};
use std::sync::Arc;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Writes queued and not yet answered, at most, over all connections.
pub const MAX_QUEUED_WRITES: usize = 1 << 16;
/// Bytes of queued writes, at most, in KiB (the unit of the permits).
const MAX_QUEUED_KIB: u32 = 256 << 10;
/// Writes handed to `write_each` at once, at most.
const MAX_WRITES_PER_ROUND: usize = 8192;

pub type Done = Box<dyn FnOnce(kivi::Result<WriteOutcome>) + Send>;

struct Job {
    batch: WriteBatch,
    done: Done,
    /// Holds the job's share of the byte bound until it is answered.
    _bytes: OwnedSemaphorePermit,
}

#[derive(Clone)]
pub struct Committer {
    tx: mpsc::Sender<Job>,
    bytes: Arc<Semaphore>,
}

impl Committer {
    /// Starts the write thread; it ends once every `Committer` clone is
    /// dropped and the queue is drained.
    pub fn start(db: Db) -> (Committer, std::thread::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<Job>(MAX_QUEUED_WRITES);
        let thread = std::thread::Builder::new()
            .name("kivi-serve-commit".into())
            .spawn(move || {
                while let Some(first) = rx.blocking_recv() {
                    let mut jobs = vec![first];
                    while jobs.len() < MAX_WRITES_PER_ROUND {
                        match rx.try_recv() {
                            Ok(j) => jobs.push(j),
                            Err(_) => break,
                        }
                    }
                    let mut batches = Vec::with_capacity(jobs.len());
                    let mut answers = Vec::with_capacity(jobs.len());
                    for j in jobs {
                        batches.push(j.batch);
                        answers.push((j.done, j._bytes));
                    }
                    let results = db.write_each(batches);
                    debug_assert_eq!(results.len(), answers.len());
                    for ((done, permit), r) in answers.into_iter().zip(results) {
                        done(r);
                        drop(permit);
                    }
                }
            })
            .expect("spawn the commit thread");
        let bytes = Arc::new(Semaphore::new(MAX_QUEUED_KIB as usize));
        (Committer { tx, bytes }, thread)
    }

    /// Queues `batch`; `done` is called with its outcome once it is
    /// durable (or failed). Waits while the queue is full, which is how a
    /// fast writer is slowed down: its connection stops being read.
    pub async fn submit(&self, batch: WriteBatch, done: Done) {
        let kib = (batch.size_bytes() / 1024 + 1).min(MAX_QUEUED_KIB as usize) as u32;
        let permit = self
            .bytes
            .clone()
            .acquire_many_owned(kib)
            .await
            .expect("the semaphore is never closed");
        let job = Job {
            batch,
            done,
            _bytes: permit,
        };
        if let Err(mpsc::error::SendError(job)) = self.tx.send(job).await {
            // The write thread is gone (only after a panic there).
            (job.done)(Err(kivi::Error::Closed));
        }
    }
}
