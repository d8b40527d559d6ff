//! The stores of the object-store suite: each opened on an object store
//! (any `Arc<dyn ObjectStore>`, in the suite the S3 client inside a
//! counting wrapper) under a prefix, with a local cache in a directory of
//! its own, and behind the same [`Store`] interface as the suite's local
//! stores, so the same workload code drives them. Every write returns only
//! once the object that makes it durable exists.

use super::{err, Result, Store};
use crate::counting::Counts;
use kivi::{Db, Options, WriteBatch};
use kivi_object_storage::{Config, ObjectStorage};
use object_store::ObjectStore;
use std::path::Path;
use std::sync::Arc;

/// A store on an object store, as the suite needs it beyond [`Store`].
pub trait ObjectKv: Store {
    /// Requests as the store itself counts them, for a store that does
    /// (kivi's `Stats`), as a check on the suite's own count.
    fn own_counts(&self) -> Option<Counts> {
        None
    }
    /// Flushes what the store holds only in memory to objects (so that a
    /// fresh open reads them) and closes it.
    fn close(self: Box<Self>) -> Result<()>;
}

/// How to open one, and what it is, for the report.
pub struct ObjectKind {
    pub name: &'static str,
    pub library: &'static str,
    pub durability: &'static str,
    pub open: OpenFn,
    /// A store on a local directory, for reference (the object store and
    /// its delay are not its): no raw PUT, no delayed writes.
    pub local: bool,
}

/// Opens (creating if empty) the store under a prefix (`&str`) of an
/// object store, its local cache in a directory of its own; async stores
/// run on the runtime given.
pub type OpenFn =
    fn(Arc<dyn ObjectStore>, &str, &Path, &tokio::runtime::Handle) -> Result<Box<dyn ObjectKv>>;

/// Every store this build can run on an object store, kivi first.
pub fn kinds() -> Vec<ObjectKind> {
    #[allow(unused_mut)]
    let mut out = vec![KIVI, KIVI_LOCAL];
    #[cfg(feature = "slatedb")]
    out.push(super::slatedb::KIND);
    out
}

pub const KIVI: ObjectKind = ObjectKind {
    name: "kivi",
    library: "kivi (this repository) on kivi-object-storage, default options",
    durability: "every write returns after its group commit's conditional PUT",
    open: open_kivi,
    local: false,
};

/// kivi on a local directory, beside the object-store runs: what a store
/// on an object store is measured against (warm reads: at least 0.8x).
pub const KIVI_LOCAL: ObjectKind = ObjectKind {
    name: "kivi-local",
    library: "kivi (this repository) on a local directory, default options",
    durability: "every write returns after its group commit's fdatasync",
    open: open_kivi_local,
    local: true,
};

/// Opens kivi in a directory beside the cache directory, named after the
/// prefix, so that it outlives the cache (deleted at each close) and a
/// reopen finds it.
fn open_kivi_local(
    _store: Arc<dyn ObjectStore>,
    prefix: &str,
    cache_dir: &Path,
    _runtime: &tokio::runtime::Handle,
) -> Result<Box<dyn ObjectKv>> {
    let parent = cache_dir.parent().unwrap_or(cache_dir);
    let dir = parent.join(format!("local-{}", prefix.replace('/', "-")));
    let db = Db::open(&dir, Options::default()).map_err(|e| err("kivi-local", e))?;
    Ok(Box::new(KiviObject(db)))
}

struct KiviObject(Db);

fn open_kivi(
    store: Arc<dyn ObjectStore>,
    prefix: &str,
    cache_dir: &Path,
    _runtime: &tokio::runtime::Handle,
) -> Result<Box<dyn ObjectKv>> {
    let config = Config {
        cache_dir: Some(cache_dir.to_path_buf()),
        ..Config::default()
    };
    let storage = ObjectStorage::open(store, prefix, prefix, config).map_err(|e| err("kivi", e))?;
    let db =
        Db::open_with_storage(Arc::new(storage), Options::default()).map_err(|e| err("kivi", e))?;
    Ok(Box::new(KiviObject(db)))
}

impl Store for KiviObject {
    fn write_batch(&self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut batch = WriteBatch::new();
        for (k, v) in pairs {
            batch.put(*k, *v).map_err(|e| err("kivi", e))?;
        }
        self.0.write(batch).map(|_| ()).map_err(|e| err("kivi", e))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.0.put(key, value).map_err(|e| err("kivi", e))
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.0.get_into(key, out).map_err(|e| err("kivi", e))
    }

    fn scan(&self, from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let mut scan = self.0.scan::<&[u8], _>(from..);
        while let Some((k, v)) = scan.next().map_err(|e| err("kivi", e))? {
            if !visit(k, v) {
                break;
            }
        }
        Ok(())
    }

    fn settle(&self) -> Result<()> {
        self.0.checkpoint().map_err(|e| err("kivi", e))
    }
}

impl ObjectKv for KiviObject {
    fn own_counts(&self) -> Option<Counts> {
        let s = self.0.stats().ok()?;
        Some(Counts {
            puts: s.object_puts,
            put_bytes: s.object_put_bytes,
            gets: s.object_gets,
            get_bytes: s.object_get_bytes,
            deletes: s.object_deletes,
            lists: s.object_lists,
            copies: 0,
        })
    }

    fn close(self: Box<Self>) -> Result<()> {
        // Its tree checkpointed, as SlateDB's memtable is flushed: a fresh
        // open then reads the tree, not a log to replay.
        self.settle()?;
        self.0.close().map_err(|e| err("kivi", e))
    }
}
