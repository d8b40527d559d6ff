//! A chain of segments of one kind, written one after another: each new
//! segment's header names the previous one and where it validly ends, so a
//! failed write is cut off by starting the next segment, never by truncating
//! a file. The commit log and the page log are both such chains; they differ
//! in what they write and in what counts as valid when a segment is closed
//! without a successful sync.

use kivi_log::{Error, SegmentAppender, SegmentIds, SegmentKind};
use kivi_storage::{IoError, SegmentId, SegmentReader, SegmentWriter, StepHook, Storage};
use std::sync::Arc;

pub(crate) struct SegmentChain {
    storage: Arc<dyn Storage>,
    ids: Arc<SegmentIds>,
    store_id: [u8; 16],
    kind: SegmentKind,
    /// For a chain of bulk segments (see `Storage::create_bulk_segment`),
    /// what their writers call after each write-back step.
    bulk: Option<StepHook>,
    /// The segment being appended to, if one is open.
    current: Option<SegmentAppender>,
    /// The previous segment and where it validly ends, for the next header.
    prev: Option<(SegmentId, u64)>,
}

impl SegmentChain {
    pub fn new(
        storage: Arc<dyn Storage>,
        ids: Arc<SegmentIds>,
        store_id: [u8; 16],
        kind: SegmentKind,
        bulk: Option<StepHook>,
        prev: Option<(SegmentId, u64)>,
    ) -> Self {
        SegmentChain {
            storage,
            ids,
            store_id,
            kind,
            bulk,
            current: None,
            prev,
        }
    }

    pub fn current(&self) -> Option<&SegmentAppender> {
        self.current.as_ref()
    }

    pub fn current_mut(&mut self) -> Option<&mut SegmentAppender> {
        self.current.as_mut()
    }

    /// The segment closed last and where it validly ends.
    pub fn prev(&self) -> Option<(SegmentId, u64)> {
        self.prev
    }

    /// Closes the open segment, if any: syncs it (unless an earlier failure
    /// broke it) and records where it validly ends for the next header: all
    /// of it once synced, else `unsynced_end(segment, sync_failed)`. A failed
    /// sync is returned after that, so the next call starts a new segment.
    pub fn close(
        &mut self,
        unsynced_end: impl FnOnce(&SegmentAppender, bool) -> u64,
    ) -> Result<(), Error> {
        let Some(mut cur) = self.current.take() else {
            return Ok(());
        };
        let synced = if cur.is_broken() {
            None
        } else {
            Some(cur.sync())
        };
        match synced {
            Some(Ok(())) => {
                self.prev = Some((cur.id(), cur.len()));
                Ok(())
            }
            Some(Err(e)) => {
                self.prev = Some((cur.id(), unsynced_end(&cur, true)));
                Err(e)
            }
            None => {
                self.prev = Some((cur.id(), unsynced_end(&cur, false)));
                Ok(())
            }
        }
    }

    /// Drops the open segment without syncing it: the next header declares
    /// that it ends at `end`, and nothing written past that is ever read.
    pub fn abandon(&mut self, end: u64) {
        if let Some(cur) = self.current.take() {
            self.prev = Some((cur.id(), end));
        }
    }

    /// Starts the next segment (the open one must be closed first); its
    /// header, naming the previous segment, is durable on return.
    pub fn open_next(&mut self) -> Result<&mut SegmentAppender, Error> {
        assert!(self.current.is_none(), "opening a segment over an open one");
        let id = self.ids.allocate()?;
        let bulk;
        let storage: &dyn Storage = match &self.bulk {
            Some(after_step) => {
                bulk = Bulk(self.storage.as_ref(), after_step);
                &bulk
            }
            None => self.storage.as_ref(),
        };
        match SegmentAppender::create(storage, id, self.store_id, self.kind, self.prev) {
            Ok(app) => Ok(self.current.insert(app)),
            Err(e) => {
                // Best effort: a half-created segment is recognised as
                // garbage on recovery anyway.
                let _ = self.storage.delete_segment(id);
                Err(e)
            }
        }
    }
}

/// The storage as a bulk chain creates segments in it: as bulk segments.
struct Bulk<'a>(&'a dyn Storage, &'a StepHook);

impl std::fmt::Debug for Bulk<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Bulk").field(&self.0).finish()
    }
}

impl Storage for Bulk<'_> {
    fn list_segments(&self) -> Result<Vec<SegmentId>, IoError> {
        self.0.list_segments()
    }
    fn create_segment(&self, id: SegmentId) -> Result<Box<dyn SegmentWriter>, IoError> {
        self.0.create_bulk_segment(id, self.1.clone())
    }
    fn open_segment(&self, id: SegmentId) -> Result<Arc<dyn SegmentReader>, IoError> {
        self.0.open_segment(id)
    }
    fn delete_segment(&self, id: SegmentId) -> Result<(), IoError> {
        self.0.delete_segment(id)
    }
    fn read_meta(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        self.0.read_meta(name)
    }
    fn write_meta(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        self.0.write_meta(name, bytes)
    }
    fn segment_name(&self, id: SegmentId) -> String {
        self.0.segment_name(id)
    }
}
