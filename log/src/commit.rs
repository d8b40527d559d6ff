//! Bodies of the two records the commit log holds.
//!
//! Both start with `synced_through`: how much of their segment was durable
//! (synced) when they were written. Recovery uses it to tell a torn tail from
//! corruption: a damaged record followed by a valid one that says the damaged
//! bytes were already durable is corruption; otherwise the damage is a torn
//! tail of writes that had not been synced.
//!
//! A *commit record* carries the effective operations of one group commit:
//! the puts and deletes that the group's batches (conditional writes already
//! decided) apply, sorted by key with one operation per key, under a sequence
//! number one higher than the previous commit's.
//!
//! A *checkpoint record* names a tree root written to page segments and the
//! sequence number of the last commit that tree includes. Recovery starts from
//! the newest checkpoint and replays the commits after it.

use crate::codec::{put_len_bytes, put_varint, DecodeError, Reader};
use crate::record::{Addr, PageRef};
use crate::{MAX_KEY_LEN, MAX_VALUE_LEN};

/// When a value stops existing: milliseconds since the Unix epoch, or
/// [`NO_DEADLINE`]. A key whose deadline has passed is absent to every read;
/// its entry stays until it is reclaimed.
pub type Deadline = u64;

/// The deadline of a value that never expires.
pub const NO_DEADLINE: Deadline = 0;

/// A figure no later than any deadline, for a subtree whose earliest
/// deadline is not recorded (a checkpoint names its root without one).
pub const ANY_DEADLINE: Deadline = 1;

/// One operation of a commit record, borrowing its key and value (from the
/// record's body when decoded). A put carries its value's deadline
/// ([`NO_DEADLINE`] for none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpRef<'a> {
    /// Key, value and deadline: the key holds the value from this commit on.
    Put(&'a [u8], &'a [u8], Deadline),
    /// Key: the key is absent from this commit on.
    Delete(&'a [u8]),
}

impl<'a> OpRef<'a> {
    /// The key the operation writes.
    pub fn key(&self) -> &'a [u8] {
        match *self {
            OpRef::Put(k, ..) | OpRef::Delete(k) => k,
        }
    }
}

/// An operation that owns its key and value: [`OpRef`] kept beyond the
/// buffer it was decoded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Key, value and deadline ([`NO_DEADLINE`] for none).
    Put(Vec<u8>, Vec<u8>, Deadline),
    /// Key.
    Delete(Vec<u8>),
}

impl Op {
    /// The operation as an [`OpRef`] borrowing from this one.
    pub fn as_ref(&self) -> OpRef<'_> {
        match self {
            Op::Put(k, v, d) => OpRef::Put(k, v, *d),
            Op::Delete(k) => OpRef::Delete(k),
        }
    }

    /// The key the operation writes.
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Put(k, ..) | Op::Delete(k) => k,
        }
    }
}

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
/// A put with a deadline (format 5): key, varint deadline (not 0), value.
const OP_PUT_EXPIRING: u8 = 3;
/// Everything written before this commit is deleted (format 5), then the
/// record's other operations apply; only as the first operation, no key.
const OP_CLEAR: u8 = 4;

/// A decoded commit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedCommit<'a> {
    /// The commit's sequence number (one more than the previous commit's).
    pub seq: u64,
    /// The commit first deletes every key written before it.
    pub clears: bool,
    /// The operations, sorted by key, one per key, borrowing from the body.
    pub ops: Vec<OpRef<'a>>,
}

/// The commit record's body format: [`CommitRecord::encode`] and
/// [`CommitRecord::decode`].
pub struct CommitRecord;

/// The `synced_through` a commit or checkpoint record body starts with;
/// `None` for other records or a body too short to hold it.
pub fn synced_claim(ty: crate::RecordType, body: &[u8]) -> Option<u64> {
    match ty {
        crate::RecordType::Commit | crate::RecordType::Checkpoint if body.len() >= 8 => {
            Some(u64::from_le_bytes(body[..8].try_into().expect("8 bytes")))
        }
        _ => None,
    }
}

