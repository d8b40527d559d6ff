//! `check`: reads the whole log and every page reachable from the newest
//! checkpoint, and reports each problem with its place.
//!
//! [`Db::check`] runs these phases in order, each a function below, and
//! keeps going after a problem so as to report them all:
//!
//! 1. [`read_headers`]: every segment's header.
//! 2. [`check_log`]: the commit log's records, and the newest checkpoint.
//! 3. [`check_page_segments`]: the page segments' records.
//! 4. [`check_checkpoint_tree`]: the newest checkpoint's tree, from storage.
//! 5. [`check_current_version`]: the published version's tree and the
//!    write buffer over it.
//!
//! A store a crash left behind holds what recovery tolerates (ARCHITECTURE.md,
//! "Recovery"); each phase says what of that it meets and how it treats it.

use crate::db::Db;
use crate::error::Result;
use crate::store::Store;
use kivi_log::{
    read_header, scan_segment, CheckpointRecord, CommitRecord, RecordType, ScanEnd, ScannedRecord,
    SegmentHeader, SegmentKind,
};
use kivi_storage::{SegmentId, Storage};
use kivi_tree::{check_tree, DiskRef, Pager};
use std::collections::{BTreeMap, HashMap};

/// Every segment with a header of this store: its header and its length.
type Headers = BTreeMap<SegmentId, (SegmentHeader, u64)>;

/// What `check` read and what it found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Segment files listed, of both logs.
    pub segments: u64,
    /// Bytes of records read and validated across all segments.
    pub bytes_scanned: u64,
    /// Commit records found (each a group commit of one or more batches).
    pub commit_records: u64,
    /// Checkpoint records found.
    pub checkpoint_records: u64,
    /// Tree pages read and checked, reachable from the newest checkpoint.
    pub pages: u64,
    /// Out-of-line values read and checked, reachable from the newest
    /// checkpoint.
    pub blobs: u64,
    /// Pairs the store holds as of the check: the tree's count with the
    /// write buffer's changes over it.
    pub pairs: u64,
    /// One line per problem, naming where it is. Empty when healthy.
    pub problems: Vec<String>,
}

impl CheckReport {
    /// Whether the check found no problem.
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
        let checkpointer = self.checkpointer();
        let _ckpt = checkpointer.pause();
        let mut report = CheckReport::default();
        let storage = inner.storage();
        let headers = read_headers(storage.as_ref(), inner.store_id(), &mut report)?;
        let newest = check_log(storage.as_ref(), &headers, &mut report)?;
        check_page_segments(storage.as_ref(), &headers, newest, &mut report)?;
        if let Some(c) = newest {
            check_checkpoint_tree(inner.pager(), c, &mut report);
        }
        check_current_version(&inner, newest, &mut report);
        Ok(report)
    }
}

/// Phase 1: every segment's header, counting the segments.
///
/// A crash while a segment was being created leaves one whose header never
/// completed: it holds nothing, and is skipped (recovery deletes it at the
/// next writable open). A header that fails otherwise, or one of another
/// store, is a problem.
fn read_headers(
    storage: &dyn Storage,
    store_id: [u8; 16],
    report: &mut CheckReport,
) -> Result<Headers> {
    let mut headers = Headers::new();
    for id in storage.list_segments()? {
        report.segments += 1;
        let name = storage.segment_name(id);
        let reader = storage.open_segment(id)?;
        let len = reader.size()?;
        match read_header(reader.as_ref(), id, &name, len, true) {
            Ok(Some(h)) if h.store_id == store_id => {
                headers.insert(id, (h, len));
            }
            Ok(Some(_)) => report
                .problems
                .push(format!("{name}: segment belongs to another store")),
            Ok(None) => {}
            Err(e) => report.problems.push(e.to_string()),
        }
    }
    Ok(headers)
}

