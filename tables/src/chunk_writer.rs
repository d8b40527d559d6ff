//! `ChunkWriter`: the log's write buffer, which hands the kernel whole
//! 2 MiB chunks at 2 MiB-aligned file offsets.
//!
//! Why not `BufWriter`: a table is read through a memory map, and a random
//! get over a large table pays for its TLB misses as much as for its cache
//! misses. On kernels whose page cache holds large folios for the file
//! system (ext4 since Linux 6.16, XFS for longer), a buffered write of a
//! whole aligned 2 MiB range is cached as one 2 MiB folio, and any process
//! that maps the file then maps it with huge pages (one TLB entry for 512
//! pages). `BufWriter` flushes 1 MiB at a time at whatever offset it has
//! reached, so the log's cache ended up in small folios and every reader
//! of a freshly written table mapped it with 4 KiB pages. A 100M-pair
//! table's random gets measured 25% faster over the huge-page map (see
//! docs/decisions/0013-table-log-in-aligned-2mib-writes.md). On other
//! kernels this is simply a
//! 2 MiB write buffer.

use std::fs::File;
use std::io::{self, Write};

/// Bytes per write: the x86_64 and arm64 (4 KiB base page) huge-page size.
pub const CHUNK: usize = 2 << 20;

/// Appends to a file from offset 0 in whole `CHUNK`s; the tail goes out in
/// `into_inner`.
pub struct ChunkWriter {
    file: File,
    /// Bytes not yet written; they start at a `CHUNK`-aligned offset,
    /// since everything before them went out in whole chunks.
    buf: Vec<u8>,
}

impl ChunkWriter {
    /// Writes through `file`'s cursor, which must be at offset 0.
    pub fn new(file: File) -> ChunkWriter {
        ChunkWriter {
            file,
            buf: Vec::with_capacity(CHUNK),
        }
    }

    pub fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let take = (CHUNK - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.buf.len() == CHUNK {
                self.file.write_all(&self.buf)?;
                self.buf.clear();
            }
            debug_assert!(self.buf.len() < CHUNK);
        }
        Ok(())
    }

    /// Writes the last, partial chunk and gives the file back.
    pub fn into_inner(mut self) -> io::Result<File> {
        self.file.write_all(&self.buf)?;
        Ok(self.file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};

    #[test]
    fn every_byte_lands_in_order_across_chunk_boundaries() {
        let f = tempfile::tempfile().expect("temp file");
        let mut w = ChunkWriter::new(f.try_clone().expect("clone"));
        let mut want = Vec::new();
        // Pieces of awkward sizes, one bigger than a chunk.
        for (i, len) in [84, 1, CHUNK - 85, 7, CHUNK + 13, 100_000]
            .into_iter()
            .enumerate()
        {
            let piece: Vec<u8> = (0..len).map(|j| (i * 31 + j * 7) as u8).collect();
            w.write_all(&piece).expect("write");
            want.extend_from_slice(&piece);
        }
        // Only whole chunks have gone out so far.
        let before = f.metadata().expect("stat").len();
        assert_eq!(before % CHUNK as u64, 0);
        assert_eq!(before, 2 * CHUNK as u64);
        let mut f = w.into_inner().expect("flush");
        f.seek(SeekFrom::Start(0)).expect("seek");
        let mut got = Vec::new();
        f.read_to_end(&mut got).expect("read");
        assert!(got == want, "file differs from what was written");
    }
}
