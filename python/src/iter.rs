//! `kivi.Snapshot` and `kivi.Iter`: consistent views and range iterators.

use crate::args::bytes_arg;
use crate::db::{bounds, Reader, Shared, CHUNK};
use crate::errors::{closed_err, db_err};
use kivi::Scan;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::collections::VecDeque;
use std::sync::Arc;

pub(crate) struct SnapInner(pub(crate) Mutex<Option<kivi::Snapshot>>);

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
pub(crate) struct Snapshot {
    pub(crate) shared: Arc<Shared>,
    pub(crate) inner: Arc<SnapInner>,
}

impl Snapshot {
    pub(crate) fn with<T>(&self, f: impl FnOnce(&kivi::Snapshot) -> PyResult<T>) -> PyResult<T> {
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
pub(crate) enum Yield {
    Pairs,
    Keys,
    Values,
}

struct IterState {
    pub(crate) scan: Option<Scan>,
    /// Made, not yet returned.
    pub(crate) ready: VecDeque<Py<PyAny>>,
}

pub(crate) struct IterInner(Mutex<IterState>);

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
pub(crate) struct RangeIter {
    pub(crate) shared: Arc<Shared>,
    pub(crate) inner: Arc<IterInner>,
    pub(crate) kind: Yield,
}

impl RangeIter {
    pub(crate) fn new(shared: &Arc<Shared>, scan: Scan, kind: Yield) -> RangeIter {
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
