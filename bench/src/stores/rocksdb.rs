//! RocksDB, through hand-written FFI to the C API (`rocksdb/c.h`) of Debian's
//! system library (librocksdb-dev 7.8.3; see bench/setup.sh; bench/build.rs
//! links it when the `peers` feature is on).
//!
//! Why not the `rocksdb` crate: it builds RocksDB (version 11 today) from its
//! C++ source, which takes 20+ minutes on our 2-core machine and is too slow
//! for CI. The C API is stable and small, and we bind only the functions
//! used here.
//!
//! Configuration is what a user gets by default, made durable: the write-ahead
//! log on (the default, set explicitly) and `WriteOptions::sync = true` on
//! every write, so a write returns after the WAL is synced (fdatasync, as
//! `use_fsync` defaults to false). Batches go through `rocksdb_writebatch_t`
//! and `rocksdb_write`, single pairs through `rocksdb_put`. The only other
//! option set is `create_if_missing`; block cache, memtable size, compression
//! and compaction are RocksDB's defaults, which its documentation recommends
//! starting from.

use super::ffi_util::{borrowed, c_path, c_slice, CBuf, ErrPtr, Handle};
use super::{Kind, Result, Settings, Store};
use std::path::Path;

const STORE: &str = "rocksdb";

pub const KIND: Kind = Kind {
    name: STORE,
    library: "RocksDB 7.8.3 (Debian librocksdb-dev) through its C API (hand-written FFI); \
              default options (8 MiB LRU block cache, 64 MiB memtable, Snappy compression, \
              leveled compaction, 2 background jobs, no Bloom filter) plus create_if_missing",
    durability: "WAL on, WriteOptions sync = true for every write (batches and single puts): \
                 a write returns after the WAL is fdatasync'd; settle flushes memtables \
                 (no forced compaction)",
    open,
};

/// The C API, as declared in /usr/include/rocksdb/c.h (7.8.3). Only what this
/// adapter calls. `unsigned char` booleans are `c_uchar`.
mod ffi {
    use std::ffi::{c_char, c_int, c_uchar, c_void};

    super::super::ffi_util::opaque_types!(
        rocksdb_t,
        rocksdb_options_t,
        rocksdb_writeoptions_t,
        rocksdb_readoptions_t,
        rocksdb_flushoptions_t,
        rocksdb_writebatch_t,
        rocksdb_iterator_t,
        rocksdb_cache_t,
        rocksdb_block_based_table_options_t,
    );

