//! The in-memory form of a leaf: sorted keys with their values, packed into
//! one byte arena, plus an array of 8-byte key *heads* that binary search
//! touches first, so a lookup reads few cache lines.
//!
//! Heads are taken past the prefix every key of the leaf shares (its
//! *skip*): keys like `user:000123` or kivaloo's (an 8-byte group number,
//! then a hash) share their first bytes across thousands of keys, and heads
//! of those bytes would all tie, sending every comparison to the full keys.
//!
//! The same structure serves as a leaf's *delta*: a small sorted set of recent
//! changes (puts and tombstones) laid over an immutable base, so that changing
//! one key of a leaf does not copy the whole leaf (see node.rs).

use crate::written::Written;
use kivi_log::{Deadline, PageRef, NO_DEADLINE};
use std::cmp::Ordering;
use std::sync::Arc;

/// Values longer than this are stored out of line, as blob records, so that
/// large values never bloat tree pages.
pub const INLINE_VALUE_MAX: usize = 1024;

/// The first 8 bytes of a key as a big-endian integer, zero-padded. Heads are
/// ordered consistently with the keys: `head(a) < head(b)` implies `a < b`;
/// equal heads need a full comparison.
#[inline]
pub fn head(key: &[u8]) -> u64 {
    // Keys of eight bytes or more (most) are one load; the copy of a
    // variable length below is a call to memcpy, which a scan's merge paid
    // twice per pair.
    if let Some(first) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*first);
    }
    // Byte by byte: a copy of a variable length would be a call.
    key.iter()
        .enumerate()
        .fold(0, |h, (i, &b)| h | u64::from(b) << (56 - 8 * i))
}

/// Key order (memcmp), deciding most comparisons on the 8-byte heads.
#[inline]
pub fn compare_keys(a: &[u8], b: &[u8]) -> Ordering {
    match head(a).cmp(&head(b)) {
        Ordering::Equal => compare_past_heads(a, b),
        o => o,
    }
}

/// Key order of two keys whose heads are equal. Past the heads, eight bytes
/// at a time in registers: equal heads are common (a buffered update meets
/// its key in the tree), and the call to `memcmp` a slice comparison makes
/// cost more than the comparison itself for short keys.
#[inline]
pub(crate) fn compare_past_heads(a: &[u8], b: &[u8]) -> Ordering {
    let (Some((_, mut a_rest)), Some((_, mut b_rest))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    else {
        // A key under 8 bytes, whose head is it zero-padded: equal heads
        // mean the shorter key is the longer one's start, followed there by
        // zeros only, so the shorter sorts first (and same lengths are
        // equal keys). Short keys are common past a leaf's shared prefix.
        return a.len().cmp(&b.len());
    };
    // Equal heads of keys of 8 bytes or more: their first 8 bytes are equal.
    while let (Some((x, a_next)), Some((y, b_next))) = (
        a_rest.split_first_chunk::<8>(),
        b_rest.split_first_chunk::<8>(),
    ) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
        (a_rest, b_rest) = (a_next, b_next);
    }
    if a_rest.is_empty() || b_rest.is_empty() {
        // (kv40 keys end here: 40 bytes are five words.)
        return a_rest.len().cmp(&b_rest.len());
    }
    // Under 8 bytes left in one of them: their zero-padded heads, then
    // (equal heads) the shorter first, as for short keys above.
    match head(a_rest).cmp(&head(b_rest)) {
        Ordering::Equal => a_rest.len().cmp(&b_rest.len()),
        o => o,
    }
}

/// Binary search over sorted keys given their heads; like `slice::binary_search`.
/// `key_at(i)` and `key` are the keys past the same skipped prefix, and the
/// heads are theirs.
#[inline]
pub fn search_heads<'a>(
    heads: &[u64],
    key: &[u8],
    key_at: impl Fn(usize) -> &'a [u8],
) -> Result<usize, usize> {
    let h = head(key);
    let mut lo = 0;
    let mut hi = heads.len();
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let ord = match heads[mid].cmp(&h) {
            Ordering::Equal => compare_past_heads(key_at(mid), key),
            o => o,
        };
        match ord {
            Ordering::Less => lo = mid + 1,
            Ordering::Greater => hi = mid,
            Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

/// Length of the longest common prefix of `a` and `b`.
#[inline]
pub fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (mut a_words, mut b_words) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    let mut at = 0;
    for (x, y) in (&mut a_words).zip(&mut b_words) {
        let diff = u64::from_be_bytes(x.try_into().expect("8 bytes"))
            ^ u64::from_be_bytes(y.try_into().expect("8 bytes"));
        if diff != 0 {
            return at + diff.leading_zeros() as usize / 8;
        }
        at += 8;
    }
    let rest = a_words.remainder().iter().zip(b_words.remainder());
    at + rest.take_while(|(x, y)| x == y).count()
}

/// Where `key` falls against a run of sorted keys that all start with
/// `prefix`: `Ok(rest)` when it starts with the prefix too (`rest` is the
/// key past it, ordered among theirs as the whole keys are), else whether
/// it sorts before all of them (`Err(Less)`) or after (`Err(Greater)`).
#[inline]
pub fn past_prefix<'k>(key: &'k [u8], prefix: &[u8]) -> Result<&'k [u8], Ordering> {
    match key.get(..prefix.len()) {
        Some(p) if p == prefix => Ok(&key[prefix.len()..]),
        Some(p) => Err(p.cmp(prefix)),
        // Shorter than the prefix: it cannot equal it, and if it is a
        // prefix of it, it sorts first.
        None => Err(key.cmp(prefix)),
    }
}

