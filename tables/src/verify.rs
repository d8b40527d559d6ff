//! `verify`: checks a table as deeply as its files allow and lists every
//! problem. Structurally always (each header field, each block and entry
//! of the log, each index slot, that each slot's entry hashes to it, the
//! statistics and garbage); with checksums too when a sidecar is present,
//! which also catches damage the format cannot see (a byte of a value).

use crate::error::Error;
use crate::header::{Compression, LOG_HEADER_LEN};
use crate::log::EntryKind;
use crate::reader::{table_paths, Table};
use crate::robin::{displacement, SlotStats};
use crate::sidecar::{sidecar_path, Sidecar};
use std::path::Path;

/// Which kind of check `verify` could run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    /// No sidecar: the format's own invariants only.
    Structural,
    /// Structural plus the sidecar's checksums of every byte.
    Checksummed,
}

/// What `verify` checked and found.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// Whether the sidecar's checksums were checked too.
    pub kind: CheckKind,
    /// One line per problem, naming the file and where. Empty when sound.
    pub problems: Vec<String>,
    /// Log entries read, blocks decompressed, live pairs found.
    pub entries: u64,
    /// Compressed blocks decompressed (0 for an uncompressed log).
    pub blocks: u64,
    /// Live pairs found.
    pub live: u64,
    /// Index slots checked (all of them).
    pub slots: u64,
}

