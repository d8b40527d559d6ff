//! `stats`: the store's numbers, as text for people or JSON for programs.

use crate::error::{stdout_error, Result};
use crate::Store;
use std::io::{self, Write};

pub fn run(store: &Store, json: bool) -> Result<()> {
    let stats = store.read_only_with(|db| Ok(db.stats()?))?;
    let mut out = io::stdout().lock();
    let text = if json {
        // Every field of `kivi::Stats` under its own name, plus the total of
        // segments and the space amplification (null for an empty store).
        let mut value = serde_json::to_value(&stats).expect("plain numbers and strings serialize");
        value["segments"] = (stats.commit_segments + stats.page_segments).into();
        value["space_amplification"] = stats.space_amplification().into();
        value["cache_hit_rate"] = stats.cache_hit_rate().into();
        serde_json::to_string_pretty(&value).expect("a JSON value serializes") + "\n"
    } else {
        human(&store.shown_dir(), &stats)
    };
    out.write_all(text.as_bytes()).map_err(stdout_error)
}

/// `1234567` as "1.2 MiB (1234567 bytes)": readable, yet exact.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {} ({n} bytes)", UNITS[unit])
    }
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

fn human(dir: &str, s: &kivi::Stats) -> String {
    let rows: Vec<(&str, String)> = vec![
        ("store", dir.to_string()),
        ("pairs", s.pairs.to_string()),
        ("last commit (seq)", s.seq.to_string()),
        ("tree height", s.tree_height.to_string()),
        ("live bytes", bytes(s.live_bytes)),
        ("  checkpointed tree", bytes(s.checkpoint_tree_bytes)),
        ("  redo log since", bytes(s.redo_bytes)),
        ("file bytes", bytes(s.file_bytes)),
        ("  commit log", bytes(s.commit_log_bytes)),
        ("  page log", bytes(s.page_log_bytes)),
        (
            "space amplification",
            s.space_amplification()
                .map_or("-".into(), |a| format!("{a:.2}x (file bytes / live bytes)")),
        ),
        (
            "segments",
            format!(
                "{} ({} commit log, {} page log)",
                s.commit_segments + s.page_segments,
                s.commit_segments,
                s.page_segments
            ),
        ),
        (
            "cache use",
            format!(
                "{} of {} in {} pages",
                bytes(s.cache_bytes),
                bytes(s.cache_capacity),
                s.cache_pages
            ),
        ),
        ("resident pages", bytes(s.resident_bytes)),
        ("changed, unwritten", bytes(s.dirty_bytes)),
        (
            "cache hits / misses",
            format!(
                "{} / {} ({} hits)",
                s.cache_hits,
                s.cache_misses,
                percent(s.cache_hits, s.cache_hits + s.cache_misses)
            ),
        ),
        ("page reads", s.page_reads.to_string()),
        ("blob reads", s.blob_reads.to_string()),
        ("group commits", s.group_commits.to_string()),
        ("batches", s.batches.to_string()),
        ("failed commits", s.failed_commits.to_string()),
        ("checkpoints", s.checkpoints.to_string()),
        ("sliced checkpoints", s.sliced_checkpoints.to_string()),
        ("delta pages written", s.delta_pages.to_string()),
        ("failed checkpoints", s.failed_checkpoints.to_string()),
        (
            "write stalls",
            format!("{} ({} ms waited)", s.write_stalls, s.write_stall_us / 1000),
        ),
        (
            "cleaner",
            format!(
                "{} page segments deleted, {} copied out of them first, {} waiting for readers",
                s.cleaned_segments,
                bytes(s.cleaner_copied_bytes),
                s.retiring_segments
            ),
        ),
        (
            "replayed at open",
            format!("{} commits", s.replayed_at_open),
        ),
        ("torn tail", s.torn_tail.clone().unwrap_or("none".into())),
        (
            "damage at open",
            if s.damage_at_open.is_empty() {
                "none".into()
            } else {
                s.damage_at_open.join("; ")
            },
        ),
        ("last error", s.last_error.clone().unwrap_or("none".into())),
    ];
    let mut rows = rows;
    if s.object_puts + s.object_gets + s.object_lists > 0 {
        // A store on an object store: what it cost in requests.
        rows.extend([
            (
                "object puts",
                format!("{} ({} sent)", s.object_puts, bytes(s.object_put_bytes)),
            ),
            (
                "object gets",
                format!("{} ({} received)", s.object_gets, bytes(s.object_get_bytes)),
            ),
            ("object deletes", s.object_deletes.to_string()),
            ("object lists", s.object_lists.to_string()),
            (
                "settled / retried",
                format!(
                    "{} puts that found their name taken, {} requests tried again",
                    s.object_conflicts, s.object_retries
                ),
            ),
            (
                "local object cache",
                format!(
                    "{} held; {} / {} hits / misses",
                    bytes(s.object_cache_bytes),
                    s.object_cache_hits,
                    s.object_cache_misses
                ),
            ),
        ]);
    }
    let mut text: String = rows.iter().map(|(k, v)| format!("{k:<20} {v}\n")).collect();
    // The counters live in memory: a reading command sees only its own work.
    text.push_str(
        "(cache, read, commit, checkpoint and cleaner counters cover this command only)\n",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_well_and_stay_exact() {
        assert_eq!(bytes(12), "12 bytes");
        assert_eq!(bytes(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(bytes(3 << 30), "3.0 GiB (3221225472 bytes)");
    }
}
