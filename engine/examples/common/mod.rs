//! What the developer examples share: kv40-like pairs (a 40-byte key
//! holding its index big-endian, used as its own value), loading them in
//! order, and random updates of them, 1,000 per durable batch.

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

pub fn key(j: u64) -> [u8; 40] {
    let mut k = [0u8; 40];
    k[..8].copy_from_slice(&j.to_be_bytes());
    k[8..16].copy_from_slice(&j.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
    k
}

/// A fresh store in `dir` holding pairs 0..n.
#[allow(dead_code)] // not every example loads with the default options
pub fn load(dir: &str, n: u64) -> Result<kivi::Db> {
    load_with(dir, n, kivi::Options::default())
}

/// A fresh store in `dir`, opened with `opts`, holding pairs 0..n.
pub fn load_with(dir: &str, n: u64, opts: kivi::Options) -> Result<kivi::Db> {
    let _ = std::fs::remove_dir_all(dir);
    let db = kivi::Db::open(dir, opts)?;
    let mut i = 0u64;
    while i < n {
        let mut batch = kivi::WriteBatch::new();
        for j in i..(i + 1000).min(n) {
            batch.put(key(j), key(j))?;
        }
        db.write(batch)?;
        i += 1000;
    }
    Ok(db)
}

/// `count` puts of random keys among 0..n (seeded, reproducible).
#[allow(dead_code)] // not every example updates in batches
pub fn update(db: &kivi::Db, n: u64, count: u64, seed: u64) -> Result<()> {
    let mut x = seed;
    let mut done = 0u64;
    while done < count {
        let mut batch = kivi::WriteBatch::new();
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = key((x >> 33) % n);
            batch.put(k, k)?;
        }
        db.write(batch)?;
        done += 1000;
    }
    Ok(())
}
