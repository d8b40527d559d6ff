//! The page log: segments that checkpoints write tree pages and large values
//! to. Records are buffered and written in large appends; a checkpoint syncs
//! once at its end, before its checkpoint record is committed, so a page is
//! never referenced before it is durable.

use kivi_log::{Addr, Error, PageRef, RecordType, SegmentAppender, SegmentIds, SegmentKind};
use kivi_storage::{IoError, SegmentId, SegmentReader, SegmentWriter, Storage};
use kivi_tree::PageSink;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The storage as the page log creates segments in it: as bulk segments,
/// which a backend may write back early and in small steps, so that a
/// checkpoint's sync never puts a burst of pages in front of a commit's
/// (see `Storage::create_bulk_segment`).
#[derive(Debug)]
struct Bulk<'a>(&'a dyn Storage);

impl Storage for Bulk<'_> {
    fn list_segments(&self) -> Result<Vec<SegmentId>, IoError> {
        self.0.list_segments()
    }
    fn create_segment(&self, id: SegmentId) -> Result<Box<dyn SegmentWriter>, IoError> {
        self.0.create_bulk_segment(id)
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

/// Appends are gathered up to this size before they are written.
const WRITE_BUFFER: usize = 1 << 20;
/// Page segments are at least this large (unless `segment_bytes` is less).
const MIN_SEGMENT_BYTES: u64 = 1 << 20;

pub(crate) struct PageLog {
    storage: Arc<dyn Storage>,
    ids: Arc<SegmentIds>,
    store_id: [u8; 16],
    /// Most bytes a segment takes (`segment_bytes`); see `segment_target`.
    max_target: u64,
    target: u64,
    current: Option<SegmentAppender>,
    /// The previous page segment and where its valid records end.
    prev: Option<(SegmentId, u64)>,
    /// End of the current segment as of the last durable checkpoint.
    durable_end: u64,
    /// Every page segment on disk and its length, the current one included:
    /// what the cleaner chooses from.
    segments: BTreeMap<SegmentId, u64>,
    /// The segment being appended to and its length, for `stats` to read
    /// while a checkpoint holds the page log (the file itself is grown
    /// ahead of its data; see `SegmentWriter`).
    appending: Arc<Mutex<Option<(SegmentId, u64)>>>,
}

impl PageLog {
    pub fn new(
        storage: Arc<dyn Storage>,
        ids: Arc<SegmentIds>,
        store_id: [u8; 16],
        target: u64,
        prev: Option<(SegmentId, u64)>,
        segments: BTreeMap<SegmentId, u64>,
    ) -> Self {
        PageLog {
            storage,
            ids,
            store_id,
            max_target: target,
            target,
            current: None,
            prev,
            durable_end: 0,
            segments,
            appending: Arc::default(),
        }
    }

    /// Where `appending` is published.
    pub fn appending(&self) -> Arc<Mutex<Option<(SegmentId, u64)>>> {
        self.appending.clone()
    }

    fn publish(&self) {
        *self.appending.lock() = self.current();
    }

    /// Sizes segments for a tree of `tree_bytes`: an eighth of it, between
    /// 1 MiB and `segment_bytes`. Space comes back a whole segment at a time,
    /// when nothing in it is live any more; segments as large as the tree
    /// itself (64 MiB under a 73 MiB tree) each held a mix of several
    /// checkpoints' pages and kept about a segment of dead ones.
    pub fn set_tree_bytes(&mut self, tree_bytes: u64) {
        let least = MIN_SEGMENT_BYTES.min(self.max_target);
        self.target = (tree_bytes / 8).clamp(least, self.max_target);
    }

    /// Page segments on disk, oldest first, with their lengths.
    pub fn segments(&self) -> &BTreeMap<SegmentId, u64> {
        &self.segments
    }

    /// Forgets a segment that was deleted.
    pub fn forget(&mut self, id: SegmentId) {
        debug_assert!(self.current.as_ref().is_none_or(|c| c.id() != id));
        self.segments.remove(&id);
    }

    /// The segment being appended to, if one is open.
    pub fn current_id(&self) -> Option<SegmentId> {
        self.current.as_ref().map(|c| c.id())
    }

    /// The segment being appended to and the bytes written to it.
    pub fn current(&self) -> Option<(SegmentId, u64)> {
        self.current.as_ref().map(|c| (c.id(), c.len()))
    }

    /// Closes the current segment, so the next record starts a new one (and
    /// everything before can be cleaned).
    pub fn finish_segment(&mut self) -> Result<(), Error> {
        if self.current.is_some() {
            self.roll()?;
        }
        Ok(())
    }

    /// Starts a new segment even when none is open, so that every segment
    /// on disk lies before it and can be cleaned. Used by compaction: in a
    /// session that has written no pages yet, the segment the last session
    /// ended in is the log's tail, and would otherwise stay however little
    /// of it is live (a store emptied and compacted kept it whole).
    pub fn start_segment(&mut self) -> Result<(), Error> {
        if self.current.is_some() || self.prev.is_some() {
            self.roll()?;
        }
        Ok(())
    }

    fn roll(&mut self) -> Result<(), Error> {
        if let Some(mut cur) = self.current.take() {
            let synced = cur.sync();
            // Whatever happens, the next segment must say where this one
            // validly ends: all of it once synced, else the last durable
            // checkpoint's end in it.
            let end = if synced.is_ok() {
                cur.len()
            } else {
                self.durable_end
            };
            self.prev = Some((cur.id(), end));
            synced?;
        }
        let id = self.ids.allocate()?;
        let app = SegmentAppender::create(
            &Bulk(self.storage.as_ref()),
            id,
            self.store_id,
            SegmentKind::Pages,
            self.prev,
        )
        .inspect_err(|_| {
            let _ = self.storage.delete_segment(id);
        })?;
        self.durable_end = app.len();
        self.segments.insert(id, app.len());
        self.current = Some(app);
        self.publish();
        Ok(())
    }

    /// Makes everything written so far durable.
    pub fn sync(&mut self) -> Result<(), Error> {
        match &mut self.current {
            Some(cur) => cur.sync(),
            None => Ok(()),
        }
    }

    /// Where the next record would go: every page written so far lies before it.
    pub fn end(&self) -> Addr {
        match (&self.current, self.prev) {
            (Some(cur), _) => Addr::new(cur.id(), cur.len()),
            (None, Some((id, end))) => Addr::new(id, end),
            (None, None) => Addr::default(),
        }
    }

    /// Called once a checkpoint referencing everything written is durable.
    pub fn checkpoint_durable(&mut self) {
        if let Some(cur) = &self.current {
            self.durable_end = cur.len();
        }
    }

    /// Called when a checkpoint failed: its records are abandoned and the next
    /// checkpoint starts a new segment that declares where this one validly ends.
    pub fn checkpoint_failed(&mut self) {
        if let Some(cur) = self.current.take() {
            self.prev = Some((cur.id(), self.durable_end));
        }
        self.publish();
    }
}

impl PageSink for PageLog {
    fn write_record(
        &mut self,
        ty: RecordType,
        body: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<PageRef, Error> {
        let full = self
            .current
            .as_ref()
            .is_none_or(|c| c.is_broken() || c.len() >= self.target);
        if full {
            self.roll()?;
        }
        let cur = self.current.as_mut().expect("page segment open");
        let r = cur.buffer_record(ty, |out| body(out));
        self.segments.insert(cur.id(), cur.len());
        if cur.buffered() >= WRITE_BUFFER {
            cur.flush()?;
            self.publish();
        }
        Ok(r)
    }
}
