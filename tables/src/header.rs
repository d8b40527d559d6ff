//! The two file headers, packed little-endian with no padding, and the
//! checks a reader makes before trusting any other byte of the files.

use crate::bytes::{u32_at, u64_at};
use crate::error::{Error, Result};
use crate::hash::HashSize;
use crate::limits;
use std::path::Path;

pub const LOG_MAGIC: u32 = 0x49B3_9C95;
/// Bytes of a log's (`.spl`) header, before its first entry.
pub const LOG_HEADER_LEN: usize = 84;
pub const INDEX_MAGIC: u32 = 0x9A11_318F;
/// Bytes of an index's (`.spi`) header, before its first slot.
pub const INDEX_HEADER_LEN: usize = 112;
// The fields, packed, as `LogHeader::to_bytes` writes them: magic, major, minor,
// file_identifier (u32 each); num_puts, num_deletes, data_end, max_key_len,
// max_value_len, delete_size (u64 each); compression, compression_block_size
// (u32 each); put_size (u64); max_entries_per_block (u32).
const _: () = assert!(LOG_HEADER_LEN == 4 * 4 + 6 * 8 + 2 * 4 + 8 + 4);
// And `IndexHeader::to_bytes`: magic, major, minor, file_identifier, hash_seed
// (u32 each); data_end, max_key_len, max_value_len, num_puts, garbage_size,
// num_entries (u64 each); address_size, hash_size (u32 each); hash_capacity,
// max_displacement (u64 each); entry_block_bits (u32); hash_collisions,
// total_displacement (u64 each).
const _: () = assert!(INDEX_HEADER_LEN == 5 * 4 + 6 * 8 + 2 * 4 + 2 * 8 + 4 + 2 * 8);

/// How a log's data region is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Entries stored as they are, addressed by byte offset.
    None,
    /// Blocks of raw snappy, each of at most `compression_block_size`
    /// uncompressed bytes.
    Snappy,
    /// Blocks of one zstd frame each (level 3), sizes as for snappy.
    Zstd,
}

impl Compression {
    /// The header's code for it: 0 none, 1 snappy, 2 zstd.
    pub fn code(self) -> u32 {
        match self {
            Compression::None => 0,
            Compression::Snappy => 1,
            Compression::Zstd => 2,
        }
    }

    /// The compression a header's code names; `None` for an unknown code.
    pub fn from_code(c: u32) -> Option<Compression> {
        match c {
            0 => Some(Compression::None),
            1 => Some(Compression::Snappy),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// Its name in lower case (`"none"`, `"snappy"`, `"zstd"`), as the
    /// command line takes it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Snappy => "snappy",
            Compression::Zstd => "zstd",
        }
    }
}

/// What sets the two headers apart where they are parsed alike.
struct Kind {
    /// "log" or "index", as the error messages name the file.
    name: &'static str,
    len: usize,
    magic: u32,
    max_minor: u32,
}

const LOG: Kind = Kind {
    name: "log",
    len: LOG_HEADER_LEN,
    magic: LOG_MAGIC,
    max_minor: 0,
};

const INDEX: Kind = Kind {
    name: "index",
    len: INDEX_HEADER_LEN,
    magic: INDEX_MAGIC,
    max_minor: 1,
};

/// A header being parsed: the checks both headers start with (length,
/// magic, version) are done, and its errors name the file and the offset.
struct Parse<'a> {
    path: &'a Path,
    major: u32,
    minor: u32,
}

