use crate::write_buffer::WriteBuffer;
use kivi_tree::{apply, get_into, Node, Pager, TreeConfig};
use parking_lot::Mutex;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

/// One committed state of the store. Immutable: readers hold one for as
/// long as they like, and the writer publishes a new one after each commit.
///
/// The state is the tree (`root`, which holds the commits up to `seq`) with
/// the write buffer laid over it (the commits after, up to `visible_seq`).
/// `seq`, `pairs` and `log_bytes` describe the tree, which is what a
/// checkpoint writes; readers see `visible_seq`.
#[derive(Clone, Default)]
pub(crate) struct Version {
    /// Shared by the versions published between two checkpoints. The cleaner
    /// deletes a segment only once every version that could still read it
    /// is gone: it holds the epoch weakly and waits until it dies. Declared
    /// first so that it is dropped first: freeing a large superseded tree
    /// takes a while, and nothing can read through a version being dropped.
    pub epoch: Arc<Epoch>,
    pub root: Option<Arc<Node>>,
    /// Sequence number of the last commit the tree includes.
    pub seq: u64,
    /// Pairs in the tree (see `TreePairs`; `Store::tree_pairs` reads it).
    pub pairs: TreePairs,
    /// Values in the tree that carry a deadline (see `TreeDeadlines`).
    pub deadlines: TreeDeadlines,
    /// Commit-log bytes written up to the tree's last commit since the store
    /// was opened (plus those replayed at open): the redo a checkpoint of
    /// it retires.
    pub log_bytes: u64,
    /// The commits after `seq`, up to `visible_seq`: exactly those (a
    /// buffer never changes; the next commit makes a new one sharing most
    /// of it).
    pub buffer: Arc<WriteBuffer>,
    /// Sequence number of the last commit this version includes.
    pub visible_seq: u64,
    /// Commit-log bytes up to `visible_seq`, counted as `log_bytes` is.
    pub visible_log_bytes: u64,
}

impl Version {
    /// A version of `root` alone, with an empty buffer.
    pub fn of_tree(root: Option<Arc<Node>>, seq: u64, pairs: u64, log_bytes: u64) -> Self {
        Version {
            epoch: Arc::default(),
            deadlines: match root {
                None => TreeDeadlines::known(0),
                Some(_) => TreeDeadlines::default(),
            },
            root,
            seq,
            pairs: TreePairs::Known(pairs),

            log_bytes,
            buffer: Arc::default(),
            visible_seq: seq,
            visible_log_bytes: log_bytes,
        }
    }
}

/// A superseded version whose own runs hold at most this many entries and
/// commits, and which shares its tree and epoch with its successor, is
/// dropped in place: that is a few frees, cheaper than waking the reclaim
/// thread (a futex wake and two context switches per commit, 9% of
/// `kivi serve`'s CPU under single SETs from 50 clients).
const DROP_IN_PLACE_ENTRIES: usize = 4096;
const DROP_IN_PLACE_COMMITS: usize = 256;

impl Version {
    /// Whether dropping this version after `next` replaced it frees little
    /// (see `DROP_IN_PLACE_ENTRIES`): the same tree, the same epoch (no
    /// checkpoint between them), and few buffered writes of its own.
    pub fn frees_little_beside(&self, next: &Version) -> bool {
        let same_root = match (&self.root, &next.root) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if !same_root || !Arc::ptr_eq(&self.epoch, &next.epoch) {
            return false;
        }
        if Arc::ptr_eq(&self.buffer, &next.buffer) {
            return true;
        }
        let (entries, commits) = self.buffer.released_beside(&next.buffer);
        entries <= DROP_IN_PLACE_ENTRIES && commits <= DROP_IN_PLACE_COMMITS
    }
}

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Version")
            .field("seq", &self.seq)
            .field("pairs", &self.pairs)
            .field("visible_seq", &self.visible_seq)
            .field("buffered_writes", &self.buffer.writes())
            .finish()
    }
}

/// How many pairs a version's tree holds.
///
/// Known, but for the tree an open starts from when the newest checkpoint
/// was sliced: its root children are of different commits (between the
/// checkpoint's `replay_from` and its `seq`), so its count is nobody's.
/// Recovery does not apply the commits it replays to that tree (which
/// would read a leaf for nearly every replayed write, and made reopening
/// take time in proportion to the redo); it lays them over it as the
/// write buffer. What the checkpoint did record is the count after the
/// commits up to its `seq`, so the tree's own count follows from the
/// writes of those commits (`AfterOpen`), at the cost of looking each of
/// their keys up in the tree, paid by the first caller that needs the
/// count before the buffer is merged (`stats`, `check`), not by the open.
/// The merge itself applies those commits first (`OpenCount::settle`),
/// which gives the count without a lookup.
#[derive(Clone, Debug)]
pub(crate) enum TreePairs {
    Known(u64),
    AfterOpen(Arc<OpenCount>),
}

