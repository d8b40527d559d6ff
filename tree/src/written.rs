//! Which checkpoint generations are durable, and where a node or value was
//! written by which of them. Every checkpoint has a generation; what it wrote
//! may be read back (and the bytes in memory dropped) only once that
//! generation is durable, and never if its checkpoint failed.

use parking_lot::Mutex;

/// The checkpoint generations durable at one moment: every one up to
/// `up_to` except those that failed. (Generation 0 marks what was read
/// from disk, durable from the start.)
#[derive(Debug, Clone)]
pub struct Durable {
    up_to: u64,
    failed: Vec<u64>,
}

impl Durable {
    pub(crate) fn new(up_to: u64, failed: Vec<u64>) -> Self {
        Durable { up_to, failed }
    }

    /// Whether what checkpoint `generation` wrote is durable.
    pub fn holds(&self, generation: u64) -> bool {
        generation <= self.up_to && self.failed.binary_search(&generation).is_err()
    }

    /// The newest durable generation.
    pub fn newest(&self) -> u64 {
        debug_assert!(self.holds(self.up_to));
        self.up_to
    }
}

/// Where something was written, and by which checkpoint. A checkpoint that
/// fails leaves its marks behind; they count only once that checkpoint's
/// generation is durable, so a failed checkpoint's writes are simply redone.
///
/// A mark keeps the previous durable place too: when the cleaner rewrites
/// a record that was already durable, readers go on using the old place
/// until the new one is durable (and if that checkpoint fails, for good).
#[derive(Debug)]
pub struct Written<T: Copy>(Mutex<[Option<(T, u64)>; 2]>);

impl<T: Copy> Default for Written<T> {
    fn default() -> Self {
        Written(Mutex::new([None, None]))
    }
}

impl<T: Copy> Written<T> {
    /// The newest place written by a generation `valid` accepts.
    pub fn get(&self, valid: impl Fn(u64) -> bool) -> Option<T> {
        let marks = self.0.lock();
        marks
            .iter()
            .flatten()
            .find(|(_, g)| valid(*g))
            .map(|&(r, _)| r)
    }

    /// Records that generation `generation` wrote it at `r`; the newest
    /// earlier mark of a durable generation stays as the fallback.
    pub fn set(&self, r: T, generation: u64, durable: &Durable) {
        let mut marks = self.0.lock();
        let fallback = marks
            .iter()
            .flatten()
            .find(|(_, g)| durable.holds(*g))
            .copied();
        *marks = [Some((r, generation)), fallback];
    }

    /// Records that it was read from `r` (generation 0: durable from the
    /// start), forgetting any other place.
    pub fn set_read(&self, r: T) {
        *self.0.lock() = [Some((r, 0)), None];
    }

    pub fn new_at(r: T, generation: u64) -> Self {
        Written(Mutex::new([Some((r, generation)), None]))
    }

    /// Takes over whatever `other` records.
    pub fn copy_from(&self, other: &Written<T>) {
        let v = *other.0.lock();
        *self.0.lock() = v;
    }
}
