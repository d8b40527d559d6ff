//! The engine on an object store (kivi-object-storage over object_store's
//! in-memory store): what is acknowledged is found by the next writer, on a
//! cache of its own; the writer it takes over from can commit nothing more;
//! one group commit is one request.

use kivi::{Db, Options, WriteBatch};
use kivi_object_storage::{Config, ObjectStorage};
use object_store::memory::InMemory;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A writer with no followers: retired page segments go at once, and no
/// lease is renewed beside the requests counted.
fn storage(store: &Arc<InMemory>) -> ObjectStorage {
    let config = Config {
        retired_grace: std::time::Duration::ZERO,
        renew_lease: false,
        ..Config::default()
    };
    ObjectStorage::open(store.clone(), "db", "memory://db", config).unwrap()
}

/// Small sizes, so that a few thousand writes roll segments, take
/// checkpoints, clean page segments and delete commit segments.
fn small() -> Options {
    Options {
        segment_bytes: 256 << 10,
        checkpoint_bytes: 128 << 10,
        write_buffer_bytes: 256 << 10,
        cache_bytes: 1 << 20,
        ..Options::default()
    }
}

fn open(storage: &ObjectStorage) -> Db {
    Db::open_with_storage(Arc::new(storage.clone()), small()).unwrap()
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:08}", i * 7919 % 10_007).into_bytes()
}

fn assert_holds(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        assert_eq!(
            db.get(k).unwrap().as_ref(),
            Some(v),
            "{}",
            String::from_utf8_lossy(k)
        );
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.range::<&[u8], _>(..).map(|r| r.unwrap()).collect();
    let expected: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
    assert_eq!(all.len(), expected.len());
    assert!(all == expected, "a scan differs from the model");
}

#[test]
fn every_acknowledged_write_survives_a_takeover_and_a_fresh_cache() {
    let store = Arc::new(InMemory::new());
    let first = storage(&store);
    let db = open(&first);
    let mut model = BTreeMap::new();
    for round in 0..40u64 {
        let mut batch = WriteBatch::new();
        for i in round * 100..round * 100 + 100 {
            let value = format!(
                "value {i} of round {round} {}",
                "x".repeat((i % 200) as usize)
            );
            batch.put(key(i), value.clone()).unwrap();
            model.insert(key(i), value.into_bytes());
        }
        if round % 3 == 0 {
            for i in (round * 50..round * 50 + 20).step_by(2) {
                batch.delete(key(i)).unwrap();
                model.remove(&key(i));
            }
        }
        db.write(batch).unwrap();
        if round == 15 || round == 30 {
            db.checkpoint().unwrap(); // and then more commits after it
        }
    }
    db.put(b"last", b"acknowledged").unwrap();
    model.insert(b"last".to_vec(), b"acknowledged".to_vec());
    let stats = db.stats().unwrap();
    assert!(
        stats.checkpoints >= 2,
        "the test means to cover checkpoints: {stats:?}"
    );

    // A second writer opens the store while the first is still running, as
    // a restart after kill -9 would (nothing was closed), on an empty cache.
    let second = storage(&store);
    assert!(second.cache().bytes() > 0, "the log read at open is cached");
    let db2 = open(&second);
    assert_holds(&db2, &model);

    // The first writer's next commit fails, and so does every later one.
    let err = db.put(b"late", b"never acknowledged").unwrap_err();
    assert!(
        err.to_string().contains("another writer took over"),
        "{err}"
    );
    assert!(first.fenced().is_some());
    assert!(db.put(b"later", b"no").is_err());
    drop(db);

    db2.put(b"after", b"takeover").unwrap();
    model.insert(b"after".to_vec(), b"takeover".to_vec());
    db2.close().unwrap();

    let third = storage(&store);
    let db3 = open(&third);
    assert_holds(&db3, &model);
    assert_eq!(db3.get(b"late").unwrap(), None);
    let report = db3.check().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    db3.close().unwrap();
}

#[test]
fn one_group_commit_is_one_conditional_put_and_no_listing() {
    let store = Arc::new(InMemory::new());
    let s = storage(&store);
    let db = Db::open_with_storage(Arc::new(s.clone()), Options::default()).unwrap();
    db.put(b"warm", b"up").unwrap(); // the first write starts a commit segment
    let before = s.requests();
    for i in 0..100u32 {
        db.put(&i.to_be_bytes(), b"v").unwrap();
    }
    let after = s.requests();
    assert_eq!(after.puts - before.puts, 100, "{before:?} -> {after:?}");
    assert_eq!(after.lists, before.lists, "a commit lists nothing");
    assert_eq!(after.gets, before.gets, "a commit reads nothing");
    db.close().unwrap();
}

