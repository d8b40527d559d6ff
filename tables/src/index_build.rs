//! Building a `.spi` from a `.spl`: sizing and hash choice as sparkey does,
//! fresh or incremental, in memory or region by region within a memory
//! limit (`partition.rs`), always producing the same bytes.

use crate::atomic_file::{self, TempGuard};
use crate::bytes::read_le;
use crate::error::{Error, Result};
use crate::hash::HashSize;
use crate::header::{IndexHeader, LogHeader, INDEX_HEADER_LEN, LOG_HEADER_LEN};
use crate::limits::DEFAULT_MEMORY_LIMIT;
use crate::log::{EntryKind, Location, LogData};
use crate::partition::{self, Event, RegionOps, RegionWriter, Stop};
use crate::robin::{KeyReader, MemTable, Op, OpKind, SlotStats, LOOKAHEAD};
use crate::slots::SlotVec;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Most region files open at once while partitioning; more regions take
/// more passes over the log.
const MAX_OPEN_REGIONS: u64 = 256;
/// Re-runs of the regions chasing wrap-around events before giving up and
/// building in memory (never reached in practice: see partition.rs).
const MAX_WRAP_ROUNDS: u64 = 64;

/// How to build an index.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Force 4- or 8-byte hashes; `None` chooses as sparkey does.
    pub hash_size: Option<HashSize>,
    /// Seed of a fresh build; `None` draws a random one. Incremental builds
    /// keep the previous index's seed.
    pub seed: Option<u32>,
    /// Memory the slot table may use (default 256 MiB); larger tables are
    /// built region by region through temporary files.
    pub memory_limit: u64,
    /// Reuse a previous index at the output path when sparkey would
    /// (same log, version 1.1, same hash size).
    pub incremental: bool,
    /// Where temporary files go (default: beside the index).
    pub temp_dir: Option<PathBuf>,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            hash_size: None,
            seed: None,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            incremental: false,
            temp_dir: None,
        }
    }
}

/// What a build did.
#[derive(Debug, Clone)]
pub struct BuildReport {
    /// The header of the index written (or kept, when `unchanged`).
    pub header: IndexHeader,
    /// Regions the slot table was cut into (1: built in memory).
    pub regions: u64,
    /// Region replays, counting re-runs for wrap-around events.
    pub region_runs: u64,
    /// The partitioned build met a cluster spanning nearly the whole table
    /// and built in memory instead.
    pub fell_back: bool,
    /// The build started from the previous index and added the entries
    /// after its `data_end`, instead of reading the whole log.
    pub incremental: bool,
    /// The previous index already covered the whole log: nothing written.
    pub unchanged: bool,
}

/// sparkey's capacity for `n` entries: n × 1.3 in IEEE double, truncated,
/// low bit set.
pub fn capacity_for(n: u64) -> u64 {
    ((n as f64 * 1.3) as u64) | 1
}

/// What a build needs to know about the table it makes.
#[derive(Debug, Clone, Copy)]
struct Params {
    cap: u64,
    hash_size: HashSize,
    address_size: u32,
    bits: u32,
    seed: u32,
}

impl Params {
    fn slot_size(&self) -> u64 {
        u64::from(self.hash_size.bytes() + self.address_size)
    }
}

fn address_size(data_end: u64, bits: u32) -> u32 {
    if bits < 32 && data_end < (1u64 << (32 - bits)) {
        4
    } else {
        8
    }
}

/// A previous index that an incremental build reuses. It is mapped, not
/// read into memory: the pass reads its slots in order and releases them as
/// it goes, so a previous index larger than the memory limit costs none of
/// it. (The build renames the new index over this file; the mapping keeps
/// reading the old one.)
struct Previous {
    header: IndexHeader,
    map: memmap2::Mmap,
}

impl Previous {
    /// Lets this process drop the mapped pages of bytes `[from, to)`.
    fn release(&self, from: u64, to: u64) {
        release_mapped(&self.map, from, to);
    }
}

