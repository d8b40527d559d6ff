//! Where a single uncompressed get's time goes: random gets as the tables
//! benchmark makes them, against the same key over and over (no cache
//! misses: the work around the misses alone).
//! `cargo run --release -p kivi-bench --example get_probe -- DIR N [LOOKUPS]`

use kivi::table::{Table, TableWriter, WriterOptions};
use kivi_bench::kv40::mix;
use kivi_bench::tables::numbered;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let n: u64 = args[2].parse().expect("N");
    let lookups: u64 = args
        .get(3)
        .map_or(2_000_000, |s| s.parse().expect("lookups"));
    let base = dir.join(format!("probe-{n}"));
    if Table::open(&base).is_err() {
        std::fs::create_dir_all(&dir).expect("dir");
        let mut w = TableWriter::create(&base, WriterOptions::default()).expect("create");
        for i in 0..n {
            w.put(
                format!("key_{i}").as_bytes(),
                format!("value_{i}").as_bytes(),
            )
            .expect("put");
        }
        w.finish().expect("finish");
    }
    let t = Table::open(&base).expect("open");
    let keys: Vec<Vec<u8>> = (0..lookups)
        .map(|j| format!("key_{}", mix(j) % n).into_bytes())
        .collect();
    for pass in 0..3 {
        let t0 = Instant::now();
        let mut sum = 0usize;
        for k in &keys {
            sum += t.get(k).expect("get").expect("present").len();
        }
        let random = t0.elapsed().as_nanos() as f64 / lookups as f64;
        let t0 = Instant::now();
        for _ in 0..lookups {
            sum += t.get(&keys[0]).expect("get").expect("present").len();
        }
        let same = t0.elapsed().as_nanos() as f64 / lookups as f64;
        // As `kivi bench --tables` does it: each key and its expected value
        // formatted in the loop, and the value checked.
        let t0 = Instant::now();
        let (mut k, mut want) = (Vec::new(), Vec::new());
        for j in 0..lookups {
            let i = mix(j) % n;
            numbered(&mut k, b"key_", i);
            numbered(&mut want, b"value_", i);
            let got = t.get(&k).expect("get").expect("present");
            assert!(*got == want[..]);
        }
        let formatted = t0.elapsed().as_nanos() as f64 / lookups as f64;
        println!("pass {pass}: random {random:.1} ns/get, formatted {formatted:.1}, same key {same:.1} ({sum})");
    }
}
