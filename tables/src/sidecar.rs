//! The checksum sidecar `BASE.kvsum`: kivi's own small file beside a table
//! (sparkey never opens it) with a CRC32C of every 64 KiB range of the log
//! and one of the whole index, so `verify` catches a flipped byte anywhere,
//! even inside a value, where the format itself has no checksum.
//!
//! Layout (little-endian):
//!
//! | off | type | field |
//! |---:|---|---|
//! | 0 | u32 | magic 0x4D55534B ("KSUM") |
//! | 4 | u32 | version 1 |
//! | 8 | u32 | the log's file_identifier |
//! | 12 | u32 | the index's hash_seed |
//! | 16 | u64 | the log's data_end (bytes covered) |
//! | 24 | u64 | the index's file length |
//! | 32 | u32 | range size R (65536) |
//! | 36 | u32 | CRC32C of the whole index file |
//! | 40 | u64 | n = ceil(data_end / R) |
//! | 48 | n × u32 | CRC32C of log bytes [i·R, min((i+1)·R, data_end)), header included |
//! | 48 + 4n | u32 | CRC32C of all the bytes before it |
//!
//! Byte ranges rather than blocks: they cover the log header and every
//! block's length too, work the same for every compression, and still
//! place a damaged byte within 64 KiB.

use crate::atomic_file;
use crate::bytes::{u32_at, u64_at};
use crate::error::{Error, Result};
use crate::reader::{strip_ext, table_paths, with_suffix};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

pub const MAGIC: u32 = 0x4D55_534B;
pub const VERSION: u32 = 1;
pub const RANGE: u64 = 64 << 10;
const FIXED: usize = 48;
// The fixed fields of the layout above: four u32, two u64, two u32, one u64.
const _: () = assert!(FIXED == 4 * 4 + 2 * 8 + 2 * 4 + 8);

/// `BASE.kvsum`.
pub fn sidecar_path(base: &Path) -> PathBuf {
    with_suffix(&strip_ext(base), ".kvsum")
}

/// A parsed sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    pub file_identifier: u32,
    pub hash_seed: u32,
    pub data_end: u64,
    pub index_len: u64,
    pub range: u64,
    pub index_crc: u32,
    pub log_crcs: Vec<u32>,
}

/// CRC32C of each `range` bytes of the first `len` bytes of `path`, and
/// of the whole of it.
fn crcs(path: &Path, len: u64, range: u64) -> Result<(Vec<u32>, u32)> {
    let f = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut r = BufReader::with_capacity(1 << 20, f.take(len));
    let mut buf = vec![0u8; range as usize];
    let mut out = Vec::new();
    let mut whole = 0u32;
    let mut left = len;
    while left > 0 {
        let n = left.min(range) as usize;
        r.read_exact(&mut buf[..n])
            .map_err(|e| Error::io(path, "read", e))?;
        out.push(crc32c::crc32c(&buf[..n]));
        whole = crc32c::crc32c_append(whole, &buf[..n]);
        left -= n as u64;
    }
    Ok((out, whole))
}

