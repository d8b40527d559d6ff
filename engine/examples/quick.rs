#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use kivi::{Db, Options, WriteBatch};
use std::time::Instant;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}
fn key(i: u64) -> [u8; 40] {
    let mut k = [0u8; 40];
    k[..8].copy_from_slice(&i.to_be_bytes());
    for j in 0..4 {
        k[8 + j * 8..16 + j * 8].copy_from_slice(&mix(i * 4 + j as u64).to_le_bytes());
    }
    k
}
fn value(i: u64, ver: u64) -> [u8; 40] {
    let mut v = [0u8; 40];
    v[..8].copy_from_slice(&i.to_be_bytes());
    v[8..16].copy_from_slice(&ver.to_be_bytes());
    for j in 0..3 {
        v[16 + j * 8..24 + j * 8]
            .copy_from_slice(&mix(i ^ (ver << 40) ^ (j as u64) << 56).to_le_bytes());
    }
    v
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(1_000_000);
    let dir = std::env::args().nth(2).unwrap_or("/tmp/kivi-quick".into());
    let _ = std::fs::remove_dir_all(&dir);
    let db = Db::open(&dir, Options::default()).unwrap();
    let t = Instant::now();
    for b in 0..n / 1000 {
        let mut batch = WriteBatch::new();
        for i in b * 1000..(b + 1) * 1000 {
            batch.put(key(i).to_vec(), value(i, 0).to_vec()).unwrap();
        }
        db.write(batch).unwrap();
    }
    let e = t.elapsed().as_secs_f64();
    println!("bulk insert: {:.0} pairs/s", n as f64 / e);
    let t = Instant::now();
    db.checkpoint().unwrap();
    println!("checkpoint: {:.2}s", t.elapsed().as_secs_f64());
    let s = db.stats().unwrap();
    println!(
        "space: {:.1} B/pair file, {} live",
        s.file_bytes as f64 / n as f64,
        s.live_bytes
    );
    println!("height after load: {}", s.tree_height);
    let mut out = Vec::new();
    let t = Instant::now();
    let mut x = 12345u64;
    let reads = if std::env::var("SKIP_READS").is_ok() {
        0
    } else {
        n
    };
    for _ in 0..reads {
        x = mix(x);
        let i = x % n;
        assert!(db.get_into(&key(i), &mut out).unwrap());
        assert_eq!(&out[..8], &i.to_be_bytes());
    }
    println!("random read: {:.0}/s", n as f64 / t.elapsed().as_secs_f64());
    let t = Instant::now();
    for b in 0..n / 1000 {
        let mut batch = WriteBatch::new();
        for j in 0..1000 {
            x = mix(x);
            let i = x % n;
            batch
                .put(key(i).to_vec(), value(i, b * 1000 + j).to_vec())
                .unwrap();
        }
        db.write(batch).unwrap();
    }
    println!(
        "random update: {:.0}/s",
        n as f64 / t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let mut c = 0;
    for p in db.iter() {
        p.unwrap();
        c += 1;
    }
    println!("scan: {:.0}/s ({c})", c as f64 / t.elapsed().as_secs_f64());
    let t = Instant::now();
    for _ in 0..2000 {
        x = mix(x);
        let i = x % n;
        db.put(&key(i), &value(i, 7)).unwrap();
    }
    println!(
        "single put: {:.1} us",
        t.elapsed().as_secs_f64() / 2000.0 * 1e6
    );
    let st = db.stats().unwrap();
    println!("{st:?}");
}
