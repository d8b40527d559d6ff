//! Tree nodes as they live in memory.
//!
//! Nodes are immutable once built (copy-on-write): a change makes new nodes
//! along the path from the changed leaf to the root, and every older root still
//! sees the tree as it was, which is what makes snapshots free and lets readers
//! run without locks while the writer works.
//!
//! To keep a change from copying whole pages, a node version is a shared,
//! immutable *base* plus a small private overlay: a leaf carries a *delta*
//! (recent puts and tombstones), an internal node carries *patches* (child
//! slots that now point elsewhere). When the overlay grows past a few entries,
//! or the node's shape changes (split, merge), it is consolidated into a new
//! base. Pages on disk never contain overlays: a page is always written
//! consolidated.
//!
//! The one piece of interior mutability, monotone and invisible to readers'
//! results, is `Node::written`: where a checkpoint wrote this node.

use crate::leaf::{common_prefix_len, earlier, head, past_prefix, search_heads, LeafData};
use crate::written::Written;
use kivi_log::PageRef;
use kivi_log::{Deadline, NO_DEADLINE};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};

/// A durable page, the bytes of everything reachable from it (the page, its
/// descendants and their out-of-line values: the live bytes of a subtree),
/// and the oldest segment holding any of those records. The cleaner reads
/// `oldest` to find, without a walk, the subtrees that keep an old segment
/// alive (see `checkpoint.rs`). `earliest` is no later than the earliest
/// deadline of any value in the subtree (`NO_DEADLINE`: none has one), so
/// that expired keys are found without visiting subtrees that hold none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DiskRef {
    /// The page record.
    pub page: PageRef,
    /// Bytes of every record reachable from the page, the page included.
    pub subtree: u64,
    /// The oldest segment holding any of those records.
    pub oldest: u32,
    /// No later than the earliest deadline in the subtree (`NO_DEADLINE`:
    /// no value has one).
    pub earliest: kivi_log::Deadline,
}

/// A pointer from an internal node to a child: the child itself while it
/// is only in memory (written by no durable checkpoint yet), its page once it
/// is durably on disk. After each checkpoint the writer replaces in-memory
/// pointers to children that are now on disk by page pointers (see
/// `checkpoint::release_written`), so the page cache alone decides what stays
/// in memory.
#[derive(Debug, Clone)]
pub enum ChildRef {
    Mem(Arc<Node>, IndexHint),
    Disk(DiskRef),
}

/// Where an in-memory child's search index lies (a leaf's summary, heads
/// and slots; an internal node's heads), noted in the parent's reference
/// when it is made.
///
/// Why: the index is an allocation of its own, reached through the child
/// node, so a descent used to wait for memory twice in a row at each level
/// (the node, then its index). With the hint a descent asks for the index
/// as it steps to the child, and the two misses overlap. Nodes never change
/// their body once made, so the hint stays right for as long as the
/// reference lives; it is only ever handed to `prefetch_line`, never read
/// through, so even a wrong one would cost a wasted prefetch and nothing
/// else.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexHint {
    start: usize,
    lines: u32,
}

impl IndexHint {
    /// At most this many cache lines are asked for (a full 4 KiB leaf's
    /// index is about 22).
    const MAX_LINES: usize = 32;

    fn of(node: &Node) -> IndexHint {
        let (start, bytes) = match &node.body {
            Body::Leaf {
                base: LeafBase::Mem(b),
                ..
            } => b.index_span(),
            Body::Leaf { delta: Some(d), .. } => d.index_span(),
            Body::Leaf { .. } => return IndexHint::default(),
            Body::Internal { base, .. } => base.heads_span(),
        };
        IndexHint {
            start: start as usize,
            lines: bytes.div_ceil(64).min(Self::MAX_LINES) as u32,
        }
    }

    /// Starts fetching the first line of the child's index (a leaf's
    /// summary).
    #[inline]
    pub fn prefetch_first(self) {
        if self.lines > 0 {
            crate::leaf::prefetch_line(self.start as *const u8);
        }
    }