impl Sidecar {
    /// Computes the sidecar of a log and index as they are on disk.
    pub fn compute(log: &Path, index: &Path) -> Result<Sidecar> {
        let (lh, _) = crate::reader::map_log(log)?;
        let index_len = std::fs::metadata(index)
            .map_err(|e| Error::io(index, "stat", e))?
            .len();
        let mut head = vec![0u8; crate::header::INDEX_HEADER_LEN.min(index_len as usize)];
        File::open(index)
            .and_then(|mut f| f.read_exact(&mut head))
            .map_err(|e| Error::io(index, "read header", e))?;
        let ih = crate::header::IndexHeader::parse(&head, index_len, index)?;
        let (log_crcs, _) = crcs(log, lh.data_end, RANGE)?;
        let (_, index_crc) = crcs(index, index_len, RANGE)?;
        Ok(Sidecar {
            file_identifier: lh.file_identifier,
            hash_seed: ih.hash_seed,
            data_end: lh.data_end,
            index_len,
            range: RANGE,
            index_crc,
            log_crcs,
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(FIXED + 4 * self.log_crcs.len() + 4);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.file_identifier.to_le_bytes());
        b.extend_from_slice(&self.hash_seed.to_le_bytes());
        b.extend_from_slice(&self.data_end.to_le_bytes());
        b.extend_from_slice(&self.index_len.to_le_bytes());
        b.extend_from_slice(&(self.range as u32).to_le_bytes());
        b.extend_from_slice(&self.index_crc.to_le_bytes());
        b.extend_from_slice(&(self.log_crcs.len() as u64).to_le_bytes());
        for c in &self.log_crcs {
            b.extend_from_slice(&c.to_le_bytes());
        }
        let c = crc32c::crc32c(&b);
        b.extend_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses a sidecar, or says what is wrong with it.
    pub fn parse(b: &[u8]) -> std::result::Result<Sidecar, String> {
        if b.len() < FIXED + 4 {
            return Err(format!("{} bytes, shorter than its fixed part", b.len()));
        }
        let body = &b[..b.len() - 4];
        if crc32c::crc32c(body) != u32_at(b, b.len() - 4) {
            return Err("its own checksum does not match (the sidecar is damaged)".into());
        }
        if u32_at(b, 0) != MAGIC || u32_at(b, 4) != VERSION {
            return Err("bad magic or unsupported version".into());
        }
        let range = u64::from(u32_at(b, 32));
        let n = u64_at(b, 40);
        if range == 0
            || Some(body.len() as u64) != n.checked_mul(4).and_then(|x| x.checked_add(FIXED as u64))
        {
            return Err("range size or count does not match the file length".into());
        }
        let data_end = u64_at(b, 16);
        if data_end.div_ceil(range) != n {
            return Err("range count does not cover data_end".into());
        }
        Ok(Sidecar {
            file_identifier: u32_at(b, 8),
            hash_seed: u32_at(b, 12),
            data_end,
            index_len: u64_at(b, 24),
            range,
            index_crc: u32_at(b, 36),
            log_crcs: (0..n as usize).map(|i| u32_at(b, FIXED + 4 * i)).collect(),
        })
    }

    /// Problems found comparing this sidecar with the files on disk.
    pub fn check(&self, log: &Path, index: &Path) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let log_len = std::fs::metadata(log)
            .map_err(|e| Error::io(log, "stat", e))?
            .len();
        let index_len = std::fs::metadata(index)
            .map_err(|e| Error::io(index, "stat", e))?
            .len();
        if log_len < self.data_end {
            problems.push(format!(
                "{}: {log_len} bytes, but the sidecar covers {} (truncated)",
                log.display(),
                self.data_end
            ));
        }
        let (got, _) = crcs(log, self.data_end.min(log_len), self.range)?;
        for (i, (g, want)) in got.iter().zip(&self.log_crcs).enumerate() {
            if g != want {
                let from = i as u64 * self.range;
                let to = (from + self.range).min(self.data_end);
                problems.push(format!(
                    "{}: bytes {from}..{to}: checksum mismatch (damaged)",
                    log.display()
                ));
            }
        }
        if index_len != self.index_len {
            problems.push(format!(
                "{}: {index_len} bytes, but the sidecar says {} (truncated, or rebuilt by another tool)",
                index.display(),
                self.index_len
            ));
        } else {
            let (_, crc) = crcs(index, index_len, self.range)?;
            if crc != self.index_crc {
                problems.push(format!(
                    "{}: checksum mismatch (damaged, or rebuilt by another tool)",
                    index.display()
                ));
            }
        }
        Ok(problems)
    }
}

/// Writes the sidecar of the table `base` (for tables written by other
/// tools; `TableWriter` writes its own).
pub fn write_sidecar(base: &Path) -> Result<()> {
    let (log, index) = table_paths(base);
    let s = Sidecar::compute(&log, &index)?;
    atomic_file::write(&sidecar_path(base), &s.to_bytes())
}

pub(crate) fn write_sidecar_files(log: &Path, index: &Path, out: &Path) -> Result<()> {
    let s = Sidecar::compute(log, index)?;
    atomic_file::write(out, &s.to_bytes())
}
