//! The embedded workloads of docs/workloads.md, each run against one
//! store through the [`Store`] interface. Every read checks the value it
//! got (its first 8 bytes name the key it belongs to), every scan checks
//! the order, and every write is durable.

use crate::kv40::{self, Rng};
use crate::measure::{nanos_since, Figure, Meter};
use crate::stores::{Store, StoreError};
use std::time::Instant;

/// Pairs (or operations) per durable batch in the batched workloads.
pub const BATCH: u64 = 1000;
/// Single durable puts timed one by one in workload 7.
pub const SINGLE_PUTS: u64 = 10_000;
/// Keys in a hot spot of workload 6.
pub const HOT_SPOT: u64 = 65_536;
/// The exponent of workloads 11 and 12's Zipfian key choice (YCSB's).
pub const ZIPF_EXPONENT: f64 = 0.99;
/// Pairs each scan of workload 13 reads.
pub const SHORT_SCAN: u64 = 100;

pub type Result<T> = std::result::Result<T, StoreError>;

fn wrong(what: String) -> StoreError {
    StoreError(what)
}

/// Checks that `value`, read under key `i`, was written for key `i`.
pub(crate) fn check(i: u64, found: bool, value: &[u8]) -> Result<()> {
    if !found {
        return Err(wrong(format!("key {i} is missing")));
    }
    match kv40::index_of(value) {
        Some(j) if j == i && value.len() == kv40::VALUE_LEN => Ok(()),
        _ => Err(wrong(format!(
            "key {i} returned a value that is not its own"
        ))),
    }
}

/// Writes `indices` with `version` as one durable batch.
fn write_pairs(
    store: &dyn Store,
    indices: impl Iterator<Item = u64>,
    version: impl Fn(u64) -> u64,
) -> Result<()> {
    let pairs: Vec<([u8; kv40::KEY_LEN], [u8; kv40::VALUE_LEN])> = indices
        .map(|i| (kv40::key(i), kv40::value(i, version(i))))
        .collect();
    let refs: Vec<(&[u8], &[u8])> = pairs
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    store.write_batch(&refs)
}

/// 1: keys 0..n in order, 1,000 per durable batch, into an empty store.
pub fn bulk_insert(store: &dyn Store, n: u64, tick: &dyn Fn(u64)) -> Result<Figure> {
    let meter = Meter::start();
    let mut start = 0;
    while start < n {
        let end = (start + BATCH).min(n);
        write_pairs(store, start..end, |_| 0)?;
        tick(end - start);
        start = end;
    }
    Ok(meter.finish("bulk_insert", "bulk insert", n))
}

/// 2: `ops` gets of uniformly random keys among the `n` present.
pub fn random_read(store: &dyn Store, n: u64, ops: u64, tick: &dyn Fn(u64)) -> Result<Figure> {
    let mut rng = Rng::new(0x5eed_0002);
    let mut out = Vec::with_capacity(kv40::VALUE_LEN);
    let meter = Meter::start();
    let mut done = 0;
    while done < ops && !(done.is_multiple_of(BATCH) && meter.spent()) {
        let i = rng.below(n);
        let found = store.get(&kv40::key(i), &mut out)?;
        check(i, found, &out)?;
        done += 1;
        if done.is_multiple_of(BATCH) {
            tick(BATCH);
        }
    }
    Ok(meter.finish("random_read", "random read", done).cut_at(ops))
}

/// 3 (and 9's long run): `count` puts of random keys among the `n`
/// present with new values, 1,000 per durable batch, with versions from
/// `first_version` on. `capped`: stops at the time cap (workload 3, not
/// 9's run, whose samples need every update).
pub fn updates(
    store: &dyn Store,
    n: u64,
    count: u64,
    (seed, first_version): (u64, u64),
    capped: bool,
    tick: &dyn Fn(u64),
) -> Result<Figure> {
    let mut rng = Rng::new(seed);
    let meter = Meter::start();
    let mut done = 0;
    while done < count && !(capped && meter.spent()) {
        let batch = BATCH.min(count - done);
        let keys: Vec<u64> = (0..batch).map(|_| rng.below(n)).collect();
        // A batch holds each key once: the last version wins.
        write_pairs(store, keys.iter().copied(), |i| first_version + done + i)?;
        done += batch;
        tick(batch);
    }
    Ok(meter
        .finish("random_update", "random update", done)
        .cut_at(count))
}

