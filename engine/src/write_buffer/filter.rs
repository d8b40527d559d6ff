//! The key filter: a Bloom filter of the keys a write buffer holds, shared
//! by the buffers grown one from another, so that most lookups of keys the
//! buffer does not hold skip the runs' binary searches.

use std::sync::atomic::{AtomicU64, Ordering};

/// Words (64 bits each) of a buffer's key filter: 512 KiB, 14 bits per key
/// for the ~300,000 kv40 writes the default buffer holds (a larger buffer
/// only gets more false positives).
const FILTER_WORDS: usize = 1 << 16;

/// A Bloom filter of the keys a buffer holds, one 64-bit word per key
/// (four bits in it), so that most lookups of keys the buffer does not hold
/// skip the runs' searches: with random keys most reads miss the buffer.
/// Shared by the buffers that grow one from another, it only gains bits: a
/// key added for a newer buffer is at worst a false positive for an older
/// one. Bits are set before the version that holds the key is published,
/// so a reader never misses a key its version holds.
pub(super) struct Filter {
    words: Box<[AtomicU64]>,
}

impl Filter {
    pub(super) fn new() -> Self {
        Filter {
            words: (0..FILTER_WORDS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn probe(key: &[u8]) -> (usize, u64) {
        let h = u64::from(crc32c::crc32c(key)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let word = (h >> 40) as usize % FILTER_WORDS;
        let mask = (1 << (h & 63))
            | (1 << ((h >> 6) & 63))
            | (1 << ((h >> 12) & 63))
            | (1 << ((h >> 18) & 63));
        (word, mask)
    }

    #[inline]
    pub(super) fn insert(&self, key: &[u8]) {
        let (word, mask) = Self::probe(key);
        self.words[word].fetch_or(mask, Ordering::Relaxed);
    }

    #[inline]
    pub(super) fn may_hold(&self, key: &[u8]) -> bool {
        let (word, mask) = Self::probe(key);
        self.words[word].load(Ordering::Relaxed) & mask == mask
    }
}
