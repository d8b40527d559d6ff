//! Opening a store: find the newest checkpoint, replay the commits after it,
//! cut off a torn tail, and report anything else that fails validation as
//! corruption. Recovery never writes; what it finds to discard is returned
//! for the caller to delete once the store is open for writing.

use crate::checkpoint_format::unreferenced_below;
use crate::commit_log::LogSegment;
use crate::error::{Error, Result};
use crate::version::Version;
use kivi_log::{
    read_header, scan_segment, CheckpointRecord, CommitRecord, Corruption, OpRef, RecordType,
    ScanEnd, SegmentHeader, SegmentKind, SEGMENT_HEADER_LEN,
};
use kivi_storage::{SegmentId, SegmentReader, Storage};
use kivi_tree::{apply, Pager, TreeConfig};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Replayed operations are applied to the tree in chunks of about this size.
const REPLAY_CHUNK_BYTES: usize = 32 << 20;

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
    /// Commits replayed and the bytes of their records.
    pub replayed: u64,
    pub redo_bytes: u64,
}

struct Seg {
    id: SegmentId,
    name: String,
    reader: Arc<dyn SegmentReader>,
    len: u64,
    header: Option<SegmentHeader>,
}

fn corrupt(file: &str, offset: u64, what: impl Into<String>) -> Error {
    Error::Corrupt(Corruption::new(file, offset, what))
}

