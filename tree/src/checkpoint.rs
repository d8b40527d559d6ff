//! Writing a tree version to the page log, and letting go of it afterwards.
//!
//! [`write_tree`] writes every node of a version that is not yet on disk,
//! children before parents (so each parent can name its children's
//! addresses, in the same segment or an older one), out-of-line
//! values before their leaves. Nodes already written by a durable checkpoint
//! are referenced, not rewritten: only what changed since is written.
//!
//! Once the checkpoint is durable, [`release_written`] lets the written nodes
//! stay in memory as *resident* nodes while a budget allows, and swizzles the
//! rest into page references handed to the page cache, which evicts them
//! when it must: either way, memory stays within `cache_bytes`.

use crate::leaf::{earlier, entry_len, merge_into, BigValue, Entry, LeafData, ValueRef};
use crate::node::{Body, ChildRef, DiskRef, InternalData, LeafBase, Node};
use crate::page::{encode_delta, encode_internal, encode_leaf, LiveEntry};
use crate::pager::Pager;
use crate::written::Durable;
use kivi_log::{Error, PageRef, RecordType, NO_DEADLINE};
use std::collections::HashMap;
use std::sync::Arc;

/// Where a checkpoint's records go.
pub trait PageSink {
    /// Writes one record whose body `body` encodes; returns where it lives.
    fn write_record(
        &mut self,
        ty: RecordType,
        body: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<PageRef, Error>;
}

/// Counts of what a checkpoint wrote.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteStats {
    /// Page records written (delta pages included).
    pub pages: u64,
    /// Of those, delta pages (a leaf's changes over its base page).
    pub deltas: u64,
    /// Out-of-line value records written.
    pub blobs: u64,
    /// Bytes of every record written, headers included.
    pub bytes: u64,
    /// Of the records, those that were already durable and were copied
    /// because they lay in a segment being cleaned.
    pub relocated: u64,
    /// Bytes of the `relocated` records.
    pub relocated_bytes: u64,
}

/// What a checkpoint wrote: the root, and the new places of the records it
/// copied out of segments being cleaned. Memory still points to the old
/// places; once the checkpoint is durable, [`release_written`] re-points it.
#[derive(Debug, Default)]
pub struct TreeWrite {
    /// Where the root was written (`None` for an empty tree).
    pub root: Option<DiskRef>,
    /// Old page address (`Addr::as_u64`) -> new place, for pages reached
    /// through a page reference (nodes not in memory).
    pub pages: HashMap<u64, DiskRef>,
    /// Old blob address -> new blob.
    pub blobs: HashMap<u64, PageRef>,
    /// Page address -> the page now holding its content plus a newer state
    /// of a delta laid over it: for leaves whose base is a page (see
    /// `LeafBase::Page`), and for leaves the cleaner copied. A changed leaf
    /// made after the checkpoint took its version may name the old page as
    /// its base; it is moved onto the new one before the old can go. With
    /// the delta the written leaf had, whose entries the new page holds.
    pub rebased: HashMap<u64, (DiskRef, Option<LeafData>)>,
    /// The written root's children, when the root is an internal node.
    pub root_children: Vec<DiskRef>,
    /// Changed children of the root left unwritten, an older page standing
    /// in for each (see [`write_tree`]'s `keep`).
    pub kept: usize,
}

impl TreeWrite {
    /// Whether the checkpoint copied no record out of a segment being
    /// cleaned and rebased no leaf: nothing in memory needs re-pointing.
    pub fn is_relocation_free(&self) -> bool {
        self.pages.is_empty() && self.blobs.is_empty() && self.rebased.is_empty()
    }
}