    /// Starts fetching the child's index into the CPU cache.
    #[inline]
    pub fn prefetch(self) {
        let first = self.start & !63;
        for line in 0..self.lines as usize {
            crate::leaf::prefetch_line(first.wrapping_add(line * 64) as *const u8);
        }
    }
}

impl ChildRef {
    pub fn in_memory(node: Arc<Node>) -> Self {
        let hint = IndexHint::of(&node);
        ChildRef::Mem(node, hint)
    }

    pub fn on_disk(page: DiskRef) -> Self {
        ChildRef::Disk(page)
    }

    pub fn mem(&self) -> Option<Arc<Node>> {
        match self {
            ChildRef::Mem(n, _) => Some(n.clone()),
            ChildRef::Disk(_) => None,
        }
    }

    pub fn page(&self) -> Option<DiskRef> {
        match self {
            ChildRef::Mem(..) => None,
            ChildRef::Disk(p) => Some(*p),
        }
    }
}

/// Separators and children of an internal node: child `i` holds the keys in
/// `[sep(i-1), sep(i))`, with the node's own bounds at the ends.
#[derive(Debug, Default)]
pub struct InternalData {
    /// Heads of the separators past the prefix they all share (`skip`
    /// bytes; see leaf.rs for why), then that prefix, padded to whole
    /// words: a lookup reads both, and the parent's hint fetches them as one
    /// span.
    heads: Vec<u64>,
    skip: u32,
    sep_ends: Vec<u32>,
    sep_data: Vec<u8>,
    children: Vec<ChildRef>,
}

impl InternalData {
    /// `children.len()` must be `seps.len() + 1`; separators strictly increasing.
    pub fn new(seps: &[&[u8]], children: Vec<ChildRef>) -> Self {
        assert_eq!(children.len(), seps.len() + 1, "internal node shape");
        // Sorted: what the first and last share, all share.
        let skip = match (seps.first(), seps.last()) {
            (Some(first), Some(last)) => common_prefix_len(first, last),
            _ => 0,
        };
        let mut d = InternalData {
            heads: Vec::with_capacity(seps.len() + skip.div_ceil(8)),
            skip: skip as u32,
            sep_ends: Vec::with_capacity(seps.len()),
            sep_data: Vec::with_capacity(seps.iter().map(|s| s.len()).sum()),
            children,
        };
        for s in seps {
            debug_assert!(
                d.sep_ends.is_empty() || d.sep(d.sep_ends.len() - 1) < *s,
                "separators out of order"
            );
            d.sep_data.extend_from_slice(s);
            d.sep_ends.push(d.sep_data.len() as u32);
            d.heads.push(head(&s[skip..]));
        }
        if let Some(first) = seps.first() {
            let at = d.heads.len();
            d.heads.resize(at + skip.div_ceil(8), 0);
            bytemuck::cast_slice_mut::<u64, u8>(&mut d.heads[at..])[..skip]
                .copy_from_slice(&first[..skip]);
        }
        d
    }

    /// The prefix every separator starts with.
    #[inline]
    fn prefix(&self) -> &[u8] {
        let words = &self.heads[self.sep_ends.len()..];
        &bytemuck::cast_slice::<u64, u8>(words)[..self.skip as usize]
    }

    pub fn children_len(&self) -> usize {
        self.children.len()
    }

    /// The same separators over new children (as many as before).
    pub fn with_children(&self, children: Vec<ChildRef>) -> Self {
        assert_eq!(children.len(), self.children.len(), "internal node shape");
        InternalData {
            heads: self.heads.clone(),
            skip: self.skip,
            sep_ends: self.sep_ends.clone(),
            sep_data: self.sep_data.clone(),
            children,
        }
    }

    pub fn seps_len(&self) -> usize {
        self.sep_ends.len()
    }

