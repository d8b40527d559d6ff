//! The log's records as they are read back from segments: framing and
//! checksums, segment headers, commit and checkpoint record bodies, and
//! the scan of a whole segment with its torn-tail rules.

use crate::input::Input;
use kivi_log::{
    decode_record_at, encode_record, record_crc, scan_segment, synced_claim, CheckpointRecord,
    CommitRecord, RecordType, ScanEnd, SegmentHeader, RECORD_HEADER_LEN,
};
use kivi_storage::{MemoryStorage, Storage};

/// A record as a segment holds it: `u32 segment | u32 offset` (its
/// address, which its checksum covers), then the record's bytes.
pub fn log_record(data: &[u8]) {
    let mut input = Input(data);
    let (segment, offset) = (u64::from(input.u32()), u64::from(input.u32()));
    let bytes = input.rest();
    if let Ok((ty, body, len)) = decode_record_at(bytes, segment, offset) {
        let mut again = Vec::new();
        encode_record(&mut again, segment, offset, ty, body);
        assert_eq!(again, bytes[..len], "a {ty:?} record encoded again");
        check_body(ty, body);
    }
}

/// A record's type byte then its body, framed by the target with a correct
/// checksum, so that the body decoders see every body.
pub fn log_record_body(data: &[u8]) {
    let mut input = Input(data);
    let ty = input.u8();
    let body = input.rest();
    let ty = RecordType::from_u8(ty).unwrap_or(RecordType::Commit);
    // Where segment headers are (segment 7, offset 0), so that theirs
    // decode with the address they name.
    let mut record = Vec::new();
    encode_record(&mut record, 7, 0, ty, body);
    let (found, read, _) = decode_record_at(&record, 7, 0).expect("a correctly framed record");
    assert_eq!((found, read), (ty, body));
    check_body(ty, body);
}

/// What recovery and `check` make of a record body of type `ty`. A body
/// that decodes is exactly what encoding the decoded value writes (these
/// formats have one encoding per value), bar segment headers of older
/// formats, which are written again in this one.
pub fn check_body(ty: RecordType, body: &[u8]) {
    match ty {
        RecordType::SegmentHeader => {
            if let Ok(h) = SegmentHeader::decode_body(body) {
                let record = h.encode();
                let (_, again, _) = decode_record_at(&record, h.segment, 0).expect("own header");
                assert_eq!(SegmentHeader::decode_body(again), Ok(h));
                if body[8..12] == kivi_log::FORMAT_VERSION.to_le_bytes() {
                    assert_eq!(again, body, "{h:?} encoded again");
                }
            }
        }
        RecordType::Commit => {
            if let Ok(c) = CommitRecord::decode(body) {
                let synced = synced_claim(ty, body).expect("a commit holds its claim");
                let mut again = Vec::new();
                CommitRecord::encode(&mut again, synced, c.seq, c.clears, c.ops.iter().copied());
                assert_eq!(again, body, "{c:?} encoded again");
            }
        }
        RecordType::Checkpoint => {
            if let Ok(c) = CheckpointRecord::decode(body) {
                let synced = synced_claim(ty, body).expect("a checkpoint holds its claim");
                let mut again = Vec::new();
                c.encode(&mut again, synced);
                assert_eq!(again, body, "{c:?} encoded again");
                // The page segments the cleaner may drop lie before any
                // page the checkpoint names.
                assert!(kivi::fuzzing::unreferenced_below(&c) <= c.page_end.segment);
            }
        }
        // Pages and deltas: the tree's targets; blobs and padding are
        // bytes without structure.
        RecordType::Page | RecordType::Delta | RecordType::Blob | RecordType::Padding => {}
    }
}

/// A whole segment file: `u8 flags` then its bytes, in memory storage
/// under the id its header names. Scanned to its exact end (flag 1) or as
/// the newest segment, whose torn tail is cut (otherwise), stepping over
/// damage as recovery does; each record read goes through `check_body`.
/// Flag 2: the target first sets the checksum of every record it can
/// frame, so that the scan reads past mutated records.
pub fn log_segment(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.u8();
    let mut bytes = input.rest().to_vec();
    let id = segment_id(&bytes).unwrap_or(1);
    if flags & 2 != 0 {
        fix_checksums(&mut bytes, id);
    }
    let end = if flags & 1 != 0 {
        ScanEnd::Exact(bytes.len() as u64)
    } else {
        ScanEnd::Tail
    };
    let storage = MemoryStorage::new();
    let mut w = storage.create_segment(id).expect("memory storage");
    w.append(&bytes).expect("memory storage");
    let reader = storage.open_segment(id).expect("memory storage");
    let Ok(Some(mut scan)) = scan_segment(reader, id, "fuzz".into(), end) else {
        return;
    };
    assert_eq!(scan.header().segment, id);
    loop {
        let before = scan.valid_end();
        match scan.next_record() {
            Ok(Some(r)) => {
                assert!(r.offset == before && r.len >= RECORD_HEADER_LEN as u64);
                check_body(r.ty, r.body);
            }
            Ok(None) => break,
            Err(_) => match scan.skip_damage() {
                Ok(Some(next)) => assert!(next > before, "skipped back to {next}"),
                _ => break,
            },
        }
    }
    assert!(scan.valid_end() <= scan.file_len());
}

/// The id a segment's header names (bytes 28..36 of its body), if it has
/// one that storage can hold.
pub fn segment_id(segment: &[u8]) -> Option<u64> {
    let at = RECORD_HEADER_LEN + 28;
    let id = u64::from_le_bytes(segment.get(at..at + 8)?.try_into().ok()?);
    (id != 0).then_some(id)
}

/// Gives every record of segment `id` that fits in it, from the header on,
/// the checksum of its bytes at its place: what a writer of those bytes
/// would have written.
pub fn fix_checksums(segment: &mut [u8], id: u64) {
    let mut at = 0usize;
    while let Some(header) = segment.get(at..at + RECORD_HEADER_LEN) {
        let len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        let ty = header[8];
        let end = at + RECORD_HEADER_LEN + len as usize;
        let Some(body) = segment.get(at + RECORD_HEADER_LEN..end) else {
            break;
        };
        let crc = record_crc(id, at as u64, len, ty, body);
        segment[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}
