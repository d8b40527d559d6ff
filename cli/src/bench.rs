//! `kivi bench`: a quick, honest benchmark of kivi on kv40 data. Every write
//! is durable (fdatasync before it is acknowledged), every read is checked,
//! and the machine's own fdatasync latency is measured alongside so the
//! write figures can be judged against what the disk allows.

use crate::error::{stdout_error, CliError, Result};
use crate::kv40::{self, Rng};
use crate::measure::{nanos_since, Figure, Meter};
use crate::progress;
use clap::Args;
use kivi::{Db, Options, WriteBatch};
use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Pairs per durable batch in the bulk phases.
const BATCH: u64 = 1000;
/// Single durable puts timed one by one.
const SINGLE_PUTS: u64 = 10_000;
/// Writers in the concurrent phase: many more than cores, so group commit
/// has company to batch.
const THREADS: u64 = 64;
/// Appends timed in the fdatasync probe, and their size (about one small commit).
const SYNC_PROBES: u64 = 1000;
const SYNC_PROBE_BYTES: usize = 80;
/// Left in the bench directory so a later run knows it may delete it.
const MARKER: &str = "KIVI-BENCH";

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Pairs in the data set (each phase does about this many operations)
    #[arg(short = 'n', value_name = "N", default_value = "1000000", value_parser = positive)]
    n: u64,
    /// Scratch directory, deleted and recreated before the run
    #[arg(long, value_name = "DIR", default_value = "./kivi-bench")]
    dir: PathBuf,
    /// Also write one JSON object per figure to FILE, one per line (`n` is
    /// the data set size; fields that do not apply are null)
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// A count of at least 1; `1_000_000` and `1,000,000` read as 1000000.
fn positive(s: &str) -> Result<u64, String> {
    let digits: String = s.chars().filter(|c| !matches!(c, '_' | ',')).collect();
    match digits.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number of pairs, at least 1".into()),
    }
}

pub fn run(args: &BenchArgs) -> Result<()> {
    prepare_dir(&args.dir)?;
    let mut report = Report::create(args)?;
    let store_dir = args.dir.join("kivi");
    report.line(&format!(
        "kivi bench: kv40 (40-byte keys, 40-byte values), n = {}, store {}, durable (fdatasync)",
        group(args.n),
        store_dir.display()
    ))?;
    report.line(&format!(
        "{:<40} {:>9} {:>12} {:>10} {:>9} {:>9}",
        "workload", "ops", "ops/s", "cpu µs/op", "p50 µs", "p99 µs"
    ))?;
    let db = Db::open(&store_dir, Options::default())?;
    let n = args.n;
    let load = bulk_insert(&db, n)?;
    db.checkpoint()?;
    let space = db.stats()?.file_bytes;
    report.add(Figure {
        bytes_per_pair: Some(space as f64 / n as f64),
        ..load
    })?;
    report.add(random_reads(&db, n)?)?;
    report.add(random_updates(&db, n)?)?;
    report.add(full_scan(&db, n)?)?;
    // Right before the single puts, so both see the disk in the same state.
    let sync = fdatasync_probe(&args.dir)?;
    report.add(sync.clone())?;
    let single = single_puts(&db, n)?;
    report.add(single.clone())?;
    report.add(concurrent_puts(&db, n)?)?;
    db.close()?;
    report.footer(n, space, &single, &sync)
}

