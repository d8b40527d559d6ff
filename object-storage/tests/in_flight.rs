//! Syncs of a commit segment in flight (`SegmentWriter::start_sync`): read
//! from memory until their puts are done; a failed one fails every later
//! one even where their puts landed, and the log is fenced again at the
//! failed number, so a second open reads the segment up to the failure and
//! everything written after the new fence.

use kivi_object_storage::faults::{Fault, FaultyStore, Op};
use kivi_object_storage::{Config, ObjectStorage};
use kivi_storage::{read_vec, Storage};
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::Mutex;
use std::sync::Arc;

/// The log's entries in the bucket, by number.
fn log_numbers(memory: &InMemory) -> Vec<u64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        use futures::TryStreamExt;
        let listed: Vec<_> = memory
            .list(Some(&"s/log".into()))
            .try_collect()
            .await
            .unwrap();
        let mut n: Vec<u64> = listed
            .iter()
            .filter_map(|m| m.location.filename()?.parse().ok())
            .collect();
        n.sort();
        n
    })
}

fn exists(memory: &InMemory, n: u64) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(memory.head(&format!("s/log/{n:020}").into()))
        .is_ok()
}

#[test]
fn a_failed_put_in_flight_fails_the_later_ones_and_the_log_is_fenced_there() {
    let memory = Arc::new(InMemory::new());
    let failing: Arc<Mutex<Option<String>>> = Arc::default();
    let plan_failing = failing.clone();
    let faulty = Arc::new(FaultyStore::new(memory.clone(), move |op, path| {
        match (op, &*plan_failing.lock()) {
            (Op::Put, Some(name)) if path.ends_with(name.as_str()) => Fault::FailBefore,
            _ => Fault::None,
        }
    }));
    let s = ObjectStorage::open(faulty, "s", "faulty://s", Config::default()).unwrap();
    let mut w = s.create_segment(1).unwrap();
    w.append(b"aaaa").unwrap();
    w.sync().unwrap();
    let next = log_numbers(&memory).last().unwrap() + 1;

    // Three syncs in flight; the first one's put fails for good.
    *failing.lock() = Some(format!("log/{next:020}"));
    let mut pending = Vec::new();
    for part in [b"bbbb", b"cccc", b"dddd"] {
        w.append(part).unwrap();
        pending.push(w.start_sync().unwrap());
    }
    let r = s.open_segment(1).unwrap();
    assert_eq!(
        read_vec(r.as_ref(), 0, 16).unwrap(),
        b"aaaabbbbccccdddd",
        "bytes in flight are read from memory"
    );
    for (i, p) in pending.into_iter().enumerate() {
        assert!(p.wait().is_err(), "sync {i} in flight succeeded");
    }
    assert!(!exists(&memory, next), "the failed put is there");
    assert!(
        exists(&memory, next + 1) && exists(&memory, next + 2),
        "the later puts did not land (the test shows nothing)"
    );
    assert!(w.append(b"eeee").is_err(), "a broken segment took more");
    drop(w);

    // The next entry fences the log at the failed number first.
    *failing.lock() = None;
    let mut w2 = s.create_segment(2).unwrap();
    w2.append(b"after").unwrap();
    w2.sync().unwrap();
    drop(w2);
    assert!(exists(&memory, next), "no fence at the failed number");

    let again = ObjectStorage::open(memory.clone(), "s", "memory://s", Config::default()).unwrap();
    assert_eq!(again.list_segments().unwrap(), vec![1, 2]);
    let r1 = again.open_segment(1).unwrap();
    assert_eq!(r1.size().unwrap(), 4, "data past the failure was read");
    assert_eq!(read_vec(r1.as_ref(), 0, 4).unwrap(), b"aaaa");
    let r2 = again.open_segment(2).unwrap();
    assert_eq!(read_vec(r2.as_ref(), 0, 5).unwrap(), b"after");
}
