//! `check`: reads the whole log and every page reachable from the newest
//! checkpoint, and reports each problem with its place.

use crate::db::Db;
use crate::error::Result;
use kivi_log::{
    read_header, scan_segment, CheckpointRecord, CommitRecord, RecordType, ScanEnd, ScannedRecord,
    SegmentHeader, SegmentKind,
};
use kivi_storage::SegmentId;
use kivi_tree::{check_tree, DiskRef};
use std::collections::{BTreeMap, HashMap};

/// What `check` read and what it found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub segments: u64,
    pub bytes_scanned: u64,
    pub commit_records: u64,
    pub checkpoint_records: u64,
    pub pages: u64,
    pub blobs: u64,
    pub pairs: u64,
    /// One line per problem, naming where it is. Empty when healthy.
    pub problems: Vec<String>,
}

impl CheckReport {
    pub fn is_healthy(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Reads every record of a segment up to `end`, handing each to `visit`;
/// a record that fails validation ends the segment's scan as a problem.
fn scan_records(
    report: &mut CheckReport,
    reader: std::sync::Arc<dyn kivi_storage::SegmentReader>,
    id: SegmentId,
    name: &str,
    end: ScanEnd,
    mut visit: impl FnMut(&mut CheckReport, &ScannedRecord<'_>),
) {
    let mut scan = match scan_segment(reader, id, name.to_string(), end) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => return report.problems.push(e.to_string()),
    };
    loop {
        match scan.next_record() {
            Ok(None) => return,
            Ok(Some(rec)) => {
                report.bytes_scanned += rec.len;
                visit(report, &rec);
            }
            Err(e) => return report.problems.push(e.to_string()),
        }
    }
}

impl Db {
    /// Reads every segment record by record and every page reachable from
    /// the newest checkpoint (from storage, not the cache), and checks every
    /// invariant. Keeps going after a problem to report them all.
    pub fn check(&self) -> Result<CheckReport> {
        let inner = self.store();
        // Hold the checkpointer so the page log does not move underneath.
        let _ckpt = self.checkpointer().pause();
        let mut report = CheckReport::default();
        let storage = inner.storage();
        let mut headers: BTreeMap<SegmentId, (SegmentHeader, u64)> = BTreeMap::new();
        for id in storage.list_segments()? {
            report.segments += 1;
            let name = storage.segment_name(id);
            let reader = storage.open_segment(id)?;
            let len = reader.size()?;
            match read_header(reader.as_ref(), id, &name, len, true) {
                Ok(Some(h)) if h.store_id == inner.store_id() => {
                    headers.insert(id, (h, len));
                }
                Ok(Some(_)) => report
                    .problems
                    .push(format!("{name}: segment belongs to another store")),
                Ok(None) => {}
                Err(e) => report.problems.push(e.to_string()),
            }
        }

        // The commit log, following the chain from the newest segment.
        let commits: Vec<SegmentId> = headers
            .iter()
            .filter(|(_, (h, _))| h.kind == SegmentKind::Commits)
            .map(|(&id, _)| id)
            .collect();
        let mut chain = Vec::new();
        if let Some(&head) = commits.last() {
            chain.push(head);
            while let Some((h, _)) = headers.get(chain.last().expect("non-empty")) {
                if !headers.contains_key(&h.prev_segment) {
                    break;
                }
                chain.push(h.prev_segment);
            }
            chain.reverse();
        }
        let mut newest: Option<CheckpointRecord> = None;
        for (i, &id) in chain.iter().enumerate() {
            let name = storage.segment_name(id);
            let end = match chain.get(i + 1) {
                Some(next) => ScanEnd::Exact(headers[next].0.prev_end),
                None => ScanEnd::Tail,
            };
            scan_records(
                &mut report,
                storage.open_segment(id)?,
                id,
                &name,
                end,
                |report, rec| match rec.ty {
                    RecordType::Commit => {
                        report.commit_records += 1;
                        if let Err(e) = CommitRecord::decode(rec.body) {
                            report.problems.push(format!(
                                "{name} at offset {}: commit record: {e}",
                                rec.offset
                            ));
                        }
                    }
                    RecordType::Checkpoint => {
                        report.checkpoint_records += 1;
                        match CheckpointRecord::decode(rec.body) {
                            Ok(c) => newest = Some(c),
                            Err(e) => report.problems.push(format!(
                                "{name} at offset {}: checkpoint record: {e}",
                                rec.offset
                            )),
                        }
                    }
                    other => report.problems.push(format!(
                        "{name} at offset {}: {other:?} record in the commit log",
                        rec.offset
                    )),
                },
            );
        }

        // Page segments up to the newest checkpoint's end.
        let page_end =
            newest.map(|c| (u64::from(c.page_end.segment), u64::from(c.page_end.offset)));
        let mut successor_says: HashMap<SegmentId, u64> = HashMap::new();
        for (h, _) in headers.values() {
            if h.kind == SegmentKind::Pages && h.prev_segment != 0 {
                successor_says.insert(h.prev_segment, h.prev_end);
            }
        }
        for (&id, (h, len)) in &headers {
            if h.kind != SegmentKind::Pages {
                continue;
            }
            let end = match page_end {
                Some((p, end)) if id == p => end,
                Some((p, _)) if id < p => successor_says.get(&id).copied().unwrap_or(*len),
                _ => continue, // being written by a checkpoint in progress
            };
            let name = storage.segment_name(id);
            scan_records(
                &mut report,
                storage.open_segment(id)?,
                id,
                &name,
                ScanEnd::Exact(end),
                |report, rec| {
                    if !matches!(rec.ty, RecordType::Page | RecordType::Blob) {
                        report.problems.push(format!(
                            "{name} at offset {}: {:?} record in a page segment",
                            rec.offset, rec.ty
                        ));
                    }
                },
            );
        }

        // The tree of the newest checkpoint, read from storage.
        if let Some(c) = newest {
            if let Some(page) = c.root {
                let at = DiskRef {
                    page,
                    subtree: c.tree_bytes,
                    oldest: c.root_oldest,
                };
                match inner.pager().load_uncached(at, c.root_level) {
                    Ok(root) => {
                        let t = check_tree(inner.pager(), &root);
                        report.pages += t.pages;
                        report.blobs += t.blobs;
                        report.pairs = t.pairs;
                        report.problems.extend(t.problems);
                        // A sliced checkpoint's tree holds part of the
                        // key range as of `replay_from`, not `seq`: its
                        // count is the version's, not the tree's.
                        if c.replay_from == c.seq && t.pairs != c.pairs {
                            report.problems.push(format!(
                                "checkpoint of commit {} records {} pairs, its tree holds {}",
                                c.seq, c.pairs, t.pairs
                            ));
                        }
                    }
                    Err(e) => report.problems.push(e.to_string()),
                }
            }
        }
        // And the current version, which adds the commits since, in memory.
        // A sliced checkpoint's tree is not the version of its `seq` (some
        // slices are older), so its count is never the store's: the current
        // version is checked and counted even when no commit came since.
        let v = inner.current_full();
        if newest.is_none_or(|c| c.seq != v.seq || c.replay_from != c.seq) {
            if let Some(root) = &v.root {
                let t = check_tree(inner.pager(), root);
                report.problems.extend(
                    t.problems
                        .into_iter()
                        .map(|p| format!("current version: {p}")),
                );
                if t.pairs != v.pairs {
                    report.problems.push(format!(
                        "current version counts {} pairs, holds {}",
                        v.pairs, t.pairs
                    ));
                }
                report.pairs = t.pairs;
            } else {
                report.pairs = 0;
            }
        }
        // And the write buffer over the tree.
        match inner.buffer_pairs_delta(&v) {
            Ok(delta) => report.pairs = (report.pairs as i64 + delta) as u64,
            Err(e) => report.problems.push(format!("write buffer: {e}")),
        }
        Ok(report)
    }
}
