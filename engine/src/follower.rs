//! A follower: a read-only open of a store that another process writes (on
//! an object store), kept up with that writer as it commits.
//!
//! Each *poll* asks the storage what the writer made durable since the last
//! one (`Storage::refresh`: on an object store, the log entries after the
//! last one read, one GET when there are none), reads the commit records
//! that appeared at the end of the commit log, lays them over the published
//! version's write buffer as the writer did, and publishes the result: a
//! version holding a prefix of the writer's commits, never a part of one,
//! and never fewer than the version before it.
//!
//! A *reload* builds the state again as an open does (`recover`): the
//! newest checkpoint's tree with the commits after it replayed. A follower
//! reloads when a checkpoint record appears (the writer's cleaner deletes
//! the page segments the previous tree used soon after, and the replayed
//! commits behind the new one bound the buffer), and when it fell so far
//! behind that the writer deleted log it had not read.

use crate::error::{Error, Result};
use crate::recovery::{recover, writes_of};
use crate::store::Store;
use crate::version::Version;
use crate::write_buffer::WriteBuffer;
use kivi_log::{
    decode_record_at, read_header, CommitRecord, Corruption, RecordType, SegmentKind,
    FORMAT_VERSION, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use kivi_storage::SegmentId;
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How a follower stands ([`Db::follower_status`](crate::Db::follower_status)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FollowerStatus {
    /// The last commit visible here (the writer's sequence number).
    pub applied_seq: u64,
    /// Commits the last poll that found any made visible: how far behind
    /// the writer this follower was when it looked.
    pub lag_commits: u64,
    /// How long before it became visible here the oldest commit of that
    /// poll was made, by the writer's clock against this machine's
    /// (milliseconds; 0 when unknown).
    pub lag_ms: u64,
    /// Milliseconds since the last poll that reached the writer's log
    /// (whether or not it found anything).
    pub last_contact_ms: u64,
    /// Polls since the open, and the ones that found commits.
    pub polls: u64,
    /// Polls that found commits.
    pub polls_with_commits: u64,
    /// Times the state was built again from a checkpoint.
    pub reloads: u64,
    /// What the writer announces in its lease (`kivi serve`: the address
    /// its clients reach it at), once a lease was read.
    pub writer_note: Option<String>,
    /// Milliseconds since the writer's lease last changed (or, before one
    /// was read, since this follower opened): a live writer renews it
    /// about once a second.
    pub lease_unchanged_ms: u64,
    /// The last poll's failure, if the last poll failed.
    pub last_error: Option<String>,
}

/// The follower's part of a store: where it stands in the writer's log.
pub(crate) struct Follower {
    tail: Mutex<Tail>,
    status: Mutex<Status>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Polling stops (the store closes, or takes over as the writer).
    stopped: std::sync::atomic::AtomicBool,
    linking: Mutex<Linking>,
}

/// When the nodes reads brought into the page cache were last linked into
/// the tree (see `Follower::link_cached`).
struct Linking {
    at: Instant,
    /// The cache's misses then: none since, nothing new to link.
    misses: u64,
    /// How long to wait before the next: ten times the last walk, so that
    /// linking takes at most a tenth of a core, and at least `LINK_EVERY`.
    every: Duration,
}

struct Status {
    shown: FollowerStatus,
    last_contact: Instant,
    /// The lease last read (writer, epoch, renewal), when it was read, and
    /// since when it has not changed.
    lease: Option<([u8; 16], u64, u64)>,
    lease_read_at: Option<Instant>,
    lease_changed_at: Instant,
}

struct Tail {
    /// The newest commit segment read, and where its records read so far
    /// end; `None` until the log has a segment.
    at: Option<(SegmentId, u64)>,
    /// The last commit made visible.
    last_seq: u64,
    /// A checkpoint record appeared, or the tail lost its place: build the
    /// state again before reading on.
    reload: bool,
    /// When the page segments were last listed, and how long to wait
    /// before listing them again while nothing happens (doubling while
    /// nothing changes; see `Storage::refresh`).
    listed_at: Instant,
    list_every: Duration,
    /// Segments after the tail's known not to be its successor (page
    /// segments), so that each header is read once.
    not_next: std::collections::HashSet<SegmentId>,
}

/// Listing again (pages, and whether the writer deleted log not read yet:
/// a follower that fell that far behind finds the next number empty, as at
/// the log's end) this long after the last listing, doubling while
/// listings find nothing new, up to `LIST_MOST`.
const LIST_FIRST: Duration = Duration::from_millis(250);
const LIST_MOST: Duration = Duration::from_secs(2);

/// How often a follower reads the writer's lease.
const LEASE_CHECK: Duration = Duration::from_millis(200);

/// How often a standby reads it once a renewal is due (the lease has not
/// changed for `RENEWAL_DUE`; the writer renews about once a second,
/// `kivi_object_storage`'s `lease::RENEW_EVERY`). A standby's clock starts
/// when it *sees* the last renewal, so it takes over up to one check after
/// the timeout past that renewal plus the delay before it saw it: checked
/// every 200 ms, 1,727 ms after a writer's death with a 1,500 ms timeout
/// (the follower suite). Checked often only around the renewals, it costs
/// about a dozen reads a second instead of five.
const LEASE_CHECK_DUE: Duration = Duration::from_millis(20);
const RENEWAL_DUE: Duration = Duration::from_millis(800);

/// The shortest wait between two linkings of cached nodes into the tree.
const LINK_EVERY: Duration = Duration::from_millis(100);

/// Commit bytes read from a segment at once.
const READ_BYTES: u64 = 4 << 20;

impl Follower {
    /// The follower of a store just recovered at `last_seq`, whose commit
    /// log ends at `log_end`.
    pub fn new(log_end: Option<(SegmentId, u64)>, last_seq: u64) -> Follower {
        Follower {
            tail: Mutex::new(Tail {
                at: log_end,
                last_seq,
                reload: false,
                listed_at: Instant::now(),
                list_every: LIST_FIRST,
                not_next: Default::default(),
            }),
            status: Mutex::new(Status {
                shown: FollowerStatus {
                    applied_seq: last_seq,
                    ..FollowerStatus::default()
                },
                last_contact: Instant::now(),
                lease: None,
                lease_read_at: None,
                lease_changed_at: Instant::now(),
            }),
            thread: Mutex::new(None),
            stopped: std::sync::atomic::AtomicBool::new(false),
            linking: Mutex::new(Linking {
                at: Instant::now(),
                misses: 0,
                every: LINK_EVERY,
            }),
        }
    }

    pub fn status(&self) -> FollowerStatus {
        let s = self.status.lock();
        FollowerStatus {
            last_contact_ms: s.last_contact.elapsed().as_millis() as u64,
            lease_unchanged_ms: s.lease_changed_at.elapsed().as_millis() as u64,
            ..s.shown.clone()
        }
    }

    /// Reads the writer's lease if it was not read for `LEASE_CHECK` (a
    /// `standby` whose writer's renewal is due: `LEASE_CHECK_DUE`);
    /// returns how long it has gone unchanged.
    fn check_lease(&self, store: &Store, standby: bool) -> Result<Duration> {
        {
            let s = self.status.lock();
            let due = standby && s.lease_changed_at.elapsed() >= RENEWAL_DUE;
            let every = if due { LEASE_CHECK_DUE } else { LEASE_CHECK };
            if s.lease_read_at.is_some_and(|at| at.elapsed() < every) {
                return Ok(s.lease_changed_at.elapsed());
            }
        }
        // A change is dated from the read's start: the renewal it finds
        // landed before the answer, perhaps before the question.
        let asked = Instant::now();
        let lease = store.storage().writer_lease()?;
        let mut s = self.status.lock();
        let now = asked;
        s.lease_read_at = Some(now);
        if let Some(l) = lease {
            let seen = (l.writer, l.epoch, l.renewal);
            if s.lease != Some(seen) {
                s.lease = Some(seen);
                s.lease_changed_at = now;
            }
            s.shown.writer_note = Some(l.note);
        }
        Ok(s.lease_changed_at.elapsed())
    }

    /// Polls until a poll finds nothing new, even with a listing (the
    /// writer may have deleted the log after this follower's place);
    /// returns the last commit visible.
    pub fn catch_up(&self, store: &Store) -> Result<u64> {
        loop {
            if self.poll_with(store, false)? == 0 && self.poll_with(store, true)? == 0 {
                return Ok(self.tail.lock().last_seq);
            }
        }
    }

    /// One poll (see the module's doc); returns the commits it made
    /// visible.
    pub fn poll(&self, store: &Store) -> Result<u64> {
        self.poll_with(store, false)
    }

    /// One poll, listing the storage (see `Storage::refresh`) if `list` or
    /// when it is due.
    fn poll_with(&self, store: &Store, list: bool) -> Result<u64> {
        let mut tail = self.tail.lock();
        let result = self.poll_locked(store, &mut tail, list);
        let mut s = self.status.lock();
        s.shown.polls += 1;
        match &result {
            Ok(_) => {
                s.last_contact = Instant::now();
                s.shown.last_error = None;
            }
            Err(e) => s.shown.last_error = Some(e.to_string()),
        }
        result.map(|p| p.commits)
    }

    fn poll_locked(&self, store: &Store, tail: &mut Tail, list: bool) -> Result<Polled> {
        let storage = store.storage();
        let list = list || tail.reload || tail.listed_at.elapsed() >= tail.list_every;
        let refreshed = storage.refresh(list)?;
        if list {
            tail.listed_at = Instant::now();
            tail.list_every = match refreshed.changed {
                true => LIST_FIRST,
                false => (tail.list_every * 2).min(LIST_MOST),
            };
        }
        if refreshed.restarted || tail.reload || tail.at.is_none() {
            if refreshed.changed || tail.reload {
                return self.reload(store, tail);
            }
            return Ok(Polled::default());
        }
        if !refreshed.changed {
            return Ok(Polled::default());
        }
        let polled = self.read_new(store, tail)?;
        if polled.commits > 0 {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let mut s = self.status.lock();
            s.shown.applied_seq = tail.last_seq;
            s.shown.lag_commits = polled.commits;
            s.shown.lag_ms = refreshed.oldest_ms.map_or(0, |t| now.saturating_sub(t));
            s.shown.polls_with_commits += 1;
        }
        if tail.reload {
            // A checkpoint was committed: move onto its tree now, before
            // the writer's cleaner deletes the pages the old one used.
            let reloaded = self.reload(store, tail)?;
            return Ok(Polled {
                commits: polled.commits + reloaded.commits,
            });
        }
        Ok(polled)
    }

    /// Reads the commit records that appeared at the end of the commit
    /// log, following it into the segments that succeed the one it was
    /// in, and publishes them as one version.
    fn read_new(&self, store: &Store, tail: &mut Tail) -> Result<Polled> {
        let storage = store.storage();
        let cur = store.current_full();
        let mut next: Version = (*cur).clone();
        let mut buffer: WriteBuffer = (*cur.buffer).clone();
        let mut commits = 0;
        let (mut seg, mut end) = tail.at.expect("the log has a segment");
        'segments: loop {
            let reader = match storage.open_segment(seg) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Deleted by the writer under the tail: read it all again.
                    tail.reload = true;
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let name = storage.segment_name(seg);
            let size = reader.size()?;
            while end < size {
                let want = (size - end).min(READ_BYTES.max(RECORD_HEADER_LEN as u64));
                let mut bytes = vec![0u8; want as usize];
                reader.read_at(end, &mut bytes)?;
                let mut at = 0usize;
                while at + RECORD_HEADER_LEN <= bytes.len() {
                    let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"))
                        as usize;
                    let total = RECORD_HEADER_LEN + len;
                    if at + total > bytes.len() {
                        if at == 0 {
                            // One record larger than the read: read it whole.
                            bytes.resize(total.min((size - end) as usize), 0);
                            reader.read_at(end, &mut bytes)?;
                            if total > bytes.len() {
                                return Err(corrupt(&name, end, "a record runs past the segment"));
                            }
                            continue;
                        }
                        break;
                    }
                    let offset = end + at as u64;
                    let (ty, body, _) = decode_record_at(&bytes[at..at + total], seg, offset)
                        .map_err(|e| corrupt(&name, offset, e.describe()))?;
                    match ty {
                        RecordType::Commit => {
                            let d = CommitRecord::decode(body).map_err(|e| {
                                corrupt(&name, offset, format!("commit record: {e}"))
                            })?;
                            if d.seq != tail.last_seq + 1 {
                                return Err(corrupt(
                                    &name,
                                    offset,
                                    format!(
                                        "commit {} follows commit {} here",
                                        d.seq, tail.last_seq
                                    ),
                                ));
                            }
                            if d.clears {
                                next = Version {
                                    epoch: next.epoch.clone(),
                                    ..Version::of_tree(None, d.seq - 1, 0, 0)
                                };
                                buffer = WriteBuffer::default();
                            }
                            buffer = buffer.with_group(&writes_of(&d.ops), store.run_spares());
                            next.visible_seq = d.seq;
                            next.visible_log_bytes += total as u64;
                            tail.last_seq = d.seq;
                            commits += 1;
                        }
                        RecordType::Checkpoint => tail.reload = true,
                        other => {
                            return Err(corrupt(
                                &name,
                                offset,
                                format!("{other:?} record in the commit log"),
                            ))
                        }
                    }
                    at += total;
                }
                if at == 0 {
                    return Err(corrupt(&name, end, "an incomplete record ends the segment"));
                }
                end += at as u64;
                tail.at = Some((seg, end));
            }
            // The segment after this one, once the writer moved on: a
            // commit segment whose header names this one.
            let after: Vec<SegmentId> = storage
                .list_segments()?
                .into_iter()
                .filter(|&id| id > seg && !tail.not_next.contains(&id))
                .collect();
            for id in after {
                let Ok(r) = storage.open_segment(id) else {
                    continue;
                };
                let len = r.size()?;
                if len < SEGMENT_HEADER_LEN {
                    continue; // its header is not there yet
                }
                let next_name = storage.segment_name(id);
                let Some(h) = read_header(r.as_ref(), id, &next_name, len, true)? else {
                    continue;
                };
                if h.kind != SegmentKind::Commits {
                    tail.not_next.insert(id);
                    continue;
                }
                if h.prev_segment != seg {
                    continue;
                }
                if h.prev_end != end {
                    // The writer says this segment ends elsewhere than where
                    // its records were read to: build the state again.
                    tracing::warn!(
                        store = store.path(),
                        segment = %name,
                        read_to = end,
                        declared_end = h.prev_end,
                        "a follower's commit log moved to a new segment somewhere other than it read to; reloading"
                    );
                    tail.reload = true;
                    break 'segments;
                }
                seg = id;
                end = SEGMENT_HEADER_LEN;
                tail.at = Some((seg, end));
                continue 'segments;
            }
            break;
        }
        if commits > 0 {
            next.buffer = Arc::new(buffer);
            let next = Arc::new(next);
            let old = store.publish(next.clone());
            debug_assert!(old.visible_seq < next.visible_seq);
            store.reclaimer().superseded(old, &next);
        }
        Ok(Polled { commits })
    }

    /// Builds the state again from the storage as it stands (lists it
    /// first: new page segments, deleted commit segments), as an open
    /// does, and publishes it if it holds at least what is visible now.
    fn reload(&self, store: &Store, tail: &mut Tail) -> Result<Polled> {
        let storage = store.storage();
        let mut tries = 0;
        let rec = loop {
            storage.refresh(true)?;
            tail.listed_at = Instant::now();
            tries += 1;
            // The writer may have upgraded the store's format since this
            // follower read its identity: any format this build reads.
            match recover(storage, store.pager(), store.store_id(), FORMAT_VERSION) {
                // Deleted by the writer between the listing and the reading
                // (what it deletes, the new state does not need).
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => {}
                rec => break rec?,
            }
        };
        tail.not_next.clear();
        let seq = rec.version.visible_seq;
        if seq < tail.last_seq {
            return Err(Error::Corrupt(Corruption::new(
                store.path(),
                0,
                format!(
                    "the writer's log holds commits up to {seq}, but commit {} was read before",
                    tail.last_seq
                ),
            )));
        }
        let commits = seq - tail.last_seq;
        let mut version = rec.version;
        // The nodes the tree it replaces had linked, wherever the new tree
        // names the same pages (most of it: a checkpoint rewrites only what
        // changed), and whatever else the cache holds.
        if let Some(root) = &version.root {
            let earlier = store.current_full();
            if let Some(linked) =
                kivi_tree::link_cached(store.pager(), root, earlier.root.as_deref())
            {
                version.root = Some(linked);
            }
        }
        let next = Arc::new(version);
        let old = store.publish(next.clone());
        store.reclaimer().superseded(old, &next);
        tail.at = rec.log_end;
        tail.last_seq = seq;
        tail.reload = false;
        let mut s = self.status.lock();
        s.shown.reloads += 1;
        s.shown.applied_seq = seq;
        Ok(Polled { commits })
    }

    /// Merges the write buffer of the published version into its tree in
    /// memory, as the writer does (`Store::merge_buffer`): when `due`, only
    /// if the writer's rule says it is (the buffer holds its share of
    /// memory); else whenever the tree has room, the writer being quiet.
    /// Reads then search one tree instead of the buffer's runs and its
    /// tree; without this, reads on a follower ran at 0.48x the writer's
    /// (the follower suite). The merged nodes are never written: they are
    /// dropped at the next reload, when the writer's checkpoint holds them.
    fn merge_buffer(&self, store: &Store, due: bool) {
        // Publishes on a follower are made under the tail's lock.
        let _tail = self.tail.lock();
        let v = store.current_full();
        let wanted = match due {
            true => store.buffer_wants_merge(&v),
            false => !v.buffer.is_empty() && store.merge_has_room(&v),
        };
        if wanted {
            if let Err(e) = store.merge_buffer(&v, true) {
                store.note_error("merge the write buffer", &e);
            }
        }
    }

    /// Links into the published tree the nodes that reads brought into the
    /// page cache since the last time (`kivi_tree::link_cached`), so that
    /// reads reach them by pointer as they do on the writer, whose own
    /// checkpoints' nodes stay in its tree: without it, random reads on a
    /// follower ran at 0.6x the writer's (the follower suite), a quarter
    /// of their time in cache lookups. At most every `Linking::every`.
    fn link_cached(&self, store: &Store) {
        let misses = {
            let l = self.linking.lock();
            if l.at.elapsed() < l.every {
                return;
            }
            let misses = store.pager().cache_misses();
            if misses == l.misses {
                return;
            }
            misses
        };
        let started = Instant::now();
        // Publishes on a follower are made under the tail's lock.
        let _tail = self.tail.lock();
        let v = store.current_full();
        if let Some(root) = &v.root {
            if let Some(linked) = kivi_tree::link_cached(store.pager(), root, None) {
                let next = Arc::new(Version {
                    root: Some(linked),
                    ..(*v).clone()
                });
                let old = store.publish(next.clone());
                debug_assert!(Arc::ptr_eq(&old, &v));
                store.reclaimer().superseded(old, &next);
            }
        }
        let mut l = self.linking.lock();
        l.at = Instant::now();
        l.misses = misses;
        l.every = (started.elapsed() * 10).max(LINK_EVERY);
    }

    /// Starts the thread that polls while the store is open: again at once
    /// after a poll that found commits, else after a pause that doubles
    /// from 1 ms up to `interval`; after a failure (logged, and kept in
    /// `last_error`), after `interval`.
    pub fn start(&self, store: Weak<Store>, me: Weak<Follower>, plan: Plan) {
        let Plan {
            interval,
            take_over_after,
            take_over,
        } = plan;
        let handle = std::thread::Builder::new()
            .name("kivi-follow".into())
            .spawn(move || {
                let mut pause = Duration::from_millis(1);
                loop {
                    let (Some(store), Some(me)) = (store.upgrade(), me.upgrade()) else {
                        return;
                    };
                    if store.is_closed() || me.stopped.load(std::sync::atomic::Ordering::Acquire) {
                        return;
                    }
                    match me.poll(&store) {
                        Ok(0) => {
                            pause = (pause * 2).min(interval);
                            me.merge_buffer(&store, false);
                            me.link_cached(&store);
                        }
                        Ok(_) => {
                            pause = Duration::ZERO;
                            me.merge_buffer(&store, true);
                            me.link_cached(&store);
                        }
                        Err(e) => {
                            store.note_error("follow", &e);
                            pause = interval;
                        }
                    }
                    match me.check_lease(&store, take_over_after.is_some()) {
                        Ok(unchanged) => {
                            if take_over_after.is_some_and(|after| unchanged >= after) {
                                tracing::warn!(
                                    store = store.path(),
                                    unchanged_ms = unchanged.as_millis() as u64,
                                    "the writer's lease went unrenewed: taking over"
                                );
                                drop(store);
                                if let Err(e) = take_over() {
                                    // Following on, on a thread of its own
                                    // (`Db::promote`), and waiting as long
                                    // again before the next try.
                                    tracing::error!(error = %e, "taking over failed; following on");
                                    me.status.lock().lease_changed_at = Instant::now();
                                }
                                return;
                            }
                        }
                        Err(e) => store.note_error("read the writer's lease", &e),
                    }
                    drop((store, me));
                    if !pause.is_zero() {
                        // Woken early by `stop`.
                        std::thread::park_timeout(pause);
                    } else {
                        pause = Duration::from_millis(1);
                    }
                }
            })
            .expect("spawn the follower's thread");
        *self.thread.lock() = Some(handle);
    }

    /// Stops the polling thread and waits for it to end (unless this is
    /// that thread: a takeover it started).
    pub fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::Release);
        let handle = self.thread.lock().take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                h.thread().unpark();
                let _ = h.join();
            }
        }
    }

    /// Polls again after `stop` (a takeover that failed).
    pub fn restart(&self, store: Weak<Store>, me: Weak<Follower>, plan: Plan) {
        self.stopped
            .store(false, std::sync::atomic::Ordering::Release);
        self.start(store, me, plan);
    }
}

/// How the polling thread goes: the longest pause between polls, and
/// whether to take over (how) once the writer's lease went unrenewed that
/// long.
pub(crate) struct Plan {
    pub interval: Duration,
    pub take_over_after: Option<Duration>,
    pub take_over: Box<dyn Fn() -> Result<()> + Send>,
}

#[derive(Default)]
struct Polled {
    commits: u64,
}

fn corrupt(file: &str, offset: u64, what: impl Into<String>) -> Error {
    Error::Corrupt(Corruption::new(file, offset, what))
}
