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
//! Every write is one entry, ordered by key and then newest first, tagged
//! with the sequence number of the commit that wrote it (as in LevelDB's
//! memtable). The group-commit leader is the only writer and inserts a
//! commit's operations after its record is durable and before the version
//! that includes it is published, so a reader holding version `seq` sees,
//! for each key, the newest entry with a sequence number up to `seq`, and
//! never one of a commit that failed. A buffer is never emptied: merging it
//! into the tree starts a new one, and versions published before the merge
//! keep the old one (and the old tree) alive.
//!
//! The skiplist is crossbeam's: readers search it while the leader
//! inserts, without locks. Its base interface is used, with one epoch pin
//! per call (a lookup, a group's inserts, a scan's chunk, a merge), not the
//! map's reference-counted entries, which pinned and counted at every step
//! of a walk. An entry is two allocations, the skiplist's node
//! and one holding the key and value bytes: a walk over the buffer (a scan,
//! a merge) meets two cache misses per write, not the four of a key with a
//! separate chain of values.

use crossbeam_epoch::{self as epoch, Guard};
use crossbeam_skiplist::base::SkipList;
use kivi_log::OpRef;
// Keys' first eight bytes, big-endian and zero-padded, as the tree's leaves
// keep them: heads order as the keys do, so most comparisons never reach
// the key's own bytes (comparing whole keys took a fifth of random updates).
use kivi_tree::key_head as head_of;
use std::borrow::Borrow;
use std::cmp::Ordering as KeyOrder;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Memory an entry costs beyond its key and value bytes: the skiplist node
/// with its tower and the allocators' rounding (an estimate; it only paces
/// merges).
const ENTRY_OVERHEAD: u64 = 96;

/// One write of a key, as the skiplist holds it.
struct Write {
    head: u64,
    seq: u64,
    /// The key's bytes, then the value's.
    bytes: Box<[u8]>,
    key_len: u32,
    delete: bool,
}

impl Write {
    fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len as usize]
    }

    /// `None` for a delete.
    fn value(&self) -> Option<&[u8]> {
        (!self.delete).then(|| &self.bytes[self.key_len as usize..])
    }
}

/// A place in the buffer's order: a key and a sequence number. Implemented
/// by the entries and by `Probe`, a borrowed key to search with, so that a
/// lookup allocates nothing (crossbeam searches with `K: Borrow<Q>`).
trait Place {
    fn head(&self) -> u64;
    fn key(&self) -> &[u8];
    fn seq(&self) -> u64;
}

impl Place for Write {
    fn head(&self) -> u64 {
        self.head
    }
    fn key(&self) -> &[u8] {
        Write::key(self)
    }
    fn seq(&self) -> u64 {
        self.seq
    }
}

struct Probe<'a> {
    head: u64,
    key: &'a [u8],
    seq: u64,
}

impl<'a> Probe<'a> {
    fn new(key: &'a [u8], seq: u64) -> Self {
        Probe {
            head: head_of(key),
            key,
            seq,
        }
    }
}

impl Place for Probe<'_> {
    fn head(&self) -> u64 {
        self.head
    }
    fn key(&self) -> &[u8] {
        self.key
    }
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// The order: by key bytes (the heads first), then newest first.
#[inline]
fn order(a: &(impl Place + ?Sized), b: &(impl Place + ?Sized)) -> KeyOrder {
    a.head()
        .cmp(&b.head())
        .then_with(|| a.key().cmp(b.key()))
        .then_with(|| b.seq().cmp(&a.seq()))
}

impl PartialEq for Write {
    fn eq(&self, other: &Self) -> bool {
        order(self, other).is_eq()
    }
}
impl Eq for Write {}
impl PartialOrd for Write {
    fn partial_cmp(&self, other: &Self) -> Option<KeyOrder> {
        Some(self.cmp(other))
    }
}
impl Ord for Write {
    fn cmp(&self, other: &Self) -> KeyOrder {
        order(self, other)
    }
}