pub(crate) fn recover(
    storage: &Arc<dyn Storage>,
    pager: &Pager,
    cfg: &TreeConfig,
    store_id: [u8; 16],
) -> Result<Recovered> {
    let ids = storage.list_segments()?;
    let max_segment_id = ids.last().copied().unwrap_or(0);
    let mut segs = Vec::with_capacity(ids.len());
    let mut garbage = Vec::new();
    for id in ids {
        let name = storage.segment_name(id);
        let reader = storage.open_segment(id)?;
        let len = reader.size()?;
        let header = read_header(reader.as_ref(), id, &name, len, true)?;
        match &header {
            None => garbage.push(id),
            Some(h) if h.store_id != store_id => {
                return Err(corrupt(&name, 0, "segment belongs to another store"));
            }
            Some(_) => {}
        }
        segs.push(Seg {
            id,
            name,
            reader,
            len,
            header,
        });
    }
    let commits: BTreeMap<SegmentId, &Seg> = segs
        .iter()
        .filter(|s| s.header.is_some_and(|h| h.kind == SegmentKind::Commits))
        .map(|s| (s.id, s))
        .collect();

    // The log is the chain of commit segments linked by their headers,
    // followed back from the newest.
    let mut chain: Vec<&Seg> = Vec::new();
    if let Some((_, &head)) = commits.last_key_value() {
        chain.push(head);
        let mut cur = head;
        while let Some(prev) = commits.get(&cur.header.expect("commit segment header").prev_segment)
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
            // whose deletions stopped part-way. The log itself (checked below
            // to begin at its start or at a checkpoint) does not need it.
            garbage.push(s.id);
            continue;
        }
        // A newer segment whose creation failed part-way holds only its header.
        if s.len != SEGMENT_HEADER_LEN {
            return Err(corrupt(&s.name, 0, "commit segment is not part of the log"));
        }
        garbage.push(s.id);
    }

    // Pass 1: validate every record, find the newest checkpoint.
    let ends: Vec<ScanEnd> = (0..chain.len())
        .map(|i| match chain.get(i + 1) {
            Some(next) => ScanEnd::Exact(next.header.expect("header").prev_end),
            None => ScanEnd::Tail,
        })
        .collect();
    let mut log_segments = Vec::with_capacity(chain.len());
    let mut checkpoint: Option<CheckpointRecord> = None;
    let mut first_seq: Option<u64> = None;
    let mut last_seq: Option<u64> = None;
    let mut torn_tail = None;
    let mut log_end = None;
    // Damage found (and skipped) in the log, each with the commits it may
    // have hidden: from the commit after the last one seen before it, to the
    // last one the next record says came before it.
    let mut damage: Vec<Corruption> = Vec::new();
    let mut hidden: Vec<(u64, u64, Corruption)> = Vec::new();
    let mut open_damage: Option<(u64, Corruption)> = None;
    for (seg, &end) in chain.iter().zip(&ends) {
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
                    let from = last_seq.map_or(1, |l| l + 1);
                    open_damage.get_or_insert((from, c.clone()));
                    damage.push(c);
                    if scan.skip_damage()?.is_none() {
                        break;
                    }
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let here = |what: String| Corruption::new(&seg.name, rec.offset, what);
            // The last commit the log held before this record, if it says.
            let (before, ckpt) = match rec.ty {
                RecordType::Commit => match CommitRecord::decode(rec.body) {
                    Ok((seq, _)) => (seq.checked_sub(1), None),
                    Err(e) => {
                        let c = here(format!("commit record: {e}"));
                        open_damage.get_or_insert((last_seq.map_or(1, |l| l + 1), c.clone()));
                        damage.push(c);
                        continue;
                    }
                },
                RecordType::Checkpoint => match CheckpointRecord::decode(rec.body) {
                    Ok(c) => (Some(c.log_seq), Some(c)),
                    Err(e) => {
                        // A lost checkpoint hides no commit: an older one (or
                        // the log from its start) still covers everything.
                        damage.push(here(format!("checkpoint record: {e}")));
                        continue;
                    }
                },
                other => {
                    return Err(here(format!("{other:?} record in the commit log")).into());
                }
            };
            let before = before.unwrap_or(0);
            match open_damage.take() {
                Some((from, c)) if before >= from => hidden.push((from, before, c)),
                Some(_) => {}
                None => {
                    if let Some(last) = last_seq {
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
                    first_seq.get_or_insert(seq);
                    last_seq = Some(seq);
                    max_seq = seq;
                }
                Some(c) => {
                    if checkpoint.is_some_and(|prev| c.seq < prev.seq) {
                        return Err(here("checkpoint older than the one before it".into()).into());
                    }
                    last_seq = Some(c.log_seq);
                    checkpoint = Some(c);
                }
            }
        }
        if let Some(at) = scan.torn_at() {
            torn_tail = Some((seg.name.clone(), at));
        }
        log_end = Some((seg.id, scan.valid_end()));
        log_segments.push(LogSegment {
            id: seg.id,
            max_seq,
            bytes: scan.valid_end(),
        });
    }
    // Damage is bearable only where a checkpoint covers every commit it may
    // have hidden; otherwise acknowledged commits would be missing.
    if let Some((_, c)) = open_damage {
        return Err(c.into());
    }
    // Commits after `replay_from` are replayed, so none of them may be lost.
    let covered = checkpoint.map_or(0, |c| c.replay_from);
    if let Some((_, _, c)) = hidden.into_iter().find(|&(_, to, _)| to > covered) {
        return Err(c.into());
    }

    let base_seq = checkpoint.map_or(0, |c| c.replay_from);
    // The checkpoint counted the pairs of its version, `seq`: commits up
    // to it are replayed for their data (the tree may hold some of them
    // already), and the count restarts from the record's at that point.
    let counted_at = checkpoint.map_or(0, |c| c.seq);
    let begins_at_start = chain
        .first()
        .is_none_or(|s| s.header.expect("header").prev_segment == 0);
    if checkpoint.is_none() && !begins_at_start {
        return Err(corrupt(
            &chain[0].name,
            0,
            "the start of the log is missing and no checkpoint remains",
        ));
    }
    if checkpoint.is_none() && first_seq.is_some_and(|s| s != 1) {
        return Err(corrupt(
            &chain[0].name,
            0,
            "the log's first commits are missing",
        ));
    }
    if let Some(first) = first_seq {
        if last_seq.expect("seen") > base_seq && first > base_seq + 1 {
            return Err(corrupt(
                &chain[0].name,
                0,
                format!("commits {} to {} are missing", base_seq + 1, first - 1),
            ));
        }
    }
    let last_seq = last_seq.unwrap_or(0).max(base_seq);

    // The tree as of the checkpoint.
    let mut root = match checkpoint.and_then(|c| c.root.map(|r| (c, r))) {
        Some((c, page)) => {
            if c.root_level > kivi_tree::MAX_LEVEL {
                return Err(corrupt("checkpoint", 0, "root level over the depth limit"));
            }
            let at = kivi_tree::DiskRef {
                page,
                subtree: c.tree_bytes,
                oldest: c.root_oldest,
            };
            Some(pager.load(at, c.root_level)?)
        }
        None => None,
    };
    let mut pairs = checkpoint.map_or(0, |c| c.pairs) as i64;

    // Pass 2: replay the commits after the checkpoint.
    let mut replayed = 0;
    let mut redo_bytes = 0;
    let mut pending: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    let mut pending_bytes = 0usize;
    let mut recounted = false;
    let flush = |pending: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>,
                 root: &mut Option<Arc<kivi_tree::Node>>,
                 pairs: &mut i64|
     -> Result<()> {
        let ops: Vec<OpRef<'_>> = pending
            .iter()
            .map(|(k, v)| match v {
                Some(v) => OpRef::Put(k, v),
                None => OpRef::Delete(k),
            })
            .collect();
        let applied = apply(pager, cfg, root.as_ref(), &ops)?;
        *root = applied.root;
        *pairs += applied.pairs_delta;
        pending.clear();
        Ok(())
    };
    for ((seg, &end), info) in chain.iter().zip(&ends).zip(&log_segments) {
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
            let Ok((seq, ops)) = CommitRecord::decode(rec.body) else {
                continue; // damage pass 1 found covered by the checkpoint
            };
            if seq <= base_seq {
                continue;
            }
            if seq > counted_at && !recounted {
                // Everything up to the checkpoint's version is in `pending`
                // or the tree: its own count replaces what replay counted.
                if !pending.is_empty() {
                    flush(&mut pending, &mut root, &mut pairs)?;
                    pending_bytes = 0;
                }
                pairs = checkpoint.map_or(0, |c| c.pairs) as i64;
                recounted = true;
            }
            replayed += 1;
            redo_bytes += rec.len;
            for op in ops {
                pending_bytes += op.key().len() + 64;
                match op {
                    OpRef::Put(k, v) => {
                        pending_bytes += v.len();
                        pending.insert(k.to_vec(), Some(v.to_vec()));
                    }
                    OpRef::Delete(k) => {
                        pending.insert(k.to_vec(), None);
                    }
                }
            }
            if pending_bytes > REPLAY_CHUNK_BYTES {
                flush(&mut pending, &mut root, &mut pairs)?;
                pending_bytes = 0;
            }
        }
    }
    if !pending.is_empty() {
        flush(&mut pending, &mut root, &mut pairs)?;
    }
    if !recounted {
        pairs = checkpoint.map_or(0, |c| c.pairs) as i64;
    }

    // Page segments: those past the newest checkpoint's end hold pages no
    // durable checkpoint references.
    let page_end = checkpoint
        .filter(|c| c.page_end.segment != 0)
        .map(|c| (u64::from(c.page_end.segment), u64::from(c.page_end.offset)));
    // And those before the oldest segment the checkpoint's tree uses hold
    // only pages the cleaner copied or that newer pages replaced; a crash
    // (or an old reader) kept them from being deleted.
    let unused_below = checkpoint.map_or(0, |c| u64::from(unreferenced_below(&c)));
    for s in segs
        .iter()
        .filter(|s| s.header.is_some_and(|h| h.kind == SegmentKind::Pages))
    {
        if page_end.is_none_or(|(p, _)| s.id > p) || s.id < unused_below {
            garbage.push(s.id);
        }
    }
    if let Some((p, end)) = page_end {
        let present = segs
            .iter()
            .any(|s| s.id == p && s.header.is_some_and(|h| h.kind == SegmentKind::Pages));
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
        .filter(|s| s.header.is_some_and(|h| h.kind == SegmentKind::Pages))
        .filter(|s| garbage.binary_search(&s.id).is_err())
        .map(|s| (s.id, s.len))
        .collect();

    Ok(Recovered {
        version: Version::of_tree(root, last_seq, pairs as u64, 0),
        checkpoint,
        log_segments,
        log_end,
        page_end,
        page_segments,
        garbage,
        max_segment_id,
        torn_tail,
        damage,
        replayed,
        redo_bytes,
    })
}
