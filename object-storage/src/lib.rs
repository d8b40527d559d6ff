//! kivi's object-store backend: a store's segments as immutable objects on
//! S3 or any S3-compatible service (through the `object_store` crate, whose
//! in-memory and local-filesystem stores serve for tests), with exactly one
//! writer at a time.
//!
//! [`ObjectStorage`] implements [`kivi_storage::Storage`], so the engine runs
//! on it unchanged:
//!
//! - **Commit segments live in the log**, a sequence of numbered objects
//!   created only if absent (`PUT` with `If-None-Match: *`). Syncing a
//!   commit segment puts one log entry holding the bytes appended since the
//!   last sync: one group commit is one conditional put, acknowledged only
//!   once the object exists. Creating and deleting a commit segment are log
//!   entries too.
//! - **Fencing**: a writer that opens the store reads the log to its end (the
//!   first number with no object; no listing decides it) and creates the
//!   object there: a *fence*. The writer it displaces, whatever it was doing,
//!   next puts at a number the fence or its successors already hold, fails,
//!   and stops writing for good. Fences are never deleted.
//! - **Page segments** are *chunks*, objects named by their offset, written
//!   as the segment fills and when it is synced, beside a marker object that
//!   says the segment exists.
//! - **A bounded cache on local disk** ([`DiskCache`]) holds blocks of
//!   objects written and read, so reads of recent data make no request.
//!
//! The format of every object is in `format.rs`; ARCHITECTURE.md gives the
//! protocol and what a crash or a pause at each step leaves.

#![warn(missing_docs)]

mod cache;
#[cfg(feature = "faults")]
pub mod faults;
mod flight;
mod format;
mod lease;
mod remote;

pub use cache::DiskCache;

use bytes::Bytes;
use flight::{PutCell, Putters, MAX_IN_FLIGHT};
use format::{Entry, EntryKind, PageObject, CHUNK_HEADER, DEAD_ZONE, LOG_HEADER};
use kivi_storage::{
    segment_file_name, Corruption, Error, IoError, PendingSync, Refreshed, RemoteRequests,
    SegmentId, SegmentReader, SegmentWriter, StepHook, Storage, WriterLease,
};
use object_store::ObjectStore;
use parking_lot::{Mutex, RwLock};
use remote::{other, Created, Remote};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Bytes of a page segment gathered before they are put as one chunk. Page
/// segments are synced once per checkpoint, so most chunks are this size.
pub const PAGE_CHUNK: usize = 8 << 20;

/// The meta blob every store has (the engine's identity), whose absence
/// with no log and no segments means there is no store under the prefix.
const IDENTITY: &str = "KIVI";

/// Log entries fetched at once while a store opens.
const READ_AHEAD: usize = 32;

/// Numbers a new writer puts its fence at, at once (see `Inner::fence`):
/// more than a busy writer it displaces adds in a round trip, and within
/// the dead zone, where the ones after the fence must lie.
const FENCE_WINDOW: u64 = 32;
const _: () = assert!(FENCE_WINDOW <= DEAD_ZONE && FENCE_WINDOW > MAX_IN_FLIGHT as u64);

/// Log entries a follower fetches at once while the log goes on.
const FOLLOW_AHEAD: u64 = 8;

/// Rounds of asking whether a put whose answer was lost landed
/// (`Inner::settle_lost`), and the pause before the second (doubling):
/// 150 ms in all, on top of each round's own tries.
const SETTLE_ROUNDS: u32 = 3;
const SETTLE_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// How a store on an object store is opened.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the local cache keeps its blocks (emptied at open); a temporary
    /// directory when `None`.
    pub cache_dir: Option<PathBuf>,
    /// The most bytes the local cache holds.
    pub cache_bytes: u64,
    /// Open without claiming the writer's role: nothing is written, no
    /// writer is fenced.
    pub read_only: bool,
    /// How long to wait before trying a failed request again (twice as
    /// long before each further try; 4 tries in all, on top of the
    /// client's own retries).
    pub retry_delay: std::time::Duration,
    /// Whether a writable open of a prefix that holds nothing may start a
    /// store there (else it fails with `NotFound`, writing nothing).
    pub create_if_missing: bool,
    /// How long a writer keeps the page segments its checkpoints no longer
    /// reference before deleting them, for followers still reading the
    /// tree before (default 10 s; see `Storage::retired_grace`).
    pub retired_grace: std::time::Duration,
    /// Whether a writer renews its lease (`lease.rs`) every second: what a
    /// standby watches. Off only where nobody follows and requests are
    /// counted one by one (tests).
    pub renew_lease: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cache_dir: None,
            cache_bytes: 1 << 30,
            read_only: false,
            retry_delay: std::time::Duration::from_millis(20),
            create_if_missing: true,
            retired_grace: std::time::Duration::from_secs(10),
            renew_lease: true,
        }
    }
}

/// A store on an object store. See the crate's documentation.
#[derive(Debug, Clone)]
pub struct ObjectStorage {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    remote: Arc<Remote>,
    /// The threads putting log entries in flight, started by the first.
    putters: OnceLock<Putters>,
    cache: DiskCache,
    /// This process's random id, in everything it writes.
    writer: [u8; 16],
    /// Opened read-only (a follower), until it takes over (`take_over`).
    read_only: AtomicBool,
    create_if_missing: bool,
    retired_grace: std::time::Duration,
    renew_lease: bool,
    /// `LogState::fenced` is set: read on every command by a server, so
    /// without the log's lock.
    fenced_flag: AtomicBool,
    /// What this writer's lease says besides who it is (`announce`).
    lease_note: Mutex<String>,
    /// Whether the lease thread runs (it ends once this open is no longer
    /// the writer, and a later takeover starts it again).
    lease_running: AtomicBool,
    log: Mutex<LogState>,
    /// Every segment there is, by id.
    segments: RwLock<BTreeMap<SegmentId, Arc<Segment>>>,
}

#[derive(Debug, Default)]
struct LogState {
    /// This writer's fence: its epoch.
    epoch: u64,
    /// The number the next entry is put at.
    next: u64,
    /// Set once another writer fenced this one: why writes fail.
    fenced: Option<String>,
    /// The oldest number still read at open: the newest `start/` object's,
    /// or 0 when there is none (a trim never marks 0).
    start: u64,
    /// Entries (and stray objects) known at `start` or later, for deleting
    /// the ones no live segment needs; fences are never deleted.
    present: BTreeMap<u64, EntryKind>,
    /// Each live commit segment's `Create` entry.
    created_at: BTreeMap<SegmentId, u64>,
    /// Entries put without waiting (commit segments' syncs), oldest first,
    /// not yet retired (see `flight.rs`).
    flight: VecDeque<InFlight>,
    /// An entry in flight failed at this number (or its put landed and the
    /// answer was lost): before anything more is put, the log is fenced
    /// again from here (`Inner::refence`).
    failed_from: Option<u64>,
}

/// A log entry whose put is in flight.
#[derive(Debug)]
struct InFlight {
    n: u64,
    cell: Arc<PutCell>,
    seg: Arc<Segment>,
    /// Where its payload starts in the segment.
    offset: u64,
    /// The whole object, for the cache once it is known to exist.
    object: Bytes,
}

impl std::fmt::Debug for PutCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PutCell")
    }
}

/// What a segment is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Commit,
    Page,
}

#[derive(Debug)]
struct Segment {
    id: SegmentId,
    kind: Kind,
    bytes: RwLock<SegmentBytes>,
    /// A put of its data failed: nothing more is written to it.
    broken: AtomicBool,
}

#[derive(Debug, Default)]
struct SegmentBytes {
    /// The stored pieces, in offset order, without gaps.
    chunks: Vec<Chunk>,
    /// Bytes appended after the last chunk, not stored yet.
    pending: Vec<u8>,
    /// The payloads of chunks whose log entries are in flight, by offset:
    /// read from here until the entry is known to exist.
    unconfirmed: BTreeMap<u64, Bytes>,
}

impl SegmentBytes {
    fn stored_len(&self) -> u64 {
        self.chunks.last().map_or(0, |c| c.offset + c.len)
    }
}