impl Default for TreePairs {
    fn default() -> Self {
        TreePairs::Known(0)
    }
}

impl TreePairs {
    /// The count, if known without counting. Always known for a version
    /// with an empty write buffer: the count after an open is unknown
    /// only while the buffer holds the replayed commits (the merge that
    /// takes them into the tree counts it).
    pub fn known(&self) -> Option<u64> {
        match self {
            TreePairs::Known(n) => Some(*n),
            TreePairs::AfterOpen(_) => None,
        }
    }
}

/// How many values in a version's tree carry a deadline, expired or not
/// (what INFO's `expires` is made of, less the expired). No checkpoint
/// records it (it came after format 5 fixed the checkpoint record), so
/// after an open it is unknown until the first caller that needs it, or the
/// first merge of replayed commits, counts it (`Store::tree_deadlines`, a
/// walk of only the subtrees that hold deadlines); from then on every apply
/// carries it forward (`Applied::deadlines_delta`). Versions over the same
/// tree share one.
#[derive(Clone, Debug, Default)]
pub(crate) struct TreeDeadlines(Arc<std::sync::OnceLock<u64>>);

impl TreeDeadlines {
    pub fn known(n: u64) -> Self {
        TreeDeadlines(Arc::new(std::sync::OnceLock::from(n)))
    }

    pub fn get(&self) -> Option<u64> {
        self.0.get().copied()
    }

    /// Records the count once counted; a count already there stays (both
    /// are of the same tree).
    pub fn set(&self, n: u64) -> u64 {
        *self.0.get_or_init(|| n)
    }

    /// The count of the tree an apply that changed it by `delta` made from
    /// this one: unknown if this one is.
    pub fn after(&self, delta: i64) -> Self {
        match self.get() {
            Some(n) => {
                let after = n as i64 + delta;
                assert!(after >= 0, "a tree with {n} deadlines lost {}", -delta);
                TreeDeadlines::known(after as u64)
            }
            None => TreeDeadlines::default(),
        }
    }
}

/// See `TreePairs::AfterOpen`.
pub(crate) struct OpenCount {
    /// The checkpoint's count: pairs after the commits up to its `seq`.
    checkpoint_pairs: u64,
    /// The writes of the commits after `replay_from` up to the
    /// checkpoint's `seq`, as a write buffer over the same tree.
    to_checkpoint: WriteBuffer,
    /// The tree's count, once computed.
    counted: std::sync::OnceLock<u64>,
}

impl std::fmt::Debug for OpenCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenCount")
            .field("checkpoint_pairs", &self.checkpoint_pairs)
            .field("counted", &self.counted.get())
            .finish()
    }
}

impl OpenCount {
    pub fn new(checkpoint_pairs: u64, to_checkpoint: WriteBuffer) -> Self {
        OpenCount {
            checkpoint_pairs,
            to_checkpoint,
            counted: std::sync::OnceLock::new(),
        }
    }

    /// The tree the open started from (`root`, whose deadlines are
    /// `deadlines`) with the commits up to the checkpoint's `seq` applied,
    /// its count, the checkpoint's, and its deadlines: what a merge of the
    /// buffer starts from, so that it counts without looking anything up
    /// (the apply reads those leaves anyway; the buffer's newer writes of
    /// the same keys then win over them).
    pub fn settle(
        &self,
        pager: &Pager,
        cfg: &TreeConfig,
        root: Option<&Arc<Node>>,
        deadlines: &TreeDeadlines,
    ) -> Result<(Option<Arc<Node>>, u64, TreeDeadlines), kivi_log::Error> {
        if self.to_checkpoint.is_empty() {
            return Ok((root.cloned(), self.checkpoint_pairs, deadlines.clone()));
        }
        let applied = self
            .to_checkpoint
            .with_newest(|ops| apply(pager, cfg, root, ops))?;
        let deadlines = deadlines.after(applied.deadlines_delta);
        Ok((applied.root, self.checkpoint_pairs, deadlines))
    }

    /// The pairs in `root`, the tree the open started from: the
    /// checkpoint's count less what the commits up to it changed.
    pub fn count(&self, pager: &Pager, root: Option<&Arc<Node>>) -> Result<u64, kivi_log::Error> {
        if let Some(&n) = self.counted.get() {
            return Ok(n);
        }
        let mut buf = Vec::new();
        let delta = self.to_checkpoint.counts_delta(&mut |key| match root {
            None => Ok::<_, kivi_log::Error>(None),
            Some(r) => Ok(get_into(pager, r, key, &mut buf)?),
        })?;
        let n = self.checkpoint_pairs as i64 - delta.pairs;
        assert!(n >= 0, "the tree an open started from counts {n} pairs");
        Ok(*self.counted.get_or_init(|| n as u64))
    }
}

