//! `check`: reads every page reachable from a root straight from storage (not
//! from the cache) and checks every invariant a reader relies on, including
//! the ones lookups do not need: each node's keys lie inside the range its
//! parent's separators give it, each subtree's recorded size is the sum of
//! what it holds, and its recorded oldest segment is the oldest it uses. Keeps going past problems to report them all.

use crate::leaf::{Entry, ValueRef};
use crate::node::{Body, DiskRef, LeafBase, Node};
use crate::pager::Pager;
use crate::read::leaf_entries;
use kivi_log::NO_DEADLINE;
use std::sync::Arc;

/// What [`check_tree`](crate::check_tree) read and found.
#[derive(Debug, Default, Clone)]
pub struct CheckReport {
    /// Pages read (delta pages included).
    pub pages: u64,
    /// Out-of-line values read.
    pub blobs: u64,
    /// Key-value pairs the tree holds.
    pub pairs: u64,
    /// Of the pairs, values with a deadline (expired or not).
    pub deadlines: u64,
    /// Bytes of the pages and blobs reachable from the root.
    pub tree_bytes: u64,
    /// One line per problem, each naming where it is.
    pub problems: Vec<String>,
}

/// Checks the tree under `root`, which is the node stored at `at` when the
/// root is on disk.
pub fn check_tree(pager: &Pager, root: &Arc<Node>) -> CheckReport {
    let mut report = CheckReport::default();
    // Durable places only: a checkpoint in flight may have marked a node
    // with the copy it is writing, whose references differ from the
    // node's own until the checkpoint is durable and they are re-pointed.
    let at = pager.durable_page(root);
    report.tree_bytes = visit(pager, root, at, None, None, &mut report).0;
    report
}

fn location(node: &Node) -> String {
    match node.written.get(|_| true) {
        Some(p) => format!("page {}", p.page.addr),
        None => "in-memory node".to_string(),
    }
}

/// Visits a node and returns the bytes of its subtree (0 for parts that
/// are only in memory) and the oldest segment they lie in.
fn visit(
    pager: &Pager,
    node: &Arc<Node>,
    at: Option<DiskRef>,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
    report: &mut CheckReport,
) -> (u64, u32) {
    // A written leaf whose base is a page, or that stands for a delta page
    // (`Node::delta_twin`), is checked as written: a delta page over that
    // base, or (written whole) a leaf page.
    let as_written =
        matches!(node.leaf_parts(), Some((LeafBase::Page(_), _))) || node.is_delta_twin();
    if let (Some(a), true) = (at, as_written) {
        match pager.load_uncached(a, 0) {
            Ok(disk) if matches!(disk.leaf_parts(), Some((LeafBase::Page(_), _))) => {
                return visit_delta(pager, &disk, a, lo, hi, report);
            }
            Ok(disk) => return visit(pager, &disk, at, lo, hi, report),
            Err(e) => {
                report.pages += 1;
                report.problems.push(e.to_string());
                return (a.subtree, a.oldest);
            }
        }
    }
    report.pages += 1;
    let mut oldest = at.map_or(u32::MAX, |a| a.page.addr.segment);
    let out_of_range = |k: &[u8]| lo.is_some_and(|lo| k < lo) || hi.is_some_and(|hi| k >= hi);
    let mut bytes = at.map_or(0, |a| u64::from(a.page.len));
    match node.body() {
        Body::Leaf { .. } => {
            let entries = leaf_entries(pager, node).unwrap_or_else(|e| {
                report.problems.push(e.to_string());
                Default::default()
            });
            if let (Some(first), Some(last)) = (entries.first_key(), entries.last_key()) {
                if out_of_range(first) || out_of_range(last) {
                    report.problems.push(format!(
                        "{}: keys outside the range its parent gives it",
                        location(node)
                    ));
                }
            }
            for (_, e) in entries.iter() {
                report.pairs += 1;
                report.deadlines += u64::from(e.deadline() != NO_DEADLINE);
                if let Entry::Value(ValueRef::Big(b), _) = e {
                    report.blobs += 1;
                    let durable = pager.durable_generations();
                    if let Some(blob) = b.written.get(|g| durable.holds(g)) {
                        bytes += u64::from(blob.len);
                        oldest = oldest.min(blob.addr.segment);
                    }
                    if b.bytes.is_none() {
                        if let Err(e) = pager.read_big(b) {
                            report.problems.push(e.to_string());
                        }
                    }
                }
            }
        }
        Body::Internal { base, .. } => {
            let n = base.children_len();
            for i in 0..base.seps_len() {
                let s = base.sep(i);
                if lo.is_some_and(|lo| s <= lo) || out_of_range(s) {
                    report.problems.push(format!(
                        "{}: separator {i} outside the node's range",
                        location(node)
                    ));
                }
            }
            for i in 0..n {
                let child_lo = if i == 0 { lo } else { Some(base.sep(i - 1)) };
                let child_hi = if i + 1 == n { hi } else { Some(base.sep(i)) };
                let cref = node.child_ref(i);
                let (child, child_at) = match cref.mem() {
                    Some(c) => {
                        let w = pager.durable_page(&c);
                        (Ok(c), w)
                    }
                    None => {
                        let p = cref.page().expect("child ref");
                        (pager.load_uncached(p, node.level() - 1), Some(p))
                    }
                };
                match child {
                    Ok(c) => {
                        let (b, o) = visit(pager, &c, child_at, child_lo, child_hi, report);
                        bytes += b;
                        oldest = oldest.min(o);
                    }
                    Err(e) => report.problems.push(e.to_string()),
                }
            }
        }
    }
    if let Some(a) = at {
        check_figures(report, "page", a, bytes, oldest);
    }
    (bytes, oldest)
}

