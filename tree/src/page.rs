//! Page encoding: how a node is laid out in a `Page` record, and the decoder
//! that turns untrusted bytes back into a node, validating everything first.
//!
//! Leaf page body:
//! ```text
//! u8 level (= 0, or 0x80: entries carry deadlines) | varint count | count × entry
//! entry = varint shared | varint suffix_len | suffix | varint (value_len << 1 | is_blob)
//!         | [varint deadline, 0 for none: only under 0x80]
//!         | value bytes (inline)  or  PageRef of the blob record (12 bytes)
//! ```
//! Internal page body:
//! ```text
//! u8 level (>= 1; | 0x80: children carry earliest deadlines) | varint children
//!   | children × (PageRef (12 bytes) | varint subtree bytes | varint oldest segment
//!                 | [varint earliest deadline in the subtree, 0 for none: only under 0x80])
//!   | (children - 1) × separator = varint shared | varint suffix_len | suffix
//! ```
//! A page without the 0x80 flag is written when nothing in it has a
//! deadline, so a store that never used deadlines writes format 4's pages.
//! Delta page body (a `Delta` record: a leaf's recent changes, written in
//! place of the whole leaf when its base is a page already on disk):
//! ```text
//! PageRef of the base (a leaf page) | varint base subtree bytes | varint base oldest segment
//!   | varint size (the leaf's estimated live size) | varint count | count × change
//! change = varint shared | varint suffix_len | suffix | varint (value_len << 2 | kind)
//!          | value bytes (kind 0, inline)  or  PageRef of the blob record (kind 1)
//!          (kind 2: a tombstone, no value;
//!           kind 3, value_len 0: a value with a deadline, as
//!           varint deadline | varint (value_len << 1 | is_blob) | value bytes or PageRef)
//! ```
//! A delta page's subtree is itself, its blobs and its base's subtree.
//!
//! Keys and separators are prefix-compressed against the previous one in the
//! page (`shared` bytes are taken from it). Child `i` holds keys in
//! `[separator i-1, separator i)`.
//!
//! The decoder checks, before anything is used: every length against what is
//! left; keys and separators strictly increasing and within the key limit;
//! inline values within the inline limit; blob, base and child references
//! pointing into the page's own segment or older ones, never into the page
//! itself; the expected level (a base is a leaf page, never a delta).

use crate::leaf::{earlier, BigValue, Entry, LeafData, ValueRef, INLINE_VALUE_MAX};
use crate::node::{ChildRef, DiskRef, InternalData, LeafBase, Node};
use kivi_log::codec::{put_varint, Reader};
use kivi_log::{Deadline, PageRef, MAX_KEY_LEN, MAX_VALUE_LEN, NO_DEADLINE, RECORD_HEADER_LEN};

/// Set on a page's level byte when its entries (a leaf) or children (an
/// internal page) carry deadlines.
const WITH_DEADLINES: u8 = 0x80;
use std::sync::Arc;

/// Deepest tree accepted: a root claiming more levels is corrupt. With at
/// least two children per internal node this is far beyond any real store.
pub const MAX_LEVEL: u8 = 40;

fn put_prefixed(out: &mut Vec<u8>, prev: &[u8], key: &[u8]) {
    let shared = prev.iter().zip(key).take_while(|(a, b)| a == b).count();
    put_varint(out, shared as u64);
    put_varint(out, (key.len() - shared) as u64);
    out.extend_from_slice(&key[shared..]);
}

/// A live entry as a leaf page holds it: key, value, deadline.
pub type LiveEntry<'a> = (&'a [u8], ValueRef<'a>, Deadline);

