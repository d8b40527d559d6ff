//! LevelDB, through hand-written FFI to the C API (`leveldb/c.h`) of Debian's
//! system library (libleveldb-dev 1.23; see bench/setup.sh; bench/build.rs
//! links it when the `peers` feature is on).
//!
//! Why FFI: there is no well-kept crate that links the system LevelDB. The
//! `leveldb` crate's `leveldb-sys` (last released in 2021) builds its own
//! vendored LevelDB 1.22 from C++ source with cmake; the C API is small, and
//! we bind only the functions used here.
//!
//! Configuration is what a user gets by default, made durable: LevelDB always
//! writes its log first, and `WriteOptions::sync = true` on every write makes
//! the write return after the log is synced (fdatasync on Linux). Batches go
//! through `leveldb_writebatch_t` and `leveldb_write`, single pairs through
//! `leveldb_put`. The only other option set is `create_if_missing`.

use super::ffi_util::{borrowed, c_path, c_slice, CBuf, ErrPtr, Handle};
use super::{Kind, Result, Settings, Store};
use std::path::Path;

const STORE: &str = "leveldb";

pub const KIND: Kind = Kind {
    name: STORE,
    library: "LevelDB 1.23 (Debian libleveldb-dev) through its C API (hand-written FFI); \
              default options (8 MiB LRU block cache, 4 MiB write buffer, 4 KiB blocks, \
              Snappy compression, no Bloom filter) plus create_if_missing",
    durability: "WriteOptions sync = true for every write (batches and single puts): a write \
                 returns after the log is fdatasync'd; settle flushes the memtable through \
                 leveldb_compact_range over an empty range (no full compaction)",
    open,
};

/// The C API, as declared in /usr/include/leveldb/c.h (1.23). Only what this
/// adapter calls. `uint8_t` booleans are `u8`.
mod ffi {
    use std::ffi::{c_char, c_void};

    super::super::ffi_util::opaque_types!(
        leveldb_t,
        leveldb_options_t,
        leveldb_writeoptions_t,
        leveldb_readoptions_t,
        leveldb_writebatch_t,
        leveldb_iterator_t,
        leveldb_cache_t,
    );

    // Linked by bench/build.rs (`cargo:rustc-link-lib=dylib=leveldb`).
    extern "C" {
        pub(super) fn leveldb_options_create() -> *mut leveldb_options_t;
        pub(super) fn leveldb_options_destroy(options: *mut leveldb_options_t);
        pub(super) fn leveldb_options_set_create_if_missing(options: *mut leveldb_options_t, v: u8);
        pub(super) fn leveldb_options_set_cache(
            options: *mut leveldb_options_t,
            cache: *mut leveldb_cache_t,
        );
        pub(super) fn leveldb_cache_create_lru(capacity: usize) -> *mut leveldb_cache_t;
        pub(super) fn leveldb_cache_destroy(cache: *mut leveldb_cache_t);

        pub(super) fn leveldb_open(
            options: *const leveldb_options_t,
            name: *const c_char,
            errptr: *mut *mut c_char,
        ) -> *mut leveldb_t;
        pub(super) fn leveldb_close(db: *mut leveldb_t);

        pub(super) fn leveldb_writeoptions_create() -> *mut leveldb_writeoptions_t;
        pub(super) fn leveldb_writeoptions_destroy(options: *mut leveldb_writeoptions_t);
        pub(super) fn leveldb_writeoptions_set_sync(options: *mut leveldb_writeoptions_t, v: u8);

        pub(super) fn leveldb_readoptions_create() -> *mut leveldb_readoptions_t;
        pub(super) fn leveldb_readoptions_destroy(options: *mut leveldb_readoptions_t);

        pub(super) fn leveldb_put(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            key: *const c_char,
            keylen: usize,
            val: *const c_char,
            vallen: usize,
            errptr: *mut *mut c_char,
        );
        pub(super) fn leveldb_write(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            batch: *mut leveldb_writebatch_t,
            errptr: *mut *mut c_char,
        );
        /// Null if not found, else a malloc'd copy of the value.
        pub(super) fn leveldb_get(
            db: *mut leveldb_t,
            options: *const leveldb_readoptions_t,
            key: *const c_char,
            keylen: usize,
            vallen: *mut usize,
            errptr: *mut *mut c_char,
        ) -> *mut c_char;
        /// Null `start_key`/`limit_key` mean before all / after all keys.
        pub(super) fn leveldb_compact_range(
            db: *mut leveldb_t,
            start_key: *const c_char,
            start_key_len: usize,
            limit_key: *const c_char,
            limit_key_len: usize,
        );

        pub(super) fn leveldb_writebatch_create() -> *mut leveldb_writebatch_t;
        pub(super) fn leveldb_writebatch_destroy(batch: *mut leveldb_writebatch_t);
        pub(super) fn leveldb_writebatch_put(
            batch: *mut leveldb_writebatch_t,
            key: *const c_char,
            klen: usize,
            val: *const c_char,
            vlen: usize,
        );

        pub(super) fn leveldb_create_iterator(
            db: *mut leveldb_t,
            options: *const leveldb_readoptions_t,
        ) -> *mut leveldb_iterator_t;
        pub(super) fn leveldb_iter_destroy(iter: *mut leveldb_iterator_t);
        pub(super) fn leveldb_iter_valid(iter: *const leveldb_iterator_t) -> u8;
        pub(super) fn leveldb_iter_seek_to_first(iter: *mut leveldb_iterator_t);
        pub(super) fn leveldb_iter_seek(
            iter: *mut leveldb_iterator_t,
            k: *const c_char,
            klen: usize,
        );
        pub(super) fn leveldb_iter_next(iter: *mut leveldb_iterator_t);
        pub(super) fn leveldb_iter_key(
            iter: *const leveldb_iterator_t,
            klen: *mut usize,
        ) -> *const c_char;
        pub(super) fn leveldb_iter_value(
            iter: *const leveldb_iterator_t,
            vlen: *mut usize,
        ) -> *const c_char;
        pub(super) fn leveldb_iter_get_error(
            iter: *const leveldb_iterator_t,
            errptr: *mut *mut c_char,
        );

        pub(super) fn leveldb_free(ptr: *mut c_void);
    }
}

