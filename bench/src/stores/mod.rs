//! The stores under test, each behind the same narrow interface and each
//! configured for durable commits: a write call returns only after the
//! store has synced (fsync/fdatasync) what it wrote.

use std::path::Path;

#[cfg(feature = "peers")]
mod ffi_util;
#[cfg(feature = "peers")]
mod fjall;
mod kivi;
#[cfg(feature = "peers")]
mod leveldb;
#[cfg(feature = "peers")]
mod lmdb;
pub mod object;
#[cfg(feature = "peers")]
mod redb;
#[cfg(feature = "peers")]
mod rocksdb;
#[cfg(feature = "slatedb")]
pub(crate) mod slatedb;

/// An error from a store, in words.
#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Turns any displayable error into a [`StoreError`] naming its store.
pub fn err(store: &str, what: impl std::fmt::Display) -> StoreError {
    StoreError(format!("{store}: {what}"))
}

/// One open store. Shared between threads by the concurrent workload.
pub trait Store: Send + Sync {
    /// Writes `pairs` atomically and durably: returns after they are synced.
    fn write_batch(&self, pairs: &[(&[u8], &[u8])]) -> Result<()>;
    /// One pair, its own durable commit.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Reads the value of `key` into `out`; `Ok(false)` when absent.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Calls `visit` on every pair from key `from` on (every pair if it is
    /// empty), in key order, until it returns `false`.
    fn scan(&self, from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()>;
    /// Lets background work settle before space is measured (flushing
    /// memtables, checkpoints); changes nothing about durability.
    fn settle(&self) -> Result<()>;
    /// Bytes of live data as the store itself counts them, for stores that
    /// do (kivi: its newest checkpoint's tree); space amplification is the
    /// bytes on disk over this.
    fn live_bytes(&self) -> Option<u64> {
        None
    }
}

/// How the suite opens a store, beyond what the store does by default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    /// Bytes for the store's own cache of its data (kivi's page cache,
    /// RocksDB's and LevelDB's block caches, redb's and fjall's caches;
    /// LMDB has none of its own), or its default if `None`. Under
    /// `--memory-limit` every store gets the same: what kivi picks by
    /// default for that limit.
    pub cache_bytes: Option<u64>,
    /// The store runs in a memory box that its data may not fit: a store
    /// whose documentation gives settings for that case gets them (LMDB's
    /// `MDB_NORDAHEAD`).
    pub memory_limited: bool,
}

/// A kind of store: how to open one, and what it is, for the report.
pub struct Kind {
    pub name: &'static str,
    /// The library used and how, for docs/benchmarks.md.
    pub library: &'static str,
    /// How durable commits are configured.
    pub durability: &'static str,
    pub open: fn(&Path, &Settings) -> Result<Box<dyn Store>>,
}

/// Every store this build can run, kivi first.
pub fn kinds() -> Vec<Kind> {
    #[allow(unused_mut)]
    let mut out = vec![kivi::KIND, kivi::KIND_NO_CLEANER];
    #[cfg(feature = "peers")]
    out.extend([
        lmdb::KIND,
        rocksdb::KIND,
        leveldb::KIND,
        redb::KIND,
        fjall::KIND,
    ]);
    out
}

/// The store called `name`.
pub fn kind(name: &str) -> Option<Kind> {
    kinds().into_iter().find(|k| k.name == name)
}
