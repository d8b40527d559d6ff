//! Checkpoints: the checkpointer's state and the taking of one.
//!
//! A checkpoint writes the tree nodes that changed since the last one to the
//! page log, syncs them, then commits a checkpoint record naming the new root
//! through the ordinary commit pipeline. Once that record is durable, the
//! commit segments holding only older commits are deleted and the written
//! nodes are handed to the page cache. It runs beside writers (it works on a
//! published, immutable version) and never blocks readers. When to take one
//! is the background thread's call (`background`); what to clean, the
//! cleaner's (`cleaner::plan`).

use crate::backpressure::Backpressure;
use crate::cleaner::plan::{choose_slice, slice_floor, Plan, SliceCandidate};
use crate::cleaner::Cleaner;
use crate::commit::CommitPath;
use crate::counters::CheckpointDone;
use crate::error::{Error, Result};
use crate::page_log::PageLog;
use crate::pipeline::{Reply, Request};
use crate::store::Store;
use crate::version::{Epoch, Version};
use kivi_log::CheckpointRecord;
use kivi_storage::SegmentId;
use kivi_tree::{root_children, write_tree, DiskRef, Pager, TreeWrite, WriteStats};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// The checkpointer: takes checkpoints, one at a time, and owns what they
/// leave behind (the page log, the cleaner's segments retiring).
pub(crate) struct Checkpointer {
    /// `None` when read-only. Held for a whole checkpoint.
    state: Mutex<Option<State>>,
    /// The page segment being written and its length (see `PageLog`).
    page_appending: Arc<Mutex<Option<(SegmentId, u64)>>>,
}

/// What the checkpointer keeps between checkpoints.
struct State {
    pages: PageLog,
    /// Obsolete commit segments whose deletion failed, oldest first; retried
    /// before newer ones, so that what remains is always the log's oldest.
    undeleted: Vec<u64>,
    generation: u64,
    /// Sequence number of the newest durable checkpoint, if any this session.
    last_seq: Option<u64>,
    /// What the cleaner decides from; cleaning is part of a checkpoint.
    cleaner: Cleaner,
    /// The newest durable root's children (when it is an internal node
    /// written this session), each with the commit its content is as of:
    /// what a sliced checkpoint may keep.
    root_slices: Option<Vec<RootSlice>>,
    /// The newest durable checkpoint's `replay_from`: the log holds every
    /// commit after it.
    replay_from: u64,
    /// (seq, `Version::log_bytes`) of the versions durable checkpoints of
    /// this session took, from the one `replay_from` names on.
    log_at: Vec<(u64, u64)>,
}

/// A child of the durable root (see `State::root_slices`).
#[derive(Debug, Clone)]
struct RootSlice {
    /// The separator its key range starts at (`None` for the first); the
    /// next child's is where it ends.
    low: Option<Vec<u8>>,
    page: DiskRef,
    /// Every commit up to this one is in its pages.
    seq: u64,
    /// The first page segment of the checkpoint that wrote it.
    since: u32,
}

impl State {
    fn new(pages: PageLog, durable_oldest: u32, replay_from: u64) -> Self {
        State {
            pages,
            undeleted: Vec::new(),
            generation: 0,
            last_seq: None,
            cleaner: Cleaner::new(durable_oldest),
            root_slices: None,
            replay_from,
            log_at: Vec::new(),
        }
    }

