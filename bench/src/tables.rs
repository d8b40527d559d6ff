//! Sealed-table workloads (`kivi bench --tables`): sparkey's own benchmark
//! (docs/workloads.md, "Sealed-table workload") on kivi's tables.
//!
//! For each compression: write N puts (`key_<i>` -> `value_<i>`), finish
//! the table (the log, its index and kivi's checksum sidecar, each fsync'd
//! and renamed into place: "creation"), then open it and do random gets of
//! present keys, each value checked. Reported: puts per CPU-second of
//! creation, lookups per CPU-second, the bytes of `.spl` + `.spi` (the
//! sidecar counted apart), and the process's peak RSS during creation,
//! which is what the index build's memory limit bounds.
//!
//! sparkey is not packaged for any registry this project installs from, so
//! its figures are the ones measured for it on this class of machine
//! (docs/workloads.md), not a run beside kivi's; the report says so.

use crate::kv40::mix;
use crate::measure::{peak_rss, process_cpu, reset_peak_rss};
use crate::{bar, io_err, BenchError, Record};
use kivi::table::{Compression, IndexOptions, Table, TableWriter, WriterOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Random gets after each creation (sparkey's benchmark does 1M).
pub const LOOKUPS: u64 = 1_000_000;
/// Keys per `get_many` call in the batched pass.
pub const MULTI_GET: usize = 1000;
/// Block size of the compressed tables ("use 4k blocks everywhere").
pub const BLOCK_SIZE: u32 = 4096;

/// What to run.
#[derive(Debug, Clone)]
pub struct TablesConfig {
    pub n: u64,
    pub rounds: u32,
    pub dir: PathBuf,
    pub json: Option<PathBuf>,
    pub compressions: Vec<Compression>,
    /// The index build's memory limit, bytes.
    pub memory_limit: u64,
    pub lookups: u64,
}

/// sparkey's figures measured on this class of machine (docs/workloads.md;
/// upper ends of the ranges): (compression, n, puts per CPU-s, lookups per
/// CPU-s). There are none for 10M: that row is this suite's own reference, lookups at
/// the midpoint of the 1M and 100M figures (the most demanding of the
/// readings docs/benchmarks.md discusses), not a measurement.
const SPARKEY: [(Compression, u64, Option<f64>, Option<f64>); 5] = [
    (Compression::None, 1_000_000, Some(2.97e6), Some(2.17e6)),
    (Compression::None, 10_000_000, Some(2.05e6), Some(1.52e6)),
    (Compression::None, 100_000_000, Some(1.31e6), Some(0.86e6)),
    (Compression::Snappy, 0, None, Some(0.21e6)),
    (Compression::Zstd, 0, None, Some(60e3)),
];

/// sparkey's (puts, lookups) per CPU-second for this compression and n,
/// where the workloads file gives them (compressed lookups at any n).
pub fn sparkey_figures(c: Compression, n: u64) -> (Option<f64>, Option<f64>) {
    SPARKEY
        .iter()
        .find(|(sc, sn, _, _)| *sc == c && (*sn == n || *sn == 0))
        .map_or((None, None), |&(_, _, p, l)| (p, l))
}

/// Writes `key_<i>` into `buf` (as sparkey's benchmark: `sprintf("key_%d")`).
pub fn numbered(buf: &mut Vec<u8>, prefix: &[u8], i: u64) {
    // Not `write!`: formatting costs more than the table's put.
    buf.clear();
    buf.extend_from_slice(prefix);
    buf.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
}

fn file_len(p: &Path) -> Result<u64, BenchError> {
    std::fs::metadata(p)
        .map(|m| m.len())
        .map_err(|e| io_err(format!("measure {}", p.display()), e))
}

/// One creation and its lookups; returns the two records.
fn run_one(
    cfg: &TablesConfig,
    c: Compression,
    round: u32,
    dir: &Path,
) -> Result<Vec<Record>, BenchError> {
    let n = cfg.n;
    let name = c.name();
    let base = dir.join(format!("table-{name}"));
    let opts = WriterOptions {
        compression: c,
        block_size: BLOCK_SIZE,
        index: IndexOptions {
            memory_limit: cfg.memory_limit,
            ..IndexOptions::default()
        },
        sidecar: true,
    };
    let terr = |what: &str, e: kivi::table::Error| BenchError(format!("{what}: {e}"));

    reset_peak_rss();
    let (cpu0, wall0) = (process_cpu(), Instant::now());
    let pb = bar(n, format!("table {name}: create"));
    let mut w = TableWriter::create(&base, opts).map_err(|e| terr("create table", e))?;
    let (mut k, mut v) = (Vec::new(), Vec::new());
    for i in 0..n {
        numbered(&mut k, b"key_", i);
        numbered(&mut v, b"value_", i);
        w.put(&k, &v).map_err(|e| terr("put", e))?;
        if i % 65_536 == 0 {
            pb.set_position(i);
        }
    }
    pb.set_message(format!("table {name}: index"));
    let info = w.finish().map_err(|e| terr("finish table", e))?;
    pb.finish_and_clear();
    let (create_cpu, create_wall) = (process_cpu() - cpu0, wall0.elapsed());
    let create_rss = peak_rss();
    assert_eq!(info.index.num_entries, n, "every put is live");

    let (spl, spi) = kivi::table::table_paths(&base);
    let bytes = file_len(&spl)? + file_len(&spi)?;
    let sidecar = file_len(&kivi::table::sidecar_path(&base))?;

    let lookups = cfg.lookups;
    let pb = bar(lookups, format!("table {name}: get"));
    // Opening counts, as in sparkey's benchmark.
    let (cpu0, wall0) = (process_cpu(), Instant::now());
    let table = Table::open(&base).map_err(|e| terr("open table", e))?;
    let mut want = Vec::new();
    for j in 0..lookups {
        let i = mix(j ^ (u64::from(round) << 48)) % n;
        numbered(&mut k, b"key_", i);
        numbered(&mut want, b"value_", i);
        match table.get(&k).map_err(|e| terr("get", e))? {
            Some(got) if *got == want[..] => {}
            got => {
                return Err(BenchError(format!(
                    "table {name}: key_{i} read {:?}, expected value_{i}",
                    got.map(|g| String::from_utf8_lossy(&g).into_owned())
                )))
            }
        }
        if j % 65_536 == 0 {
            pb.set_position(j);
        }
    }
    pb.finish_and_clear();
    let (get_cpu, get_wall) = (process_cpu() - cpu0, wall0.elapsed());

    // The same lookups through `get_many`, MULTI_GET keys at a time.
    let pb = bar(lookups, format!("table {name}: get_many"));
    let (cpu0, wall0) = (process_cpu(), Instant::now());
    let mut keys: Vec<Vec<u8>> = vec![Vec::new(); MULTI_GET];
    let mut ids = [0u64; MULTI_GET];
    let mut j = 0;
    while j < lookups {
        let m = (lookups - j).min(MULTI_GET as u64) as usize;
        for (x, (key, id)) in keys.iter_mut().zip(ids.iter_mut()).take(m).enumerate() {
            *id = mix((j + x as u64) ^ (u64::from(round) << 48)) % n;
            numbered(key, b"key_", *id);
        }
        let got = table
            .get_many(&keys[..m])
            .map_err(|e| terr("get_many", e))?;
        for (g, &i) in got.iter().zip(&ids) {
            numbered(&mut want, b"value_", i);
            if g.as_deref() != Some(&want[..]) {
                return Err(BenchError(format!(
                    "table {name}: get_many of key_{i} read {:?}, expected value_{i}",
                    g.as_ref().map(|g| String::from_utf8_lossy(g).into_owned())
                )));
            }
        }
        j += m as u64;
        pb.set_position(j);
    }
    pb.finish_and_clear();
    let (many_cpu, many_wall) = (process_cpu() - cpu0, wall0.elapsed());
    drop(table);
    for p in [spl, spi, kivi::table::sidecar_path(&base)] {
        std::fs::remove_file(&p).map_err(|e| io_err(format!("delete {}", p.display()), e))?;
    }

    let per = |ops: u64, d: std::time::Duration| ops as f64 / d.as_secs_f64().max(1e-9);
    let create = Record {
        ops_per_sec: Some(per(n, create_wall)),
        cpu_us_per_op: Some(create_cpu.as_secs_f64() * 1e6 / n as f64),
        bytes_per_pair: Some(bytes as f64 / n as f64),
        peak_rss_bytes: create_rss,
        file_bytes: Some(bytes),
        sidecar_bytes: Some(sidecar),
        ..Record::new("kivi-table", &format!("table_create_{name}"), n, round)
    };
    let get = Record {
        ops_per_sec: Some(per(lookups, get_wall)),
        cpu_us_per_op: Some(get_cpu.as_secs_f64() * 1e6 / lookups as f64),
        ..Record::new("kivi-table", &format!("table_get_{name}"), n, round)
    };
    let many = Record {
        ops_per_sec: Some(per(lookups, many_wall)),
        cpu_us_per_op: Some(many_cpu.as_secs_f64() * 1e6 / lookups as f64),
        ..Record::new("kivi-table", &format!("table_get_many_{name}"), n, round)
    };
    Ok(vec![create, get, many])
}

/// Runs every round; prints a line per figure and the summary.
pub fn run(cfg: &TablesConfig, out: &mut dyn Write) -> Result<Vec<Record>, BenchError> {
    crate::prepare_dir(&cfg.dir)?;
    let mut json = match &cfg.json {
        Some(p) => Some(
            std::fs::File::create(p).map_err(|e| io_err(format!("create {}", p.display()), e))?,
        ),
        None => None,
    };
    let w = |out: &mut dyn Write, s: String| -> Result<(), BenchError> {
        writeln!(out, "{s}").map_err(|e| io_err("write output", e))
    };
    w(
        out,
        format!(
            "kivi bench --tables: n = {}, {} lookups, index memory limit {} MiB, {} round(s)",
            cfg.n,
            cfg.lookups,
            cfg.memory_limit >> 20,
            cfg.rounds
        ),
    )?;
    let mut records = Vec::new();
    for round in 1..=cfg.rounds {
        for &c in &cfg.compressions {
            for r in run_one(cfg, c, round, &cfg.dir)? {
                if let Some(f) = json.as_mut() {
                    let line = serde_json::to_string(&r).expect("records serialize");
                    writeln!(f, "{line}").map_err(|e| io_err("write JSON", e))?;
                }
                w(
                    out,
                    format!(
                        "round {round} {:<20} {:>12.0}/CPU-s {:>12.0}/s{}",
                        r.workload,
                        1e6 / r.cpu_us_per_op.unwrap_or(f64::NAN),
                        r.ops_per_sec.unwrap_or(f64::NAN),
                        r.peak_rss_bytes
                            .map_or(String::new(), |b| format!(", peak RSS {} MiB", b >> 20))
                    ),
                )?;
                records.push(r);
            }
        }
    }
    w(out, summary(cfg, &records))?;
    Ok(records)
}

/// The best round of each figure beside sparkey's.
fn summary(cfg: &TablesConfig, records: &[Record]) -> String {
    let best = |wl: &str, f: &dyn Fn(&Record) -> Option<f64>| {
        records
            .iter()
            .filter(|r| r.workload == wl)
            .filter_map(f)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    let per_cpu = |r: &Record| r.cpu_us_per_op.map(|us| 1e6 / us);
    let ratio = |k: Option<f64>, s: Option<f64>| match (k, s) {
        (Some(k), Some(s)) => format!("{:.2}x", k / s),
        _ => "-".into(),
    };
    let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.0}"));
    let mut s = format!(
        "\nsealed tables, n = {} (best of {} round(s); sparkey: {}, not this run)\n\
         {:<7} {:>12} {:>10} {:>6} {:>12} {:>10} {:>6} {:>12} {:>6} {:>13} {:>9} {:>8}\n",
        cfg.n,
        cfg.rounds,
        if cfg.n == 10_000_000 {
            "uncompressed figures interpolated between docs/workloads.md's 1M and 100M"
        } else {
            "docs/workloads.md"
        },
        "comp",
        "puts/CPU-s",
        "sparkey",
        "ratio",
        "gets/CPU-s",
        "sparkey",
        "ratio",
        "get_many",
        "ratio",
        ".spl+.spi B",
        "sidecar B",
        "RSS MiB"
    );
    for &c in &cfg.compressions {
        let name = c.name();
        let create = format!("table_create_{name}");
        let get = format!("table_get_{name}");
        let (sp, sl) = sparkey_figures(c, cfg.n);
        let puts = best(&create, &per_cpu);
        let gets = best(&get, &per_cpu);
        let many = best(&format!("table_get_many_{name}"), &per_cpu);
        let last = records.iter().rev().find(|r| r.workload == create);
        let rss = records
            .iter()
            .filter(|r| r.workload == create)
            .filter_map(|r| r.peak_rss_bytes)
            .max();
        s += &format!(
            "{:<7} {:>12} {:>10} {:>6} {:>12} {:>10} {:>6} {:>12} {:>6} {:>13} {:>9} {:>8}\n",
            name,
            fmt(puts),
            fmt(sp),
            ratio(puts, sp),
            fmt(gets),
            fmt(sl),
            ratio(gets, sl),
            fmt(many),
            ratio(many, sl),
            last.and_then(|r| r.file_bytes)
                .map_or("-".into(), |b| b.to_string()),
            last.and_then(|r| r.sidecar_bytes)
                .map_or("-".into(), |b| b.to_string()),
            rss.map_or("-".into(), |b| (b >> 20).to_string()),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_keys_are_sparkeys() {
        let mut b = Vec::new();
        numbered(&mut b, b"key_", 0);
        assert_eq!(b, b"key_0");
        numbered(&mut b, b"value_", 1_234_567_890);
        assert_eq!(b, b"value_1234567890");
        numbered(&mut b, b"k", u64::MAX);
        assert_eq!(b, format!("k{}", u64::MAX).as_bytes());
    }

    #[test]
    fn sparkey_figures_are_found_by_compression_and_n() {
        assert_eq!(
            sparkey_figures(Compression::None, 1_000_000),
            (Some(2.97e6), Some(2.17e6))
        );
        assert_eq!(sparkey_figures(Compression::None, 5), (None, None));
        assert_eq!(sparkey_figures(Compression::Zstd, 5), (None, Some(60e3)));
    }

    #[test]
    fn a_small_run_checks_every_lookup_and_reports_each_compression() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TablesConfig {
            n: 5_000,
            rounds: 1,
            dir: dir.path().join("b"),
            json: None,
            compressions: vec![Compression::None, Compression::Snappy, Compression::Zstd],
            // Small enough that the build runs in regions.
            memory_limit: 16 << 10,
            lookups: 2_000,
        };
        let mut out = Vec::new();
        let records = run(&cfg, &mut out).unwrap();
        assert_eq!(records.len(), 9);
        for r in &records {
            assert!(r.cpu_us_per_op.unwrap() > 0.0, "{r:?}");
        }
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("zstd"), "{text}");
    }
}
