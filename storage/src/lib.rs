//! The storage layer: the one narrow interface through which every byte that
//! reaches durable media passes.
//!
//! A store is a set of numbered *segments* (append-only files) and a few small
//! *meta* blobs replaced atomically. Segments are written once, front to back,
//! and never modified afterwards except by deletion, which is the shape an
//! object store (S3 and friends) can also offer: a segment that is no longer
//! appended to can be uploaded as one immutable object.
//!
//! Three implementations live here:
//! - [`LocalDir`]: a directory on a local file system (the default);
//! - [`MemoryStorage`]: everything in RAM, every write immediately "durable";
//! - `SimStorage` (with the `sim` feature, for tests): a crash simulator that
//!   remembers what was synced, can drop, reorder and tear un-synced writes on
//!   a simulated crash, and can fail any call with EIO or ENOSPC on purpose.

// Every public item says what it does: this crate is published (crates.io),
// and its API documentation is what its users read.
#![warn(missing_docs)]

mod error;
mod local;
mod memory;
#[cfg(any(test, feature = "sim"))]
mod sim;

pub use error::{Corruption, Error, IoError};
pub use local::LocalDir;
pub use memory::MemoryStorage;
#[cfg(any(test, feature = "sim"))]
pub use sim::{Fault, Op as SimOp, SimStorage};

use std::fmt::Debug;
use std::sync::Arc;

/// Number of a segment. Segment ids are unique for the lifetime of a store and
/// only ever grow: a new segment always gets a larger id than any before it.
pub type SegmentId = u64;

/// Largest segment id the file naming and page addresses can carry (2^32 - 1).
pub const MAX_SEGMENT_ID: SegmentId = u32::MAX as u64;

/// Called by a bulk segment's writer after each step of its write-back
/// (see `Storage::create_bulk_segment`).
pub type StepHook = Arc<dyn Fn() + Send + Sync>;

/// A writer's lease as a follower reads it ([`Storage::writer_lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterLease {
    /// The writer's random id.
    pub writer: [u8; 16],
    /// The number of the fence that made it the writer.
    pub epoch: u64,
    /// How many times it put the lease: changes while the writer lives.
    pub renewal: u64,
    /// What the writer announces (`kivi serve`: its address).
    pub note: String,
}

/// What [`Storage::refresh`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// Anything changed: segments grew, appeared or went.
    pub changed: bool,
    /// The writer deleted what this reader had not read yet, so the view
    /// was read again from the start: segments may have gone, and what a
    /// reader derived from them must be derived again.
    pub restarted: bool,
    /// Wall-clock time (milliseconds since the Unix epoch) the writer
    /// stamped on the oldest and the newest record of its log read by this
    /// call, where it stamps them.
    pub oldest_ms: Option<u64>,
    /// The same for the newest record read.
    pub newest_ms: Option<u64>,
}

