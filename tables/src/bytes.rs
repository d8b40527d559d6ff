//! Little-endian reads of the fields of headers, slots and records.

/// The little-endian value of `b`, at most 8 bytes (a slot's 4- or 8-byte
/// hash or address).
#[inline]
pub fn read_le(b: &[u8]) -> u64 {
    // Slots hold 4- or 8-byte fields: fixed-size loads, not a memcpy call.
    if let Ok(b4) = <[u8; 4]>::try_from(b) {
        return u64::from(u32::from_le_bytes(b4));
    }
    if let Ok(b8) = <[u8; 8]>::try_from(b) {
        return u64::from_le_bytes(b8);
    }
    let mut v = [0u8; 8];
    v[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(v)
}

/// The little-endian `u32` at byte `off` of `b`.
#[inline]
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// The little-endian `u64` at byte `off` of `b`.
#[inline]
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}
