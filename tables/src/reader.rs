//! `Table`: a sealed table opened for reading. Both files are memory-mapped
//! and never written through the maps; any number of threads share one
//! `Table` (`Send + Sync`) and look keys up concurrently.
//!
//! # Why the mmap is sound, and its one caveat
//! `memmap2::Mmap::map` is `unsafe` because the bytes may change under us
//! if the file is modified while mapped. kivi never modifies a table file
//! in place: writers create new files under temporary names and rename
//! them over the old ones, so a reader keeps the old inode, whose bytes
//! never change. Every offset and length read from the maps is checked
//! against the mapped length before use, so even arbitrary contents cannot
//! make us read out of bounds. What we cannot defend against is another
//! program *truncating* a mapped file (sparkey's own append, or a careless
//! `cp` or `truncate` onto the same inode): the kernel then delivers
//! SIGBUS on touching a page past the new end, which kills the process.
//! Readers of tables that other tools may append to in place should copy
//! them first or not share the inode.

use crate::bytes::read_le;
use crate::error::{Error, Result};
use crate::hash::HashSize;
use crate::header::{Compression, IndexHeader, LogHeader, INDEX_HEADER_LEN, LOG_HEADER_LEN};
use crate::log::{EntryKind, LogCursor, LogData};
use crate::prefetch::prefetch;
use crate::robin::displacement;
use memmap2::{Mmap, MmapOptions};
use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The file names of a table whose base name is `base` (a trailing
/// `.spl` or `.spi` is taken off first).
pub fn table_paths(base: &Path) -> (PathBuf, PathBuf) {
    let b = strip_ext(base);
    (with_suffix(&b, ".spl"), with_suffix(&b, ".spi"))
}

pub(crate) fn strip_ext(base: &Path) -> PathBuf {
    match base.extension().and_then(|e| e.to_str()) {
        Some("spl") | Some("spi") => base.with_extension(""),
        _ => base.to_path_buf(),
    }
}

pub(crate) fn with_suffix(base: &Path, suffix: &str) -> PathBuf {
    let mut s = base.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

fn open_and_len(path: &Path) -> Result<(File, u64)> {
    let f = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let len = f.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
    Ok((f, len))
}

pub(crate) fn read_prefix(f: &File, len: u64, n: usize, path: &Path) -> Result<Vec<u8>> {
    let n = n.min(len as usize);
    let mut buf = vec![0u8; n];
    f.read_exact_at(&mut buf, 0)
        .map_err(|e| Error::io(path, "read header", e))?;
    Ok(buf)
}

pub(crate) fn map(f: &File, len: u64, path: &Path) -> Result<Mmap> {
    let len = usize::try_from(len).map_err(|_| Error::corrupt(path, 0, "file too large to map"))?;
    // SAFETY: see the module documentation: kivi never modifies table
    // files in place, all reads are bounds-checked against `len`, and the
    // only hazard left (truncation by another program) is documented.
    unsafe { MmapOptions::new().len(len).map(f) }.map_err(|e| Error::io(path, "mmap", e))
}

/// Opens and checks a log's header and maps its committed bytes.
pub(crate) fn map_log(path: &Path) -> Result<(LogHeader, Option<Mmap>)> {
    let (f, len) = open_and_len(path)?;
    let head = read_prefix(&f, len, LOG_HEADER_LEN, path)?;
    let h = LogHeader::parse(&head, len, path)?;
    let m = map(&f, h.data_end, path)?;
    Ok((h, Some(m)))
}

/// Opens and checks an index's header and maps it.
pub(crate) fn map_index(path: &Path) -> Result<(IndexHeader, Mmap)> {
    let (f, len) = open_and_len(path)?;
    let head = read_prefix(&f, len, INDEX_HEADER_LEN, path)?;
    let h = IndexHeader::parse(&head, len, path)?;
    let used = INDEX_HEADER_LEN as u64 + h.hash_capacity * h.slot_size();
    let m = map(&f, used, path)?;
    Ok((h, m))
}

/// Keys `Table::get_many` looks up together: enough misses in flight to
/// cover memory latency, few enough that the group's slots stay cached.
const GET_GROUP: usize = 16;

/// A sealed table open for reading.
pub struct Table {
    log_path: PathBuf,
    index_path: PathBuf,
    log_header: LogHeader,
    index_header: IndexHeader,
    log_map: Mmap,
    index_map: Mmap,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("log", &self.log_path)
            .field("index", &self.index_path)
            .finish()
    }
}

impl Table {
    /// Opens `BASE.spl` and `BASE.spi`.
    pub fn open(base: impl AsRef<Path>) -> Result<Table> {
        let (log, index) = table_paths(base.as_ref());
        Table::open_files(&log, &index)
    }

    /// Opens a log and its index by their full names.
    pub fn open_files(log_path: &Path, index_path: &Path) -> Result<Table> {
        let (log_header, log_map) = map_log(log_path)?;
        let (index_header, index_map) = map_index(index_path)?;
        index_header.check_against(&log_header, log_path, index_path)?;
        Ok(Table {
            log_path: log_path.to_path_buf(),
            index_path: index_path.to_path_buf(),
            log_header,
            index_header,
            log_map: log_map.expect("mapped"),
            index_map,
        })
    }

    /// The log's (`.spl`) header, as read and checked at open.
    pub fn log_header(&self) -> &LogHeader {
        &self.log_header
    }

    /// The index's (`.spi`) header, as read and checked at open.
    pub fn index_header(&self) -> &IndexHeader {
        &self.index_header
    }

    /// The log file opened.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The index file opened.
    pub fn index_path(&self) -> &Path {
        &self.index_path
    }

    /// Live keys.
    pub fn len(&self) -> u64 {
        self.index_header.num_entries
    }

    /// Whether the table holds no live key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn log_data(&self) -> LogData<'_> {
        LogData::new(&self.log_map, &self.log_header, &self.log_path)
    }

    /// Slot `s`: (stored hash, address).
    #[inline]
    pub(crate) fn slot(&self, s: u64) -> (u64, u64) {
        let hs = self.index_header.hash_size.bytes() as usize;
        let b = self.slot_bytes(s);
        (read_le(&b[..hs]), read_le(&b[hs..]))
    }

    /// The bytes of slot `s` (< capacity).
    #[inline]
    fn slot_bytes(&self, s: u64) -> &[u8] {
        let ss = self.index_header.slot_size() as usize;
        // In bounds: open checked that capacity × slot size fits the map.
        let at = INDEX_HEADER_LEN + s as usize * ss;
        &self.index_map[at..at + ss]
    }

    pub(crate) fn hash_of(&self, key: &[u8]) -> u64 {
        let h = &self.index_header;
        h.hash_size.hash(key, h.hash_seed)
    }

    /// Walks the probe sequence of `hash`, calling `hit(slot, addr)` for
    /// each slot with an equal stored hash until it returns true. Stops at
    /// an empty slot, when our probe distance passes the resident's, or
    /// after capacity probes (a corrupt table could otherwise loop for ever).
    pub(crate) fn probe(
        &self,
        hash: u64,
        mut hit: impl FnMut(u64, u64) -> Result<bool>,
    ) -> Result<Option<u64>> {
        let cap = self.index_header.hash_capacity;
        let mut s = hash % cap;
        for disp in 0..cap {
            let (h2, a2) = self.slot(s);
            if a2 == 0 {
                return Ok(None);
            }
            if h2 == hash && hit(s, a2)? {
                return Ok(Some(s));
            }
            if disp > displacement(s, h2, cap) {
                return Ok(None);
            }
            s = if s + 1 == cap { 0 } else { s + 1 };
        }
        Ok(None)
    }

    /// The value stored under `key`: borrowed from the map when the log is
    /// uncompressed, decompressed into a new buffer otherwise. Absent keys
    /// usually touch only the index (the stored hash is compared first).
    pub fn get(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>> {
        self.get_hashed(key, self.hash_of(key))
    }

    /// The values of many keys, in the order asked: the same answers as
    /// `get` on each, but the index slots of a group of keys are fetched
    /// from memory together, then their log entries, so a batch of random
    /// lookups waits for memory about once per group instead of twice per
    /// key. Absent keys are `None`.
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Cow<'_, [u8]>>>> {
        let cap = self.index_header.hash_capacity;
        let mut out = Vec::with_capacity(keys.len());
        let mut hashes = [0u64; GET_GROUP];
        for group in keys.chunks(GET_GROUP) {
            for (h, k) in hashes.iter_mut().zip(group) {
                *h = self.hash_of(k.as_ref());
                prefetch(self.slot_bytes(*h % cap).as_ptr());
            }
            for &h in &hashes[..group.len()] {
                // The first slot with an equal stored hash is almost always
                // the key's own: bring its entry in too.
                if let Ok(Some(s)) = self.probe(h, |_, _| Ok(true)) {
                    let bits = self.index_header.entry_block_bits;
                    let loc = crate::log::Location::from_address(self.slot(s).1, bits);
                    if let Some(b) = self.log_map.get(loc.block as usize) {
                        prefetch(b);
                    }
                }
            }
            for (k, &h) in group.iter().zip(&hashes) {
                out.push(self.get_hashed(k.as_ref(), h)?);
            }
        }
        Ok(out)
    }

    fn get_hashed(&self, key: &[u8], hash: u64) -> Result<Option<Cow<'_, [u8]>>> {
        if self.log_header.compression == Compression::None
            && self.index_header.entry_block_bits == 0
        {
            return self.get_plain(key, hash);
        }
        let bits = self.index_header.entry_block_bits;
        let mut found = None;
        self.probe(hash, |s, addr| {
            found = self.value_if_key(s, hash, addr, bits, key)?;
            Ok(found.is_some())
        })?;
        Ok(found)
    }

    /// Where slot `s` lies in the index file.
    fn slot_offset(&self, s: u64) -> u64 {
        INDEX_HEADER_LEN as u64 + s * self.index_header.slot_size()
    }

    /// The value of the entry at `addr`, where slot `s` of stored hash
    /// `hash` points, if its key is `key`. An error if the address lies
    /// outside the log (the slot is damaged), if the entry cannot be read
    /// or is a DELETE (no slot points at one), or if its key is another
    /// that does not hash to `hash` (a slot holds the hash of its entry's
    /// key, so the slot or the entry is damaged: a lookup of the key the
    /// slot was made for would otherwise answer "absent").
    fn value_if_key(
        &self,
        s: u64,
        hash: u64,
        addr: u64,
        bits: u32,
        key: &[u8],
    ) -> Result<Option<Cow<'_, [u8]>>> {
        let block = crate::log::Location::from_address(addr, bits).block;
        let end = self.log_header.data_end;
        if block < LOG_HEADER_LEN as u64 || block >= end {
            return Err(Error::corrupt(
                &self.index_path,
                self.slot_offset(s),
                format!(
                    "slot {s}'s address {addr:#x} points outside the log data ({LOG_HEADER_LEN}..{end})"
                ),
            ));
        }
        let e = self
            .log_data()
            .entry_at(addr, bits)
            .map_err(|e| self.reached_from_slot(e, s))?;
        if e.kind == EntryKind::Delete {
            return Err(Error::corrupt(
                &self.index_path,
                self.slot_offset(s),
                format!(
                    "index slot {s} points at a DELETE entry (log offset {block} of {}): the slot \
                     or the entry is damaged",
                    self.log_path.display()
                ),
            ));
        }
        if e.key.as_ref() == key {
            return Ok(Some(e.value));
        }
        self.same_hash(s, hash, &e.key, block)?;
        Ok(None)
    }

    /// Checks that `entry_key`, of the entry at log offset `at` where slot
    /// `s` points, hashes to the slot's stored `hash`: a key that does not
    /// means the slot or the entry is damaged.
    fn same_hash(&self, s: u64, hash: u64, entry_key: &[u8], at: u64) -> Result<()> {
        if self.hash_of(entry_key) == hash {
            return Ok(()); // two keys of one hash: look on
        }
        Err(Error::corrupt(
            &self.index_path,
            self.slot_offset(s),
            format!(
                "slot {s} points at log offset {at} of {}, whose key does not hash to the \
                 slot's hash: the slot or the entry is damaged",
                self.log_path.display()
            ),
        ))
    }

    /// An error of the log read in order, which stops where the index's
    /// data_end says: when that is before the log's, the index's may be
    /// what is damaged (an entry running past it), and the error says so.
    fn read_to_index_end(&self, e: Error) -> Error {
        let end = self.index_header.data_end;
        match e {
            Error::Corrupt { path, offset, what } if end < self.log_header.data_end => {
                Error::Corrupt {
                    path,
                    offset,
                    what: format!(
                        "{what} (read as far as the data_end {end} of {})",
                        self.index_path.display()
                    ),
                }
            }
            e => e,
        }
    }

    /// An error reading the log where slot `s` points, saying so: the
    /// slot may be what is damaged.
    fn reached_from_slot(&self, e: Error, s: u64) -> Error {
        match e {
            Error::Corrupt { path, offset, what } => Error::Corrupt {
                path,
                offset,
                what: format!(
                    "{what} (where slot {s} of {} points)",
                    self.index_path.display()
                ),
            },
            e => e,
        }
    }

    /// `get` in an uncompressed log, where addresses are byte offsets.
    ///
    /// The same probe and the same answers as the general path, with a
    /// shorter step at each equal hash, for what a random get over a large
    /// table costs: two cache misses
    /// (its slot, then its entry) that it cannot overlap with each other.
    /// It can overlap them with the *next* get's, but only if the CPU's
    /// reorder window reaches the next get's slot load while this get
    /// waits, so the common case (a short PUT whose key matches) takes as
    /// few instructions as possible and anything else falls back to the
    /// full parser, which also produces the errors. Measured with
    /// `bench/examples/get_probe.rs` at 10M pairs, random gets in a tight loop:
    /// 207-216 ns a get here against 297-335 ns through the general path
    /// (and 12.7 against 20 ns for one key over and over). The saving is in
    /// reading the entry in place, not in the probe loop: this step inside
    /// `probe`'s closure measured the same as a hand-written loop.
    fn get_plain(&self, key: &[u8], hash: u64) -> Result<Option<Cow<'_, [u8]>>> {
        let mut found = None;
        self.probe(hash, |s, addr| {
            found = match short_put_at(&self.log_map, addr) {
                Some((k, v)) if k == key => Some(Cow::Borrowed(v)),
                Some((k, _)) => {
                    self.same_hash(s, hash, k, addr)?;
                    None
                }
                None => self.value_if_key(s, hash, addr, 0, key)?,
            };
            Ok(found.is_some())
        })?;
        Ok(found)
    }

    /// Whether the entry at `addr` with stored hash `hash` is live: its
    /// key's slot points at exactly it.
    pub(crate) fn is_live(&self, hash: u64, addr: u64) -> Result<bool> {
        Ok(self.probe(hash, |_, a| Ok(a == addr))?.is_some())
    }

    /// Live pairs in log order (sparkey's `hashnext`).
    pub fn iter(&self) -> TableIter<'_> {
        TableIter {
            table: self,
            cursor: self.log_data().cursor(self.index_header.data_end),
            live: 0,
        }
    }

    /// The index's hash size.
    pub fn hash_size(&self) -> HashSize {
        self.index_header.hash_size
    }
}

