//! kivi: a durable, strongly consistent, crash-only key-value store whose
//! storage is an append-only log.
//!
//! ```no_run
//! let db = kivi::Db::open("my-store", kivi::Options::default())?;
//! db.put(b"hello", b"world")?;                 // durable when it returns
//! assert_eq!(db.get(b"hello")?.as_deref(), Some(&b"world"[..]));
//! for pair in db.range(b"a".as_slice()..b"z".as_slice()) {
//!     let (key, value) = pair?;
//! #   let _ = (key, value);
//! }
//! # Ok::<(), kivi::Error>(())
//! ```
//!
//! Layers (each its own crate): storage (`kivi-storage`) → log (`kivi-log`)
//! → tree (`kivi-tree`) → this engine. See ARCHITECTURE.md.

mod background;
mod backpressure;
mod batch;
mod check;
mod checkpoint_format;
mod checkpointer;
mod cleaner;
mod commit;
mod commit_log;
mod counters;
mod db;
mod error;
mod expiry;
mod identity;
mod iter;
mod latency;
pub mod limits;
mod machine_memory;
mod options;
mod pacing;
mod page_log;
mod pipeline;
mod reclaim;
mod recovery;
mod segment_chain;
mod stats;
mod store;
mod version;
mod write_buffer;

pub use batch::WriteBatch;
pub use check::CheckReport;
pub use db::Db;
pub use error::{Error, Result};
pub use expiry::{Clock, Deadline};
pub use iter::{Iter, Scan, Snapshot};
/// Sealed tables: sparkey-compatible immutable hash tables (the `kivi-tables`
/// crate; the `tables` feature, on by default).
#[cfg(feature = "tables")]
pub use kivi_tables as table;
pub use latency::{Histogram, HistogramSnapshot, SyncTimesSnapshot, LATENCY_BOUNDS_NS};
pub use machine_memory::container_limit as container_memory_limit;
pub use options::{
    default_cache_bytes, default_write_buffer_bytes, Durability, Options, MIN_DEFAULT_CACHE_BYTES,
};
pub use pipeline::WriteOutcome;
pub use stats::Stats;

/// Storage backends, for opening a store somewhere other than a local
/// directory (in memory, or one of your own). The crash simulator tests use
/// is `kivi_storage::SimStorage`, behind that crate's `sim` feature.
pub mod storage {
    pub use kivi_storage::{
        IoError, LocalDir, MemoryStorage, SegmentId, SegmentReader, SegmentWriter, StepHook,
        Storage,
    };
}
