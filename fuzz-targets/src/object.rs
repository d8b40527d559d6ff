//! The objects of a store on an object store: log entries, the writer's
//! lease, and the names a listing returns.

use crate::input::Input;
use format::{
    chunk_name, created_name, decode_entry, encode_entry, log_name, parse_log_name,
    parse_page_name, PageObject, LOG_HEADER,
};
use lease::Lease;

/// The object store's formats, compiled from their own source files: the
/// object-storage crate's dependencies (an S3 client) are not needed for
/// them. The corpus writer uses them too.
#[path = "../../object-storage/src/format.rs"]
#[allow(dead_code)]
pub mod format;
#[path = "../../object-storage/src/lease.rs"]
#[allow(dead_code)]
pub mod lease;

/// A log entry object: `u8 flags`, then its bytes. Flag 1: the target
/// first sets its payload length to the object's (flag 2: its checksum
/// too), so that the decoder reads past those checks. An entry that
/// decodes, written again with its payload, decodes the same.
pub fn object_log_entry(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.u8();
    let mut bytes = input.rest().to_vec();
    if bytes.len() >= LOG_HEADER {
        if flags & 1 != 0 {
            let len = (bytes.len() - LOG_HEADER) as u64;
            bytes[LOG_HEADER - 16..LOG_HEADER - 8].copy_from_slice(&len.to_le_bytes());
        }
        if flags & 2 != 0 {
            // CRC-32C of the whole object with the checksum's own four
            // bytes counted as zeros (format.rs).
            let hole = LOG_HEADER - 8;
            bytes[hole..hole + 4].fill(0);
            let crc = crc32c::crc32c(&bytes);
            bytes[hole..hole + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
    if let Ok(e) = decode_entry(&bytes) {
        let again = encode_entry(&e, &bytes[LOG_HEADER..]);
        assert_eq!(decode_entry(&again), Ok(e), "written again");
    }
}

/// The lease object (`u8 kind` even), or a name a listing returned (odd).
/// A lease that reads, written again, reads the same (its note without
/// control characters, which the writer leaves out); a name that parses
/// is the name of what it parsed to.
pub fn object_lease(data: &[u8]) {
    let mut input = Input(data);
    let kind = input.u8();
    let bytes = input.rest();
    if kind % 2 == 0 {
        if let Some(lease) = Lease::decode(bytes) {
            let again = Lease::decode(&lease.encode()).expect("own lease");
            let note: String = lease.note.chars().filter(|c| !c.is_control()).collect();
            assert_eq!(again, Lease { note, ..lease }, "written again");
        }
        return;
    }
    let Ok(name) = std::str::from_utf8(bytes) else {
        return;
    };
    if let Some(n) = parse_log_name(name) {
        assert_eq!(log_name(n), name);
    }
    match parse_page_name(name) {
        Some(PageObject::Created(id)) => assert_eq!(created_name(id), name),
        Some(PageObject::Chunk(id, offset)) => assert_eq!(chunk_name(id, offset), name),
        None => {}
    }
}
