//! What random updates cost, and how many checkpoints run behind them:
//! loads N pairs, then times N random updates (1,000 per durable batch) and
//! prints the rate, CPU per update and the checkpoints taken meanwhile.
//! `KIVI_WRITE_BUFFER_MIB` and `KIVI_CHECKPOINT_MIB` override the options.
//!
//! ```text
//! cargo run --release -p kivi --example update_probe -- DIR [N]
//! ```

mod common;

use common::{load_with, update, Result};

/// The allocator the `kivi` binary uses.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// CPU seconds this process has used (user + system, from /proc/self/stat,
/// in the kernel's 100 Hz clock ticks; 0 where /proc is missing).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or("").split(' ').collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
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
    let (t0, c0) = (std::time::Instant::now(), cpu_seconds());
    update(&db, n, n, 7)?;
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
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