/// A value stored outside the page.
#[derive(Debug)]
pub struct BigValue {
    /// The bytes, when this value was written by this process and not yet
    /// dropped; `None` when it is known only by its blob on disk.
    pub bytes: Option<Box<[u8]>>,
    /// The blob record holding it, once written.
    pub written: Written<PageRef>,
    pub len: u32,
}

impl BigValue {
    pub fn in_memory(bytes: &[u8]) -> Arc<Self> {
        Arc::new(BigValue {
            bytes: Some(bytes.into()),
            written: Written::default(),
            len: bytes.len() as u32,
        })
    }

    /// A blob read from a page; generation 0 is always durable.
    pub fn on_disk(r: PageRef) -> Arc<Self> {
        let len = r.len - kivi_log::RECORD_HEADER_LEN as u32;
        Arc::new(BigValue {
            bytes: None,
            written: Written::new_at(r, 0),
            len,
        })
    }
}

const KIND_INLINE: u8 = 0;
const KIND_BIG: u8 = 1;
const KIND_TOMBSTONE: u8 = 2;
/// Set on a value's kind when it has a deadline: the deadline's 8 bytes
/// (little-endian) lie in the arena right after the key, and an inline
/// value after them. The slot has no room for 8 more bytes, and most
/// entries have no deadline, so they pay nothing for it.
const KIND_EXPIRING: u8 = 4;

/// Where an entry's key and value are. 16 bytes, plain old data, so that the
/// slots can live in the same allocation as the heads and the arena.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Slot {
    key_off: u32,
    /// Inline: offset of the value in the arena; big: index into `bigs`.
    val: u32,
    val_len: u32,
    key_len: u16,
    kind: u8,
    _pad: u8,
}
// Two of the buffer's u64 words a slot (`2 * n` words for `n` slots), cast
// in place: no bigger, and no more aligned, than they are.
const _: () = assert!(size_of::<Slot>() == 2 * size_of::<u64>());
const _: () = assert!(align_of::<Slot>() <= align_of::<u64>());

/// A value as found in a leaf.
#[derive(Debug, Clone, Copy)]
pub enum ValueRef<'a> {
    /// A value stored inside the leaf (at most `INLINE_VALUE_MAX` bytes).
    Inline(&'a [u8]),
    /// A larger value, stored as a blob record of its own; its bytes may be
    /// in memory or need a read (`Pager::read_big`).
    Big(&'a Arc<BigValue>),
}

impl ValueRef<'_> {
    /// The value's length in bytes (no read needed for a big one).
    pub fn len(&self) -> usize {
        match self {
            ValueRef::Inline(v) => v.len(),
            ValueRef::Big(b) => b.len as usize,
        }
    }

    /// Whether the value is empty (zero bytes).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What an entry holds: a value and its deadline ([`NO_DEADLINE`] for
/// none), or (in deltas only) a tombstone. The tree keeps expired values
/// like any other; readers decide what a deadline means.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    Value(ValueRef<'a>, Deadline),
    Tombstone,
}

impl Entry<'_> {
    /// The deadline of a value; [`NO_DEADLINE`] for a tombstone.
    pub fn deadline(&self) -> Deadline {
        match *self {
            Entry::Value(_, d) => d,
            Entry::Tombstone => NO_DEADLINE,
        }
    }
}

/// The earlier of two deadlines, [`NO_DEADLINE`] meaning none (so later
/// than any).
#[inline]
pub fn earlier(a: Deadline, b: Deadline) -> Deadline {
    match (a, b) {
        (NO_DEADLINE, x) | (x, NO_DEADLINE) => x,
        (a, b) => a.min(b),
    }
}

/// Estimated encoded size of an entry, used to decide where pages split.
pub fn entry_size(key_len: usize, value: Entry<'_>) -> usize {
    key_len
        + 2
        + match value {
            Entry::Value(v, d) => {
                let d = if d == NO_DEADLINE {
                    0
                } else {
                    kivi_log::codec::varint_len(d)
                };
                d + match v {
                    ValueRef::Inline(v) => v.len() + 2,
                    ValueRef::Big(_) => 2 + kivi_log::PageRef::ENCODED_LEN,
                }
            }
            Entry::Tombstone => 1,
        }
}

