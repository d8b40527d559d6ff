//! The object-store suite (`kivi bench --object-store`; docs/workloads.md,
//! "Object-store workload"): kivi and, with the `slatedb` feature, SlateDB,
//! each on the S3-compatible server the `AWS_*` variables name, under a
//! fresh prefix of one bucket, in the same run, rounds interleaving them.
//! Every write is durable: it returns once the object holding it exists.
//!
//! Each store, each round:
//!
//! 1. bulk insert of kv40 pairs 0..n, 1,000 per durable batch;
//! 2. durable single puts (random keys of the n) by 1, 16 and 64 writer
//!    threads, each count for `write_seconds`: writes/s, commit latency;
//! 3. a fresh open with a new, empty local cache, then random reads: the
//!    first pass cold, the same keys again warm;
//! 4. step 2 again on a fresh store whose every request is first delayed
//!    (object_store's `ThrottledStore`, 30 ms by default): what the writes
//!    do when requests take what they take on a distant service.
//!
//! Each round also times one raw conditional PUT (`PutMode::Create` of an
//! 80-byte object, what kivi's commit is) with and without the delay, the
//! floor under a durable write's latency. Requests and bytes are counted by
//! a wrapper around each store's client ([`CountingStore`]), the same for
//! both stores; kivi's own `Stats` are reported beside, as a check.

use crate::counting::{CountingStore, Counts};
use crate::kv40::{self, Rng};
use crate::measure::{nanos_since, Meter};
use crate::report::group;
use crate::stores::object::{kinds, ObjectKind, ObjectKv};
use crate::stores::Store;
use crate::{bar, io_err, prepare_dir, report, workloads, BenchError, Record};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{ObjectStore, PutMode, PutOptions};
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writer threads of the durable-write measurements.
pub const WRITERS: [u64; 3] = [1, 16, 64];
/// Raw conditional PUTs timed per round (after a few untimed, which open
/// the connection).
pub const RAW_PUTS: u64 = 100;
const RAW_WARMUP: u64 = 5;
/// Bytes of the raw PUT's object: a kv40 pair.
const RAW_PUT_BYTES: usize = kv40::KEY_LEN + kv40::VALUE_LEN;
/// Random reads of each pass, unless the run says otherwise (at most n).
pub const READS: u64 = 10_000;
/// The injected delay per request, unless the run says otherwise.
pub const DELAY: Duration = Duration::from_millis(30);

/// What to run.
#[derive(Debug, Clone)]
pub struct ObjectConfig {
    pub n: u64,
    pub rounds: u32,
    /// Local scratch directory: the stores' local caches.
    pub dir: PathBuf,
    pub json: Option<PathBuf>,
    /// The bucket on the server the `AWS_*` variables name; `None`: an
    /// in-memory store of this process's own (the suite's tests).
    pub bucket: Option<String>,
    /// Stores by name; every one this build has if `None`.
    pub stores: Option<Vec<String>>,
    /// How long each durable-write measurement runs.
    pub write_seconds: f64,
    /// Random reads of each pass (at most n); [`READS`] if `None`.
    pub reads: Option<u64>,
    /// The delay injected before each request in step 4.
    pub delay: Duration,
}

impl ObjectConfig {
    fn reads(&self) -> u64 {
        self.reads.unwrap_or(READS).min(self.n)
    }

    fn delay_label(&self) -> String {
        format!("delay{}ms", self.delay.as_millis())
    }
}

/// Where the stores' objects go.
enum Target {
    S3(String),
    Memory(Arc<object_store::memory::InMemory>),
}

