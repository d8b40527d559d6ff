//! Applying a sorted batch of puts and deletes to the tree, copy-on-write.
//!
//! One pass from the root: the operations are split among children by the
//! separators, each touched child is changed once, and each touched node gets
//! one new version. A new version is an overlay on the old base when the
//! change is small (see node.rs), or a consolidated node otherwise; a node
//! that grows past the page target splits, one that shrinks below a quarter of
//! it merges with a sibling, and the root grows or shrinks a level as needed.

use crate::leaf::{
    compare_keys, compare_past_heads, entry_len, entry_size, head, merge_into, BigValue, Entry,
    LeafData, ValueRef, INLINE_VALUE_MAX,
};
use crate::node::{Body, ChildRef, InternalData, LeafBase, Node, Patches};

/// Most chunks in an internal node's patch chain before it is folded.
const PATCH_CHAIN_MAX: usize = 8;
use crate::page::shortest_separator;
use crate::pager::Pager;
use crate::read::leaf_entries;
use kivi_log::{Deadline, Error, OpRef, NO_DEADLINE};
use std::sync::Arc;

/// Shape parameters of the tree.
#[derive(Debug, Clone)]
pub struct TreeConfig {
    /// Pages split when their entries' estimated encoded size would pass
    /// this many bytes (see `TreeConfig::for_page_size`).
    pub page_target: usize,
    /// Most entries a leaf's delta holds before the leaf is consolidated.
    pub delta_max: usize,
    /// Most patched children an internal node carries before consolidation
    /// (at least as many as it has children).
    pub patch_max: usize,
    /// Whether a large batch may use a second thread (see
    /// `PARALLEL_MIN_OPS`). Off for work done in the background while
    /// readers may want the cores.
    pub parallel: bool,
}

/// Bytes of a page record beside its entries' estimated sizes: the record
/// header (9) and the page's own (level and entry count), with room to spare.
pub const PAGE_RECORD_OVERHEAD: usize = 16;

impl TreeConfig {
    /// Pages whose records, headers included, fit in `page_size` bytes (the
    /// page log packs records into 4 KiB blocks; a default page fills one).
    pub fn for_page_size(page_size: usize) -> Self {
        assert!(page_size > 4 * PAGE_RECORD_OVERHEAD);
        TreeConfig {
            page_target: page_size - PAGE_RECORD_OVERHEAD,
            ..TreeConfig::default()
        }
    }
}

impl Default for TreeConfig {
    fn default() -> Self {
        TreeConfig {
            page_target: kivi_log::PAGE_BLOCK_BYTES as usize - PAGE_RECORD_OVERHEAD,
            delta_max: 16,
            patch_max: 32,
            parallel: true,
        }
    }
}

/// Result of applying a batch.
pub struct Applied {
    /// The new tree's root (`None`: the batch left the tree empty). The old
    /// root still reads the tree as it was.
    pub root: Option<Arc<Node>>,
    /// Change in the number of pairs.
    pub pairs_delta: i64,
    /// Change in the number of values that carry a deadline (expired or
    /// not): what keeps a count of them without walking the tree.
    pub deadlines_delta: i64,
    /// Memory held by the nodes this batch created.
    pub new_bytes: usize,
}

/// A node produced by a change, with the separator that starts its range
/// (`None` for the first piece, which keeps the range start of the node it
/// replaces).
struct Piece {
    low: Option<Vec<u8>>,
    node: Arc<Node>,
}

enum Change {
    Same,
    /// The node is replaced by one node over the same range.
    One(Arc<Node>),
    /// The node is replaced by these pieces, in key order (none: it is empty).
    Replace(Vec<Piece>),
}

/// What a batch does to one key of a leaf.
#[derive(Clone, Copy)]
enum Edit<'a> {
    Put(ValueRef<'a>, Deadline),
    /// Delete a key present in the base: keep a tombstone in the delta.
    Tombstone,
    /// Delete a key present only in the delta: drop it from the delta.
    Drop,
}

impl Change {
    /// A single piece covers the node's whole range: the parent can take it
    /// as a plain replacement, without rebuilding itself.
    fn from_pieces(mut pieces: Vec<Piece>) -> Change {
        if pieces.len() == 1 {
            return Change::One(pieces.pop().expect("one piece").node);
        }
        Change::Replace(pieces)
    }
}

