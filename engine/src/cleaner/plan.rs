//! The cleaner's decisions, as pure functions of a few numbers: which page
//! segments the next checkpoint cleans, and which root children a sliced
//! checkpoint writes. No I/O, so they are tested on made-up stores.

use kivi_storage::SegmentId;
use std::collections::BTreeMap;

/// The cleaner plans to keep the files within this share of the target.
const PLAN_HEADROOM: f64 = 0.9;

/// The segment being written is closed for cleaning only when it holds at
/// least this much (and a quarter of what the files may take).
const CLOSE_MIN_BYTES: u64 = 1 << 20;

/// Most bytes of page segments one checkpoint cleans, unless twice the tree
/// is more (then that) or a single segment is: bounds the extra work,
/// and the memory of the relocation map, each checkpoint carries.
const CLEAN_STEP_BYTES: u64 = 64 << 20;

/// A sliced checkpoint writes about this share of the tree's changes.
pub(crate) const SLICES: u64 = 4;

/// What the next checkpoint cleans: the records before `floor`, after
/// closing the segment being written if `close_current` (the floor then
/// lies just past it: the next segment is where the copies go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub floor: u32,
    pub close_current: bool,
}

/// What `plan_floor` decides from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanInput<'a> {
    /// The page segments and their lengths.
    pub segments: &'a BTreeMap<SegmentId, u64>,
    /// The page segment being written and its length, if any.
    pub current: Option<(SegmentId, u64)>,
    /// The floor so far (it never moves back).
    pub floor: u32,
    /// Page segments before this hold nothing the newest durable
    /// checkpoint references.
    pub durable_oldest: u32,
    /// Bytes the last checkpoint wrote, if one was taken this session.
    pub last_written: Option<u64>,
    /// The durable tree's bytes: taken as the live bytes.
    pub tree_bytes: u64,
    /// The commit log's files.
    pub log_bytes: u64,
    /// `Options::space_amplification_max`.
    pub max: f64,
    /// Whether the checkpoint has anything new to write.
    pub new_pages: bool,
}

/// Where the next checkpoint should clean up to. The store's files are
/// to stay within `max` times its live bytes. The files are the page
/// segments the durable tree may use, the commit log (`log_bytes`) and,
/// until the checkpoint is durable and the segments it frees are deleted,
/// what this checkpoint and the next write (each estimated by what the last
/// one wrote, at most the tree's size, nothing before the first; nothing
/// when there is nothing new to write, `new_pages` false, or a
/// cleaning-only checkpoint would see its own copies as the next one's and
/// clean forever). The live bytes are taken as the tree's alone
/// (`tree_bytes`): the commit log since the last checkpoint is live too
/// (`stats` counts it), but a checkpoint retires it, after which the files
/// must still fit. While all that fits, the floor stays; otherwise it moves
/// past the oldest page segments, as many as the excess needs, at most
/// `CLEAN_STEP_BYTES` or the tree's size of them per checkpoint (at least
/// one), never into the segment being written.
pub(crate) fn plan_floor(input: &PlanInput<'_>) -> Plan {
    let keep = Plan {
        floor: input.floor,
        close_current: false,
    };
    // A tenth of headroom: the estimates (what checkpoints will write,
    // the commit log meanwhile) are rough, and the files must stay
    // under the target, not reach it.
    let tree_bytes = input.tree_bytes;
    let allowed = (tree_bytes as f64 * input.max * PLAN_HEADROOM) as u64;
    // Unknown before the first checkpoint of a session: then only what
    // is over the target now is cleaned (guessing the tree's size would
    // copy a whole clean tree at the first checkpoint after every open).
    let coming = if input.new_pages {
        input.last_written.unwrap_or(0).min(tree_bytes)
    } else {
        0
    };
    let page_bytes: u64 = input
        .segments
        .range(u64::from(input.durable_oldest)..)
        .map(|(_, len)| len)
        .sum();
    // Nothing is deleted until the checkpoint is durable, and the
    // segments kept now must leave room for the next checkpoint's
    // writes too: a few live pages left in every old segment (after
    // uniform random updates, ~0.3% of leaves between two checkpoints)
    // keep them all, so they cannot be counted on to die by themselves.
    let mut total = page_bytes + input.log_bytes + 2 * coming;
    if total <= allowed {
        return keep;
    }
    let mut floor = input.floor.max(input.durable_oldest);
    let mut step = 0u64;
    // What a checkpoint copies is the live part of the segments it
    // cleans, usually small (the rest died as checkpoints rewrote it);
    // the step bounds that at twice the tree's size, so the cleaner gets
    // ahead of checkpoints that rewrite most of a large tree (with one
    // tree's worth it only kept pace, at two trees on disk).
    let step_max = CLEAN_STEP_BYTES.max(2 * tree_bytes);
    for (&id, &len) in input.segments.range(u64::from(floor)..) {
        if input.current.is_some_and(|c| c.0 == id) {
            // Everything older is cleaned and it is still too much: the
            // segment being written holds much of it (a store smaller
            // than a segment holds everything there). Close it so it
            // can be cleaned too, if it is worth it.
            if step == 0 && total > allowed && len >= (allowed / 4).max(CLOSE_MIN_BYTES) {
                return Plan {
                    floor: id as u32 + 1,
                    close_current: true,
                };
            }
            break;
        }
        if total <= allowed || (step > 0 && step + len > step_max) {
            break;
        }
        total -= len;
        step += len;
        floor = id as u32 + 1;
    }
    Plan {
        floor: floor.max(input.floor),
        close_current: false,
    }
}

