//! kivi for Python: the native module `kivi._kivi` of the `kivi-db` package
//! (python/kivi/__init__.py re-exports it; the exception classes live in
//! python/kivi/_errors.py, so that they can have two bases, e.g.
//! `InvalidArgumentError(Error, ValueError)`).
//!
//! Bytes in, bytes out: keys and values are `bytes` (borrowed, no copy),
//! `bytearray`, `memoryview` or anything else with the buffer protocol
//! (copied); `str` is refused with `TypeError`.
//!
//! GIL policy: every call that may wait for the disk (open, close, put,
//! delete, write, the conditional writes, `Db.get`, checkpoint, compact,
//! table create) runs detached from the interpreter, so other Python
//! threads run meanwhile (and concurrent writers share group commits).
//! Iterators fill a chunk of pairs per call into Rust, attached (they make
//! Python objects from pages in place, without copying them first).
//!
//! Closing: `Db.close` marks the store closed, drops the engine snapshot or
//! scan of every live `Snapshot` and iterator (so that the store's lock and
//! files are let go when `close` returns, whatever Python still refers to),
//! then closes the engine's `Db`. Those objects raise `ClosedError`
//! afterwards; none of them can reach a closed store.

use kivi::table::{Compression, Table as EngineTable, TableIter, TableWriter, WriterOptions};
use kivi::{Db as EngineDb, Durability, Options, Scan, WriteBatch as EngineBatch, WriteOutcome};
use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyMemoryView, PyString, PyTuple, PyType};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Bound as RangeBound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

// The engine's own allocations (batches, the write buffer, pages) go through
// mimalloc, as in the kivi binary, without huge pages (below): a 1M-pair
// load from Python (bench/python/compare.py's) ran at 1.02-1.29 M pairs/s
// against 0.84-0.90 M/s with glibc's malloc, alternated three times; with
// glibc ~19% of the load's samples were malloc and free. Python's objects
// keep Python's allocator; nothing allocated by one is freed by the other.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_allow_thp` in the v3 mimalloc that libmimalloc-sys
/// builds by default (its mimalloc.h enum, checked by compiling against the
/// header: 43; v2 numbers it 37). libmimalloc-sys names no constant for it.
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Asks mimalloc not to advise huge pages for the memory it maps from now
/// on. With them, the first touch of each 2 MiB region has the kernel zero
/// all of it, and a growing tree touches fresh regions all the time: the
/// same load ran at 0.75-0.87 M/s with huge pages (`clear_page_erms` 37% of
/// its samples). Set after mimalloc's start, the option changes only
/// mimalloc's own mappings: the process's setting (Python's memory, the
/// sealed tables' maps) is left alone, as a library should (`kivi serve`,
/// which owns its process, turns huge pages off for all of it).
fn keep_allocator_off_huge_pages() {
    // SAFETY: mi_option_set only stores an integer in mimalloc's option
    // table (an atomic store); any option number in range and any value are
    // valid, and 43 is allow_thp in the mimalloc this links.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
}

// ---------------------------------------------------------------------------
// Arguments: bytes-like objects.

/// The bytes of a key or value argument: borrowed from a `bytes` object
/// (immutable, so safe to read with the interpreter detached), copied from
/// anything else.
enum Buf<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Buf<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Borrowed(b) => b,
            Buf::Owned(v) => v,
        }
    }
}

impl Buf<'_> {
    fn into_vec(self) -> Vec<u8> {
        match self {
            Buf::Borrowed(b) => b.to_vec(),
            Buf::Owned(v) => v,
        }
    }
}

/// The bytes of `obj`; `TypeError` for `str` (never encoded silently) and
/// for anything without the buffer protocol.
#[inline]
fn bytes_arg<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Buf<'a>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Buf::Borrowed(b.as_bytes()));
    }
    bytes_arg_slow(obj, what)
}

#[cold]
fn bytes_arg_slow<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Buf<'a>> {
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Buf::Owned(b.to_vec()));
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be bytes, not str (encode it first, e.g. s.encode())"
        )));
    }
    match PyMemoryView::from(obj) {
        Ok(view) => {
            let copy = view.call_method0("tobytes")?;
            Ok(Buf::Owned(copy.cast::<PyBytes>()?.as_bytes().to_vec()))
        }
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be bytes-like (bytes, bytearray, memoryview), not {}",
            obj.get_type().name()?
        ))),
    }
}

fn opt_bound(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Vec<u8>>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Some(bytes_arg(o, what)?.into_vec())),
    }
}

/// A ttl in seconds as an engine deadline (milliseconds, rounded up).
fn deadline_after(db: &EngineDb, ttl: Option<f64>) -> PyResult<Option<kivi::Deadline>> {
    match ttl {
        None => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 => {
            let d = Duration::try_from_secs_f64(t)
                .map_err(|_| PyValueError::new_err(format!("ttl {t} is out of range")))?;
            Ok(Some(db.clock().after(d)))
        }
        Some(t) => Err(PyValueError::new_err(format!(
            "ttl must be a positive number of seconds, not {t}"
        ))),
    }
}

