//! The pager: finds nodes by page reference, through a page cache with a
//! limit in bytes, reading and validating pages on a miss with one positioned
//! read each.

use crate::leaf::{BigValue, LeafData};
use crate::node::{ChildRef, DiskRef, LeafBase, Node};
use crate::page::{decode_delta, decode_page};
use crate::written::Durable;
use kivi_log::{decode_record_at, Corruption, Error, PageRef, RecordType};
use kivi_storage::{SegmentReader, Storage};
use parking_lot::RwLock;
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone)]
struct NodeWeight;

impl Weighter<u64, Arc<Node>> for NodeWeight {
    fn weight(&self, _key: &u64, node: &Arc<Node>) -> u64 {
        node.mem_bytes().max(1) as u64
    }
}

/// Counters for `stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PagerStats {
    /// Bytes of pages in the cache now.
    pub cache_bytes: u64,
    /// The cache's budget in bytes (the memory budget less the resident
    /// nodes').
    pub cache_capacity: u64,
    /// Bytes of written nodes kept in memory in the tree, outside the cache.
    pub resident_bytes: u64,
    /// Bytes of nodes changes made that no durable checkpoint has written.
    pub dirty_bytes: u64,
    /// Pages in the cache now.
    pub cache_pages: u64,
    /// Lookups the cache answered.
    pub hits: u64,
    /// Lookups the cache did not answer.
    pub misses: u64,
    /// Page records read from storage.
    pub page_reads: u64,
    /// Blob records (out-of-line values) read from storage.
    pub blob_reads: u64,
}

/// Segments the pager keeps open for reading, at most. Past it, opening one
/// more closes another (whichever the map yields first: a reader in use
/// stays valid, its `Arc` keeps the file open until that read is done). A
/// store spread over more segments than this pays an open per read of a
/// segment not kept open; bounded file handles matter more.
pub const MAX_OPEN_SEGMENTS: usize = 256;

/// Reads pages and blobs from storage for the tree, through a page cache
/// bounded in bytes, and keeps the books of what memory the tree's nodes
/// hold (cached, resident, dirty) and which checkpoints are durable.
pub struct Pager {
    storage: Arc<dyn Storage>,
    cache: Cache<u64, Arc<Node>, NodeWeight>,
    /// The memory budget shared by the cache and the resident nodes.
    budget: u64,
    /// Bytes of durably written nodes kept in memory in the tree itself (see
    /// `checkpoint::release_written`), reached without a cache lookup.
    resident: Arc<AtomicU64>,
    /// Bytes of nodes made by changes and not yet durably written (see
    /// `Node::mark_dirty`): what only a checkpoint can free.
    dirty: Arc<AtomicU64>,
    /// Open segments, at most `max_open` (a file handle each).
    readers: RwLock<HashMap<u32, Arc<dyn SegmentReader>>>,
    max_open: usize,
    /// Newest checkpoint generation known durable: a node written by a
    /// checkpoint of this generation or older (and not in `failed`) may be
    /// dropped from memory.
    durable_generation: AtomicU64,
    /// Generations whose checkpoint failed, ascending. Their marks stay on
    /// nodes that later checkpoints do not rewrite (the cleaner's copies of
    /// unchanged pages, children a slice keeps), so "older than a durable
    /// generation" alone would take what they wrote, never made durable and
    /// abandoned, for durable. Grows by 8 bytes per failed checkpoint since
    /// open: marks carry no back-pointer to clear them by, and failures are
    /// few (each is an I/O error reported to the user).
    failed_generations: RwLock<Vec<u64>>,
    page_reads: AtomicU64,
    blob_reads: AtomicU64,
}

impl std::fmt::Debug for Pager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pager")
            .field("cache_bytes", &self.cache.weight())
            .finish()
    }
}

impl Pager {
    /// A pager reading `storage`, with `cache_bytes` of memory for the cache
    /// and the resident nodes together (at least 1).
    pub fn new(storage: Arc<dyn Storage>, cache_bytes: u64) -> Self {
        // Estimated item count only sizes the hash table; weight is the limit.
        let items = (cache_bytes / 2048).clamp(64, 1 << 22) as usize;
        Pager {
            storage,
            cache: Cache::with_weighter(items, cache_bytes.max(1), NodeWeight),
            budget: cache_bytes.max(1),
            resident: Arc::new(AtomicU64::new(0)),
            dirty: Arc::new(AtomicU64::new(0)),
            readers: RwLock::new(HashMap::new()),
            max_open: MAX_OPEN_SEGMENTS,
            durable_generation: AtomicU64::new(0),
            failed_generations: RwLock::new(Vec::new()),
            page_reads: AtomicU64::new(0),
            blob_reads: AtomicU64::new(0),
        }
    }

