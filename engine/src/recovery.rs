//! Opening a store: find the newest checkpoint, replay the commits after it,
//! cut off a torn tail, and report anything else that fails validation as
//! corruption. Recovery never writes; what it finds to discard is returned
//! for the caller to delete once the store is open for writing.
//!
//! [`recover`] runs these phases in order, each a function below (the
//! store's identity, `KIVI`, was read by the caller):
//!
//! 1. [`read_headers`]: every segment's header.
//! 2. [`find_log_chain`]: the commit log, as the chain of commit segments.
//! 3. [`LogScan::scan`] (pass 1): every record of the log validated, the
//!    torn tail cut, damage collected, the newest checkpoint found.
//! 4. [`LogScan::nothing_lost`]: the damage and the log's ends checked
//!    against the checkpoint, so no acknowledged commit is missing.
//! 5. [`load_checkpoint_tree`]: the checkpoint's root.
//! 6. [`replay_log`] (pass 2): the commits after the checkpoint, as the
//!    write buffer over its tree.
//! 7. [`sort_page_segments`]: which page segments stay and which are
//!    garbage.

use crate::checkpoint_format::unreferenced_below;
use crate::commit_log::LogSegment;
use crate::error::{Error, Result};
use crate::identity::IDENTITY;
use crate::version::{OpenCount, TreePairs, Version};
use crate::write_buffer::{SpareArrays, Write, WriteBuffer};
use kivi_log::{
    read_header, scan_segment, CheckpointRecord, CommitRecord, Corruption, OpRef, RecordType,
    ScanEnd, ScannedRecord, SegmentHeader, SegmentKind, SEGMENT_HEADER_LEN,
};
use kivi_storage::{SegmentId, SegmentReader, Storage, MAX_SEGMENT_ID};
use kivi_tree::{DiskRef, Node, Pager};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

pub(crate) struct Recovered {
    pub version: Version,
    pub checkpoint: Option<CheckpointRecord>,
    /// Commit segments of the log, oldest first.
    pub log_segments: Vec<LogSegment>,
    /// The newest commit segment and where its valid records end.
    pub log_end: Option<(SegmentId, u64)>,
    /// The page segment the newest checkpoint ended in, and where.
    pub page_end: Option<(SegmentId, u64)>,
    /// Page segments that stay (not garbage), with their lengths.
    pub page_segments: BTreeMap<SegmentId, u64>,
    /// Segments holding nothing of value (unfinished creations, pages of a
    /// checkpoint that never committed).
    pub garbage: Vec<SegmentId>,
    pub max_segment_id: SegmentId,
    /// Where a torn tail was cut off, if one was.
    pub torn_tail: Option<(String, u64)>,
    /// Damage found in the log that the newest checkpoint makes harmless
    /// (it hid only commits the checkpoint includes): reported, not fatal.
    pub damage: Vec<Corruption>,
    /// Commits replayed (into the first version's write buffer).
    pub replayed: u64,
}

struct Seg {
    id: SegmentId,
    name: String,
    reader: Arc<dyn SegmentReader>,
    len: u64,
    header: Option<SegmentHeader>,
}

impl Seg {
    fn is(&self, kind: SegmentKind) -> bool {
        self.header.is_some_and(|h| h.kind == kind)
    }
}

fn corrupt(file: &str, offset: u64, what: impl Into<String>) -> Error {
    Error::Corrupt(Corruption::new(file, offset, what))
}

