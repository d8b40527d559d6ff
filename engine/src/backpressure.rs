//! What ties writers to the checkpointer: writers wake it when a checkpoint
//! is due, wait for it when unwritten changes take too much memory, and tell
//! its page writes when memory waits on them (no pacing then); it tells them
//! when it has written some.

use crate::pacing::Pacer;
use crate::store::Store;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The commit log is retired early (a checkpoint before `checkpoint_bytes`)
/// once it takes a quarter of the room the space target leaves beside the
/// tree (sliced checkpoints keep the commits since their oldest slice), but
/// never for less than this.
pub(crate) const EARLY_CHECKPOINT_MIN_BYTES: u64 = 256 << 10;

/// Writers wait while unwritten changes pass this many write buffers: one
/// being written by a checkpoint, one gathering beside it.
const WRITE_STALL_FACTOR: u64 = 2;
/// The longest one write waits for the write buffer to drain.
const MAX_WRITE_STALL: Duration = Duration::from_secs(1);
/// How often a waiting writer looks again without a signal.
const WRITE_STALL_STEP: Duration = Duration::from_millis(10);
/// Small writes wait only past the stall line plus a sixteenth of the
/// write buffer (4 MiB by default); a write is small when it costs at most
/// a 64th of that allowance (64 KiB by default).
///
/// Why: the stall holds back writers that outrun the checkpoints, but any
/// writer arriving while a backlog drained used to wait its second, however
/// little it added: with 100M pairs in a 2 GiB box, single durable puts
/// right after the Zipfian updates had a p99.9 of 1.0 s (RocksDB 0.3 ms),
/// for a backlog the updates had made. Small writes now go through until
/// they have used the allowance themselves; batches wait at the line as
/// before. Memory passes the line by at most the allowance and one small
/// write per writer.
const STALL_ALLOWANCE_DIVISOR: u64 = 16;
const SMALL_WRITE_DIVISOR: u64 = 64;
/// What a write costs the write buffer beyond its bytes, per operation
/// (about `WriteBuffer::group_cost`'s overheads).
const WRITE_OVERHEAD: u64 = 128;

#[derive(Default)]
struct Signals {
    stop: bool,
    wake: bool,
}

pub(crate) struct Backpressure {
    state: Mutex<Signals>,
    cond: Condvar,
    /// Signalled after each background checkpoint: writers held back by a
    /// full write buffer (`wait_for_write_buffer`) look again.
    written: Condvar,
    /// Paces the page log's writes around commits (shared with both logs).
    pacer: Arc<Pacer>,
}

impl Backpressure {
    pub fn new(pacer: Arc<Pacer>) -> Self {
        Backpressure {
            state: Mutex::default(),
            cond: Condvar::new(),
            written: Condvar::new(),
            pacer,
        }
    }

    /// Page writes are paced for commit latency only while few changes
    /// wait for a checkpoint (a quarter of the write buffer): past that,
    /// memory waits on them. (Paced throughout, a 10M-pair load gathered
    /// over 1 GiB of unwritten changes, and random updates held 100 MiB
    /// more at their peak; docs/decisions/0011-memory-bounded-by-page-bases-and-backpressure.md.)
    pub fn pace_page_writes(&self, store: &Store) {
        self.pacer
            .set_urgent(store.pager().dirty_bytes() >= store.opts().write_buffer_bytes / 4);
    }

    /// Asks the background thread for a look now.
    pub fn wake(&self) {
        let mut st = self.state.lock();
        st.wake = true;
        self.cond.notify_one();
    }

    /// Asks the background thread to stop.
    pub fn stop(&self) {
        let mut st = self.state.lock();
        st.stop = true;
        self.cond.notify_one();
    }

    /// The background thread's wait: until woken, stopped, or `tick`
    /// passes (`tick` chosen when no wake is pending). `true`: stop.
    pub fn wait_for_work(&self, tick: impl FnOnce() -> Duration) -> bool {
        let mut st = self.state.lock();
        if !st.stop && !st.wake {
            self.cond.wait_for(&mut st, tick());
        }
        if st.stop {
            return true;
        }
        st.wake = false;
        false
    }

    /// The background thread's pause after a failed checkpoint (cut short
    /// by a stop).
    pub fn pause(&self, at_most: Duration) {
        let mut st = self.state.lock();
        if !st.stop {
            self.cond.wait_for(&mut st, at_most);
        }
    }

    /// Wakes the thread and waits until it finishes a checkpoint, or
    /// `at_most` passes, or it is stopping.
    fn wait_written(&self, at_most: Duration) {
        let mut st = self.state.lock();
        if st.stop {
            return;
        }
        st.wake = true;
        self.cond.notify_one();
        self.written.wait_for(&mut st, at_most);
    }

    /// Tells the writers waiting in `wait_for_write_buffer` to look again.
    pub fn notify_written(&self) {
        let _st = self.state.lock();
        self.written.notify_all();
    }

    /// What a write of `bytes` in `ops` operations adds to the write
    /// buffer, about (for `wait_for_write_buffer`).
    pub fn write_cost(bytes: usize, ops: usize) -> u64 {
        bytes as u64 + ops as u64 * WRITE_OVERHEAD
    }

    /// Holds a writer back while the changes not yet written by a
    /// checkpoint pass `WRITE_STALL_FACTOR` times the write buffer, until
    /// background checkpoints bring them under it or `MAX_WRITE_STALL`
    /// passes. Without it, writers that outrun the checkpoints gathered
    /// changes without bound: random updates on a 10M-pair store held 3.5x
    /// a 64 MiB write buffer (docs/decisions/0011). The wait is
    /// bounded so that a checkpoint that keeps failing (a full disk) turns
    /// into slow writes that report their own errors, not a hang. A small
    /// write (`cost`, from `write_cost`) waits only past the line plus the
    /// allowance (see `STALL_ALLOWANCE_DIVISOR`).
    pub fn wait_for_write_buffer(&self, store: &Store, cost: u64) {
        let buffer = store.opts().write_buffer_bytes;
        let allowance = buffer / STALL_ALLOWANCE_DIVISOR;
        let limit = buffer.saturating_mul(WRITE_STALL_FACTOR)
            + if cost <= allowance / SMALL_WRITE_DIVISOR {
                allowance
            } else {
                0
            };
        if store.unwritten_bytes() < limit {
            return;
        }
        let start = Instant::now();
        let counters = store.counters();
        counters.write_stall_started();
        while store.unwritten_bytes() >= limit && !store.is_closed() {
            let left = MAX_WRITE_STALL.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            self.wait_written(left.min(WRITE_STALL_STEP));
        }
        counters.write_stall_ended(start.elapsed().as_micros() as u64);
    }
}

/// Whether the commit log, `log_bytes` long, takes so much of the room
/// the space target leaves beside the tree that it should be retired now.
/// Never before there is a durable tree to measure it against: until
/// then the log is all the store holds (its amplification is 1), and
/// `checkpoint_bytes` alone decides. (An early checkpoint at 256 KiB of
/// a fresh store also raced explicit ones, which made tests that expect
/// only their own checkpoints flaky.)
pub(crate) fn log_over_target(store: &Store, log_bytes: u64) -> bool {
    let tree = store.counters().checkpointed_tree_bytes();
    if tree == 0 {
        return false;
    }
    let room = (tree as f64 * (store.opts().space_amplification_max - 1.0) / 4.0) as u64;
    log_bytes > room.max(EARLY_CHECKPOINT_MIN_BYTES)
}