#[derive(Debug, Clone)]
struct Chunk {
    /// Where its payload starts in the segment.
    offset: u64,
    len: u64,
    /// For a commit segment, the log entry holding it; a page segment's
    /// chunk is named by its segment and offset. (A commit segment may
    /// hold hundreds of thousands of small commits: 24 bytes each here.)
    log_entry: Option<u64>,
}

impl Chunk {
    /// The object holding the chunk, and where its payload starts in it.
    fn object(&self, segment: SegmentId) -> (String, u64) {
        match self.log_entry {
            Some(n) => (format::log_name(n), LOG_HEADER as u64),
            None => (
                format::chunk_name(segment, self.offset),
                CHUNK_HEADER as u64,
            ),
        }
    }
}

fn read_only_error(op: &'static str, target: String) -> IoError {
    IoError::new(
        op,
        target,
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the store is open read-only",
        ),
    )
}

impl ObjectStorage {
    /// Opens the store at `url`: `s3://bucket/prefix` (endpoint, region and
    /// credentials from the usual `AWS_*` variables: `AWS_ENDPOINT`,
    /// `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_ALLOW_HTTP`), `file:///path` or `memory://` (a fresh, empty
    /// store of this process's own). With [`REQUEST_DELAY_VAR`] set, every
    /// request waits that long first.
    pub fn open_url(url: &str, config: Config) -> Result<ObjectStorage, Error> {
        let bad = |why: String| {
            Error::Io(IoError::new(
                "open",
                url.to_string(),
                io::Error::new(io::ErrorKind::InvalidInput, why),
            ))
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(format!("not a URL: {e}")))?;
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match parsed.scheme() {
            "s3" => {
                let bucket = parsed
                    .host_str()
                    .ok_or_else(|| bad("an s3 URL names a bucket: s3://bucket/prefix".into()))?;
                let s3 = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|e| bad(e.to_string()))?;
                (Arc::new(s3), parsed.path().trim_matches('/').to_string())
            }
            "file" => {
                let fs = object_store::local::LocalFileSystem::new();
                (Arc::new(fs), parsed.path().trim_matches('/').to_string())
            }
            "memory" => (
                Arc::new(object_store::memory::InMemory::new()),
                parsed.path().trim_matches('/').to_string(),
            ),
            other => return Err(bad(format!("no object store for scheme {other}:"))),
        };
        let store = match request_delay().map_err(bad)? {
            None => store,
            Some(d) => Arc::new(object_store::throttle::ThrottledStore::new(
                store,
                object_store::throttle::ThrottleConfig {
                    wait_put_per_call: d,
                    wait_get_per_call: d,
                    wait_delete_per_call: d,
                    wait_list_per_call: d,
                    wait_list_with_delimiter_per_call: d,
                    ..Default::default()
                },
            )),
        };
        Self::open(store, &prefix, url.trim_end_matches('/'), config)
    }

    /// Opens the store under `prefix` in `store`; `label` names it in
    /// messages. A writable open reads the log to its end and fences it:
    /// from here on, any other writer's next commit fails.
    pub fn open(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        label: &str,
        config: Config,
    ) -> Result<ObjectStorage, Error> {
        let prefix = object_store::path::Path::from(prefix);
        let remote = Arc::new(Remote::new(
            store,
            prefix,
            label.to_string(),
            config.retry_delay,
        )?);
        let cache = DiskCache::new(config.cache_dir.as_deref(), config.cache_bytes)
            .map_err(|e| IoError::new("open the cache in", format!("{:?}", config.cache_dir), e))?;
        let inner = Arc::new(Inner {
            remote,
            putters: OnceLock::new(),
            cache,
            writer: rand::random(),
            read_only: AtomicBool::new(config.read_only),
            create_if_missing: config.create_if_missing,
            retired_grace: config.retired_grace,
            renew_lease: config.renew_lease,
            fenced_flag: AtomicBool::new(false),
            lease_note: Mutex::new(String::new()),
            lease_running: AtomicBool::new(false),
            log: Mutex::new(LogState::default()),
            segments: RwLock::new(BTreeMap::new()),
        });
        inner.load()?;
        if !config.read_only {
            Inner::start_lease(&inner);
        }
        Ok(ObjectStorage { inner })
    }

    /// Requests made and bytes moved since the store was opened, and the
    /// local cache's work.
    pub fn requests(&self) -> RemoteRequests {
        let (cache_hits, cache_misses) = self.inner.cache.hits_and_misses();
        RemoteRequests {
            cache_hits,
            cache_misses,
            cache_bytes: self.inner.cache.bytes(),
            ..self.inner.remote.counters.snapshot()
        }
    }

    /// The local cache.
    pub fn cache(&self) -> &DiskCache {
        &self.inner.cache
    }

    /// A storage error as an I/O error of `op` (damage found while reading
    /// the log: invalid data).
    fn as_io(&self, op: &'static str, e: Error) -> IoError {
        match e {
            Error::Io(e) => e,
            Error::Corrupt(c) => IoError::new(
                op,
                self.inner.remote.label.clone(),
                io::Error::new(io::ErrorKind::InvalidData, c.to_string()),
            ),
        }
    }

    /// Why this writer can no longer write, once another writer fenced it.
    pub fn fenced(&self) -> Option<String> {
        self.inner.log.lock().fenced.clone()
    }

    /// For a read-only open (a follower): takes the writer's role. Reads
    /// the log to its end and fences it there, exactly as a writable open
    /// does: the writer it displaces fails its next commit and writes no
    /// more. Afterwards this storage writes. Nothing changes if it already
    /// does.
    pub fn take_over(&self) -> Result<(), Error> {
        self.inner.take_over()?;
        Inner::start_lease(&self.inner);
        Ok(())
    }

    /// For a read-only open: reads the log entries the writer put since
    /// the open or the last call, so that commit segments grow, appear and
    /// go as they did for the writer; `list` also lists the page segments
    /// again (what a checkpoint wrote) and drops the commit segments the
    /// writer deleted without an entry (the log's oldest, when its start
    /// moved). One GET when nothing changed.
    pub fn refresh(&self, list: bool) -> Result<Refreshed, Error> {
        if !self.inner.read_only() {
            return Err(Error::Io(IoError::new(
                "follow",
                self.inner.remote.label.clone(),
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "only a read-only open follows a writer",
                ),
            )));
        }
        self.inner.refresh(list)
    }
}

/// Milliseconds since the Unix epoch, for stamping log entries.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The environment variable that delays every request of a store opened
/// by URL, for measuring what a distant service's round trips do (S3
/// Standard answers a small put in about 30 ms; a local server in 1).
pub const REQUEST_DELAY_VAR: &str = "KIVI_OBJECT_DELAY_MS";

/// The delay `REQUEST_DELAY_VAR` asks for, if any.
fn request_delay() -> Result<Option<std::time::Duration>, String> {
    match std::env::var(REQUEST_DELAY_VAR) {
        Err(_) => Ok(None),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(0) => Ok(None),
            Ok(ms) if ms <= 10_000 => Ok(Some(std::time::Duration::from_millis(ms))),
            _ => Err(format!(
                "{REQUEST_DELAY_VAR}={v}: a number of milliseconds up to 10000"
            )),
        },
    }
}