impl<'a> Parse<'a> {
    fn start(kind: &Kind, bytes: &[u8], path: &'a Path) -> Result<Parse<'a>> {
        let p = Parse {
            path,
            major: 0,
            minor: 0,
        };
        let name = kind.name;
        if bytes.len() < kind.len {
            return p.bad(
                0,
                format!(
                    "{name} is {} bytes, shorter than its {}-byte header",
                    bytes.len(),
                    kind.len
                ),
            );
        }
        let magic = u32_at(bytes, 0);
        if magic != kind.magic {
            return p.bad(
                0,
                format!(
                    "bad {name} magic {magic:#010x} (expected {:#010x})",
                    kind.magic
                ),
            );
        }
        let major = u32_at(bytes, 4);
        let minor = u32_at(bytes, 8);
        if major != 1 {
            return p.bad(4, format!("unsupported {name} major version {major}"));
        }
        if minor > kind.max_minor {
            return p.bad(8, format!("unsupported {name} minor version {minor}"));
        }
        Ok(Parse { major, minor, ..p })
    }

    fn bad<T>(&self, off: u64, what: String) -> Result<T> {
        Err(Error::corrupt(self.path, off, what))
    }

    /// A field (at `off`) that may not exceed another.
    fn at_most(
        &self,
        off: u64,
        (name, v): (&str, u64),
        (limit_name, limit): (&str, u64),
    ) -> Result<()> {
        if v > limit {
            return self.bad(off, format!("{name} {v} exceeds {limit_name} {limit}"));
        }
        Ok(())
    }
}

/// The `.spl` header (spec §1.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHeader {
    /// Format major version (1).
    pub major: u32,
    /// Format minor version (0).
    pub minor: u32,
    /// A random number naming this log; its index carries the same one.
    pub file_identifier: u32,
    /// PUT entries in the log.
    pub num_puts: u64,
    /// DELETE entries in the log.
    pub num_deletes: u64,
    /// Byte offset where the committed data ends (header included);
    /// anything after it is ignored.
    pub data_end: u64,
    /// Longest key of any PUT, in bytes.
    pub max_key_len: u64,
    /// Longest value of any PUT, in bytes.
    pub max_value_len: u64,
    /// Bytes of the DELETE entries, encoded (before compression).
    pub delete_size: u64,
    /// How the data is stored.
    pub compression: Compression,
    /// Most uncompressed bytes of a compressed block (0 when uncompressed).
    pub compression_block_size: u32,
    /// Bytes of the PUT entries, encoded (before compression).
    pub put_size: u64,
    /// Most entries starting in one compressed block (0 when uncompressed).
    pub max_entries_per_block: u32,
}

impl LogHeader {
    /// A fresh header: no entries, data_end just past the header.
    pub fn new(file_identifier: u32, compression: Compression, block_size: u32) -> Self {
        LogHeader {
            major: 1,
            minor: 0,
            file_identifier,
            num_puts: 0,
            num_deletes: 0,
            data_end: LOG_HEADER_LEN as u64,
            max_key_len: 0,
            max_value_len: 0,
            delete_size: 0,
            compression,
            // sparkey forces these to 0 for uncompressed logs.
            compression_block_size: if compression == Compression::None {
                0
            } else {
                block_size
            },
            put_size: 0,
            max_entries_per_block: 0,
        }
    }

    /// Parses and checks the header of a log file of `file_len` bytes.
    pub fn parse(bytes: &[u8], file_len: u64, path: &Path) -> Result<Self> {
        let p = Parse::start(&LOG, bytes, path)?;
        let code = u32_at(bytes, 64);
        let Some(compression) = Compression::from_code(code) else {
            return p.bad(64, format!("unknown compression type {code}"));
        };
        let h = LogHeader {
            major: p.major,
            minor: p.minor,
            file_identifier: u32_at(bytes, 12),
            num_puts: u64_at(bytes, 16),
            num_deletes: u64_at(bytes, 24),
            data_end: u64_at(bytes, 32),
            max_key_len: u64_at(bytes, 40),
            max_value_len: u64_at(bytes, 48),
            delete_size: u64_at(bytes, 56),
            compression,
            compression_block_size: u32_at(bytes, 68),
            put_size: u64_at(bytes, 72),
            max_entries_per_block: u32_at(bytes, 80),
        };
        h.check(&p, file_len)?;
        Ok(h)
    }

    /// The checks of a parsed log header's fields.
    fn check(&self, p: &Parse<'_>, file_len: u64) -> Result<()> {
        if self.data_end < LOG_HEADER_LEN as u64 {
            return p.bad(
                32,
                format!("data_end {} is inside the header", self.data_end),
            );
        }
        p.at_most(16, ("num_puts", self.num_puts), ("data_end", self.data_end))?;
        p.at_most(
            24,
            ("num_deletes", self.num_deletes),
            ("data_end", self.data_end),
        )?;
        if file_len < self.data_end {
            return p.bad(
                32,
                format!(
                    "data_end {} is past the end of the {file_len}-byte file",
                    self.data_end
                ),
            );
        }
        if self.compression != Compression::None {
            let bs = self.compression_block_size;
            if bs == 0 || u64::from(bs) > limits::MAX_BLOCK_SIZE {
                return p.bad(
                    68,
                    format!(
                        "compression block size {bs} outside 1..={}",
                        limits::MAX_BLOCK_SIZE
                    ),
                );
            }
        }
        Ok(())
    }