/// Deletes and recreates `dir`, but only when losing it loses nothing of
/// the user's: it must be empty, a previous bench directory, or a kivi store.
fn prepare_dir(dir: &Path) -> Result<()> {
    let shown = dir.display();
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(CliError::io(format!("inspect {shown}"), e)),
        Ok(m) if !m.is_dir() => {
            return Err(CliError::Input(format!(
                "bench directory {shown} exists and is not a directory; refusing to replace it"
            )))
        }
        Ok(_) => {
            if !may_delete(dir)? {
                return Err(CliError::Input(format!(
                    "bench directory {shown} exists and is neither a kivi store nor a previous \
                     bench directory; refusing to delete it (choose another --dir)"
                )));
            }
            fs::remove_dir_all(dir).map_err(|e| CliError::io(format!("delete {shown}"), e))?;
        }
    }
    fs::create_dir_all(dir).map_err(|e| CliError::io(format!("create {shown}"), e))?;
    fs::write(
        dir.join(MARKER),
        "Scratch directory of `kivi bench`; each run deletes and recreates it.\n",
    )
    .map_err(|e| CliError::io(format!("write {}", dir.join(MARKER).display()), e))
}

fn may_delete(dir: &Path) -> Result<bool> {
    let shown = dir.display();
    let mut entries = fs::read_dir(dir).map_err(|e| CliError::io(format!("list {shown}"), e))?;
    if entries.next().is_none() || dir.join(MARKER).is_file() {
        return Ok(true);
    }
    // Whether it is a store is the engine's call: it opens, read-only.
    let opts = Options {
        read_only: true,
        create_if_missing: false,
        ..Options::default()
    };
    Ok(Db::open(dir, opts).is_ok())
}

/// Keys `0..n` in order, `BATCH` per durable commit.
fn bulk_insert(db: &Db, n: u64) -> Result<Figure> {
    let pb = progress::bar(n, "bulk insert");
    let meter = Meter::start();
    for start in (0..n).step_by(BATCH as usize) {
        let end = (start + BATCH).min(n);
        let mut batch = WriteBatch::new();
        for i in start..end {
            batch.put(kv40::key(i), kv40::value(i, 0))?;
        }
        db.write(batch)?;
        pb.inc(end - start);
    }
    pb.finish_and_clear();
    Ok(meter.finish("bulk_insert", "bulk insert (1,000 per durable batch)", n))
}

fn check_value(i: u64, value: Option<&[u8]>) -> Result<()> {
    match value {
        None => Err(CliError::Bench(format!("key {i} is missing"))),
        Some(v) if kv40::index_of(v) != Some(i) || v.len() != kv40::VALUE_LEN => Err(
            CliError::Bench(format!("key {i} holds the wrong value {}", hex::encode(v))),
        ),
        Some(_) => Ok(()),
    }
}

/// `n` reads of uniformly random present keys, each value checked.
fn random_reads(db: &Db, n: u64) -> Result<Figure> {
    let pb = progress::bar(n, "random reads");
    let mut rng = Rng::new(0x5eed_0001);
    let mut out = Vec::with_capacity(kv40::VALUE_LEN);
    let meter = Meter::start();
    for done in 1..=n {
        let i = rng.below(n);
        let found = db.get_into(&kv40::key(i), &mut out)?;
        check_value(i, found.then_some(out.as_slice()))?;
        if done.is_multiple_of(BATCH) {
            pb.inc(BATCH);
        }
    }
    pb.finish_and_clear();
    Ok(meter.finish("random_read", "random read (value checked)", n))
}

/// `n` puts of random existing keys with new values, `BATCH` per durable commit.
fn random_updates(db: &Db, n: u64) -> Result<Figure> {
    let pb = progress::bar(n, "random updates");
    let mut rng = Rng::new(0x5eed_0002);
    let meter = Meter::start();
    for start in (0..n).step_by(BATCH as usize) {
        let end = (start + BATCH).min(n);
        let mut batch = WriteBatch::new();
        for version in start..end {
            let i = rng.below(n);
            batch.put(kv40::key(i), kv40::value(i, 1 + version))?;
        }
        db.write(batch)?;
        pb.inc(end - start);
    }
    pb.finish_and_clear();
    Ok(meter.finish(
        "random_update",
        "random update (1,000 per durable batch)",
        n,
    ))
}

