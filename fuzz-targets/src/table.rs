//! Sealed tables (sparkey's format, kivi's sidecar): a table opened from
//! whatever its files hold, its blocks and its headers.

use crate::input::Input;
use kivi_tables::fuzzing::{decompress_into, sidecar_again, snappy_in_steps};
use kivi_tables::{
    build_index, verify, vlq, Compression, IndexHeader, IndexOptions, LogHeader, Table,
    INDEX_HEADER_LEN, LOG_HEADER_LEN,
};
use std::path::{Path, PathBuf};

/// The first bytes of a log, an index and a sidecar (their magics,
/// little-endian): where `table_open` cuts its input.
pub const LOG_MAGIC: [u8; 4] = 0x49B3_9C95u32.to_le_bytes();
pub const INDEX_MAGIC: [u8; 4] = 0x9A11_318Fu32.to_le_bytes();
pub const SIDECAR_MAGIC: [u8; 4] = *b"KSUM";

fn find(data: &[u8], magic: &[u8; 4], from: usize) -> Option<usize> {
    (from..data.len().saturating_sub(3)).find(|&i| data[i..i + 4] == *magic)
}

thread_local! {
    /// Where a thread's table files are written, each input over the last:
    /// in memory (/dev/shm) where there is one, as the files' fsyncs are
    /// most of an input's time on a disk.
    static DIR: tempfile::TempDir = {
        let shm = Path::new("/dev/shm");
        let builder = tempfile::Builder::new().prefix("kivi-fuzz-").tempdir_in(shm);
        builder.or_else(|_| tempfile::tempdir()).expect("a temporary directory")
    };
}

fn scratch() -> PathBuf {
    DIR.with(|d| d.path().to_path_buf())
}

/// A table's files laid end to end: `flags`, then the log (from its
/// magic), the index (from its magic) and, if there is one, the sidecar
/// (from "KSUM"). Without a sidecar the target writes the right one for
/// the files, so that `verify` gets past the checksums to its structural
/// checks. Flag 1: an index is also built from the log alone (flag 2: in
/// many small regions, through temporary files), and that table read too.
///
/// The table is opened and verified, its pairs iterated and looked up one
/// by one and in groups. When `verify` finds no problem, reading must
/// succeed and agree: as many pairs as the index says, each found by `get`
/// with the value the iteration gave.
pub fn table_open(data: &[u8]) {
    let log_at = find(data, &LOG_MAGIC, 0).unwrap_or(0);
    let flags = data[..log_at].first().copied().unwrap_or(0);
    let index_at = find(data, &INDEX_MAGIC, log_at + 4).unwrap_or(data.len());
    let sidecar_at = find(data, &SIDECAR_MAGIC, index_at + 4);
    let dir = scratch();
    let base = dir.join("t");
    let (log, index) = (dir.join("t.spl"), dir.join("t.spi"));
    std::fs::write(&log, &data[log_at..index_at]).expect("scratch file");
    let index_end = sidecar_at.unwrap_or(data.len());
    std::fs::write(&index, &data[index_at..index_end]).expect("scratch file");
    let sidecar = kivi_tables::sidecar_path(&base);
    match sidecar_at {
        Some(at) => std::fs::write(&sidecar, &data[at..]).expect("scratch file"),
        None => {
            let _ = std::fs::remove_file(&sidecar);
            let _ = kivi_tables::write_sidecar(&base);
        }
    }
    read_table(&base);
    if flags & 1 != 0 {
        let built = dir.join("b");
        let _ = std::fs::remove_file(kivi_tables::sidecar_path(&built));
        let (_, built_index) = kivi_tables::table_paths(&built);
        let opts = IndexOptions {
            seed: Some(7),
            memory_limit: if flags & 2 != 0 { 1 << 10 } else { 1 << 20 },
            incremental: false,
            temp_dir: Some(dir.clone()),
            ..IndexOptions::default()
        };
        if build_index(&log, &built_index, &opts).is_ok() {
            std::fs::copy(&log, kivi_tables::table_paths(&built).0).expect("scratch file");
            read_table(&built);
        }
    }
}

