//! The database handle: opening, reading, writing, closing.

use crate::batch::WriteBatch;
use crate::checkpointer::{unreferenced_below, Background, CheckpointKind, Checkpointer};
use crate::commit::Writer;
use crate::commit_log::CommitLog;
use crate::error::{Error, Result};
use crate::identity::{self, IDENTITY};
use crate::iter::{Iter, Scan, Snapshot};
use crate::limits::MAX_KEY_LEN;
use crate::options::Options;
use crate::page_log::PageLog;
use crate::pipeline::{Pipeline, Reply, Request, WriteOutcome};
use crate::recovery::recover;
use crate::version::{Reclaimer, Version};
use crate::write_buffer::{Lookup, SpareArrays};
use arc_swap::ArcSwap;
use kivi_log::SegmentIds;
use kivi_storage::{LocalDir, Storage};
use kivi_tree::{apply, get_each, get_into, Pager, TreeConfig};
use parking_lot::Mutex;
use std::ops::ControlFlow;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Counters behind `stats()`.
#[derive(Default)]
pub(crate) struct Counters {
    pub group_commits: AtomicU64,
    pub batches: AtomicU64,
    pub failed_commits: AtomicU64,
    pub checkpoints: AtomicU64,
    pub sliced_checkpoints: AtomicU64,
    pub checkpoint_bytes: AtomicU64,
    pub failed_checkpoints: AtomicU64,
    /// `Version::log_bytes` of the newest durable checkpoint.
    pub checkpointed_log_bytes: AtomicU64,
    /// `Version::log_bytes` at the newest durable checkpoint's
    /// `replay_from`: the commit log since is what recovery replays.
    pub replayable_log_from: AtomicU64,
    pub checkpointed_tree_bytes: AtomicU64,
    pub checkpointed_seq: AtomicU64,
    /// Milliseconds since open of the last commit, for idle detection.
    pub last_commit_ms: AtomicU64,
    /// Page segments the cleaner deleted, and the bytes of live records it
    /// copied out of them first.
    pub cleaned_segments: AtomicU64,
    pub cleaner_copied_bytes: AtomicU64,
    /// Page segments no checkpoint uses that wait for old readers to finish.
    pub retiring_segments: AtomicU64,
    /// Writes held back because unwritten changes filled the write buffer
    /// twice over, and the microseconds they waited in all.
    pub write_stalls: AtomicU64,
    /// Write buffers merged into the tree.
    pub buffer_merges: AtomicU64,
    pub write_stall_us: AtomicU64,
}

pub(crate) struct Inner {
    pub path: String,
    pub storage: Arc<dyn Storage>,
    pub pager: Pager,
    pub tree_cfg: TreeConfig,
    pub opts: Options,
    pub store_id: [u8; 16],
    pub published: ArcSwap<Version>,
    /// Frees superseded versions off the commit path.
    pub reclaimer: Reclaimer,
    /// Arrays of the write buffer's dropped runs, for its next merges (at
    /// most a quarter of `write_buffer_bytes`).
    pub run_spares: Arc<SpareArrays>,
    pub pipeline: Pipeline,
    /// `None` when read-only.
    pub writer: Mutex<Option<Writer>>,
    pub checkpointer: Mutex<Option<Checkpointer>>,
    /// The page segment being written and its length (see `PageLog`).
    pub page_appending: Arc<Mutex<Option<(u64, u64)>>>,
    pub background: Background,
    pub counters: Counters,
    pub closed: AtomicBool,
    pub opened_at: std::time::Instant,
    pub last_error: Mutex<Option<String>>,
    pub torn_tail: Option<(String, u64)>,
    pub replayed_at_open: u64,
    /// Damage opening found in log records a checkpoint already covers.
    pub damage_at_open: Vec<String>,
}

/// A kivi store. Cheap to clone; all clones share one store, and the store
/// closes (after a final checkpoint) when the last clone is dropped.
#[derive(Clone)]
pub struct Db {
    handle: Arc<Handle>,
}

struct Handle {
    inner: Arc<Inner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.inner.shutdown();
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.inner().path)
            .finish()
    }
}

