//! Reading a log's entries: in order (a cursor), or one at an index address.
//! Every length and offset is checked against the committed range before
//! it is used.

use crate::block;
use crate::error::{Error, Result};
use crate::header::{Compression, LogHeader, LOG_HEADER_LEN};
use crate::limits::{MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::snappy_prefix::SnappyPrefix;
use crate::vlq;
use std::borrow::Cow;
use std::path::Path;

/// What a log entry does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Stores a value under a key, replacing an earlier one.
    Put,
    /// Removes a key.
    Delete,
}

/// The committed bytes of a log (exactly its first data_end bytes).
#[derive(Clone, Copy)]
pub struct LogData<'a> {
    pub bytes: &'a [u8],
    pub header: &'a LogHeader,
    pub path: &'a Path,
}

/// Where an entry is: its byte offset (uncompressed), or the offset of its
/// block's length VLQ and its ordinal among the entries starting there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub block: u64,
    pub ordinal: u64,
}

impl Location {
    /// The index address of this entry for `bits` entry-block bits.
    pub fn address(self, bits: u32) -> u64 {
        (self.block << bits) | self.ordinal
    }

    pub fn from_address(addr: u64, bits: u32) -> Location {
        let mask = if bits == 0 { 0 } else { (1u64 << bits) - 1 };
        Location {
            block: addr >> bits,
            ordinal: addr & mask,
        }
    }
}

/// One entry, its bytes borrowed from the log or a cursor's buffers.
#[derive(Debug)]
pub struct RawEntry<'e> {
    pub kind: EntryKind,
    pub key: &'e [u8],
    pub value: &'e [u8],
    pub loc: Location,
    /// Encoded length (VLQs + key + value), uncompressed measure.
    pub encoded_len: u64,
}

/// One entry read at an address: borrowed when the log is uncompressed.
#[derive(Debug)]
pub struct Entry<'a> {
    pub kind: EntryKind,
    pub key: Cow<'a, [u8]>,
    pub value: Cow<'a, [u8]>,
    pub encoded_len: u64,
}

/// The lengths an entry's two VLQs give: (kind, key_len, value_len, header bytes).
#[inline]
fn entry_header(bytes: &[u8], path: &Path, offset: u64) -> Result<(EntryKind, u64, u64, usize)> {
    // Short PUTs (key and value under 128 bytes) are most entries.
    if let [a @ 1..=0x7f, b @ 0..=0x7f, ..] = bytes {
        return Ok((EntryKind::Put, u64::from(a - 1), u64::from(*b), 2));
    }
    let (a, n1) = vlq::decode(bytes).map_err(|e| Error::corrupt(path, offset, e.to_string()))?;
    let (b, n2) =
        vlq::decode(&bytes[n1..]).map_err(|e| Error::corrupt(path, offset, e.to_string()))?;
    let (kind, klen, vlen) = if a == 0 {
        (EntryKind::Delete, b, 0)
    } else {
        (EntryKind::Put, a - 1, b)
    };
    if klen > MAX_KEY_LEN {
        return Err(Error::corrupt(
            path,
            offset,
            format!("key length {klen} over kivi's limit {MAX_KEY_LEN}"),
        ));
    }
    if vlen > MAX_VALUE_LEN {
        return Err(Error::corrupt(
            path,
            offset,
            format!("value length {vlen} over kivi's limit {MAX_VALUE_LEN}"),
        ));
    }
    Ok((kind, klen, vlen, n1 + n2))
}

impl<'a> LogData<'a> {
    pub fn new(bytes: &'a [u8], header: &'a LogHeader, path: &'a Path) -> Self {
        debug_assert_eq!(bytes.len() as u64, header.data_end);
        LogData {
            bytes,
            header,
            path,
        }
    }