    // Linked by bench/build.rs (`cargo:rustc-link-lib=dylib=rocksdb`).
    extern "C" {
        pub(super) fn rocksdb_options_create() -> *mut rocksdb_options_t;
        pub(super) fn rocksdb_options_destroy(options: *mut rocksdb_options_t);
        pub(super) fn rocksdb_options_set_create_if_missing(
            options: *mut rocksdb_options_t,
            v: c_uchar,
        );

        pub(super) fn rocksdb_cache_create_lru(capacity: usize) -> *mut rocksdb_cache_t;
        pub(super) fn rocksdb_cache_destroy(cache: *mut rocksdb_cache_t);
        pub(super) fn rocksdb_block_based_options_create(
        ) -> *mut rocksdb_block_based_table_options_t;
        pub(super) fn rocksdb_block_based_options_destroy(
            options: *mut rocksdb_block_based_table_options_t,
        );
        pub(super) fn rocksdb_block_based_options_set_block_cache(
            options: *mut rocksdb_block_based_table_options_t,
            block_cache: *mut rocksdb_cache_t,
        );
        pub(super) fn rocksdb_options_set_block_based_table_factory(
            opt: *mut rocksdb_options_t,
            table_options: *mut rocksdb_block_based_table_options_t,
        );

        pub(super) fn rocksdb_open(
            options: *const rocksdb_options_t,
            name: *const c_char,
            errptr: *mut *mut c_char,
        ) -> *mut rocksdb_t;
        pub(super) fn rocksdb_close(db: *mut rocksdb_t);

        pub(super) fn rocksdb_writeoptions_create() -> *mut rocksdb_writeoptions_t;
        pub(super) fn rocksdb_writeoptions_destroy(options: *mut rocksdb_writeoptions_t);
        pub(super) fn rocksdb_writeoptions_set_sync(
            options: *mut rocksdb_writeoptions_t,
            v: c_uchar,
        );
        pub(super) fn rocksdb_writeoptions_disable_WAL(
            options: *mut rocksdb_writeoptions_t,
            disable: c_int,
        );

        pub(super) fn rocksdb_readoptions_create() -> *mut rocksdb_readoptions_t;
        pub(super) fn rocksdb_readoptions_destroy(options: *mut rocksdb_readoptions_t);

        pub(super) fn rocksdb_flushoptions_create() -> *mut rocksdb_flushoptions_t;
        pub(super) fn rocksdb_flushoptions_destroy(options: *mut rocksdb_flushoptions_t);
        pub(super) fn rocksdb_flushoptions_set_wait(
            options: *mut rocksdb_flushoptions_t,
            v: c_uchar,
        );

        pub(super) fn rocksdb_put(
            db: *mut rocksdb_t,
            options: *const rocksdb_writeoptions_t,
            key: *const c_char,
            keylen: usize,
            val: *const c_char,
            vallen: usize,
            errptr: *mut *mut c_char,
        );
        pub(super) fn rocksdb_write(
            db: *mut rocksdb_t,
            options: *const rocksdb_writeoptions_t,
            batch: *mut rocksdb_writebatch_t,
            errptr: *mut *mut c_char,
        );
        /// Null if not found, else a malloc'd copy of the value.
        pub(super) fn rocksdb_get(
            db: *mut rocksdb_t,
            options: *const rocksdb_readoptions_t,
            key: *const c_char,
            keylen: usize,
            vallen: *mut usize,
            errptr: *mut *mut c_char,
        ) -> *mut c_char;
        pub(super) fn rocksdb_flush(
            db: *mut rocksdb_t,
            options: *const rocksdb_flushoptions_t,
            errptr: *mut *mut c_char,
        );

        pub(super) fn rocksdb_writebatch_create() -> *mut rocksdb_writebatch_t;
        pub(super) fn rocksdb_writebatch_destroy(batch: *mut rocksdb_writebatch_t);
        pub(super) fn rocksdb_writebatch_put(
            batch: *mut rocksdb_writebatch_t,
            key: *const c_char,
            klen: usize,
            val: *const c_char,
            vlen: usize,
        );

        pub(super) fn rocksdb_create_iterator(
            db: *mut rocksdb_t,
            options: *const rocksdb_readoptions_t,
        ) -> *mut rocksdb_iterator_t;
        pub(super) fn rocksdb_iter_destroy(iter: *mut rocksdb_iterator_t);
        pub(super) fn rocksdb_iter_valid(iter: *const rocksdb_iterator_t) -> c_uchar;
        pub(super) fn rocksdb_iter_seek_to_first(iter: *mut rocksdb_iterator_t);
        pub(super) fn rocksdb_iter_seek(
            iter: *mut rocksdb_iterator_t,
            k: *const c_char,
            klen: usize,
        );
        pub(super) fn rocksdb_iter_next(iter: *mut rocksdb_iterator_t);
        pub(super) fn rocksdb_iter_key(
            iter: *const rocksdb_iterator_t,
            klen: *mut usize,
        ) -> *const c_char;
        pub(super) fn rocksdb_iter_value(
            iter: *const rocksdb_iterator_t,
            vlen: *mut usize,
        ) -> *const c_char;
        pub(super) fn rocksdb_iter_get_error(
            iter: *const rocksdb_iterator_t,
            errptr: *mut *mut c_char,
        );

        pub(super) fn rocksdb_free(ptr: *mut c_void);
    }
}

/// Gives `options` a block cache of `bytes` (an LRU cache, the kind
/// RocksDB makes by default, only larger).
fn set_block_cache(options: &Handle<ffi::rocksdb_options_t>, bytes: u64) -> Result<()> {
    // SAFETY: both constructors return new objects owned by the caller,
    // released with their destroy functions (Handle does so on drop).
    let (cache, table) = unsafe {
        (
            Handle::new(
                STORE,
                "rocksdb_cache_create_lru",
                ffi::rocksdb_cache_create_lru(usize::try_from(bytes).unwrap_or(usize::MAX)),
                ffi::rocksdb_cache_destroy,
            )?,
            Handle::new(
                STORE,
                "rocksdb_block_based_options_create",
                ffi::rocksdb_block_based_options_create(),
                ffi::rocksdb_block_based_options_destroy,
            )?,
        )
    };
    // SAFETY: all three objects are live and ours. The C API keeps C++
    // shared pointers: the table options take a reference to the cache and
    // the options a new table factory copied from the table options, so
    // both handles may be destroyed when this function returns.
    unsafe {
        ffi::rocksdb_block_based_options_set_block_cache(table.as_ptr(), cache.as_ptr());
        ffi::rocksdb_options_set_block_based_table_factory(options.as_ptr(), table.as_ptr());
    }
    Ok(())
}