/// 4: `ops` operations alternating get and put on random keys among the
/// `n` present; the puts of each 1,000 operations are one durable batch.
pub fn random_mixed(store: &dyn Store, n: u64, ops: u64, tick: &dyn Fn(u64)) -> Result<Figure> {
    let mut rng = Rng::new(0x5eed_0004);
    let mut out = Vec::with_capacity(kv40::VALUE_LEN);
    let meter = Meter::start();
    let mut done = 0;
    while done < ops && !meter.spent() {
        let count = BATCH.min(ops - done);
        let mut puts = Vec::with_capacity(count as usize / 2);
        for op in 0..count {
            let i = rng.below(n);
            if op.is_multiple_of(2) {
                let found = store.get(&kv40::key(i), &mut out)?;
                check(i, found, &out)?;
            } else {
                puts.push(i);
            }
        }
        puts.sort_unstable();
        puts.dedup();
        write_pairs(store, puts.into_iter(), |i| (done << 8) + i % 251)?;
        done += count;
        tick(count);
    }
    Ok(meter
        .finish("random_mixed", "random mixed", done)
        .cut_at(ops))
}

/// 5: one ordered pass over all pairs, checking the order and each value.
pub fn range_scan(store: &dyn Store, n: u64, tick: &dyn Fn(u64)) -> Result<Figure> {
    let meter = Meter::start();
    let mut next = 0u64;
    let mut problem = None;
    let mut stopped = false;
    store.scan(&[], &mut |key, value| {
        let expected = kv40::key(next);
        if key != expected.as_slice() || kv40::index_of(value) != Some(next) {
            problem = Some(format!(
                "the scan returned the wrong pair where key {next} belongs"
            ));
            return false;
        }
        next += 1;
        if next.is_multiple_of(BATCH) {
            tick(BATCH);
            stopped = meter.spent() && next < n;
        }
        !stopped
    })?;
    if let Some(p) = problem {
        return Err(wrong(p));
    }
    if next != n && !stopped {
        return Err(wrong(format!("the scan returned {next} of {n} pairs")));
    }
    Ok(meter.finish("range_scan", "range scan", next).cut_at(n))
}

/// 6: `ops` gets; every 65,536, a random run of 65,536 consecutive keys
/// among the `n` present, read in random order.
pub fn hotspot_read(store: &dyn Store, n: u64, ops: u64, tick: &dyn Fn(u64)) -> Result<Figure> {
    let mut rng = Rng::new(0x5eed_0006);
    let spot = HOT_SPOT.min(n);
    let mut order: Vec<u64> = (0..spot).collect();
    let mut out = Vec::with_capacity(kv40::VALUE_LEN);
    let meter = Meter::start();
    let mut done = 0;
    while done < ops && !meter.spent() {
        let start = rng.below(n - spot + 1);
        // A fresh random order of the run (Fisher-Yates).
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for &offset in order.iter().take((ops - done) as usize) {
            let i = start + offset;
            let found = store.get(&kv40::key(i), &mut out)?;
            check(i, found, &out)?;
        }
        let count = spot.min(ops - done);
        done += count;
        tick(count);
    }
    Ok(meter
        .finish("hotspot_read", "hot-spot read", done)
        .cut_at(ops))
}

