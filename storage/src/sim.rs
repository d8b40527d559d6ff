//! The crash simulator: a storage backend for tests that models what a real
//! disk may do to data that was written but not yet synced, and that fails
//! calls on purpose.
//!
//! Model (the contract of [`Storage`] read pessimistically):
//! - every append goes to a list of *pending* writes of its segment; `sync`
//!   makes all of them durable;
//! - [`SimStorage::crash`] returns the disk as a restarted machine would find
//!   it: the synced bytes of every segment, plus an arbitrary subset of the
//!   pending writes, applied in an arbitrary order, the last one applied
//!   torn at an arbitrary byte half the time (else all of them whole); a gap
//!   left by a dropped write reads as zeros, as a file hole does; a segment whose first bytes were synced may also end
//!   in zeros past all of that, as LocalDir's sparse tail leaves it;
//! - a segment whose creation did not complete (the directory sync failed) may
//!   or may not exist after the crash; a failed deletion leaves it in place;
//! - any call can be made to fail with EIO or ENOSPC ([`SimStorage::inject`]),
//!   and a byte quota turns appends past it into ENOSPC. A failing append
//!   leaves a random prefix of its bytes behind, as a short write would.
//!
//! The handle used before a crash is dead afterwards: every call fails, so a
//! store that is still running cannot touch the "rebooted" disk.

use crate::{segment_file_name, IoError, SegmentId, SegmentReader, SegmentWriter, Storage};
use parking_lot::Mutex;
use rand::{Rng, RngExt};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;

/// At most this many zeros are left past a file's data by a crash, standing
/// for LocalDir's sparse tail (8 MiB there; smaller here to keep tests fast).
const SIM_SPARSE_TAIL: usize = 64 << 10;

/// How an injected failure shows itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// EIO: the device failed.
    Io,
    /// ENOSPC: no space left.
    NoSpace,
}

impl Fault {
    fn error(self) -> io::Error {
        match self {
            Fault::Io => io::Error::other("injected EIO"),
            Fault::NoSpace => io::Error::new(io::ErrorKind::StorageFull, "injected ENOSPC"),
        }
    }
}

/// The kinds of call a fault can be aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// `Storage::list_segments`.
    List,
    /// `Storage::create_segment`.
    Create,
    /// `Storage::open_segment`.
    Open,
    /// `Storage::delete_segment`.
    Delete,
    /// `Storage::read_meta`.
    ReadMeta,
    /// `Storage::write_meta`.
    WriteMeta,
    /// `SegmentWriter::append`.
    Append,
    /// `SegmentWriter::sync`.
    Sync,
    /// `SegmentReader::read_at` and `SegmentReader::size`.
    Read,
}

#[derive(Debug, Clone)]
struct Rule {
    op: Option<Op>,
    /// Matching calls to let through before failing.
    skip: u64,
    fault: Fault,
    /// Keep failing every matching call once triggered.
    sticky: bool,
    fired: bool,
}

#[derive(Debug, Default)]
struct SimFile {
    /// Every byte appended, as the running process sees it.
    data: Vec<u8>,
    /// Prefix of `data` that is durable.
    synced_len: usize,
    /// Appended ranges past `synced_len`, in the order they were written.
    pending: Vec<(usize, usize)>,
    /// False while the creation is not durable.
    name_durable: bool,
}

#[derive(Debug, Default)]
struct SimState {
    dead: bool,
    files: BTreeMap<SegmentId, SimFile>,
    meta: HashMap<String, Vec<u8>>,
    rules: Vec<Rule>,
    quota: Option<u64>,
    calls: u64,
    reads: u64,
    syncs: u64,
    /// Injected faults that failed a call, by the call and the fault.
    fired: BTreeMap<(Op, Fault), u64>,
    /// Appends the quota failed.
    quota_hits: u64,
    /// Drives the simulator's own choices (how much of a failing append
    /// survives), so a test's seed reproduces them.
    seed: u64,
}

impl SimState {
    fn check(&mut self, op: Op, target: &str) -> Result<(), IoError> {
        self.calls += 1;
        if self.dead {
            return Err(IoError::new(
                op_name(op),
                target,
                io::Error::other("simulated machine has crashed"),
            ));
        }
        for rule in &mut self.rules {
            if rule.op.is_some_and(|o| o != op) {
                continue;
            }
            if rule.fired {
                if rule.sticky {
                    *self.fired.entry((op, rule.fault)).or_default() += 1;
                    return Err(IoError::new(op_name(op), target, rule.fault.error()));
                }
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            rule.fired = true;
            *self.fired.entry((op, rule.fault)).or_default() += 1;
            return Err(IoError::new(op_name(op), target, rule.fault.error()));
        }
        Ok(())
    }

    fn total_bytes(&self) -> u64 {
        self.files.values().map(|f| f.data.len() as u64).sum()
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::List => "list segments",
        Op::Create => "create segment",
        Op::Open => "open segment",
        Op::Delete => "delete segment",
        Op::ReadMeta => "read",
        Op::WriteMeta => "write",
        Op::Append => "append to",
        Op::Sync => "fdatasync",
        Op::Read => "read",
    }
}

/// A simulated disk; clones share it.
#[derive(Debug, Clone, Default)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
}