/// Lets this process drop the pages of `map` in bytes `[from, to)` (the
/// kernel keeps them in its page cache and maps them again if they are
/// touched), so a pass over a file larger than the build's memory limit
/// does not keep the whole file resident.
fn release_mapped(map: &memmap2::Mmap, from: u64, to: u64) {
    let to = to.min(map.len() as u64);
    if from >= to {
        return;
    }
    // SAFETY: MADV_DONTNEED on a read-only shared file mapping only unmaps
    // pages; a later access maps the same file bytes again (kivi never
    // modifies a log it builds from, nor the previous index it reads), so
    // every slice of the map that is alive keeps reading what it read
    // before. Errors are ignored: the advice only saves memory.
    let _ = unsafe {
        map.unchecked_advise_range(
            memmap2::UncheckedAdvice::DontNeed,
            from as usize,
            (to - from) as usize,
        )
    };
}

/// Maps a log for reading while it is built from.
pub(crate) struct MappedLog {
    pub path: PathBuf,
    pub header: LogHeader,
    map: Option<memmap2::Mmap>,
}

impl MappedLog {
    pub fn open(path: &Path) -> Result<MappedLog> {
        let (header, map) = crate::reader::map_log(path)?;
        Ok(MappedLog {
            path: path.to_path_buf(),
            header,
            map,
        })
    }

    /// Lets this process drop the mapped pages of log bytes `[from, to)`;
    /// see `release_mapped`.
    pub fn release(&self, from: u64, to: u64) {
        if let Some(m) = &self.map {
            release_mapped(m, from, to);
        }
    }

    pub fn data(&self) -> LogData<'_> {
        let bytes: &[u8] = match &self.map {
            Some(m) => m,
            None => &[],
        };
        LogData::new(
            &bytes[..self.header.data_end as usize],
            &self.header,
            &self.path,
        )
    }
}

/// Builds the index of the log at `log_path` into `index_path` (written
/// under a temporary name, fsync'd, renamed into place).
pub fn build_index(log_path: &Path, index_path: &Path, opts: &IndexOptions) -> Result<BuildReport> {
    let log = MappedLog::open(log_path)?;
    build_index_from(&log, index_path, opts)
}

pub(crate) fn build_index_from(
    log: &MappedLog,
    index_path: &Path,
    opts: &IndexOptions,
) -> Result<BuildReport> {
    let lh = &log.header;
    let (params, previous) = match plan(log, index_path, opts)? {
        Plan::Unchanged(header) => {
            return Ok(BuildReport {
                header,
                regions: 0,
                region_runs: 0,
                fell_back: false,
                incremental: true,
                unchanged: true,
            })
        }
        Plan::Build(params, previous) => (params, previous),
    };
    let prev = previous.as_ref();
    let ops = OpSource {
        data: log.data(),
        map: log,
        params,
        prev,
        start: prev.map_or(LOG_HEADER_LEN as u64, |p| p.header.data_end),
    };

    let guard = TempGuard::beside(index_path);
    let tmp = guard.path().to_path_buf();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| Error::io(&tmp, "create", e))?;
    let file_len = INDEX_HEADER_LEN as u64 + params.cap * params.slot_size();
    file.set_len(file_len)
        .map_err(|e| Error::io(&tmp, "set length", e))?;
    let temp_dir = opts
        .temp_dir
        .clone()
        .unwrap_or_else(|| atomic_file::parent_dir(index_path).to_path_buf());
    let filled = fill_slots(&ops, &file, &tmp, opts.memory_limit, &temp_dir)?;

    // Statistics over the finished table, read back in slot order.
    let stats = match filled.stats {
        Some(s) => s,
        None => table_stats(&file, &tmp, &params)?,
    };
    let old_garbage = prev.map_or(0, |p| p.header.garbage_size);
    let header = IndexHeader {
        major: 1,
        minor: 1,
        file_identifier: lh.file_identifier,
        hash_seed: params.seed,
        data_end: lh.data_end,
        max_key_len: lh.max_key_len,
        max_value_len: lh.max_value_len,
        num_puts: lh.num_puts,
        garbage_size: old_garbage + filled.garbage,
        num_entries: stats.num_entries,
        address_size: params.address_size,
        hash_size: params.hash_size,
        hash_capacity: params.cap,
        max_displacement: stats.max_displacement,
        entry_block_bits: params.bits,
        hash_collisions: stats.hash_collisions,
        total_displacement: stats.total_displacement,
    };
    file.write_all_at(&header.to_bytes(), 0)
        .map_err(|e| Error::io(&tmp, "write header", e))?;
    atomic_file::replace(file, guard, index_path)?;
    Ok(BuildReport {
        header,
        regions: filled.regions,
        region_runs: filled.region_runs,
        fell_back: filled.fell_back,
        incremental: prev.is_some(),
        unchanged: false,
    })
}

