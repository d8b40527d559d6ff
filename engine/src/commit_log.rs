//! The commit log: the sequence of commit segments holding commit and
//! checkpoint records.
//!
//! Each group commit is one append of its records followed by one
//! fdatasync. Nothing is appended before the previous append is synced, so at
//! most one append is ever in doubt, which is what lets recovery tell a torn
//! tail from corruption (see kivi-log's scan). A segment is rolled over only
//! after it is synced, and the new segment's header records where the old one
//! validly ends, so a failed append can be cut off without truncating a file.

use crate::latency::{timed, SyncTimes};
use crate::pacing::Pacer;
use crate::segment_chain::SegmentChain;
use kivi_log::{Error, RecordType, SegmentAppender, SegmentIds, SegmentKind};
use kivi_storage::{PendingSync, SegmentId, Storage};
use std::collections::VecDeque;
use std::sync::Arc;

/// What the log knows about one retained commit segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogSegment {
    pub id: SegmentId,
    /// Highest commit sequence number in it (0 if it holds no commit).
    pub max_seq: u64,
    pub bytes: u64,
}

/// A checkpoint record goes into a fresh segment when the current one holds
/// more than this many bytes of commits it covers: the segment holding the
/// newest checkpoint record is kept, so this lets the covered commits go.
const ROLL_FOR_CHECKPOINT: u64 = 1 << 20;

/// A checkpoint starts a new commit segment only when the current one holds
/// at least this much (see `CommitLog::roll_before_next`).
const ROLL_BEFORE_CHECKPOINT_MIN: u64 = 64 << 10;

/// Where a group's records went, and their sync if it is still in flight.
pub(crate) struct Appended {
    pub segment: SegmentId,
    /// Where the records begin in it.
    pub start: u64,
    pub sync: Option<PendingSync>,
}

/// Emits one record: its type, and a function writing its body.
pub(crate) type Emit<'a> = dyn FnMut(RecordType, &mut dyn FnMut(&mut Vec<u8>)) + 'a;

pub(crate) struct CommitLog {
    chain: SegmentChain,
    target: u64,
    /// Told of every group's sync, so page writes make way for commits.
    pacer: Arc<Pacer>,
    /// Retained segments, oldest first; the last one is `current` if any.
    segments: VecDeque<LogSegment>,
    /// Total bytes of commit records appended by this process.
    pub appended: u64,
    /// Start a new segment before the next append (see `roll_before_next`).
    roll_requested: bool,
    /// Where each sync's time is recorded (`commit_log`).
    syncs: Arc<SyncTimes>,
}

