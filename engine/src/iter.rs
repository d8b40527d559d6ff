//! Snapshots and ordered range iteration.

use crate::error::Result;
use crate::expiry::{is_live, Deadline, Millis};
use crate::store::Store;
use crate::version::Version;
use crate::write_buffer::{Chunk, WalkPosition};
use kivi_tree::{compare_keys, Cursor, ValueRef};
use std::cmp::Ordering;
use std::mem::ManuallyDrop;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

pub(crate) fn bound_owned<K: AsRef<[u8]>, R: RangeBounds<K>>(
    range: &R,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let own = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    (own(range.start_bound()), own(range.end_bound()))
}

/// A reader's hold on a version (a snapshot's, a scan's). Dropped, it hands
/// the version to the reclaimer if it was the last reference, so that a
/// reader never frees a superseded tree and write buffer itself.
struct Held {
    store: Arc<Store>,
    /// Taken only by `drop`.
    version: ManuallyDrop<Arc<Version>>,
}

impl Held {
    fn new(store: Arc<Store>, version: Arc<Version>) -> Self {
        Held {
            store,
            version: ManuallyDrop::new(version),
        }
    }

    fn version(&self) -> Arc<Version> {
        Arc::clone(&self.version)
    }
}

impl Clone for Held {
    fn clone(&self) -> Self {
        Held::new(self.store.clone(), self.version())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: `version` is not used again: this is the hold's drop, and
        // the field is taken nowhere else.
        let version = unsafe { ManuallyDrop::take(&mut self.version) };
        self.store.reclaimer().release(version);
    }
}

/// A consistent, read-only view of the store at one moment. Writers never
/// wait for it; it keeps the version it sees alive until dropped.
#[derive(Clone)]
pub struct Snapshot {
    held: Held,
}

impl Snapshot {
    pub(crate) fn new(store: Arc<Store>, version: Arc<Version>) -> Self {
        Snapshot {
            held: Held::new(store, version),
        }
    }

    /// The value under `key` in this snapshot, unless it has expired (by
    /// the store's clock now: a snapshot holds its writes, not the time).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get_with_deadline(key)?.map(|(v, _)| v))
    }

    /// The value under `key` in this snapshot and its deadline (`None`: it
    /// never expires), unless it has expired.
    pub fn get_with_deadline(&self, key: &[u8]) -> Result<Option<(Vec<u8>, Option<Deadline>)>> {
        let mut out = Vec::new();
        let found = self
            .held
            .store
            .read_live(&self.held.version, key, &mut out)?;
        Ok(found.map(|d| (out, Deadline::from_millis(d))))
    }

    /// Pairs of this snapshot with keys in `range`, in key order; `.rev()`
    /// for descending order. Expired values are left out (by the store's
    /// clock when each is read).
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let (start, end) = bound_owned(&range);
        Iter::new(self.held.store.clone(), self.held.version(), start, end)
    }

    /// Every pair of this snapshot, in key order.
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }

    /// A zero-copy scan of `range` in ascending key order (see [`Scan`]).
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Scan {
        let (start, end) = bound_owned(&range);
        Scan::new(
            self.held.store.clone(),
            self.held.version(),
            start,
            end,
            true,
        )
    }

    /// A zero-copy scan of `range` in descending key order.
    pub fn scan_rev<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Scan {
        let (start, end) = bound_owned(&range);
        Scan::new(
            self.held.store.clone(),
            self.held.version(),
            start,
            end,
            false,
        )
    }

    /// Number of pairs in this snapshot. Counting the pairs of the write
    /// buffer may read pages, which may fail.
    pub fn len(&self) -> Result<u64> {
        self.held.store.pairs(&self.held.version)
    }

    /// Whether this snapshot holds no pair (see [`Snapshot::len`]).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Sequence number of the last commit this snapshot includes.
    // `Version::seq` is its tree's; readers see `visible_seq`.
    #[allow(clippy::misnamed_getters)]
    pub fn seq(&self) -> u64 {
        self.held.version.visible_seq
    }
}