/// splitmix64: a tiny deterministic generator for the simulator's choices.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl SimStorage {
    /// An empty simulated disk with no faults armed and seed 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// A simulator whose own random choices follow `seed`.
    pub fn with_seed(seed: u64) -> Self {
        let sim = Self::default();
        sim.state.lock().seed = seed;
        sim
    }

    /// Fails the matching call that comes after `skip` matching calls (`op`
    /// `None` matches every kind of call). With `sticky`, every matching call
    /// after that fails too.
    pub fn inject(&self, op: Option<Op>, skip: u64, fault: Fault, sticky: bool) {
        self.state.lock().rules.push(Rule {
            op,
            skip,
            fault,
            sticky,
            fired: false,
        });
    }

    /// Removes every injected fault and the quota: the "disk" works again.
    pub fn heal(&self) {
        let mut st = self.state.lock();
        st.rules.clear();
        st.quota = None;
    }

    /// Appends that would take the segments' total size past `bytes` fail with ENOSPC.
    pub fn set_quota(&self, bytes: Option<u64>) {
        self.state.lock().quota = bytes;
    }

    /// Calls made so far (of any kind), positioned reads, and syncs.
    pub fn counters(&self) -> (u64, u64, u64) {
        let st = self.state.lock();
        (st.calls, st.reads, st.syncs)
    }

    /// How many calls the injected faults failed so far, per kind of call
    /// and fault (a test can check that it exercised what it means to).
    /// Counted per disk: the disk [`crash`](Self::crash) returns starts at
    /// zero.
    pub fn faults_fired(&self) -> BTreeMap<(Op, Fault), u64> {
        self.state.lock().fired.clone()
    }

    /// How many appends the quota ([`set_quota`](Self::set_quota)) failed so far.
    pub fn quota_hits(&self) -> u64 {
        self.state.lock().quota_hits
    }

    /// Total bytes in all segments, as the running process sees them.
    pub fn total_bytes(&self) -> u64 {
        self.state.lock().total_bytes()
    }

    /// Pending (appended, not synced) writes across all segments.
    pub fn pending_writes(&self) -> usize {
        self.state
            .lock()
            .files
            .values()
            .map(|f| f.pending.len())
            .sum()
    }

    /// Simulates power loss: returns the disk a restarted machine sees, chosen
    /// with `rng`, and kills this handle.
    pub fn crash(&self, rng: &mut impl Rng) -> SimStorage {
        let mut st = self.state.lock();
        st.dead = true;
        let mut files = BTreeMap::new();
        for (&id, f) in &st.files {
            if !f.name_durable && rng.random_bool(0.5) {
                continue;
            }
            let mut data = f.data[..f.synced_len].to_vec();
            // Any subset of the pending writes, in any order, the last one torn.
            let mut chosen: Vec<(usize, usize)> = f
                .pending
                .iter()
                .copied()
                .filter(|_| rng.random_bool(0.5))
                .collect();
            shuffle(&mut chosen, rng);
            let n = chosen.len();
            // Half the time the last write is torn; else every chosen write
            // landed whole (as when the machine lost power after the
            // writes reached the disk but before a sync said so).
            let tear = rng.random_bool(0.5);
            for (i, (start, end)) in chosen.into_iter().enumerate() {
                let end = if tear && i + 1 == n {
                    start + rng.random_range(0..=end - start)
                } else {
                    end
                };
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[start..end].copy_from_slice(&f.data[start..end]);
            }
            // LocalDir keeps a sparse tail of zeros past the data of a file
            // it is writing (see local.rs), which a crash leaves behind.
            if f.synced_len > 0 && rng.random_bool(0.25) {
                data.resize(data.len() + rng.random_range(1..=SIM_SPARSE_TAIL), 0);
            }
            let synced_len = data.len();
            files.insert(
                id,
                SimFile {
                    data,
                    synced_len,
                    pending: Vec::new(),
                    name_durable: true,
                },
            );
        }
        let after = SimState {
            files,
            meta: st.meta.clone(),
            seed: rng.random(),
            ..SimState::default()
        };
        SimStorage {
            state: Arc::new(Mutex::new(after)),
        }
    }

    /// Overwrites bytes of a segment in place, as media corruption would. For tests.
    pub fn corrupt(&self, id: SegmentId, offset: usize, bytes: &[u8]) {
        let mut st = self.state.lock();
        let f = st.files.get_mut(&id).expect("corrupt: no such segment");
        f.data[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    /// Current bytes of a segment, as the running process sees them. For tests.
    pub fn segment_bytes(&self, id: SegmentId) -> Option<Vec<u8>> {
        self.state.lock().files.get(&id).map(|f| f.data.clone())
    }
}

fn shuffle<T>(v: &mut [T], rng: &mut impl Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.random_range(0..=i);
        v.swap(i, j);
    }
}