/// What a build will make.
enum Plan {
    /// The previous index already covers the whole log.
    Unchanged(IndexHeader),
    /// A table of these parameters, incrementally from a previous index or
    /// fresh.
    Build(Params, Option<Previous>),
}

/// Sizes the table and chooses its hash as sparkey does, and whether the
/// previous index at `index_path` is reused.
fn plan(log: &MappedLog, index_path: &Path, opts: &IndexOptions) -> Result<Plan> {
    let lh = &log.header;
    let bits = lh.entry_block_bits();
    let previous = if opts.incremental {
        load_previous(index_path, lh)?
    } else {
        None
    };
    let auto_size = |cap: u64, prev: Option<HashSize>| {
        opts.hash_size
            .unwrap_or(if cap >= 1 << 23 || prev == Some(HashSize::Eight) {
                HashSize::Eight
            } else {
                HashSize::Four
            })
    };
    // An incremental build applies only if the hash size stays the same;
    // otherwise a fresh build (sparkey's mixed rebuild double-counts garbage).
    let previous = previous.and_then(|p| {
        let cap =
            capacity_for(lh.num_puts.saturating_sub(p.header.num_puts) + p.header.num_entries);
        (auto_size(cap, Some(p.header.hash_size)) == p.header.hash_size).then_some((p, cap))
    });
    if let Some((p, _)) = &previous {
        if p.header.data_end == lh.data_end {
            return Ok(Plan::Unchanged(p.header.clone()));
        }
    }
    let (cap, hash_size, seed) = match &previous {
        Some((p, cap)) => (*cap, p.header.hash_size, p.header.hash_seed),
        None => {
            let cap = capacity_for(lh.num_puts);
            (
                cap,
                auto_size(cap, None),
                opts.seed.unwrap_or_else(rand::random),
            )
        }
    };
    let params = Params {
        cap,
        hash_size,
        address_size: address_size(lh.data_end, bits),
        bits,
        seed,
    };
    Ok(Plan::Build(params, previous.map(|(p, _)| p)))
}

/// What filling the slots did.
struct Filled {
    /// Garbage found: the DELETE entries and the entries their slots lost.
    garbage: u64,
    /// The slots' statistics if they were all in memory at once.
    stats: Option<SlotStats>,
    regions: u64,
    region_runs: u64,
    fell_back: bool,
}