    #[inline]
    pub fn sep(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.sep_ends[i - 1] as usize
        };
        &self.sep_data[start..self.sep_ends[i] as usize]
    }

    pub fn child(&self, i: usize) -> &ChildRef {
        &self.children[i]
    }

    /// Index of the child whose range holds `key`.
    #[inline]
    pub fn child_index(&self, key: &[u8]) -> usize {
        let skip = self.skip as usize;
        let key = if skip == 0 {
            key
        } else {
            match past_prefix(key, self.prefix()) {
                Ok(rest) => rest,
                Err(std::cmp::Ordering::Less) => return 0,
                Err(_) => return self.sep_ends.len(),
            }
        };
        let heads = &self.heads[..self.sep_ends.len()];
        match search_heads(heads, key, |i| &self.sep(i)[skip..]) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// Where the heads (and the prefix after them) lie in memory, and
    /// their length in bytes.
    pub(crate) fn heads_span(&self) -> (*const u8, usize) {
        (self.heads.as_ptr().cast(), self.heads.len() * 8)
    }

    pub fn seps_bytes(&self) -> usize {
        self.sep_data.len()
    }

    pub fn mem_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.heads.capacity() * 8
            + self.sep_ends.capacity() * 4
            + self.sep_data.capacity()
            + self.children.capacity() * std::mem::size_of::<ChildRef>()
    }
}

/// Estimated encoded size of an internal page.
pub fn internal_size(sep_bytes: usize, children: usize) -> usize {
    4 + children * (PageRef::ENCODED_LEN + 7) + sep_bytes
}

/// Where a leaf's base lives.
///
/// A leaf that a change gives a delta keeps its base in memory only while
/// the memory budget counts it (see `Pager::try_make_resident`); otherwise
/// it names the base by its durable page, which the page cache may evict
/// and read again. Without this, random updates between two checkpoints
/// held nearly every base of the tree in memory whatever `cache_bytes`
/// said: a changed leaf costs its delta, not its page.
#[derive(Debug, Clone)]
pub enum LeafBase {
    Mem(LeafData),
    /// Only on disk. Always with a delta; the delta never drops an entry
    /// (deletes of keys the delta added become tombstones), so the delta
    /// laid over any page holding this page's content plus an older state
    /// of the delta reads the same (see `checkpoint::release_written`).
    Page(DiskRef),
}

impl LeafBase {
    pub fn mem(&self) -> Option<&LeafData> {
        match self {
            LeafBase::Mem(d) => Some(d),
            LeafBase::Page(_) => None,
        }
    }

    pub fn page(&self) -> Option<DiskRef> {
        match self {
            LeafBase::Mem(_) => None,
            LeafBase::Page(p) => Some(*p),
        }
    }
}

#[derive(Debug)]
pub enum Body {
    Leaf {
        base: LeafBase,
        delta: Option<LeafData>,
    },
    Internal {
        base: Arc<InternalData>,
        patches: Option<Arc<Patches>>,
    },
}

/// Replaced child pointers of an internal node, as a chain of small sorted
/// chunks, newest first. A new version of the node adds one chunk holding just
/// its own changes and shares the older chunks, so making it touches nothing
/// but the changed children. Bounded in depth and total size; past either the
/// writer folds the chain (see apply.rs).
#[derive(Debug)]
pub struct Patches {
    entries: Box<[(u32, ChildRef)]>,
    next: Option<Arc<Patches>>,
    depth: usize,
    total: usize,
}

impl Patches {
    /// A chunk of `entries` (sorted by child index, unique) over `next`.
    pub fn new(entries: Vec<(u32, ChildRef)>, next: Option<Arc<Patches>>) -> Arc<Self> {
        debug_assert!(
            entries.windows(2).all(|w| w[0].0 < w[1].0),
            "patches out of order"
        );
        let depth = 1 + next.as_ref().map_or(0, |n| n.depth);
        let total = entries.len() + next.as_ref().map_or(0, |n| n.total);
        Arc::new(Patches {
            entries: entries.into_boxed_slice(),
            next,
            depth,
            total,
        })
    }

