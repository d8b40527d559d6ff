//! Peak memory (RSS) against `cache_bytes` (issue #5): loads N kv40-like
//! pairs into a store opened with a given memory budget, then measures the
//! process's peak RSS separately for random reads, random updates and a
//! full scan (the peak is reset between phases through
//! /proc/self/clear_refs).
//!
//! ```text
//! cargo run --release -p kivi-db --example memory_bench -- DIR [N] [CACHE_MIB] [OPS]
//! ```

mod common;

/// The allocator the `kivi` binary uses (mimalloc), counting the bytes live
/// on the heap, so the trace can tell what the store holds from what the
/// allocator keeps.
struct Counting;

static HEAP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: every call forwards to mimalloc with the same layout
// and pointer; the counter is only arithmetic beside it.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        HEAP.fetch_add(l.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as the caller promised for `l`.
        unsafe { mimalloc::MiMalloc.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        HEAP.fetch_sub(l.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with layout `l`.
        unsafe { mimalloc::MiMalloc.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        HEAP.fetch_add(l.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as the caller promised for `l`.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, new: usize) -> *mut u8 {
        HEAP.fetch_add(new, std::sync::atomic::Ordering::Relaxed);
        HEAP.fetch_sub(l.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with layout `l`; `new` is the caller's.
        unsafe { mimalloc::MiMalloc.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

use common::{key, load_with, update, Result};
use std::time::Instant;

fn status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kib| kib << 10)
}

fn reset_peak() {
    // "5" resets the peak resident set size to the current one (Linux).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn report(db: &kivi::Db, phase: &str, ops: u64, t: Instant) -> Result<()> {
    let s = db.stats()?;
    println!(
        "{phase:<14} {:>10.0} ops/s  peak RSS {:>6} MiB  (now {:>6} MiB; cache {:>4} MiB, resident {:>4} MiB, unwritten changes {:>4} MiB)",
        ops as f64 / t.elapsed().as_secs_f64(),
        status("VmHWM:") >> 20,
        status("VmRSS:") >> 20,
        s.cache_bytes >> 20,
        s.resident_bytes >> 20,
        s.dirty_bytes >> 20,
    );
    println!(
        "{:<14} so far: {} page reads, {} checkpoints, {} delta pages, {} MiB copied by the cleaner, files {} MiB for {} MiB live",
        "",
        s.page_reads,
        s.checkpoints,
        s.delta_pages,
        s.cleaner_copied_bytes >> 20,
        s.file_bytes >> 20,
        s.live_bytes >> 20,
    );
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .ok_or("usage: memory_bench DIR [N] [CACHE_MIB] [OPS]")?;
    let n: u64 = args.get(2).map_or(Ok(10_000_000), |s| s.parse())?;
    let cache_mib: u64 = args.get(3).map_or(Ok(64), |s| s.parse())?;
    let ops: u64 = args.get(4).map_or(Ok(1_000_000), |s| s.parse())?;
    let opts = kivi::Options {
        cache_bytes: cache_mib << 20,
        ..kivi::Options::default()
    };
    println!("n {n}, cache_bytes {cache_mib} MiB, {ops} operations per phase");
    reset_peak();
    let t = Instant::now();
    let db = load_with(dir, n, opts)?;
    db.checkpoint()?;
    report(&db, "load", n, t)?;

    let mut x = 12345u64;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };

    reset_peak();
    let t = Instant::now();
    let mut out = Vec::new();
    for _ in 0..ops {
        let j = next();
        if !db.get_into(&key(j), &mut out)? || out != key(j) {
            return Err(format!("pair {j} read back wrong").into());
        }
    }
    report(&db, "random reads", ops, t)?;

    reset_peak();
    let t = Instant::now();
    // MEMORY_TRACE=1 prints the memory figures every second meanwhile.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tracer = std::env::var_os("MEMORY_TRACE").map(|_| {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_secs(1));
                if let Ok(s) = db.stats() {
                    println!(
                        "  {:>5.1} s  RSS {:>5} MiB  heap {:>5} MiB  cache {:>4} resident {:>4} unwritten {:>4} MiB  checkpoints {}",
                        t.elapsed().as_secs_f64(),
                        status("VmRSS:") >> 20,
                        HEAP.load(std::sync::atomic::Ordering::Relaxed) >> 20,
                        s.cache_bytes >> 20,
                        s.resident_bytes >> 20,
                        s.dirty_bytes >> 20,
                        s.checkpoints,
                    );
                }
            }
        })
    });
    update(&db, n, ops, 99)?;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(t) = tracer {
        let _ = t.join();
    }
    report(&db, "random updates", ops, t)?;

    reset_peak();
    let t = Instant::now();
    let mut count = 0u64;
    let mut scan = db.scan::<&[u8], _>(..);
    while let Some((k, v)) = scan.next()? {
        if k != v {
            return Err("scan read a pair back wrong".into());
        }
        count += 1;
    }
    if count != n {
        return Err(format!("scan found {count} pairs, not {n}").into());
    }
    drop(scan);
    report(&db, "full scan", n, t)?;
    Ok(())
}
