//! The log layer: checksummed, length-prefixed records in append-only segments.
//!
//! Everything kivi stores is a record in a segment: segment headers, commit
//! records (the operations of a group of write batches), checkpoint records
//! (naming a tree root), tree pages and large values. This crate knows how
//! records are framed, checksummed and found again; what a page or a commit
//! *means* belongs to the layers above, except the commit and checkpoint record
//! bodies, which the log defines because recovery reads them.
//!
//! See ARCHITECTURE.md, "On-disk format", for the byte layout.

// Every public item says what it does: this crate is published (crates.io),
// and its API documentation is what its users read.
#![warn(missing_docs)]

mod blocks;
pub mod codec;
mod commit;
mod record;
mod scan;
mod segment;
mod writer;

pub use blocks::PAGE_BLOCK_BYTES;
pub use codec::{DecodeError, Reader};
pub use commit::{
    synced_claim, CheckpointRecord, CommitRecord, Deadline, DecodedCommit, Op, OpRef, ANY_DEADLINE,
    NO_DEADLINE,
};
pub use record::{
    decode_record_at, encode_record, record_crc, Addr, PageRef, RecordError, RecordType,
    MAX_RECORD_BODY, RECORD_HEADER_LEN,
};
pub use scan::{read_header, scan_segment, ScanEnd, ScannedRecord, SegmentScan};
pub use segment::{
    SegmentHeader, SegmentKind, FORMAT_VERSION, OLDEST_FORMAT_READ, SEGMENT_HEADER_LEN,
};
pub use writer::{SegmentAppender, SegmentIds};

pub use kivi_storage::{Corruption, Error, IoError};

/// Longest key kivi stores (4 KiB).
pub const MAX_KEY_LEN: usize = 4096;
/// Longest value kivi stores (16 MiB).
pub const MAX_VALUE_LEN: usize = 16 << 20;