/// A changed root child a sliced checkpoint may leave unwritten: `page`,
/// the previous checkpoint's page for the same key range, whose commits go
/// up to `seq` and which holds `subtree` bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SliceCandidate<P> {
    pub seq: u64,
    /// Its place among the root's children.
    pub child: usize,
    pub page: P,
    pub subtree: u64,
}

/// Per root child (of `children`), the previous page to keep instead of
/// writing the changed child (`None`: written). The candidates whose pages
/// are oldest are written until about a `SLICES`th of `tree_bytes`; the
/// rest keep their previous pages.
pub(crate) fn choose_slice<P: Copy>(
    mut candidates: Vec<SliceCandidate<P>>,
    children: usize,
    tree_bytes: u64,
) -> Vec<Option<P>> {
    candidates.sort_unstable_by_key(|c| (c.seq, c.child));
    let mut keep = vec![None; children];
    let mut written = 0u64;
    for c in candidates {
        if written < tree_bytes / SLICES {
            written += c.subtree;
        } else {
            keep[c.child] = Some(c.page);
        }
    }
    keep
}

/// The cleaning line of a sliced checkpoint, given the first page segment
/// of each slice it keeps (`since`, any order, repeats allowed): the
/// second-oldest of those, or the oldest if there is one, else `floor`.
///
/// A slice cleans by rotation: the pages it keeps die as later slices
/// rewrite them, and what it writes takes along every page older than the
/// second-oldest slice it keeps (an untouched leaf left in an old segment
/// would keep that segment, and all after it, alive; with the oldest
/// slice's segment as the line, such leaves lagged a rotation behind and
/// the files reached 2x at 1 M pairs). The space plan's floor would instead
/// copy the kept slices too, making every slice a whole tree again.
pub(crate) fn slice_floor(mut since: Vec<u32>, floor: u32) -> u32 {
    since.sort_unstable();
    since.dedup();
    since.get(1).or(since.first()).copied().unwrap_or(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn segs(list: &[(SegmentId, u64)]) -> BTreeMap<SegmentId, u64> {
        list.iter().copied().collect()
    }

    fn input(segments: &BTreeMap<SegmentId, u64>) -> PlanInput<'_> {
        PlanInput {
            segments,
            current: None,
            floor: 0,
            durable_oldest: 0,
            last_written: None,
            tree_bytes: 10 * MIB,
            log_bytes: 0,
            max: 2.0,
            new_pages: true,
        }
    }

    #[test]
    fn within_target_keeps_floor() {
        let s = segs(&[(1, 5 * MIB), (2, 5 * MIB)]);
        let p = plan_floor(&PlanInput {
            floor: 1,
            ..input(&s)
        });
        assert_eq!(
            p,
            Plan {
                floor: 1,
                close_current: false
            }
        );
    }

    #[test]
    fn over_target_moves_past_oldest_as_needed() {
        // Allowed: 10 MiB * 2 * 0.9 = 18 MiB; files 24 MiB: two segments go.
        let s = segs(&[(1, 4 * MIB), (2, 4 * MIB), (3, 4 * MIB), (4, 12 * MIB)]);
        let p = plan_floor(&input(&s));
        assert_eq!(p.floor, 3);
        assert!(!p.close_current);
    }

    #[test]
    fn counts_log_and_coming_writes() {
        let s = segs(&[(1, 4 * MIB), (2, 4 * MIB), (3, 4 * MIB)]);
        // 12 MiB of pages fits alone ...
        assert_eq!(plan_floor(&input(&s)).floor, 0);
        // ... not with 4 MiB of log and twice 2 MiB coming.
        let p = plan_floor(&PlanInput {
            log_bytes: 4 * MIB,
            last_written: Some(2 * MIB),
            ..input(&s)
        });
        assert_eq!(p.floor, 2);
        // Without new pages, nothing is coming: the log alone fits.
        let p = plan_floor(&PlanInput {
            log_bytes: 4 * MIB,
            last_written: Some(2 * MIB),
            new_pages: false,
            ..input(&s)
        });
        assert_eq!(p.floor, 0);
    }

    #[test]
    fn segments_below_durable_oldest_are_not_counted() {
        let s = segs(&[(1, 30 * MIB), (2, 4 * MIB)]);
        let p = plan_floor(&PlanInput {
            durable_oldest: 2,
            ..input(&s)
        });
        assert_eq!(p.floor, 0);
    }

    #[test]
    fn step_is_bounded_but_takes_at_least_one_segment() {
        // Tree 1 MiB: the step is CLEAN_STEP_BYTES (64 MiB).
        let s = segs(&[(1, 100 * MIB), (2, 40 * MIB), (3, 40 * MIB)]);
        let p = plan_floor(&PlanInput {
            tree_bytes: MIB,
            ..input(&s)
        });
        assert_eq!(p.floor, 2, "one oversized segment, then the bound");
    }

    #[test]
    fn never_cleans_into_the_segment_being_written_but_may_close_it() {
        let s = segs(&[(1, 4 * MIB), (2, 30 * MIB)]);
        let p = plan_floor(&PlanInput {
            current: Some((2, 30 * MIB)),
            ..input(&s)
        });
        assert_eq!(
            p,
            Plan {
                floor: 2,
                close_current: false
            }
        );
        // Everything older already cleaned: close the current one.
        let p = plan_floor(&PlanInput {
            current: Some((2, 30 * MIB)),
            floor: 2,
            ..input(&s)
        });
        assert_eq!(
            p,
            Plan {
                floor: 3,
                close_current: true
            }
        );
        // Too small to be worth closing.
        let s = segs(&[(2, 2 * MIB / 4)]);
        let p = plan_floor(&PlanInput {
            current: Some((2, 2 * MIB / 4)),
            tree_bytes: MIB / 8,
            floor: 2,
            ..input(&s)
        });
        assert!(!p.close_current);
    }

    #[test]
    fn floor_never_moves_back() {
        let s = segs(&[(1, 40 * MIB)]);
        let p = plan_floor(&PlanInput {
            floor: 7,
            ..input(&s)
        });
        assert_eq!(p.floor, 7);
    }

    #[test]
    fn slice_writes_oldest_children_up_to_a_share() {
        let c = |seq, child, subtree| SliceCandidate {
            seq,
            child,
            page: child as u32 + 100,
            subtree,
        };
        // Tree 400: a slice writes oldest pages first until it has
        // written 100 bytes (the one crossing the line is written too).
        let keep = choose_slice(
            vec![
                c(9, 0, 60),
                c(3, 1, 60),
                c(5, 2, 60),
                c(1, 4, 30),
                c(7, 3, 5),
            ],
            5,
            400,
        );
        assert_eq!(keep, vec![Some(100), None, None, Some(103), None]);
        assert_eq!(choose_slice::<u32>(Vec::new(), 2, 400), vec![None, None]);
    }

    #[test]
    fn slice_floor_is_second_oldest_kept_slice() {
        assert_eq!(slice_floor(vec![7, 3, 3, 5], 1), 5);
        assert_eq!(slice_floor(vec![4, 4], 1), 4);
        assert_eq!(slice_floor(Vec::new(), 9), 9);
    }
}