/// Compares what a parent records of the subtree at `at` with what it holds.
fn check_figures(report: &mut CheckReport, what: &str, at: DiskRef, bytes: u64, oldest: u32) {
    if at.subtree != bytes {
        report.problems.push(format!(
            "{what} {}: records a subtree of {} bytes, holds {bytes}",
            at.page.addr, at.subtree
        ));
    }
    if at.oldest != oldest {
        report.problems.push(format!(
            "{what} {}: records segment {} as the oldest of its subtree, uses {oldest}",
            at.page.addr, at.oldest
        ));
    }
}

/// [`visit`] for a delta page read from `at`: its base (a leaf page, visited
/// as a child with the same key range), then its changes, each counted as
/// the pair it adds or removes.
fn visit_delta(
    pager: &Pager,
    node: &Arc<Node>,
    at: DiskRef,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
    report: &mut CheckReport,
) -> (u64, u32) {
    report.pages += 1;
    let Some((LeafBase::Page(base_at), Some(delta))) = node.leaf_parts() else {
        unreachable!("a delta page decodes to a leaf over a page")
    };
    let mut bytes = u64::from(at.page.len);
    let mut oldest = at.page.addr.segment;
    let base = match pager.load_uncached(*base_at, 0) {
        Ok(base) => base,
        Err(e) => {
            report.problems.push(e.to_string());
            return (at.subtree, at.oldest);
        }
    };
    let Some((LeafBase::Mem(base_entries), None)) = base.leaf_parts() else {
        report.problems.push(format!(
            "delta page {}: its base {} is not a leaf page",
            at.page.addr, base_at.page.addr
        ));
        return (at.subtree, at.oldest);
    };
    let (b, o) = visit(pager, &base, Some(*base_at), lo, hi, report);
    bytes += b;
    oldest = oldest.min(o);
    let out_of_range = |k: &[u8]| lo.is_some_and(|lo| k < lo) || hi.is_some_and(|hi| k >= hi);
    for (k, e) in delta.iter() {
        if out_of_range(k) {
            report.problems.push(format!(
                "delta page {}: keys outside the range its parent gives it",
                at.page.addr
            ));
        }
        let in_base = base_entries.find(k).is_ok();
        // The base's entry for `k` was counted with the base; a change
        // replaces it.
        if let Ok(i) = base_entries.find(k) {
            report.deadlines -= u64::from(base_entries.entry(i).deadline() != NO_DEADLINE);
        }
        report.deadlines += u64::from(e.deadline() != NO_DEADLINE);
        match e {
            Entry::Tombstone => report.pairs -= u64::from(in_base),
            Entry::Value(v, _) => {
                report.pairs += u64::from(!in_base);
                if let ValueRef::Big(big) = v {
                    report.blobs += 1;
                    let durable = pager.durable_generations();
                    if let Some(blob) = big.written.get(|g| durable.holds(g)) {
                        bytes += u64::from(blob.len);
                        oldest = oldest.min(blob.addr.segment);
                    }
                    if let Err(e) = pager.read_big(big) {
                        report.problems.push(e.to_string());
                    }
                }
            }
        }
    }
    check_figures(report, "delta page", at, bytes, oldest);
    (bytes, oldest)
}
