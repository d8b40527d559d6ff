//! `--metrics ADDR`: the server's figures for Prometheus, at `GET /metrics`
//! in the OpenMetrics text format (which Prometheus scrapes as it does its
//! own). The registry and the encoding are the `prometheus-client` crate's;
//! every figure is read when scraped, from what the server and the store
//! already count (`Counters`, `CommandCounts`, `CommitStats`, `Db::stats`,
//! `Db::sync_times`), so serving commands pays nothing for the endpoint.
//!
//! The HTTP side is written here rather than taken from a crate: it answers
//! one path to a scraper, one request per connection (`Connection: close`),
//! and hyper with its server utilities would add about twenty crates for
//! that. The request is bounded in size (`MAX_REQUEST`) and time
//! (`REQUEST_TIMEOUT`), and few are served at once (`MAX_SCRAPES`). The
//! endpoint has no authentication: like kvlds, it listens on loopback unless
//! the operator allows more (`Config::metrics_remote`, see `protected_mode`).

use crate::committer::GROUP_WRITES_BOUNDS;
use crate::counters::Counters;
use crate::listen::{Listener, Stream};
use crate::Shared;
use kivi::HistogramSnapshot;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// A request's head (the request line and headers), at most.
const MAX_REQUEST: usize = 8 << 10;
/// A scraper sends its request within this, and takes the answer within it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Scrapes answered at once; a connection past them is closed at once.
const MAX_SCRAPES: usize = 8;
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Nanoseconds to seconds.
const NS: f64 = 1e-9;

/// The registry of the server's metrics: one collector reading `shared`.
pub fn registry(shared: Arc<Shared>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(Collect(shared)));
    r
}

/// The metrics, encoded.
pub fn render(registry: &Registry) -> String {
    let mut out = String::with_capacity(16 << 10);
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing to a String does not fail");
    out
}

/// Answers scrapes on `l` until the server stops.
pub async fn serve(l: Listener, shared: Arc<Shared>) {
    let registry = Arc::new(registry(shared.clone()));
    let slots = Arc::new(Semaphore::new(MAX_SCRAPES));
    let mut stop = shared.stop.clone();
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = l.accept() => a,
            _ = stop.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(listener = %l.local_addr(), error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, reason = "too many scrapes at once", "metrics: refused a connection");
            continue;
        };
        let registry = registry.clone();
        conns.spawn(async move {
            let answered = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &registry)).await;
            match answered {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => tracing::debug!(%peer, %reason, "metrics: request not answered"),
                Err(_) => tracing::debug!(%peer, "metrics: request timed out"),
            }
            drop(slot);
        });
    }
    conns.abort_all();
}

/// Reads one request and answers it.
async fn answer(mut stream: Box<dyn Stream>, registry: &Arc<Registry>) -> Result<(), String> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() >= MAX_REQUEST {
            respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            )
            .await;
            return Err("request too large".into());
        }
        let n = stream.read_buf(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before a whole request".into());
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let mut words = head.lines().next().unwrap_or("").split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n",
        )
        .await;
        return Ok(());
    }
    if path != "/metrics" {
        respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            "the metrics are at /metrics\n",
        )
        .await;
        return Ok(());
    }
    // The store's figures list its segment files: off the async workers.
    let registry = registry.clone();
    let body = tokio::task::spawn_blocking(move || render(&registry))
        .await
        .map_err(|e| e.to_string())?;
    let body = if method == "HEAD" { "" } else { &body };
    respond(&mut stream, "200 OK", CONTENT_TYPE, body).await;
    Ok(())
}

async fn respond(stream: &mut Box<dyn Stream>, status: &str, content_type: &str, body: &str) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Reads every figure at scrape time.
struct Collect(Arc<Shared>);

impl fmt::Debug for Collect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("kivi serve metrics")
    }
}