/// Opens, verifies and reads the table at `base`; see `table_open`.
fn read_table(base: &Path) {
    let report = verify(base);
    let Ok(t) = Table::open(base) else {
        assert!(!report.is_ok(), "verified, yet does not open");
        return;
    };
    let mut pairs = Vec::new();
    let mut it = t.iter();
    let iterated = loop {
        match it.next() {
            Ok(Some((k, v))) => pairs.push((k.to_vec(), v.to_vec())),
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    let singles: Vec<_> = pairs.iter().map(|(k, _)| t.get(k)).collect();
    let keys: Vec<&[u8]> = pairs.iter().map(|(k, _)| k.as_slice()).collect();
    let many = t.get_many(&keys);
    let _ = t.get(b"a key no table of the corpus holds");
    if !report.is_ok() {
        return;
    }
    assert!(iterated, "verified, yet iteration fails");
    assert_eq!(
        pairs.len() as u64,
        t.len(),
        "verified, yet pairs miscounted"
    );
    let many = many.expect("verified, yet get_many fails");
    for (((k, v), single), grouped) in pairs.iter().zip(singles).zip(many) {
        let single = single.expect("verified, yet get fails");
        assert_eq!(single.as_deref(), Some(v.as_slice()), "get {k:?}");
        assert_eq!(grouped.as_deref(), Some(v.as_slice()), "get_many {k:?}");
    }
}

/// A compressed block or a VLQ: `u8 kind | u16 max_len`, then the bytes.
/// Kind 0: a VLQ. Kind 1: a snappy block, decoded by sealed tables' own
/// prefix decoder (in steps) and whole, both held to the `snap` crate's
/// answer. Kind 2: a zstd block. Kind 3: an uncompressed one.
pub fn table_block(data: &[u8]) {
    let mut input = Input(data);
    let kind = input.u8() % 4;
    let max_len = u64::from(input.u16());
    let bytes = input.rest();
    let path = Path::new("fuzz");
    let mut out = Vec::new();
    match kind {
        0 => {
            if let Ok((v, n)) = vlq::decode(bytes) {
                assert!(n >= 1 && n <= bytes.len() && n <= vlq::MAX_LEN);
                let mut again = Vec::new();
                vlq::encode(v, &mut again);
                assert_eq!(again.len(), vlq::len(v));
                assert_eq!(vlq::decode(&again), Ok((v, again.len())));
            }
        }
        1 => snappy(bytes, max_len as usize),
        2 => {
            if decompress_into(Compression::Zstd, bytes, max_len, &mut out, path, 0).is_ok() {
                assert!(
                    out.len() as u64 <= max_len,
                    "{} bytes over {max_len}",
                    out.len()
                );
            }
        }
        _ => {
            decompress_into(Compression::None, bytes, max_len, &mut out, path, 0)
                .expect("an uncompressed block");
            assert_eq!(out, bytes);
        }
    }
}

/// The prefix decoder and `decompress_into` decode a snappy block to what
/// `snap` does, or refuse it with `snap`, within `max_len`.
fn snappy(bytes: &[u8], max_len: usize) {
    let expected = snap::raw::Decoder::new()
        .decompress_vec(bytes)
        .ok()
        .filter(|v| v.len() <= max_len);
    let mut out = Vec::new();
    let whole = decompress_into(
        Compression::Snappy,
        bytes,
        max_len as u64,
        &mut out,
        Path::new("fuzz"),
        0,
    );
    assert_eq!(
        whole.ok().map(|_| out),
        expected,
        "decompress_into against snap"
    );
    // In steps of a size the input picks, as a lookup asks for more.
    let step = usize::from(bytes.first().copied().unwrap_or(0) % 64) + 1;
    let prefix = snappy_in_steps(bytes, max_len, step);
    match (&expected, prefix) {
        (Some(e), Ok(got)) => assert_eq!(&got, e, "prefix decoder against snap"),
        (None, Ok(got)) => panic!("prefix decoder read {} bytes snap refuses", got.len()),
        (Some(_), Err(e)) => panic!("prefix decoder refused what snap reads: {e}"),
        (None, Err(_)) => {}
    }
}

/// A header or a sidecar: `u8 kind | u64 file_len`, then the bytes. Kind 0:
/// a log header; 1: an index header, each in a file of `file_len` bytes;
/// 2: a sidecar; 3: a sidecar whose checksum the target sets. Each that
/// parses is exactly the bytes its value is written as.
pub fn table_headers(data: &[u8]) {
    let mut input = Input(data);
    let kind = input.u8() % 4;
    let file_len = input.u64();
    let bytes = input.rest();
    let path = Path::new("fuzz");
    match kind {
        0 => {
            if let Ok(h) = LogHeader::parse(bytes, file_len, path) {
                assert_eq!(h.to_bytes(), bytes[..LOG_HEADER_LEN], "{h:?} written again");
            }
        }
        1 => {
            if let Ok(h) = IndexHeader::parse(bytes, file_len, path) {
                assert_eq!(
                    h.to_bytes(),
                    bytes[..INDEX_HEADER_LEN],
                    "{h:?} written again"
                );
            }
        }
        _ => {
            let mut bytes = bytes.to_vec();
            if kind == 3 && bytes.len() >= 4 {
                let body = bytes.len() - 4;
                let crc = crc32c::crc32c(&bytes[..body]);
                bytes[body..].copy_from_slice(&crc.to_le_bytes());
            }
            if let Ok(again) = sidecar_again(&bytes) {
                assert_eq!(again, bytes, "a sidecar written again");
            }
        }
    }
}
