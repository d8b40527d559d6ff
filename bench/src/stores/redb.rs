//! redb, a pure-Rust copy-on-write B-tree store, with its default
//! `Durability::Immediate`: a commit returns once it is persistent.

use super::{err, Kind, Result, Settings, Store};
use redb::{Database, ReadableDatabase, TableDefinition};
use std::path::Path;

pub const KIND: Kind = Kind {
    name: "redb",
    library: "redb 4 (crates.io)",
    durability: "default Durability::Immediate: every commit is fsynced",
    open,
};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

struct Redb(Database);

fn e(what: impl std::fmt::Display) -> super::StoreError {
    err("redb", what)
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Store>> {
    std::fs::create_dir_all(dir).map_err(e)?;
    let mut builder = Database::builder();
    if let Some(bytes) = settings.cache_bytes {
        builder.set_cache_size(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    let db = builder.create(dir.join("data.redb")).map_err(e)?;
    let txn = db.begin_write().map_err(e)?;
    txn.open_table(TABLE).map_err(e)?;
    txn.commit().map_err(e)?;
    Ok(Box::new(Redb(db)))
}

impl Store for Redb {
    fn write_batch(&self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let txn = self.0.begin_write().map_err(e)?;
        {
            let mut table = txn.open_table(TABLE).map_err(e)?;
            for (k, v) in pairs {
                table.insert(*k, *v).map_err(e)?;
            }
        }
        txn.commit().map_err(e)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write_batch(&[(key, value)])
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let txn = self.0.begin_read().map_err(e)?;
        let table = txn.open_table(TABLE).map_err(e)?;
        match table.get(key).map_err(e)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&self, from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let txn = self.0.begin_read().map_err(e)?;
        let table = txn.open_table(TABLE).map_err(e)?;
        for item in table.range::<&[u8]>(from..).map_err(e)? {
            let (k, v) = item.map_err(e)?;
            if !visit(k.value(), v.value()) {
                break;
            }
        }
        Ok(())
    }

    fn settle(&self) -> Result<()> {
        Ok(()) // Every commit is in place; nothing runs in the background.
    }
}