/// Encodes a leaf page body from live entries (no tombstones) in key order.
/// `blob_ref` gives the record of each out-of-line value.
pub fn encode_leaf<'a>(
    out: &mut Vec<u8>,
    entries: &[LiveEntry<'a>],
    mut blob_ref: impl FnMut(&BigValue) -> PageRef,
) {
    let deadlines = entries.iter().any(|e| e.2 != NO_DEADLINE);
    out.push(if deadlines { WITH_DEADLINES } else { 0 });
    put_varint(out, entries.len() as u64);
    let mut prev: &[u8] = &[];
    for &(key, value, deadline) in entries {
        put_prefixed(out, prev, key);
        put_value(out, value, deadlines.then_some(deadline), &mut blob_ref);
        prev = key;
    }
}

/// `varint (value_len << 1 | is_blob)`, the deadline if given, then the
/// value's bytes or its blob's reference.
fn put_value(
    out: &mut Vec<u8>,
    value: ValueRef<'_>,
    deadline: Option<Deadline>,
    blob_ref: &mut impl FnMut(&BigValue) -> PageRef,
) {
    let tag = match value {
        ValueRef::Inline(v) => (v.len() as u64) << 1,
        ValueRef::Big(b) => (u64::from(b.len) << 1) | 1,
    };
    put_varint(out, tag);
    if let Some(d) = deadline {
        put_varint(out, d);
    }
    match value {
        ValueRef::Inline(v) => out.extend_from_slice(v),
        ValueRef::Big(b) => blob_ref(b).encode(out),
    }
}

/// Encodes a delta page body: `changes` (puts and tombstones, in key order)
/// over the leaf page `base`, the leaf's live content being `size` bytes.
pub fn encode_delta<'a>(
    out: &mut Vec<u8>,
    base: DiskRef,
    size: usize,
    changes: &[(&'a [u8], Entry<'a>)],
    mut blob_ref: impl FnMut(&BigValue) -> PageRef,
) {
    assert!(!changes.is_empty(), "an empty delta");
    base.page.encode(out);
    put_varint(out, base.subtree);
    put_varint(out, u64::from(base.oldest));
    put_varint(out, size as u64);
    put_varint(out, changes.len() as u64);
    let mut prev: &[u8] = &[];
    for &(key, entry) in changes {
        put_prefixed(out, prev, key);
        match entry {
            Entry::Value(ValueRef::Inline(v), NO_DEADLINE) => {
                put_varint(out, (v.len() as u64) << 2);
                out.extend_from_slice(v);
            }
            Entry::Value(ValueRef::Big(b), NO_DEADLINE) => {
                put_varint(out, (u64::from(b.len) << 2) | 1);
                blob_ref(b).encode(out);
            }
            Entry::Value(v, deadline) => {
                put_varint(out, 3);
                put_varint(out, deadline);
                put_value(out, v, None, &mut blob_ref);
            }
            Entry::Tombstone => put_varint(out, 2),
        }
        prev = key;
    }
}

/// Encodes an internal page body.
pub fn encode_internal(out: &mut Vec<u8>, level: u8, children: &[DiskRef], seps: &[&[u8]]) {
    assert_eq!(children.len(), seps.len() + 1);
    assert!(level > 0 && level <= MAX_LEVEL);
    let deadlines = children.iter().any(|c| c.earliest != NO_DEADLINE);
    out.push(if deadlines {
        level | WITH_DEADLINES
    } else {
        level
    });
    put_varint(out, children.len() as u64);
    for c in children {
        c.page.encode(out);
        put_varint(out, c.subtree);
        put_varint(out, u64::from(c.oldest));
        if deadlines {
            put_varint(out, c.earliest);
        }
    }
    let mut prev: &[u8] = &[];
    for s in seps {
        put_prefixed(out, prev, s);
        prev = s;
    }
}

