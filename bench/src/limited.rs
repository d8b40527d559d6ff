//! `--memory-limit`: each store's workloads in a child process inside a
//! memory cgroup of its own ([`MemoryCgroup`]), so the store lives within
//! the limit as it would in a container, its page cache counted. The child
//! prints each figure as a JSON line; the suite reads them as they come.
//! A child the kernel kills for want of memory is reported as such (a
//! "failed" figure), and the run goes on with the next store.

use crate::cgroup::MemoryCgroup;
use crate::stores::{self, Kind, Settings};
use crate::{io_err, BenchError, Config, Record};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What a child runs, passed to it as one JSON argument.
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    config: Config,
    store: String,
    dir: PathBuf,
    round: u32,
    cgroup: MemoryCgroup,
    limit: u64,
}

/// Lines of the child's standard output that carry a figure start with this.
const RECORD_PREFIX: &str = "record ";

/// Runs `kind`'s workloads in a child process limited to `limit` bytes.
pub(crate) fn run_store(
    cfg: &Config,
    kind: &Kind,
    dir: &Path,
    round: u32,
    limit: u64,
    emit: &mut dyn FnMut(Record) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    let name = format!(
        "kivi-bench-{}-{}-round{round}",
        std::process::id(),
        kind.name
    );
    let cgroup = MemoryCgroup::create(&name, limit)?;
    let result = run_child(cfg, kind, dir, round, limit, &cgroup, emit);
    cgroup.remove();
    result
}

fn run_child(
    cfg: &Config,
    kind: &Kind,
    dir: &Path,
    round: u32,
    limit: u64,
    cgroup: &MemoryCgroup,
    emit: &mut dyn FnMut(Record) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    let job = Job {
        config: cfg.clone(),
        store: kind.name.to_string(),
        dir: dir.to_path_buf(),
        round,
        cgroup: cgroup.clone(),
        limit,
    };
    let mut cmd = Command::new(&cfg.program);
    cmd.args(["bench", "--internal-store-child"])
        .arg(serde_json::to_string(&job).expect("jobs serialize"))
        .stdout(Stdio::piped());
    // In the box from its first instruction: what it sizes at start (its
    // allocator's settings, the store's defaults) sees the limit.
    cgroup.run_inside(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| io_err(format!("start {}", cfg.program.display()), e))?;
    let stdout = child.stdout.take().expect("piped");
    let mut last = "the start".to_string();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| io_err("read a store's child", e))?;
        let Some(json) = line.strip_prefix(RECORD_PREFIX) else {
            continue;
        };
        let record: Record = serde_json::from_str(json)
            .map_err(|e| BenchError(format!("{}: a figure that does not parse: {e}", kind.name)))?;
        last.clone_from(&record.workload);
        emit(record)?;
    }
    let status = child
        .wait()
        .map_err(|e| io_err("wait for a store's child", e))?;
    if status.success() {
        return Ok(());
    }
    let why = if cgroup.oom_kills() > 0 {
        format!(
            "killed by the kernel for want of memory (limit {} MiB) after {last}",
            limit >> 20
        )
    } else {
        format!("stopped after {last}: {status} (its error is above)")
    };
    emit(Record {
        memory_limit_bytes: Some(limit),
        peak_memory_bytes: cgroup.peak(),
        failure: Some(why),
        ..Record::new(kind.name, "failed", cfg.n, round)
    })
}

/// The child, started inside its cgroup: runs the store's workloads with
/// the cache kivi picks by default for the limit, and prints each figure.
pub fn store_child(job_json: &str) -> Result<(), BenchError> {
    let job: Job = serde_json::from_str(job_json)
        .map_err(|e| BenchError(format!("a store child's job does not parse: {e}")))?;
    job.cgroup.reset_peak();
    let kind = stores::kind(&job.store)
        .ok_or_else(|| BenchError(format!("unknown store {}", job.store)))?;
    // Read inside the cgroup, so it sees the limit.
    let settings = Settings {
        cache_bytes: Some(kivi::Options::default().cache_bytes),
        memory_limited: true,
    };
    eprintln!(
        "{}: in a memory cgroup of {} MiB, its own cache {} MiB",
        job.store,
        job.limit >> 20,
        settings.cache_bytes.unwrap_or(0) >> 20
    );
    let mut out = std::io::stdout().lock();
    crate::run_store(
        &job.config,
        &kind,
        &job.dir,
        job.round,
        &settings,
        &mut |mut record| {
            record.memory_limit_bytes = Some(job.limit);
            record.peak_memory_bytes = job.cgroup.peak();
            let json = serde_json::to_string(&record).expect("records serialize");
            writeln!(out, "{RECORD_PREFIX}{json}")
                .and_then(|()| out.flush())
                .map_err(|e| io_err("write a figure", e))
        },
    )
}