/// An open database and the options every call uses.
///
/// Field order is drop order: the database closes first, then the options
/// objects are destroyed (RocksDB copies options at open and per call, so
/// the order is not required, only tidy).
struct RocksDb {
    db: Handle<ffi::rocksdb_t>,
    write: Handle<ffi::rocksdb_writeoptions_t>,
    read: Handle<ffi::rocksdb_readoptions_t>,
    flush: Handle<ffi::rocksdb_flushoptions_t>,
}

// SAFETY: "A DB is safe for concurrent access from multiple threads without
// any external synchronization" (rocksdb/db.h), and it is not tied to the
// thread that opened it. The write, read and flush options are set up once
// in `open` and never modified afterwards: calls only read them through
// `const` pointers, which is safe from any number of threads. Iterators and
// write batches, which are not thread-safe, are created and destroyed inside
// a single call and never shared.
unsafe impl Send for RocksDb {}
// SAFETY: as for Send above: every `&self` method only makes calls that
// RocksDB allows concurrently on one DB, with read-only options.
unsafe impl Sync for RocksDb {}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Store>> {
    let name = c_path(STORE, dir)?;

    // SAFETY: rocksdb_options_create takes no arguments and returns a new
    // object owned by the caller, released with rocksdb_options_destroy.
    let options = unsafe {
        Handle::new(
            STORE,
            "rocksdb_options_create",
            ffi::rocksdb_options_create(),
            ffi::rocksdb_options_destroy,
        )?
    };
    // SAFETY: `options` is a live options object owned by us.
    unsafe { ffi::rocksdb_options_set_create_if_missing(options.as_ptr(), 1) };
    if let Some(bytes) = settings.cache_bytes {
        set_block_cache(&options, bytes)?;
    }

    let mut e = ErrPtr::new(ffi::rocksdb_free);
    // SAFETY: `options` is live, `name` is a NUL-terminated path that
    // outlives the call, and `e` is a null errptr as the API requires. On
    // success the returned DB is ours, released once with rocksdb_close;
    // RocksDB copies the options, so `options` may be destroyed afterwards.
    let db = unsafe { ffi::rocksdb_open(options.as_ptr(), name.as_ptr(), e.as_out()) };
    e.check(STORE)?;
    // SAFETY: rocksdb_open reported success, so `db` is a live DB we own;
    // rocksdb_close is its release function.
    let db = unsafe { Handle::new(STORE, "rocksdb_open", db, ffi::rocksdb_close)? };

    // SAFETY: the constructor takes no arguments and returns a new object
    // owned by the caller, released with rocksdb_writeoptions_destroy.
    let write = unsafe {
        Handle::new(
            STORE,
            "rocksdb_writeoptions_create",
            ffi::rocksdb_writeoptions_create(),
            ffi::rocksdb_writeoptions_destroy,
        )?
    };
    // SAFETY: `write` is live and ours; nothing else uses it yet.
    unsafe {
        ffi::rocksdb_writeoptions_set_sync(write.as_ptr(), 1);
        ffi::rocksdb_writeoptions_disable_WAL(write.as_ptr(), 0);
    }

    // SAFETY: as for the write options: a new object owned by the caller,
    // released with rocksdb_readoptions_destroy. Left at its defaults.
    let read = unsafe {
        Handle::new(
            STORE,
            "rocksdb_readoptions_create",
            ffi::rocksdb_readoptions_create(),
            ffi::rocksdb_readoptions_destroy,
        )?
    };

    // SAFETY: as above, released with rocksdb_flushoptions_destroy.
    let flush = unsafe {
        Handle::new(
            STORE,
            "rocksdb_flushoptions_create",
            ffi::rocksdb_flushoptions_create(),
            ffi::rocksdb_flushoptions_destroy,
        )?
    };
    // SAFETY: `flush` is live and ours; nothing else uses it yet.
    unsafe { ffi::rocksdb_flushoptions_set_wait(flush.as_ptr(), 1) };

    Ok(Box::new(RocksDb {
        db,
        write,
        read,
        flush,
    }))
}

/// An iterator over the whole database; destroyed on drop, before the DB it
/// reads (it borrows the `RocksDb` for its lifetime).
struct Iter<'db> {
    it: Handle<ffi::rocksdb_iterator_t>,
    _db: std::marker::PhantomData<&'db RocksDb>,
}