    /// Chunks in the chain.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Entries in all chunks (a child patched twice counts twice).
    pub fn total(&self) -> usize {
        self.total
    }

    fn find(&self, i: u32) -> Option<&ChildRef> {
        let mut chunk = Some(self);
        while let Some(c) = chunk {
            if let Ok(j) = c.entries.binary_search_by_key(&i, |e| e.0) {
                return Some(&c.entries[j].1);
            }
            chunk = c.next.as_deref();
        }
        None
    }

    /// Every patched child with its newest reference, by child index.
    pub fn flatten(&self) -> Vec<(u32, ChildRef)> {
        let mut all: Vec<(u32, usize, &ChildRef)> = Vec::with_capacity(self.total);
        let mut chunk = Some(self);
        let mut age = 0;
        while let Some(c) = chunk {
            all.extend(c.entries.iter().map(|(i, r)| (*i, age, r)));
            chunk = c.next.as_deref();
            age += 1;
        }
        all.sort_by_key(|&(i, age, _)| (i, age));
        all.dedup_by_key(|e| e.0);
        all.into_iter().map(|(i, _, r)| (i, r.clone())).collect()
    }
}

/// A node of the tree in memory: a leaf (level 0) or an internal node,
/// immutable once shared; a change makes new nodes along its path.
#[derive(Debug)]
pub struct Node {
    level: u8,
    body: Body,
    /// Where a checkpoint wrote this exact node, consolidated.
    pub written: Written<DiskRef>,
    mem: usize,
    /// Estimated encoded size of the node's live content (leaves: with the
    /// delta applied), which decides splits and merges.
    size: usize,
    /// Set when the node, durably written, stays in memory in the tree rather
    /// than in the page cache: the pager's count of such bytes, which this
    /// node's bytes are part of until it is dropped or handed to the cache
    /// (`resident_done`).
    resident: OnceLock<Arc<AtomicU64>>,
    resident_done: AtomicBool,
    /// For a leaf with a delta: the same content as one plain leaf, built by
    /// the checkpoint that wrote it, to take this node's place in the tree
    /// once that checkpoint is durable (see `checkpoint::release_written`).
    consolidated: OnceLock<Arc<Node>>,
    /// Set when a change made this node: the pager's count of bytes in nodes
    /// no durable checkpoint has written yet (which only a checkpoint can
    /// let go), until `dirty_done` says it was written or it is dropped.
    dirty: OnceLock<Arc<AtomicU64>>,
    dirty_done: AtomicBool,
    /// A plain leaf standing for a leaf written as a delta page (its
    /// `written` names that page, whose figures count the base page too):
    /// see `link::consolidated`. `check` reads such a leaf as written.
    delta_twin: bool,
    /// No later than the earliest deadline under this node (see
    /// `earliest_deadline`), worked out the first time it is asked for.
    earliest: OnceLock<Deadline>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.give_up_residency();
        self.mark_clean();
    }
}

impl Node {
    /// A leaf without a delta.
    pub fn leaf(base: LeafData) -> Self {
        let size = base.size();
        Self::leaf_with_delta(LeafBase::Mem(base), None, size)
    }

    /// A leaf whose live content (base with `delta` applied) has `size`.
    pub fn leaf_with_delta(base: LeafBase, delta: Option<LeafData>, size: usize) -> Self {
        assert!(
            delta.is_some() || matches!(base, LeafBase::Mem(_)),
            "a leaf without a delta holds its entries"
        );
        let mem = std::mem::size_of::<Node>()
            + base.mem().map_or(0, |b| b.mem_bytes())
            + delta.as_ref().map_or(0, |d| d.mem_bytes());
        Node {
            level: 0,
            body: Body::Leaf { base, delta },
            written: Written::default(),
            mem,
            size,
            resident: OnceLock::new(),
            resident_done: AtomicBool::new(false),
            consolidated: OnceLock::new(),
            dirty: OnceLock::new(),
            dirty_done: AtomicBool::new(false),
            delta_twin: false,
            earliest: OnceLock::new(),
        }
    }