/// The store's state as the segments in `storage` leave it: the first
/// version (the newest checkpoint's tree with the commits after it
/// replayed), where the logs go on, and what to delete. Writes nothing.
/// `store_id` and `format` are what the identity names. The phases, in
/// order, are the functions below.
pub(crate) fn recover(
    storage: &Arc<dyn Storage>,
    pager: &Pager,
    store_id: [u8; 16],
    format: u32,
) -> Result<Recovered> {
    let ids = storage.list_segments()?;
    // Ids come from file and object names and object-store log entries,
    // which damage or a stray object can make anything: past what page
    // addresses and the id counter hold is corruption, not a segment
    // (found by fuzzing: the counter after it overflowed).
    if let Some(&id) = ids.iter().find(|&&id| id > MAX_SEGMENT_ID) {
        return Err(corrupt(
            &storage.segment_name(id),
            0,
            format!("segment id {id} is over the largest a store has, {MAX_SEGMENT_ID}"),
        ));
    }
    let max_segment_id = ids.last().copied().unwrap_or(0);
    let mut garbage = Vec::new();
    let segs = read_headers(storage, ids, store_id, format, &mut garbage)?;
    let chain = find_log_chain(&segs, &mut garbage)?;
    let ends = scan_ends(&chain);
    let log = LogScan::scan(&chain, &ends)?;
    log.nothing_lost(&chain)?;
    let checkpoint = log.checkpoint;
    let base_seq = checkpoint.map_or(0, |c| c.replay_from);
    let last_seq = log.last_seq.unwrap_or(0).max(base_seq);
    let root = load_checkpoint_tree(pager, checkpoint)?;
    let replay = replay_log(&chain, &ends, &log)?;
    let replayed = replay.replayed;
    let pages = sort_page_segments(storage, &segs, checkpoint, &mut garbage)?;
    Ok(Recovered {
        version: replay.into_version(root, last_seq),
        checkpoint,
        log_segments: log.log_segments,
        log_end: log.log_end,
        page_end: pages.page_end,
        page_segments: pages.page_segments,
        garbage,
        max_segment_id,
        torn_tail: log.torn_tail,
        damage: log.damage,
        replayed,
    })
}

/// Phase 1: every segment's header (ids ascending, as listed).
///
/// A crash while a segment was being created can leave a file too short
/// for a header, or with a header that never fully reached the disk: it
/// holds nothing and goes to `garbage` (`read_header` in tail mode tells
/// that from a damaged header, which is corruption). A segment of another
/// store was never written by this one: corruption, never data.
///
/// The identity has no checksum and every header has one, so when they
/// disagree and no header agrees with the identity, the identity is what
/// is reported damaged: it names another store than every segment does,
/// or a format older than a segment's (a writable open upgrades the
/// identity before it writes anything).
fn read_headers(
    storage: &Arc<dyn Storage>,
    ids: Vec<SegmentId>,
    store_id: [u8; 16],
    format: u32,
    garbage: &mut Vec<SegmentId>,
) -> Result<Vec<Seg>> {
    let identity = || storage.meta_name(IDENTITY);
    let mut segs = Vec::with_capacity(ids.len());
    let mut foreign = None;
    let mut own = false;
    for id in ids {
        let name = storage.segment_name(id);
        let reader = storage.open_segment(id)?;
        let len = reader.size()?;
        let header = read_header(reader.as_ref(), id, &name, len, true)?;
        match &header {
            None => garbage.push(id),
            Some(h) if h.store_id != store_id => {
                foreign.get_or_insert_with(|| name.clone());
            }
            Some(h) if h.format > format => {
                return Err(corrupt(
                    &identity(),
                    0,
                    format!(
                        "names format {format}, but {name} was written in format {}: the \
                         identity is damaged",
                        h.format
                    ),
                ));
            }
            Some(_) => own = true,
        }
        segs.push(Seg {
            id,
            name,
            reader,
            len,
            header,
        });
    }
    match foreign {
        Some(name) if own => Err(corrupt(&name, 0, "segment belongs to another store")),
        Some(name) => Err(corrupt(
            &identity(),
            0,
            format!(
                "names another store than its segments ({name} and every other): the identity \
                 is damaged, or the segments are another store's"
            ),
        )),
        None => Ok(segs),
    }
}

