//! The walk: the runs' writes within a range, in key order or in reverse,
//! one per key (the newest run's), picked by a tournament over the runs'
//! next entries; and `WalkPosition`, where a walk stands, which a scan
//! keeps from one chunk to the next. Merges into the tree, scans and pair
//! counts all go through it.

use super::run::Run;
use kivi_tree::compare_keys;
use std::cmp::Ordering as KeyOrder;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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
pub(super) struct Walk<'a> {
    runs: &'a [Arc<Run>],
    pub(super) at: WalkPosition,
    /// `losers[0]` is the winner: the run whose next entry comes first (on
    /// equal keys the newest run, the last). `losers[p]` for `p` in
    /// `1..runs.len()` is the run that lost at inner node `p`; run `r`'s
    /// leaf is node `runs.len() + r`, and node `p`'s parent is `p / 2`.
    losers: Vec<usize>,
}

/// A write a walk met: its run, its index there, and what any write of its
/// key has learned about the tree under the buffer.
pub(super) struct Met<'a> {
    pub(super) run: &'a Run,
    pub(super) at: usize,
    pub(super) tree: u8,
}

impl<'a> Walk<'a> {
    pub(super) fn new(
        runs: &'a [Arc<Run>],
        low: Bound<&[u8]>,
        high: Bound<&[u8]>,
        forward: bool,
    ) -> Self {
        Self::resume(
            runs,
            WalkPosition {
                left: runs.iter().map(|r| r.within(low, high)).collect(),
                forward,
            },
        )
    }

    /// A walk going on from `at`, a position over these runs.
    pub(super) fn resume(runs: &'a [Arc<Run>], at: WalkPosition) -> Self {
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
    pub(super) fn next(&mut self) -> Option<Met<'a>> {
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

#[cfg(test)]
mod tests {
    use crate::write_buffer::{Chunk, WriteBuffer};
    use std::ops::Bound;

    #[test]
    fn inverted_and_empty_ranges_take_nothing() {
        let b = WriteBuffer::default().with(b"m", Some(b"1"));
        let mut out = Chunk::default();
        let low = Bound::Excluded(b"z".as_slice());
        let mut walk = b.walk_from(low, Bound::Included(b"a"), true);
        assert!(walk.is_done());
        b.take(&mut walk, 8, &mut out, 0);
        assert!(out.is_empty());
        let at = Bound::Excluded(b"m".as_slice());
        let mut walk = b.walk_from(at, at, false);
        assert!(walk.is_done());
        b.take(&mut walk, 8, &mut out, 0);
        assert!(out.is_empty());
    }
}
