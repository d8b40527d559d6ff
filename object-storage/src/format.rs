//! The objects a store is made of, and their names.
//!
//! Under the store's prefix:
//! - `log/NNNNNNNNNNNNNNNNNNNN` (20 decimal digits): the *log*, one object
//!   per entry, numbered without gaps and created only with create-if-absent.
//!   An entry creates a commit segment, carries bytes appended to one
//!   (a commit), deletes one, or *fences*: a new writer's claim.
//! - `pages/IIIIIIIIII/created` and `pages/IIIIIIIIII/OOOOOOOOOOOOOOOOOOOO`:
//!   a page segment (ten digits of its id) exists while its `created` marker
//!   does; its bytes are in *chunks* named by their offset in the segment.
//! - `meta/NAME`: a small blob, replaced whole (the store's identity).
//!
//! Every log entry and chunk starts with a header that names what it is,
//! which writer made it and where its bytes belong, and ends its header with
//! a CRC-32C of header and payload: an object that is not ours, or was
//! damaged, is refused rather than read as data.

use kivi_storage::SegmentId;

/// First bytes of a log entry.
pub const LOG_MAGIC: [u8; 8] = *b"KIVILOG1";
/// First bytes of a page chunk.
pub const CHUNK_MAGIC: [u8; 8] = *b"KIVIPAG1";
/// Bytes before a log entry's payload.
pub const LOG_HEADER: usize = 72;
/// Bytes before a chunk's payload.
pub const CHUNK_HEADER: usize = 56;

/// The latest time an entry's 48-bit stamp holds (year 10889).
const TIME_MAX: u64 = (1 << 48) - 1;

/// Numbers after a fence at `n` that no entry of the fencing writer uses
/// (`n + 1 .. n + DEAD_ZONE`): a writer keeps at most this many log puts
/// in flight, so whatever the writer it fenced still had in flight lands
/// there, where nobody reads it.
pub const DEAD_ZONE: u64 = 64;

/// What a log entry does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A writer's claim on the store: entries of earlier writers after it
    /// are void. Its epoch is its own number.
    Fence = 1,
    /// A commit segment now exists (empty).
    Create = 2,
    /// Bytes appended to a commit segment at `offset`.
    Data = 3,
    /// A commit segment no longer exists.
    Delete = 4,
}

/// A decoded log entry's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// What the entry does.
    pub kind: EntryKind,
    /// The number of the fence that made its writer the writer.
    pub epoch: u64,
    /// A random id of the process that wrote it (settles "did my put land?").
    pub writer: [u8; 16],
    /// The commit segment it concerns (0 for a fence).
    pub segment: SegmentId,
    /// Data: where in the segment its payload goes. Fence: the dead zone.
    pub offset: u64,
    /// Bytes after the header.
    pub payload_len: u64,
    /// When its writer made it: milliseconds since the Unix epoch by the
    /// writer's clock (0: not stamped), for followers' lag. 48 bits.
    pub time_ms: u64,
}

/// A log entry as stored: header, then `payload`.
pub fn encode_entry(e: &Entry, payload: &[u8]) -> Vec<u8> {
    debug_assert_eq!(e.payload_len, payload.len() as u64);
    let mut out = Vec::with_capacity(LOG_HEADER + payload.len());
    out.extend_from_slice(&LOG_MAGIC);
    out.push(e.kind as u8);
    out.push(0);
    out.extend_from_slice(&e.time_ms.min(TIME_MAX).to_le_bytes()[..6]);
    out.extend_from_slice(&e.epoch.to_le_bytes());
    out.extend_from_slice(&e.writer);
    out.extend_from_slice(&e.segment.to_le_bytes());
    out.extend_from_slice(&e.offset.to_le_bytes());
    out.extend_from_slice(&e.payload_len.to_le_bytes());
    out.extend_from_slice(&[0; 8]); // crc, then reserved
    out.extend_from_slice(payload);
    let crc = crc_with_hole(&out, LOG_HEADER - 8);
    out[LOG_HEADER - 8..LOG_HEADER - 4].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(out.len(), LOG_HEADER + payload.len());
    out
}