/// A ttl as a deadline on the system clock (a batch is not yet tied to a
/// store; `Db.open` uses the system clock).
fn deadline_after_now(ttl: Option<f64>) -> PyResult<Option<kivi::Deadline>> {
    match ttl {
        None => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 => {
            let d = Duration::try_from_secs_f64(t)
                .map_err(|_| PyValueError::new_err(format!("ttl {t} is out of range")))?;
            Ok(Some(kivi::Deadline::from_system_time(
                SystemTime::now() + d,
            )))
        }
        Some(t) => Err(PyValueError::new_err(format!(
            "ttl must be a positive number of seconds, not {t}"
        ))),
    }
}

// ---------------------------------------------------------------------------
// Errors.

fn raise<'py>(py: Python<'py>, class: &str, args: impl pyo3::call::PyCallArgs<'py>) -> PyErr {
    let made = py
        .import("kivi._errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1(args));
    match made {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

fn io_error(
    py: Python<'_>,
    class: &str,
    source: &std::io::Error,
    msg: String,
    target: &str,
) -> PyErr {
    match source.raw_os_error() {
        Some(errno) => raise(py, class, (errno, msg, target.to_string())),
        None => raise(py, class, (msg,)),
    }
}

fn db_err(e: kivi::Error) -> PyErr {
    use kivi::Error as E;
    Python::attach(|py| {
        let msg = e.to_string();
        match &e {
            E::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock && io.op == "lock store" => {
                raise(
                    py,
                    "LockedError",
                    (libc_ewouldblock(), msg, io.target.clone()),
                )
            }
            E::Io(io) if e.is_full() => io_error(py, "DiskFullError", &io.source, msg, &io.target),
            E::Io(io) => io_error(py, "StorageError", &io.source, msg, &io.target),
            E::Corrupt(_) => raise(py, "CorruptionError", (msg,)),
            E::KeyTooLarge { .. }
            | E::ValueTooLarge { .. }
            | E::BatchTooLarge { .. }
            | E::InvalidOption(_)
            | E::InvalidBatch(_) => raise(py, "InvalidArgumentError", (msg,)),
            E::NotAStore { .. } => raise(py, "NotAStoreError", (msg,)),
            E::ReadOnly => raise(py, "ReadOnlyError", (msg,)),
            E::Closed => closed_err_in(py),
        }
    })
}

/// EWOULDBLOCK (= EAGAIN) on Linux and the BSDs alike enough for an errno.
fn libc_ewouldblock() -> i32 {
    std::io::Error::from(std::io::ErrorKind::WouldBlock)
        .raw_os_error()
        .unwrap_or(11)
}

fn table_err(e: kivi::table::Error) -> PyErr {
    use kivi::table::Error as E;
    Python::attach(|py| {
        let msg = e.to_string();
        match &e {
            E::Io { path, source, .. } => {
                let class = if source.raw_os_error() == Some(28) {
                    "DiskFullError"
                } else {
                    "StorageError"
                };
                io_error(py, class, source, msg, &path.display().to_string())
            }
            E::Corrupt { .. } | E::IdentifierMismatch { .. } => {
                raise(py, "CorruptionError", (msg,))
            }
            E::TooLarge { .. } | E::InvalidArgument(_) => raise(py, "InvalidArgumentError", (msg,)),
        }
    })
}

fn closed_err_in(py: Python<'_>) -> PyErr {
    raise(py, "ClosedError", ("the store is closed",))
}

fn closed_err() -> PyErr {
    Python::attach(closed_err_in)
}

fn condition_failed(op: usize) -> PyErr {
    Python::attach(|py| {
        let err = raise(
            py,
            "ConditionFailed",
            (format!(
                "operation {op} of the batch found its condition false; nothing was applied"
            ),),
        );
        let _ = err.value(py).setattr("op", op);
        err
    })
}

// ---------------------------------------------------------------------------
// The store.

/// What every object made from one `Db` shares: the engine's handle (taken
/// by `close`), and the readers that `close` must cut off.
struct Shared {
    db: RwLock<Option<EngineDb>>,
    closed: AtomicBool,
    /// Live snapshots and iterators (dead ones are pruned as new ones come).
    readers: Mutex<Vec<Weak<dyn Reader>>>,
}

/// An engine object holding a version of the store (a snapshot, a scan).
trait Reader: Send + Sync {
    /// Drops the engine object; the reader raises `ClosedError` afterwards.
    fn release(&self);
}

impl Shared {
    #[inline]
    fn check(&self) -> PyResult<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(closed_err())
        } else {
            Ok(())
        }
    }

    /// Runs `f` on the open store, with the interpreter detached.
    #[inline]
    fn with_db<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&EngineDb) -> kivi::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let guard = self.db.read();
            match guard.as_ref() {
                Some(db) => f(db).map_err(Some),
                None => Err(None),
            }
        })
        .map_err(|e| e.map_or_else(closed_err, db_err))
    }

    /// Runs `f` on the open store, attached (for calls that never wait).
    fn with_db_attached<T>(&self, f: impl FnOnce(&EngineDb) -> PyResult<T>) -> PyResult<T> {
        let guard = self.db.read();
        match guard.as_ref() {
            Some(db) => f(db),
            None => Err(closed_err()),
        }
    }

    /// Puts a new snapshot or iterator where `close` finds it. One made
    /// while the store was closing lets go of its version itself: `close`
    /// sets `closed` before it takes the list, so either it saw this one
    /// or this sees `closed`.
    fn register(&self, reader: Arc<dyn Reader>) {
        {
            let mut readers = self.readers.lock();
            readers.retain(|r| r.strong_count() > 0);
            readers.push(Arc::downgrade(&reader));
        }
        if self.closed.load(Ordering::Acquire) {
            reader.release();
        }
    }
}

