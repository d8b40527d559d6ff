//! Pacing of the page log's writes around commits.
//!
//! A checkpoint writes megabytes of pages; a commit's fdatasync that meets
//! them queued in the device waits for all of them. So page segments are
//! bulk segments, whose appends the backend writes back in small steps
//! (32 KiB in a local directory) and which call the pacer after each step
//! (`Storage::create_bulk_segment`); while commits are coming the pacer
//! pauses there, leaving the device to the commits between steps. The
//! commit log tells the pacer when it syncs; the commit path tells it when
//! memory waits on the page writes, and then there is no pause at all.
//!
//! (The page log cutting its appends into 32 KiB pieces itself, pacing
//! between them, made checkpoints under updates several times slower on
//! the test machine, `scan_bench` with `SCAN_AFTER=now`: no checkpoint
//! finished during 200,000 updates, against one before; so the backend
//! keeps the steps and the engine keeps the decision.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// While commits are coming (one synced within `COMMIT_WINDOW`), a page
/// write pauses this long after each write-back step; with no commits it writes at full
/// speed. A commit's fdatasync that meets a step in flight waits for it:
/// with back-to-back compactions and no pause, single-put p99 was 3-5x idle
/// on the test machine. 64 KiB steps with a 500 us pause met 2x when they
/// landed (1.57-1.85x) but not on a later day (3.1-5.0x); on that day 32 KiB
/// steps with a 2 ms pause gave 1.32-1.99x in five runs (the `cleaner_latency`
/// benchmark; docs/decisions/), and the update workloads ran as fast. It caps
/// page writes under light commit traffic near 32 KiB per (step + pause),
/// about 15 MB/s: plenty for the changes such traffic makes, and heavier
/// traffic gathers changes until the writes turn urgent.
const PAUSE: Duration = Duration::from_millis(2);
const COMMIT_WINDOW: Duration = Duration::from_millis(1);

/// When the commit log last synced, and whether the page writes are urgent.
#[derive(Debug)]
pub(crate) struct Pacer {
    epoch: Instant,
    /// Nanoseconds since `epoch` at the latest commit sync's start, plus one
    /// (0: none yet).
    last_commit_sync: AtomicU64,
    /// Set while memory waits on the page writes (changes not yet
    /// checkpointed past a quarter of the write buffer): no pause then.
    /// Paced throughout, a 10M-pair load gathered over 1 GiB of unwritten
    /// changes.
    urgent: AtomicBool,
}

impl Pacer {
    pub fn new() -> Self {
        Pacer {
            epoch: Instant::now(),
            last_commit_sync: AtomicU64::new(0),
            urgent: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// The commit log is about to sync.
    pub fn commit_syncing(&self) {
        self.last_commit_sync.store(self.now(), Ordering::Relaxed);
    }

    pub fn set_urgent(&self, urgent: bool) {
        self.urgent.store(urgent, Ordering::Relaxed);
    }

    /// Whether a page write step should be followed by a pause now.
    fn should_pause(&self) -> bool {
        if self.urgent.load(Ordering::Relaxed) {
            return false;
        }
        let last = self.last_commit_sync.load(Ordering::Relaxed);
        last != 0 && self.now().saturating_sub(last) < COMMIT_WINDOW.as_nanos() as u64
    }

    /// Called by a page segment's writer after each write-back step.
    pub fn after_step(&self) {
        if self.should_pause() {
            std::thread::sleep(PAUSE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_only_while_commits_come_and_nothing_is_urgent() {
        let p = Pacer::new();
        assert!(!p.should_pause(), "no commit yet");
        p.commit_syncing();
        assert!(p.should_pause(), "a commit just synced");
        p.set_urgent(true);
        assert!(!p.should_pause(), "urgent writes never pause");
        p.set_urgent(false);
        std::thread::sleep(COMMIT_WINDOW * 3);
        assert!(!p.should_pause(), "the last commit is past the window");
    }
}
