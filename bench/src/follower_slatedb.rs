//! SlateDB's read-replica lag beside kivi's follower lag, in the follower
//! suite (`kivi bench --followers`, feature `slatedb`), measured by the
//! same code as kivi's (lag.rs): `writers` threads put random kv40 keys,
//! each put awaiting its durability; a marker thread writes a numbered key
//! every 10 ms; a probe reads each marker on the reader, every 100 us,
//! from the writer's acknowledgement until it is there. Lag is that time.
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
use crate::kv40;
use crate::{io_err, BenchError, Record};
use object_store::ObjectStore;
use slatedb::config::DbReaderOptions;
use slatedb::{Db, DbReader, WriteBatch};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

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
        // Named after the configuration: a marker of the one before, on
        // the same writer, would be found at once.
        let tag = interval_name(poll);
        let phase = crate::lag::measure(
            cfg.writers,
            cfg.n,
            seconds,
            &format!("lag-marker-{tag}-"),
            |k, v| {
                rt.block_on(async { db.put(k, v).await?.await_durable().await })
                    .map_err(|e| err("write", e))
            },
            |k| {
                Ok(rt
                    .block_on(reader.get(k))
                    .map_err(|e| err("reader read", e))?
                    .is_some())
            },
        )?;
        rt.block_on(reader.close())
            .map_err(|e| err("close the reader", e))?;

        let mut r = Record::new(
            &format!("slatedb-reader-{}", interval_name(poll)),
            &format!("follower_lag_{}w", cfg.writers),
            cfg.n,
            1,
        );
        r.ops_per_sec = Some(phase.writes as f64 / phase.write_secs);
        r.p50_us = crate::measure::percentile_us(&phase.lags, 50.0);
        r.p99_us = crate::measure::percentile_us(&phase.lags, 99.0);
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
                crate::lag::GIVE_UP.as_secs()
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
