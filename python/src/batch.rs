//! `kivi.WriteBatch`: writes applied all together or not at all.

use crate::args::{bytes_arg, deadline_after_now};
use crate::db::Db;
use crate::errors::db_err;
use kivi::WriteBatch as EngineBatch;
use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

/// A group of writes applied all together or not at all, in the order
/// added (a later write to a key overrides an earlier one; conditions see
/// the batch's earlier operations). Write it with `Db.write(batch)`, or
/// make it with `Db.batch()` and use it as a context manager.
#[pyclass(frozen, module = "kivi")]
pub(crate) struct WriteBatch {
    pub(crate) inner: Mutex<EngineBatch>,
    /// The store a batch from `Db.batch()` commits to on a clean exit.
    pub(crate) db: Option<Py<Db>>,
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
        self.add_value(ttl, |b| b.put(k, v).map(drop))
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
        self.add_value(ttl, |b| b.compare_and_swap(k, e, v).map(drop))
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
        self.add_value(ttl, |b| b.insert_if_absent(k, v).map(drop))
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
        self.add_value(ttl, |b| b.update_if_present(k, v).map(drop))
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

impl WriteBatch {
    /// Adds one operation that writes a value (`add`), then gives that value
    /// the deadline `ttl` seconds from now, if there is one.
    fn add_value(
        &self,
        ttl: Option<f64>,
        add: impl FnOnce(&mut EngineBatch) -> kivi::Result<()>,
    ) -> PyResult<()> {
        let deadline = deadline_after_now(ttl)?;
        let mut b = self.inner.lock();
        add(&mut b).map_err(db_err)?;
        if deadline.is_some() {
            b.with_deadline(deadline).map_err(db_err)?;
        }
        Ok(())
    }
}
