//! Where the bytes are during sustained random updates: loads N kv40-like
//! pairs, then prints the store's space figures every N/4 updates (files by
//! kind, the tree, segments waiting for readers, what the cleaner did).
//!
//! ```text
//! cargo run --release -p kivi-db --example space_probe -- DIR [N] [ROUNDS]
//! ```

mod common;

use common::{load, update, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).ok_or("usage: space_probe DIR [N] [ROUNDS]")?;
    let n: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let rounds: u64 = args.get(3).map_or(Ok(8), |s| s.parse())?;
    let db = load(dir, n)?;
    db.checkpoint()?;
    println!("updates/n  amp   tree MiB  pages MiB (segs)  log MiB (segs)  retiring  cleaned  copied MiB  checkpoints");
    for r in 1..=rounds {
        update(&db, n, n / 4, r)?;
        let s = db.stats()?;
        println!(
            "{:>9.2}  {:.2}  {:>8}  {:>9} ({:>3})  {:>7} ({:>3})  {:>8}  {:>7}  {:>10}  {:>11}",
            r as f64 / 4.0,
            s.file_bytes as f64 / s.checkpoint_tree_bytes.max(1) as f64,
            s.checkpoint_tree_bytes >> 20,
            s.page_log_bytes >> 20,
            s.page_segments,
            s.commit_log_bytes >> 20,
            s.commit_segments,
            s.retiring_segments,
            s.cleaned_segments,
            s.cleaner_copied_bytes >> 20,
            s.checkpoints
        );
    }
    Ok(())
}