    /// A figure no later than the earliest deadline of any value under this
    /// node (`NO_DEADLINE`: none has one), as `DiskRef::earliest` is for a
    /// page: from its entries, its base's figure, its children's. Worked
    /// out once (a node never changes); a new node made by a change asks
    /// its unchanged children, which answer from their own.
    pub fn earliest_deadline(&self) -> Deadline {
        *self.earliest.get_or_init(|| match &self.body {
            Body::Leaf { base, delta } => {
                let base = match base {
                    LeafBase::Mem(b) => b.earliest_deadline(),
                    LeafBase::Page(d) => d.earliest,
                };
                earlier(
                    base,
                    delta
                        .as_ref()
                        .map_or(NO_DEADLINE, |d| d.earliest_deadline()),
                )
            }
            Body::Internal { base, .. } => (0..base.children_len())
                .map(|i| match self.child_ref(i) {
                    ChildRef::Mem(child, _) => child.earliest_deadline(),
                    ChildRef::Disk(d) => d.earliest,
                })
                .fold(NO_DEADLINE, earlier),
        })
    }

    /// The consolidated twin of a leaf with a delta, if a checkpoint made one.
    pub(crate) fn consolidated(&self) -> Option<&Arc<Node>> {
        self.consolidated.get()
    }

    /// A plain leaf of `entries`, the live content of a leaf written as a
    /// delta page, to stand for it (see `delta_twin`).
    pub(crate) fn delta_twin(entries: LeafData) -> Self {
        let mut twin = Node::leaf(entries);
        twin.delta_twin = true;
        twin
    }

    /// A copy of this internal node with `children` in place of its own
    /// (each standing for the same subtree: the same content), keeping its
    /// separators and where it was written, if it was.
    pub(crate) fn with_children(&self, children: Vec<ChildRef>) -> Node {
        let base = self.internal_base();
        let seps: Vec<&[u8]> = (0..base.seps_len()).map(|i| base.sep(i)).collect();
        let copy = Node::internal(
            self.level,
            Arc::new(InternalData::new(&seps, children)),
            None,
        );
        copy.written.copy_from(&self.written);
        copy
    }

    /// Whether this leaf stands for one written as a delta page.
    pub(crate) fn is_delta_twin(&self) -> bool {
        self.delta_twin
    }

    /// Records `twin`, a plain leaf with this leaf's live content and its
    /// page, as this leaf's replacement.
    pub(crate) fn set_consolidated(&self, twin: Arc<Node>) {
        debug_assert!(twin.is_leaf() && self.is_leaf());
        let _ = self.consolidated.set(twin);
    }

    /// Estimated encoded size of the live content.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Counts the node as resident in `count` (once); true if it now is.
    pub fn make_resident(&self, count: &Arc<AtomicU64>) -> bool {
        if self.resident.get().is_some() {
            return !self.resident_done.load(AtomicOrdering::Relaxed);
        }
        count.fetch_add(self.mem as u64, AtomicOrdering::Relaxed);
        if self.resident.set(count.clone()).is_err() {
            count.fetch_sub(self.mem as u64, AtomicOrdering::Relaxed);
        }
        true
    }

    /// Whether the node is counted as resident (kept in memory in the tree,
    /// outside the page cache) now.
    pub fn is_resident(&self) -> bool {
        self.resident.get().is_some() && !self.resident_done.load(AtomicOrdering::Relaxed)
    }

    /// Stops counting the node as resident (it was dropped, or handed to
    /// the page cache, which counts it by weight). Once only.
    pub(crate) fn give_up_residency(&self) {
        if let Some(count) = self.resident.get() {
            if !self.resident_done.swap(true, AtomicOrdering::Relaxed) {
                count.fetch_sub(self.mem as u64, AtomicOrdering::Relaxed);
            }
        }
    }