impl Db {
    /// Opens (or creates) the store in directory `path`.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let path = path.as_ref();
        let shown = path.display().to_string();
        if !opts.create_if_missing && !opts.read_only && !path.exists() {
            return Err(Error::NotAStore {
                path: shown,
                reason: "no such directory".into(),
            });
        }
        // Refuse a directory that holds something else before touching it
        // (opening for writing creates the lock file).
        if let Ok(entries) = std::fs::read_dir(path) {
            let names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            let ours = |n: &String| n == "LOCK" || *n == format!("{IDENTITY}.tmp");
            if !names.iter().any(|n| n == IDENTITY) && names.iter().any(|n| !ours(n)) {
                return Err(Error::NotAStore {
                    path: shown,
                    reason: format!("it holds files but no {IDENTITY} file"),
                });
            }
        }
        let opened = if opts.read_only {
            LocalDir::open_read_only(path)
        } else {
            LocalDir::open(path)
        };
        let dir = opened.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotADirectory => Error::NotAStore {
                path: shown.clone(),
                reason: "it is a file, not a directory".into(),
            },
            std::io::ErrorKind::NotFound if opts.read_only => Error::NotAStore {
                path: shown.clone(),
                reason: "no such directory".into(),
            },
            _ => Error::Io(e),
        })?;
        let dir = Arc::new(dir);
        let probe = dir.clone();
        let is_empty = move || -> Result<bool> {
            Ok(probe.foreign_entries(&[IDENTITY])?.is_empty() && probe.list_segments()?.is_empty())
        };
        Self::open_inner(dir, shown, opts, &is_empty)
    }

    /// Opens a store on any storage backend (memory, the crash simulator, ...).
    pub fn open_with_storage(storage: Arc<dyn Storage>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let probe = storage.clone();
        let is_empty = move || -> Result<bool> { Ok(probe.list_segments()?.is_empty()) };
        Self::open_inner(storage, "store".to_string(), opts, &is_empty)
    }

    fn open_inner(
        storage: Arc<dyn Storage>,
        path: String,
        opts: Options,
        is_empty: &dyn Fn() -> Result<bool>,
    ) -> Result<Db> {
        let store_id = identity::load_or_create(
            storage.as_ref(),
            &path,
            is_empty,
            opts.create_if_missing && !opts.read_only,
        )?;
        let pager = Pager::new(storage.clone(), opts.cache_bytes);
        let tree_cfg = TreeConfig {
            page_target: opts.page_size,
            ..TreeConfig::default()
        };
        let rec = recover(&storage, &pager, &tree_cfg, store_id)?;
        let ids = Arc::new(SegmentIds::after(rec.max_segment_id));
        let mut page_appending = Arc::default();
        let (writer, checkpointer) = if opts.read_only {
            (None, None)
        } else {
            for &id in &rec.garbage {
                storage.delete_segment(id)?;
            }
            let log = CommitLog::new(
                storage.clone(),
                ids.clone(),
                store_id,
                opts.segment_bytes,
                rec.log_end,
                rec.log_segments.clone(),
            );
            let pages = PageLog::new(
                storage.clone(),
                ids.clone(),
                store_id,
                opts.segment_bytes,
                rec.page_end,
                rec.page_segments.clone(),
            );
            page_appending = pages.appending();
            (
                Some(Writer {
                    log,
                    seq: rec.version.seq,
                }),
                Some(Checkpointer::new(
                    pages,
                    rec.checkpoint.as_ref().map_or(0, unreferenced_below),
                    rec.checkpoint.as_ref().map_or(0, |c| c.replay_from),
                )),
            )
        };
        let mut version = rec.version;
        version.log_bytes = rec.redo_bytes;
        version.visible_log_bytes = rec.redo_bytes;
        let counters = Counters::default();
        if let Some(c) = rec.checkpoint {
            counters
                .checkpointed_tree_bytes
                .store(c.tree_bytes, Ordering::Relaxed);
            counters.checkpointed_seq.store(c.seq, Ordering::Relaxed);
        }
        let read_only = opts.read_only;
        let run_spares = SpareArrays::new(opts.write_buffer_bytes / 4);
        let inner = Arc::new(Inner {
            path,
            storage,
            pager,
            tree_cfg,
            opts,
            store_id,
            published: ArcSwap::from_pointee(version),
            reclaimer: Reclaimer::default(),
            run_spares,
            pipeline: Pipeline::default(),
            writer: Mutex::new(writer),
            checkpointer: Mutex::new(checkpointer),
            page_appending,
            background: Background::default(),
            counters,
            closed: AtomicBool::new(false),
            opened_at: std::time::Instant::now(),
            last_error: Mutex::new(None),
            torn_tail: rec.torn_tail,
            replayed_at_open: rec.replayed,
            damage_at_open: rec.damage.iter().map(|c| c.to_string()).collect(),
        });
        if !read_only {
            Background::start(&inner);
        }
        Ok(Db {
            handle: Arc::new(Handle { inner }),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.handle.inner
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Reads the value under `key` into `out` (reusing its allocation);
    /// `Ok(false)` when absent.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if key.len() > MAX_KEY_LEN {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                max: MAX_KEY_LEN,
            });
        }
        let inner = self.inner();
        inner.read(&inner.published.load(), key, out)
    }

    /// Reads the values under `keys`, all as of one moment, calling
    /// `found(i, value)` for each key in order (`None` when absent), until
    /// it answers `Break` or a read fails. Faster than one `get` after
    /// another when the keys are many and not all in the CPU's cache: the
    /// lookups go down the tree side by side, so their waits for memory
    /// overlap.
    pub fn get_each(
        &self,
        keys: &[&[u8]],
        mut found: impl FnMut(usize, Option<&[u8]>) -> ControlFlow<()>,
    ) -> Result<()> {
        if let Some(k) = keys.iter().find(|k| k.len() > MAX_KEY_LEN) {
            return Err(Error::KeyTooLarge {
                len: k.len(),
                max: MAX_KEY_LEN,
            });
        }
        let inner = self.inner();
        let v = inner.published.load();
        if let [key] = keys {
            // Nothing to overlap: the plain lookup, without the passes'
            // bookkeeping.
            let mut out = Vec::new();
            let found_it = inner.read(&v, key, &mut out)?;
            let _ = found(0, found_it.then_some(out.as_slice()));
            return Ok(());
        }
        // The write buffer answers the keys written since the tree under
        // it; the tree, the others.
        let buffered: Vec<Option<Option<&[u8]>>> = keys.iter().map(|k| v.buffer.find(k)).collect();
        let (in_tree, tree_keys): (Vec<usize>, Vec<&[u8]>) = keys
            .iter()
            .enumerate()
            .filter(|(i, _)| buffered[*i].is_none())
            .map(|(i, k)| (i, *k))
            .unzip();
        // Answers key `i` after the buffered keys before it.
        let mut next = 0;
        let mut answer = |i: usize, value: Option<&[u8]>| -> ControlFlow<()> {
            for (j, b) in buffered.iter().enumerate().take(i).skip(next) {
                found(
                    j,
                    b.expect("the buffer answers every key the tree does not"),
                )?;
            }
            next = i + 1;
            if i < keys.len() {
                found(i, value)?;
            }
            ControlFlow::Continue(())
        };
        let flow = match &v.root {
            Some(root) => get_each(&inner.pager, root, &tree_keys, &mut |t, value| {
                answer(in_tree[t], value)
            })?,
            None => in_tree.iter().try_for_each(|&i| answer(i, None)),
        };
        if flow.is_continue() {
            // The buffered keys after the last one the tree answered.
            let _ = answer(keys.len(), None);
        }
        Ok(())
    }

    /// Stores `value` under `key`; durable when it returns (see [`Durability`]).
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.write(b).map(|_| ())
    }

    /// Removes `key` (nothing happens if it is absent).
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.write(b).map(|_| ())
    }

    /// Applies a batch atomically; durable when it returns.
    pub fn write(&self, batch: WriteBatch) -> Result<WriteOutcome> {
        if batch.is_empty() {
            return Ok(WriteOutcome::Applied);
        }
        match self.inner().submit(Request::Write(batch))? {
            Reply::Write(o) => Ok(o),
            Reply::Checkpoint { .. } => unreachable!("write answered with a checkpoint reply"),
        }
    }

    /// Applies each batch atomically and on its own, in order, as if by
    /// [`Db::write`] one after another, but all queued at once so that they
    /// share group commits: one thread can keep many writes in flight (a
    /// server answering pipelined clients). Returns one result per batch,
    /// each durable when this returns; a batch's failure does not stop the
    /// others (a failed commit fails every batch of its group).
    pub fn write_each(&self, batches: Vec<WriteBatch>) -> Vec<Result<WriteOutcome>> {
        let inner = self.inner();
        if inner.closed.load(Ordering::Acquire) {
            return batches.iter().map(|_| Err(Error::Closed)).collect();
        }
        let mut out: Vec<Option<Result<WriteOutcome>>> = Vec::with_capacity(batches.len());
        let mut requests = Vec::with_capacity(batches.len());
        for b in batches {
            if b.is_empty() {
                out.push(Some(Ok(WriteOutcome::Applied)));
            } else {
                out.push(None);
                requests.push(Request::Write(b));
            }
        }
        if !requests.is_empty() {
            inner.wait_for_write_buffer();
        }
        let mut replies = inner
            .pipeline
            .submit_many(requests, &|group| inner.commit_group(group))
            .into_iter();
        out.into_iter()
            .map(|o| match o {
                Some(r) => r,
                None => match replies.next().expect("one reply per queued batch")? {
                    Reply::Write(o) => Ok(o),
                    Reply::Checkpoint { .. } => {
                        unreachable!("write answered with a checkpoint reply")
                    }
                },
            })
            .collect()
    }

    fn conditional(&self, batch: WriteBatch) -> Result<bool> {
        Ok(self.write(batch)? == WriteOutcome::Applied)
    }

    /// Replaces the value of `key` with `value` if it currently equals
    /// `expected`. Returns whether it did.
    pub fn compare_and_swap(&self, key: &[u8], expected: &[u8], value: &[u8]) -> Result<bool> {
        let mut b = WriteBatch::new();
        b.compare_and_swap(key, expected, value)?;
        self.conditional(b)
    }

    /// Deletes `key` if its value currently equals `expected`.
    pub fn compare_and_delete(&self, key: &[u8], expected: &[u8]) -> Result<bool> {
        let mut b = WriteBatch::new();
        b.compare_and_delete(key, expected)?;
        self.conditional(b)
    }

    /// Stores `value` under `key` if the key is absent.
    pub fn insert_if_absent(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let mut b = WriteBatch::new();
        b.insert_if_absent(key, value)?;
        self.conditional(b)
    }

    /// Replaces the value of `key` if the key is present.
    pub fn update_if_present(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let mut b = WriteBatch::new();
        b.update_if_present(key, value)?;
        self.conditional(b)
    }

    /// A consistent read view of the store as of now. It never blocks
    /// writers; it keeps the pages it sees alive until dropped.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.inner().clone(), self.inner().published.load_full())
    }

    /// Pairs with keys in `range`, in key order; `.rev()` for descending order.
    /// Reads a consistent snapshot taken when it is called.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        self.snapshot().range(range)
    }

    /// A zero-copy scan of `range` in ascending key order (see [`Scan`]).
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Scan {
        self.snapshot().scan(range)
    }

    /// A zero-copy scan of `range` in descending key order.
    pub fn scan_rev<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Scan {
        self.snapshot().scan_rev(range)
    }

    /// Every pair, in key order.
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }

    /// Writes a checkpoint now: afterwards, reopening replays nothing.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner()
            .run_checkpoint(CheckpointKind::Regular)
            .map(|_| ())
    }

    /// Cleans the whole store now: copies every live page into a new page
    /// segment, moves the commit log to a new segment, and deletes every
    /// file that no longer holds anything live. Afterwards the files hold
    /// little more than the live data (segments still readable by an open
    /// snapshot or iterator are deleted once it is dropped).
    pub fn compact(&self) -> Result<()> {
        let inner = self.inner();
        inner.run_checkpoint(CheckpointKind::Compact)?;
        // Superseded versions are freed on another thread; give it a moment
        // so the cleaned segments go now rather than at the next tick.
        for _ in 0..100 {
            inner.delete_retired();
            if inner.counters.retiring_segments.load(Ordering::Relaxed) == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Ok(())
    }

    /// Closes the store: a final checkpoint, then every file closed. Other
    /// clones of this handle see [`Error::Closed`] afterwards.
    pub fn close(self) -> Result<()> {
        self.inner().shutdown()
    }

    /// Where the store lives, as given when it was opened.
    pub fn path(&self) -> &str {
        &self.inner().path
    }

    /// Drops every cached page (for measuring cold reads).
    pub fn clear_cache(&self) {
        self.inner().pager.clear_cache();
    }
}