impl Target {
    /// A client. For S3 a new one each time: a client's pooled connections
    /// are tasks of the runtime that opened them, and each kivi store runs
    /// its requests on a runtime of its own that ends when it closes.
    fn client(&self) -> Result<Arc<dyn ObjectStore>, BenchError> {
        match self {
            Target::S3(bucket) => {
                let s3 = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|e| BenchError(format!("S3 client for bucket {bucket}: {e}")))?;
                Ok(Arc::new(s3))
            }
            Target::Memory(m) => Ok(m.clone()),
        }
    }

    /// A client inside the counting wrapper, every request first delayed
    /// by `delay` if there is one.
    fn counted(&self, delay: Option<Duration>) -> Result<Arc<CountingStore>, BenchError> {
        let client = self.client()?;
        let inner: Arc<dyn ObjectStore> = match delay {
            None => client,
            Some(d) => Arc::new(ThrottledStore::new(
                client,
                ThrottleConfig {
                    wait_put_per_call: d,
                    wait_get_per_call: d,
                    wait_delete_per_call: d,
                    wait_list_per_call: d,
                    wait_list_with_delimiter_per_call: d,
                    ..ThrottleConfig::default()
                },
            )),
        };
        Ok(Arc::new(CountingStore::new(inner)))
    }

    fn describe(&self) -> String {
        match self {
            Target::S3(bucket) => format!(
                "bucket {bucket} at {}",
                std::env::var("AWS_ENDPOINT").unwrap_or_else(|_| "AWS's S3".into())
            ),
            Target::Memory(_) => "an in-memory object store".into(),
        }
    }
}

/// One open store and the counter around its client.
struct Opened {
    store: Box<dyn ObjectKv>,
    counter: Arc<CountingStore>,
    cache: PathBuf,
}

impl Opened {
    fn counts(&self) -> (Counts, Option<Counts>) {
        (self.counter.counts(), self.store.own_counts())
    }

    fn close(self) -> Result<(), BenchError> {
        self.store.close()?;
        std::fs::remove_dir_all(&self.cache)
            .map_err(|e| io_err(format!("delete {}", self.cache.display()), e))
    }
}

/// What one store's round needs to know.
struct Ctx<'a> {
    cfg: &'a ObjectConfig,
    target: &'a Target,
    rt: &'a tokio::runtime::Runtime,
    kind: &'a ObjectKind,
    round: u32,
    /// The round's prefix in the bucket.
    prefix: String,
}

impl Ctx<'_> {
    /// Opens the store under `name` below the round's prefix, with a fresh
    /// local cache; returns it and the seconds the open took.
    fn open(&self, name: &str, delay: Option<Duration>) -> Result<(Opened, f64), BenchError> {
        let counter = self.target.counted(delay)?;
        let cache = self
            .cfg
            .dir
            .join(format!("r{}-{}-{}-cache", self.round, self.kind.name, name));
        if cache.exists() {
            std::fs::remove_dir_all(&cache)
                .map_err(|e| io_err(format!("delete {}", cache.display()), e))?;
        }
        std::fs::create_dir_all(&cache)
            .map_err(|e| io_err(format!("create {}", cache.display()), e))?;
        let started = Instant::now();
        let store = (self.kind.open)(
            counter.clone(),
            &format!("{}/{}", self.prefix, name),
            &cache,
            self.rt.handle(),
        )?;
        let secs = started.elapsed().as_secs_f64();
        Ok((
            Opened {
                store,
                counter,
                cache,
            },
            secs,
        ))
    }

    fn record(&self, workload: String) -> Record {
        Record::new(self.kind.name, &workload, self.cfg.n, self.round)
    }
}

/// Adds the requests made between `before` and `after` to `r`, per
/// operation (`ops`: writes, reads or batches) and per pair written.
fn with_requests(
    mut r: Record,
    ops: u64,
    pairs: u64,
    before: (Counts, Option<Counts>),
    after: (Counts, Option<Counts>),
) -> Record {
    let c = after.0.since(&before.0);
    let per = |x: u64| x as f64 / ops.max(1) as f64;
    r.object_requests_per_op = Some(per(c.requests()));
    r.object_puts_per_op = Some(per(c.puts));
    r.object_gets_per_op = Some(per(c.gets));
    if pairs > 0 {
        r.object_put_bytes_per_pair = Some(c.put_bytes as f64 / pairs as f64);
    }
    if let (Some(b), Some(a)) = (before.1, after.1) {
        r.stats_object_requests_per_op = Some(per(a.since(&b).requests()));
    }
    r
}

