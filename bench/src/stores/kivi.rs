//! kivi itself, with its defaults: durable (fdatasync) commits.

use super::{err, Kind, Result, Settings, Store};
use kivi::{Db, Options, WriteBatch};
use std::path::Path;

pub const KIND: Kind = Kind {
    name: "kivi",
    library: "kivi (this repository)",
    durability: "default options: every write returns after fdatasync",
    open,
};

/// kivi with its cleaner idle (a space target it never reaches): the
/// baseline for what cleaning costs, in the same run.
pub const KIND_NO_CLEANER: Kind = Kind {
    name: "kivi-nocleaner",
    library: "kivi (this repository), space_amplification_max = 1e9",
    durability: "default options: every write returns after fdatasync",
    open: open_no_cleaner,
};

struct Kivi(Db);

/// The defaults, with the cache the suite asks for, if it does.
fn options(settings: &Settings) -> Options {
    let defaults = Options::default();
    Options {
        cache_bytes: settings.cache_bytes.unwrap_or(defaults.cache_bytes),
        ..defaults
    }
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Store>> {
    let db = Db::open(dir, options(settings)).map_err(|e| err("kivi", e))?;
    Ok(Box::new(Kivi(db)))
}

fn open_no_cleaner(dir: &Path, settings: &Settings) -> Result<Box<dyn Store>> {
    let opts = Options {
        space_amplification_max: 1e9,
        ..options(settings)
    };
    let db = Db::open(dir, opts).map_err(|e| err("kivi-nocleaner", e))?;
    Ok(Box::new(Kivi(db)))
}

impl Store for Kivi {
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

    fn live_bytes(&self) -> Option<u64> {
        self.0.stats().ok().map(|s| s.checkpoint_tree_bytes)
    }
}
