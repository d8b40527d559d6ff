//! kivi: a durable, strongly consistent, crash-only key-value store whose
//! storage is an append-only log.
//!
//! The package is `kivi-db` on crates.io (`cargo add kivi-db`); the library
//! is `kivi`. A store is a directory; [`Db`] is a handle to an open one,
//! `Clone + Send + Sync`, to share between threads. Keys and values are
//! bytes (keys up to [`limits::MAX_KEY_LEN`], values up to
//! [`limits::MAX_VALUE_LEN`]); a write is durable when it returns.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! # std::env::set_current_dir(dir.path()).unwrap();
//! use kivi::{Db, Options, WriteBatch};
//!
//! let db = Db::open("my-store", Options::default())?;
//! db.put(b"user:1", b"ada")?; // durable when it returns
//! assert_eq!(db.get(b"user:1")?.as_deref(), Some(&b"ada"[..]));
//!
//! let mut batch = WriteBatch::new(); // all or nothing
//! batch.put(b"user:2".to_vec(), b"grace".to_vec())?;
//! batch.delete(b"user:1".to_vec())?;
//! db.write(batch)?;
//!
//! assert!(db.compare_and_swap(b"user:2", b"grace", b"hopper")?);
//! for pair in db.range(b"user:".as_slice()..b"user;".as_slice()).rev() {
//!     let (key, value) = pair?;
//!     println!("{} = {}", String::from_utf8_lossy(&key), String::from_utf8_lossy(&value));
//! }
//! let snapshot = db.snapshot(); // a consistent view, free to take
//!
//! let in_a_minute = db.clock().after(std::time::Duration::from_secs(60));
//! db.put_with_deadline(b"session:9", b"...", Some(in_a_minute))?; // gone after it
//! let (_value, deadline) = db.get_with_deadline(b"session:9")?.unwrap();
//! let mut batch = WriteBatch::new(); // a deadline on a batch entry
//! batch.insert_if_absent(b"lock".to_vec(), b"me".to_vec())?.with_deadline(deadline)?;
//! db.write(batch)?;
//! assert_eq!(snapshot.get(b"lock")?, None); // taken before the lock
//! # Ok::<(), kivi::Error>(())
//! ```
//!
//! The rest of the API: conditional writes ([`WriteBatch`], the `Db`
//! methods of the same names), ascending and descending scans ([`Db::range`]
//! and the zero-copy [`Db::scan`]), [`Snapshot`]s, expiry ([`Deadline`],
//! [`Clock`]), [`Db::stats`] and [`Db::check`], other storage backends
//! ([`Db::open_with_storage`], [`storage`]), and sealed tables
//! (`table`, with the default `tables` feature).
//!
//! Layers (each its own crate): storage (`kivi-storage`) → log (`kivi-log`)
//! → tree (`kivi-tree`) → this engine; `kivi-tables` beside them. The
//! repository's ARCHITECTURE.md gives the format byte by byte, the commit
//! protocol and what a crash at each step leaves behind.

// Every public item says what it does: this crate is published (crates.io),
// and its API documentation is what its users read.
#![warn(missing_docs)]

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
mod follower;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
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
pub use follower::FollowerStatus;
pub use iter::{Iter, Scan, Snapshot};
/// Sealed tables: sparkey-compatible immutable hash tables (the `kivi-tables`
/// crate; the `tables` feature, on by default). Written once, in bulk, then
/// opened for lookups; they are files of their own, not part of a store.
///
/// ```
/// use kivi::table::{Table, TableWriter, WriterOptions};
///
/// # let dir = tempfile::tempdir()?;
/// let base = dir.path().join("pairs"); // pairs.spl, pairs.spi, pairs.kvsum
/// let mut writer = TableWriter::create(&base, WriterOptions::default())?;
/// writer.put(b"key", b"value")?;
/// writer.finish()?; // the files appear whole, or not at all
///
/// let table = Table::open(&base)?;
/// assert_eq!(table.get(b"key")?.as_deref(), Some(&b"value"[..]));
/// assert_eq!(table.get(b"other")?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
        Storage, WriterLease,
    };
}
