//! `TableWriter`: appends puts and deletes to a new log, then builds its
//! index and checksum sidecar. Everything is written under temporary
//! names, fsync'd, and renamed into place (log, index, sidecar), then the
//! directory is fsync'd: existing files are never rewritten in place, so
//! readers of an older table keep working. Between the renames a reader
//! may see the new log with the old index; the file identifiers differ, so
//! it gets "file identifier mismatch", never wrong data.

use crate::atomic_file::{self, TempGuard};
use crate::block;
use crate::chunk_writer::ChunkWriter;
use crate::error::{Error, Result};
use crate::header::{Compression, IndexHeader, LogHeader, LOG_HEADER_LEN};
use crate::index_build::{build_index_from, BuildReport, IndexOptions, MappedLog};
use crate::limits::{
    DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE, MAX_KEY_LEN, MAX_VALUE_LEN, MIN_BLOCK_SIZE,
};
use crate::reader::{strip_ext, table_paths, Table};
use crate::sidecar;
use crate::vlq;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How to write a table.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// How the log's data is stored (default: uncompressed).
    pub compression: Compression,
    /// Uncompressed bytes per compression block (ignored when uncompressed).
    pub block_size: u32,
    /// How the index is built (memory limit, temporary files).
    pub index: IndexOptions,
    /// Write the checksum sidecar (`BASE.kvsum`); on by default.
    pub sidecar: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            compression: Compression::None,
            block_size: DEFAULT_BLOCK_SIZE,
            index: IndexOptions::default(),
            sidecar: true,
        }
    }
}

/// What `finish` wrote.
#[derive(Debug, Clone)]
pub struct TableInfo {
    /// The log's header as written.
    pub log: LogHeader,
    /// The index's header as written.
    pub index: IndexHeader,
    /// How the index was built.
    pub build: BuildReport,
}

/// Writes one new table. Dropping it without `finish` leaves no files.
pub struct TableWriter {
    base: PathBuf,
    opts: WriterOptions,
    guard: TempGuard,
    out: ChunkWriter,
    header: LogHeader,
    /// The compression block being filled.
    block: Vec<u8>,
    block_entries: u32,
    scratch: Vec<u8>,
    compressor: block::BlockCompressor,
}

