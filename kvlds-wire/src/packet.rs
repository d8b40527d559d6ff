//! kvlds packet framing: request ID, record length, header CRC, record,
//! record CRC (see docs/kvlds-protocol.md, "Framing").
//!
//! ```text
//! | 8 ID (BE) | 4 record length N (BE) | 4 header CRC | N record | 4 record CRC ^ header CRC |
//! ```

/// Bytes before the record.
pub const HEADER_LEN: usize = 16;
/// Bytes after the record.
pub const TRAILER_LEN: usize = 4;

/// Longest request record accepted. The longest valid request is CAS: type
/// (4) + three length-prefixed strings of at most 255 bytes = 772 bytes;
/// kvlds refuses longer records too. A header announcing more closes the
/// connection before the record is waited for, so a client cannot make
/// the server buffer more than this per connection.
pub const MAX_REQUEST_RECORD: usize = 4 + 3 * 256;

/// kivaloo's CRC: CRC-32C with the register started at 0x82F63B78 and no
/// final inversion, i.e. a standard CRC-32C over the same bytes with the
/// initial and final inversions undone. Stored little-endian.
pub fn crc(data: &[u8]) -> [u8; 4] {
    crc_append(0x82F6_3B78, data)
}

fn crc_append(register: u32, data: &[u8]) -> [u8; 4] {
    (!crc32c::crc32c_append(!register, data)).to_le_bytes()
}

/// Why a packet was refused; the connection is closed with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("header CRC mismatch")]
    HeaderCrc,
    #[error("record of {0} bytes is over the limit of {MAX_REQUEST_RECORD}")]
    TooLong(usize),
    #[error("record CRC mismatch")]
    RecordCrc,
}

/// One complete packet taken off the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub id: u64,
    pub record: &'a [u8],
    /// Bytes of the buffer the packet took.
    pub len: usize,
}

/// The packet at the front of `buf`: `Ok(None)` if it is not all there
/// yet. The header is checked as soon as it is in, so an oversized or
/// corrupt one is refused before its record is waited for.
pub fn parse(buf: &[u8]) -> Result<Option<Packet<'_>>, FrameError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let header_crc: [u8; 4] = buf[12..16].try_into().expect("4 bytes");
    if crc(&buf[..12]) != header_crc {
        return Err(FrameError::HeaderCrc);
    }
    let id = u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
    let n = u32::from_be_bytes(buf[8..12].try_into().expect("4 bytes")) as usize;
    if n > MAX_REQUEST_RECORD {
        return Err(FrameError::TooLong(n));
    }
    let total = HEADER_LEN + n + TRAILER_LEN;
    if buf.len() < total {
        return Ok(None);
    }
    let record = &buf[HEADER_LEN..HEADER_LEN + n];
    let mut expect = crc(record);
    for (e, h) in expect.iter_mut().zip(header_crc) {
        *e ^= h;
    }
    if buf[HEADER_LEN + n..total] != expect {
        return Err(FrameError::RecordCrc);
    }
    Ok(Some(Packet {
        id,
        record,
        len: total,
    }))
}

/// Appends a packet with `id` and `record` to `out`.
pub fn write(out: &mut Vec<u8>, id: u64, record: &[u8]) {
    write_with(out, id, |out| out.extend_from_slice(record));
}

/// Appends a packet with `id` whose record `fill` appends to `out` in
/// place, so an answer is built where it is sent from, without a buffer of
/// its own.
pub fn write_with<R>(out: &mut Vec<u8>, id: u64, fill: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    let r = fill(out);
    let record_len = out.len() - start - HEADER_LEN;
    let len = u32::try_from(record_len).expect("a response record fits in 4 GiB");
    out[start..start + 8].copy_from_slice(&id.to_be_bytes());
    out[start + 8..start + 12].copy_from_slice(&len.to_be_bytes());
    let header_crc = crc(&out[start..start + 12]);
    out[start + 12..start + HEADER_LEN].copy_from_slice(&header_crc);
    let mut trailer = crc(&out[start + HEADER_LEN..]);
    for (t, h) in trailer.iter_mut().zip(header_crc) {
        *t ^= h;
    }
    out.extend_from_slice(&trailer);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // The spec's test vectors.
    #[test]
    fn crc_of_hello_world() {
        assert_eq!(crc(b"hello world"), [0xca, 0x13, 0x0b, 0xaa]);
    }

    #[test]
    fn params_request_vector() {
        let wire = unhex("000000000000000100000004ab1233e700000100805f339a");
        let p = parse(&wire).unwrap().unwrap();
        assert_eq!((p.id, p.record, p.len), (1, &[0, 0, 1, 0][..], wire.len()));
        let mut out = Vec::new();
        write(&mut out, 1, &[0, 0, 1, 0]);
        assert_eq!(out, wire);
    }

    #[test]
    fn set_request_vector() {
        let wire = unhex("0000000000000002000000088f6d43e20000011001610162475a43e9");
        let p = parse(&wire).unwrap().unwrap();
        assert_eq!(p.id, 2);
        assert_eq!(p.record, &[0, 0, 1, 0x10, 1, b'a', 1, b'b']);
        let mut out = Vec::new();
        write(&mut out, 2, p.record);
        assert_eq!(out, wire);
    }

    #[test]
    fn status_response_vector() {
        let mut out = Vec::new();
        write(&mut out, 2, &[0, 0, 0, 0]);
        assert_eq!(
            out,
            unhex("0000000000000002000000045fa200af000000000377a2c1")
        );
    }

    #[test]
    fn partial_packets_wait_and_bad_ones_are_refused() {
        let wire = unhex("0000000000000002000000088f6d43e20000011001610162475a43e9");
        for cut in 0..wire.len() {
            assert_eq!(parse(&wire[..cut]), Ok(None), "cut at {cut}");
        }
        for i in 0..wire.len() {
            let mut bad = wire.clone();
            bad[i] ^= 0x20;
            let want = if i < HEADER_LEN {
                FrameError::HeaderCrc
            } else {
                FrameError::RecordCrc
            };
            // The header CRC is checked before the length is believed.
            assert_eq!(parse(&bad), Err(want), "byte {i} flipped");
        }
        let mut huge = Vec::new();
        write(&mut huge, 9, &vec![0; MAX_REQUEST_RECORD + 1]);
        assert_eq!(
            parse(&huge[..HEADER_LEN]),
            Err(FrameError::TooLong(MAX_REQUEST_RECORD + 1))
        );
    }
}
