//! `kivi bench`: the command-line front of the benchmark suite in the
//! `kivi-bench` crate (bench/): parses the options and hands over.

use crate::error::{CliError, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("on_s3").args(["object_store", "followers"])))]
pub struct BenchArgs {
    /// Stores to run, comma-separated: kivi, kivi-nocleaner (kivi with its
    /// cleaner idle), and with a build with `--features peers`, lmdb,
    /// rocksdb, leveldb, redb, fjall [default: kivi]; with --object-store:
    /// kivi and, with `--features slatedb`, slatedb [default: all of them]
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    stores: Option<Vec<String>>,
    /// Workloads to run, comma-separated numbers or ranges (see docs/workloads.md):
    /// 1 bulk insert, 2 random read, 3 random update, 4 random mixed, 5 range scan,
    /// 6 hot-spot read, 7 single put, 8 concurrent put, 9 space, 10 recovery,
    /// 11 Zipfian read, 12 Zipfian update, 13 short scans
    #[arg(long, value_name = "LIST", default_value = "1-13", value_parser = workload_list)]
    workloads: Workloads,
    /// Pairs in the data set (each workload does about this many operations)
    #[arg(short = 'n', value_name = "N", default_value = "1000000", value_parser = positive)]
    n: u64,
    /// Rounds; each round runs every store once, in turn
    #[arg(long, value_name = "R", default_value = "1", value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Scratch directory, deleted and recreated before the run
    #[arg(long, value_name = "DIR", default_value = "./kivi-bench")]
    dir: PathBuf,
    /// Also write one JSON object per figure to FILE, one per line
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run the server workloads instead: `kivi serve` under kivaloo's six
    /// workloads over kvlds on kivaloo's data, each driven by a trickling
    /// client (the way kivaloo's bench tools drive a server) and by a
    /// bursty one, and redis-benchmark against it and against redis-server
    /// (appendfsync always and everysec); see docs/benchmarks.md
    #[arg(long)]
    server: bool,
    /// With --server: also run every kvlds workload on kivaloo, from DIR, a
    /// built kivaloo source tree (DIR/lbs/lbs and DIR/kvlds/kvlds; see
    /// bench/kivaloo-build.sh), in the same rounds, and report kivi's
    /// ratio to it
    #[arg(long, value_name = "DIR", requires = "server")]
    kivaloo: Option<PathBuf>,
    /// With --server: seconds each timed kvlds workload runs before its
    /// windows are counted
    #[arg(long, value_name = "S", default_value = "2", requires = "server", value_parser = seconds)]
    warmup: f64,
    /// With --server: one-second windows each timed kvlds workload counts;
    /// its rate is their median
    #[arg(long, value_name = "S", default_value = "5", requires = "server", value_parser = clap::value_parser!(u32).range(1..))]
    seconds: u32,
    /// With --server: what to run, comma-separated: kvlds workloads
    /// (insert, update, extract, read, mixed, hotspot), redis (the
    /// redis-benchmark runs), tls (SET and GET -P 1000 over TLS and
    /// without, kivi and redis-server; not run unless listed) and s3 (SETs
    /// from 1,000 connections to kivi serve on the S3 server the AWS_*
    /// variables name, bucket $KIVI_S3_BUCKET, with 30 ms per request and
    /// without, beside a local directory and redis-server; not run unless
    /// listed)
    #[arg(
        long,
        value_name = "LIST",
        default_value = "insert,update,extract,read,mixed,hotspot,redis",
        value_delimiter = ',',
        requires = "server",
        value_parser = server_workload
    )]
    server_workloads: Vec<String>,
    /// Run the sealed-table workloads instead: sparkey's benchmark (write N
    /// puts, build the index, then random gets, each checked) for each
    /// compression of --compression; see docs/benchmarks.md
    #[arg(long)]
    tables: bool,
    /// With --tables: compressions to run, comma-separated (none, snappy, zstd)
    #[arg(long, value_name = "LIST", default_value = "none,snappy,zstd", value_delimiter = ',', value_parser = compression)]
    compression: Vec<kivi::table::Compression>,
    /// With --tables: the index build's memory limit, MiB
    #[arg(long, value_name = "MIB", default_value = "256", value_parser = positive)]
    index_memory_mib: u64,
    /// With --tables: random gets after each creation
    #[arg(long, value_name = "N", default_value_t = kivi_bench::tables::LOOKUPS, value_parser = positive)]
    lookups: u64,
    /// Run the object-store suite instead: kivi and (in a build with
    /// `--features slatedb`) SlateDB on the S3-compatible server the AWS_*
    /// variables name (AWS_ENDPOINT, AWS_ALLOW_HTTP, AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION), each under a fresh prefix of --bucket, every write
    /// durable: bulk insert, durable writes by 1, 16 and 64 writers, cold
    /// and warm random reads (--ops of them, 10,000 by default), the writes
    /// again with a delay per request, and a raw conditional PUT; see
    /// docs/workloads.md
    #[arg(long, conflicts_with_all = ["server", "tables"])]
    object_store: bool,
    /// Run the follower suite instead: a kivi writer and its followers on the
    /// S3-compatible server the AWS_* variables name, under a fresh prefix of --bucket:
    /// a follower's lag behind --writers concurrent writers (acknowledged on the writer
    /// to visible on the follower), random reads (--ops, N by default) on the writer and
    /// on the follower, --takeovers takeovers on command (Db::promote to the first acknowledged
    /// write) and --kill-takeovers after the writer dies; see docs/workloads.md
    #[arg(long, conflicts_with_all = ["server", "tables", "object_store"])]
    followers: bool,
    /// With --followers: writer threads while the lag is measured
    #[arg(long, value_name = "N", default_value = "64", requires = "followers", value_parser = positive)]
    writers: u64,
    /// With --followers: takeovers on command
    #[arg(long, value_name = "N", default_value = "100", requires = "followers")]
    takeovers: u64,
    /// With --followers: takeovers after the writer's death (each waits the lease timeout)
    #[arg(long, value_name = "N", default_value = "5", requires = "followers")]
    kill_takeovers: u64,
    /// With --followers: the standby's lease timeout, milliseconds (at least 1500)
    #[arg(
        long,
        value_name = "MS",
        default_value = "1500",
        requires = "followers"
    )]
    take_over_after_ms: u64,
    /// With --object-store or --followers: the bucket (the object-store suite deletes
    /// its objects at its end)
    #[arg(long, value_name = "NAME", default_value = "kivi", requires = "on_s3")]
    bucket: String,
    /// With --object-store: seconds each durable-write measurement runs (--followers:
    /// the lag measurement)
    #[arg(long, value_name = "S", default_value = "5", requires = "on_s3", value_parser = positive_seconds)]
    write_seconds: f64,
    /// With --object-store: milliseconds of delay injected before every
    /// request in the delayed write measurements
    #[arg(
        long,
        value_name = "MS",
        default_value = "30",
        requires = "object_store"
    )]
    delay_ms: u64,
    /// Run each store in a child process inside a memory cgroup of SIZE
    /// (such as 2GiB or 256MiB; needs root), the page cache counted as in a
    /// container, every store's own cache set to what kivi picks by default
    /// for SIZE; reports each store's peak memory and the bytes it read and
    /// wrote at the device per operation
    #[arg(long, value_name = "SIZE", value_parser = kivi_bench::cgroup::parse_size, conflicts_with_all = ["server", "tables", "object_store"])]
    memory_limit: Option<u64>,
    /// Operations of each timed workload after the load (random read,
    /// update, mixed and hot-spot read), when fewer than N are wanted, as
    /// for a 100M-pair store; N by default (with --object-store: the random
    /// reads of each pass, 10,000 by default, at most N)
    #[arg(long, value_name = "OPS", value_parser = positive, conflicts_with_all = ["server", "tables"])]
    ops: Option<u64>,
    /// Seconds after which a timed workload (after the load; 9 and 10
    /// excepted) stops and reports its rate over the operations it did, so
    /// that a store that crawls at 100M pairs cannot stall a round; no cap
    /// by default
    #[arg(long, value_name = "S", value_parser = positive, conflicts_with_all = ["server", "tables", "object_store"])]
    max_seconds: Option<u64>,
    /// Length of workload 9's long random-update run, in multiples of N
    #[arg(long, value_name = "K", default_value_t = kivi_bench::STEADY_UPDATES, value_parser = positive)]
    steady_updates: u64,
    /// Internal: the child process of workload 10 (STORE DIR N)
    #[arg(long, hide = true, num_args = 3, value_names = ["STORE", "DIR", "N"])]
    internal_update_child: Option<Vec<String>>,
    /// Internal: a store's child process under --memory-limit (its job, JSON)
    #[arg(long, hide = true, value_name = "JOB")]
    internal_store_child: Option<String>,
    /// Internal: the child process of the durability check (STORE DIR COMMITS)
    #[arg(long, hide = true, num_args = 3, value_names = ["STORE", "DIR", "COMMITS"])]
    internal_sync_child: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
