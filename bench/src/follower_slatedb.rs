//! SlateDB's read-replica lag beside kivi's follower lag, in the follower
//! suite (`kivi bench --followers`, feature `slatedb`), measured as kivi's
//! lag step measures it (follower_suite.rs, step 2): `writers` threads put
//! random kv40 keys, each put awaiting its durability; a marker thread
//! writes a numbered key every 10 ms; a probe reads each marker on the
//! reader, every 100 us, from the writer's acknowledgement until it is
//! there. Lag is that time.
//!
//! The writer is a `slatedb::Db` (SlateDB 0.18) with the object-store
//! suite's settings (stores/slatedb.rs: flush interval 1 ms, every write
//! awaiting `WriteHandle::await_durable`, which returns once the WAL object
//! holding it is put). The reader is SlateDB's own read replica, a
//! `slatedb::DbReader` in its default mode (`DbReaderMode::ManagedCheckpoint`)
//! on the same object store, under the same prefix, with default
//! `DbReaderOptions` but for the poll interval.
//!
//! What the reader sees, in slatedb 0.18's source (db_reader.rs): its one
//! background task ticks every `DbReaderOptions::manifest_poll_interval`
//! (default `Duration::from_secs(10)`, config.rs); each tick loads the
//! manifest and, unless `skip_wal_replay` (default false) is set, lists the
//! WAL objects written since its last replay and replays them into
//! in-memory tables (`WalReplayEnd::Latest` in this mode). So the reader
//! does see the WAL, not only memtable flushes: its lag is the wait for the
//! next tick (up to one interval) plus that tick's manifest load, WAL
//! listing and WAL reads. Between ticks a get reads only what the last tick
//! installed.
//!
//! Two configurations: the default interval and 100 ms. Under 10 s, a
//! 2-second write phase would catch a single slice of one poll cycle and its
//! lags would say where that slice fell; each configuration's write phase is
//! therefore at least two of its intervals (20 s under the default), so its
//! markers are spread over whole cycles. A marker not visible 30 s after its
//! acknowledgement ends the probing: the figure is then marked failed, over
//! the markers seen before it.

use crate::follower_suite::FollowerConfig;
use crate::kv40::{self, Rng};
use crate::measure::percentile;
use crate::{io_err, BenchError, Record};
use object_store::ObjectStore;
use slatedb::config::DbReaderOptions;
use slatedb::{Db, DbReader, WriteBatch};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// How long the probe waits for one marker before it gives up.
const GIVE_UP: Duration = Duration::from_secs(30);

/// The 100 ms configuration's poll interval.
const FAST_POLL: Duration = Duration::from_millis(100);

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError(format!("slatedb: {what}: {e}"))
}