/// The key and value of the PUT at byte `addr` of an uncompressed log
/// when both lengths fit one VLQ byte and the whole entry lies in the
/// data; `None` for anything else (the caller's full parser decides).
#[inline(always)]
fn short_put_at(log: &[u8], addr: u64) -> Option<(&[u8], &[u8])> {
    let at = usize::try_from(addr).ok()?;
    if at < LOG_HEADER_LEN {
        return None;
    }
    match log.get(at..)? {
        [a @ 1..=0x7f, b @ 0..=0x7f, rest @ ..] => {
            let (k, v) = (usize::from(a - 1), usize::from(*b));
            let key = rest.get(..k)?;
            let value = rest.get(k..k + v)?;
            Some((key, value))
        }
        _ => None,
    }
}

/// Live pairs in the order they were written. A lending iterator: call
/// `next` in a `while let` loop.
pub struct TableIter<'t> {
    table: &'t Table,
    cursor: LogCursor<'t>,
    /// Live pairs returned so far.
    live: u64,
}

impl TableIter<'_> {
    /// The next live pair (key, value), borrowed until the next call;
    /// `Ok(None)` after the last. Fails on a damaged entry, and at the end
    /// if the live pairs found are not as many as the index holds (a
    /// damaged length can make the log's entries parse as others, which no
    /// slot points at, and a damaged slot makes its entry look dead).
    #[allow(clippy::should_implement_trait)] // lends borrowed pairs, which `Iterator` cannot
    pub fn next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        let bits = self.table.index_header.entry_block_bits;
        loop {
            if !self
                .cursor
                .advance()
                .map_err(|e| self.table.read_to_index_end(e))?
            {
                let t = self.table;
                let want = t.index_header.num_entries;
                if self.live != want {
                    return Err(Error::corrupt(
                        &t.index_path,
                        60,
                        format!(
                            "the index holds {want} live keys, the log ({}) {}",
                            t.log_path.display(),
                            self.live
                        ),
                    ));
                }
                return Ok(None);
            }
            let e = self.cursor.current().expect("advanced");
            if e.kind == EntryKind::Put {
                let hash = self.table.hash_of(e.key);
                if self.table.is_live(hash, e.loc.address(bits))? {
                    break;
                }
            }
        }
        self.live += 1;
        Ok(self.cursor.current().map(|e| (e.key, e.value)))
    }
}

impl Table {
    /// Every live pair, copied, in log order (for tests and small tables).
    pub fn to_vec(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut it = self.iter();
        let mut out = Vec::new();
        while let Some((k, v)) = it.next()? {
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Table>();
};