impl Storage for SimStorage {
    fn list_segments(&self) -> Result<Vec<SegmentId>, IoError> {
        let mut st = self.state.lock();
        st.check(Op::List, "store")?;
        Ok(st.files.keys().copied().collect())
    }

    fn create_segment(&self, id: SegmentId) -> Result<Box<dyn SegmentWriter>, IoError> {
        let name = segment_file_name(id);
        let mut st = self.state.lock();
        st.check(Op::Create, &name)?;
        if st.files.contains_key(&id) {
            return Err(IoError::new(
                "create segment",
                name,
                io::Error::from(io::ErrorKind::AlreadyExists),
            ));
        }
        st.files.insert(
            id,
            SimFile {
                name_durable: true,
                ..SimFile::default()
            },
        );
        Ok(Box::new(SimWriter {
            state: self.state.clone(),
            id,
            name,
            len: 0,
            broken: false,
        }))
    }

    fn open_segment(&self, id: SegmentId) -> Result<Arc<dyn SegmentReader>, IoError> {
        let name = segment_file_name(id);
        let mut st = self.state.lock();
        st.check(Op::Open, &name)?;
        if !st.files.contains_key(&id) {
            return Err(IoError::new(
                "open segment",
                name,
                io::Error::from(io::ErrorKind::NotFound),
            ));
        }
        Ok(Arc::new(SimReader {
            state: self.state.clone(),
            id,
            name,
        }))
    }

    fn delete_segment(&self, id: SegmentId) -> Result<(), IoError> {
        let name = segment_file_name(id);
        let mut st = self.state.lock();
        st.check(Op::Delete, &name)?;
        st.files.remove(&id).map(|_| ()).ok_or_else(|| {
            IoError::new(
                "delete segment",
                name,
                io::Error::from(io::ErrorKind::NotFound),
            )
        })
    }

    fn read_meta(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        let mut st = self.state.lock();
        st.check(Op::ReadMeta, name)?;
        Ok(st.meta.get(name).cloned())
    }

    fn write_meta(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        let mut st = self.state.lock();
        st.check(Op::WriteMeta, name)?;
        st.meta.insert(name.to_string(), bytes.to_vec());
        Ok(())
    }

    fn segment_name(&self, id: SegmentId) -> String {
        segment_file_name(id)
    }
}

struct SimWriter {
    state: Arc<Mutex<SimState>>,
    id: SegmentId,
    name: String,
    len: u64,
    /// Set after a failed append: the contract forbids appending again.
    broken: bool,
}

impl SegmentWriter for SimWriter {
    fn append(&mut self, bytes: &[u8]) -> Result<(), IoError> {
        assert!(
            !self.broken,
            "append after a failed append to {}",
            self.name
        );
        let mut st = self.state.lock();
        let quota_hit = st
            .quota
            .is_some_and(|q| st.total_bytes() + bytes.len() as u64 > q);
        let result = match st.check(Op::Append, &self.name) {
            Ok(()) if quota_hit => {
                st.quota_hits += 1;
                Err(IoError::new(
                    "append to",
                    &self.name,
                    Fault::NoSpace.error(),
                ))
            }
            r => r,
        };
        // A failed append may still leave a prefix of its bytes behind.
        let kept = match &result {
            Ok(()) => bytes.len(),
            Err(_) if st.dead => return result,
            Err(_) => {
                self.broken = true;
                (next_random(&mut st.seed) % (bytes.len() as u64 + 1)) as usize
            }
        };
        let f = st
            .files
            .get_mut(&self.id)
            .expect("segment vanished under its writer");
        let start = f.data.len();
        f.data.extend_from_slice(&bytes[..kept]);
        if kept > 0 {
            f.pending.push((start, start + kept));
        }
        result.map(|()| self.len += bytes.len() as u64)
    }

