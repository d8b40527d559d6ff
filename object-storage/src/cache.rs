//! A bounded cache of object bytes on local disk.
//!
//! Objects never change once written, so a cached copy is never stale: the
//! cache holds fixed-size *blocks* of objects (block `b` of an object is its
//! bytes `b * BLOCK ..`), each in a file of its own, and forgets the least
//! recently used blocks once their total passes the bound. It is filled by
//! what this process writes and by what it reads. It starts empty: a store
//! opened on a machine with no cache finds everything in the object store.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes in a cached block: one ranged get fetches this much, so that a
/// scan's neighbouring pages come with it, while a random read of one page
/// moves at most this much.
pub const BLOCK: u64 = 256 * 1024;

/// Which block of which object.
type Key = (String, u64);

#[derive(Debug)]
struct Slot {
    file: PathBuf,
    len: u64,
    last_use: u64,
}

#[derive(Debug, Default)]
struct State {
    slots: HashMap<Key, Slot>,
    by_use: BTreeMap<u64, Key>,
    bytes: u64,
    tick: u64,
    next_file: u64,
    hits: u64,
    misses: u64,
}

/// The cache; every method is safe to call from many threads.
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    /// Removed on drop when the cache made its own directory.
    _temp: Option<tempfile::TempDir>,
    capacity: u64,
    state: Mutex<State>,
}

impl DiskCache {
    /// A cache in `dir` (emptied first: what an earlier process left is not
    /// trusted), or in a temporary directory when `dir` is `None`; holding
    /// at most `capacity` bytes.
    pub fn new(dir: Option<&Path>, capacity: u64) -> io::Result<DiskCache> {
        let (dir, temp) = match dir {
            Some(d) => {
                fs::create_dir_all(d)?;
                for entry in fs::read_dir(d)? {
                    let entry = entry?;
                    if entry.file_name().to_string_lossy().ends_with(".block") {
                        fs::remove_file(entry.path())?;
                    }
                }
                (d.to_path_buf(), None)
            }
            None => {
                let t = tempfile::Builder::new().prefix("kivi-cache-").tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        Ok(DiskCache {
            dir,
            _temp: temp,
            capacity,
            state: Mutex::new(State::default()),
        })
    }

    /// Copies `buf.len()` bytes at `at` inside block `block` of `object`
    /// into `buf`, if the cache holds them.
    pub fn read(&self, object: &str, block: u64, at: u64, buf: &mut [u8]) -> bool {
        let key = (object.to_string(), block);
        let file = {
            let mut st = self.state.lock();
            st.tick += 1;
            let tick = st.tick;
            let Some(slot) = st.slots.get_mut(&key) else {
                st.misses += 1;
                return false;
            };
            if at + buf.len() as u64 > slot.len {
                st.misses += 1;
                return false;
            }
            let old = std::mem::replace(&mut slot.last_use, tick);
            let file = slot.file.clone();
            st.by_use.remove(&old);
            st.by_use.insert(tick, key);
            st.hits += 1;
            file
        };
        // The block may be evicted between the lookup and the read: then the
        // open fails and the caller fetches it again.
        match File::open(&file).and_then(|f| f.read_exact_at(buf, at)) {
            Ok(()) => true,
            Err(_) => false,
        }
    }

    /// Remembers `bytes` as block `block` of `object`. Failing to write the
    /// file only loses the caching.
    pub fn insert(&self, object: &str, block: u64, bytes: &[u8]) {
        let len = bytes.len() as u64;
        if len > self.capacity {
            return;
        }
        let key = (object.to_string(), block);
        let file = {
            let mut st = self.state.lock();
            if st.slots.contains_key(&key) {
                return;
            }
            st.next_file += 1;
            self.dir.join(format!("{}.block", st.next_file))
        };
        if fs::write(&file, bytes).is_err() {
            let _ = fs::remove_file(&file);
            return;
        }
        let mut evicted = Vec::new();
        {
            let mut st = self.state.lock();
            if st.slots.contains_key(&key) {
                evicted.push(file);
            } else {
                st.tick += 1;
                let tick = st.tick;
                st.by_use.insert(tick, key.clone());
                st.slots.insert(
                    key,
                    Slot {
                        file,
                        len,
                        last_use: tick,
                    },
                );
                st.bytes += len;
                while st.bytes > self.capacity {
                    let (_, victim) = st.by_use.pop_first().expect("bytes > 0 means a slot");
                    let slot = st.slots.remove(&victim).expect("indexed slot exists");
                    st.bytes -= slot.len;
                    evicted.push(slot.file);
                }
            }
            debug_assert_eq!(st.slots.len(), st.by_use.len());
        }
        for f in evicted {
            let _ = fs::remove_file(f);
        }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.state.lock().bytes
    }

    /// Reads answered from the cache, and reads it could not answer.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.hits, st.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_at_most_its_capacity_and_forgets_the_least_recently_used() {
        let cache = DiskCache::new(None, 3 * 100).unwrap();
        for i in 0..3u8 {
            cache.insert("a", i as u64, &[i; 100]);
        }
        let mut buf = [0u8; 10];
        assert!(cache.read("a", 0, 5, &mut buf)); // 0 is now the newest
        assert_eq!(buf, [0; 10]);
        cache.insert("a", 3, &[3; 100]);
        assert_eq!(cache.bytes(), 300);
        assert!(!cache.read("a", 1, 0, &mut buf), "least recently used kept");
        for b in [0, 2, 3] {
            assert!(cache.read("a", b, 90, &mut buf), "block {b} lost");
            assert_eq!(buf, [b as u8; 10]);
        }
        assert!(!cache.read("a", 0, 95, &mut buf), "read past a block's end");
        cache.insert("big", 0, &[0; 301]);
        assert!(!cache.read("big", 0, 0, &mut buf));
        let files = fs::read_dir(&cache.dir).unwrap().count();
        assert_eq!(files, 3, "evicted blocks' files are removed");
    }
}
