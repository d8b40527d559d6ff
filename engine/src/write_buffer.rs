//! The write buffer: recent commits held in memory, sorted by key, in front
//! of the tree.
//!
//! Why: a batch of random updates applied straight to the tree touches one
//! leaf per key (a thousand random keys of a 1M-pair store land in a
//! thousand different leaves), so each update paid for a descent, a new leaf
//! node and, at the next checkpoint, a page write. Gathered here first and
//! merged into the tree in one large sorted batch, each leaf is rewritten
//! once for the many updates it has gathered (`update_probe`: 6.7 us of CPU
//! per update with 1,000-update merges, 2.1 with 200,000).
//!
//! Every key maps to a chain of links, newest first, each tagged with the
//! sequence number of the commit that wrote it. The group-commit leader is
//! the only writer and inserts a commit's operations after its record is
//! durable and before the version that includes it is published, so a
//! reader holding version `seq` sees exactly the links with a sequence
//! number up to `seq` and never one of a commit that failed. A buffer is
//! never emptied: merging it into the tree starts a new one, and versions
//! published before the merge keep the old one (and the old tree) alive.
//!
//! The skiplist is crossbeam's: readers search it while the leader
//! inserts, without locks.

use arc_swap::ArcSwap;
use crossbeam_skiplist::SkipMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Memory an entry costs beyond its key and value bytes: the skiplist node
/// with its tower, the slot, the link and the allocators' rounding (an
/// estimate; it only paces merges).
const ENTRY_OVERHEAD: u64 = 128;
/// A link added to a key already in the buffer.
const LINK_OVERHEAD: u64 = 48;

/// A key as the skiplist holds it: its first eight bytes inline, so that
/// most comparisons are settled without reaching the key's own allocation
/// (with the key alone, comparing took a fifth of the time of random
/// updates).
#[derive(PartialEq, Eq)]
struct BufKey {
    head: u64,
    bytes: Box<[u8]>,
}

impl BufKey {
    fn new(key: &[u8]) -> Self {
        let mut head = [0u8; 8];
        let n = key.len().min(8);
        head[..n].copy_from_slice(&key[..n]);
        BufKey {
            head: u64::from_be_bytes(head),
            bytes: key.into(),
        }
    }
}

impl Ord for BufKey {
    /// Byte order: the heads, big-endian and zero-padded, order as the
    /// keys' first eight bytes do; when they are equal the keys decide.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.head
            .cmp(&other.head)
            .then_with(|| self.bytes.cmp(&other.bytes))
    }
}

impl PartialOrd for BufKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One write of a key.
struct Link {
    seq: u64,
    /// `None` for a delete.
    value: Option<Box<[u8]>>,
    older: Option<Arc<Link>>,
}

impl Link {
    /// The newest link of this chain a reader of version `seq` sees.
    fn visible(&self, seq: u64) -> Option<&Link> {
        let mut link = self;
        loop {
            if link.seq <= seq {
                return Some(link);
            }
            link = link.older.as_deref()?;
        }
    }
}

/// Whether a buffered key is in the tree under the buffer; learned when
/// the pairs are first counted (see `WriteBuffer::pairs_delta`).
const TREE_UNKNOWN: u8 = 0;
const TREE_ABSENT: u8 = 1;
const TREE_PRESENT: u8 = 2;

struct Slot {
    head: ArcSwap<Link>,
    in_tree: AtomicU8,
}

/// What the buffer says about a key as of a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Not written since the tree under the buffer: ask the tree.
    NotHere,
    /// Deleted.
    Deleted,
    /// The value was copied out.
    Found,
}

/// Buffered pairs a scan has taken, in one allocation reused from chunk to
/// chunk (a vector per pair made scans over a full buffer twice as slow).
#[derive(Default)]
pub(crate) struct Chunk {
    bytes: Vec<u8>,
    /// Per pair: where its key starts, where its key ends (and its value
    /// starts), and where its value ends (`None`: a delete).
    pairs: Vec<(usize, usize, Option<usize>)>,
    /// Pairs before this one were consumed.
    next: usize,
}

impl Chunk {
    fn clear(&mut self) {
        self.bytes.clear();
        self.pairs.clear();
        self.next = 0;
    }

    fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        let value_end = value.map(|v| {
            self.bytes.extend_from_slice(v);
            self.bytes.len()
        });
        self.pairs.push((start, key_end, value_end));
    }

    /// No pair left to consume.
    pub fn is_empty(&self) -> bool {
        self.next == self.pairs.len()
    }

    /// The next pair's key.
    pub fn front_key(&self) -> Option<&[u8]> {
        let &(start, key_end, _) = self.pairs.get(self.next)?;
        Some(&self.bytes[start..key_end])
    }

    /// Consumes the next pair and returns its index.
    pub fn pop(&mut self) -> usize {
        debug_assert!(!self.is_empty());
        self.next += 1;
        self.next - 1
    }

    /// Whether pair `i` is a delete.
    pub fn is_delete(&self, i: usize) -> bool {
        self.pairs[i].2.is_none()
    }

    /// Pair `i`, a put.
    pub fn pair(&self, i: usize) -> (&[u8], &[u8]) {
        let (start, key_end, value_end) = self.pairs[i];
        let value_end = value_end.expect("a put");
        (&self.bytes[start..key_end], &self.bytes[key_end..value_end])
    }
}

/// Words (64 bits each) of a buffer's key filter: 256 KiB, 13 bits per key
/// for the default buffer's ~160,000 keys (a larger buffer only gets more
/// false positives).
const FILTER_WORDS: usize = 1 << 15;

/// A Bloom filter of the keys a buffer holds, one 64-bit word per key
/// (four bits in it), so that most lookups of keys the buffer does not hold
/// skip the skiplist's search (a few cache misses per level): with random
/// keys most reads miss the buffer. Bits are set before the version that
/// holds the key is published, so a reader never misses a key its version
/// holds.
struct Filter {
    words: Box<[AtomicU64]>,
}

