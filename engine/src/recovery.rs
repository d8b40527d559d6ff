//! Opening a store: find the newest checkpoint, replay the commits after it,
//! cut off a torn tail, and report anything else that fails validation as
//! corruption. Recovery never writes; what it finds to discard is returned
//! for the caller to delete once the store is open for writing.

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
    /// Segments holding nothing of value (unfinished creations, pages of a
    /// checkpoint that never committed).
    pub garbage: Vec<SegmentId>,
    pub max_segment_id: SegmentId,
    /// Where a torn tail was cut off, if one was.
    pub torn_tail: Option<(String, u64)>,
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
    for (seg, &end) in chain.iter().zip(&ends) {
        let Some(mut scan) = scan_segment(seg.reader.clone(), seg.id, seg.name.clone(), end)?
        else {
            unreachable!("chain segments have headers")
        };
        let mut max_seq = 0;
        while let Some(rec) = scan.next_record()? {
            match rec.ty {
                RecordType::Commit => {
                    let (seq, _) = CommitRecord::decode(rec.body).map_err(|e| {
                        corrupt(&seg.name, rec.offset, format!("commit record: {e}"))
                    })?;
                    if let Some(last) = last_seq {
                        if seq != last + 1 {
                            return Err(corrupt(
                                &seg.name,
                                rec.offset,
                                format!("commit {seq} follows commit {last}"),
                            ));
                        }
                    }
                    first_seq.get_or_insert(seq);
                    last_seq = Some(seq);
                    max_seq = seq;
                }
                RecordType::Checkpoint => {
                    let c = CheckpointRecord::decode(rec.body).map_err(|e| {
                        corrupt(&seg.name, rec.offset, format!("checkpoint record: {e}"))
                    })?;
                    if last_seq.is_some_and(|last| c.seq > last) {
                        return Err(corrupt(
                            &seg.name,
                            rec.offset,
                            format!(
                                "checkpoint includes commit {} that the log never had",
                                c.seq
                            ),
                        ));
                    }
                    if checkpoint.is_some_and(|prev| c.seq < prev.seq) {
                        return Err(corrupt(
                            &seg.name,
                            rec.offset,
                            "checkpoint older than the one before it",
                        ));
                    }
                    checkpoint = Some(c);
                }
                other => {
                    return Err(corrupt(
                        &seg.name,
                        rec.offset,
                        format!("{other:?} record in the commit log"),
                    ));
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

    let base_seq = checkpoint.map_or(0, |c| c.seq);
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
        while let Some(rec) = scan.next_record()? {
            if rec.ty != RecordType::Commit {
                continue;
            }
            let (seq, ops) = CommitRecord::decode(rec.body).expect("validated in pass 1");
            if seq <= base_seq {
                continue;
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

    // Page segments: those past the newest checkpoint's end hold pages no
    // durable checkpoint references.
    let page_end = checkpoint
        .filter(|c| c.page_end.segment != 0)
        .map(|c| (u64::from(c.page_end.segment), u64::from(c.page_end.offset)));
    for s in segs
        .iter()
        .filter(|s| s.header.is_some_and(|h| h.kind == SegmentKind::Pages))
    {
        if page_end.is_none_or(|(p, _)| s.id > p) {
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

    Ok(Recovered {
        version: Version {
            root,
            seq: last_seq,
            pairs: pairs as u64,
            log_bytes: 0,
        },
        checkpoint,
        log_segments,
        log_end,
        page_end,
        garbage,
        max_segment_id,
        torn_tail,
        replayed,
        redo_bytes,
    })
}
