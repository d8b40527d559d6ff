//! sparkey's variable-length integers: unsigned LEB128, 7 bits a byte,
//! least significant group first, 0x80 meaning "more bytes follow".

/// Longest encoding of a u64.
pub const MAX_LEN: usize = 10;

/// Appends the encoding of `v` to `out`.
pub fn encode(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `encode(v)` takes.
pub fn len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Why a VLQ could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VlqError {
    /// The bytes ended before the last group.
    Truncated,
    /// More than 64 bits.
    Overflow,
}

impl std::fmt::Display for VlqError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VlqError::Truncated => "VLQ runs past the end of its data",
            VlqError::Overflow => "VLQ longer than 64 bits",
        })
    }
}

/// Decodes the VLQ at the start of `bytes`: (value, bytes used).
#[inline]
pub fn decode(bytes: &[u8]) -> Result<(u64, usize), VlqError> {
    // Most lengths fit one byte.
    if let Some(&b) = bytes.first() {
        if b < 0x80 {
            return Ok((u64::from(b), 1));
        }
    }
    let mut v = 0u64;
    for (i, &b) in bytes.iter().take(MAX_LEN).enumerate() {
        let group = u64::from(b & 0x7f);
        // The tenth byte may only carry the 64th bit.
        if i == MAX_LEN - 1 && (b > 1) {
            return Err(VlqError::Overflow);
        }
        v |= group << (7 * i);
        if b & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    if bytes.len() >= MAX_LEN {
        Err(VlqError::Overflow)
    } else {
        Err(VlqError::Truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings() {
        let mut out = Vec::new();
        encode(0, &mut out);
        encode(127, &mut out);
        encode(128, &mut out);
        encode(300, &mut out);
        assert_eq!(out, [0x00, 0x7f, 0x80, 0x01, 0xac, 0x02]);
        let mut max = Vec::new();
        encode(u64::MAX, &mut max);
        assert_eq!(max.len(), MAX_LEN);
        assert_eq!(decode(&max), Ok((u64::MAX, MAX_LEN)));
        assert_eq!(decode(&[0x80]), Err(VlqError::Truncated));
        assert_eq!(decode(&[0xff; 10]), Err(VlqError::Overflow));
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]),
            Err(VlqError::Overflow)
        );
    }

    proptest! {
        #[test]
        fn round_trips(v: u64, tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut out = Vec::new();
            encode(v, &mut out);
            prop_assert_eq!(out.len(), len(v));
            out.extend_from_slice(&tail);
            prop_assert_eq!(decode(&out), Ok((v, len(v))));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = decode(&bytes);
        }
    }
}
