//! A real process killed with SIGKILL while it commits.
//!
//! The test re-executes its own binary to run `kill_child_writer` as a child
//! process (it does nothing unless `KIVI_KILL_CHILD_DIR` is set). The child
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

use common::{
    assert_healthy, batch_value, check_recovered, dump, mix, BatchRec, Model, Status, WriterHistory,
};
use kivi::{Db, Options, WriteBatch};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DIR_VAR: &str = "KIVI_KILL_CHILD_DIR";
const RUN_VAR: &str = "KIVI_KILL_CHILD_RUN";
const THREADS_VAR: &str = "KIVI_KILL_CHILD_THREADS";
const KEYS_PER_THREAD: u64 = 64;

fn opts() -> Options {
    Options {
        page_size: 512,
        cache_bytes: 1 << 20,
        checkpoint_bytes: 64 << 10,
        segment_bytes: 64 << 10,
        ..Default::default()
    }
}

fn batch_id(run: u64, t: u64, n: u64) -> u64 {
    (run << 40) | (t << 32) | n
}

/// The operations of batch `n` of thread `t` in run `run`, in order. Both
/// processes compute them, so the child only has to say what was acknowledged.
fn batch_ops(run: u64, t: u64, n: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let id = batch_id(run, t, n);
    let mut x = mix(id);
    let count = 1 + x % 5;
    (0..count)
        .map(|_| {
            x = mix(x);
            let key = format!("t{t}/k{:03}", x % KEYS_PER_THREAD).into_bytes();
            if (x >> 32).is_multiple_of(7) {
                (key, None)
            } else {
                let v = batch_value(id, &key);
                (key, Some(v))
            }
        })
        .collect()
}

/// The child: writes until killed (or for at most a minute, should the
/// parent be gone).
#[test]
fn kill_child_writer() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return; // An ordinary test run: nothing to do.
    };
    let run: u64 = std::env::var(RUN_VAR).unwrap().parse().unwrap();
    let threads: u64 = std::env::var(THREADS_VAR).unwrap().parse().unwrap();
    let db = Db::open(&dir, opts()).expect("child: open failed");
    println!("READY");
    let deadline = Instant::now() + Duration::from_secs(60);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for n in 0.. {
                    if Instant::now() > deadline {
                        break;
                    }
                    let mut b = WriteBatch::new();
                    for (k, v) in batch_ops(run, t, n) {
                        match v {
                            Some(v) => b.put(k, v).unwrap(),
                            None => b.delete(k).unwrap(),
                        };
                    }
                    let r = db.write(b);
                    let mut out = std::io::stdout().lock();
                    match r {
                        Ok(_) => writeln!(out, "ACK {t} {n}").unwrap(),
                        Err(e) => {
                            writeln!(out, "ERR {t} {n} {e}").unwrap();
                            out.flush().unwrap();
                            std::process::exit(3);
                        }
                    }
                    out.flush().unwrap();
                    if t == 0 && n % 97 == 96 {
                        db.checkpoint().expect("child: checkpoint failed");
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

struct ChildRun {
    /// Per thread, the acknowledged batches (always 0..k).
    acked: Vec<u64>,
    ready: bool,
    lines: usize,
}

/// Runs the child on `dir` and kills it with SIGKILL after `delay`.
fn run_child(dir: &Path, run: u64, threads: u64, delay: Duration) -> ChildRun {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "kill_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_VAR, dir)
        .env(RUN_VAR, run.to_string())
        .env(THREADS_VAR, threads.to_string())
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
        // The harness prints "test kill_child_writer ... " before the
        // child's first line, on the same line.
        if line.ends_with("READY") {
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
    if std::env::var(DIR_VAR).is_ok() {
        return; // Never recurse from a child.
    }
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