    /// A cursor over the entries from the start of the data up to `end`
    /// (a data_end, at most the log's).
    pub fn cursor(self, end: u64) -> LogCursor<'a> {
        LogCursor::new(self, LOG_HEADER_LEN as u64, end.min(self.header.data_end))
    }

    /// The entry at index address `addr`.
    pub fn entry_at(self, addr: u64, bits: u32) -> Result<Entry<'a>> {
        let loc = Location::from_address(addr, bits);
        let end = self.header.data_end;
        if loc.block < LOG_HEADER_LEN as u64 || loc.block >= end {
            return Err(Error::corrupt(
                self.path,
                loc.block,
                format!("address {addr:#x} points outside the log data (84..{end})"),
            ));
        }
        if self.header.compression == Compression::None {
            if loc.ordinal != 0 {
                return Err(Error::corrupt(
                    self.path,
                    loc.block,
                    "entry ordinal in an uncompressed log",
                ));
            }
            let e = parse_plain(self, loc.block, end)?;
            return Ok(Entry {
                kind: e.kind,
                key: Cow::Borrowed(e.key),
                value: Cow::Borrowed(e.value),
                encoded_len: e.encoded_len,
            });
        }
        if let Some(e) = self.entry_in_block(loc) {
            return Ok(e);
        }
        let mut c = LogCursor::new(self, loc.block, end);
        loop {
            let Some(e) = c.next()? else {
                return Err(Error::corrupt(
                    self.path,
                    loc.block,
                    format!("no entry {} in the block", loc.ordinal),
                ));
            };
            if e.loc.block != loc.block {
                return Err(Error::corrupt(
                    self.path,
                    loc.block,
                    format!("block has fewer than {} entries", loc.ordinal + 1),
                ));
            }
            if e.loc.ordinal == loc.ordinal {
                return Ok(Entry {
                    kind: e.kind,
                    key: Cow::Owned(e.key.to_vec()),
                    value: Cow::Owned(e.value.to_vec()),
                    encoded_len: e.encoded_len,
                });
            }
        }
    }
}

impl LogData<'_> {
    /// The entry at `loc` of a compressed log when it lies whole in its
    /// block: the block is decompressed into this thread's buffer and the
    /// entries before it stepped over in a tight loop. `None` for anything
    /// else (an entry spilling over later blocks, or damage), which the
    /// cursor's path then reads or reports in full.
    fn entry_in_block(self, loc: Location) -> Option<Entry<'static>> {
        /// Bytes decoded at a time while stepping through a snappy block.
        const STEP: usize = 512;
        thread_local! {
            static BLOCK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let rest = &self.bytes[loc.block as usize..self.header.data_end as usize];
        let (len, n) = vlq::decode(rest).ok()?;
        let data = rest.get(n..n.checked_add(usize::try_from(len).ok()?)?)?;
        let max = self.header.compression_block_size as usize;
        BLOCK.with(|cell| {
            let mut buf = cell.borrow_mut();
            // Snappy blocks are decoded only as far as the entry (half the
            // block on average); zstd frames whole.
            let mut snappy = match self.header.compression {
                Compression::Snappy => Some(SnappyPrefix::new(data, max, &mut buf).ok()?),
                c => {
                    block::decompress_into(c, data, max as u64, &mut buf, self.path, loc.block)
                        .ok()?;
                    None
                }
            };
            // Makes at least `to` bytes ready (fewer at the block's end);
            // returns how many are.
            let mut fill = |buf: &mut Vec<u8>, to: usize| -> Option<usize> {
                match &mut snappy {
                    Some(d) => {
                        d.fill_to(to, buf).ok()?;
                        Some(d.decoded())
                    }
                    None => Some(buf.len()),
                }
            };
            let mut pos = 0usize;
            let mut ordinal = 0u64;
            let mut ready = fill(&mut buf, STEP)?;
            loop {
                if pos + 2 * vlq::MAX_LEN > ready {
                    ready = fill(&mut buf, pos + STEP)?;
                }
                let at = buf.get(pos..ready)?;
                let (kind, klen, vlen, hdr) = entry_header(at, self.path, 0).ok()?;
                let k0 = pos + hdr;
                let v0 = k0.checked_add(klen as usize)?;
                let end = v0.checked_add(vlen as usize)?;
                if end > ready {
                    ready = fill(&mut buf, end.max(pos + STEP))?;
                    if end > ready {
                        return None; // it spills over later blocks
                    }
                }
                if ordinal == loc.ordinal {
                    return Some(Entry {
                        kind,
                        key: Cow::Owned(buf[k0..v0].to_vec()),
                        value: Cow::Owned(buf[v0..end].to_vec()),
                        encoded_len: (end - pos) as u64,
                    });
                }
                pos = end;
                ordinal += 1;
            }
        })
    }
}

