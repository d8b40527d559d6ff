//! The follower suite (`kivi bench --followers`; docs/workloads.md,
//! "Follower workload"): a kivi writer and its followers on the
//! S3-compatible server the `AWS_*` variables name, under a fresh prefix of
//! one bucket (an in-memory store of this process's own in the suite's
//! tests). Every write is durable.
//!
//! 1. The writer bulk-loads kv40 pairs 0..n; a follower opens beside it.
//! 2. **Lag**: `writers` threads put random keys as fast as they are
//!    acknowledged; meanwhile a marker thread writes a numbered key every
//!    10 ms, and a probe reads each marker on the follower from the moment
//!    the writer acknowledged it until it is there (every 100 us). Lag is
//!    that time: acknowledged on the writer to visible on the follower.
//! 3. **Reads**: the writer checkpoints (so that neither store is busy
//!    with the writes of step 2) and the follower catches up; each is warmed
//!    by a scan of every pair and one untimed pass; then the same random
//!    gets run on the writer and on the follower in turn, `READ_ROUNDS`
//!    times: reads/s of each, the median round's.
//! 4. **Takeover on command**: `takeovers` times, a new follower opens and
//!    catches up while the writer keeps writing; `Db::promote`, then its
//!    first put: the time from the promote call to that put's
//!    acknowledgement. The promoted follower is the next round's writer.
//! 5. **Takeover after the writer dies**: `kill_takeovers` times, a standby
//!    (`take_over_after`) follows a writer that is then dropped (its lease
//!    is renewed no more, as after kill -9); the time from the drop to the
//!    standby's first acknowledged put. (The writer last renewed its lease
//!    up to a second before it died, so this may be less than
//!    `take_over_after`; never more than it plus two lease checks, 20 ms
//!    apart near a renewal, and the takeover.)

use crate::kv40::{self, Rng};
use crate::measure::percentile_us;
use crate::{io_err, prepare_dir, BenchError, Record};
use kivi::{Db, Options, WriteBatch};
use kivi_object_storage::{Config, ObjectStorage};
use object_store::ObjectStore;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct FollowerConfig {
    pub n: u64,
    /// Local scratch directory: the stores' local caches.
    pub dir: PathBuf,
    pub json: Option<PathBuf>,
    /// The bucket on the server the `AWS_*` variables name; `None`: an
    /// in-memory store of this process's own.
    pub bucket: Option<String>,
    /// Writer threads during the lag measurement.
    pub writers: u64,
    /// How long the lag measurement runs.
    pub write_seconds: f64,
    /// Random reads of each pass (at most n).
    pub reads: u64,
    /// Takeovers on command, and after the writer's death.
    pub takeovers: u64,
    pub kill_takeovers: u64,
    /// The standby's `take_over_after` in step 5 (at least 1.5 s).
    pub take_over_after: Duration,
}

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError(format!("{what}: {e}"))
}

/// Opens stores under one prefix of one client, each with a cache of its own.
struct Place {
    client: Arc<dyn ObjectStore>,
    prefix: String,
    dir: PathBuf,
    opened: std::cell::Cell<u32>,
}

impl Place {
    fn storage(&self, read_only: bool) -> Result<Arc<ObjectStorage>, BenchError> {
        let i = self.opened.get();
        self.opened.set(i + 1);
        let cache = self.dir.join(format!("cache-{i}"));
        std::fs::create_dir_all(&cache)
            .map_err(|e| io_err(format!("create {}", cache.display()), e))?;
        let config = Config {
            cache_dir: Some(cache),
            read_only,
            ..Config::default()
        };
        ObjectStorage::open(self.client.clone(), &self.prefix, &self.prefix, config)
            .map(Arc::new)
            .map_err(|e| err("open on the object store", e))
    }

    fn writer(&self) -> Result<Db, BenchError> {
        Db::open_with_storage(self.storage(false)?, Options::default()).map_err(|e| err("open", e))
    }

    fn follower(&self, take_over_after: Option<Duration>) -> Result<Db, BenchError> {
        let opts = Options {
            take_over_after,
            ..Options::default()
        };
        Db::follow_with_storage(self.storage(true)?, opts).map_err(|e| err("follow", e))
    }
}