struct Workloads(Vec<u32>);

/// "1-3,7" as [1, 2, 3, 7].
fn workload_list(s: &str) -> std::result::Result<Workloads, String> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("{part:?}: expected workload numbers 1 to 13, like 1-3,7");
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse().map_err(|_| bad())?,
                b.trim().parse().map_err(|_| bad())?,
            ),
            None => {
                let v: u32 = part.trim().parse().map_err(|_| bad())?;
                (v, v)
            }
        };
        if a < 1 || b > kivi_bench::WORKLOADS || a > b {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err("no workloads given".into());
    }
    Ok(Workloads(out))
}

/// A count of at least 1; `1_000_000` and `1,000,000` read as 1000000.
fn positive(s: &str) -> std::result::Result<u64, String> {
    let digits: String = s.chars().filter(|c| !matches!(c, '_' | ',')).collect();
    match digits.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number of pairs, at least 1".into()),
    }
}

fn server_workload(s: &str) -> std::result::Result<String, String> {
    if ["redis", "tls", "s3"].contains(&s)
        || kivi_bench::kvlds_workload::Kind::from_short(s).is_some()
    {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?}: expected insert, update, extract, read, mixed, hotspot, redis, tls or s3"
        ))
    }
}

/// A duration in seconds above 0 (fractions allowed), at most an hour.
fn positive_seconds(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 3600.0 => Ok(v),
        _ => Err("expected a number of seconds above 0, at most 3600".into()),
    }
}