impl VerifyReport {
    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verifies the table `BASE.spl` + `BASE.spi` (+ `BASE.kvsum`).
pub fn verify(base: &Path) -> VerifyReport {
    let (log_path, index_path) = table_paths(base);
    let mut r = VerifyReport {
        kind: CheckKind::Structural,
        problems: Vec::new(),
        entries: 0,
        blocks: 0,
        live: 0,
        slots: 0,
    };
    let side = sidecar_path(base);
    match std::fs::read(&side) {
        Ok(bytes) => match Sidecar::parse(&bytes) {
            Ok(s) => {
                r.kind = CheckKind::Checksummed;
                match s.check(&log_path, &index_path) {
                    Ok(p) => r.problems.extend(p),
                    Err(e) => r.problems.push(e.to_string()),
                }
            }
            Err(why) => r.problems.push(format!("{}: {why}", side.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => r.problems.push(Error::io(&side, "read", e).to_string()),
    }
    match Table::open_files(&log_path, &index_path) {
        Ok(t) => structural(&t, &mut r),
        Err(e) => r.problems.push(e.to_string()),
    }
    r
}

/// The format's own invariants, phase by phase: the header fields the open
/// left alone, a walk of the log, the header counters against what the walk
/// found, then every slot and the index statistics.
fn structural(t: &Table, r: &mut VerifyReport) {
    let c = Check {
        t,
        lp: t.log_path().display().to_string(),
        ip: t.index_path().display().to_string(),
    };
    c.header_fields(r);
    let walk = c.walk_log(r);
    c.log_counters(r, &walk);
    c.slots(r, &walk);
}

/// A table under `structural`, with its files' names for the messages.
struct Check<'a> {
    t: &'a Table,
    lp: String,
    ip: String,
}

/// What the walk of the log counted: the whole log's counters and those of
/// the entries the index covers.
#[derive(Default)]
struct Walk {
    puts: u64,
    dels: u64,
    put_size: u64,
    del_size: u64,
    max_k: u64,
    max_v: u64,
    max_epb: u64,
    i_puts: u64,
    i_size: u64,
    i_max_k: u64,
    i_max_v: u64,
    live_bytes: u64,
    /// A bit per slot: a live PUT of the log points at it.
    matched: Vec<u64>,
    index_end_seen: bool,
}

fn bad(r: &mut VerifyReport, s: String) {
    r.problems.push(s);
}

/// A header field that should equal what the walk found.
fn field(r: &mut VerifyReport, file: &str, name: &str, header: u64, found: u64) {
    if header != found {
        r.problems.push(format!(
            "{file}: header {name} is {header}, the log holds {found}"
        ));
    }
}

impl Check<'_> {
    /// Header fields the open checks leave alone.
    fn header_fields(&self, r: &mut VerifyReport) {
        let (lh, ih) = (self.t.log_header(), self.t.index_header());
        let (lp, ip) = (&self.lp, &self.ip);
        if lh.compression == Compression::None {
            if lh.compression_block_size != 0 {
                bad(
                    r,
                    format!(
                        "{lp}: uncompressed log with block size {} (must be 0)",
                        lh.compression_block_size
                    ),
                );
            }
            if lh.max_entries_per_block != 0 {
                bad(
                    r,
                    format!(
                        "{lp}: uncompressed log with max_entries_per_block {} (must be 0)",
                        lh.max_entries_per_block
                    ),
                );
            }
        }
        if ih.entry_block_bits < lh.entry_block_bits() && ih.data_end == lh.data_end {
            bad(
                r,
                format!(
                    "{ip}: entry_block_bits {} too small for {} entries a block",
                    ih.entry_block_bits, lh.max_entries_per_block
                ),
            );
        }
        let cap = ih.hash_capacity;
        if ih.num_entries > cap {
            bad(
                r,
                format!(
                    "{ip}: num_entries {} over the capacity {cap}",
                    ih.num_entries
                ),
            );
        }
        let needed = if ih.entry_block_bits >= 32 {
            u64::MAX
        } else {
            lh.data_end << ih.entry_block_bits
        };
        if ih.address_size == 4 && needed > u64::from(u32::MAX) && ih.data_end == lh.data_end {
            bad(
                r,
                format!(
                    "{ip}: 4-byte addresses cannot reach data_end {}",
                    lh.data_end
                ),
            );
        }
    }

    /// Walks the log: every block decodes, every entry fits; counts what
    /// the headers count, and marks the slot of each PUT that is live
    /// (its key's slot points at it).
    fn walk_log(&self, r: &mut VerifyReport) -> Walk {
        let t = self.t;
        let (lh, ih) = (t.log_header(), t.index_header());
        let bits = ih.entry_block_bits;
        let mut cur = t.log_data().cursor(lh.data_end);
        let mut w = Walk {
            matched: vec![0u64; ih.hash_capacity.div_ceil(64) as usize],
            index_end_seen: ih.data_end == LOG_HEADER_LEN as u64,
            ..Walk::default()
        };
        loop {
            match cur.advance() {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => {
                    bad(r, format!("{e} (log walk stopped here)"));
                    break;
                }
            }
            let e = cur.current().expect("advanced");
            r.entries += 1;
            // Entries (or blocks) starting before the index's data_end are indexed.
            let within_index = e.loc.block < ih.data_end;
            w.max_epb = w.max_epb.max(e.loc.ordinal + 1);
            match e.kind {
                EntryKind::Put => {
                    w.puts += 1;
                    w.put_size += e.encoded_len;
                    w.max_k = w.max_k.max(e.key.len() as u64);
                    w.max_v = w.max_v.max(e.value.len() as u64);
                }
                EntryKind::Delete => {
                    w.dels += 1;
                    w.del_size += e.encoded_len;
                }
            }
            if within_index {
                w.i_size += e.encoded_len;
                if e.kind == EntryKind::Put {
                    w.i_puts += 1;
                    w.i_max_k = w.i_max_k.max(e.key.len() as u64);
                    w.i_max_v = w.i_max_v.max(e.value.len() as u64);
                    let hash = t.hash_of(e.key);
                    let addr = e.loc.address(bits);
                    match t.probe(hash, |_, a| Ok(a == addr)) {
                        Ok(Some(s)) => {
                            w.matched[(s / 64) as usize] |= 1 << (s % 64);
                            r.live += 1;
                            w.live_bytes += e.encoded_len;
                        }
                        Ok(None) => {}
                        Err(e) => bad(r, e.to_string()),
                    }
                }
            }
            if cur.position() == ih.data_end {
                w.index_end_seen = true;
            }
        }
        r.blocks = cur.blocks_read;
        w
    }

    /// The headers' counters against what the walk found.
    fn log_counters(&self, r: &mut VerifyReport, w: &Walk) {
        let (lh, ih) = (self.t.log_header(), self.t.index_header());
        let (lp, ip) = (&self.lp, &self.ip);
        field(r, lp, "num_puts", lh.num_puts, w.puts);
        field(r, lp, "num_deletes", lh.num_deletes, w.dels);
        field(r, lp, "put_size", lh.put_size, w.put_size);
        field(r, lp, "delete_size", lh.delete_size, w.del_size);
        field(r, lp, "max_key_len", lh.max_key_len, w.max_k);
        field(r, lp, "max_value_len", lh.max_value_len, w.max_v);
        if lh.compression != Compression::None {
            field(
                r,
                lp,
                "max_entries_per_block",
                u64::from(lh.max_entries_per_block),
                w.max_epb,
            );
        }
        if !w.index_end_seen {
            bad(
                r,
                format!(
                    "{ip}: data_end {} is not an entry or block boundary of the log",
                    ih.data_end
                ),
            );
        }
        field(r, ip, "num_puts", ih.num_puts, w.i_puts);
        field(r, ip, "max_key_len", ih.max_key_len, w.i_max_k);
        field(r, ip, "max_value_len", ih.max_value_len, w.i_max_v);
        field(
            r,
            ip,
            "garbage_size",
            ih.garbage_size,
            w.i_size.saturating_sub(w.live_bytes),
        );
    }

    /// Every slot: empty ones all zero, occupied ones matched by a live PUT
    /// of the log, Robin Hood order intact; then the statistics.
    fn slots(&self, r: &mut VerifyReport, w: &Walk) {
        let t = self.t;
        let ih = t.index_header();
        let ip = &self.ip;
        let cap = ih.hash_capacity;
        let mut st = SlotStats::default();
        let mut prev_disp: Option<u64> = {
            let (h, a) = t.slot(cap - 1);
            (a != 0).then(|| displacement(cap - 1, h, cap))
        };
        let mut unmatched = 0u64;
        for s in 0..cap {
            let (h, a) = t.slot(s);
            r.slots += 1;
            st.observe(h, a, cap);
            if a == 0 {
                if h != 0 {
                    bad(r, format!("{ip}: empty slot {s} has a nonzero hash {h:#x}"));
                }
                prev_disp = None;
                continue;
            }
            let d = displacement(s, h, cap);
            let limit = prev_disp.map_or(0, |p| p + 1);
            if d > limit && cap > 1 {
                bad(r, format!("{ip}: slot {s}: displacement {d} breaks Robin Hood order (at most {limit} here); lookups will miss it"));
            }
            prev_disp = Some(d);
            if w.matched[(s / 64) as usize] & (1 << (s % 64)) == 0 {
                unmatched += 1;
                if unmatched <= 20 {
                    let why = self.why_not_live(h, a);
                    bad(
                        r,
                        format!(
                            "{ip}: slot {s} (address {a:#x}) is not a live entry of the log: {why}"
                        ),
                    );
                }
            }
        }
        if unmatched > 20 {
            bad(
                r,
                format!(
                    "{ip}: {} more slots are not live entries of the log",
                    unmatched - 20
                ),
            );
        }
        let st = st.finish();
        field(r, ip, "num_entries", ih.num_entries, st.num_entries);
        field(
            r,
            ip,
            "max_displacement",
            ih.max_displacement,
            st.max_displacement,
        );
        field(
            r,
            ip,
            "total_displacement",
            ih.total_displacement,
            st.total_displacement,
        );
        field(
            r,
            ip,
            "hash_collisions",
            ih.hash_collisions,
            st.hash_collisions,
        );
        if r.live != st.num_entries && unmatched == 0 {
            bad(
                r,
                format!(
                    "{ip}: {} live log entries found for {} occupied slots",
                    r.live, st.num_entries
                ),
            );
        }
    }

    /// Why the occupied slot (hash `h`, address `a`) matched no live PUT.
    fn why_not_live(&self, h: u64, a: u64) -> String {
        let t = self.t;
        match t.log_data().entry_at(a, t.index_header().entry_block_bits) {
            Err(e) => e.to_string(),
            Ok(e) if e.kind == EntryKind::Delete => "it is a DELETE entry".into(),
            Ok(e) if t.hash_of(&e.key) != h => format!(
                "its key hashes to {:#x}, the slot holds {h:#x}",
                t.hash_of(&e.key)
            ),
            Ok(_) => "a later entry of its key replaced or deleted it".into(),
        }
    }
}
