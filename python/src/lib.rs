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

mod args;
mod batch;
mod db;
mod errors;
mod iter;
mod table;

use crate::batch::WriteBatch;
use crate::db::Db;
use crate::iter::{RangeIter, Snapshot};
use crate::table::{Table, TableIterator};
use pyo3::prelude::*;

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