/// Every pair in key order; checks the order, the values and the count.
fn full_scan(db: &Db, n: u64) -> Result<Figure> {
    let pb = progress::bar(n, "full scan");
    let meter = Meter::start();
    let mut next = 0u64;
    let mut scan = db.scan::<&[u8], _>(..);
    while let Some((key, value)) = scan.next()? {
        if key != kv40::key(next) {
            return Err(CliError::Bench(format!(
                "scan returned {} where key {next} belongs",
                hex::encode(key)
            )));
        }
        check_value(next, Some(value))?;
        next += 1;
        if next.is_multiple_of(BATCH) {
            pb.inc(BATCH);
        }
    }
    if next != n {
        return Err(CliError::Bench(format!(
            "scan returned {next} of {n} pairs"
        )));
    }
    pb.finish_and_clear();
    Ok(meter.finish("scan", "ordered full scan (order checked)", n))
}

/// `SINGLE_PUTS` random puts, each its own durable commit, each timed.
fn single_puts(db: &Db, n: u64) -> Result<Figure> {
    let pb = progress::bar(SINGLE_PUTS, "single durable puts");
    let mut rng = Rng::new(0x5eed_0003);
    let mut latencies = Vec::with_capacity(SINGLE_PUTS as usize);
    let meter = Meter::start();
    for version in 0..SINGLE_PUTS {
        let i = rng.below(n);
        let t = Instant::now();
        db.put(&kv40::key(i), &kv40::value(i, (1 << 32) + version))?;
        latencies.push(nanos_since(t));
        pb.inc(1);
    }
    pb.finish_and_clear();
    let fig = meter.finish("single_put", "single durable put", SINGLE_PUTS);
    Ok(fig.with_latencies(latencies))
}

/// `THREADS` writers doing single durable puts of random keys, `n / 5` in
/// all (enough to last a few seconds at n = 1,000,000).
fn concurrent_puts(db: &Db, n: u64) -> Result<Figure> {
    let total = (n / 5).max(THREADS);
    let pb = progress::bar(total, "64 threads, single durable puts");
    let meter = Meter::start();
    let per_thread: Vec<Result<Vec<u64>>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let ops = total / THREADS + u64::from(t < total % THREADS);
                let pb = pb.clone();
                s.spawn(move || writer(db, n, t, ops, &pb))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("bench writer thread panicked"))
            .collect()
    });
    let fig = meter.finish("concurrent_put", "64 threads, single durable puts", total);
    pb.finish_and_clear();
    let mut latencies = Vec::with_capacity(total as usize);
    for thread in per_thread {
        latencies.extend(thread?);
    }
    Ok(fig.with_latencies(latencies))
}

/// One writer of `concurrent_puts`: its latencies.
fn writer(db: &Db, n: u64, thread: u64, ops: u64, pb: &indicatif::ProgressBar) -> Result<Vec<u64>> {
    let mut rng = Rng::new(0x5eed_1000 + thread);
    let mut latencies = Vec::with_capacity(ops as usize);
    for k in 0..ops {
        let i = rng.below(n);
        let version = (2 << 32) + (thread << 24) + k;
        let t = Instant::now();
        db.put(&kv40::key(i), &kv40::value(i, version))?;
        latencies.push(nanos_since(t));
        pb.inc(1);
    }
    Ok(latencies)
}

/// The floor under every durable write: append a small record to a file
/// in the bench directory and fdatasync it, `SYNC_PROBES` times.
fn fdatasync_probe(dir: &Path) -> Result<Figure> {
    let path = dir.join("fdatasync-probe");
    let fail = |e| CliError::io(format!("fdatasync probe {}", path.display()), e);
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(fail)?;
    let record = [0xa5u8; SYNC_PROBE_BYTES];
    let mut latencies = Vec::with_capacity(SYNC_PROBES as usize);
    let meter = Meter::start();
    for _ in 0..SYNC_PROBES {
        let t = Instant::now();
        file.write_all(&record).map_err(fail)?;
        file.sync_data().map_err(fail)?;
        latencies.push(nanos_since(t));
    }
    let fig = meter.finish("fdatasync", "fdatasync of an 80-byte append", SYNC_PROBES);
    drop(file);
    fs::remove_file(&path).map_err(fail)?;
    Ok(fig.with_latencies(latencies))
}

