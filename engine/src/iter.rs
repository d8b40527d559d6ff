//! Snapshots and ordered range iteration.

use crate::db::Inner;
use crate::error::Result;
use crate::version::Version;
use kivi_tree::{get_into, Cursor, ValueRef};
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

/// A consistent, read-only view of the store at one moment. Writers never
/// wait for it; it keeps the version it sees alive until dropped.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<Inner>,
    version: Arc<Version>,
}

impl Snapshot {
    pub(crate) fn new(inner: Arc<Inner>, version: Arc<Version>) -> Self {
        Snapshot { inner, version }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let Some(root) = &self.version.root else {
            return Ok(None);
        };
        let mut out = Vec::new();
        Ok(get_into(&self.inner.pager, root, key, &mut out)?.then_some(out))
    }

    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let (start, end) = bound_owned(&range);
        Iter::new(self.inner.clone(), self.version.clone(), start, end)
    }

    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }

    /// A zero-copy scan of `range` in ascending key order (see [`Scan`]).
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Scan {
        let (start, end) = bound_owned(&range);
        Scan::new(self.inner.clone(), self.version.clone(), start, end, true)
    }

    /// A zero-copy scan of `range` in descending key order.
    pub fn scan_rev<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Scan {
        let (start, end) = bound_owned(&range);
        Scan::new(self.inner.clone(), self.version.clone(), start, end, false)
    }

    /// Number of pairs in this snapshot.
    pub fn len(&self) -> u64 {
        self.version.pairs
    }

    pub fn is_empty(&self) -> bool {
        self.version.pairs == 0
    }

    /// Sequence number of the last commit this snapshot includes.
    pub fn seq(&self) -> u64 {
        self.version.seq
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
        inner: Arc<Inner>,
        version: Arc<Version>,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Self {
        let back = Scan::new(
            inner.clone(),
            version.clone(),
            start.clone(),
            end.clone(),
            false,
        );
        let front = Scan::new(inner, version, start, end, true);
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
/// ```no_run
/// # let db = kivi::Db::open("d", kivi::Options::default())?;
/// let mut scan = db.scan(b"a".as_slice()..b"b".as_slice());
/// while let Some((key, value)) = scan.next()? {
///     println!("{} bytes under {} bytes of key", value.len(), key.len());
/// }
/// # Ok::<(), kivi::Error>(())
/// ```
pub struct Scan {
    inner: Arc<Inner>,
    /// Held for its epoch: the cleaner deletes no segment this version's
    /// pages may lie in while it is alive (the cursor holds only nodes).
    _version: Arc<Version>,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    cursor: Cursor,
    forward: bool,
    started: bool,
    done: bool,
    big: Vec<u8>,
}

impl Scan {
    pub(crate) fn new(
        inner: Arc<Inner>,
        version: Arc<Version>,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        forward: bool,
    ) -> Self {
        let cursor = Cursor::new(version.root.clone());
        Scan {
            inner,
            _version: version,
            start,
            end,
            cursor,
            forward,
            started: false,
            done: false,
            big: Vec::new(),
        }
    }

    #[inline]
    fn position(&mut self) -> Result<()> {
        let pager = &self.inner.pager;
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
        if let Err(e) = self.position() {
            self.done = true;
            return Err(e);
        }
        if !self.cursor.is_valid() || !self.in_range(self.cursor.key()) {
            self.done = true;
            return Ok(None);
        }
        let value = match self.cursor.value() {
            ValueRef::Inline(v) => v,
            ValueRef::Big(b) => {
                self.big = self.inner.pager.read_big(b)?;
                &self.big
            }
        };
        Ok(Some((self.cursor.key(), value)))
    }
}