impl CommitRecord {
    /// Encodes a commit body. `ops` must be sorted by key without
    /// duplicates; `clears`: the commit first deletes everything before it.
    pub fn encode<'a>(
        out: &mut Vec<u8>,
        synced_through: u64,
        seq: u64,
        clears: bool,
        ops: impl ExactSizeIterator<Item = OpRef<'a>>,
    ) {
        out.extend_from_slice(&synced_through.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        put_varint(out, ops.len() as u64 + u64::from(clears));
        if clears {
            out.push(OP_CLEAR);
        }
        for op in ops {
            match op {
                OpRef::Put(k, v, NO_DEADLINE) => {
                    out.push(OP_PUT);
                    put_len_bytes(out, k);
                    put_len_bytes(out, v);
                }
                OpRef::Put(k, v, deadline) => {
                    out.push(OP_PUT_EXPIRING);
                    put_len_bytes(out, k);
                    put_varint(out, deadline);
                    put_len_bytes(out, v);
                }
                OpRef::Delete(k) => {
                    out.push(OP_DELETE);
                    put_len_bytes(out, k);
                }
            }
        }
    }

    /// Decodes a commit body, checking limits and key order.
    pub fn decode(body: &[u8]) -> Result<DecodedCommit<'_>, DecodeError> {
        let mut r = Reader::new(body);
        let _synced_through = r.u64()?;
        let seq = r.u64()?;
        // Every op takes at least 1 byte, which bounds the allocation.
        let mut count = r.len(r.remaining())?;
        let mut clears = false;
        if count > 0 && r.rest().first() == Some(&OP_CLEAR) {
            r.u8()?;
            clears = true;
            count -= 1;
        }
        let mut ops = Vec::with_capacity(count.min(r.remaining() / 2));
        for _ in 0..count {
            let kind = r.u8()?;
            let key = r.len_bytes(MAX_KEY_LEN)?;
            let op = match kind {
                OP_PUT => OpRef::Put(key, r.len_bytes(MAX_VALUE_LEN)?, NO_DEADLINE),
                OP_PUT_EXPIRING => {
                    let deadline = r.varint()?;
                    if deadline == NO_DEADLINE {
                        return Err(r.err("expiring put without a deadline"));
                    }
                    OpRef::Put(key, r.len_bytes(MAX_VALUE_LEN)?, deadline)
                }
                OP_DELETE => OpRef::Delete(key),
                _ => return Err(r.err("unknown operation in commit record")),
            };
            if let Some(prev) = ops.last() {
                if OpRef::key(prev) >= key {
                    return Err(r.err("commit record keys out of order"));
                }
            }
            ops.push(op);
        }
        r.expect_end()?;
        Ok(DecodedCommit { seq, clears, ops })
    }
}

/// A checkpoint record's body: a durable tree root and the commits it
/// covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckpointRecord {
    /// The version the checkpoint took: `pairs` counts its pairs.
    pub seq: u64,
    /// Every commit up to this one is in the tree (at most `seq`). A
    /// checkpoint that writes only part of the tree's changes (a slice)
    /// keeps older pages for the rest, holding the commits up to an older
    /// point: recovery replays every commit after `replay_from` (replaying
    /// puts and deletes the tree already has changes nothing).
    pub replay_from: u64,
    /// The last commit appended to the log before this record (at least
    /// `seq`; set when the record is appended). Bounds what damage just
    /// before the record could have hidden.
    pub log_seq: u64,
    /// The root page; `None` for an empty tree.
    pub root: Option<PageRef>,
    /// Level of the root page (0 = leaf).
    pub root_level: u8,
    /// End of the page stream when the checkpoint was taken: pages this
    /// checkpoint references all lie before it.
    pub page_end: Addr,
    /// Number of key-value pairs in the tree.
    pub pairs: u64,
    /// Bytes of every page and blob reachable from the root.
    pub tree_bytes: u64,
    /// The oldest segment holding any of them (0 for an empty tree): the
    /// page segments before it hold nothing this checkpoint needs.
    pub root_oldest: u32,
}

impl CheckpointRecord {
    /// Encodes the body; see the module comment for `synced_through`.
    pub fn encode(&self, out: &mut Vec<u8>, synced_through: u64) {
        out.extend_from_slice(&synced_through.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.replay_from.to_le_bytes());
        out.extend_from_slice(&self.log_seq.to_le_bytes());
        match self.root {
            None => out.push(0),
            Some(r) => {
                out.push(1);
                r.encode(out);
            }
        }
        out.push(self.root_level);
        out.extend_from_slice(&self.page_end.segment.to_le_bytes());
        out.extend_from_slice(&self.page_end.offset.to_le_bytes());
        out.extend_from_slice(&self.pairs.to_le_bytes());
        out.extend_from_slice(&self.tree_bytes.to_le_bytes());
        out.extend_from_slice(&self.root_oldest.to_le_bytes());
    }