impl Inner {
    /// Starts the thread that renews this writer's lease every
    /// `lease::RENEW_EVERY` (see `lease.rs`) until the storage is dropped
    /// or this open is no longer the writer (fenced, or stepped down).
    fn start_lease(me: &Arc<Inner>) {
        if !me.renew_lease {
            return;
        }
        if me
            .lease_running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Still running (a writer that stepped down and took over
            // again before its thread noticed): it renews on.
            return;
        }
        let weak = Arc::downgrade(me);
        std::thread::Builder::new()
            .name("kivi-lease".into())
            .spawn(move || {
                let mut renewal = 0u64;
                // Renewals start on a fixed schedule, one every
                // `RENEW_EVERY` from the first: a slow GET and PUT under
                // load delays that renewal only, never the ones after
                // (sleeping a full period after each renewal drifted, and
                // a standby waiting 1.5 s once saw 1.5 s go by).
                let mut due = std::time::Instant::now();
                loop {
                    let Some(inner) = weak.upgrade() else { return };
                    if !inner.renew_lease(&mut renewal) {
                        inner.lease_running.store(false, Ordering::Release);
                        // A takeover between the renewal's answer and the
                        // store above found the thread running and started
                        // none: this one goes on.
                        let again = !inner.read_only()
                            && !inner.fenced_flag.load(Ordering::Acquire)
                            && inner
                                .lease_running
                                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok();
                        if !again {
                            return;
                        }
                        continue;
                    }
                    drop(inner);
                    due += lease::RENEW_EVERY;
                    let now = std::time::Instant::now();
                    if due < now {
                        // Late by more than a period: the next one now.
                        due = now;
                    }
                    // Slept in steps, so that a dropped store ends it soon.
                    while let Some(left) = due.checked_duration_since(std::time::Instant::now()) {
                        if left.is_zero() {
                            break;
                        }
                        std::thread::sleep(left.min(lease::RENEW_EVERY / 20));
                        if weak.strong_count() == 0 {
                            return;
                        }
                    }
                }
            })
            .expect("spawn the lease thread");
    }

    /// Puts this writer's lease again, unless it learns that another writer
    /// took over (then it writes no more); false once it will renew no more.
    /// A failed put is logged and tried again at the next renewal.
    fn renew_lease(&self, renewal: &mut u64) -> bool {
        if !self.confirm_writer() {
            return false;
        }
        let epoch = self.log.lock().epoch;
        *renewal += 1;
        let lease = lease::Lease {
            writer: self.writer,
            epoch,
            renewal: *renewal,
            time_ms: now_ms(),
            note: self.lease_note.lock().clone(),
        };
        if let Err(e) = self.remote.put_overwrite(lease::LEASE, lease.encode()) {
            tracing::warn!(store = %self.remote.label, error = %e, "renewing the writer's lease failed");
        }
        true
    }

    /// Whether this is still the writer, asked of the object store: false
    /// for a read-only open, a writer already fenced, or one that finds
    /// another writer's entry where its own next one belongs (a takeover it
    /// had not met yet, being idle or paused; it is fenced from then on).
    /// One GET, two while an entry's put is in flight (the oldest one's
    /// number, where a takeover that read the log before it landed put its
    /// fence). A GET that fails proves nothing either way: true.
    fn confirm_writer(&self) -> bool {
        if self.read_only() {
            return false;
        }
        let numbers = {
            let log = self.log.lock();
            if log.fenced.is_some() {
                return false;
            }
            let oldest = log.flight.front().map(|f| f.n);
            [oldest.filter(|&n| n != log.next), Some(log.next)]
        };
        for n in numbers.into_iter().flatten() {
            let name = format::log_name(n);
            if let Ok(Some(found)) = self.remote.get(&name) {
                match format::decode_entry(&found) {
                    Ok(e) if e.writer == self.writer => {}
                    found => {
                        let mut log = self.log.lock();
                        if log.fenced.is_none() {
                            let _ = self.fenced_by(&mut log, &name, found.ok());
                        }
                        return false;
                    }
                }
            }
        }
        true
    }