/// Phase 2: the commit log, following the chain from the newest segment;
/// returns the newest checkpoint record that decoded.
///
/// Every segment but the newest is read up to the end its successor's
/// header declares; the newest to its tail, where a torn record a crash
/// left is cut off as recovery cuts it. Every other record that fails, and
/// every record that is not a commit or a checkpoint, is a problem.
/// Commit segments off the chain (leftovers of a cleanup or of a failed
/// roll) are not read.
fn check_log(
    storage: &dyn Storage,
    headers: &Headers,
    report: &mut CheckReport,
) -> Result<Option<CheckpointRecord>> {
    let commits: Vec<SegmentId> = headers
        .iter()
        .filter(|(_, (h, _))| h.kind == SegmentKind::Commits)
        .map(|(&id, _)| id)
        .collect();
    let mut chain = Vec::new();
    if let Some(&head) = commits.last() {
        chain.push(head);
        // Only older commit segments link on, as in recovery's chain.
        while let Some((h, _)) = headers.get(chain.last().expect("non-empty")) {
            let links = h.prev_segment < h.segment
                && headers
                    .get(&h.prev_segment)
                    .is_some_and(|(p, _)| p.kind == SegmentKind::Commits);
            if !links {
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
            report,
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
    Ok(newest)
}

/// Phase 3: the page segments up to the newest checkpoint's end, each read
/// up to where its successor's header says it ends (or, for the one the
/// checkpoint ends in, to the checkpoint's end).
///
/// Page segments past the newest checkpoint's end hold pages no durable
/// checkpoint references: after a crash, those of a checkpoint that never
/// committed (garbage, which a writable open deletes); while the store
/// runs, those of the checkpoint being written (this check holds the
/// checkpointer, so the page log does not move underneath it). They are
/// not read. Every record up to the end must be a valid page, delta, blob
/// or padding record.
fn check_page_segments(
    storage: &dyn Storage,
    headers: &Headers,
    newest: Option<CheckpointRecord>,
    report: &mut CheckReport,
) -> Result<()> {
    let page_end = newest.map(|c| (u64::from(c.page_end.segment), u64::from(c.page_end.offset)));
    let mut successor_says: HashMap<SegmentId, u64> = HashMap::new();
    for (h, _) in headers.values() {
        if h.kind == SegmentKind::Pages && h.prev_segment != 0 {
            successor_says.insert(h.prev_segment, h.prev_end);
        }
    }
    for (&id, (h, len)) in headers {
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
            report,
            storage.open_segment(id)?,
            id,
            &name,
            ScanEnd::Exact(end),
            |report, rec| {
                if !matches!(
                    rec.ty,
                    RecordType::Page | RecordType::Delta | RecordType::Blob | RecordType::Padding
                ) {
                    report.problems.push(format!(
                        "{name} at offset {}: {:?} record in a page segment",
                        rec.offset, rec.ty
                    ));
                }
            },
        );
    }
    Ok(())
}

/// Phase 4: the tree of the newest checkpoint, read from storage (not the
/// cache), every page validated, its pairs counted.
///
/// A checkpoint record is committed only after its pages were synced, so
/// no crash leaves it naming pages that are not on disk: any page that
/// fails is a problem, and so is a count that differs from the record's.
fn check_checkpoint_tree(pager: &Pager, c: CheckpointRecord, report: &mut CheckReport) {
    let Some(page) = c.root else { return };
    let at = DiskRef {
        page,
        subtree: c.tree_bytes,
        oldest: c.root_oldest,
        // The checkpoint does not record it.
        earliest: kivi_log::ANY_DEADLINE,
    };
    match pager.load_uncached(at, c.root_level) {
        Ok(root) => {
            let t = check_tree(pager, &root);
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

/// Notes a problem when the current version's count of `what` (`counted`)
/// is not what its tree holds (`held`), or could not be made.
fn compare_count(report: &mut CheckReport, what: &str, counted: Result<u64>, held: u64) {
    match counted {
        Ok(counted) if counted != held => report.problems.push(format!(
            "current version counts {counted} {what}, holds {held}"
        )),
        Ok(_) => {}
        Err(e) => report
            .problems
            .push(format!("current version: counting {what}: {e}")),
    }
}

/// Phase 5: the current version, which adds the commits since the newest
/// checkpoint, in memory: its tree, and the write buffer over it. The
/// pairs it counts are the store's.
///
/// What recovery replayed after a crash (the commits after the
/// checkpoint's `replay_from`) is in the write buffer over the
/// checkpoint's tree until a merge; a tree that fails, or that holds
/// another count than the version's, is a problem.
fn check_current_version(
    inner: &Store,
    newest: Option<CheckpointRecord>,
    report: &mut CheckReport,
) {
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
            compare_count(report, "pairs", inner.tree_pairs(&v), t.pairs);
            report.pairs = t.pairs;
            // The deadlines kept from apply to apply (or, not yet known,
            // walked through the subtrees' earliest deadlines), against
            // every entry's.
            let kept = inner.tree_deadlines(&v);
            compare_count(report, "values with deadlines", kept, t.deadlines);
        } else {
            report.pairs = 0;
        }
    }
    // And the write buffer over the tree.
    match inner.buffer_pairs_delta(&v) {
        Ok(delta) => report.pairs = (report.pairs as i64 + delta) as u64,
        Err(e) => report.problems.push(format!("write buffer: {e}")),
    }
}