/// Writes the nodes of the tree under `root` not yet durably written, as
/// checkpoint `generation`. Records in segments before `floor` are cleaned
/// away: every durable subtree whose oldest record lies before it is
/// rewritten (read back where it is not in memory), so that once this
/// checkpoint is durable nothing it references lies before `floor`, and
/// those segments can be deleted (`floor` 0 cleans nothing).
///
/// `keep` (empty, or one entry per child of an internal root) makes a
/// *sliced* checkpoint: a changed child `i` with `keep[i]` = an older
/// durable page of the same key range is not written, and not cleaned
/// either (a slice leaves what later slices rewrite to them: forcing
/// cleaning there made every slice a whole tree again);
/// the root written refers to that page instead. The tree written then
/// holds, in that range, the content of the older page: recovery must
/// replay the commits since it (see `CheckpointRecord::replay_from`). The
/// root is then not marked as written: its page is not its content.
pub fn write_tree(
    pager: &Pager,
    root: &Arc<Node>,
    generation: u64,
    floor: u32,
    keep: &[Option<DiskRef>],
    sink: &mut dyn PageSink,
    stats: &mut WriteStats,
) -> Result<TreeWrite, Error> {
    let durable = pager.durable_generations();
    let valid = |g: u64| durable.holds(g) || g == generation;
    let mut w = TreeWriter {
        pager,
        generation,
        durable: durable.clone(),
        floor,
        valid: &valid,
        sink,
        stats,
        out: TreeWrite::default(),
        twin_bytes: 0,
        keep,
    };
    let r = w.write_node(root, true)?;
    debug_assert!(w.out.kept > 0 || r.oldest >= floor.min(r.page.addr.segment));
    w.out.root = Some(r);
    Ok(w.out)
}

struct TreeWriter<'a> {
    pager: &'a Pager,
    generation: u64,
    durable: Durable,
    floor: u32,
    valid: &'a dyn Fn(u64) -> bool,
    sink: &'a mut dyn PageSink,
    stats: &'a mut WriteStats,
    out: TreeWrite,
    /// Memory of the consolidated twins built so far, which will be
    /// resident once the checkpoint is durable: bounded by the room the
    /// budget has for resident nodes.
    twin_bytes: u64,
    keep: &'a [Option<DiskRef>],
}

