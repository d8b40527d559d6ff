//! The counters behind `stats()`: plain atomics that the commit path, the
//! checkpointer and the cleaner add to, and that `stats()` and the
//! background thread's triggers read. Relaxed throughout: they are figures,
//! not synchronization.

use std::sync::atomic::AtomicU64;

/// Counters behind `stats()`.
#[derive(Default)]
pub(crate) struct Counters {
    pub group_commits: AtomicU64,
    pub batches: AtomicU64,
    pub failed_commits: AtomicU64,
    pub checkpoints: AtomicU64,
    pub sliced_checkpoints: AtomicU64,
    pub checkpoint_bytes: AtomicU64,
    pub failed_checkpoints: AtomicU64,
    /// `Version::log_bytes` of the newest durable checkpoint.
    pub checkpointed_log_bytes: AtomicU64,
    /// `Version::log_bytes` at the newest durable checkpoint's
    /// `replay_from`: the commit log since is what recovery replays.
    pub replayable_log_from: AtomicU64,
    pub checkpointed_tree_bytes: AtomicU64,
    pub checkpointed_seq: AtomicU64,
    /// Milliseconds since open of the last commit, for idle detection.
    pub last_commit_ms: AtomicU64,
    /// Page segments the cleaner deleted, and the bytes of live records it
    /// copied out of them first.
    pub cleaned_segments: AtomicU64,
    pub cleaner_copied_bytes: AtomicU64,
    /// Page segments no checkpoint uses that wait for old readers to finish.
    pub retiring_segments: AtomicU64,
    /// Writes held back because unwritten changes filled the write buffer
    /// twice over, and the microseconds they waited in all.
    pub write_stalls: AtomicU64,
    /// Write buffers merged into the tree.
    pub buffer_merges: AtomicU64,
    pub write_stall_us: AtomicU64,
}
