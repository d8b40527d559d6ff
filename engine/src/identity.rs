//! The store's identity: a small meta blob written once when a store is
//! created, naming the format and a random store id that every segment header
//! repeats, so segments of another store are never mixed in.

use crate::error::{Error, Result};
use kivi_log::{FORMAT_VERSION, OLDEST_FORMAT_READ};
use kivi_storage::Storage;
use rand::RngExt;

pub(crate) const IDENTITY: &str = "KIVI";
const FIRST_LINE: &str = "kivi store";

pub(crate) fn encode(store_id: [u8; 16]) -> Vec<u8> {
    encode_format(store_id, FORMAT_VERSION)
}

/// The identity as a build of `format` wrote it (every format's is laid
/// out alike).
fn encode_format(store_id: [u8; 16], format: u32) -> Vec<u8> {
    let id: String = store_id.iter().map(|b| format!("{b:02x}")).collect();
    format!("{FIRST_LINE}\nformat {format}\nid {id}\n").into_bytes()
}

/// What the identity says: the store's id and the format it is in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity {
    pub id: [u8; 16],
    /// No older than any segment's (see `upgrade`); recovery checks it.
    pub format: u32,
}

/// The store id and the format the identity names.
pub(crate) fn decode(bytes: &[u8], path: &str) -> Result<([u8; 16], u32)> {
    let bad = |reason: String| Error::NotAStore {
        path: path.to_string(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| bad(format!("{IDENTITY} is not text")))?;
    let mut lines = text.lines();
    if lines.next() != Some(FIRST_LINE) {
        return Err(bad(format!(
            "{IDENTITY} does not start with \"{FIRST_LINE}\""
        )));
    }
    let version = lines
        .next()
        .and_then(|l| l.strip_prefix("format "))
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| bad(format!("{IDENTITY} has no format line")))?;
    if !(OLDEST_FORMAT_READ..=FORMAT_VERSION).contains(&version) {
        return Err(bad(format!(
            "store format {version}; this build reads formats {OLDEST_FORMAT_READ} to {FORMAT_VERSION}"
        )));
    }
    let hex = lines
        .next()
        .and_then(|l| l.strip_prefix("id "))
        .filter(|h| h.len() == 32)
        .ok_or_else(|| bad(format!("{IDENTITY} has no store id")))?;
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        // `get`, not indexing: 32 bytes of damage may hold a character of
        // several bytes, which a slice must not cut (found by fuzzing).
        *b = hex
            .get(2 * i..2 * i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .ok_or_else(|| bad("bad store id".into()))?;
    }
    // The identity has no checksum: anything but the bytes kivi writes for
    // this id and format is damage (an upper-case digit, a stray byte
    // after the id), never the same identity read leniently.
    if bytes != encode_format(id, version) {
        return Err(bad(format!("{IDENTITY} is damaged: not as kivi writes it")));
    }
    Ok((id, version))
}

/// Reads the identity, creating a new store when allowed and the place is
/// empty. An identity of an older format is upgraded by [`upgrade`], once
/// recovery has checked it against the segments.
pub(crate) fn load_or_create(
    storage: &dyn Storage,
    path: &str,
    is_empty: impl FnOnce() -> Result<bool>,
    create: bool,
) -> Result<Identity> {
    if let Some(bytes) = storage.read_meta(IDENTITY)? {
        let (id, format) = decode(&bytes, path)?;
        return Ok(Identity { id, format });
    }
    if !is_empty()? {
        return Err(Error::NotAStore {
            path: path.to_string(),
            reason: format!("it holds files but no {IDENTITY} file"),
        });
    }
    if !create {
        return Err(Error::NotAStore {
            path: path.to_string(),
            reason: "no store here".into(),
        });
    }
    let id: [u8; 16] = rand::rng().random();
    storage.write_meta(IDENTITY, &encode(id))?;
    Ok(Identity {
        id,
        format: FORMAT_VERSION,
    })
}

/// For a writable open, before it writes anything: what this build writes
/// is of its own format, so the identity says so first, and an older build
/// refuses the store instead of finding records it does not know.
pub(crate) fn upgrade(storage: &dyn Storage, identity: Identity) -> Result<()> {
    if identity.format < FORMAT_VERSION {
        storage.write_meta(IDENTITY, &encode(identity.id))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips_and_rejects_strangers() {
        let id = [0xab; 16];
        assert_eq!(decode(&encode(id), "d").unwrap(), (id, FORMAT_VERSION));
        assert!(decode(b"hello", "d")
            .unwrap_err()
            .to_string()
            .contains("not a kivi store"));
        let future = String::from_utf8(encode(id))
            .unwrap()
            .replace(&format!("format {FORMAT_VERSION}"), "format 9");
        assert!(decode(future.as_bytes(), "d")
            .unwrap_err()
            .to_string()
            .contains("format 9"));
    }
}
