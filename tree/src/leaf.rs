//! The in-memory form of a leaf: sorted keys with their values, packed into
//! one byte arena, plus an array of 8-byte key *heads* that binary search
//! touches first, so a lookup reads few cache lines.
//!
//! The same structure serves as a leaf's *delta*: a small sorted set of recent
//! changes (puts and tombstones) laid over an immutable base, so that changing
//! one key of a leaf does not copy the whole leaf (see node.rs).

use kivi_log::PageRef;
use parking_lot::Mutex;
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
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// Key order (memcmp), deciding most comparisons on the 8-byte heads.
#[inline]
pub fn compare_keys(a: &[u8], b: &[u8]) -> Ordering {
    match head(a).cmp(&head(b)) {
        Ordering::Equal => a.cmp(b),
        o => o,
    }
}

/// Binary search over sorted keys given their heads; like `slice::binary_search`.
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
            Ordering::Equal => key_at(mid).cmp(key),
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

/// Where something was written, and by which checkpoint. A checkpoint that
/// fails leaves its marks behind; they count only once that checkpoint's
/// generation is durable, so a failed checkpoint's writes are simply redone.
#[derive(Debug)]
pub struct Written<T: Copy>(Mutex<Option<(T, u64)>>);

impl<T: Copy> Default for Written<T> {
    fn default() -> Self {
        Written(Mutex::new(None))
    }
}

impl<T: Copy> Written<T> {
    pub fn get(&self, valid: impl Fn(u64) -> bool) -> Option<T> {
        match *self.0.lock() {
            Some((r, generation)) if valid(generation) => Some(r),
            _ => None,
        }
    }

    pub fn set(&self, r: T, generation: u64) {
        *self.0.lock() = Some((r, generation));
    }

    pub fn new_at(r: T, generation: u64) -> Self {
        Written(Mutex::new(Some((r, generation))))
    }

    /// Takes over whatever `other` records.
    pub fn copy_from(&self, other: &Written<T>) {
        let v = *other.0.lock();
        *self.0.lock() = v;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inline,
    Big,
    Tombstone,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    key_off: u32,
    key_len: u32,
    kind: Kind,
    /// Inline: offset of the value in `data`; big: index into `bigs`.
    val: u32,
    val_len: u32,
}

/// A value as found in a leaf.
#[derive(Debug, Clone, Copy)]
pub enum ValueRef<'a> {
    Inline(&'a [u8]),
    Big(&'a Arc<BigValue>),
}

impl ValueRef<'_> {
    pub fn len(&self) -> usize {
        match self {
            ValueRef::Inline(v) => v.len(),
            ValueRef::Big(b) => b.len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What an entry holds: a value, or (in deltas only) a tombstone.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    Value(ValueRef<'a>),
    Tombstone,
}

/// Estimated encoded size of an entry, used to decide where pages split.
pub fn entry_size(key_len: usize, value: Entry<'_>) -> usize {
    key_len
        + 2
        + match value {
            Entry::Value(ValueRef::Inline(v)) => v.len() + 2,
            Entry::Value(ValueRef::Big(_)) => 2 + kivi_log::PageRef::ENCODED_LEN,
            Entry::Tombstone => 1,
        }
}

#[derive(Debug, Default)]
pub struct LeafData {
    heads: Vec<u64>,
    slots: Vec<Slot>,
    data: Vec<u8>,
    bigs: Vec<Arc<BigValue>>,
    size: usize,
    tombstones: usize,
}

impl LeafData {
    pub fn with_capacity(entries: usize, bytes: usize) -> Self {
        LeafData {
            heads: Vec::with_capacity(entries),
            slots: Vec::with_capacity(entries),
            data: Vec::with_capacity(bytes),
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Estimated encoded size of all entries.
    pub fn size(&self) -> usize {
        self.size
    }

    pub fn tombstones(&self) -> usize {
        self.tombstones
    }

    /// Bytes of memory held.
    pub fn mem_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.heads.capacity() * 8
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.data.capacity()
            + self
                .bigs
                .iter()
                .map(|b| 16 + b.bytes.as_ref().map_or(0, |v| v.len()))
                .sum::<usize>()
    }

    #[inline]
    pub fn key(&self, i: usize) -> &[u8] {
        let s = &self.slots[i];
        &self.data[s.key_off as usize..(s.key_off + s.key_len) as usize]
    }

    #[inline]
    pub fn entry(&self, i: usize) -> Entry<'_> {
        let s = &self.slots[i];
        match s.kind {
            Kind::Inline => Entry::Value(ValueRef::Inline(
                &self.data[s.val as usize..(s.val + s.val_len) as usize],
            )),
            Kind::Big => Entry::Value(ValueRef::Big(&self.bigs[s.val as usize])),
            Kind::Tombstone => Entry::Tombstone,
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
        search_heads(&self.heads, key, |i| self.key(i))
    }

    /// Appends an entry; keys must come in strictly increasing order.
    pub fn push(&mut self, key: &[u8], entry: Entry<'_>) {
        debug_assert!(
            self.last_key().is_none_or(|last| last < key),
            "leaf keys out of order"
        );
        assert!(
            self.data.len() + key.len() + entry_len(entry) <= u32::MAX as usize,
            "leaf arena overflow"
        );
        let key_off = self.data.len() as u32;
        self.data.extend_from_slice(key);
        let (kind, val, val_len) = match entry {
            Entry::Value(ValueRef::Inline(v)) => {
                let off = self.data.len() as u32;
                self.data.extend_from_slice(v);
                (Kind::Inline, off, v.len() as u32)
            }
            Entry::Value(ValueRef::Big(b)) => {
                self.bigs.push(b.clone());
                (Kind::Big, (self.bigs.len() - 1) as u32, b.len)
            }
            Entry::Tombstone => {
                self.tombstones += 1;
                (Kind::Tombstone, 0, 0)
            }
        };
        self.heads.push(head(key));
        self.slots.push(Slot {
            key_off,
            key_len: key.len() as u32,
            kind,
            val,
            val_len,
        });
        self.size += entry_size(key.len(), entry);
    }

    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&[u8], Entry<'_>)> + ExactSizeIterator + '_ {
        (0..self.len()).map(move |i| (self.key(i), self.entry(i)))
    }

    /// Drops spare capacity (for nodes that will live in the cache).
    pub fn shrink(&mut self) {
        self.heads.shrink_to_fit();
        self.slots.shrink_to_fit();
        self.data.shrink_to_fit();
    }
}

fn entry_len(e: Entry<'_>) -> usize {
    match e {
        Entry::Value(ValueRef::Inline(v)) => v.len(),
        _ => 0,
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
            (Some((bk, _)), Some((ok, _))) => match bk.cmp(ok) {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn find_locates_every_key() {
        let mut leaf = LeafData::default();
        let keys: Vec<Vec<u8>> = (0..300u32)
            .map(|i| format!("key{:05}", i * 3).into_bytes())
            .collect();
        for k in &keys {
            leaf.push(k, Entry::Value(ValueRef::Inline(b"v")));
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(leaf.find(k), Ok(i));
            let mut before = k.clone();
            *before.last_mut().unwrap() -= 1;
            assert_eq!(leaf.find(&before), Err(i));
        }
    }
}