/// Phase 2: the log is the chain of commit segments linked by their
/// headers, followed back from the newest; oldest first.
///
/// Commit segments off the chain are what a crash left of two operations.
/// Older than the chain's start: a cleanup deleted the log's head
/// segments oldest first and stopped part-way; the log (checked in phase 4
/// to begin at its start or at a checkpoint) does not need them, so they
/// are garbage. Newer: a roll to a new segment whose creation failed
/// part-way, which then holds only its header (garbage); anything more
/// means the chain lost a link, which is corruption.
fn find_log_chain<'a>(segs: &'a [Seg], garbage: &mut Vec<SegmentId>) -> Result<Vec<&'a Seg>> {
    let commits: BTreeMap<SegmentId, &Seg> = segs
        .iter()
        .filter(|s| s.is(SegmentKind::Commits))
        .map(|s| (s.id, s))
        .collect();
    let mut chain: Vec<&Seg> = Vec::new();
    if let Some((_, &head)) = commits.last_key_value() {
        chain.push(head);
        let mut cur = head;
        // A link only ever points back: a header naming itself or a later
        // segment (never written by kivi) ends the chain instead of looping.
        while let Some(prev) = commits
            .get(&cur.header.expect("commit segment header").prev_segment)
            .filter(|prev| prev.id < cur.id)
        {
            chain.push(prev);
            cur = prev;
        }
        chain.reverse();
    }
    let in_chain: HashSet<SegmentId> = chain.iter().map(|s| s.id).collect();
    let chain_start = chain.first().map_or(0, |s| s.id);
    for s in commits.values().filter(|s| !in_chain.contains(&s.id)) {
        if s.id < chain_start {
            // Older than the log's first segment: left over by a cleanup
            // whose deletions stopped part-way.
            garbage.push(s.id);
            continue;
        }
        // A newer segment whose creation failed part-way holds only its header.
        if s.len != SEGMENT_HEADER_LEN {
            return Err(corrupt(&s.name, 0, "commit segment is not part of the log"));
        }
        garbage.push(s.id);
    }
    Ok(chain)
}

/// Where each chain segment's valid records end: every segment but the
/// newest exactly where its successor's header says (written after it was
/// synced, so every byte before is durable); the newest at its tail, which
/// may be torn.
fn scan_ends(chain: &[&Seg]) -> Vec<ScanEnd> {
    (0..chain.len())
        .map(|i| match chain.get(i + 1) {
            Some(next) => ScanEnd::Exact(next.header.expect("header").prev_end),
            None => ScanEnd::Tail,
        })
        .collect()
}

/// What pass 1 over the log found.
#[derive(Default)]
struct LogScan {
    /// The chain's segments, with their highest commits and valid ends.
    log_segments: Vec<LogSegment>,
    /// The newest checkpoint record that decoded.
    checkpoint: Option<CheckpointRecord>,
    /// The first and the last commit seen (a checkpoint record's `log_seq`
    /// counts as the last).
    first_seq: Option<u64>,
    last_seq: Option<u64>,
    torn_tail: Option<(String, u64)>,
    log_end: Option<(SegmentId, u64)>,
    /// Damage found (and skipped) in the log.
    damage: Vec<Corruption>,
    /// Each damage with the commits it may have hidden: from the commit
    /// after the last one seen before it, to the last one the next record
    /// says came before it.
    hidden: Vec<(u64, u64, Corruption)>,
    /// Damage no valid record has followed yet, and the first commit it
    /// may have hidden.
    open_damage: Option<(u64, Corruption)>,
}

