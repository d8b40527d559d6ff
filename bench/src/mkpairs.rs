//! kivaloo's benchmark data, byte for byte: the pairs its `mkpairs` tool
//! writes and the `random()` stream its tools draw keys from, so the kvlds
//! workloads feed kivi and kivaloo exactly what kivaloo's own tools would.
//!
//! Pair number `N = X * 65,536 + Y` (group `X`, `Y` below 65,536) has
//!
//! - a 40-byte key: `X` as 8 bytes big-endian, then the SHA-256 digest of
//!   the 17 bytes `0x00 || X (8 bytes BE) || Y (8 bytes BE)`;
//! - a 40-byte value: `N` as 8 bytes big-endian, then the same digest.
//!   (kivaloo's source comment says the value's digest starts from a 0x01
//!   byte; its code hashes a 0x00 byte, and the code is what made the
//!   bytes every published figure was measured on.)
//!
//! `mkpairs` writes each group's pairs sorted by key, groups in order, so
//! its whole output is in key order and a full scan returns the pairs in
//! the order `mkpairs` wrote them.

use sha2::{Digest, Sha256};

pub const KEY_LEN: usize = 40;
pub const VALUE_LEN: usize = 40;
/// Pairs per group: `Y` runs over 0..65,536.
pub const GROUP: u64 = 1 << 16;

/// The digest shared by pair `n`'s key and value.
fn digest(n: u64) -> [u8; 32] {
    let mut input = [0u8; 17];
    input[1..9].copy_from_slice(&(n / GROUP).to_be_bytes());
    input[9..17].copy_from_slice(&(n % GROUP).to_be_bytes());
    Sha256::digest(input).into()
}

/// The first `n` pairs of `mkpairs n`, with each pair's digest computed
/// once up front: the benchmark clients build every request and check
/// every answer from these, so their cost per request is a copy, the same
/// whichever server is measured.
pub struct Pairs {
    digests: Vec<[u8; 32]>,
    /// `order[i]`: the pair number of the `i`-th pair `mkpairs` writes.
    order: Vec<u32>,
}

impl Pairs {
    /// Pair numbers must fit kivaloo's tools' `random() % N` (31 bits).
    pub const MAX: u64 = 1 << 31;

    pub fn new(n: u64) -> Pairs {
        assert!(n <= Self::MAX, "at most 2^31 pairs");
        let digests: Vec<[u8; 32]> = (0..n).map(digest).collect();
        let mut order: Vec<u32> = (0..n as u32).collect();
        for group in order.chunks_mut(GROUP as usize) {
            // Within a group every key starts with the same X, so key
            // order is digest order.
            group.sort_unstable_by(|a, b| digests[*a as usize].cmp(&digests[*b as usize]));
        }
        Pairs { digests, order }
    }

    pub fn len(&self) -> u64 {
        self.digests.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// The pair number of the `i`-th pair in `mkpairs`' (and key) order.
    pub fn nth(&self, i: u64) -> u64 {
        u64::from(self.order[i as usize])
    }

    pub fn key(&self, n: u64) -> [u8; KEY_LEN] {
        let mut k = [0u8; KEY_LEN];
        k[..8].copy_from_slice(&(n / GROUP).to_be_bytes());
        k[8..].copy_from_slice(&self.digests[n as usize]);
        k
    }

    pub fn value(&self, n: u64) -> [u8; VALUE_LEN] {
        let mut v = [0u8; VALUE_LEN];
        v[..8].copy_from_slice(&n.to_be_bytes());
        v[8..].copy_from_slice(&self.digests[n as usize]);
        v
    }
}

/// glibc's `random()` as a program that never calls `srandom()` sees it
/// (seed 1, the default 128-byte state): kivaloo's random-read, random-mixed
/// and hot-spot tools pick keys from this stream, so with it the kvlds
/// workloads ask for the same keys in the same order as those tools.
pub struct Random {
    r: [u32; 34],
    at: usize,
}

impl Random {
    pub fn new() -> Random {
        // glibc's initialisation: a Lehmer (16807) sequence from the seed,
        // the first three words copied on, then 310 outputs discarded.
        let mut r = [0u32; 34];
        r[0] = 1;
        for i in 1..31 {
            let word = (16807 * i64::from(r[i - 1] as i32)) % 2_147_483_647;
            r[i] = (if word < 0 { word + 2_147_483_647 } else { word }) as u32;
        }
        for i in 31..34 {
            r[i] = r[i - 31];
        }
        let mut g = Random { r, at: 0 };
        for _ in 0..310 {
            g.step();
        }
        g
    }

