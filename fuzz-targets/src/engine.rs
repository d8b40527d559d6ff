//! The engine's own files: the identity blob, and a whole store recovered
//! from whatever segment files storage holds.

use crate::input::Input;
use crate::log::{fix_checksums, segment_id};
use kivi::storage::{MemoryStorage, Storage};
use kivi::{Clock, Db, Options};
use std::sync::Arc;

/// The identity file (`KIVI`): a store id and the format it names. One
/// that reads is read the same once this build writes it again.
pub fn engine_identity(data: &[u8]) {
    if let Ok((id, _)) = kivi::fuzzing::decode_identity(data) {
        let again = kivi::fuzzing::encode_identity(id);
        let read = kivi::fuzzing::decode_identity(&again).expect("own identity");
        assert_eq!(read, (id, kivi_log::FORMAT_VERSION));
    }
}

/// Most segments a store input is cut into.
const MAX_SEGMENTS: usize = 32;

/// The segments of a store, laid end to end: each starts where a segment
/// header's magic is (9 bytes past its record header), and is stored
/// under the id its header names (a repeated id is left out).
pub fn split_segments(data: &[u8]) -> Vec<(u64, &[u8])> {
    const MAGIC: &[u8] = b"KIVISEG\0";
    const AT: usize = kivi_log::RECORD_HEADER_LEN;
    let starts: Vec<usize> = (AT..data.len().saturating_sub(MAGIC.len() - 1))
        .filter(|&i| &data[i..i + MAGIC.len()] == MAGIC)
        .map(|i| i - AT)
        .take(MAX_SEGMENTS)
        .collect();
    let mut out: Vec<(u64, &[u8])> = Vec::new();
    for (n, &start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(data.len());
        let segment = &data[start..end];
        let id = segment_id(segment).unwrap_or(n as u64 + 1);
        if out.iter().all(|&(other, _)| other != id) {
            out.push((id, segment));
        }
    }
    out
}

/// A store made of the segments in the input (`u8 flags`, then segments as
/// `split_segments` reads them), with the identity of the store the first
/// one names, in memory storage; opened read-only (or, flag 2, to write:
/// its torn tail cut, a write and a checkpoint on top), then checked and
/// read whole. Flag 1: every record's checksum is set first, so that
/// recovery reads mutated records instead of stopping at their checksums.
///
/// When `check` finds the store healthy, reading it must succeed: scans
/// both ways see the same pairs, and each reads the same by `get`.
pub fn store_recovery(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.u8();
    let storage = MemoryStorage::new();
    let segments = split_segments(input.rest());
    let store_id: [u8; 16] = segments
        .first()
        .and_then(|(_, s)| s.get(21..37))
        .map_or([0; 16], |id| id.try_into().expect("16 bytes"));
    storage
        .write_meta("KIVI", &kivi::fuzzing::encode_identity(store_id))
        .expect("memory storage");
    for (id, bytes) in segments {
        let mut bytes = bytes.to_vec();
        if flags & 1 != 0 {
            fix_checksums(&mut bytes, id);
        }
        let mut w = storage.create_segment(id).expect("memory storage");
        w.append(&bytes).expect("memory storage");
    }
    let writable = flags & 2 != 0;
    let opts = Options {
        cache_bytes: 1 << 20,
        write_buffer_bytes: 1 << 20,
        read_only: !writable,
        create_if_missing: false,
        // Before any deadline the corpus's stores wrote.
        clock: Clock::manual(1_000_000_000_000),
        ..Options::default()
    };
    let Ok(db) = Db::open_with_storage(Arc::new(storage), opts) else {
        return;
    };
    if writable && db.put(b"fuzz", b"written after recovery").is_ok() {
        let _ = db.checkpoint();
    }
    let healthy = db.check().is_ok_and(|r| r.is_healthy());
    let forward: Vec<_> = db.range::<&[u8], _>(..).collect();
    let backward: Vec<_> = db.range::<&[u8], _>(..).rev().collect();
    if !healthy {
        return;
    }
    let forward: Vec<(Vec<u8>, Vec<u8>)> = forward
        .into_iter()
        .collect::<kivi::Result<_>>()
        .expect("a healthy store scans");
    let mut backward: Vec<(Vec<u8>, Vec<u8>)> = backward
        .into_iter()
        .collect::<kivi::Result<_>>()
        .expect("a healthy store scans backward");
    backward.reverse();
    assert!(forward == backward, "scans disagree");
    assert!(
        forward.windows(2).all(|w| w[0].0 < w[1].0),
        "keys out of order"
    );
    for (k, v) in &forward {
        assert_eq!(db.get(k).expect("a healthy store reads").as_ref(), Some(v));
    }
}