/// `count` key indices among `n`, their ranks Zipf-distributed and then
/// scattered over the key space by a hash (YCSB's "scrambled Zipfian"), so
/// that the hot keys are a real hot set but not neighbours on one page.
/// Drawn before the timing starts.
pub fn zipfian_keys(n: u64, count: u64, seed: u64) -> Vec<u64> {
    use rand::SeedableRng;
    use rand_distr::Distribution;
    let zipf = rand_distr::Zipf::new(n as f64, ZIPF_EXPONENT).expect("n >= 1, exponent > 0");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| kv40::mix(zipf.sample(&mut rng) as u64) % n)
        .collect()
}

/// 11: `ops` gets of Zipfian keys among the `n` present, every value
/// checked, each timed (p50, p99, p99.9).
pub fn zipfian_read(store: &dyn Store, n: u64, ops: u64, tick: &dyn Fn(u64)) -> Result<Figure> {
    let keys = zipfian_keys(n, ops, 0x5eed_0011);
    let mut out = Vec::with_capacity(kv40::VALUE_LEN);
    let mut latencies = Vec::with_capacity(keys.len());
    let meter = Meter::start();
    let mut done = 0u64;
    for &i in &keys {
        if done.is_multiple_of(BATCH) && meter.spent() {
            break;
        }
        done += 1;
        let t = Instant::now();
        let found = store.get(&kv40::key(i), &mut out)?;
        latencies.push(nanos_since(t));
        check(i, found, &out)?;
        if done.is_multiple_of(BATCH) {
            tick(BATCH);
        }
    }
    Ok(meter
        .finish("zipfian_read", "Zipfian read", done)
        .cut_at(ops)
        .with_latencies(latencies))
}

/// 12: puts of Zipfian keys among the `n` present with new values, drawn
/// 1,000 at a time; each 1,000 is one durable batch holding each key once
/// (a hot key drawn twice is written once), and the figure counts the
/// pairs written.
pub fn zipfian_update(store: &dyn Store, n: u64, ops: u64, tick: &dyn Fn(u64)) -> Result<Figure> {
    let keys = zipfian_keys(n, ops, 0x5eed_0012);
    let meter = Meter::start();
    let mut written = 0;
    let mut stopped = false;
    for (b, chunk) in (0u64..).zip(keys.chunks(BATCH as usize)) {
        if meter.spent() {
            stopped = true;
            break;
        }
        let mut batch = chunk.to_vec();
        batch.sort_unstable();
        batch.dedup();
        written += batch.len() as u64;
        write_pairs(store, batch.into_iter(), |i| {
            (3 << 40) | (b << 20) | (i & 0xfffff)
        })?;
        tick(chunk.len() as u64);
    }
    let mut f = meter.finish("zipfian_update", "Zipfian update", written);
    f.stopped_early = stopped;
    Ok(f)
}

/// Scans workload 13 makes for `ops` operations: one per 100 pairs read.
pub fn short_scan_count(ops: u64) -> u64 {
    (ops / SHORT_SCAN).max(1)
}

/// 13: `scans` scans of 100 consecutive pairs from random keys among the
/// `n` present, keys and values checked, each scan timed; the figure counts
/// scans.
pub fn short_scans(store: &dyn Store, n: u64, scans: u64, tick: &dyn Fn(u64)) -> Result<Figure> {
    let mut rng = Rng::new(0x5eed_0013);
    let len = SHORT_SCAN.min(n);
    let mut latencies = Vec::with_capacity(scans as usize);
    let meter = Meter::start();
    let mut done = 0;
    while done < scans && !meter.spent() {
        done += 1;
        let start = rng.below(n - len + 1);
        let mut next = start;
        let mut problem = None;
        let t = Instant::now();
        store.scan(&kv40::key(start), &mut |key, value| {
            if key != kv40::key(next).as_slice() || kv40::index_of(value) != Some(next) {
                problem = Some(format!("a scan from key {start} went wrong at key {next}"));
                return false;
            }
            next += 1;
            next < start + len
        })?;
        latencies.push(nanos_since(t));
        if let Some(p) = problem {
            return Err(wrong(p));
        }
        if next != start + len {
            return Err(wrong(format!(
                "a scan from key {start} returned {} of {len} pairs",
                next - start
            )));
        }
        tick(1);
    }
    Ok(meter
        .finish("short_scan", "short scans", done)
        .cut_at(scans)
        .with_latencies(latencies))
}

