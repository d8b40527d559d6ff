//! The page decoders, for the fuzz targets (`fuzz-targets/`), which feed
//! them bytes kivi did not write. Not part of the API: compiled only with
//! the `fuzzing` feature.
#![doc(hidden)]

use crate::leaf::{Entry, ValueRef};
use crate::node::{Body, DiskRef, LeafBase, Node};
use crate::page;
use kivi_log::PageRef;
use std::fmt::Write;

/// Decodes a page body found at `at` whose parent expects `level`.
pub fn decode_page(body: &[u8], at: DiskRef, level: u8) -> Result<Node, String> {
    page::decode_page(body, at, level)
}

/// Decodes a delta page body found at `at`.
pub fn decode_delta(body: &[u8], at: DiskRef) -> Result<Node, String> {
    page::decode_delta(body, at)
}

/// The page a delta page's changes lie over; `None` for other nodes.
pub fn delta_base(node: &Node) -> Option<DiskRef> {
    node.leaf_parts().and_then(|(base, _)| base.page())
}

/// A node just decoded, encoded again with the page encoders: decoding
/// this at the same place gives the same node (`describe` says so).
pub fn reencode(node: &Node) -> Vec<u8> {
    let mut out = Vec::new();
    let blob = |b: &crate::leaf::BigValue| -> PageRef {
        b.written
            .get(|_| true)
            .expect("a decoded blob has its record")
    };
    match node.body() {
        Body::Leaf {
            base: LeafBase::Mem(leaf),
            delta: None,
        } => {
            let entries: Vec<page::LiveEntry<'_>> = leaf
                .iter()
                .map(|(k, e)| match e {
                    Entry::Value(v, d) => (k, v, d),
                    Entry::Tombstone => unreachable!("a leaf page holds no tombstone"),
                })
                .collect();
            page::encode_leaf(&mut out, &entries, blob);
        }
        Body::Leaf {
            base: LeafBase::Page(base),
            delta: Some(delta),
        } => {
            let changes: Vec<_> = delta.iter().collect();
            page::encode_delta(&mut out, *base, node.size(), &changes, blob);
        }
        Body::Leaf { .. } => unreachable!("a decoded leaf is a page or a delta over one"),
        Body::Internal { base, .. } => {
            let children: Vec<DiskRef> = (0..base.children_len())
                .map(|i| base.child(i).page().expect("a decoded child is on disk"))
                .collect();
            let seps: Vec<&[u8]> = (0..base.seps_len()).map(|i| base.sep(i)).collect();
            page::encode_internal(&mut out, node.level(), &children, &seps);
        }
    }
    out
}

/// Everything a decoded node holds, as text: two nodes that read the same
/// describe the same.
pub fn describe(node: &Node) -> String {
    let mut s = format!("level {} size {}\n", node.level(), node.size());
    let value = |s: &mut String, v: ValueRef<'_>, d: u64| match v {
        ValueRef::Inline(v) => writeln!(s, "  inline {v:?} deadline {d}"),
        ValueRef::Big(b) => writeln!(s, "  blob {:?} deadline {d}", b.written.get(|_| true)),
    };
    let leaf = |s: &mut String, name: &str, leaf: &crate::leaf::LeafData| {
        for (k, e) in leaf.iter() {
            let _ = write!(s, "{name} {k:?}");
            let _ = match e {
                Entry::Value(v, d) => value(s, v, d),
                Entry::Tombstone => writeln!(s, "  tombstone"),
            };
        }
    };
    match node.body() {
        Body::Leaf { base, delta } => {
            match base {
                LeafBase::Mem(l) => leaf(&mut s, "entry", l),
                LeafBase::Page(p) => {
                    let _ = writeln!(s, "base {p:?}");
                }
            }
            if let Some(d) = delta {
                leaf(&mut s, "change", d);
            }
        }
        Body::Internal { base, .. } => {
            for i in 0..base.children_len() {
                let _ = writeln!(s, "child {:?}", base.child(i).page());
            }
            for i in 0..base.seps_len() {
                let _ = writeln!(s, "sep {:?}", base.sep(i));
            }
        }
    }
    s
}
