//! Reading the tree: point lookups and cursors.
//!
//! A point lookup follows separators from the root to one leaf and answers
//! from that leaf; by the B+tree's own definition that is the answer, so it
//! needs no further checks beyond the ones every page passed when decoded. A
//! cursor walks leaves in order and checks that order holds across leaves,
//! so a damaged tree can never make a scan return keys out of order.

use crate::leaf::{merge_into, Entry, LeafData, ValueRef};
use crate::node::{Body, ChildRef, Node};
use crate::pager::Pager;
use kivi_log::{Corruption, Error};
use std::sync::Arc;

/// The value stored under `key`, read into `out`; `Ok(false)` if absent.
pub fn get_into(
    pager: &Pager,
    root: &Arc<Node>,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, Error> {
    get_in(pager, root, key, out)
}

/// One level of a lookup. In-memory children are borrowed from their parent
/// (no reference count is touched on the way down); only children fetched
/// from the page cache are held by an `Arc` of their own.
fn get_in(pager: &Pager, node: &Node, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Error> {
    match node.body() {
        Body::Internal { base, .. } => {
            let i = base.child_index(key);
            match node.child_ref(i) {
                ChildRef::Mem(child) => get_in(pager, child, key, out),
                ChildRef::Disk(at) => {
                    let child = pager.load(*at, node.level() - 1)?;
                    get_in(pager, &child, key, out)
                }
            }
        }
        Body::Leaf { base, delta } => {
            if let Some(d) = delta {
                if let Ok(i) = d.find(key) {
                    return copy_entry(pager, d.entry(i), out);
                }
            }
            match base.find(key) {
                Ok(i) => copy_entry(pager, base.entry(i), out),
                Err(_) => Ok(false),
            }
        }
    }
}

fn copy_entry(pager: &Pager, e: Entry<'_>, out: &mut Vec<u8>) -> Result<bool, Error> {
    out.clear();
    match e {
        Entry::Tombstone => Ok(false),
        Entry::Value(ValueRef::Inline(v)) => {
            out.extend_from_slice(v);
            Ok(true)
        }
        Entry::Value(ValueRef::Big(b)) => {
            *out = pager.read_big(b)?;
            Ok(true)
        }
    }
}

/// The entries of a leaf node with its delta applied (tombstones removed).
/// Shares the base when there is no delta.
pub fn leaf_entries(node: &Node) -> LeafData {
    match node.body() {
        Body::Leaf { base, delta: None } => base.clone(),
        Body::Leaf {
            base,
            delta: Some(d),
        } => {
            let mut merged = Vec::with_capacity(base.len() + d.len());
            merge_into(&mut merged, base.iter(), d.iter(), true);
            let mut out = LeafData::with_capacity(merged.len(), base.size() + d.size());
            for (k, e) in merged {
                out.push(k, e);
            }
            out
        }
        Body::Internal { .. } => panic!("leaf_entries on an internal node"),
    }
}

/// A position in the tree, moving forward or backward over its entries.
///
/// Holds the path from the root (so it reads a consistent version however
/// the tree changes meanwhile) and the current leaf's entries.
pub struct Cursor {
    root: Option<Arc<Node>>,
    /// Internal nodes from the root down, each with the child index taken.
    stack: Vec<(Arc<Node>, usize)>,
    leaf: LeafData,
    /// Index into `leaf`; valid when `valid`.
    pos: usize,
    valid: bool,
    /// Key at the edge of the previous leaf visited, to check order across leaves.
    edge: Option<Vec<u8>>,
    forward: bool,
}

impl Cursor {
    pub fn new(root: Option<Arc<Node>>) -> Self {
        Cursor {
            root,
            stack: Vec::new(),
            leaf: LeafData::default(),
            pos: 0,
            valid: false,
            edge: None,
            forward: true,
        }
    }

    pub fn is_valid(&self) -> bool {
        self.valid
    }

    pub fn key(&self) -> &[u8] {
        assert!(self.valid, "cursor not on an entry");
        self.leaf.key(self.pos)
    }

    pub fn value(&self) -> ValueRef<'_> {
        assert!(self.valid, "cursor not on an entry");
        match self.leaf.entry(self.pos) {
            Entry::Value(v) => v,
            Entry::Tombstone => unreachable!("tombstone in merged leaf"),
        }
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
        self.leaf = leaf_entries(&node);
        Ok(())
    }

    fn reset(&mut self, forward: bool) -> Option<Arc<Node>> {
        self.stack.clear();
        self.valid = false;
        self.edge = None;
        self.forward = forward;
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
                self.pos = match self.leaf.find(k) {
                    Ok(i) | Err(i) => i,
                };
            }
            None => {
                self.descend(pager, root, &|_| 0)?;
                self.pos = 0;
            }
        }
        if self.pos < self.leaf.len() {
            self.valid = true;
            return Ok(());
        }
        self.next_leaf(pager)
    }

    /// Positions on the last entry with key < `key` (or the last entry).
    pub fn seek_backward(&mut self, pager: &Pager, key: Option<&[u8]>) -> Result<(), Error> {
        let Some(root) = self.reset(false) else {
            return Ok(());
        };
        let below = match key {
            Some(k) => {
                self.descend(pager, root, &|n: &Node| n.internal_base().child_index(k))?;
                match self.leaf.find(k) {
                    Ok(i) | Err(i) => i,
                }
            }
            None => {
                self.descend(pager, root, &|n: &Node| n.children_len() - 1)?;
                self.leaf.len()
            }
        };
        if below > 0 {
            self.pos = below - 1;
            self.valid = true;
            return Ok(());
        }
        self.prev_leaf(pager)
    }

    /// Moves to the next entry (forward cursors).
    pub fn next(&mut self, pager: &Pager) -> Result<(), Error> {
        debug_assert!(self.forward);
        if !self.valid {
            return Ok(());
        }
        self.pos += 1;
        if self.pos < self.leaf.len() {
            return Ok(());
        }
        self.next_leaf(pager)
    }

    /// Moves to the previous entry (backward cursors).
    pub fn prev(&mut self, pager: &Pager) -> Result<(), Error> {
        debug_assert!(!self.forward);
        if !self.valid {
            return Ok(());
        }
        if self.pos > 0 {
            self.pos -= 1;
            return Ok(());
        }
        self.prev_leaf(pager)
    }

    fn next_leaf(&mut self, pager: &Pager) -> Result<(), Error> {
        loop {
            if let Some(last) = self.leaf.last_key() {
                self.edge = Some(last.to_vec());
            }
            self.valid = false;
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
            if let (Some(edge), Some(first)) = (&self.edge, self.leaf.first_key()) {
                if first <= edge.as_slice() {
                    return Err(order_error(first));
                }
            }
            if !self.leaf.is_empty() {
                self.pos = 0;
                self.valid = true;
                return Ok(());
            }
        }
    }

    fn prev_leaf(&mut self, pager: &Pager) -> Result<(), Error> {
        loop {
            if let Some(first) = self.leaf.first_key() {
                self.edge = Some(first.to_vec());
            }
            self.valid = false;
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
            if let (Some(edge), Some(last)) = (&self.edge, self.leaf.last_key()) {
                if last >= edge.as_slice() {
                    return Err(order_error(last));
                }
            }
            if !self.leaf.is_empty() {
                self.pos = self.leaf.len() - 1;
                self.valid = true;
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
