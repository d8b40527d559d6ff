//! Bounds-checked decoding of untrusted bytes, and the matching encoders.
//!
//! Every decoder in kivi reads through [`Reader`], which never panics and
//! never allocates more than the input it was given: a forged length is an
//! error, not an allocation.
//!
//! Varints are LEB128 (7 bits a byte, low bits first). They are written here
//! rather than taken from a crate because the decoder must refuse overlong and
//! overflowing encodings from hostile input, which is ten lines.

use std::fmt;

/// Bytes that do not decode: a length past the end, a malformed varint,
/// bytes left over. Carries no file or offset in the file; callers wrap it
/// into a `Corruption` that does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Offset inside the decoded buffer where the problem was found.
    pub at: usize,
    /// What is wrong.
    pub what: &'static str,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {} of the record)", self.what, self.at)
    }
}

impl std::error::Error for DecodeError {}

/// A cursor over a byte slice: each read takes bytes from the front and
/// fails, consuming nothing usable, when the slice is too short.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes read so far (the offset of the next read in the buffer).
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The number of bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// A [`DecodeError`] saying `what`, at the current position.
    pub fn err(&self, what: &'static str) -> DecodeError {
        DecodeError { at: self.pos, what }
    }

    /// The next `n` bytes, borrowed from the buffer (no copy).
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.err("length runs past the end"));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.bytes(1)?[0])
    }

    /// The next 4 bytes, little-endian.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.bytes(4)?.try_into().expect("4 bytes"),
        ))
    }

    /// The next 8 bytes, little-endian.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.bytes(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A LEB128 varint of at most 10 bytes; refuses overlong encodings (a
    /// trailing zero byte) and values past 64 bits.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(self.err("varint overflows 64 bits"));
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                if b == 0 && i > 0 {
                    return Err(self.err("overlong varint"));
                }
                return Ok(value);
            }
        }
        Err(self.err("varint longer than 10 bytes"))
    }

    /// A varint that must fit `usize` and be at most `max`.
    pub fn len(&mut self, max: usize) -> Result<usize, DecodeError> {
        let v = self.varint()?;
        if v > max as u64 {
            return Err(self.err("length over its limit"));
        }
        Ok(v as usize)
    }

    /// A varint length followed by that many bytes.
    pub fn len_bytes(&mut self, max: usize) -> Result<&'a [u8], DecodeError> {
        let n = self.len(max)?;
        self.bytes(n)
    }

    /// Fails unless every byte has been read: a record's body has no
    /// trailing bytes.
    pub fn expect_end(&self) -> Result<(), DecodeError> {
        if self.remaining() != 0 {
            return Err(self.err("bytes left over after the last field"));
        }
        Ok(())
    }
}

/// Appends `v` to `out` as a LEB128 varint (1 to 10 bytes), the shortest
/// encoding, which is the only one [`Reader::varint`] accepts.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The bytes [`put_varint`] takes for `v`.
pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Appends `bytes` to `out` after their length as a varint (what
/// [`Reader::len_bytes`] reads).
pub fn put_len_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip(v: u64) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.varint().unwrap(), v);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&bytes);
            while !r.is_empty() {
                if r.varint().is_err() { break; }
            }
            let mut r = Reader::new(&bytes);
            let _ = r.len_bytes(usize::MAX);
        }
    }

    #[test]
    fn overlong_and_overflowing_varints_are_refused() {
        let what = |r: Result<u64, DecodeError>| r.unwrap_err().what;
        assert_eq!(what(Reader::new(&[0x80, 0x00]).varint()), "overlong varint");
        assert_eq!(
            what(Reader::new(&[0xff; 10]).varint()),
            "varint overflows 64 bits"
        );
        assert_eq!(
            what(
                Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).varint()
            ),
            "varint overflows 64 bits"
        );
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])
                .varint()
                .unwrap(),
            u64::MAX
        );
        assert_eq!(
            Reader::new(&[0x05]).len(4).unwrap_err().what,
            "length over its limit"
        );
    }
}