/// An open database and the options every call uses.
///
/// Field order is drop order: the database closes first, then the options
/// objects are destroyed (LevelDB copies options at open and per call, so
/// the order is not required, only tidy), then the block cache, if the
/// suite gave one: the options LevelDB copied point to it, so it must
/// outlive the database.
struct LevelDb {
    db: Handle<ffi::leveldb_t>,
    write: Handle<ffi::leveldb_writeoptions_t>,
    read: Handle<ffi::leveldb_readoptions_t>,
    _cache: Option<Handle<ffi::leveldb_cache_t>>,
}

// SAFETY: "A DB is safe for concurrent access from multiple threads without
// any external synchronization" (leveldb/db.h), and it is not tied to the
// thread that opened it. The write and read options are set up once in
// `open` and never modified afterwards: calls only read them through `const`
// pointers, which is safe from any number of threads. Iterators and write
// batches, which are not thread-safe, are created and destroyed inside a
// single call and never shared.
unsafe impl Send for LevelDb {}
// SAFETY: as for Send above: every `&self` method only makes calls that
// LevelDB allows concurrently on one DB, with read-only options.
unsafe impl Sync for LevelDb {}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Store>> {
    let name = c_path(STORE, dir)?;

    // SAFETY: leveldb_options_create takes no arguments and returns a new
    // object owned by the caller, released with leveldb_options_destroy.
    let options = unsafe {
        Handle::new(
            STORE,
            "leveldb_options_create",
            ffi::leveldb_options_create(),
            ffi::leveldb_options_destroy,
        )?
    };
    // SAFETY: `options` is a live options object owned by us.
    unsafe { ffi::leveldb_options_set_create_if_missing(options.as_ptr(), 1) };
    let cache = match settings.cache_bytes {
        None => None,
        Some(bytes) => {
            // SAFETY: the constructor returns a new cache owned by the
            // caller, released with leveldb_cache_destroy; it is kept in
            // the LevelDb, which drops it after closing the database.
            let cache = unsafe {
                Handle::new(
                    STORE,
                    "leveldb_cache_create_lru",
                    ffi::leveldb_cache_create_lru(usize::try_from(bytes).unwrap_or(usize::MAX)),
                    ffi::leveldb_cache_destroy,
                )?
            };
            // SAFETY: both objects are live and ours; the options keep a
            // plain pointer to the cache, which outlives the database.
            unsafe { ffi::leveldb_options_set_cache(options.as_ptr(), cache.as_ptr()) };
            Some(cache)
        }
    };