pub fn run(cfg: &FollowerConfig, out: &mut dyn Write) -> Result<Vec<Record>, BenchError> {
    prepare_dir(&cfg.dir)?;
    let client: Arc<dyn ObjectStore> = match &cfg.bucket {
        Some(bucket) => Arc::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .build()
                .map_err(|e| err(&format!("S3 client for bucket {bucket}"), e))?,
        ),
        None => Arc::new(object_store::memory::InMemory::new()),
    };
    let place = Place {
        client,
        prefix: format!("bench-followers-{:08x}", rand::random::<u32>()),
        dir: cfg.dir.clone(),
        opened: std::cell::Cell::new(0),
    };
    let mut records = Vec::new();
    let say = |out: &mut dyn Write, line: String| {
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let record = |workload: &str| Record::new("kivi", workload, cfg.n, 1);

    // 1. Load.
    let mut writer = place.writer()?;
    for start in (0..cfg.n).step_by(1000) {
        let mut b = WriteBatch::new();
        for i in start..(start + 1000).min(cfg.n) {
            b.put(kv40::key(i), kv40::value(i, 0))
                .map_err(|e| err("batch", e))?;
        }
        writer.write(b).map_err(|e| err("load", e))?;
    }
    let follower = place.follower(None)?;
    follower.catch_up().map_err(|e| err("catch up", e))?;

    // 2. Lag under concurrent writers.
    let crate::lag::Lag {
        lags,
        writes,
        write_secs: secs,
        gave_up,
    } = crate::lag::measure(
        cfg.writers,
        cfg.n,
        cfg.write_seconds,
        "lag-marker-",
        |k, v| writer.put(k, v).map_err(|e| err("write", e)),
        |k| {
            Ok(follower
                .get(k)
                .map_err(|e| err("follower read", e))?
                .is_some())
        },
    )?;
    if let Some((m, _)) = gave_up {
        return Err(BenchError(format!(
            "marker {m} never showed on the follower ({} s after its acknowledgement)",
            crate::lag::GIVE_UP.as_secs()
        )));
    }
    let mut r = record(&format!("follower_lag_{}w", cfg.writers));
    r.ops_per_sec = Some(writes as f64 / secs);
    r.p50_us = percentile_us(&lags, 50.0);
    r.p99_us = percentile_us(&lags, 99.0);
    say(
        out,
        format!(
            "follower lag, {} writers ({:.0} writes/s): p50 {:.1} ms, p99 {:.1} ms over {} markers",
            cfg.writers,
            r.ops_per_sec.unwrap_or(0.0),
            r.p50_us.unwrap_or(0.0) / 1e3,
            r.p99_us.unwrap_or(0.0) / 1e3,
            lags.len()
        ),
    );
    records.push(r);
    // SlateDB's read replica, measured the same way (follower_slatedb.rs).
    #[cfg(feature = "slatedb")]
    records.extend(crate::follower_slatedb::lag(
        cfg,
        &place.client,
        &place.prefix,
        out,
    )?);
    #[cfg(not(feature = "slatedb"))]
    say(
        out,
        "(SlateDB is not in this build: no reader lag beside kivi's; build with --features slatedb for it)".into(),
    );

    // 3. Reads on the writer and on the follower.
    writer.checkpoint().map_err(|e| err("checkpoint", e))?;
    follower.catch_up().map_err(|e| err("catch up", e))?;
    let reads = cfg.reads.min(cfg.n).max(1);
    let stores = [("writer", &writer), ("follower", &follower)];
    for (_, db) in stores {
        // Warmed alike: every leaf read once (the writer holds the leaves
        // it wrote; a follower that reloaded from a checkpoint has read
        // none), then one untimed pass.
        for pair in db.iter() {
            pair.map_err(|e| err("scan", e))?;
        }
        let _ = read_pass(db, reads, cfg.n, 1)?;
    }
    let mut rounds: [Vec<(f64, f64, f64)>; 2] = Default::default();
    for round in 0..READ_ROUNDS {
        for (i, (_, db)) in stores.iter().enumerate() {
            rounds[i].push(read_pass(db, reads, cfg.n, 2 + round)?);
        }
    }
    for ((name, _), mut passes) in stores.into_iter().zip(rounds) {
        passes.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (rate, p50, p99) = passes[passes.len() / 2];
        let mut r = record(&format!("reads_on_{name}"));
        r.ops_per_sec = Some(rate);
        r.p50_us = Some(p50);
        r.p99_us = Some(p99);
        say(
            out,
            format!(
                "random reads on the {name}: {rate:.0}/s, p50 {p50:.1} us, p99 {p99:.1} us (median of {READ_ROUNDS} passes of {reads})"
            ),
        );
        records.push(r);
    }
    drop(follower);

    // 4. Takeovers on command, each promoted follower the next writer.
    let mut took: Vec<Duration> = Vec::new();
    for t in 0..cfg.takeovers {
        let next = place.follower(None)?;
        next.catch_up().map_err(|e| err("catch up", e))?;
        writer
            .put(format!("before-takeover-{t}").as_bytes(), b"x")
            .map_err(|e| err("write", e))?;
        let started = Instant::now();
        next.promote().map_err(|e| err("promote", e))?;
        next.put(format!("after-takeover-{t}").as_bytes(), b"x")
            .map_err(|e| err("first write of the new writer", e))?;
        took.push(started.elapsed());
        if writer.put(b"stale", b"x").is_ok() {
            return Err(BenchError("the old writer wrote after a takeover".into()));
        }
        writer = next;
    }
    if !took.is_empty() {
        let mut r = record("takeover_on_command");
        r.p50_us = percentile_us(&took, 50.0);
        r.p99_us = percentile_us(&took, 99.0);
        say(
            out,
            format!(
                "takeover on command to the first acknowledged write: p50 {:.1} ms, p99 {:.1} ms over {} takeovers",
                r.p50_us.unwrap_or(0.0) / 1e3,
                r.p99_us.unwrap_or(0.0) / 1e3,
                took.len()
            ),
        );
        records.push(r);
    }

    // 5. Takeovers after the writer's death.
    let mut beyond: Vec<Duration> = Vec::new();
    for t in 0..cfg.kill_takeovers {
        let standby = place.follower(Some(cfg.take_over_after))?;
        writer
            .put(format!("before-death-{t}").as_bytes(), b"x")
            .map_err(|e| err("write", e))?;
        // A lease renewed at least once with the standby watching.
        std::thread::sleep(Duration::from_millis(1200));
        drop(writer);
        let died = Instant::now();
        loop {
            match standby.put(format!("after-death-{t}").as_bytes(), b"x") {
                Ok(()) => break,
                Err(kivi::Error::ReadOnly) if died.elapsed() < Duration::from_secs(30) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(err("the standby's first write", e)),
            }
        }
        beyond.push(died.elapsed());
        writer = standby;
    }
    if !beyond.is_empty() {
        let mut r = record("takeover_after_death");
        r.p50_us = percentile_us(&beyond, 50.0);
        r.p99_us = percentile_us(&beyond, 100.0);
        say(
            out,
            format!(
                "takeover after the writer's death (lease timeout {} ms) to the first acknowledged write: p50 {:.0} ms, worst {:.0} ms over {} deaths",
                cfg.take_over_after.as_millis(),
                r.p50_us.unwrap_or(0.0) / 1e3,
                r.p99_us.unwrap_or(0.0) / 1e3,
                beyond.len()
            ),
        );
        records.push(r);
    }
    writer.close().map_err(|e| err("close", e))?;
    if let Some(path) = &cfg.json {
        let mut text = String::new();
        for r in &records {
            text.push_str(&serde_json::to_string(r).expect("records serialize"));
            text.push('\n');
        }
        std::fs::write(path, text).map_err(|e| io_err(format!("write {}", path.display()), e))?;
    }
    Ok(records)
}

