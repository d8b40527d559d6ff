//! Developer tool: times random point reads of an N-pair store (kv40-like
//! pairs loaded in order, then checkpointed), so a profiler can be pointed at
//! the lookup path alone.
//! `cargo run --release -p kivi-db --example read_bench -- DIR N ROUNDS [UPDATES]`
use std::time::Instant;

mod common;
use common::key;

fn main() -> common::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).map(String::as_str).unwrap_or("/tmp/read_bench");
    let n: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let rounds: u32 = args.get(3).map_or(Ok(5), |s| s.parse())?;
    let db = common::load(dir, n)?;
    db.checkpoint()?;
    // Random updates after the checkpoint leave most leaves with a delta, as
    // the benchmark suite's reads after its update workloads see them.
    let updates: u64 = args.get(4).map_or(Ok(0), |s| s.parse())?;
    common::update(&db, n, updates, 3)?;
    let mut x = 7u64;
    for _ in 0..rounds {
        let t = Instant::now();
        let mut found = 0u64;
        for _ in 0..n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = key((x >> 33) % n);
            let v = db.get(&k)?.expect("present");
            found += (v[..] == k[..]) as u64;
        }
        assert_eq!(found, n);
        let s = t.elapsed().as_secs_f64();
        println!("{n} gets in {s:.3} s: {:.2} M/s", n as f64 / s / 1e6);
    }
    Ok(())
}