/// Where durable bytes live. Every implementation must make these promises:
///
/// - `create_segment` returns only when the new, empty segment's *existence* is
///   durable (for a directory: the file is created and the directory fsynced).
/// - `SegmentWriter::append` adds bytes at the end; they may be lost on a crash
///   until `SegmentWriter::sync` returns. If `append` fails, the segment's bytes
///   past its previous length are unspecified, and the writer must not be used
///   to append again (callers start a new segment instead).
/// - `SegmentWriter::sync` returns only when every byte appended before it is
///   durable (fdatasync).
/// - `delete_segment` returns when the deletion is durable.
/// - `write_meta` atomically replaces a small named blob and is durable on return.
/// - `SegmentReader::read_at` sees every byte appended so far by this process.
pub trait Storage: Send + Sync + Debug {
    /// Ids of every segment present, in ascending order.
    fn list_segments(&self) -> Result<Vec<SegmentId>, IoError>;
    /// Creates a new empty segment; fails if `id` already exists.
    fn create_segment(&self, id: SegmentId) -> Result<Box<dyn SegmentWriter>, IoError>;
    /// Creates a new empty segment for bulk data: written in large appends
    /// and synced rarely (the page log's). Same promises as
    /// `create_segment`; a backend may write each append back to the media
    /// in small steps before it returns, so that a sync never finds a burst
    /// of them queued in front of another segment's, and then calls
    /// `after_step` after each step: the caller's chance to make way for
    /// other writes. Whether to wait there is the caller's decision, not
    /// the backend's.
    fn create_bulk_segment(
        &self,
        id: SegmentId,
        _after_step: StepHook,
    ) -> Result<Box<dyn SegmentWriter>, IoError> {
        self.create_segment(id)
    }
    /// Opens an existing segment for positioned reads.
    fn open_segment(&self, id: SegmentId) -> Result<Arc<dyn SegmentReader>, IoError>;
    /// Removes a segment.
    fn delete_segment(&self, id: SegmentId) -> Result<(), IoError>;
    /// Reads a small named blob, `None` if it was never written.
    fn read_meta(&self, name: &str) -> Result<Option<Vec<u8>>, IoError>;
    /// Atomically and durably replaces a small named blob.
    fn write_meta(&self, name: &str, bytes: &[u8]) -> Result<(), IoError>;
    /// Human-readable name of a segment, used in error messages.
    fn segment_name(&self, id: SegmentId) -> String;
    /// Human-readable name of a meta blob, used in error messages (a
    /// damaged identity is reported as the blob's); by default the name.
    fn meta_name(&self, name: &str) -> String {
        name.to_string()
    }
    /// For a backend on a remote service (an object store): the requests
    /// it made since it was opened and what its local cache did. `None`
    /// for local backends.
    fn remote_requests(&self) -> Option<RemoteRequests> {
        None
    }
    /// How many syncs of one segment may be outstanding at once (see
    /// [`SegmentWriter::start_sync`]): 1 unless the backend overlaps them,
    /// as an object store does (each sync is a request of its own).
    fn syncs_in_flight(&self) -> usize {
        1
    }
    /// How long a page segment no checkpoint references any more is kept
    /// before it is deleted: for readers in other processes (followers),
    /// which move onto the new checkpoint's tree only once they read its
    /// record. Zero (the default) where nobody else reads.
    fn retired_grace(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// For a writer whose followers read the same storage (an object
    /// store's): what it tells them in its lease, renewed about once a
    /// second (`kivi serve` announces its address). Does nothing elsewhere.
    fn announce(&self, note: &str) {
        let _ = note;
    }
    /// For a writer: another writer took over (fenced it), so it writes no
    /// more. Cheap (no lock): a server asks before every command.
    fn is_fenced(&self) -> bool {
        false
    }
    /// For a writer: whether it still is the writer, asked of the storage
    /// itself rather than remembered (an object store's writer that was
    /// paused or idle while another took over learns it here, and is
    /// fenced from then on). May cost a request; for answering a client
    /// that asks which server is the writer (ROLE, INFO), not for every
    /// command. Asked of writers only (a read-only open is none).
    fn confirm_writer(&self) -> bool {
        !self.is_fenced()
    }
    /// The writer's lease as it stands now (`None`: no writer has put one),
    /// one request: for a follower, or a writer another one fenced.
    fn writer_lease(&self) -> Result<Option<WriterLease>, IoError> {
        Ok(None)
    }
    /// For a read-only open that follows a writer ([`Storage::refresh`]):
    /// becomes the writer, displacing the one there was, which can make
    /// nothing more durable from then on. Backends without followers say
    /// so (the default).
    fn take_over(&self) -> Result<(), IoError> {
        Err(IoError::new(
            "take over",
            String::from("this storage"),
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "only a store on an object store has followers that take over",
            ),
        ))
    }
    /// After [`Storage::take_over`] succeeded but the engine could not
    /// open the store as its writer: read-only again, following, and no
    /// longer renewing the writer's lease, so that a standby takes over
    /// from it as from a writer that died (its fence stays; a later
    /// takeover fences past it). Nothing it wrote is lost: it wrote only
    /// its fence. Does nothing where `take_over` is not supported.
    fn step_down(&self) {}
    /// For a read-only open of a store another process writes (a
    /// *follower*): learns what that writer made durable since the open or
    /// the last call, so that segments grow and appear as they did for the
    /// writer. `list` also finds what only a listing finds (an object
    /// store's page segments), as an open does. Backends that cannot be
    /// followed say so (the default).
    fn refresh(&self, list: bool) -> Result<Refreshed, IoError> {
        let _ = list;
        Err(IoError::new(
            "follow",
            String::from("this storage"),
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "only a store on an object store can be followed",
            ),
        ))
    }
}

/// A sync started by [`SegmentWriter::start_sync`]; [`wait`](Self::wait)
/// returns once it is done.
#[must_use = "a sync is only known durable once waited for"]
pub struct PendingSync(Option<Box<dyn FnOnce() -> Result<(), IoError> + Send>>);

impl PendingSync {
    /// A sync already done.
    pub fn done() -> PendingSync {
        PendingSync(None)
    }

