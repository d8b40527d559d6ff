//! Arguments to the methods: bytes-like keys and values, ranges, ttls.

use kivi::Db as EngineDb;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyString};
use std::time::{Duration, SystemTime};

/// The bytes of a key or value argument: borrowed from a `bytes` object
/// (immutable, so safe to read with the interpreter detached), copied from
/// anything else.
pub(crate) enum Buf<'a> {
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
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            Buf::Borrowed(b) => b.to_vec(),
            Buf::Owned(v) => v,
        }
    }
}

/// The bytes of `obj`; `TypeError` for `str` (never encoded silently) and
/// for anything without the buffer protocol.
#[inline]
pub(crate) fn bytes_arg<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Buf<'a>> {
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

pub(crate) fn opt_bound(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Vec<u8>>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Some(bytes_arg(o, what)?.into_vec())),
    }
}

/// A ttl in seconds as an engine deadline (milliseconds, rounded up).
pub(crate) fn deadline_after(db: &EngineDb, ttl: Option<f64>) -> PyResult<Option<kivi::Deadline>> {
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
pub(crate) fn deadline_after_now(ttl: Option<f64>) -> PyResult<Option<kivi::Deadline>> {
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
