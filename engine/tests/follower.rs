//! Followers (`Db::follow`, `Db::catch_up`): a read-only open beside the
//! writer of a store on an object store (object_store's in-memory store
//! here) sees the writer's commits, whole and in order, through segment
//! rolls, checkpoints, a clear, the writer's deletion of log it had not
//! read, and commits that failed among commits in flight; and reaches what
//! its reads cached by pointer once it moves onto a checkpoint.

use kivi::{Db, Error, Options, WriteBatch};
use kivi_object_storage::{Config, ObjectStorage};
use object_store::memory::InMemory;
use object_store::ObjectStore;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn writer_storage(store: Arc<dyn ObjectStore>) -> ObjectStorage {
    ObjectStorage::open(store, "db", "memory://db", Config::default()).unwrap()
}

fn reader_storage(store: Arc<dyn ObjectStore>) -> ObjectStorage {
    let config = Config {
        read_only: true,
        ..Config::default()
    };
    ObjectStorage::open(store, "db", "memory://db", config).unwrap()
}

/// A read-only open beside the writer, following only when told to
/// (`catch_up`).
fn read_only(store: Arc<dyn ObjectStore>) -> Db {
    let opts = Options {
        read_only: true,
        ..small()
    };
    Db::open_with_storage(Arc::new(reader_storage(store)), opts).unwrap()
}

/// Small sizes, so that a few thousand writes roll segments, take
/// checkpoints, clean page segments and delete commit segments.
fn small() -> Options {
    Options {
        segment_bytes: 128 << 10,
        checkpoint_bytes: 96 << 10,
        write_buffer_bytes: 128 << 10,
        cache_bytes: 1 << 20,
        ..Options::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:06}", i * 7919 % 3_001).into_bytes()
}

/// Batch `round` of a workload of puts and deletes; applied to `model` too.
fn batch(round: u64, model: &mut Model) -> WriteBatch {
    let mut b = WriteBatch::new();
    for i in round * 37..round * 37 + 30 {
        let value = format!("v{i}-r{round}-{}", "x".repeat((i % 90) as usize));
        b.put(key(i), value.clone()).unwrap();
        model.insert(key(i), value.into_bytes());
    }
    if round % 4 == 1 {
        for i in (round * 11..round * 11 + 10).step_by(3) {
            b.delete(key(i)).unwrap();
            model.remove(&key(i));
        }
    }
    b
}

fn contents(db: &Db) -> Model {
    db.range::<&[u8], _>(..).map(|r| r.unwrap()).collect()
}

fn assert_same(follower: &Db, model: &Model, what: &str) {
    let got = contents(follower);
    if got != *model {
        let missing = model.keys().filter(|k| !got.contains_key(*k)).count();
        let extra = got.keys().filter(|k| !model.contains_key(*k)).count();
        let wrong = model
            .iter()
            .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
            .count();
        panic!(
            "{what}: the follower differs from the writer ({} pairs vs {}; {missing} missing, \
             {extra} extra, {wrong} with another value)",
            got.len(),
            model.len()
        );
    }
    for (k, v) in model.iter().step_by(17) {
        assert_eq!(follower.get(k).unwrap().as_ref(), Some(v), "{what}");
    }
}