/// A duration in seconds, 0 or more (fractions allowed).
fn seconds(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err("expected a number of seconds, 0 to 3600".into()),
    }
}

fn compression(s: &str) -> std::result::Result<kivi::table::Compression, String> {
    use kivi::table::Compression;
    match s {
        "none" => Ok(Compression::None),
        "snappy" => Ok(Compression::Snappy),
        "zstd" => Ok(Compression::Zstd),
        _ => Err(format!("{s:?}: expected none, snappy or zstd")),
    }
}

fn bench_err(e: kivi_bench::BenchError) -> CliError {
    CliError::Bench(e.0)
}

pub fn run(args: &BenchArgs) -> Result<()> {
    if let Some(a) = &args.internal_update_child {
        let n = a[2].parse().map_err(|_| CliError::Input("bad N".into()))?;
        return kivi_bench::update_child(&a[0], a[1].as_ref(), n).map_err(bench_err);
    }
    if let Some(a) = &args.internal_sync_child {
        let commits = a[2]
            .parse()
            .map_err(|_| CliError::Input("bad COMMITS".into()))?;
        return kivi_bench::sync_child(&a[0], a[1].as_ref(), commits).map_err(bench_err);
    }
    if let Some(job) = &args.internal_store_child {
        return kivi_bench::store_child(job).map_err(bench_err);
    }
    let program = std::env::current_exe().map_err(|e| CliError::io("find the kivi program", e))?;
    if args.server {
        let s3 = match args.server_workloads.iter().any(|w| w == "s3") {
            false => None,
            true => Some(std::env::var("KIVI_S3_BUCKET").map_err(|_| {
                CliError::Input(
                    "--server-workloads s3 runs on the S3 server the AWS_* variables name, \
                     in bucket $KIVI_S3_BUCKET: start one with \
                     tests/s3/versitygw.sh start DIR and source DIR/env"
                        .into(),
                )
            })?),
        };
        let cfg = kivi_bench::server::Config {
            program,
            dir: args.dir.clone(),
            n: args.n,
            rounds: args.rounds,
            timing: kivi_bench::kvlds_workload::Timing {
                warmup: std::time::Duration::from_secs_f64(args.warmup),
                windows: args.seconds,
                window: std::time::Duration::from_secs(1),
            },
            kivaloo: args.kivaloo.clone(),
            kvlds: kivi_bench::kvlds_workload::Kind::ALL
                .into_iter()
                .filter(|k| args.server_workloads.iter().any(|w| w == k.short()))
                .collect(),
            redis: args.server_workloads.iter().any(|w| w == "redis"),
            tls: args.server_workloads.iter().any(|w| w == "tls"),
            s3,
        };
        let records = kivi_bench::server::run(&cfg).map_err(bench_err)?;
        let mut out = std::io::stdout().lock();
        return kivi_bench::server::report(&cfg, &records, &mut out, args.json.as_deref())
            .map_err(bench_err);
    }
    if args.tables {
        let cfg = kivi_bench::tables::TablesConfig {
            n: args.n,
            rounds: args.rounds,
            dir: args.dir.clone(),
            json: args.json.clone(),
            compressions: args.compression.clone(),
            memory_limit: args.index_memory_mib << 20,
            lookups: args.lookups,
        };
        let mut out = std::io::stdout().lock();
        return kivi_bench::tables::run(&cfg, &mut out)
            .map(|_| ())
            .map_err(bench_err);
    }
    if args.followers {
        let cfg = kivi_bench::follower_suite::FollowerConfig {
            n: args.n,
            dir: args.dir.clone(),
            json: args.json.clone(),
            bucket: Some(args.bucket.clone()),
            writers: args.writers,
            write_seconds: args.write_seconds,
            // A pass of 10,000 reads lasts a few milliseconds: one
            // scheduling hiccup moved the ratio by a third.
            reads: args.ops.unwrap_or(args.n),
            takeovers: args.takeovers,
            kill_takeovers: args.kill_takeovers,
            take_over_after: std::time::Duration::from_millis(args.take_over_after_ms.max(1500)),
        };
        let mut out = std::io::stdout().lock();
        return kivi_bench::follower_suite::run(&cfg, &mut out)
            .map(|_| ())
            .map_err(bench_err);
    }
    if args.object_store {
        let cfg = kivi_bench::object_suite::ObjectConfig {
            n: args.n,
            rounds: args.rounds,
            dir: args.dir.clone(),
            json: args.json.clone(),
            bucket: Some(args.bucket.clone()),
            stores: args.stores.clone(),
            write_seconds: args.write_seconds,
            reads: args.ops,
            delay: std::time::Duration::from_millis(args.delay_ms),
        };
        let mut out = std::io::stdout().lock();
        return kivi_bench::object_suite::run(&cfg, &mut out)
            .map(|_| ())
            .map_err(bench_err);
    }
    let cfg = kivi_bench::Config {
        stores: args.stores.clone().unwrap_or_else(|| vec!["kivi".into()]),
        workloads: args.workloads.0.clone(),
        n: args.n,
        rounds: args.rounds,
        dir: args.dir.clone(),
        json: args.json.clone(),
        steady_updates: args.steady_updates,
        program,
        memory_limit: args.memory_limit,
        ops: args.ops,
        max_seconds: args.max_seconds,
    };
    let mut out = std::io::stdout().lock();
    kivi_bench::run(&cfg, &mut out)
        .map(|_| ())
        .map_err(bench_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_lists_parse() {
        assert_eq!(workload_list("1-3,7").unwrap().0, vec![1, 2, 3, 7]);
        assert_eq!(workload_list("10,1,1").unwrap().0, vec![1, 10]);
        for (bad, part) in [
            ("0", "0"),
            ("3-1", "3-1"),
            ("14", "14"),
            ("x", "x"),
            ("1,2-x", "2-x"),
        ] {
            assert_eq!(
                workload_list(bad).err().as_deref(),
                Some(&*format!(
                    "{part:?}: expected workload numbers 1 to 13, like 1-3,7"
                )),
                "{bad}"
            );
        }
        assert_eq!(
            workload_list(",").err().as_deref(),
            Some("no workloads given")
        );
    }
}