fn read_prefixed(r: &mut Reader<'_>, prev: &mut Vec<u8>) -> Result<(), &'static str> {
    let shared = r.varint().map_err(|e| e.what)?;
    if shared > prev.len() as u64 {
        return Err("key shares more bytes than the previous key has");
    }
    let suffix_len = r.len(MAX_KEY_LEN).map_err(|e| e.what)?;
    if shared as usize + suffix_len > MAX_KEY_LEN {
        return Err("key longer than the key limit");
    }
    let suffix = r.bytes(suffix_len).map_err(|e| e.what)?;
    prev.truncate(shared as usize);
    prev.extend_from_slice(suffix);
    Ok(())
}

/// Decodes and validates a page body found at `at`. `level` is the level the
/// parent expects (the checkpoint, for a root).
pub fn decode_page(body: &[u8], at: DiskRef, level: u8) -> Result<Node, String> {
    let mut r = Reader::new(body);
    let first = r.u8().map_err(|e| e.to_string())?;
    let (found, deadlines) = (first & !WITH_DEADLINES, first & WITH_DEADLINES != 0);
    if found != level {
        return Err(format!(
            "page is at level {found}, its parent expects level {level}"
        ));
    }
    // The oldest segment the records this page references lie in.
    let mut oldest = at.page.addr.segment;
    // The earliest deadline below, which the parent's figure must not be
    // later than (a later one would hide expired keys from reclaiming).
    let mut earliest = NO_DEADLINE;
    let node = if level == 0 {
        decode_leaf(&mut r, at.page, deadlines, &mut oldest, &mut earliest)
    } else {
        decode_internal(
            &mut r,
            at.page,
            level,
            deadlines,
            &mut oldest,
            &mut earliest,
        )
    };
    let node = node.map_err(|what| format!("{what} (byte {} of the page)", r.pos()))?;
    // Checked level by level as pages are read, this makes every recorded
    // `oldest` exact, which the cleaner's deletions rely on.
    if oldest != at.oldest {
        return Err(format!(
            "its parent records segment {} as the oldest of its subtree, its references say {oldest}",
            at.oldest
        ));
    }
    check_earliest(at, earliest)?;
    node.written.set_read(at);
    Ok(node)
}

/// A parent's figure for the earliest deadline under a child may be earlier
/// than the child's own (a delta page's figure counts its base's, which a
/// delta page does not record), never later.
fn check_earliest(at: DiskRef, found: Deadline) -> Result<(), String> {
    if earlier(at.earliest, found) != at.earliest {
        return Err(format!(
            "its parent records {} as the earliest deadline of its subtree, it holds {found}",
            at.earliest
        ));
    }
    Ok(())
}

/// A page references records of its own segment or older ones, never its
/// own. (Within a segment a parent may lie before its children: the page log
/// packs records into 4 KiB blocks, a parent into an earlier block's free
/// tail. References cannot loop all the same: each steps down a level, and
/// blobs reference nothing.)
fn check_ref_before(child: PageRef, at: PageRef) -> Result<(), &'static str> {
    if child.addr.segment > at.addr.segment {
        return Err("reference points to a newer segment");
    }
    let (c, p) = (u64::from(child.addr.offset), u64::from(at.addr.offset));
    if child.addr.segment == at.addr.segment
        && c < p + u64::from(at.len)
        && p < c + u64::from(child.len)
    {
        return Err("reference points into the page itself");
    }
    Ok(())
}

/// Decodes and validates a delta page body found at `at` (a leaf: level 0).
pub fn decode_delta(body: &[u8], at: DiskRef) -> Result<Node, String> {
    let mut r = Reader::new(body);
    let mut oldest = at.page.addr.segment;
    let mut subtree = u64::from(at.page.len);
    let mut earliest = NO_DEADLINE;
    let node = decode_delta_body(&mut r, at, &mut oldest, &mut subtree, &mut earliest)
        .map_err(|what| format!("{what} (byte {} of the delta page)", r.pos()))?;
    check_earliest(at, earliest)?;
    if oldest != at.oldest {
        return Err(format!(
            "its parent records segment {} as the oldest of its subtree, its references say {oldest}",
            at.oldest
        ));
    }
    if subtree != at.subtree {
        return Err(format!(
            "its parent records a subtree of {} bytes, the delta page and its base hold {subtree}",
            at.subtree
        ));
    }
    node.written.set_read(at);
    Ok(node)
}

