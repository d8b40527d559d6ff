//! A real process killed with SIGKILL while it commits.
//!
//! The child process is the `kivi-test-child kill-writer` program
//! (`tests/support/child.rs`, `common::child::kill_writer`). The child
//! opens a store in a directory and commits batches from a few threads with
//! the default durability (fsync); after each acknowledged commit it prints
//! `ACK <thread> <n>`. The parent kills it at a random moment (during
//! recovery, during commits, during checkpoints), reopens the store and
//! checks that every acknowledged batch is there, no batch is there in part
//! (every value names the batch that wrote it), and `check()` is clean. Some
//! iterations restart the child on the same directory, so a store is killed,
//! recovered, written and killed again many times.
//!
//! `KIVI_TEST_CASES` sets the number of kills, `KIVI_TEST_SEED` the seed of
//! the delays and the child's writes (the kill timing itself is real time).

mod common;

use common::child::{batch_id, batch_ops, kill_opts as opts};
use common::{assert_healthy, check_recovered, dump, BatchRec, Model, Status, WriterHistory};
use kivi::Db;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

struct ChildRun {
    /// Per thread, the acknowledged batches (always 0..k).
    acked: Vec<u64>,
    ready: bool,
    lines: usize,
}

/// Runs the child on `dir` and kills it with SIGKILL after `delay`.
fn run_child(dir: &Path, run: u64, threads: u64, delay: Duration) -> ChildRun {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kivi-test-child"))
        .arg("kill-writer")
        .arg(dir)
        .args([run.to_string(), threads.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the child failed");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    std::thread::sleep(delay);
    let exited_early = child.try_wait().unwrap();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let lines = reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    if let Some(status) = exited_early {
        panic!(
            "the child exited by itself ({status}) before the kill; stderr:\n{stderr}\nstdout:\n{}",
            lines.join("\n")
        );
    }
    let mut acked = vec![0u64; threads as usize];
    let mut ready = false;
    for line in &lines {
        if line == "READY" {
            ready = true;
            continue;
        }
        let mut parts = line.split_whitespace();
        match parts.next() {
            Some("ACK") => {
                let t: usize = parts.next().unwrap().parse().unwrap();
                let n: u64 = parts.next().unwrap().parse().unwrap();
                assert_eq!(n, acked[t], "thread {t}'s acknowledgements out of order");
                acked[t] += 1;
            }
            Some("ERR") => panic!("the child's write failed: {line}; stderr:\n{stderr}"),
            _ => {}
        }
    }
    ChildRun {
        acked,
        ready,
        lines: lines.len(),
    }
}

#[test]
fn kill_writer_at_random_moments() {
    let seed = common::env_u64("KIVI_TEST_SEED").unwrap_or(0x6b11);
    let kills = common::cases(20);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tmp = tempfile::tempdir().unwrap();
    let mut base = Model::new();
    let mut generation = 0;
    let (mut total_acked, mut in_doubt_present, mut restarts) = (0, 0, 0);
    for kill in 0..kills {
        if kill > 0 && rng.random_bool(0.3) {
            tmp = tempfile::tempdir().unwrap();
            base = Model::new();
            generation = 0;
        } else if kill > 0 {
            restarts += 1;
        }
        generation += 1;
        let run = kill + 1;
        let threads = rng.random_range(1..=4u64);
        let delay = Duration::from_micros(match rng.random_range(0..10) {
            0 => rng.random_range(0..3_000),          // while recovering
            1..=3 => rng.random_range(3_000..60_000), // early
            _ => rng.random_range(60_000..400_000),   // after many commits
        });
        let what = format!(
            "seed {seed} (KIVI_TEST_SEED={seed}) kill {kill}: run {run}, the store's run \
             {generation}, {threads} threads, killed after {delay:?}"
        );
        let child = run_child(tmp.path(), run, threads, delay);

        let histories: Vec<WriterHistory> = (0..threads)
            .map(|t| {
                let k = child.acked[t as usize];
                WriterHistory {
                    batches: (0..=k)
                        .map(|n| BatchRec {
                            id: batch_id(run, t, n),
                            ops: batch_ops(run, t, n).into_iter().collect(),
                            status: if n < k {
                                Status::Acked
                            } else {
                                Status::InDoubt
                            },
                            start: 0,
                            finish: 0,
                        })
                        .collect(),
                }
            })
            .collect();
        let db = Db::open(tmp.path(), opts())
            .unwrap_or_else(|e| panic!("{what}: reopening after the kill failed: {e}"));
        let observed = dump(&db);
        if let Err(msg) = check_recovered(&base, &histories, &observed, true) {
            panic!("{what}: wrong state after the kill: {msg}");
        }
        assert_healthy(&db, observed.len());
        for (t, h) in histories.iter().enumerate() {
            total_acked += child.acked[t];
            let last = h.batches.last().unwrap();
            if last
                .ops
                .iter()
                .any(|(k, v)| v.is_some() && observed.get(k) == v.as_ref())
            {
                in_doubt_present += 1;
            }
        }
        println!(
            "{what}: ready {}, {} lines, acknowledged {:?}, {} pairs",
            child.ready,
            child.lines,
            child.acked,
            observed.len()
        );
        base = observed;
        drop(db);
    }
    println!(
        "{kills} kills ({restarts} restarts of a killed store): {total_acked} batches \
         acknowledged, {in_doubt_present} unacknowledged batches found applied"
    );
    assert!(total_acked > 0, "the children never acknowledged anything");
}
