//! Commits in flight (see engine/src/commit.rs) on storage that overlaps
//! syncs, with the engine's own guarantees checked alone: the storage here
//! does not fail the syncs after a failed one (an object store does), so
//! only the engine stands between a group decided on top of a failed one
//! and its acknowledgment.

use kivi::{Db, Options};
use kivi_storage::{
    IoError, MemoryStorage, PendingSync, SegmentId, SegmentReader, SegmentWriter, Storage,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Memory storage whose commit syncs overlap: each started sync takes a
/// few milliseconds to wait for, and the `fail_at`-th one fails (later
/// ones succeed: the bytes are all there, as memory storage keeps every
/// append).
#[derive(Debug)]
struct Overlapping {
    memory: MemoryStorage,
    started: Arc<AtomicU64>,
    fail_at: Arc<AtomicU64>,
    waiting: Arc<AtomicUsize>,
    most_waiting: Arc<AtomicUsize>,
}

struct OverlappingWriter {
    inner: Box<dyn SegmentWriter>,
    started: Arc<AtomicU64>,
    fail_at: Arc<AtomicU64>,
    waiting: Arc<AtomicUsize>,
    most_waiting: Arc<AtomicUsize>,
}

impl SegmentWriter for OverlappingWriter {
    fn append(&mut self, bytes: &[u8]) -> Result<(), IoError> {
        self.inner.append(bytes)
    }
    fn sync(&mut self) -> Result<(), IoError> {
        self.inner.sync()
    }
    fn start_sync(&mut self) -> Result<PendingSync, IoError> {
        self.inner.sync()?;
        let n = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        let fails = n == self.fail_at.load(Ordering::SeqCst);
        let (waiting, most) = (self.waiting.clone(), self.most_waiting.clone());
        Ok(PendingSync::new(move || {
            let now = waiting.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(3));
            waiting.fetch_sub(1, Ordering::SeqCst);
            match fails {
                false => Ok(()),
                true => Err(IoError::new(
                    "sync",
                    format!("sync {n}"),
                    std::io::Error::other("injected failure"),
                )),
            }
        }))
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

impl Storage for Overlapping {
    fn list_segments(&self) -> Result<Vec<SegmentId>, IoError> {
        self.memory.list_segments()
    }
    fn create_segment(&self, id: SegmentId) -> Result<Box<dyn SegmentWriter>, IoError> {
        Ok(Box::new(OverlappingWriter {
            inner: self.memory.create_segment(id)?,
            started: self.started.clone(),
            fail_at: self.fail_at.clone(),
            waiting: self.waiting.clone(),
            most_waiting: self.most_waiting.clone(),
        }))
    }
    fn open_segment(&self, id: SegmentId) -> Result<Arc<dyn SegmentReader>, IoError> {
        self.memory.open_segment(id)
    }
    fn delete_segment(&self, id: SegmentId) -> Result<(), IoError> {
        self.memory.delete_segment(id)
    }
    fn read_meta(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        self.memory.read_meta(name)
    }
    fn write_meta(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        self.memory.write_meta(name, bytes)
    }
    fn segment_name(&self, id: SegmentId) -> String {
        self.memory.segment_name(id)
    }
    fn syncs_in_flight(&self) -> usize {
        8
    }
}

/// A failed commit in flight fails every group prepared after it (they
/// were decided on top of it), even though their own syncs succeed; the
/// writer starts again from the last published version, in a new segment
/// whose header cuts the failed groups off: after a reopen every
/// acknowledged write is there and no failed one is.
#[test]
fn a_failed_commit_in_flight_fails_the_later_ones_and_is_cut_off() {
    const THREADS: u32 = 8;
    const WRITES: u32 = 30;
    for fail_at in [3u64, 17, 40] {
        let memory = MemoryStorage::new();
        let storage = Arc::new(Overlapping {
            memory: memory.clone(),
            started: Arc::default(),
            fail_at: Arc::new(AtomicU64::new(fail_at)),
            waiting: Arc::default(),
            most_waiting: Arc::default(),
        });
        let db = Db::open_with_storage(storage.clone(), Options::default()).unwrap();
        let outcomes: Vec<(u32, u32, bool)> = std::thread::scope(|sc| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let db = db.clone();
                    sc.spawn(move || {
                        (0..WRITES)
                            .map(|i| {
                                let key = format!("t{t}-{i:03}");
                                (t, i, db.put(key.as_bytes(), key.as_bytes()).is_ok())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        db.close().unwrap();
        let failed = outcomes.iter().filter(|o| !o.2).count();
        assert!(
            failed >= 1,
            "fail_at {fail_at}: the injected failure failed nothing"
        );
        assert!(
            storage.most_waiting.load(Ordering::SeqCst) >= 2,
            "fail_at {fail_at}: no two commits were ever in flight at once"
        );

        let again = Db::open_with_storage(Arc::new(memory), Options::default()).unwrap();
        for &(t, i, ok) in &outcomes {
            let key = format!("t{t}-{i:03}");
            let got = again.get(key.as_bytes()).unwrap();
            if ok {
                assert_eq!(
                    got.as_deref(),
                    Some(key.as_bytes()),
                    "fail_at {fail_at}: acknowledged {key} lost"
                );
            } else {
                assert_eq!(got, None, "fail_at {fail_at}: failed {key} is there");
            }
        }
        let report = again.check().unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}
