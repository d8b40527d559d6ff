//! Decoding a prefix of a raw snappy buffer.
//!
//! A get in a snappy log needs one entry of a block, on average halfway
//! in; decompressing the whole block (all the `snap` crate offers) does
//! twice the work a lookup needs, and decompression is most of a
//! compressed lookup's cost. This decoder produces the output only as far
//! as asked, and can be asked again for more. Everything else (writing,
//! iteration, verify) uses `snap`, and the tests hold this decoder to
//! `snap`'s output byte for byte.
//!
//! The format (google/snappy, format_description.txt): a varint of the
//! uncompressed length, then elements, each a tag byte whose low two bits
//! say what follows: 00 a literal (length - 1 in the upper six bits, or in
//! the 1-4 bytes after when those say 60-63), 01 a copy of 4-11 bytes from
//! an 11-bit offset, 10 a copy of 1-64 bytes from a 16-bit offset, 11 the
//! same from a 32-bit offset. A copy's offset counts back from the end of
//! the output and may be shorter than its length (the copy repeats).

/// Why a buffer does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnappyError {
    /// The length varint is malformed or over the caller's limit.
    Length,
    /// An element runs past the input, copies from before the start, or
    /// the elements produce more or less than the stated length.
    Corrupt,
}

impl std::fmt::Display for SnappyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SnappyError::Length => "snappy length header is malformed or too large",
            SnappyError::Corrupt => "snappy block does not decode",
        })
    }
}

/// Bytes the output buffer has past the decoded length, so short literals
/// and copies can move a fixed 16 bytes at a time (only the first `len` of
/// them count; the rest are overwritten by what follows).
const SLACK: usize = 16;

/// A snappy buffer being decoded, as far as asked so far. The output lives
/// in the caller's buffer; only its first `decoded()` bytes are output.
pub struct SnappyPrefix<'a> {
    input: &'a [u8],
    pos: usize,
    len: usize,
    written: usize,
}

impl<'a> SnappyPrefix<'a> {
    /// Reads the length header; refuses a stated length over `max_len`
    /// before anything is allocated. Sizes `out` for the output.
    pub fn new(input: &'a [u8], max_len: usize, out: &mut Vec<u8>) -> Result<Self, SnappyError> {
        let (len, n) = crate::vlq::decode(input).map_err(|_| SnappyError::Length)?;
        // Snappy's length is a u32 varint: at most 5 bytes.
        if n > 5 || len > max_len as u64 {
            return Err(SnappyError::Length);
        }
        // Old contents may stay: nothing past `written` is ever read.
        out.resize(len as usize + SLACK, 0);
        Ok(SnappyPrefix {
            input,
            pos: n,
            len: len as usize,
            written: 0,
        })
    }

    /// The whole decoded length the buffer states.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// How many bytes of `out` are output so far.
    pub fn decoded(&self) -> usize {
        self.written
    }

    /// Decodes until at least `want` bytes are output (or the whole
    /// output, if that is shorter). `out` is the buffer `new` sized.
    pub fn fill_to(&mut self, want: usize, out: &mut [u8]) -> Result<(), SnappyError> {
        debug_assert_eq!(out.len(), self.len + SLACK);
        let want = want.min(self.len);
        while self.written < want {
            self.element(out)?;
        }
        if self.written == self.len && self.pos != self.input.len() {
            // The stated length is reached with elements left over.
            return Err(SnappyError::Corrupt);
        }
        Ok(())
    }