impl LogScan {
    /// Phase 3, pass 1: validates every record of the chain and finds the
    /// newest checkpoint; applies nothing.
    ///
    /// A crash during a commit's append leaves a torn record at the newest
    /// segment's end (or zeros past it): the scan cuts it off there
    /// (`torn_tail`), unless a valid record after it says those bytes were
    /// already synced, which makes them corruption (`scan_segment`). Other
    /// damage is skipped to the next valid record and kept with the commits
    /// it may hide, for phase 4 to judge; its bytes are never returned as
    /// data. A record that decodes but contradicts the log (a page record
    /// here, a commit out of sequence, a checkpoint older than the one
    /// before it) is corruption.
    fn scan(chain: &[&Seg], ends: &[ScanEnd]) -> Result<LogScan> {
        let mut log = LogScan {
            log_segments: Vec::with_capacity(chain.len()),
            ..LogScan::default()
        };
        for (seg, &end) in chain.iter().zip(ends) {
            let Some(mut scan) = scan_segment(seg.reader.clone(), seg.id, seg.name.clone(), end)?
            else {
                unreachable!("chain segments have headers")
            };
            let mut max_seq = 0;
            loop {
                let rec = match scan.next_record() {
                    Ok(Some(rec)) => rec,
                    Ok(None) => break,
                    Err(kivi_log::Error::Corrupt(c)) => {
                        log.damaged(c);
                        if scan.skip_damage()?.is_none() {
                            break;
                        }
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                if let Some(seq) = log.record(&seg.name, &rec)? {
                    max_seq = seq;
                }
            }
            if let Some(at) = scan.torn_at() {
                log.torn_tail = Some((seg.name.clone(), at));
            }
            log.log_end = Some((seg.id, scan.valid_end()));
            log.log_segments.push(LogSegment {
                id: seg.id,
                max_seq,
                bytes: scan.valid_end(),
            });
        }
        Ok(log)
    }

    /// Damage where a commit might have been: it may hide the commits from
    /// the one after the last seen, up to wherever the next valid record
    /// says the log stood.
    fn damaged(&mut self, c: Corruption) {
        let from = self.last_seq.map_or(1, |l| l + 1);
        self.open_damage.get_or_insert((from, c.clone()));
        self.damage.push(c);
    }

    /// Takes one valid record of segment `file`; returns a commit's
    /// sequence number.
    fn record(&mut self, file: &str, rec: &ScannedRecord<'_>) -> Result<Option<u64>> {
        let here = |what: String| Corruption::new(file, rec.offset, what);
        // The last commit the log held before this record, if it says.
        let (before, ckpt) = match rec.ty {
            RecordType::Commit => match CommitRecord::decode(rec.body) {
                Ok(d) => (d.seq.checked_sub(1), None),
                Err(e) => {
                    self.damaged(here(format!("commit record: {e}")));
                    return Ok(None);
                }
            },
            RecordType::Checkpoint => match CheckpointRecord::decode(rec.body) {
                Ok(c) => (Some(c.log_seq), Some(c)),
                Err(e) => {
                    // A lost checkpoint hides no commit: an older one (or
                    // the log from its start) still covers everything.
                    self.damage.push(here(format!("checkpoint record: {e}")));
                    return Ok(None);
                }
            },
            other => {
                return Err(here(format!("{other:?} record in the commit log")).into());
            }
        };
        let before = before.unwrap_or(0);
        match self.open_damage.take() {
            Some((from, c)) if before >= from => self.hidden.push((from, before, c)),
            Some(_) => {}
            None => {
                if let Some(last) = self.last_seq {
                    if before != last {
                        return Err(here(format!(
                            "the record follows commit {before}, but the log's last was {last}"
                        ))
                        .into());
                    }
                }
            }
        }
        match ckpt {
            None => {
                let seq = before + 1;
                self.first_seq.get_or_insert(seq);
                self.last_seq = Some(seq);
                Ok(Some(seq))
            }
            Some(c) => {
                if self.checkpoint.is_some_and(|prev| c.seq < prev.seq) {
                    return Err(here("checkpoint older than the one before it".into()).into());
                }
                self.last_seq = Some(c.log_seq);
                self.checkpoint = Some(c);
                Ok(None)
            }
        }
    }

    /// Phase 4: refuses to open a store that lost an acknowledged commit.
    ///
    /// Damage is bearable only where the newest checkpoint covers every
    /// commit it may have hidden (up to its `replay_from`; commits after it
    /// are replayed, so none may be lost), and damage no valid record
    /// followed never is: the commits it hid are unknown. A crash never
    /// loses the log's start on its own: a cleanup deletes commit segments
    /// only once a durable checkpoint covers them, so a log that does not
    /// begin at the store's first segment and commit, or that skips
    /// commits after the checkpoint, is corruption.
    fn nothing_lost(&self, chain: &[&Seg]) -> Result<()> {
        if let Some((_, c)) = &self.open_damage {
            return Err(c.clone().into());
        }
        let covered = self.checkpoint.map_or(0, |c| c.replay_from);
        if let Some((_, _, c)) = self.hidden.iter().find(|&&(_, to, _)| to > covered) {
            return Err(c.clone().into());
        }
        let base_seq = covered;
        let begins_at_start = chain
            .first()
            .is_none_or(|s| s.header.expect("header").prev_segment == 0);
        if self.checkpoint.is_none() && !begins_at_start {
            return Err(corrupt(
                &chain[0].name,
                0,
                "the start of the log is missing and no checkpoint remains",
            ));
        }
        if self.checkpoint.is_none() && self.first_seq.is_some_and(|s| s != 1) {
            return Err(corrupt(
                &chain[0].name,
                0,
                "the log's first commits are missing",
            ));
        }
        if let Some(first) = self.first_seq {
            if self.last_seq.expect("seen") > base_seq && first > base_seq + 1 {
                return Err(corrupt(
                    &chain[0].name,
                    0,
                    format!("commits {} to {} are missing", base_seq + 1, first - 1),
                ));
            }
        }
        Ok(())
    }
}

/// Phase 5: the tree as of the newest checkpoint (none: an empty tree).
///
/// A checkpoint record is committed only after all its pages were synced,
/// so a crash cannot leave it naming pages that never reached the disk;
/// the root is read and validated like every page, and a root that fails
/// (or a level past the depth limit) is corruption.
fn load_checkpoint_tree(
    pager: &Pager,
    checkpoint: Option<CheckpointRecord>,
) -> Result<Option<Arc<Node>>> {
    let Some((c, page)) = checkpoint.and_then(|c| c.root.map(|r| (c, r))) else {
        return Ok(None);
    };
    if c.root_level > kivi_tree::MAX_LEVEL {
        return Err(corrupt("checkpoint", 0, "root level over the depth limit"));
    }
    let at = DiskRef {
        page,
        subtree: c.tree_bytes,
        oldest: c.root_oldest,
        // The checkpoint does not record it.
        earliest: kivi_log::ANY_DEADLINE,
    };
    Ok(Some(pager.load(at, c.root_level)?))
}

/// What pass 2 rebuilt: the commits after the checkpoint's `replay_from`
/// as a write buffer over its tree, and what it counted.
struct Replay {
    checkpoint: Option<CheckpointRecord>,
    spares: Arc<SpareArrays>,
    buffer: WriteBuffer,
    /// The buffer as it stood after the last commit up to the checkpoint's
    /// `seq` (see `TreePairs::AfterOpen`); `None` until the replay passes it.
    to_checkpoint: Option<WriteBuffer>,
    /// Commits replayed and the bytes of their records.
    replayed: u64,
    redo_bytes: u64,
    /// The last commit replayed that cleared the store: the tree the open
    /// started from is then empty, and the buffer holds what followed.
    cleared_at: Option<u64>,
}

/// Phase 6, pass 2: replays the commits after the checkpoint's
/// `replay_from` into a write buffer over its tree.
///
/// Into the buffer, not the tree: applying them to the tree read a leaf
/// for nearly every write replayed (the tree of a store larger than
/// memory is mostly on disk), so the open took time in proportion to the
/// redo, 0.5-1 s at 1M pairs after random updates. Laid over the tree as
/// the buffer they were in before the crash, they cost a copy of their
/// bytes into sorted runs; the first merge of the buffer takes them into
/// the tree in the background, as it would have without the crash.
///
/// Pass 1 validated every record here, so what this pass meets is what
/// phase 4 accepted: damage it skips hides only commits the checkpoint
/// holds, and the scan ends where pass 1's did (the same torn tail cut).
/// The tree may already hold some of the commits replayed: a sliced
/// checkpoint writes parts of the tree from versions up to its `seq`, past
/// `replay_from`. A put or delete the tree holds changes nothing, so
/// laying them over it again is safe; the tree's pair count is then
/// nobody's, which `TreePairs::AfterOpen` settles.
fn replay_log(chain: &[&Seg], ends: &[ScanEnd], log: &LogScan) -> Result<Replay> {
    let checkpoint = log.checkpoint;
    let base_seq = checkpoint.map_or(0, |c| c.replay_from);
    let mut replay = Replay {
        checkpoint,
        spares: SpareArrays::new(REPLAY_SPARE_BYTES),
        buffer: WriteBuffer::default(),
        to_checkpoint: None,
        replayed: 0,
        redo_bytes: 0,
        cleared_at: None,
    };
    for ((seg, &end), info) in chain.iter().zip(ends).zip(&log.log_segments) {
        if info.max_seq <= base_seq {
            continue;
        }
        let mut scan =
            scan_segment(seg.reader.clone(), seg.id, seg.name.clone(), end)?.expect("header");
        loop {
            let rec = match scan.next_record() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                // Pass 1 found this damage hides only commits the checkpoint has.
                Err(kivi_log::Error::Corrupt(_)) => match scan.skip_damage()? {
                    Some(_) => continue,
                    None => break,
                },
                Err(e) => return Err(e.into()),
            };
            if rec.ty != RecordType::Commit {
                continue;
            }
            let Ok(decoded) = CommitRecord::decode(rec.body) else {
                continue; // damage pass 1 found covered by the checkpoint
            };
            let seq = decoded.seq;
            if seq <= base_seq {
                continue;
            }
            if decoded.clears {
                replay.clear(seq);
            }
            replay.commit(seq, &writes_of(&decoded.ops), rec.len);
        }
    }
    Ok(replay)
}

/// A commit record's operations as the write buffer takes them (recovery's
/// replay and a follower's both lay commits over the buffer).
pub(crate) fn writes_of<'a>(ops: &[OpRef<'a>]) -> Vec<Write<'a>> {
    ops.iter()
        .map(|op| match *op {
            OpRef::Put(k, v, deadline) => (k, Some((v, deadline))),
            OpRef::Delete(k) => (k, None),
        })
        .collect()
}