/// Sorted entries in one allocation: a summary (the head of every 8th entry),
/// `cap` heads, then `cap` slots, then the arena of key and value bytes. A
/// lookup reads one line of the summary to pick a block of 8 heads, one line
/// of heads, one slot and the key: four cache lines, where a plain binary
/// search over the heads touches about as many for the heads alone. One allocation per leaf (instead of one per
/// array) matters: the write path makes and frees a small leaf per changed key.
/// The buffer is shared by reference count, so a node holds its `LeafData`
/// inline (one pointer hop less on every lookup) and versions share bases.
/// Entries per summary block (8 heads: one cache line).
const SUMMARY_STRIDE: usize = 8;

/// Where each part of a leaf buffer starts, in words, for a capacity.
struct Layout {
    heads: usize,
    slots: usize,
    data: usize,
}

impl Layout {
    #[inline]
    fn of(cap: usize) -> Layout {
        let heads = cap.div_ceil(SUMMARY_STRIDE);
        Layout {
            heads,
            slots: heads + cap,
            data: heads + 3 * cap,
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct LeafData {
    buf: Arc<[u64]>,
    cap: u32,
    data_cap: u32,
    n: u32,
    data_len: u32,
    /// Bytes every key shares with the first (the common prefix of the
    /// first and last keys, as keys are sorted); heads are taken past them.
    skip: u32,
    bigs: Vec<Arc<BigValue>>,
    size: usize,
    tombstones: usize,
    /// Entries with a deadline: none (the common case) answers
    /// `earliest_deadline` without a pass over the entries.
    expiring: u32,
}

impl LeafData {
    /// Room for `entries` entries holding `bytes` bytes of keys and inline values.
    pub fn with_capacity(entries: usize, bytes: usize) -> Self {
        assert!(
            entries <= u32::MAX as usize / 4 && bytes <= u32::MAX as usize,
            "leaf too large"
        );
        let words = Layout::of(entries).data + bytes.div_ceil(8);
        let zeroed = Arc::<[u64]>::new_zeroed_slice(words);
        // SAFETY: the memory is zero-initialised, and all-zero bits are a
        // valid u64.
        let buf = unsafe { zeroed.assume_init() };
        LeafData {
            buf,
            cap: entries as u32,
            data_cap: bytes as u32,
            ..Default::default()
        }
    }

    /// These entries without those `other` holds alike (same key, and the
    /// same inline bytes, the same out-of-line value, or both tombstones);
    /// `None` if nothing is left.
    pub fn without_entries_of(&self, other: &LeafData) -> Option<LeafData> {
        let same = |a: Entry<'_>, b: Entry<'_>| match (a, b) {
            (Entry::Tombstone, Entry::Tombstone) => true,
            (Entry::Value(x, dx), Entry::Value(y, dy)) if dx == dy => match (x, y) {
                (ValueRef::Inline(x), ValueRef::Inline(y)) => x == y,
                (ValueRef::Big(x), ValueRef::Big(y)) => Arc::ptr_eq(x, y),
                _ => false,
            },
            _ => false,
        };
        let keep: Vec<usize> = (0..self.len())
            .filter(|&i| match other.find(self.key(i)) {
                Ok(j) => !same(self.entry(i), other.entry(j)),
                Err(_) => true,
            })
            .collect();
        if keep.len() == self.len() {
            return Some(self.clone());
        }
        let bytes = keep
            .iter()
            .map(|&i| self.key(i).len() + entry_len(self.entry(i)))
            .sum();
        let mut out = LeafData::with_capacity(keep.len(), bytes);
        for i in keep {
            out.push(self.key(i), self.entry(i));
        }
        (!out.is_empty()).then_some(out)
    }

    /// About the memory `with_capacity(entries, bytes)` takes.
    pub fn mem_estimate(entries: usize, bytes: usize) -> usize {
        std::mem::size_of::<Self>() + (Layout::of(entries).data + bytes.div_ceil(8)) * 8
    }

    pub fn len(&self) -> usize {
        self.n as usize
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Bytes of keys and inline values held.
    pub fn data_len(&self) -> usize {
        self.data_len as usize
    }

    /// Estimated encoded size of all entries: keys whole, though pages
    /// store each past the prefix it shares with the one before. (Counting
    /// that made leaves fuller on disk, 79 bytes a pair against 86 after an
    /// in-order load of keys sharing 7 bytes, but slowed lookups and updates
    /// in memory by 15-17% at 1M kv40 pairs: leaves there hold whole keys.)
    pub fn size(&self) -> usize {
        self.size
    }

    pub fn tombstones(&self) -> usize {
        self.tombstones
    }

    /// Bytes of memory held.
    pub fn mem_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.buf.len() * 8
            + self
                .bigs
                .iter()
                .map(|b| 16 + b.bytes.as_ref().map_or(0, |v| v.len()))
                .sum::<usize>()
    }

    #[inline]
    fn layout(&self) -> Layout {
        Layout::of(self.cap as usize)
    }

    #[inline]
    fn heads(&self) -> &[u64] {
        let at = self.layout().heads;
        &self.buf[at..at + self.n as usize]
    }

    #[inline]
    fn slots(&self) -> &[Slot] {
        let at = self.layout().slots;
        bytemuck::cast_slice(&self.buf[at..at + 2 * self.n as usize])
    }

    #[inline]
    fn data(&self) -> &[u8] {
        let start = self.layout().data;
        &bytemuck::cast_slice::<u64, u8>(&self.buf[start..])[..self.data_len as usize]
    }

    #[inline]
    pub fn key(&self, i: usize) -> &[u8] {
        let s = &self.slots()[i];
        &self.data()[s.key_off as usize..s.key_off as usize + s.key_len as usize]
    }

    #[inline]
    pub fn entry(&self, i: usize) -> Entry<'_> {
        let s = &self.slots()[i];
        let deadline = if s.kind & KIND_EXPIRING == 0 {
            NO_DEADLINE
        } else {
            let at = (s.key_off + u32::from(s.key_len)) as usize;
            u64::from_le_bytes(self.data()[at..at + 8].try_into().expect("8 bytes"))
        };
        match s.kind & !KIND_EXPIRING {
            KIND_INLINE => Entry::Value(
                ValueRef::Inline(&self.data()[s.val as usize..(s.val + s.val_len) as usize]),
                deadline,
            ),
            KIND_BIG => Entry::Value(ValueRef::Big(&self.bigs[s.val as usize]), deadline),
            _ => Entry::Tombstone,
        }
    }

    /// Asks the CPU to start fetching the whole leaf into cache. A cursor
    /// calls this for the leaf it moves to next (and for the one a seek
    /// lands on): leaves of an updated tree sit at scattered heap addresses,
    /// and a leaf spans two or more 4 KiB pages, where the hardware
    /// prefetcher stops, so without it every few entries would wait for DRAM
    /// in turn. Fetching it all at once overlaps those waits (measured:
    /// ordered scans after random updates 1.5x faster).
    #[inline]
    pub fn prefetch(&self) {
        let used = self.layout().data + (self.data_len as usize).div_ceil(8);
        let words = &self.buf[..used.min(self.buf.len())];
        // Eight words are one 64-byte cache line.
        for line in words.chunks(8) {
            prefetch_line(line.as_ptr().cast());
        }
    }

    /// Where the leaf's index (summary, heads and slots, contiguous from the
    /// start of its buffer) lies in memory, and its length in bytes.
    pub(crate) fn index_span(&self) -> (*const u8, usize) {
        (self.buf.as_ptr().cast(), self.index_words() * 8)
    }

    /// Words from the start of the buffer that a lookup reads before the
    /// entry it lands on: the summary, heads and slots, and with a shared
    /// prefix the first line of the arena, where the first key (holding
    /// that prefix) starts, when it follows the slots (a leaf filled to
    /// its capacity, as leaves read from pages and consolidated ones are).
    #[inline]
    fn index_words(&self) -> usize {
        let layout = self.layout();
        let slots_end = layout.slots + 2 * self.n as usize;
        let end = if self.skip > 0 && layout.data == slots_end {
            layout.data + 8
        } else {
            slots_end
        };
        end.min(self.buf.len())
    }

    /// Asks the CPU to start fetching the leaf's index (summary, heads and
    /// slots, about 1.3 KiB for a full 4 KiB leaf of 80-byte pairs), which a
    /// lookup otherwise reads as three dependent cache misses, one after
    /// the other: summary, then heads, then slot.
    #[inline]
    pub fn prefetch_index(&self) {
        let n = self.n as usize;
        let layout = self.layout();
        let index = layout.heads..layout.heads + n;
        let slots = layout.slots..layout.slots + 2 * n;
        let first_key = if self.skip > 0 {
            layout.data..layout.data + 1
        } else {
            0..0
        };
        for part in [0..n.div_ceil(SUMMARY_STRIDE), index, slots, first_key] {
            if let Some(words) = self.buf.get(part) {
                for line in words.chunks(8) {
                    prefetch_line(line.as_ptr().cast());
                }
            }
        }
    }

    pub fn first_key(&self) -> Option<&[u8]> {
        (!self.is_empty()).then(|| self.key(0))
    }

    pub fn last_key(&self) -> Option<&[u8]> {
        (!self.is_empty()).then(|| self.key(self.len() - 1))
    }

    #[inline]
    pub fn find(&self, key: &[u8]) -> Result<usize, usize> {
        let n = self.n as usize;
        let skip = self.skip as usize;
        let key = if skip == 0 {
            key
        } else {
            match past_prefix(key, &self.key(0)[..skip]) {
                Ok(rest) => rest,
                Err(Ordering::Less) => return Err(0),
                Err(_) => return Err(n),
            }
        };
        let (lo, hi) = self.block_of(head(key));
        let heads = &self.heads()[lo..hi];
        match search_heads(heads, key, |i| &self.key(lo + i)[skip..]) {
            Ok(i) => Ok(lo + i),
            Err(i) => Err(lo + i),
        }
    }

    /// The entries whose heads can equal `h` (a head taken past the skip),
    /// as the summary narrows them: entries before block `below - 1` have
    /// smaller heads, entries from block `up_to` on have larger ones. A
    /// small leaf is searched whole.
    #[inline]
    fn block_of(&self, h: u64) -> (usize, usize) {
        let n = self.n as usize;
        if n <= 2 * SUMMARY_STRIDE {
            return (0, n);
        }
        let summary = &self.buf[..n.div_ceil(SUMMARY_STRIDE)];
        let below = summary.partition_point(|&f| f < h);
        let up_to = summary.partition_point(|&f| f <= h);
        let lo = below.saturating_sub(1) * SUMMARY_STRIDE;
        (lo, (up_to * SUMMARY_STRIDE).min(n))
    }

    /// The head of `key` past the skip, not checking that `key` holds the
    /// shared prefix (for prefetching, where a wrong guess costs nothing).
    #[inline]
    fn guess_head(&self, key: &[u8]) -> u64 {
        head(&key[(self.skip as usize).min(key.len())..])
    }

    /// For lookups made side by side (`read::get_each`), each step asks
    /// for what the next one reads, so that the waits of many lookups
    /// overlap instead of following one another: `prefetch_start` (the
    /// summary), then `prefetch_block` (the heads and slots the summary
    /// points at, and the first key, which holds the shared prefix), then
    /// `prefetch_entry` (the key and inline value the heads point at), then
    /// `find`. A leaf's whole index is 1 to 2 KiB; asking for all of it for
    /// dozens of lookups at once would queue more than the CPU can fetch.
    #[inline]
    pub fn prefetch_start(&self) {
        prefetch_line(self.buf.as_ptr().cast());
    }

    #[inline]
    pub fn prefetch_block(&self, key: &[u8]) {
        let (lo, hi) = self.block_of(self.guess_head(key));
        if lo >= hi {
            return;
        }
        let layout = self.layout();
        for range in [
            layout.heads + lo..layout.heads + hi,
            layout.slots + 2 * lo..layout.slots + 2 * hi,
        ] {
            let first = range.start & !7;
            for w in (first..range.end).step_by(8) {
                prefetch_line(self.buf[w..].as_ptr().cast());
            }
        }
        if self.skip > 0 {
            prefetch_line(self.buf[layout.data..].as_ptr().cast());
        }
    }

    #[inline]
    pub fn prefetch_entry(&self, key: &[u8]) {
        let h = self.guess_head(key);
        let (lo, hi) = self.block_of(h);
        let heads = &self.heads()[lo..hi];
        let i = lo + heads.partition_point(|&x| x < h);
        if i < hi && self.heads()[i] == h {
            let s = &self.slots()[i];
            let data = self.layout().data * 8;
            let start = data + s.key_off as usize;
            let mut end = start + s.key_len as usize;
            if s.kind & !KIND_EXPIRING == KIND_INLINE {
                end = end.max(data + (s.val + s.val_len) as usize);
            }
            let bytes: &[u8] = bytemuck::cast_slice(&self.buf);
            for at in (start & !63..end.min(bytes.len())).step_by(64) {
                prefetch_line(bytes[at..].as_ptr());
            }
        }
    }

    /// Takes heads (and the summary) past `skip` bytes of every key: the
    /// prefix they share shrank. Each shrink costs a pass over the entries;
    /// it only ever shrinks, and rarely after the first few keys.
    fn set_skip(&mut self, skip: usize) {
        debug_assert!(skip < self.skip as usize);
        self.skip = skip as u32;
        let n = self.n as usize;
        let heads_at = self.layout().heads;
        let fresh: Vec<u64> = (0..n).map(|i| head(&self.key(i)[skip..])).collect();
        let buf = Arc::get_mut(&mut self.buf).expect("a leaf being built is not shared");
        for (i, h) in fresh.into_iter().enumerate() {
            buf[heads_at + i] = h;
            if i.is_multiple_of(SUMMARY_STRIDE) {
                buf[i / SUMMARY_STRIDE] = h;
            }
        }
    }

    /// Moves the contents into a buffer with room for `entries` and `bytes`.
    fn relayout(&mut self, entries: usize, bytes: usize) {
        let mut bigger = LeafData::with_capacity(entries, bytes);
        let n = self.n as usize;
        let (old, new) = (self.layout(), Layout::of(entries));
        let to = Arc::get_mut(&mut bigger.buf).expect("a new buffer is not shared");
        let blocks = n.div_ceil(SUMMARY_STRIDE);
        to[..blocks].copy_from_slice(&self.buf[..blocks]);
        to[new.heads..new.heads + n].copy_from_slice(&self.buf[old.heads..old.heads + n]);
        to[new.slots..new.slots + 2 * n].copy_from_slice(&self.buf[old.slots..old.slots + 2 * n]);
        let words = (self.data_len as usize).div_ceil(8);
        to[new.data..new.data + words].copy_from_slice(&self.buf[old.data..old.data + words]);
        self.buf = bigger.buf;
        self.cap = bigger.cap;
        self.data_cap = bigger.data_cap;
    }

    /// Appends an entry; keys must come in strictly increasing order. Grows
    /// the buffer if the capacity given was too small.
    pub fn push(&mut self, key: &[u8], entry: Entry<'_>) {
        debug_assert!(
            self.last_key().is_none_or(|last| last < key),
            "leaf keys out of order"
        );
        assert!(
            key.len() <= u16::MAX as usize,
            "key over the slot's length field"
        );
        let bytes = key.len() + entry_len(entry);
        if self.n == self.cap || self.data_len as usize + bytes > self.data_cap as usize {
            let entries = (self.n as usize + 1).max(2 * self.cap as usize);
            let data = (self.data_len as usize + bytes).max(2 * self.data_cap as usize);
            self.relayout(entries, data);
        }
        if self.n == 0 {
            self.skip = key.len() as u32;
        } else {
            let skip = self.skip as usize;
            let shared = common_prefix_len(&self.key(0)[..skip], key);
            if shared < skip {
                self.set_skip(shared);
            }
        }
        let n = self.n as usize;
        let layout = self.layout();
        let data_start = layout.data;
        let key_off = self.data_len;
        let buf = Arc::get_mut(&mut self.buf).expect("a leaf being built is not shared");
        let arena = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut buf[data_start..])
            [..self.data_cap as usize];
        arena[key_off as usize..key_off as usize + key.len()].copy_from_slice(key);
        let mut end = key_off as usize + key.len();
        let deadline = entry.deadline();
        if deadline != NO_DEADLINE {
            arena[end..end + 8].copy_from_slice(&deadline.to_le_bytes());
            end += 8;
        }
        let (kind, val, val_len) = match entry {
            Entry::Value(ValueRef::Inline(v), _) => {
                arena[end..end + v.len()].copy_from_slice(v);
                let off = end as u32;
                end += v.len();
                (KIND_INLINE, off, v.len() as u32)
            }
            Entry::Value(ValueRef::Big(b), _) => {
                self.bigs.push(b.clone());
                (KIND_BIG, (self.bigs.len() - 1) as u32, b.len)
            }
            Entry::Tombstone => {
                self.tombstones += 1;
                (KIND_TOMBSTONE, 0, 0)
            }
        };
        let kind = if deadline == NO_DEADLINE {
            kind
        } else {
            self.expiring += 1;
            kind | KIND_EXPIRING
        };
        let h = head(&key[self.skip as usize..]);
        let buf = Arc::get_mut(&mut self.buf).expect("a leaf being built is not shared");
        buf[layout.heads + n] = h;
        if n.is_multiple_of(SUMMARY_STRIDE) {
            buf[n / SUMMARY_STRIDE] = h;
        }
        let slot = Slot {
            key_off,
            val,
            val_len,
            key_len: key.len() as u16,
            kind,
            _pad: 0,
        };
        bytemuck::cast_slice_mut::<u64, Slot>(&mut buf[layout.slots..layout.slots + 2 * (n + 1)])
            [n] = slot;
        self.data_len = end as u32;
        self.n += 1;
        self.size += entry_size(key.len(), entry);
    }

    /// The earliest deadline of the values held (`NO_DEADLINE`: none).
    pub fn earliest_deadline(&self) -> Deadline {
        if self.expiring == 0 {
            return NO_DEADLINE;
        }
        (0..self.len()).fold(NO_DEADLINE, |e, i| earlier(e, self.entry(i).deadline()))
    }

    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&[u8], Entry<'_>)> + ExactSizeIterator + '_ {
        (0..self.len()).map(move |i| (self.key(i), self.entry(i)))
    }

    /// Drops spare capacity (for nodes that will live in the cache).
    pub fn shrink(&mut self) {
        let (n, data) = (self.n as usize, self.data_len as usize);
        if n < self.cap as usize || data.div_ceil(8) < (self.data_cap as usize).div_ceil(8) {
            self.relayout(n, data);
        }
    }
}

/// Arena bytes an entry takes besides its key: an inline value, and a
/// deadline's 8 bytes.
pub(crate) fn entry_len(e: Entry<'_>) -> usize {
    match e {
        Entry::Value(v, d) => {
            let d = if d == NO_DEADLINE { 0 } else { 8 };
            d + match v {
                ValueRef::Inline(v) => v.len(),
                ValueRef::Big(_) => 0,
            }
        }
        Entry::Tombstone => 0,
    }
}

/// Merges two sorted entry sequences; on equal keys `over` wins. With
/// `drop_tombstones`, tombstones are applied (removed) instead of kept.
pub fn merge_into<'a>(
    out: &mut Vec<(&'a [u8], Entry<'a>)>,
    base: impl Iterator<Item = (&'a [u8], Entry<'a>)>,
    over: impl Iterator<Item = (&'a [u8], Entry<'a>)>,
    drop_tombstones: bool,
) {
    let mut base = base.peekable();
    let mut over = over.peekable();
    loop {
        let take_over = match (base.peek(), over.peek()) {
            (None, None) => break,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some((bk, _)), Some((ok, _))) => match compare_keys(bk, ok) {
                Ordering::Less => false,
                Ordering::Greater => true,
                Ordering::Equal => {
                    base.next();
                    true
                }
            },
        };
        let item = if take_over { over.next() } else { base.next() }.expect("peeked");
        if drop_tombstones && matches!(item.1, Entry::Tombstone) {
            continue;
        }
        out.push(item);
    }
}

