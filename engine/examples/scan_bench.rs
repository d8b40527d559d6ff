//! Developer tool: times full ordered scans of an N-pair store (kv40-like
//! pairs) so a profiler can be pointed at the scan path alone.
//! `cargo run --release -p kivi --example scan_bench -- DIR N ROUNDS [UPDATES]`
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).map(String::as_str).unwrap_or("/tmp/scan_bench");
    let n: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let rounds: u32 = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let _ = std::fs::remove_dir_all(dir);
    let db = kivi::Db::open(dir, kivi::Options::default())?;
    let mut i = 0u64;
    while i < n {
        let mut batch = kivi::WriteBatch::new();
        for j in i..(i + 1000).min(n) {
            let mut k = [0u8; 40];
            k[..8].copy_from_slice(&j.to_be_bytes());
            k[8..16].copy_from_slice(&j.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
            batch.put(k, k)?;
        }
        db.write(batch)?;
        i += 1000;
    }
    let updates: u64 = args.get(4).map_or(Ok(0), |s| s.parse())?;
    let mut x = 1u64;
    let mut done = 0u64;
    while done < updates {
        let mut batch = kivi::WriteBatch::new();
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let j = (x >> 33) % n;
            let mut k = [0u8; 40];
            k[..8].copy_from_slice(&j.to_be_bytes());
            k[8..16].copy_from_slice(&j.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
            batch.put(k, k)?;
        }
        db.write(batch)?;
        done += 1000;
    }
    db.checkpoint()?;
    for _ in 0..rounds {
        let t = Instant::now();
        let mut scan = db.scan::<&[u8], _>(..);
        let mut count = 0u64;
        let mut sum = 0u64;
        while let Some((k, v)) = scan.next()? {
            count += 1;
            sum = sum.wrapping_add(k[7] as u64 + v.len() as u64);
        }
        assert_eq!(count, n);
        let s = t.elapsed().as_secs_f64();
        println!(
            "{count} pairs in {s:.3} s: {:.2} M/s ({sum})",
            n as f64 / s / 1e6
        );
    }
    Ok(())
}