/// "10s", "100ms": the poll interval in a store name.
fn interval_name(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// One configuration's lag measurement.
struct Phase {
    lags: Vec<Duration>,
    writes: u64,
    /// Seconds from the start to the writers' stop (the probe's wait for
    /// the last markers after it not counted).
    write_secs: f64,
    /// The marker the probe gave up on, and the markers left unprobed.
    gave_up: Option<(u64, u64)>,
}

/// What the probe returns: each marker's lag, and [`Phase::gave_up`].
type Probed = (Vec<Duration>, Option<(u64, u64)>);

/// Loads kv40 pairs 0..n into a SlateDB writer under `{prefix}-slatedb` of
/// `client`, then measures the lag of a `DbReader` with the default poll
/// interval and with 100 ms, printing a line for each; returns their
/// records (store `slatedb-reader-{interval}`, workload
/// `follower_lag_{writers}w`).
pub(crate) fn lag(
    cfg: &FollowerConfig,
    client: &Arc<dyn ObjectStore>,
    prefix: &str,
    out: &mut dyn Write,
) -> Result<Vec<Record>, BenchError> {
    let say = |out: &mut dyn Write, line: String| {
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let default_poll = DbReaderOptions::default().manifest_poll_interval;
    say(
        out,
        format!(
            "SlateDB 0.18 beside it: a slatedb::Db writer (flush_interval {} ms, every put \
             awaiting durability) and a slatedb::DbReader (ManagedCheckpoint mode) on the same \
             object store and prefix; the reader replays new WAL objects at each poll \
             (manifest_poll_interval, default {} ms), so its lag is the wait for the poll plus \
             the WAL reads",
            crate::stores::slatedb::FLUSH_INTERVAL.as_millis(),
            default_poll.as_millis()
        ),
    );
    // The suite's SlateDB requests on two threads, the machine's cores, as
    // in the object-store suite.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| io_err("start a tokio runtime", e))?;
    let rt = rt.handle();
    let path = format!("{prefix}-slatedb");
    let cache = cfg.dir.join("slatedb-cache");
    std::fs::create_dir_all(&cache)
        .map_err(|e| io_err(format!("create {}", cache.display()), e))?;
    let db = rt
        .block_on(
            Db::builder(path.clone(), client.clone())
                .with_settings(crate::stores::slatedb::settings(&cache))
                .build(),
        )
        .map_err(|e| err("open", e))?;
    for start in (0..cfg.n).step_by(1000) {
        let mut b = WriteBatch::new();
        for i in start..(start + 1000).min(cfg.n) {
            b.put(kv40::key(i), kv40::value(i, 0));
        }
        rt.block_on(async { db.write(b).await?.await_durable().await })
            .map_err(|e| err("load", e))?;
    }

    let mut records = Vec::new();
    for poll in [default_poll, FAST_POLL] {
        let options = DbReaderOptions {
            manifest_poll_interval: poll,
            ..DbReaderOptions::default()
        };
        let reader = rt
            .block_on(
                DbReader::builder(path.clone(), client.clone())
                    .with_options(options)
                    .build(),
            )
            .map_err(|e| err("open the reader", e))?;
        let seconds = cfg.write_seconds.max(2.0 * poll.as_secs_f64());
        let phase = measure(rt, &db, &reader, cfg, seconds, &interval_name(poll))?;
        rt.block_on(reader.close())
            .map_err(|e| err("close the reader", e))?;

        let mut r = Record::new(
            &format!("slatedb-reader-{}", interval_name(poll)),
            &format!("follower_lag_{}w", cfg.writers),
            cfg.n,
            1,
        );
        r.ops_per_sec = Some(phase.writes as f64 / phase.write_secs);
        r.p50_us = percentile_us(&phase.lags, 50.0);
        r.p99_us = percentile_us(&phase.lags, 99.0);
        let mut line = format!(
            "SlateDB reader lag, poll {} ms{}, {} writers ({:.0} writes/s, {:.0} s of writes): \
             p50 {:.1} ms, p99 {:.1} ms over {} markers",
            poll.as_millis(),
            if poll == default_poll {
                " (the default)"
            } else {
                ""
            },
            cfg.writers,
            r.ops_per_sec.unwrap_or(0.0),
            seconds,
            r.p50_us.unwrap_or(0.0) / 1e3,
            r.p99_us.unwrap_or(0.0) / 1e3,
            phase.lags.len()
        );
        if let Some((m, unprobed)) = phase.gave_up {
            let why = format!(
                "marker {m} not visible {} s after its acknowledgement; {unprobed} later markers \
                 unprobed",
                GIVE_UP.as_secs()
            );
            line.push_str(&format!(" (FAILED: {why})"));
            r.failure = Some(why);
        }
        say(out, line);
        records.push(r);
    }
    rt.block_on(db.close()).map_err(|e| err("close", e))?;
    Ok(records)
}

/// The nearest-rank `p`-th percentile (0-100) of `v`, in microseconds.
fn percentile_us(v: &[Duration], p: f64) -> Option<f64> {
    let mut nanos: Vec<u64> = v.iter().map(|d| d.as_nanos() as u64).collect();
    nanos.sort_unstable();
    percentile(&nanos, p)
}

/// kivi's lag step (follower_suite.rs) on SlateDB's writer and reader.
/// The markers are named after the configuration (`tag`): the writer is
/// the same for both, and a marker of the one before would be found at
/// once.
fn measure(
    rt: &Handle,
    db: &Db,
    reader: &DbReader,
    cfg: &FollowerConfig,
    seconds: f64,
    tag: &str,
) -> Result<Phase, BenchError> {
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(u64, Instant)>();
    let started = Instant::now();
    std::thread::scope(|s| {
        let load: Vec<_> = (0..cfg.writers)
            .map(|w| {
                let stop = &stop;
                s.spawn(move || -> Result<u64, BenchError> {
                    let mut rng = Rng::new(w + 1);
                    let mut done = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let i = rng.below(cfg.n.max(1));
                        let (k, v) = (kv40::key(i), kv40::value(i, done + 1));
                        rt.block_on(async { db.put(k, v).await?.await_durable().await })
                            .map_err(|e| err("write", e))?;
                        done += 1;
                    }
                    Ok(done)
                })
            })
            .collect();
        let marker = {
            let stop = &stop;
            s.spawn(move || -> Result<(), BenchError> {
                let mut m = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("lag-marker-{tag}-{m:08}");
                    rt.block_on(async {
                        db.put(key.as_bytes(), b"m").await?.await_durable().await
                    })
                    .map_err(|e| err("marker", e))?;
                    let _ = tx.send((m, Instant::now()));
                    m += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(())
            })
        };
        let probe = s.spawn(move || -> Result<Probed, BenchError> {
            let mut lags = Vec::new();
            let mut rx = rx.into_iter();
            while let Some((m, acked)) = rx.next() {
                let key = format!("lag-marker-{tag}-{m:08}");
                let give_up = acked + GIVE_UP;
                while rt
                    .block_on(reader.get(key.as_bytes()))
                    .map_err(|e| err("reader read", e))?
                    .is_none()
                {
                    if Instant::now() > give_up {
                        // The rest are counted, not waited for.
                        return Ok((lags, Some((m, rx.count() as u64))));
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                lags.push(acked.elapsed());
            }
            Ok((lags, None))
        });
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        let mut writes = 0;
        for h in load {
            writes += h.join().expect("writer thread")?;
        }
        marker.join().expect("marker thread")?;
        let write_secs = started.elapsed().as_secs_f64();
        let (lags, gave_up) = probe.join().expect("probe thread")?;
        Ok(Phase {
            lags,
            writes,
            write_secs,
            gave_up,
        })
    })
}