#[test]
fn a_follower_catching_up_sees_every_commit_through_rolls_checkpoints_and_a_clear() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let writer = Db::open_with_storage(Arc::new(writer_storage(memory.clone())), small()).unwrap();
    writer.put(b"first", b"1").unwrap();
    let follower = read_only(memory.clone());
    let mut model = Model::new();
    model.insert(b"first".to_vec(), b"1".to_vec());
    assert_same(&follower, &model, "at open");
    let mut seen_seq = follower.stats().unwrap().seq;
    for round in 0..300u64 {
        writer.write(batch(round, &mut model)).unwrap();
        if round == 120 {
            writer.clear().unwrap();
            model.clear();
        }
        if round % 50 == 25 {
            writer.checkpoint().unwrap();
        }
        if round % 7 == 3 {
            let seq = follower.catch_up().unwrap();
            assert_eq!(seq, writer.stats().unwrap().seq, "round {round}");
            assert!(
                seq > seen_seq,
                "round {round}: went from {seen_seq} to {seq}"
            );
            seen_seq = seq;
            assert_same(&follower, &model, &format!("round {round}"));
        }
    }
    follower.catch_up().unwrap();
    assert_same(&follower, &model, "at the end");
    let status = follower.follower_status().unwrap();
    assert!(status.reloads > 0, "no checkpoint was followed: {status:?}");
    assert_eq!(status.applied_seq, writer.stats().unwrap().seq);
    assert!(writer.stats().unwrap().checkpoints > 3);
    // Writes fail on a follower; its reads go on.
    assert!(matches!(follower.put(b"k", b"v"), Err(Error::ReadOnly)));
    assert!(writer.catch_up().is_err(), "a writer is never behind");
    writer.close().unwrap();
    follower.close().unwrap();
}

#[test]
fn a_follower_far_behind_reads_the_store_again_when_its_log_was_deleted() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let writer = Db::open_with_storage(Arc::new(writer_storage(memory.clone())), small()).unwrap();
    let mut model = Model::new();
    writer.write(batch(0, &mut model)).unwrap();
    let follower = read_only(memory.clone());
    let before = follower.follower_status().unwrap();
    // Many checkpoints later, the commit segments the follower stood in
    // and the log entries after its place are gone.
    for round in 1..400u64 {
        writer.write(batch(round, &mut model)).unwrap();
        if round % 40 == 0 {
            writer.checkpoint().unwrap();
        }
    }
    let seq = follower.catch_up().unwrap();
    assert_eq!(seq, writer.stats().unwrap().seq);
    assert_same(&follower, &model, "after catching up");
    let after = follower.follower_status().unwrap();
    assert!(after.reloads > before.reloads, "{after:?}");
    writer.close().unwrap();
    follower.close().unwrap();
}