fn decode_delta_body(
    r: &mut Reader<'_>,
    at_ref: DiskRef,
    oldest: &mut u32,
    subtree: &mut u64,
    earliest: &mut Deadline,
) -> Result<Node, &'static str> {
    let at = at_ref.page;
    let page = PageRef::decode(r).map_err(|e| e.what)?;
    check_ref_before(page, at)?;
    let base_subtree = r.varint().map_err(|e| e.what)?;
    if base_subtree < u64::from(page.len) {
        return Err("base subtree smaller than its own page");
    }
    let base_oldest = r.varint().map_err(|e| e.what)?;
    if base_oldest == 0 || base_oldest > u64::from(page.addr.segment) {
        return Err("oldest segment of the base after its own page's");
    }
    // A delta page does not record its base's earliest deadline; the
    // parent's figure for the delta page is no later than it, so it stands
    // in (a later rewrite over this base then carries it on).
    let base = DiskRef {
        page,
        subtree: base_subtree,
        oldest: base_oldest as u32,
        earliest: at_ref.earliest,
    };
    *oldest = (*oldest).min(base.oldest);
    *subtree = subtree
        .checked_add(base_subtree)
        .ok_or("subtree bytes overflow")?;
    let size = r.len(u32::MAX as usize).map_err(|e| e.what)?;
    // Each change takes at least 3 bytes; this bounds the allocation.
    let count = r.len(r.remaining() / 3).map_err(|e| e.what)?;
    if count == 0 {
        return Err("empty delta page");
    }
    let mut delta = LeafData::with_capacity(count, r.remaining());
    let mut key = Vec::with_capacity(64);
    let mut prev = Vec::with_capacity(64);
    for i in 0..count {
        read_prefixed(r, &mut key)?;
        if i > 0 && key <= prev {
            return Err("delta keys not strictly increasing");
        }
        let tag = r.varint().map_err(|e| e.what)?;
        let len = tag >> 2;
        // A value's tag as a leaf page writes it, and its deadline.
        let (value_tag, deadline) = match tag & 3 {
            0 => (Some(len << 1), NO_DEADLINE),
            1 => (Some((len << 1) | 1), NO_DEADLINE),
            2 if len == 0 => (None, NO_DEADLINE),
            3 if len == 0 => {
                let d = r.varint().map_err(|e| e.what)?;
                if d == NO_DEADLINE {
                    return Err("expiring change without a deadline");
                }
                (Some(r.varint().map_err(|e| e.what)?), d)
            }
            _ => return Err("unknown change kind"),
        };
        if let Some(value_tag) = value_tag {
            *earliest = earlier(*earliest, deadline);
            read_value(r, at, value_tag, oldest, &mut |v, big| {
                if let Some(blob) = big {
                    *subtree += u64::from(blob.len);
                }
                delta.push(&key, Entry::Value(v, deadline));
            })?;
        } else {
            delta.push(&key, Entry::Tombstone);
        }
        std::mem::swap(&mut key, &mut prev);
        key.clear();
        key.extend_from_slice(&prev);
    }
    r.expect_end().map_err(|e| e.what)?;
    delta.shrink();
    Ok(Node::leaf_with_delta(
        LeafBase::Page(base),
        Some(delta),
        size,
    ))
}

/// The reference to the blob of a value `len` bytes long, in the page at
/// `at`, checked; `oldest` takes in its segment.
fn read_blob_ref(
    r: &mut Reader<'_>,
    at: PageRef,
    len: u64,
    oldest: &mut u32,
) -> Result<PageRef, &'static str> {
    let blob = PageRef::decode(r).map_err(|e| e.what)?;
    check_ref_before(blob, at)?;
    *oldest = (*oldest).min(blob.addr.segment);
    let blob_len = u64::from(blob.len) - RECORD_HEADER_LEN as u64;
    if blob_len != len || len <= INLINE_VALUE_MAX as u64 || len > MAX_VALUE_LEN as u64 {
        return Err("blob reference with a wrong length");
    }
    Ok(blob)
}

