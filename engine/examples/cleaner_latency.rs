//! Single durable put latency on an idle store and while the cleaner works
//! (issue #5: p99 while cleaning within 2x of idle).
//!
//! Loads N kv40-like pairs, updates N random ones (so pages are spread over
//! segments), then times single puts, one at a time: first with nothing
//! else running, then while `compact()` copies every live page into a new
//! segment on another thread, over and over, until as many puts are timed.
//!
//! ```text
//! cargo run --release -p kivi-db --example cleaner_latency -- DIR [N] [PUTS]
//! ```

mod common;

use common::{key, load, update, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// Times `puts` single puts of random existing keys; nanoseconds, sorted.
fn time_puts(db: &kivi::Db, n: u64, puts: u64, seed: u64) -> Result<Vec<u64>> {
    let mut x = seed;
    let mut out = Vec::with_capacity(puts as usize);
    for _ in 0..puts {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = key((x >> 33) % n);
        let t = Instant::now();
        db.put(&k, &k)?;
        out.push(t.elapsed().as_nanos() as u64);
    }
    out.sort_unstable();
    Ok(out)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).ok_or("usage: cleaner_latency DIR [N] [PUTS]")?;
    let n: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let puts: u64 = args.get(3).map_or(Ok(5_000), |s| s.parse())?;
    let db = load(dir, n)?;
    update(&db, n, n, 7)?;
    db.checkpoint()?;
    // Let the background settle (idle checkpoint, deletions).
    std::thread::sleep(std::time::Duration::from_secs(2));

    let idle = time_puts(&db, n, puts, 11)?;
    db.checkpoint()?;

    let stop = Arc::new(AtomicBool::new(false));
    let cleaner = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || -> kivi::Result<(u64, u64)> {
            let mut rounds = 0;
            let mut copied = 0;
            while !stop.load(Ordering::Relaxed) {
                db.compact()?;
                rounds += 1;
                copied = db.stats()?.cleaner_copied_bytes;
            }
            Ok((rounds, copied))
        })
    };
    let busy = time_puts(&db, n, puts, 13)?;
    stop.store(true, Ordering::Relaxed);
    let (rounds, copied) = cleaner.join().expect("cleaner thread")?;

    let s = db.stats()?;
    println!(
        "n {n}, {puts} single puts each; store: {} pairs, {} file bytes",
        s.pairs, s.file_bytes
    );
    println!(
        "idle:     p50 {:8.1} us  p99 {:8.1} us  max {:8.1} us",
        percentile(&idle, 0.5),
        percentile(&idle, 0.99),
        percentile(&idle, 1.0)
    );
    println!(
        "cleaning: p50 {:8.1} us  p99 {:8.1} us  max {:8.1} us  ({rounds} compactions, {copied} bytes copied)",
        percentile(&busy, 0.5),
        percentile(&busy, 0.99),
        percentile(&busy, 1.0)
    );
    println!(
        "p99 ratio (cleaning / idle): {:.2}",
        percentile(&busy, 0.99) / percentile(&idle, 0.99)
    );
    Ok(())
}