/// Writes the slots of the table into `file`: in one piece when they take
/// at most seven eighths of the limit (the rest is I/O buffers and the log
/// pages not yet released); otherwise regions of half the limit, the other
/// half going to the buffers of the regions' files.
fn fill_slots(
    ops: &OpSource<'_>,
    file: &File,
    tmp: &Path,
    memory_limit: u64,
    temp_dir: &Path,
) -> Result<Filled> {
    let params = &ops.params;
    let keys = KeyReader {
        log: ops.data,
        bits: params.bits,
    };
    let slot_size = params.slot_size();
    let in_memory_slots = (memory_limit / 8 * 7 / slot_size).max(1);
    let region_slots = (memory_limit / 2 / slot_size).max(1);
    let mut delete_garbage = 0;
    let mut stats = None;
    let in_memory = |delete_garbage: &mut u64, stats: &mut Option<SlotStats>| {
        build_in_memory(ops, &keys, file, tmp, params, delete_garbage, stats)
    };
    if params.cap <= in_memory_slots {
        let g = in_memory(&mut delete_garbage, &mut stats)?;
        return Ok(Filled {
            garbage: delete_garbage + g,
            stats,
            regions: 1,
            region_runs: 1,
            fell_back: false,
        });
    }
    let regions = params.cap.div_ceil(region_slots);
    let partitioned = build_partitioned(
        ops,
        &keys,
        file,
        tmp,
        params,
        region_slots,
        memory_limit,
        temp_dir,
        &mut delete_garbage,
    )?;
    let (g, region_runs, fell_back) = match partitioned {
        Some((g, runs)) => (g, runs, false),
        None => {
            delete_garbage = 0;
            (in_memory(&mut delete_garbage, &mut stats)?, 1, true)
        }
    };
    Ok(Filled {
        garbage: delete_garbage + g,
        stats,
        regions,
        region_runs,
        fell_back,
    })
}

fn load_previous(index_path: &Path, lh: &LogHeader) -> Result<Option<Previous>> {
    let file = match std::fs::File::open(index_path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(index_path, "open previous index", e)),
    };
    let len = file
        .metadata()
        .map_err(|e| Error::io(index_path, "stat previous index", e))?
        .len();
    let head = crate::reader::read_prefix(&file, len, INDEX_HEADER_LEN, index_path)?;
    // A previous index that does not parse or belongs elsewhere is simply
    // not reused (sparkey does the same).
    let Ok(header) = IndexHeader::parse(&head, len, index_path) else {
        return Ok(None);
    };
    if header.file_identifier != lh.file_identifier
        || header.minor != 1
        || header.data_end > lh.data_end
        || header.num_puts > lh.num_puts
    {
        return Ok(None);
    }
    // `parse` checked that the file holds every slot the header declares.
    let used = INDEX_HEADER_LEN as u64 + header.hash_capacity * header.slot_size();
    debug_assert!(used <= len);
    let map = crate::reader::map(&file, used, index_path)?;
    Ok(Some(Previous { header, map }))
}

/// The operations of a build, in log order: the previous index's occupied
/// slots in slot order, then the log's entries after what it covered.
struct OpSource<'a> {
    data: LogData<'a>,
    /// Where the data is mapped from, to release what the pass has read.
    map: &'a MappedLog,
    params: Params,
    prev: Option<&'a Previous>,
    start: u64,
}

impl OpSource<'_> {
    /// Calls `f(seq, op)` for every operation; returns the garbage of the
    /// DELETE entries themselves.
    fn for_each(&self, f: &mut dyn FnMut(u64, Op) -> Result<()>) -> Result<u64> {
        let p = &self.params;
        let mut seq = 0u64;
        if let Some(prev) = self.prev {
            let h = &prev.header;
            let ss = h.slot_size() as usize;
            let hs = h.hash_size.bytes() as usize;
            let mut released = 0;
            for s in 0..h.hash_capacity as usize {
                let at = INDEX_HEADER_LEN + s * ss;
                if at as u64 >= released + RELEASE_STEP {
                    prev.release(released, at as u64);
                    released = at as u64;
                }
                let slot = &prev.map[at..at + ss];
                let hash = read_le(&slot[..hs]);
                let addr = read_le(&slot[hs..]);
                if addr == 0 {
                    continue;
                }
                let addr = Location::from_address(addr, h.entry_block_bits).address(p.bits);
                f(
                    seq,
                    Op {
                        hash,
                        addr,
                        kind: OpKind::Reinsert,
                    },
                )?;
                seq += 1;
            }
        }
        let mut garbage = 0;
        let mut cur =
            crate::log::LogCursor::starting_at(self.data, self.start, self.data.header.data_end);
        let mut released = self.start;
        while let Some(e) = cur.next()? {
            if e.loc.block >= released + RELEASE_STEP {
                // Everything before this entry (or its block) is read.
                self.map.release(released, e.loc.block);
                released = e.loc.block;
            }
            if p.bits < 64 && e.loc.ordinal >> p.bits != 0 {
                return Err(Error::corrupt(
                    self.data.path,
                    e.loc.block,
                    "more entries start in this block than max_entries_per_block says",
                ));
            }
            let hash = p.hash_size.hash(e.key, p.seed);
            let addr = e.loc.address(p.bits);
            let kind = match e.kind {
                EntryKind::Put => OpKind::Put,
                EntryKind::Delete => {
                    garbage += e.encoded_len;
                    OpKind::Delete
                }
            };
            f(seq, Op { hash, addr, kind })?;
            seq += 1;
        }
        Ok(garbage)
    }
}