    /// For a sliced checkpoint of the tree under `root` (`tree_bytes` on
    /// disk): per root child, the previous page to keep instead of writing
    /// the changed child (`None`: written), choosing to write the children
    /// whose pages are oldest until about a `SLICES`th of the tree. Empty
    /// (write everything) without a previous root to take pages from.
    fn plan_slice(
        &self,
        pager: &Pager,
        root: &kivi_tree::Node,
        tree_bytes: u64,
    ) -> Vec<Option<DiskRef>> {
        let Some(prev) = &self.root_slices else {
            return Vec::new();
        };
        let now = root_children(pager, root);
        // Where child `i` of a list of range starts ends (`None`: at the end).
        let prev_high = |j: usize| prev.get(j + 1).map(|c| &c.low);
        let now_high = |i: usize| now.get(i + 1).map(|c| &c.0);
        let by_low: HashMap<&Option<Vec<u8>>, usize> =
            prev.iter().enumerate().map(|(j, p)| (&p.low, j)).collect();
        // Changed children whose key range the previous root had too.
        let mut candidates = Vec::new();
        for (i, (low, page)) in now.iter().enumerate() {
            if page.is_some() {
                continue;
            }
            let Some(&j) = by_low.get(low) else {
                continue;
            };
            if prev_high(j) != now_high(i) {
                continue;
            }
            candidates.push(SliceCandidate {
                seq: prev[j].seq,
                child: i,
                page: prev[j].page,
                subtree: prev[j].page.subtree,
            });
        }
        choose_slice(candidates, now.len(), tree_bytes)
    }
}

/// Space figures the cleaner plans with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Space {
    /// The durable tree.
    pub tree: u64,
    /// The commit log's files.
    pub log: u64,
}

/// What a checkpoint is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointKind {
    /// Retire the commit log; clean as the space target needs.
    Regular,
    /// As `Regular`, but write about a `SLICES`th of the tree's changed
    /// root children (those whose pages are oldest), the previous pages
    /// standing in for the others. Under random updates nearly every leaf
    /// changes between two checkpoints; a checkpoint that rewrites them all
    /// holds two trees on disk until it is durable (the files passed twice
    /// the live bytes while one was in flight). A slice holds a quarter.
    Slice,
    /// Copy every live page into a new segment and delete everything else.
    Compact,
}

/// Live bytes as `stats` counts them (the durable tree plus the commit
/// log since) and the bytes of the commit log.
pub(crate) fn space_now(store: &Store, commit: &CommitPath) -> Space {
    let tree = store.counters().checkpointed_tree_bytes();
    let log = commit.log_bytes();
    Space { tree, log }
}

impl Checkpointer {
    /// `pages`: the page log, `None` when read-only; `durable_oldest` and
    /// `replay_from`: of the newest durable checkpoint (see `State`).
    pub fn new(pages: Option<PageLog>, durable_oldest: u32, replay_from: u64) -> Checkpointer {
        let page_appending = pages.as_ref().map(PageLog::appending).unwrap_or_default();
        Checkpointer {
            state: Mutex::new(pages.map(|p| State::new(p, durable_oldest, replay_from))),
            page_appending,
        }
    }

    /// The page segment being written and the bytes appended to it, without
    /// waiting for a checkpoint in progress.
    pub fn page_appending(&self) -> Option<(SegmentId, u64)> {
        *self.page_appending.lock()
    }