impl<'a> PartialEq for dyn Place + 'a {
    fn eq(&self, other: &Self) -> bool {
        order(self, other).is_eq()
    }
}
impl<'a> Eq for dyn Place + 'a {}
impl<'a> PartialOrd for dyn Place + 'a {
    fn partial_cmp(&self, other: &Self) -> Option<KeyOrder> {
        Some(self.cmp(other))
    }
}
impl<'a> Ord for dyn Place + 'a {
    fn cmp(&self, other: &Self) -> KeyOrder {
        order(self, other)
    }
}
impl<'a> Borrow<dyn Place + 'a> for Write {
    fn borrow(&self) -> &(dyn Place + 'a) {
        self
    }
}

/// Whether a buffered key is in the tree under the buffer; learned when
/// the pairs are first counted (see `WriteBuffer::pairs_delta`) and kept on
/// the entry that was visible then.
const TREE_UNKNOWN: u8 = 0;
const TREE_ABSENT: u8 = 1;
const TREE_PRESENT: u8 = 2;

type Entry<'a, 'g> = crossbeam_skiplist::base::Entry<'a, 'g, Write, AtomicU8>;

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

    /// The key of the last pair pushed.
    fn last_key(&self) -> Option<&[u8]> {
        let &(start, key_end, _) = self.pairs.last()?;
        Some(&self.bytes[start..key_end])
    }

    /// Removes the last pair pushed.
    fn pop_last(&mut self) {
        if let Some((start, _, _)) = self.pairs.pop() {
            self.bytes.truncate(start);
        }
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

pub(crate) struct WriteBuffer {
    map: SkipList<Write, AtomicU8>,
    /// Made at the first insert (a buffer that stays empty costs nothing).
    filter: std::sync::OnceLock<Filter>,
    /// Distinct keys held.
    keys: AtomicUsize,
    /// Memory held, estimated.
    bytes: AtomicU64,
}

impl Default for WriteBuffer {
    fn default() -> Self {
        WriteBuffer {
            map: SkipList::new(epoch::default_collector().clone()),
            filter: std::sync::OnceLock::new(),
            keys: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
        }
    }
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
        self.keys.load(Ordering::Relaxed)
    }

    /// Records `value` (`None`: a delete) under `key` as written by commit
    /// `seq`. Only the group-commit leader calls this, with `seq` at least
    /// every sequence number already inserted, and each key once per `seq`.
    #[cfg(test)]
    pub fn insert(&self, key: &[u8], value: Option<&[u8]>, seq: u64) {
        self.insert_pinned(key, value, seq, &epoch::pin());
    }

    /// Records a commit's operations (`None`: a delete), as `insert` does
    /// one.
    pub fn insert_group(&self, ops: &[(&[u8], Option<&[u8]>)], seq: u64) {
        let guard = &epoch::pin();
        for &(key, value) in ops {
            self.insert_pinned(key, value, seq, guard);
        }
    }

    fn insert_pinned(&self, key: &[u8], value: Option<&[u8]>, seq: u64, guard: &Guard) {
        let value_bytes = value.unwrap_or_default();
        let mut bytes = Vec::with_capacity(key.len() + value_bytes.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value_bytes);
        let key_len = u32::try_from(key.len()).expect("keys are far below 4 GiB (limits.rs)");
        self.filter.get_or_init(Filter::new).insert(key);
        let head = head_of(key);
        let write = Write {
            head,
            seq,
            bytes: bytes.into_boxed_slice(),
            key_len,
            delete: value.is_none(),
        };
        let entry = self.map.insert(write, AtomicU8::new(TREE_UNKNOWN), guard);
        // The newest write of its key comes first: an older one of the
        // same key, if any, is the next entry. Heads first: comparing whole
        // keys here took 4% of random updates.
        let new_key = match entry.next(guard) {
            None => true,
            Some(older) => {
                let differs = older.key().head != head || older.key().key() != key;
                older.release(guard);
                differs
            }
        };
        #[cfg(debug_assertions)]
        if let Some(newer) = entry.prev(guard) {
            let same = newer.key().key() == key;
            newer.release(guard);
            debug_assert!(
                !same,
                "sequence numbers only grow, and a key is written once per commit"
            );
        }
        entry.release(guard);
        if new_key {
            self.keys.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes.fetch_add(
            (key.len() + value_bytes.len()) as u64 + ENTRY_OVERHEAD,
            Ordering::Relaxed,
        );
    }

    /// The newest write of `key` a reader of version `seq` sees.
    fn visible<'a: 'g, 'g>(
        &'a self,
        key: &[u8],
        seq: u64,
        guard: &'g Guard,
    ) -> Option<Entry<'a, 'g>> {
        let probe = Probe::new(key, seq);
        let entry = self
            .map
            .lower_bound::<dyn Place>(Bound::Included(&probe as &dyn Place), guard)?;
        (entry.key().key() == key).then_some(entry)
    }

    /// Looks `key` up as of version `seq`, copying a value found into `out`.
    pub fn get_into(&self, key: &[u8], seq: u64, out: &mut Vec<u8>) -> Lookup {
        match self.filter.get() {
            Some(f) if f.may_hold(key) => {}
            _ => return Lookup::NotHere,
        }
        let guard = &epoch::pin();
        let Some(entry) = self.visible(key, seq, guard) else {
            return Lookup::NotHere;
        };
        match entry.key().value() {
            None => Lookup::Deleted,
            Some(v) => {
                out.clear();
                out.extend_from_slice(v);
                Lookup::Found
            }
        }
    }

    /// Calls `f` with every key's newest write, in key order: what merging
    /// the buffer into the tree applies. Only for the leader, which is the
    /// only writer, so the newest write is its own. The writes are lent, not
    /// copied (the merge used to copy each key and value into allocations
    /// of its own).
    pub fn with_newest<R>(&self, f: impl FnOnce(&[OpRef<'_>]) -> R) -> R {
        let guard = &epoch::pin();
        let mut out: Vec<OpRef<'_>> = Vec::with_capacity(self.keys());
        let mut last: Option<&Write> = None;
        for entry in self.map.iter(guard) {
            let write = entry.key();
            if last.is_some_and(|l| l.head == write.head && l.key() == write.key()) {
                continue; // an older write of the key just taken
            }
            out.push(match write.value() {
                Some(v) => OpRef::Put(write.key(), v),
                None => OpRef::Delete(write.key()),
            });
            last = Some(write);
        }
        f(&out)
    }

    /// The change the buffer makes to the tree's pair count as seen by
    /// version `seq`: keys it holds that the tree does not, minus keys it
    /// deleted that the tree holds. `in_tree` answers for the tree under the
    /// buffer (which never changes while the buffer lives); each answer is
    /// kept on the entry, so counting again costs a pass over the buffer,
    /// not a tree lookup per key.
    pub fn pairs_delta<E>(
        &self,
        seq: u64,
        in_tree: &mut dyn FnMut(&[u8]) -> Result<bool, E>,
    ) -> Result<i64, E> {
        // Per key: its visible write, and the answer any of its entries has.
        struct Group<'a, 'g> {
            visible: Option<Entry<'a, 'g>>,
            known: u8,
            first: Entry<'a, 'g>,
        }
        let mut delta = 0i64;
        let mut finish = |g: Group<'_, '_>| -> Result<(), E> {
            let Some(visible) = g.visible else {
                return Ok(());
            };
            let present = match g.known {
                TREE_PRESENT => true,
                TREE_ABSENT => false,
                _ => {
                    let present = in_tree(visible.key().key())?;
                    visible.value().store(
                        if present { TREE_PRESENT } else { TREE_ABSENT },
                        Ordering::Relaxed,
                    );
                    present
                }
            };
            delta += i64::from(!visible.key().delete) - i64::from(present);
            Ok(())
        };
        let guard = &epoch::pin();
        let mut group: Option<Group<'_, '_>> = None;
        for entry in self.map.iter(guard) {
            let same = group
                .as_ref()
                .is_some_and(|g| g.first.key().key() == entry.key().key());
            if !same {
                if let Some(g) = group.take() {
                    finish(g)?;
                }
                group = Some(Group {
                    visible: None,
                    known: TREE_UNKNOWN,
                    first: entry.clone(),
                });
            }
            let g = group.as_mut().expect("a group was just begun");
            let known = entry.value().load(Ordering::Relaxed);
            if known != TREE_UNKNOWN {
                g.known = known;
            }
            if g.visible.is_none() && entry.key().seq <= seq {
                g.visible = Some(entry);
            }
        }
        if let Some(g) = group {
            finish(g)?;
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
        // A key's entries run from (key, newest) to (key, oldest): a range
        // of keys starts at its first key's newest entry and ends at its
        // last key's oldest.
        let low_probe = match low {
            Bound::Included(k) => Bound::Included(Probe::new(k, u64::MAX)),
            Bound::Excluded(k) => Bound::Excluded(Probe::new(k, 0)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let high_probe = match high {
            Bound::Included(k) => Bound::Included(Probe::new(k, 0)),
            Bound::Excluded(k) => Bound::Excluded(Probe::new(k, u64::MAX)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let guard = &epoch::pin();
        let range = self
            .map
            .range::<dyn Place, _>((as_place(&low_probe), as_place(&high_probe)), guard);
        let mut last_head = None;
        let mut visit = |entry: Entry<'_, '_>| -> Option<Vec<u8>> {
            let write = entry.key();
            if write.seq > seq {
                return None; // newer than the reader's version
            }
            let key = write.key();
            // Heads first: most neighbours differ in them.
            let same_key = last_head == Some(write.head) && out.last_key() == Some(key);
            if same_key && forward {
                return None; // an older write of a key already taken
            }
            if !same_key && out.pairs.len() == max {
                // Full, and the last key's writes are all seen.
                return out.last_key().map(<[u8]>::to_vec);
            }
            if same_key {
                // Backward, the newer write of a key comes after the older.
                out.pop_last();
            }
            out.push(key, write.value());
            last_head = Some(write.head);
            None
        };
        if forward {
            range.into_iter().find_map(&mut visit)
        } else {
            range.rev().find_map(&mut visit)
        }
    }
}

/// A bound on a probe as the skiplist's search takes it.
fn as_place<'p, 'k>(b: &'p Bound<Probe<'k>>) -> Bound<&'p (dyn Place + 'k)> {
    match b {
        Bound::Included(p) => Bound::Included(p),
        Bound::Excluded(p) => Bound::Excluded(p),
        Bound::Unbounded => Bound::Unbounded,
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
            let (pa, pb) = (Probe::new(&a, 7), Probe::new(&b, 7));
            prop_assert_eq!(order(&pa, &pb), a.cmp(&b));
            // And the skiplist's own comparison of entries agrees.
            let write = |k: &[u8]| Write { head: head_of(k), seq: 7, bytes: k.into(), key_len: k.len() as u32, delete: true };
            prop_assert_eq!(write(&a).cmp(&write(&b)), a.cmp(&b));
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

    /// The model test's keys: short ones, and longer ones that share their
    /// eight-byte head, so order is settled by the heads and by the rest.
    fn key_of(k: u8) -> Vec<u8> {
        match k % 3 {
            0 => vec![k],
            1 => [[1u8; 8].as_slice(), &[k]].concat(),
            _ => [[1u8; 8].as_slice(), &[k, 0, k]].concat(),
        }
    }

    /// Whether the tree under the buffer holds `key` (in the model test).
    fn in_tree(key: &[u8]) -> bool {
        key.last().is_some_and(|b| b % 2 == 0)
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
                        Op::Put(k, v) => group.insert(key_of(k), Some(vec![v])),
                        Op::Delete(k) => group.insert(key_of(k), None),
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
                    prop_assert_eq!(get(&b, &key_of(k), seq), model.get(&key_of(k)).cloned());
                }
                // Scans in both directions, in small steps, over a sub-range.
                let (lo, hi) = ([[1u8; 8].as_slice(), &[5]].concat(), vec![20u8]);
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
                    .pairs_delta::<()>(seq, &mut |k| Ok(in_tree(k)))
                    .unwrap();
                let want_delta: i64 = model
                    .iter()
                    .map(|(k, v)| i64::from(v.is_some()) - i64::from(in_tree(k)))
                    .sum();
                prop_assert_eq!(delta, want_delta);
            }
            let newest: Vec<BufferedPair> = b.with_newest(|newest| {
                newest
                    .iter()
                    .map(|op| match *op {
                        OpRef::Put(k, v) => (k.to_vec(), Some(v.to_vec())),
                        OpRef::Delete(k) => (k.to_vec(), None),
                    })
                    .collect()
            });
            let last: Vec<BufferedPair> = models.last().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(newest, last);
            prop_assert_eq!(b.keys(), models.last().unwrap().len());
        }
    }
}
