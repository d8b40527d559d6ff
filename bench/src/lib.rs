//! kivi's benchmark suite: the workloads of docs/workloads.md, run on
//! kivi and, with the `peers` feature, on the stores a user would pick
//! instead (LMDB, RocksDB, LevelDB, redb, fjall), in the same run on the
//! same machine, rounds interleaving the stores.
//!
//! Each round gives every store a fresh directory and runs the selected
//! workloads in order (a workload that needs data finds it loaded by
//! workload 1, run untimed if not selected). Results go to a table with
//! each store's figure and its ratio to kivi, and to JSON lines.

pub mod cgroup;
pub mod counting;
#[cfg(feature = "slatedb")]
mod follower_slatedb;
pub mod follower_suite;
pub mod kv40;
pub mod kvlds_client;
pub mod kvlds_workload;
mod lag;
mod limited;
pub mod measure;
pub mod mkpairs;
pub mod object_suite;
mod report;
pub mod resp_workloads;
pub mod server;
pub mod stores;
mod syncs;
pub mod tables;
pub mod workloads;

pub use limited::store_child;
pub use syncs::sync_child;

use measure::{disk_bytes, peak_rss, reset_peak_rss, Figure};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stores::{Kind, Settings, Store, StoreError};

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    pub stores: Vec<String>,
    /// Workload numbers, 1 to [`WORKLOADS`].
    pub workloads: Vec<u32>,
    pub n: u64,
    pub rounds: u32,
    pub dir: PathBuf,
    /// Where to write JSON lines, if anywhere.
    pub json: Option<PathBuf>,
    /// Workload 9's long random-update run, in multiples of n.
    pub steady_updates: u64,
    /// The program to run as a child for workload 10, the sync check and
    /// `memory_limit` (normally the running `kivi` binary).
    pub program: PathBuf,
    /// Run each store in a child process inside a memory cgroup of this
    /// many bytes (page cache included), each store's own caches given
    /// kivi's default share of it ([`stores::Settings`]).
    pub memory_limit: Option<u64>,
    /// Operations of each timed workload after the load, where fewer than
    /// n are wanted (a 100M-pair store read 5M times); n if unset.
    pub ops: Option<u64>,
    /// Seconds after which a timed workload stops and counts the
    /// operations it did (the load, workload 9's run and 10 excepted).
    pub max_seconds: Option<u64>,
}

impl Config {
    /// Operations of a timed workload after the load.
    pub fn ops(&self) -> u64 {
        self.ops.map_or(self.n, |o| o.min(self.n))
    }
}

/// One figure, as written to the JSON lines (and passed from a store's
/// child process to the suite under `--memory-limit`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub store: String,
    pub workload: String,
    pub n: u64,
    pub round: u32,
    pub ops_per_sec: Option<f64>,
    pub cpu_us_per_op: Option<f64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999_us: Option<f64>,
    pub bytes_per_pair: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    /// Bytes the store made the kernel read from and write to the devices,
    /// per operation of the workload (`/proc/self/io`; background threads
    /// included, a write counted when its page is dirtied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_read_per_op: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_written_per_op: Option<f64>,
    /// `--memory-limit`: the limit of the store's cgroup, and the most the
    /// cgroup held (process memory and page cache together) from the
    /// store's start to the end of this workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// Why the store stopped before its workloads were done (workload
    /// "failed"): killed for want of memory, or its error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The workload reached `--max-seconds` first: the operations it did,
    /// which its rate is over.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stopped_early: Option<u64>,
    /// Workload 10: seconds from open to the first checked read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reopen_seconds: Option<f64>,
    /// The durability check: fsync-family calls per durable commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub syncs_per_commit: Option<f64>,
    /// Workload 9's long update run: (updates done, bytes on disk per pair)
    /// sampled as it goes, so space over time can be plotted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub space_samples: Option<Vec<(u64, f64)>>,
    /// The same samples as bytes on disk over the store's own count of live
    /// bytes, for stores that count them (kivi).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amplification_samples: Option<Vec<(u64, f64)>>,
    /// Sealed tables: bytes of the table's `.spl` and `.spi`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_bytes: Option<u64>,
    /// Sealed tables: bytes of kivi's checksum sidecar (`.kvsum`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar_bytes: Option<u64>,
    /// Server workloads: the client that drove the server ("trickling",
    /// "bursty", "redis-benchmark").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The expiring-cache workload: the most the store's files held against
    /// its live data once keys were expiring.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak_files_per_live: Option<f64>,
    /// Server workloads: the rate is the median over this many windows
    /// of this many seconds (0 windows: the whole run's rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<usize>,
    /// The object-store suite: object requests per operation (write, read
    /// or batch) as the counting wrapper around the store's client saw
    /// them, all kinds together, PUTs and GETs apart; bytes PUT per pair
    /// written; and the requests per operation as the store itself counts
    /// them, where it does (kivi's `Stats`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub object_requests_per_op: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub object_puts_per_op: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub object_gets_per_op: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub object_put_bytes_per_pair: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stats_object_requests_per_op: Option<f64>,
}

