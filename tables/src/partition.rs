//! The bounded-memory index build: the slot table is cut into regions of
//! consecutive slots that each fit the memory limit, and each region
//! replays, in log order, exactly the operations the in-memory build
//! would apply to its slots. The result is the same table, byte for byte.
//!
//! Why this is exact. An operation whose ideal slot lies in region R only
//! touches slots from its ideal onwards, so R's slots are affected by (a)
//! R's own operations and (b) walks coming in from before R's first slot.
//! Robin Hood order keeps, at every moment, the entries whose ideal lies
//! before a boundary `b` that sit at or after `b` as one contiguous run
//! starting at `b` (they are more displaced than any entry whose ideal is
//! `b` or later). So R's simulation, which holds R's slots plus an
//! "extension" past its end containing only that run, evolves exactly like
//! the real table on R's slots and on the run, whatever the next regions
//! hold. Every time a walk crosses R's end, R records an event for the
//! next region, stamped with the operation's position in the log:
//! - `Carry`: an insert continues at the boundary with this entry,
//!   displacement and key-compare flag;
//! - `Search`: a delete's search continues at the boundary;
//! - `Pull`: a backward shift moved the boundary slot's entry back into R.
//!
//! The next region merges those events with its own operations in log
//! order and replays them on its slots, so its slots are exact as well.
//! Events out of the last region wrap into region 0; since region 0 ran
//! before knowing them, regions are re-run (from region 0, stopping as
//! soon as a region's events come out unchanged) until the wrap-around
//! events are a fixed point. Each re-run makes at least one more log
//! operation exact (the earliest wrong event is recomputed from a state
//! that is exact before it), so this ends; in practice one re-run of
//! region 0 at most.
//!
//! Garbage (replaced and deleted PUTs) is counted by the region that owns
//! the slot where the key was found, so each is counted once.

use crate::bytes::u64_at;
use crate::error::{Error, Result};
use crate::robin::{displacement, KeyReader, Op, OpKind, LOOKAHEAD};
use crate::slots::SlotVec;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// An operation as spilled to a region's temporary file.
pub const RECORD_LEN: usize = 25;
// The sequence number, the hash and the address (u64 each), and the kind (u8).
const _: () = assert!(RECORD_LEN == 3 * size_of::<u64>() + size_of::<u8>());

pub fn encode_record(seq: u64, op: &Op, out: &mut [u8; RECORD_LEN]) {
    out[0..8].copy_from_slice(&seq.to_le_bytes());
    out[8..16].copy_from_slice(&op.hash.to_le_bytes());
    out[16..24].copy_from_slice(&op.addr.to_le_bytes());
    out[24] = match op.kind {
        OpKind::Put => 0,
        OpKind::Reinsert => 1,
        OpKind::Delete => 2,
    };
}

fn decode_record(b: &[u8; RECORD_LEN]) -> (u64, Op) {
    let kind = match b[24] {
        0 => OpKind::Put,
        1 => OpKind::Reinsert,
        _ => OpKind::Delete,
    };
    (
        u64_at(b, 0),
        Op {
            hash: u64_at(b, 8),
            addr: u64_at(b, 16),
            kind,
        },
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    Carry {
        hash: u64,
        addr: u64,
        disp: u64,
        compare: bool,
    },
    Search {
        hash: u64,
        addr: u64,
        disp: u64,
    },
    Pull,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Log position of the operation whose walk this continues.
    pub seq: u64,
    /// How many boundaries the walk has crossed (orders a walk that wraps
    /// all the way round after its own start in the same region).
    pub hop: u32,
    pub kind: EventKind,
}

/// Why a region's replay stopped early.
pub enum Stop {
    /// A run of displaced entries would reach back into the region's own
    /// slots (a cluster spanning nearly the whole table): the caller
    /// builds in memory instead.
    Fallback,
    Fail(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Fail(e)
    }
}

type Sim<T> = std::result::Result<T, Stop>;

/// One region's slots `[a, b)` and its extension past `b`, indexed by
/// linear slot number minus `a` (slots past the table's end continue
/// linearly; displacement takes them modulo the capacity).
pub struct Region<'k> {
    a: u64,
    b: u64,
    cap: u64,
    pub slots: SlotVec,
    pub garbage: u64,
    pub out: Vec<Event>,
    keys: KeyReader<'k>,
}

