//! The engine's errors as the Python exception classes of python/kivi/_errors.py.

use pyo3::prelude::*;

pub(crate) fn raise<'py>(
    py: Python<'py>,
    class: &str,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> PyErr {
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

pub(crate) fn db_err(e: kivi::Error) -> PyErr {
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
            E::ReadOnly | E::NotAFollower => raise(py, "ReadOnlyError", (msg,)),
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

pub(crate) fn table_err(e: kivi::table::Error) -> PyErr {
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

pub(crate) fn closed_err_in(py: Python<'_>) -> PyErr {
    raise(py, "ClosedError", ("the store is closed",))
}

pub(crate) fn closed_err() -> PyErr {
    Python::attach(closed_err_in)
}

pub(crate) fn condition_failed(op: usize) -> PyErr {
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
