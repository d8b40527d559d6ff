use crate::error::{Error, Result};

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// After the commit holding it is on stable storage (fdatasync). The default.
    #[default]
    Fsync,
    /// As soon as it is handed to the operating system, without fdatasync: a
    /// crash of the machine (not of the process) may lose the latest writes,
    /// never older ones, never part of a batch. Only for those who ask for it.
    NoFsync,
}

/// How a store is opened. `Options::default()` is what a serious deployment wants.
#[derive(Debug, Clone)]
pub struct Options {
    /// When a write counts as done: [`Durability::Fsync`] (the default)
    /// waits for its commit to reach stable storage.
    pub durability: Durability,
    /// Page cache limit in bytes: the cache and the written nodes kept in
    /// the tree share it. Changes not yet checkpointed come on top, bounded
    /// by `write_buffer_bytes` (see ARCHITECTURE.md, Limits). The default
    /// ([`default_cache_bytes`]) is an eighth of the memory the process may
    /// use (the machine's, or its container's limit), at least 256 MiB
    /// where that is under a quarter of it: a limit, filled only as far as
    /// the data read needs.
    pub cache_bytes: u64,
    /// Memory for changes not yet written by a checkpoint (default
    /// [`default_write_buffer_bytes`]: 64 MiB, less where the process may
    /// use under 1 GiB):
    /// a checkpoint starts when they reach it (`Stats::dirty_bytes`). While
    /// one is being written the next changes gather beside it, so about
    /// twice this is held at the peak. Half of it also bounds the write
    /// buffer, where small groups of writes wait to be merged into the tree
    /// in one sorted batch (`Stats::buffered_bytes`); writes wait while the
    /// two together pass twice this; a quarter more is kept for the
    /// arrays of the buffer's merged runs. Smaller means less memory and
    /// more checkpoints and merges, each rewriting the pages changed since
    /// the last.
    pub write_buffer_bytes: u64,
    /// Pages split when their record (entries, page header and record
    /// header) would pass this (default 4 KiB, the page log's block).
    pub page_size: usize,
    /// Segment files are closed and a new one started at about this size (default 64 MiB).
    pub segment_bytes: u64,
    /// A checkpoint is taken once this much commit log has been written since
    /// the last one (default 64 MiB); the write buffer is merged once its
    /// commits span half of it. Bounds recovery time and commit-log space.
    pub checkpoint_bytes: u64,
    /// The cleaner keeps the store's files within this many times its live
    /// bytes (default 2.0), copying the live pages out of the oldest page
    /// segments so they can be deleted. At least 1.25.
    pub space_amplification_max: f64,
    /// Create the store if the directory holds none (default true).
    pub create_if_missing: bool,
    /// Open without writing anything; writes fail with [`Error::ReadOnly`].
    pub read_only: bool,
    /// The time deadlines are decided by (default: the system's clock;
    /// [`Clock::manual`](crate::Clock::manual) for tests and simulations).
    pub clock: crate::Clock,
    /// For a store on an object store ([`Db::open`](crate::Db::open) of an
    /// `s3://` URL): the directory of its local cache of objects, emptied
    /// when the store opens; one open store at a time uses a directory
    /// (default: a new temporary directory, removed when the store closes
    /// or, after a crash, by the next store opened on this machine).
    pub object_cache_dir: Option<std::path::PathBuf>,
    /// For a store on an object store: the most bytes its local cache holds
    /// (default 1 GiB).
    pub object_cache_bytes: u64,
    /// How long a group commit waits for more writes to join it before it
    /// commits (default zero: at once; writes that arrive meanwhile form
    /// the next group). At most one second. On an object store each group
    /// commit is one PUT, billed by the request: under concurrent writers,
    /// waiting a few milliseconds trades that much latency for fewer PUTs.
    pub commit_wait: std::time::Duration,
    /// For a follower ([`Db::follow`](crate::Db::follow)): the longest
    /// pause between two polls of the writer's log while they find nothing
    /// (default 20 ms; between 1 ms and 10 s). On an object store each
    /// poll that finds nothing is one GET.
    pub follow_interval: std::time::Duration,
    /// For a follower ([`Db::follow`](crate::Db::follow)): take over as the
    /// writer ([`Db::promote`](crate::Db::promote)) once the writer's lease
    /// has gone unrenewed this long (a live writer renews it about once a
    /// second). `None` (the default): only when told to. A standby. The
    /// lease decides only when; the log's fence makes it safe whatever the
    /// old writer does.
    pub take_over_after: Option<std::time::Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Fsync,
            cache_bytes: default_cache_bytes(),
            write_buffer_bytes: default_write_buffer_bytes(),
            page_size: 4096,
            segment_bytes: 64 << 20,
            checkpoint_bytes: 64 << 20,
            space_amplification_max: 2.0,
            create_if_missing: true,
            read_only: false,
            clock: crate::Clock::system(),
            object_cache_dir: None,
            object_cache_bytes: 1 << 30,
            commit_wait: std::time::Duration::ZERO,
            follow_interval: std::time::Duration::from_millis(20),
            take_over_after: None,
        }
    }
}

