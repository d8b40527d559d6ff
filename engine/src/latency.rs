//! Fixed-bucket histograms of relaxed atomic counters: what the store's
//! fdatasyncs took (`Db::sync_times`), and what the server times the same
//! way (its commits, its group sizes). Recording is a short scan of the
//! bounds and two relaxed increments: no lock, no allocation. A reader
//! takes a `HistogramSnapshot` when it wants the figures (a scrape).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds, in nanoseconds, of the buckets of a latency histogram:
/// 10 µs to 10 s, roughly three to a decade (an fdatasync on a fast SSD
/// takes tens of microseconds, on a busy disk tens of milliseconds).
pub const LATENCY_BOUNDS_NS: &[u64] = &[
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];

/// Counts of values by bucket. Each bucket counts the values at or below its
/// bound and above the previous one; one more bucket counts the values past
/// the last bound.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds (ascending).
    pub fn new(bounds: &'static [u64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// A latency histogram (`LATENCY_BOUNDS_NS`); record with `record_duration`.
    pub fn latency() -> Histogram {
        Histogram::new(LATENCY_BOUNDS_NS)
    }

    /// Counts `value` in the first bucket whose bound is at or above it (the
    /// last bucket past every bound) and adds it to the sum. Lock-free.
    pub fn record(&self, value: u64) {
        let i = self.bounds.partition_point(|&b| b < value);
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum.fetch_add(value, Relaxed);
    }

    /// Records `d` in nanoseconds.
    pub fn record_duration(&self, d: Duration) {
        self.record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The figures recorded so far (see [`HistogramSnapshot`] for how
    /// consistent they are).
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            sum: self.sum.load(Relaxed),
        }
    }
}

/// A histogram's figures at one moment (read bucket by bucket, so a value
/// recorded meanwhile may be in `sum` and not yet in `counts`, or the
/// reverse: figures, not a transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Upper bounds of the buckets (the last bucket, past them, has none).
    pub bounds: &'static [u64],
    /// Values per bucket, not cumulative: `bounds.len() + 1` of them.
    pub counts: Vec<u64>,
    /// Sum of every value recorded.
    pub sum: u64,
}

impl HistogramSnapshot {
    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// How long the store's fdatasyncs took, by log: the commit log's (one per
/// durable group commit, and before a clean close) and the page log's (one
/// per checkpoint). A segment's sync as it is closed for the next one is not
/// timed.
#[derive(Debug)]
pub(crate) struct SyncTimes {
    pub commit_log: Histogram,
    pub page_log: Histogram,
}

impl Default for SyncTimes {
    fn default() -> Self {
        SyncTimes {
            commit_log: Histogram::latency(),
            page_log: Histogram::latency(),
        }
    }
}

/// `SyncTimes` at one moment (`Db::sync_times`), in nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncTimesSnapshot {
    /// The commit log's fdatasyncs: one per durable group commit.
    pub commit_log: HistogramSnapshot,
    /// The page log's fdatasyncs: one per checkpoint.
    pub page_log: HistogramSnapshot,
}

/// Runs `sync`, recording in `h` how long it took.
pub(crate) fn timed<T>(h: &Histogram, sync: impl FnOnce() -> T) -> T {
    let start = std::time::Instant::now();
    let r = sync();
    h.record_duration(start.elapsed());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_whose_bound_holds_them() {
        static B: &[u64] = &[1, 10, 100];
        let h = Histogram::new(B);
        for v in [0, 1, 2, 10, 11, 100, 101, 5000] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, vec![2, 2, 2, 2]);
        assert_eq!(s.count(), 8);
        assert_eq!(s.sum, 5225);
    }
}
