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
//!
//! A cache's directory holds a lock file, locked while the cache is open
//! (the lock goes with the process, kill -9 included): two processes never
//! share one cache file, and a cache in a temporary directory whose process
//! died without removing it is found and removed by the next cache made in
//! that temporary directory.

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

/// The file locked while a cache is open, beside its file.
const LOCK_NAME: &str = "kivi-object-cache.lock";

/// How the temporary directories of caches made without a directory begin.
const TEMP_PREFIX: &str = "kivi-cache-";

/// A temporary cache directory is removed as stale only when its lock file
/// is at least this old (and unlocked): one made a moment ago may not be
/// locked yet.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

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
    /// Held (locked) while the cache is open; dropped before `_temp`.
    _lock: File,
    /// Removed on drop when the cache made its own directory.
    _temp: Option<tempfile::TempDir>,
    state: Mutex<State>,
}

impl DiskCache {
    /// A cache in `dir` (its file started afresh: what an earlier process
    /// left is not trusted), or in a new temporary directory when `dir` is
    /// `None` (removing the ones of caches whose process died); holding at
    /// most `capacity` bytes. Fails if another open cache uses `dir`.
    pub fn new(dir: Option<&Path>, capacity: u64) -> io::Result<DiskCache> {
        Self::new_in(dir, &std::env::temp_dir(), capacity)
    }

    /// As `new`, with temporary directories made in `temp_root`.
    fn new_in(dir: Option<&Path>, temp_root: &Path, capacity: u64) -> io::Result<DiskCache> {
        let (dir, temp) = match dir {
            Some(d) => {
                fs::create_dir_all(d)?;
                (d.to_path_buf(), None)
            }
            None => {
                remove_stale(temp_root);
                let t = tempfile::Builder::new()
                    .prefix(TEMP_PREFIX)
                    .tempdir_in(temp_root)?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_NAME))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    format!(
                        "the object cache directory {} is in use by another open store \
                         (give each its own directory)",
                        dir.display()
                    ),
                ))
            }
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
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
            _lock: lock,
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

/// Removes the temporary directories in `root` of caches whose process is
/// gone: their lock file is unlocked and older than `STALE_AFTER`. Failing
/// to look or to remove only leaves them for the next time.
fn remove_stale(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            continue;
        }
        let dir = entry.path();
        let Ok(lock) = OpenOptions::new().write(true).open(dir.join(LOCK_NAME)) else {
            continue; // not one of ours, or not locked yet
        };
        let old = lock
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= STALE_AFTER);
        if old && lock.try_lock().is_ok() {
            match fs::remove_dir_all(&dir) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "removed the object cache a process that ended without closing its store left")
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "could not remove a stale object cache")
                }
            }
        }
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

    #[test]
    fn a_directory_holds_one_open_cache_at_a_time() {
        let d = tempfile::tempdir().unwrap();
        let first = DiskCache::new(Some(d.path()), 2 * BLOCK).unwrap();
        let e = DiskCache::new(Some(d.path()), 2 * BLOCK).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy);
        assert!(e.to_string().contains("in use"), "{e}");
        drop(first);
        DiskCache::new(Some(d.path()), 2 * BLOCK).expect("free once the first closed");
    }

    #[test]
    fn a_new_temporary_cache_removes_the_ones_dead_processes_left() {
        let root = tempfile::tempdir().unwrap();
        let made = |name: &str, age: std::time::Duration| {
            let dir = root.path().join(name);
            fs::create_dir(&dir).unwrap();
            fs::write(dir.join(FILE_NAME), b"cached bytes").unwrap();
            let lock = File::create(dir.join(LOCK_NAME)).unwrap();
            lock.set_modified(std::time::SystemTime::now() - age)
                .unwrap();
            dir
        };
        let dead = made("kivi-cache-dead", STALE_AFTER * 2);
        let young = made("kivi-cache-young", std::time::Duration::ZERO);
        let not_ours = root.path().join("other-dir");
        fs::create_dir(&not_ours).unwrap();
        // A live cache, its lock file made old: locked, so kept.
        let live = DiskCache::new_in(None, root.path(), 2 * BLOCK).unwrap();
        let live_dir = live._temp.as_ref().unwrap().path().to_path_buf();
        File::options()
            .write(true)
            .open(live_dir.join(LOCK_NAME))
            .unwrap()
            .set_modified(std::time::SystemTime::now() - STALE_AFTER * 2)
            .unwrap();
        assert!(!dead.exists(), "the dead process's cache stayed");

        let other = DiskCache::new_in(None, root.path(), 2 * BLOCK).unwrap();
        assert!(live_dir.exists(), "a live cache was removed");
        assert!(young.exists(), "a cache made a moment ago was removed");
        assert!(not_ours.exists());
        let other_dir = other._temp.as_ref().unwrap().path().to_path_buf();
        drop((live, other));
        assert!(
            !live_dir.exists() && !other_dir.exists(),
            "closing removes its own"
        );
    }
}