/// The smallest default page cache where memory allows it (and the cache
/// when the memory available is unknown).
pub const MIN_DEFAULT_CACHE_BYTES: u64 = 256 << 20;

/// `Options::cache_bytes` by default: an eighth of the memory this process
/// may use, or `MIN_DEFAULT_CACHE_BYTES` if more, but never over a quarter
/// of that memory (a 256 MiB container gets 64 MiB).
///
/// Why it scales: a lookup whose leaf is not cached reads its page and
/// decodes it (about 5 us of CPU), one that is cached walks memory (well
/// under 1 us). With a fixed 256 MiB, a 10M-pair store (about 1.2 GB of
/// decoded tree) read at random missed most of the time on a 24 GiB
/// machine, at a fifth of LMDB's rate there
/// (docs/decisions/0008-cache-scaled-with-machine-memory.md).
pub fn default_cache_bytes() -> u64 {
    crate::machine_memory::available().map_or(MIN_DEFAULT_CACHE_BYTES, cache_bytes_for)
}

/// The default cache for `memory` bytes available.
fn cache_bytes_for(memory: u64) -> u64 {
    (memory / 8).max(MIN_DEFAULT_CACHE_BYTES.min(memory / 4))
}

/// `Options::write_buffer_bytes` by default: 64 MiB, or a sixteenth of the
/// memory this process may use where that is less (at least 1 MiB). The
/// changes it bounds are held about twice over at the peak (see
/// `write_buffer_bytes`), so with the default cache the engine's own
/// memory stays under about half of what it may use.
pub fn default_write_buffer_bytes() -> u64 {
    crate::machine_memory::available().map_or(64 << 20, write_buffer_bytes_for)
}

fn write_buffer_bytes_for(memory: u64) -> u64 {
    (memory / 16).clamp(1 << 20, 64 << 20)
}

impl Options {
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |s: &str| Err(Error::InvalidOption(s.to_string()));
        if !(256..=65536).contains(&self.page_size) {
            return bad("page_size must be between 256 and 65536 bytes");
        }
        if !(1 << 16..=1 << 31).contains(&self.segment_bytes) {
            return bad("segment_bytes must be between 64 KiB and 2 GiB");
        }
        if self.commit_wait > std::time::Duration::from_secs(1) {
            return bad("commit_wait must be at most one second");
        }
        let follow = std::time::Duration::from_millis(1)..=std::time::Duration::from_secs(10);
        if !follow.contains(&self.follow_interval) {
            return bad("follow_interval must be between 1 ms and 10 s");
        }
        if self
            .take_over_after
            .is_some_and(|t| t < std::time::Duration::from_millis(1500))
        {
            return bad(
                "take_over_after must be at least 1.5 s (a writer renews its lease every second)",
            );
        }
        if self.cache_bytes < 64 << 10 {
            return bad("cache_bytes must be at least 64 KiB");
        }
        if self.write_buffer_bytes < 64 << 10 {
            return bad("write_buffer_bytes must be at least 64 KiB");
        }
        if self.checkpoint_bytes < 1 << 16 {
            return bad("checkpoint_bytes must be at least 64 KiB");
        }
        if self.space_amplification_max.is_nan() || self.space_amplification_max < 1.25 {
            return bad("space_amplification_max must be at least 1.25");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fit_the_memory_available() {
        const MIB: u64 = 1 << 20;
        // A large machine: an eighth for the cache, the full write buffer.
        assert_eq!(cache_bytes_for(24 << 30), 3 << 30);
        assert_eq!(write_buffer_bytes_for(24 << 30), 64 * MIB);
        // A 2 GiB container: the 256 MiB floor.
        assert_eq!(cache_bytes_for(2 << 30), 256 * MIB);
        assert_eq!(write_buffer_bytes_for(2 << 30), 64 * MIB);
        // Small containers: never past a quarter for the cache, and the
        // cache plus twice the write buffer under half of the memory.
        for memory in [64 * MIB, 256 * MIB, 512 * MIB, 1 << 30] {
            let cache = cache_bytes_for(memory);
            let buffer = write_buffer_bytes_for(memory);
            assert!(cache <= memory / 4, "{memory}: cache {cache}");
            assert!(cache + 2 * buffer <= memory / 2, "{memory}");
        }
        assert_eq!(cache_bytes_for(256 * MIB), 64 * MIB);
        assert_eq!(write_buffer_bytes_for(256 * MIB), 16 * MIB);
    }
}