    /// Holds off checkpoints (and so keeps the page log still) while the
    /// returned guard lives.
    pub fn pause(&self) -> impl Sized + '_ {
        self.state.lock()
    }

    /// Whether the files are over the space target and a checkpoint could
    /// clean some of it away.
    pub fn cleaning_wanted(&self, store: &Store, commit: &CommitPath) -> bool {
        let space = space_now(store, commit);
        let guard = self.state.lock();
        let Some(c) = guard.as_ref() else {
            return false;
        };
        // Only asked when idle: whatever the next checkpoint writes beyond
        // its copies is small.
        c.plan_for(store, space, false).floor > c.cleaner.durable_oldest()
    }

    /// Deletes the page segments no checkpoint references once no version
    /// that could read them is left. Oldest first is not needed here: page
    /// segments are found by listing, not by a chain.
    pub fn delete_retired(&self, store: &Store) {
        let mut guard = self.state.lock();
        let Some(c) = guard.as_mut() else {
            return;
        };
        c.cleaner.delete_retired(store, &mut c.pages);
    }

    /// Takes a checkpoint of the current version. `Ok(false)` when there was
    /// nothing to do: nothing new to write and nothing to clean.
    ///
    /// The phases, in order: take the version
    /// (`CommitPath::version_to_checkpoint`), plan what to clean
    /// (`plan_cleaning`) and what to write (`plan_writing`), write and sync
    /// the pages, then commit the record through the pipeline
    /// (`write_and_commit`), and once it is durable retire what it made
    /// obsolete (`checkpoint_durable`).
    pub fn run(
        &self,
        store: &Store,
        commit: &CommitPath,
        bp: &Backpressure,
        kind: CheckpointKind,
    ) -> Result<bool> {
        let space = space_now(store, commit);
        let mut guard = self.state.lock();
        let Some(c) = guard.as_mut() else {
            return Err(Error::ReadOnly);
        };
        // After a clear, a slice would keep naming pages of the tree from
        // before it for the key ranges it does not write (safe: its
        // `replay_from` then lies before the clear, which recovery replays
        // and which empties the tree), so the old pages would stay: the
        // whole tree goes instead, and they can be cleaned.
        let kind = if kind == CheckpointKind::Slice && store.take_cleared() {
            CheckpointKind::Regular
        } else {
            kind
        };
        // A checkpoint asked for (or an idle one) covers every commit:
        // the write buffer goes into the tree first. Slices, taken while
        // writes go on, leave it to fill.
        let v = commit.version_to_checkpoint(store, kind != CheckpointKind::Slice)?;
        let counters = store.counters();
        let covered = c.last_seq.unwrap_or(counters.checkpointed_seq());
        let nothing_new = v.seq == covered && v.log_bytes == counters.checkpointed_log_bytes();
        let floor = c.plan_cleaning(store, kind, space, nothing_new)?;
        if kind != CheckpointKind::Compact && nothing_new && floor <= c.cleaner.durable_oldest() {
            return Ok(false);
        }
        c.pages.set_tree_bytes(space.tree);
        let writing = c.plan_writing(store.pager(), &v, kind, space.tree, floor)?;
        c.generation += 1;
        let generation = c.generation;
        let mut stats = WriteStats::default();
        let done = match write_and_commit(
            store, commit, bp, c, &v, kind, generation, &writing, &mut stats,
        ) {
            Ok(done) => done,
            Err(e) => {
                // Marks it left on nodes later checkpoints keep must never
                // be taken for durable places.
                store.pager().set_failed_generation(generation);
                c.pages.checkpoint_failed();
                counters.checkpoint_failed();
                store.note_error(&format!("checkpoint ({kind:?})"), &e);
                return Err(e);
            }
        };
        checkpoint_durable(store, c, &v, kind, generation, writing.floor, done, &stats);
        drop(v);
        drop(guard);
        self.delete_retired(store);
        Ok(true)
    }
}

impl State {
    /// The cleaner's plan for the next checkpoint, given the store's
    /// `space` (see `cleaner::plan::plan_floor`).
    fn plan_for(&self, store: &Store, space: Space, new_pages: bool) -> Plan {
        self.cleaner.plan(
            &self.pages,
            space.tree,
            space.log,
            store.opts().space_amplification_max,
            new_pages,
        )
    }

    /// The cleaner's floor for this checkpoint (see `cleaner::plan`),
    /// closing or starting the page segment being written when the plan
    /// (or compaction) asks for it.
    fn plan_cleaning(
        &mut self,
        store: &Store,
        kind: CheckpointKind,
        space: Space,
        nothing_new: bool,
    ) -> Result<u32> {
        Ok(match kind {
            CheckpointKind::Regular | CheckpointKind::Slice => {
                let plan = self.plan_for(store, space, !nothing_new);
                if plan.close_current {
                    self.pages.finish_segment()?;
                }
                plan.floor
            }
            CheckpointKind::Compact => {
                // Everything written so far is to be copied into a segment
                // of its own, so every older one can go.
                self.pages.start_segment()?;
                self.cleaner.compact_floor(&self.pages)
            }
        })
    }