impl TableWriter {
    /// Starts `BASE.spl` (under a temporary name until `finish`).
    pub fn create(base: impl AsRef<Path>, opts: WriterOptions) -> Result<TableWriter> {
        let base = strip_ext(base.as_ref());
        if opts.compression != Compression::None
            && (opts.block_size < MIN_BLOCK_SIZE || u64::from(opts.block_size) > MAX_BLOCK_SIZE)
        {
            return Err(Error::InvalidArgument(format!(
                "block size {} outside {MIN_BLOCK_SIZE}..={MAX_BLOCK_SIZE}",
                opts.block_size
            )));
        }
        let (log_path, _) = table_paths(&base);
        let guard = TempGuard::beside(&log_path);
        let tmp = guard.path().to_path_buf();
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::io(&tmp, "create", e))?;
        let header = LogHeader::new(rand::random(), opts.compression, opts.block_size);
        let compressor = block::BlockCompressor::new(opts.compression)
            .map_err(|e| Error::io(&tmp, "start compressor", e))?;
        // Whole aligned 2 MiB writes, so readers can map the log with huge
        // pages (see chunk_writer.rs).
        let mut out = ChunkWriter::new(f);
        out.write_all(&header.to_bytes())
            .map_err(|e| Error::io(&tmp, "write", e))?;
        Ok(TableWriter {
            base,
            block: Vec::with_capacity(if opts.compression == Compression::None {
                0
            } else {
                opts.block_size as usize
            }),
            opts,
            guard,
            out,
            header,
            block_entries: 0,
            scratch: Vec::new(),
            compressor,
        })
    }

    /// Appends a PUT of `value` under `key`; a later PUT or DELETE of the
    /// key wins. Fails with [`Error::TooLarge`] past the key or value limit
    /// ([`limits`](crate::limits)).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_len("key", key.len(), MAX_KEY_LEN)?;
        check_len("value", value.len(), MAX_VALUE_LEN)?;
        let len = self.add(key.len() as u64 + 1, value.len() as u64, key, value)?;
        let h = &mut self.header;
        h.num_puts += 1;
        h.put_size += len;
        h.max_key_len = h.max_key_len.max(key.len() as u64);
        h.max_value_len = h.max_value_len.max(value.len() as u64);
        Ok(())
    }

    /// Appends a DELETE of `key`: a PUT of it before is no longer found.
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        check_len("key", key.len(), MAX_KEY_LEN)?;
        let len = self.add(0, key.len() as u64, key, &[])?;
        self.header.num_deletes += 1;
        self.header.delete_size += len;
        Ok(())
    }

    fn write_out(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(self.guard.path(), "write", e))?;
        self.header.data_end += bytes.len() as u64;
        Ok(())
    }

    /// Appends one entry; returns its encoded length.
    fn add(&mut self, a: u64, b: u64, key: &[u8], value: &[u8]) -> Result<u64> {
        let mut hdr = std::mem::take(&mut self.scratch);
        hdr.clear();
        vlq::encode(a, &mut hdr);
        vlq::encode(b, &mut hdr);
        let total = (hdr.len() + key.len() + value.len()) as u64;
        if self.header.compression == Compression::None {
            self.write_out(&hdr)?;
            self.write_out(key)?;
            self.write_out(value)?;
            self.scratch = hdr;
            return Ok(total);
        }
        let bs = self.opts.block_size as usize;
        // The cut rules of spec §1.3: the two VLQs never straddle blocks,
        // and an entry that fits an empty block never straddles either.
        let free = bs - self.block.len();
        if free < hdr.len() || (total <= bs as u64 && total > free as u64) {
            self.flush_block()?;
        }
        self.block_entries += 1;
        self.header.max_entries_per_block =
            self.header.max_entries_per_block.max(self.block_entries);
        self.block.extend_from_slice(&hdr);
        let mut spilled = false;
        for part in [key, value] {
            let mut rest = part;
            while !rest.is_empty() {
                let room = bs - self.block.len();
                if room == 0 {
                    self.flush_block()?;
                    spilled = true;
                    continue;
                }
                let n = room.min(rest.len());
                self.block.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
            }
        }
        if spilled {
            // The block holding a spilled entry's tail goes out at once.
            self.flush_block()?;
        }
        self.scratch = hdr;
        Ok(total)
    }

    fn flush_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let path = self.guard.path();
        let c = self
            .compressor
            .compress(&self.block)
            .map_err(|e| Error::io(path, "compress block", e))?;
        let mut len = Vec::with_capacity(vlq::MAX_LEN);
        vlq::encode(c.len() as u64, &mut len);
        for part in [&len[..], c] {
            self.out
                .write_all(part)
                .map_err(|e| Error::io(path, "write", e))?;
            self.header.data_end += part.len() as u64;
        }
        self.block.clear();
        self.block_entries = 0;
        Ok(())
    }

    /// Writes out the log, builds the index and the sidecar, and renames
    /// all three into place.
    pub fn finish(mut self) -> Result<TableInfo> {
        self.flush_block()?;
        let tmp_log = self.guard.path().to_path_buf();
        let mut f = self
            .out
            .into_inner()
            .map_err(|e| Error::io(&tmp_log, "write", e))?;
        f.seek(SeekFrom::Start(0))
            .map_err(|e| Error::io(&tmp_log, "seek", e))?;
        f.write_all(&self.header.to_bytes())
            .map_err(|e| Error::io(&tmp_log, "write header", e))?;
        atomic_file::sync_file(&f, &tmp_log)?;
        drop(f);
        debug_assert!(self.header.data_end >= LOG_HEADER_LEN as u64);

        let (log_path, index_path) = table_paths(&self.base);
        let mut index_guard = TempGuard::beside(&index_path);
        let tmp_index = index_guard.path().to_path_buf();
        let log = MappedLog::open(&tmp_log)?;
        let mut iopts = self.opts.index.clone();
        iopts.incremental = false;
        if iopts.temp_dir.is_none() {
            iopts.temp_dir = Some(atomic_file::parent_dir(&index_path).to_path_buf());
        }
        let build = build_index_from(&log, &tmp_index, &iopts)?;
        drop(log);
        let side = if self.opts.sidecar {
            let p = sidecar::sidecar_path(&self.base);
            let g = TempGuard::beside(&p);
            let tmp = g.path().to_path_buf();
            sidecar::write_sidecar_files(&tmp_log, &tmp_index, &tmp)?;
            Some((g, tmp, p))
        } else {
            None
        };
        atomic_file::rename(&tmp_log, &log_path)?;
        self.guard.disarm();
        atomic_file::rename(&tmp_index, &index_path)?;
        index_guard.disarm();
        match side {
            Some((mut g, tmp, p)) => {
                atomic_file::rename(&tmp, &p)?;
                g.disarm();
            }
            None => {
                // A stale sidecar would describe the old table.
                let p = sidecar::sidecar_path(&self.base);
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(&p, "remove stale sidecar", e)),
                }
            }
        }
        atomic_file::sync_dir(atomic_file::parent_dir(&log_path))?;
        Ok(TableInfo {
            log: self.header.clone(),
            index: build.header.clone(),
            build,
        })
    }
}

fn check_len(what: &'static str, len: usize, max: u64) -> Result<()> {
    if len as u64 > max {
        return Err(Error::TooLarge {
            what,
            len: len as u64,
            max,
        });
    }
    Ok(())
}

/// Copies only the live pairs of `src` into a new table `dst` (so deleted
/// keys stay deleted, unlike sparkey's `rewrite`), in log order.
/// `progress` is called with the number of pairs copied so far.
pub fn rewrite(
    src: &Path,
    dst: &Path,
    opts: WriterOptions,
    mut progress: impl FnMut(u64),
) -> Result<TableInfo> {
    let (sl, _) = table_paths(src);
    let (dl, _) = table_paths(dst);
    if sl == dl {
        return Err(Error::InvalidArgument(
            "rewrite needs a different destination".into(),
        ));
    }
    let t = Table::open(src)?;
    let mut w = TableWriter::create(dst, opts)?;
    let mut it = t.iter();
    let mut n = 0u64;
    while let Some((k, v)) = it.next()? {
        w.put(k, v)?;
        n += 1;
        if n.is_multiple_of(4096) {
            progress(n);
        }
    }
    progress(n);
    w.finish()
}