// Reused by every `Db.get` on a thread: the engine reads the value into it,
// and the `bytes` object is made from it, one copy and no allocation but
// the object's own.
thread_local! {
    static GET_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A buffer larger than this is not kept for the next get.
const GET_BUF_KEEP: usize = 1 << 20;

/// Pairs an iterator makes per call into Rust.
const CHUNK: usize = 64;

/// A kivi store, opened (or created) in directory `path`.
///
/// Every write is durable when it returns (fdatasync; concurrent writers
/// share one sync per group), unless `no_fsync=True`. Keys and values are
/// bytes-like; `str` raises `TypeError`. Use it as a context manager, or
/// call `close()`; afterwards every call raises `ClosedError`. Safe to share
/// between threads.
#[pyclass(frozen, module = "kivi")]
struct Db {
    shared: Arc<Shared>,
    path: String,
}

/// A range's start and end, owned.
type Bounds = (RangeBound<Vec<u8>>, RangeBound<Vec<u8>>);

fn bounds(start: Option<&Bound<'_, PyAny>>, stop: Option<&Bound<'_, PyAny>>) -> PyResult<Bounds> {
    let start = opt_bound(start, "start")?.map_or(RangeBound::Unbounded, RangeBound::Included);
    let stop = opt_bound(stop, "stop")?.map_or(RangeBound::Unbounded, RangeBound::Excluded);
    Ok((start, stop))
}

#[pymethods]
impl Db {
    #[new]
    #[pyo3(signature = (path, *, no_fsync = false, read_only = false, cache_bytes = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        no_fsync: bool,
        read_only: bool,
        cache_bytes: Option<u64>,
    ) -> PyResult<Db> {
        let mut opts = Options::default();
        if no_fsync {
            opts.durability = Durability::NoFsync;
        }
        opts.read_only = read_only;
        if let Some(c) = cache_bytes {
            opts.cache_bytes = c;
        }
        let db = py.detach(|| EngineDb::open(&path, opts)).map_err(db_err)?;
        Ok(Db {
            path: db.path().to_string(),
            shared: Arc::new(Shared {
                db: RwLock::new(Some(db)),
                closed: AtomicBool::new(false),
                readers: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The directory the store lives in, as given to open.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Closes the store: waits for calls in flight, cuts off snapshots and
    /// iterators (they raise `ClosedError`), writes a final checkpoint if
    /// much was written since the last, and lets go of the store's files
    /// and lock. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.shared.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let readers = std::mem::take(&mut *self.shared.readers.lock());
        let db = py.detach(|| {
            for r in readers.iter().filter_map(Weak::upgrade) {
                r.release();
            }
            self.shared.db.write().take()
        });
        match db {
            Some(db) => py.detach(|| db.close()).map_err(db_err),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { " (closed)" } else { "" };
        format!("kivi.Db({:?}){state}", self.path)
    }

    /// The value stored under `key`, or None (also once its ttl has passed).
    //
    // Detached from the interpreter, as every call that may read from disk,
    // so that other threads run while a cold get waits for the disk. On a
    // warm cache that costs little: 100k keys of 16 bytes with 100-byte
    // values, best of 40 runs of 100k random gets on one thread, five
    // alternating runs of each build on a 2-core VM: 749-921 ns a get
    // detached, 707-886 ns attached. The best runs differ by ~40 ns (~6%),
    // less than the spread between runs of one build.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = bytes_arg(key, "key")?;
        let key: &[u8] = &key;
        GET_BUF.with_borrow_mut(|buf| {
            let found = self.shared.with_db(py, |db| db.get_into(key, buf))?;
            let out = found.then(|| PyBytes::new(py, buf));
            if buf.capacity() > GET_BUF_KEEP {
                *buf = Vec::new();
            }
            Ok(out)
        })
    }

    /// Stores `value` under `key`; durable when it returns. With `ttl`
    /// (seconds, may be fractional; kept to the millisecond), the key is
    /// absent after that long.
    #[pyo3(signature = (key, value, *, ttl = None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<f64>,
    ) -> PyResult<()> {
        let (key, value) = (bytes_arg(key, "key")?, bytes_arg(value, "value")?);
        let (key, value): (&[u8], &[u8]) = (&key, &value);
        if ttl.is_none() {
            return self.shared.with_db(py, |db| db.put(key, value));
        }
        let deadline = self.shared.with_db_attached(|db| deadline_after(db, ttl))?;
        self.shared
            .with_db(py, |db| db.put_with_deadline(key, value, deadline))
    }

    /// Removes `key` (nothing happens if it is absent).
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = bytes_arg(key, "key")?;
        let key: &[u8] = &key;
        self.shared.with_db(py, |db| db.delete(key))
    }

    /// Seconds left before `key` expires; None when it has no ttl.
    /// Raises `KeyError` when the key is absent.
    fn ttl(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
        let k = bytes_arg(key, "key")?;
        let k: &[u8] = &k;
        match self.shared.with_db(py, |db| db.get_with_deadline(k))? {
            None => Err(pyo3::exceptions::PyKeyError::new_err(key.clone().unbind())),
            Some((_, None)) => Ok(None),
            Some((_, Some(d))) => {
                let now = self
                    .shared
                    .with_db_attached(|db| Ok(db.clock().now_millis()))?;
                Ok(Some(d.unix_millis().saturating_sub(now) as f64 / 1000.0))
            }
        }
    }

    /// Removes the ttl of `key`, atomically (a value written meanwhile is
    /// left alone). True if the key is present (it no longer expires),
    /// False if it is absent.
    fn persist(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = bytes_arg(key, "key")?;
        let key: &[u8] = &key;
        self.shared.with_db(py, |db| loop {
            let Some((value, deadline)) = db.get_with_deadline(key)? else {
                return Ok(false);
            };
            if deadline.is_none() {
                return Ok(true);
            }
            let mut b = EngineBatch::new();
            b.compare_and_swap(key, value.clone(), value)?
                .if_deadline(deadline)?
                .with_deadline(None)?;
            if db.write(b)? == WriteOutcome::Applied {
                return Ok(true);
            }
        })
    }

    /// Replaces the value of `key` with `value` if it currently equals
    /// `expected`; returns whether it did.
    #[pyo3(signature = (key, expected, value, *, ttl = None))]
    fn compare_and_swap(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        expected: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<f64>,
    ) -> PyResult<bool> {
        let mut b = EngineBatch::new();
        b.compare_and_swap(
            bytes_arg(key, "key")?.into_vec(),
            bytes_arg(expected, "expected")?.into_vec(),
            bytes_arg(value, "value")?.into_vec(),
        )
        .map_err(db_err)?;
        self.conditional(py, b, ttl)
    }

    /// Deletes `key` if its value currently equals `expected`; returns
    /// whether it did.
    fn compare_and_delete(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        expected: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (key, expected) = (bytes_arg(key, "key")?, bytes_arg(expected, "expected")?);
        let (key, expected): (&[u8], &[u8]) = (&key, &expected);
        self.shared
            .with_db(py, |db| db.compare_and_delete(key, expected))
    }

    /// Stores `value` under `key` if the key is absent; returns whether it did.
    #[pyo3(signature = (key, value, *, ttl = None))]
    fn insert_if_absent(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<f64>,
    ) -> PyResult<bool> {
        let mut b = EngineBatch::new();
        b.insert_if_absent(
            bytes_arg(key, "key")?.into_vec(),
            bytes_arg(value, "value")?.into_vec(),
        )
        .map_err(db_err)?;
        self.conditional(py, b, ttl)
    }

    /// Replaces the value of `key` if the key is present; returns whether it did.
    #[pyo3(signature = (key, value, *, ttl = None))]
    fn update_if_present(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<f64>,
    ) -> PyResult<bool> {
        let mut b = EngineBatch::new();
        b.update_if_present(
            bytes_arg(key, "key")?.into_vec(),
            bytes_arg(value, "value")?.into_vec(),
        )
        .map_err(db_err)?;
        self.conditional(py, b, ttl)
    }

    /// Applies `batch` atomically: all of it or nothing; durable when it
    /// returns. Raises `ConditionFailed` (its `op` is the index of the
    /// first operation whose condition was false) when a condition does not
    /// hold, and then nothing was applied. The batch is emptied either way.
    fn write(&self, py: Python<'_>, batch: &Bound<'_, WriteBatch>) -> PyResult<()> {
        self.write_batch(py, batch.get())
    }

    /// A new `WriteBatch` that, used as a context manager, is written to
    /// this store when the block ends without an exception (and dropped if
    /// one is raised): `with db.batch() as b: b.put(...)`.
    fn batch(slf: &Bound<'_, Self>) -> WriteBatch {
        WriteBatch {
            inner: Mutex::new(EngineBatch::new()),
            db: Some(slf.clone().unbind()),
        }
    }

    /// A consistent, read-only view of the store as of now. Free to take;
    /// it never blocks writers.
    fn snapshot(&self) -> PyResult<Snapshot> {
        self.shared.check()?;
        let snap = self.shared.with_db_attached(|db| Ok(db.snapshot()))?;
        let inner = Arc::new(SnapInner(Mutex::new(Some(snap))));
        self.shared.register(inner.clone());
        Ok(Snapshot {
            shared: self.shared.clone(),
            inner,
        })
    }

    /// `(key, value)` pairs with `start <= key < stop` (None: unbounded) in
    /// key order, or descending with `reverse=True`; from a snapshot taken
    /// when called.
    #[pyo3(signature = (start = None, stop = None, *, reverse = false))]
    fn range(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<RangeIter> {
        let (s, e) = bounds(start, stop)?;
        let scan = self.shared.with_db_attached(|db| {
            Ok(if reverse {
                db.scan_rev((s, e))
            } else {
                db.scan((s, e))
            })
        })?;
        Ok(RangeIter::new(&self.shared, scan, Yield::Pairs))
    }

    /// The keys of `range(start, stop, reverse=reverse)`.
    #[pyo3(signature = (start = None, stop = None, *, reverse = false))]
    fn keys(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<RangeIter> {
        let mut it = self.range(start, stop, reverse)?;
        it.kind = Yield::Keys;
        Ok(it)
    }

    /// The values of `range(start, stop, reverse=reverse)`.
    #[pyo3(signature = (start = None, stop = None, *, reverse = false))]
    fn values(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<RangeIter> {
        let mut it = self.range(start, stop, reverse)?;
        it.kind = Yield::Values;
        Ok(it)
    }

    /// Every `(key, value)` pair in key order (the same as `iter(db)`).
    fn items(&self) -> PyResult<RangeIter> {
        self.range(None, None, false)
    }

    fn __iter__(&self) -> PyResult<RangeIter> {
        self.range(None, None, false)
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.get(py, key)?.is_some())
    }

    /// The store's numbers (pairs, bytes, segments, cache, cleaner, ...),
    /// as `kivi stats --json` prints them.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stats = self.shared.with_db(py, |db| db.stats())?;
        let json =
            serde_json::to_string(&stats).map_err(|e| PyValueError::new_err(e.to_string()))?;
        py.import("json")?.call_method1("loads", (json,))
    }

    /// Writes a checkpoint now: reopening afterwards replays nothing.
    fn checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        self.shared.with_db(py, |db| db.checkpoint())
    }

    /// Copies every live page into new files and deletes the old ones:
    /// afterwards the files hold little more than the live data.
    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        self.shared.with_db(py, |db| db.compact())
    }
}

impl Db {
    fn write_batch(&self, py: Python<'_>, batch: &WriteBatch) -> PyResult<()> {
        let b = std::mem::take(&mut *batch.inner.lock());
        match self.shared.with_db(py, move |db| db.write(b))? {
            WriteOutcome::Applied => Ok(()),
            WriteOutcome::ConditionFailed { op } => Err(condition_failed(op)),
        }
    }

    fn conditional(&self, py: Python<'_>, mut b: EngineBatch, ttl: Option<f64>) -> PyResult<bool> {
        if ttl.is_some() {
            let d = self.shared.with_db_attached(|db| deadline_after(db, ttl))?;
            b.with_deadline(d).map_err(db_err)?;
        }
        let outcome = self.shared.with_db(py, move |db| db.write(b))?;
        Ok(outcome == WriteOutcome::Applied)
    }
}

// ---------------------------------------------------------------------------
// Batches.

/// A group of writes applied all together or not at all, in the order
/// added (a later write to a key overrides an earlier one; conditions see
/// the batch's earlier operations). Write it with `Db.write(batch)`, or
/// make it with `Db.batch()` and use it as a context manager.
#[pyclass(frozen, module = "kivi")]
struct WriteBatch {
    inner: Mutex<EngineBatch>,
    /// The store a batch from `Db.batch()` commits to on a clean exit.
    db: Option<Py<Db>>,
}

#[pymethods]
impl WriteBatch {
    #[new]
    fn new() -> Self {
        WriteBatch {
            inner: Mutex::new(EngineBatch::new()),
            db: None,
        }
    }

    /// Stores `value` under `key` (expiring after `ttl` seconds if given;
    /// the ttl counts from now, not from the write).
    #[pyo3(signature = (key, value, *, ttl = None))]
    fn put(
        &self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<f64>,
    ) -> PyResult<()> {
        let (k, v) = (
            bytes_arg(key, "key")?.into_vec(),
            bytes_arg(value, "value")?.into_vec(),
        );
        let d = deadline_after_now(ttl)?;
        let mut b = self.inner.lock();
        let op = b.put(k, v).map_err(db_err)?;
        if d.is_some() {
            op.with_deadline(d).map_err(db_err)?;
        }
        Ok(())
    }

    /// Removes `key`.
    fn delete(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = bytes_arg(key, "key")?.into_vec();
        self.inner.lock().delete(k).map_err(db_err)?;
        Ok(())
    }

    /// Condition: `key` holds `expected`; then it is replaced by `value`.
    #[pyo3(signature = (key, expected, value, *, ttl = None))]
    fn compare_and_swap(
        &self,
        key: &Bound<'_, PyAny>,
        expected: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<f64>,
    ) -> PyResult<()> {
        let (k, e, v) = (
            bytes_arg(key, "key")?.into_vec(),
            bytes_arg(expected, "expected")?.into_vec(),
            bytes_arg(value, "value")?.into_vec(),
        );
        let d = deadline_after_now(ttl)?;
        let mut b = self.inner.lock();
        let op = b.compare_and_swap(k, e, v).map_err(db_err)?;
        if d.is_some() {
            op.with_deadline(d).map_err(db_err)?;
        }
        Ok(())
    }

    /// Condition: `key` holds `expected`; then it is deleted.
    fn compare_and_delete(
        &self,
        key: &Bound<'_, PyAny>,
        expected: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (k, e) = (
            bytes_arg(key, "key")?.into_vec(),
            bytes_arg(expected, "expected")?.into_vec(),
        );
        self.inner.lock().compare_and_delete(k, e).map_err(db_err)?;
        Ok(())
    }

    /// Condition: `key` is absent; then `value` is stored under it.
    #[pyo3(signature = (key, value, *, ttl = None))]
    fn insert_if_absent(
        &self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<f64>,
    ) -> PyResult<()> {
        let (k, v) = (
            bytes_arg(key, "key")?.into_vec(),
            bytes_arg(value, "value")?.into_vec(),
        );
        let d = deadline_after_now(ttl)?;
        let mut b = self.inner.lock();
        let op = b.insert_if_absent(k, v).map_err(db_err)?;
        if d.is_some() {
            op.with_deadline(d).map_err(db_err)?;
        }
        Ok(())
    }

    /// Condition: `key` is present; then its value is replaced by `value`.
    #[pyo3(signature = (key, value, *, ttl = None))]
    fn update_if_present(
        &self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        ttl: Option<f64>,
    ) -> PyResult<()> {
        let (k, v) = (
            bytes_arg(key, "key")?.into_vec(),
            bytes_arg(value, "value")?.into_vec(),
        );
        let d = deadline_after_now(ttl)?;
        let mut b = self.inner.lock();
        let op = b.update_if_present(k, v).map_err(db_err)?;
        if d.is_some() {
            op.with_deadline(d).map_err(db_err)?;
        }
        Ok(())
    }

    /// Drops every operation.
    fn clear(&self) {
        *self.inner.lock() = EngineBatch::new();
    }

    fn __len__(&self) -> usize {
        self.inner.lock().len()
    }

    fn __bool__(&self) -> bool {
        true
    }

    /// Bytes of keys and values in the batch.
    #[getter]
    fn size_bytes(&self) -> usize {
        self.inner.lock().size_bytes()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Writes the batch to the store it came from (`Db.batch()`) when the
    /// block ended cleanly; drops it when an exception is on its way.
    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.clear();
            return Ok(false);
        }
        match &self.db {
            Some(db) => db.get().write_batch(py, self)?,
            None => {
                return Err(PyTypeError::new_err(
                    "only a batch from Db.batch() commits on exit; pass this one to Db.write",
                ))
            }
        }
        Ok(false)
    }
}