impl<'k> Region<'k> {
    /// A region over `[a, b)` whose slots reuse `buf`'s allocation: one
    /// allocation serves every region of a build, so the allocator never
    /// holds freed regions' memory beside the live one.
    pub fn new(a: u64, b: u64, cap: u64, keys: KeyReader<'k>, slots: SlotVec) -> Self {
        assert!(a < b && b <= cap, "region within the table");
        Region {
            a,
            b,
            cap,
            slots,
            garbage: 0,
            out: Vec::new(),
            keys,
        }
    }

    fn idx(&mut self, s: u64) -> Sim<usize> {
        let i = s - self.a;
        if i >= self.cap {
            return Err(Stop::Fallback);
        }
        let i = i as usize;
        if i >= self.slots.len() {
            self.slots.grow(i + 1);
        }
        Ok(i)
    }

    fn get(&mut self, s: u64) -> Sim<(u64, u64)> {
        let i = self.idx(s)?;
        Ok(self.slots.get(i))
    }

    fn set(&mut self, s: u64, v: (u64, u64)) -> Sim<()> {
        let i = self.idx(s)?;
        self.slots.set(i, v);
        Ok(())
    }

    /// Hints that the own operation `op` will be applied soon.
    #[inline]
    pub fn prefetch(&self, op: &Op) {
        let i = (op.hash % self.cap).wrapping_sub(self.a) as usize;
        self.slots.prefetch(i);
    }

    /// Applies an operation of this region's own (its ideal slot is here).
    pub fn own(&mut self, seq: u64, op: Op) -> Sim<()> {
        let ideal = op.hash % self.cap;
        debug_assert!(ideal >= self.a && ideal < self.b);
        match op.kind {
            OpKind::Put => self.insert(seq, 0, ideal, op.hash, op.addr, 0, true),
            OpKind::Reinsert => self.insert(seq, 0, ideal, op.hash, op.addr, 0, false),
            OpKind::Delete => self.search(seq, 0, ideal, op.hash, op.addr, 0),
        }
    }

    /// Continues a walk that came in at slot `a`.
    pub fn event(&mut self, ev: &Event) -> Sim<()> {
        let a = self.a;
        match ev.kind {
            EventKind::Carry {
                hash,
                addr,
                disp,
                compare,
            } => self.insert(ev.seq, ev.hop, a, hash, addr, disp, compare),
            EventKind::Search { hash, addr, disp } => {
                self.search(ev.seq, ev.hop, a, hash, addr, disp)
            }
            EventKind::Pull => {
                let (h, addr) = self.get(a)?;
                if addr == 0 || displacement(a, h, self.cap) == 0 {
                    return Err(Stop::Fail(internal("pull of an empty or undisplaced slot")));
                }
                self.shift_back(ev.seq, ev.hop, a)
            }
        }
    }