    /// The storage it reads.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Bytes of nodes changes made that no durable checkpoint has written.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty.load(Ordering::Relaxed)
    }

    pub(crate) fn dirty_counter(&self) -> &Arc<AtomicU64> {
        &self.dirty
    }

    /// Which checkpoint generations are durable now.
    pub fn durable_generations(&self) -> Durable {
        Durable::new(
            self.durable_generation.load(Ordering::Acquire),
            self.failed_generations.read().clone(),
        )
    }

    /// Checkpoint `generation` is durable, and so is every older one that
    /// did not fail.
    pub fn set_durable_generation(&self, generation: u64) {
        debug_assert!(!self.failed_generations.read().contains(&generation));
        self.durable_generation
            .fetch_max(generation, Ordering::AcqRel);
    }

    /// Checkpoint `generation` failed: what it wrote is never to be read,
    /// whatever generation becomes durable later.
    pub fn set_failed_generation(&self, generation: u64) {
        assert!(
            generation > self.durable_generation.load(Ordering::Acquire),
            "checkpoint {generation} failed after a newer one was durable"
        );
        let mut failed = self.failed_generations.write();
        if let Err(i) = failed.binary_search(&generation) {
            failed.insert(i, generation);
        }
    }

    /// Where `node` is durably on disk, if it is.
    pub fn durable_page(&self, node: &Node) -> Option<DiskRef> {
        let durable = self.durable_generations();
        node.written.get(|g| durable.holds(g))
    }

    /// Keeps `node` in memory in the tree if the budget allows: resident
    /// nodes and the cache share `cache_bytes`, resident nodes taking at most
    /// three quarters. Returns whether it stays.
    pub fn try_make_resident(&self, node: &Node) -> bool {
        if node.is_resident() {
            return true;
        }
        let limit = self.budget / 4 * 3;
        if self.resident.load(Ordering::Relaxed) + node.mem_bytes() as u64 > limit {
            return false;
        }
        node.make_resident(&self.resident)
    }

    /// Bytes more that resident nodes may take.
    pub fn resident_room(&self) -> u64 {
        (self.budget / 4 * 3).saturating_sub(self.resident.load(Ordering::Relaxed))
    }

    /// Hands a durably written node, reached so far by pointer, to the page
    /// cache: it stops counting as resident and is found by its page from
    /// now on (a change is about to replace it in the tree, and the changed
    /// leaf names this node's page as its base).
    pub fn adopt(&self, at: DiskRef, node: Arc<Node>) {
        debug_assert!(self.durable_page(&node) == Some(at));
        node.give_up_residency();
        self.insert_clean(at, node);
    }

    /// A leaf's base: borrowed when it is in memory, read through the page
    /// cache when the leaf names it by page.
    #[inline]
    pub fn base<'a>(&self, base: &'a LeafBase) -> Result<BaseHold<'a>, Error> {
        match base {
            LeafBase::Mem(d) => Ok(BaseHold::Borrowed(d)),
            LeafBase::Page(at) => {
                let node = self.load(*at, 0)?;
                if let Some((LeafBase::Mem(_), None)) = node.leaf_parts() {
                    return Ok(BaseHold::Loaded(node));
                }
                // The cache holds the page's content as a leaf with a delta
                // (a written leaf without a twin): read the plain page.
                let node = self.load_uncached(*at, 0)?;
                if !matches!(node.leaf_parts(), Some((LeafBase::Mem(_), None))) {
                    return Err(self.corrupt(at.page, "a leaf's base is a delta page"));
                }
                self.insert_clean(*at, node.clone());
                Ok(BaseHold::Loaded(node))
            }
        }
    }

    /// Starts reading `page` if the cache does not hold it, without waiting
    /// (see `SegmentReader::will_need`): work that is about to read many
    /// pages one after another asks for all of them first, and the device
    /// serves them side by side.
    pub fn prefetch(&self, page: PageRef) {
        if self.cache.contains_key(&page.addr.as_u64()) {
            return;
        }
        if let Ok(reader) = self.reader(page.addr.segment) {
            reader.will_need(u64::from(page.addr.offset), u64::from(page.len));
        }
    }

    /// Prefetches what reading `child` would read from storage: its page,
    /// or the page a leaf in memory names as its base.
    pub fn prefetch_child(&self, child: &ChildRef) {
        match child {
            ChildRef::Disk(d) => self.prefetch(d.page),
            ChildRef::Mem(node, _) => {
                if let Some((LeafBase::Page(at), _)) = node.leaf_parts() {
                    self.prefetch(at.page);
                }
            }
        }
    }

    /// Gives the cache what resident nodes leave of the budget (at least a
    /// quarter). Called after resident nodes change.
    pub fn rebalance(&self) {
        let resident = self.resident.load(Ordering::Relaxed);
        let room = self.budget.saturating_sub(resident).max(self.budget / 4);
        if room != self.cache.capacity() {
            self.cache.set_capacity(room);
        }
    }

    /// The counters and sizes as of now.
    pub fn stats(&self) -> PagerStats {
        PagerStats {
            cache_bytes: self.cache.weight(),
            cache_capacity: self.cache.capacity(),
            resident_bytes: self.resident.load(Ordering::Relaxed),
            dirty_bytes: self.dirty_bytes(),
            cache_pages: self.cache.len() as u64,
            hits: self.cache.hits(),
            misses: self.cache.misses(),
            page_reads: self.page_reads.load(Ordering::Relaxed),
            blob_reads: self.blob_reads.load(Ordering::Relaxed),
        }
    }

    /// Sets the most segments kept open (at least 1); for tests.
    pub fn with_open_limit(mut self, max_open: usize) -> Self {
        self.max_open = max_open.max(1);
        self
    }

    /// Segments open for reading now.
    pub fn open_segments(&self) -> usize {
        self.readers.read().len()
    }

    fn reader(&self, segment: u32) -> Result<Arc<dyn SegmentReader>, Error> {
        if let Some(r) = self.readers.read().get(&segment) {
            return Ok(r.clone());
        }
        let r = self.storage.open_segment(u64::from(segment))?;
        // Pages are read one at a time, wherever they are; whatever is to
        // be read next is asked for explicitly (`prefetch`).
        r.reads_at_random();
        let mut readers = self.readers.write();
        while readers.len() >= self.max_open {
            let victim = *readers.keys().next().expect("the map is not empty");
            readers.remove(&victim);
        }
        readers.insert(segment, r.clone());
        debug_assert!(readers.len() <= self.max_open);
        Ok(r)
    }

    fn corrupt(&self, page: PageRef, what: impl Into<String>) -> Error {
        Error::Corrupt(Corruption::new(
            self.storage.segment_name(u64::from(page.addr.segment)),
            u64::from(page.addr.offset),
            what,
        ))
    }

    /// Reads a whole record with one positioned read and checks its frame.
    fn read_record(&self, page: PageRef, ty: RecordType) -> Result<Vec<u8>, Error> {
        self.read_record_of(page, &[ty]).map(|(_, body)| body)
    }

    /// Reads a whole record that must be of one of the types `types`.
    fn read_record_of(
        &self,
        page: PageRef,
        types: &[RecordType],
    ) -> Result<(RecordType, Vec<u8>), Error> {
        let ty = types[0];
        let reader = match self.reader(page.addr.segment) {
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(self.corrupt(page, "reference to a segment that does not exist"));
            }
            r => r?,
        };
        let mut buf = vec![0u8; page.len as usize];
        if let Err(e) = reader.read_at(u64::from(page.addr.offset), &mut buf) {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                return Err(self.corrupt(page, "reference points past the end of its segment"));
            }
            return Err(e.into());
        }
        match decode_record_at(
            &buf,
            u64::from(page.addr.segment),
            u64::from(page.addr.offset),
        ) {
            Ok((found, _, n)) if types.contains(&found) && n == buf.len() => {}
            Ok((found, _, _)) if !types.contains(&found) => {
                return Err(self.corrupt(page, format!("expected a {ty:?} record, found {found:?}")))
            }
            Ok(_) => return Err(self.corrupt(page, "record length differs from its reference")),
            Err(e) => return Err(self.corrupt(page, e.describe())),
        }
        let found = RecordType::from_u8(buf[8]).expect("decoded above");
        buf.drain(..kivi_log::RECORD_HEADER_LEN);
        Ok((found, buf))
    }

    /// Reads and decodes the node at `at`: a page, or at level 0 a page or
    /// a delta page.
    fn read_node(&self, at: DiskRef, level: u8) -> Result<Node, Error> {
        let page = at.page;
        self.page_reads.fetch_add(1, Ordering::Relaxed);
        let types: &[RecordType] = if level == 0 {
            &[RecordType::Page, RecordType::Delta]
        } else {
            &[RecordType::Page]
        };
        let (ty, body) = self.read_record_of(page, types)?;
        let node = match ty {
            RecordType::Delta => decode_delta(&body, at),
            _ => decode_page(&body, at, level),
        };
        node.map_err(|what| self.corrupt(page, what))
    }

    /// The node stored at `page`, which must be at `level`.
    pub fn load(&self, at: DiskRef, level: u8) -> Result<Arc<Node>, Error> {
        let page = at.page;
        let key = page.addr.as_u64();
        if let Some(node) = self.cache.get(&key) {
            if node.level() != level {
                return Err(self.corrupt(
                    page,
                    format!("page at level {} where level {level} belongs", node.level()),
                ));
            }
            return Ok(node);
        }
        let node = Arc::new(self.read_node(at, level)?);
        self.cache.insert(key, node.clone());
        Ok(node)
    }

    /// Lookups the cache could not answer so far (`stats().misses`, without
    /// the rest of the stats).
    pub fn cache_misses(&self) -> u64 {
        self.cache.misses()
    }

    /// The node the cache holds for `at`, if it holds one (not counted as a
    /// lookup: see `link_cached`).
    pub fn cached(&self, at: DiskRef) -> Option<Arc<Node>> {
        self.cache.peek(&at.page.addr.as_u64())
    }

    /// Reads and validates the page at `page` from storage, bypassing the cache.
    pub fn load_uncached(&self, at: DiskRef, level: u8) -> Result<Arc<Node>, Error> {
        Ok(Arc::new(self.read_node(at, level)?))
    }

    /// The node at `at` for the cleaner to copy: from the cache if it is
    /// there, else read without being cached (copying a segment's pages
    /// should not push the working set out).
    pub fn load_to_copy(&self, at: DiskRef, level: u8) -> Result<Arc<Node>, Error> {
        match self.cache.get(&at.page.addr.as_u64()) {
            Some(node) if node.level() == level => Ok(node),
            _ => self.load_uncached(at, level),
        }
    }

    /// Forgets an open segment (it is being deleted).
    pub fn close_segment(&self, segment: u32) {
        self.readers.write().remove(&segment);
    }

    /// The child a reference points to, at `level`.
    #[inline]
    pub fn resolve(&self, child: &ChildRef, level: u8) -> Result<Arc<Node>, Error> {
        match child {
            ChildRef::Mem(node, _) => Ok(node.clone()),
            ChildRef::Disk(at) => self.load(*at, level),
        }
    }

    /// Puts a node that is durably at `page` into the cache. Cached leaves
    /// hold their entries: a leaf whose base is only a page may lose it
    /// when the cleaner deletes that page's segment.
    pub fn insert_clean(&self, at: DiskRef, node: Arc<Node>) {
        debug_assert!(node
            .leaf_parts()
            .is_none_or(|(b, _)| matches!(b, LeafBase::Mem(_))));
        self.cache.insert(at.page.addr.as_u64(), node);
    }

    /// The bytes of an out-of-line value.
    pub fn read_big(&self, big: &BigValue) -> Result<Vec<u8>, Error> {
        if let Some(bytes) = &big.bytes {
            return Ok(bytes.to_vec());
        }
        // The newest durable place: a copy the cleaner is writing is not
        // read before its checkpoint is durable.
        let durable = self.durable_generations();
        let page = big
            .written
            .get(|g| durable.holds(g))
            .expect("big value with neither bytes nor durable blob");
        self.blob_reads.fetch_add(1, Ordering::Relaxed);
        let body = self.read_record(page, RecordType::Blob)?;
        if body.len() != big.len as usize {
            return Err(self.corrupt(page, "blob length differs from its reference"));
        }
        Ok(body)
    }

    /// Empties the cache (for tests and benchmarks of cold reads).
    pub fn clear_cache(&self) {
        self.cache.clear();
    }
}

/// A leaf's base entries, held while they are read: borrowed from the leaf,
/// or the cached page node that holds them.
pub enum BaseHold<'a> {
    Borrowed(&'a LeafData),
    Loaded(Arc<Node>),
}

impl std::ops::Deref for BaseHold<'_> {
    type Target = LeafData;

    #[inline]
    fn deref(&self) -> &LeafData {
        match self {
            BaseHold::Borrowed(d) => d,
            BaseHold::Loaded(node) => match node.leaf_parts() {
                Some((LeafBase::Mem(d), _)) => d,
                // `Pager::base` hands out only plain leaves.
                _ => unreachable!("a loaded base is a plain leaf"),
            },
        }
    }
}
