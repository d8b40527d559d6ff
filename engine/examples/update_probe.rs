//! What random updates cost, and how many checkpoints run behind them:
//! loads N pairs, then times N random updates (1,000 per durable batch) and
//! prints the rate, CPU per update and the checkpoints taken meanwhile.
//! `KIVI_WRITE_BUFFER_MIB` and `KIVI_CHECKPOINT_MIB` override the options.
//!
//! ```text
//! cargo run --release -p kivi-db --example update_probe -- DIR [N]
//! ```

mod common;

use common::{load_with, update, Result};

/// The allocator the `kivi` binary uses.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// CPU seconds this process has used, user and system (`getrusage`;
/// 0 if it fails).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is handed, and all-zero
    // bytes are a valid value of that plain C struct.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return 0.0;
        }
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// CLOCK_MONOTONIC in seconds, as `perf record -k CLOCK_MONOTONIC` stamps
/// its samples: the update phase's bounds, printed to stderr, select it with
/// `perf report --time START,END`.
fn monotonic_seconds() -> f64 {
    // SAFETY: clock_gettime only writes the timespec it is handed.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; CLOCK_MONOTONIC is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).ok_or("usage: update_probe DIR [N]")?;
    let n: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let mut opts = kivi::Options::default();
    if let Ok(v) = std::env::var("KIVI_WRITE_BUFFER_MIB") {
        opts.write_buffer_bytes = v.parse::<u64>()? << 20;
    }
    if let Ok(v) = std::env::var("KIVI_CHECKPOINT_MIB") {
        opts.checkpoint_bytes = v.parse::<u64>()? << 20;
    }
    let db = load_with(dir, n, opts)?;
    let before = db.stats()?;
    let (t0, c0, m0) = (
        std::time::Instant::now(),
        cpu_seconds(),
        monotonic_seconds(),
    );
    update(&db, n, n, 7)?;
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
    eprintln!(
        "update phase (CLOCK_MONOTONIC): {m0:.6},{:.6}",
        monotonic_seconds()
    );
    let after = db.stats()?;
    println!(
        "{:.0} updates/s  {:.2} cpu us/update  checkpoints {} (sliced {})  stalls {}  dirty MiB {}",
        n as f64 / secs,
        cpu * 1e6 / n as f64,
        after.checkpoints - before.checkpoints,
        after.sliced_checkpoints - before.sliced_checkpoints,
        after.write_stalls - before.write_stalls,
        after.dirty_bytes >> 20,
    );
    Ok(())
}
