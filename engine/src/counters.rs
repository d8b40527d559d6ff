//! The counters behind `stats()`: figures the commit path, the
//! checkpointer and the cleaner add to, and that `stats()` and the
//! background thread's triggers read. Relaxed throughout: they are figures,
//! not synchronization.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters behind `stats()`.
#[derive(Default)]
pub(crate) struct Counters {
    group_commits: AtomicU64,
    batches: AtomicU64,
    failed_commits: AtomicU64,
    checkpoints: AtomicU64,
    sliced_checkpoints: AtomicU64,
    checkpoint_bytes: AtomicU64,
    /// Leaves checkpoints wrote as delta pages.
    delta_pages: AtomicU64,
    failed_checkpoints: AtomicU64,
    /// `Version::log_bytes` of the newest durable checkpoint.
    checkpointed_log_bytes: AtomicU64,
    /// `Version::log_bytes` at the newest durable checkpoint's
    /// `replay_from`: the commit log since is what recovery replays.
    replayable_log_from: AtomicU64,
    checkpointed_tree_bytes: AtomicU64,
    checkpointed_seq: AtomicU64,
    /// Milliseconds since open of the last commit, for idle detection.
    last_commit_ms: AtomicU64,
    /// Page segments the cleaner deleted, and the bytes of live records it
    /// copied out of them first.
    cleaned_segments: AtomicU64,
    cleaner_copied_bytes: AtomicU64,
    /// Page segments no checkpoint uses that wait for old readers to finish.
    retiring_segments: AtomicU64,
    /// Writes held back because unwritten changes filled the write buffer
    /// twice over, and the microseconds they waited in all.
    write_stalls: AtomicU64,
    write_stall_us: AtomicU64,
    /// Write buffers merged into the tree.
    buffer_merges: AtomicU64,
    /// Expired keys whose entries the background deleted.
    expired_reclaimed: AtomicU64,
}

/// The counters' values at one moment (for `stats()`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CounterValues {
    pub group_commits: u64,
    pub batches: u64,
    pub failed_commits: u64,
    pub checkpoints: u64,
    pub sliced_checkpoints: u64,
    pub delta_pages: u64,
    pub failed_checkpoints: u64,
    pub checkpointed_log_bytes: u64,
    pub checkpointed_tree_bytes: u64,
    pub cleaned_segments: u64,
    pub cleaner_copied_bytes: u64,
    pub retiring_segments: u64,
    pub write_stalls: u64,
    pub write_stall_us: u64,
    pub buffer_merges: u64,
    pub expired_reclaimed: u64,
}

/// What a durable checkpoint adds to the counters.
pub(crate) struct CheckpointDone {
    /// It kept some of the previous checkpoint's pages.
    pub sliced: bool,
    /// Bytes it wrote, and of those, bytes the cleaner copied.
    pub bytes: u64,
    pub copied_bytes: u64,
    /// Leaves it wrote as delta pages.
    pub delta_pages: u64,
    /// `Version::log_bytes` of the version it wrote.
    pub log_bytes: u64,
    pub tree_bytes: u64,
    pub seq: u64,
}

impl Counters {
    /// Counters of a store whose newest durable checkpoint (found at open)
    /// holds `tree_bytes` and the commits up to `seq`.
    pub fn after_open(checkpoint: Option<(u64, u64)>) -> Counters {
        let c = Counters::default();
        if let Some((tree_bytes, seq)) = checkpoint {
            c.checkpointed_tree_bytes.store(tree_bytes, Relaxed);
            c.checkpointed_seq.store(seq, Relaxed);
        }
        c
    }

    pub fn group_committed(&self, batches: u64) {
        self.group_commits.fetch_add(1, Relaxed);
        self.batches.fetch_add(batches, Relaxed);
    }

    pub fn keys_reclaimed(&self, n: u64) {
        self.expired_reclaimed.fetch_add(n, Relaxed);
    }

    pub fn commit_failed(&self) {
        self.failed_commits.fetch_add(1, Relaxed);
    }

    pub fn set_last_commit_ms(&self, ms: u64) {
        self.last_commit_ms.store(ms, Relaxed);
    }

    pub fn last_commit_ms(&self) -> u64 {
        self.last_commit_ms.load(Relaxed)
    }

    pub fn buffer_merged(&self) {
        self.buffer_merges.fetch_add(1, Relaxed);
    }

    pub fn write_stall_started(&self) {
        self.write_stalls.fetch_add(1, Relaxed);
    }

    pub fn write_stall_ended(&self, waited_us: u64) {
        self.write_stall_us.fetch_add(waited_us, Relaxed);
    }

    pub fn checkpoint_failed(&self) {
        self.failed_checkpoints.fetch_add(1, Relaxed);
    }

    pub fn checkpoint_durable(&self, done: CheckpointDone) {
        self.checkpoints.fetch_add(1, Relaxed);
        if done.sliced {
            self.sliced_checkpoints.fetch_add(1, Relaxed);
        }
        self.checkpoint_bytes.fetch_add(done.bytes, Relaxed);
        self.delta_pages.fetch_add(done.delta_pages, Relaxed);
        self.cleaner_copied_bytes
            .fetch_add(done.copied_bytes, Relaxed);
        self.checkpointed_log_bytes.store(done.log_bytes, Relaxed);
        self.checkpointed_tree_bytes.store(done.tree_bytes, Relaxed);
        self.checkpointed_seq.store(done.seq, Relaxed);
    }

    pub fn set_replayable_log_from(&self, log_bytes: u64) {
        self.replayable_log_from.store(log_bytes, Relaxed);
    }

    pub fn segment_cleaned(&self) {
        self.cleaned_segments.fetch_add(1, Relaxed);
    }

    pub fn set_retiring_segments(&self, n: u64) {
        self.retiring_segments.store(n, Relaxed);
    }

    pub fn retiring_segments(&self) -> u64 {
        self.retiring_segments.load(Relaxed)
    }

    pub fn checkpointed_log_bytes(&self) -> u64 {
        self.checkpointed_log_bytes.load(Relaxed)
    }

    pub fn replayable_log_from(&self) -> u64 {
        self.replayable_log_from.load(Relaxed)
    }

    pub fn checkpointed_tree_bytes(&self) -> u64 {
        self.checkpointed_tree_bytes.load(Relaxed)
    }

    pub fn checkpointed_seq(&self) -> u64 {
        self.checkpointed_seq.load(Relaxed)
    }

    pub fn values(&self) -> CounterValues {
        CounterValues {
            group_commits: self.group_commits.load(Relaxed),
            batches: self.batches.load(Relaxed),
            failed_commits: self.failed_commits.load(Relaxed),
            checkpoints: self.checkpoints.load(Relaxed),
            sliced_checkpoints: self.sliced_checkpoints.load(Relaxed),
            delta_pages: self.delta_pages.load(Relaxed),
            failed_checkpoints: self.failed_checkpoints.load(Relaxed),
            checkpointed_log_bytes: self.checkpointed_log_bytes.load(Relaxed),
            checkpointed_tree_bytes: self.checkpointed_tree_bytes.load(Relaxed),
            cleaned_segments: self.cleaned_segments.load(Relaxed),
            cleaner_copied_bytes: self.cleaner_copied_bytes.load(Relaxed),
            retiring_segments: self.retiring_segments.load(Relaxed),
            write_stalls: self.write_stalls.load(Relaxed),
            write_stall_us: self.write_stall_us.load(Relaxed),
            buffer_merges: self.buffer_merges.load(Relaxed),
            expired_reclaimed: self.expired_reclaimed.load(Relaxed),
        }
    }
}