/// Reads a value given its tag (`value_len << 1 | is_blob`) and hands it
/// to `push`, with its blob's reference if it has one.
fn read_value(
    r: &mut Reader<'_>,
    at: PageRef,
    tag: u64,
    oldest: &mut u32,
    push: &mut dyn FnMut(ValueRef<'_>, Option<PageRef>),
) -> Result<(), &'static str> {
    let len = tag >> 1;
    if tag & 1 == 0 {
        if len > INLINE_VALUE_MAX as u64 {
            return Err("inline value longer than the inline limit");
        }
        let v = r.bytes(len as usize).map_err(|e| e.what)?;
        push(ValueRef::Inline(v), None);
    } else {
        let blob = read_blob_ref(r, at, len, oldest)?;
        push(ValueRef::Big(&BigValue::on_disk(blob)), Some(blob));
    }
    Ok(())
}

fn decode_leaf(
    r: &mut Reader<'_>,
    at: PageRef,
    deadlines: bool,
    oldest: &mut u32,
    earliest: &mut Deadline,
) -> Result<Node, &'static str> {
    // Each entry takes at least 3 bytes; this bounds the allocation.
    let count = r.len(r.remaining() / 3).map_err(|e| e.what)?;
    if count == 0 {
        return Err("empty leaf page");
    }
    let mut leaf = LeafData::with_capacity(count, arena_bytes(r.rest(), count, deadlines));
    let mut key = Vec::with_capacity(64);
    let mut prev = Vec::with_capacity(64);
    for i in 0..count {
        read_prefixed(r, &mut key)?;
        if i > 0 && key <= prev {
            return Err("leaf keys not strictly increasing");
        }
        let tag = r.varint().map_err(|e| e.what)?;
        let deadline = if deadlines {
            r.varint().map_err(|e| e.what)?
        } else {
            NO_DEADLINE
        };
        *earliest = earlier(*earliest, deadline);
        read_value(r, at, tag, oldest, &mut |v, _| {
            leaf.push(&key, Entry::Value(v, deadline))
        })?;
        std::mem::swap(&mut key, &mut prev);
        key.clear();
        key.extend_from_slice(&prev);
    }
    r.expect_end().map_err(|e| e.what)?;
    leaf.shrink();
    Ok(Node::leaf(leaf))
}

/// Bytes of keys, inline values and deadlines the `count` entries in
/// `body` hold once their prefixes are expanded, so a leaf is built in an
/// exactly sized buffer. Stops early on malformed input; the decoder then
/// reports it.
fn arena_bytes(body: &[u8], count: usize, deadlines: bool) -> usize {
    let mut r = Reader::new(body);
    let mut total = 0usize;
    let mut prev_len = 0usize;
    for _ in 0..count {
        let (Ok(shared), Ok(suffix)) = (r.len(MAX_KEY_LEN), r.len(MAX_KEY_LEN)) else {
            break;
        };
        if r.bytes(suffix).is_err() || shared > prev_len {
            break;
        }
        prev_len = shared + suffix;
        let Ok(tag) = r.varint() else { break };
        if deadlines {
            match r.varint() {
                Ok(NO_DEADLINE) => {}
                Ok(_) => total += 8,
                Err(_) => break,
            }
        }
        let skip = if tag & 1 == 0 {
            (tag >> 1) as usize
        } else {
            PageRef::ENCODED_LEN
        };
        if tag & 1 == 0 {
            total += skip.min(INLINE_VALUE_MAX);
        }
        if r.bytes(skip).is_err() {
            break;
        }
        total += prev_len;
    }
    total
}