    fn emit(&mut self, seq: u64, hop: u32, kind: EventKind) {
        self.out.push(Event {
            seq,
            hop: hop + 1,
            kind,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        seq: u64,
        hop: u32,
        start: u64,
        hash: u64,
        addr: u64,
        disp: u64,
        compare: bool,
    ) -> Sim<()> {
        let (mut hash, mut addr, mut disp, mut compare) = (hash, addr, disp, compare);
        let mut s = start;
        loop {
            if s == self.b {
                self.emit(
                    seq,
                    hop,
                    EventKind::Carry {
                        hash,
                        addr,
                        disp,
                        compare,
                    },
                );
            }
            let (h2, a2) = self.get(s)?;
            if a2 == 0 {
                return self.set(s, (hash, addr));
            }
            if compare && h2 == hash && self.keys.same_key(addr, a2)? {
                if s < self.b {
                    self.garbage += self.keys.size(a2)?;
                }
                return self.set(s, (h2, addr));
            }
            let other = displacement(s, h2, self.cap);
            if disp > other {
                self.set(s, (hash, addr))?;
                (hash, addr, disp, compare) = (h2, a2, other, false);
            }
            s += 1;
            disp += 1;
        }
    }

    fn search(
        &mut self,
        seq: u64,
        hop: u32,
        start: u64,
        hash: u64,
        del: u64,
        disp: u64,
    ) -> Sim<()> {
        let mut disp = disp;
        let mut s = start;
        loop {
            if s == self.b {
                self.emit(
                    seq,
                    hop,
                    EventKind::Search {
                        hash,
                        addr: del,
                        disp,
                    },
                );
            }
            let (h2, a2) = self.get(s)?;
            if a2 == 0 {
                return Ok(());
            }
            if h2 == hash && self.keys.same_key(del, a2)? {
                if s < self.b {
                    self.garbage += self.keys.size(a2)?;
                }
                return self.shift_back(seq, hop, s);
            }
            if disp > displacement(s, h2, self.cap) {
                return Ok(());
            }
            s += 1;
            disp += 1;
        }
    }

    fn shift_back(&mut self, seq: u64, hop: u32, mut hole: u64) -> Sim<()> {
        loop {
            let n = hole + 1;
            let (h, a) = self.get(n)?;
            if a == 0 || displacement(n, h, self.cap) == 0 {
                return self.set(hole, (0, 0));
            }
            if n == self.b {
                // The boundary slot's entry moves back into this region.
                self.emit(seq, hop, EventKind::Pull);
            }
            self.set(hole, (h, a))?;
            hole = n;
        }
    }
}

fn internal(what: &str) -> Error {
    Error::corrupt(
        "(index build)",
        0,
        format!("internal error in the partitioned build: {what}"),
    )
}

/// Operations of one region, read back from its temporary file in log order.
pub struct RegionOps {
    reader: BufReader<File>,
    path: PathBuf,
}

impl RegionOps {
    pub fn open(path: &Path, buf: usize) -> Result<Self> {
        let f = File::open(path).map_err(|e| Error::io(path, "open partition", e))?;
        Ok(RegionOps {
            reader: BufReader::with_capacity(buf, f),
            path: path.to_path_buf(),
        })
    }

    pub fn next(&mut self) -> Result<Option<(u64, Op)>> {
        let mut rec = [0u8; RECORD_LEN];
        match self.reader.read_exact(&mut rec) {
            Ok(()) => Ok(Some(decode_record(&rec))),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(Error::io(&self.path, "read partition", e)),
        }
    }
}

/// Writers of the regions' temporary files.
pub struct RegionWriter {
    pub w: BufWriter<File>,
    pub path: PathBuf,
}

impl RegionWriter {
    pub fn create(path: PathBuf, buf: usize) -> Result<Self> {
        let f = File::create(&path).map_err(|e| Error::io(&path, "create partition", e))?;
        Ok(RegionWriter {
            w: BufWriter::with_capacity(buf, f),
            path,
        })
    }

    pub fn push(&mut self, seq: u64, op: &Op) -> Result<()> {
        let mut rec = [0u8; RECORD_LEN];
        encode_record(seq, op, &mut rec);
        self.w
            .write_all(&rec)
            .map_err(|e| Error::io(&self.path, "write partition", e))
    }

    pub fn finish(mut self) -> Result<()> {
        self.w
            .flush()
            .map_err(|e| Error::io(&self.path, "write partition", e))
    }
}

/// Replays region `[a, b)`: its own operations from `ops` merged in log
/// order with `incoming` events, in `slots` (empty, `b - a` long). Returns the
/// finished region.
pub fn run_region<'k>(
    a: u64,
    b: u64,
    cap: u64,
    keys: KeyReader<'k>,
    ops: &mut RegionOps,
    incoming: &[Event],
    slots: SlotVec,
) -> Sim<Region<'k>> {
    let mut r = Region::new(a, b, cap, keys, slots);
    // Own operations are read `LOOKAHEAD` ahead and their ideal slots
    // prefetched; they are still applied one at a time in log order.
    let mut ahead: std::collections::VecDeque<(u64, Op)> =
        std::collections::VecDeque::with_capacity(LOOKAHEAD + 1);
    let mut more = true;
    let mut ev = incoming.iter().peekable();
    loop {
        while more && ahead.len() < LOOKAHEAD {
            match ops.next()? {
                Some((seq, op)) => {
                    r.prefetch(&op);
                    ahead.push_back((seq, op));
                }
                None => more = false,
            }
        }
        // An own operation starts its walk (hop 0) before any event of the
        // same operation that wrapped round the table comes back here.
        let take_op = match (ahead.front(), ev.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((seq, _)), Some(e)) => *seq <= e.seq,
        };
        if take_op {
            let (seq, op) = ahead.pop_front().expect("peeked");
            r.own(seq, op)?;
        } else {
            let e = ev.next().expect("peeked");
            r.event(e)?;
        }
    }
    Ok(r)
}
