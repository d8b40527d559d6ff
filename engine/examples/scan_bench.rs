//! Developer tool: times full ordered scans of an N-pair store (kv40-like
//! pairs) so a profiler can be pointed at the scan path alone.
//! `cargo run --release -p kivi-db --example scan_bench -- DIR N ROUNDS [UPDATES]`
//! (`SCAN_AFTER` and `SCAN_SNAPSHOT`, below, say what the scans meet)
use std::time::Instant;

mod common;

/// The allocator the `kivi` binary uses.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> common::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).map(String::as_str).unwrap_or("/tmp/scan_bench");
    let n: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let rounds: u32 = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let db = common::load(dir, n)?;
    let updates: u64 = args.get(4).map_or(Ok(0), |s| s.parse())?;
    common::update(&db, n, updates, 1)?;
    // `SCAN_SNAPSHOT=1`: every scan reads a snapshot taken right after the
    // updates, so each meets the same write buffer and tree, whatever the
    // background merge and checkpoint do meanwhile.
    let snapshot = (std::env::var("SCAN_SNAPSHOT").as_deref() == Ok("1")).then(|| db.snapshot());
    // What the store may still be doing when the scans start:
    // `SCAN_AFTER=checkpoint` (the default) checkpoints first, `now` scans
    // at once, `MS` waits that many milliseconds.
    let after = std::env::var("SCAN_AFTER").unwrap_or_else(|_| "checkpoint".into());
    match after.as_str() {
        "checkpoint" => db.checkpoint()?,
        "now" => {}
        ms => std::thread::sleep(std::time::Duration::from_millis(ms.parse()?)),
    }
    let print_stats = |when: &str| -> common::Result<()> {
        let s = db.stats()?;
        println!(
            "{when}: buffered keys {}  dirty MiB {}  checkpoints {}",
            s.buffered_keys,
            s.dirty_bytes >> 20,
            s.checkpoints
        );
        Ok(())
    };
    // The statistics count the buffered keys, a tree lookup each, long
    // enough for the idle merge to empty the buffer: with `now` they wait
    // until after the scans.
    let now = after == "now";
    if !now || snapshot.is_some() {
        // (With a snapshot the scans meet what it holds, however long this takes.)
        print_stats("before the scans")?;
    }
    for _ in 0..rounds {
        let t = Instant::now();
        let mut scan = match &snapshot {
            Some(s) => s.scan::<&[u8], _>(..),
            None => db.scan::<&[u8], _>(..),
        };
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
    if now {
        print_stats("after the scans")?;
    }
    Ok(())
}
