//! Measures `apply` alone (no log, no I/O): random update batches on a tree
//! of kv40 pairs held in memory, and then ordered scans of the updated tree
//! (its leaves a shared base and a delta each, as a merge of the engine's
//! write buffer leaves them until a checkpoint).
//! `cargo run --release -p kivi-tree --example apply_bench [N]`
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use kivi_log::{OpRef, NO_DEADLINE};
use kivi_storage::MemoryStorage;
use kivi_tree::{apply, get_into, Cursor, Pager, TreeConfig};
use std::sync::Arc;
use std::time::Instant;

/// CPU time of this thread, in seconds: steadier than wall time on a busy machine.
fn cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

fn key(i: u64) -> Vec<u8> {
    let mut k = i.to_be_bytes().to_vec();
    for j in 0..4 {
        k.extend_from_slice(&mix(i * 4 + j).to_le_bytes());
    }
    k
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |s| s.parse().unwrap());
    let pager = Pager::new(Arc::new(MemoryStorage::new()), 1 << 32);
    let cfg = TreeConfig::default();
    let mut root = None;
    let val = vec![7u8; 40];
    let t = Instant::now();
    for b in 0..n / 1000 {
        let keys: Vec<Vec<u8>> = (b * 1000..(b + 1) * 1000).map(key).collect();
        let ops: Vec<OpRef> = keys
            .iter()
            .map(|k| OpRef::Put(k, &val, NO_DEADLINE))
            .collect();
        root = apply(&pager, &cfg, root.as_ref(), &ops).unwrap().root;
    }
    println!(
        "load: {:.2} us/pair",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let mut x = 1u64;
    let t = Instant::now();
    let c = cpu();
    let mut out = Vec::new();
    for _ in 0..n {
        x = mix(x);
        assert!(
            get_into(&pager, root.as_ref().unwrap(), &key(x % n), &mut out)
                .unwrap()
                .is_some()
        );
    }
    println!(
        "get: {:.3} us wall, {:.3} us cpu",
        t.elapsed().as_secs_f64() * 1e6 / n as f64,
        (cpu() - c) * 1e6 / n as f64
    );
    let batches: Vec<Vec<Vec<u8>>> = (0..n / 1000)
        .map(|_| {
            let mut keys: Vec<Vec<u8>> = (0..1000)
                .map(|_| {
                    x = mix(x);
                    key(x % n)
                })
                .collect();
            keys.sort();
            keys.dedup();
            keys
        })
        .collect();
    let t = Instant::now();
    let c = cpu();
    for keys in &batches {
        let ops: Vec<OpRef> = keys
            .iter()
            .map(|k| OpRef::Put(k, &val, NO_DEADLINE))
            .collect();
        root = apply(&pager, &cfg, root.as_ref(), &ops).unwrap().root;
    }
    println!(
        "random update: {:.3} us/op wall, {:.3} us/op cpu",
        t.elapsed().as_secs_f64() * 1e6 / n as f64,
        (cpu() - c) * 1e6 / n as f64
    );
    for _ in 0..5 {
        let c = cpu();
        let mut cursor = Cursor::new(root.clone());
        cursor.seek_forward(&pager, None).unwrap();
        let (mut pairs, mut sum) = (0u64, 0u64);
        while cursor.is_valid() {
            sum = sum.wrapping_add(u64::from(cursor.key()[7]));
            pairs += 1;
            cursor.next(&pager).unwrap();
        }
        assert_eq!(pairs, n, "the scan meets every pair once ({sum})");
        println!("scan: {:.1} ns/pair cpu", (cpu() - c) * 1e9 / pairs as f64);
    }
}