    fn step(&mut self) -> u32 {
        // r[i] = r[i - 31] + r[i - 3] (mod 2^32) over a ring of 34 words.
        let i = self.at;
        let word = self.r[(i + 34 - 31) % 34].wrapping_add(self.r[(i + 34 - 3) % 34]);
        self.r[i] = word;
        self.at = (i + 1) % 34;
        word
    }

    /// The next value, in 0..2^31.
    pub fn random(&mut self) -> u64 {
        u64::from(self.step() >> 1)
    }
}

impl Default for Random {
    fn default() -> Self {
        Random::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Pair `i` in `mkpairs` order as `mkpairs` writes it: key then value.
    fn written(p: &Pairs, i: u64) -> String {
        let n = p.nth(i);
        format!("{}{}", hex(&p.key(n)), hex(&p.value(n)))
    }

    // The output of kivaloo's `mkpairs 3`, one pair (80 bytes) a line.
    const MKPAIRS_3: [&str; 3] = [
        "00000000000000000a88111852095cae045340ea1f0b279944b2a756a213d9b50107d7489771e159\
         00000000000000000a88111852095cae045340ea1f0b279944b2a756a213d9b50107d7489771e159",
        "00000000000000001a38f71835ae56cce0b1e44af2b5acfcb05a64f96621945cd42d1a2d343a59b7\
         00000000000000021a38f71835ae56cce0b1e44af2b5acfcb05a64f96621945cd42d1a2d343a59b7",
        "0000000000000000bd839e8f98c7bf2b8f2bf476f25ffc4ca923273ec4160ff74469c8715d0a698a\
         0000000000000001bd839e8f98c7bf2b8f2bf476f25ffc4ca923273ec4160ff74469c8715d0a698a",
    ];
    // The last two pairs of `mkpairs 65538`: group 1's two pairs, sorted.
    const MKPAIRS_65538_TAIL: [&str; 2] = [
        "00000000000000015590b4a4eb4b7a9dba75b0176d06fbdabd8798d4b444741bb8efff24ad5b63f1\
         00000000000100005590b4a4eb4b7a9dba75b0176d06fbdabd8798d4b444741bb8efff24ad5b63f1",
        "0000000000000001dae3158dd070817d75371e043a50bbe9931f021affa56aa4fb32b8f46e63b36f\
         0000000000010001dae3158dd070817d75371e043a50bbe9931f021affa56aa4fb32b8f46e63b36f",
    ];
    // sha256sum of the whole output of `mkpairs 70000` (5,600,000 bytes).
    const MKPAIRS_70000_SHA256: &str =
        "1a7b5757bb4bcbcdda9525cfe38f48075b9ad1c4d105dbcafcd360f52a54f101";

    #[test]
    fn pairs_are_the_bytes_mkpairs_writes() {
        let p = Pairs::new(3);
        for (i, want) in MKPAIRS_3.iter().enumerate() {
            assert_eq!(written(&p, i as u64), *want, "pair {i} of mkpairs 3");
        }
        let p = Pairs::new(65_538);
        assert_eq!(written(&p, 65_536), MKPAIRS_65538_TAIL[0]);
        assert_eq!(written(&p, 65_537), MKPAIRS_65538_TAIL[1]);
        let p = Pairs::new(70_000);
        let mut all = Sha256::new();
        for i in 0..p.len() {
            let n = p.nth(i);
            all.update(p.key(n));
            all.update(p.value(n));
        }
        assert_eq!(hex(&all.finalize()), MKPAIRS_70000_SHA256);
    }

    #[test]
    fn random_is_glibcs_unseeded_stream() {
        // What glibc's random() returns first in a program that never
        // seeds it, and the XOR of its next 999,995 values.
        let mut g = Random::new();
        let first: Vec<u64> = (0..5).map(|_| g.random()).collect();
        assert_eq!(
            first,
            [
                1_804_289_383,
                846_930_886,
                1_681_692_777,
                1_714_636_915,
                1_957_747_793
            ]
        );
        let x = (5..1_000_000).fold(0, |x, _| x ^ g.random());
        assert_eq!(x, 909_285_317);
    }
}
