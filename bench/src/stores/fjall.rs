//! fjall, a pure-Rust LSM-tree store, with every write batch committed with
//! `PersistMode::SyncData` (fdatasync of its journal before it returns).

use super::{err, Kind, Result, Settings, Store};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use std::path::Path;

pub const KIND: Kind = Kind {
    name: "fjall",
    library: "fjall 3 (crates.io)",
    durability: "every batch and put committed with PersistMode::SyncData (fdatasync)",
    open,
};

struct Fjall {
    db: Database,
    kv: Keyspace,
}

fn e(what: impl std::fmt::Display) -> super::StoreError {
    err("fjall", what)
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Store>> {
    let mut builder = Database::builder(dir);
    if let Some(bytes) = settings.cache_bytes {
        builder = builder.cache_size(bytes);
    }
    let db = builder.open().map_err(e)?;
    let kv = db
        .keyspace("kv", KeyspaceCreateOptions::default)
        .map_err(e)?;
    Ok(Box::new(Fjall { db, kv }))
}

impl Store for Fjall {
    fn write_batch(&self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncData));
        for (k, v) in pairs {
            batch.insert(&self.kv, *k, *v);
        }
        batch.commit().map_err(e)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write_batch(&[(key, value)])
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.kv.get(key).map_err(e)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&self, from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        for guard in self.kv.range(from..) {
            let (k, v) = guard.into_inner().map_err(e)?;
            if !visit(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    fn settle(&self) -> Result<()> {
        // Flush the memtable so the tables on disk hold everything.
        self.kv.rotate_memtable_and_wait().map_err(e)
    }
}
