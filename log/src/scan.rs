//! Reading a segment's records front to back, and telling a torn tail from
//! corruption.
//!
//! A segment that is not the newest of its kind has a known valid end (its
//! successor's header says where), and every record up to it must be valid.
//! The newest commit segment ends wherever the last write that reached the
//! disk ends: the first invalid record there is a torn tail *unless a valid
//! record after it says the bad bytes were already durable when it was
//! written* (its `synced_through`, see commit.rs). Then bytes that were
//! synced have since changed: that is corruption, and is reported. (With
//! durable commits only one append is ever un-synced, so any valid record
//! after a bad one proves this; without fsync, later appends may reach the
//! disk while an earlier one did not, which is a tail to cut, not damage.)

use crate::record::{decode_record_at, RecordError, RecordType, RECORD_HEADER_LEN};
use crate::segment::{SegmentHeader, SEGMENT_HEADER_LEN};
use crate::{synced_claim, Corruption, Error, MAX_RECORD_BODY};
use kivi_storage::SegmentReader;
use std::sync::Arc;

/// Where the valid records of a segment end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanEnd {
    /// Exactly here: every record before it must be valid, and the last must
    /// end exactly at it.
    Exact(u64),
    /// Wherever the last valid record ends; a torn tail after it is cut off.
    Tail,
}

/// A record a scan found valid (checksum, length and type).
pub struct ScannedRecord<'a> {
    /// Where the record starts in its segment.
    pub offset: u64,
    /// What its body holds.
    pub ty: RecordType,
    /// The body, borrowed from the scan's buffer until its next record.
    pub body: &'a [u8],
    /// Total length, header included.
    pub len: u64,
}

/// Reads records sequentially in chunks, so a segment of any size is scanned
/// with a bounded buffer (one chunk, or one record if it is larger).
pub struct SegmentScan {
    reader: Arc<dyn SegmentReader>,
    id: u64,
    name: String,
    file_len: u64,
    tail_mode: bool,
    limit: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_start: u64,
    header: SegmentHeader,
    torn_at: Option<u64>,
}

const CHUNK: usize = 1 << 20;

/// Opens a segment for scanning after validating its header. In `Tail` mode a
/// segment whose header never fully reached the disk (a crash while it was
/// being created) gives `Ok(None)`: it holds nothing.
pub fn scan_segment(
    reader: Arc<dyn SegmentReader>,
    id: u64,
    name: String,
    end: ScanEnd,
) -> Result<Option<SegmentScan>, Error> {
    let file_len = reader.size()?;
    let tail_mode = end == ScanEnd::Tail;
    let corrupt = |offset: u64, what: String| Error::Corrupt(Corruption::new(&name, offset, what));
    let limit = match end {
        ScanEnd::Exact(n) if n > file_len => {
            return Err(corrupt(
                file_len,
                format!("segment is {file_len} bytes but its successor says it holds {n}"),
            ))
        }
        ScanEnd::Exact(n) => n,
        ScanEnd::Tail => file_len,
    };
    let Some(header) = read_header(reader.as_ref(), id, &name, file_len, tail_mode)? else {
        return Ok(None);
    };
    if limit < SEGMENT_HEADER_LEN {
        return Err(corrupt(
            0,
            "valid end lies inside the segment header".into(),
        ));
    }
    Ok(Some(SegmentScan {
        reader,
        id,
        name,
        file_len,
        tail_mode,
        limit,
        pos: SEGMENT_HEADER_LEN,
        buf: Vec::new(),
        buf_start: SEGMENT_HEADER_LEN,
        header,
        torn_at: None,
    }))
}

/// Reads and validates the header of segment `id` (`file_len` bytes long).
/// With `allow_torn`, a segment too short to hold a whole header whose header
/// does not decode gives `Ok(None)`: its creation never completed.
pub fn read_header(
    reader: &dyn SegmentReader,
    id: u64,
    name: &str,
    file_len: u64,
    allow_torn: bool,
) -> Result<Option<SegmentHeader>, Error> {
    let corrupt = |offset: u64, what: String| Error::Corrupt(Corruption::new(name, offset, what));
    let header_bytes = SEGMENT_HEADER_LEN.min(file_len) as usize;
    let mut head = vec![0u8; header_bytes];
    reader.read_at(0, &mut head)?;
    let header = match decode_record_at(&head, id, 0) {
        Ok((RecordType::SegmentHeader, body, _)) => {
            SegmentHeader::decode_body(body).map_err(|what| corrupt(0, what))?
        }
        Ok(_) => {
            return Err(corrupt(
                0,
                "segment does not start with a segment header".into(),
            ))
        }
        Err(_) if allow_torn && file_len <= SEGMENT_HEADER_LEN => return Ok(None),
        Err(e) => return Err(corrupt(0, format!("segment header: {}", e.describe()))),
    };
    if header.segment != id {
        return Err(corrupt(
            0,
            format!(
                "header says segment {}, file is segment {id}",
                header.segment
            ),
        ));
    }
    Ok(Some(header))
}

impl SegmentScan {
    /// The segment's header, read and checked when the scan began.
    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// Offset just past the last valid record read so far (after the scan has
    /// finished: the segment's valid end).
    pub fn valid_end(&self) -> u64 {
        self.pos
    }

