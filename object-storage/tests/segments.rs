//! The storage trait's promises on the object-store backend, seen from a
//! second open on a fresh cache: page segments cut into chunks (an append
//! larger than several chunks included), commit segments in the log, reads
//! across chunk boundaries and of bytes not yet put, deletion.

use kivi_object_storage::{Config, ObjectStorage, PAGE_CHUNK};
use kivi_storage::{read_vec, Storage};
use object_store::memory::InMemory;
use std::sync::Arc;

/// Requests are counted one by one here: no lease renewed beside them.
fn open(store: &Arc<InMemory>) -> ObjectStorage {
    let config = Config {
        renew_lease: false,
        ..Config::default()
    };
    ObjectStorage::open(store.clone(), "s", "memory://s", config).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn page_segments_are_chunks_read_back_across_their_boundaries() {
    let memory = Arc::new(InMemory::new());
    let s = open(&memory);
    let mut w = s.create_bulk_segment(7, Arc::new(|| {})).unwrap();
    let big = pattern(2 * PAGE_CHUNK + PAGE_CHUNK / 2, 1);
    w.append(&big).unwrap(); // two full chunks put at once
    let puts_after_append = s.requests().puts;
    let tail = pattern(1000, 2);
    w.append(&tail).unwrap();
    // Not put yet, yet readable by this process.
    let r = s.open_segment(7).unwrap();
    let at = big.len() as u64 - 10;
    assert_eq!(read_vec(r.as_ref(), at, 20).unwrap()[10..], tail[..10]);
    w.sync().unwrap();
    assert_eq!(
        s.requests().puts,
        puts_after_append + 1,
        "the sync puts the rest as one chunk"
    );
    assert_eq!(w.len(), (big.len() + tail.len()) as u64);
    drop(w);

    let again = open(&memory);
    assert_eq!(again.list_segments().unwrap(), vec![7]);
    let r = again.open_segment(7).unwrap();
    assert_eq!(r.size().unwrap(), (big.len() + tail.len()) as u64);
    let across = read_vec(r.as_ref(), PAGE_CHUNK as u64 - 100, 200).unwrap();
    assert_eq!(across, big[PAGE_CHUNK - 100..PAGE_CHUNK + 100]);
    let end = read_vec(r.as_ref(), big.len() as u64 - 5, 1005).unwrap();
    assert_eq!(end[..5], big[big.len() - 5..]);
    assert_eq!(end[5..], tail[..]);
    assert!(
        read_vec(r.as_ref(), r.size().unwrap() - 1, 2).is_err(),
        "read past the end"
    );

    again.delete_segment(7).unwrap();
    assert!(open(&memory).list_segments().unwrap().is_empty());
}

#[test]
fn commit_segments_live_in_the_log_one_put_per_sync() {
    let memory = Arc::new(InMemory::new());
    let s = open(&memory);
    let mut w = s.create_segment(3).unwrap();
    let before = s.requests().puts;
    let mut all = Vec::new();
    for i in 0..5u8 {
        let record = pattern(100 + i as usize, i);
        w.append(&record).unwrap();
        w.sync().unwrap();
        all.extend_from_slice(&record);
    }
    assert_eq!(s.requests().puts - before, 5);
    w.sync().unwrap();
    assert_eq!(
        s.requests().puts - before,
        5,
        "a sync with nothing new puts nothing"
    );
    w.append(b"never synced").unwrap();
    drop(w);

    let again = open(&memory);
    let r = again.open_segment(3).unwrap();
    assert_eq!(
        r.size().unwrap(),
        all.len() as u64,
        "unsynced bytes are gone"
    );
    assert_eq!(read_vec(r.as_ref(), 0, all.len()).unwrap(), all);
    // The first open was fenced by the second.
    assert!(s.create_segment(4).is_err());
    assert!(s.fenced().is_some());
}