/// Pairs of a range in key order, from a snapshot taken when it was made.
/// Double-ended: `.rev()` walks it in descending order, and both ends can be
/// used at once. Each item is a `Result`: a damaged page ends the iteration
/// with an error instead of wrong data. Copies each pair; [`Scan`] lends them.
pub struct Iter {
    front: Scan,
    back: Scan,
    /// Last key returned from each end; the two ends never cross.
    front_last: Option<Vec<u8>>,
    back_last: Option<Vec<u8>>,
    done: bool,
}

impl Iter {
    pub(crate) fn new(
        store: Arc<Store>,
        version: Arc<Version>,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Self {
        let back = Scan::new(
            store.clone(),
            version.clone(),
            start.clone(),
            end.clone(),
            false,
        );
        let front = Scan::new(store, version, start, end, true);
        Iter {
            front,
            back,
            front_last: None,
            back_last: None,
            done: false,
        }
    }

    fn step(&mut self, forward: bool) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        if self.done {
            return None;
        }
        let (scan, other_last) = if forward {
            (&mut self.front, &self.back_last)
        } else {
            (&mut self.back, &self.front_last)
        };
        let item = match scan.next() {
            Ok(Some((k, v))) => {
                let crossed =
                    other_last
                        .as_deref()
                        .is_some_and(|o| if forward { k >= o } else { k <= o });
                (!crossed).then(|| (k.to_vec(), v.to_vec()))
            }
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        let Some((k, v)) = item else {
            self.done = true;
            return None;
        };
        let last = if forward {
            &mut self.front_last
        } else {
            &mut self.back_last
        };
        *last = Some(k.clone());
        Some(Ok((k, v)))
    }
}

impl Iterator for Iter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step(true)
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(false)
    }
}

/// A zero-copy scan over a range, in one direction: each step lends the key
/// and value in place (values over 1 KiB are read into a buffer the scan
/// reuses). Faster than [`Iter`], which copies every pair it returns.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = kivi::Db::open(dir.path(), kivi::Options::default())?;
/// db.put(b"apple", b"red")?;
/// db.put(b"avocado", b"green")?;
/// db.put(b"banana", b"yellow")?;
/// let mut scan = db.scan(b"a".as_slice()..b"b".as_slice());
/// let mut bytes = 0;
/// while let Some((key, value)) = scan.next()? {
///     bytes += key.len() + value.len(); // borrowed: valid until the next call
/// }
/// assert_eq!(bytes, "applered".len() + "avocadogreen".len());
/// # Ok::<(), kivi::Error>(())
/// ```
pub struct Scan {
    /// Declared first, so dropped first: the cursor holds the tree's root,
    /// and letting go of it before the version lets a superseded tree be
    /// freed with its version, by the reclaimer.
    cursor: Cursor,
    /// Held for its epoch too: the cleaner deletes no segment this version's
    /// pages may lie in while it is alive (the cursor holds only nodes).
    held: Held,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    forward: bool,
    started: bool,
    done: bool,
    big: Vec<u8>,
    /// The write buffer's writes in the range, taken a chunk at a time, and
    /// where the walk over its runs stands (`None` before the first chunk).
    buffered: Chunk,
    buffer_walk: Option<WalkPosition>,
    /// The cursor's pair was returned (or hidden): step before using it.
    tree_consumed: bool,
    /// The moment the scan decides expiry by, taken when it was made: a
    /// scan sees every key as of one time, as it sees one version.
    now: Millis,
}

