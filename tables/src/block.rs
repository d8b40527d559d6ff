//! Compression blocks of snappy and zstd logs: each block is one raw snappy
//! buffer or one zstd frame (level 3) of at most `compression_block_size`
//! uncompressed bytes.

use crate::error::{Error, Result};
use crate::header::Compression;
use std::path::Path;

/// zstd level sparkey uses.
const ZSTD_LEVEL: i32 = 3;

/// Compresses a log's blocks, keeping its coder state from one block to
/// the next (a zstd context is a large allocation to make per block).
pub struct BlockCompressor {
    compression: Compression,
    snappy: snap::raw::Encoder,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    out: Vec<u8>,
}

impl BlockCompressor {
    pub fn new(compression: Compression) -> std::io::Result<Self> {
        Ok(BlockCompressor {
            compression,
            snappy: snap::raw::Encoder::new(),
            zstd: match compression {
                Compression::Zstd => Some(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
                _ => None,
            },
            out: Vec::new(),
        })
    }

    /// The compressed form of one block (valid until the next call).
    pub fn compress(&mut self, data: &[u8]) -> std::io::Result<&[u8]> {
        self.out.clear();
        match self.compression {
            Compression::None => self.out.extend_from_slice(data),
            Compression::Snappy => {
                self.out.resize(snap::raw::max_compress_len(data.len()), 0);
                let n = self
                    .snappy
                    .compress(data, &mut self.out)
                    .map_err(std::io::Error::other)?;
                self.out.truncate(n);
            }
            Compression::Zstd => {
                let z = self.zstd.as_mut().expect("made for zstd");
                self.out
                    .reserve(zstd::zstd_safe::compress_bound(data.len()));
                z.compress_to_buffer(data, &mut self.out)?;
            }
        }
        Ok(&self.out)
    }
}

/// Decompresses one block into `out` (cleared first), refusing output
/// longer than `max_len` before allocating it: a hostile length field must
/// not make us allocate gigabytes.
pub fn decompress_into(
    c: Compression,
    data: &[u8],
    max_len: u64,
    out: &mut Vec<u8>,
    path: &Path,
    offset: u64,
) -> Result<()> {
    out.clear();
    let bad = |what: String| Error::corrupt(path, offset, what);
    match c {
        Compression::None => out.extend_from_slice(data),
        Compression::Snappy => {
            let n = snap::raw::decompress_len(data)
                .map_err(|e| bad(format!("snappy block does not decode: {e}")))?;
            if n as u64 > max_len {
                return Err(bad(format!(
                    "snappy block of {n} bytes over the block size {max_len}"
                )));
            }
            out.resize(n, 0);
            let got = snap::raw::Decoder::new()
                .decompress(data, out)
                .map_err(|e| bad(format!("snappy block does not decode: {e}")))?;
            out.truncate(got);
        }
        Compression::Zstd => {
            // sparkey writes frames with their content size; allow the
            // block size when a frame does not say.
            let n = match zstd::zstd_safe::get_frame_content_size(data) {
                Ok(Some(n)) => n,
                Ok(None) => max_len,
                Err(_) => return Err(bad("zstd block is not a zstd frame".into())),
            };
            if n > max_len {
                return Err(bad(format!(
                    "zstd block of {n} bytes over the block size {max_len}"
                )));
            }
            // A decoder context costs a large allocation to make: each
            // thread keeps one (a get decompresses one block).
            thread_local! {
                static ZSTD: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
                    const { std::cell::RefCell::new(None) };
            }
            out.reserve(n as usize);
            ZSTD.with(|cell| {
                let mut cell = cell.borrow_mut();
                if cell.is_none() {
                    *cell = Some(
                        zstd::bulk::Decompressor::new()
                            .map_err(|e| bad(format!("zstd decoder: {e}")))?,
                    );
                }
                let d = cell.as_mut().expect("made above");
                d.decompress_to_buffer(data, out)
                    .map_err(|e| bad(format!("zstd block does not decode: {e}")))
            })?;
        }
    }
    Ok(())
}
