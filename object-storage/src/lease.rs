//! The writer's *lease*: one object, `lease`, that the writer puts again
//! about once a second, saying which writer it is and where its clients
//! reach it (a note the server sets: its address).
//!
//! It is advice, never safety: fencing alone decides who may commit. A
//! follower that sees the lease unchanged for long enough may take over
//! (the writer is gone or cut off), and clients ask followers where the
//! writer is. Before each renewal the writer asks whether the number after
//! its log's end holds another writer's entry (a takeover it has not met
//! yet, being idle); if so it stops writing and renewing, so that a writer
//! that resumes after a pause overwrites the new writer's lease at most
//! once, for at most a second.

use bytes::Bytes;
use std::time::Duration;

/// The lease's name under the store's prefix.
pub const LEASE: &str = "lease";
/// How often the writer puts its lease again.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

const MAGIC: &str = "kivi-lease 1";

/// What a lease says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The writer's random id (the one in its log entries).
    pub writer: [u8; 16],
    /// Its fence's number.
    pub epoch: u64,
    /// Counts its puts of the lease: a new value means it is alive.
    pub renewal: u64,
    /// When it put it, by its clock (milliseconds since the Unix epoch).
    pub time_ms: u64,
    /// What the writer announces (`kivi serve`: its address); may be empty.
    pub note: String,
}

impl Lease {
    /// As stored: a few lines of text.
    pub fn encode(&self) -> Bytes {
        let note: String = self.note.chars().filter(|c| !c.is_control()).collect();
        Bytes::from(format!(
            "{MAGIC}\nwriter {}\nepoch {}\nrenewal {}\ntime_ms {}\nnote {note}\n",
            hex(&self.writer),
            self.epoch,
            self.renewal,
            self.time_ms
        ))
    }

    /// Reads a stored lease; `None` for anything else.
    pub fn decode(bytes: &[u8]) -> Option<Lease> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let mut field = |name: &str| -> Option<String> {
            let line = lines.next()?;
            Some(
                line.strip_prefix(name)?
                    .strip_prefix(' ')
                    .unwrap_or("")
                    .to_string(),
            )
        };
        let writer = unhex(&field("writer")?)?;
        let epoch = field("epoch")?.parse().ok()?;
        let renewal = field("renewal")?.parse().ok()?;
        let time_ms = field("time_ms")?.parse().ok()?;
        let note = field("note")?;
        Some(Lease {
            writer,
            epoch,
            renewal,
            time_ms,
            note,
        })
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_round_trip_and_others_are_refused() {
        let l = Lease {
            writer: [0xab; 16],
            epoch: 640,
            renewal: 7,
            time_ms: 1_795_000_000_000,
            note: "10.0.0.7:6380".into(),
        };
        assert_eq!(Lease::decode(&l.encode()), Some(l.clone()));
        let empty = Lease {
            note: String::new(),
            ..l.clone()
        };
        assert_eq!(Lease::decode(&empty.encode()), Some(empty));
        // A note cannot break the format.
        let odd = Lease {
            note: "a\nepoch 1".into(),
            ..l
        };
        assert_eq!(Lease::decode(&odd.encode()).unwrap().note, "aepoch 1");
        assert_eq!(Lease::decode(b"kivi-lease 2\n"), None);
        assert_eq!(Lease::decode(b"not a lease"), None);
    }
}