/// Slots reserved past a region's end for the run of displaced entries
/// that crosses it (observed runs are tens of slots; more is reallocated).
const EXTENSION_RESERVE: u64 = 4096;

/// How much of the log a build's pass reads before it releases it.
const RELEASE_STEP: u64 = 8 << 20;

/// Writes the file bytes of slots `first..` (already in the file's layout).
fn write_slots(file: &File, tmp: &Path, p: &Params, first: u64, bytes: &[u8]) -> Result<()> {
    let slot_size = p.slot_size();
    file.write_all_at(bytes, INDEX_HEADER_LEN as u64 + first * slot_size)
        .map_err(|e| Error::io(tmp, "write slots", e))
}

fn build_in_memory(
    ops: &OpSource<'_>,
    keys: &KeyReader<'_>,
    file: &File,
    tmp: &Path,
    p: &Params,
    delete_garbage: &mut u64,
    stats: &mut Option<SlotStats>,
) -> Result<u64> {
    let mut t = MemTable::new(p.cap, p.hash_size.bytes(), p.address_size);
    // Applied in log order as they come, each `LOOKAHEAD` operations after
    // its slot was prefetched: the same table, with misses overlapped.
    // A fixed ring: operation i waits in slot i % LOOKAHEAD.
    const _: () = assert!(LOOKAHEAD.is_power_of_two());
    let mut ring = [Op {
        hash: 0,
        addr: 0,
        kind: OpKind::Put,
    }; LOOKAHEAD];
    let mut seen = 0usize;
    *delete_garbage = ops.for_each(&mut |_, op| {
        t.prefetch(&op);
        let slot = &mut ring[seen & (LOOKAHEAD - 1)];
        if seen >= LOOKAHEAD {
            t.apply(*slot, keys)?;
        }
        *slot = op;
        seen += 1;
        Ok(())
    })?;
    for i in seen.saturating_sub(LOOKAHEAD)..seen {
        t.apply(ring[i & (LOOKAHEAD - 1)], keys)?;
    }
    write_slots(file, tmp, p, 0, t.slots.bytes(0, p.cap as usize))?;
    let mut st = SlotStats::default();
    for i in 0..p.cap {
        let (h, a) = t.slots.get(i as usize);
        st.observe(h, a, p.cap);
    }
    *stats = Some(st.finish());
    Ok(t.garbage)
}