    /// Deletes the commit segments a durable checkpoint made obsolete (and
    /// any whose deletion failed before), oldest first, stopping at a
    /// failure: deleting a newer segment while an older one stays would
    /// leave a gap in the log's chain.
    fn delete_obsolete_commit_segments(&mut self, store: &Store, obsolete: Vec<SegmentId>) {
        self.undeleted.extend(obsolete);
        while let Some(&id) = self.undeleted.first() {
            if let Err(e) = store.storage().delete_segment(id) {
                store.note_error(
                    &format!(
                        "deleting obsolete commit segment {}",
                        store.storage().segment_name(id)
                    ),
                    &e,
                );
                break;
            }
            self.undeleted.remove(0);
        }
    }
}

/// Writes the tree's changed pages (those `writing` does not keep) and
/// syncs them, then commits the checkpoint record through the commit
/// pipeline and waits until it is durable.
#[allow(clippy::too_many_arguments)]
fn write_and_commit(
    store: &Store,
    commit: &CommitPath,
    bp: &Backpressure,
    c: &mut State,
    v: &Version,
    kind: CheckpointKind,
    generation: u64,
    writing: &Writing,
    stats: &mut WriteStats,
) -> Result<Committed> {
    let written = match &v.root {
        Some(r) => write_tree(
            store.pager(),
            r,
            generation,
            writing.floor,
            &writing.keep,
            &mut c.pages,
            stats,
        )?,
        None => TreeWrite::default(),
    };
    c.pages.sync()?;
    let root = written.root;
    let slices = c.root_slices_after(store.pager(), v, writing, &written);
    let replay_from = slices
        .as_ref()
        .and_then(|s| s.iter().map(|s| s.seq).min())
        .unwrap_or(v.seq);
    let rec = CheckpointRecord {
        seq: v.seq,
        replay_from,
        // Set by the leader when it appends the record.
        log_seq: v.seq,
        root: root.map(|d| d.page),
        root_level: v.root.as_ref().map_or(0, |r| r.level()),
        page_end: c.pages.end(),
        pairs: store.tree_pairs(v)?,
        tree_bytes: root.map_or(0, |d| d.subtree),
        root_oldest: root.map_or(0, |d| d.oldest),
    };
    match commit.submit(
        store,
        bp,
        Request::Checkpoint {
            record: rec,
            generation,
            moved: Box::new(written),
            fresh_segment: kind == CheckpointKind::Compact,
        },
    )? {
        Reply::Checkpoint {
            obsolete,
            old_epoch,
        } => Ok(Committed {
            rec,
            obsolete,
            old_epoch,
            slices,
        }),
        Reply::Write(_) => unreachable!("checkpoint answered as a write"),
    }
}

/// After the checkpoint's record is durable: its pages are the durable
/// ones, the commit segments before its `replay_from` are deleted, the
/// page segments it no longer references retire, and it is counted.
#[allow(clippy::too_many_arguments)]
fn checkpoint_durable(
    store: &Store,
    c: &mut State,
    v: &Version,
    kind: CheckpointKind,
    generation: u64,
    floor: u32,
    done: Committed,
    stats: &WriteStats,
) {
    let Committed {
        rec,
        obsolete,
        old_epoch,
        slices,
    } = done;
    store.pager().set_durable_generation(generation);
    c.pages.checkpoint_durable();
    c.last_seq = Some(rec.seq);
    c.root_slices = slices;
    c.replay_from = rec.replay_from;
    c.log_at.push((v.seq, v.log_bytes));
    c.log_at.retain(|&(seq, _)| seq >= rec.replay_from);
    // Before any checkpoint of this session the count starts at the
    // open, whose replay started at the record's `replay_from`.
    let replayable_from = c
        .log_at
        .iter()
        .find(|&&(seq, _)| seq == rec.replay_from)
        .map_or(0, |&(_, bytes)| bytes);
    store.counters().set_replayable_log_from(replayable_from);
    c.delete_obsolete_commit_segments(store, obsolete);
    let written = (kind != CheckpointKind::Compact).then(|| stats.bytes - stats.relocated_bytes);
    c.cleaner
        .checkpoint_durable(&c.pages, &rec, floor, old_epoch, written);
    store.counters().checkpoint_durable(CheckpointDone {
        sliced: rec.replay_from < rec.seq,
        bytes: stats.bytes,
        copied_bytes: stats.relocated_bytes,
        delta_pages: stats.deltas,
        log_bytes: v.log_bytes,
        tree_bytes: rec.tree_bytes,
        seq: rec.seq,
    });
}