    let mut e = ErrPtr::new(ffi::leveldb_free);
    // SAFETY: `options` is live, `name` is a NUL-terminated path that
    // outlives the call, and `e` is a null errptr as the API requires. On
    // success the returned DB is ours, released once with leveldb_close.
    // LevelDB copies the options struct at open; the only object of ours it
    // points to is the cache, which the LevelDb keeps until after closing,
    // so `options` may be destroyed afterwards.
    let db = unsafe { ffi::leveldb_open(options.as_ptr(), name.as_ptr(), e.as_out()) };
    e.check(STORE)?;
    // SAFETY: leveldb_open reported success, so `db` is a live DB we own;
    // leveldb_close is its release function.
    let db = unsafe { Handle::new(STORE, "leveldb_open", db, ffi::leveldb_close)? };

    // SAFETY: the constructor takes no arguments and returns a new object
    // owned by the caller, released with leveldb_writeoptions_destroy.
    let write = unsafe {
        Handle::new(
            STORE,
            "leveldb_writeoptions_create",
            ffi::leveldb_writeoptions_create(),
            ffi::leveldb_writeoptions_destroy,
        )?
    };
    // SAFETY: `write` is live and ours; nothing else uses it yet.
    unsafe { ffi::leveldb_writeoptions_set_sync(write.as_ptr(), 1) };

    // SAFETY: as for the write options: a new object owned by the caller,
    // released with leveldb_readoptions_destroy. Left at its defaults.
    let read = unsafe {
        Handle::new(
            STORE,
            "leveldb_readoptions_create",
            ffi::leveldb_readoptions_create(),
            ffi::leveldb_readoptions_destroy,
        )?
    };

    Ok(Box::new(LevelDb {
        db,
        write,
        read,
        _cache: cache,
    }))
}

/// An iterator over the whole database; destroyed on drop, before the DB it
/// reads (it borrows the `LevelDb` for its lifetime).
struct Iter<'db> {
    it: Handle<ffi::leveldb_iterator_t>,
    _db: std::marker::PhantomData<&'db LevelDb>,
}

impl<'db> Iter<'db> {
    fn new(db: &'db LevelDb) -> Result<Self> {
        // SAFETY: the DB and read options are live for 'db, which the
        // iterator cannot outlive; the new iterator is ours, released with
        // leveldb_iter_destroy.
        let it = unsafe {
            Handle::new(
                STORE,
                "leveldb_create_iterator",
                ffi::leveldb_create_iterator(db.db.as_ptr(), db.read.as_ptr()),
                ffi::leveldb_iter_destroy,
            )?
        };
        Ok(Iter {
            it,
            _db: std::marker::PhantomData,
        })
    }

    /// To the first key at or after `from` (the first of all if empty).
    fn seek(&mut self, from: &[u8]) {
        if from.is_empty() {
            // SAFETY: the iterator is live and used by this thread only.
            unsafe { ffi::leveldb_iter_seek_to_first(self.it.as_ptr()) }
        } else {
            // SAFETY: the iterator is live and used by this thread only;
            // the key is read during the call only (copied by the seek).
            unsafe { ffi::leveldb_iter_seek(self.it.as_ptr(), from.as_ptr().cast(), from.len()) }
        }
    }

    fn valid(&self) -> bool {
        // SAFETY: the iterator is live.
        unsafe { ffi::leveldb_iter_valid(self.it.as_ptr()) != 0 }
    }

    fn next(&mut self) {
        debug_assert!(self.valid());
        // SAFETY: the iterator is live and valid (the caller checked), as
        // leveldb_iter_next requires.
        unsafe { ffi::leveldb_iter_next(self.it.as_ptr()) }
    }

    /// The current pair. Only while `valid()`; the slices borrow `self`, and
    /// LevelDB keeps them valid until the iterator next moves, which needs
    /// `&mut self`.
    fn pair(&self) -> (&[u8], &[u8]) {
        debug_assert!(self.valid());
        let (mut klen, mut vlen) = (0usize, 0usize);
        // SAFETY: the iterator is live and valid; key/value return pointers
        // to `klen`/`vlen` bytes owned by the iterator that stay unchanged
        // until it moves or is destroyed, which the borrow of `self` rules
        // out for the slices' lifetime.
        unsafe {
            let k = ffi::leveldb_iter_key(self.it.as_ptr(), &mut klen);
            let v = ffi::leveldb_iter_value(self.it.as_ptr(), &mut vlen);
            (borrowed(k, klen), borrowed(v, vlen))
        }
    }

