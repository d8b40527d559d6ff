//! sparkey's Robin Hood slot table, replayed exactly (spec §1.5): the
//! in-memory build, the key comparisons against the log, and the
//! statistics taken over a finished table.
//!
//! The layout a replay produces depends on history, not only on the final
//! set of keys: an entry evicted by a more displaced one walks past the
//! entries of its own ideal slot (equal displacement never swaps), so a
//! group of equal ideal slots is rotated by every insert that passes it.
//! That is why both builds here replay the same operations in the same
//! order; `partition.rs` does it region by region.

use crate::error::{Error, Result};
use crate::log::LogData;
use crate::slots::SlotVec;

/// One step of a build, in log order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A PUT from the log: replaces an equal key (key compare on equal hash).
    Put,
    /// An occupied slot of the previous index, re-inserted without key
    /// compares (incremental builds).
    Reinsert,
    /// A DELETE from the log: removes the key with backward shifting.
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub hash: u64,
    pub addr: u64,
    pub kind: OpKind,
}

/// Reads keys and entry sizes back from the log for equal stored hashes.
#[derive(Clone, Copy)]
pub struct KeyReader<'a> {
    pub log: LogData<'a>,
    pub bits: u32,
}

impl KeyReader<'_> {
    pub fn same_key(&self, a: u64, b: u64) -> Result<bool> {
        let ea = self.log.entry_at(a, self.bits)?;
        let eb = self.log.entry_at(b, self.bits)?;
        Ok(ea.key == eb.key)
    }

    /// Encoded size of the entry at `addr`, which becomes garbage.
    pub fn size(&self, addr: u64) -> Result<u64> {
        Ok(self.log.entry_at(addr, self.bits)?.encoded_len)
    }
}

/// Probe distance of an entry with stored hash `h` sitting in slot `s`
/// (slots past the table's end, as a region's extension has, wrap).
#[inline]
pub fn displacement(s: u64, h: u64, cap: u64) -> u64 {
    let ideal = h % cap;
    let s = if s < cap { s } else { s % cap };
    // One division, not three: both lie in [0, cap).
    if s >= ideal {
        s - ideal
    } else {
        s + cap - ideal
    }
}

/// How many operations ahead a build prefetches their ideal slots: enough
/// to keep several cache misses in flight while the oldest is applied.
pub const LOOKAHEAD: usize = 16;

/// The whole slot table in memory, as sparkey builds it.
pub struct MemTable {
    pub cap: u64,
    /// Address 0 means empty (and hash 0 too).
    pub slots: SlotVec,
    /// Bytes of PUT entries replaced or deleted during the replay.
    pub garbage: u64,
}

impl MemTable {
    pub fn new(cap: u64, hash_size: u32, address_size: u32) -> Self {
        assert!(cap >= 1, "capacity is at least 1");
        MemTable {
            cap,
            slots: SlotVec::new(cap as usize, hash_size, address_size, Vec::new()),
            garbage: 0,
        }
    }

    /// Hints that `op` will be applied soon (see `LOOKAHEAD`).
    #[inline]
    pub fn prefetch(&self, op: &Op) {
        self.slots.prefetch((op.hash % self.cap) as usize);
    }

    pub fn apply(&mut self, op: Op, keys: &KeyReader<'_>) -> Result<()> {
        match op.kind {
            OpKind::Put => self.insert(op.hash, op.addr, true, keys),
            OpKind::Reinsert => self.insert(op.hash, op.addr, false, keys),
            OpKind::Delete => self.delete(op.hash, op.addr, keys),
        }
    }

    fn next(&self, s: u64) -> u64 {
        if s + 1 == self.cap {
            0
        } else {
            s + 1
        }
    }

    fn full(&self) -> Error {
        Error::corrupt(keys_path(), 0, "hash table full: more live keys than slots")
    }

    fn insert(&mut self, hash: u64, addr: u64, compare: bool, keys: &KeyReader<'_>) -> Result<()> {
        let (mut hash, mut addr, mut compare) = (hash, addr, compare);
        let mut s = hash % self.cap;
        let mut disp = 0u64;
        for _ in 0..=self.cap {
            let (h2, a2) = self.slots.get(s as usize);
            if a2 == 0 {
                self.slots.set(s as usize, (hash, addr));
                return Ok(());
            }
            if compare && h2 == hash && keys.same_key(addr, a2)? {
                self.garbage += keys.size(a2)?;
                self.slots.set(s as usize, (h2, addr));
                return Ok(());
            }
            let other = displacement(s, h2, self.cap);
            if disp > other {
                // Robin Hood: the poorer entry takes the slot.
                self.slots.set(s as usize, (hash, addr));
                (hash, addr, disp, compare) = (h2, a2, other, false);
            }
            s = self.next(s);
            disp += 1;
        }
        Err(self.full())
    }

    fn delete(&mut self, hash: u64, del_addr: u64, keys: &KeyReader<'_>) -> Result<()> {
        let mut s = hash % self.cap;
        for disp in 0..self.cap {
            let (h2, a2) = self.slots.get(s as usize);
            if a2 == 0 {
                return Ok(());
            }
            if h2 == hash && keys.same_key(del_addr, a2)? {
                self.garbage += keys.size(a2)?;
                self.shift_back(s);
                return Ok(());
            }
            if disp > displacement(s, h2, self.cap) {
                return Ok(());
            }
            s = self.next(s);
        }
        Ok(())
    }

    /// Backward-shift deletion: pull the run after `hole` back one slot.
    fn shift_back(&mut self, mut hole: u64) {
        for _ in 0..self.cap {
            let n = self.next(hole);
            let (h, a) = self.slots.get(n as usize);
            if a == 0 || displacement(n, h, self.cap) == 0 || n == hole {
                self.slots.set(hole as usize, (0, 0));
                return;
            }
            self.slots.set(hole as usize, (h, a));
            hole = n;
        }
        self.slots.set(hole as usize, (0, 0));
    }
}

fn keys_path() -> &'static std::path::Path {
    std::path::Path::new("(index build)")
}

/// The header statistics of a finished slot table, fed slot by slot in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SlotStats {
    pub num_entries: u64,
    pub max_displacement: u64,
    pub total_displacement: u64,
    pub hash_collisions: u64,
    next_slot: u64,
    prev: Option<(u64, bool)>,
    first: Option<(u64, bool)>,
}

impl SlotStats {
    pub fn observe(&mut self, hash: u64, addr: u64, cap: u64) {
        let s = self.next_slot;
        self.next_slot += 1;
        let occupied = addr != 0;
        if occupied {
            self.num_entries += 1;
            let d = displacement(s, hash, cap);
            self.max_displacement = self.max_displacement.max(d);
            self.total_displacement += d;
        }
        // sparkey's rule: slot s (occupied or not) whose stored hash equals
        // that of an occupied slot s - 1.
        if let Some((ph, pocc)) = self.prev {
            if pocc && ph == hash {
                self.hash_collisions += 1;
            }
        }
        if s == 0 {
            self.first = Some((hash, occupied));
        }
        self.prev = Some((hash, occupied));
    }

    /// Adds the wrap-around pair (slot capacity - 1, slot 0).
    pub fn finish(mut self) -> SlotStats {
        if let (Some((fh, focc)), Some((lh, locc))) = (self.first, self.prev) {
            if focc && locc && fh == lh {
                self.hash_collisions += 1;
            }
        }
        self
    }
}