/// Asks the CPU to start fetching the cache line holding `at` (a hint: no
/// effect on memory or program state; a no-op off x86_64).
#[inline]
pub fn prefetch_line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch never dereferences its address in a way that
        // can fault or change memory, whatever the address; the `sse`
        // feature it needs is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn deadlines_stay_with_their_entries_through_growth() {
        let big = BigValue::in_memory(&[7; 2000]);
        let mut leaf = LeafData::with_capacity(1, 4);
        let keys: Vec<Vec<u8>> = (0..100u32)
            .map(|i| format!("k{i:03}").into_bytes())
            .collect();
        let deadline = |i: usize| {
            if i.is_multiple_of(3) {
                NO_DEADLINE
            } else {
                1_000 + i as u64
            }
        };
        for (i, k) in keys.iter().enumerate() {
            let e = match i % 4 {
                0 | 1 => Entry::Value(ValueRef::Inline(k), deadline(i)),
                2 => Entry::Value(ValueRef::Big(&big), deadline(i)),
                _ => Entry::Tombstone,
            };
            leaf.push(k, e);
        }
        leaf.shrink();
        // The earliest deadline among the values (tombstones have none).
        let earliest = (0..keys.len())
            .filter(|i| i % 4 != 3)
            .map(deadline)
            .filter(|&d| d != NO_DEADLINE)
            .min()
            .unwrap();
        assert_eq!(leaf.earliest_deadline(), earliest);
        let mut plain = LeafData::default();
        plain.push(b"k", Entry::Value(ValueRef::Inline(b"v"), NO_DEADLINE));
        assert_eq!(plain.earliest_deadline(), NO_DEADLINE);
        for (i, k) in keys.iter().enumerate() {
            let at = leaf.find(k).unwrap();
            match (i % 4, leaf.entry(at)) {
                (0 | 1, Entry::Value(ValueRef::Inline(v), d)) => {
                    assert_eq!((v, d), (k.as_slice(), deadline(i)));
                }
                (2, Entry::Value(ValueRef::Big(b), d)) => {
                    assert!(Arc::ptr_eq(b, &big));
                    assert_eq!(d, deadline(i));
                }
                (3, Entry::Tombstone) => {}
                (_, e) => panic!("entry {i} came back as {e:?}"),
            }
        }
        // An entry differing only in its deadline is a different entry.
        let mut other = LeafData::default();
        other.push(&keys[1], Entry::Value(ValueRef::Inline(&keys[1]), 5));
        let mut same = LeafData::default();
        same.push(
            &keys[1],
            Entry::Value(ValueRef::Inline(&keys[1]), deadline(1)),
        );
        assert!(leaf
            .without_entries_of(&other)
            .unwrap()
            .find(&keys[1])
            .is_ok());
        assert!(leaf
            .without_entries_of(&same)
            .unwrap()
            .find(&keys[1])
            .is_err());
    }

    #[test]
    fn heads_order_like_keys() {
        let keys: Vec<&[u8]> = vec![
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0\0",
            b"a\x01",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgi",
        ];
        for a in &keys {
            for b in &keys {
                if head(a) < head(b) {
                    assert!(a < b, "{a:?} {b:?}");
                }
            }
        }
    }

    /// Keys from a small alphabet, often sharing long prefixes and often
    /// of lengths around the 8-byte words `compare_keys` steps by.
    pub(crate) fn near_key() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            proptest::sample::select(vec![0u8, 1, 0x7f, 0x80, 0xff]),
            0..26,
        )
    }

    proptest::proptest! {
        #[test]
        fn compare_keys_orders_as_memcmp(a in near_key(), b in near_key(), shared in 0usize..20) {
            // Half the pairs share a prefix of `shared` bytes, so the
            // comparison goes past the heads.
            let b = if shared % 2 == 0 { [&a[..shared.min(a.len())], &b[..]].concat() } else { b };
            proptest::prop_assert_eq!(compare_keys(&a, &b), a.cmp(&b));
            proptest::prop_assert_eq!(compare_keys(&b, &a), b.cmp(&a));
            proptest::prop_assert_eq!(compare_keys(&a, &a), std::cmp::Ordering::Equal);
        }
    }

    proptest::proptest! {
        #[test]
        fn find_agrees_with_binary_search_past_a_shared_prefix(
            prefix in near_key(),
            tails in proptest::collection::btree_set(near_key(), 1..80),
            probes in proptest::collection::vec(near_key(), 0..40),
            cut in 0usize..30,
        ) {
            // Keys sharing `prefix` (so heads are taken past it), and
            // probes inside, before, after and partway into the prefix.
            let keys: Vec<Vec<u8>> = tails.iter().map(|t| [&prefix[..], t].concat()).collect();
            let mut leaf = LeafData::default();
            for k in &keys {
                leaf.push(k, Entry::Value(ValueRef::Inline(b"v"), NO_DEADLINE));
            }
            proptest::prop_assert!(leaf.skip as usize >= prefix.len());
            let mut all: Vec<Vec<u8>> = keys.clone();
            all.push(prefix[..cut.min(prefix.len())].to_vec());
            for p in &probes {
                all.push(p.clone());
                all.push([&prefix[..], p].concat());
                all.push([&prefix[..cut.min(prefix.len())], p].concat());
            }
            for k in &keys {
                all.push([&k[..], &[0]].concat());
                all.push(k[..k.len().saturating_sub(1)].to_vec());
            }
            for p in &all {
                proptest::prop_assert_eq!(leaf.find(p), keys.binary_search(p), "probe {:?}", p);
            }
        }
    }

    #[test]
    fn the_skipped_prefix_shrinks_as_keys_diverge() {
        // Each key shares less with the first than the one before, so the
        // heads are taken again, past a shorter prefix, several times.
        let keys: Vec<Vec<u8>> = (0..20u8)
            .map(|i| {
                let mut k = vec![b'a'; 24];
                k[23 - i as usize] = b'b';
                k.push(i);
                k
            })
            .collect();
        let mut leaf = LeafData::default();
        for (i, k) in keys.iter().enumerate() {
            leaf.push(k, Entry::Value(ValueRef::Inline(b"v"), NO_DEADLINE));
            if i > 0 {
                assert_eq!(leaf.skip as usize, common_prefix_len(&keys[0], k));
            }
            for (j, probe) in keys[..=i].iter().enumerate() {
                assert_eq!(leaf.find(probe), Ok(j), "after {i} pushes");
            }
            assert_eq!(leaf.find(b"a"), Err(0));
            assert_eq!(leaf.find(b"c"), Err(i + 1));
        }
    }

    #[test]
    fn common_prefix_len_counts_equal_leading_bytes() {
        assert_eq!(common_prefix_len(b"", b"abc"), 0);
        assert_eq!(common_prefix_len(b"abc", b"abc"), 3);
        assert_eq!(common_prefix_len(b"abcdefghij", b"abcdefghiX"), 9);
        assert_eq!(common_prefix_len(b"abcdefghij", b"abcXefghij"), 3);
        assert_eq!(
            common_prefix_len(b"abcdefghijklmnopq", b"abcdefghijklmnopq!"),
            17
        );
        assert_eq!(common_prefix_len(b"\x00\x01", b"\x00\x02"), 1);
    }

    #[test]
    fn find_agrees_with_binary_search_when_heads_tie_across_blocks() {
        // Keys sharing their first 8 bytes in runs of various lengths, so
        // equal heads span summary blocks.
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for group in 0..12u8 {
            for i in 0..(group as u32 * 5 + 1) {
                keys.push(
                    [
                        b"prefix__".as_slice(),
                        &[group],
                        format!("{i:04}").as_bytes(),
                    ]
                    .concat(),
                );
            }
        }
        keys.sort();
        let mut leaf = LeafData::default();
        for k in &keys {
            leaf.push(k, Entry::Value(ValueRef::Inline(b"v"), NO_DEADLINE));
        }
        let mut probes = keys.clone();
        for k in &keys {
            let mut less = k.clone();
            less.pop();
            probes.push(less);
            let mut more = k.clone();
            more.push(0);
            probes.push(more);
        }
        probes.push(Vec::new());
        probes.push(vec![0xff; 12]);
        for p in &probes {
            assert_eq!(leaf.find(p), keys.binary_search(p), "probe {p:?}");
        }
    }

    #[test]
    fn find_locates_every_key() {
        let mut leaf = LeafData::default();
        let keys: Vec<Vec<u8>> = (0..300u32)
            .map(|i| format!("key{:05}", i * 3).into_bytes())
            .collect();
        for k in &keys {
            leaf.push(k, Entry::Value(ValueRef::Inline(b"v"), NO_DEADLINE));
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(leaf.find(k), Ok(i));
            let mut before = k.clone();
            *before.last_mut().unwrap() -= 1;
            assert_eq!(leaf.find(&before), Err(i));
        }
    }
}
