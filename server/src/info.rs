//! INFO: kivi's stats in the layout of Redis's INFO (`# Section` headers,
//! `field:value` lines), so tools that read Redis's INFO find their fields.

use crate::counters::Counters;
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
    let c = &shared.counters;
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
        vec![
            // Open connections over both listeners (RESP and kvlds).
            (
                "connected_clients",
                shared.connections.load(Ordering::Relaxed).to_string(),
            ),
            ("maxclients", shared.live.max_connections().to_string()),
            // No blocking commands: nobody waits on a key.
            ("blocked_clients", "0".into()),
        ],
    );
    let stats = shared.db.stats();
    let st = stats.as_ref().ok();
    let rss = resident_bytes();
    // The allocator's figure when the binary gave a way to ask for it,
    // else the resident set (the process's memory as the OS counts it).
    let (used, allocator) = match shared.allocator {
        Some(a) => (Some((a.used_bytes)()), a.name),
        None => (rss, "unknown (used_memory is the RSS)"),
    };
    let used = used.unwrap_or(0);
    let mut memory = vec![
        ("used_memory", used.to_string()),
        ("used_memory_human", human_bytes(used)),
        ("used_memory_rss", rss.unwrap_or(0).to_string()),
        ("used_memory_rss_human", human_bytes(rss.unwrap_or(0))),
        (
            "mem_fragmentation_ratio",
            match rss {
                Some(r) if used > 0 => format!("{:.2}", r as f64 / used as f64),
                _ => "-".into(),
            },
        ),
        ("mem_allocator", allocator.into()),
        // No memory limit on the data, which lives on disk; nothing is
        // evicted (the page cache has its own bound, kivi_cache_capacity).
        ("maxmemory", "0".into()),
        ("maxmemory_human", human_bytes(0)),
        ("maxmemory_policy", "noeviction".into()),
    ];
    if let Some(st) = st {
        memory.extend([
            ("kivi_cache_bytes", st.cache_bytes.to_string()),
            ("kivi_cache_capacity", st.cache_capacity.to_string()),
            ("kivi_resident_bytes", st.resident_bytes.to_string()),
            ("kivi_dirty_bytes", st.dirty_bytes.to_string()),
        ]);
    }
    section("Memory", memory);
    let mut persistence = vec![
        ("loading", "0".into()),
        // Every write is in the commit log before it is answered.
        ("aof_enabled", "1".into()),
    ];
    if let Some(st) = st {
        persistence.extend([
            ("kivi_checkpoints", st.checkpoints.to_string()),
            ("kivi_failed_checkpoints", st.failed_checkpoints.to_string()),
            ("kivi_write_stalls", st.write_stalls.to_string()),
            ("kivi_write_stall_us", st.write_stall_us.to_string()),
            ("kivi_redo_bytes", st.redo_bytes.to_string()),
            ("kivi_replayed_at_open", st.replayed_at_open.to_string()),
        ]);
    }
    section("Persistence", persistence);
    let count = |a: &std::sync::atomic::AtomicU64| Counters::get(a).to_string();
    let mut server_stats = vec![
        ("total_connections_received", count(&c.connections_received)),
        ("total_commands_processed", count(&c.commands_processed)),
        (
            "instantaneous_ops_per_sec",
            shared.ops.lock().per_second().to_string(),
        ),
        ("rejected_connections", count(&c.rejected_connections)),
        (
            "expired_keys",
            st.map_or(0, |st| {
                st.expired_reclaimed
                    .saturating_sub(Counters::get(&c.expired_keys_at_reset))
            })
            .to_string(),
        ),
        ("evicted_keys", "0".into()),
        ("keyspace_hits", count(&c.keyspace_hits)),
        ("keyspace_misses", count(&c.keyspace_misses)),
    ];
    if let Some(st) = st {
        let hits = st.cache_hits;
        let lookups = hits + st.cache_misses;
        server_stats.extend([
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
        ]);
        if st.object_puts + st.object_gets + st.object_lists > 0 {
            server_stats.extend([
                ("kivi_object_puts", st.object_puts.to_string()),
                ("kivi_object_put_bytes", st.object_put_bytes.to_string()),
                ("kivi_object_gets", st.object_gets.to_string()),
                ("kivi_object_get_bytes", st.object_get_bytes.to_string()),
                ("kivi_object_deletes", st.object_deletes.to_string()),
                ("kivi_object_lists", st.object_lists.to_string()),
                ("kivi_object_cache_hits", st.object_cache_hits.to_string()),
                (
                    "kivi_object_cache_misses",
                    st.object_cache_misses.to_string(),
                ),
                ("kivi_object_cache_bytes", st.object_cache_bytes.to_string()),
            ]);
        }
    }
    section("Stats", server_stats);
    section("Replication", replication(shared, st));
    let (user, system) = cpu_seconds();
    section(
        "CPU",
        vec![
            ("used_cpu_sys", format!("{system:.6}")),
            ("used_cpu_user", format!("{user:.6}")),
        ],
    );
    section("Cluster", vec![("cluster_enabled", "0".into())]);
    let kivi = match &stats {
        Ok(st) => vec![
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
        Err(e) => vec![("stats_error", e.to_string().replace(['\r', '\n'], " "))],
    };
    section("Kivi", kivi);
    // The engine's counts, expired keys left out: pairs, and of those the
    // ones with a deadline. `avg_ttl` is 0, as Redis has it before its
    // expiry cycle has sampled any key: kivi samples none.
    section(
        "Keyspace",
        st.map(|st| {
            let (keys, expires) = (st.pairs, st.pairs_with_deadline);
            ("db0", format!("keys={keys},expires={expires},avg_ttl=0"))
        })
        .into_iter()
        .collect(),
    );
    out
}