impl TreeWriter<'_> {
    fn write_node(&mut self, node: &Arc<Node>, is_root: bool) -> Result<DiskRef, Error> {
        let relocating = match node.written.get(self.valid) {
            Some(r) if r.oldest >= self.floor => return Ok(r),
            Some(old) => Some(old),
            None => None,
        };
        let r = match node.body() {
            Body::Leaf { base, delta } => self.write_leaf(node, base, delta, relocating)?,
            Body::Internal { base, .. } => self.write_internal(node, base, is_root)?,
        };
        if relocating.is_some() {
            self.stats.relocated += 1;
            self.stats.relocated_bytes += u64::from(r.page.len);
        }
        if is_root && self.out.kept > 0 {
            // Not this node's content: some children are older pages.
            self.stats.pages += 1;
            return Ok(r);
        }
        node.written.set(r, self.generation, &self.durable);
        self.stats.pages += 1;
        Ok(r)
    }

    /// Writes a leaf's live entries (base and delta merged, big values as
    /// blobs first) as one page.
    fn write_leaf(
        &mut self,
        node: &Node,
        base_ref: &LeafBase,
        delta: &Option<LeafData>,
        relocating: Option<DiskRef>,
    ) -> Result<DiskRef, Error> {
        if let (LeafBase::Page(base), Some(delta)) = (base_ref, delta) {
            if base.oldest >= self.floor {
                return self.write_delta(node, *base, delta);
            }
        }
        let base = self.pager.base(base_ref)?;
        let mut entries: Vec<LiveEntry<'_>> = Vec::with_capacity(base.len());
        let mut merged = Vec::new();
        let live: &mut dyn Iterator<Item = (&[u8], Entry<'_>)> = match delta {
            None => &mut base.iter(),
            Some(d) => {
                merge_into(&mut merged, base.iter(), d.iter(), true);
                &mut merged.into_iter()
            }
        };
        let mut blobs = Vec::new();
        let mut subtree = 0u64;
        let mut oldest = u32::MAX;
        let mut earliest = NO_DEADLINE;
        for (k, e) in live {
            let Entry::Value(v, deadline) = e else {
                unreachable!("tombstone survived merge")
            };
            earliest = earlier(earliest, deadline);
            if let ValueRef::Big(b) = v {
                let blob = self.write_blob(b)?;
                subtree += u64::from(blob.len);
                oldest = oldest.min(blob.addr.segment);
                blobs.push(blob);
            }
            entries.push((k, v, deadline));
        }
        assert!(!entries.is_empty(), "writing an empty leaf");
        let mut blob_refs = blobs.into_iter();
        let page = self.write(RecordType::Page, &mut |out| {
            encode_leaf(out, &entries, |_| {
                blob_refs.next().expect("one blob ref per big value")
            })
        })?;
        let r = DiskRef {
            page,
            subtree: subtree + u64::from(page.len),
            oldest: oldest.min(page.addr.segment),
            earliest,
        };
        if delta.is_some() {
            self.consolidate(node, &entries, r);
        }
        if let LeafBase::Page(old) = base_ref {
            self.out
                .rebased
                .insert(old.page.addr.as_u64(), (r, delta.clone()));
        }
        if let Some(old) = relocating {
            self.out
                .rebased
                .insert(old.page.addr.as_u64(), (r, delta.clone()));
        }
        Ok(r)
    }

    /// Writes a leaf whose base is a page as a delta page: its changes over
    /// that page, which stays as it is. The base is not read: after random
    /// updates to a tree larger than memory, reading each changed leaf's
    /// base back to write it whole was most of a checkpoint's work, and its
    /// whole page most of the bytes it wrote. The delta grows with each
    /// change until the leaf is rebuilt (`TreeConfig::delta_max`), and a
    /// base in a segment being cleaned makes the leaf written whole.
    fn write_delta(
        &mut self,
        node: &Node,
        base: DiskRef,
        delta: &LeafData,
    ) -> Result<DiskRef, Error> {
        let changes: Vec<(&[u8], Entry<'_>)> = delta.iter().collect();
        let mut blobs = Vec::new();
        let mut subtree = base.subtree;
        let mut oldest = base.oldest;
        // The base's figure counts values this delta may have replaced or
        // deleted: an earlier figure than the leaf's own, which is allowed
        // (see `DiskRef`) and corrected when the leaf is next written whole.
        let mut earliest = base.earliest;
        for (_, e) in &changes {
            earliest = earlier(earliest, e.deadline());
            if let Entry::Value(ValueRef::Big(b), _) = e {
                let blob = self.write_blob(b)?;
                subtree += u64::from(blob.len);
                oldest = oldest.min(blob.addr.segment);
                blobs.push(blob);
            }
        }
        let size = node.size();
        let mut blob_refs = blobs.into_iter();
        let page = self.write(RecordType::Delta, &mut |out| {
            encode_delta(out, base, size, &changes, |_| {
                blob_refs.next().expect("one blob ref per big value")
            })
        })?;
        self.stats.deltas += 1;
        Ok(DiskRef {
            page,
            subtree: subtree + u64::from(page.len),
            oldest: oldest.min(page.addr.segment),
            earliest,
        })
    }

    /// Writes an internal node after its children: those in memory first
    /// (or, at the root of a slice, the stand-ins it keeps), and durable
    /// subtrees only when they hold records of a segment being cleaned.
    fn write_internal(
        &mut self,
        node: &Node,
        base: &InternalData,
        is_root: bool,
    ) -> Result<DiskRef, Error> {
        let n = base.children_len();
        // What the loop below will read from storage, asked for first so the
        // device reads it side by side: the bases of changed leaves that
        // name a page, and durable subtrees being copied out of old segments.
        for i in 0..n {
            match node.child_ref(i) {
                cref @ ChildRef::Mem(child, _) if child.written.get(self.valid).is_none() => {
                    self.pager.prefetch_child(cref)
                }
                ChildRef::Disk(d) if d.oldest < self.floor => self.pager.prefetch(d.page),
                _ => {}
            }
        }
        let mut children = Vec::with_capacity(n);
        for i in 0..n {
            let cref = node.child_ref(i);
            let stand_in = match self.keep.get(i) {
                Some(Some(d)) if is_root => Some(*d),
                _ => None,
            };
            let child = match cref {
                ChildRef::Mem(child, _) => match stand_in {
                    Some(d) if child.written.get(self.valid).is_none() => {
                        self.out.kept += 1;
                        d
                    }
                    _ => self.write_node(child, false)?,
                },
                ChildRef::Disk(d) if d.oldest >= self.floor => *d,
                ChildRef::Disk(d) => {
                    // A durable subtree holding records of a segment
                    // being cleaned: copy what of it is old.
                    let child = self.pager.load_to_copy(*d, node.level() - 1)?;
                    let moved = self.write_node(&child, false)?;
                    self.out.pages.insert(d.page.addr.as_u64(), moved);
                    moved
                }
            };
            children.push(child);
        }
        if is_root {
            self.out.root_children = children.clone();
        }
        let seps: Vec<&[u8]> = (0..base.seps_len()).map(|i| base.sep(i)).collect();
        let level = node.level();
        let page = self.write(RecordType::Page, &mut |out| {
            encode_internal(out, level, &children, &seps)
        })?;
        let below: u64 = children.iter().map(|c| c.subtree).sum();
        let oldest = children.iter().map(|c| c.oldest).min().unwrap_or(u32::MAX);
        let earliest = children
            .iter()
            .fold(NO_DEADLINE, |e, c| earlier(e, c.earliest));
        Ok(DiskRef {
            page,
            subtree: below + u64::from(page.len),
            oldest: oldest.min(page.addr.segment),
            earliest,
        })
    }

    /// Gives a leaf with a delta, just written as page `r`, a consolidated
    /// twin (one plain leaf, the entries as the page holds them) to replace
    /// it once this checkpoint is durable. After random updates nearly every
    /// leaf carries a delta; reads then search two runs, and scans merge
    /// them, at heap addresses scattered by the updates. The twins are built
    /// here, on the checkpointer's thread and in key order, so that the
    /// commit path only swaps pointers. Leaves holding out-of-line values
    /// are left alone (rare; `cacheable` handles their memory).
    fn consolidate(&mut self, node: &Node, entries: &[LiveEntry<'_>], r: DiskRef) {
        if let Some(twin) = node.consolidated() {
            // Built by an earlier attempt whose checkpoint failed: same
            // content, now at this checkpoint's page.
            twin.written.set(r, self.generation, &self.durable);
            return;
        }
        if entries
            .iter()
            .any(|(_, v, _)| matches!(v, ValueRef::Big(_)))
        {
            return;
        }
        let bytes = entries
            .iter()
            .map(|&(k, v, d)| k.len() + entry_len(Entry::Value(v, d)))
            .sum();
        // Twins are kept only within the memory budget: at 10M pairs and a
        // 64 MiB cache, twins for every changed leaf were a second copy of
        // the whole tree. A leaf without one goes to the page cache.
        let cost =
            (std::mem::size_of::<Node>() + LeafData::mem_estimate(entries.len(), bytes)) as u64;
        if self.twin_bytes + cost > self.pager.resident_room() {
            return;
        }
        self.twin_bytes += cost;
        let mut leaf = LeafData::with_capacity(entries.len(), bytes);
        for &(k, v, d) in entries {
            leaf.push(k, Entry::Value(v, d));
        }
        let twin = Node::leaf(leaf);
        twin.written.set(r, self.generation, &self.durable);
        node.set_consolidated(Arc::new(twin));
    }

    fn write_blob(&mut self, big: &BigValue) -> Result<PageRef, Error> {
        let old = big.written.get(self.valid);
        if let Some(r) = old {
            if r.addr.segment >= self.floor {
                return Ok(r);
            }
        }
        let read;
        let bytes = match big.bytes.as_deref() {
            Some(b) => b,
            None => {
                // Known only by its blob, which lies in a segment being
                // cleaned: copy it.
                read = self.pager.read_big(big)?;
                &read
            }
        };
        let r = self.write(RecordType::Blob, &mut |out| out.extend_from_slice(bytes))?;
        if let Some(o) = old {
            self.out.blobs.insert(o.addr.as_u64(), r);
            self.stats.relocated += 1;
            self.stats.relocated_bytes += u64::from(r.len);
        }
        big.written.set(r, self.generation, &self.durable);
        self.stats.blobs += 1;
        Ok(r)
    }

    fn write(
        &mut self,
        ty: RecordType,
        body: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<PageRef, Error> {
        let r = self.sink.write_record(ty, body)?;
        self.stats.bytes += u64::from(r.len);
        Ok(r)
    }
}

/// After a checkpoint is durable (and [`Pager::set_durable_generation`]
/// says so): decides, for every node of `root`'s tree that is now durably on
/// disk and still pointed to from memory, where it lives from now on. While
/// the memory budget allows, it stays *resident*: in memory, in the tree,
/// reached by pointer without a cache lookup (counted by the pager). Past the
/// budget the pointer becomes a page reference and the node goes to the page
/// cache, which evicts by weight. Changed leaves whose base is a page the
/// checkpoint rewrote or the cleaner moved are moved onto the new page (see
/// `TreeWrite::rebased`), so that nothing in the current version reads a
/// page whose segment may now be deleted. Returns a root equal in content
/// to `root` with those pointers replaced (copying only the internal nodes
/// on their paths), or `None` when nothing changed.
pub fn release_written(pager: &Pager, root: &Arc<Node>, moved: &TreeWrite) -> Option<Arc<Node>> {
    if !moved.blobs.is_empty() {
        repoint_blobs(pager, root, &moved.blobs);
    }
    let released = if root.is_leaf() {
        release_leaf_root(pager, root, moved)
    } else {
        if pager.durable_page(root).is_some() {
            root.mark_clean();
        }
        release_children(pager, root, moved)
    };
    pager.rebalance();
    released
}

/// [`release_written`] for a root that is a leaf: the root is held by
/// pointer, never by page, so a leaf root whose base is a page is replaced
/// by its twin, or by its page read back, once durable.
fn release_leaf_root(pager: &Pager, root: &Arc<Node>, moved: &TreeWrite) -> Option<Arc<Node>> {
    let Some(page) = pager.durable_page(root) else {
        return rebase(pager, root, moved);
    };
    root.mark_clean();
    let (base, _) = root.leaf_parts().expect("a leaf");
    if let Some(twin) = root.consolidated() {
        return Some(twin.clone());
    }
    if matches!(base, LeafBase::Mem(_)) {
        return None;
    }
    // Read from the page just made durable; should that fail, the root
    // keeps the base it has (still readable: its segment is retired, and
    // deleted only after this version's epoch is gone).
    pager.load(page, 0).ok()
}

/// A copy of changed leaf `node` over the page that now holds its base's
/// content, if its base is a page the checkpoint rewrote or moved. The
/// entries of its delta that the new page already holds (the written
/// leaf's delta had them too) are left out, so deltas do not grow from one
/// checkpoint to the next.
fn rebase(pager: &Pager, node: &Node, moved: &TreeWrite) -> Option<Arc<Node>> {
    let (LeafBase::Page(old), Some(delta)) = node.leaf_parts()? else {
        return None;
    };
    let addr = old.page.addr.as_u64();
    let (new, written_delta) = match moved.rebased.get(&addr) {
        Some((new, d)) => (*new, d.as_ref()),
        None => (*moved.pages.get(&addr)?, None),
    };
    let delta = match written_delta {
        Some(w) => delta.without_entries_of(w),
        None => Some(delta.clone()),
    };
    let node = match delta {
        Some(d) => Node::leaf_with_delta(LeafBase::Page(new), Some(d), node.size()),
        // Nothing newer than the page: the leaf is the page itself.
        None => return pager.load(new, 0).ok(),
    };
    node.mark_dirty(pager.dirty_counter());
    Some(Arc::new(node))
}

/// Points the out-of-line values of leaf `node` that the cleaner copied at
/// their copies. Values are shared between versions and their marks are
/// the one mutable part, so this serves every version holding them; the
/// copies are durable, the old records soon deleted. (A base that is only
/// a page holds its values through that page; the leaf is rebased.)
fn repoint_blobs(pager: &Pager, node: &Node, blobs: &HashMap<u64, PageRef>) {
    let Body::Leaf { base, delta } = node.body() else {
        return;
    };
    let durable = pager.durable_generations();
    let base = base.mem().into_iter().flat_map(|b| b.iter());
    for (_, e) in base.chain(delta.iter().flat_map(|d| d.iter())) {
        if let Entry::Value(ValueRef::Big(b), _) = e {
            let at = b.written.get(|g| durable.holds(g));
            if let Some(new) = at.and_then(|r| blobs.get(&r.addr.as_u64())) {
                // Marked as the newest durable generation, which it is part of.
                b.written.set(*new, durable.newest(), &durable);
            }
        }
    }
}

fn release_children(pager: &Pager, root: &Arc<Node>, moved: &TreeWrite) -> Option<Arc<Node>> {
    let Body::Internal { base, .. } = root.body() else {
        return None;
    };
    let n = base.children_len();
    let mut children: Option<Vec<ChildRef>> = None;
    for i in 0..n {
        let child = match root.child_ref(i) {
            ChildRef::Mem(child, _) => child,
            ChildRef::Disk(d) => {
                // A page the cleaner copied: from now on, read the copy.
                if let Some(new) = moved.pages.get(&d.page.addr.as_u64()) {
                    children.get_or_insert_with(|| {
                        (0..n).map(|j| root.child_ref(j).clone()).collect()
                    })[i] = ChildRef::Disk(*new);
                }
                continue;
            }
        };
        if !moved.blobs.is_empty() {
            repoint_blobs(pager, child, &moved.blobs);
        }
        let replacement = match pager.durable_page(child) {
            // Written: stays in memory while the budget allows, reached
            // without a cache lookup; otherwise it goes to the cache. A leaf
            // with a delta gives way to its consolidated twin, if it has one
            // (same content, same page; see `TreeWriter::consolidate`). A
            // leaf whose base is only a page never stays: that page may be
            // deleted now.
            Some(page) => {
                child.mark_clean();
                let released = match child.consolidated() {
                    Some(twin) => Some(twin.clone()),
                    None => release_children(pager, child, moved),
                };
                let node = released.as_ref().unwrap_or(child);
                let holds_base = node
                    .leaf_parts()
                    .is_none_or(|(b, _)| matches!(b, LeafBase::Mem(_)));
                if holds_base && pager.try_make_resident(node) {
                    match released {
                        Some(c) => ChildRef::in_memory(c),
                        None => continue,
                    }
                } else {
                    if holds_base {
                        pager.insert_clean(page, cacheable(pager, node.clone(), page));
                    }
                    ChildRef::Disk(page)
                }
            }
            None => match release_children(pager, child, moved)
                .or_else(|| rebase(pager, child, moved))
            {
                Some(c) => ChildRef::in_memory(c),
                None => continue,
            },
        };
        children.get_or_insert_with(|| (0..n).map(|j| root.child_ref(j).clone()).collect())[i] =
            replacement;
    }
    Some(Arc::new(root.with_children(children?)))
}

/// The form of a durably written node worth keeping in the cache. A leaf
/// holding out-of-line values in memory is rebuilt to refer to their blobs
/// instead (values can be large); anything else is kept as it is, since a
/// node with an overlay reads the same as its page.
pub(crate) fn cacheable(pager: &Pager, node: Arc<Node>, page: DiskRef) -> Arc<Node> {
    let Body::Leaf {
        base: LeafBase::Mem(base),
        delta,
    } = node.body()
    else {
        return node;
    };
    let holds_values = |d: &LeafData| {
        d.iter()
            .any(|(_, e)| matches!(e, Entry::Value(ValueRef::Big(b), _) if b.bytes.is_some()))
    };
    if !holds_values(base) && !delta.as_ref().is_some_and(holds_values) {
        return node;
    }
    let durable = pager.durable_generations();
    let mut merged = Vec::new();
    match delta {
        Some(d) => merge_into(&mut merged, base.iter(), d.iter(), true),
        None => merged.extend(base.iter()),
    }
    let mut leaf = LeafData::with_capacity(merged.len(), base.size());
    for (k, e) in merged {
        match e {
            Entry::Value(ValueRef::Big(b), d) => {
                let blob = b
                    .written
                    .get(|g| durable.holds(g))
                    .expect("durable leaf with an unwritten blob");
                leaf.push(k, Entry::Value(ValueRef::Big(&BigValue::on_disk(blob)), d));
            }
            e => leaf.push(k, e),
        }
    }
    leaf.shrink();
    let out = Node::leaf(leaf);
    out.written.set_read(page);
    Arc::new(out)
}

/// For planning a sliced checkpoint: each child of internal node `root`,
/// with the separator its key range starts at (`None` for the first) and
/// its page if it is durably written as it is (`None`: changed since).
pub fn root_children(pager: &Pager, root: &Node) -> Vec<(Option<Vec<u8>>, Option<DiskRef>)> {
    let Body::Internal { base, .. } = root.body() else {
        return Vec::new();
    };
    (0..base.children_len())
        .map(|i| {
            let low = (i > 0).then(|| base.sep(i - 1).to_vec());
            let page = match root.child_ref(i) {
                ChildRef::Disk(d) => Some(*d),
                ChildRef::Mem(child, _) => pager.durable_page(child),
            };
            (low, page)
        })
        .collect()
}