/// Durable single puts of random keys among the n by `threads` writers,
/// for `seconds` (each writer does at least one).
fn durable_writes(
    ctx: &Ctx,
    o: &Opened,
    threads: u64,
    workload: String,
    seed: u64,
) -> Result<Record, BenchError> {
    let (n, s) = (ctx.cfg.n, o.store.as_ref() as &dyn Store);
    let seconds = Duration::from_secs_f64(ctx.cfg.write_seconds);
    let pb = bar(0, format!("{}: {workload}", ctx.kind.name));
    let before = o.counts();
    let meter = Meter::start();
    let deadline = Instant::now() + seconds;
    let latencies: Vec<Result<Vec<u64>, BenchError>> = std::thread::scope(|sc| {
        let pb = &pb;
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                sc.spawn(move || -> Result<Vec<u64>, BenchError> {
                    let mut rng = Rng::new(seed ^ t << 32);
                    let mut lat = Vec::new();
                    while lat.is_empty() || Instant::now() < deadline {
                        let i = rng.below(n);
                        let version = seed << 40 | t << 32 | lat.len() as u64;
                        let started = Instant::now();
                        s.put(&kv40::key(i), &kv40::value(i, version))?;
                        lat.push(nanos_since(started));
                        pb.inc(1);
                    }
                    Ok(lat)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("bench writer thread panicked"))
            .collect()
    });
    let mut all = Vec::new();
    for l in latencies {
        all.extend(l?);
    }
    let writes = all.len() as u64;
    let fig = meter
        .finish("durable_put", "durable put", writes)
        .with_latencies(all);
    pb.finish_and_clear();
    let r = Record {
        workload,
        ..Record::of(ctx.kind.name, &fig, ctx.cfg.n, ctx.round)
    };
    Ok(with_requests(r, writes, writes, before, o.counts()))
}

/// `count` gets of random keys (the same ones for the same seed), each
/// timed and checked.
fn read_pass(ctx: &Ctx, o: &Opened, workload: &str, seed: u64) -> Result<Record, BenchError> {
    let (n, count) = (ctx.cfg.n, ctx.cfg.reads());
    let pb = bar(count, format!("{}: {workload}", ctx.kind.name));
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(kv40::VALUE_LEN);
    let mut lat = Vec::with_capacity(count as usize);
    let before = o.counts();
    let meter = Meter::start();
    for _ in 0..count {
        let i = rng.below(n);
        let started = Instant::now();
        let found = o.store.get(&kv40::key(i), &mut out)?;
        lat.push(nanos_since(started));
        workloads::check(i, found, &out)?;
        pb.inc(1);
    }
    let fig = meter
        .finish("random_read", "random read", count)
        .with_latencies(lat);
    pb.finish_and_clear();
    let r = Record {
        workload: workload.to_string(),
        ..Record::of(ctx.kind.name, &fig, n, ctx.round)
    };
    Ok(with_requests(r, count, 0, before, o.counts()))
}

/// All steps on one store in one round, each figure handed to `emit`.
fn run_store(
    ctx: &Ctx,
    emit: &mut dyn FnMut(Record) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    let (n, name) = (ctx.cfg.n, ctx.kind.name);

    // 1 and 2, on the store the reads will find.
    let (o, _) = ctx.open("main", None)?;
    let before = o.counts();
    let load = {
        let pb = bar(n, format!("{name}: bulk insert"));
        let f = workloads::bulk_insert(o.store.as_ref(), n, &|k| pb.inc(k));
        pb.finish_and_clear();
        f?
    };
    let batches = n.div_ceil(workloads::BATCH);
    let r = with_requests(
        Record::of(name, &load, n, ctx.round),
        batches,
        n,
        before,
        o.counts(),
    );
    emit(r)?;
    if !ctx.kind.local {
        emit(raw_puts(ctx, None)?)?;
    }
    for threads in WRITERS {
        emit(durable_writes(
            ctx,
            &o,
            threads,
            format!("durable_put_{threads}"),
            0x5eed_0030 + threads,
        )?)?;
    }
    o.close()?;

    // 3: a fresh open on an empty cache, reads cold then warm.
    // The open's own requests too: a store may read ahead at open what its
    // reads then find in the cache.
    let (o, secs) = ctx.open("main", None)?;
    let opened = Record {
        reopen_seconds: Some(secs),
        ..ctx.record("open_fresh_cache".into())
    };
    let zero = (Counts::default(), Some(Counts::default()));
    emit(with_requests(opened, 1, 0, zero, o.counts()))?;
    emit(read_pass(ctx, &o, "read_cold", 0x5eed_0031)?)?;
    emit(read_pass(ctx, &o, "read_warm", 0x5eed_0031)?)?;
    o.close()?;
    if ctx.kind.local {
        return Ok(());
    }

    // 4: the writes again, every request delayed.
    let (o, _) = ctx.open("delayed", Some(ctx.cfg.delay))?;
    emit(raw_puts(ctx, Some(ctx.cfg.delay))?)?;
    for threads in WRITERS {
        emit(durable_writes(
            ctx,
            &o,
            threads,
            format!("durable_put_{threads}_{}", ctx.cfg.delay_label()),
            0x5eed_0032 + threads,
        )?)?;
    }
    o.close()
}

/// Times [`RAW_PUTS`] conditional PUTs of small objects, after a few
/// untimed ones (which open the connection), on a client of their own
/// made as the store's was. Run right before the store's writes, so that
/// each store's commit latency is set against a PUT's of the same moment.
fn raw_puts(ctx: &Ctx, delay: Option<Duration>) -> Result<Record, BenchError> {
    let (cfg, prefix) = (ctx.cfg, &ctx.prefix);
    let store = ctx.target.counted(delay)?;
    let payload = vec![0x5au8; RAW_PUT_BYTES];
    let mut lat = Vec::with_capacity(RAW_PUTS as usize);
    let mut meter = None;
    let which = if delay.is_some() { "delayed" } else { "direct" };
    for k in 0..RAW_WARMUP + RAW_PUTS {
        if k == RAW_WARMUP {
            meter = Some(Meter::start());
        }
        let path = ObjectPath::from(format!("{prefix}/raw-put-{which}/{k:08}"));
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let started = Instant::now();
        ctx.rt
            .block_on(store.put_opts(&path, payload.clone().into(), opts))
            .map_err(|e| BenchError(format!("raw conditional PUT of {path}: {e}")))?;
        if k >= RAW_WARMUP {
            lat.push(nanos_since(started));
        }
    }
    let fig = meter
        .expect("RAW_PUTS > 0")
        .finish("raw_put", "raw conditional put", RAW_PUTS)
        .with_latencies(lat);
    let workload = match delay {
        None => "raw_put".to_string(),
        Some(_) => format!("raw_put_{}", cfg.delay_label()),
    };
    Ok(Record {
        workload,
        ..Record::of(ctx.kind.name, &fig, cfg.n, ctx.round)
    })
}

/// Deletes every object under `prefix` (the run's, once it is done).
fn delete_prefix(
    target: &Target,
    rt: &tokio::runtime::Runtime,
    prefix: &str,
) -> Result<(), BenchError> {
    let store = target.client()?;
    let prefix = ObjectPath::from(prefix);
    rt.block_on(async {
        let locations = store.list(Some(&prefix)).map_ok(|m| m.location).boxed();
        store.delete_stream(locations).try_collect::<Vec<_>>().await
    })
    .map(|_| ())
    .map_err(|e| BenchError(format!("delete the run's objects under {prefix}: {e}")))
}

/// One figure as a progress line: the suite's usual one, then requests.
fn line(r: &Record) -> String {
    let mut s = report::line(r);
    if let (Some(req), Some(puts), Some(gets)) = (
        r.object_requests_per_op,
        r.object_puts_per_op,
        r.object_gets_per_op,
    ) {
        let _ = write!(s, ", {req:.3} requests/op ({puts:.3} PUT, {gets:.3} GET)");
    }
    if let Some(b) = r.object_put_bytes_per_pair {
        let _ = write!(s, ", {b:.1} B uploaded/pair");
    }
    if let Some(req) = r.stats_object_requests_per_op {
        let _ = write!(s, " [Stats: {req:.3} requests/op]");
    }
    s
}

/// Runs every round; prints a line per figure and the summary.
pub fn run(cfg: &ObjectConfig, out: &mut dyn Write) -> Result<Vec<Record>, BenchError> {
    let all = kinds();
    let chosen: Vec<&ObjectKind> = match &cfg.stores {
        None => all.iter().collect(),
        Some(names) => names
            .iter()
            .map(|name| {
                all.iter().find(|k| k.name == name).ok_or_else(|| {
                    let known: Vec<&str> = all.iter().map(|k| k.name).collect();
                    BenchError(format!(
                        "no store {name:?} in the object-store suite; this build has: {} \
                         (build with --features slatedb for slatedb)",
                        known.join(", ")
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    if !(cfg.write_seconds > 0.0 && cfg.write_seconds.is_finite()) {
        return Err(BenchError("write seconds must be above 0".into()));
    }
    prepare_dir(&cfg.dir)?;
    let target = match &cfg.bucket {
        Some(b) => Target::S3(b.clone()),
        None => Target::Memory(Arc::new(object_store::memory::InMemory::new())),
    };
    // The suite's own requests (the raw PUTs, SlateDB's), on two threads:
    // the machine's cores; kivi runs its requests on a runtime of its own.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| io_err("start a tokio runtime", e))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!("kivi-bench/{stamp}-{}", std::process::id());
    let mut json = match &cfg.json {
        Some(p) => Some(
            std::fs::File::create(p).map_err(|e| io_err(format!("create {}", p.display()), e))?,
        ),
        None => None,
    };
    let w = |out: &mut dyn Write, s: &str| -> Result<(), BenchError> {
        writeln!(out, "{s}").map_err(|e| io_err("write output", e))
    };
    let mut head = format!(
        "kivi bench --object-store: kv40 (40-byte keys and values), n = {}, {}, prefix {base}, \
         {} round(s)\n  durable writes by {:?} writers, {} s each; {} random reads per pass; \
         injected delay {} ms per request\n",
        group(cfg.n as f64),
        target.describe(),
        cfg.rounds,
        WRITERS,
        cfg.write_seconds,
        group(cfg.reads() as f64),
        cfg.delay.as_millis()
    );
    for k in &chosen {
        let _ = writeln!(head, "  {:8} {} — {}", k.name, k.library, k.durability);
    }
    if cfg!(not(feature = "slatedb")) && cfg.stores.is_none() {
        let _ = writeln!(
            head,
            "  (SlateDB is not in this build: kivi alone; build with --features slatedb for it)"
        );
    }
    w(out, head.trim_end())?;
    let mut records = Vec::new();
    let result = (|| -> Result<(), BenchError> {
        let mut emit = |r: Record| -> Result<(), BenchError> {
            if let Some(f) = json.as_mut() {
                let line = serde_json::to_string(&r).expect("records serialize");
                writeln!(f, "{line}").map_err(|e| io_err("write JSON", e))?;
            }
            writeln!(out, "{}", line(&r)).map_err(|e| io_err("write output", e))?;
            records.push(r);
            Ok(())
        };
        for round in 1..=cfg.rounds {
            let prefix = format!("{base}/r{round}");
            for kind in &chosen {
                let ctx = Ctx {
                    cfg,
                    target: &target,
                    rt: &rt,
                    kind,
                    round,
                    prefix: format!("{prefix}/{}", kind.name),
                };
                run_store(&ctx, &mut emit)?;
            }
        }
        Ok(())
    })();
    // The objects go whether or not the run finished.
    let deleted = delete_prefix(&target, &rt, &base);
    result?;
    deleted?;
    w(out, &summary(cfg, &chosen, &records))?;
    Ok(records)
}

/// Each store's best round of each figure, with kivi's ratio to it, and
/// the write latency over a raw PUT's.
fn summary(cfg: &ObjectConfig, kinds: &[&ObjectKind], records: &[Record]) -> String {
    let mut order: Vec<&str> = Vec::new();
    for r in records {
        if !order.contains(&r.workload.as_str()) {
            order.push(&r.workload);
        }
    }
    // Best: the highest rate, or the quickest open.
    let best = |store: &str, w: &str| -> Option<&Record> {
        let score = |r: &Record| r.ops_per_sec.or(r.reopen_seconds.map(|s| -s));
        records
            .iter()
            .filter(|r| r.store == store && r.workload == w)
            .max_by(|a, b| {
                score(a)
                    .partial_cmp(&score(b))
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
    };
    let opt = |v: Option<f64>, digits: usize| {
        v.map_or("—".into(), |v| {
            if v >= 1000.0 {
                group(v)
            } else {
                format!("{v:.digits$}")
            }
        })
    };
    let mut s = format!(
        "\nobject-store suite, n = {}, best of {} round(s) (ratio: kivi ÷ store, above 1 kivi is better)\n\
         {:<26} {:<8} {:>10} {:>9} {:>9} {:>9} {:>8} {:>9} {:>6}\n",
        group(cfg.n as f64),
        cfg.rounds,
        "workload",
        "store",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "req/op",
        "PUT/op",
        "B up/pair",
        "ratio"
    );
    for w in &order {
        let kivi = best("kivi", w);
        for k in kinds {
            let Some(r) = best(k.name, w) else { continue };
            let (value, ratio) = match (r.ops_per_sec, r.reopen_seconds) {
                (Some(v), _) => (
                    opt(Some(v), 0),
                    kivi.and_then(|k| k.ops_per_sec).map(|kv| kv / v),
                ),
                (None, Some(secs)) => (
                    format!("{secs:.3} s"),
                    kivi.and_then(|k| k.reopen_seconds).map(|ks| secs / ks),
                ),
                _ => ("—".into(), None),
            };
            let ratio = match ratio {
                // A raw PUT is no store's figure.
                Some(x) if k.name != "kivi" && x.is_finite() && !w.starts_with("raw_put") => {
                    format!("{x:.2}x")
                }
                _ => "—".into(),
            };
            let _ = writeln!(
                s,
                "{:<26} {:<8} {:>10} {:>9} {:>9} {:>9} {:>8} {:>9} {:>6}",
                w,
                k.name,
                value,
                opt(r.p50_us, 0),
                opt(r.p99_us, 0),
                opt(r.object_requests_per_op, 3),
                opt(r.object_puts_per_op, 3),
                opt(r.object_put_bytes_per_pair, 1),
                ratio
            );
        }
    }
    // The floor under a durable write: one conditional PUT, timed beside
    // each store's writes; from the round of the store's best 1-writer rate.
    for k in kinds.iter().filter(|k| !k.local) {
        let _ = write!(
            s,
            "{}: 1-writer commit p50 over a raw conditional PUT's p50:",
            k.name
        );
        for (put, raw, what) in [
            (
                "durable_put_1".to_string(),
                "raw_put".to_string(),
                "no delay".to_string(),
            ),
            (
                format!("durable_put_1_{}", cfg.delay_label()),
                format!("raw_put_{}", cfg.delay_label()),
                format!("{} ms delay", cfg.delay.as_millis()),
            ),
        ] {
            let Some(w) = best(k.name, &put) else {
                continue;
            };
            let raw = records
                .iter()
                .find(|r| r.store == k.name && r.workload == raw && r.round == w.round);
            if let (Some(wp), Some(rp)) = (w.p50_us, raw.and_then(|r| r.p50_us)) {
                let _ = write!(
                    s,
                    " {:.2}x ({} µs over {} µs, {what})",
                    wp / rp,
                    opt(Some(wp), 0),
                    opt(Some(rp), 0)
                );
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_run_on_memory_measures_every_step_and_deletes_its_objects() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ObjectConfig {
            n: 2_000,
            rounds: 1,
            dir: dir.path().join("b"),
            json: Some(dir.path().join("out.json")),
            bucket: None,
            stores: None,
            write_seconds: 0.2,
            reads: Some(500),
            delay: Duration::from_millis(5),
        };
        let mut out = Vec::new();
        let records = run(&cfg, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let kivi = |w: &str| {
            records
                .iter()
                .find(|r| r.store == "kivi" && r.workload == w)
                .unwrap_or_else(|| panic!("no kivi {w}: {text}"))
        };
        for w in [
            "bulk_insert",
            "durable_put_1",
            "durable_put_64",
            "read_cold",
            "read_warm",
            "durable_put_16_delay5ms",
        ] {
            let r = kivi(w);
            assert!(r.ops_per_sec.unwrap() > 0.0, "{r:?}");
            assert!(r.object_requests_per_op.is_some(), "{r:?}");
        }
        // One writer: a commit is one conditional PUT (and what the
        // background adds), by the wrapper's count and by kivi's own.
        let one = kivi("durable_put_1");
        assert!(one.object_puts_per_op.unwrap() >= 1.0, "{one:?}");
        let stats = one.stats_object_requests_per_op.unwrap();
        assert!(
            (stats - one.object_requests_per_op.unwrap()).abs() < 0.5,
            "{one:?}"
        );
        // The delay shows in the delayed writes' latency.
        assert!(kivi("durable_put_1_delay5ms").p50_us.unwrap() >= 5_000.0);
        assert!(kivi("raw_put_delay5ms").p50_us.unwrap() >= 5_000.0);
        assert!(
            text.contains("kivi: 1-writer commit p50 over a raw conditional PUT's p50: "),
            "{text}"
        );
        let lines = std::fs::read_to_string(dir.path().join("out.json")).unwrap();
        assert_eq!(lines.lines().count(), records.len());
    }
}
