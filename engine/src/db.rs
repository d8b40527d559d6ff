//! The database handle: opening, reading, writing, closing.

use crate::background::{self, Background};
use crate::backpressure::Backpressure;
use crate::batch::WriteBatch;
use crate::checkpoint_format::unreferenced_below;
use crate::checkpointer::{CheckpointKind, Checkpointer};
use crate::commit::{CommitPath, Writer};
use crate::commit_log::CommitLog;
use crate::counters::Counters;
use crate::error::{Error, Result};
use crate::expiry::{is_live, Clock, Deadline, Millis};
use crate::follower::{Follower, FollowerStatus};
use crate::identity::{self, IDENTITY};
use crate::iter::{Iter, Scan, Snapshot};
use crate::latency::{SyncTimes, SyncTimesSnapshot};
use crate::limits::MAX_KEY_LEN;
use crate::options::Options;
use crate::pacing::Pacer;
use crate::page_log::PageLog;
use crate::pipeline::{Reply, Request, WriteOutcome};
use crate::recovery::recover;
use crate::store::{OpenReport, Store};
use crate::write_buffer::Stored;
use arc_swap::{ArcSwap, Guard};
use kivi_log::SegmentIds;
use kivi_storage::{LocalDir, Storage};
use kivi_tree::{get_each, Pager, TreeConfig};
use std::ops::ControlFlow;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;

/// The store's owners, each with its own part of the state: what every
/// part shares and readers read (`Store`), the commit path, the
/// checkpointer, what ties writers to it, and the background thread.
pub(crate) struct Inner {
    /// Shared with snapshots and iterators, which read through it.
    store: Arc<Store>,
    commit: CommitPath,
    checkpointer: Checkpointer,
    backpressure: Backpressure,
    background: Background,
    /// How long the logs' fdatasyncs took.
    syncs: Arc<SyncTimes>,
    /// A read-only open's place in the writer's log (see `follower.rs`).
    follower: Option<Arc<Follower>>,
}

/// A kivi store. Cheap to clone; all clones share one store, and the store
/// closes (as [`Db::close`] does) when the last clone is dropped.
#[derive(Clone)]
pub struct Db {
    handle: Arc<Handle>,
}

/// What the clones of a `Db` share: the store's owners, replaced whole
/// when a follower takes over as the writer (`Db::promote`), and what
/// stays the same across that.
struct Handle {
    inner: ArcSwap<Inner>,
    /// Where the store lives, as given when it was opened.
    path: String,
    clock: Clock,
    /// One promotion at a time.
    promoting: parking_lot::Mutex<()>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.inner.load().shutdown();
    }
}

/// A part of the current `Inner`, held through its guard (cheap: no
/// reference count is touched while the current one stays).
pub(crate) struct Part<T: 'static> {
    guard: Guard<Arc<Inner>>,
    get: fn(&Inner) -> &T,
}

impl<T> std::ops::Deref for Part<T> {
    type Target = T;
    fn deref(&self) -> &T {
        (self.get)(&self.guard)
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.handle.path)
            .finish()
    }
}

/// Opens of the store as its writer a takeover tries, once it holds the
/// fence, before it gives the role up (see `Db::promote_holding`).
const BUILD_TRIES: u32 = 3;
const BUILD_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

impl Db {
    /// Opens the store in directory `path`, creating it (and the directory)
    /// if there is none and [`Options::create_if_missing`] allows (it does
    /// by default). Recovers from any crash as it opens: a torn tail of the
    /// log is cut off, commits since the last checkpoint are replayed. One
    /// process at a time opens a store for writing (a lock file keeps others
    /// out); [`Options::read_only`] opens beside a writer.
    ///
    /// Fails with [`Error::NotAStore`] on a directory that holds other files,
    /// and with [`Error::InvalidOption`] on options out of range.
    ///
    /// ```
    /// use kivi::{Db, Durability, Options};
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("store");
    /// let db = Db::open(&path, Options::default())?;
    /// db.put(b"k", b"v")?;
    /// db.close()?;
    ///
    /// let opts = Options { create_if_missing: false, durability: Durability::NoFsync, ..Options::default() };
    /// let db = Db::open(&path, opts)?;
    /// assert_eq!(db.get(b"k")?.as_deref(), Some(&b"v"[..]));
    /// # Ok::<(), kivi::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let path = path.as_ref();
        if let Some(url) = path.to_str().filter(|p| p.contains("://")) {
            return Self::open_url(url, opts);
        }
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
            let ours =
                |n: &String| n == "LOCK" || n == "READERS" || *n == format!("{IDENTITY}.tmp");
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

