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
//! Shape: a short stack of sorted *runs*, each immutable. A commit's
//! operations arrive sorted by key, one per key, so they become a run as
//! they are: an array of entries and one block holding their bytes. A new
//! run is merged with the run below it while that one is no longer (a
//! binary counter: after k commits of about the same size there are at most
//! log2(k) + 1 runs, and each write has been copied about log2(k) times, in
//! sequential passes). A lookup binary-searches the runs, newest first; a
//! walk (a scan, a merge into the tree) merges them, the newest run's write
//! of a key hiding the older ones.
//!
//! The buffer itself is a value: adding a commit makes a new buffer that
//! shares the unchanged runs (a vector of a few `Arc`s), and the version
//! published with that commit holds it. So every version holds exactly the
//! commits it sees: nothing is filtered by sequence number, readers take no
//! lock, and a snapshot costs nothing. The group-commit leader is the only
//! writer and builds the new buffer after the commit's record is durable,
//! so no reader ever sees a commit that failed.
//!
//! Why not a skiplist (the buffer was crossbeam's until this design): every
//! insert searched from the top, a few cache misses per level of a list of
//! ~200,000 entries; in `update_probe` that search was the largest single
//! cost of random updates (20% of all samples, on the committing thread).
//! Here a commit's writes are copied once into their run and then moved in
//! sequential merges. See docs/benchmarks.md, "Sorted runs instead of a
//! skiplist".

use kivi_log::OpRef;
// Keys' first eight bytes, big-endian and zero-padded, as the tree's leaves
// keep them: heads order as the keys do, so most comparisons never reach
// the key's own bytes.
use kivi_tree::key_head as head_of;
use kivi_tree::{compare_keys, prefetch_line};
use std::cmp::Ordering as KeyOrder;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Memory a write costs beyond its key and value bytes: its entry and its
/// head, and the room a run's arrays leave unused (`SpareArrays` makes
/// them a power of two long), taken as half again (an estimate; it only
/// paces merges into the tree).
const ENTRY_OVERHEAD: u64 = (size_of::<Entry>() + size_of::<u64>()) as u64 * 3 / 2;

/// Memory a commit's block costs beyond its bytes: the `Arc`'s counts, the
/// allocator's rounding and its slot in every run that points into it (an
/// estimate, as `ENTRY_OVERHEAD` is).
///
/// Blocks are never copied together, even for commits of one write (single
/// puts), whose block costs more than its bytes: merged runs that copied
/// their small blocks into one took memory of sizes up to 64 KiB from
/// whichever writer's thread led the commit, and with 64 writers the
/// allocator's pages for them, one set per thread, doubled the process's
/// memory (`examples/concurrent_probe`: 856-874 MiB peak with the copies,
/// 504 without, 426-428 with the skiplist).
const BLOCK_OVERHEAD: u64 = 64;

/// `Entry::value_len` of a delete.
const DELETED: u32 = u32::MAX;

/// Whether a buffered key is in the tree under the buffer; learned when
/// the pairs are first counted (see `WriteBuffer::pairs_delta`) and kept on
/// the entries that were visible then.
const TREE_UNKNOWN: u8 = 0;
const TREE_ABSENT: u8 = 1;
const TREE_PRESENT: u8 = 2;

/// One write in a run. Its key's head is in the run's `heads`, at the same
/// index; its key and value bytes lie one after the other in one of the
/// run's blocks.
struct Entry {
    block: u32,
    start: u32,
    key_len: u32,
    /// `DELETED` for a delete.
    value_len: u32,
    /// `TREE_UNKNOWN`, `TREE_ABSENT` or `TREE_PRESENT`.
    tree: AtomicU8,
}

