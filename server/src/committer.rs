//! The write stage: every connection's writes, of either protocol, go
//! through one queue to a commit thread that hands all it finds waiting to
//! the store (`Db::write_each_in_order`), so they share group commits. Each
//! write is answered (its `done` called) only after the commit holding it
//! is durable.
//!
//! Writes enter the store in the order they entered the queue, so a
//! connection's writes take effect in the order it sent them (the kvlds
//! contract, and read-your-writes for RESP pipelines): a thread holds the
//! queue from taking a round until the round has its place in the store's
//! commit queue. On a local directory one thread does it all, and while
//! it waits for a sync the next groups gather in the queue. Where commits
//! can be in flight at once (an object store: each is a request), as many
//! threads take turns, each waiting for its own round's commit while the
//! next thread queues the next round.
//!
//! Consecutive writes without conditions (plain puts and deletes, most of
//! a server's writes) are merged into one batch: the same effect as
//! applying them one after the other, and the commit then handles one
//! batch instead of thousands. A write with a condition stays a batch of
//! its own, since its condition failing must not undo others.

use kivi::{Db, Histogram, WriteBatch, WriteOutcome};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Submissions queued and not yet taken by the commit thread, at most.
const MAX_QUEUED: usize = 1 << 14;
/// Bytes of queued writes, at most, in KiB (the unit of the permits).
const MAX_QUEUED_KIB: u32 = 256 << 10;
/// Commit threads, at most (see the module's doc).
const MAX_COMMIT_THREADS: usize = 16;
/// Writes handed to `write_each` at once, at most.
const MAX_WRITES_PER_ROUND: usize = 1 << 16;
/// Merged batches stay below this size.
const MAX_MERGED_BYTES: usize = 4 << 20;

pub type Done = Box<dyn FnOnce(kivi::Result<WriteOutcome>) + Send>;

/// Writes submitted together, and their share of the byte bound, held
/// until they are answered.
struct Job {
    writes: Vec<(WriteBatch, Done)>,
    _bytes: OwnedSemaphorePermit,
    submitted: Instant,
}

#[derive(Clone)]
pub struct Committer {
    tx: mpsc::Sender<Job>,
    bytes: Arc<Semaphore>,
    stats: Arc<CommitStats>,
}

/// Upper bounds of the buckets of `CommitStats::group_writes`.
pub const GROUP_WRITES_BOUNDS: &[u64] = &[
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536,
];

/// What the commit thread measures, for the metrics endpoint.
#[derive(Debug)]
pub struct CommitStats {
    /// From a connection's writes entering the queue to their answers
    /// (durable, or failed), in nanoseconds: one value per submission.
    pub latency: Histogram,
    /// Writes (the clients' batches, before merging) the thread took from
    /// the queue together and committed in one round.
    pub group_writes: Histogram,
}

impl Default for CommitStats {
    fn default() -> Self {
        CommitStats {
            latency: Histogram::latency(),
            group_writes: Histogram::new(GROUP_WRITES_BOUNDS),
        }
    }
}

/// One batch for the store and the writes it answers.
struct Merged {
    batch: WriteBatch,
    done: Vec<Done>,
}

/// Merges `writes` in order: runs of unconditional writes into one batch
/// (up to `MAX_MERGED_BYTES`), each conditional write on its own.
fn merge(writes: impl IntoIterator<Item = (WriteBatch, Done)>) -> Vec<Merged> {
    let mut out: Vec<Merged> = Vec::new();
    for (batch, done) in writes {
        if let Some(last) = out.last_mut() {
            if !batch.has_conditions()
                && !last.batch.has_conditions()
                && last.batch.size_bytes() + batch.size_bytes() <= MAX_MERGED_BYTES
            {
                last.batch
                    .append(batch)
                    .expect("merged batches stay far below the batch limit");
                last.done.push(done);
                continue;
            }
        }
        out.push(Merged {
            batch,
            done: vec![done],
        });
    }
    out
}