/// Requests fail the ways an object store's do: puts that land and still
/// report an error (a timeout, a 5xx after the write), puts refused with a
/// 5xx or a 409, slow answers, failed gets, and a stretch in which every
/// put fails for good. Whatever happens, nothing acknowledged is lost, and
/// nothing reported failed appears in part.
#[test]
fn faults_lose_nothing_acknowledged_and_acknowledge_nothing_absent() {
    use kivi_object_storage::faults::{Fault, FaultyStore, Op};
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use std::sync::atomic::{AtomicBool, Ordering};

    for seed in 0..3u64 {
        let memory = Arc::new(InMemory::new());
        let down = Arc::new(AtomicBool::new(false));
        let mut rng = StdRng::seed_from_u64(seed);
        let plan_down = down.clone();
        let landed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let plan_landed = landed.clone();
        let faulty = Arc::new(FaultyStore::new(memory.clone(), move |op, _path| {
            if op == Op::Put && plan_down.load(Ordering::Relaxed) {
                return Fault::FailBefore;
            }
            match (op, rng.random_range(0..100)) {
                (Op::Put, 0..8) => {
                    plan_landed.fetch_add(1, Ordering::Relaxed);
                    Fault::LandThenFail
                }
                (Op::Put, 8..14) => Fault::FailBefore,
                (Op::Put, 14..18) => Fault::Conflict,
                (_, 18..20) => Fault::Slow(std::time::Duration::from_millis(2)),
                (Op::Get, 20..25) => Fault::FailBefore,
                _ => Fault::None,
            }
        }));
        let s = ObjectStorage::open(faulty, "db", "faulty://db", Config::default()).unwrap();
        let db = open(&s);
        let mut acked = Vec::new();
        let mut failed = Vec::new();
        for b in 0..120u32 {
            // A stretch in which the object store refuses every put.
            down.store((40..44).contains(&b), Ordering::Relaxed);
            let mut batch = WriteBatch::new();
            for j in 0..20u32 {
                batch
                    .put(
                        format!("b{b:04}-{j:02}"),
                        format!("{seed}-{b}-{j}").repeat(8),
                    )
                    .unwrap();
            }
            match db.write(batch) {
                Ok(_) => acked.push(b),
                Err(_) => failed.push(b),
            }
        }
        down.store(false, Ordering::Relaxed);
        assert!(
            failed.iter().any(|b| (40..44).contains(b)),
            "the outage failed no write"
        );
        assert!(
            acked.len() > 60,
            "seed {seed}: only {} batches acknowledged",
            acked.len()
        );
        let requests = s.requests();
        assert!(requests.retries > 0, "{requests:?}");
        assert!(
            landed.load(Ordering::Relaxed) > 0,
            "no put landed and failed"
        );

        // The next writer, on the bare store and an empty cache.
        let next = storage(&memory);
        let db2 = open(&next);
        for b in &acked {
            for j in 0..20u32 {
                let got = db2.get(format!("b{b:04}-{j:02}").as_bytes()).unwrap();
                assert_eq!(
                    got,
                    Some(format!("{seed}-{b}-{j}").repeat(8).into_bytes()),
                    "seed {seed}: batch {b} lost"
                );
            }
        }
        for b in &failed {
            let present = (0..20u32)
                .filter(|j| {
                    db2.get(format!("b{b:04}-{j:02}").as_bytes())
                        .unwrap()
                        .is_some()
                })
                .count();
            assert!(
                present == 0 || present == 20,
                "seed {seed}: failed batch {b} is there in part"
            );
        }
        let report = db2.check().unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        drop(db);
        db2.close().unwrap();
    }
}