/// Redis's `*_human` form: bytes in B, K, M, G or T (powers of 1024).
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["K", "M", "G", "T"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2}{}", UNITS[unit])
}

/// The process's resident set in bytes, from the OS: /proc/self/statm's
/// second field (resident pages) times the page size. `None` where there
/// is no /proc.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a system constant; it touches no memory of ours.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// CPU time the process has used so far: (user, system) seconds.
fn cpu_seconds() -> (f64, f64) {
    // SAFETY: rusage is plain integers, for which all zeros is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the one struct we pass, which lives on this
    // frame for the whole call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// INFO's Replication section: a writer is Redis's master (its followers
/// read the object store, not a connection to it, so it counts none); a
/// follower (`kivi serve --follow`) is a replica whose offset is the last
/// commit it shows, with how far behind the writer it was at its last
/// poll (docs in ARCHITECTURE.md, "Followers").
fn replication(shared: &Shared, st: Option<&kivi::Stats>) -> Vec<(&'static str, String)> {
    let seq = st.map_or(0, |st| st.seq);
    if crate::displaced(shared) {
        // Displaced by a takeover: no longer the writer, and following
        // nothing (its reads may be behind); where the writer is now.
        let (host, port) = crate::fenced_writer_address(shared);
        return vec![
            ("role", "slave".into()),
            ("master_host", host),
            ("master_port", port.to_string()),
            ("master_link_status", "down".into()),
            ("slave_repl_offset", seq.to_string()),
            ("slave_read_only", "1".into()),
            ("connected_slaves", "0".into()),
            ("kivi_fenced", "1".into()),
        ];
    }
    let Some(f) = shared.db.follower_status() else {
        return vec![
            ("role", "master".into()),
            ("connected_slaves", "0".into()),
            ("master_repl_offset", seq.to_string()),
        ];
    };
    // Up while polls reach the writer's log.
    let up = f.last_error.is_none() && f.last_contact_ms < 5_000;
    let (host, port) = crate::writer_address(&f);
    vec![
        ("role", "slave".into()),
        ("master_host", host),
        ("master_port", port.to_string()),
        ("master_link_status", if up { "up" } else { "down" }.into()),
        (
            "master_last_io_seconds_ago",
            (f.last_contact_ms / 1000).to_string(),
        ),
        ("master_sync_in_progress", "0".into()),
        ("slave_repl_offset", f.applied_seq.to_string()),
        ("slave_read_only", "1".into()),
        ("connected_slaves", "0".into()),
        ("master_repl_offset", f.applied_seq.to_string()),
        ("kivi_follower_lag_commits", f.lag_commits.to_string()),
        ("kivi_follower_lag_ms", f.lag_ms.to_string()),
        ("kivi_follower_polls", f.polls.to_string()),
        (
            "kivi_follower_polls_with_commits",
            f.polls_with_commits.to_string(),
        ),
        ("kivi_follower_reloads", f.reloads.to_string()),
        (
            "kivi_follower_lease_unchanged_ms",
            f.lease_unchanged_ms.to_string(),
        ),
        (
            "kivi_follower_last_error",
            f.last_error.unwrap_or_default().replace(['\r', '\n'], " "),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_reads_as_redis_writes_it() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1024), "1.00K");
        assert_eq!(human_bytes(3 << 20), "3.00M");
        assert_eq!(human_bytes(5 << 30), "5.00G");
        assert_eq!(human_bytes(2048 << 30), "2.00T");
    }

    #[test]
    fn the_resident_set_is_the_processes() {
        let rss = resident_bytes().expect("Linux has /proc/self/statm");
        // A test process holds at least a page, and less than a terabyte.
        assert!((4096..1 << 40).contains(&rss), "{rss}");
    }
}