/// An uncompressed entry at `off`, which must end by `end`.
#[inline]
fn parse_plain(log: LogData<'_>, off: u64, end: u64) -> Result<RawEntry<'_>> {
    let at = &log.bytes[off as usize..end as usize];
    let (kind, klen, vlen, hdr) = entry_header(at, log.path, off)?;
    let total = hdr as u64 + klen + vlen;
    if total > end - off {
        return Err(Error::corrupt(
            log.path,
            off,
            format!("entry of {total} bytes runs past data_end {end}"),
        ));
    }
    let k0 = hdr;
    let v0 = k0 + klen as usize;
    Ok(RawEntry {
        kind,
        key: &at[k0..v0],
        value: &at[v0..v0 + vlen as usize],
        loc: Location {
            block: off,
            ordinal: 0,
        },
        encoded_len: total,
    })
}

/// Which buffer the cursor's current entry lies in.
#[derive(Debug, Clone, Copy)]
enum Src {
    /// The mapped log (uncompressed).
    Log,
    /// The current decompressed block.
    Block,
    /// `key_buf` / `value_buf` (an entry spilling over blocks).
    Spill,
}

#[derive(Debug, Clone)]
struct Current {
    src: Src,
    key: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
    kind: EntryKind,
    loc: Location,
    encoded_len: u64,
}

/// Entries in log order. A lending iterator: each entry borrows the cursor.
pub struct LogCursor<'a> {
    log: LogData<'a>,
    /// Next entry (uncompressed) or next block (compressed) offset.
    pos: u64,
    end: u64,
    block: Vec<u8>,
    block_off: u64,
    in_block: usize,
    ordinal: u64,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
    current: Option<Current>,
    /// Blocks decompressed so far.
    pub blocks_read: u64,
}

impl<'a> LogCursor<'a> {
    /// A cursor from `pos` (an entry start, or a block start when
    /// compressed) up to `end`.
    pub fn starting_at(log: LogData<'a>, pos: u64, end: u64) -> Self {
        Self::new(
            log,
            pos.max(LOG_HEADER_LEN as u64),
            end.min(log.header.data_end),
        )
    }

    fn new(log: LogData<'a>, pos: u64, end: u64) -> Self {
        LogCursor {
            log,
            pos,
            end,
            block: Vec::new(),
            block_off: 0,
            in_block: 0,
            ordinal: 0,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
            current: None,
            blocks_read: 0,
        }
    }

    /// Where the next block or entry starts.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Reads the block at `self.pos` into `self.block`.
    fn load_block(&mut self) -> Result<()> {
        let off = self.pos;
        let path = self.log.path;
        let rest = &self.log.bytes[off as usize..self.end as usize];
        let (len, n) = vlq::decode(rest)
            .map_err(|e| Error::corrupt(path, off, format!("block length: {e}")))?;
        if len > (rest.len() - n) as u64 {
            return Err(Error::corrupt(
                path,
                off,
                format!("block of {len} bytes runs past data_end {}", self.end),
            ));
        }
        let data = &rest[n..n + len as usize];
        let h = self.log.header;
        block::decompress_into(
            h.compression,
            data,
            u64::from(h.compression_block_size),
            &mut self.block,
            path,
            off,
        )?;
        if self.block.is_empty() {
            return Err(Error::corrupt(path, off, "block decompresses to 0 bytes"));
        }
        self.block_off = off;
        self.pos = off + n as u64 + len;
        self.in_block = 0;
        self.ordinal = 0;
        self.blocks_read += 1;
        Ok(())
    }

