//! Sealed tables: immutable hash tables in sparkey's file format (an
//! append-only `.spl` log plus a Robin Hood `.spi` index), read and written
//! byte for byte compatibly, with what sparkey lacks: an index build within
//! a memory limit, crash-safe replacement of files, a checksum sidecar
//! (`BASE.kvsum`) so `verify` finds any flipped byte, and a `rewrite` that
//! keeps deleted keys deleted.
//!
//! ```
//! use kivi_tables::{Table, TableWriter, WriterOptions};
//! # let dir = tempfile::tempdir().unwrap();
//! let base = dir.path().join("t"); // t.spl, t.spi and t.kvsum
//! let mut w = TableWriter::create(&base, WriterOptions::default())?;
//! w.put(b"key", b"value")?;
//! w.finish()?;
//! let t = Table::open(&base)?;
//! assert_eq!(t.get(b"key")?.as_deref(), Some(&b"value"[..]));
//! # Ok::<(), kivi_tables::Error>(())
//! ```
//!
//! The format byte for byte, and kivi's additions: ARCHITECTURE.md, "Sealed tables".

// Every public item says what it does: this crate is published (crates.io),
// and its API documentation is what its users read.
#![warn(missing_docs)]

mod atomic_file;
mod block;
mod bytes;
mod chunk_writer;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod hash;
mod header;
mod index_build;
pub mod limits;
mod log;
mod partition;
mod prefetch;
mod reader;
mod robin;
mod sidecar;
mod slots;
mod snappy_prefix;
mod verify;
pub mod vlq;
mod writer;

pub use error::{Error, Result};
pub use hash::HashSize;
pub use header::{Compression, IndexHeader, LogHeader, INDEX_HEADER_LEN, LOG_HEADER_LEN};
pub use index_build::{build_index, capacity_for, BuildReport, IndexOptions};
pub use log::EntryKind;
pub use reader::{table_paths, Table, TableIter};
pub use sidecar::{sidecar_path, write_sidecar};
pub use verify::{verify, CheckKind, VerifyReport};
pub use writer::{rewrite, TableInfo, TableWriter, WriterOptions};