    fn read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire)
    }

    /// A follower becomes the writer: reads the log to its end, fences it
    /// there (the writer it displaces can commit nothing more), and from
    /// then on writes. Nothing changes for a store already writable.
    fn take_over(&self) -> Result<(), Error> {
        if !self.read_only() {
            return Ok(());
        }
        self.refresh(true)?;
        let mut log = self.log.lock();
        if !self.read_only() {
            return Ok(());
        }
        self.fence(&mut log)?;
        self.read_only.store(false, Ordering::Release);
        Ok(())
    }

    fn corrupt(&self, object: &str, what: impl Into<String>) -> Error {
        Error::Corrupt(Corruption::new(self.remote.target(object), 0, what))
    }

    /// Reads what the store holds: the page segments (one listing), the log
    /// from its start to its end (read, not listed), and, for a writer,
    /// fences the log.
    fn load(&self) -> Result<(), Error> {
        let mut log = self.log.lock();
        let mut segments = self.segments.write();
        let (epoch, n) = self.read_log(&mut log, &mut segments)?;
        log.epoch = epoch.unwrap_or(0);
        log.next = n;
        self.load_pages(&mut segments)?;
        let segments_empty = segments.is_empty();
        drop(segments);
        if !self.read_only() {
            let empty = n == 0
                && segments_empty
                && self.remote.get(&format::meta_name(IDENTITY))?.is_none();
            if empty && !self.create_if_missing {
                return Err(Error::Io(IoError::new(
                    "open",
                    self.remote.label.clone(),
                    io::Error::new(io::ErrorKind::NotFound, "no store here"),
                )));
            }
            self.fence(&mut log)?;
        }
        Ok(())
    }

    /// The newest `start/` marker, if any.
    fn newest_start(&self) -> Result<Option<u64>, IoError> {
        Ok(self
            .remote
            .list("start")?
            .into_iter()
            .filter_map(|(name, _)| name.strip_prefix("start/")?.parse::<u64>().ok())
            .max())
    }

    /// Reads the log from its start to its end into `log` and `segments`,
    /// and returns the epoch there and the end's number. While another
    /// writer still runs, it may delete old entries under the reading (its
    /// latest checkpoint covers them): a missing entry is taken for the end
    /// only if the start has not moved past it.
    fn read_log(
        &self,
        log: &mut LogState,
        segments: &mut BTreeMap<SegmentId, Arc<Segment>>,
    ) -> Result<(Option<u64>, u64), Error> {
        // The log's start: the newest `start/` object (each deletion of old
        // entries creates one first; an old writer cannot move it back).
        log.start = self.newest_start()?.unwrap_or(0);
        // Entries of earlier writers in a fence's dead zone: listed only to be deleted.
        let listed: BTreeSet<u64> = self
            .remote
            .list("log")?
            .into_iter()
            .filter_map(|(name, _)| format::parse_log_name(&name))
            .filter(|&n| n >= log.start)
            .collect();
        let mut epoch = None::<u64>;
        let mut n = log.start;
        let mut fetched: BTreeMap<u64, Option<Bytes>> = BTreeMap::new();
        loop {
            if !fetched.contains_key(&n) {
                // The listing says which entries exist; the end is still
                // found by asking for the number after them (a listing may
                // lag behind a put on some services).
                let mut want: Vec<u64> = listed.range(n..).take(READ_AHEAD).copied().collect();
                if want.first() != Some(&n) {
                    want.insert(0, n);
                }
                let names: Vec<String> = want.iter().map(|&w| format::log_name(w)).collect();
                for (w, got) in want.into_iter().zip(self.remote.get_many(&names)?) {
                    fetched.insert(w, got);
                }
            }
            let Some(bytes) = fetched.remove(&n).expect("just fetched") else {
                // The end, unless the entry was deleted under the reading:
                // then the start moved past it, and everything before the
                // new start belongs to commit segments the other writer
                // deleted (it moves the start to its oldest live segment's
                // creation). Reading goes on from there.
                match self.newest_start()? {
                    Some(start) if start > n => {
                        log.start = start;
                        log.present = log.present.split_off(&start);
                        let gone: Vec<SegmentId> = log
                            .created_at
                            .iter()
                            .filter(|(_, &at)| at < start)
                            .map(|(&id, _)| id)
                            .collect();
                        for id in gone {
                            log.created_at.remove(&id);
                            segments.remove(&id);
                        }
                        fetched.clear();
                        n = start;
                        continue;
                    }
                    _ => return Ok((epoch, n)),
                }
            };
            let (e, next) = self.take_entry(log, segments, &mut epoch, n, &bytes, true)?;
            if e.kind == EntryKind::Fence {
                for stray in listed.range(n + 1..next) {
                    log.present.insert(*stray, EntryKind::Data);
                }
            }
            n = next;
        }
    }

    /// Reads log entry `n` (`bytes`, found there) into `log` and
    /// `segments`, given the epoch so far; returns it and the number of the
    /// next entry to read (past a fence's dead zone). An earlier writer's
    /// entry that landed after a fence changes nothing. `remember`: keep
    /// the entry in `log.present` (a writer's, to delete old entries).
    fn take_entry(
        &self,
        log: &mut LogState,
        segments: &mut BTreeMap<SegmentId, Arc<Segment>>,
        epoch: &mut Option<u64>,
        n: u64,
        bytes: &Bytes,
        remember: bool,
    ) -> Result<(Entry, u64), Error> {
        let name = format::log_name(n);
        let e = format::decode_entry(bytes).map_err(|why| self.corrupt(&name, why))?;
        if remember {
            log.present.insert(n, e.kind);
        }
        if epoch.is_some_and(|cur| e.epoch < cur) {
            return Ok((e, n + 1));
        }
        *epoch = Some(e.epoch);
        self.apply(log, segments, n, &e, bytes)?;
        self.cache_object(&name, bytes);
        let next = match e.kind {
            EntryKind::Fence => n + e.offset.max(1),
            _ => n + 1,
        };
        Ok((e, next))
    }

    /// A read-only open's view of the log, moved on to where the writer's
    /// log now ends (see `ObjectStorage::refresh`). Entries are read in
    /// order, one request for the next and a few after it at once while
    /// there are more; the first number that holds nothing is the end for
    /// now. Only durable entries are ever there: a writer settles a put
    /// whose answer was lost before it reports anything
    /// (`Inner::settle_lost`), so an entry that exists and no fence's dead
    /// zone covers was acknowledged, or will be.
    fn refresh(&self, list: bool) -> Result<Refreshed, Error> {
        debug_assert!(self.read_only(), "a writer's view is its own");
        let mut log = self.log.lock();
        let mut out = Refreshed::default();
        if list {
            // Whatever the writer deleted without an entry (the log's oldest
            // segments, whose entries the start passed) goes, and page
            // segments are listed again.
            let start = self.newest_start()?.unwrap_or(0);
            if start > log.next {
                drop(log);
                return self.restart();
            }
            if start > log.start {
                log.start = start;
                log.present = log.present.split_off(&start);
                let mut segments = self.segments.write();
                let gone: Vec<SegmentId> = log
                    .created_at
                    .iter()
                    .filter(|(_, &at)| at < start)
                    .map(|(&id, _)| id)
                    .collect();
                for id in gone {
                    log.created_at.remove(&id);
                    segments.remove(&id);
                    out.changed = true;
                }
            }
            out.changed |= self.refresh_pages()?;
        }
        let mut epoch = Some(log.epoch);
        let mut n = log.next;
        let mut fetched: BTreeMap<u64, Option<Bytes>> = BTreeMap::new();
        loop {
            if !fetched.contains_key(&n) {
                // The next alone while the log seems to end there; once it
                // goes on, the ones after it too.
                let ahead = if out.changed { FOLLOW_AHEAD } else { 1 };
                let want: Vec<u64> = (n..n + ahead).collect();
                let names: Vec<String> = want.iter().map(|&w| format::log_name(w)).collect();
                for (w, got) in want.into_iter().zip(self.remote.get_many(&names)?) {
                    fetched.insert(w, got);
                }
            }
            let Some(bytes) = fetched.remove(&n).expect("just fetched") else {
                break;
            };
            let mut segments = self.segments.write();
            let (e, next) =
                self.take_entry(&mut log, &mut segments, &mut epoch, n, &bytes, true)?;
            drop(segments);
            if e.time_ms > 0 {
                out.oldest_ms.get_or_insert(e.time_ms);
                out.newest_ms = Some(e.time_ms);
            }
            out.changed = true;
            n = next;
            fetched.retain(|&k, _| k >= n);
        }
        log.epoch = epoch.unwrap_or(0);
        log.next = n;
        Ok(out)
    }

    /// A read-only open fell so far behind that the writer deleted log
    /// entries it had not read: everything is read again, as at open.
    fn restart(&self) -> Result<Refreshed, Error> {
        let mut log = self.log.lock();
        let mut segments = self.segments.write();
        *log = LogState::default();
        segments.retain(|_, s| s.kind == Kind::Page);
        let (epoch, n) = self.read_log(&mut log, &mut segments)?;
        log.epoch = epoch.unwrap_or(0);
        log.next = n;
        drop(segments);
        drop(log);
        self.refresh_pages()?;
        Ok(Refreshed {
            changed: true,
            restarted: true,
            ..Refreshed::default()
        })
    }

    /// Lists the page segments again (a read-only open's): segments that
    /// grew get their new chunks (a reader of them sees those too), new
    /// ones appear, deleted ones go. Returns whether anything changed.
    fn refresh_pages(&self) -> Result<bool, Error> {
        let commits: BTreeMap<SegmentId, Arc<Segment>> = self
            .segments
            .read()
            .iter()
            .filter(|(_, s)| s.kind == Kind::Commit)
            .map(|(&id, s)| (id, s.clone()))
            .collect();
        let mut listed = commits.clone();
        self.load_pages(&mut listed)?;
        let mut segments = self.segments.write();
        let mut changed = false;
        segments.retain(|id, s| {
            let keep = s.kind == Kind::Commit || listed.contains_key(id);
            changed |= !keep;
            keep
        });
        for (id, fresh) in listed.into_iter().filter(|(_, s)| s.kind == Kind::Page) {
            match segments.get(&id) {
                Some(have) if have.kind == Kind::Page => {
                    let fresh = fresh.bytes.read();
                    let mut b = have.bytes.write();
                    let from = b.chunks.len();
                    if fresh.chunks.len() > from
                        && fresh.chunks[..from]
                            .iter()
                            .map(|c| c.offset)
                            .eq(b.chunks.iter().map(|c| c.offset))
                    {
                        b.chunks.extend_from_slice(&fresh.chunks[from..]);
                        changed = true;
                    }
                }
                Some(_) => {}
                None => {
                    segments.insert(id, fresh);
                    changed = true;
                }
            }
        }
        Ok(changed)
    }

    /// Applies log entry `n` (valid, of the current epoch) to the segments.
    fn apply(
        &self,
        log: &mut LogState,
        segments: &mut BTreeMap<SegmentId, Arc<Segment>>,
        n: u64,
        e: &Entry,
        bytes: &Bytes,
    ) -> Result<(), Error> {
        let name = format::log_name(n);
        match e.kind {
            EntryKind::Fence => {}
            EntryKind::Create => {
                if segments.contains_key(&e.segment) {
                    return Err(self.corrupt(&name, format!("creates segment {} twice", e.segment)));
                }
                segments.insert(e.segment, Arc::new(Segment::new(e.segment, Kind::Commit)));
                log.created_at.insert(e.segment, n);
            }
            EntryKind::Data => {
                // Data of a segment deleted before the log's start is ignored.
                if let Some(seg) = segments.get(&e.segment) {
                    let mut b = seg.bytes.write();
                    if e.offset != b.stored_len() {
                        return Err(self.corrupt(
                            &name,
                            format!(
                                "appends at {} to segment {}, which holds {} bytes",
                                e.offset,
                                e.segment,
                                b.stored_len()
                            ),
                        ));
                    }
                    debug_assert_eq!(bytes.len() as u64, LOG_HEADER as u64 + e.payload_len);
                    b.chunks.push(Chunk {
                        offset: e.offset,
                        len: e.payload_len,
                        log_entry: Some(n),
                    });
                }
            }
            EntryKind::Delete => {
                segments.remove(&e.segment);
                log.created_at.remove(&e.segment);
            }
        }
        Ok(())
    }

    /// Finds the page segments: a listing of `pages/` (only at open).
    /// Chunks of a segment without its marker, or of an id the log gives a
    /// commit segment, are an unfinished deletion or a fenced writer's; a
    /// writer deletes them.
    fn load_pages(&self, segments: &mut BTreeMap<SegmentId, Arc<Segment>>) -> Result<(), Error> {
        let mut markers = BTreeSet::new();
        let mut chunks: BTreeMap<SegmentId, Vec<(u64, u64, String)>> = BTreeMap::new();
        let mut strays = Vec::new();
        for (name, size) in self.remote.list("pages")? {
            match format::parse_page_name(&name) {
                Some(PageObject::Created(id)) => {
                    markers.insert(id);
                }
                Some(PageObject::Chunk(id, offset)) => {
                    chunks.entry(id).or_default().push((offset, size, name))
                }
                None => {}
            }
        }
        for (id, mut list) in chunks {
            if !markers.contains(&id) || segments.contains_key(&id) {
                strays.extend(list.into_iter().map(|(_, _, name)| name));
                continue;
            }
            list.sort();
            let seg = Segment::new(id, Kind::Page);
            {
                let mut b = seg.bytes.write();
                for (offset, size, name) in list {
                    // A chunk past a gap was never followed by a sync.
                    if offset != b.stored_len() || size < CHUNK_HEADER as u64 {
                        strays.push(name);
                        continue;
                    }
                    b.chunks.push(Chunk {
                        offset,
                        len: size - CHUNK_HEADER as u64,
                        log_entry: None,
                    });
                }
            }
            segments.insert(id, Arc::new(seg));
        }
        for id in markers {
            match segments.entry(id) {
                std::collections::btree_map::Entry::Occupied(seg) => {
                    if seg.get().kind == Kind::Commit {
                        strays.push(format::created_name(id));
                    }
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(Arc::new(Segment::new(id, Kind::Page)));
                }
            }
        }
        if !self.read_only() {
            for name in strays {
                self.remote.delete(&name)?;
            }
        }
        Ok(())
    }

    /// This writer's fence at number `n` (its epoch is `n`; the dead zone
    /// follows it).
    fn fence_entry(&self, n: u64) -> Bytes {
        let e = Entry {
            kind: EntryKind::Fence,
            epoch: n,
            writer: self.writer,
            segment: 0,
            offset: DEAD_ZONE,
            payload_len: 0,
            time_ms: now_ms(),
        };
        Bytes::from(format::encode_entry(&e, &[]))
    }

    /// Claims the writer's role: creates a fence at the log's end. A writer
    /// still at work moves the end while this runs (up to `MAX_IN_FLIGHT`
    /// entries a round trip), and one fence after another would chase it:
    /// after a first try at the end alone (one put, enough when the writer
    /// is idle, paused or gone: 32 puts at once cost a local S3 server
    /// about 30 ms of a takeover), fences go to the next `FENCE_WINDOW`
    /// numbers at once. In number
    /// order, an entry another writer put first is read like the rest of
    /// the log; the first number that holds this writer's fence is its
    /// fence (every number before it holds an entry read), and the others
    /// lie in that fence's dead zone (void; deleted with old entries). A
    /// put before the fence that failed without an answer ends the claim
    /// with its error; another writer's fence read first moves the claim
    /// past its dead zone.
    fn fence(&self, log: &mut LogState) -> Result<(), Error> {
        let mut window = 1;
        loop {
            let from = log.next;
            let puts: Vec<(String, Bytes)> = (from..from + window)
                .map(|n| (format::log_name(n), self.fence_entry(n)))
                .collect();
            let results = self.remote.put_create_many(&puts);
            let mut fenced = false;
            for ((n, (name, bytes)), result) in (from..).zip(&puts).zip(results) {
                if fenced || n < log.next {
                    // In a dead zone (this fence's or one read just now).
                    if let Ok(Created::Ours) = result {
                        log.present.insert(n, EntryKind::Data);
                    }
                    continue;
                }
                match result? {
                    Created::Ours => {
                        fenced = true;
                        log.epoch = n;
                        log.present.insert(n, EntryKind::Fence);
                        log.next = n + DEAD_ZONE;
                        self.cache_object(name, bytes);
                    }
                    Created::Theirs(found) => {
                        let theirs =
                            format::decode_entry(&found).map_err(|why| self.corrupt(name, why))?;
                        if theirs.epoch < log.epoch {
                            return Err(
                                self.corrupt(name, "an earlier writer's entry past the log's end")
                            );
                        }
                        log.epoch = theirs.epoch;
                        log.present.insert(n, theirs.kind);
                        let mut segments = self.segments.write();
                        self.apply(log, &mut segments, n, &theirs, &found)?;
                        log.next = if theirs.kind == EntryKind::Fence {
                            n + theirs.offset.max(1)
                        } else {
                            n + 1
                        };
                    }
                }
            }
            if fenced {
                return Ok(());
            }
            window = FENCE_WINDOW;
        }
    }

    /// Puts the next log entry. On a fence (or anything else another
    /// writer put at that number) this writer is fenced for good.
    fn append_entry(
        &self,
        kind: EntryKind,
        segment: SegmentId,
        offset: u64,
        payload: &[u8],
    ) -> Result<u64, IoError> {
        let mut log = self.log.lock();
        if self.read_only() {
            return Err(read_only_error(
                "write the log of",
                self.remote.label.clone(),
            ));
        }
        if let Some(why) = &log.fenced {
            return Err(other(
                "write the log of",
                self.remote.label.clone(),
                why.clone(),
            ));
        }
        // Entries are put one after another: the ones in flight first.
        self.settle_flight(&mut log);
        self.refence(&mut log)?;
        loop {
            let n = log.next;
            let e = Entry {
                kind,
                epoch: log.epoch,
                writer: self.writer,
                segment,
                offset,
                payload_len: payload.len() as u64,
                time_ms: now_ms(),
            };
            let bytes = Bytes::from(format::encode_entry(&e, payload));
            let name = format::log_name(n);
            match self.remote.put_create(&name, bytes.clone())? {
                Created::Ours => {
                    log.present.insert(n, kind);
                    log.next = n + 1;
                    self.cache_object(&name, &bytes);
                    return Ok(n);
                }
                Created::Theirs(found) => match format::decode_entry(&found) {
                    // An earlier put of ours that failed, yet landed: it
                    // stays, and this entry takes the next number. (What it
                    // carried was reported failed; the engine's next
                    // segment header says where valid data ended.)
                    Ok(mine) if mine.writer == self.writer => {
                        log.present.insert(n, mine.kind);
                        log.next = n + 1;
                    }
                    found => return Err(self.fenced_by(&mut log, &name, found.ok())),
                },
            }
        }
    }

    /// Another writer's object holds `name`, where this writer's next entry
    /// belonged: this writer is fenced for good.
    fn fenced_by(&self, log: &mut LogState, name: &str, found: Option<Entry>) -> IoError {
        let why = match found {
            Some(f) if f.kind == EntryKind::Fence => format!(
                "another writer took over this store (its fence is {name}); \
                 this one writes no more"
            ),
            _ => format!(
                "another writer wrote {name}, where this writer's next \
                 commit belonged; this one writes no more"
            ),
        };
        tracing::error!(store = %self.remote.label, "{why}");
        log.fenced = Some(why.clone());
        self.fenced_flag.store(true, Ordering::Release);
        IoError::new(
            "write the log of",
            self.remote.label.clone(),
            io::Error::new(io::ErrorKind::PermissionDenied, why),
        )
    }

    /// Puts the next log entry, a commit segment's data (everything pending
    /// in `seg`), without waiting: the returned cell settles it (see
    /// [`Inner::wait_entry`]). `None` if nothing is pending.
    fn start_entry(&self, seg: &Arc<Segment>) -> Result<Option<Arc<PutCell>>, IoError> {
        let mut log = self.log.lock();
        if self.read_only() {
            return Err(read_only_error(
                "write the log of",
                self.remote.label.clone(),
            ));
        }
        loop {
            if let Some(why) = &log.fenced {
                return Err(other(
                    "write the log of",
                    self.remote.label.clone(),
                    why.clone(),
                ));
            }
            if log.failed_from.is_some() {
                self.settle_flight(&mut log);
                self.refence(&mut log)?;
            }
            if seg.broken.load(Ordering::Acquire) {
                return Err(other(
                    "sync",
                    self.remote.target(&segment_file_name(seg.id)),
                    "an earlier write to this segment failed".into(),
                ));
            }
            if log.flight.len() < MAX_IN_FLIGHT {
                break;
            }
            let oldest = log.flight.front().expect("in flight").cell.clone();
            drop(log);
            oldest.wait_answer();
            log = self.log.lock();
            self.retire_ready(&mut log);
        }
        let n = log.next;
        let mut b = seg.bytes.write();
        if b.pending.is_empty() {
            return Ok(None);
        }
        let offset = b.stored_len();
        let payload = Bytes::from(std::mem::take(&mut b.pending));
        let e = Entry {
            kind: EntryKind::Data,
            epoch: log.epoch,
            writer: self.writer,
            segment: seg.id,
            offset,
            payload_len: payload.len() as u64,
            time_ms: now_ms(),
        };
        let object = Bytes::from(format::encode_entry(&e, &payload));
        b.chunks.push(Chunk {
            offset,
            len: payload.len() as u64,
            log_entry: Some(n),
        });
        b.unconfirmed.insert(offset, payload);
        drop(b);
        log.next = n + 1;
        let cell = Arc::new(PutCell::default());
        log.flight.push_back(InFlight {
            n,
            cell: cell.clone(),
            seg: seg.clone(),
            offset,
            object: object.clone(),
        });
        self.putters
            .get_or_init(|| Putters::start(self.remote.clone()))
            .put(format::log_name(n), object, cell.clone());
        Ok(Some(cell))
    }

    /// Waits until the entry of `cell` is retired and returns its outcome:
    /// durable only if its put and every earlier one in flight succeeded.
    fn wait_entry(&self, cell: &Arc<PutCell>) -> Result<(), IoError> {
        loop {
            let mut log = self.log.lock();
            self.retire_ready(&mut log);
            if let Some(outcome) = cell.take_outcome() {
                return outcome;
            }
            let oldest = log
                .flight
                .front()
                .expect("an entry not retired is in flight")
                .cell
                .clone();
            drop(log);
            oldest.wait_answer();
        }
    }

    /// Waits for every put in flight and retires it.
    fn settle_flight(&self, log: &mut LogState) {
        while let Some(f) = log.flight.front() {
            let oldest = f.cell.clone();
            oldest.wait_answer();
            self.retire_ready(log);
        }
    }

    /// Retires the entries in flight whose puts have answered, oldest first,
    /// stopping at the first still waiting: an entry is durable if its put
    /// created it and nothing before it failed. A put that failed without
    /// saying whether it landed is settled first ([`Inner::settle_lost`]),
    /// so that no entry in the log is reported failed: what a follower
    /// reads is what the writer acknowledged.
    fn retire_ready(&self, log: &mut LogState) {
        while let Some(answer) = log.flight.front().and_then(|f| f.cell.take_answer()) {
            let f = log.flight.pop_front().expect("front exists");
            let name = format::log_name(f.n);
            let answer = match (log.failed_from, answer) {
                (None, Err(e)) => match self.settle_lost(log, f.n) {
                    Ok(Some(true)) => Ok(Created::Ours),
                    Ok(_) => Err(e),
                    Err(fenced) => Err(fenced),
                },
                (_, answer) => answer,
            };
            let outcome = match (log.failed_from, answer) {
                (None, Ok(Created::Ours)) => {
                    log.present.insert(f.n, EntryKind::Data);
                    f.seg.bytes.write().unconfirmed.remove(&f.offset);
                    self.cache_object(&name, &f.object);
                    Ok(())
                }
                (failed, answer) => {
                    let e = match answer {
                        Err(e) => e,
                        Ok(Created::Theirs(found)) => match format::decode_entry(&found) {
                            Ok(mine) if mine.writer == self.writer => other(
                                "put",
                                self.remote.target(&name),
                                "an earlier put of this writer holds the name".into(),
                            ),
                            found => self.fenced_by(log, &name, found.ok()),
                        },
                        Ok(Created::Ours) => {
                            // It exists, past the failure: the next fence's
                            // dead zone holds it; deleted with old entries.
                            log.present.insert(f.n, EntryKind::Data);
                            other(
                                "sync",
                                self.remote.target(&name),
                                "an earlier commit in flight failed".into(),
                            )
                        }
                    };
                    if failed.is_none() {
                        log.failed_from = Some(f.n);
                    }
                    f.seg.broken.store(true, Ordering::Release);
                    let mut b = f.seg.bytes.write();
                    b.unconfirmed.remove(&f.offset);
                    b.chunks
                        .retain(|c| !(c.offset == f.offset && c.log_entry == Some(f.n)));
                    Err(e)
                }
            };
            f.cell.set_outcome(outcome);
        }
    }

    /// After an entry in flight failed: fences the log again at the first
    /// failed number, so that every later entry of the ones in flight falls
    /// in the new fence's dead zone (done already where the failure was
    /// settled, [`Inner::settle_lost`]). Until that fence exists nothing
    /// more is put. If this writer's entry is found there instead (its put
    /// landed after all, though its commit was reported failed), the log
    /// holds a commit this writer's state lacks, which a follower may
    /// already show: this writer stops, and the next open reads it.
    fn refence(&self, log: &mut LogState) -> Result<(), IoError> {
        debug_assert!(log.flight.is_empty(), "settled before fencing again");
        while let Some(n) = log.failed_from {
            if log.epoch == n && log.present.get(&n) == Some(&EntryKind::Fence) {
                // Fenced already, when the failure was settled.
                log.failed_from = None;
                break;
            }
            let name = format::log_name(n);
            let bytes = self.fence_entry(n);
            match self.remote.put_create(&name, bytes.clone())? {
                Created::Ours => {
                    log.epoch = n;
                    log.present.insert(n, EntryKind::Fence);
                    log.next = n + DEAD_ZONE;
                    log.failed_from = None;
                    self.cache_object(&name, &bytes);
                }
                Created::Theirs(found) => match format::decode_entry(&found) {
                    // An earlier try of this fence.
                    Ok(mine) if mine.writer == self.writer && mine.kind == EntryKind::Fence => {
                        log.epoch = n;
                        log.present.insert(n, EntryKind::Fence);
                        log.next = n + DEAD_ZONE;
                        log.failed_from = None;
                    }
                    Ok(mine) if mine.writer == self.writer => {
                        log.present.insert(n, mine.kind);
                        let why = format!(
                            "{name}, a commit this writer reported failed, was written after \
                             all; this writer writes no more (open the store again to go on)"
                        );
                        tracing::error!(store = %self.remote.label, "{why}");
                        log.fenced = Some(why.clone());
                        self.fenced_flag.store(true, Ordering::Release);
                        return Err(other("write the log of", self.remote.label.clone(), why));
                    }
                    found => return Err(self.fenced_by(log, &name, found.ok())),
                },
            }
        }
        Ok(())
    }

    /// The put of entry `n` failed without saying whether it landed (every
    /// try erred or timed out; one may have landed all the same). Settled
    /// by creating this writer's fence at `n`: once the fence exists the
    /// entry never can, and every entry still in flight after it lies in
    /// the fence's dead zone (`Some(false)`); if this writer's entry is
    /// there instead, it landed (`Some(true)`) and is durable like any
    /// other. Never guessed: while the service does not answer (`None`),
    /// the entry's commit is reported failed and the fence is tried again
    /// before anything more is put ([`Inner::refence`]).
    fn settle_lost(&self, log: &mut LogState, n: u64) -> Result<Option<bool>, IoError> {
        let name = format::log_name(n);
        let bytes = self.fence_entry(n);
        for round in 0..SETTLE_ROUNDS {
            if round > 0 {
                std::thread::sleep(SETTLE_PAUSE * (1 << (round - 1)));
            }
            match self.remote.put_create(&name, bytes.clone()) {
                Ok(Created::Ours) => {
                    log.epoch = n;
                    log.present.insert(n, EntryKind::Fence);
                    log.next = n + DEAD_ZONE;
                    self.cache_object(&name, &bytes);
                    return Ok(Some(false));
                }
                Ok(Created::Theirs(found)) => {
                    return match format::decode_entry(&found) {
                        Ok(mine) if mine.writer == self.writer && mine.kind == EntryKind::Data => {
                            Ok(Some(true))
                        }
                        found => Err(self.fenced_by(log, &name, found.ok())),
                    }
                }
                Err(_) => {}
            }
        }
        Ok(None)
    }

    /// Remembers a whole object just written or read, block by block.
    fn cache_object(&self, name: &str, bytes: &[u8]) {
        for (b, block) in bytes.chunks(cache::BLOCK as usize).enumerate() {
            self.cache.insert(name, b as u64, block);
        }
    }

    /// Fills `buf` from `object` at `at`, through the cache: a miss fetches
    /// the whole block (up to `size`, the object's length).
    fn read_object(
        &self,
        object: &str,
        size: u64,
        mut at: u64,
        mut buf: &mut [u8],
    ) -> Result<(), IoError> {
        while !buf.is_empty() {
            let block = at / cache::BLOCK;
            let in_block = at % cache::BLOCK;
            let take = buf.len().min((cache::BLOCK - in_block) as usize);
            let (part, rest) = buf.split_at_mut(take);
            if !self.cache.read(object, block, in_block, part) {
                let start = block * cache::BLOCK;
                let end = (start + cache::BLOCK).min(size);
                let got = self.remote.get_range(object, start..end)?;
                if (got.len() as u64) < in_block + take as u64 {
                    return Err(IoError::new(
                        "read",
                        self.remote.target(object),
                        io::Error::from(io::ErrorKind::UnexpectedEof),
                    ));
                }
                part.copy_from_slice(&got[in_block as usize..in_block as usize + take]);
                self.cache.insert(object, block, &got);
            }
            at += take as u64;
            buf = rest;
        }
        Ok(())
    }

    /// Deletes the log entries before the oldest live commit segment's
    /// creation, except fences: first a `start/` object saying where the
    /// log now starts (so a crash in the middle leaves entries nobody
    /// reads), then the entries, then the old `start/` object.
    fn trim_log(&self, log: &mut LogState) -> Result<(), IoError> {
        let new_start = log.created_at.values().next().copied().unwrap_or(log.next);
        // Never move past the newest entry: fencing needs the log's end.
        let newest = log.present.keys().next_back().copied().unwrap_or(0);
        let new_start = new_start.min(newest);
        if new_start <= log.start {
            return Ok(());
        }
        let marker = format!("start/{new_start:020}");
        // Empty: if someone made the same marker, it says the same thing.
        self.remote.put_create(&marker, Bytes::from_static(b""))?;
        let old: Vec<(u64, EntryKind)> = log
            .present
            .range(..new_start)
            .map(|(n, k)| (*n, *k))
            .collect();
        for (n, kind) in old {
            if kind != EntryKind::Fence {
                self.remote.delete(&format::log_name(n))?;
            }
            log.present.remove(&n);
        }
        if log.start > 0 {
            self.remote.delete(&format!("start/{:020}", log.start))?;
        }
        log.start = new_start;
        Ok(())
    }
}