/// A commit's writes, or several commits' merged: sorted by key, one write
/// per key. Never changed once built (but for the `tree` notes, which only
/// record a fact).
struct Run {
    /// The entries' key heads, apart from the entries so that a binary
    /// search touches eight bytes a step.
    heads: Vec<u64>,
    entries: Vec<Entry>,
    /// Each commit's key and value bytes; a merged run points into the
    /// blocks of the runs it merged (which may hold writes it replaced).
    blocks: Vec<Arc<[u8]>>,
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

/// A run's arrays. Its blocks' list is kept with the others: it is as
/// long as the run has commits, up to tens of thousands.
struct RunArrays {
    heads: Vec<u64>,
    entries: Vec<Entry>,
    blocks: Vec<Arc<[u8]>>,
}

/// Arrays shorter than this (entries) are left to the allocator: they are
/// small objects, whose pages it reuses promptly.
const MIN_SPARE_ENTRIES: usize = 64;

/// How many entries ahead of a walk, in the run it took from, the bytes
/// are prefetched; the block references twice as far.
/// (8 before: 16 made scans over a full buffer ~3% faster, `scan_bench`.)
const PREFETCH_AHEAD: usize = 16;

/// The arrays of dropped runs, kept for the next merges of a store's write
/// buffer, by size class: every array of this length or more is made a
/// power of two long (unused room, like a `Vec`'s, of at most half).
///
/// Why: the runs a merge replaces are freed moments later on another thread
/// (the one that drops superseded versions), and the next merge is made by
/// whichever writer's thread leads the next commit. Left to the allocator
/// (mimalloc), large arrays came out fresh, every page zeroed by the kernel
/// at its first touch: with 64 writers doing single puts
/// (`examples/concurrent_probe`), 90% of the time spent adding commits to
/// the buffer was `clear_page_erms`. Middle-sized ones stayed in pages of
/// the threads that made them, one set of pages per size and thread: 200 MiB
/// more memory at the peak with 64 writers.
pub(crate) struct SpareArrays {
    /// Index: log2 of the arrays' length.
    kept: parking_lot::Mutex<[Vec<RunArrays>; usize::BITS as usize]>,
    /// Most entries the kept arrays may hold in all.
    max_entries: usize,
}

impl SpareArrays {
    /// A store's spares, holding at most `max_bytes` of arrays.
    pub fn new(max_bytes: u64) -> Arc<Self> {
        let per_entry = (size_of::<Entry>() + size_of::<u64>()) as u64;
        Arc::new(SpareArrays {
            kept: parking_lot::Mutex::new(std::array::from_fn(|_| Vec::new())),
            max_entries: usize::try_from(max_bytes / per_entry).unwrap_or(usize::MAX),
        })
    }

    /// Entries kept, in all.
    fn kept_entries(kept: &[Vec<RunArrays>]) -> usize {
        kept.iter()
            .enumerate()
            .map(|(class, arrays)| arrays.len() << class)
            .sum()
    }

    /// Arrays with room for `capacity` entries: kept ones of its size
    /// class, or new ones.
    fn take(&self, capacity: usize) -> RunArrays {
        if capacity < MIN_SPARE_ENTRIES {
            return RunArrays {
                heads: Vec::with_capacity(capacity),
                entries: Vec::with_capacity(capacity),
                blocks: Vec::new(),
            };
        }
        let length = capacity.next_power_of_two();
        let class = length.trailing_zeros() as usize;
        if let Some(a) = self.kept.lock()[class].pop() {
            debug_assert!(a.heads.is_empty() && a.entries.capacity() == length);
            return a;
        }
        RunArrays {
            heads: Vec::with_capacity(length),
            entries: Vec::with_capacity(length),
            blocks: Vec::new(),
        }
    }