#[test]
fn a_following_thread_shows_writes_soon_and_says_how_far_behind_it_is() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let writer = Db::open_with_storage(Arc::new(writer_storage(memory.clone())), small()).unwrap();
    writer.put(b"a", b"0").unwrap();
    let opts = Options {
        follow_interval: Duration::from_millis(5),
        ..small()
    };
    let follower = Db::follow_with_storage(Arc::new(reader_storage(memory.clone())), opts).unwrap();
    let mut model = Model::new();
    model.insert(b"a".to_vec(), b"0".to_vec());
    for round in 0..200u64 {
        writer.write(batch(round, &mut model)).unwrap();
        if round % 60 == 30 {
            writer.checkpoint().unwrap();
        }
    }
    writer.put(b"last", b"here").unwrap();
    model.insert(b"last".to_vec(), b"here".to_vec());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last_seq = 0;
    while follower.get(b"last").unwrap().is_none() {
        // Never back in time while it catches up.
        let seq = follower.stats().unwrap().seq;
        assert!(seq >= last_seq, "{last_seq} then {seq}");
        last_seq = seq;
        assert!(
            Instant::now() < deadline,
            "the follower never showed the last write"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_same(&follower, &model, "once the last write shows");
    let status = follower.follower_status().unwrap();
    assert_eq!(status.applied_seq, writer.stats().unwrap().seq);
    assert!(status.polls_with_commits > 0 && status.polls >= status.polls_with_commits);
    assert!(status.last_error.is_none(), "{status:?}");
    assert!(status.last_contact_ms < 5_000, "{status:?}");
    // A directory cannot be followed.
    let dir = tempfile::tempdir().unwrap();
    Db::open(dir.path(), Options::default())
        .unwrap()
        .close()
        .unwrap();
    let err = Db::follow(dir.path(), Options::default()).unwrap_err();
    assert!(err.to_string().contains("object store"), "{err}");
    follower.close().unwrap();
    writer.close().unwrap();
}

/// Page-cache lookups a get of every key of `model` makes on `db`.
fn lookups_to_read(db: &Db, model: &Model) -> u64 {
    let at = |db: &Db| {
        let s = db.stats().unwrap();
        s.cache_hits + s.cache_misses
    };
    let before = at(db);
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    at(db) - before
}

/// A follower's tree after a reload names its nodes by page; the nodes
/// its reads cached, and the ones the tree it leaves had linked, are
/// linked into the new tree (kivi_tree::link_cached), so reads reach them
/// without the page cache, as on the writer.
#[test]
fn a_follower_moving_onto_a_checkpoint_links_the_nodes_it_read() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // Segments large enough that the cleaner moves no page: a page moved
    // is a new page, which only a read brings into the cache.
    let opts = Options {
        cache_bytes: 16 << 20,
        ..Options::default()
    };
    let writer =
        Db::open_with_storage(Arc::new(writer_storage(memory.clone())), opts.clone()).unwrap();
    let mut model = Model::new();
    for round in 0..100u64 {
        writer.write(batch(round, &mut model)).unwrap();
    }
    writer.checkpoint().unwrap();
    let follower = Db::open_with_storage(
        Arc::new(reader_storage(memory.clone())),
        Options {
            read_only: true,
            ..opts
        },
    )
    .unwrap();
    follower.catch_up().unwrap();
    assert_same(&follower, &model, "after the first catch-up");
    let cold = lookups_to_read(&follower, &model);
    assert!(
        cold >= model.len() as u64,
        "{cold} lookups for {} keys",
        model.len()
    );

    // The writer changes a few keys and checkpoints; the follower moves
    // onto that checkpoint and links every node its reads cached.
    let mut few = WriteBatch::new();
    for k in model.keys().take(5).cloned().collect::<Vec<_>>() {
        few.put(k.clone(), b"changed").unwrap();
        model.insert(k, b"changed".to_vec());
    }
    writer.write(few).unwrap();
    writer.checkpoint().unwrap();
    follower.catch_up().unwrap();
    assert!(follower.stats().unwrap().resident_bytes > 0);
    let linked = lookups_to_read(&follower, &model);
    assert!(
        linked * 20 < cold,
        "{linked} lookups once linked, {cold} before: only the pages the checkpoint rewrote need the cache"
    );
    assert_same(&follower, &model, "once linked");

    // With the cache emptied, the nodes the tree it leaves had linked
    // are linked into the next one all the same.
    follower.clear_cache();
    writer.put(b"one more", b"write").unwrap();
    model.insert(b"one more".to_vec(), b"write".to_vec());
    writer.checkpoint().unwrap();
    follower.catch_up().unwrap();
    let carried = lookups_to_read(&follower, &model);
    assert!(
        carried * 20 < cold,
        "{carried} lookups after the move, {cold} before linking"
    );
    assert_same(&follower, &model, "after the move with an empty cache");
    follower.close().unwrap();
    writer.close().unwrap();
}