/// Where figures go: a table on standard output, and JSON lines if asked.
struct Report {
    n: u64,
    json: Option<(PathBuf, BufWriter<File>)>,
}

#[derive(Serialize)]
struct JsonLine<'a> {
    store: &'a str,
    workload: &'a str,
    n: u64,
    ops_per_sec: f64,
    cpu_us_per_op: f64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    bytes_per_pair: Option<f64>,
}

impl Report {
    /// Opens the JSON file before any work, so a bad path fails at once.
    fn create(args: &BenchArgs) -> Result<Report> {
        let json = match &args.json {
            None => None,
            Some(path) => {
                let f = File::create(path)
                    .map_err(|e| CliError::io(format!("create {}", path.display()), e))?;
                Some((path.clone(), BufWriter::new(f)))
            }
        };
        Ok(Report { n: args.n, json })
    }

    fn line(&self, text: &str) -> Result<()> {
        writeln!(io::stdout(), "{text}").map_err(stdout_error)
    }

    fn add(&mut self, f: Figure) -> Result<()> {
        let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        self.line(&format!(
            "{:<40} {:>9} {:>12} {:>10.2} {:>9} {:>9}",
            f.label,
            group(f.ops),
            group(f.ops_per_sec().round() as u64),
            f.cpu_us_per_op(),
            us(f.p50_us),
            us(f.p99_us)
        ))?;
        let Some((path, out)) = &mut self.json else {
            return Ok(());
        };
        let line = JsonLine {
            store: "kivi",
            workload: f.workload,
            n: self.n,
            ops_per_sec: f.ops_per_sec(),
            cpu_us_per_op: f.cpu_us_per_op(),
            p50_us: f.p50_us,
            p99_us: f.p99_us,
            bytes_per_pair: f.bytes_per_pair,
        };
        let text = serde_json::to_string(&line).expect("numbers and strings serialize");
        writeln!(out, "{text}")
            .and_then(|_| out.flush())
            .map_err(|e| CliError::io(format!("write {}", path.display()), e))
    }

    fn footer(&self, n: u64, space: u64, single: &Figure, sync: &Figure) -> Result<()> {
        self.line(&format!(
            "space: {:.1} bytes per pair on disk after the load and a checkpoint \
             ({} bytes of segment files)",
            space as f64 / n as f64,
            group(space)
        ))?;
        if let (Some(put), Some(sync)) = (single.p50_us, sync.p50_us) {
            self.line(&format!(
                "single durable put p50 is {:.2}x the fdatasync p50 ({put:.1} µs / {sync:.1} µs)",
                put / sync.max(1e-3)
            ))?;
        }
        Ok(())
    }
}

/// `1234567` as "1,234,567".
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1_234_567), "1,234,567");
    }

    #[test]
    fn only_empty_bench_or_store_directories_are_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        let mine = tmp.path().join("mine");
        fs::create_dir(&mine).unwrap();
        fs::write(mine.join("thesis.txt"), "years of work").unwrap();
        assert!(prepare_dir(&mine).is_err());
        assert!(mine.join("thesis.txt").exists());

        let bench = tmp.path().join("bench");
        prepare_dir(&bench).unwrap();
        fs::write(bench.join("leftover"), "x").unwrap();
        prepare_dir(&bench).unwrap();
        assert!(!bench.join("leftover").exists() && bench.join(MARKER).exists());

        let store = tmp.path().join("store");
        Db::open(&store, Options::default())
            .unwrap()
            .close()
            .unwrap();
        prepare_dir(&store).unwrap();
        assert!(store.join(MARKER).exists());
    }
}