    /// Where a torn tail was cut off, once the scan has reached it.
    pub fn torn_at(&self) -> Option<u64> {
        self.torn_at
    }

    /// The segment file's length when the scan began (which may run past
    /// its valid end).
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    fn corrupt(&self, offset: u64, what: impl Into<String>) -> Error {
        Error::Corrupt(Corruption::new(&self.name, offset, what))
    }

    /// Makes bytes [pos, pos + n) available in the buffer, n ≤ limit - pos.
    fn fill(&mut self, n: usize) -> Result<(), Error> {
        let have_end = self.buf_start + self.buf.len() as u64;
        if self.pos >= self.buf_start && self.pos + n as u64 <= have_end {
            return Ok(());
        }
        let want = n.max(CHUNK).min((self.limit - self.pos) as usize);
        self.buf.resize(want, 0);
        self.reader.read_at(self.pos, &mut self.buf)?;
        self.buf_start = self.pos;
        Ok(())
    }

    /// The next record, or `None` at the valid end.
    pub fn next_record(&mut self) -> Result<Option<ScannedRecord<'_>>, Error> {
        if self.pos >= self.limit {
            return Ok(None);
        }
        let left = self.limit - self.pos;
        let problem = if left < RECORD_HEADER_LEN as u64 {
            RecordError::Truncated
        } else {
            self.fill(RECORD_HEADER_LEN)?;
            let at = (self.pos - self.buf_start) as usize;
            let len =
                u32::from_le_bytes(self.buf[at + 4..at + 8].try_into().expect("4 bytes")) as u64;
            if len as usize > MAX_RECORD_BODY {
                RecordError::BadLength
            } else if RECORD_HEADER_LEN as u64 + len > left {
                RecordError::Truncated
            } else {
                self.fill(RECORD_HEADER_LEN + len as usize)?;
                let at = (self.pos - self.buf_start) as usize;
                match decode_record_at(&self.buf[at..], self.id, self.pos) {
                    Ok((ty, _, total)) => {
                        let offset = self.pos;
                        self.pos += total as u64;
                        let body = &self.buf[at + RECORD_HEADER_LEN..at + total];
                        return Ok(Some(ScannedRecord {
                            offset,
                            ty,
                            body,
                            len: total as u64,
                        }));
                    }
                    Err(e) => e,
                }
            }
        };
        if !self.tail_mode {
            return Err(self.corrupt(self.pos, problem.describe()));
        }
        if let Some(q) = self.find_proof_of_sync_after(self.pos)? {
            return Err(self.corrupt(
                self.pos,
                format!(
                    "{}, yet the record at offset {q} says these bytes were synced: not a torn tail",
                    problem.describe()
                ),
            ));
        }
        self.torn_at = Some(self.pos);
        self.limit = self.pos;
        Ok(None)
    }

    /// Looks for a valid record after `bad` that says the bytes at `bad` were
    /// durable when it was written (a record that makes no claim, a segment
    /// header or a page, counts as saying everything before it was).
    fn find_proof_of_sync_after(&self, bad: u64) -> Result<Option<u64>, Error> {
        self.find_record_after(bad, self.file_len, &|ty, body, q| {
            synced_claim(ty, body).unwrap_or(q) > bad
        })
    }

    /// After [`SegmentScan::next_record`] reported damage, moves past it to
    /// the next valid record and returns where that is, or `None` (and ends
    /// the scan) if no valid record follows in the segment's valid range.
    /// Lets a reader that can do without the damaged records (recovery, when
    /// a checkpoint covers them) read the rest.
    pub fn skip_damage(&mut self) -> Result<Option<u64>, Error> {
        let next = self.find_record_after(self.pos, self.limit, &|_, _, _| true)?;
        match next {
            Some(q) => self.pos = q,
            None => self.pos = self.limit,
        }
        Ok(next)
    }

    /// The first position after `bad` where a valid record, ending by `end`,
    /// starts and satisfies `accept`.
    fn find_record_after(
        &self,
        bad: u64,
        end: u64,
        accept: &dyn Fn(RecordType, &[u8], u64) -> bool,
    ) -> Result<Option<u64>, Error> {
        let mut start = bad + 1;
        let mut chunk = vec![0u8; CHUNK + RECORD_HEADER_LEN];
        while start + RECORD_HEADER_LEN as u64 <= end {
            let n = ((end - start) as usize).min(chunk.len());
            self.reader.read_at(start, &mut chunk[..n])?;
            let last = n - RECORD_HEADER_LEN;
            for i in 0..=last.min(CHUNK - 1) {
                let q = start + i as u64;
                let h = &chunk[i..i + RECORD_HEADER_LEN];
                if RecordType::from_u8(h[8]).is_none() {
                    continue;
                }
                let len = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes")) as u64;
                let total = RECORD_HEADER_LEN as u64 + len;
                if len as usize > MAX_RECORD_BODY || q + total > end {
                    continue;
                }
                let mut rec = vec![0u8; total as usize];
                self.reader.read_at(q, &mut rec)?;
                if let Ok((ty, body, _)) = decode_record_at(&rec, self.id, q) {
                    if accept(ty, body, q) {
                        return Ok(Some(q));
                    }
                }
            }
            start += (last.min(CHUNK - 1) + 1) as u64;
        }
        Ok(None)
    }
}