    /// The next entry, or `None` at the end.
    #[allow(clippy::should_implement_trait)] // lends borrowed entries, which `Iterator` cannot
    pub fn next(&mut self) -> Result<Option<RawEntry<'_>>> {
        if !self.advance()? {
            return Ok(None);
        }
        Ok(self.current())
    }

    /// The entry the last `advance` moved to.
    pub fn current(&self) -> Option<RawEntry<'_>> {
        let c = self.current.as_ref()?;
        let buf: (&[u8], &[u8]) = match c.src {
            Src::Log => (self.log.bytes, self.log.bytes),
            Src::Block => (&self.block, &self.block),
            Src::Spill => (&self.key_buf, &self.value_buf),
        };
        Some(RawEntry {
            kind: c.kind,
            key: &buf.0[c.key.clone()],
            value: &buf.1[c.value.clone()],
            loc: c.loc,
            encoded_len: c.encoded_len,
        })
    }

    /// Moves to the next entry; false at the end.
    pub fn advance(&mut self) -> Result<bool> {
        self.current = None;
        if self.log.header.compression == Compression::None {
            self.advance_plain()
        } else {
            self.advance_in_blocks()
        }
    }

    /// `advance` in an uncompressed log: the entry is read in place.
    fn advance_plain(&mut self) -> Result<bool> {
        if self.pos >= self.end {
            return Ok(false);
        }
        let off = self.pos;
        let e = parse_plain(self.log, off, self.end)?;
        let k0 = off as usize + (e.encoded_len as usize - e.key.len() - e.value.len());
        let v0 = k0 + e.key.len();
        self.current = Some(Current {
            src: Src::Log,
            key: k0..v0,
            value: v0..v0 + e.value.len(),
            kind: e.kind,
            loc: e.loc,
            encoded_len: e.encoded_len,
        });
        self.pos += e.encoded_len;
        Ok(true)
    }

    /// `advance` in a compressed log: the entry is read from the current
    /// block, or gathered from the blocks it spills over.
    fn advance_in_blocks(&mut self) -> Result<bool> {
        if self.in_block == self.block.len() {
            if self.pos >= self.end {
                return Ok(false);
            }
            self.load_block()?;
        }
        let path = self.log.path;
        let start = self.block_off;
        let loc = Location {
            block: start,
            ordinal: self.ordinal,
        };
        let (kind, klen, vlen, hdr) = entry_header(&self.block[self.in_block..], path, start)
            .map_err(|e| match e {
                Error::Corrupt { what, .. } => Error::corrupt(
                    path,
                    start,
                    format!("entry {} of the block: {what}", loc.ordinal),
                ),
                e => e,
            })?;
        self.ordinal += 1;
        self.in_block += hdr;
        let payload = klen + vlen;
        let avail = (self.block.len() - self.in_block) as u64;
        if payload <= avail {
            let k0 = self.in_block;
            let v0 = k0 + klen as usize;
            self.in_block = v0 + vlen as usize;
            self.current = Some(Current {
                src: Src::Block,
                key: k0..v0,
                value: v0..self.in_block,
                kind,
                loc,
                encoded_len: hdr as u64 + payload,
            });
            return Ok(true);
        }
        self.gather_spilled(loc, klen, vlen)?;
        self.current = Some(Current {
            src: Src::Spill,
            key: 0..self.key_buf.len(),
            value: 0..self.value_buf.len(),
            kind,
            loc,
            encoded_len: hdr as u64 + payload,
        });
        Ok(true)
    }

    /// Gathers the key and value of an entry (at `loc`) that spills over
    /// later blocks into `key_buf` and `value_buf`, never reserving more
    /// than has actually been read (the lengths may be hostile).
    fn gather_spilled(&mut self, loc: Location, klen: u64, vlen: u64) -> Result<()> {
        let path = self.log.path;
        let start = loc.block;
        self.key_buf.clear();
        self.value_buf.clear();
        let mut need_key = klen;
        let mut need_value = vlen;
        loop {
            let avail = self.block.len() - self.in_block;
            let k = need_key.min(avail as u64) as usize;
            self.key_buf
                .extend_from_slice(&self.block[self.in_block..self.in_block + k]);
            self.in_block += k;
            need_key -= k as u64;
            let avail = self.block.len() - self.in_block;
            let v = need_value.min(avail as u64) as usize;
            self.value_buf
                .extend_from_slice(&self.block[self.in_block..self.in_block + v]);
            self.in_block += v;
            need_value -= v as u64;
            if need_key == 0 && need_value == 0 {
                break;
            }
            if self.pos >= self.end {
                return Err(Error::corrupt(
                    path,
                    start,
                    format!("entry {} runs past data_end {}", loc.ordinal, self.end),
                ));
            }
            self.load_block()?;
        }
        // The writer flushes the block holding a spilled entry's tail at
        // once, so nothing may follow it there.
        if self.in_block != self.block.len() {
            return Err(Error::corrupt(
                path,
                self.block_off,
                "data after the tail of a spilled entry in its block",
            ));
        }
        Ok(())
    }
}
