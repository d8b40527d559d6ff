//! INFO: kivi's stats in the layout of Redis's INFO (`# Section` headers,
//! `field:value` lines), so tools that read Redis's INFO find their fields.

use crate::resp::commands::REDIS_VERSION;
use crate::Shared;
use std::fmt::Write;
use std::sync::atomic::Ordering;

/// The INFO text for the sections asked for (all when none, or `all`,
/// `everything`, `default`).
pub fn render(shared: &Shared, sections: &[Vec<u8>]) -> String {
    let wanted: Vec<String> = sections
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    let all = wanted.is_empty()
        || wanted
            .iter()
            .any(|s| matches!(s.as_str(), "all" | "everything" | "default"));
    let want = |s: &str| all || wanted.iter().any(|w| w == s);
    let stats = shared.db.stats();
    let mut out = String::new();
    let mut section = |name: &str, lines: Vec<(&str, String)>| {
        if !want(&name.to_ascii_lowercase()) {
            return;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let _ = write!(out, "# {name}\r\n");
        for (k, v) in lines {
            let _ = write!(out, "{k}:{v}\r\n");
        }
    };
    let uptime = shared.started.elapsed().as_secs();
    section(
        "Server",
        vec![
            ("redis_version", REDIS_VERSION.to_string()),
            ("kivi_version", env!("CARGO_PKG_VERSION").to_string()),
            ("redis_mode", "standalone".into()),
            ("os", std::env::consts::OS.into()),
            ("arch_bits", (usize::BITS).to_string()),
            ("process_id", std::process::id().to_string()),
            ("tcp_port", shared.resp_port.to_string()),
            ("uptime_in_seconds", uptime.to_string()),
            ("uptime_in_days", (uptime / 86_400).to_string()),
        ],
    );
    section(
        "Clients",
        vec![(
            "connected_clients",
            shared.connections.load(Ordering::Relaxed).to_string(),
        )],
    );
    let Ok(st) = stats else {
        section(
            "Errorstats",
            vec![("kivi_stats_error", format!("{:?}", stats.err()))],
        );
        return out;
    };
    section(
        "Memory",
        vec![
            (
                "used_memory",
                (st.cache_bytes + st.resident_bytes).to_string(),
            ),
            ("kivi_cache_bytes", st.cache_bytes.to_string()),
            ("kivi_cache_capacity", st.cache_capacity.to_string()),
            ("kivi_resident_bytes", st.resident_bytes.to_string()),
            ("kivi_dirty_bytes", st.dirty_bytes.to_string()),
        ],
    );
    section(
        "Persistence",
        vec![
            ("loading", "0".into()),
            ("aof_enabled", "1".into()),
            ("kivi_checkpoints", st.checkpoints.to_string()),
            ("kivi_failed_checkpoints", st.failed_checkpoints.to_string()),
            ("kivi_write_stalls", st.write_stalls.to_string()),
            ("kivi_write_stall_us", st.write_stall_us.to_string()),
            ("kivi_redo_bytes", st.redo_bytes.to_string()),
            ("kivi_replayed_at_open", st.replayed_at_open.to_string()),
        ],
    );
    let hits = st.cache_hits;
    let lookups = hits + st.cache_misses;
    section(
        "Stats",
        vec![
            ("kivi_group_commits", st.group_commits.to_string()),
            ("kivi_batches", st.batches.to_string()),
            ("kivi_failed_commits", st.failed_commits.to_string()),
            ("kivi_cache_hits", hits.to_string()),
            ("kivi_cache_misses", st.cache_misses.to_string()),
            (
                "kivi_cache_hit_rate",
                if lookups == 0 {
                    "-".into()
                } else {
                    format!("{:.4}", hits as f64 / lookups as f64)
                },
            ),
            ("kivi_page_reads", st.page_reads.to_string()),
        ],
    );
    section(
        "Kivi",
        vec![
            ("pairs", st.pairs.to_string()),
            ("live_bytes", st.live_bytes.to_string()),
            ("file_bytes", st.file_bytes.to_string()),
            (
                "space_amplification",
                if st.live_bytes == 0 {
                    "-".into()
                } else {
                    format!("{:.2}", st.file_bytes as f64 / st.live_bytes as f64)
                },
            ),
            ("commit_segments", st.commit_segments.to_string()),
            ("page_segments", st.page_segments.to_string()),
            ("cleaned_segments", st.cleaned_segments.to_string()),
            ("delta_pages", st.delta_pages.to_string()),
            ("cleaner_copied_bytes", st.cleaner_copied_bytes.to_string()),
            (
                "last_error",
                st.last_error
                    .clone()
                    .unwrap_or_default()
                    .replace(['\r', '\n'], " "),
            ),
        ],
    );
    section(
        "Keyspace",
        vec![("db0", format!("keys={},expires=0,avg_ttl=0", st.pairs))],
    );
    out
}
