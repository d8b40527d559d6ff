//! Appending records to a segment.

use crate::blocks::{BlockPacker, PAGE_BLOCK_BYTES};
use crate::record::{begin_record, finish_record, Addr, PageRef, RecordType};
use crate::segment::{SegmentHeader, SegmentKind, FORMAT_VERSION};
use crate::Error;
use kivi_storage::{IoError, PendingSync, SegmentId, SegmentWriter, Storage, MAX_SEGMENT_ID};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Hands out segment ids: each new segment, of any kind, gets the next one.
#[derive(Debug)]
pub struct SegmentIds {
    next: AtomicU64,
}

impl SegmentIds {
    /// `highest` is the largest id present in the store (0 if none).
    pub fn after(highest: SegmentId) -> Self {
        SegmentIds {
            next: AtomicU64::new(highest + 1),
        }
    }

    /// The next unused id; fails once ids pass `MAX_SEGMENT_ID`.
    pub fn allocate(&self) -> Result<SegmentId, IoError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if id > MAX_SEGMENT_ID {
            return Err(IoError::new(
                "allocate segment",
                format!("id {id}"),
                io::Error::other("segment ids exhausted"),
            ));
        }
        Ok(id)
    }
}

/// Appends records to one segment, either one at a time ([`append_record`])
/// or buffered ([`buffer_record`] then [`flush`]); the address of a buffered
/// record is known before it reaches the segment, which lets a checkpoint
/// encode a parent page with its children's addresses in one pass.
///
/// Page segments pack their records into 4 KiB blocks (see `blocks`), with
/// padding records in the gaps; commit segments append records end to end.
///
/// After any failed append or sync the appender is *broken*: nothing more may
/// be written to the segment, and [`valid_end`] is where its last good record
/// ends, which the next segment's header records.
///
/// [`append_record`]: SegmentAppender::append_record
/// [`buffer_record`]: SegmentAppender::buffer_record
/// [`flush`]: SegmentAppender::flush
/// [`valid_end`]: SegmentAppender::valid_end
pub struct SegmentAppender {
    id: SegmentId,
    kind: SegmentKind,
    writer: Box<dyn SegmentWriter>,
    /// Bytes written to the segment, not counting `buf`.
    written: u64,
    /// End of the last record known to be good (written, or buffered).
    good_end: u64,
    /// Bytes made durable by the last successful sync.
    synced: u64,
    buf: Vec<u8>,
    broken: bool,
    /// Page segments: where records go in the buffer.
    packer: Option<BlockPacker>,
    /// A packed record is encoded here before it is copied into place.
    scratch: Vec<u8>,
}

impl SegmentAppender {
    /// Creates segment `id`, writes its header and syncs it.
    pub fn create(
        storage: &dyn Storage,
        id: SegmentId,
        store_id: [u8; 16],
        kind: SegmentKind,
        prev: Option<(SegmentId, u64)>,
    ) -> Result<Self, Error> {
        let (prev_segment, prev_end) = prev.unwrap_or((0, 0));
        let header = SegmentHeader {
            store_id,
            segment: id,
            kind,
            prev_segment,
            prev_end,
            format: FORMAT_VERSION,
        };
        let mut writer = storage.create_segment(id)?;
        let bytes = header.encode();
        writer.append(&bytes)?;
        writer.sync()?;
        let len = bytes.len() as u64;
        Ok(SegmentAppender {
            id,
            kind,
            writer,
            written: len,
            good_end: len,
            synced: len,
            buf: Vec::new(),
            broken: false,
            packer: (kind == SegmentKind::Pages).then(|| BlockPacker::new(PAGE_BLOCK_BYTES)),
            scratch: Vec::new(),
        })
    }

    /// The segment being written.
    pub fn id(&self) -> SegmentId {
        self.id
    }

    /// The log the segment belongs to.
    pub fn kind(&self) -> SegmentKind {
        self.kind
    }

    /// Length of the segment including buffered records.
    pub fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    /// Whether the segment holds nothing, not even its header.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a failed write or sync (or [`abandon_from`]) has ended this
    /// segment: every append to it fails, and the log goes on in a new one.
    ///
    /// [`abandon_from`]: Self::abandon_from
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// End of the last record that was written or buffered without error.
    pub fn valid_end(&self) -> u64 {
        self.good_end
    }

    /// Bytes of the segment known durable: everything before this offset.
    pub fn synced_len(&self) -> u64 {
        self.synced
    }

