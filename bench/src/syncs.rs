//! The durability check: how many fsync-family system calls each store makes
//! per durable commit, counted by running a short pass of commits in a child
//! process under `strace -f -c` (Debian's strace), so that no comparison is
//! won by skipping durability.

use crate::stores::{self, Kind};
use crate::{io_err, kv40, BenchError, Config, Record};
use std::io::Write;
use std::path::Path;
use std::process::Command;

/// Commits the child makes in the measured pass: single puts, then batches.
const SINGLE_COMMITS: u64 = 100;
const BATCH_COMMITS: u64 = 100;
const BATCH_PAIRS: u64 = 10;

/// System calls that make data durable.
const SYNC_CALLS: [&str; 5] = ["fsync", "fdatasync", "sync_file_range", "msync", "syncfs"];

/// Runs the check for every store, or explains why it cannot.
pub fn check(cfg: &Config, kinds: &[Kind], out: &mut dyn Write) -> Result<Vec<Record>, BenchError> {
    let have_strace = Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_strace {
        writeln!(
            out,
            "durability check skipped: strace not found (bench/setup.sh installs it)"
        )
        .map_err(|e| io_err("write output", e))?;
        return Ok(Vec::new());
    }
    let mut records = Vec::new();
    for kind in kinds {
        // Opening and closing make syncs of their own: count a pass without
        // commits and subtract it.
        let idle = count(cfg, kind, 0)?;
        let busy = count(cfg, kind, 1)?;
        let commits = (SINGLE_COMMITS + BATCH_COMMITS) as f64;
        let per_commit = busy.saturating_sub(idle) as f64 / commits;
        records.push(Record {
            syncs_per_commit: Some(per_commit),
            ..Record::new(kind.name, "sync_check", cfg.n, 0)
        });
    }
    Ok(records)
}

/// fsync-family calls of one child run (`commits` 0: open and close only).
fn count(cfg: &Config, kind: &Kind, commits: u8) -> Result<u64, BenchError> {
    let dir = cfg.dir.join(format!("sync-check-{}-{commits}", kind.name));
    let trace = cfg
        .dir
        .join(format!("sync-check-{}-{commits}.strace", kind.name));
    let status = Command::new("strace")
        .args(["-f", "-c", "-q", "-e"])
        .arg(format!("trace={}", SYNC_CALLS.join(",")))
        .arg("-o")
        .arg(&trace)
        .arg(&cfg.program)
        .args(["bench", "--internal-sync-child", kind.name])
        .arg(&dir)
        .arg(commits.to_string())
        .status()
        .map_err(|e| io_err("run strace", e))?;
    if !status.success() {
        return Err(BenchError(format!(
            "{}: the sync-check child failed ({status})",
            kind.name
        )));
    }
    let summary = std::fs::read_to_string(&trace)
        .map_err(|e| io_err(format!("read {}", trace.display()), e))?;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&trace);
    Ok(parse_calls(&summary))
}

/// Sums the `calls` column of strace's `-c` summary over the sync calls.
fn parse_calls(summary: &str) -> u64 {
    summary
        .lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let name = *cols.last()?;
            if !SYNC_CALLS.contains(&name) {
                return None;
            }
            // "% time  seconds  usecs/call  calls  [errors]  syscall"
            cols.get(3)?.parse::<u64>().ok()
        })
        .sum()
}

/// The child of the check: opens a fresh store in `dir` and, when `commits`
/// is 1, makes the measured commits.
pub fn sync_child(store: &str, dir: &Path, commits: u8) -> Result<(), BenchError> {
    let kind = stores::kind(store).ok_or_else(|| BenchError(format!("unknown store {store}")))?;
    let s = (kind.open)(dir, &stores::Settings::default())?;
    if commits == 1 {
        for i in 0..SINGLE_COMMITS {
            s.put(&kv40::key(i), &kv40::value(i, 1))?;
        }
        for b in 0..BATCH_COMMITS {
            let pairs: Vec<_> = (0..BATCH_PAIRS)
                .map(|j| (kv40::key(b * BATCH_PAIRS + j), kv40::value(j, 2)))
                .collect();
            let refs: Vec<(&[u8], &[u8])> = pairs
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            s.write_batch(&refs)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_summaries_are_summed_over_sync_calls() {
        let summary = "% time     seconds  usecs/call     calls    errors syscall\n\
            ------ ----------- ----------- --------- --------- ----------------\n\
             98.00    0.012000          60       200           fdatasync\n\
              2.00    0.000100          10        10         1 fsync\n\
              0.00    0.000000           0         3           write\n\
            ------ ----------- ----------- --------- --------- ----------------\n\
            100.00    0.012100                   213         1 total\n";
        assert_eq!(parse_calls(summary), 210);
        assert_eq!(parse_calls(""), 0);
    }
}