fn decode_internal(
    r: &mut Reader<'_>,
    at: PageRef,
    level: u8,
    deadlines: bool,
    oldest_below: &mut u32,
    earliest_below: &mut Deadline,
) -> Result<Node, &'static str> {
    if level > MAX_LEVEL {
        return Err("page level over the depth limit");
    }
    let n = r
        .len(r.remaining() / (PageRef::ENCODED_LEN + 1))
        .map_err(|e| e.what)?;
    if n == 0 {
        return Err("internal page without children");
    }
    let mut children = Vec::with_capacity(n);
    for _ in 0..n {
        let page = PageRef::decode(r).map_err(|e| e.what)?;
        check_ref_before(page, at)?;
        let subtree = r.varint().map_err(|e| e.what)?;
        if subtree < u64::from(page.len) {
            return Err("subtree smaller than its own page");
        }
        let oldest = r.varint().map_err(|e| e.what)?;
        // The child's own page is part of its subtree.
        if oldest == 0 || oldest > u64::from(page.addr.segment) {
            return Err("oldest segment of a subtree after its own page's");
        }
        *oldest_below = (*oldest_below).min(oldest as u32);
        let earliest = if deadlines {
            r.varint().map_err(|e| e.what)?
        } else {
            NO_DEADLINE
        };
        *earliest_below = earlier(*earliest_below, earliest);
        children.push(ChildRef::on_disk(DiskRef {
            page,
            subtree,
            oldest: oldest as u32,
            earliest,
        }));
    }
    let mut seps: Vec<Vec<u8>> = Vec::with_capacity(n - 1);
    let mut key = Vec::new();
    for _ in 1..n {
        read_prefixed(r, &mut key)?;
        if key.is_empty() {
            return Err("empty separator");
        }
        if seps.last().is_some_and(|p| *p >= key) {
            return Err("separators not strictly increasing");
        }
        seps.push(key.clone());
    }
    r.expect_end().map_err(|e| e.what)?;
    let sep_refs: Vec<&[u8]> = seps.iter().map(|s| s.as_slice()).collect();
    Ok(Node::internal(
        level,
        Arc::new(InternalData::new(&sep_refs, children)),
        None,
    ))
}