/// One commit thread: takes a round of jobs from the queue, queues it in
/// the store (letting the next thread take the queue then), waits for its
/// commits and answers them; until the queue is closed and drained.
fn commit_rounds(
    db: &Db,
    queue: &std::sync::Mutex<mpsc::Receiver<Job>>,
    thread_stats: &CommitStats,
) {
    loop {
        let mut rx = queue.lock().unwrap_or_else(|e| e.into_inner());
        let Some(first) = rx.blocking_recv() else {
            return;
        };
        let mut jobs = vec![first];
        let mut writes = jobs[0].writes.len();
        while writes < MAX_WRITES_PER_ROUND {
            match rx.try_recv() {
                Ok(j) => {
                    writes += j.writes.len();
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        thread_stats.group_writes.record(writes as u64);
        let mut permits = Vec::with_capacity(jobs.len());
        let mut submitted = Vec::with_capacity(jobs.len());
        let merged = merge(jobs.into_iter().flat_map(|j| {
            permits.push(j._bytes);
            submitted.push(j.submitted);
            j.writes
        }));
        let (batches, dones): (Vec<_>, Vec<_>) =
            merged.into_iter().map(|m| (m.batch, m.done)).unzip();
        // The queue is let go once the round is queued in the store.
        let results = db.write_each_in_order(batches, move || drop(rx));
        debug_assert_eq!(results.len(), dones.len());
        for (done, r) in dones.into_iter().zip(results) {
            for d in done {
                d(match &r {
                    Ok(o) => Ok(*o),
                    Err(e) => Err(e.duplicate()),
                });
            }
        }
        let answered = Instant::now();
        for t in submitted {
            thread_stats
                .latency
                .record_duration(answered.saturating_duration_since(t));
        }
        drop(permits);
    }
}

impl Committer {
    /// Starts the commit threads (one per commit the store can have in
    /// flight, up to 16); they end once every `Committer` clone is dropped
    /// and the queue is drained. The handle joins them all.
    pub fn start(db: Db) -> (Committer, std::thread::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel::<Job>(MAX_QUEUED);
        let stats = Arc::new(CommitStats::default());
        let threads = db.commits_in_flight().clamp(1, MAX_COMMIT_THREADS);
        // Held from taking a round until it is queued in the store.
        let queue = Arc::new(std::sync::Mutex::new(rx));
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (db, queue, stats) = (db.clone(), queue.clone(), stats.clone());
                std::thread::Builder::new()
                    .name(format!("kivi-serve-commit-{i}"))
                    .spawn(move || commit_rounds(&db, &queue, &stats))
                    .expect("spawn a commit thread")
            })
            .collect();
        let thread = std::thread::Builder::new()
            .name("kivi-serve-commits".into())
            .spawn(move || {
                for w in workers {
                    let _ = w.join();
                }
            })
            .expect("spawn the commit threads' joiner");
        let bytes = Arc::new(Semaphore::new(MAX_QUEUED_KIB as usize));
        (Committer { tx, bytes, stats }, thread)
    }

    /// What the commit thread measured.
    pub fn stats(&self) -> &CommitStats {
        &self.stats
    }

    /// Queues `batch`; `done` is called with its outcome once it is
    /// durable (or failed).
    pub async fn submit(&self, batch: WriteBatch, done: Done) {
        self.submit_all(vec![(batch, done)]).await
    }

    /// Queues writes in order. Waits while the queue is full, which is how
    /// a fast writer is slowed down: its connection stops being read.
    pub async fn submit_all(&self, writes: Vec<(WriteBatch, Done)>) {
        if writes.is_empty() {
            return;
        }
        let submitted = Instant::now();
        let bytes: usize = writes.iter().map(|(b, _)| b.size_bytes() + 64).sum();
        let kib = (bytes / 1024 + 1).min(MAX_QUEUED_KIB as usize) as u32;
        let permit = self
            .bytes
            .clone()
            .acquire_many_owned(kib)
            .await
            .expect("the semaphore is never closed");
        let job = Job {
            writes,
            _bytes: permit,
            submitted,
        };
        if let Err(mpsc::error::SendError(job)) = self.tx.send(job).await {
            // The write thread is gone (only after a panic there).
            for (_, done) in job.writes {
                done(Err(kivi::Error::Closed));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn put(k: &str) -> WriteBatch {
        let mut b = WriteBatch::new();
        b.put(k.as_bytes().to_vec(), b"v".to_vec()).unwrap();
        b
    }

    fn cas(k: &str) -> WriteBatch {
        let mut b = WriteBatch::new();
        b.compare_and_swap(k.as_bytes().to_vec(), b"v".to_vec(), b"w".to_vec())
            .unwrap();
        b
    }

    #[test]
    fn unconditional_runs_merge_and_conditions_stay_alone() {
        let calls = Arc::new(AtomicUsize::new(0));
        let done = || -> Done {
            let c = calls.clone();
            Box::new(move |_| {
                c.fetch_add(1, Ordering::Relaxed);
            })
        };
        let merged = merge(vec![
            (put("a"), done()),
            (put("b"), done()),
            (cas("a"), done()),
            (cas("b"), done()),
            (put("c"), done()),
            (put("d"), done()),
            (put("e"), done()),
        ]);
        let shape: Vec<(usize, usize)> = merged
            .iter()
            .map(|m| (m.batch.len(), m.done.len()))
            .collect();
        assert_eq!(shape, vec![(2, 2), (1, 1), (1, 1), (3, 3)]);
        for m in merged {
            for d in m.done {
                d(Ok(WriteOutcome::Applied));
            }
        }
        assert_eq!(calls.load(Ordering::Relaxed), 7);
    }
}
