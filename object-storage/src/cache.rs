//! A bounded cache of object bytes on local disk.
//!
//! Objects never change once written, so a cached copy is never stale: the
//! cache holds fixed-size *blocks* of objects (block `b` of an object is its
//! bytes `b * BLOCK ..`) in the *slots* of one file, sized for the bound
//! (sparse: only written slots take disk), and forgets the least recently
//! used block when it needs a slot. A read is one `pread` on a file kept
//! open. It is filled by what this process writes and by what it reads. It
//! starts empty: a store opened on a machine with no cache finds everything
//! in the object store.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes in a cached block: one ranged get fetches this much, so that a
/// scan's neighbouring pages come with it, while a random read of one page
/// moves at most this much.
pub const BLOCK: u64 = 256 * 1024;

/// The cache's file in its directory.
const FILE_NAME: &str = "kivi-object-cache";

/// Which block of which object: a hash of the object's name, and the block.
/// The slot keeps the name itself, so a hash collision is a miss, never
/// another object's bytes.
type Key = (u64, u64);

fn key(object: &str, block: u64) -> Key {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    object.hash(&mut h);
    (h.finish(), block)
}

#[derive(Debug)]
struct Slot {
    object: Box<str>,
    block: u64,
    len: u32,
    last_use: u64,
    /// Readers copying from the slot now: it is not reused under them.
    pins: u32,
}

#[derive(Debug, Default)]
struct State {
    /// Cached blocks, by key, and the slot each is in.
    blocks: HashMap<Key, u32>,
    /// Slot number -> what it holds (None: free).
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Last use -> slot, for finding the least recently used.
    by_use: BTreeMap<u64, u32>,
    bytes: u64,
    tick: u64,
    hits: u64,
    misses: u64,
}

/// The cache; every method is safe to call from many threads.
#[derive(Debug)]
pub struct DiskCache {
    /// The slots' file; `None` when the cache holds nothing (capacity below
    /// one block).
    file: Option<File>,
    /// Removed on drop when the cache made its own directory.
    _temp: Option<tempfile::TempDir>,
    state: Mutex<State>,
}

impl DiskCache {
    /// A cache in `dir` (its file started afresh: what an earlier process
    /// left is not trusted), or in a temporary directory when `dir` is
    /// `None`; holding at most `capacity` bytes.
    pub fn new(dir: Option<&Path>, capacity: u64) -> io::Result<DiskCache> {
        let (dir, temp) = match dir {
            Some(d) => {
                fs::create_dir_all(d)?;
                (d.to_path_buf(), None)
            }
            None => {
                let t = tempfile::Builder::new().prefix("kivi-cache-").tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let slots = (capacity / BLOCK).min(u32::MAX as u64) as u32;
        let file = if slots == 0 {
            None
        } else {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.join(FILE_NAME))?;
            f.set_len(u64::from(slots) * BLOCK)?;
            Some(f)
        };
        let state = State {
            slots: (0..slots).map(|_| None).collect(),
            free: (0..slots).rev().collect(),
            ..State::default()
        };
        Ok(DiskCache {
            file,
            _temp: temp,
            state: Mutex::new(state),
        })
    }

    /// Copies `buf.len()` bytes at `at` inside block `block` of `object`
    /// into `buf`, if the cache holds them.
    pub fn read(&self, object: &str, block: u64, at: u64, buf: &mut [u8]) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        let k = key(object, block);
        let slot = {
            let mut st = self.state.lock();
            st.tick += 1;
            let tick = st.tick;
            let found = st.blocks.get(&k).copied().filter(|&n| {
                let s = st.slots[n as usize].as_ref().expect("indexed slot is used");
                &*s.object == object && at + buf.len() as u64 <= u64::from(s.len)
            });
            let Some(n) = found else {
                st.misses += 1;
                return false;
            };
            let s = st.slots[n as usize].as_mut().expect("indexed slot is used");
            let old = std::mem::replace(&mut s.last_use, tick);
            s.pins += 1;
            st.by_use.remove(&old);
            st.by_use.insert(tick, n);
            st.hits += 1;
            n
        };
        let read = file.read_exact_at(buf, u64::from(slot) * BLOCK + at);
        let mut st = self.state.lock();
        st.slots[slot as usize]
            .as_mut()
            .expect("a pinned slot stays")
            .pins -= 1;
        read.is_ok()
    }

    /// Remembers `bytes` (at most one block) as block `block` of `object`.
    /// Failing to write only loses the caching.
    pub fn insert(&self, object: &str, block: u64, bytes: &[u8]) {
        let Some(file) = &self.file else {
            return;
        };
        assert!(
            bytes.len() as u64 <= BLOCK,
            "a block is at most BLOCK bytes"
        );
        let k = key(object, block);
        // Take a slot (free, or the least recently used unpinned one), out
        // of every index while it is written.
        let slot = {
            let mut st = self.state.lock();
            if st.blocks.contains_key(&k) {
                return;
            }
            match st.free.pop() {
                Some(n) => n,
                None => {
                    let victim = st
                        .by_use
                        .iter()
                        .map(|(_, &n)| n)
                        .find(|&n| st.slots[n as usize].as_ref().is_some_and(|s| s.pins == 0));
                    let Some(n) = victim else {
                        return; // every slot is being read: skip caching this one
                    };
                    let old = st.slots[n as usize].take().expect("victim is used");
                    st.by_use.remove(&old.last_use);
                    st.blocks.remove(&key(&old.object, old.block));
                    st.bytes -= u64::from(old.len);
                    n
                }
            }
        };
        let written = file.write_all_at(bytes, u64::from(slot) * BLOCK);
        let mut st = self.state.lock();
        if written.is_err() || st.blocks.contains_key(&k) {
            st.free.push(slot);
            return;
        }
        st.tick += 1;
        let tick = st.tick;
        st.slots[slot as usize] = Some(Slot {
            object: object.into(),
            block,
            len: bytes.len() as u32,
            last_use: tick,
            pins: 0,
        });
        st.by_use.insert(tick, slot);
        st.blocks.insert(k, slot);
        st.bytes += bytes.len() as u64;
        debug_assert_eq!(st.blocks.len(), st.by_use.len());
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
        let cache = DiskCache::new(None, 3 * BLOCK + 100).unwrap();
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
        assert!(!cache.read("b", 0, 0, &mut buf), "another object's block");
        let (hits, misses) = cache.hits_and_misses();
        assert_eq!((hits, misses), (4, 3));
        let full = vec![9u8; BLOCK as usize];
        cache.insert("big", 0, &full);
        let mut back = vec![0u8; BLOCK as usize];
        assert!(cache.read("big", 0, 0, &mut back));
        assert!(back == full);
        assert_eq!(cache.bytes(), 200 + BLOCK);
    }

    #[test]
    fn a_cache_smaller_than_a_block_holds_nothing() {
        let cache = DiskCache::new(None, BLOCK - 1).unwrap();
        cache.insert("a", 0, b"x");
        assert!(!cache.read("a", 0, 0, &mut [0u8; 1]));
        assert_eq!(cache.bytes(), 0);
    }
}