/// Shortest key `s` with `left < s <= right` (`left < right`), used as the
/// separator between two siblings so internal pages stay small.
pub fn shortest_separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    debug_assert!(left < right);
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    right[..(common + 1).min(right.len())].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf::ValueRef;
    use kivi_log::Addr;
    use proptest::prelude::*;

    fn at(offset: u32) -> DiskRef {
        DiskRef {
            page: PageRef {
                addr: Addr { segment: 5, offset },
                len: 100,
            },
            subtree: 100,
            oldest: 5,
            earliest: NO_DEADLINE,
        }
    }

    #[test]
    fn leaf_round_trips_with_prefix_compression() {
        let keys: Vec<Vec<u8>> = (0..50u32)
            .map(|i| format!("user:{:08}", i).into_bytes())
            .collect();
        let entries: Vec<LiveEntry> = keys
            .iter()
            .map(|k| (k.as_slice(), ValueRef::Inline(b"value"), NO_DEADLINE))
            .collect();
        let mut out = Vec::new();
        encode_leaf(&mut out, &entries, |_| unreachable!());
        assert!(
            out.len() < 50 * (13 + 5 + 4),
            "prefix compression should shrink keys: {}",
            out.len()
        );
        let node = decode_page(&out, at(1000), 0).unwrap();
        let Some((crate::node::LeafBase::Mem(base), None)) = node.leaf_parts() else {
            panic!()
        };
        assert_eq!(base.len(), 50);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(base.key(i), k.as_slice());
        }
    }

    #[test]
    fn deadlines_round_trip_in_leaf_delta_and_internal_pages() {
        let entries: Vec<LiveEntry> = vec![
            (b"a", ValueRef::Inline(b"1"), NO_DEADLINE),
            (b"b", ValueRef::Inline(b"2"), 1_700_000_000_123),
            (b"c", ValueRef::Inline(b"3"), 42),
        ];
        let mut out = Vec::new();
        encode_leaf(&mut out, &entries, |_| unreachable!());
        assert_eq!(out[0], WITH_DEADLINES);
        let leaf_at = DiskRef {
            earliest: 42,
            ..at(1000)
        };
        let node = decode_page(&out, leaf_at, 0).unwrap();
        let Some((LeafBase::Mem(base), None)) = node.leaf_parts() else {
            panic!()
        };
        let got: Vec<_> = base
            .iter()
            .map(|(k, e)| (k.to_vec(), e.deadline()))
            .collect();
        assert_eq!(
            got,
            [
                (b"a".to_vec(), NO_DEADLINE),
                (b"b".to_vec(), 1_700_000_000_123),
                (b"c".to_vec(), 42)
            ]
        );
        // A parent claiming a later earliest deadline than the page holds
        // would hide key c from reclaiming: refused. An earlier one is fine.
        let later = DiskRef {
            earliest: 43,
            ..at(1000)
        };
        assert!(decode_page(&out, later, 0)
            .unwrap_err()
            .contains("earliest"));
        let none = DiskRef {
            earliest: NO_DEADLINE,
            ..at(1000)
        };
        assert!(decode_page(&out, none, 0).is_err());
        assert!(decode_page(
            &out,
            DiskRef {
                earliest: 7,
                ..at(1000)
            },
            0
        )
        .is_ok());

        // Delta: an expiring change next to plain ones and a tombstone.
        let changes: Vec<(&[u8], Entry<'_>)> = vec![
            (b"a", Entry::Value(ValueRef::Inline(b"x"), 99)),
            (b"b", Entry::Tombstone),
            (b"c", Entry::Value(ValueRef::Inline(b"y"), NO_DEADLINE)),
        ];
        out.clear();
        encode_delta(&mut out, at(10), 50, &changes, |_| unreachable!());
        let whole = DiskRef {
            subtree: 200,
            earliest: 99,
            ..at(1000)
        };
        let node = decode_delta(&out, whole).unwrap();
        let Some((LeafBase::Page(b), Some(d))) = node.leaf_parts() else {
            panic!()
        };
        assert_eq!(b.earliest, 99, "the base takes the parent's figure");
        let got: Vec<_> = d.iter().map(|(k, e)| (k.to_vec(), e.deadline())).collect();
        assert_eq!(
            got,
            [
                (b"a".to_vec(), 99),
                (b"b".to_vec(), NO_DEADLINE),
                (b"c".to_vec(), NO_DEADLINE)
            ]
        );
        assert!(matches!(d.entry(1), Entry::Tombstone));

        // Internal: children's earliest deadlines, only when one has any.
        out.clear();
        encode_internal(&mut out, 1, &[at(10), at(20)], &[b"m"]);
        assert_eq!(out[0], 1, "no deadlines: format 4's page");
        let with = [
            DiskRef {
                earliest: 5,
                ..at(10)
            },
            at(20),
        ];
        out.clear();
        encode_internal(&mut out, 1, &with, &[b"m"]);
        assert_eq!(out[0], 1 | WITH_DEADLINES);
        let parent = DiskRef {
            earliest: 5,
            ..at(1000)
        };
        let node = decode_page(&out, parent, 1).unwrap();
        let children: Vec<_> = (0..2)
            .map(|i| node.child_ref(i).page().unwrap().earliest)
            .collect();
        assert_eq!(children, [5, NO_DEADLINE]);
    }

    #[test]
    fn delta_pages_round_trip_and_check_their_base() {
        let base = at(10);
        let changes: Vec<(&[u8], Entry<'_>)> = vec![
            (
                b"apple",
                Entry::Value(ValueRef::Inline(b"red"), NO_DEADLINE),
            ),
            (b"apricot", Entry::Tombstone),
            (b"banana", Entry::Value(ValueRef::Inline(b""), NO_DEADLINE)),
        ];
        let mut out = Vec::new();
        encode_delta(&mut out, base, 777, &changes, |_| unreachable!());
        let whole = DiskRef {
            subtree: base.subtree + 100,
            ..at(1000)
        };
        let node = decode_delta(&out, whole).unwrap();
        let Some((LeafBase::Page(b), Some(d))) = node.leaf_parts() else {
            panic!("a delta page decodes to a leaf over its base")
        };
        assert_eq!(*b, base);
        assert_eq!(node.size(), 777);
        let got: Vec<_> = d.iter().collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0, b"apple");
        assert!(matches!(got[1].1, Entry::Tombstone));
        // The parent's figures must be the delta page's plus its base's.
        let wrong = DiskRef {
            subtree: 100,
            ..at(1000)
        };
        assert!(decode_delta(&out, wrong).unwrap_err().contains("subtree"));
        // A base in a newer segment is refused.
        let newer = DiskRef {
            page: PageRef {
                addr: Addr {
                    segment: 9,
                    offset: 0,
                },
                len: 100,
            },
            subtree: 100,
            oldest: 9,
            earliest: NO_DEADLINE,
        };
        out.clear();
        encode_delta(&mut out, newer, 1, &changes, |_| unreachable!());
        assert!(decode_delta(&out, whole)
            .unwrap_err()
            .contains("newer segment"));
    }

    #[test]
    fn separators_are_short_and_between() {
        assert_eq!(shortest_separator(b"abc", b"abd"), b"abd");
        assert_eq!(shortest_separator(b"ab", b"abzzz"), b"abz");
        assert_eq!(shortest_separator(b"apple", b"banana"), b"b");
    }

    #[test]
    fn references_stay_in_older_segments_and_off_the_page() {
        let mut out = Vec::new();
        encode_internal(&mut out, 1, &[at(10), at(1050)], &[b"m"]);
        assert!(decode_page(&out, at(1000), 1)
            .unwrap_err()
            .contains("page itself"));
        let newer = DiskRef {
            page: PageRef {
                addr: Addr {
                    segment: 6,
                    offset: 10,
                },
                len: 100,
            },
            subtree: 100,
            oldest: 5,
            earliest: NO_DEADLINE,
        };
        out.clear();
        encode_internal(&mut out, 1, &[at(10), newer], &[b"m"]);
        assert!(decode_page(&out, at(1000), 1)
            .unwrap_err()
            .contains("newer segment"));
        // A child after its parent in the same segment: packed blocks.
        out.clear();
        encode_internal(&mut out, 1, &[at(10), at(2000)], &[b"m"]);
        assert!(decode_page(&out, at(1000), 1).is_ok());
        out.clear();
        encode_internal(&mut out, 1, &[at(10), at(20)], &[b"m"]);
        assert!(decode_page(&out, at(1000), 1).is_ok());
        assert!(decode_page(&out, at(1000), 2)
            .unwrap_err()
            .contains("level"));
    }

    #[test]
    fn recorded_oldest_segments_must_match_the_references() {
        let old_child = DiskRef {
            oldest: 2,
            ..at(10)
        };
        let mut out = Vec::new();
        encode_internal(&mut out, 1, &[old_child, at(20)], &[b"m"]);
        // The parent of this page must record segment 2, the oldest below.
        assert!(decode_page(&out, at(1000), 1)
            .unwrap_err()
            .contains("oldest"));
        let right = DiskRef {
            oldest: 2,
            ..at(1000)
        };
        assert!(decode_page(&out, right, 1).is_ok());
        // A child's own page is part of its subtree: its oldest segment is
        // at most its page's.
        let impossible = DiskRef {
            oldest: 6,
            ..at(10)
        };
        out.clear();
        encode_internal(&mut out, 1, &[impossible, at(20)], &[b"m"]);
        assert!(decode_page(&out, at(1000), 1)
            .unwrap_err()
            .contains("oldest segment of a subtree"));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), level in 0u8..3) {
            let _ = decode_page(&bytes, at(1_000_000), level);
        }

        #[test]
        fn decoded_leaves_are_sorted(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(node) = decode_page(&bytes, at(1_000_000), 0) {
                let Some((crate::node::LeafBase::Mem(base), None)) = node.leaf_parts() else { panic!() };
                for i in 1..base.len() {
                    prop_assert!(base.key(i - 1) < base.key(i));
                }
            }
        }
    }
}
