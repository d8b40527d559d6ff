//! The state every part of the engine shares: where the store lives, the
//! pager and the published version (what readers read and the writer
//! replaces), the options, the counters and the store's health.
//!
//! Below every owner (the commit path, the checkpointer, the background
//! thread, readers), so that each can be handed what it needs without
//! reaching into the others. Writes to the published version happen only
//! under the commit path's writer lock (`CommitPath`), which is what makes
//! `merge_buffer` safe to call from there.

use crate::counters::Counters;
use crate::error::Result;
use crate::expiry::{is_live, Millis};
use crate::options::Options;
use crate::version::{Reclaimer, TreePairs, Version};
use crate::write_buffer::{CountsDelta, Lookup, SpareArrays};
use arc_swap::{ArcSwap, Guard};
use kivi_log::Deadline;
use kivi_storage::Storage;
use kivi_tree::{apply, get_into, Node, Pager, TreeConfig};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What opening found, reported by `stats()`.
pub(crate) struct OpenReport {
    /// Where opening cut off a torn tail: file and offset.
    pub torn_tail: Option<(String, u64)>,
    /// Commits replayed.
    pub replayed: u64,
    /// Damage found in log records a checkpoint already covers.
    pub damage: Vec<String>,
}

pub(crate) struct Store {
    path: String,
    storage: Arc<dyn Storage>,
    pager: Pager,
    tree_cfg: TreeConfig,
    opts: Options,
    store_id: [u8; 16],
    published: ArcSwap<Version>,
    /// Frees superseded versions off the commit path.
    reclaimer: Reclaimer,
    /// Arrays of the write buffer's dropped runs, for its next merges (at
    /// most a quarter of `write_buffer_bytes`).
    run_spares: Arc<SpareArrays>,
    counters: Counters,
    closed: AtomicBool,
    opened_at: Instant,
    /// A clear was committed since the last checkpoint started.
    cleared: AtomicBool,
    last_error: Mutex<Option<String>>,
    opened: OpenReport,
}