    /// Opens the store at an object store's URL (`s3://bucket/prefix`,
    /// `file:///path`), with the feature `object-store`: see
    /// `kivi_object_storage::ObjectStorage::open_url`. A writable open takes
    /// the writer's role from whoever had it: their next commit fails.
    #[cfg(feature = "object-store")]
    fn open_url_once(url: &str, opts: Options) -> Result<Db> {
        let config = kivi_object_storage::Config {
            cache_dir: opts.object_cache_dir.clone(),
            cache_bytes: opts.object_cache_bytes,
            read_only: opts.read_only,
            create_if_missing: opts.create_if_missing,
            ..Default::default()
        };
        let storage: Arc<dyn Storage> =
            match kivi_object_storage::ObjectStorage::open_url(url, config) {
                Err(kivi_storage::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::NotAStore {
                        path: url.to_string(),
                        reason: "no store here".into(),
                    })
                }
                opened => Arc::new(opened?),
            };
        let probe = storage.clone();
        let is_empty = move || -> Result<bool> { Ok(probe.list_segments()?.is_empty()) };
        Self::open_inner(storage, url.to_string(), opts, &is_empty)
    }

    /// [`Self::open_url_once`], tried again (up to 5 times in all, 200 ms
    /// apart) when an object it listed was gone when read: a writer this
    /// open displaced may still be deleting the page segments its last
    /// checkpoint retired (they are garbage to this open too).
    #[cfg(feature = "object-store")]
    fn open_url(url: &str, opts: Options) -> Result<Db> {
        let mut tries = 0;
        loop {
            tries += 1;
            match Self::open_url_once(url, opts.clone()) {
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && tries < 5 => {
                    tracing::info!(store = url, error = %e, "an object was deleted while the store opened; opening again");
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                other => return other,
            }
        }
    }

    #[cfg(not(feature = "object-store"))]
    fn open_url(url: &str, _opts: Options) -> Result<Db> {
        Err(Error::NotAStore {
            path: url.to_string(),
            reason: "this build of kivi has no object-store support \
                     (the kivi-db crate's feature object-store)"
                .into(),
        })
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
        let clock = opts.clock.clone();
        let inner = Self::build(storage, path.clone(), opts, is_empty)?;
        Ok(Db {
            handle: Arc::new(Handle {
                inner: ArcSwap::new(inner),
                path,
                clock,
                promoting: parking_lot::Mutex::new(()),
            }),
        })
    }

    /// The store's owners, recovered from `storage`.
    fn build(
        storage: Arc<dyn Storage>,
        path: String,
        opts: Options,
        is_empty: &dyn Fn() -> Result<bool>,
    ) -> Result<Arc<Inner>> {
        let identity = identity::load_or_create(
            storage.as_ref(),
            &path,
            is_empty,
            opts.create_if_missing && !opts.read_only,
        )?;
        let store_id = identity.id;
        let pager = Pager::new(storage.clone(), opts.cache_bytes);
        let tree_cfg = TreeConfig::for_page_size(opts.page_size);
        let rec = recover(&storage, &pager, store_id, identity.format)?;
        let read_only = opts.read_only;
        let ids = Arc::new(SegmentIds::after(rec.max_segment_id));
        let pacer = Arc::new(Pacer::new());
        let syncs = Arc::new(SyncTimes::default());
        let (writer, pages) = if opts.read_only {
            (None, None)
        } else {
            // After recovery checked the identity against the segments,
            // before anything is written.
            identity::upgrade(storage.as_ref(), identity)?;
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
                pacer.clone(),
                syncs.clone(),
            );
            let pages = PageLog::new(
                storage.clone(),
                ids.clone(),
                store_id,
                opts.segment_bytes,
                rec.page_end,
                rec.page_segments.clone(),
                pacer.clone(),
                syncs.clone(),
            );
            (Some(Writer::new(log, rec.version.visible_seq)), Some(pages))
        };
        let checkpointer = Checkpointer::new(
            pages,
            rec.checkpoint.as_ref().map_or(0, unreferenced_below),
            rec.checkpoint.as_ref().map_or(0, |c| c.replay_from),
        );
        let follower =
            read_only.then(|| Arc::new(Follower::new(rec.log_end, rec.version.visible_seq)));
        let version = rec.version;
        let counters = Counters::after_open(rec.checkpoint.map(|c| (c.tree_bytes, c.seq)));
        let opened = OpenReport {
            torn_tail: rec.torn_tail,
            replayed: rec.replayed,
            damage: rec.damage.iter().map(|c| c.to_string()).collect(),
        };
        let commit_wait = opts.commit_wait;
        // Without fsync nothing waits for a sync: groups commit whole.
        let syncs_in_flight = match opts.durability {
            crate::options::Durability::Fsync => storage.syncs_in_flight(),
            _ => 1,
        };
        let store = Store::new(
            path, storage, pager, tree_cfg, opts, store_id, version, counters, opened,
        );
        let inner = Arc::new(Inner {
            store: Arc::new(store),
            commit: CommitPath::new(writer, commit_wait, syncs_in_flight),
            checkpointer,
            backpressure: Backpressure::new(pacer),
            background: Background::default(),
            syncs,
            follower,
        });
        if !read_only {
            let me = inner.clone();
            inner.background.start(move || {
                background::run(&me.store, &me.commit, &me.checkpointer, &me.backpressure)
            });
        }
        Ok(inner)
    }

    /// Opens, read-only, the store at `path` (an object store's URL, as
    /// [`Db::open`] takes it) that another process writes, and *follows*
    /// it: a thread polls the writer's log (on an object store, one GET
    /// when nothing is new) and makes its commits visible here as they
    /// appear, whole and in order ([`Db::follower_status`] says how far
    /// behind it is). Writes fail with [`Error::ReadOnly`]. The polls
    /// follow each other at once while they find commits, else after a
    /// pause that doubles from 1 ms up to [`Options::follow_interval`].
    ///
    /// A store on a local directory cannot be followed (the writer's
    /// appends there are visible before they are durable).
    pub fn follow(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let db = Db::open(
            path,
            Options {
                read_only: true,
                ..opts
            },
        )?;
        db.start_following()?;
        Ok(db)
    }

    /// [`Db::follow`] on any storage backend that can be followed (an
    /// object store's, opened read-only).
    pub fn follow_with_storage(storage: Arc<dyn Storage>, opts: Options) -> Result<Db> {
        let db = Db::open_with_storage(
            storage,
            Options {
                read_only: true,
                ..opts
            },
        )?;
        db.start_following()?;
        Ok(db)
    }

    fn start_following(&self) -> Result<()> {
        let inner = self.inner();
        let follower = inner
            .follower
            .as_ref()
            .expect("a read-only open has a follower");
        // Fails at once on storage that cannot be followed.
        inner.store.storage().refresh(false)?;
        follower.start(
            Arc::downgrade(&inner.store),
            Arc::downgrade(follower),
            self.follow_plan(inner.store.opts()),
        );
        Ok(())
    }

    /// How the follower's thread polls, and takes over (through a handle
    /// that does not keep the store open).
    fn follow_plan(&self, opts: &Options) -> crate::follower::Plan {
        let handle = Arc::downgrade(&self.handle);
        crate::follower::Plan {
            interval: opts.follow_interval,
            take_over_after: opts.take_over_after,
            take_over: Box::new(move || match handle.upgrade() {
                Some(handle) => Db { handle }.promote_on_lease(),
                None => Err(Error::Closed),
            }),
        }
    }

    /// For a store opened read-only beside its writer (on an object store;
    /// [`Db::follow`] does this all the time): makes every commit the
    /// writer has made durable so far visible here, and returns the last
    /// one's sequence number. Fails with [`Error::ReadOnly`] on a store
    /// opened for writing, which is never behind.
    pub fn catch_up(&self) -> Result<u64> {
        let inner = self.inner();
        match &inner.follower {
            Some(f) => f.catch_up(&inner.store),
            None => Err(Error::ReadOnly),
        }
    }

    /// Makes this read-only open of a store on an object store (a
    /// follower, [`Db::follow`]) the store's writer: a *takeover*. Reads
    /// the writer's log to its end, fences it there, so that the writer
    /// there was (alive, paused or gone) can make nothing more durable
    /// (its next commit fails and it writes no more), and from then on
    /// this `Db` and all its clones accept writes, as an open for writing
    /// with the same options would. Every commit the old writer
    /// acknowledged is here. The local caches stay: the state is recovered
    /// from the object cache, not fetched again. Snapshots and iterators
    /// made before go on reading what they read.
    ///
    /// Fails with [`Error::NotAFollower`] on a store opened for writing;
    /// if it fails otherwise, the store goes on following (whether the
    /// fence was made or not: a fenced writer stops writing either way).
    pub fn promote(&self) -> Result<()> {
        self.promote_holding(self.handle.promoting.lock())
    }

    /// A standby's takeover, on its polling thread, once the writer's
    /// lease went unrenewed. A promote already under way (`REPLICAOF NO
    /// ONE` sent as the lease ran out) stops this thread and waits for it
    /// to end: waiting here for that promote's lock would wait forever
    /// (two standbys of the safety campaign did). That promote takes over
    /// instead.
    fn promote_on_lease(&self) -> Result<()> {
        match self.handle.promoting.try_lock() {
            Some(one) => self.promote_holding(one),
            None => Ok(()),
        }
    }

    /// `promote`, once this is the one promote under way (`_one`).
    /// A failure before the fence leaves it a follower; one after it (the
    /// store could not be opened as its writer) steps the storage down to
    /// a follower's again ([`Storage::step_down`]), so that it follows on
    /// and its lease, unrenewed, lets a standby take over.
    fn promote_holding(&self, _one: parking_lot::MutexGuard<'_, ()>) -> Result<()> {
        let old = self.handle.inner.load_full();
        let Some(follower) = old.follower.clone() else {
            return Err(Error::NotAFollower);
        };
        let started = std::time::Instant::now();
        follower.stop();
        let stopped = started.elapsed();
        let storage = old.store.storage().clone();
        let opts = Options {
            read_only: false,
            create_if_missing: false,
            ..old.store.opts().clone()
        };
        let mut fenced = std::time::Duration::ZERO;
        let built = storage.take_over().map_err(Error::from).and_then(|()| {
            fenced = started.elapsed();
            let probe = storage.clone();
            let is_empty = move || -> Result<bool> { Ok(probe.list_segments()?.is_empty()) };
            // The role is this store's now: opening it as the writer is
            // tried again on a failure (a standby racing this one, fenced
            // but not knowing it yet, deletes at its own open what it
            // takes for garbage, which this open may be reading). If it
            // still fails, the role is given up below.
            let mut tries = 0;
            loop {
                tries += 1;
                match Self::build(storage.clone(), self.handle.path.clone(), opts.clone(), &is_empty) {
                    Ok(inner) => return Ok(inner),
                    Err(e) if tries < BUILD_TRIES && !storage.is_fenced() => {
                        tracing::warn!(
                            store = %self.handle.path,
                            error = %e,
                            "took the writer's role, but opening the store as its writer failed; trying again"
                        );
                        std::thread::sleep(BUILD_RETRY_PAUSE);
                    }
                    Err(e) => {
                        tracing::error!(
                            store = %self.handle.path,
                            error = %e,
                            "took the writer's role, but could not open the store as its writer: \
                             giving the role up and following again"
                        );
                        storage.step_down();
                        return Err(e);
                    }
                }
            }
        });
        match built {
            Ok(inner) => {
                self.handle.inner.store(inner);
                tracing::info!(
                    store = %self.handle.path,
                    stopped_following_ms = stopped.as_millis() as u64,
                    fenced_ms = fenced.as_millis() as u64,
                    writing_ms = started.elapsed().as_millis() as u64,
                    "took over as the writer"
                );
                Ok(())
            }
            Err(e) => {
                follower.restart(
                    Arc::downgrade(&old.store),
                    Arc::downgrade(&follower),
                    self.follow_plan(old.store.opts()),
                );
                Err(e)
            }
        }
    }

    /// For the writer of a store on an object store: what its lease tells
    /// followers besides who it is (`kivi serve` announces the address its
    /// clients reach it at; a follower's [`FollowerStatus::writer_note`]).
    /// A follower keeps it for when it takes over. Does nothing on a local
    /// directory.
    pub fn announce(&self, note: &str) {
        self.store().storage().announce(note);
    }

    /// Whether this writer was displaced by another (on an object store:
    /// a takeover fenced it): it writes no more, and what it reads may be
    /// behind the new writer. Cheap.
    pub fn is_fenced(&self) -> bool {
        self.store().storage().is_fenced()
    }

    /// Whether this is still the store's writer, asked of the storage
    /// rather than remembered: on an object store, one or two requests
    /// that find a takeover this writer has not met yet (it was idle or
    /// paused), after which it is fenced ([`Db::is_fenced`]). False for a
    /// follower or any read-only open. For answering who the writer is
    /// (ROLE, INFO), not for every command.
    pub fn confirm_writer(&self) -> bool {
        let store = self.store();
        !store.opts().read_only && store.storage().confirm_writer()
    }

    /// The lease of the store's writer as it stands now (one request; on
    /// an object store): for a writer that was fenced, where the new one
    /// is. `None` where there is none.
    pub fn writer_lease(&self) -> Result<Option<kivi_storage::WriterLease>> {
        Ok(self.store().storage().writer_lease()?)
    }

    /// Whether this is a follower: a read-only open that has not taken over.
    pub fn is_follower(&self) -> bool {
        self.inner().follower.is_some()
    }

    /// How a store opened read-only stands against its writer (`None` for
    /// a store opened for writing).
    pub fn follower_status(&self) -> Option<FollowerStatus> {
        self.inner().follower.as_ref().map(|f| f.status())
    }

    fn inner(&self) -> Guard<Arc<Inner>> {
        self.handle.inner.load()
    }

    /// What every part shares (for `stats` and `check`).
    pub(crate) fn store(&self) -> Part<Store> {
        Part {
            guard: self.inner(),
            get: |i| &i.store,
        }
    }

    /// The commit path (for `stats`).
    pub(crate) fn commit_path(&self) -> Part<CommitPath> {
        Part {
            guard: self.inner(),
            get: |i| &i.commit,
        }
    }

    /// The checkpointer (for `stats` and `check`).
    pub(crate) fn checkpointer(&self) -> Part<Checkpointer> {
        Part {
            guard: self.inner(),
            get: |i| &i.checkpointer,
        }
    }

    /// How long the store's fdatasyncs took since open, in nanoseconds, by
    /// log: the commit log's (one per durable group commit) and the page
    /// log's (one per checkpoint). Cheap: no segment is looked at.
    pub fn sync_times(&self) -> SyncTimesSnapshot {
        let inner = self.inner();
        let s = &inner.syncs;
        SyncTimesSnapshot {
            commit_log: s.commit_log.snapshot(),
            page_log: s.page_log.snapshot(),
        }
    }

    /// The value stored under `key`: `None` if it was never written, was
    /// deleted, or its deadline passed. Sees every write that returned
    /// before it was called; never waits for a commit.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = kivi::Db::open(dir.path(), kivi::Options::default())?;
    /// db.put(b"greeting", b"hello")?;
    /// assert_eq!(db.get(b"greeting")?.as_deref(), Some(&b"hello"[..]));
    /// db.delete(b"greeting")?;
    /// assert_eq!(db.get(b"greeting")?, None);
    /// # Ok::<(), kivi::Error>(())
    /// ```
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Reads the value under `key` into `out` (reusing its allocation);
    /// `Ok(false)` when absent.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        Ok(self.read_live(key, out)?.is_some())
    }

    /// The value stored under `key` and its deadline (`None`: it never
    /// expires).
    pub fn get_with_deadline(&self, key: &[u8]) -> Result<Option<(Vec<u8>, Option<Deadline>)>> {
        let mut out = Vec::new();
        let found = self.read_live(key, &mut out)?;
        Ok(found.map(|d| (out, Deadline::from_millis(d))))
    }

    fn read_live(&self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Millis>> {
        if key.len() > MAX_KEY_LEN {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                max: MAX_KEY_LEN,
            });
        }
        let store = self.store();
        store.read_live(&store.current(), key, out)
    }

    /// The clock this store decides expiry by ([`Options::clock`]).
    pub fn clock(&self) -> &Clock {
        &self.handle.clock
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
        let store = self.store();
        let v = store.current();
        let now = store.clock_now();
        if let [key] = keys {
            // Nothing to overlap: the plain lookup, without the passes'
            // bookkeeping.
            let mut out = Vec::new();
            let found_it = store.read_live(&v, key, &mut out)?;
            let _ = found(0, found_it.map(|_| out.as_slice()));
            return Ok(());
        }
        // The write buffer answers the keys written since the tree under
        // it; the tree, the others. Expired values are absent.
        fn live(value: Option<Stored<'_>>, now: Millis) -> Option<&[u8]> {
            value.filter(|&(_, d)| is_live(d, now)).map(|(v, _)| v)
        }
        let buffered: Vec<Option<Option<&[u8]>>> = keys
            .iter()
            .map(|k| v.buffer.find(k).map(|w| live(w, now)))
            .collect();
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
            Some(root) => get_each(store.pager(), root, &tree_keys, &mut |t, value| {
                answer(in_tree[t], live(value, now))
            })?,
            None => in_tree.iter().try_for_each(|&i| answer(i, None)),
        };
        if flow.is_continue() {
            // The buffered keys after the last one the tree answered.
            let _ = answer(keys.len(), None);
        }
        Ok(())
    }

    /// Stores `value` under `key`, replacing what it held (and its
    /// deadline); durable when it returns (see [`Durability`]). Concurrent
    /// writers share commits. Fails on a key over
    /// [`MAX_KEY_LEN`](crate::limits::MAX_KEY_LEN) or a value over
    /// [`MAX_VALUE_LEN`](crate::limits::MAX_VALUE_LEN) bytes.
    ///
    /// [`Durability`]: crate::Durability
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.write(b).map(|_| ())
    }

    /// Stores `value` under `key` until `deadline` (after it the key is
    /// absent; `None`: never); durable when it returns. A key lives through
    /// the millisecond of its deadline, by the store's [`Clock`].
    ///
    /// ```
    /// use kivi::{Clock, Db, Options};
    /// use std::time::Duration;
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// let clock = Clock::manual(1_700_000_000_000); // tests move time by hand
    /// let db = Db::open(dir.path(), Options { clock: clock.clone(), ..Options::default() })?;
    /// let deadline = db.clock().after(Duration::from_secs(60));
    /// db.put_with_deadline(b"session", b"token", Some(deadline))?;
    /// assert_eq!(db.get_with_deadline(b"session")?, Some((b"token".to_vec(), Some(deadline))));
    ///
    /// clock.advance(Duration::from_secs(61));
    /// assert_eq!(db.get(b"session")?, None); // expired: absent to every read
    /// # Ok::<(), kivi::Error>(())
    /// ```
    ///
    /// [`Clock`]: crate::Clock
    pub fn put_with_deadline(
        &self,
        key: &[u8],
        value: &[u8],
        deadline: Option<Deadline>,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value)?.with_deadline(deadline)?;
        self.write(b).map(|_| ())
    }

    /// Deletes every key, as one commit: durable when it returns, and after
    /// a crash either all of it happened or none. Costs one small record
    /// whatever the store holds; the space comes back with the next
    /// checkpoint and the cleaner. Snapshots taken before still see
    /// everything.
    pub fn clear(&self) -> Result<()> {
        self.write(WriteBatch::clear_all()).map(|_| ())
    }

    /// Removes `key` (nothing happens if it is absent).
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.write(b).map(|_| ())
    }

    /// Applies a batch atomically; durable when it returns. Returns
    /// [`WriteOutcome::ConditionFailed`] (and applies nothing) if a
    /// conditional operation's condition does not hold; an error means the
    /// batch was not applied (after a crash it may still appear whole,
    /// never in part). See [`WriteBatch`] for an example.
    ///
    /// [`WriteOutcome::ConditionFailed`]: crate::WriteOutcome::ConditionFailed
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
        self.write_each_in_order(batches, || {})
    }

    /// [`write_each`](Self::write_each), calling `queued` once every batch
    /// has its place in the commit queue, before any is committed: batches
    /// queued by any thread after that are applied after these. Several
    /// threads can so keep commits in flight at once (see
    /// [`commits_in_flight`](Self::commits_in_flight)) and still apply
    /// their batches in the order a lock around the queueing gives them.
    pub fn write_each_in_order(
        &self,
        batches: Vec<WriteBatch>,
        queued: impl FnOnce(),
    ) -> Vec<Result<WriteOutcome>> {
        let inner = self.inner();
        if inner.store.is_closed() {
            queued();
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
        let mut replies = if requests.is_empty() {
            queued();
            Vec::new()
        } else {
            inner.commit.submit_many(
                &inner.store,
                &inner.backpressure,
                requests,
                Some(Box::new(queued)),
            )
        }
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
    /// `expected` (an absent or expired key never does), atomically and
    /// durably. Returns whether it did. The new value has no deadline.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = kivi::Db::open(dir.path(), kivi::Options::default())?;
    /// db.put(b"counter", b"1")?;
    /// assert!(db.compare_and_swap(b"counter", b"1", b"2")?);
    /// assert!(!db.compare_and_swap(b"counter", b"1", b"3")?); // it holds 2 now
    /// assert_eq!(db.get(b"counter")?.as_deref(), Some(&b"2"[..]));
    /// # Ok::<(), kivi::Error>(())
    /// ```
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
    /// writers; it keeps the pages it sees alive until dropped (so a
    /// snapshot held for long holds space the cleaner cannot reclaim).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = kivi::Db::open(dir.path(), kivi::Options::default())?;
    /// db.put(b"a", b"1")?;
    /// let snapshot = db.snapshot();
    /// db.put(b"a", b"2")?;
    /// db.put(b"b", b"3")?;
    /// assert_eq!(snapshot.get(b"a")?.as_deref(), Some(&b"1"[..]));
    /// assert_eq!(snapshot.len()?, 1);
    /// assert_eq!(db.get(b"a")?.as_deref(), Some(&b"2"[..]));
    /// # Ok::<(), kivi::Error>(())
    /// ```
    pub fn snapshot(&self) -> Snapshot {
        let store = &self.inner().store;
        Snapshot::new(store.clone(), store.current_full())
    }

    /// Pairs with keys in `range`, in key order; `.rev()` for descending order.
    /// Reads a consistent snapshot taken when it is called. Each item is an
    /// owned `(key, value)` pair, or the error that ends the iteration (a
    /// damaged page); [`Db::scan`] borrows instead of copying.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = kivi::Db::open(dir.path(), kivi::Options::default())?;
    /// for (k, v) in [("user:1", "ada"), ("user:2", "grace"), ("zone:1", "eu")] {
    ///     db.put(k.as_bytes(), v.as_bytes())?;
    /// }
    /// let users: Vec<(Vec<u8>, Vec<u8>)> = db
    ///     .range(b"user:".as_slice()..b"user;".as_slice()) // ';' follows ':'
    ///     .rev()
    ///     .collect::<kivi::Result<_>>()?;
    /// assert_eq!(users[0], (b"user:2".to_vec(), b"grace".to_vec()));
    /// assert_eq!(users.len(), 2);
    /// # Ok::<(), kivi::Error>(())
    /// ```
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
            inner.checkpointer.delete_retired(&inner.store);
            if inner.store.counters().retiring_segments() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Ok(())
    }

    /// Closes the store: a final checkpoint if at least 1 MiB of commits
    /// (or 8 commit segments) came since the last one, so the next open
    /// replays little; then every file closed. Other clones of this handle see [`Error::Closed`] afterwards.
    pub fn close(self) -> Result<()> {
        self.inner().shutdown()
    }

    /// How many group commits may be in flight at once: 1 on a local
    /// directory (each waits for its fdatasync before the next is
    /// prepared), more on an object store, where each commit is a request
    /// and the next ones are prepared while it travels.
    pub fn commits_in_flight(&self) -> usize {
        self.inner().commit.max_in_flight()
    }

    /// Where the store lives, as given when it was opened.
    pub fn path(&self) -> &str {
        &self.handle.path
    }

    /// Drops every cached page (for measuring cold reads).
    pub fn clear_cache(&self) {
        self.store().pager().clear_cache();
    }
}

impl Inner {
    fn submit(&self, request: Request) -> Result<Reply> {
        self.commit.submit(&self.store, &self.backpressure, request)
    }

    fn run_checkpoint(&self, kind: CheckpointKind) -> Result<bool> {
        self.checkpointer
            .run(&self.store, &self.commit, &self.backpressure, kind)
    }

    /// Stops the background work (after a final checkpoint) and refuses
    /// further writes. Idempotent.
    fn shutdown(&self) -> Result<()> {
        if self.store.is_closed() {
            return Ok(());
        }
        let result = self.background.stop(&self.backpressure);
        if let Some(f) = &self.follower {
            self.store.mark_closed();
            f.stop();
        }
        let mut result = match result {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        };
        self.store.mark_closed();
        // Taking the writer lock, so no group is half-done when we return.
        if let Err(e) = self.commit.sync_log() {
            result = Err(e);
        }
        result
    }
}