fn counter<V: prometheus_client::encoding::EncodeCounterValue>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: V,
) -> fmt::Result
where
    ConstCounter<V>: EncodeMetric,
{
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge<V: prometheus_client::encoding::EncodeGaugeValue>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: V,
) -> fmt::Result
where
    ConstGauge<V>: EncodeMetric,
{
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// `h`'s buckets for the encoder: bounds times `scale`, counts per bucket
/// (the encoder sums them), the last one past every bound.
fn buckets(h: &HistogramSnapshot, scale: f64) -> Vec<(f64, u64)> {
    h.bounds
        .iter()
        .map(|&b| b as f64 * scale)
        .chain([f64::MAX])
        .zip(h.counts.iter().copied())
        .collect()
}

fn histogram(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    h: &HistogramSnapshot,
    scale: f64,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
    m.encode_histogram::<NoLabelSet>(h.sum as f64 * scale, h.count(), &buckets(h, scale), None)
}

impl Collector for Collect {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        let e = &mut e;
        {
            let mut m = e.encode_descriptor(
                "kivi_commands",
                "RESP commands read, by name (\"other\": names kivi does not answer)",
                None,
                MetricType::Counter,
            )?;
            for (name, n) in s.commands.read() {
                m.encode_family(&[("command", name)])?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        {
            let mut m = e.encode_descriptor(
                "kivi_kvlds_requests",
                "kvlds requests read, by type",
                None,
                MetricType::Counter,
            )?;
            for (name, n) in s.kvlds_requests.read() {
                m.encode_family(&[("request", name)])?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        let c = &s.counters;
        gauge(
            e,
            "kivi_connections",
            "Connections open now, over the RESP and kvlds listeners",
            s.connections.load(std::sync::atomic::Ordering::Relaxed) as u64,
        )?;
        counter(
            e,
            "kivi_connections_received",
            "Connections accepted (since start or CONFIG RESETSTAT)",
            Counters::get(&c.connections_received),
        )?;
        counter(
            e,
            "kivi_connections_rejected",
            "Connections refused at the connection limit (since start or CONFIG RESETSTAT)",
            Counters::get(&c.rejected_connections),
        )?;
        counter(
            e,
            "kivi_keyspace_hits",
            "Keys GET and MGET found (since start or CONFIG RESETSTAT)",
            Counters::get(&c.keyspace_hits),
        )?;
        counter(
            e,
            "kivi_keyspace_misses",
            "Keys GET and MGET did not find (since start or CONFIG RESETSTAT)",
            Counters::get(&c.keyspace_misses),
        )?;
        let commits = s.committer.stats();
        histogram(
            e,
            "kivi_commit_seconds",
            "From a connection's writes entering the commit queue to their durable answer",
            &commits.latency.snapshot(),
            NS,
        )?;
        debug_assert_eq!(commits.group_writes.snapshot().bounds, GROUP_WRITES_BOUNDS);
        histogram(
            e,
            "kivi_group_commit_writes",
            "Writes (client batches) committed together in one round of the commit thread",
            &commits.group_writes.snapshot(),
            1.0,
        )?;
        let syncs = s.db.sync_times();
        {
            let mut m = e.encode_descriptor(
                "kivi_fsync_seconds",
                "fdatasync latency by log: commit (one per durable group commit), page (one \
                 per checkpoint)",
                None,
                MetricType::Histogram,
            )?;
            for (log, h) in [("commit", &syncs.commit_log), ("page", &syncs.page_log)] {
                m.encode_family(&[("log", log)])?
                    .encode_histogram::<NoLabelSet>(
                        h.sum as f64 * NS,
                        h.count(),
                        &buckets(h, NS),
                        None,
                    )?;
            }
        }
        let st = match s.db.stats() {
            Ok(st) => st,
            Err(error) => {
                tracing::warn!(%error, "metrics: reading the store's figures failed");
                return Ok(());
            }
        };
        gauge(e, "kivi_pairs", "Key-value pairs stored", st.pairs)?;
        counter(
            e,
            "kivi_cache_hits",
            "Page lookups the cache answered",
            st.cache_hits,
        )?;
        counter(
            e,
            "kivi_cache_misses",
            "Page lookups the cache did not answer (read from disk)",
            st.cache_misses,
        )?;
        if let Some(r) = st.cache_hit_rate() {
            gauge(
                e,
                "kivi_cache_hit_ratio",
                "Share of page lookups the cache answered",
                r,
            )?;
        }
        gauge(
            e,
            "kivi_cache_bytes",
            "Bytes in the page cache",
            st.cache_bytes,
        )?;
        gauge(
            e,
            "kivi_cache_capacity_bytes",
            "Bytes the page cache may hold",
            st.cache_capacity,
        )?;
        gauge(
            e,
            "kivi_live_bytes",
            "Bytes needed to hold the data (newest checkpoint's pages and values, and the \
             commit log since)",
            st.live_bytes,
        )?;
        gauge(
            e,
            "kivi_file_bytes",
            "Bytes of every segment file",
            st.file_bytes,
        )?;
        if let Some(a) = st.space_amplification() {
            gauge(
                e,
                "kivi_space_amplification",
                "File bytes over live bytes (1 is no overhead)",
                a,
            )?;
        }
        counter(
            e,
            "kivi_group_commits",
            "Group commits the store made",
            st.group_commits,
        )?;
        counter(
            e,
            "kivi_failed_commits",
            "Group commits that failed",
            st.failed_commits,
        )?;
        counter(
            e,
            "kivi_checkpoints",
            "Durable checkpoints written",
            st.checkpoints,
        )?;
        counter(
            e,
            "kivi_failed_checkpoints",
            "Checkpoints that failed",
            st.failed_checkpoints,
        )?;
        gauge(
            e,
            "kivi_redo_bytes",
            "Commit-log bytes no checkpoint covers yet (what a reopen replays)",
            st.redo_bytes,
        )?;
        counter(
            e,
            "kivi_cleaner_deleted_segments",
            "Page segments the cleaner deleted",
            st.cleaned_segments,
        )?;
        counter(
            e,
            "kivi_cleaner_copied_bytes",
            "Bytes of live pages and values the cleaner copied out of old segments",
            st.cleaner_copied_bytes,
        )?;
        gauge(
            e,
            "kivi_cleaner_retiring_segments",
            "Page segments no checkpoint uses, waiting for old readers before deletion",
            st.retiring_segments,
        )?;
        counter(
            e,
            "kivi_write_stalls",
            "Writes held back for the checkpointer to catch up",
            st.write_stalls,
        )?;
        counter(
            e,
            "kivi_write_stall_seconds",
            "Time writes were held back in all",
            st.write_stall_us as f64 * 1e-6,
        )?;
        if st.object_puts + st.object_gets + st.object_lists > 0 {
            // A store on an object store: what it costs, by request kind.
            let mut m = e.encode_descriptor(
                "kivi_object_requests",
                "Requests to the object store, by kind (one put per group commit)",
                None,
                MetricType::Counter,
            )?;
            for (kind, n) in [
                ("put", st.object_puts),
                ("get", st.object_gets),
                ("delete", st.object_deletes),
                ("list", st.object_lists),
            ] {
                m.encode_family(&[("kind", kind)])?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
            let mut m = e.encode_descriptor(
                "kivi_object_bytes",
                "Bytes moved to (put) and from (get) the object store",
                None,
                MetricType::Counter,
            )?;
            for (direction, n) in [("put", st.object_put_bytes), ("get", st.object_get_bytes)] {
                m.encode_family(&[("direction", direction)])?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
            counter(
                e,
                "kivi_object_conflicts",
                "Puts that found their name taken, settled by reading the object back",
                st.object_conflicts,
            )?;
            counter(
                e,
                "kivi_object_retries",
                "Object store requests tried again after a failure",
                st.object_retries,
            )?;
            counter(
                e,
                "kivi_object_cache_hits",
                "Reads of objects the local cache answered",
                st.object_cache_hits,
            )?;
            counter(
                e,
                "kivi_object_cache_misses",
                "Reads of objects that went to the object store",
                st.object_cache_misses,
            )?;
            gauge(
                e,
                "kivi_object_cache_bytes",
                "Bytes in the local cache of objects",
                st.object_cache_bytes,
            )?;
        }
        gauge(
            e,
            "kivi_background_error",
            "1 once a background step (checkpoint, cleaner, merge, fsync) has failed since \
             start (the log says which and why), else 0",
            u64::from(st.last_error.is_some()),
        )?;
        Ok(())
    }
}
