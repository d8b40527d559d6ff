//! Many writers doing single durable puts at once (the benchmark's workload
//! 8): loads N pairs, then T threads put random keys, one commit each, and
//! prints the rate, the batches per group commit, and the write stalls.
//!
//! ```text
//! cargo run --release -p kivi-db --example concurrent_probe -- DIR [N] [THREADS] [PUTS]
//! ```

mod common;

use common::{key, load_with, Result};

/// The allocator the `kivi` binary uses.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .ok_or("usage: concurrent_probe DIR [N] [THREADS] [PUTS]")?;
    let n: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let threads: u64 = args.get(3).map_or(Ok(64), |s| s.parse())?;
    let puts: u64 = args.get(4).map_or(Ok(200_000), |s| s.parse())?;
    let db = load_with(dir, n, kivi::Options::default())?;
    let before = db.stats()?;
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let db = &db;
                s.spawn(move || -> kivi::Result<()> {
                    let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for _ in 0..puts / threads {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let k = key((x >> 33) % n);
                        db.put(&k, &k)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "writer thread panicked")??;
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let after = db.stats()?;
    let groups = after.group_commits - before.group_commits;
    println!(
        "{:.0} puts/s  {:.1} batches per group  merges {}  checkpoints {}  stalls {} ({} ms)",
        (puts / threads * threads) as f64 / secs,
        (after.batches - before.batches) as f64 / groups.max(1) as f64,
        after.buffer_merges - before.buffer_merges,
        after.checkpoints - before.checkpoints,
        after.write_stalls - before.write_stalls,
        (after.write_stall_us - before.write_stall_us) / 1000,
    );
    Ok(())
}