/// Buffered pairs a scan takes from the write buffer at a time.
const BUFFER_CHUNK: usize = 256;

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Scan {
    pub(crate) fn new(
        store: Arc<Store>,
        version: Arc<Version>,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        forward: bool,
    ) -> Self {
        let cursor = Cursor::new(version.root.clone());
        let now = store.clock_now();
        Scan {
            cursor,
            held: Held::new(store, version),
            start,
            end,
            forward,
            started: false,
            done: false,
            big: Vec::new(),
            buffered: Chunk::default(),
            buffer_walk: None,
            tree_consumed: true,
            now,
        }
    }

    #[inline]
    fn position(&mut self) -> Result<()> {
        let pager = self.held.store.pager();
        if !self.started {
            self.started = true;
            if self.forward {
                let from = match &self.start {
                    Bound::Included(s) | Bound::Excluded(s) => Some(s.as_slice()),
                    Bound::Unbounded => None,
                };
                self.cursor.seek_forward(pager, from)?;
                if let (Bound::Excluded(s), true) = (&self.start, self.cursor.is_valid()) {
                    if self.cursor.key() == s.as_slice() {
                        self.cursor.next(pager)?;
                    }
                }
            } else {
                match &self.end {
                    Bound::Excluded(e) => self.cursor.seek_backward(pager, Some(e))?,
                    Bound::Included(e) => {
                        let mut past = e.clone();
                        past.push(0);
                        self.cursor.seek_backward(pager, Some(&past))?;
                    }
                    Bound::Unbounded => self.cursor.seek_backward(pager, None)?,
                }
            }
        } else if self.forward {
            self.cursor.next(pager)?;
        } else {
            self.cursor.prev(pager)?;
        }
        Ok(())
    }

    #[inline]
    fn in_range(&self, key: &[u8]) -> bool {
        if self.forward {
            match &self.end {
                Bound::Included(e) => key <= e.as_slice(),
                Bound::Excluded(e) => key < e.as_slice(),
                Bound::Unbounded => true,
            }
        } else {
            match &self.start {
                Bound::Included(s) => key >= s.as_slice(),
                Bound::Excluded(s) => key > s.as_slice(),
                Bound::Unbounded => true,
            }
        }
    }

    /// The next pair, or `None` at the end of the range. A damaged page ends
    /// the scan with an error.
    #[allow(clippy::should_implement_trait)] // lends borrowed pairs, which `Iterator` cannot
    #[inline]
    pub fn next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        if self.done {
            return Ok(None);
        }
        if self.held.version.visible_seq == self.held.version.seq {
            // Nothing buffered: the tree alone, less its expired pairs.
            loop {
                if let Err(e) = self.position() {
                    self.done = true;
                    return Err(e);
                }
                if !self.cursor.is_valid() || !self.in_range(self.cursor.key()) {
                    self.done = true;
                    return Ok(None);
                }
                if is_live(self.cursor.deadline(), self.now) {
                    return self.tree_pair();
                }
            }
        }
        // The tree and the write buffer side by side; on the same key the
        // buffer's write wins, and its deletes hide the tree's pair.
        loop {
            if self.tree_consumed {
                if let Err(e) = self.position() {
                    self.done = true;
                    return Err(e);
                }
                self.tree_consumed = false;
            }
            if self.buffered.is_empty() {
                self.refill();
            }
            let tree_key = if self.cursor.is_valid() {
                let key = self.cursor.key();
                self.in_range(key).then_some(key)
            } else {
                None
            };
            let from_buffer = match (tree_key, self.buffered.front_key()) {
                (None, None) => {
                    self.done = true;
                    return Ok(None);
                }
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(t), Some(b)) => {
                    let order = compare_keys(b, t);
                    let order = if self.forward { order } else { order.reverse() };
                    if order == Ordering::Equal {
                        self.tree_consumed = true;
                    }
                    order != Ordering::Greater
                }
            };
            if !from_buffer {
                self.tree_consumed = true;
                if is_live(self.cursor.deadline(), self.now) {
                    return self.tree_pair();
                }
                continue;
            }
            let i = self.buffered.pop();
            if !self.buffered.is_delete(i) {
                return Ok(Some(self.buffered.pair(i)));
            }
        }
    }

    /// The pair under the cursor.
    #[inline]
    fn tree_pair(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        let value = match self.cursor.value() {
            ValueRef::Inline(v) => v,
            ValueRef::Big(b) => {
                self.big = self.held.store.pager().read_big(b)?;
                &self.big
            }
        };
        Ok(Some((self.cursor.key(), value)))
    }

    /// Takes the next chunk of the write buffer's writes in the range.
    fn refill(&mut self) {
        let buffer = &self.held.version.buffer;
        let walk = self.buffer_walk.get_or_insert_with(|| {
            buffer.walk_from(as_ref(&self.start), as_ref(&self.end), self.forward)
        });
        // Once the walk is done every call would come here; leave at once.
        if !walk.is_done() {
            buffer.take(walk, BUFFER_CHUNK, &mut self.buffered, self.now);
        }
    }
}
