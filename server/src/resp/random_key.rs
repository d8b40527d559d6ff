//! RANDOMKEY: a random existing key, found with a few seeks of the ordered
//! keyspace instead of a walk over it (the engine keeps no array of keys
//! to index into, and counting to the n-th key would read them all).
//!
//! The walk goes down the keys' byte tree: from one snapshot it finds the
//! first and last key of the current range; where they first differ it
//! picks a byte at random between theirs, takes the first key at or after
//! it (the subtree of that byte, or of the next byte some key has), and
//! goes on inside that subtree. So it costs two seeks per branching level
//! (at most `MAX_LEVELS`), each reading one pair.
//!
//! Not uniform: a byte no key has sends its chance to the next byte one
//! has, so a key after a wide gap is picked more often than one in a dense
//! run. Keys that share a layout (`user:1234`, fixed-width ids) come out
//! close to uniform; Redis's own RANDOMKEY is not uniform either.

use kivi::Snapshot;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::ops::Bound;

/// Branching levels the walk goes down, at most; after them it answers the
/// first key of the subtree it has reached.
const MAX_LEVELS: usize = 16;

/// A number in `0..n` (`n` >= 1), not predictable by clients but not for
/// cryptography: std's SipHash keyed from the OS's randomness, each
/// `RandomState` a fresh key. A modulo of up to 257 values from 64 bits
/// leaves no bias that matters.
pub fn random_below(n: u64) -> u64 {
    RandomState::new().hash_one(n) % n
}

fn first_in(snap: &Snapshot, lo: &[u8], hi: &Bound<Vec<u8>>) -> kivi::Result<Option<Vec<u8>>> {
    let mut scan = snap.scan((Bound::Included(lo.to_vec()), hi.clone()));
    Ok(scan.next()?.map(|(k, _)| k.to_vec()))
}

fn last_in(snap: &Snapshot, lo: &[u8], hi: &Bound<Vec<u8>>) -> kivi::Result<Option<Vec<u8>>> {
    let mut scan = snap.scan_rev((Bound::Included(lo.to_vec()), hi.clone()));
    Ok(scan.next()?.map(|(k, _)| k.to_vec()))
}

/// A random key of `snap`, `None` when it holds none. `random(n)` gives a
/// number in `0..n`.
pub fn random_key(
    snap: &Snapshot,
    mut random: impl FnMut(u64) -> u64,
) -> kivi::Result<Option<Vec<u8>>> {
    // Every key in [first, hi) lies between `first` and `last`, so it
    // shares their common prefix: the range is one subtree.
    let mut hi = Bound::Unbounded;
    let Some(mut first) = first_in(snap, &[], &hi)? else {
        return Ok(None);
    };
    let mut last = last_in(snap, &first, &hi)?.unwrap_or_else(|| first.clone());
    for _ in 0..MAX_LEVELS {
        if first == last {
            break;
        }
        let cp = first.iter().zip(&last).take_while(|(a, b)| a == b).count();
        // first < last, so `last` goes on past the common prefix; `first`
        // either does too, with a smaller byte, or is the prefix itself.
        let Some(&high) = last.get(cp) else {
            break;
        };
        let low = first.get(cp).copied();
        let from = u64::from(low.unwrap_or(0));
        // The prefix itself, when it is a key, is one more choice.
        let bare = u64::from(low.is_none());
        let pick = random(u64::from(high) - from + 1 + bare);
        if bare == 1 && pick == 0 {
            break;
        }
        let mut lo = last[..cp].to_vec();
        lo.push((from + pick - bare) as u8);
        // `last` is at or after `lo`, so a key is found, under this byte or
        // a later one; its byte's subtree is the next range.
        let next = first_in(snap, &lo, &hi)?.unwrap_or_else(|| last.clone());
        let Some(&b) = next.get(cp) else {
            break;
        };
        if b < u8::MAX {
            let mut end = last[..cp].to_vec();
            end.push(b + 1);
            hi = Bound::Excluded(end);
        }
        first = next;
        last = last_in(snap, &first, &hi)?.unwrap_or_else(|| first.clone());
    }
    Ok(Some(first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kivi::{Db, Options};
    use std::collections::HashMap;

    fn store(keys: &[&[u8]]) -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("s"), Options::default()).unwrap();
        for k in keys {
            db.put(k, b"v").unwrap();
        }
        (dir, db)
    }

    fn counts(db: &Db, draws: usize) -> HashMap<Vec<u8>, usize> {
        let mut seen = HashMap::new();
        for _ in 0..draws {
            let k = random_key(&db.snapshot(), random_below).unwrap().unwrap();
            *seen.entry(k).or_default() += 1;
        }
        seen
    }

    #[test]
    fn an_empty_store_has_no_random_key() {
        let (_d, db) = store(&[]);
        assert_eq!(random_key(&db.snapshot(), random_below).unwrap(), None);
        let (_d, db) = store(&[b"only"]);
        assert_eq!(
            random_key(&db.snapshot(), random_below).unwrap(),
            Some(b"only".to_vec())
        );
    }

    #[test]
    fn keys_of_one_layout_come_out_about_evenly() {
        let keys: Vec<Vec<u8>> = (0..100)
            .map(|i| format!("user:{i:03}").into_bytes())
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let (_d, db) = store(&refs);
        let seen = counts(&db, 5000);
        assert!(seen.keys().all(|k| keys.contains(k)));
        // Uniform would be 50 each; every key comes out, none far too often.
        assert_eq!(seen.len(), 100, "{seen:?}");
        assert!(seen.values().all(|&n| n < 150), "{seen:?}");
    }

    #[test]
    fn every_key_can_come_out_prefixes_and_edge_bytes_too() {
        let keys: [&[u8]; 6] = [b"", b"a", b"ab", b"abc", b"\xff", b"\xff\xff"];
        let (_d, db) = store(&keys);
        let seen = counts(&db, 3000);
        for k in keys {
            assert!(seen.contains_key(k), "{k:?} never picked: {seen:?}");
        }
    }

    #[test]
    fn each_choice_of_the_walk_leads_to_a_key() {
        // Every possible pick, not only random ones: the lowest and the
        // highest at each level.
        let (_d, db) = store(&[b"a1", b"a9", b"b", b"z\x00", b"z\xff"]);
        let picks: [fn(u64) -> u64; 3] = [|_| 0, |n| n - 1, |n| n / 2];
        for pick in picks {
            let k = random_key(&db.snapshot(), pick).unwrap().unwrap();
            assert!(db.get(&k).unwrap().is_some());
        }
    }
}