    /// Decodes a body [`CheckpointRecord::encode`] wrote, checking that its
    /// figures agree with one another; `synced_through` is skipped (see
    /// [`synced_claim`]).
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let _synced_through = r.u64()?;
        let seq = r.u64()?;
        let replay_from = r.u64()?;
        if replay_from > seq {
            return Err(r.err("checkpoint replays from past its version"));
        }
        let log_seq = r.u64()?;
        if log_seq < seq {
            return Err(r.err("checkpoint covers commits past the log's last"));
        }
        let root = match r.u8()? {
            0 => None,
            1 => Some(PageRef::decode(&mut r)?),
            _ => return Err(r.err("bad root flag in checkpoint record")),
        };
        let root_level = r.u8()?;
        let page_end = Addr {
            segment: r.u32()?,
            offset: r.u32()?,
        };
        let pairs = r.u64()?;
        let tree_bytes = r.u64()?;
        let root_oldest = r.u32()?;
        r.expect_end()?;
        if root.is_none() && (root_level != 0 || pairs != 0 || tree_bytes != 0 || root_oldest != 0)
        {
            return Err(r.err("empty tree with a level or pairs"));
        }
        if root.is_some_and(|p| root_oldest == 0 || root_oldest > p.addr.segment) {
            return Err(r.err("oldest segment of the tree after its root's"));
        }
        if let Some(root) = root {
            if root.addr >= page_end {
                return Err(r.err("checkpoint root lies past the page stream end"));
            }
        }
        if let Some(root) = root {
            if tree_bytes < u64::from(root.len) {
                return Err(r.err("tree smaller than its root page"));
            }
        }
        Ok(CheckpointRecord {
            seq,
            replay_from,
            log_seq,
            root,
            root_level,
            page_end,
            pairs,
            tree_bytes,
            root_oldest,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commit_round_trips() {
        let ops = [
            OpRef::Put(b"a", b"1", NO_DEADLINE),
            OpRef::Delete(b"b"),
            OpRef::Put(b"c", b"", NO_DEADLINE),
            OpRef::Put(b"d", b"4", 1_700_000_000_000),
        ];
        let mut out = Vec::new();
        CommitRecord::encode(&mut out, 0, 42, false, ops.iter().copied());
        let back = CommitRecord::decode(&out).unwrap();
        assert_eq!((back.seq, back.clears), (42, false));
        assert_eq!(back.ops, ops);
        // A clearing commit, with and without operations after the clear;
        // the empty key may follow it.
        for after in [&ops[..], &[], &[OpRef::Put(b"", b"x", NO_DEADLINE)]] {
            out.clear();
            CommitRecord::encode(&mut out, 0, 43, true, after.iter().copied());
            let back = CommitRecord::decode(&out).unwrap();
            assert_eq!((back.seq, back.clears), (43, true));
            assert_eq!(back.ops, after);
        }
        // A clear anywhere but first is refused.
        out.clear();
        CommitRecord::encode(&mut out, 0, 44, false, [OpRef::Delete(b"a")].into_iter());
        out[16] = 2;
        out.push(OP_CLEAR);
        assert!(CommitRecord::decode(&out).is_err());
    }

    #[test]
    fn unsorted_commits_are_refused() {
        let mut out = Vec::new();
        CommitRecord::encode(
            &mut out,
            0,
            1,
            false,
            [OpRef::Delete(b"b"), OpRef::Delete(b"a")].into_iter(),
        );
        let err = CommitRecord::decode(&out).unwrap_err();
        assert_eq!(err.what, "commit record keys out of order", "{err}");
    }

    #[test]
    fn checkpoint_round_trips() {
        let c = CheckpointRecord {
            seq: 7,
            replay_from: 5,
            log_seq: 9,
            root: Some(PageRef {
                addr: Addr {
                    segment: 3,
                    offset: 99,
                },
                len: 400,
            }),
            root_level: 2,
            page_end: Addr {
                segment: 3,
                offset: 499,
            },
            pairs: 12345,
            tree_bytes: 5000,
            root_oldest: 2,
        };
        let mut out = Vec::new();
        c.encode(&mut out, 7);
        assert_eq!(CheckpointRecord::decode(&out).unwrap(), c);
        let empty = CheckpointRecord::default();
        out.clear();
        empty.encode(&mut out, 0);
        assert_eq!(CheckpointRecord::decode(&out).unwrap(), empty);
    }

    proptest! {
        #[test]
        fn arbitrary_bodies_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = CommitRecord::decode(&bytes);
            let _ = CheckpointRecord::decode(&bytes);
        }
    }
}