    /// The iterator's status: an error if it stopped because of one.
    fn status(&self) -> Result<()> {
        let mut e = ErrPtr::new(ffi::leveldb_free);
        // SAFETY: the iterator is live and `e` is a null errptr.
        unsafe { ffi::leveldb_iter_get_error(self.it.as_ptr(), e.as_out()) };
        e.check(STORE)
    }
}

impl Store for LevelDb {
    fn write_batch(&self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        // SAFETY: a new, empty batch owned by us, released with
        // leveldb_writebatch_destroy; used by this call (thread) only.
        let batch = unsafe {
            Handle::new(
                STORE,
                "leveldb_writebatch_create",
                ffi::leveldb_writebatch_create(),
                ffi::leveldb_writebatch_destroy,
            )?
        };
        for (k, v) in pairs {
            let ((kp, kl), (vp, vl)) = (c_slice(k), c_slice(v));
            // SAFETY: the batch is live; key and value point to kl/vl
            // readable bytes for the call, which copies them into the batch.
            unsafe { ffi::leveldb_writebatch_put(batch.as_ptr(), kp, kl, vp, vl) };
        }
        let mut e = ErrPtr::new(ffi::leveldb_free);
        // SAFETY: DB, write options and batch are live; `e` is a null
        // errptr. A DB allows concurrent writes; the batch is ours alone.
        unsafe {
            ffi::leveldb_write(
                self.db.as_ptr(),
                self.write.as_ptr(),
                batch.as_ptr(),
                e.as_out(),
            )
        };
        e.check(STORE)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let ((kp, kl), (vp, vl)) = (c_slice(key), c_slice(value));
        let mut e = ErrPtr::new(ffi::leveldb_free);
        // SAFETY: DB and write options are live; key and value point to
        // kl/vl readable bytes for the call (LevelDB copies them); `e` is a
        // null errptr.
        unsafe {
            ffi::leveldb_put(
                self.db.as_ptr(),
                self.write.as_ptr(),
                kp,
                kl,
                vp,
                vl,
                e.as_out(),
            )
        };
        e.check(STORE)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let (kp, kl) = c_slice(key);
        let mut vlen = 0usize;
        let mut e = ErrPtr::new(ffi::leveldb_free);
        // SAFETY: DB and read options are live; the key points to kl
        // readable bytes for the call; `vlen` and `e` are valid out-params.
        let v = unsafe {
            ffi::leveldb_get(
                self.db.as_ptr(),
                self.read.as_ptr(),
                kp,
                kl,
                &mut vlen,
                e.as_out(),
            )
        };
        if v.is_null() {
            // Absent, or an error (which `check` turns into Err).
            e.check(STORE)?;
            return Ok(false);
        }
        // A found value is a malloc'd copy, non-null even when empty (glibc's
        // malloc(0) returns a unique pointer), so null means absent.
        // SAFETY: leveldb_get returned a malloc'd buffer of `vlen` bytes that
        // the caller owns and must release with leveldb_free.
        let v = unsafe { CBuf::new(v, vlen, ffi::leveldb_free) };
        e.check(STORE)?;
        out.clear();
        out.extend_from_slice(v.as_bytes());
        Ok(true)
    }

    fn scan(&self, from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let mut it = Iter::new(self)?;
        it.seek(from);
        while it.valid() {
            let (k, v) = it.pair();
            if !visit(k, v) {
                break;
            }
            it.next();
        }
        it.status()
    }

    /// Flushes the memtable to a table file and waits for it, so the space
    /// used is measured on files, not on log plus memory.
    ///
    /// LevelDB has no flush call: `leveldb_compact_range` is the only way to
    /// force one. It always flushes the memtable first, then compacts, level
    /// by level, the files overlapping the range. A null..null range would
    /// therefore rewrite the whole database (a full compaction, measuring a
    /// state a running store is rarely in), so the range given is the empty
    /// key alone, ["", ""]: no file overlaps it unless the store holds the
    /// empty key (the benchmark's keys are never empty), so all that is done
    /// is the flush. Background compactions the flush triggers run on their
    /// own schedule, as in normal use.
    ///
    /// The C call reports no error (LevelDB drops the flush's status); a
    /// failed flush is a background error that the next write returns.
    fn settle(&self) -> Result<()> {
        let (empty, len) = c_slice(b"");
        // SAFETY: the DB is live; both range ends are a non-null pointer
        // with length 0, which LevelDB reads as the empty key without
        // dereferencing it. Compacting is allowed concurrently with other
        // calls on the DB.
        unsafe { ffi::leveldb_compact_range(self.db.as_ptr(), empty, len, empty, len) };
        Ok(())
    }
}