    /// The header as it is stored: packed little-endian, magic first.
    pub fn to_bytes(&self) -> [u8; LOG_HEADER_LEN] {
        let mut b = [0u8; LOG_HEADER_LEN];
        b[0..4].copy_from_slice(&LOG_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.major.to_le_bytes());
        b[8..12].copy_from_slice(&self.minor.to_le_bytes());
        b[12..16].copy_from_slice(&self.file_identifier.to_le_bytes());
        b[16..24].copy_from_slice(&self.num_puts.to_le_bytes());
        b[24..32].copy_from_slice(&self.num_deletes.to_le_bytes());
        b[32..40].copy_from_slice(&self.data_end.to_le_bytes());
        b[40..48].copy_from_slice(&self.max_key_len.to_le_bytes());
        b[48..56].copy_from_slice(&self.max_value_len.to_le_bytes());
        b[56..64].copy_from_slice(&self.delete_size.to_le_bytes());
        b[64..68].copy_from_slice(&self.compression.code().to_le_bytes());
        b[68..72].copy_from_slice(&self.compression_block_size.to_le_bytes());
        b[72..80].copy_from_slice(&self.put_size.to_le_bytes());
        b[80..84].copy_from_slice(&self.max_entries_per_block.to_le_bytes());
        b
    }

    /// Low address bits that hold an entry's ordinal within its block.
    pub fn entry_block_bits(&self) -> u32 {
        if self.compression == Compression::None {
            0
        } else {
            32 - self.max_entries_per_block.leading_zeros()
        }
    }
}

/// The `.spi` header (spec §1.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexHeader {
    /// Format major version (1).
    pub major: u32,
    /// Format minor version (1 as written; 0, sparkey's older indexes, is
    /// read too).
    pub minor: u32,
    /// The `file_identifier` of the log the index was built from.
    pub file_identifier: u32,
    /// The seed of every stored hash.
    pub hash_seed: u32,
    /// The log's `data_end` when the index was built: it covers the entries
    /// before it.
    pub data_end: u64,
    /// The log's `max_key_len` then.
    pub max_key_len: u64,
    /// The log's `max_value_len` then.
    pub max_value_len: u64,
    /// The log's `num_puts` then.
    pub num_puts: u64,
    /// Bytes of log entries no lookup reaches: DELETEs and the PUTs later
    /// entries replaced or deleted.
    pub garbage_size: u64,
    /// Live keys: occupied slots.
    pub num_entries: u64,
    /// Bytes of a slot's address: 4 or 8.
    pub address_size: u32,
    /// Bytes (and function) of a slot's hash.
    pub hash_size: HashSize,
    /// Slots in the table.
    pub hash_capacity: u64,
    /// Farthest any entry sits from its hash's home slot, in slots.
    pub max_displacement: u64,
    /// For a compressed log, how many low bits of an address give the
    /// entry's ordinal in its block (0 when uncompressed).
    pub entry_block_bits: u32,
    /// Slots whose stored hash equals the occupied slot's before them
    /// (sparkey's count).
    pub hash_collisions: u64,
    /// Sum of every entry's displacement, in slots.
    pub total_displacement: u64,
}

impl IndexHeader {
    /// Bytes of one slot: the hash and the address.
    pub fn slot_size(&self) -> u64 {
        u64::from(self.hash_size.bytes() + self.address_size)
    }

    /// Parses and checks the header of an index file of `file_len` bytes.
    pub fn parse(bytes: &[u8], file_len: u64, path: &Path) -> Result<Self> {
        let p = Parse::start(&INDEX, bytes, path)?;
        let hs = u32_at(bytes, 72);
        let Some(hash_size) = HashSize::from_bytes(hs) else {
            return p.bad(72, format!("hash header corrupt: hash size {hs}"));
        };
        let h = IndexHeader {
            major: p.major,
            minor: p.minor,
            file_identifier: u32_at(bytes, 12),
            hash_seed: u32_at(bytes, 16),
            data_end: u64_at(bytes, 20),
            max_key_len: u64_at(bytes, 28),
            max_value_len: u64_at(bytes, 36),
            num_puts: u64_at(bytes, 44),
            garbage_size: u64_at(bytes, 52),
            num_entries: u64_at(bytes, 60),
            address_size: u32_at(bytes, 68),
            hash_size,
            hash_capacity: u64_at(bytes, 76),
            max_displacement: u64_at(bytes, 84),
            entry_block_bits: u32_at(bytes, 92),
            hash_collisions: u64_at(bytes, 96),
            total_displacement: u64_at(bytes, 104),
        };
        h.check(&p, file_len)?;
        Ok(h)
    }