// ---------------------------------------------------------------------------
// Snapshots and iterators.

struct SnapInner(Mutex<Option<kivi::Snapshot>>);

impl Reader for SnapInner {
    fn release(&self) {
        self.0.lock().take();
    }
}

/// A consistent, read-only view of the store at the moment it was taken:
/// later writes are not in it (expiry still goes by the clock: a key whose
/// ttl passes disappears from it too). Raises `ClosedError` once its `Db`
/// is closed.
#[pyclass(frozen, module = "kivi")]
struct Snapshot {
    shared: Arc<Shared>,
    inner: Arc<SnapInner>,
}

impl Snapshot {
    fn with<T>(&self, f: impl FnOnce(&kivi::Snapshot) -> PyResult<T>) -> PyResult<T> {
        self.shared.check()?;
        let guard = self.inner.0.lock();
        match guard.as_ref() {
            Some(s) => f(s),
            None => Err(closed_err()),
        }
    }
}

#[pymethods]
impl Snapshot {
    /// The value under `key` in this snapshot, or None.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = bytes_arg(key, "key")?;
        let found = self.with(|s| s.get(&key).map_err(db_err))?;
        Ok(found.map(|v| PyBytes::new(py, &v)))
    }

    /// Pairs of this snapshot in `[start, stop)`, as `Db.range`.
    #[pyo3(signature = (start = None, stop = None, *, reverse = false))]
    fn range(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<RangeIter> {
        let (s, e) = bounds(start, stop)?;
        let scan = self.with(|snap| {
            Ok(if reverse {
                snap.scan_rev((s, e))
            } else {
                snap.scan((s, e))
            })
        })?;
        Ok(RangeIter::new(&self.shared, scan, Yield::Pairs))
    }

    /// Keys of this snapshot in `[start, stop)`, as `Db.keys`.
    #[pyo3(signature = (start = None, stop = None, *, reverse = false))]
    fn keys(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<RangeIter> {
        let mut it = self.range(start, stop, reverse)?;
        it.kind = Yield::Keys;
        Ok(it)
    }

    fn __iter__(&self) -> PyResult<RangeIter> {
        self.range(None, None, false)
    }

    /// Pairs in this snapshot (may read pages).
    fn __len__(&self) -> PyResult<usize> {
        self.with(|s| Ok(s.len().map_err(db_err)? as usize))
    }

    /// Sequence number of the last commit this snapshot includes.
    #[getter]
    fn seq(&self) -> PyResult<u64> {
        self.with(|s| Ok(s.seq()))
    }

    /// Lets go of the snapshot's version now (rather than when collected).
    fn close(&self) {
        self.inner.release();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }
}

#[derive(Clone, Copy)]
enum Yield {
    Pairs,
    Keys,
    Values,
}

struct IterState {
    scan: Option<Scan>,
    /// Made, not yet returned.
    ready: VecDeque<Py<PyAny>>,
}

struct IterInner(Mutex<IterState>);

impl Reader for IterInner {
    fn release(&self) {
        let mut s = self.0.lock();
        s.scan = None;
    }
}

/// An iterator over a range of a `Db` or `Snapshot`: `(key, value)` tuples
/// (or keys, or values). Reads a consistent version; raises `ClosedError`
/// once its `Db` is closed.
#[pyclass(frozen, module = "kivi", name = "Iter")]
struct RangeIter {
    shared: Arc<Shared>,
    inner: Arc<IterInner>,
    kind: Yield,
}

impl RangeIter {
    fn new(shared: &Arc<Shared>, scan: Scan, kind: Yield) -> RangeIter {
        let inner = Arc::new(IterInner(Mutex::new(IterState {
            scan: Some(scan),
            ready: VecDeque::new(),
        })));
        shared.register(inner.clone());
        RangeIter {
            shared: shared.clone(),
            inner,
            kind,
        }
    }
}

#[pymethods]
impl RangeIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.shared.check()?;
        let mut state = self.inner.0.lock();
        if let Some(item) = state.ready.pop_front() {
            return Ok(Some(item));
        }
        let IterState { scan, ready } = &mut *state;
        let Some(s) = scan.as_mut() else {
            // Ran out, or cut off by close (checked above).
            return Ok(None);
        };
        // A chunk of pairs per call, made into Python objects straight
        // from the pages the scan lends.
        for _ in 0..CHUNK {
            match s.next() {
                Ok(Some((k, v))) => ready.push_back(match self.kind {
                    Yield::Pairs => PyTuple::new(py, [PyBytes::new(py, k), PyBytes::new(py, v)])?
                        .into_any()
                        .unbind(),
                    Yield::Keys => PyBytes::new(py, k).into_any().unbind(),
                    Yield::Values => PyBytes::new(py, v).into_any().unbind(),
                }),
                Ok(None) => {
                    *scan = None;
                    break;
                }
                Err(e) => {
                    *scan = None;
                    ready.clear();
                    return Err(db_err(e));
                }
            }
        }
        Ok(state.ready.pop_front())
    }
}