impl Segment {
    fn new(id: SegmentId, kind: Kind) -> Segment {
        Segment {
            id,
            kind,
            bytes: RwLock::new(SegmentBytes::default()),
            broken: AtomicBool::new(false),
        }
    }
}

impl Storage for ObjectStorage {
    fn list_segments(&self) -> Result<Vec<SegmentId>, IoError> {
        Ok(self.inner.segments.read().keys().copied().collect())
    }

    fn create_segment(&self, id: SegmentId) -> Result<Box<dyn SegmentWriter>, IoError> {
        let inner = &self.inner;
        if inner.segments.read().contains_key(&id) {
            return Err(IoError::new(
                "create segment",
                self.segment_name(id),
                io::Error::from(io::ErrorKind::AlreadyExists),
            ));
        }
        let n = inner.append_entry(EntryKind::Create, id, 0, &[])?;
        inner.log.lock().created_at.insert(id, n);
        let seg = Arc::new(Segment::new(id, Kind::Commit));
        inner.segments.write().insert(id, seg.clone());
        Ok(Box::new(Writer {
            inner: inner.clone(),
            seg,
            broken: false,
            after_step: None,
        }))
    }

    fn create_bulk_segment(
        &self,
        id: SegmentId,
        after_step: StepHook,
    ) -> Result<Box<dyn SegmentWriter>, IoError> {
        let inner = &self.inner;
        let name = self.segment_name(id);
        if inner.read_only() {
            return Err(read_only_error("create segment", name));
        }
        if let Some(why) = self.fenced() {
            return Err(other("create segment", name, why));
        }
        if inner.segments.read().contains_key(&id) {
            return Err(IoError::new(
                "create segment",
                name,
                io::Error::from(io::ErrorKind::AlreadyExists),
            ));
        }
        let marker = Bytes::from(inner.writer.to_vec());
        if let Created::Theirs(_) = inner.remote.put_create(&format::created_name(id), marker)? {
            return Err(IoError::new(
                "create segment",
                name,
                io::Error::new(io::ErrorKind::AlreadyExists, "another writer created it"),
            ));
        }
        let seg = Arc::new(Segment::new(id, Kind::Page));
        inner.segments.write().insert(id, seg.clone());
        Ok(Box::new(Writer {
            inner: inner.clone(),
            seg,
            broken: false,
            after_step: Some(after_step),
        }))
    }

