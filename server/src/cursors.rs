//! SCAN cursors: numbers standing for the last key a SCAN returned. Kept
//! server-wide (a client's connection pool may continue a scan on another
//! connection), at most `MAX_CURSORS`, the oldest forgotten first; a
//! forgotten cursor is refused with an error, never resumed elsewhere.

use std::collections::{HashMap, VecDeque};

pub const MAX_CURSORS: usize = 1 << 16;

#[derive(Debug)]
pub struct Cursors {
    next: u64,
    keys: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl Cursors {
    /// Cursor numbers start at `first` (nonzero; 0 means "start a scan").
    pub fn new(first: u64) -> Self {
        Cursors {
            next: first.max(1),
            keys: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    pub fn insert(&mut self, last_key: Vec<u8>) -> u64 {
        let id = self.next;
        // Stays positive as an i64, which some clients parse it into.
        self.next = (self.next % (i64::MAX as u64)) + 1;
        if self.keys.len() >= MAX_CURSORS {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
        self.keys.insert(id, last_key);
        self.order.push_back(id);
        debug_assert!(self.keys.len() <= MAX_CURSORS);
        id
    }

    pub fn get(&self, id: u64) -> Option<Vec<u8>> {
        self.keys.get(&id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_nonzero_and_the_oldest_go_first() {
        let mut c = Cursors::new(0);
        let first = c.insert(b"a".to_vec());
        assert_ne!(first, 0);
        assert_eq!(c.get(first), Some(b"a".to_vec()));
        for i in 0..MAX_CURSORS {
            c.insert(i.to_be_bytes().to_vec());
        }
        assert_eq!(c.get(first), None);
        assert_eq!(c.keys.len(), MAX_CURSORS);
    }
}