impl Inner {
    pub(crate) fn now_ms(&self) -> u64 {
        self.opened_at.elapsed().as_millis() as u64
    }

    /// Reads `key` as of version `v`: the write buffer, then the tree.
    pub(crate) fn read(&self, v: &Version, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match v.buffer.get_into(key, out) {
            Lookup::Found => Ok(true),
            Lookup::Deleted => Ok(false),
            Lookup::NotHere => match &v.root {
                None => Ok(false),
                Some(root) => Ok(get_into(&self.pager, root, key, out)?),
            },
        }
    }

    /// Pairs in version `v`: the tree's, changed by what the buffer holds.
    pub(crate) fn pairs(&self, v: &Version) -> Result<u64> {
        let delta = self.buffer_pairs_delta(v)?;
        Ok((v.pairs as i64 + delta) as u64)
    }

    pub(crate) fn buffer_pairs_delta(&self, v: &Version) -> Result<i64> {
        if v.visible_seq == v.seq {
            return Ok(0);
        }
        let mut buf = Vec::new();
        v.buffer.pairs_delta(&mut |key| match &v.root {
            None => Ok(false),
            Some(root) => get_into(&self.pager, root, key, &mut buf).map_err(Error::from),
        })
    }

    /// The memory the write buffer may hold before it is merged: half the
    /// write buffer, the other half being for the tree's unwritten changes.
    pub(crate) fn buffer_limit(&self) -> u64 {
        self.opts.write_buffer_bytes / 2
    }