impl Store {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        path: String,
        storage: Arc<dyn Storage>,
        pager: Pager,
        tree_cfg: TreeConfig,
        opts: Options,
        store_id: [u8; 16],
        version: Version,
        counters: Counters,
        opened: OpenReport,
    ) -> Store {
        let run_spares = SpareArrays::new(opts.write_buffer_bytes / 4);
        Store {
            path,
            storage,
            pager,
            tree_cfg,
            opts,
            store_id,
            published: ArcSwap::from_pointee(version),
            reclaimer: Reclaimer::default(),
            run_spares,
            counters,
            closed: AtomicBool::new(false),
            opened_at: Instant::now(),
            cleared: AtomicBool::new(false),
            last_error: Mutex::new(None),
            opened,
        }
    }

    /// Where the store lives, as given when it was opened.
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    pub fn pager(&self) -> &Pager {
        &self.pager
    }

    pub fn tree_cfg(&self) -> &TreeConfig {
        &self.tree_cfg
    }

    pub fn opts(&self) -> &Options {
        &self.opts
    }

    pub fn store_id(&self) -> [u8; 16] {
        self.store_id
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn reclaimer(&self) -> &Reclaimer {
        &self.reclaimer
    }

    pub fn run_spares(&self) -> &Arc<SpareArrays> {
        &self.run_spares
    }

    pub fn opened(&self) -> &OpenReport {
        &self.opened
    }

    /// The published version, for a short look.
    #[inline]
    pub fn current(&self) -> Guard<Arc<Version>> {
        self.published.load()
    }

    /// The published version, to hold.
    #[inline]
    pub fn current_full(&self) -> Arc<Version> {
        self.published.load_full()
    }

    /// Publishes `next`; returns the version it replaces. Only under the
    /// writer lock (see the module's doc), or by groups in flight finishing
    /// in order, while the writer lets nothing else publish (see `commit`).
    pub fn publish(&self, next: Arc<Version>) -> Arc<Version> {
        self.published.swap(next)
    }

    /// Remembers a failed `step` as the most recent background error, and
    /// logs it (the error names the file and the call when it is an I/O
    /// error).
    pub fn note_error(&self, step: &str, error: &dyn std::fmt::Display) {
        tracing::error!(store = %self.path, step, %error, "{step} failed");
        *self.last_error.lock() = Some(format!("{step}: {error}"));
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub fn now_ms(&self) -> u64 {
        self.opened_at.elapsed().as_millis() as u64
    }

    /// A clear was committed: the next checkpoint must write everything.
    pub fn note_cleared(&self) {
        self.cleared.store(true, Ordering::Release);
    }

    /// Whether a clear was committed since the last call (the checkpointer
    /// asks as it starts a checkpoint).
    pub fn take_cleared(&self) -> bool {
        self.cleared.swap(false, Ordering::AcqRel)
    }

    /// Milliseconds since the Unix epoch by the store's clock: the time
    /// deadlines are decided by.
    pub fn clock_now(&self) -> Millis {
        self.opts.clock.now_millis()
    }

    /// Reads `key` as of version `v`: the write buffer, then the tree.
    /// Returns the value's deadline, the value in `out`; an expired value
    /// is returned like any other (see `read_live`).
    pub fn read(&self, v: &Version, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Millis>> {
        match v.buffer.get_into(key, out) {
            Lookup::Found(deadline) => Ok(Some(deadline)),
            Lookup::Deleted => Ok(None),
            Lookup::NotHere => match &v.root {
                None => Ok(None),
                Some(root) => Ok(get_into(&self.pager, root, key, out)?),
            },
        }
    }

    /// Reads `key` as of version `v` as a user sees it: absent if its
    /// value expired by the store's clock.
    pub fn read_live(&self, v: &Version, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Millis>> {
        let found = self.read(v, key, out)?;
        // The clock is read only for a value that has a deadline: most
        // have none, and a get is a hot path.
        Ok(found.filter(|&d| d == kivi_log::NO_DEADLINE || is_live(d, self.clock_now())))
    }

    /// Pairs in version `v` as a reader sees them now: the tree's, changed
    /// by what the buffer holds, less those whose deadlines have passed.
    pub fn pairs(&self, v: &Version) -> Result<u64> {
        let delta = self.buffer_pairs_delta(v)?;
        let stored = self.tree_pairs(v)? as i64 + delta;
        let expired = self.expired_pairs(v, self.clock_now())? as i64;
        assert!(
            expired <= stored,
            "{expired} expired of {stored} pairs stored"
        );
        Ok((stored - expired) as u64)
    }

    /// Pairs in version `v` as `pairs` counts them, and how many of those
    /// have a deadline (still ahead: INFO's `expires`). The buffer and the
    /// expired values are walked once for both.
    pub fn pairs_and_deadlines(&self, v: &Version) -> Result<(u64, u64)> {
        let delta = self.buffer_counts_delta(v)?;
        let pairs = self.tree_pairs(v)? as i64 + delta.pairs;
        let deadlines = self.tree_deadlines(v)? as i64 + delta.deadlines;
        // Every expired value has a deadline.
        let expired = self.expired_pairs(v, self.clock_now())? as i64;
        assert!(
            expired <= deadlines && deadlines <= pairs,
            "{expired} expired of {deadlines} values with deadlines, of {pairs} pairs"
        );
        Ok(((pairs - expired) as u64, (deadlines - expired) as u64))
    }

    /// Values in the tree of version `v` that carry a deadline: counted by
    /// walking the subtrees that hold any, the first time after an open
    /// (see `TreeDeadlines`), then known.
    pub fn tree_deadlines(&self, v: &Version) -> Result<u64> {
        if let Some(n) = v.deadlines.get() {
            return Ok(n);
        }
        Ok(v.deadlines.set(self.count_deadlines(v.root.as_ref())?))
    }

    /// Values under `root` with a deadline, by a walk (every deadline is
    /// before `Deadline::MAX`).
    pub fn count_deadlines(&self, root: Option<&Arc<Node>>) -> Result<u64> {
        let mut n = 0;
        if let Some(root) = root {
            let _ =
                kivi_tree::expired_each(&self.pager, root, None, Deadline::MAX, &mut |_, _| {
                    n += 1;
                    std::ops::ControlFlow::Continue(())
                })?;
        }
        Ok(n)
    }

    /// Pairs of version `v` stored but expired at `now` (not yet reclaimed):
    /// the buffer's newest writes that are expired puts, and the tree's
    /// expired values the buffer does not override. The tree is walked only
    /// where deadlines have passed (`expired_each`), so this costs about
    /// what the expired entries cost while reclaiming keeps up.
    pub fn expired_pairs(&self, v: &Version, now: Millis) -> Result<u64> {
        let mut n = v.buffer.expired_puts(now);
        if let Some(root) = &v.root {
            // Never stopped early: the walk goes to the end.
            let _ = kivi_tree::expired_each(&self.pager, root, None, now, &mut |key, _| {
                if v.buffer.find(key).is_none() {
                    n += 1;
                }
                std::ops::ControlFlow::Continue(())
            })?;
        }
        Ok(n)
    }

    /// Pairs in the tree of version `v` (counted the first time after an
    /// open that replayed into the buffer: see `TreePairs`).
    pub fn tree_pairs(&self, v: &Version) -> Result<u64> {
        match &v.pairs {
            TreePairs::Known(n) => Ok(*n),
            TreePairs::AfterOpen(count) => Ok(count.count(&self.pager, v.root.as_ref())?),
        }
    }

    pub fn buffer_pairs_delta(&self, v: &Version) -> Result<i64> {
        Ok(self.buffer_counts_delta(v)?.pairs)
    }

    /// What the buffer of `v` changes in its tree's counts.
    pub fn buffer_counts_delta(&self, v: &Version) -> Result<CountsDelta> {
        if v.visible_seq == v.seq {
            return Ok(CountsDelta::default());
        }
        let mut buf = Vec::new();
        v.buffer.counts_delta(&mut |key| match &v.root {
            None => Ok(None),
            Some(root) => Ok(get_into(&self.pager, root, key, &mut buf)?),
        })
    }

    /// The memory the write buffer may hold before it is merged: half the
    /// write buffer, the other half being for the tree's unwritten changes.
    pub fn buffer_limit(&self) -> u64 {
        self.opts.write_buffer_bytes / 2
    }

    /// Whether the write buffer under `v` is due to be merged into the tree:
    /// it holds its share of memory, or half of `checkpoint_bytes` of commit
    /// log (which no checkpoint can retire until the merge); and the tree
    /// has room for what the merge adds (see `merge_has_room`).
    pub fn buffer_wants_merge(&self, v: &Version) -> bool {
        !v.buffer.is_empty()
            && (v.buffer.bytes() >= self.buffer_limit()
                || v.visible_log_bytes - v.log_bytes >= self.opts.checkpoint_bytes / 2)
            && self.merge_has_room(v)
    }

    /// Whether a merge of `v`'s buffer may add to the tree's unwritten
    /// changes now: they are under `write_buffer_bytes`, or the buffer has
    /// grown to twice its share. A merge can add more than it takes from
    /// the buffer (whole leaves against buffered pairs); made while the
    /// unwritten changes sit at the writers' hard limit, behind stalled
    /// checkpoints, it took them past it. Deferred, the buffer grows
    /// instead, which the writers' limit counts.
    pub fn merge_has_room(&self, v: &Version) -> bool {
        self.pager.dirty_bytes() < self.opts.write_buffer_bytes
            || v.buffer.bytes() >= self.buffer_limit().saturating_mul(2)
    }

    /// Merges the write buffer of `base`, the published version, into the
    /// tree and publishes the result, which it returns. The caller holds
    /// the writer lock. On failure nothing changes. `background`: on one
    /// thread, leaving the other core to the readers.
    pub fn merge_buffer(&self, base: &Arc<Version>, background: bool) -> Result<Arc<Version>> {
        debug_assert!(Arc::ptr_eq(base, &self.published.load()));
        if base.buffer.is_empty() {
            return Ok(base.clone());
        }
        let cfg = TreeConfig {
            parallel: !background,
            ..self.tree_cfg
        };
        let (root, tree_pairs, deadlines) = match &base.pairs {
            TreePairs::Known(n) => (base.root.clone(), *n, base.deadlines.clone()),
            TreePairs::AfterOpen(open) => {
                // Counted here if nobody asked yet: the first merge after
                // such an open reads those leaves anyway, and from then on
                // the count is known without a walk.
                self.tree_deadlines(base)?;
                open.settle(&self.pager, &cfg, base.root.as_ref(), &base.deadlines)?
            }
        };
        let a = base
            .buffer
            .with_newest(|ops| apply(&self.pager, &cfg, root.as_ref(), ops))?;
        let pairs = (tree_pairs as i64 + a.pairs_delta) as u64;
        let next = Arc::new(Version {
            epoch: base.epoch.clone(),
            deadlines: deadlines.after(a.deadlines_delta),
            ..Version::of_tree(a.root, base.visible_seq, pairs, base.visible_log_bytes)
        });
        self.counters.buffer_merged();
        let old = self.published.swap(next.clone());
        self.reclaimer.dispose(old);
        Ok(next)
    }

    /// Memory held by changes no checkpoint has written yet: the tree's,
    /// and the write buffer's (which a merge turns into the tree's).
    pub fn unwritten_bytes(&self) -> u64 {
        self.pager.dirty_bytes() + self.published.load().buffer.bytes()
    }

    /// Whether the changes not yet written by a checkpoint hold as much
    /// memory as `write_buffer_bytes` allows.
    pub fn write_buffer_full(&self) -> bool {
        self.pager.dirty_bytes() >= self.opts.write_buffer_bytes
    }
}