    fn open_segment(&self, id: SegmentId) -> Result<Arc<dyn SegmentReader>, IoError> {
        let seg = self
            .inner
            .segments
            .read()
            .get(&id)
            .cloned()
            .ok_or_else(|| {
                IoError::new(
                    "open segment",
                    self.segment_name(id),
                    io::Error::from(io::ErrorKind::NotFound),
                )
            })?;
        Ok(Arc::new(Reader {
            inner: self.inner.clone(),
            seg,
        }))
    }

    fn delete_segment(&self, id: SegmentId) -> Result<(), IoError> {
        let inner = &self.inner;
        let name = self.segment_name(id);
        if inner.read_only() {
            return Err(read_only_error("delete segment", name));
        }
        if let Some(why) = self.fenced() {
            return Err(other("delete segment", name, why));
        }
        let seg = inner.segments.read().get(&id).cloned().ok_or_else(|| {
            IoError::new(
                "delete segment",
                name.clone(),
                io::Error::from(io::ErrorKind::NotFound),
            )
        })?;
        match seg.kind {
            Kind::Page => {
                // The marker first: without it the chunks are strays.
                inner.remote.delete(&format::created_name(id))?;
                inner.segments.write().remove(&id);
                let chunks: Vec<String> = seg
                    .bytes
                    .read()
                    .chunks
                    .iter()
                    .map(|c| c.object(id).0)
                    .collect();
                for object in chunks {
                    inner.remote.delete(&object)?;
                }
            }
            Kind::Commit => {
                let oldest = {
                    let log = inner.log.lock();
                    log.created_at.keys().next() == Some(&id)
                };
                if !oldest {
                    inner.append_entry(EntryKind::Delete, id, 0, &[])?;
                }
                let mut log = inner.log.lock();
                log.created_at.remove(&id);
                inner.segments.write().remove(&id);
                inner.trim_log(&mut log)?;
            }
        }
        Ok(())
    }

