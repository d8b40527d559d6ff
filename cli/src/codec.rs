//! How keys and values look on the command line, in load files and in
//! output: raw bytes of text by default, hex with `--hex` (so any bytes,
//! tabs and newlines included, survive a round trip). Lines of
//! `key<TAB>value` (scan's output, load's and table create's input) are
//! escaped text unless `--raw`: a TAB, a newline or a backslash inside a
//! key or value would otherwise make the line mean something else.

use crate::error::{CliError, Result};
use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Text,
    Hex,
    /// Text with `\\`, `\t`, `\n`, `\r` and `\xNN` for the backslash, TAB,
    /// newline, carriage return and every other control byte; on input any
    /// byte may be written `\xNN` (as `table dump` writes them).
    Escaped,
}

impl Codec {
    pub fn new(hex: bool) -> Self {
        if hex {
            Codec::Hex
        } else {
            Codec::Text
        }
    }

    /// The codec of a `key<TAB>value` line: escaped text unless `raw`.
    pub fn for_lines(self, raw: bool) -> Self {
        match self {
            Codec::Text | Codec::Escaped if raw => Codec::Text,
            Codec::Text | Codec::Escaped => Codec::Escaped,
            Codec::Hex => Codec::Hex,
        }
    }

    /// Bytes of a command-line argument. Text takes the argument's bytes
    /// as given (they need not be UTF-8); `what` names it in errors.
    pub fn decode_arg(self, what: &str, arg: &OsStr) -> Result<Vec<u8>> {
        self.decode(arg.as_bytes())
            .map_err(|e| CliError::Input(format!("{what} {e}")))
    }

    /// Bytes of a field of a load line, or why it is not valid.
    pub fn decode(self, field: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Codec::Text => Ok(field.to_vec()),
            Codec::Hex => hex::decode(field).map_err(|e| format!("is not valid hex ({e})")),
            Codec::Escaped => unescape(field),
        }
    }

    /// Writes `bytes` as this codec shows them.
    pub fn write(self, out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
        match self {
            Codec::Text => out.write_all(bytes),
            Codec::Hex => out.write_all(hex::encode(bytes).as_bytes()),
            Codec::Escaped => escape(out, bytes),
        }
    }

    /// `bytes` as this codec shows them, for messages.
    pub fn show(self, bytes: &[u8]) -> String {
        match self {
            Codec::Text => String::from_utf8_lossy(bytes).into_owned(),
            Codec::Hex => hex::encode(bytes),
            Codec::Escaped => {
                let mut out = Vec::new();
                let _ = escape(&mut out, bytes);
                String::from_utf8_lossy(&out).into_owned()
            }
        }
    }
}

/// Writes `bytes` escaped (`Codec::Escaped`), runs of plain bytes at once.
fn escape(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let mut plain = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'\\' => b"\\\\",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            0..=0x1f | 0x7f => b"",
            _ => continue,
        };
        out.write_all(&bytes[plain..i])?;
        if esc.is_empty() {
            write!(out, "\\x{b:02x}")?;
        } else {
            out.write_all(esc)?;
        }
        plain = i + 1;
    }
    out.write_all(&bytes[plain..])
}

/// The bytes an escaped field stands for, or why it is not valid.
fn unescape(field: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let (byte, len) = match field.get(i + 1) {
            Some(b'\\') => (b'\\', 2),
            Some(b't') => (b'\t', 2),
            Some(b'n') => (b'\n', 2),
            Some(b'r') => (b'\r', 2),
            Some(b'x') => {
                let digits = field.get(i + 2..i + 4).unwrap_or_default();
                let byte = std::str::from_utf8(digits)
                    .ok()
                    .filter(|d| d.len() == 2)
                    .and_then(|d| u8::from_str_radix(d, 16).ok())
                    .ok_or_else(|| {
                        format!(
                            "has a bad escape at byte {i}: \\x needs two hex digits (a \\ itself is \\\\, or use --raw)"
                        )
                    })?;
                (byte, 4)
            }
            _ => {
                return Err(format!(
                    "has a bad escape at byte {i}: a backslash starts \\\\, \\t, \\n, \\r or \\xNN (or use --raw)"
                ))
            }
        };
        out.push(byte);
        i += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_any_bytes_and_rejects_bad_digits() {
        let bytes = b"\t\n\0\xff a";
        let mut out = Vec::new();
        Codec::Hex.write(&mut out, bytes).unwrap();
        assert_eq!(out, b"090a00ff2061");
        assert_eq!(Codec::Hex.decode(&out).unwrap(), bytes);
        assert!(Codec::Hex
            .decode(b"0g")
            .unwrap_err()
            .contains("not valid hex"));
        assert!(Codec::Hex
            .decode(b"abc")
            .unwrap_err()
            .contains("not valid hex"));
        assert_eq!(Codec::Text.decode(b"a\tb").unwrap(), b"a\tb");
    }

    #[test]
    fn escaped_text_round_trips_any_bytes_and_keeps_plain_text_plain() {
        let mut all: Vec<u8> = (0..=255u8).collect();
        all.extend_from_slice("héllo wörld \\x41".as_bytes());
        let mut out = Vec::new();
        Codec::Escaped.write(&mut out, &all).unwrap();
        assert!(!out.contains(&b'\t') && !out.contains(&b'\n') && !out.contains(&b'\r'));
        assert_eq!(Codec::Escaped.decode(&out).unwrap(), all);
        let mut out = Vec::new();
        Codec::Escaped
            .write(&mut out, "a b\tc\nd\\e\x01é".as_bytes())
            .unwrap();
        assert_eq!(out, "a b\\tc\\nd\\\\e\\x01é".as_bytes());
        // table dump's form (every byte \xNN) reads too.
        assert_eq!(
            Codec::Escaped.decode(b"empty\\x20key").unwrap(),
            b"empty key"
        );
        for bad in [&b"a\\"[..], b"\\q", b"\\x4", b"\\xzz"] {
            let e = Codec::Escaped.decode(bad).unwrap_err();
            assert!(e.contains("bad escape"), "{e}");
        }
    }
}
