//! kvlds packets and request records (`kivi serve --kvlds`): what any
//! client may send.

use kivi_kvlds_wire::packet::{self, FrameError, HEADER_LEN, MAX_REQUEST_RECORD, TRAILER_LEN};
use kivi_kvlds_wire::request::{self, push_string, Request};

/// Takes packets off the front of the input as the server does, until one
/// is incomplete or refused. Each packet taken must be exactly what
/// `packet::write` makes of its ID and record, and no shorter prefix of it
/// a packet.
pub fn kvlds_packet(data: &[u8]) {
    let mut buf = data;
    while let Ok(Some(p)) = packet::parse(buf) {
        assert!(p.len >= HEADER_LEN + TRAILER_LEN && p.len <= buf.len());
        assert_eq!(p.len, HEADER_LEN + p.record.len() + TRAILER_LEN);
        let mut again = Vec::new();
        packet::write(&mut again, p.id, p.record);
        assert_eq!(again, buf[..p.len], "packet {} written again", p.id);
        assert_eq!(packet::parse(&buf[..p.len - 1]), Ok(None), "a cut packet");
        check_record(p.record);
        buf = &buf[p.len..];
    }
}

/// A request record, framed in a packet with correct CRCs (so the record
/// decoder sees every input, as a raw packet's CRCs would rarely let it),
/// then parsed as the server parses it.
pub fn kvlds_request(data: &[u8]) {
    let mut framed = Vec::new();
    packet::write(&mut framed, 0x0102_0304_0506_0708, data);
    match packet::parse(&framed) {
        Ok(Some(p)) => {
            assert_eq!(
                (p.id, p.record, p.len),
                (0x0102_0304_0506_0708, data, framed.len())
            );
        }
        Err(FrameError::TooLong(n)) => assert!(n == data.len() && n > MAX_REQUEST_RECORD),
        other => panic!("a correctly framed record: {other:?}"),
    }
    check_record(data);
}

/// A record that parses is exactly the encoding of what it parsed to:
/// every byte belongs to a field, and each field has one encoding.
fn check_record(record: &[u8]) {
    if let Ok(r) = request::parse(record) {
        assert_eq!(encode(&r), record, "{r:?} encoded again");
    }
}

/// A request record as a client writes it (docs/kvlds-protocol.md).
fn encode(r: &Request<'_>) -> Vec<u8> {
    let (ty, strings): (u32, Vec<&[u8]>) = match *r {
        Request::Params => (request::PARAMS, vec![]),
        Request::Set { key, value } => (request::SET, vec![key, value]),
        Request::Cas { key, old, new } => (request::CAS, vec![key, old, new]),
        Request::Add { key, value } => (request::ADD, vec![key, value]),
        Request::Modify { key, value } => (request::MODIFY, vec![key, value]),
        Request::Delete { key } => (request::DELETE, vec![key]),
        Request::Cad { key, old } => (request::CAD, vec![key, old]),
        Request::Get { key } => (request::GET, vec![key]),
        Request::Range {
            max_bytes,
            start,
            end,
        } => {
            let mut out = request::RANGE.to_be_bytes().to_vec();
            out.extend_from_slice(&max_bytes.to_be_bytes());
            push_string(&mut out, start);
            push_string(&mut out, end);
            return out;
        }
    };
    let mut out = ty.to_be_bytes().to_vec();
    for s in strings {
        push_string(&mut out, s);
    }
    out
}