impl Record {
    pub(crate) fn new(store: &str, workload: &str, n: u64, round: u32) -> Record {
        Record {
            store: store.to_string(),
            workload: workload.to_string(),
            n,
            round,
            ops_per_sec: None,
            cpu_us_per_op: None,
            p50_us: None,
            p99_us: None,
            p999_us: None,
            bytes_per_pair: None,
            peak_rss_bytes: None,
            device_read_per_op: None,
            device_written_per_op: None,
            memory_limit_bytes: None,
            peak_memory_bytes: None,
            failure: None,
            reopen_seconds: None,
            stopped_early: None,
            syncs_per_commit: None,
            space_samples: None,
            amplification_samples: None,
            file_bytes: None,
            sidecar_bytes: None,
            client: None,
            peak_files_per_live: None,
            window_seconds: None,
            windows: None,
            object_requests_per_op: None,
            object_puts_per_op: None,
            object_gets_per_op: None,
            object_put_bytes_per_pair: None,
            stats_object_requests_per_op: None,
        }
    }

    fn of(store: &str, f: &Figure, n: u64, round: u32) -> Record {
        Record {
            ops_per_sec: Some(f.ops_per_sec()),
            cpu_us_per_op: Some(f.cpu_us_per_op()),
            p50_us: f.p50_us,
            p99_us: f.p99_us,
            p999_us: f.p999_us,
            peak_rss_bytes: peak_rss(),
            device_read_per_op: Some(f.device_read as f64 / f.ops.max(1) as f64),
            device_written_per_op: Some(f.device_written as f64 / f.ops.max(1) as f64),
            stopped_early: f.stopped_early.then_some(f.ops),
            ..Record::new(store, f.workload, n, round)
        }
    }
}

/// Everything that can stop a run.
#[derive(Debug)]
pub struct BenchError(pub String);

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

impl From<StoreError> for BenchError {
    fn from(e: StoreError) -> Self {
        BenchError(e.0)
    }
}

fn io_err(what: impl std::fmt::Display, e: std::io::Error) -> BenchError {
    BenchError(format!("{what}: {e}"))
}

/// The embedded workloads are numbered 1 to this.
pub const WORKLOADS: u32 = 13;
/// Workloads 8 run with these thread counts.
pub const THREAD_COUNTS: [u64; 4] = [1, 2, 8, 64];
/// Left in the bench directory so a later run knows it may delete it.
const MARKER: &str = "KIVI-BENCH";
/// Appends timed by the fdatasync probe, and their size.
const SYNC_PROBES: u64 = 1000;
const SYNC_PROBE_BYTES: usize = 80;
/// The long random-update run of workload 9 (steady-state space), in
/// multiples of n, unless the run says otherwise.
pub const STEADY_UPDATES: u64 = 3;
/// Samples of bytes on disk taken during that run (space over time).
const STEADY_SAMPLES: u64 = 30;

