//! kv40: the benchmark's data set. Pair `i` has a 40-byte key (8 bytes of
//! `i` big-endian, so key order is `i` order, then 32 pseudo-random bytes so
//! keys do not compress or share long prefixes) and a 40-byte value (`i`,
//! an 8-byte version number, 24 pseudo-random bytes). Everything derives
//! from `i` deterministically, so any run and any store see the same data,
//! and a read can check it got the value of the key it asked for.

pub const KEY_LEN: usize = 40;
pub const VALUE_LEN: usize = 40;

/// splitmix64's finaliser: a cheap, well-mixed bijection on u64.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn key(i: u64) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    k[..8].copy_from_slice(&i.to_be_bytes());
    for j in 0..4u64 {
        let at = 8 + j as usize * 8;
        k[at..at + 8].copy_from_slice(&mix(i.wrapping_mul(4).wrapping_add(j)).to_le_bytes());
    }
    k
}

pub fn value(i: u64, version: u64) -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    v[..8].copy_from_slice(&i.to_be_bytes());
    v[8..16].copy_from_slice(&version.to_be_bytes());
    for j in 0..3u64 {
        let at = 16 + j as usize * 8;
        v[at..at + 8].copy_from_slice(&mix(i ^ (version << 40) ^ (j << 56)).to_le_bytes());
    }
    v
}

/// The `i` a value was made for (its first 8 bytes), if it is that long.
pub fn index_of(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?))
}

/// A deterministic splitmix64 stream, so runs pick the same "random" keys.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in `0..n` (multiply-shift, no modulo bias worth the name).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_in_index_order_and_values_name_their_key() {
        let keys: Vec<_> = (0..1000).map(key).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(index_of(&value(77, 3)), Some(77));
        assert_ne!(value(77, 3), value(77, 4));
        assert_eq!(key(5), key(5));
        let mut rng = Rng::new(1);
        assert!((0..10_000).all(|_| rng.below(10) < 10));
    }
}
