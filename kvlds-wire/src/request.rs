//! kvlds request records and the response records that answer them (see
//! docs/kvlds-protocol.md, "Records").

/// Longest key or value this protocol can carry (a 1-byte length prefix).
pub const MAX_LEN: usize = 255;

pub const PARAMS: u32 = 0x100;
pub const SET: u32 = 0x110;
pub const CAS: u32 = 0x111;
pub const ADD: u32 = 0x112;
pub const MODIFY: u32 = 0x113;
pub const DELETE: u32 = 0x120;
pub const CAD: u32 = 0x121;
pub const GET: u32 = 0x130;
pub const RANGE: u32 = 0x131;

/// Status codes.
pub const OK: u32 = 0;
/// Not done: condition false, or (GET) no such key.
pub const NOT_DONE: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Params,
    Set {
        key: &'a [u8],
        value: &'a [u8],
    },
    Cas {
        key: &'a [u8],
        old: &'a [u8],
        new: &'a [u8],
    },
    Add {
        key: &'a [u8],
        value: &'a [u8],
    },
    Modify {
        key: &'a [u8],
        value: &'a [u8],
    },
    Delete {
        key: &'a [u8],
    },
    Cad {
        key: &'a [u8],
        old: &'a [u8],
    },
    Get {
        key: &'a [u8],
    },
    Range {
        max_bytes: u32,
        start: &'a [u8],
        end: &'a [u8],
    },
}

impl Request<'_> {
    /// Whether it may change the store (and so is answered after a commit).
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Request::Params | Request::Get { .. } | Request::Range { .. }
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record shorter than its fields")]
    Short,
    #[error("{0} bytes left over after the record's fields")]
    LeftOver(usize),
    #[error("unknown request type {0:#010x}")]
    UnknownType(u32),
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u32(&mut self) -> Result<u32, RecordError> {
        let (head, rest) = self.0.split_first_chunk::<4>().ok_or(RecordError::Short)?;
        self.0 = rest;
        Ok(u32::from_be_bytes(*head))
    }

    fn string(&mut self) -> Result<&'a [u8], RecordError> {
        let (&n, rest) = self.0.split_first().ok_or(RecordError::Short)?;
        let n = usize::from(n);
        if rest.len() < n {
            return Err(RecordError::Short);
        }
        let (s, rest) = rest.split_at(n);
        self.0 = rest;
        Ok(s)
    }
}

/// Parses a request record; every byte must belong to a field.
pub fn parse(record: &[u8]) -> Result<Request<'_>, RecordError> {
    let mut r = Reader(record);
    let request = match r.u32()? {
        PARAMS => Request::Params,
        SET => Request::Set {
            key: r.string()?,
            value: r.string()?,
        },
        CAS => Request::Cas {
            key: r.string()?,
            old: r.string()?,
            new: r.string()?,
        },
        ADD => Request::Add {
            key: r.string()?,
            value: r.string()?,
        },
        MODIFY => Request::Modify {
            key: r.string()?,
            value: r.string()?,
        },
        DELETE => Request::Delete { key: r.string()? },
        CAD => Request::Cad {
            key: r.string()?,
            old: r.string()?,
        },
        GET => Request::Get { key: r.string()? },
        RANGE => Request::Range {
            max_bytes: r.u32()?,
            start: r.string()?,
            end: r.string()?,
        },
        t => return Err(RecordError::UnknownType(t)),
    };
    if !r.0.is_empty() {
        return Err(RecordError::LeftOver(r.0.len()));
    }
    Ok(request)
}

/// Response records. Lengths are checked by the caller: every key and
/// value passed here is at most `MAX_LEN` bytes.
///
/// The PARAMS answer: the longest key and value, each 4 bytes.
pub fn params() -> Vec<u8> {
    let mut out = (MAX_LEN as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&(MAX_LEN as u32).to_be_bytes());
    out
}

/// A string as records carry it: a 1-byte length, then the bytes.
pub fn push_string(out: &mut Vec<u8>, s: &[u8]) {
    let n = u8::try_from(s.len()).expect("caller checked the length");
    out.push(n);
    out.extend_from_slice(s);
}

/// Appends a RANGE answer record to `out`: status, count, the next key,
/// then the pairs (already encoded, each key and value length-prefixed).
pub fn write_range(out: &mut Vec<u8>, count: u32, next: &[u8], pairs: &[u8]) {
    out.extend_from_slice(&OK.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    push_string(out, next);
    out.extend_from_slice(pairs);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ty: u32, fields: &[&[u8]]) -> Vec<u8> {
        let mut out = ty.to_be_bytes().to_vec();
        for f in fields {
            push_string(&mut out, f);
        }
        out
    }

    #[test]
    fn every_request_type_parses() {
        assert_eq!(parse(&rec(PARAMS, &[])), Ok(Request::Params));
        assert_eq!(
            parse(&rec(SET, &[b"k", b"v"])),
            Ok(Request::Set {
                key: b"k",
                value: b"v"
            })
        );
        assert_eq!(
            parse(&rec(CAS, &[b"k", b"o", b"n"])),
            Ok(Request::Cas {
                key: b"k",
                old: b"o",
                new: b"n"
            })
        );
        assert_eq!(
            parse(&rec(ADD, &[b"k", b""])),
            Ok(Request::Add {
                key: b"k",
                value: b""
            })
        );
        assert_eq!(
            parse(&rec(MODIFY, &[b"", b"v"])),
            Ok(Request::Modify {
                key: b"",
                value: b"v"
            })
        );
        assert_eq!(
            parse(&rec(DELETE, &[b"k"])),
            Ok(Request::Delete { key: b"k" })
        );
        assert_eq!(
            parse(&rec(CAD, &[b"k", b"o"])),
            Ok(Request::Cad {
                key: b"k",
                old: b"o"
            })
        );
        assert_eq!(parse(&rec(GET, &[b"k"])), Ok(Request::Get { key: b"k" }));
        let mut range = RANGE.to_be_bytes().to_vec();
        range.extend_from_slice(&1000u32.to_be_bytes());
        push_string(&mut range, b"a");
        push_string(&mut range, b"");
        assert_eq!(
            parse(&range),
            Ok(Request::Range {
                max_bytes: 1000,
                start: b"a",
                end: b""
            })
        );
    }

    #[test]
    fn malformed_records_are_refused() {
        assert_eq!(parse(&[0, 0, 1]), Err(RecordError::Short));
        assert_eq!(
            parse(&rec(0x999, &[])),
            Err(RecordError::UnknownType(0x999))
        );
        let set = rec(SET, &[b"key", b"value"]);
        for cut in 4..set.len() {
            assert_eq!(parse(&set[..cut]), Err(RecordError::Short), "cut at {cut}");
        }
        let mut long = set.clone();
        long.push(0);
        assert_eq!(parse(&long), Err(RecordError::LeftOver(1)));
        assert_eq!(parse(&rec(PARAMS, &[b""])), Err(RecordError::LeftOver(1)));
    }
}
