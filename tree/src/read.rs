//! Reading the tree: point lookups and cursors.
//!
//! A point lookup follows separators from the root to one leaf and answers
//! from that leaf; by the B+tree's own definition that is the answer, so it
//! needs no further checks beyond the ones every page passed when decoded. A
//! cursor walks leaves in order and checks that order holds across leaves,
//! so a damaged tree can never make a scan return keys out of order.

use crate::leaf::{merge_into, prefetch_line, Entry, LeafData, ValueRef};
use crate::leaf_view::{At, LeafView};
use crate::node::{Body, ChildRef, LeafBase, Node};
use crate::pager::Pager;
use kivi_log::{Corruption, Deadline, Error, NO_DEADLINE};
use std::ops::ControlFlow;
use std::sync::Arc;

/// The value stored under `key`, read into `out`, and its deadline;
/// `Ok(None)` if absent. (Expired values are returned like any other: what
/// a deadline means is the reader's business.)
pub fn get_into(
    pager: &Pager,
    root: &Arc<Node>,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<Option<Deadline>, Error> {
    get_in(pager, root, key, out)
}

/// One level of a lookup. In-memory children are borrowed from their parent
/// (no reference count is touched on the way down); only children fetched
/// from the page cache are held by an `Arc` of their own.
fn get_in(
    pager: &Pager,
    node: &Node,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<Option<Deadline>, Error> {
    match node.body() {
        Body::Internal { base, .. } => {
            let i = base.child_index(key);
            match node.child_ref(i) {
                ChildRef::Mem(child, hint) => {
                    hint.prefetch();
                    get_in(pager, child, key, out)
                }
                ChildRef::Disk(at) => {
                    let child = pager.load(*at, node.level() - 1)?;
                    get_in(pager, &child, key, out)
                }
            }
        }
        Body::Leaf { base, delta } => {
            if let LeafBase::Mem(b) = base {
                b.prefetch_index();
            }
            if let Some(d) = delta {
                d.prefetch_index();
            }
            find_in_leaf(pager, base, delta.as_ref(), key, out)
        }
    }
}

/// A leaf's answer for `key`, read into `out`: its delta's entry if it has
/// one, else its base's.
fn find_in_leaf(
    pager: &Pager,
    base: &LeafBase,
    delta: Option<&LeafData>,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<Option<Deadline>, Error> {
    if let Some(d) = delta {
        if let Ok(i) = d.find(key) {
            return copy_entry(pager, d.entry(i), out);
        }
    }
    let base = pager.base(base)?;
    match base.find(key) {
        Ok(i) => copy_entry(pager, base.entry(i), out),
        Err(_) => Ok(None),
    }
}

/// Looks up every key of `keys` under `root`, calling `found(i, value)` for
/// each in order (`None` when absent, else the value and its deadline),
/// until it answers `Break` (returned) or a read fails.
///
/// The lookups go down the tree side by side, one level at a time, each
/// level in passes: a pass asks for what every lookup needs next (a node,
/// its index, the child slot, the entry) and the following pass uses it.
/// One lookup alone waits for memory once or twice per level, one miss
/// after another; here the misses of all of them are in flight at once.
/// (All leaves are at level 0, so every lookup is at the same level.)
pub fn get_each(
    pager: &Pager,
    root: &Arc<Node>,
    keys: &[&[u8]],
    found: &mut Found<'_>,
) -> Result<ControlFlow<()>, Error> {
    let nodes: Vec<NodeRef<'_>> = keys.iter().map(|_| NodeRef::Borrowed(root)).collect();
    let mut out = Vec::new();
    descend_each(pager, &nodes, keys, &mut out, found)
}

/// What `get_each` calls with each key's index and value.
pub type Found<'f> = dyn FnMut(usize, Option<(&[u8], Deadline)>) -> ControlFlow<()> + 'f;

/// A node a lookup is at: in memory under its parent, or loaded.
enum NodeRef<'a> {
    Borrowed(&'a Node),
    Loaded(Arc<Node>),
}

impl NodeRef<'_> {
    #[inline]
    fn node(&self) -> &Node {
        match self {
            NodeRef::Borrowed(n) => n,
            NodeRef::Loaded(n) => n,
        }
    }
}

/// Lines of a node asked for ahead: its level and body (a leaf's data
/// inline) lie in its first few.
const NODE_LINES: usize = 4;

fn prefetch_node(node: &Arc<Node>) {
    let at = Arc::as_ptr(node).cast::<u8>();
    for line in 0..NODE_LINES {
        prefetch_line(at.wrapping_add(line * 64));
    }
}

/// One level of `get_each`; `nodes[i]` is where `keys[i]`'s lookup is.
fn descend_each(
    pager: &Pager,
    nodes: &[NodeRef<'_>],
    keys: &[&[u8]],
    out: &mut Vec<u8>,
    found: &mut Found<'_>,
) -> Result<ControlFlow<()>, Error> {
    let Some(first) = nodes.first() else {
        return Ok(ControlFlow::Continue(()));
    };
    let level = first.node().level();
    if level == 0 {
        return leaves_each(pager, nodes, keys, out, found);
    }
    // The separators' owner, behind the node.
    for n in nodes {
        if let Body::Internal { base, .. } = n.node().body() {
            prefetch_line(Arc::as_ptr(base).cast());
        }
    }
    // The child each key goes to, and its slot.
    let mut picks = Vec::with_capacity(nodes.len());
    for (n, key) in nodes.iter().zip(keys) {
        let Body::Internal { base, .. } = n.node().body() else {
            unreachable!("every node of a level above 0 is internal");
        };
        let i = base.child_index(key);
        prefetch_line((base.child(i) as *const ChildRef).cast());
        picks.push(i);
    }
    // The children: in memory (their node and index asked for: a leaf's
    // first line only, see `LeafData::prefetch_start`), or loaded.
    let mut next = Vec::with_capacity(nodes.len());
    for (n, &i) in nodes.iter().zip(&picks) {
        let node = n.node();
        next.push(match node.child_ref(i) {
            ChildRef::Mem(child, hint) => {
                prefetch_node(child);
                if level == 1 {
                    hint.prefetch_first();
                } else {
                    hint.prefetch();
                }
                NodeRef::Borrowed(child.as_ref())
            }
            ChildRef::Disk(at) => NodeRef::Loaded(pager.load(*at, level - 1)?),
        });
    }
    descend_each(pager, &next, keys, out, found)
}

fn leaves_each(
    pager: &Pager,
    nodes: &[NodeRef<'_>],
    keys: &[&[u8]],
    out: &mut Vec<u8>,
    found: &mut Found<'_>,
) -> Result<ControlFlow<()>, Error> {
    fn leaf<'n>(n: &'n NodeRef<'_>) -> (Option<&'n LeafData>, Option<&'n LeafData>) {
        match n.node().body() {
            Body::Leaf { base, delta } => (base.mem(), delta.as_ref()),
            Body::Internal { .. } => unreachable!("every node of level 0 is a leaf"),
        }
    }
    // The heads and slots each key's search reads, then the entries they
    // point at, asked for.
    for (n, key) in nodes.iter().zip(keys) {
        let (base, delta) = leaf(n);
        delta
            .into_iter()
            .chain(base)
            .for_each(|d| d.prefetch_block(key));
    }
    for (n, key) in nodes.iter().zip(keys) {
        let (base, delta) = leaf(n);
        delta
            .into_iter()
            .chain(base)
            .for_each(|d| d.prefetch_entry(key));
    }
    for (i, (n, key)) in nodes.iter().zip(keys).enumerate() {
        let Body::Leaf { base, delta } = n.node().body() else {
            unreachable!("every node of level 0 is a leaf");
        };
        let entry = find_in_leaf(pager, base, delta.as_ref(), key, out)?;
        if found(i, entry.map(|d| (out.as_slice(), d))).is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// How many of `keys` (sorted, unique) lie in the leaf that holds or would
/// hold `keys[at]`: how densely a batch of those keys would hit that leaf.
/// Descends one path, loading its nodes; leaves are not read.
pub fn keys_in_leaf_of(
    pager: &Pager,
    root: &Arc<Node>,
    keys: &[&[u8]],
    at: usize,
) -> Result<usize, Error> {
    keys_in_leaf(pager, root, keys, keys[at])
}

fn keys_in_leaf(pager: &Pager, node: &Node, keys: &[&[u8]], key: &[u8]) -> Result<usize, Error> {
    match node.body() {
        Body::Internal { base, .. } => {
            let i = base.child_index(key);
            // Child indexes grow with the keys, so those of child `i` are
            // one run of the sorted keys.
            let start = keys.partition_point(|k| base.child_index(k) < i);
            let end = keys.partition_point(|k| base.child_index(k) <= i);
            let keys = &keys[start..end];
            match node.child_ref(i) {
                ChildRef::Mem(child, _) => keys_in_leaf(pager, child, keys, key),
                ChildRef::Disk(at) => {
                    let child = pager.load(*at, node.level() - 1)?;
                    keys_in_leaf(pager, &child, keys, key)
                }
            }
        }
        Body::Leaf { .. } => Ok(keys.len()),
    }
}

fn copy_entry(pager: &Pager, e: Entry<'_>, out: &mut Vec<u8>) -> Result<Option<Deadline>, Error> {
    out.clear();
    match e {
        Entry::Tombstone => Ok(None),
        Entry::Value(ValueRef::Inline(v), d) => {
            out.extend_from_slice(v);
            Ok(Some(d))
        }
        Entry::Value(ValueRef::Big(b), d) => {
            *out = pager.read_big(b)?;
            Ok(Some(d))
        }
    }
}

/// Calls `found(key, deadline)` for every value under `root` whose deadline
/// is before `now` (`now > deadline`: expired), in key order, from the first
/// key after `after`, until `found` answers `Break` (returned) or a read
/// fails. Only subtrees whose earliest deadline may be before `now` are
/// visited (`Node::earliest_deadline`, `DiskRef::earliest`), so the walk
/// costs what the expired keys' leaves and their paths cost, not the tree.
pub fn expired_each(
    pager: &Pager,
    root: &Arc<Node>,
    after: Option<&[u8]>,
    now: Deadline,
    found: &mut dyn FnMut(&[u8], Deadline) -> ControlFlow<()>,
) -> Result<ControlFlow<()>, Error> {
    if !may_expire(root.earliest_deadline(), now) {
        return Ok(ControlFlow::Continue(()));
    }
    expired_in(pager, root, after, now, found)
}

/// Whether a subtree whose earliest deadline is `earliest` may hold a
/// value expired at `now`.
fn may_expire(earliest: Deadline, now: Deadline) -> bool {
    earliest != NO_DEADLINE && earliest < now
}

fn expired_in(
    pager: &Pager,
    node: &Node,
    after: Option<&[u8]>,
    now: Deadline,
    found: &mut dyn FnMut(&[u8], Deadline) -> ControlFlow<()>,
) -> Result<ControlFlow<()>, Error> {
    match node.body() {
        Body::Internal { base, .. } => {
            let first = after.map_or(0, |k| base.child_index(k));
            for i in first..base.children_len() {
                let c = node.child_ref(i);
                let earliest = match c {
                    ChildRef::Mem(child, _) => child.earliest_deadline(),
                    ChildRef::Disk(d) => d.earliest,
                };
                if !may_expire(earliest, now) {
                    continue;
                }
                let child = pager.resolve(c, node.level() - 1)?;
                if expired_in(pager, &child, after, now, found)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        Body::Leaf { .. } => {
            let entries = leaf_entries(pager, node)?;
            for (k, e) in entries.iter() {
                let d = e.deadline();
                if d == NO_DEADLINE || d >= now || after.is_some_and(|a| k <= a) {
                    continue;
                }
                if found(k, d).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// The entries of a leaf node with its delta applied (tombstones removed).
/// Shares the base when there is no delta.
pub fn leaf_entries(pager: &Pager, node: &Node) -> Result<LeafData, Error> {
    let (base, delta) = node.leaf_parts().expect("leaf_entries on a leaf");
    let base = pager.base(base)?;
    Ok(match delta {
        None => base.clone(),
        Some(d) => {
            let mut merged = Vec::with_capacity(base.len() + d.len());
            merge_into(&mut merged, base.iter(), d.iter(), true);
            let mut out = LeafData::with_capacity(merged.len(), base.size() + d.size());
            for (k, e) in merged {
                out.push(k, e);
            }
            out
        }
    })
}

/// A position in the tree, moving forward or backward over its entries.
///
/// Holds the path from the root (so it reads a consistent version however
/// the tree changes meanwhile) and a merged view of the current leaf.
pub struct Cursor {
    root: Option<Arc<Node>>,
    /// Internal nodes from the root down, each with the child index taken.
    stack: Vec<(Arc<Node>, usize)>,
    view: LeafView,
    /// The entry the cursor is on; `None` when not on one.
    at: Option<At>,
    /// Outermost key (tombstones included) of the previous leaf visited, to
    /// check order across leaves; meaningful when `has_edge`. Reused, so
    /// moving between leaves allocates nothing.
    edge: Vec<u8>,
    has_edge: bool,
    forward: bool,
    /// The previous leaf's `prefetch_ahead` already asked for the leaf the
    /// cursor moves to next, so arriving there need not ask again.
    next_prefetched: bool,
    /// Leaves moved to since the last seek: the read-ahead window starts at
    /// one leaf and doubles with each, up to `READ_AHEAD_MAX`.
    leaves_moved: u32,
    /// The parent whose children were asked for ahead, and up to which
    /// distance from the child the cursor was on then.
    read_ahead: Option<(usize, usize, usize)>,
}

/// Most leaves a scan asks for ahead of the one it reads.
const READ_AHEAD_MAX: usize = 32;

impl Cursor {
    /// A cursor over the tree under `root` (`None`: an empty tree), on no
    /// entry until it seeks.
    pub fn new(root: Option<Arc<Node>>) -> Self {
        Cursor {
            root,
            stack: Vec::new(),
            view: LeafView::default(),
            at: None,
            edge: Vec::new(),
            has_edge: false,
            forward: true,
            next_prefetched: false,
            leaves_moved: 0,
            read_ahead: None,
        }
    }

    /// Whether the cursor is on an entry (a seek or step found one).
    #[inline]
    pub fn is_valid(&self) -> bool {
        self.at.is_some()
    }

    /// The key of the entry the cursor is on.
    ///
    /// # Panics
    ///
    /// If it is on none ([`Cursor::is_valid`] is false).
    #[inline]
    pub fn key(&self) -> &[u8] {
        let at = self.at.expect("cursor not on an entry");
        self.view.key(at)
    }

    /// The value of the entry the cursor is on (a big value unread; see
    /// [`ValueRef`]).
    ///
    /// # Panics
    ///
    /// If it is on none.
    #[inline]
    pub fn value(&self) -> ValueRef<'_> {
        let at = self.at.expect("cursor not on an entry");
        match self.view.entry(at) {
            Entry::Value(v, _) => v,
            Entry::Tombstone => unreachable!("the leaf view skips tombstones"),
        }
    }

    /// The deadline of the entry the cursor is on (`NO_DEADLINE`: none).
    #[inline]
    pub fn deadline(&self) -> Deadline {
        let at = self.at.expect("cursor not on an entry");
        self.view.entry(at).deadline()
    }

    /// Descends from `node` to a leaf, taking child `pick(node)` at each level.
    fn descend(
        &mut self,
        pager: &Pager,
        mut node: Arc<Node>,
        pick: &dyn Fn(&Node) -> usize,
    ) -> Result<(), Error> {
        while !node.is_leaf() {
            let i = pick(&node);
            let child = pager.resolve(node.child_ref(i), node.level() - 1)?;
            self.stack.push((node, i));
            node = child;
        }
        self.view = LeafView::of(pager, &node)?;
        if !std::mem::take(&mut self.next_prefetched) {
            self.view.prefetch();
        }
        Ok(())
    }

    fn reset(&mut self, forward: bool) -> Option<Arc<Node>> {
        self.stack.clear();
        self.at = None;
        self.has_edge = false;
        self.forward = forward;
        self.next_prefetched = false;
        self.leaves_moved = 0;
        self.read_ahead = None;
        self.root.clone()
    }

    /// Positions on the first entry with key >= `key` (or the first entry).
    pub fn seek_forward(&mut self, pager: &Pager, key: Option<&[u8]>) -> Result<(), Error> {
        let Some(root) = self.reset(true) else {
            return Ok(());
        };
        match key {
            Some(k) => {
                self.descend(pager, root, &|n: &Node| n.internal_base().child_index(k))?;
                self.view.seek(k);
            }
            None => self.descend(pager, root, &|_| 0)?,
        }
        self.at = self.view.after();
        if self.at.is_some() {
            return Ok(());
        }
        self.next_leaf(pager)
    }

    /// Positions on the last entry with key < `key` (or the last entry).
    pub fn seek_backward(&mut self, pager: &Pager, key: Option<&[u8]>) -> Result<(), Error> {
        let Some(root) = self.reset(false) else {
            return Ok(());
        };
        match key {
            Some(k) => {
                self.descend(pager, root, &|n: &Node| n.internal_base().child_index(k))?;
                self.view.seek(k);
            }
            None => {
                self.descend(pager, root, &|n: &Node| n.children_len() - 1)?;
                self.view.seek_end();
            }
        }
        self.at = self.view.before();
        if self.at.is_some() {
            return Ok(());
        }
        self.prev_leaf(pager)
    }

    /// Moves to the next entry (forward cursors).
    #[inline]
    pub fn next(&mut self, pager: &Pager) -> Result<(), Error> {
        debug_assert!(self.forward);
        let Some(at) = self.at else {
            return Ok(());
        };
        self.view.pass_forward(at);
        self.at = self.view.after();
        if self.at.is_some() {
            return Ok(());
        }
        self.next_leaf(pager)
    }

    /// Moves to the previous entry (backward cursors).
    #[inline]
    pub fn prev(&mut self, pager: &Pager) -> Result<(), Error> {
        debug_assert!(!self.forward);
        let Some(at) = self.at else {
            return Ok(());
        };
        self.view.pass_backward(at);
        self.at = self.view.before();
        if self.at.is_some() {
            return Ok(());
        }
        self.prev_leaf(pager)
    }

    /// Starts fetching the leaves the cursor reaches next: the whole of the
    /// next one, and the node header of the one after, whose buffer the
    /// following call will fetch. Leaves of an updated tree are scattered
    /// over the heap, so without this a scan waits for DRAM at every leaf.
    fn prefetch_ahead(&mut self) {
        let Some((parent, i)) = self.stack.last() else {
            return;
        };
        let (near, far) = if self.forward {
            (i.checked_add(1), i.checked_add(2))
        } else {
            (i.checked_sub(1), i.checked_sub(2))
        };
        let mem_child = |j: Option<usize>| match j {
            Some(j) if j < parent.children_len() => match parent.child_ref(j) {
                ChildRef::Mem(n, _) => Some(n),
                ChildRef::Disk(_) => None,
            },
            _ => None,
        };
        let near = mem_child(near);
        if let Some(n) = near {
            n.prefetch_leaf();
        }
        if let Some(n) = mem_child(far) {
            let at: *const u8 = Arc::as_ptr(n).cast();
            prefetch_line(at);
            prefetch_line(at.wrapping_add(64));
        }
        self.next_prefetched = near.is_some();
    }

    /// Asks for the pages of the leaves after the one just moved to
    /// (siblings under the same parent): one at the first move, doubling
    /// with each, up to `READ_AHEAD_MAX`: a short scan asks for little it
    /// will not read, a long one keeps the device busy.
    fn read_ahead(&mut self, pager: &Pager) {
        self.leaves_moved = self.leaves_moved.saturating_add(1);
        let Some((parent, i)) = self.stack.last() else {
            return;
        };
        let window = (1usize << (self.leaves_moved - 1).min(8)).min(READ_AHEAD_MAX);
        // The parent's address, only compared. A parent read from disk and
        // since evicted could share it with a later one; the cost is a few
        // pages not asked for ahead.
        let parent_ptr = Arc::as_ptr(parent) as usize;
        let done = match self.read_ahead {
            Some((p, at, upto)) if p == parent_ptr => upto.saturating_sub(at.abs_diff(*i)),
            _ => 0,
        };
        let n = parent.children_len();
        let sibling = |step: usize| {
            if self.forward {
                i.checked_add(step).filter(|&j| j < n)
            } else {
                i.checked_sub(step)
            }
        };
        for step in done + 1..=window {
            let Some(j) = sibling(step) else { break };
            pager.prefetch_child(parent.child_ref(j));
        }
        // A leaf written as a delta page names its base only once read:
        // the nearer half of the window, asked for a step or more ago, is
        // read now (from the page cache, as a rule) and its bases asked for.
        for step in (done / 2).max(1)..=window / 2 {
            let Some(j) = sibling(step) else { break };
            if let ChildRef::Disk(d) = parent.child_ref(j) {
                if let Ok(child) = pager.load(*d, 0) {
                    if let Some((LeafBase::Page(base), _)) = child.leaf_parts() {
                        pager.prefetch(base.page);
                    }
                }
            }
        }
        self.read_ahead = Some((parent_ptr, *i, window.max(done)));
    }

    fn next_leaf(&mut self, pager: &Pager) -> Result<(), Error> {
        loop {
            if let Some(k) = self.view.last_key() {
                self.edge.clear();
                self.edge.extend_from_slice(k);
                self.has_edge = true;
            }
            self.at = None;
            // Climb to the nearest ancestor with a child to the right.
            let (node, i) = loop {
                let Some((node, i)) = self.stack.pop() else {
                    return Ok(());
                };
                if i + 1 < node.children_len() {
                    break (node, i + 1);
                }
            };
            let child = pager.resolve(node.child_ref(i), node.level() - 1)?;
            self.stack.push((node, i));
            self.descend(pager, child, &|_| 0)?;
            self.prefetch_ahead();
            self.read_ahead(pager);
            if let (true, Some(first)) = (self.has_edge, self.view.first_key()) {
                if first <= self.edge.as_slice() {
                    return Err(order_error(first));
                }
            }
            self.at = self.view.after();
            if self.at.is_some() {
                return Ok(());
            }
        }
    }

    fn prev_leaf(&mut self, pager: &Pager) -> Result<(), Error> {
        loop {
            if let Some(k) = self.view.first_key() {
                self.edge.clear();
                self.edge.extend_from_slice(k);
                self.has_edge = true;
            }
            self.at = None;
            let (node, i) = loop {
                let Some((node, i)) = self.stack.pop() else {
                    return Ok(());
                };
                if i > 0 {
                    break (node, i - 1);
                }
            };
            let child = pager.resolve(node.child_ref(i), node.level() - 1)?;
            self.stack.push((node, i));
            self.descend(pager, child, &|n: &Node| n.children_len() - 1)?;
            self.prefetch_ahead();
            self.read_ahead(pager);
            self.view.seek_end();
            if let (true, Some(last)) = (self.has_edge, self.view.last_key()) {
                if last >= self.edge.as_slice() {
                    return Err(order_error(last));
                }
            }
            self.at = self.view.before();
            if self.at.is_some() {
                return Ok(());
            }
        }
    }
}

fn order_error(key: &[u8]) -> Error {
    Error::Corrupt(Corruption::new(
        "tree",
        0,
        format!("leaves out of key order near key {}", hex_prefix(key)),
    ))
}

fn hex_prefix(key: &[u8]) -> String {
    key.iter().take(16).map(|b| format!("{b:02x}")).collect()
}
