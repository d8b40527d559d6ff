//! How keys and values look on the command line, in load files and in
//! output: raw bytes of text by default, hex with `--hex` (so any bytes,
//! tabs and newlines included, survive a round trip).

use crate::error::{CliError, Result};
use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Text,
    Hex,
}

impl Codec {
    pub fn new(hex: bool) -> Self {
        if hex {
            Codec::Hex
        } else {
            Codec::Text
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
        }
    }

    /// Writes `bytes` as this codec shows them.
    pub fn write(self, out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
        match self {
            Codec::Text => out.write_all(bytes),
            Codec::Hex => out.write_all(hex::encode(bytes).as_bytes()),
        }
    }

    /// `bytes` as this codec shows them, for messages.
    pub fn show(self, bytes: &[u8]) -> String {
        match self {
            Codec::Text => String::from_utf8_lossy(bytes).into_owned(),
            Codec::Hex => hex::encode(bytes),
        }
    }
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
}
