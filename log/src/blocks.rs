//! Where page records go in a page segment: packed into 4 KiB blocks.
//!
//! A tree page is read with one positioned read of its record. A record that
//! crosses a 4 KiB boundary costs two pages of the operating system's cache
//! and two at the device; at 10M pairs in a 256 MiB container that doubled
//! the bytes read per lookup. So a record of at most a block goes wholly
//! inside one block: into the free tail of an earlier block of the same
//! unwritten buffer if one fits it (best fit), else at the start of a new
//! block. A larger record starts on a block boundary. Every gap left over
//! becomes a padding record when the buffer is written, so a segment is still
//! a sequence of records from its header to its end.
//!
//! The smallest record is its 9-byte header: a gap of 1 to 8 bytes could hold
//! no padding record, so none is ever left (a record that would leave one in
//! its last block is moved 9 bytes on, behind a padding record of its own).

use crate::record::RECORD_HEADER_LEN;

/// Page segments are packed in blocks of this size, the size of an
/// operating-system page on every machine kivi targets.
pub const PAGE_BLOCK_BYTES: u64 = 4096;

const MIN_GAP: u64 = RECORD_HEADER_LEN as u64;

/// Free bytes `[start, end)` in the unwritten part of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gap {
    pub start: u64,
    pub end: u64,
}

impl Gap {
    fn len(&self) -> u64 {
        self.end - self.start
    }
}

/// The open gaps of one segment's unwritten buffer.
#[derive(Debug)]
pub(crate) struct BlockPacker {
    block: u64,
    /// Free tails of blocks in the buffer, each inside one block: records
    /// may still go there.
    open: Vec<Gap>,
    /// Gaps that only padding fills.
    closed: Vec<Gap>,
}

impl BlockPacker {
    pub fn new(block: u64) -> Self {
        assert!(block >= 2 * MIN_GAP, "blocks too small to pack");
        BlockPacker {
            block,
            open: Vec::new(),
            closed: Vec::new(),
        }
    }

    /// Bytes from `at` to the next block boundary (0 on a boundary).
    fn tail(&self, at: u64) -> u64 {
        (self.block - at % self.block) % self.block
    }

    /// Places a record of `len` bytes in a segment whose bytes, written or
    /// reserved, end at `end`. Returns the record's offset and the new end
    /// (a block boundary, or `end` if the record went into an earlier gap).
    pub fn place(&mut self, end: u64, len: u64) -> (u64, u64) {
        debug_assert!(len >= MIN_GAP);
        let mut end = end;
        let tail = self.tail(end);
        if tail != 0 {
            // The segment so far (its header) ends inside a block: the rest
            // of that block is a gap.
            let boundary = end + tail;
            if tail >= MIN_GAP {
                self.open.push(Gap {
                    start: end,
                    end: boundary,
                });
                end = boundary;
            } else {
                self.closed.push(Gap {
                    start: end,
                    end: boundary + self.block,
                });
                end = boundary + self.block;
            }
        }
        if len <= self.block {
            // Best fit: the gap with the least room that takes the record
            // and leaves nothing or room for a padding record.
            let best = self
                .open
                .iter()
                .enumerate()
                .filter(|(_, g)| g.len() == len || g.len() >= len + MIN_GAP)
                .min_by_key(|(_, g)| g.len())
                .map(|(i, _)| i);
            if let Some(i) = best {
                let g = &mut self.open[i];
                let offset = g.start;
                g.start += len;
                if g.start == g.end {
                    self.open.swap_remove(i);
                }
                return (offset, end);
            }
        }
        // At the end, from a block boundary.
        let mut offset = end;
        if (1..MIN_GAP).contains(&self.tail(offset + len)) {
            self.closed.push(Gap {
                start: offset,
                end: offset + MIN_GAP,
            });
            offset += MIN_GAP;
        }
        let record_end = offset + len;
        let new_end = record_end + self.tail(record_end);
        if new_end > record_end {
            self.open.push(Gap {
                start: record_end,
                end: new_end,
            });
        }
        (offset, new_end)
    }

    /// The gaps that padding records must fill before the buffer is written,
    /// in no particular order; the packer starts afresh.
    pub fn take_gaps(&mut self) -> Vec<Gap> {
        let mut gaps = std::mem::take(&mut self.closed);
        gaps.append(&mut self.open);
        debug_assert!(gaps.iter().all(|g| g.len() >= MIN_GAP));
        gaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_records_fill_gaps_best_first() {
        let mut p = BlockPacker::new(4096);
        // After a 62-byte header, its block's 4,034 free bytes could take
        // 4,030 but would keep 4, too few for padding: a new block.
        assert_eq!(p.place(62, 4030), (4096, 8192));
        // Gaps now: 4,034 bytes at 62 and 66 at 8,126.
        assert_eq!(p.place(8192, 3000), (62, 8192));
        assert_eq!(p.place(8192, 1000), (3062, 8192));
        // 57 bytes leave exactly a padding record in the 66-byte gap.
        assert_eq!(p.place(8192, 57), (8126, 8192));
        // 25 bytes fill the 34 left at 4,062, less the same 9.
        assert_eq!(p.place(8192, 25), (4062, 8192));
        let mut gaps = p.take_gaps();
        gaps.sort_by_key(|g| g.start);
        assert_eq!(
            gaps,
            vec![
                Gap {
                    start: 4087,
                    end: 4096
                },
                Gap {
                    start: 8183,
                    end: 8192
                }
            ]
        );
        assert!(p.take_gaps().is_empty());
    }

    #[test]
    fn no_gap_is_shorter_than_a_record_header() {
        let mut p = BlockPacker::new(4096);
        // 4,090 bytes would leave 6: the record moves on behind padding.
        assert_eq!(p.place(0, 4090), (9, 8192));
        // A big record starts on a boundary.
        assert_eq!(p.place(8192, 10_000), (8192, 20480));
    }

    proptest! {
        /// Records never overlap, a record of at most a block never crosses
        /// a boundary, larger ones start on one, and records and gaps
        /// together tile the segment from the header to the end.
        #[test]
        fn records_and_gaps_tile_the_segment(
            header in 0u64..200,
            flushes in prop::collection::vec(
                prop::collection::vec(prop_oneof![9u64..4200, 4080u64..4100, 4200u64..20_000], 1..40),
                1..4,
            ),
        ) {
            let block = 4096;
            let mut p = BlockPacker::new(block);
            let mut end = header;
            let mut pieces: Vec<(u64, u64)> = Vec::new();
            for lens in flushes {
                for len in lens {
                    let (offset, new_end) = p.place(end, len);
                    prop_assert!(offset + len <= new_end);
                    prop_assert!(new_end >= end && new_end % block == 0);
                    if len <= block && offset % block + len > block {
                        // Only a record that would leave 1-8 bytes crosses.
                        prop_assert!(block - len < MIN_GAP);
                    }
                    if len > block {
                        prop_assert!(offset % block == 0 || offset % block == MIN_GAP);
                    }
                    pieces.push((offset, offset + len));
                    end = new_end;
                }
                for g in p.take_gaps() {
                    prop_assert!(g.len() >= MIN_GAP);
                    pieces.push((g.start, g.end));
                }
            }
            pieces.sort();
            let mut at = header;
            for (s, e) in pieces {
                prop_assert_eq!(s, at, "pieces tile the segment");
                at = e;
            }
            prop_assert_eq!(at, end);
        }
    }
}