    /// A sync that `wait` finishes.
    pub fn new(wait: impl FnOnce() -> Result<(), IoError> + Send + 'static) -> PendingSync {
        PendingSync(Some(Box::new(wait)))
    }

    /// Waits until the bytes are durable, or fails.
    pub fn wait(self) -> Result<(), IoError> {
        match self.0 {
            None => Ok(()),
            Some(wait) => wait(),
        }
    }
}

impl std::fmt::Debug for PendingSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "PendingSync(in flight)"
        } else {
            "PendingSync(done)"
        })
    }
}

/// Requests a remote backend made since it was opened, by kind, with the
/// bytes they moved; and its local cache's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteRequests {
    /// Puts (create-if-absent ones and meta blobs).
    pub puts: u64,
    /// Bytes sent by puts.
    pub put_bytes: u64,
    /// Gets, whole and ranged.
    pub gets: u64,
    /// Bytes received by gets.
    pub get_bytes: u64,
    /// Deletes.
    pub deletes: u64,
    /// List requests (pages of a listing).
    pub lists: u64,
    /// Puts that found their name taken (by another writer, or by an
    /// earlier attempt of their own whose answer was lost).
    pub conflicts: u64,
    /// Requests that failed and were tried again.
    pub retries: u64,
    /// Reads the local cache answered.
    pub cache_hits: u64,
    /// Reads the local cache could not answer.
    pub cache_misses: u64,
    /// Bytes in the local cache.
    pub cache_bytes: u64,
}

/// Appends to one segment. Dropping it closes the segment for writing.
pub trait SegmentWriter: Send {
    /// Writes `bytes` at the segment's end. Not durable until [`sync`]
    /// returns; after a failed append the segment's tail is unknown, and the
    /// caller moves on to a new segment.
    ///
    /// [`sync`]: SegmentWriter::sync
    fn append(&mut self, bytes: &[u8]) -> Result<(), IoError>;
    /// Makes every byte appended so far durable (fdatasync, or the
    /// backend's equivalent) before returning.
    fn sync(&mut self) -> Result<(), IoError>;
    /// Starts making every byte appended so far durable, without waiting:
    /// the returned [`PendingSync`] waits. Up to
    /// [`Storage::syncs_in_flight`] may be outstanding on one segment, with
    /// appends between them; each is durable only if every one started
    /// before it is, so a failure fails every later one, and the caller
    /// then moves on to a new segment. The default syncs here.
    fn start_sync(&mut self) -> Result<PendingSync, IoError> {
        self.sync().map(|()| PendingSync::done())
    }
    /// Bytes in the segment, counting every successful append.
    fn len(&self) -> u64;
    /// Whether nothing has been appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Positioned reads from one segment; shared between threads.
pub trait SegmentReader: Send + Sync {
    /// Fills `buf` from `offset`; fails (kind `UnexpectedEof`) if the segment is shorter.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError>;
    /// Current length of the segment.
    fn size(&self) -> Result<u64, IoError>;
    /// A hint that `len` bytes at `offset` will be read soon: a backend
    /// that can starts reading them now, without waiting, so that many
    /// reads are in flight at once. Errors are ignored: it is only a hint.
    fn will_need(&self, _offset: u64, _len: u64) {}
    /// A hint that this reader reads records here and there, never on
    /// through the segment: a backend that reads ahead of sequential reads
    /// should not. Errors are ignored.
    fn reads_at_random(&self) {}
}

/// Reads `len` bytes at `offset` into a new buffer.
pub fn read_vec(reader: &dyn SegmentReader, offset: u64, len: usize) -> Result<Vec<u8>, IoError> {
    let mut buf = vec![0u8; len];
    reader.read_at(offset, &mut buf)?;
    Ok(buf)
}

/// File name of a segment in a directory store; also used by the other backends
/// so that messages name segments the same way everywhere.
pub fn segment_file_name(id: SegmentId) -> String {
    format!("{id:010}.seg")
}

/// Parses a name made by [`segment_file_name`].
pub fn parse_segment_file_name(name: &str) -> Option<SegmentId> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: SegmentId = digits.parse().ok()?;
    (id <= MAX_SEGMENT_ID).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip() {
        for id in [0, 1, 42, MAX_SEGMENT_ID] {
            assert_eq!(parse_segment_file_name(&segment_file_name(id)), Some(id));
        }
        assert_eq!(parse_segment_file_name("12.seg"), None);
        assert_eq!(parse_segment_file_name("000000001x.seg"), None);
        assert_eq!(parse_segment_file_name("0000000001.log"), None);
        assert_eq!(parse_segment_file_name("9999999999.seg"), None);
    }
}