/// 7: 10,000 random puts, each its own durable commit, timed one by one.
pub fn single_put(store: &dyn Store, n: u64, tick: &dyn Fn(u64)) -> Result<Figure> {
    let mut rng = Rng::new(0x5eed_0007);
    let mut latencies = Vec::with_capacity(SINGLE_PUTS as usize);
    let meter = Meter::start();
    let mut done = 0;
    while done < SINGLE_PUTS && !(done.is_multiple_of(100) && meter.spent()) {
        done += 1;
        let i = rng.below(n);
        let t = Instant::now();
        store.put(&kv40::key(i), &kv40::value(i, 1 << 40 | done))?;
        latencies.push(nanos_since(t));
        if done.is_multiple_of(100) {
            tick(100);
        }
    }
    Ok(meter
        .finish("single_put", "single put", done)
        .cut_at(SINGLE_PUTS)
        .with_latencies(latencies))
}

/// 8: `threads` threads each doing single durable puts of random keys,
/// `total` in all.
pub fn concurrent_put(
    store: &dyn Store,
    n: u64,
    threads: u64,
    total: u64,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<Figure> {
    let per = total / threads;
    let meter = Meter::start();
    let latencies: Vec<Result<Vec<u64>>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<Vec<u64>> {
                    let mut rng = Rng::new(0x5eed_0008 ^ t << 32);
                    let mut lat = Vec::with_capacity(per as usize);
                    for done in 1..=per {
                        let i = rng.below(n);
                        let started = Instant::now();
                        store.put(&kv40::key(i), &kv40::value(i, 2 << 40 | t << 32 | done))?;
                        lat.push(nanos_since(started));
                        if done.is_multiple_of(100) {
                            tick(100);
                        }
                    }
                    Ok(lat)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("bench writer thread panicked"))
            .collect()
    });
    let mut all = Vec::with_capacity(total as usize);
    for l in latencies {
        all.extend(l?);
    }
    let workload = match threads {
        1 => "concurrent_put_1",
        2 => "concurrent_put_2",
        8 => "concurrent_put_8",
        64 => "concurrent_put_64",
        _ => "concurrent_put",
    };
    Ok(meter
        .finish(workload, "concurrent put", per * threads)
        .with_latencies(all))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::set_time_cap;
    use crate::stores::{kind, Settings};
    use std::time::Duration;

    #[test]
    fn a_timed_workload_stops_at_the_time_cap_and_counts_what_it_did() {
        let dir = tempfile::tempdir().unwrap();
        let store = (kind("kivi").unwrap().open)(dir.path(), &Settings::default()).unwrap();
        let s = store.as_ref();
        let n = 5_000;
        bulk_insert(s, n, &|_| ()).unwrap();
        // Far more reads than 50 ms allow: stopped, counting whole batches.
        set_time_cap(Some(Duration::from_millis(50)));
        let planned = 1_000_000_000;
        let f = random_read(s, n, planned, &|_| ()).unwrap();
        assert!(f.stopped_early, "{f:?}");
        assert!(f.ops > 0 && f.ops < planned, "{f:?}");
        assert!(f.ops.is_multiple_of(BATCH), "{f:?}");
        assert!(f.wall >= Duration::from_millis(50), "{f:?}");
        // Work that fits the cap is done whole and not marked.
        let f = random_read(s, n, 2_000, &|_| ()).unwrap();
        assert!(!f.stopped_early && f.ops == 2_000, "{f:?}");
        let f = updates(s, n, planned, (7, 1), true, &|_| ()).unwrap();
        assert!(f.stopped_early && f.ops < planned, "{f:?}");
        // Without the cap, nothing stops early.
        set_time_cap(None);
        let f = short_scans(s, n, 20, &|_| ()).unwrap();
        assert!(!f.stopped_early && f.ops == 20, "{f:?}");
    }
}