    fn read_meta(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        Ok(self
            .inner
            .remote
            .get(&format::meta_name(name))?
            .map(|b| b.to_vec()))
    }

    fn write_meta(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        if self.inner.read_only() {
            return Err(read_only_error(
                "write",
                self.inner.remote.target(&format::meta_name(name)),
            ));
        }
        // Meta blobs are written once, when a store is made (stores on an
        // object store start at the current format, so none is upgraded in
        // place): created only if absent, so that two processes making a
        // store under one prefix at once cannot both win, and a fenced
        // writer cannot replace what the new one wrote.
        let target = format::meta_name(name);
        if let Some(why) = self.fenced() {
            return Err(other("write", self.inner.remote.target(&target), why));
        }
        match self
            .inner
            .remote
            .put_create(&target, Bytes::copy_from_slice(bytes))?
        {
            Created::Ours => Ok(()),
            Created::Theirs(found) if found == bytes => Ok(()),
            Created::Theirs(_) => Err(IoError::new(
                "write",
                self.inner.remote.target(&target),
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "another process wrote it first (made a store here at the same time)",
                ),
            )),
        }
    }

    fn segment_name(&self, id: SegmentId) -> String {
        self.inner.remote.target(&segment_file_name(id))
    }

    fn meta_name(&self, name: &str) -> String {
        self.inner.remote.target(&format::meta_name(name))
    }

    fn remote_requests(&self) -> Option<RemoteRequests> {
        Some(self.requests())
    }

    fn syncs_in_flight(&self) -> usize {
        MAX_IN_FLIGHT
    }

    fn retired_grace(&self) -> std::time::Duration {
        self.inner.retired_grace
    }

    fn refresh(&self, list: bool) -> Result<Refreshed, IoError> {
        ObjectStorage::refresh(self, list).map_err(|e| self.as_io("follow", e))
    }

    fn take_over(&self) -> Result<(), IoError> {
        ObjectStorage::take_over(self).map_err(|e| self.as_io("take over", e))
    }

    fn step_down(&self) {
        let _log = self.inner.log.lock();
        self.inner.read_only.store(true, Ordering::Release);
    }

    fn announce(&self, note: &str) {
        *self.inner.lease_note.lock() = note.to_string();
    }

    fn is_fenced(&self) -> bool {
        self.inner.fenced_flag.load(Ordering::Acquire)
    }

    fn confirm_writer(&self) -> bool {
        self.inner.confirm_writer()
    }

    fn writer_lease(&self) -> Result<Option<WriterLease>, IoError> {
        Ok(self
            .inner
            .remote
            .get(lease::LEASE)?
            .and_then(|b| lease::Lease::decode(&b))
            .map(|l| WriterLease {
                writer: l.writer,
                epoch: l.epoch,
                renewal: l.renewal,
                note: l.note,
            }))
    }
}