    /// Keeps a dropped run's arrays, if they are of a size class and there
    /// is room.
    fn keep(&self, mut a: RunArrays) {
        let length = a.entries.capacity();
        // `Vec::with_capacity` gives exactly the room asked for any type
        // that is not zero-sized; an array of another length came from
        // elsewhere and goes back to the allocator.
        if length < MIN_SPARE_ENTRIES || !length.is_power_of_two() || a.heads.capacity() != length {
            return;
        }
        a.heads.clear();
        a.entries.clear();
        // Dropped here, on the thread that drops the run, as they would be
        // without spares.
        a.blocks.clear();
        let mut kept = self.kept.lock();
        if Self::kept_entries(&kept[..]) + length <= self.max_entries {
            kept[length.trailing_zeros() as usize].push(a);
        }
    }
}

/// A length or an offset within a commit group, which is at most a batch
/// of 64 MiB (limits.rs).
fn small(n: usize) -> u32 {
    u32::try_from(n).expect("commit groups are far below 4 GiB (limits.rs)")
}

impl Run {
    /// The run of one commit's operations (`None`: a delete), which are
    /// sorted by key, one per key.
    fn of_group(ops: &[(&[u8], Option<&[u8]>)], spares: &Arc<SpareArrays>) -> Run {
        let total: usize = ops
            .iter()
            .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len))
            .sum();
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
            if let Some(v) = value {
                bytes.extend_from_slice(v);
            }
            heads.push(head);
            entries.push(Entry {
                block: 0,
                start,
                key_len: small(key.len()),
                value_len: value.map_or(DELETED, |v| small(v.len())),
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
    fn merge(older: &Run, newer: &Run) -> Run {
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

    fn len(&self) -> usize {
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
    fn prefetch(&self, i: usize, forward: bool) {
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

    fn key(&self, i: usize) -> &[u8] {
        let e = &self.entries[i];
        &self.blocks[e.block as usize][e.start as usize..][..e.key_len as usize]
    }

    /// `None` for a delete.
    fn value(&self, i: usize) -> Option<&[u8]> {
        let e = &self.entries[i];
        if e.value_len == DELETED {
            return None;
        }
        let at = e.start as usize + e.key_len as usize;
        Some(&self.blocks[e.block as usize][at..at + e.value_len as usize])
    }

    /// Entry `i`'s key against `key` (whose head is `head`).
    #[inline]
    fn compare(&self, i: usize, head: u64, key: &[u8]) -> KeyOrder {
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
    fn find(&self, key: &[u8]) -> Option<usize> {
        let i = self.count_below(key, false);
        (i < self.len() && self.key(i) == key).then_some(i)
    }

    /// The entries within (`low`, `high`), as a range of indices.
    fn within(&self, low: Bound<&[u8]>, high: Bound<&[u8]>) -> (usize, usize) {
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

/// Where a walk over a buffer's runs stands: per run, the entries not
/// visited yet (forward takes from the start, backward from the end). A
/// scan keeps it between the chunks it takes, so each chunk goes on where
/// the last one stopped without searching the runs again.
#[derive(Debug, Default)]
pub(crate) struct WalkPosition {
    left: Vec<(usize, usize)>,
    forward: bool,
}

impl WalkPosition {
    /// No entry left in any run.
    pub fn is_done(&self) -> bool {
        self.left.iter().all(|(s, e)| s == e)
    }
}

/// A walk over the runs' keys within a range, in key order or in reverse:
/// for each key, the newest run's write.
///
/// The runs' next entries play a tournament (a tree of losers, as in
/// Knuth's replacement selection): each inner node keeps the run that lost
/// the match played there, the root the overall winner. Taking the winner's
/// entry and replaying its path costs one comparison per level, log2(runs),
/// where picking the first of every run's next entries cost one per run,
/// and stepping past a key written in several runs another. With the 6
/// runs of `scan_bench`'s buffer that gained only 2-4% (the walk waits for
/// memory more than it compares); single puts from many writers leave
/// twice as many runs.
struct Walk<'a> {
    runs: &'a [Arc<Run>],
    at: WalkPosition,
    /// `losers[0]` is the winner: the run whose next entry comes first (on
    /// equal keys the newest run, the last). `losers[p]` for `p` in
    /// `1..runs.len()` is the run that lost at inner node `p`; run `r`'s
    /// leaf is node `runs.len() + r`, and node `p`'s parent is `p / 2`.
    losers: Vec<usize>,
}

/// A write a walk met: its run, its index there, and what any write of its
/// key has learned about the tree under the buffer.
struct Met<'a> {
    run: &'a Run,
    at: usize,
    tree: u8,
}

impl<'a> Walk<'a> {
    fn new(runs: &'a [Arc<Run>], low: Bound<&[u8]>, high: Bound<&[u8]>, forward: bool) -> Self {
        Self::resume(
            runs,
            WalkPosition {
                left: runs.iter().map(|r| r.within(low, high)).collect(),
                forward,
            },
        )
    }

    /// A walk going on from `at`, a position over these runs.
    fn resume(runs: &'a [Arc<Run>], at: WalkPosition) -> Self {
        assert_eq!(at.left.len(), runs.len(), "a position over these runs");
        let n = runs.len();
        let mut walk = Walk {
            runs,
            at,
            losers: vec![0; n.max(1)],
        };
        // Play every match bottom-up: `won[p]` is the winner below node p.
        let mut won = vec![0; 2 * n];
        for (r, w) in won[n..].iter_mut().enumerate() {
            *w = r;
        }
        for p in (1..n).rev() {
            let (a, b) = (won[2 * p], won[2 * p + 1]);
            let (winner, loser) = if walk.beats(a, b) { (a, b) } else { (b, a) };
            won[p] = winner;
            walk.losers[p] = loser;
        }
        walk.losers[0] = if n > 1 { won[1] } else { 0 };
        walk
    }

    /// The index run `r` would give next, if it has one left.
    #[inline]
    fn front(&self, r: usize) -> Option<usize> {
        let (start, end) = self.at.left[r];
        if start == end {
            None
        } else if self.at.forward {
            Some(start)
        } else {
            Some(end - 1)
        }
    }

    /// Whether run `a`'s next entry comes before run `b`'s in the walk's
    /// order: a run with entries left before one without, on equal keys
    /// the newer run (the higher index).
    #[inline]
    fn beats(&self, a: usize, b: usize) -> bool {
        let (ia, ib) = match (self.front(a), self.front(b)) {
            (Some(ia), Some(ib)) => (ia, ib),
            (ia, _) => return ia.is_some(),
        };
        // Heads first, as `Run::compare` does, but reaching for `b`'s key
        // only when they tie (a match is played at every level of every
        // step; `compare` takes the key made already).
        let (ra, rb) = (&self.runs[a], &self.runs[b]);
        let order = match ra.heads[ia].cmp(&rb.heads[ib]) {
            KeyOrder::Equal => compare_keys(ra.key(ia), rb.key(ib)),
            o => o,
        };
        match order {
            KeyOrder::Equal => a > b,
            KeyOrder::Less => self.at.forward,
            KeyOrder::Greater => !self.at.forward,
        }
    }

    /// Moves run `r` (the winner) past its next entry and replays its path
    /// to the root.
    #[inline]
    fn advance(&mut self, r: usize) {
        let (start, end) = &mut self.at.left[r];
        debug_assert!(start < end);
        if self.at.forward {
            *start += 1;
        } else {
            *end -= 1;
        }
        let mut winner = r;
        let mut p = (self.runs.len() + r) / 2;
        while p >= 1 {
            let held = self.losers[p];
            if self.beats(held, winner) {
                self.losers[p] = winner;
                winner = held;
            }
            p /= 2;
        }
        self.losers[0] = winner;
    }

    /// The next key's newest write.
    fn next(&mut self) -> Option<Met<'a>> {
        if self.runs.is_empty() {
            return None;
        }
        let b = self.losers[0];
        let bi = self.front(b)?;
        let run: &'a Run = &self.runs[b];
        // This run moves on past `bi`; fetch what it will read a few
        // entries on.
        run.prefetch(bi, self.at.forward);
        let (head, key) = (run.heads[bi], run.key(bi));
        let mut tree = run.entries[bi].tree.load(Ordering::Relaxed);
        self.advance(b);
        // Older runs' writes of the same key come next (the newest won the
        // tie): step past them.
        loop {
            let r = self.losers[0];
            let Some(i) = self.front(r) else { break };
            let other = &self.runs[r];
            if other.compare(i, head, key) != KeyOrder::Equal {
                break;
            }
            tree = tree.max(other.entries[i].tree.load(Ordering::Relaxed));
            self.advance(r);
        }
        Some(Met { run, at: bi, tree })
    }
}

/// What the buffer says about a key.
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

// Copied, not referred to by run and index: a scan compares every buffered
// key with the tree's and returns the pair, and reaching the bytes through
// the run, its entry and its block each time was slower (measured with
// `scan_bench`, `SCAN_SNAPSHOT=1`) than one copy into this contiguous chunk.
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

/// Words (64 bits each) of a buffer's key filter: 512 KiB, 14 bits per key
/// for the ~300,000 kv40 writes the default buffer holds (a larger buffer
/// only gets more false positives).
const FILTER_WORDS: usize = 1 << 16;

/// A Bloom filter of the keys a buffer holds, one 64-bit word per key
/// (four bits in it), so that most lookups of keys the buffer does not hold
/// skip the runs' searches: with random keys most reads miss the buffer.
/// Shared by the buffers that grow one from another, it only gains bits: a
/// key added for a newer buffer is at worst a false positive for an older
/// one. Bits are set before the version that holds the key is published,
/// so a reader never misses a key its version holds.
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

/// The commits after the tree's, as one version sees them. Cheap to clone
/// (a few `Arc`s), never changed: `with_group` makes the next one.
#[derive(Default, Clone)]
pub(crate) struct WriteBuffer {
    /// Oldest first; each no shorter than the next (but for the runs that
    /// shrank when merging dropped replaced writes).
    runs: Vec<Arc<Run>>,
    /// Made with the first run (a buffer that stays empty costs nothing).
    filter: Option<Arc<Filter>>,
    /// Memory held, estimated.
    bytes: u64,
}

impl WriteBuffer {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// What dropping this buffer releases once `next` has replaced it:
    /// (entries, commits) of its runs that `next` no longer holds. A commit
    /// adds one run and merges it with the small runs below, so this is
    /// usually a few small runs, now and then a large one.
    pub fn released_beside(&self, next: &WriteBuffer) -> (usize, usize) {
        self.runs
            .iter()
            .filter(|r| !next.runs.iter().any(|n| Arc::ptr_eq(r, n)))
            .fold((0, 0), |(e, b), r| {
                (e + r.entries.len(), b + r.blocks.len())
            })
    }

    /// Memory a group of writes (sorted, one per key) adds to a buffer, as
    /// `bytes` counts it.
    pub fn group_cost(ops: &[(&[u8], Option<&[u8]>)]) -> u64 {
        let bytes: usize = ops
            .iter()
            .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len))
            .sum();
        bytes as u64 + ops.len() as u64 * ENTRY_OVERHEAD + BLOCK_OVERHEAD
    }

    /// Memory held, estimated: every write added since the buffer was
    /// empty (replaced ones too: their bytes stay in their blocks).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Writes held in the runs (a key may be written in several).
    pub fn writes(&self) -> usize {
        self.runs.iter().map(|r| r.len()).sum()
    }

    /// Distinct keys held; a walk over the runs.
    pub fn keys(&self) -> usize {
        if let [run] = self.runs.as_slice() {
            return run.len();
        }
        let mut walk = Walk::new(&self.runs, Bound::Unbounded, Bound::Unbounded, true);
        std::iter::from_fn(|| walk.next()).count()
    }

    /// This buffer with a commit's operations (`None`: a delete) added on
    /// top. `ops` is sorted by key, one per key. Only the group-commit
    /// leader calls this, after the commit is durable.
    #[must_use]
    pub fn with_group(
        &self,
        ops: &[(&[u8], Option<&[u8]>)],
        spares: &Arc<SpareArrays>,
    ) -> WriteBuffer {
        if ops.is_empty() {
            return self.clone();
        }
        let filter = self
            .filter
            .clone()
            .unwrap_or_else(|| Arc::new(Filter::new()));
        for (key, _) in ops {
            filter.insert(key);
        }
        let added = Self::group_cost(ops);
        let mut run = Run::of_group(ops, spares);
        let mut runs = self.runs.clone();
        while let Some(below) = runs.last() {
            if below.len() > run.len() {
                break;
            }
            run = Run::merge(below, &run);
            runs.pop();
        }
        runs.push(Arc::new(run));
        WriteBuffer {
            runs,
            filter: Some(filter),
            bytes: self.bytes + added,
        }
    }

    /// Records one write, as a commit of its own would (tests build
    /// buffers with it).
    #[cfg(test)]
    pub fn with(&self, key: &[u8], value: Option<&[u8]>) -> WriteBuffer {
        self.with_group(&[(key, value)], &SpareArrays::new(1 << 20))
    }

    /// Looks `key` up, copying a value found into `out`.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Lookup {
        match self.find(key) {
            None => Lookup::NotHere,
            Some(None) => Lookup::Deleted,
            Some(Some(v)) => {
                out.clear();
                out.extend_from_slice(v);
                Lookup::Found
            }
        }
    }

    /// The newest write of `key` here: `None` if not written since the
    /// tree under the buffer, `Some(None)` if deleted, else its value.
    pub fn find(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        match &self.filter {
            Some(f) if f.may_hold(key) => {}
            _ => return None,
        }
        self.runs
            .iter()
            .rev()
            .find_map(|run| run.find(key).map(|i| run.value(i)))
    }

    /// Calls `f` with every key's newest write, in key order: what merging
    /// the buffer into the tree applies. The writes are lent, not copied.
    pub fn with_newest<R>(&self, f: impl FnOnce(&[OpRef<'_>]) -> R) -> R {
        let mut out: Vec<OpRef<'_>> = Vec::with_capacity(self.writes());
        let mut walk = Walk::new(&self.runs, Bound::Unbounded, Bound::Unbounded, true);
        while let Some(m) = walk.next() {
            let key = m.run.key(m.at);
            out.push(match m.run.value(m.at) {
                Some(v) => OpRef::Put(key, v),
                None => OpRef::Delete(key),
            });
        }
        f(&out)
    }

    /// The change the buffer makes to the tree's pair count: keys it holds
    /// that the tree does not, minus keys it deleted that the tree holds.
    /// `in_tree` answers for the tree under the buffer (which never changes
    /// while the buffer lives); each answer is kept on the write, so
    /// counting again costs a walk over the buffer, not a tree lookup per
    /// key.
    pub fn pairs_delta<E>(
        &self,
        in_tree: &mut dyn FnMut(&[u8]) -> Result<bool, E>,
    ) -> Result<i64, E> {
        let mut delta = 0i64;
        let mut walk = Walk::new(&self.runs, Bound::Unbounded, Bound::Unbounded, true);
        while let Some(m) = walk.next() {
            let present = match m.tree {
                TREE_PRESENT => true,
                TREE_ABSENT => false,
                _ => {
                    let present = in_tree(m.run.key(m.at))?;
                    m.run.entries[m.at].tree.store(
                        if present { TREE_PRESENT } else { TREE_ABSENT },
                        Ordering::Relaxed,
                    );
                    present
                }
            };
            delta += i64::from(m.run.value(m.at).is_some()) - i64::from(present);
        }
        Ok(delta)
    }

    /// Where a walk over the writes within (`low`, `high`) starts,
    /// forward or backward, for [`take`](Self::take).
    pub fn walk_from(&self, low: Bound<&[u8]>, high: Bound<&[u8]>, forward: bool) -> WalkPosition {
        Walk::new(&self.runs, low, high, forward).at
    }

    /// Replaces what `out` holds with the next (up to) `max` writes from
    /// `at`, one per key, the newest (puts and deletes), and moves `at`
    /// past them. `at` must come from this buffer's
    /// [`walk_from`](Self::walk_from).
    pub fn take(&self, at: &mut WalkPosition, max: usize, out: &mut Chunk) {
        assert!(max > 0, "a chunk holds at least one pair");
        out.clear();
        let mut walk = Walk::resume(&self.runs, std::mem::take(at));
        while out.pairs.len() < max {
            let Some(m) = walk.next() else { break };
            out.push(m.run.key(m.at), m.run.value(m.at));
        }
        *at = walk.at;
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
            let key = c.front_key().unwrap().to_vec();
            let i = c.pop();
            let value = (!c.is_delete(i)).then(|| c.pair(i).1.to_vec());
            into.push((key, value));
        }
    }

    fn get(b: &WriteBuffer, k: &[u8]) -> Option<Option<Vec<u8>>> {
        let mut out = Vec::new();
        match b.get_into(k, &mut out) {
            Lookup::NotHere => None,
            Lookup::Deleted => Some(None),
            Lookup::Found => Some(Some(out)),
        }
    }

    #[test]
    fn each_buffer_holds_the_writes_it_was_made_with() {
        let b0 = WriteBuffer::default();
        let b1 = b0.with(b"a", Some(b"1"));
        let b2 = b1.with(b"a", None);
        let b3 = b2.with(b"a", Some(b"3"));
        assert_eq!(get(&b0, b"a"), None);
        assert_eq!(get(&b1, b"a"), Some(Some(b"1".to_vec())));
        assert_eq!(get(&b2, b"a"), Some(None));
        assert_eq!(get(&b3, b"a"), Some(Some(b"3".to_vec())));
        assert_eq!(get(&b3, b"b"), None);
        assert_eq!((b3.keys(), b0.keys()), (1, 0));
    }

    #[test]
    fn runs_stay_few_and_memory_counts_every_commit() {
        let mut b = WriteBuffer::default();
        for i in 0u32..1000 {
            b = b.with(&i.to_be_bytes(), Some(b"v"));
            // A binary counter: one run per bit of the commits so far.
            assert_eq!(b.runs.len(), (i + 1).count_ones() as usize);
        }
        assert_eq!((b.keys(), b.writes()), (1000, 1000));
        // Each commit's five bytes, its entry and its block.
        assert_eq!(b.bytes(), 1000 * (5 + ENTRY_OVERHEAD + BLOCK_OVERHEAD));
        // Merged runs point into the commits' blocks, in order.
        let blocks: usize = b.runs.iter().map(|r| r.blocks.len()).sum();
        assert_eq!(blocks, 1000);
        for i in 0u32..1000 {
            assert_eq!(get(&b, &i.to_be_bytes()), Some(Some(b"v".to_vec())));
        }
    }

    #[test]
    fn merges_reuse_the_arrays_of_dropped_runs() {
        let spares = SpareArrays::new(64 << 20);
        let group = |from: u32, step: u32| -> Vec<(Vec<u8>, Vec<u8>)> {
            (0..5000)
                .map(|i| {
                    (
                        (from + i * step).to_be_bytes().to_vec(),
                        i.to_be_bytes().to_vec(),
                    )
                })
                .collect()
        };
        let add = |b: &WriteBuffer, g: &[(Vec<u8>, Vec<u8>)]| {
            let ops: Vec<(&[u8], Option<&[u8]>)> = g
                .iter()
                .map(|(k, v)| (k.as_slice(), Some(v.as_slice())))
                .collect();
            b.with_group(&ops, &spares)
        };
        let (evens, odds) = (group(0, 2), group(1, 2));
        let one = add(&WriteBuffer::default(), &evens);
        let two = add(&one, &odds);
        assert_eq!((one.runs.len(), two.runs.len()), (1, 1), "merged");
        let kept = || SpareArrays::kept_entries(&spares.kept.lock()[..]);
        // The second group's run was dropped as the merge replaced it; the
        // first's is still held by `one`. Arrays are a power of two long.
        assert_eq!(kept(), 8192);
        drop(one);
        assert_eq!(kept(), 2 * 8192);
        let merged = two.runs[0].entries.as_ptr();
        drop(two);
        assert_eq!(kept(), 2 * 8192 + 16384);
        // The next merge of 10,000 writes gets the 10,000-entry arrays back.
        let three = add(&add(&WriteBuffer::default(), &odds), &evens);
        assert_eq!(three.runs[0].entries.as_ptr(), merged);
        assert_eq!(three.keys(), 10_000);
        for (k, v) in evens.iter().chain(&odds) {
            assert_eq!(get(&three, k), Some(Some(v.clone())));
        }
        // Within its bound: a pool of 4,096 entries keeps nothing larger.
        let small = SpareArrays::new(4096 * (size_of::<Entry>() + size_of::<u64>()) as u64);
        small.keep(small.take(5000));
        assert_eq!(SpareArrays::kept_entries(&small.kept.lock()[..]), 0);
    }

    #[test]
    fn inverted_and_empty_ranges_take_nothing() {
        let b = WriteBuffer::default().with(b"m", Some(b"1"));
        let mut out = Chunk::default();
        let low = Bound::Excluded(b"z".as_slice());
        let mut walk = b.walk_from(low, Bound::Included(b"a"), true);
        assert!(walk.is_done());
        b.take(&mut walk, 8, &mut out);
        assert!(out.is_empty());
        let at = Bound::Excluded(b"m".as_slice());
        let mut walk = b.walk_from(at, at, false);
        assert!(walk.is_done());
        b.take(&mut walk, 8, &mut out);
        assert!(out.is_empty());
    }

    /// A write buffer against a model: a `BTreeMap` per commit.
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
        fn matches_a_model_at_every_commit(commits in prop::collection::vec(prop::collection::vec(op(), 1..12), 1..40)) {
            // The buffers and the model (key -> newest write) after each commit.
            let mut buffers = vec![WriteBuffer::default()];
            // Small, so arrays are kept and reused (at least MIN_SPARE_ENTRIES long).
            let spares = SpareArrays::new(1 << 20);
            let mut models: Vec<BTreeMap<Vec<u8>, Option<Vec<u8>>>> = vec![BTreeMap::new()];
            for ops in &commits {
                let mut next = models.last().unwrap().clone();
                let mut group = BTreeMap::new();
                for op in ops {
                    match *op {
                        Op::Put(k, v) => group.insert(key_of(k), Some(vec![v])),
                        Op::Delete(k) => group.insert(key_of(k), None),
                    };
                }
                let group_ops: Vec<(&[u8], Option<&[u8]>)> =
                    group.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
                buffers.push(buffers.last().unwrap().with_group(&group_ops, &spares));
                next.extend(group);
                models.push(next);
            }
            // Every buffer still answers for its own commits, after the
            // later ones merged runs it shares.
            for (b, model) in buffers.iter().zip(&models) {
                for k in 0u8..24 {
                    prop_assert_eq!(get(b, &key_of(k)), model.get(&key_of(k)).cloned());
                }
                prop_assert_eq!(b.keys(), model.len());
                // Scans in both directions, in small steps, over a sub-range.
                let (lo, hi) = ([[1u8; 8].as_slice(), &[5]].concat(), vec![20u8]);
                let want: Vec<BufferedPair> = model
                    .range(lo.clone()..hi.clone())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for forward in [true, false] {
                    let mut got = Vec::new();
                    let mut chunk = Chunk::default();
                    let mut walk = b.walk_from(Bound::Included(&lo), Bound::Excluded(&hi), forward);
                    while !walk.is_done() {
                        b.take(&mut walk, 3, &mut chunk);
                        prop_assert!(!chunk.is_empty(), "a walk not done takes something");
                        drain(&mut chunk, &mut got);
                    }
                    b.take(&mut walk, 3, &mut chunk);
                    prop_assert!(chunk.is_empty());
                    let mut want = want.clone();
                    if !forward {
                        want.reverse();
                    }
                    prop_assert_eq!(got, want);
                }
                // The pair count against a tree that holds the even keys,
                // twice: the second time from the notes the first left.
                let want_delta: i64 = model
                    .iter()
                    .map(|(k, v)| i64::from(v.is_some()) - i64::from(in_tree(k)))
                    .sum();
                for _ in 0..2 {
                    let delta = b.pairs_delta::<()>(&mut |k| Ok(in_tree(k))).unwrap();
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
                let all: Vec<BufferedPair> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                prop_assert_eq!(newest, all);
            }
        }
    }
}
