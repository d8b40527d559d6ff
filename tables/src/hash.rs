//! The hash functions sparkey stores in its index: MurmurHash3_x86_32 for
//! 4-byte hashes and the first 64-bit word of MurmurHash3_x64_128 for
//! 8-byte hashes, both standard (little-endian blocks), the 32-bit seed
//! feeding every lane.

/// Which hash an index stores: 4 or 8 bytes a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashSize {
    /// 4-byte hashes, MurmurHash3_x86_32.
    Four,
    /// 8-byte hashes, the first word of MurmurHash3_x64_128.
    Eight,
}

impl HashSize {
    /// Bytes of a stored hash: 4 or 8.
    pub fn bytes(self) -> u32 {
        match self {
            HashSize::Four => 4,
            HashSize::Eight => 8,
        }
    }

    /// The size an index header's `hash_size` field names; `None` for
    /// anything but 4 or 8.
    pub fn from_bytes(n: u32) -> Option<HashSize> {
        match n {
            4 => Some(HashSize::Four),
            8 => Some(HashSize::Eight),
            _ => None,
        }
    }

    /// The hash of `key` as the index stores it (zero-extended).
    pub fn hash(self, key: &[u8], seed: u32) -> u64 {
        match self {
            HashSize::Four => u64::from(murmur3_x86_32(key, seed)),
            HashSize::Eight => murmur3_x64_128_h1(key, seed),
        }
    }
}

/// MurmurHash3_x86_32 of `key` with `seed`, as the reference implementation
/// computes it (and sparkey stores for 4-byte hashes).
pub fn murmur3_x86_32(key: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, &b) in tail.iter().enumerate() {
            k ^= u32::from(b) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    // The length is mixed in mod 2^32, as the reference does.
    h ^= key.len() as u32;
    fmix32(h)
}

fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// h1 of MurmurHash3_x64_128(key, seed).
pub fn murmur3_x64_128_h1(key: &[u8], seed: u32) -> u64 {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let mut h1 = u64::from(seed);
    let mut h2 = u64::from(seed);
    let mut chunks = key.chunks_exact(16);
    for c in &mut chunks {
        let k1 = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
        let k2 = u64::from_le_bytes(c[8..].try_into().expect("8 bytes"));
        h1 ^= k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        h2 ^= k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = chunks.remainder();
    let mut k1 = 0u64;
    let mut k2 = 0u64;
    for (i, &b) in tail.iter().enumerate() {
        if i < 8 {
            k1 ^= u64::from(b) << (8 * i);
        } else {
            k2 ^= u64::from(b) << (8 * (i - 8));
        }
    }
    if tail.len() > 8 {
        h2 ^= k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
    }
    if !tail.is_empty() {
        h1 ^= k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    }
    let len = key.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1.wrapping_add(h2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_values() {
        // From the spec (checked there against Python's mmh3).
        assert_eq!(murmur3_x86_32(b"a", 0x1ECD_A59D), 0x4B9B_BB98);
        // Well-known MurmurHash3 test vectors.
        assert_eq!(murmur3_x86_32(b"", 0), 0);
        assert_eq!(murmur3_x86_32(b"", 1), 0x514E_28B7);
        assert_eq!(murmur3_x86_32(b"hello", 0), 0x248B_FA47);
        assert_eq!(murmur3_x86_32(b"Hello, world!", 1234), 0xFAF6_CDB3);
        assert_eq!(murmur3_x64_128_h1(b"", 0), 0);
    }
}