/// Spare run arrays kept while replaying (see `SpareArrays`).
const REPLAY_SPARE_BYTES: u64 = 16 << 20;

impl Replay {
    /// Takes the operations of commit `seq` (after `replay_from`; sorted
    /// by key, one per key, as commit records are), whose record is `len`
    /// bytes.
    fn commit(&mut self, seq: u64, ops: &[Write], len: u64) {
        let counted_at = self.checkpoint.map_or(0, |c| c.seq);
        if seq > counted_at && self.to_checkpoint.is_none() {
            self.to_checkpoint = Some(self.buffer.clone());
        }
        self.replayed += 1;
        self.redo_bytes += len;
        self.buffer = self.buffer.with_group(ops, &self.spares);
    }

    /// Commit `seq` clears the store: whatever the checkpoint's tree and
    /// the commits before hold is gone; what follows goes over nothing.
    fn clear(&mut self, seq: u64) {
        self.cleared_at = Some(seq);
        self.buffer = WriteBuffer::default();
        self.to_checkpoint = None;
    }

    /// The first version: the checkpoint's tree (`root`, which holds every
    /// commit up to `replay_from`) under the replayed commits, the last
    /// of which is `last_seq`. After a clear: no tree, and the commits from
    /// the clear on in the buffer (the empty tree is said to hold those
    /// before it, as the commit path says, so a checkpoint of it replays
    /// the clear again).
    fn into_version(self, root: Option<Arc<Node>>, last_seq: u64) -> Version {
        if let Some(cleared) = self.cleared_at {
            let tree_seq = cleared - 1;
            return Version {
                buffer: Arc::new(self.buffer),
                visible_seq: last_seq,
                visible_log_bytes: self.redo_bytes,
                ..Version::of_tree(None, tree_seq, 0, 0)
            };
        }
        let checkpoint_pairs = self.checkpoint.map_or(0, |c| c.pairs);
        let to_checkpoint = self.to_checkpoint.unwrap_or_else(|| self.buffer.clone());
        if self.buffer.is_empty() {
            debug_assert!(to_checkpoint.is_empty());
            let mut v = Version::of_tree(root, last_seq, checkpoint_pairs, self.redo_bytes);
            v.log_bytes = self.redo_bytes;
            return v;
        }
        let pairs = match to_checkpoint.is_empty() {
            true => TreePairs::Known(checkpoint_pairs),
            false => {
                TreePairs::AfterOpen(Arc::new(OpenCount::new(checkpoint_pairs, to_checkpoint)))
            }
        };
        Version {
            pairs,
            buffer: Arc::new(self.buffer),
            visible_seq: last_seq,
            visible_log_bytes: self.redo_bytes,
            ..Version::of_tree(root, self.checkpoint.map_or(0, |c| c.replay_from), 0, 0)
        }
    }
}