    /// Decodes one element.
    #[inline]
    fn element(&mut self, out: &mut [u8]) -> Result<(), SnappyError> {
        let inp = self.input;
        let w = self.written;
        let tag = *inp.get(self.pos).ok_or(SnappyError::Corrupt)?;
        self.pos += 1;
        let (len, offset) = match tag & 3 {
            0 => {
                let mut len = usize::from(tag >> 2);
                if len >= 60 {
                    let extra = len - 59;
                    let b = inp
                        .get(self.pos..self.pos + extra)
                        .ok_or(SnappyError::Corrupt)?;
                    len = b
                        .iter()
                        .rev()
                        .fold(0usize, |v, &x| (v << 8) | usize::from(x));
                    self.pos += extra;
                }
                let len = len + 1;
                if len > self.len - w {
                    return Err(SnappyError::Corrupt);
                }
                if len <= SLACK && self.pos + SLACK <= inp.len() {
                    // Fixed-size move; `out` has SLACK bytes to spare.
                    let chunk: [u8; SLACK] = inp[self.pos..self.pos + SLACK]
                        .try_into()
                        .expect("SLACK bytes");
                    out[w..w + SLACK].copy_from_slice(&chunk);
                } else {
                    let lit = self
                        .pos
                        .checked_add(len)
                        .and_then(|end| inp.get(self.pos..end))
                        .ok_or(SnappyError::Corrupt)?;
                    out[w..w + len].copy_from_slice(lit);
                }
                if self.pos + len > inp.len() {
                    return Err(SnappyError::Corrupt);
                }
                self.pos += len;
                self.written = w + len;
                return Ok(());
            }
            1 => {
                let b = *inp.get(self.pos).ok_or(SnappyError::Corrupt)?;
                self.pos += 1;
                (
                    4 + usize::from((tag >> 2) & 7),
                    (usize::from(tag >> 5) << 8) | usize::from(b),
                )
            }
            2 => {
                let b = inp
                    .get(self.pos..self.pos + 2)
                    .ok_or(SnappyError::Corrupt)?;
                self.pos += 2;
                (
                    1 + usize::from(tag >> 2),
                    usize::from(u16::from_le_bytes([b[0], b[1]])),
                )
            }
            _ => {
                let b = inp
                    .get(self.pos..self.pos + 4)
                    .ok_or(SnappyError::Corrupt)?;
                self.pos += 4;
                (
                    1 + usize::from(tag >> 2),
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
                )
            }
        };
        if offset == 0 || offset > w || len > self.len - w {
            return Err(SnappyError::Corrupt);
        }
        let from = w - offset;
        if offset >= SLACK && len <= SLACK {
            // The 16 bytes read all lie before `w`: a fixed-size move.
            let chunk: [u8; SLACK] = out[from..from + SLACK].try_into().expect("SLACK bytes");
            out[w..w + SLACK].copy_from_slice(&chunk);
        } else if offset >= len {
            out.copy_within(from..from + len, w);
        } else {
            // Overlapping: the copy repeats the last `offset` bytes.
            for i in 0..len {
                out[w + i] = out[from + i];
            }
        }
        self.written = w + len;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn full(input: &[u8], max: usize) -> Result<Vec<u8>, SnappyError> {
        let mut out = Vec::new();
        let mut d = SnappyPrefix::new(input, max, &mut out)?;
        d.fill_to(usize::MAX, &mut out)?;
        if d.decoded() != d.len() {
            return Err(SnappyError::Corrupt);
        }
        out.truncate(d.decoded());
        Ok(out)
    }

    /// Data snappy compresses with every kind of element: runs (overlapping
    /// copies), repeats far back (2-byte offsets) and fresh bytes (literals).
    fn data() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..80),
                (any::<u8>(), 1..300usize).prop_map(|(b, n)| vec![b; n]),
                (0..4u8, 1..40usize).prop_map(|(b, n)| b"entry_".repeat(n)[..]
                    .to_vec()
                    .into_iter()
                    .map(|x| x ^ b)
                    .collect()),
            ],
            0..40,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn every_prefix_equals_snaps_output(raw in data(), cut in 0.0..1.0f64) {
            let c = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
            prop_assert_eq!(full(&c, raw.len()).unwrap(), raw.clone());
            let want = (raw.len() as f64 * cut) as usize;
            let mut out = Vec::new();
            let mut d = SnappyPrefix::new(&c, raw.len(), &mut out).unwrap();
            // Stale bytes in the reused buffer must not leak into output.
            out.iter_mut().for_each(|b| *b = 0xA5);
            d.fill_to(want, &mut out).unwrap();
            prop_assert!(d.decoded() >= want);
            prop_assert_eq!(&out[..d.decoded()], &raw[..d.decoded()]);
            // And on to the end.
            d.fill_to(raw.len(), &mut out).unwrap();
            prop_assert_eq!(&out[..d.decoded()], &raw[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_agree_with_snap(input in prop::collection::vec(any::<u8>(), 0..200)) {
            let ours = full(&input, 1 << 16);
            let theirs = snap::raw::Decoder::new().decompress_vec(&input);
            if let (Ok(a), Ok(b)) = (&ours, &theirs) {
                prop_assert_eq!(a, b);
            }
        }

        #[test]
        fn damaged_buffers_never_panic(raw in data(), at in any::<prop::sample::Index>(), flip in 1..=255u8) {
            let mut c = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
            if !c.is_empty() {
                let i = at.index(c.len());
                c[i] ^= flip;
            }
            let _ = full(&c, raw.len().max(1) * 2);
        }
    }

    #[test]
    fn a_length_over_the_limit_is_refused_before_allocating() {
        let c = snap::raw::Encoder::new()
            .compress_vec(&[7u8; 5000])
            .unwrap();
        let mut out = Vec::new();
        assert_eq!(
            SnappyPrefix::new(&c, 4096, &mut out).err(),
            Some(SnappyError::Length)
        );
        assert_eq!(out.capacity(), 0, "nothing allocated");
    }

    #[test]
    fn a_short_or_overlong_output_is_corrupt() {
        // Stated length 3, one literal of 2 bytes: short.
        assert_eq!(
            full(&[3, 0b0000_0100, b'a', b'b'], 10),
            Err(SnappyError::Corrupt)
        );
        // Stated length 1, literal of 2: over.
        assert_eq!(
            full(&[1, 0b0000_0100, b'a', b'b'], 10),
            Err(SnappyError::Corrupt)
        );
        // A copy from before the start.
        assert_eq!(full(&[4, 0b0000_0001, 1], 10), Err(SnappyError::Corrupt));
        // Stated length 1, literal of 1, then a stray tag.
        assert_eq!(full(&[1, 0, b'a', 0], 10), Err(SnappyError::Corrupt));
    }
}
