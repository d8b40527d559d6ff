//! The segment header: the first record of every segment.
//!
//! It says what the segment is (commit log or pages), which store it belongs
//! to, and where the previous segment of the same kind validly ended. Segments
//! are never truncated or rewritten, so a segment that was cut short by a crash
//! keeps its torn tail on disk; the successor's `prev_end` is what tells later
//! readers to stop before it.

use crate::codec::Reader;
use crate::record::{encode_record, RecordType, RECORD_HEADER_LEN};

const MAGIC: &[u8; 8] = b"KIVISEG\0";

/// Version of the on-disk format this build reads and writes.
pub const FORMAT_VERSION: u32 = 5;
/// The oldest format this build reads (and upgrades when it writes).
/// Format 5 added deadlines: expiring puts in commit records, entries with
/// deadlines in leaf and delta pages, the earliest deadline of each child in
/// internal pages; format 4 is format 5 without any. Format 4 added padding
/// records, which pack pages into 4 KiB blocks; format 3 segments are
/// format 4 segments without them.
pub const OLDEST_FORMAT_READ: u32 = 3;

const BODY_LEN: usize = 8 + 4 + 16 + 8 + 1 + 8 + 8;
// The body as `encode` writes it: the magic, the format version (u32), the
// store id, the segment (u64), its kind (u8), the previous segment and where
// it ends (u64 each).
const _: () = assert!(
    BODY_LEN
        == MAGIC.len()
            + size_of::<u32>()
            + size_of::<[u8; 16]>()
            + size_of::<u64>()
            + size_of::<u8>()
            + 2 * size_of::<u64>()
);

/// Total length of the header record at the start of each segment.
pub const SEGMENT_HEADER_LEN: u64 = (RECORD_HEADER_LEN + BODY_LEN) as u64;
// Formats 3 to 5 have a 62-byte segment header: a header of another length
// is another format (a new FORMAT_VERSION, and a fixture in
// engine/tests/data/format-v<N>).
const _: () = assert!(FORMAT_VERSION != 5 || SEGMENT_HEADER_LEN == 62);

/// Which of the store's two logs a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SegmentKind {
    /// Commit and checkpoint records, each appended and synced on its own.
    Commits = 1,
    /// Tree pages and large values, written by checkpoints.
    Pages = 2,
}

/// The first record of every segment: whose segment it is and what comes
/// before it in its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The store the segment belongs to (a segment of another store is
    /// refused).
    pub store_id: [u8; 16],
    /// The segment's own id, as its file name says it.
    pub segment: u64,
    /// Which log it is part of.
    pub kind: SegmentKind,
    /// The previous segment of the same kind, 0 if none.
    pub prev_segment: u64,
    /// Where the valid records of `prev_segment` end; anything after is a torn
    /// tail or a failed write and is never read.
    pub prev_end: u64,
    /// The format the segment was written in: `FORMAT_VERSION` for the
    /// segments this build writes, an older one for a segment of a store
    /// this build upgraded. A store's identity names a format no older than
    /// any of its segments' (it is upgraded before anything is written).
    pub format: u32,
}

impl SegmentHeader {
    /// The whole header record (framing, checksum and body; this format's
    /// `SEGMENT_HEADER_LEN` bytes), ready to be the segment's first append.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(BODY_LEN);
        body.extend_from_slice(MAGIC);
        body.extend_from_slice(&self.format.to_le_bytes());
        body.extend_from_slice(&self.store_id);
        body.extend_from_slice(&self.segment.to_le_bytes());
        body.push(self.kind as u8);
        body.extend_from_slice(&self.prev_segment.to_le_bytes());
        body.extend_from_slice(&self.prev_end.to_le_bytes());
        let mut out = Vec::with_capacity(SEGMENT_HEADER_LEN as usize);
        encode_record(&mut out, self.segment, 0, RecordType::SegmentHeader, &body);
        debug_assert_eq!(out.len() as u64, SEGMENT_HEADER_LEN);
        out
    }

    /// Decodes a header record body. `Err` says what is wrong in words.
    pub fn decode_body(body: &[u8]) -> Result<Self, String> {
        let mut r = Reader::new(body);
        let e = |e: crate::DecodeError| e.to_string();
        if r.bytes(8).map_err(e)? != MAGIC {
            return Err("not a kivi segment (bad magic)".into());
        }
        let version = r.u32().map_err(e)?;
        if !(OLDEST_FORMAT_READ..=FORMAT_VERSION).contains(&version) {
            return Err(format!(
                "segment format version {version}; this build reads versions \
                 {OLDEST_FORMAT_READ} to {FORMAT_VERSION}"
            ));
        }
        let store_id: [u8; 16] = r.bytes(16).map_err(e)?.try_into().expect("16 bytes");
        let segment = r.u64().map_err(e)?;
        let kind = match r.u8().map_err(e)? {
            1 => SegmentKind::Commits,
            2 => SegmentKind::Pages,
            _ => return Err("unknown segment kind".into()),
        };
        let prev_segment = r.u64().map_err(e)?;
        let prev_end = r.u64().map_err(e)?;
        r.expect_end().map_err(e)?;
        if prev_segment >= segment {
            return Err("previous segment is not older than this one".into());
        }
        if prev_segment != 0 && prev_end < SEGMENT_HEADER_LEN {
            return Err("previous segment ends inside its own header".into());
        }
        Ok(SegmentHeader {
            store_id,
            segment,
            kind,
            prev_segment,
            prev_end,
            format: version,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::decode_record_at;

    #[test]
    fn header_round_trips() {
        let h = SegmentHeader {
            store_id: [7; 16],
            segment: 9,
            kind: SegmentKind::Pages,
            prev_segment: 4,
            prev_end: 1000,
            format: FORMAT_VERSION,
        };
        let bytes = h.encode();
        let (ty, body, n) = decode_record_at(&bytes, 9, 0).unwrap();
        assert_eq!(
            (ty, n as u64),
            (RecordType::SegmentHeader, SEGMENT_HEADER_LEN)
        );
        assert_eq!(SegmentHeader::decode_body(body).unwrap(), h);
    }

    #[test]
    fn foreign_or_future_headers_are_refused() {
        let h = SegmentHeader {
            store_id: [0; 16],
            segment: 2,
            kind: SegmentKind::Commits,
            prev_segment: 0,
            prev_end: 0,
            format: FORMAT_VERSION,
        };
        let bytes = h.encode();
        let body = &bytes[RECORD_HEADER_LEN..];
        let mut future = body.to_vec();
        future[8] = FORMAT_VERSION as u8 + 1;
        assert!(SegmentHeader::decode_body(&future)
            .unwrap_err()
            .contains(&format!("version {}", FORMAT_VERSION + 1)));
        let mut foreign = body.to_vec();
        foreign[0] = b'X';
        assert!(SegmentHeader::decode_body(&foreign)
            .unwrap_err()
            .contains("magic"));
    }
}
