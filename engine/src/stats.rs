//! `stats()`: what the store holds and how it is doing.

use crate::db::Db;
use crate::error::Result;
use kivi_log::{read_header, SegmentKind};

/// A snapshot of the store's numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Stats {
    /// Key-value pairs stored, expired ones left out.
    pub pairs: u64,
    /// Of those, pairs whose value has a deadline (Redis's `expires`).
    pub pairs_with_deadline: u64,
    /// Expired keys whose entries the background deleted since open.
    pub expired_reclaimed: u64,
    /// Sequence number of the last commit.
    pub seq: u64,
    /// Levels of the tree (0 when empty).
    pub tree_height: u32,
    /// Bytes needed to hold the data: the newest checkpoint's reachable pages
    /// and values plus the commit log written since.
    pub live_bytes: u64,
    /// Bytes of every segment file.
    pub file_bytes: u64,
    /// Segment files of the commit log (the write-ahead records of batches).
    pub commit_segments: u64,
    /// Segment files of the page log (tree pages and out-of-line values),
    /// including any whose header could not be read.
    pub page_segments: u64,
    /// Bytes of the commit log's segments, the one being appended to counted
    /// up to what is written.
    pub commit_log_bytes: u64,
    /// Bytes of the page log's segments; `commit_log_bytes` and this add up
    /// to `file_bytes`.
    pub page_log_bytes: u64,
    /// Bytes of pages and values reachable from the newest checkpoint.
    pub checkpoint_tree_bytes: u64,
    /// Commit-log bytes not yet covered by a checkpoint (what a reopen replays).
    pub redo_bytes: u64,
    /// Bytes of pages in the page cache now.
    pub cache_bytes: u64,
    /// The page cache's budget in bytes ([`Options::cache_bytes`]), shared
    /// with `resident_bytes`.
    ///
    /// [`Options::cache_bytes`]: crate::Options::cache_bytes
    pub cache_capacity: u64,
    /// Bytes of written pages kept in memory in the tree itself, beside the
    /// cache; the two share `cache_bytes`.
    pub resident_bytes: u64,
    /// Memory of the nodes changes made that no checkpoint has written yet,
    /// each counting what it adds (a leaf's delta, not the base it shares:
    /// a base evicted from the cache while a changed leaf holds it is not
    /// counted anywhere, so this is a lower bound).
    pub dirty_bytes: u64,
    /// Keys in the write buffer: committed changes not yet merged into the
    /// tree.
    pub buffered_keys: u64,
    /// Memory the write buffer holds, in bytes (an estimate).
    pub buffered_bytes: u64,
    /// Write buffers merged into the tree since open.
    pub buffer_merges: u64,
    /// Pages in the page cache now.
    pub cache_pages: u64,
    /// Page lookups the cache answered since open.
    pub cache_hits: u64,
    /// Page lookups the cache did not answer since open (each a read of the
    /// page from its segment).
    pub cache_misses: u64,
    /// Tree pages read from segment files since open.
    pub page_reads: u64,
    /// Out-of-line values (over
    /// [`INLINE_VALUE_MAX`](crate::limits::INLINE_VALUE_MAX) bytes) read from
    /// segment files since open.
    pub blob_reads: u64,
    /// Group commits since open: each one commit record and one fdatasync,
    /// shared by the batches written at the same time.
    pub group_commits: u64,
    /// Batches committed since open (single writes count as one each);
    /// `batches / group_commits` is how many share a commit on average.
    pub batches: u64,
    /// Group commits that failed (their writes returned an error) since open.
    pub failed_commits: u64,
    /// Checkpoints made durable since open.
    pub checkpoints: u64,
    /// Of those, checkpoints that wrote a slice of the changes (the rest
    /// kept from the previous checkpoint's pages).
    pub sliced_checkpoints: u64,
    /// Checkpoints that failed since open (`last_error` says why); the
    /// commits they would have covered stay in the commit log.
    pub failed_checkpoints: u64,
    /// Writes held back since open because the changes no checkpoint had
    /// written yet passed twice [`Options::write_buffer_bytes`] (each waits
    /// at most a second).
    ///
    /// [`Options::write_buffer_bytes`]: crate::Options::write_buffer_bytes
    pub write_stalls: u64,
    /// Microseconds the `write_stalls` waited, in all.
    pub write_stall_us: u64,
    /// Leaves durable checkpoints wrote as delta pages (their changes over
    /// a base page, without reading or rewriting it) since open.
    pub delta_pages: u64,
    /// Page segments the cleaner deleted since open.
    pub cleaned_segments: u64,
    /// Bytes of live pages and values the cleaner copied out of old page
    /// segments (into the log's head) so those could be deleted.
    pub cleaner_copied_bytes: u64,
    /// Page segments no checkpoint uses any more, waiting for the snapshots
    /// and iterators that may still read them to be dropped.
    pub retiring_segments: u64,
    /// Commits replayed when the store was opened.
    pub replayed_at_open: u64,
    /// Damage opening found in log records that a checkpoint already covers
    /// (so nothing was lost); `check` reports it too.
    pub damage_at_open: Vec<String>,
    /// Where opening cut off a torn tail, if it did.
    pub torn_tail: Option<String>,
    /// The most recent background error, if any.
    pub last_error: Option<String>,
    /// On an object store: the requests made since open and the bytes they
    /// moved, and the local cache's work (all zero on a local directory).
    /// Each group commit is one put.
    pub object_puts: u64,
    /// Bytes sent by `object_puts`.
    pub object_put_bytes: u64,
    /// Gets (whole objects and ranges) since open.
    pub object_gets: u64,
    /// Bytes received by `object_gets`.
    pub object_get_bytes: u64,
    /// Deletes since open.
    pub object_deletes: u64,
    /// List requests since open (only opening lists).
    pub object_lists: u64,
    /// Puts that found their name taken, settled by reading the object back.
    pub object_conflicts: u64,
    /// Requests tried again after a failure.
    pub object_retries: u64,
    /// Reads of objects the local cache answered.
    pub object_cache_hits: u64,
    /// Reads of objects that went to the object store.
    pub object_cache_misses: u64,
    /// Bytes in the local cache now.
    pub object_cache_bytes: u64,
}