// ---------------------------------------------------------------------------
// Sealed tables.

/// A sealed table: an immutable hash table in sparkey's format
/// (`BASE.spl` and `BASE.spi`, plus a checksum sidecar `BASE.kvsum`).
/// `Table(path)` or `Table.open(path)` opens one; `Table.create` writes one.
#[pyclass(frozen, module = "kivi")]
struct Table {
    table: RwLock<Option<Arc<EngineTable>>>,
    closed: Arc<AtomicBool>,
}

impl Table {
    fn open_path(py: Python<'_>, path: PathBuf) -> PyResult<Table> {
        let t = py.detach(|| EngineTable::open(&path)).map_err(table_err)?;
        Ok(Table {
            table: RwLock::new(Some(Arc::new(t))),
            closed: Arc::new(AtomicBool::new(false)),
        })
    }

    #[inline]
    fn with<T>(&self, f: impl FnOnce(&EngineTable) -> PyResult<T>) -> PyResult<T> {
        match self.table.read().as_deref() {
            Some(t) => f(t),
            None => Err(closed_err()),
        }
    }
}

/// Pairs taken from the caller's iterable before each detached write.
const CREATE_CHUNK_BYTES: usize = 4 << 20;

#[pymethods]
impl Table {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Table> {
        Table::open_path(py, path)
    }