    /// The checks of a parsed index header's fields.
    fn check(&self, p: &Parse<'_>, file_len: u64) -> Result<()> {
        if self.address_size != 4 && self.address_size != 8 {
            return p.bad(
                68,
                format!("hash header corrupt: address size {}", self.address_size),
            );
        }
        let entries = ("num_entries", self.num_entries);
        p.at_most(60, entries, ("num_puts", self.num_puts))?;
        p.at_most(84, ("max_displacement", self.max_displacement), entries)?;
        p.at_most(96, ("hash_collisions", self.hash_collisions), entries)?;
        // kivi's own checks: a capacity of 0 would divide by zero, and an
        // entry index needing more than 32 bits cannot come from a block of
        // at most 2^30 bytes.
        if self.hash_capacity == 0 {
            return p.bad(76, "hash capacity 0".into());
        }
        if self.entry_block_bits > 32 {
            return p.bad(
                92,
                format!("entry_block_bits {} over 32", self.entry_block_bits),
            );
        }
        let needed = self
            .hash_capacity
            .checked_mul(self.slot_size())
            .and_then(|n| n.checked_add(INDEX_HEADER_LEN as u64));
        match needed {
            Some(n) if n <= file_len => Ok(()),
            _ => p.bad(
                76,
                format!(
                    "{} slots of {} bytes do not fit in the {file_len}-byte file",
                    self.hash_capacity,
                    self.slot_size()
                ),
            ),
        }
    }

    /// The checks tying an index (at `path`) to its log (at `log_path`),
    /// spec §1.4. Which of the two headers is wrong when they disagree
    /// cannot be told, so the errors name both files.
    pub fn check_against(&self, log: &LogHeader, log_path: &Path, path: &Path) -> Result<()> {
        if self.file_identifier != log.file_identifier {
            return Err(Error::IdentifierMismatch {
                path: path.to_path_buf(),
                log_path: log_path.to_path_buf(),
                log: log.file_identifier,
                index: self.file_identifier,
            });
        }
        let bad = |off: u64, what: String| {
            let what = format!("{what} (the log is {})", log_path.display());
            Err(Error::corrupt(path, off, what))
        };
        // sparkey addresses the entries of an uncompressed log by offset
        // alone, of a compressed one by block and ordinal.
        let compressed = log.compression != Compression::None;
        if compressed != (self.entry_block_bits > 0) && self.num_entries > 0 {
            return bad(
                92,
                format!(
                    "entry_block_bits {} for a log compressed with {}",
                    self.entry_block_bits,
                    log.compression.name()
                ),
            );
        }
        if self.data_end > log.data_end {
            return bad(
                20,
                format!(
                    "index covers data_end {} past the log's {}",
                    self.data_end, log.data_end
                ),
            );
        }
        if self.max_key_len > log.max_key_len {
            return bad(
                28,
                format!(
                    "max_key_len {} over the log's {}",
                    self.max_key_len, log.max_key_len
                ),
            );
        }
        if self.max_value_len > log.max_value_len {
            return bad(
                36,
                format!(
                    "max_value_len {} over the log's {}",
                    self.max_value_len, log.max_value_len
                ),
            );
        }
        if self.data_end < LOG_HEADER_LEN as u64 {
            return Err(Error::corrupt(
                path,
                20,
                format!("data_end {} is inside the log header", self.data_end),
            ));
        }
        Ok(())
    }

    /// The header as it is stored: packed little-endian, magic first.
    pub fn to_bytes(&self) -> [u8; INDEX_HEADER_LEN] {
        let mut b = [0u8; INDEX_HEADER_LEN];
        b[0..4].copy_from_slice(&INDEX_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.major.to_le_bytes());
        b[8..12].copy_from_slice(&self.minor.to_le_bytes());
        b[12..16].copy_from_slice(&self.file_identifier.to_le_bytes());
        b[16..20].copy_from_slice(&self.hash_seed.to_le_bytes());
        b[20..28].copy_from_slice(&self.data_end.to_le_bytes());
        b[28..36].copy_from_slice(&self.max_key_len.to_le_bytes());
        b[36..44].copy_from_slice(&self.max_value_len.to_le_bytes());
        b[44..52].copy_from_slice(&self.num_puts.to_le_bytes());
        b[52..60].copy_from_slice(&self.garbage_size.to_le_bytes());
        b[60..68].copy_from_slice(&self.num_entries.to_le_bytes());
        b[68..72].copy_from_slice(&self.address_size.to_le_bytes());
        b[72..76].copy_from_slice(&self.hash_size.bytes().to_le_bytes());
        b[76..84].copy_from_slice(&self.hash_capacity.to_le_bytes());
        b[84..92].copy_from_slice(&self.max_displacement.to_le_bytes());
        b[92..96].copy_from_slice(&self.entry_block_bits.to_le_bytes());
        b[96..104].copy_from_slice(&self.hash_collisions.to_le_bytes());
        b[104..112].copy_from_slice(&self.total_displacement.to_le_bytes());
        b
    }
}