    /// A leaf's base and delta; `None` for an internal node.
    #[inline]
    pub fn leaf_parts(&self) -> Option<(&LeafBase, Option<&LeafData>)> {
        match &self.body {
            Body::Leaf { base, delta } => Some((base, delta.as_ref())),
            Body::Internal { .. } => None,
        }
    }

    /// Counts the node, just made by a change, as dirty in `count`.
    pub(crate) fn mark_dirty(&self, count: &Arc<AtomicU64>) {
        if self.dirty.set(count.clone()).is_ok() {
            count.fetch_add(self.own_bytes(), AtomicOrdering::Relaxed);
        }
    }

    /// Stops counting the node as dirty (a durable checkpoint wrote it).
    pub(crate) fn mark_clean(&self) {
        if let Some(count) = self.dirty.get() {
            if !self.dirty_done.swap(true, AtomicOrdering::Relaxed) {
                count.fetch_sub(self.own_bytes(), AtomicOrdering::Relaxed);
            }
        }
    }

    /// Memory this node adds to the version it came from: an overlay (a
    /// leaf's delta, an internal node's newest patches) shares its base,
    /// which is counted where it was made (or by the cache); a
    /// consolidated node owns everything.
    fn own_bytes(&self) -> u64 {
        let own = match &self.body {
            Body::Leaf { delta: Some(d), .. } => std::mem::size_of::<Node>() + d.mem_bytes(),
            Body::Internal {
                patches: Some(p), ..
            } => {
                std::mem::size_of::<Node>()
                    + p.entries.len() * std::mem::size_of::<(u32, ChildRef)>()
            }
            _ => self.mem,
        };
        own as u64
    }

    /// An internal node at `level` (at least 1) over `base`'s separators and
    /// children, with `patches` replacing some of the children.
    ///
    /// # Panics
    ///
    /// If `level` is 0.
    pub fn internal(level: u8, base: Arc<InternalData>, patches: Option<Arc<Patches>>) -> Self {
        assert!(level > 0, "internal node at level 0");
        let mem = std::mem::size_of::<Node>()
            + base.mem_bytes()
            + patches
                .as_ref()
                .map_or(0, |p| p.total * std::mem::size_of::<(u32, ChildRef)>());
        let size = internal_size(base.seps_bytes(), base.children_len());
        Node {
            level,
            body: Body::Internal { base, patches },
            written: Written::default(),
            mem,
            size,
            resident: OnceLock::new(),
            resident_done: AtomicBool::new(false),
            consolidated: OnceLock::new(),
            dirty: OnceLock::new(),
            dirty_done: AtomicBool::new(false),
            delta_twin: false,
            earliest: OnceLock::new(),
        }
    }

    /// The node's height above the leaves (0 for a leaf).
    pub fn level(&self) -> u8 {
        self.level
    }

    /// Whether the node is a leaf (level 0).
    pub fn is_leaf(&self) -> bool {
        self.level == 0
    }

    /// What the node holds: a leaf's entries or an internal node's children.
    pub fn body(&self) -> &Body {
        &self.body
    }

    /// Bytes of memory this node holds (bases counted in full even if shared).
    pub fn mem_bytes(&self) -> usize {
        self.mem
    }

    /// Number of children of an internal node; 0 for a leaf.
    pub fn children_len(&self) -> usize {
        match &self.body {
            Body::Internal { base, .. } => base.children_len(),
            Body::Leaf { .. } => 0,
        }
    }

    /// Starts fetching a leaf's entries into the CPU cache (no-op for an
    /// internal node).
    pub fn prefetch_leaf(&self) {
        if let Body::Leaf { base, delta } = &self.body {
            if let LeafBase::Mem(base) = base {
                base.prefetch();
            }
            if let Some(d) = delta {
                d.prefetch();
            }
        }
    }