    /// Opens the table `path` (the files `path.spl` and `path.spi`).
    #[classmethod]
    fn open(_cls: &Bound<'_, PyType>, py: Python<'_>, path: PathBuf) -> PyResult<Table> {
        Table::open_path(py, path)
    }

    /// Writes a new table at `path` from `pairs` (an iterable of
    /// `(key, value)`, or a dict); a later pair for a key replaces an
    /// earlier one. `compression`: None, "snappy" or "zstd"; `block_size`:
    /// uncompressed bytes per compressed block. The files appear whole when
    /// it returns (nothing is left behind on error). Returns the open table.
    #[staticmethod]
    #[pyo3(signature = (path, pairs, *, compression = None, block_size = None))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        pairs: &Bound<'_, PyAny>,
        compression: Option<&str>,
        block_size: Option<u32>,
    ) -> PyResult<Table> {
        let mut opts = WriterOptions {
            compression: match compression {
                None | Some("none") => Compression::None,
                Some("snappy") => Compression::Snappy,
                Some("zstd") => Compression::Zstd,
                Some(other) => {
                    return Err(PyValueError::new_err(format!(
                        "compression must be None, \"snappy\" or \"zstd\", not {other:?}"
                    )))
                }
            },
            ..WriterOptions::default()
        };
        if let Some(b) = block_size {
            opts.block_size = b;
        }
        let mut writer = py
            .detach(|| TableWriter::create(&path, opts))
            .map_err(table_err)?;
        let items = match pairs.cast::<PyDict>() {
            Ok(d) => d.items().into_any(),
            Err(_) => pairs.clone(),
        };
        let mut iter = items.try_iter()?;
        let mut held: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = Vec::new();
        loop {
            held.clear();
            let mut bytes = 0;
            let mut more = false;
            for item in iter.by_ref() {
                let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?
                    .extract()
                    .map_err(|_| PyTypeError::new_err("pairs must be (key, value) tuples"))?;
                bytes += k.len().unwrap_or(0) + v.len().unwrap_or(0) + 16;
                held.push((k, v));
                if bytes >= CREATE_CHUNK_BYTES {
                    more = true;
                    break;
                }
            }
            let chunk = held
                .iter()
                .map(|(k, v)| Ok((bytes_arg(k, "key")?, bytes_arg(v, "value")?)))
                .collect::<PyResult<Vec<_>>>()?;
            py.detach(|| chunk.iter().try_for_each(|(k, v)| writer.put(k, v)))
                .map_err(table_err)?;
            if !more {
                break;
            }
        }
        drop(iter);
        py.detach(|| writer.finish()).map_err(table_err)?;
        Table::open_path(py, path)
    }

    /// The value under `key`, or None.
    //
    // Attached: a lookup is two reads of mapped memory.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = bytes_arg(key, "key")?;
        self.with(|t| {
            Ok(t.get(&key)
                .map_err(table_err)?
                .map(|v| PyBytes::new(py, &v)))
        })
    }

    /// The values of `keys` in order (None for an absent key); faster than
    /// a `get` per key on a large table (the lookups overlap).
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let held: Vec<Bound<'py, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
        let keys = held
            .iter()
            .map(|k| bytes_arg(k, "key"))
            .collect::<PyResult<Vec<_>>>()?;
        let slices: Vec<&[u8]> = keys.iter().map(|k| &**k).collect();
        self.with(|t| {
            let found = t.get_many(&slices).map_err(table_err)?;
            PyList::new(
                py,
                found
                    .iter()
                    .map(|v| v.as_deref().map(|v| PyBytes::new(py, v))),
            )
        })
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = bytes_arg(key, "key")?;
        self.with(|t| Ok(t.get(&key).map_err(table_err)?.is_some()))
    }

    /// Live pairs.
    fn __len__(&self) -> PyResult<usize> {
        self.with(|t| Ok(t.len() as usize))
    }

    /// `(key, value)` pairs in the order they were written.
    fn __iter__(&self) -> PyResult<TableIterator> {
        let arc = self.table.read().clone().ok_or_else(closed_err)?;
        // SAFETY: the iterator borrows the table behind `arc`, which is
        // heap-allocated, never moved, and kept alive by the same struct
        // (dropped after the iterator: see `TableIterState`'s field order).
        let iter: TableIter<'static> = unsafe { std::mem::transmute(arc.iter()) };
        Ok(TableIterator {
            closed: self.closed.clone(),
            state: Mutex::new(TableIterState {
                iter: Some(iter),
                _table: arc,
                ready: VecDeque::new(),
            }),
        })
    }

    /// Closes the table (iterators raise `ClosedError` afterwards; the
    /// files are unmapped when the last of them is gone).
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.table.write().take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }
}