/// Appends to a commit segment (each sync is one log entry) or a page
/// segment (chunks of up to `PAGE_CHUNK`, the last one put by the sync).
struct Writer {
    inner: Arc<Inner>,
    seg: Arc<Segment>,
    /// A put failed: the segment's stored end is unknown to the caller,
    /// which moves to a new segment; nothing more is written here.
    broken: bool,
    /// Page segments: called after each chunk is put.
    after_step: Option<StepHook>,
}

impl Writer {
    fn broken_error(&self, op: &'static str) -> IoError {
        other(
            op,
            self.name(),
            "an earlier write to this segment failed".into(),
        )
    }

    fn name(&self) -> String {
        self.inner.remote.target(&segment_file_name(self.seg.id))
    }

    /// Stores the pending bytes of a page segment (all of them, or the
    /// first `limit`) as one chunk. (A commit segment's go into the log:
    /// `start_sync`.)
    fn store_pending(&mut self, limit: usize) -> Result<(), IoError> {
        debug_assert_eq!(self.seg.kind, Kind::Page);
        let (offset, payload) = {
            let b = self.seg.bytes.read();
            let take = b.pending.len().min(limit);
            (b.stored_len(), b.pending[..take].to_vec())
        };
        if payload.is_empty() {
            return Ok(());
        }
        let name = format::chunk_name(self.seg.id, offset);
        let bytes = Bytes::from(format::encode_chunk(
            self.inner.writer,
            self.seg.id,
            offset,
            &payload,
        ));
        let stored = match self.inner.remote.put_create(&name, bytes.clone()) {
            Ok(Created::Ours) => {
                self.inner.cache_object(&name, &bytes);
                Ok(())
            }
            Ok(Created::Theirs(_)) => Err(IoError::new(
                "write",
                self.inner.remote.target(&name),
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "another writer wrote this chunk",
                ),
            )),
            Err(e) => Err(e),
        };
        if let Err(e) = stored {
            self.broken = true;
            return Err(e);
        }
        let mut b = self.seg.bytes.write();
        debug_assert_eq!(b.stored_len(), offset, "one writer per segment");
        b.pending.drain(..payload.len());
        b.chunks.push(Chunk {
            offset,
            len: payload.len() as u64,
            log_entry: None,
        });
        drop(b);
        if let Some(hook) = &self.after_step {
            hook();
        }
        Ok(())
    }
}

impl SegmentWriter for Writer {
    fn append(&mut self, bytes: &[u8]) -> Result<(), IoError> {
        if self.broken || self.seg.broken.load(Ordering::Acquire) {
            return Err(self.broken_error("append to"));
        }
        self.seg.bytes.write().pending.extend_from_slice(bytes);
        // A page segment puts every full chunk now (an append may fill several).
        while self.seg.kind == Kind::Page && self.seg.bytes.read().pending.len() >= PAGE_CHUNK {
            self.store_pending(PAGE_CHUNK)?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), IoError> {
        if self.broken {
            return Err(self.broken_error("sync"));
        }
        if self.seg.kind == Kind::Commit {
            // The pending bytes as one entry, and every entry in flight
            // before it settled.
            self.start_sync()?.wait()?;
            let mut log = self.inner.log.lock();
            self.inner.settle_flight(&mut log);
            drop(log);
            if self.seg.broken.load(Ordering::Acquire) {
                self.broken = true;
                return Err(self.broken_error("sync"));
            }
            return Ok(());
        }
        while !self.seg.bytes.read().pending.is_empty() {
            self.store_pending(PAGE_CHUNK)?;
        }
        Ok(())
    }

    fn start_sync(&mut self) -> Result<PendingSync, IoError> {
        if self.seg.kind == Kind::Page {
            return self.sync().map(|()| PendingSync::done());
        }
        if self.broken {
            return Err(self.broken_error("sync"));
        }
        match self.inner.start_entry(&self.seg) {
            Ok(None) => Ok(PendingSync::done()),
            Ok(Some(cell)) => {
                let inner = self.inner.clone();
                Ok(PendingSync::new(move || inner.wait_entry(&cell)))
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    fn len(&self) -> u64 {
        let b = self.seg.bytes.read();
        b.stored_len() + b.pending.len() as u64
    }
}

/// Positioned reads of a segment: stored chunks through the cache, then
/// the bytes this process appended and has not stored yet.
struct Reader {
    inner: Arc<Inner>,
    seg: Arc<Segment>,
}

impl SegmentReader for Reader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let end = offset + buf.len() as u64;
        // The pieces to read, found under the lock and read outside it.
        let mut pieces = Vec::new();
        {
            let b = self.seg.bytes.read();
            let stored = b.stored_len();
            if end > stored + b.pending.len() as u64 {
                return Err(IoError::new(
                    "read",
                    self.inner.remote.target(&segment_file_name(self.seg.id)),
                    io::Error::from(io::ErrorKind::UnexpectedEof),
                ));
            }
            if end > stored {
                let from = offset.max(stored);
                let dst = (from - offset) as usize;
                let src = (from - stored) as usize;
                buf[dst..].copy_from_slice(&b.pending[src..src + (end - from) as usize]);
            }
            let first = b.chunks.partition_point(|c| c.offset + c.len <= offset);
            for c in &b.chunks[first..] {
                if c.offset >= end.min(stored) {
                    break;
                }
                match b.unconfirmed.get(&c.offset) {
                    // In flight: from memory.
                    Some(payload) => {
                        let from = offset.max(c.offset);
                        let to = end.min(c.offset + c.len);
                        buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(
                            &payload[(from - c.offset) as usize..(to - c.offset) as usize],
                        );
                    }
                    None => pieces.push(c.clone()),
                }
            }
        }
        for c in pieces {
            let from = offset.max(c.offset);
            let to = end.min(c.offset + c.len);
            let dst = &mut buf[(from - offset) as usize..(to - offset) as usize];
            let (object, header) = c.object(self.seg.id);
            self.inner
                .read_object(&object, header + c.len, header + (from - c.offset), dst)?;
        }
        Ok(())
    }

    fn size(&self) -> Result<u64, IoError> {
        let b = self.seg.bytes.read();
        Ok(b.stored_len() + b.pending.len() as u64)
    }
}