impl<'db> Iter<'db> {
    fn new(db: &'db RocksDb) -> Result<Self> {
        // SAFETY: the DB and read options are live for 'db, which the
        // iterator cannot outlive; the new iterator is ours, released with
        // rocksdb_iter_destroy.
        let it = unsafe {
            Handle::new(
                STORE,
                "rocksdb_create_iterator",
                ffi::rocksdb_create_iterator(db.db.as_ptr(), db.read.as_ptr()),
                ffi::rocksdb_iter_destroy,
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
            unsafe { ffi::rocksdb_iter_seek_to_first(self.it.as_ptr()) }
        } else {
            // SAFETY: the iterator is live and used by this thread only;
            // the key is read during the call only (copied by the seek).
            unsafe { ffi::rocksdb_iter_seek(self.it.as_ptr(), from.as_ptr().cast(), from.len()) }
        }
    }

    fn valid(&self) -> bool {
        // SAFETY: the iterator is live.
        unsafe { ffi::rocksdb_iter_valid(self.it.as_ptr()) != 0 }
    }

    fn next(&mut self) {
        debug_assert!(self.valid());
        // SAFETY: the iterator is live and valid (the caller checked), as
        // rocksdb_iter_next requires.
        unsafe { ffi::rocksdb_iter_next(self.it.as_ptr()) }
    }

    /// The current pair. Only while `valid()`; the slices borrow `self`, and
    /// RocksDB keeps them valid until the iterator next moves, which needs
    /// `&mut self`.
    fn pair(&self) -> (&[u8], &[u8]) {
        debug_assert!(self.valid());
        let (mut klen, mut vlen) = (0usize, 0usize);
        // SAFETY: the iterator is live and valid; key/value return pointers
        // to `klen`/`vlen` bytes owned by the iterator that stay unchanged
        // until it moves or is destroyed, which the borrow of `self` rules
        // out for the slices' lifetime.
        unsafe {
            let k = ffi::rocksdb_iter_key(self.it.as_ptr(), &mut klen);
            let v = ffi::rocksdb_iter_value(self.it.as_ptr(), &mut vlen);
            (borrowed(k, klen), borrowed(v, vlen))
        }
    }

    /// The iterator's status: an error if it stopped because of one.
    fn status(&self) -> Result<()> {
        let mut e = ErrPtr::new(ffi::rocksdb_free);
        // SAFETY: the iterator is live and `e` is a null errptr.
        unsafe { ffi::rocksdb_iter_get_error(self.it.as_ptr(), e.as_out()) };
        e.check(STORE)
    }
}

impl Store for RocksDb {
    fn write_batch(&self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        // SAFETY: a new, empty batch owned by us, released with
        // rocksdb_writebatch_destroy; used by this call (thread) only.
        let batch = unsafe {
            Handle::new(
                STORE,
                "rocksdb_writebatch_create",
                ffi::rocksdb_writebatch_create(),
                ffi::rocksdb_writebatch_destroy,
            )?
        };
        for (k, v) in pairs {
            let ((kp, kl), (vp, vl)) = (c_slice(k), c_slice(v));
            // SAFETY: the batch is live; key and value point to kl/vl
            // readable bytes for the call, which copies them into the batch.
            unsafe { ffi::rocksdb_writebatch_put(batch.as_ptr(), kp, kl, vp, vl) };
        }
        let mut e = ErrPtr::new(ffi::rocksdb_free);
        // SAFETY: DB, write options and batch are live; `e` is a null
        // errptr. A DB allows concurrent writes; the batch is ours alone.
        unsafe {
            ffi::rocksdb_write(
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
        let mut e = ErrPtr::new(ffi::rocksdb_free);
        // SAFETY: DB and write options are live; key and value point to
        // kl/vl readable bytes for the call (RocksDB copies them); `e` is a
        // null errptr.
        unsafe {
            ffi::rocksdb_put(
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
        let mut e = ErrPtr::new(ffi::rocksdb_free);
        // SAFETY: DB and read options are live; the key points to kl
        // readable bytes for the call; `vlen` and `e` are valid out-params.
        let v = unsafe {
            ffi::rocksdb_get(
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
        // SAFETY: rocksdb_get returned a malloc'd buffer of `vlen` bytes that
        // the caller owns and must release with rocksdb_free.
        let v = unsafe { CBuf::new(v, vlen, ffi::rocksdb_free) };
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

    /// Flushes the memtables to SST files and waits for the flush, so the
    /// space used is measured on files, not on WAL plus memory. Compactions
    /// are left to RocksDB's own schedule: no full compaction is forced
    /// (that would measure a state a running store is rarely in).
    fn settle(&self) -> Result<()> {
        let mut e = ErrPtr::new(ffi::rocksdb_free);
        // SAFETY: DB and flush options are live; `e` is a null errptr.
        // Flushing is allowed concurrently with other calls on the DB.
        unsafe { ffi::rocksdb_flush(self.db.as_ptr(), self.flush.as_ptr(), e.as_out()) };
        e.check(STORE)
    }
}
