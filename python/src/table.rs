//! `kivi.Table`: sealed tables, their lookups and iteration.

use crate::args::bytes_arg;
use crate::db::CHUNK;
use crate::errors::{closed_err, closed_err_in, table_err};
use kivi::table::{Compression, Table as EngineTable, TableIter, TableWriter, WriterOptions};
use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyType};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A sealed table: an immutable hash table in sparkey's format
/// (`BASE.spl` and `BASE.spi`, plus a checksum sidecar `BASE.kvsum`).
/// `Table(path)` or `Table.open(path)` opens one; `Table.create` writes one.
#[pyclass(frozen, module = "kivi")]
pub(crate) struct Table {
    pub(crate) table: RwLock<Option<Arc<EngineTable>>>,
    pub(crate) closed: Arc<AtomicBool>,
}

impl Table {
    pub(crate) fn open_path(py: Python<'_>, path: PathBuf) -> PyResult<Table> {
        let t = py.detach(|| EngineTable::open(&path)).map_err(table_err)?;
        Ok(Table {
            table: RwLock::new(Some(Arc::new(t))),
            closed: Arc::new(AtomicBool::new(false)),
        })
    }

    #[inline]
    pub(crate) fn with<T>(&self, f: impl FnOnce(&EngineTable) -> PyResult<T>) -> PyResult<T> {
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
pub(crate) struct TableIterState {
    pub(crate) iter: Option<TableIter<'static>>,
    pub(crate) _table: Arc<EngineTable>,
    pub(crate) ready: VecDeque<Py<PyAny>>,
}

/// `(key, value)` pairs of a `Table`, in the order they were written.
#[pyclass(frozen, module = "kivi")]
pub(crate) struct TableIterator {
    pub(crate) closed: Arc<AtomicBool>,
    pub(crate) state: Mutex<TableIterState>,
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
