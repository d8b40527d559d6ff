//! Record framing.
//!
//! ```text
//! +---------+---------+------+-----------------+
//! | crc u32 | len u32 | type | body (len bytes) |
//! +---------+---------+------+-----------------+
//! ```
//! Integers are little-endian. `crc` is CRC-32C over the record's own address
//! (segment id and offset, 8 bytes each, little-endian), then `len`, `type` and
//! the body. Binding the checksum to the address means a record copied or
//! pointed to at the wrong place fails its check, exactly like a damaged one.

use crate::codec::DecodeError;
use std::fmt;

/// Bytes of a record's header, before its body.
pub const RECORD_HEADER_LEN: usize = 9;
// The header: the CRC32C (u32), the body's length (u32), the type (u8).
const _: () = assert!(RECORD_HEADER_LEN == size_of::<u32>() + size_of::<u32>() + size_of::<u8>());

/// Largest record body accepted (256 MiB). Bounds every allocation made while
/// reading records; a write batch is limited well below it.
pub const MAX_RECORD_BODY: usize = 256 << 20;
// The length field is a u32 (and a record's address offset too).
const _: () = assert!(MAX_RECORD_BODY <= u32::MAX as usize - RECORD_HEADER_LEN);

/// What a record's body holds: the `type` byte of its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordType {
    /// First record of every segment.
    SegmentHeader = 1,
    /// A group of committed write batches.
    Commit = 2,
    /// Names a durable tree root and the commits it includes.
    Checkpoint = 3,
    /// A tree page.
    Page = 4,
    /// A value too large to live inside a page.
    Blob = 5,
    /// Fills a gap in a page segment so that pages stay inside 4 KiB
    /// blocks; its body is zeros and means nothing.
    Padding = 6,
    /// A leaf's recent changes over its base page (see the tree's
    /// `page` module): written instead of the whole leaf.
    Delta = 7,
}

impl RecordType {
    /// The type a header's `type` byte names; `None` for a byte no type
    /// has (which reads as damage).
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::SegmentHeader,
            2 => Self::Commit,
            3 => Self::Checkpoint,
            4 => Self::Page,
            5 => Self::Blob,
            6 => Self::Padding,
            7 => Self::Delta,
            _ => return None,
        })
    }
}

/// Where a record starts: segment id and byte offset. Orders as the log does:
/// by segment, then offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Addr {
    /// The segment's id.
    pub segment: u32,
    /// Byte offset of the record's header in the segment.
    pub offset: u32,
}

impl Addr {
    /// The address of offset `offset` in segment `segment`.
    ///
    /// # Panics
    ///
    /// If either is over `u32::MAX` (segments are numbered and sized well
    /// below it).
    pub fn new(segment: u64, offset: u64) -> Self {
        assert!(
            segment <= u64::from(u32::MAX) && offset <= u64::from(u32::MAX),
            "address out of range"
        );
        Addr {
            segment: segment as u32,
            offset: offset as u32,
        }
    }

    /// The address as one integer (segment in the high 32 bits, offset in
    /// the low), ordered as the addresses are.
    pub fn as_u64(self) -> u64 {
        (u64::from(self.segment) << 32) | u64::from(self.offset)
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.segment, self.offset)
    }
}

/// A reference to a whole record: its address and total length (header
/// included), so that it can be read with one positioned read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PageRef {
    /// Where the record starts.
    pub addr: Addr,
    /// The record's length in bytes, header and body.
    pub len: u32,
}
// The segment, the offset and the record's length, as `PageRef::encode`
// writes them.
const _: () = assert!(PageRef::ENCODED_LEN == 3 * size_of::<u32>());

impl PageRef {
    /// Bytes [`PageRef::encode`] writes.
    pub const ENCODED_LEN: usize = 12;

    /// Appends the reference to `out`: segment, offset and length, each a
    /// little-endian u32.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.addr.segment.to_le_bytes());
        out.extend_from_slice(&self.addr.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
    }

    /// Reads what [`PageRef::encode`] wrote, refusing a length no record
    /// can have and segment 0 (which no segment is).
    pub fn decode(r: &mut crate::Reader<'_>) -> Result<Self, DecodeError> {
        let segment = r.u32()?;
        let offset = r.u32()?;
        let len = r.u32()?;
        if (len as usize) < RECORD_HEADER_LEN || len as usize > RECORD_HEADER_LEN + MAX_RECORD_BODY
        {
            return Err(r.err("record reference with an impossible length"));
        }
        if segment == 0 {
            return Err(r.err("record reference to segment 0"));
        }
        Ok(PageRef {
            addr: Addr { segment, offset },
            len,
        })
    }
}

/// A record's checksum: CRC-32C over its address (`segment` and `offset`,
/// 8 bytes each, little-endian), `len`, the type byte `ty` and the body.
pub fn record_crc(segment: u64, offset: u64, len: u32, ty: u8, body: &[u8]) -> u32 {
    let mut pos = [0u8; 16];
    pos[..8].copy_from_slice(&segment.to_le_bytes());
    pos[8..].copy_from_slice(&offset.to_le_bytes());
    let c = crc32c::crc32c(&pos);
    let mut hdr = [0u8; 5];
    hdr[..4].copy_from_slice(&len.to_le_bytes());
    hdr[4] = ty;
    let c = crc32c::crc32c_append(c, &hdr);
    crc32c::crc32c_append(c, body)
}