/// What a checkpoint writes (see `State::plan_writing`).
struct Writing {
    /// Per root child, the previous page a slice keeps (`None`: written);
    /// empty when everything changed is written.
    keep: Vec<Option<DiskRef>>,
    /// Records before this page segment are copied (cleaned).
    floor: u32,
    /// The page segment the checkpoint's writes start in.
    first_segment: u32,
}

/// A checkpoint whose record is durable, and what its commit answered.
struct Committed {
    rec: CheckpointRecord,
    obsolete: Vec<SegmentId>,
    old_epoch: Weak<Epoch>,
    slices: Option<Vec<RootSlice>>,
}

impl State {
    /// What the checkpoint of `v` writes: for a slice, the root children
    /// it keeps and its cleaning line (see `slice_floor`); otherwise
    /// everything changed, cleaning up to `floor`.
    fn plan_writing(
        &mut self,
        pager: &Pager,
        v: &Version,
        kind: CheckpointKind,
        tree_bytes: u64,
        floor: u32,
    ) -> Result<Writing> {
        let keep = match (&v.root, kind) {
            (Some(r), CheckpointKind::Slice) => self.plan_slice(pager, r, tree_bytes),
            _ => Vec::new(),
        };
        let sliced = keep.iter().any(Option::is_some);
        if sliced {
            // The slice's pages start a segment of their own, which the
            // next writes of the same slice free whole.
            self.pages.finish_segment()?;
        }
        let first_segment = self.pages.end().segment;
        let floor = match sliced {
            true => {
                let since: Vec<u32> = self
                    .root_slices
                    .iter()
                    .flatten()
                    .filter(|s| keep.contains(&Some(s.page)))
                    .map(|s| s.since)
                    .collect();
                slice_floor(since, floor)
            }
            false => floor,
        };
        Ok(Writing {
            keep,
            floor,
            first_segment,
        })
    }

    /// The durable root's children after writing `v` (see `root_slices`):
    /// those kept from the previous root hold the commits up to theirs;
    /// the others, all of `v`'s.
    fn root_slices_after(
        &self,
        pager: &Pager,
        v: &Version,
        writing: &Writing,
        written: &TreeWrite,
    ) -> Option<Vec<RootSlice>> {
        let first_segment = writing.first_segment;
        let r = v.root.as_ref()?;
        if r.is_leaf() {
            return None;
        }
        let slices = root_children(pager, r)
            .into_iter()
            .zip(&written.root_children)
            .enumerate()
            .map(|(i, ((low, _), page))| {
                let kept = writing.keep.get(i).copied().flatten() == Some(*page);
                let prev = self
                    .root_slices
                    .as_ref()
                    .and_then(|p| p.iter().find(|s| s.page == *page));
                let (seq, since) = match (kept, prev) {
                    (true, Some(p)) => (p.seq, p.since),
                    // Not found: as old as the log allows.
                    (true, None) => (self.replay_from, 0),
                    (false, _) => (
                        v.seq,
                        // The first segment this checkpoint wrote.
                        self.pages
                            .segments()
                            .range(u64::from(first_segment)..)
                            .next()
                            .map_or(first_segment, |(&id, _)| id as u32),
                    ),
                };
                RootSlice {
                    low,
                    page: *page,
                    seq,
                    since,
                }
            })
            .collect();
        Some(slices)
    }
}
