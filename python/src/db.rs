//! `kivi.Db`: the store, and what its snapshots and iterators share with it.

use crate::args::{bytes_arg, deadline_after, opt_bound};
use crate::batch::WriteBatch;
use crate::errors::{closed_err, condition_failed, db_err};
use crate::iter::{RangeIter, SnapInner, Snapshot, Yield};
use kivi::{Db as EngineDb, Durability, Options, WriteBatch as EngineBatch, WriteOutcome};
use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::cell::RefCell;
use std::ops::Bound as RangeBound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// What every object made from one `Db` shares: the engine's handle (taken
/// by `close`), and the readers that `close` must cut off.
pub(crate) struct Shared {
    pub(crate) db: RwLock<Option<EngineDb>>,
    pub(crate) closed: AtomicBool,
    /// Live snapshots and iterators (dead ones are pruned as new ones come).
    pub(crate) readers: Mutex<Vec<Weak<dyn Reader>>>,
}

/// An engine object holding a version of the store (a snapshot, a scan).
pub(crate) trait Reader: Send + Sync {
    /// Drops the engine object; the reader raises `ClosedError` afterwards.
    fn release(&self);
}

impl Shared {
    #[inline]
    pub(crate) fn check(&self) -> PyResult<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(closed_err())
        } else {
            Ok(())
        }
    }

    /// Runs `f` on the open store, with the interpreter detached.
    #[inline]
    pub(crate) fn with_db<T: Send>(
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
    pub(crate) fn with_db_attached<T>(
        &self,
        f: impl FnOnce(&EngineDb) -> PyResult<T>,
    ) -> PyResult<T> {
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
    pub(crate) fn register(&self, reader: Arc<dyn Reader>) {
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
pub(crate) const CHUNK: usize = 64;

/// A kivi store, opened (or created) in directory `path`.
///
/// Every write is durable when it returns (fdatasync; concurrent writers
/// share one sync per group), unless `no_fsync=True`. Keys and values are
/// bytes-like; `str` raises `TypeError`. Use it as a context manager, or
/// call `close()`; afterwards every call raises `ClosedError`. Safe to share
/// between threads.
#[pyclass(frozen, module = "kivi")]
pub(crate) struct Db {
    pub(crate) shared: Arc<Shared>,
    pub(crate) path: String,
}

/// A range's start and end, owned.
type Bounds = (RangeBound<Vec<u8>>, RangeBound<Vec<u8>>);

pub(crate) fn bounds(
    start: Option<&Bound<'_, PyAny>>,
    stop: Option<&Bound<'_, PyAny>>,
) -> PyResult<Bounds> {
    let start = opt_bound(start, "start")?.map_or(RangeBound::Unbounded, RangeBound::Included);
    let stop = opt_bound(stop, "stop")?.map_or(RangeBound::Unbounded, RangeBound::Excluded);
    Ok((start, stop))
}

#[pymethods]
impl Db {
    #[new]
    #[pyo3(signature = (
        path,
        *,
        no_fsync = false,
        read_only = false,
        cache_bytes = None,
        object_cache_dir = None,
        object_cache_bytes = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        no_fsync: bool,
        read_only: bool,
        cache_bytes: Option<u64>,
        object_cache_dir: Option<PathBuf>,
        object_cache_bytes: Option<u64>,
    ) -> PyResult<Db> {
        let mut opts = Options::default();
        if no_fsync {
            opts.durability = Durability::NoFsync;
        }
        opts.read_only = read_only;
        if let Some(c) = cache_bytes {
            opts.cache_bytes = c;
        }
        opts.object_cache_dir = object_cache_dir;
        if let Some(c) = object_cache_bytes {
            opts.object_cache_bytes = c;
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
    pub(crate) fn write_batch(&self, py: Python<'_>, batch: &WriteBatch) -> PyResult<()> {
        let b = std::mem::take(&mut *batch.inner.lock());
        match self.shared.with_db(py, move |db| db.write(b))? {
            WriteOutcome::Applied => Ok(()),
            WriteOutcome::ConditionFailed { op } => Err(condition_failed(op)),
        }
    }

    pub(crate) fn conditional(
        &self,
        py: Python<'_>,
        mut b: EngineBatch,
        ttl: Option<f64>,
    ) -> PyResult<bool> {
        if ttl.is_some() {
            let d = self.shared.with_db_attached(|db| deadline_after(db, ttl))?;
            b.with_deadline(d).map_err(db_err)?;
        }
        let outcome = self.shared.with_db(py, move |db| db.write(b))?;
        Ok(outcome == WriteOutcome::Applied)
    }
}