/// Runs the suite, printing progress lines and the final tables to `out`.
pub fn run(cfg: &Config, out: &mut dyn Write) -> Result<Vec<Record>, BenchError> {
    let kinds: Vec<Kind> = cfg
        .stores
        .iter()
        .map(|name| {
            stores::kind(name).ok_or_else(|| {
                let known: Vec<&str> = stores::kinds().iter().map(|k| k.name).collect();
                BenchError(format!(
                    "unknown store {name:?}; this build has: {} (build with --features peers for the others)",
                    known.join(", ")
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    if let Some(w) = cfg.workloads.iter().find(|w| !(1..=WORKLOADS).contains(*w)) {
        return Err(BenchError(format!(
            "no workload {w}; they are numbered 1 to {WORKLOADS}"
        )));
    }
    prepare_dir(&cfg.dir)?;
    let mut json = match &cfg.json {
        Some(p) => {
            Some(fs::File::create(p).map_err(|e| io_err(format!("create {}", p.display()), e))?)
        }
        None => None,
    };
    let mut records = Vec::new();
    writeln!(out, "{}", report::header(cfg, &kinds)).map_err(|e| io_err("write output", e))?;
    let sync_check = syncs::check(cfg, &kinds, out)?;
    {
        let mut emit = |r: Record| -> Result<(), BenchError> {
            if let Some(f) = json.as_mut() {
                let line = serde_json::to_string(&r).expect("records serialize");
                writeln!(f, "{line}").map_err(|e| io_err("write JSON", e))?;
            }
            writeln!(out, "{}", report::line(&r)).map_err(|e| io_err("write output", e))?;
            records.push(r);
            Ok(())
        };
        for r in sync_check {
            emit(r)?;
        }
        for round in 1..=cfg.rounds {
            emit(fdatasync_probe(&cfg.dir, cfg.n, round)?)?;
            for kind in &kinds {
                let dir = cfg.dir.join(format!("round{round}-{}", kind.name));
                match cfg.memory_limit {
                    None => run_store(cfg, kind, &dir, round, &Settings::default(), &mut emit)?,
                    Some(limit) => limited::run_store(cfg, kind, &dir, round, limit, &mut emit)?,
                }
                if dir.exists() {
                    fs::remove_dir_all(&dir)
                        .map_err(|e| io_err(format!("delete {}", dir.display()), e))?;
                }
            }
        }
    }
    write!(out, "{}", report::tables(cfg, &records)).map_err(|e| io_err("write output", e))?;
    Ok(records)
}

fn wants(cfg: &Config, w: u32) -> bool {
    cfg.workloads.contains(&w)
}

/// A progress bar for a workload, counting operations.
pub(crate) fn bar(len: u64, what: String) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    let style = indicatif::ProgressStyle::with_template(
        "{msg:34} [{bar:30}] {human_pos}/{human_len} ({eta})",
    )
    .expect("valid template")
    .progress_chars("=> ");
    pb.set_style(style);
    pb.set_message(what);
    pb
}

/// Runs one workload with a progress bar.
fn timed<T>(store: &str, name: &str, len: u64, f: impl FnOnce(&(dyn Fn(u64) + Sync)) -> T) -> T {
    let pb = bar(len, format!("{store}: {name}"));
    let result = f(&|k| pb.inc(k));
    pb.finish_and_clear();
    result
}

fn space(
    store: &dyn Store,
    dir: &Path,
    name: &str,
    label: &str,
    n: u64,
    round: u32,
) -> Result<Record, BenchError> {
    store.settle()?;
    let bytes = disk_bytes(dir).map_err(|e| io_err(format!("measure {}", dir.display()), e))?;
    Ok(Record {
        bytes_per_pair: Some(bytes as f64 / n as f64),
        ..Record::new(name, label, n, round)
    })
}

/// All selected workloads on one store in `dir`, in order, each figure
/// handed to `emit` as it is measured.
pub(crate) fn run_store(
    cfg: &Config,
    kind: &Kind,
    dir: &Path,
    round: u32,
    settings: &Settings,
    emit: &mut dyn FnMut(Record) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    let (n, ops, name) = (cfg.n, cfg.ops(), kind.name);
    reset_peak_rss();
    measure::set_time_cap(cfg.max_seconds.map(Duration::from_secs));
    let store = (kind.open)(dir, settings)?;
    let s: &dyn Store = store.as_ref();
    let load = timed(name, "1 bulk insert", n, |t| {
        workloads::bulk_insert(s, n, t)
    })?;
    if wants(cfg, 1) {
        emit(Record::of(name, &load, n, round))?;
    }
    if wants(cfg, 9) {
        emit(space(s, dir, name, "space_after_load", n, round)?)?;
    }
    if wants(cfg, 2) {
        let f = timed(name, "2 random read", ops, |t| {
            workloads::random_read(s, n, ops, t)
        })?;
        emit(Record::of(name, &f, n, round))?;
    }
    if wants(cfg, 3) {
        let f = timed(name, "3 random update", ops, |t| {
            workloads::updates(s, n, ops, (0x5eed_0003, 1), true, t)
        })?;
        emit(Record::of(name, &f, n, round))?;
    }
    if wants(cfg, 4) {
        let f = timed(name, "4 random mixed", ops, |t| {
            workloads::random_mixed(s, n, ops, t)
        })?;
        emit(Record::of(name, &f, n, round))?;
    }
    // "After 3 and 4" means nothing when neither ran.
    if wants(cfg, 9) && (wants(cfg, 3) || wants(cfg, 4)) {
        emit(space(s, dir, name, "space_after_updates", n, round)?)?;
    }
    if wants(cfg, 5) {
        let f = timed(name, "5 range scan", n, |t| workloads::range_scan(s, n, t))?;
        emit(Record::of(name, &f, n, round))?;
    }
    if wants(cfg, 6) {
        let f = timed(name, "6 hot-spot read", ops, |t| {
            workloads::hotspot_read(s, n, ops, t)
        })?;
        emit(Record::of(name, &f, n, round))?;
    }
    if wants(cfg, 11) {
        let f = timed(name, "11 Zipfian read", ops, |t| {
            workloads::zipfian_read(s, n, ops, t)
        })?;
        emit(Record::of(name, &f, n, round))?;
    }
    if wants(cfg, 12) {
        let f = timed(name, "12 Zipfian update", ops, |t| {
            workloads::zipfian_update(s, n, ops, t)
        })?;
        emit(Record::of(name, &f, n, round))?;
    }
    if wants(cfg, 13) {
        let scans = workloads::short_scan_count(ops);
        let f = timed(name, "13 short scans", scans, |t| {
            workloads::short_scans(s, n, scans, t)
        })?;
        emit(Record::of(name, &f, n, round))?;
    }
    if wants(cfg, 7) {
        let f = timed(name, "7 single put", workloads::SINGLE_PUTS, |t| {
            workloads::single_put(s, n, t)
        })?;
        emit(Record::of(name, &f, n, round))?;
    }
    if wants(cfg, 8) {
        for threads in THREAD_COUNTS {
            // A fifth of n (200,000 for a million pairs: a few seconds at 100K/s).
            let total = (n / 5).clamp(1_000, 200_000) / threads * threads;
            let label = format!("8 concurrent put, {threads} threads");
            let f = timed(name, &label, total, |t| {
                workloads::concurrent_put(s, n, threads, total, t)
            })?;
            emit(Record::of(name, &f, n, round))?;
        }
    }
    if wants(cfg, 9) {
        emit(steady_space(cfg, s, dir, name, round)?)?;
    }
    drop(store);
    if wants(cfg, 10) {
        emit(recovery(cfg, kind, dir, round, settings)?)?;
    }
    Ok(())
}

/// 9's long run: random updates of `steady_updates` × n pairs, bytes on
/// disk sampled as it goes.
fn steady_space(
    cfg: &Config,
    s: &dyn Store,
    dir: &Path,
    name: &str,
    round: u32,
) -> Result<Record, BenchError> {
    let n = cfg.n;
    let updates = cfg.steady_updates * n;
    let chunk = (updates / STEADY_SAMPLES).max(1);
    let mut samples = Vec::new();
    let mut amplification = Vec::new();
    let started = Instant::now();
    let cpu = measure::process_cpu();
    timed(
        name,
        "9 long random-update run",
        updates,
        |t| -> Result<(), BenchError> {
            let mut done = 0;
            let mut seed = 0x5eed_0009;
            while done < updates {
                let count = chunk.min(updates - done);
                workloads::updates(s, n, count, (seed, 1 + n + done), false, t)?;
                done += count;
                seed += 1;
                let bytes =
                    disk_bytes(dir).map_err(|e| io_err(format!("measure {}", dir.display()), e))?;
                samples.push((done, bytes as f64 / n as f64));
                if let Some(live) = s.live_bytes().filter(|&l| l > 0) {
                    amplification.push((done, bytes as f64 / live as f64));
                }
            }
            Ok(())
        },
    )?;
    // The rate of the whole run, sampling included (a directory listing
    // per sample).
    let secs = started.elapsed().as_secs_f64();
    let cpu_secs = (measure::process_cpu() - cpu).as_secs_f64();
    let mut steady = space(s, dir, name, "space_steady", n, round)?;
    steady.ops_per_sec = Some(updates as f64 / secs);
    steady.cpu_us_per_op = Some(cpu_secs * 1e6 / updates as f64);
    steady.peak_rss_bytes = peak_rss();
    steady.space_samples = Some(samples);
    steady.amplification_samples = (!amplification.is_empty()).then_some(amplification);
    Ok(steady)
}

/// 10: kill -9 a child process in the middle of random updates on the
/// store in `dir`, then time opening it and one checked read.
fn recovery(
    cfg: &Config,
    kind: &Kind,
    dir: &Path,
    round: u32,
    settings: &Settings,
) -> Result<Record, BenchError> {
    let mut child = std::process::Command::new(&cfg.program)
        .args(["bench", "--internal-update-child", kind.name])
        .arg(dir)
        .arg(cfg.n.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| io_err(format!("start {}", cfg.program.display()), e))?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped");
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| io_err("read the update child", e))?;
    if line.trim() != "updating" {
        let _ = child.kill();
        return Err(BenchError(format!(
            "{}: the update child did not start: {line:?}",
            kind.name
        )));
    }
    std::thread::sleep(Duration::from_secs(2));
    child
        .kill()
        .map_err(|e| io_err("kill the update child", e))?;
    child
        .wait()
        .map_err(|e| io_err("reap the update child", e))?;
    let t = Instant::now();
    let store = (kind.open)(dir, settings)?;
    let mut value = Vec::new();
    let found = store.get(&kv40::key(0), &mut value)?;
    let seconds = t.elapsed().as_secs_f64();
    if !found || kv40::index_of(&value) != Some(0) {
        return Err(BenchError(format!(
            "{}: key 0 is wrong after the kill",
            kind.name
        )));
    }
    Ok(Record {
        reopen_seconds: Some(seconds),
        ..Record::new(kind.name, "recovery", cfg.n, round)
    })
}

/// The child of workload 10: random updates on the store in `dir` until it
/// is killed. Prints "updating" once it has started.
pub fn update_child(store: &str, dir: &Path, n: u64) -> Result<(), BenchError> {
    let kind = stores::kind(store).ok_or_else(|| BenchError(format!("unknown store {store}")))?;
    let s = (kind.open)(dir, &Settings::default())?;
    println!("updating");
    std::io::stdout().flush().map_err(|e| io_err("write", e))?;
    let mut seed = 0x5eed_0010;
    loop {
        workloads::updates(s.as_ref(), n, n, (seed, 1), false, &|_| ())?;
        seed += 1;
    }
}

/// The machine's own fdatasync latency: small appends, each synced.
fn fdatasync_probe(dir: &Path, n: u64, round: u32) -> Result<Record, BenchError> {
    let path = dir.join("fdatasync-probe");
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io_err(format!("create {}", path.display()), e))?;
    let buf = [0x5au8; SYNC_PROBE_BYTES];
    let mut nanos = Vec::with_capacity(SYNC_PROBES as usize);
    let meter = measure::Meter::start();
    for _ in 0..SYNC_PROBES {
        f.write_all(&buf).map_err(|e| io_err("append", e))?;
        let t = Instant::now();
        f.sync_data().map_err(|e| io_err("fdatasync", e))?;
        nanos.push(measure::nanos_since(t));
    }
    let fig = meter
        .finish("fdatasync", "fdatasync of an 80-byte append", SYNC_PROBES)
        .with_latencies(nanos);
    drop(f);
    let _ = fs::remove_file(&path);
    Ok(Record::of("machine", &fig, n, round))
}

/// Deletes and recreates `dir`, but only when that loses nothing of the
/// user's: it must not exist, be empty, or be a previous bench directory.
pub(crate) fn prepare_dir(dir: &Path) -> Result<(), BenchError> {
    let shown = dir.display();
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(format!("inspect {shown}"), e)),
        Ok(m) if !m.is_dir() => {
            return Err(BenchError(format!(
                "bench directory {shown} exists and is not a directory; refusing to replace it"
            )))
        }
        Ok(_) => {
            let empty = fs::read_dir(dir)
                .map_err(|e| io_err(format!("list {shown}"), e))?
                .next()
                .is_none();
            if !empty && !dir.join(MARKER).exists() {
                return Err(BenchError(format!(
                    "bench directory {shown} exists and is not a previous bench directory; \
                     refusing to delete it (choose another --dir)"
                )));
            }
            fs::remove_dir_all(dir).map_err(|e| io_err(format!("delete {shown}"), e))?;
        }
    }
    fs::create_dir_all(dir).map_err(|e| io_err(format!("create {shown}"), e))?;
    fs::write(
        dir.join(MARKER),
        "Scratch directory of `kivi bench`; each run deletes and recreates it.\n",
    )
    .map_err(|e| io_err(format!("write {}", dir.join(MARKER).display()), e))
}
