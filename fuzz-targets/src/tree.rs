//! Tree pages and delta pages, as the pager reads them from page records:
//! the decoders validate everything a parent's reference and the page's
//! own bytes say before a node is built.

use crate::input::Input;
use kivi_log::{Addr, PageRef};
use kivi_tree::fuzzing::{decode_delta, decode_page, describe, reencode};
use kivi_tree::{DiskRef, Node};

/// The expected level and the reference `at` a page is read through, then
/// its body: `u8 level | u32 segment | u32 offset | u32 len | u64 subtree
/// | u32 oldest | u64 earliest`, little-endian.
fn split(data: &[u8]) -> (u8, DiskRef, &[u8]) {
    let mut input = Input(data);
    let level = input.u8();
    let page = PageRef {
        addr: Addr {
            segment: input.u32(),
            offset: input.u32(),
        },
        len: input.u32(),
    };
    let at = DiskRef {
        page,
        subtree: input.u64(),
        oldest: input.u32(),
        earliest: input.u64(),
    };
    (level, at, input.rest())
}

/// The prefix `split` reads: how a corpus input names the place it was
/// read from.
pub fn at_prefix(level: u8, at: DiskRef) -> Vec<u8> {
    let mut out = vec![level];
    out.extend_from_slice(&at.page.addr.segment.to_le_bytes());
    out.extend_from_slice(&at.page.addr.offset.to_le_bytes());
    out.extend_from_slice(&at.page.len.to_le_bytes());
    out.extend_from_slice(&at.subtree.to_le_bytes());
    out.extend_from_slice(&at.oldest.to_le_bytes());
    out.extend_from_slice(&at.earliest.to_le_bytes());
    out
}

/// A page that decodes, encoded again, decodes at the same place to the
/// same node.
fn round_trip(node: &Node, decode: impl Fn(&[u8]) -> Result<Node, String>) {
    let again = reencode(node);
    match decode(&again) {
        Ok(n) => assert_eq!(describe(&n), describe(node), "encoded again"),
        Err(e) => panic!("{} encoded again does not decode: {e}", describe(node)),
    }
}

/// A leaf or internal page body (a `Page` record's).
pub fn tree_page(data: &[u8]) {
    let (level, at, body) = split(data);
    if let Ok(node) = decode_page(body, at, level) {
        assert_eq!(node.level(), level);
        round_trip(&node, |b| decode_page(b, at, level));
    }
}

/// A delta page body (a `Delta` record's: a leaf's changes over its base).
pub fn tree_delta(data: &[u8]) {
    let (_, at, body) = split(data);
    if let Ok(node) = decode_delta(body, at) {
        assert!(node.is_leaf());
        round_trip(&node, |b| decode_delta(b, at));
    }
}