    /// The effective reference to child `i` of an internal node.
    pub fn child_ref(&self, i: usize) -> &ChildRef {
        match &self.body {
            Body::Internal { base, patches } => {
                match patches.as_ref().and_then(|p| p.find(i as u32)) {
                    Some(r) => r,
                    None => base.child(i),
                }
            }
            Body::Leaf { .. } => panic!("child_ref on a leaf"),
        }
    }

    /// An internal node's base (separators and children, before patches).
    ///
    /// # Panics
    ///
    /// On a leaf.
    pub fn internal_base(&self) -> &Arc<InternalData> {
        match &self.body {
            Body::Internal { base, .. } => base,
            Body::Leaf { .. } => panic!("internal_base on a leaf"),
        }
    }
}

#[cfg(test)]
mod hint_tests {
    use super::*;
    use crate::leaf::{Entry, ValueRef};

    #[test]
    fn an_in_memory_reference_points_at_its_childs_index() {
        let mut leaf = LeafData::with_capacity(40, 40 * 16);
        for i in 0..40u32 {
            let key = format!("key-{i:04}");
            leaf.push(
                key.as_bytes(),
                Entry::Value(ValueRef::Inline(b"value-bytes"), kivi_log::NO_DEADLINE),
            );
        }
        let (start, bytes) = leaf.index_span();
        assert!(
            bytes >= 40 * 3 * 8,
            "heads and slots of 40 entries: {bytes}"
        );
        let child = Arc::new(Node::leaf(leaf));
        let ChildRef::Mem(_, hint) = ChildRef::in_memory(child.clone()) else {
            panic!("in memory");
        };
        assert_eq!(hint.start, start as usize);
        assert_eq!(hint.lines as usize, bytes.div_ceil(64));

        let right = Arc::new(Node::leaf(LeafData::with_capacity(0, 0)));
        let base = Arc::new(InternalData::new(
            &[b"key-0040"],
            vec![ChildRef::in_memory(child), ChildRef::in_memory(right)],
        ));
        let (heads, heads_bytes) = base.heads_span();
        let parent = Arc::new(Node::internal(1, base, None));
        let ChildRef::Mem(_, hint) = ChildRef::in_memory(parent) else {
            panic!("in memory");
        };
        assert_eq!((hint.start, hint.lines), (heads as usize, 1));
        // One head, then the prefix the separators share: with one
        // separator, all 8 bytes of it.
        assert_eq!(heads_bytes, 16);
    }
}

#[cfg(test)]
mod child_index_tests {
    use super::*;
    use crate::leaf::tests::near_key;

    proptest::proptest! {
        #[test]
        fn child_index_picks_the_child_whose_range_holds_the_key(
            prefix in near_key(),
            tails in proptest::collection::btree_set(near_key(), 1..40),
            probes in proptest::collection::vec(near_key(), 0..40),
        ) {
            // Separators sharing a prefix (heads are taken past it).
            let seps: Vec<Vec<u8>> = tails.iter().map(|t| [&prefix[..], t].concat()).collect();
            let sep_refs: Vec<&[u8]> = seps.iter().map(|s| s.as_slice()).collect();
            let children = (0..=seps.len())
                .map(|_| ChildRef::in_memory(Arc::new(Node::leaf(LeafData::default()))))
                .collect();
            let node = InternalData::new(&sep_refs, children);
            let mut all: Vec<Vec<u8>> = seps.clone();
            for p in &probes {
                all.push(p.clone());
                all.push([&prefix[..], p].concat());
            }
            for s in &seps {
                all.push([&s[..], &[0]].concat());
                all.push(s[..s.len().saturating_sub(1)].to_vec());
            }
            for p in &all {
                // Child i holds [sep(i-1), sep(i)).
                let want = seps.partition_point(|s| s.as_slice() <= p.as_slice());
                proptest::prop_assert_eq!(node.child_index(p), want, "probe {:?}", p);
            }
        }
    }
}