/// Starts a record at the end of `out`; write the body after it, then call
/// [`finish_record`] with the index this returns. Lets callers encode bodies in
/// place without a copy.
pub fn begin_record(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; RECORD_HEADER_LEN]);
    start
}

/// Fills in the header of the record begun at `start`, which will live at
/// (`segment`, `offset`). Returns the record's total length.
pub fn finish_record(
    out: &mut [u8],
    start: usize,
    segment: u64,
    offset: u64,
    ty: RecordType,
) -> usize {
    let body_len = out.len() - start - RECORD_HEADER_LEN;
    assert!(
        body_len <= MAX_RECORD_BODY,
        "record body of {body_len} bytes is over the limit"
    );
    let len = body_len as u32;
    let crc = record_crc(
        segment,
        offset,
        len,
        ty as u8,
        &out[start + RECORD_HEADER_LEN..],
    );
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&len.to_le_bytes());
    out[start + 8] = ty as u8;
    RECORD_HEADER_LEN + body_len
}

/// Appends a whole record to `out`.
pub fn encode_record(
    out: &mut Vec<u8>,
    segment: u64,
    offset: u64,
    ty: RecordType,
    body: &[u8],
) -> usize {
    let start = begin_record(out);
    out.extend_from_slice(body);
    finish_record(out, start, segment, offset, ty)
}

/// Why bytes at some place are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than a header, or than the header's length says.
    Truncated,
    /// The length field is over [`MAX_RECORD_BODY`].
    BadLength,
    /// Unknown record type.
    BadType,
    /// The checksum does not match.
    BadChecksum,
}

impl RecordError {
    /// The problem in words, for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            RecordError::Truncated => "record runs past the end of the valid data",
            RecordError::BadLength => "record length over the limit",
            RecordError::BadType => "unknown record type",
            RecordError::BadChecksum => "record checksum mismatch",
        }
    }
}

/// Decodes the record at the start of `buf`, which lives at (`segment`, `offset`).
/// Returns its type, body and total length.
pub fn decode_record_at(
    buf: &[u8],
    segment: u64,
    offset: u64,
) -> Result<(RecordType, &[u8], usize), RecordError> {
    if buf.len() < RECORD_HEADER_LEN {
        return Err(RecordError::Truncated);
    }
    let crc = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    if len as usize > MAX_RECORD_BODY {
        return Err(RecordError::BadLength);
    }
    let ty = RecordType::from_u8(buf[8]).ok_or(RecordError::BadType)?;
    let total = RECORD_HEADER_LEN + len as usize;
    if buf.len() < total {
        return Err(RecordError::Truncated);
    }
    let body = &buf[RECORD_HEADER_LEN..total];
    if record_crc(segment, offset, len, ty as u8, body) != crc {
        return Err(RecordError::BadChecksum);
    }
    Ok((ty, body, total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn records_round_trip_and_are_bound_to_their_address() {
        let mut out = Vec::new();
        let n = encode_record(&mut out, 3, 100, RecordType::Page, b"body bytes");
        assert_eq!(n, out.len());
        let (ty, body, len) = decode_record_at(&out, 3, 100).unwrap();
        assert_eq!((ty, body, len), (RecordType::Page, &b"body bytes"[..], n));
        assert_eq!(
            decode_record_at(&out, 3, 101),
            Err(RecordError::BadChecksum)
        );
        assert_eq!(
            decode_record_at(&out, 4, 100),
            Err(RecordError::BadChecksum)
        );
        assert_eq!(
            decode_record_at(&out[..n - 1], 3, 100),
            Err(RecordError::Truncated)
        );
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let mut out = Vec::new();
        encode_record(&mut out, 1, 0, RecordType::Commit, b"0123456789abcdef");
        for i in 0..out.len() * 8 {
            let mut bad = out.clone();
            bad[i / 8] ^= 1 << (i % 8);
            let r = decode_record_at(&bad, 1, 0);
            // The header is the checksum (bytes 0..4), the body's length
            // (4..8) and the type (8); the checksum covers all but itself.
            let expected: &[RecordError] = match i / 8 {
                0..4 => &[RecordError::BadChecksum],
                // Longer than the bytes there, over the limit, or shorter
                // (then the checksum does not match).
                4..8 => &[
                    RecordError::Truncated,
                    RecordError::BadLength,
                    RecordError::BadChecksum,
                ],
                // Another known type has the wrong checksum.
                8 => &[RecordError::BadType, RecordError::BadChecksum],
                _ => &[RecordError::BadChecksum],
            };
            assert!(
                matches!(r, Err(e) if expected.contains(&e)),
                "flip of bit {i}: expected one of {expected:?}, got {r:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128), seg: u32, off: u32) {
            let _ = decode_record_at(&bytes, u64::from(seg), u64::from(off));
        }
    }
}
