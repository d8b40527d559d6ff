//! A chunk: buffered pairs a scan has taken from the write buffer, copied
//! into one allocation reused from chunk to chunk, which the scan then
//! merges with the tree's pairs.

/// Buffered pairs a scan has taken, in one allocation reused from chunk to
/// chunk (a vector per pair made scans over a full buffer twice as slow).
#[derive(Default)]
pub(crate) struct Chunk {
    bytes: Vec<u8>,
    /// Per pair: where its key starts, where its key ends (and its value
    /// starts), and where its value ends (`None`: a delete).
    pub(super) pairs: Vec<(usize, usize, Option<usize>)>,
    /// Pairs before this one were consumed.
    next: usize,
}

// Copied, not referred to by run and index: a scan compares every buffered
// key with the tree's and returns the pair, and reaching the bytes through
// the run, its entry and its block each time was slower (measured with
// `scan_bench`, `SCAN_SNAPSHOT=1`) than one copy into this contiguous chunk.
impl Chunk {
    #[inline]
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.pairs.clear();
        self.next = 0;
    }

    #[inline]
    pub(super) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        let value_end = value.map(|v| {
            self.bytes.extend_from_slice(v);
            self.bytes.len()
        });
        self.pairs.push((start, key_end, value_end));
    }

    /// No pair left to consume.
    pub fn is_empty(&self) -> bool {
        self.next == self.pairs.len()
    }

    /// The next pair's key.
    pub fn front_key(&self) -> Option<&[u8]> {
        let &(start, key_end, _) = self.pairs.get(self.next)?;
        Some(&self.bytes[start..key_end])
    }

    /// Consumes the next pair and returns its index.
    pub fn pop(&mut self) -> usize {
        debug_assert!(!self.is_empty());
        self.next += 1;
        self.next - 1
    }

    /// Whether pair `i` is a delete.
    pub fn is_delete(&self, i: usize) -> bool {
        self.pairs[i].2.is_none()
    }

    /// Pair `i`, a put.
    pub fn pair(&self, i: usize) -> (&[u8], &[u8]) {
        let (start, key_end, value_end) = self.pairs[i];
        let value_end = value_end.expect("a put");
        (&self.bytes[start..key_end], &self.bytes[key_end..value_end])
    }
}