/// Timed read passes on each store, taken in turn (writer, follower,
/// writer, ...), so that a slow moment of the machine falls on both.
const READ_ROUNDS: u64 = 5;

/// Random gets of keys among the n: reads/s, p50 and p99 in microseconds.
fn read_pass(db: &Db, reads: u64, n: u64, seed: u64) -> Result<(f64, f64, f64), BenchError> {
    let mut rng = Rng::new(seed);
    let mut times = Vec::with_capacity(reads as usize);
    let started = Instant::now();
    let mut out = Vec::new();
    for _ in 0..reads {
        let i = rng.below(n);
        let t = Instant::now();
        if !db
            .get_into(&kv40::key(i), &mut out)
            .map_err(|e| err("read", e))?
        {
            return Err(BenchError(format!("key {i} missing")));
        }
        times.push(t.elapsed());
    }
    let rate = reads as f64 / started.elapsed().as_secs_f64();
    let p = |q| percentile_us(&times, q).unwrap_or(0.0);
    Ok((rate, p(50.0), p(99.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every step runs on an in-memory store and reports what it measured.
    #[test]
    fn the_suite_measures_lag_reads_and_takeovers() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = FollowerConfig {
            n: 3_000,
            dir: dir.path().join("followers"),
            json: Some(dir.path().join("out.json")),
            bucket: None,
            writers: 4,
            write_seconds: 0.3,
            reads: 500,
            takeovers: 3,
            kill_takeovers: 1,
            take_over_after: Duration::from_millis(1500),
        };
        let mut out = Vec::new();
        let records = run(&cfg, &mut out).unwrap();
        let names: Vec<(&str, &str)> = records
            .iter()
            .map(|r| (r.store.as_str(), r.workload.as_str()))
            .collect();
        let mut expected = vec![("kivi", "follower_lag_4w")];
        // SlateDB's reader lag after kivi's, its default poll interval first.
        #[cfg(feature = "slatedb")]
        expected.extend([
            ("slatedb-reader-10s", "follower_lag_4w"),
            ("slatedb-reader-100ms", "follower_lag_4w"),
        ]);
        expected.extend([
            ("kivi", "reads_on_writer"),
            ("kivi", "reads_on_follower"),
            ("kivi", "takeover_on_command"),
            ("kivi", "takeover_after_death"),
        ]);
        assert_eq!(names, expected);
        for r in &records {
            assert!(r.p50_us.is_some_and(|p| p > 0.0), "{r:?}");
            assert!(r.failure.is_none(), "{r:?}");
        }
        assert!(records[0].ops_per_sec.is_some_and(|w| w > 0.0));
        let lines = std::fs::read_to_string(dir.path().join("out.json")).unwrap();
        assert_eq!(lines.lines().count(), records.len());
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("follower lag"), "{text}");
        assert!(text.contains("SlateDB"), "{text}");
    }
}
