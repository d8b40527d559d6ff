//! RESP replies, written as RESP2 or, after `HELLO 3`, RESP3 (which has a
//! null and maps of its own; RESP2 spells them `$-1` and flat arrays).

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(&'static str),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple("OK")
    }

    /// An error with the generic code: `-ERR msg`.
    pub fn err(msg: impl AsRef<str>) -> Reply {
        Reply::coded("ERR", msg)
    }

    /// An error with its own code (`NOPROTO`, `WRONGTYPE`, ...).
    pub fn coded(code: &str, msg: impl AsRef<str>) -> Reply {
        // An error line must stay one line.
        let msg = msg.as_ref().replace(['\r', '\n'], " ");
        Reply::Error(format!("{code} {msg}"))
    }

    pub fn bulk(b: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(b.into())
    }

    pub fn write(&self, out: &mut Vec<u8>, resp3: bool) {
        match self {
            Reply::Simple(s) => {
                out.push(b'+');
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Error(s) => {
                out.push(b'-');
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Int(i) => {
                out.push(b':');
                push_decimal(out, *i);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Bulk(b) => write_bulk(out, b),
            Reply::Null => write_null(out, resp3),
            Reply::Array(items) => {
                out.push(b'*');
                push_decimal(out, items.len() as i64);
                out.extend_from_slice(b"\r\n");
                for i in items {
                    i.write(out, resp3);
                }
            }
            Reply::Map(pairs) => {
                let n = if resp3 { pairs.len() } else { pairs.len() * 2 };
                out.push(if resp3 { b'%' } else { b'*' });
                push_decimal(out, n as i64);
                out.extend_from_slice(b"\r\n");
                for (k, v) in pairs {
                    k.write(out, resp3);
                    v.write(out, resp3);
                }
            }
        }
    }
}

/// A bulk string reply, written where it is sent from.
pub fn write_bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    push_decimal(out, b.len() as i64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// The null reply, as the protocol version spells it.
pub fn write_null(out: &mut Vec<u8>, resp3: bool) {
    out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" });
}

/// `n` in decimal, without an allocation (every reply has a length).
fn push_decimal(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(r: &Reply, resp3: bool) -> String {
        let mut out = Vec::new();
        r.write(&mut out, resp3);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn replies_in_both_protocols() {
        assert_eq!(wire(&Reply::ok(), false), "+OK\r\n");
        assert_eq!(wire(&Reply::err("bad"), false), "-ERR bad\r\n");
        assert_eq!(
            wire(&Reply::coded("NOPROTO", "unsupported"), false),
            "-NOPROTO unsupported\r\n"
        );
        assert_eq!(wire(&Reply::err("a\r\nb"), false), "-ERR a  b\r\n");
        assert_eq!(wire(&Reply::Int(-3), false), ":-3\r\n");
        assert_eq!(wire(&Reply::Int(0), false), ":0\r\n");
        assert_eq!(
            wire(&Reply::Int(i64::MIN), false),
            format!(":{}\r\n", i64::MIN)
        );
        assert_eq!(
            wire(&Reply::Int(1234567890123), false),
            ":1234567890123\r\n"
        );
        assert_eq!(wire(&Reply::bulk("hi"), false), "$2\r\nhi\r\n");
        assert_eq!(wire(&Reply::Null, false), "$-1\r\n");
        assert_eq!(wire(&Reply::Null, true), "_\r\n");
        let m = Reply::Map(vec![(Reply::bulk("k"), Reply::Int(1))]);
        assert_eq!(wire(&m, false), "*2\r\n$1\r\nk\r\n:1\r\n");
        assert_eq!(wire(&m, true), "%1\r\n$1\r\nk\r\n:1\r\n");
        assert_eq!(
            wire(&Reply::Array(vec![Reply::Null, Reply::bulk("")]), false),
            "*2\r\n$-1\r\n$0\r\n\r\n"
        );
    }
}
