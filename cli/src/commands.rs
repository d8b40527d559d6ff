//! The small commands: put, get, del, scan and check.

use crate::error::{stdout_error, CliError, Result};
use crate::Store;
use kivi::limits::MAX_KEY_LEN;
use std::ffi::OsStr;
use std::io::{self, BufWriter, Write};
use std::ops::Bound;

/// A key argument, refused here when too long so that `get` says why rather
/// than "not found" (the engine only checks the length on writes).
fn key_arg(store: &Store, arg: &OsStr) -> Result<Vec<u8>> {
    let key = store.codec.decode_arg("KEY", arg)?;
    if key.len() > MAX_KEY_LEN {
        return Err(kivi::Error::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_LEN,
        }
        .into());
    }
    Ok(key)
}

pub fn put(store: &Store, key: &OsStr, value: &OsStr) -> Result<()> {
    let key = key_arg(store, key)?;
    let value = store.codec.decode_arg("VALUE", value)?;
    let db = store.open_writable()?;
    db.put(&key, &value)?;
    // Closing reports a failed final checkpoint instead of dropping it silently.
    Ok(db.close()?)
}

pub fn del(store: &Store, key: &OsStr) -> Result<()> {
    let key = key_arg(store, key)?;
    let db = store.open_existing()?;
    db.delete(&key)?;
    Ok(db.close()?)
}

pub fn get(store: &Store, key: &OsStr) -> Result<()> {
    let key = key_arg(store, key)?;
    let db = store.open_read_only()?;
    let Some(value) = db.get(&key)? else {
        return Err(CliError::NotFound(store.codec.show(&key)));
    };
    let mut out = io::stdout().lock();
    store.codec.write(&mut out, &value).map_err(stdout_error)?;
    out.write_all(b"\n").map_err(stdout_error)
}

pub fn scan(
    store: &Store,
    from: Option<&OsStr>,
    to: Option<&OsStr>,
    limit: Option<u64>,
) -> Result<()> {
    let bound = |arg: Option<&OsStr>, what: &str| -> Result<Option<Vec<u8>>> {
        arg.map(|a| store.codec.decode_arg(what, a)).transpose()
    };
    let start = bound(from, "--from")?.map_or(Bound::Unbounded, Bound::Included);
    let end = bound(to, "--to")?.map_or(Bound::Unbounded, Bound::Excluded);
    let db = store.open_read_only()?;
    let mut out = BufWriter::new(io::stdout().lock());
    let limit = usize::try_from(limit.unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
    for pair in db.range((start, end)).take(limit) {
        let (key, value) = pair?;
        write_pair(store, &mut out, &key, &value).map_err(stdout_error)?;
    }
    out.flush().map_err(stdout_error)
}

fn write_pair(store: &Store, out: &mut impl Write, key: &[u8], value: &[u8]) -> io::Result<()> {
    store.codec.write(out, key)?;
    out.write_all(b"\t")?;
    store.codec.write(out, value)?;
    out.write_all(b"\n")
}

/// Compacts the store and prints what it took before and after.
pub fn compact(store: &Store) -> Result<()> {
    let db = store.open_existing()?;
    let before = db.stats()?;
    db.compact()?;
    let after = db.stats()?;
    db.close()?;
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "compacted {}: {} pairs; file bytes {} -> {} ({} segments deleted, {} bytes of pages copied)",
        store.shown_dir(),
        after.pairs,
        before.file_bytes,
        after.file_bytes,
        after.cleaned_segments,
        after.cleaner_copied_bytes
    )
    .map_err(stdout_error)
}

/// Prints a one-line summary when healthy; otherwise one line per problem
/// on standard output (the report), and fails. A store that cannot even be
/// opened is reported the same way, its opening error being the problem.
pub fn check(store: &Store) -> Result<()> {
    let report = store.open_read_only().and_then(|db| {
        let report = db.check()?;
        Ok((report, db.stats()?.torn_tail))
    });
    let mut out = io::stdout().lock();
    let problems = match report {
        Ok((report, torn_tail)) if report.is_healthy() => {
            let line = healthy_line(store, &report, torn_tail);
            return writeln!(out, "{line}").map_err(stdout_error);
        }
        Ok((report, _)) => report.problems,
        Err(e) => vec![e.to_string()],
    };
    for p in &problems {
        writeln!(out, "{p}").map_err(stdout_error)?;
    }
    Err(CliError::Unhealthy {
        dir: store.shown_dir(),
        count: problems.len() as u64,
    })
}

fn healthy_line(store: &Store, r: &kivi::CheckReport, torn_tail: Option<String>) -> String {
    let mut line = format!(
        "ok: {}: {} pairs; {} segments, {} bytes of records read \
         ({} commits, {} checkpoints, {} pages, {} blobs); no problems",
        store.shown_dir(),
        r.pairs,
        r.segments,
        r.bytes_scanned,
        r.commit_records,
        r.checkpoint_records,
        r.pages,
        r.blobs
    );
    // A torn tail is what a crash mid-write leaves; opening cuts it off. It
    // is not damage, but worth knowing about.
    if let Some(t) = torn_tail {
        line.push_str(&format!("; a torn tail ({t}) is ignored"));
    }
    line
}