    /// Whether the write buffer under `v` is due to be merged into the tree:
    /// it holds its share of memory, or half of `checkpoint_bytes` of commit
    /// log (which no checkpoint can retire until the merge); and the tree
    /// has room for what the merge adds (see `merge_has_room`).
    pub(crate) fn buffer_wants_merge(&self, v: &Version) -> bool {
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
    pub(crate) fn merge_has_room(&self, v: &Version) -> bool {
        self.pager.dirty_bytes() < self.opts.write_buffer_bytes
            || v.buffer.bytes() >= self.buffer_limit().saturating_mul(2)
    }

    /// Merges the write buffer of `base`, the published version, into the
    /// tree and publishes the result, which it returns. The caller holds
    /// the writer lock. On failure nothing changes. `background`: on one
    /// thread, leaving the other core to the readers.
    pub(crate) fn merge_buffer(
        &self,
        base: &Arc<Version>,
        background: bool,
    ) -> Result<Arc<Version>> {
        debug_assert!(Arc::ptr_eq(base, &self.published.load()));
        if base.buffer.is_empty() {
            return Ok(base.clone());
        }
        let cfg = TreeConfig {
            parallel: !background,
            ..self.tree_cfg
        };
        let a = base
            .buffer
            .with_newest(|ops| apply(&self.pager, &cfg, base.root.as_ref(), ops))?;
        let pairs = (base.pairs as i64 + a.pairs_delta) as u64;
        let next = Arc::new(Version {
            epoch: base.epoch.clone(),
            ..Version::of_tree(a.root, base.visible_seq, pairs, base.visible_log_bytes)
        });
        self.counters.buffer_merges.fetch_add(1, Ordering::Relaxed);
        let old = self.published.swap(next.clone());
        self.reclaimer.dispose(old);
        Ok(next)
    }

    /// Stops the background work (after a final checkpoint) and refuses
    /// further writes. Idempotent.
    pub(crate) fn shutdown(&self) -> Result<()> {
        let was_closed = self.closed.load(Ordering::Acquire);
        if was_closed {
            return Ok(());
        }
        let result = self.background.stop();
        let mut result = match result {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        };
        self.closed.store(true, Ordering::Release);
        // Take the writer lock so no group is half-done when we return.
        if let Some(w) = self.writer.lock().as_mut() {
            if let Err(e) = w.log.sync() {
                result = Err(e.into());
            }
        }
        result
    }
}