struct Ctx<'a> {
    pager: &'a Pager,
    cfg: &'a TreeConfig,
    pairs_delta: i64,
    deadlines_delta: i64,
    new_bytes: usize,
    /// Whether this node may split its children's work with a second thread
    /// (only the root does, once per batch).
    parallel: bool,
}

/// The ops of one child: its index and the ranges of `ops` and big values.
struct Group {
    child: usize,
    ops: std::ops::Range<usize>,
    bigs: std::ops::Range<usize>,
}

/// Batches of at least this many operations have their root's children
/// applied on two threads.
const PARALLEL_MIN_OPS: usize = 512;

/// Applies `ops` (sorted by key, one per key) to the tree under `root`.
pub fn apply(
    pager: &Pager,
    cfg: &TreeConfig,
    root: Option<&Arc<Node>>,
    ops: &[OpRef<'_>],
) -> Result<Applied, Error> {
    debug_assert!(
        ops.windows(2).all(|w| w[0].key() < w[1].key()),
        "ops not sorted and unique"
    );
    let mut ctx = Ctx {
        pager,
        cfg,
        pairs_delta: 0,
        deadlines_delta: 0,
        new_bytes: 0,
        parallel: cfg.parallel && ops.len() >= PARALLEL_MIN_OPS,
    };
    let bigs = big_values(ops);
    let pieces = match root {
        None => {
            let mut entries = Vec::with_capacity(ops.len());
            let mut big_i = 0;
            for op in ops {
                if let OpRef::Put(k, v, d) = op {
                    entries.push((*k, Entry::Value(value_ref(v, &bigs, &mut big_i), *d)));
                }
            }
            ctx.pairs_delta = entries.len() as i64;
            ctx.deadlines_delta = entries
                .iter()
                .filter(|(_, e)| e.deadline() != NO_DEADLINE)
                .count() as i64;
            if entries.is_empty() {
                return Ok(Applied {
                    root: None,
                    pairs_delta: 0,
                    deadlines_delta: 0,
                    new_bytes: 0,
                });
            }
            ctx.build_leaves(&entries, true)
        }
        Some(r) => match ctx.apply_node(r, ops, &bigs)? {
            Change::Same => {
                return Ok(Applied {
                    root: Some(r.clone()),
                    pairs_delta: 0,
                    deadlines_delta: 0,
                    new_bytes: 0,
                })
            }
            Change::One(node) => vec![Piece { low: None, node }],
            Change::Replace(p) => p,
        },
    };
    let root = ctx.build_root(pieces)?;
    Ok(Applied {
        root,
        pairs_delta: ctx.pairs_delta,
        deadlines_delta: ctx.deadlines_delta,
        new_bytes: ctx.new_bytes,
    })
}

/// Out-of-line values of the batch, made once, in op order.
fn big_values(ops: &[OpRef<'_>]) -> Vec<Arc<BigValue>> {
    ops.iter()
        .filter_map(|op| match op {
            OpRef::Put(_, v, _) if v.len() > INLINE_VALUE_MAX => Some(BigValue::in_memory(v)),
            _ => None,
        })
        .collect()
}

fn value_ref<'a>(v: &'a [u8], bigs: &'a [Arc<BigValue>], big_i: &mut usize) -> ValueRef<'a> {
    if v.len() > INLINE_VALUE_MAX {
        *big_i += 1;
        ValueRef::Big(&bigs[*big_i - 1])
    } else {
        ValueRef::Inline(v)
    }
}

/// Splits sorted `ops` into runs, one per child of `base` they fall in.
fn group_ops(base: &InternalData, ops: &[OpRef<'_>]) -> Vec<Group> {
    let n = base.children_len();
    let mut groups = Vec::new();
    let (mut start, mut first_big) = (0, 0);
    while start < ops.len() {
        let child = base.child_index(ops[start].key());
        let mut end = start + 1;
        if child + 1 < n {
            let sep = base.sep(child);
            let sep_head = head(sep);
            while end < ops.len() && below(ops[end].key(), sep, sep_head) {
                end += 1;
            }
        } else {
            end = ops.len();
        }
        let bigs_here = ops[start..end].iter().filter(|op| is_big(op)).count();
        groups.push(Group {
            child,
            ops: start..end,
            bigs: first_big..first_big + bigs_here,
        });
        first_big += bigs_here;
        start = end;
    }
    groups
}

fn is_big(op: &OpRef<'_>) -> bool {
    matches!(op, OpRef::Put(_, v, _) if v.len() > INLINE_VALUE_MAX)
}

/// `key < sep`, comparing 8-byte heads first.
#[inline]
fn below(key: &[u8], sep: &[u8], sep_head: u64) -> bool {
    match head(key).cmp(&sep_head) {
        std::cmp::Ordering::Equal => compare_past_heads(key, sep).is_lt(),
        o => o == std::cmp::Ordering::Less,
    }
}

/// Estimated encoded size of a node, for split and merge decisions.
fn node_size(node: &Node) -> usize {
    node.size()
}

/// Cuts a sequence of item sizes into runs of at most `target` bytes each.
/// `append` (bulk loading in key order) fills runs completely, leaving the
/// remainder last; otherwise runs are made even, so both halves of a split
/// have room to grow. Every run holds at least `min_items` items when possible.
fn cut(
    sizes: &[usize],
    target: usize,
    append: bool,
    min_items: usize,
) -> Vec<std::ops::Range<usize>> {
    let total: usize = sizes.iter().sum();
    let mut out = Vec::new();
    if total <= target || sizes.len() < 2 * min_items {
        out.push(0..sizes.len());
        return out;
    }
    let runs = total.div_ceil(target);
    let (per, max_runs) = if append {
        (target, usize::MAX)
    } else {
        (total.div_ceil(runs), runs)
    };
    let mut start = 0;
    let mut acc = 0;
    for (i, &s) in sizes.iter().enumerate() {
        if i - start >= min_items
            && acc + s > per
            && sizes.len() - i >= min_items
            && out.len() + 1 < max_runs
        {
            out.push(start..i);
            start = i;
            acc = 0;
        }
        acc += s;
    }
    out.push(start..sizes.len());
    out
}

/// A child slot while an internal node is being rebuilt.
enum Slot {
    Old(ChildRef),
    New(Arc<Node>),
}

impl<'a> Ctx<'a> {
    fn track(&mut self, node: Node) -> Arc<Node> {
        self.new_bytes += node.mem_bytes();
        node.mark_dirty(self.pager.dirty_counter());
        Arc::new(node)
    }

    fn apply_node(
        &mut self,
        node: &Arc<Node>,
        ops: &[OpRef<'_>],
        bigs: &[Arc<BigValue>],
    ) -> Result<Change, Error> {
        match node.body() {
            Body::Leaf { base, delta } => {
                let entries = self.pager.base(base)?;
                Ok(self.apply_leaf(node, base, &entries, delta.as_ref(), ops, bigs))
            }
            Body::Internal { .. } => self.apply_internal(node, ops, bigs),
        }
    }

    fn underfull(&self, node: &Node) -> bool {
        match node.body() {
            Body::Leaf { .. } => node_size(node) < self.cfg.page_target / 4,
            Body::Internal { base, .. } => {
                base.children_len() < 2 || node_size(node) < self.cfg.page_target / 4
            }
        }
    }

    /// `base` holds the entries of `kind`, the leaf's base. A small change
    /// becomes a new overlay on the shared base; a large one rebuilds the
    /// leaf (and splits it if it outgrew a page).
    fn apply_leaf(
        &mut self,
        node: &Arc<Node>,
        kind: &LeafBase,
        base: &LeafData,
        delta: Option<&LeafData>,
        ops: &[OpRef<'_>],
        bigs: &[Arc<BigValue>],
    ) -> Change {
        let LeafEdits {
            edits,
            live,
            deadlines,
            deletes,
            size,
        } = leaf_edits(node, base, delta, ops, bigs);
        if edits.is_empty() {
            return Change::Same;
        }
        self.pairs_delta += live;
        self.deadlines_delta += deadlines;

        let delta_len = delta.map_or(0, |d| d.len());
        let tombstones = delta.map_or(0, |d| d.tombstones())
            + edits
                .iter()
                .filter(|e| matches!(e.1, Edit::Tombstone))
                .count();
        let mostly_deleted = tombstones * 2 > base.len();
        if delta_len + edits.len() <= self.cfg.delta_max
            && size <= self.cfg.page_target
            && !mostly_deleted
        {
            let node = self.overlay_leaf(node, kind, delta, &edits, size);
            return Change::One(self.track(node));
        }
        self.rebuild_leaf(base, delta, &edits, deletes)
    }

    /// The leaf with `edits` laid over its base as a delta.
    fn overlay_leaf(
        &mut self,
        node: &Arc<Node>,
        kind: &LeafBase,
        delta: Option<&LeafData>,
        edits: &[(&[u8], Edit<'_>)],
        size: usize,
    ) -> Node {
        match kind {
            // The delta grows over the same base, written or not: a
            // checkpoint writes such a leaf as a delta page over that base
            // (or, when the base's segment is being cleaned, whole; the
            // leaves of later versions are then moved onto the new page,
            // see `checkpoint::release_written`), and the leaf is rebuilt
            // once its delta is full.
            LeafBase::Page(at) => {
                Node::leaf_with_delta(LeafBase::Page(*at), merged_delta(delta, edits, true), size)
            }
            LeafBase::Mem(b) => {
                let in_memory = Node::leaf_with_delta(
                    LeafBase::Mem(b.clone()),
                    merged_delta(delta, edits, false),
                    size,
                );
                match self.pager.durable_page(node) {
                    // The leaf's content is durably at `at`. It stays
                    // in memory, base and all, only while the budget
                    // counts it; otherwise the changed leaf names the
                    // page as its base and holds just these edits (the
                    // page already holds any older delta). Not for a
                    // leaf standing for a delta page (`link`): a base
                    // must be a whole page, so that one stays in memory
                    // until a checkpoint writes it whole.
                    Some(at)
                        if !(node.is_delta_twin()
                            || (node.is_resident()
                                && self.pager.try_make_resident(&in_memory))) =>
                    {
                        if delta.is_none() {
                            self.pager.adopt(at, node.clone());
                        }
                        Node::leaf_with_delta(
                            LeafBase::Page(at),
                            merged_delta(None, edits, true),
                            size,
                        )
                    }
                    _ => in_memory,
                }
            }
        }
    }

    /// Consolidates base + delta + edits (tombstones applied) into new leaves.
    fn rebuild_leaf(
        &mut self,
        base: &LeafData,
        delta: Option<&LeafData>,
        edits: &[(&[u8], Edit<'_>)],
        deletes: bool,
    ) -> Change {
        let delta_len = delta.map_or(0, |d| d.len());
        let mut current = Vec::with_capacity(base.len() + delta_len);
        match delta {
            Some(d) => merge_into(&mut current, base.iter(), d.iter(), true),
            None => current.extend(base.iter()),
        }
        let append = !deletes && current.last().is_none_or(|(last, _)| edits[0].0 > *last);
        let mut merged = Vec::with_capacity(current.len() + edits.len());
        let edit_entries = edits.iter().map(|&(k, e)| {
            (
                k,
                match e {
                    Edit::Put(v, d) => Entry::Value(v, d),
                    Edit::Tombstone | Edit::Drop => Entry::Tombstone,
                },
            )
        });
        merge_into(&mut merged, current.into_iter(), edit_entries, true);
        if merged.is_empty() {
            return Change::Replace(Vec::new());
        }
        Change::from_pieces(self.build_leaves(&merged, append))
    }

    /// Builds leaves from live entries in key order.
    fn build_leaves(&mut self, entries: &[(&[u8], Entry<'_>)], append: bool) -> Vec<Piece> {
        let sizes: Vec<usize> = entries
            .iter()
            .map(|(k, e)| entry_size(k.len(), *e))
            .collect();
        let runs = cut(&sizes, self.cfg.page_target, append, 1);
        let mut pieces = Vec::with_capacity(runs.len());
        let mut prev_last: Option<&[u8]> = None;
        for run in runs {
            let bytes: usize = sizes[run.clone()].iter().sum();
            let mut leaf = LeafData::with_capacity(run.len(), bytes);
            for &(k, e) in &entries[run.clone()] {
                leaf.push(k, e);
            }
            let first = entries[run.start].0;
            let low = prev_last.map(|last| shortest_separator(last, first));
            prev_last = Some(entries[run.end - 1].0);
            let node = self.track(Node::leaf(leaf));
            pieces.push(Piece { low, node });
        }
        pieces
    }

    /// Applies each group's ops to its child; the changed children.
    fn apply_groups(
        &mut self,
        node: &Node,
        ops: &[OpRef<'_>],
        bigs: &[Arc<BigValue>],
        groups: &[Group],
    ) -> Result<Vec<(usize, Change)>, Error> {
        // The children's pages that are not in memory are read one after
        // another below; asking for them all first lets the device read
        // them side by side (a batch of random updates over a tree larger
        // than memory reads a leaf for most of its keys).
        // A leaf read from a delta page names its base only once read: the
        // bases are asked for in a second round, once every child is in.
        let mut children = Vec::with_capacity(groups.len());
        if groups.len() > 1 {
            for g in groups {
                self.pager.prefetch_child(node.child_ref(g.child));
            }
            for g in groups {
                let child = self
                    .pager
                    .resolve(node.child_ref(g.child), node.level() - 1)?;
                if let Some((LeafBase::Page(at), _)) = child.leaf_parts() {
                    self.pager.prefetch(at.page);
                }
                children.push(child);
            }
        }
        let mut changes = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            let child = match children.get(i) {
                Some(c) => c.clone(),
                None => self
                    .pager
                    .resolve(node.child_ref(g.child), node.level() - 1)?,
            };
            match self.apply_node(&child, &ops[g.ops.clone()], &bigs[g.bigs.clone()])? {
                Change::Same => {}
                change => changes.push((g.child, change)),
            }
        }
        Ok(changes)
    }

    /// [`Ctx::apply_groups`] with the groups split in two halves of about
    /// equal op counts, the first half on a second thread: subtrees share
    /// nothing but the (thread-safe) pager, so a large batch uses both cores.
    fn apply_groups_on_two_threads(
        &mut self,
        node: &Node,
        ops: &[OpRef<'_>],
        bigs: &[Arc<BigValue>],
        groups: &[Group],
    ) -> Result<Vec<(usize, Change)>, Error> {
        let half = ops.len() / 2;
        let split = groups
            .iter()
            .position(|g| g.ops.end > half)
            .unwrap_or(0)
            .max(1);
        let (first, second) = groups.split_at(split);
        let (pager, cfg) = (self.pager, self.cfg);
        // rayon's pool, not a thread per batch: its threads live on, and so
        // do their allocator heaps (a fresh thread's heap had to be fed
        // fresh pages from the kernel, zeroed, for every batch).
        let (theirs, mine) = rayon::join(
            move || {
                let mut ctx = Ctx {
                    pager,
                    cfg,
                    pairs_delta: 0,
                    deadlines_delta: 0,
                    new_bytes: 0,
                    parallel: false,
                };
                ctx.apply_groups(node, ops, bigs, first)
                    .map(|c| (c, ctx.pairs_delta, ctx.deadlines_delta, ctx.new_bytes))
            },
            || self.apply_groups(node, ops, bigs, second),
        );
        let (mut changes, pairs_delta, deadlines_delta, new_bytes) = theirs?;
        self.pairs_delta += pairs_delta;
        self.deadlines_delta += deadlines_delta;
        self.new_bytes += new_bytes;
        changes.extend(mine?);
        Ok(changes)
    }

    fn apply_internal(
        &mut self,
        node: &Arc<Node>,
        ops: &[OpRef<'_>],
        bigs: &[Arc<BigValue>],
    ) -> Result<Change, Error> {
        let level = node.level();
        let base = node.internal_base().clone();
        let n = base.children_len();
        let groups = group_ops(&base, ops);
        let parallel = std::mem::replace(&mut self.parallel, false);
        let changes = if parallel && groups.len() >= 2 {
            self.apply_groups_on_two_threads(node, ops, bigs, &groups)?
        } else {
            self.apply_groups(node, ops, bigs, &groups)?
        };
        if changes.is_empty() {
            return Ok(Change::Same);
        }

        let Body::Internal { patches, .. } = node.body() else {
            unreachable!()
        };
        let simple = changes
            .iter()
            .all(|(_, c)| matches!(c, Change::One(node) if !self.underfull(node)));
        let patched = patches.as_ref().map_or(0, |p| p.total());
        if simple && patched + changes.len() <= self.cfg.patch_max.max(n) {
            let fresh: Vec<(u32, ChildRef)> = changes
                .into_iter()
                .map(|(i, c)| match c {
                    Change::One(node) => (i as u32, ChildRef::in_memory(node)),
                    _ => unreachable!("simple changes replace one node"),
                })
                .collect();
            let chain = match patches {
                // A long chain makes lookups walk many chunks: fold it.
                Some(old) if old.depth() >= PATCH_CHAIN_MAX => {
                    let mut all = old.flatten();
                    all.retain(|(i, _)| fresh.binary_search_by_key(i, |e| e.0).is_err());
                    all.extend(fresh);
                    all.sort_unstable_by_key(|e| e.0);
                    Patches::new(all, None)
                }
                old => Patches::new(fresh, old.clone()),
            };
            let node = self.track(Node::internal(level, base, Some(chain)));
            return Ok(Change::One(node));
        }
        if simple {
            // Too many patches, same shape: fold them into a new base that
            // keeps the separators as they are.
            let mut children: Vec<ChildRef> = (0..n).map(|i| node.child_ref(i).clone()).collect();
            for (i, c) in changes {
                let Change::One(child) = c else {
                    unreachable!("simple changes replace one node")
                };
                children[i] = ChildRef::in_memory(child);
            }
            let data = base.with_children(children);
            let node = self.track(Node::internal(level, Arc::new(data), None));
            return Ok(Change::One(node));
        }

        // Consolidate: the full list of children with their separators.
        let appending = changes.len() == 1 && changes[0].0 == n - 1;
        let mut list: Vec<(Option<Vec<u8>>, Slot, bool)> = Vec::with_capacity(n + changes.len());
        let mut changes = changes.into_iter().peekable();
        for i in 0..n {
            let sep = (i > 0).then(|| base.sep(i - 1).to_vec());
            if changes.peek().is_some_and(|(j, _)| *j == i) {
                match changes.next().expect("peeked").1 {
                    Change::One(node) => list.push((sep, Slot::New(node), true)),
                    Change::Replace(pieces) => {
                        for (j, piece) in pieces.into_iter().enumerate() {
                            let low = if j == 0 { sep.clone() } else { piece.low };
                            list.push((low, Slot::New(piece.node), true));
                        }
                    }
                    Change::Same => unreachable!("unchanged children are not listed"),
                }
            } else {
                list.push((sep, Slot::Old(self.copy_ref(node.child_ref(i))), false));
            }
        }
        if let Some(first) = list.first_mut() {
            first.0 = None;
        }
        self.merge_underfull(&mut list, level)?;
        if list.is_empty() {
            return Ok(Change::Replace(Vec::new()));
        }
        Ok(Change::from_pieces(
            self.build_internals(list, level, appending),
        ))
    }

    /// A reference to the same child for a rebuilt node. (In-memory children
    /// that are durably written become page references in `release_written`
    /// after each checkpoint; checking here would lock every child, cold.)
    fn copy_ref(&self, r: &ChildRef) -> ChildRef {
        r.clone()
    }

    fn slot_node(&self, slot: &Slot, level: u8) -> Result<Arc<Node>, Error> {
        match slot {
            Slot::New(n) => Ok(n.clone()),
            Slot::Old(r) => self.pager.resolve(r, level),
        }
    }

    /// Merges each new underfull child with a neighbour.
    fn merge_underfull(
        &mut self,
        list: &mut Vec<(Option<Vec<u8>>, Slot, bool)>,
        level: u8,
    ) -> Result<(), Error> {
        let mut k = 0;
        while k < list.len() {
            let candidate = list.len() > 1 && list[k].2 && {
                let Slot::New(n) = &list[k].1 else {
                    unreachable!()
                };
                self.underfull(n)
            };
            if !candidate {
                k += 1;
                continue;
            }
            let a = if k + 1 < list.len() { k } else { k - 1 };
            let left = self.slot_node(&list[a].1, level - 1)?;
            let right = self.slot_node(&list[a + 1].1, level - 1)?;
            if node_size(&left) + node_size(&right) > self.cfg.page_target {
                // Only merge what fits one page: splitting the pair evenly
                // instead would leave both half full, which at the right
                // edge of an in-order load halves the fill of every page.
                k += 1;
                continue;
            }
            let sep = list[a + 1]
                .0
                .clone()
                .expect("non-first child has a separator");
            let pieces = self.merge_siblings(&left, &right, sep)?;
            let low = list[a].0.take();
            let replacement: Vec<_> = pieces
                .into_iter()
                .enumerate()
                .map(|(j, p)| {
                    (
                        if j == 0 { low.clone() } else { p.low },
                        Slot::New(p.node),
                        false,
                    )
                })
                .collect();
            let len = replacement.len();
            list.splice(a..a + 2, replacement);
            k = a + len;
        }
        Ok(())
    }

    fn merge_siblings(
        &mut self,
        left: &Node,
        right: &Node,
        sep: Vec<u8>,
    ) -> Result<Vec<Piece>, Error> {
        if left.is_leaf() {
            let (l, r) = (
                leaf_entries(self.pager, left)?,
                leaf_entries(self.pager, right)?,
            );
            let entries: Vec<_> = l.iter().chain(r.iter()).collect();
            if entries.is_empty() {
                return Ok(Vec::new());
            }
            return Ok(self.build_leaves(&entries, false));
        }
        let level = left.level();
        let mut list = Vec::with_capacity(left.children_len() + right.children_len());
        for (node, low) in [(left, None), (right, Some(sep))] {
            let base = node.internal_base();
            for i in 0..node.children_len() {
                let s = if i == 0 {
                    low.clone()
                } else {
                    Some(base.sep(i - 1).to_vec())
                };
                list.push((s, Slot::Old(self.copy_ref(node.child_ref(i))), false));
            }
        }
        list[0].0 = None;
        Ok(self.build_internals(list, level, false))
    }

    /// Builds internal nodes at `level` from a child list (first separator `None`).
    fn build_internals(
        &mut self,
        list: Vec<(Option<Vec<u8>>, Slot, bool)>,
        level: u8,
        append: bool,
    ) -> Vec<Piece> {
        let sizes: Vec<usize> = list
            .iter()
            .map(|(s, _, _)| kivi_log::PageRef::ENCODED_LEN + 2 + s.as_ref().map_or(0, |s| s.len()))
            .collect();
        let runs = cut(&sizes, self.cfg.page_target, append, 2);
        let mut list = list.into_iter();
        let mut pieces = Vec::with_capacity(runs.len());
        for run in runs {
            let items: Vec<_> = list.by_ref().take(run.len()).collect();
            let mut items = items.into_iter();
            let (low, first, _) = items.next().expect("non-empty run");
            let mut seps = Vec::with_capacity(run.len() - 1);
            let mut children = Vec::with_capacity(run.len());
            children.push(into_ref(first));
            for (s, slot, _) in items {
                seps.push(s.expect("non-first child has a separator"));
                children.push(into_ref(slot));
            }
            let sep_refs: Vec<&[u8]> = seps.iter().map(|s| s.as_slice()).collect();
            let data = InternalData::new(&sep_refs, children);
            let node = self.track(Node::internal(level, Arc::new(data), None));
            pieces.push(Piece { low, node });
        }
        pieces
    }

    /// Stacks levels on top of `pieces` until one root remains, then drops
    /// root levels that have a single child.
    fn build_root(&mut self, mut pieces: Vec<Piece>) -> Result<Option<Arc<Node>>, Error> {
        if pieces.is_empty() {
            return Ok(None);
        }
        while pieces.len() > 1 {
            let level = pieces[0].node.level() + 1;
            assert!(
                level <= crate::page::MAX_LEVEL,
                "tree deeper than the depth limit"
            );
            let mut list: Vec<_> = pieces
                .into_iter()
                .map(|p| (p.low, Slot::New(p.node), true))
                .collect();
            list[0].0 = None;
            pieces = self.build_internals(list, level, true);
        }
        let mut root = pieces.pop().expect("one piece").node;
        while !root.is_leaf() && root.children_len() == 1 {
            root = self.pager.resolve(root.child_ref(0), root.level() - 1)?;
        }
        Ok(Some(root))
    }
}

/// `old` (a leaf's delta, if any) with `edits` applied, in key order; `None`
/// if nothing is left. With `never_drop`, deleting a key that only the
/// delta holds leaves a tombstone instead of dropping the entry: the delta
/// of a leaf whose base is a page must cover every key it ever changed (see
/// `LeafBase::Page`).
fn merged_delta(
    old: Option<&LeafData>,
    edits: &[(&[u8], Edit<'_>)],
    never_drop: bool,
) -> Option<LeafData> {
    let empty = LeafData::default();
    let old = old.unwrap_or(&empty);
    let bytes = old.data_len()
        + edits
            .iter()
            .map(|(k, e)| {
                k.len()
                    + match *e {
                        Edit::Put(v, d) => entry_len(Entry::Value(v, d)),
                        _ => 0,
                    }
            })
            .sum::<usize>();
    let mut new_delta = LeafData::with_capacity(old.len() + edits.len(), bytes);
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < edits.len() {
        let order = if j == edits.len() {
            std::cmp::Ordering::Greater
        } else if i == old.len() {
            std::cmp::Ordering::Less
        } else {
            compare_keys(edits[j].0, old.key(i))
        };
        if order.is_gt() {
            new_delta.push(old.key(i), old.entry(i));
            i += 1;
            continue;
        }
        if order.is_eq() {
            i += 1;
        }
        let (k, e) = edits[j];
        j += 1;
        match e {
            Edit::Put(v, d) => new_delta.push(k, Entry::Value(v, d)),
            Edit::Tombstone => new_delta.push(k, Entry::Tombstone),
            Edit::Drop if never_drop => new_delta.push(k, Entry::Tombstone),
            Edit::Drop => {}
        }
    }
    (!new_delta.is_empty()).then_some(new_delta)
}

fn into_ref(slot: Slot) -> ChildRef {
    match slot {
        Slot::Old(r) => r,
        Slot::New(n) => ChildRef::in_memory(n),
    }
}

/// What a batch's ops do to one leaf: the edits in key order, the change in
/// live pairs, whether any deletes, and the leaf's live size after them
/// (each edit replaces the entry it finds).
struct LeafEdits<'a> {
    edits: Vec<(&'a [u8], Edit<'a>)>,
    live: i64,
    /// Change in the values with a deadline.
    deadlines: i64,
    deletes: bool,
    size: usize,
}

fn leaf_edits<'a>(
    node: &Node,
    base: &'a LeafData,
    delta: Option<&'a LeafData>,
    ops: &[OpRef<'a>],
    bigs: &'a [Arc<BigValue>],
) -> LeafEdits<'a> {
    let mut edits: Vec<(&[u8], Edit<'_>)> = Vec::with_capacity(ops.len());
    let mut big_i = 0;
    let mut live = 0i64;
    let mut deadlines = 0i64;
    let mut deletes = false;
    let mut size = node.size() as isize;
    for op in ops {
        let key = op.key();
        let base_entry = base.find(key).ok().map(|i| base.entry(i));
        let in_base = base_entry.is_some();
        let in_delta = delta.and_then(|d| d.find(key).ok().map(|i| d.entry(i)));
        let current = match in_delta {
            Some(Entry::Tombstone) => None,
            Some(e) => Some(e),
            None => base_entry,
        };
        let exists = current.is_some();
        if let Some(e) = current {
            size -= entry_size(key.len(), e) as isize;
            // Replaced or deleted: its deadline goes with it.
            deadlines -= i64::from(e.deadline() != NO_DEADLINE);
        }
        match op {
            &OpRef::Put(_, v, d) => {
                if !exists {
                    live += 1;
                }
                deadlines += i64::from(d != NO_DEADLINE);
                let v = value_ref(v, bigs, &mut big_i);
                size += entry_size(key.len(), Entry::Value(v, d)) as isize;
                edits.push((key, Edit::Put(v, d)));
            }
            OpRef::Delete(_) => {
                if !exists {
                    continue;
                }
                live -= 1;
                deletes = true;
                edits.push((key, if in_base { Edit::Tombstone } else { Edit::Drop }));
            }
        }
    }
    LeafEdits {
        edits,
        live,
        deadlines,
        deletes,
        size: size.max(0) as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cut_fills_pages_when_appending_and_halves_otherwise() {
        let sizes = vec![100; 100];
        let append = cut(&sizes, 1000, true, 1);
        assert_eq!(append.len(), 10);
        assert!(append.iter().all(|r| r.len() == 10));
        let even = cut(&[100; 11], 1000, false, 1);
        assert_eq!(even.len(), 2);
        assert!(even.iter().all(|r| r.len() >= 5));
        assert_eq!(cut(&[5000], 1000, false, 1), vec![0..1]);
        assert_eq!(cut(&[600, 600, 600], 1000, false, 2), vec![0..3]);
    }
}