/// Decodes a whole log entry object; the error says what is wrong.
pub fn decode_entry(bytes: &[u8]) -> Result<Entry, String> {
    if bytes.len() < LOG_HEADER || bytes[..8] != LOG_MAGIC {
        return Err("not a kivi log entry".into());
    }
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let stored = u32::from_le_bytes(bytes[LOG_HEADER - 8..LOG_HEADER - 4].try_into().unwrap());
    if crc_with_hole(bytes, LOG_HEADER - 8) != stored {
        return Err("log entry fails its checksum".into());
    }
    let kind = match bytes[8] {
        1 => EntryKind::Fence,
        2 => EntryKind::Create,
        3 => EntryKind::Data,
        4 => EntryKind::Delete,
        k => return Err(format!("log entry of unknown kind {k}")),
    };
    let e = Entry {
        kind,
        epoch: u64_at(16),
        writer: bytes[24..40].try_into().unwrap(),
        segment: u64_at(40),
        offset: u64_at(48),
        payload_len: u64_at(56),
        time_ms: u64_at(8) >> 16,
    };
    if e.payload_len != (bytes.len() - LOG_HEADER) as u64 {
        return Err("log entry's length does not match its object".into());
    }
    Ok(e)
}

/// A page chunk as stored: header (writer, segment, offset), then `payload`.
pub fn encode_chunk(writer: [u8; 16], segment: SegmentId, offset: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHUNK_HEADER + payload.len());
    out.extend_from_slice(&CHUNK_MAGIC);
    out.extend_from_slice(&writer);
    out.extend_from_slice(&segment.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(payload);
    let crc = crc_with_hole(&out, CHUNK_HEADER - 8);
    out[CHUNK_HEADER - 8..CHUNK_HEADER - 4].copy_from_slice(&crc.to_le_bytes());
    out
}

/// CRC-32C of `bytes` with the four bytes at `hole` counted as zeros.
fn crc_with_hole(bytes: &[u8], hole: usize) -> u32 {
    let crc = crc32c::crc32c(&bytes[..hole]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &bytes[hole + 4..])
}

/// Name of log entry `n`.
pub fn log_name(n: u64) -> String {
    format!("log/{n:020}")
}

/// Parses a name made by [`log_name`] (relative to the prefix).
pub fn parse_log_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("log/")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Name of page segment `id`'s existence marker.
pub fn created_name(id: SegmentId) -> String {
    format!("pages/{id:010}/created")
}

/// Name of the chunk of page segment `id` that starts at `offset`.
pub fn chunk_name(id: SegmentId, offset: u64) -> String {
    format!("pages/{id:010}/{offset:020}")
}

/// What a name under `pages/` is.
#[derive(Debug, PartialEq, Eq)]
pub enum PageObject {
    /// The marker of a page segment.
    Created(SegmentId),
    /// A chunk of a page segment, at an offset.
    Chunk(SegmentId, u64),
}

/// Parses a name made by [`created_name`] or [`chunk_name`].
pub fn parse_page_name(name: &str) -> Option<PageObject> {
    let rest = name.strip_prefix("pages/")?;
    let (id, tail) = rest.split_once('/')?;
    if id.len() != 10 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: SegmentId = id.parse().ok()?;
    if tail == "created" {
        return Some(PageObject::Created(id));
    }
    if tail.len() != 20 || !tail.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(PageObject::Chunk(id, tail.parse().ok()?))
}

/// Name of meta blob `name`.
pub fn meta_name(name: &str) -> String {
    format!("meta/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let e = Entry {
            kind: EntryKind::Data,
            epoch: 7,
            writer: [9; 16],
            segment: 42,
            offset: 4096,
            payload_len: 5,
            time_ms: 1_795_000_000_123,
        };
        let bytes = encode_entry(&e, b"hello");
        assert_eq!(decode_entry(&bytes), Ok(e));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(decode_entry(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(decode_entry(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_entry(b"KIVILOG1").is_err());
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_log_name(&log_name(123)), Some(123));
        assert_eq!(parse_log_name("log/12"), None);
        assert_eq!(
            parse_page_name(&created_name(5)),
            Some(PageObject::Created(5))
        );
        assert_eq!(
            parse_page_name(&chunk_name(5, 1 << 20)),
            Some(PageObject::Chunk(5, 1 << 20))
        );
        assert_eq!(parse_page_name("pages/5/created"), None);
        assert_eq!(parse_page_name("pages/0000000005/x"), None);
    }
}