    fn sync(&mut self) -> Result<(), IoError> {
        let mut st = self.state.lock();
        st.check(Op::Sync, &self.name)?;
        st.syncs += 1;
        let f = st
            .files
            .get_mut(&self.id)
            .expect("segment vanished under its writer");
        f.synced_len = f.data.len();
        f.pending.clear();
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

struct SimReader {
    state: Arc<Mutex<SimState>>,
    id: SegmentId,
    name: String,
}

impl SegmentReader for SimReader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let mut st = self.state.lock();
        st.check(Op::Read, &self.name)?;
        st.reads += 1;
        let f = st.files.get(&self.id).ok_or_else(|| {
            IoError::new("read", &self.name, io::Error::from(io::ErrorKind::NotFound))
        })?;
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= f.data.len() as u64);
        match end {
            Some(end) => {
                buf.copy_from_slice(&f.data[offset as usize..end as usize]);
                Ok(())
            }
            None => Err(IoError::new(
                "read",
                &self.name,
                io::Error::from(io::ErrorKind::UnexpectedEof),
            )),
        }
    }

    fn size(&self) -> Result<u64, IoError> {
        let mut st = self.state.lock();
        st.check(Op::Read, &self.name)?;
        Ok(st.files.get(&self.id).map_or(0, |f| f.data.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng(seed: u64) -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(seed)
    }

    #[test]
    fn synced_bytes_always_survive() {
        let mut seen_tail = false;
        for seed in 0..200 {
            let sim = SimStorage::new();
            let mut w = sim.create_segment(1).unwrap();
            w.append(b"durable").unwrap();
            w.sync().unwrap();
            w.append(b"-maybe1").unwrap();
            w.append(b"-maybe2").unwrap();
            let after = sim.crash(&mut rng(seed));
            let bytes = after.segment_bytes(1).unwrap();
            assert!(bytes.starts_with(b"durable"), "seed {seed}: {bytes:?}");
            // Past what was written there are only zeros (a sparse tail).
            let written = b"durable-maybe1-maybe2".len().min(bytes.len());
            assert!(bytes[written..].iter().all(|&b| b == 0), "seed {seed}");
            seen_tail |= bytes.len() > b"durable-maybe1-maybe2".len();
        }
        assert!(seen_tail, "a crash sometimes leaves a sparse tail");
    }

    #[test]
    fn unsynced_writes_are_dropped_reordered_and_torn() {
        let mut seen_lost = false;
        let mut seen_hole = false;
        let mut seen_torn = false;
        let mut seen_all = false;
        for seed in 0..500 {
            let sim = SimStorage::new();
            let mut w = sim.create_segment(1).unwrap();
            w.append(b"AAAA").unwrap();
            w.append(b"BBBB").unwrap();
            let bytes = sim.crash(&mut rng(seed)).segment_bytes(1).unwrap();
            match bytes.as_slice() {
                b"" => seen_lost = true,
                b"AAAABBBB" => seen_all = true,
                [0, 0, 0, 0, rest @ ..] if !rest.is_empty() => seen_hole = true,
                b if b.len() % 4 != 0 => seen_torn = true,
                _ => {}
            }
        }
        assert!(seen_lost && seen_hole && seen_torn && seen_all);
    }

    #[test]
    fn the_crashed_handle_is_dead() {
        let sim = SimStorage::new();
        let mut w = sim.create_segment(1).unwrap();
        let _after = sim.crash(&mut rng(1));
        for e in [
            w.append(b"x").unwrap_err(),
            sim.list_segments().unwrap_err(),
        ] {
            assert!(
                e.to_string().contains("simulated machine has crashed"),
                "{e}"
            );
        }
    }

    #[test]
    fn injected_faults_fire_once_or_stick() {
        let sim = SimStorage::new();
        sim.inject(Some(Op::Sync), 1, Fault::Io, false);
        let mut w = sim.create_segment(1).unwrap();
        w.sync().unwrap();
        let e = w.sync().unwrap_err();
        assert!(
            !e.is_full() && e.to_string().contains("injected EIO"),
            "{e}"
        );
        w.sync().unwrap();
        sim.inject(Some(Op::Create), 0, Fault::NoSpace, true);
        assert!(sim.create_segment(2).err().unwrap().is_full());
        assert!(sim.create_segment(3).err().unwrap().is_full());
        sim.heal();
        sim.create_segment(3).unwrap();
        let fired: Vec<_> = sim.faults_fired().into_iter().collect();
        assert_eq!(
            fired,
            [
                ((Op::Create, Fault::NoSpace), 2),
                ((Op::Sync, Fault::Io), 1)
            ]
        );
        assert_eq!(sim.quota_hits(), 0);
    }

    #[test]
    fn quota_makes_appends_fail_with_enospc() {
        let sim = SimStorage::new();
        sim.set_quota(Some(10));
        let mut w = sim.create_segment(1).unwrap();
        w.append(b"12345678").unwrap();
        assert!(w.append(b"abcdef").unwrap_err().is_full());
        assert_eq!(w.len(), 8);
        assert_eq!(sim.quota_hits(), 1);
        assert!(sim.faults_fired().is_empty());
    }
}