impl Stats {
    /// File bytes over live bytes: how much room the store takes for what it
    /// holds (1.0 is no overhead); `None` for an empty store.
    pub fn space_amplification(&self) -> Option<f64> {
        (self.live_bytes > 0).then(|| self.file_bytes as f64 / self.live_bytes as f64)
    }

    /// Share of page lookups the cache answered (nodes kept in memory in the
    /// tree are not looked up at all); `None` before any lookup.
    pub fn cache_hit_rate(&self) -> Option<f64> {
        let all = self.cache_hits + self.cache_misses;
        (all > 0).then(|| self.cache_hits as f64 / all as f64)
    }
}

impl Db {
    /// Current numbers. Reads each segment's header to classify it.
    pub fn stats(&self) -> Result<Stats> {
        let store = self.store();
        let v = store.current_full();
        let c = store.counters().values();
        let p = store.pager().stats();
        let (pairs, pairs_with_deadline) = store.pairs_and_deadlines(&v)?;
        let mut s = Stats {
            pairs,
            pairs_with_deadline,
            seq: v.visible_seq,
            buffered_keys: v.buffer.keys() as u64,
            buffered_bytes: v.buffer.bytes(),
            buffer_merges: c.buffer_merges,
            expired_reclaimed: c.expired_reclaimed,
            tree_height: v.root.as_ref().map_or(0, |r| u32::from(r.level()) + 1),
            checkpoint_tree_bytes: c.checkpointed_tree_bytes,
            redo_bytes: v.visible_log_bytes.saturating_sub(c.checkpointed_log_bytes),
            cache_bytes: p.cache_bytes,
            cache_capacity: p.cache_capacity,
            resident_bytes: p.resident_bytes,
            dirty_bytes: p.dirty_bytes,
            cache_pages: p.cache_pages,
            cache_hits: p.hits,
            cache_misses: p.misses,
            page_reads: p.page_reads,
            blob_reads: p.blob_reads,
            group_commits: c.group_commits,
            batches: c.batches,
            failed_commits: c.failed_commits,
            checkpoints: c.checkpoints,
            sliced_checkpoints: c.sliced_checkpoints,
            failed_checkpoints: c.failed_checkpoints,
            write_stalls: c.write_stalls,
            write_stall_us: c.write_stall_us,
            delta_pages: c.delta_pages,
            cleaned_segments: c.cleaned_segments,
            cleaner_copied_bytes: c.cleaner_copied_bytes,
            retiring_segments: c.retiring_segments,
            replayed_at_open: store.opened().replayed,
            damage_at_open: store.opened().damage.clone(),
            torn_tail: store
                .opened()
                .torn_tail
                .as_ref()
                .map(|(f, o)| format!("{f} at offset {o}")),
            last_error: store.last_error(),
            ..Stats::default()
        };
        s.live_bytes = s.checkpoint_tree_bytes + s.redo_bytes;
        if let Some(r) = store.storage().remote_requests() {
            s.object_puts = r.puts;
            s.object_put_bytes = r.put_bytes;
            s.object_gets = r.gets;
            s.object_get_bytes = r.get_bytes;
            s.object_deletes = r.deletes;
            s.object_lists = r.lists;
            s.object_conflicts = r.conflicts;
            s.object_retries = r.retries;
            s.object_cache_hits = r.cache_hits;
            s.object_cache_misses = r.cache_misses;
            s.object_cache_bytes = r.cache_bytes;
        }
        // The commit segment being appended to is grown ahead of its data
        // in sparse steps (see ARCHITECTURE.md); count what is written, and
        // for the page segment, what the page log has appended.
        let appending: Vec<(u64, u64)> = [
            self.commit_path().log_appending(),
            // Published by the page log, so that a checkpoint in progress
            // need not be waited for (its segment counted at the file's
            // length, 8 MiB ahead, made tests' amplification flaky).
            self.checkpointer().page_appending(),
        ]
        .into_iter()
        .flatten()
        .collect();
        for id in store.storage().list_segments()? {
            // A checkpoint may delete a segment between the listing and here.
            let gone = |e: &kivi_storage::IoError| e.kind() == std::io::ErrorKind::NotFound;
            let reader = match store.storage().open_segment(id) {
                Err(e) if gone(&e) => continue,
                r => r?,
            };
            let len = match reader.size() {
                Err(e) if gone(&e) => continue,
                r => r?,
            };
            let len = appending
                .iter()
                .find(|a| a.0 == id)
                .map_or(len, |a| a.1.min(len));
            s.file_bytes += len;
            let name = store.storage().segment_name(id);
            match read_header(reader.as_ref(), id, &name, len, true) {
                Ok(Some(h)) if h.kind == SegmentKind::Commits => {
                    s.commit_segments += 1;
                    s.commit_log_bytes += len;
                }
                _ => {
                    s.page_segments += 1;
                    s.page_log_bytes += len;
                }
            }
        }
        Ok(s)
    }
}
