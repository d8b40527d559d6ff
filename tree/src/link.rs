//! Linking the nodes the page cache holds into the tree that names them.
//!
//! A tree read back from storage (an open's, a follower's after each of the
//! writer's checkpoints) holds its root and names every other node by page,
//! so every lookup finds each level's node through the page cache: a hash
//! lookup per level, a quarter of a follower's random-read time, where the
//! writer's lookups step from node to node by pointer (the nodes its own
//! checkpoints wrote stay in its tree, `checkpoint::release_written`).
//! [`link_cached`] makes a copy of such a tree in which every node the
//! cache holds is reached by pointer instead, kept in memory as the
//! writer's are (*resident*, within the same budget). It reads nothing from
//! storage: only what reads already brought in is linked, so linking costs
//! one cache probe per child of each internal node it walks.
//!
//! Linked nodes are no longer looked up in the cache, which may then evict
//! them; so that a follower moving onto the writer's next checkpoint does
//! not start over, the tree it leaves lends its linked nodes: a page is
//! immutable, so a node linked under the same page is the same node.

use crate::node::DiskRef;
use crate::node::{Body, ChildRef, LeafBase, Node};
use crate::pager::Pager;
use crate::read::leaf_entries;
use std::collections::HashMap;
use std::sync::Arc;

/// A tree equal in content to `root`'s in which each child named by page
/// whose node the page cache holds, or `earlier`'s tree holds linked (an
/// internal node, or a leaf holding its entries), is linked by pointer and
/// counted as resident, while the resident budget allows (copying only the
/// internal nodes on their paths); `None` when there was nothing to link.
pub fn link_cached(pager: &Pager, root: &Arc<Node>, earlier: Option<&Node>) -> Option<Arc<Node>> {
    let mut known = HashMap::new();
    if let Some(e) = earlier {
        linked_nodes(pager, e, &mut known);
    }
    let linked = link(pager, root, &known)?;
    pager.rebalance();
    Some(linked)
}

/// The written nodes under `node` reached by pointer and kept resident, by
/// page address.
fn linked_nodes(pager: &Pager, node: &Node, into: &mut HashMap<u64, Arc<Node>>) {
    let Body::Internal { base, .. } = node.body() else {
        return;
    };
    for i in 0..base.children_len() {
        if let ChildRef::Mem(child, _) = node.child_ref(i) {
            if child.is_resident() {
                if let Some(page) = pager.durable_page(child) {
                    into.insert(page.page.addr.as_u64(), child.clone());
                }
            }
            linked_nodes(pager, child, into);
        }
    }
}

/// [`link_cached`] for the subtree under `node`: its copy with its
/// children linked, or `None` if none was (or it is a leaf).
fn link(pager: &Pager, node: &Node, known: &HashMap<u64, Arc<Node>>) -> Option<Arc<Node>> {
    let Body::Internal { base, .. } = node.body() else {
        return None;
    };
    let n = base.children_len();
    let mut children: Option<Vec<ChildRef>> = None;
    for i in 0..n {
        let replacement = match node.child_ref(i) {
            ChildRef::Mem(child, _) => match link(pager, child, known) {
                Some(copy) => copy,
                None => continue,
            },
            ChildRef::Disk(at) => {
                let found = known.get(&at.page.addr.as_u64()).cloned();
                let Some(child) = found.or_else(|| pager.cached(*at)) else {
                    continue;
                };

                if child.level() + 1 != node.level() {
                    continue; // a lookup that reaches it reports it as before
                }
                let linked = match child.leaf_parts() {
                    None => link(pager, &child, known).unwrap_or(child),
                    Some((LeafBase::Mem(_), None)) => child,
                    Some((LeafBase::Page(base), Some(_))) => {
                        match consolidated(pager, &child, *base) {
                            Some(twin) => twin,
                            None => continue,
                        }
                    }
                    Some(_) => continue,
                };
                if !pager.try_make_resident(&linked) {
                    continue; // the budget is spent: the cache keeps it
                }
                linked
            }
        };
        children.get_or_insert_with(|| (0..n).map(|j| node.child_ref(j).clone()).collect())[i] =
            ChildRef::in_memory(replacement);
    }
    // Same content: the same page, if `node` was written; if it was not
    // (a follower's or a writer's change made it), as unwritten as it.
    let copy = node.with_children(children?);
    if pager.durable_page(node).is_some() {
        if node.is_resident() {
            pager.try_make_resident(&copy);
        }
    } else {
        copy.mark_dirty(pager.dirty_counter());
    }
    Some(Arc::new(copy))
}

/// A leaf read from a delta page (its base named by page, its changes in
/// memory) as one leaf holding its entries, the way the writer's
/// checkpoint makes a twin of each leaf it writes as a delta: linked, it
/// answers a lookup without the cache lookup of its base. Only when the
/// cache holds that base (nothing is read from storage here).
fn consolidated(pager: &Pager, leaf: &Node, base: DiskRef) -> Option<Arc<Node>> {
    let cached = pager.cached(base)?;
    if !matches!(cached.leaf_parts(), Some((LeafBase::Mem(_), None))) {
        return None;
    }
    let entries = leaf_entries(pager, leaf).ok()?;
    let twin = Node::delta_twin(entries);
    // Same content, same page: the delta's.
    twin.written.copy_from(&leaf.written);
    Some(Arc::new(twin))
}
