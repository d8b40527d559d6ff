//! What the suite prints: a header, a line per figure as it is measured,
//! and at the end a table per workload with each store's best round and its
//! ratio to kivi.

use crate::stores::Kind;
use crate::{Config, Record};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Groups digits: 1234567 as "1,234,567".
pub fn group(v: f64) -> String {
    let s = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 && c != '-' {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn header(cfg: &Config, kinds: &[Kind]) -> String {
    let mut s = format!(
        "kivi bench: kv40 (40-byte keys and values), n = {}, {} round(s), workloads {:?}\n",
        group(cfg.n as f64),
        cfg.rounds,
        cfg.workloads
    );
    for k in kinds {
        let _ = writeln!(s, "  {:8} {} — {}", k.name, k.library, k.durability);
    }
    if let Some(limit) = cfg.memory_limit {
        let _ = writeln!(
            s,
            "  each store in its own memory cgroup of {} MiB (page cache counted), \
             its own cache the size kivi picks by default for that limit",
            limit >> 20
        );
    }
    if cfg.ops.is_some() || cfg.max_seconds.is_some() {
        let cap = cfg
            .max_seconds
            .map(|secs| format!(", or as many as {secs} s allow"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  timed workloads after the load: {} operations each{cap}",
            group(cfg.ops() as f64)
        );
    }
    s
}

/// One figure as a progress line.
pub fn line(r: &Record) -> String {
    let mut s = format!("[round {}] {:8} {:24}", r.round, r.store, r.workload);
    if let Some(why) = &r.failure {
        let _ = write!(s, " FAILED: {why}");
    }
    if let Some(v) = r.ops_per_sec {
        let _ = write!(s, " {:>12} ops/s", group(v));
    }
    if let Some(v) = r.cpu_us_per_op {
        let _ = write!(s, " {v:>8.2} cpu µs/op");
    }
    if let (Some(p50), Some(p99)) = (r.p50_us, r.p99_us) {
        let _ = write!(s, "  p50 {p50:.1} µs p99 {p99:.1} µs");
    }
    if let Some(v) = r.bytes_per_pair {
        let _ = write!(s, " {v:>8.1} bytes/pair");
    }
    if let Some(v) = r.reopen_seconds {
        let _ = write!(s, " reopened in {v:.3} s");
    }
    if let Some(done) = r.stopped_early {
        let _ = write!(
            s,
            " (stopped at --max-seconds after {} ops)",
            group(done as f64)
        );
    }
    if let Some(v) = r.syncs_per_commit {
        let _ = write!(s, " {v:.2} syncs per commit");
    }
    if let Some(v) = r.peak_rss_bytes {
        let _ = write!(s, "  peak RSS {} MiB", v >> 20);
    }
    if let (Some(peak), Some(limit)) = (r.peak_memory_bytes, r.memory_limit_bytes) {
        let _ = write!(s, ", cgroup {} of {} MiB", peak >> 20, limit >> 20);
    }
    if let (Some(read), Some(written)) = (r.device_read_per_op, r.device_written_per_op) {
        if read > 0.0 || written > 0.0 {
            let _ = write!(
                s,
                ", device {read:.0} B read, {written:.0} B written per op"
            );
        }
    }
    s
}

/// A workload's headline figure and whether more is better.
fn headline(r: &Record) -> Option<(f64, bool, &'static str)> {
    if let Some(v) = r.syncs_per_commit {
        return Some((v, false, "syncs/commit"));
    }
    if let Some(v) = r.reopen_seconds {
        return Some((v, false, "seconds"));
    }
    if let Some(v) = r.bytes_per_pair {
        return Some((v, false, "bytes/pair"));
    }
    if r.workload == "single_put" || r.workload == "fdatasync" {
        return r.p50_us.map(|v| (v, false, "p50 µs"));
    }
    r.ops_per_sec.map(|v| (v, true, "ops/s"))
}

/// The best round of each store for each workload, with ratios to kivi.
pub fn tables(cfg: &Config, records: &[Record]) -> String {
    let mut by_workload: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for r in records {
        if !by_workload.contains_key(r.workload.as_str()) {
            order.push(&r.workload);
        }
        by_workload.entry(&r.workload).or_default().push(r);
    }
    let mut s = format!(
        "\nbest of {} round(s), n = {}\n",
        cfg.rounds,
        group(cfg.n as f64)
    );
    for w in order {
        let rows = &by_workload[w];
        let Some((_, more_is_better, unit)) = rows.iter().find_map(|r| headline(r)) else {
            continue;
        };
        // Best round per store.
        let mut best: BTreeMap<&str, &Record> = BTreeMap::new();
        for r in rows {
            let Some((v, _, _)) = headline(r) else {
                continue;
            };
            let better = |old: &&Record| {
                let o = headline(old).map_or(f64::NAN, |h| h.0);
                if more_is_better {
                    v > o
                } else {
                    v < o
                }
            };
            if best.get(r.store.as_str()).is_none_or(better) {
                best.insert(&r.store, r);
            }
        }
        let kivi = best.get("kivi").and_then(|r| headline(r)).map(|h| h.0);
        let _ = writeln!(s, "{w} ({unit}; kivi ÷ store: above 1 kivi is better)");
        for store in cfg.stores.iter().map(String::as_str).chain(["machine"]) {
            let Some(r) = best.get(store) else { continue };
            let (v, _, _) = headline(r).expect("best rows have a headline");
            let ratio = match kivi {
                Some(k) if store != "kivi" && v > 0.0 && k > 0.0 => {
                    let x = if more_is_better { k / v } else { v / k };
                    format!("{x:.2}x")
                }
                _ => "—".into(),
            };
            let cpu = r.cpu_us_per_op.map_or("—".into(), |c| format!("{c:.2}"));
            let _ = writeln!(
                s,
                "  {store:8} {:>14} {unit:12} cpu µs/op {cpu:>8}   {ratio}",
                fmt_value(v)
            );
        }
    }
    for r in records {
        if let Some(why) = &r.failure {
            let _ = writeln!(s, "{} failed in round {}: {why}", r.store, r.round);
        }
    }
    s
}

fn fmt_value(v: f64) -> String {
    if v >= 1000.0 {
        group(v)
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_grouped() {
        assert_eq!(group(1234567.4), "1,234,567");
        assert_eq!(group(999.0), "999");
        assert_eq!(group(1000.0), "1,000");
    }

    #[test]
    fn the_header_says_how_timed_workloads_are_capped() {
        let mut cfg = Config {
            stores: vec!["kivi".into()],
            workloads: vec![2],
            n: 1_000_000,
            rounds: 1,
            dir: "/tmp/x".into(),
            json: None,
            steady_updates: 1,
            program: "kivi".into(),
            memory_limit: None,
            ops: None,
            max_seconds: None,
        };
        assert!(!header(&cfg, &[]).contains("timed workloads"));
        cfg.ops = Some(5_000);
        assert!(
            header(&cfg, &[]).contains("timed workloads after the load: 5,000 operations each\n")
        );
        cfg.max_seconds = Some(300);
        assert!(header(&cfg, &[]).contains("5,000 operations each, or as many as 300 s allow\n"));
        cfg.ops = None;
        assert!(
            header(&cfg, &[]).contains("1,000,000 operations each, or as many as 300 s allow\n")
        );
    }
}
