//! SlateDB (crate `slatedb` 0.18), the LSM tree built for object stores, in
//! Rust on the same `object_store` crate as kivi's backend: the peer of
//! kivi in the object-store suite. Every write awaits its durability
//! (`WriteHandle::await_durable`, what `WriteOptions { await_durable: true
//! }` was before 0.18): it returns once the WAL object holding it is put.

use super::object::{ObjectKind, ObjectKv};
use super::{err, Result, Store};
use slatedb::config::{FlushOptions, FlushType, ObjectStoreCacheOptions, Settings};
use slatedb::{Db, WriteBatch};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;

/// How often SlateDB's WAL writer puts what was written since its last
/// put. A durable write waits for the next such put, so this is a floor
/// under its latency: the default, 100 ms (chosen for request cost, about
/// ten WAL puts a second), would make a single writer do about 10 writes/s
/// whatever the object store's speed. At 1 ms the wait for the tick is
/// below a PUT's own time even on a local server, so the figure measures
/// the WAL put, as kivi's group commit does, and writers arriving during a
/// put share the next one. It costs no requests: a tick with nothing
/// written puts nothing (an empty WAL is not flushed).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(1);

/// The local disk cache's size: kivi's default (`kivi_object_storage::Config`).
const CACHE_BYTES: usize = 1 << 30;

pub const KIND: ObjectKind = ObjectKind {
    name: "slatedb",
    library: "slatedb 0.18 (crates.io), default settings, flush_interval 1 ms, \
              1 GiB local disk cache, moka block cache",
    durability: "every write awaits durability (its WAL object's PUT)",
    open,
    local: false,
};

/// The writer's settings, here and in the follower suite's SlateDB lag
/// (follower_slatedb.rs): defaults but for the flush interval and the
/// local disk cache in `cache_dir`.
pub(crate) fn settings(cache_dir: &Path) -> Settings {
    Settings {
        flush_interval: Some(FLUSH_INTERVAL),
        // Like kivi's cache: on local disk, emptied for a fresh open,
        // holding what the store wrote as well as what it read.
        object_store_cache_options: ObjectStoreCacheOptions {
            root_folder: Some(cache_dir.to_path_buf()),
            max_cache_size_bytes: Some(CACHE_BYTES),
            cache_on_flush: true,
            ..ObjectStoreCacheOptions::default()
        },
        ..Settings::default()
    }
}

struct Slate {
    db: Db,
    rt: Handle,
}

fn open(
    store: Arc<dyn object_store::ObjectStore>,
    prefix: &str,
    cache_dir: &Path,
    runtime: &Handle,
) -> Result<Box<dyn ObjectKv>> {
    let db = runtime
        .block_on(
            Db::builder(prefix, store)
                .with_settings(settings(cache_dir))
                .build(),
        )
        .map_err(|e| err("slatedb", e))?;
    Ok(Box::new(Slate {
        db,
        rt: runtime.clone(),
    }))
}

impl Store for Slate {
    fn write_batch(&self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut batch = WriteBatch::new();
        for (k, v) in pairs {
            batch.put(k, v);
        }
        self.rt
            .block_on(async { self.db.write(batch).await?.await_durable().await })
            .map_err(|e| err("slatedb", e))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.rt
            .block_on(async { self.db.put(key, value).await?.await_durable().await })
            .map_err(|e| err("slatedb", e))
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let got = self
            .rt
            .block_on(self.db.get(key))
            .map_err(|e| err("slatedb", e))?;
        out.clear();
        Ok(got.is_some_and(|v| {
            out.extend_from_slice(&v);
            true
        }))
    }

    fn scan(&self, from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        self.rt
            .block_on(async {
                let mut it = self.db.scan(from.to_vec()..).await?;
                while let Some(kv) = it.next().await? {
                    if !visit(&kv.key, &kv.value) {
                        break;
                    }
                }
                Ok::<_, slatedb::Error>(())
            })
            .map_err(|e| err("slatedb", e))
    }

    fn settle(&self) -> Result<()> {
        // The memtable to an L0 table: what kivi's checkpoint is to its tree.
        let opts = FlushOptions {
            flush_type: FlushType::MemTable,
        };
        self.rt
            .block_on(self.db.flush_with_options(opts))
            .map_err(|e| err("slatedb", e))
    }
}

impl ObjectKv for Slate {
    fn close(self: Box<Self>) -> Result<()> {
        // Without the memtable flush a fresh open would replay the WAL into
        // memory and read nothing from tables: the cold reads would not be.
        self.settle()?;
        self.rt
            .block_on(self.db.close())
            .map_err(|e| err("slatedb", e))
    }
}