/// Commits in flight with puts failing among them (before landing, after
/// landing with the answer lost, and a stretch of refusals): the follower
/// shows exactly the acknowledged writes each time it catches up, never a
/// failed one, even when the failed one's put landed.
#[test]
fn a_follower_never_shows_a_commit_the_writer_reported_failed() {
    use kivi_object_storage::faults::{Fault, FaultyStore, Op};
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    let memory = Arc::new(InMemory::new());
    let down = Arc::new(AtomicBool::new(false));
    let plan_down = down.clone();
    let mut rng = StdRng::seed_from_u64(7);
    // Puts that landed and failed, whose reading back fails too (the next
    // 6 times): the writer's own tries of the put cannot learn that they
    // landed.
    let mut answer_lost = std::collections::HashMap::<String, u32>::new();
    let faulty = Arc::new(FaultyStore::new(memory.clone(), move |op, path| {
        let log_put = op == Op::Put && path.contains("/log/");
        if log_put && plan_down.load(Ordering::Relaxed) {
            return Fault::FailBefore;
        }
        if op == Op::Get {
            if let Some(left) = answer_lost.get_mut(path).filter(|left| **left > 0) {
                *left -= 1;
                return Fault::FailBefore;
            }
        }
        match (log_put, rng.random_range(0..100)) {
            (true, 0..6) => {
                answer_lost.insert(path.to_string(), 6);
                Fault::LandThenFail
            }
            (true, 6..12) => Fault::FailBefore,
            (true, 12..30) => Fault::Slow(Duration::from_millis(3)),
            _ => Fault::None,
        }
    }));
    let writer = Db::open_with_storage(Arc::new(writer_storage(faulty)), small()).unwrap();
    assert!(writer.commits_in_flight() > 1);
    let follower = read_only(memory.clone());
    let model = Arc::new(Mutex::new(Model::new()));
    let mut failures = 0;
    for round in 0..40u64 {
        down.store(round % 13 == 12, Ordering::Relaxed);
        // Eight writers at once, so that their commits overlap.
        let outcomes: Vec<(u64, Result<(), Error>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u64)
                .map(|t| {
                    let writer = writer.clone();
                    s.spawn(move || {
                        let mut b = WriteBatch::new();
                        for j in 0..5u64 {
                            b.put(format!("t{t}-{j}"), format!("round {round}"))
                                .unwrap();
                        }
                        (t, writer.write(b).map(|_| ()))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        down.store(false, Ordering::Relaxed);
        let mut m = model.lock().unwrap();
        for (t, outcome) in outcomes {
            match outcome {
                Ok(()) => {
                    for j in 0..5u64 {
                        m.insert(
                            format!("t{t}-{j}").into_bytes(),
                            format!("round {round}").into_bytes(),
                        );
                    }
                }
                Err(_) => failures += 1,
            }
        }
        follower.catch_up().unwrap();
        assert_same(&follower, &m, &format!("round {round}"));
    }
    assert!(failures > 0, "no write failed");
    writer.close().unwrap();
    follower.close().unwrap();
}

/// A takeover while the old writer is busy: writers keep committing (with
/// commits in flight) while a follower promotes itself; every write the old
/// writer acknowledged is in the new writer's store, the old writer
/// acknowledges nothing after the takeover, and the new writer's own
/// writes are durable.
#[test]
fn a_follower_takes_over_with_every_acknowledged_write_and_the_old_writer_stops() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let old = Db::open_with_storage(Arc::new(writer_storage(memory.clone())), small()).unwrap();
    old.put(b"start", b"1").unwrap();
    let follower = Db::follow_with_storage(
        Arc::new(reader_storage(memory.clone())),
        Options {
            follow_interval: Duration::from_millis(2),
            ..small()
        },
    )
    .unwrap();
    let acked = Mutex::new(Vec::<Vec<u8>>::new());
    let promoted = AtomicBool::new(false);
    let after_promotion = Mutex::new(Vec::<Vec<u8>>::new());
    std::thread::scope(|s| {
        for t in 0..6u32 {
            let (old, acked, promoted, after) = (old.clone(), &acked, &promoted, &after_promotion);
            s.spawn(move || {
                let mut tries_after = 0;
                for i in 0u32.. {
                    let key = format!("w{t}-{i:05}").into_bytes();
                    let promoted_before = promoted.load(Ordering::SeqCst);
                    if promoted_before {
                        // Fenced, it fails at once; a few tries show it.
                        tries_after += 1;
                        if tries_after > 20 {
                            return;
                        }
                    }
                    match old.put(&key, b"x") {
                        Ok(()) if promoted_before => after.lock().unwrap().push(key),
                        Ok(()) => acked.lock().unwrap().push(key),
                        // Fenced: it writes no more.
                        Err(_) => return,
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(150));
        follower.promote().unwrap();
        promoted.store(true, Ordering::SeqCst);
    });
    let acked = acked.into_inner().unwrap();
    assert!(
        acked.len() > 50,
        "only {} writes before the takeover",
        acked.len()
    );
    assert!(
        after_promotion.lock().unwrap().is_empty(),
        "the old writer acknowledged {} writes after the takeover",
        after_promotion.lock().unwrap().len()
    );
    for k in &acked {
        assert_eq!(
            follower.get(k).unwrap().as_deref(),
            Some(&b"x"[..]),
            "{} lost in the takeover",
            String::from_utf8_lossy(k)
        );
    }
    assert!(
        old.put(b"late", b"no").is_err(),
        "the old writer still writes"
    );
    // The new writer writes, and is no follower.
    follower.put(b"new", b"writer").unwrap();
    assert!(follower.follower_status().is_none());
    assert!(matches!(follower.promote(), Err(Error::NotAFollower)));
    follower.checkpoint().unwrap();
    let report = follower.check().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    follower.close().unwrap();
    drop(old);
    // A fresh reader finds everything.
    let again = read_only(memory);
    assert_eq!(again.get(b"new").unwrap().as_deref(), Some(&b"writer"[..]));
    for k in acked.iter().step_by(7) {
        assert!(again.get(k).unwrap().is_some());
    }
}

/// A writer idle through a takeover (no commit, no lease renewal since)
/// does not know it was displaced until it asks the store: `confirm_writer`
/// finds the new writer's fence where its own next entry belonged, and from
/// then on it is fenced, so that it never calls itself the writer (ROLE).
#[test]
fn an_idle_writer_asked_after_a_takeover_learns_it_was_displaced() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // No lease thread: nothing but the question can tell it.
    let quiet = Config {
        renew_lease: false,
        ..Config::default()
    };
    let storage = ObjectStorage::open(memory.clone(), "db", "memory://db", quiet).unwrap();
    let old = Db::open_with_storage(Arc::new(storage), small()).unwrap();
    old.put(b"before", b"1").unwrap();
    assert!(old.confirm_writer(), "the only writer doubts itself");
    assert!(!old.is_fenced());
    let follower =
        Db::follow_with_storage(Arc::new(reader_storage(memory.clone())), small()).unwrap();
    assert!(
        !follower.confirm_writer(),
        "a follower calls itself the writer"
    );
    follower.promote().unwrap();
    assert!(
        !old.is_fenced(),
        "the idle writer learned of the takeover without asking"
    );
    assert!(
        !old.confirm_writer(),
        "the displaced writer still says it is the writer"
    );
    assert!(old.is_fenced(), "asking did not fence it");
    assert!(
        old.put(b"late", b"no").is_err(),
        "the old writer still writes"
    );
    assert!(follower.confirm_writer());
    follower.put(b"after", b"2").unwrap();
    assert_eq!(follower.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
}

/// A follower whose takeover fenced the log but whose open of the store as
/// the writer then failed (here: reading the store's identity fails from
/// the fence on, `failures` times) tries that open again; once out of
/// tries it gives the role up: read-only again, following on, its lease
/// unrenewed (so that a standby can take over), and a later promote makes
/// it the writer with everything the old writer acknowledged.
fn takeover_whose_open_fails(failures: u32) -> (Db, Db, Arc<dyn ObjectStore>, Model) {
    use kivi_object_storage::faults::{Fault, FaultyStore, Op};
    use std::sync::atomic::{AtomicU32, Ordering};

    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let old = Db::open_with_storage(Arc::new(writer_storage(memory.clone())), small()).unwrap();
    let mut model = Model::new();
    for round in 0..20 {
        old.write(batch(round, &mut model)).unwrap();
    }
    let left = Arc::new(AtomicU32::new(0));
    let plan_left = left.clone();
    let faulty = Arc::new(FaultyStore::new(memory.clone(), move |op, path| {
        let identity = op == Op::Get && path.ends_with("meta/KIVI");
        let failing = identity
            && plan_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        match failing {
            true => Fault::FailBefore,
            false => Fault::None,
        }
    }));
    let follower = Db::follow_with_storage(Arc::new(reader_storage(faulty)), small()).unwrap();
    follower.catch_up().unwrap();
    left.store(failures, Ordering::SeqCst);
    if let Err(e) = follower.promote() {
        eprintln!("promote: {e}");
    }
    left.store(0, Ordering::SeqCst);
    (old, follower, memory, model)
}

#[test]
fn a_takeover_whose_open_as_writer_fails_once_tries_again() {
    // Four failures: every try of one request (the client makes 4), so
    // one open fails.
    let (old, new, _memory, model) = takeover_whose_open_fails(4);
    assert!(
        new.follower_status().is_none(),
        "the second try did not make it the writer"
    );
    assert!(
        old.put(b"late", b"no").is_err(),
        "the old writer still writes"
    );
    new.put(b"after", b"1").unwrap();
    for (k, v) in &model {
        assert_eq!(new.get(k).unwrap().as_ref(), Some(v));
    }
}

#[test]
fn a_takeover_that_cannot_open_the_store_as_writer_gives_the_role_up_and_follows_on() {
    let (old, follower, memory, mut model) = takeover_whose_open_fails(1_000);
    assert!(
        follower.follower_status().is_some(),
        "not a follower after the failed takeover"
    );
    assert!(!follower.confirm_writer());
    // Following works again (a writable storage refuses to be followed).
    follower.catch_up().unwrap();
    assert_same(&follower, &model, "after the failed takeover");
    // Nobody renews the lease: the old writer was fenced, the follower
    // gave the role up.
    let reader = read_only(memory.clone());
    let lease = |db: &Db| db.writer_lease().unwrap().map(|l| (l.writer, l.renewal));
    let before = lease(&reader);
    std::thread::sleep(Duration::from_millis(1_300));
    assert_eq!(
        lease(&reader),
        before,
        "the writer's lease is still renewed"
    );
    // The old writer is fenced all the same; a second promote takes over.
    assert!(
        old.put(b"late", b"no").is_err(),
        "the old writer still writes"
    );
    follower.promote().unwrap();
    follower.write(batch(99, &mut model)).unwrap();
    assert_same(&follower, &model, "after the second takeover");
    assert!(
        lease(&reader) != before || {
            std::thread::sleep(Duration::from_millis(1_100));
            lease(&reader) != before
        },
        "the new writer does not renew its lease"
    );
}

/// A standby (a follower with `take_over_after`) stays a follower while
/// the writer renews its lease, reads where the writer says it is, and
/// takes over on its own once the writer is gone, with everything the
/// writer acknowledged.
#[test]
fn a_standby_takes_over_once_the_writers_lease_goes_unrenewed() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let writer = Db::open_with_storage(Arc::new(writer_storage(memory.clone())), small()).unwrap();
    writer.announce("10.0.0.7:6380");
    let standby = Db::follow_with_storage(
        Arc::new(reader_storage(memory.clone())),
        Options {
            follow_interval: Duration::from_millis(5),
            take_over_after: Some(Duration::from_millis(1500)),
            ..small()
        },
    )
    .unwrap();
    let mut model = Model::new();
    let alive_until = Instant::now() + Duration::from_secs(3);
    let mut round = 0;
    while Instant::now() < alive_until {
        writer.write(batch(round, &mut model)).unwrap();
        round += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(standby.is_follower(), "took over from a live writer");
    let status = standby.follower_status().unwrap();
    assert_eq!(status.writer_note.as_deref(), Some("10.0.0.7:6380"));
    assert!(status.lease_unchanged_ms < 1500, "{status:?}");
    // The writer goes (its lease is renewed no more).
    drop(writer);
    let gone = Instant::now();
    while standby.is_follower() {
        assert!(
            gone.elapsed() < Duration::from_secs(10),
            "the standby never took over"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = gone.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "took over after {took:?}"
    );
    assert_same(&standby, &model, "after the takeover");
    standby.put(b"after", b"takeover").unwrap();
    // Its lease is the writer's now, with the note it had.
    let reader = Db::follow_with_storage(Arc::new(reader_storage(memory)), small()).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    reader.catch_up().unwrap();
    assert_eq!(
        reader.get(b"after").unwrap().as_deref(),
        Some(&b"takeover"[..])
    );
    standby.close().unwrap();
}

/// A promote (`REPLICAOF NO ONE`) made while the standby's polling thread
/// is deciding to take over on its own, as the lease runs out: one of them
/// takes over, and neither waits for the other forever. (The promote stops
/// the polling thread and waits for it to end; the thread, taking over,
/// waited for the promote's lock: two standbys of the safety campaign hung
/// so.) The standby's reads of the lease are made slow near the timeout,
/// so that the promote comes while the thread is inside one.
#[test]
fn a_promote_as_the_lease_runs_out_takes_over_once_without_waiting_forever() {
    use kivi_object_storage::faults::{Fault, FaultyStore, Op};
    use std::sync::atomic::{AtomicBool, Ordering};

    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let slow_lease = Arc::new(AtomicBool::new(false));
    let plan_slow = slow_lease.clone();
    let faulty = Arc::new(FaultyStore::new(memory.clone(), move |op, path| {
        match op == Op::Get && path.ends_with("lease") && plan_slow.load(Ordering::Relaxed) {
            true => Fault::Slow(Duration::from_millis(400)),
            false => Fault::None,
        }
    }));
    let writer = Db::open_with_storage(Arc::new(writer_storage(memory.clone())), small()).unwrap();
    let config = Config {
        read_only: true,
        ..Config::default()
    };
    let storage = ObjectStorage::open(faulty, "db", "memory://db", config).unwrap();
    let standby = Db::follow_with_storage(
        Arc::new(storage),
        Options {
            follow_interval: Duration::from_millis(5),
            take_over_after: Some(Duration::from_millis(1500)),
            ..small()
        },
    )
    .unwrap();
    let mut model = Model::new();
    for round in 0..20 {
        writer.write(batch(round, &mut model)).unwrap();
    }
    // A renewal seen, then the writer goes.
    std::thread::sleep(Duration::from_millis(1200));
    drop(writer);
    let deadline = Instant::now() + Duration::from_secs(10);
    while standby.follower_status().unwrap().lease_unchanged_ms < 1250 {
        assert!(Instant::now() < deadline, "the lease never aged");
        std::thread::sleep(Duration::from_millis(2));
    }
    // The thread's next read of the lease ends past the timeout.
    slow_lease.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(100));
    assert!(standby.is_follower());
    let (done, answer) = std::sync::mpsc::channel();
    let promoting = standby.clone();
    std::thread::spawn(move || {
        let _ = done.send(promoting.promote());
    });
    let promoted = answer
        .recv_timeout(Duration::from_secs(20))
        .expect("the promote and the standby's own takeover waited for each other");
    // Whichever came first took over; the other found a writer.
    assert!(
        matches!(promoted, Ok(()) | Err(Error::NotAFollower)),
        "{promoted:?}"
    );
    slow_lease.store(false, Ordering::Relaxed);
    assert!(!standby.is_follower());
    assert_same(&standby, &model, "after the takeover");
    standby.put(b"after", b"takeover").unwrap();
    standby.close().unwrap();
}