/// The page segments that stay, as phase 7 found them.
struct PageSegments {
    /// The page segment the newest checkpoint ended in, and where.
    page_end: Option<(SegmentId, u64)>,
    /// Page segments that are not garbage, with their lengths.
    page_segments: BTreeMap<SegmentId, u64>,
}

/// Phase 7: which page segments stay (with their lengths), and where the
/// newest checkpoint's pages end; the rest join `garbage`, which comes
/// back sorted, each segment once.
///
/// A crash during a checkpoint leaves pages past the newest durable
/// checkpoint's page end that nothing references: garbage. A crash (or an
/// old reader) during the cleaner's deletions leaves segments before the
/// oldest one the checkpoint's tree uses, which hold only pages the cleaner
/// copied or that newer pages replaced: garbage too. The segment the
/// checkpoint's pages end in must be there; it can be missing when a
/// damaged newest checkpoint record made recovery fall back to an older
/// one whose pages the cleaner deleted, which is corruption.
fn sort_page_segments(
    storage: &Arc<dyn Storage>,
    segs: &[Seg],
    checkpoint: Option<CheckpointRecord>,
    garbage: &mut Vec<SegmentId>,
) -> Result<PageSegments> {
    let page_end = checkpoint
        .filter(|c| c.page_end.segment != 0)
        .map(|c| (u64::from(c.page_end.segment), u64::from(c.page_end.offset)));
    let unused_below = checkpoint.map_or(0, |c| u64::from(unreferenced_below(&c)));
    for s in segs.iter().filter(|s| s.is(SegmentKind::Pages)) {
        if page_end.is_none_or(|(p, _)| s.id > p) || s.id < unused_below {
            garbage.push(s.id);
        }
    }
    if let Some((p, end)) = page_end {
        let present = segs.iter().any(|s| s.id == p && s.is(SegmentKind::Pages));
        if !present {
            return Err(corrupt(
                &storage.segment_name(p),
                end,
                "page segment named by the checkpoint is missing",
            ));
        }
    }
    garbage.sort_unstable();
    garbage.dedup();
    let page_segments = segs
        .iter()
        .filter(|s| s.is(SegmentKind::Pages))
        .filter(|s| garbage.binary_search(&s.id).is_err())
        .map(|s| (s.id, s.len))
        .collect();
    Ok(PageSegments {
        page_end,
        page_segments,
    })
}
