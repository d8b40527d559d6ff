//! The spare arrays: the `heads` and `entries` arrays of dropped runs,
//! kept per store for the next merges of its write buffer, so that large
//! arrays are reused warm rather than taken fresh (and zeroed by the
//! kernel) from the allocator. Why, measured: `SpareArrays` below.

use super::run::Entry;
use std::sync::Arc;

/// A run's arrays. Its blocks' list is kept with the others: it is as
/// long as the run has commits, up to tens of thousands.
pub(super) struct RunArrays {
    pub(super) heads: Vec<u64>,
    pub(super) entries: Vec<Entry>,
    pub(super) blocks: Vec<Arc<[u8]>>,
}

/// Arrays shorter than this (entries) are left to the allocator: they are
/// small objects, whose pages it reuses promptly.
const MIN_SPARE_ENTRIES: usize = 64;

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
    pub(super) fn take(&self, capacity: usize) -> RunArrays {
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
    pub(super) fn keep(&self, mut a: RunArrays) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write_buffer::tests::get;
    use crate::write_buffer::WriteBuffer;

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
            let ops: Vec<crate::write_buffer::Write> = g
                .iter()
                .map(|(k, v)| (k.as_slice(), Some((v.as_slice(), kivi_log::NO_DEADLINE))))
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
}
