//! A sorted run: one commit's writes, or several commits' merged, sorted by
//! key with one write per key, never changed once built. The write
//! buffer is a short stack of these (mod.rs).
//!
//! Why this shape: a commit's operations arrive sorted, one per key, so
//! they become a run as they are, copied once into one block; runs are
//! then merged pairwise in sequential passes that copy entries, never
//! bytes. A lookup binary-searches the keys' eight-byte heads, kept in an
//! array of their own so that each step touches eight bytes. A dropped
//! run hands its arrays to the store's `SpareArrays` (spare_arrays.rs).

use super::spare_arrays::{RunArrays, SpareArrays};
use super::{write_bytes, Stored, Write};
use kivi_log::NO_DEADLINE;
// Keys' first eight bytes, big-endian and zero-padded, as the tree's leaves
// keep them: heads order as the keys do, so most comparisons never reach
// the key's own bytes.
use kivi_tree::key_head as head_of;
use kivi_tree::{compare_keys, prefetch_line};
use std::cmp::Ordering as KeyOrder;
use std::ops::Bound;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// `Entry::value_len` of a delete.
const DELETED: u32 = u32::MAX;

/// Set in `Entry::key_len` when the value has a deadline: its 8 bytes
/// (little-endian) lie between the key and the value. Keys are at most
/// 4 KiB, so the bit is free, and entries stay 20 bytes.
const HAS_DEADLINE: u32 = 1 << 31;

/// Whether a buffered key is in the tree under the buffer; learned when
/// the pairs are first counted (see `WriteBuffer::pairs_delta`) and kept on
/// the entries that were visible then.
const TREE_UNKNOWN: u8 = 0;
pub(super) const TREE_ABSENT: u8 = 1;
/// In the tree, without a deadline.
pub(super) const TREE_PRESENT: u8 = 2;
/// In the tree, with a deadline (expired or not).
pub(super) const TREE_PRESENT_DEADLINE: u8 = 3;

/// One write in a run. Its key's head is in the run's `heads`, at the same
/// index; its key and value bytes lie one after the other in one of the
/// run's blocks.
pub(super) struct Entry {
    block: u32,
    start: u32,
    /// The key's length, and `HAS_DEADLINE`.
    key_len: u32,
    /// `DELETED` for a delete.
    value_len: u32,
    /// `TREE_UNKNOWN`, `TREE_ABSENT`, `TREE_PRESENT` or
    /// `TREE_PRESENT_DEADLINE`.
    pub(super) tree: AtomicU8,
}

/// A commit's writes, or several commits' merged: sorted by key, one write
/// per key. Never changed once built (but for the `tree` notes, which only
/// record a fact).
pub(super) struct Run {
    /// The entries' key heads, apart from the entries so that a binary
    /// search touches eight bytes a step.
    pub(super) heads: Vec<u64>,
    pub(super) entries: Vec<Entry>,
    /// Each commit's key and value bytes; a merged run points into the
    /// blocks of the runs it merged (which may hold writes it replaced).
    pub(super) blocks: Vec<Arc<[u8]>>,
    /// Where `heads` and `entries` go when the run is dropped.
    spares: Arc<SpareArrays>,
}

impl Drop for Run {
    fn drop(&mut self) {
        self.spares.keep(RunArrays {
            heads: std::mem::take(&mut self.heads),
            entries: std::mem::take(&mut self.entries),
            blocks: std::mem::take(&mut self.blocks),
        });
    }
}

/// How many entries ahead of a walk, in the run it took from, the bytes
/// are prefetched; the block references twice as far.
/// (8 before: 16 made scans over a full buffer ~3% faster, `scan_bench`.)
const PREFETCH_AHEAD: usize = 16;

/// A length or an offset within a commit group, which is at most a batch
/// of 64 MiB (limits.rs).
fn small(n: usize) -> u32 {
    u32::try_from(n).expect("commit groups are far below 4 GiB (limits.rs)")
}