/// See `Version::epoch`.
#[derive(Debug, Default)]
pub(crate) struct Epoch;

/// Versions waiting to be freed, at most.
const RECLAIM_QUEUE: usize = 8;

/// Drops superseded versions on a thread of its own. Replacing a version
/// frees every node the new one no longer shares (a thousand or so for a
/// batch of random updates); doing that on the committing thread would
/// delay the next commit. A version that frees little is dropped by the
/// commit itself (`superseded`): waking this thread would cost more.
pub(crate) struct Reclaimer {
    tx: Mutex<Option<SyncSender<Arc<Version>>>>,
}

impl Default for Reclaimer {
    fn default() -> Self {
        let (tx, rx) = sync_channel::<Arc<Version>>(RECLAIM_QUEUE);
        let spawned = std::thread::Builder::new()
            .name("kivi-reclaim".into())
            // Ends when the sender is dropped with the store.
            .spawn(move || rx.into_iter().for_each(drop));
        Reclaimer {
            tx: Mutex::new(spawned.ok().map(|_| tx)),
        }
    }
}

impl Reclaimer {
    /// Ends the published life of `version`, which `next` replaced: freed
    /// here when that is cheap (see `Version::frees_little_beside`) or a
    /// reader still holds it (then this is only a count going down), else
    /// elsewhere.
    pub fn superseded(&self, version: Arc<Version>, next: &Version) {
        if Arc::strong_count(&version) > 1 || version.frees_little_beside(next) {
            drop(version);
        } else {
            self.dispose(version);
        }
    }

    /// Frees `version` elsewhere, or here when the queue is full (which also
    /// slows a writer that outruns the freeing).
    pub fn dispose(&self, version: Arc<Version>) {
        let rejected = match &*self.tx.lock() {
            Some(tx) => match tx.try_send(version) {
                Ok(()) => None,
                Err(TrySendError::Full(v) | TrySendError::Disconnected(v)) => Some(v),
            },
            None => Some(version),
        };
        drop(rejected);
    }

    /// A reader's end with `version`: freed elsewhere when the reader holds
    /// the last reference (a version superseded while a scan or snapshot
    /// kept it: freeing its old tree and write buffer is up to ~25,000
    /// leaves and ~160,000 buffered writes at 1M pairs, which a scan of the
    /// whole store would otherwise pay for), else just released. Another
    /// reader letting go at the same moment may still free it in place,
    /// which costs time, never correctness.
    pub fn release(&self, version: Arc<Version>) {
        if Arc::strong_count(&version) == 1 {
            self.dispose(version);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write_buffer::SpareArrays;

    fn group(keys: &[Vec<u8>]) -> Vec<crate::write_buffer::Write<'_>> {
        keys.iter()
            .map(|k| (k.as_slice(), Some((&b"v"[..], kivi_log::NO_DEADLINE))))
            .collect()
    }

    fn keys(from: u32, n: u32) -> Vec<Vec<u8>> {
        (from..from + n)
            .map(|i| format!("k{i:06}").into_bytes())
            .collect()
    }

    #[test]
    fn only_a_cheap_superseded_version_is_dropped_in_place() {
        let spares = SpareArrays::new(1 << 24);
        let v = Version::default();
        assert!(v.frees_little_beside(&v.clone()), "nothing of its own");

        let checkpointed = Version {
            epoch: Arc::new(Epoch),
            ..v.clone()
        };
        assert!(
            !v.frees_little_beside(&checkpointed),
            "a checkpoint between them: the cleaner waits on the old epoch"
        );

        // One small commit on top of another: the one-write run the first
        // added is merged into the second's and released.
        let with = |base: &Version, ks: &[Vec<u8>]| Version {
            buffer: Arc::new(base.buffer.with_group(&group(ks), &spares)),
            ..base.clone()
        };
        let one = with(&v, &keys(0, 1));
        let two = with(&one, &keys(1, 1));
        assert_eq!(one.buffer.released_beside(&two.buffer), (1, 1));
        assert!(one.frees_little_beside(&two));
        // A run added below a larger one releases nothing.
        let three = with(&two, &keys(2, 1));
        assert_eq!(two.buffer.released_beside(&three.buffer), (0, 0));

        // A commit that merges away a run larger than the limit.
        let big = with(&v, &keys(10, DROP_IN_PLACE_ENTRIES as u32 + 1));
        let bigger = with(&big, &keys(100_000, DROP_IN_PLACE_ENTRIES as u32 + 1));
        assert_eq!(
            big.buffer.released_beside(&bigger.buffer),
            (DROP_IN_PLACE_ENTRIES + 1, 1)
        );
        assert!(!big.frees_little_beside(&bigger));
    }
}