/// Returns (garbage found in slots, region runs), or `None` to fall back.
#[allow(clippy::too_many_arguments)]
fn build_partitioned(
    ops: &OpSource<'_>,
    keys: &KeyReader<'_>,
    file: &File,
    tmp: &Path,
    p: &Params,
    region_slots: u64,
    memory_limit: u64,
    temp_dir: &Path,
    delete_garbage: &mut u64,
) -> Result<Option<(u64, u64)>> {
    let cap = p.cap;
    let n = cap.div_ceil(region_slots);
    let dir = tempfile::Builder::new()
        .prefix(".kivi-index-build-")
        .tempdir_in(temp_dir)
        .map_err(|e| Error::io(temp_dir, "create temporary directory", e))?;
    let region_path = |r: u64| dir.path().join(format!("region-{r}"));
    // Half the limit is the region's slots; buffers share the other half.
    let buf = ((memory_limit / 4) / MAX_OPEN_REGIONS.min(n)).clamp(512, 1 << 20) as usize;
    let mut group = 0;
    while group < n {
        let end = (group + MAX_OPEN_REGIONS).min(n);
        let mut writers = (group..end)
            .map(|r| RegionWriter::create(region_path(r), buf))
            .collect::<Result<Vec<_>>>()?;
        *delete_garbage = ops.for_each(&mut |seq, op| {
            let r = (op.hash % cap) / region_slots;
            if r >= group && r < end {
                writers[(r - group) as usize].push(seq, &op)?;
            }
            Ok(())
        })?;
        for w in writers {
            w.finish()?;
        }
        group = end;
    }
    let bounds = |r: u64| (r * region_slots, ((r + 1) * region_slots).min(cap));
    let mut inputs: Vec<Vec<Event>> = vec![Vec::new(); n as usize];
    let mut garbage = vec![0u64; n as usize];
    let mut ran = vec![false; n as usize];
    let mut runs = 0;
    // Every region's slots live in this one allocation, in turn; room for
    // a run of displaced entries past the region's end is reserved too.
    let slot_size = p.slot_size() as usize;
    let mut spare: Vec<u8> =
        Vec::with_capacity((region_slots + EXTENSION_RESERVE) as usize * slot_size);
    for _round in 0..MAX_WRAP_ROUNDS {
        let mut r = 0;
        loop {
            let (a, b) = bounds(r);
            let mut src = RegionOps::open(&region_path(r), buf)?;
            let region = match partition::run_region(
                a,
                b,
                cap,
                *keys,
                &mut src,
                &inputs[r as usize],
                SlotVec::new(
                    (b - a) as usize,
                    p.hash_size.bytes(),
                    p.address_size,
                    std::mem::take(&mut spare),
                ),
            ) {
                Ok(region) => region,
                Err(Stop::Fallback) => return Ok(None),
                Err(Stop::Fail(e)) => return Err(e),
            };
            runs += 1;
            ran[r as usize] = true;
            write_slots(file, tmp, p, a, region.slots.bytes(0, (b - a) as usize))?;
            garbage[r as usize] = region.garbage;
            let next = ((r + 1) % n) as usize;
            let unchanged = inputs[next] == region.out;
            inputs[next] = region.out;
            spare = region.slots.into_buffer();
            if next == 0 {
                if unchanged {
                    return Ok(Some((garbage.iter().sum(), runs)));
                }
                break; // wrap-around events changed: run again from region 0
            }
            if unchanged && ran[next] {
                // Nothing downstream changes, and the wrap-around events
                // were already the input of region 0: a fixed point.
                return Ok(Some((garbage.iter().sum(), runs)));
            }
            r += 1;
        }
    }
    Ok(None)
}

fn table_stats(file: &File, tmp: &Path, p: &Params) -> Result<SlotStats> {
    let mut f = file.try_clone().map_err(|e| Error::io(tmp, "reopen", e))?;
    f.seek(SeekFrom::Start(INDEX_HEADER_LEN as u64))
        .map_err(|e| Error::io(tmp, "seek", e))?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let hs = p.hash_size.bytes() as usize;
    let ss = hs + p.address_size as usize;
    let mut slot = [0u8; 16];
    let mut st = SlotStats::default();
    for _ in 0..p.cap {
        r.read_exact(&mut slot[..ss])
            .map_err(|e| Error::io(tmp, "read back slots", e))?;
        st.observe(read_le(&slot[..hs]), read_le(&slot[hs..ss]), p.cap);
    }
    Ok(st.finish())
}