impl Filter {
    fn new() -> Self {
        Filter {
            words: (0..FILTER_WORDS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn probe(key: &[u8]) -> (usize, u64) {
        let h = u64::from(crc32c::crc32c(key)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let word = (h >> 40) as usize % FILTER_WORDS;
        let mask = (1 << (h & 63))
            | (1 << ((h >> 6) & 63))
            | (1 << ((h >> 12) & 63))
            | (1 << ((h >> 18) & 63));
        (word, mask)
    }

    fn insert(&self, key: &[u8]) {
        let (word, mask) = Self::probe(key);
        self.words[word].fetch_or(mask, Ordering::Relaxed);
    }

    fn may_hold(&self, key: &[u8]) -> bool {
        let (word, mask) = Self::probe(key);
        self.words[word].load(Ordering::Relaxed) & mask == mask
    }
}

#[derive(Default)]
pub(crate) struct WriteBuffer {
    map: SkipMap<BufKey, Slot>,
    /// Made at the first insert (a buffer that stays empty costs nothing).
    filter: std::sync::OnceLock<Filter>,
    /// Memory held, estimated.
    bytes: AtomicU64,
}

impl WriteBuffer {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Memory held, estimated.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Distinct keys held.
    pub fn keys(&self) -> usize {
        self.map.len()
    }

    /// Records `value` (`None`: a delete) under `key` as written by commit
    /// `seq`. Only the group-commit leader calls this, with `seq` greater
    /// than every sequence number already inserted.
    pub fn insert(&self, key: &[u8], value: Option<&[u8]>, seq: u64) {
        let link = |older| {
            Arc::new(Link {
                seq,
                value: value.map(Box::from),
                older,
            })
        };
        let value_len = value.map_or(0, <[u8]>::len) as u64;
        self.filter.get_or_init(Filter::new).insert(key);
        // One search whether or not the key is here.
        let mut new = false;
        let entry = self.map.get_or_insert_with(BufKey::new(key), || {
            new = true;
            Slot {
                head: ArcSwap::new(link(None)),
                in_tree: AtomicU8::new(TREE_UNKNOWN),
            }
        });
        if new {
            self.bytes.fetch_add(
                key.len() as u64 + value_len + ENTRY_OVERHEAD,
                Ordering::Relaxed,
            );
        } else {
            let slot = entry.value();
            let head = slot.head.load_full();
            debug_assert!(head.seq < seq, "sequence numbers only grow");
            slot.head.store(link(Some(head)));
            self.bytes
                .fetch_add(value_len + LINK_OVERHEAD, Ordering::Relaxed);
        }
    }

    /// Looks `key` up as of version `seq`, copying a value found into `out`.
    pub fn get_into(&self, key: &[u8], seq: u64, out: &mut Vec<u8>) -> Lookup {
        match self.filter.get() {
            Some(f) if f.may_hold(key) => {}
            _ => return Lookup::NotHere,
        }
        let Some(entry) = self.map.get(&BufKey::new(key)) else {
            return Lookup::NotHere;
        };
        let head = entry.value().head.load();
        match head.visible(seq) {
            None => Lookup::NotHere,
            Some(Link { value: None, .. }) => Lookup::Deleted,
            Some(Link { value: Some(v), .. }) => {
                out.clear();
                out.extend_from_slice(v);
                Lookup::Found
            }
        }
    }

    /// Calls `f` with every key's newest write (`None`: a delete), in key
    /// order: what merging the buffer into the tree applies. Only for the
    /// leader, which is the only writer, so the newest link is its own.
    pub fn for_each_newest<F: FnMut(&[u8], Option<&[u8]>)>(&self, mut f: F) {
        for entry in self.map.iter() {
            let head = entry.value().head.load();
            f(&entry.key().bytes, head.value.as_deref());
        }
    }

    /// The change the buffer makes to the tree's pair count as seen by
    /// version `seq`: keys it holds that the tree does not, minus keys it
    /// deleted that the tree holds. `in_tree` answers for the tree under the
    /// buffer (which never changes while the buffer lives); each key's
    /// answer is kept, so counting again costs a pass over the buffer, not
    /// a tree lookup per key.
    pub fn pairs_delta<E>(
        &self,
        seq: u64,
        in_tree: &mut dyn FnMut(&[u8]) -> Result<bool, E>,
    ) -> Result<i64, E> {
        let mut delta = 0i64;
        for entry in self.map.iter() {
            let slot = entry.value();
            let head = slot.head.load();
            let Some(link) = head.visible(seq) else {
                continue;
            };
            let present = match slot.in_tree.load(Ordering::Relaxed) {
                TREE_PRESENT => true,
                TREE_ABSENT => false,
                _ => {
                    let present = in_tree(&entry.key().bytes)?;
                    slot.in_tree.store(
                        if present { TREE_PRESENT } else { TREE_ABSENT },
                        Ordering::Relaxed,
                    );
                    present
                }
            };
            delta += i64::from(link.value.is_some()) - i64::from(present);
        }
        Ok(delta)
    }

    /// Replaces what `out` holds with up to `max` pairs visible at `seq`
    /// within (`low`, `high`), walking forward or backward, and returns the
    /// bound from which the next call continues (`None`: the range is
    /// exhausted).
    pub fn take(
        &self,
        low: Bound<&[u8]>,
        high: Bound<&[u8]>,
        forward: bool,
        seq: u64,
        max: usize,
        out: &mut Chunk,
    ) -> Option<Vec<u8>> {
        out.clear();
        if self.map.is_empty() || range_is_empty(low, high) {
            return None;
        }
        let probe = |b: Bound<&[u8]>| match b {
            Bound::Included(k) => Bound::Included(BufKey::new(k)),
            Bound::Excluded(k) => Bound::Excluded(BufKey::new(k)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let range = self.map.range((probe(low), probe(high)));
        let mut taken = 0;
        let mut visit = |entry: crossbeam_skiplist::map::Entry<'_, BufKey, Slot>| {
            let head = entry.value().head.load();
            let key = &entry.key().bytes;
            if let Some(link) = head.visible(seq) {
                out.push(key, link.value.as_deref());
                taken += 1;
            }
            (taken >= max).then(|| key.to_vec())
        };
        if forward {
            range.into_iter().find_map(&mut visit)
        } else {
            range.rev().find_map(&mut visit)
        }
    }
}

/// Whether (`low`, `high`) holds no key (crossbeam's range asserts on an
/// inverted range).
fn range_is_empty(low: Bound<&[u8]>, high: Bound<&[u8]>) -> bool {
    match (low, high) {
        (Bound::Included(l), Bound::Included(h)) => l > h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Excluded(h))
        | (Bound::Excluded(l), Bound::Included(h)) => l >= h,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// One buffered pair: key, and value (`None`: deleted).
    type BufferedPair = (Vec<u8>, Option<Vec<u8>>);

    fn drain(c: &mut Chunk, into: &mut Vec<BufferedPair>) {
        while !c.is_empty() {
            let i = c.pop();
            let key = c.pairs[i];
            let key = c.bytes[key.0..key.1].to_vec();
            let value = (!c.is_delete(i)).then(|| c.pair(i).1.to_vec());
            into.push((key, value));
        }
    }

    fn get(b: &WriteBuffer, k: &[u8], seq: u64) -> Option<Option<Vec<u8>>> {
        let mut out = Vec::new();
        match b.get_into(k, seq, &mut out) {
            Lookup::NotHere => None,
            Lookup::Deleted => Some(None),
            Lookup::Found => Some(Some(out)),
        }
    }

    #[test]
    fn readers_see_only_their_version() {
        let b = WriteBuffer::default();
        b.insert(b"a", Some(b"1"), 5);
        b.insert(b"a", None, 6);
        b.insert(b"a", Some(b"3"), 8);
        assert_eq!(get(&b, b"a", 4), None);
        assert_eq!(get(&b, b"a", 5), Some(Some(b"1".to_vec())));
        assert_eq!(get(&b, b"a", 6), Some(None));
        assert_eq!(get(&b, b"a", 7), Some(None));
        assert_eq!(get(&b, b"a", 9), Some(Some(b"3".to_vec())));
        assert_eq!(get(&b, b"b", 9), None);
    }

    #[test]
    fn inverted_and_empty_ranges_take_nothing() {
        let b = WriteBuffer::default();
        b.insert(b"m", Some(b"1"), 1);
        let mut out = Chunk::default();
        let low = Bound::Excluded(b"z".as_slice());
        assert_eq!(
            b.take(low, Bound::Included(b"a"), true, 1, 8, &mut out),
            None
        );
        let at = Bound::Excluded(b"m".as_slice());
        assert_eq!(b.take(at, at, false, 1, 8, &mut out), None);
        assert!(out.is_empty());
    }

    proptest! {
        /// The skiplist's order (inline heads first) is the keys' byte
        /// order, for keys shorter and longer than a head and sharing one.
        #[test]
        fn buffer_keys_order_as_their_bytes(
            a in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..12),
            b in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..12),
        ) {
            prop_assert_eq!(BufKey::new(&a).cmp(&BufKey::new(&b)), a.cmp(&b));
        }
    }

    /// A write buffer against a model: a `BTreeMap` per version.
    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u8),
        Delete(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..24, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
            (0u8..24).prop_map(Op::Delete),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_model_at_every_version(commits in prop::collection::vec(prop::collection::vec(op(), 1..6), 1..30)) {
            let b = WriteBuffer::default();
            // The model: the buffered state (key -> newest write) after each commit.
            let mut models: Vec<BTreeMap<Vec<u8>, Option<Vec<u8>>>> = vec![BTreeMap::new()];
            for (i, ops) in commits.iter().enumerate() {
                let seq = i as u64 + 1;
                let mut next = models.last().unwrap().clone();
                let mut group = BTreeMap::new();
                for op in ops {
                    match *op {
                        Op::Put(k, v) => group.insert(vec![k], Some(vec![v])),
                        Op::Delete(k) => group.insert(vec![k], None),
                    };
                }
                for (k, v) in group {
                    b.insert(&k, v.as_deref(), seq);
                    next.insert(k, v);
                }
                models.push(next);
            }
            for (seq, model) in models.iter().enumerate() {
                let seq = seq as u64;
                for k in 0u8..24 {
                    prop_assert_eq!(get(&b, &[k], seq), model.get(&vec![k]).cloned());
                }
                // Scans in both directions, in small steps, over a sub-range.
                let (lo, hi) = (vec![3u8], vec![20u8]);
                let want: Vec<BufferedPair> = model
                    .range(lo.clone()..hi.clone())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for forward in [true, false] {
                    let mut got = Vec::new();
                    let mut chunk = Chunk::default();
                    let mut from: Option<Vec<u8>> = None;
                    loop {
                        let next = match (&from, forward) {
                            (None, _) => b.take(Bound::Included(&lo), Bound::Excluded(&hi), forward, seq, 3, &mut chunk),
                            (Some(f), true) => b.take(Bound::Excluded(f), Bound::Excluded(&hi), true, seq, 3, &mut chunk),
                            (Some(f), false) => b.take(Bound::Included(&lo), Bound::Excluded(f), false, seq, 3, &mut chunk),
                        };
                        drain(&mut chunk, &mut got);
                        match next {
                            Some(f) => from = Some(f),
                            None => break,
                        }
                    }
                    let mut want = want.clone();
                    if !forward {
                        want.reverse();
                    }
                    prop_assert_eq!(got, want);
                }
                // The pair count against a tree that holds the even keys.
                let delta = b
                    .pairs_delta::<()>(seq, &mut |k| Ok(k[0] % 2 == 0))
                    .unwrap();
                let want_delta: i64 = model
                    .iter()
                    .map(|(k, v)| i64::from(v.is_some()) - i64::from(k[0] % 2 == 0))
                    .sum();
                prop_assert_eq!(delta, want_delta);
            }
            let mut newest = Vec::new();
            b.for_each_newest(|k, v| newest.push((k.to_vec(), v.map(<[u8]>::to_vec))));
            let last: Vec<BufferedPair> = models.last().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(newest, last);
        }
    }
}