/// Fields drop in order: the iterator before the table it borrows.
struct TableIterState {
    iter: Option<TableIter<'static>>,
    _table: Arc<EngineTable>,
    ready: VecDeque<Py<PyAny>>,
}

/// `(key, value)` pairs of a `Table`, in the order they were written.
#[pyclass(frozen, module = "kivi")]
struct TableIterator {
    closed: Arc<AtomicBool>,
    state: Mutex<TableIterState>,
}

#[pymethods]
impl TableIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed_err_in(py));
        }
        let mut state = self.state.lock();
        if let Some(item) = state.ready.pop_front() {
            return Ok(Some(item));
        }
        let TableIterState { iter, ready, .. } = &mut *state;
        let Some(it) = iter.as_mut() else {
            return Ok(None);
        };
        for _ in 0..CHUNK {
            match it.next() {
                Ok(Some((k, v))) => ready.push_back(
                    PyTuple::new(py, [PyBytes::new(py, k), PyBytes::new(py, v)])?
                        .into_any()
                        .unbind(),
                ),
                Ok(None) => {
                    *iter = None;
                    break;
                }
                Err(e) => {
                    *iter = None;
                    ready.clear();
                    return Err(table_err(e));
                }
            }
        }
        Ok(state.ready.pop_front())
    }
}

// ---------------------------------------------------------------------------

/// The largest key and value the store accepts, in bytes.
fn limits(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_KEY_LEN", kivi::limits::MAX_KEY_LEN)?;
    m.add("MAX_VALUE_LEN", kivi::limits::MAX_VALUE_LEN)?;
    Ok(())
}

#[pymodule]
fn _kivi(m: &Bound<'_, PyModule>) -> PyResult<()> {
    keep_allocator_off_huge_pages();
    m.add_class::<Db>()?;
    m.add_class::<WriteBatch>()?;
    m.add_class::<Snapshot>()?;
    m.add_class::<RangeIter>()?;
    m.add_class::<Table>()?;
    m.add_class::<TableIterator>()?;
    limits(m)?;
    Ok(())
}