impl CommitLog {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        storage: Arc<dyn Storage>,
        ids: Arc<SegmentIds>,
        store_id: [u8; 16],
        target: u64,
        prev: Option<(SegmentId, u64)>,
        segments: Vec<LogSegment>,
        pacer: Arc<Pacer>,
        syncs: Arc<SyncTimes>,
    ) -> Self {
        CommitLog {
            chain: SegmentChain::new(storage, ids, store_id, SegmentKind::Commits, None, prev),
            target,
            pacer,
            segments: segments.into(),
            appended: 0,
            roll_requested: false,
            syncs,
        }
    }

    /// Makes the next append start a new segment, if the current one holds
    /// commits. A checkpoint asks for this as it takes the version it will
    /// write: every commit of that version is then in older segments, which
    /// the checkpoint retires whole once it is durable. Otherwise, under
    /// steady writes, the segment holding the checkpoint record would also
    /// hold every commit since the previous checkpoint and could go only
    /// when full (`segment_bytes`).
    pub fn roll_before_next(&mut self) {
        if self
            .segments
            .back()
            .is_some_and(|s| s.max_seq > 0 && s.bytes >= ROLL_BEFORE_CHECKPOINT_MIN)
        {
            self.roll_requested = true;
        }
    }

    /// Whether the next append starts a new segment (for a group without
    /// checkpoint records): none is open, the current one is broken or
    /// full, or a checkpoint asked for a new one.
    pub fn would_roll(&self) -> bool {
        match self.chain.current() {
            None => true,
            Some(cur) => self.roll_requested || cur.is_broken() || cur.len() >= self.target,
        }
    }

    /// Cuts the current segment off at `start`, where the records of a
    /// group whose sync failed began (groups after it were in flight
    /// behind it): the next segment's header declares that it ends there,
    /// so none of them is ever read back. `seq_before`: the last commit
    /// before them.
    pub fn cut_off(&mut self, segment: SegmentId, start: u64, seq_before: u64) {
        let Some(cur) = self.chain.current_mut() else {
            return;
        };
        // Groups are in flight only within one segment (a new one is
        // started only when nothing is in flight).
        assert_eq!(cur.id(), segment, "groups in flight span one segment");
        cur.abandon_from(start);
        if let Some(seg) = self.segments.back_mut() {
            seg.bytes = start;
            // At most: a segment kept longer than needed, never too short.
            seg.max_seq = seg.max_seq.min(seq_before);
        }
    }

    /// Makes sure a usable segment with room is open: after a failure or
    /// when the current one is full, closes it and starts the next.
    fn ensure_segment(
        &mut self,
        checkpoint: Option<(u64, bool)>,
    ) -> Result<&mut SegmentAppender, Error> {
        let covered = |cur: &SegmentAppender, seg: Option<&LogSegment>| {
            checkpoint.is_some_and(|(s, fresh)| {
                let threshold = if fresh { 0 } else { ROLL_FOR_CHECKPOINT };
                seg.is_some_and(|g| g.max_seq <= s) && cur.len() > threshold
            })
        };
        let roll = match self.chain.current() {
            None => true,
            Some(cur) => {
                self.roll_requested
                    || cur.is_broken()
                    || cur.len() >= self.target
                    || covered(cur, self.segments.back())
            }
        };
        if roll {
            self.roll_requested = false;
            // Unsynced, only what an earlier sync made durable is known good
            // (the same as the valid end, unless writes skip fsync); a segment
            // broken by a failed append ends where that append began.
            self.chain.close(|cur, sync_failed| {
                if sync_failed {
                    cur.synced_len()
                } else {
                    cur.valid_end()
                }
            })?;
            let app = self.chain.open_next()?;
            self.segments.push_back(LogSegment {
                id: app.id(),
                max_seq: 0,
                bytes: app.len(),
            });
        }
        Ok(self.chain.current_mut().expect("segment just ensured"))
    }

    /// Appends one group's records in a single write, then makes them durable
    /// if `sync`. On failure the records are cut off (never read back) and
    /// the next append starts a new segment.
    /// `checkpoint` is the sequence number a checkpoint record in the group
    /// covers, if it holds one, and whether it wants a fresh segment (else it
    /// gets one when the current segment holds over 1 MiB of commits it
    /// covers). `records` gets how much of the segment
    /// is durable so far, which every record states (see kivi-log's scan).
    /// `in_flight`: the sync is only started (see `SegmentWriter::start_sync`),
    /// and returned for the caller to wait on.
    pub fn append_group(
        &mut self,
        seq: Option<u64>,
        checkpoint: Option<(u64, bool)>,
        records: &mut dyn FnMut(&mut Emit<'_>, u64),
        sync: bool,
        in_flight: bool,
    ) -> Result<Appended, Error> {
        if sync {
            self.pacer.commit_syncing();
        }
        let syncs = self.syncs.clone();
        let app = self.ensure_segment(checkpoint)?;
        let start = app.len();
        let segment = app.id();
        let synced_through = app.synced_len();
        records(
            &mut |ty, body| {
                app.buffer_record(ty, |out| body(out));
            },
            synced_through,
        );
        let mut pending = None;
        let result = app.flush().and_then(|()| match (sync, in_flight) {
            (true, false) => timed(&syncs.commit_log, || app.sync()),
            (true, true) => app.start_sync().map(|p| pending = Some(p)),
            (false, _) => Ok(()),
        });
        if let Err(e) = result {
            app.abandon_from(start);
            return Err(e);
        }
        let len = app.len();
        self.appended += len - start;
        let seg = self
            .segments
            .back_mut()
            .expect("current segment is tracked");
        seg.bytes = len;
        if let Some(seq) = seq {
            seg.max_seq = seq;
        }
        Ok(Appended {
            segment,
            start,
            sync: pending,
        })
    }

    /// The segment being appended to and the bytes written to it (its file
    /// may be longer: it is grown ahead of the data).
    pub fn current(&self) -> Option<(SegmentId, u64)> {
        self.chain.current().map(|c| (c.id(), c.len()))
    }

    /// Bytes of the commit segments retained.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    /// Commit segments retained.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Syncs the open segment (used before a clean close in no-fsync mode).
    pub fn sync(&mut self) -> Result<(), Error> {
        match self.chain.current_mut() {
            Some(cur) if !cur.is_broken() => timed(&self.syncs.commit_log, || cur.sync()),
            _ => Ok(()),
        }
    }

    /// Forgets (and returns, for deletion) the oldest segments that hold only
    /// commits up to `seq` and come before the segment holding the newest
    /// checkpoint record, which is always the current one.
    pub fn release_through(&mut self, seq: u64) -> Vec<SegmentId> {
        let keep_from = self.chain.current().map(|c| c.id());
        let mut out = Vec::new();
        while let Some(first) = self.segments.front() {
            if Some(first.id) == keep_from || first.max_seq > seq {
                break;
            }
            out.push(first.id);
            self.segments.pop_front();
        }
        out
    }
}
