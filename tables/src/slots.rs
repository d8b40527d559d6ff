//! A slot table in memory, laid out byte for byte as the index file holds
//! it: each slot the stored hash (4 or 8 bytes) then the address (4 or 8),
//! little-endian. Keeping the file's layout rather than a (u64, u64) per
//! slot makes a 32-bit table half the size (8 bytes a slot, not 16), so a
//! build fits the memory limit in one piece for twice as many entries, has
//! half the pages to fault in, and writes its slots out without re-encoding.

use crate::bytes::read_le;

/// Slots as the index file lays them out.
pub struct SlotVec {
    bytes: Vec<u8>,
    hash_size: usize,
    slot_size: usize,
}

impl SlotVec {
    /// `len` empty slots of `hash_size` + `address_size` bytes, in the
    /// allocation of `buf` (whose contents are discarded).
    pub fn new(len: usize, hash_size: u32, address_size: u32, buf: Vec<u8>) -> SlotVec {
        assert!(matches!(hash_size, 4 | 8) && matches!(address_size, 4 | 8));
        let slot_size = (hash_size + address_size) as usize;
        let bytes = if buf.capacity() >= len * slot_size {
            let mut b = buf;
            b.clear();
            b.resize(len * slot_size, 0);
            b
        } else {
            // Zeroed by the allocator (fresh pages come zeroed), not memset.
            vec![0u8; len * slot_size]
        };
        SlotVec {
            bytes,
            hash_size: hash_size as usize,
            slot_size,
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len() / self.slot_size
    }

    /// Grows to `len` slots, the new ones empty.
    pub fn grow(&mut self, len: usize) {
        if len > self.len() {
            self.bytes.resize(len * self.slot_size, 0);
        }
    }

    /// Slot `i`: (stored hash, address); address 0 means empty.
    #[inline(always)]
    pub fn get(&self, i: usize) -> (u64, u64) {
        let at = i * self.slot_size;
        // Fixed-size loads for each layout (a variable-length copy would be
        // a call per field, and this is the build's innermost step).
        match (self.hash_size, self.slot_size) {
            (4, 8) => {
                let w = u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8"));
                (w & 0xFFFF_FFFF, w >> 32)
            }
            (8, 16) => {
                let b: &[u8; 16] = self.bytes[at..at + 16].try_into().expect("16");
                (
                    u64::from_le_bytes(b[..8].try_into().expect("8")),
                    u64::from_le_bytes(b[8..].try_into().expect("8")),
                )
            }
            (hs, ss) => {
                let b = &self.bytes[at..at + ss];
                (read_le(&b[..hs]), read_le(&b[hs..]))
            }
        }
    }

    /// Sets slot `i`. The hash and address must fit their fields (the
    /// build chose the sizes so that every hash and address does).
    #[inline(always)]
    pub fn set(&mut self, i: usize, (hash, addr): (u64, u64)) {
        let (hs, ss) = (self.hash_size, self.slot_size);
        debug_assert!(hs == 8 || hash >> 32 == 0, "hash {hash:#x} fits {hs} bytes");
        debug_assert!(ss - hs == 8 || addr >> 32 == 0, "address {addr:#x} fits");
        let at = i * ss;
        match (hs, ss) {
            (4, 8) => {
                let w = (hash & 0xFFFF_FFFF) | (addr << 32);
                self.bytes[at..at + 8].copy_from_slice(&w.to_le_bytes());
            }
            (8, 16) => {
                let b: &mut [u8; 16] = (&mut self.bytes[at..at + 16]).try_into().expect("16");
                b[..8].copy_from_slice(&hash.to_le_bytes());
                b[8..].copy_from_slice(&addr.to_le_bytes());
            }
            (8, 12) => {
                let b: &mut [u8; 12] = (&mut self.bytes[at..at + 12]).try_into().expect("12");
                b[..8].copy_from_slice(&hash.to_le_bytes());
                b[8..].copy_from_slice(&(addr as u32).to_le_bytes());
            }
            _ => {
                let b = &mut self.bytes[at..at + ss];
                b[..hs].copy_from_slice(&hash.to_le_bytes()[..hs]);
                b[hs..].copy_from_slice(&addr.to_le_bytes()[..ss - hs]);
            }
        }
    }

    /// Hints that slot `i` (if there is one) will be used soon.
    #[inline]
    pub fn prefetch(&self, i: usize) {
        if let Some(b) = self.bytes.get(i * self.slot_size) {
            crate::prefetch::prefetch(b);
        }
    }

    /// The file bytes of slots `[from, to)`.
    pub fn bytes(&self, from: usize, to: usize) -> &[u8] {
        &self.bytes[from * self.slot_size..to * self.slot_size]
    }

    /// Gives the allocation back, for the next table to reuse.
    pub fn into_buffer(self) -> Vec<u8> {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_round_trips_and_matches_the_file_encoding() {
        for (hs, asz) in [(4u32, 4u32), (4, 8), (8, 4), (8, 8)] {
            let mut v = SlotVec::new(3, hs, asz, vec![0xEE; 100]);
            assert_eq!(v.len(), 3);
            assert_eq!(v.get(1), (0, 0), "new slots are empty");
            let h = if hs == 4 {
                0xDEAD_BEEF
            } else {
                0x0123_4567_89AB_CDEF
            };
            let a = if asz == 4 { 0x8000_0054 } else { 0x1_0000_0054 };
            v.set(1, (h, a));
            assert_eq!(v.get(1), (h, a));
            assert_eq!((v.get(0), v.get(2)), ((0, 0), (0, 0)));
            let mut want = h.to_le_bytes()[..hs as usize].to_vec();
            want.extend_from_slice(&a.to_le_bytes()[..asz as usize]);
            assert_eq!(v.bytes(1, 2), &want[..]);
            v.grow(5);
            assert_eq!((v.len(), v.get(4), v.get(1)), (5, (0, 0), (h, a)));
        }
    }
}
