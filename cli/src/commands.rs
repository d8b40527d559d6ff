//! The small commands: put, get, del, scan and check.

use crate::codec::Codec;
use crate::error::{stdout_error, CliError, Result};
use crate::Store;
use kivi::limits::{MAX_KEY_LEN, MAX_VALUE_LEN};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};

/// A key or value: an argument (decoded as --hex says) or a file's bytes.
pub enum Given<'a> {
    Arg(&'a OsStr),
    File(&'a Path),
}

impl<'a> Given<'a> {
    /// The argument, else the file (clap requires one of them).
    pub fn of(arg: &'a Option<OsString>, file: &'a Option<PathBuf>) -> Given<'a> {
        match (arg, file) {
            (Some(a), _) => Given::Arg(a),
            (None, Some(f)) => Given::File(f),
            (None, None) => unreachable!("clap requires KEY or --key-file"),
        }
    }

    /// Its bytes; `what` names it in errors, `max` bounds a file's read.
    fn bytes(&self, store: &Store, what: &str, max: usize) -> Result<Vec<u8>> {
        match self {
            Given::Arg(a) => store.codec.decode_arg(what, a),
            Given::File(path) => read_bounded(path, what, max),
        }
    }
}

/// All of `path` (`-`: standard input), refusing it past `max` bytes
/// without reading much more than that.
fn read_bounded(path: &Path, what: &str, max: usize) -> Result<Vec<u8>> {
    let (name, reader): (String, Box<dyn Read>) = if path == Path::new("-") {
        ("standard input".into(), Box::new(io::stdin().lock()))
    } else {
        let f = File::open(path)
            .map_err(|e| CliError::io(format!("{what} file {}", path.display()), e))?;
        (path.display().to_string(), Box::new(f))
    };
    let mut bytes = Vec::new();
    reader
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::io(format!("read {what} from {name}"), e))?;
    if bytes.len() > max {
        return Err(CliError::Input(format!(
            "{what} from {name} is over {max} bytes, the most a {} may be",
            what.to_lowercase()
        )));
    }
    Ok(bytes)
}

/// A key, refused here when too long so that `get` says why rather
/// than "not found" (the engine only checks the length on writes).
fn key_of(store: &Store, given: &Given) -> Result<Vec<u8>> {
    let key = given.bytes(store, "KEY", MAX_KEY_LEN)?;
    if key.len() > MAX_KEY_LEN {
        return Err(kivi::Error::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_LEN,
        }
        .into());
    }
    Ok(key)
}

/// `put`: KEY and VALUE from `args`, less the ones given as files.
pub fn put(
    store: &Store,
    args: &[OsString],
    key_file: Option<&Path>,
    value_file: Option<&Path>,
) -> Result<()> {
    if key_file == Some(Path::new("-")) && value_file == Some(Path::new("-")) {
        return Err(CliError::Input(
            "--key-file - and --value-file - cannot both read standard input".into(),
        ));
    }
    let wanted = usize::from(key_file.is_none()) + usize::from(value_file.is_none());
    if args.len() != wanted {
        return Err(CliError::Input(format!(
            "put takes {} here (KEY and VALUE, less those given by --key-file and \
             --value-file), got {}",
            match (key_file.is_none(), value_file.is_none()) {
                (true, true) => "KEY and VALUE",
                (true, false) => "KEY only",
                (false, true) => "VALUE only",
                (false, false) => "no argument",
            },
            args.len()
        )));
    }
    let mut args = args.iter();
    let key = match key_file {
        Some(f) => Given::File(f),
        None => Given::Arg(args.next().expect("counted")),
    };
    let value = match value_file {
        Some(f) => Given::File(f),
        None => Given::Arg(args.next().expect("counted")),
    };
    let key = key_of(store, &key)?;
    let value = value.bytes(store, "VALUE", MAX_VALUE_LEN)?;
    let db = store.open_writable()?;
    db.put(&key, &value)?;
    close_after_write(db, || format!("the put of {} is", store.codec.show(&key)))
}

/// Closes `db` after a write that is already durable. Closing reports a
/// failed final checkpoint instead of dropping it silently, but saying that
/// the write is durable: a bare "No space left on device" after `kivi put`
/// reads as if the value had not been stored, when it has.
pub fn close_after_write(db: kivi::Db, done: impl FnOnce() -> String) -> Result<()> {
    db.close().map_err(|source| CliError::ClosedAfterWrite {
        done: done(),
        source,
    })
}

pub fn del(store: &Store, key: &Given) -> Result<()> {
    let key = key_of(store, key)?;
    let db = store.open_existing()?;
    db.delete(&key)?;
    close_after_write(db, || {
        format!("the delete of {} is", store.codec.show(&key))
    })
}

pub fn get(store: &Store, key: &Given) -> Result<()> {
    let key = key_of(store, key)?;
    let Some(value) = store.read_only_with(|db| Ok(db.get(&key)?))? else {
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
    raw: bool,
) -> Result<()> {
    let bound = |arg: Option<&OsStr>, what: &str| -> Result<Option<Vec<u8>>> {
        arg.map(|a| store.codec.decode_arg(what, a)).transpose()
    };
    let start = bound(from, "--from")?.map_or(Bound::Unbounded, Bound::Included);
    let end = bound(to, "--to")?.map_or(Bound::Unbounded, Bound::Excluded);
    // Retried only while opening: once pairs are printed, a failure is one.
    let db = store.read_only_with(|db| Ok(db.clone()))?;
    let mut out = BufWriter::new(io::stdout().lock());
    let limit = usize::try_from(limit.unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
    let codec = store.codec.for_lines(raw);
    for pair in db.range((start, end)).take(limit) {
        let (key, value) = pair?;
        write_pair(codec, &mut out, &key, &value).map_err(stdout_error)?;
    }
    out.flush().map_err(stdout_error)
}

fn write_pair(codec: Codec, out: &mut impl Write, key: &[u8], value: &[u8]) -> io::Result<()> {
    codec.write(out, key)?;
    out.write_all(b"\t")?;
    codec.write(out, value)?;
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
/// Beside a running writer (`kivi serve`), the check runs on the state the
/// open found; a problem then may be the writer's progress (a segment the
/// cleaner deleted while it was read), so the check is run again, up to
/// `READ_BESIDE_WRITER_TRIES` times; problems are reported only when every
/// run found some (the last run's).
pub fn check(store: &Store) -> Result<()> {
    let beside_writer = store.in_use_by_writer();
    let run = || {
        store.open_read_only().and_then(|db| {
            let report = db.check()?;
            Ok((report, db.stats()?.torn_tail))
        })
    };
    let mut report = run();
    let mut tries = 1;
    while beside_writer
        && tries < crate::READ_BESIDE_WRITER_TRIES
        && !matches!(&report, Ok((r, _)) if r.is_healthy())
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
        report = run();
        tries += 1;
    }
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