/// Commits in flight: while requests take a while, concurrent writers'
/// group commits overlap (several log puts under way at once); with puts
/// failing among them (before landing, or after, while later ones are in
/// flight and land), nothing acknowledged is lost, no failed batch is
/// there in part, and the writer goes on after each failure.
#[test]
fn commits_in_flight_overlap_and_a_failure_among_them_loses_nothing() {
    use kivi_object_storage::faults::{Fault, FaultyStore, Op};
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use std::sync::atomic::{AtomicU64, Ordering};

    const THREADS: u32 = 8;
    const BATCHES: u32 = 40;
    let value = |seed: u64, t: u32, b: u32, j: u32| format!("{seed}-{t}-{b}-{j}").repeat(4);
    for seed in 0..3u64 {
        let memory = Arc::new(InMemory::new());
        let mut rng = StdRng::seed_from_u64(seed);
        // Writes answered so far; while 100 to 130 are, every put fails
        // (an outage: retries cannot save the commits in flight then).
        let answered = Arc::new(AtomicU64::new(0));
        let plan_answered = answered.clone();
        let faulty = Arc::new(FaultyStore::new(memory.clone(), move |op, _path| {
            let down = (100..130).contains(&plan_answered.load(Ordering::Relaxed));
            if op == Op::Put && down {
                return Fault::FailBefore;
            }
            match (op, rng.random_range(0..100)) {
                (Op::Put, 0..3) => Fault::LandThenFail,
                (Op::Put, 3..6) => Fault::FailBefore,
                (Op::Put, 6..7) => Fault::Conflict,
                (Op::Put, _) => Fault::Slow(std::time::Duration::from_millis(4)),
                (Op::Get, 0..3) => Fault::FailBefore,
                _ => Fault::None,
            }
        }));
        let s =
            ObjectStorage::open(faulty.clone(), "db", "faulty://db", Config::default()).unwrap();
        let db = open(&s);
        let outcomes: Vec<(u32, u32, bool)> = std::thread::scope(|sc| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (db, answered) = (db.clone(), answered.clone());
                    sc.spawn(move || {
                        (0..BATCHES)
                            .map(|b| {
                                let mut batch = WriteBatch::new();
                                for j in 0..5u32 {
                                    batch
                                        .put(format!("t{t}-b{b:03}-{j}"), value(seed, t, b, j))
                                        .unwrap();
                                }
                                let ok = db.write(batch).is_ok();
                                answered.fetch_add(1, Ordering::Relaxed);
                                (t, b, ok)
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
        let acked = outcomes.iter().filter(|o| o.2).count();
        assert!(
            faulty.most_log_puts_at_once() >= 2,
            "seed {seed}: no two commits were ever in flight at once"
        );
        assert!(
            acked < outcomes.len(),
            "seed {seed}: no write failed (the faults did not reach the commits)"
        );
        assert!(
            acked > outcomes.len() / 4,
            "seed {seed}: only {acked} of {} batches acknowledged",
            outcomes.len()
        );

        // The next writer, on the bare store and an empty cache.
        let next = storage(&memory);
        let db2 = open(&next);
        for &(t, b, ok) in &outcomes {
            let present = (0..5u32)
                .filter(|&j| {
                    let got = db2.get(format!("t{t}-b{b:03}-{j}").as_bytes()).unwrap();
                    if let Some(v) = &got {
                        assert_eq!(v, value(seed, t, b, j).as_bytes(), "seed {seed}");
                    }
                    got.is_some()
                })
                .count();
            if ok {
                assert_eq!(present, 5, "seed {seed}: acknowledged batch {t}/{b} lost");
            } else {
                assert!(
                    present == 0 || present == 5,
                    "seed {seed}: failed batch {t}/{b} is there in part"
                );
            }
        }
        let report = db2.check().unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        drop(db);
        db2.close().unwrap();
    }
}

/// Old log entries and page segments are deleted as checkpoints cover
/// them (fences, a few bytes each, stay): under sustained random updates
/// the bucket stays near the live bytes. (The 2x of the space target is the
/// cleaner's aim over time, measured by the benchmark; here, where the last
/// checkpoint's moment decides the figure, 2.5x bounds it; keeping the old
/// objects made it 6x.)
#[test]
fn the_bucket_stays_near_the_live_bytes_under_random_updates() {
    let store = Arc::new(InMemory::new());
    let s = storage(&store);
    let db = open(&s);
    let value = vec![7u8; 100];
    for round in 0..60u64 {
        let mut batch = WriteBatch::new();
        for i in 0..200u64 {
            batch
                .put(key((round * 7 + i * 13) % 3000), value.clone())
                .unwrap();
        }
        db.write(batch).unwrap();
    }
    db.checkpoint().unwrap();
    let stats = db.stats().unwrap();
    assert!(
        stats.checkpoints >= 5 && stats.cleaned_segments > 0,
        "{stats:?}"
    );
    let listed: Vec<object_store::ObjectMeta> = futures_list(&store);
    let bucket: u64 = listed.iter().map(|m| m.size).sum();
    let log_objects = listed
        .iter()
        .filter(|m| m.location.as_ref().starts_with("db/log/"))
        .count();
    println!(
        "bucket {bucket} bytes in {} objects ({log_objects} log entries), live {}",
        listed.len(),
        stats.live_bytes
    );
    assert!(
        bucket * 2 <= 5 * stats.live_bytes,
        "{bucket} bytes in the bucket for {} live ({} objects)",
        stats.live_bytes,
        listed.len()
    );
    assert!(s.requests().deletes > 0);
    db.close().unwrap();
    // Everything still opens and reads after the deletions.
    let db2 = open(&storage(&store));
    assert_eq!(db2.get(&key(0)).unwrap(), Some(value));
    let report = db2.check().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

fn futures_list(store: &Arc<InMemory>) -> Vec<object_store::ObjectMeta> {
    use object_store::ObjectStore;
    let rt = tokio_rt();
    rt.block_on(async {
        use futures::TryStreamExt;
        store.list(None).try_collect().await.unwrap()
    })
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// The crash simulation of the object-store path. Objects appear whole or
/// not at all, so what a crash leaves is the requests that completed before
/// it, and maybe the one in flight. Here the process "dies" at request k:
/// that request lands (or not) and reports failure, every later one fails.
/// For many k spread over a workload that rolls segments, checkpoints,
/// cleans and deletes: the next writer, on an empty cache, finds every
/// acknowledged batch, nothing of a failed batch in part, and `check`
/// finds no problem.
#[test]
fn a_crash_at_any_request_loses_nothing_acknowledged() {
    use kivi_object_storage::faults::{Fault, FaultyStore};
    use std::sync::atomic::{AtomicU64, Ordering};

    const BATCHES: u32 = 100;

    fn run(crash_at: Option<u64>) -> (u64, usize) {
        let memory = Arc::new(InMemory::new());
        let requests = Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        let faulty = Arc::new(FaultyStore::new(memory.clone(), move |_op, _path| {
            let k = counted.fetch_add(1, Ordering::Relaxed);
            match crash_at {
                Some(at) if k == at && at % 2 == 0 => Fault::LandThenFail,
                Some(at) if k >= at => Fault::FailBefore,
                _ => Fault::None,
            }
        }));
        // Requests are counted to crash at the k-th: none from a lease
        // renewed on its own clock.
        let config = Config {
            retry_delay: std::time::Duration::ZERO,
            renew_lease: false,
            ..Config::default()
        };
        // A crash while the store opens: nothing was acknowledged.
        let opened = ObjectStorage::open(faulty, "db", "faulty://db", config)
            .map_err(kivi::Error::from)
            .and_then(|s| Db::open_with_storage(Arc::new(s), small()));
        let mut acked = Vec::new();
        let mut failed = None;
        for b in 0..BATCHES {
            let Ok(db) = &opened else { break };
            let mut batch = WriteBatch::new();
            for j in 0..50u32 {
                let k = (b * 31 + j * 17) % 1500;
                batch
                    .put(format!("k{k:05}"), format!("{b}-{j}-{}", "v".repeat(40)))
                    .unwrap();
            }
            let result = if b % 20 == 19 {
                db.checkpoint().and_then(|_| db.write(batch))
            } else {
                db.write(batch)
            };
            match result {
                Ok(_) => acked.push(b),
                Err(_) => {
                    failed = Some(b);
                    break; // a dead process writes no more
                }
            }
        }
        drop(opened);
        let total = requests.load(Ordering::Relaxed);

        // What the acknowledged batches (and maybe the failed one) left.
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut with_failed = model.clone();
        for b in acked.iter().copied().chain(failed) {
            for j in 0..50u32 {
                let k = (b * 31 + j * 17) % 1500;
                let kv = (
                    format!("k{k:05}").into_bytes(),
                    format!("{b}-{j}-{}", "v".repeat(40)).into_bytes(),
                );
                if Some(b) != failed {
                    model.insert(kv.0.clone(), kv.1.clone());
                }
                with_failed.insert(kv.0, kv.1);
            }
        }
        let db2 = open(&storage(&memory));
        let all: BTreeMap<Vec<u8>, Vec<u8>> =
            db2.range::<&[u8], _>(..).map(|r| r.unwrap()).collect();
        assert!(
            all == model || all == with_failed,
            "crash at request {crash_at:?}: the store holds {} pairs, acknowledged {} (or {} with the failed batch)",
            all.len(),
            model.len(),
            with_failed.len()
        );
        let report = db2.check().unwrap();
        assert!(
            report.problems.is_empty(),
            "crash at request {crash_at:?}: {:?}",
            report.problems
        );
        db2.close().unwrap();
        (total, acked.len())
    }

    let (total, acked) = run(None);
    assert_eq!(acked, BATCHES as usize);
    assert!(total > 100, "only {total} requests");
    let mut crashes = 0;
    let step = (total / 120).max(1);
    let mut at = 0;
    while at < total {
        run(Some(at));
        crashes += 1;
        at += step;
    }
    assert!(crashes >= 100);
}

/// `Options::commit_wait` trades latency for requests: 16 writes spread
/// over 80 ms, under a 200 ms wait, share one or two group commits (puts)
/// instead of taking one each.
#[test]
fn a_commit_wait_gathers_concurrent_writers_into_fewer_puts() {
    let store = Arc::new(InMemory::new());
    let s = storage(&store);
    let opts = Options {
        commit_wait: std::time::Duration::from_millis(200),
        ..Options::default()
    };
    let db = Arc::new(Db::open_with_storage(Arc::new(s.clone()), opts).unwrap());
    db.put(b"warm", b"up").unwrap();
    let before = s.requests().puts;
    let start = Arc::new(std::sync::Barrier::new(16));
    std::thread::scope(|scope| {
        for t in 0..16u32 {
            let (db, start) = (db.clone(), start.clone());
            scope.spawn(move || {
                start.wait();
                // Spread over 80 ms: without a wait, each its own commit.
                std::thread::sleep(std::time::Duration::from_millis(5 * u64::from(t)));
                db.put(format!("{t}").as_bytes(), b"v").unwrap();
            });
        }
    });
    let puts = s.requests().puts - before;
    assert!(puts <= 2, "{puts} puts for 16 writes within 80 ms");
    assert_eq!(db.get(b"15").unwrap().as_deref(), Some(&b"v"[..]));
}

/// A new writer opens while the old one keeps committing, checkpointing
/// and trimming the log under its reading (its reads slowed down so that
/// they overlap). A missing entry must not pass for the log's end: every
/// batch the old writer had acknowledged when the new one was open is
/// there, and the old writer commits nothing after that.
#[test]
fn a_takeover_while_the_old_writer_trims_the_log_loses_nothing() {
    use kivi_object_storage::faults::{Fault, FaultyStore, Op};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    let memory = Arc::new(InMemory::new());
    let old = Arc::new(open(&storage(&memory)));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (old, acked, stop) = (old.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            for b in 0u32.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let mut batch = WriteBatch::new();
                for j in 0..20u32 {
                    batch
                        .put(format!("b{b:05}-{j:02}"), vec![b as u8; 64])
                        .unwrap();
                }
                let result = if b % 5 == 4 {
                    old.compact().and_then(|_| old.write(batch))
                } else {
                    old.write(batch)
                };
                match result {
                    Ok(_) => acked.lock().unwrap().push(b),
                    Err(_) => break, // fenced
                }
            }
        })
    };
    while acked.lock().unwrap().len() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // The new writer reads slowly: the old one trims meanwhile.
    let slow = Arc::new(FaultyStore::new(memory.clone(), |op, _| match op {
        Op::Get => Fault::Slow(std::time::Duration::from_millis(3)),
        _ => Fault::None,
    }));
    // As Db::open of a URL does: an open that finds a page segment the old
    // writer deleted after listing it (retired by its last checkpoint) is
    // tried again.
    let db = (0..5)
        .find_map(|_| {
            let new =
                ObjectStorage::open(slow.clone(), "db", "slow://db", Config::default()).unwrap();
            match Db::open_with_storage(Arc::new(new), small()) {
                Err(kivi::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
                opened => Some(opened.unwrap()),
            }
        })
        .expect("opened within 5 tries");
    let acked_before_open = acked.lock().unwrap().clone();
    std::thread::sleep(std::time::Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= acked_before_open.len());
    // Every batch acknowledged by the end is there: the old writer was
    // fenced at the new one's open, so none was acknowledged after it.
    for b in &acked {
        assert_eq!(
            db.get(format!("b{b:05}-19").as_bytes()).unwrap(),
            Some(vec![*b as u8; 64]),
            "batch {b} acknowledged by the old writer, missing for the new one ({} acknowledged)",
            acked.len()
        );
    }
    let report = db.check().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