impl Run {
    /// The run of one commit's operations (`None`: a delete), which are
    /// sorted by key, one per key.
    pub(super) fn of_group(ops: &[Write<'_>], spares: &Arc<SpareArrays>) -> Run {
        let total: usize = ops.iter().map(|&(k, v)| write_bytes(k, v)).sum();
        let mut bytes = Vec::with_capacity(total);
        let RunArrays {
            mut heads,
            mut entries,
            mut blocks,
        } = spares.take(ops.len());
        for (i, &(key, value)) in ops.iter().enumerate() {
            let head = head_of(key);
            if i > 0 {
                // Heads order as keys do: a cheap check of the caller's
                // promise, and the whole of it in debug builds.
                assert!(heads[i - 1] <= head, "a group's operations are sorted");
                debug_assert!(ops[i - 1].0 < key, "sorted, one per key");
            }
            let start = small(bytes.len());
            bytes.extend_from_slice(key);
            let mut key_len = small(key.len());
            assert!(key_len < HAS_DEADLINE, "keys are at most 4 KiB (limits.rs)");
            if let Some((v, deadline)) = value {
                if deadline != NO_DEADLINE {
                    bytes.extend_from_slice(&deadline.to_le_bytes());
                    key_len |= HAS_DEADLINE;
                }
                bytes.extend_from_slice(v);
            }
            heads.push(head);
            entries.push(Entry {
                block: 0,
                start,
                key_len,
                value_len: value.map_or(DELETED, |(v, _)| small(v.len())),
                tree: AtomicU8::new(TREE_UNKNOWN),
            });
        }
        debug_assert_eq!(bytes.len(), total);
        Run {
            heads,
            entries,
            blocks: {
                blocks.push(Arc::from(bytes));
                blocks
            },
            spares: spares.clone(),
        }
    }

    /// `older` and `newer` as one run; where both write a key, `newer`'s
    /// write is kept.
    pub(super) fn merge(older: &Run, newer: &Run) -> Run {
        let RunArrays {
            mut heads,
            mut entries,
            mut blocks,
        } = newer.spares.take(older.len() + newer.len());
        let shift = small(older.blocks.len());
        let (mut i, mut j) = (0, 0);
        loop {
            let order = match (i < older.len(), j < newer.len()) {
                (true, true) => older.compare(i, newer.heads[j], newer.key(j)),
                (true, false) => KeyOrder::Less,
                (false, true) => KeyOrder::Greater,
                (false, false) => break,
            };
            let (from, at, block_shift, tree) = match order {
                KeyOrder::Less => {
                    i += 1;
                    (
                        older,
                        i - 1,
                        0,
                        older.entries[i - 1].tree.load(Ordering::Relaxed),
                    )
                }
                KeyOrder::Greater => {
                    j += 1;
                    (
                        newer,
                        j - 1,
                        shift,
                        newer.entries[j - 1].tree.load(Ordering::Relaxed),
                    )
                }
                KeyOrder::Equal => {
                    // The same key, under the same tree: either note holds.
                    let tree = newer.entries[j]
                        .tree
                        .load(Ordering::Relaxed)
                        .max(older.entries[i].tree.load(Ordering::Relaxed));
                    i += 1;
                    j += 1;
                    (newer, j - 1, shift, tree)
                }
            };
            let e = &from.entries[at];
            heads.push(from.heads[at]);
            entries.push(Entry {
                block: e.block + block_shift,
                start: e.start,
                key_len: e.key_len,
                value_len: e.value_len,
                tree: AtomicU8::new(tree),
            });
        }
        blocks.extend(older.blocks.iter().chain(&newer.blocks).cloned());
        Run {
            heads,
            entries,
            blocks,
            spares: newer.spares.clone(),
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// A walk has just taken entry `i`: starts fetching the bytes of the
    /// entry `PREFETCH_AHEAD` further on in the walk's direction, and the
    /// block reference of the one twice as far, which that prefetch will
    /// need in its turn (nothing past the ends). A merged run's entries
    /// point into the blocks of many commits, so in key order every
    /// entry's bytes lie somewhere else in the heap, and a walk over a full
    /// buffer waited for memory at every pair.
    #[inline]
    pub(super) fn prefetch(&self, i: usize, forward: bool) {
        if self.blocks.len() == 1 {
            // One commit's block, in key order: the walk reads it in
            // sequence, as the hardware expects.
            return;
        }
        let ahead = |d: usize| {
            if forward {
                i.checked_add(d)
            } else {
                i.checked_sub(d)
            }
        };
        if let Some(e) = ahead(2 * PREFETCH_AHEAD).and_then(|f| self.entries.get(f)) {
            if let Some(block) = self.blocks.get(e.block as usize) {
                prefetch_line((block as *const Arc<[u8]>).cast());
            }
        }
        if let Some(e) = ahead(PREFETCH_AHEAD).and_then(|f| self.entries.get(f)) {
            if let Some(block) = self.blocks.get(e.block as usize) {
                let at = block.as_ptr().wrapping_add(e.start as usize);
                prefetch_line(at);
                // kv40 pairs are 80 bytes: their end is often on the next line.
                prefetch_line(at.wrapping_add(64));
            }
        }
    }

    #[inline]
    pub(super) fn key(&self, i: usize) -> &[u8] {
        let e = &self.entries[i];
        &self.blocks[e.block as usize][e.start as usize..][..(e.key_len & !HAS_DEADLINE) as usize]
    }

    /// The value and its deadline; `None` for a delete.
    #[inline]
    pub(super) fn value(&self, i: usize) -> Option<Stored<'_>> {
        let e = &self.entries[i];
        if e.value_len == DELETED {
            return None;
        }
        let block = &self.blocks[e.block as usize];
        let mut at = e.start as usize + (e.key_len & !HAS_DEADLINE) as usize;
        let mut deadline = NO_DEADLINE;
        if e.key_len & HAS_DEADLINE != 0 {
            deadline = u64::from_le_bytes(block[at..at + 8].try_into().expect("8 bytes"));
            at += 8;
        }
        Some((&block[at..at + e.value_len as usize], deadline))
    }

    /// Entry `i`'s key against `key` (whose head is `head`).
    #[inline]
    pub(super) fn compare(&self, i: usize, head: u64, key: &[u8]) -> KeyOrder {
        match self.heads[i].cmp(&head) {
            KeyOrder::Equal => compare_keys(self.key(i), key),
            o => o,
        }
    }

    /// How many entries have keys below `key` (`and_equal`: at or below).
    fn count_below(&self, key: &[u8], and_equal: bool) -> usize {
        let head = head_of(key);
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let below = match self.compare(mid, head, key) {
                KeyOrder::Less => true,
                KeyOrder::Equal => and_equal,
                KeyOrder::Greater => false,
            };
            if below {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The entry of `key`, if the run writes it.
    pub(super) fn find(&self, key: &[u8]) -> Option<usize> {
        let i = self.count_below(key, false);
        (i < self.len() && self.key(i) == key).then_some(i)
    }

    /// The entries within (`low`, `high`), as a range of indices.
    pub(super) fn within(&self, low: Bound<&[u8]>, high: Bound<&[u8]>) -> (usize, usize) {
        let start = match low {
            Bound::Included(k) => self.count_below(k, false),
            Bound::Excluded(k) => self.count_below(k, true),
            Bound::Unbounded => 0,
        };
        let end = match high {
            Bound::Included(k) => self.count_below(k, true),
            Bound::Excluded(k) => self.count_below(k, false),
            Bound::Unbounded => self.len(),
        };
        (start, end.max(start))
    }
}