    /// Bytes of records appended but not yet handed to storage.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    fn check_usable(&self) -> Result<(), Error> {
        if self.broken {
            return Err(Error::Io(IoError::new(
                "append to",
                format!("segment {}", self.id),
                io::Error::other("segment is closed after an earlier write failure"),
            )));
        }
        Ok(())
    }

    /// Encodes a record at the end of the buffer with `body` writing its body,
    /// and returns where it will live. Nothing reaches the segment until `flush`.
    pub fn buffer_record(&mut self, ty: RecordType, body: impl FnOnce(&mut Vec<u8>)) -> PageRef {
        if self.packer.is_some() {
            return self.buffer_packed(ty, body);
        }
        let offset = self.len();
        let start = begin_record(&mut self.buf);
        body(&mut self.buf);
        let len = finish_record(&mut self.buf, start, self.id, offset, ty);
        self.good_end = offset + len as u64;
        PageRef {
            addr: Addr::new(self.id, offset),
            len: len as u32,
        }
    }

    /// `buffer_record` in a page segment: the record goes where the packer
    /// says, inside the buffer, which grows to a block boundary.
    fn buffer_packed(&mut self, ty: RecordType, body: impl FnOnce(&mut Vec<u8>)) -> PageRef {
        let packer = self.packer.as_mut().expect("packed segment");
        let mut rec = std::mem::take(&mut self.scratch);
        rec.clear();
        begin_record(&mut rec);
        body(&mut rec);
        let len = rec.len() as u64;
        let (offset, end) = packer.place(self.written + self.buf.len() as u64, len);
        finish_record(&mut rec, 0, self.id, offset, ty);
        let new_len = (end - self.written) as usize;
        if self.buf.len() < new_len {
            self.buf.resize(new_len, 0);
        }
        let at = (offset - self.written) as usize;
        self.buf[at..at + rec.len()].copy_from_slice(&rec);
        // Gaps are padded at the flush: the buffer will be written whole.
        self.good_end = end;
        if rec.capacity() <= 1 << 20 {
            self.scratch = rec;
        }
        PageRef {
            addr: Addr::new(self.id, offset),
            len: len as u32,
        }
    }

    /// Fills the packer's gaps in the buffer with padding records.
    fn pad_gaps(&mut self) {
        let Some(packer) = self.packer.as_mut() else {
            return;
        };
        for gap in packer.take_gaps() {
            let start = (gap.start - self.written) as usize;
            let end = (gap.end - self.written) as usize;
            let out = &mut self.buf[..end];
            out[start..].fill(0);
            finish_record(out, start, self.id, gap.start, RecordType::Padding);
        }
    }

    /// Writes the buffered records to the segment in one append.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.pad_gaps();
        if self.buf.is_empty() {
            return Ok(());
        }
        self.check_usable()?;
        if let Err(e) = self.writer.append(&self.buf) {
            self.broken = true;
            self.good_end = self.written;
            self.buf.clear();
            return Err(e.into());
        }
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes one record now, in a single append, and returns where it lives.
    pub fn append_record(
        &mut self,
        ty: RecordType,
        body: impl FnOnce(&mut Vec<u8>),
    ) -> Result<PageRef, Error> {
        self.check_usable()?;
        debug_assert!(self.buf.is_empty(), "append_record with buffered records");
        let r = self.buffer_record(ty, body);
        self.flush()?;
        // Keep the buffer's capacity for the next record, but not a huge one.
        if self.buf.capacity() > 8 << 20 {
            self.buf = Vec::new();
        }
        Ok(r)
    }

    /// Flushes and makes everything written so far durable.
    pub fn sync(&mut self) -> Result<(), Error> {
        self.flush()?;
        if let Err(e) = self.writer.sync() {
            self.broken = true;
            return Err(e.into());
        }
        self.synced = self.written;
        Ok(())
    }

    /// Flushes and starts making everything written so far durable (see
    /// `SegmentWriter::start_sync`); `synced_len` does not move, as the
    /// caller learns only later whether the sync succeeded.
    pub fn start_sync(&mut self) -> Result<PendingSync, Error> {
        self.flush()?;
        match self.writer.start_sync() {
            Ok(pending) => Ok(pending),
            Err(e) => {
                self.broken = true;
                Err(e.into())
            }
        }
    }

    /// After a failed sync the bytes of the last record may or may not be on
    /// disk; declaring the segment to end before it makes sure it is never
    /// read back. `end` must be a record boundary at or before the current end.
    pub fn abandon_from(&mut self, end: u64) {
        assert!(end <= self.len());
        self.broken = true;
        self.good_end = end;
    }
}
