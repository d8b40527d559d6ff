//! Deadlines: a value may carry the moment it stops existing.
//!
//! A deadline is stored with its value (commit records, the write buffer,
//! tree pages), so it is as durable as the value. Expiry is decided when a
//! key is read, against the store's [`Clock`]: a value whose deadline has
//! passed is absent to every read, scan, count and condition, whether or not
//! its entry has been reclaimed yet. Nothing has to happen at the deadline
//! itself for the answers to be right.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as stored (`kivi_log::NO_DEADLINE`,
/// 0, for none).
pub(crate) type Millis = kivi_log::Deadline;

/// Whether a value with `deadline` still exists at `now`. As in Redis, a
/// key lives through the millisecond of its deadline and is gone after it.
#[inline]
pub(crate) fn is_live(deadline: Millis, now: Millis) -> bool {
    deadline == kivi_log::NO_DEADLINE || now <= deadline
}

/// When a value stops existing: a moment in milliseconds since the Unix
/// epoch. The value is readable up to and including that millisecond, and
/// absent after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(u64);

impl Deadline {
    /// The deadline at `ms` milliseconds after the Unix epoch. (The epoch
    /// itself is taken as its first millisecond: both are long past.)
    pub fn from_unix_millis(ms: u64) -> Deadline {
        Deadline(ms.max(1))
    }

    /// Milliseconds since the Unix epoch.
    pub fn unix_millis(self) -> u64 {
        self.0
    }

    /// The deadline at `t`, rounded up to a whole millisecond (a value never
    /// expires before the moment asked for). Times before the epoch are its
    /// first millisecond.
    pub fn from_system_time(t: SystemTime) -> Deadline {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let ms = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
        Deadline::from_unix_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// The deadline as a `SystemTime` (exact: deadlines are whole
    /// milliseconds since the Unix epoch).
    pub fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }

    pub(crate) fn millis(deadline: Option<Deadline>) -> Millis {
        deadline.map_or(kivi_log::NO_DEADLINE, |d| d.0)
    }

    pub(crate) fn from_millis(ms: Millis) -> Option<Deadline> {
        (ms != kivi_log::NO_DEADLINE).then_some(Deadline(ms))
    }
}

/// The time a store decides expiry by: the system's clock, or (for tests
/// and simulations) a manual one that moves only when told to.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    manual: Option<Arc<AtomicU64>>,
}

impl Clock {
    /// The system's wall clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock standing at `unix_millis`, moved by [`advance`](Self::advance)
    /// and [`set`](Self::set); its clones share it.
    pub fn manual(unix_millis: u64) -> Clock {
        Clock {
            manual: Some(Arc::new(AtomicU64::new(unix_millis))),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_millis(&self) -> u64 {
        match &self.manual {
            Some(t) => t.load(Ordering::Acquire),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }

    /// The deadline `after` from now by this clock.
    pub fn after(&self, after: Duration) -> Deadline {
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        Deadline::from_unix_millis(self.now_millis().saturating_add(ms))
    }

    /// Moves a manual clock forward; the system clock moves by itself, and
    /// this does nothing to it.
    pub fn advance(&self, by: Duration) {
        if let Some(t) = &self.manual {
            let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
            t.fetch_add(ms, Ordering::AcqRel);
        }
    }

    /// Sets a manual clock (it may go back, as a wall clock can); does
    /// nothing to the system clock.
    pub fn set(&self, unix_millis: u64) {
        if let Some(t) = &self.manual {
            t.store(unix_millis, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_lives_through_its_deadline_and_not_after() {
        assert!(is_live(kivi_log::NO_DEADLINE, u64::MAX));
        assert!(is_live(100, 99));
        assert!(is_live(100, 100));
        assert!(!is_live(100, 101));
    }

    #[test]
    fn deadlines_round_up_and_never_mean_none() {
        let t = UNIX_EPOCH + Duration::from_micros(1_500);
        assert_eq!(Deadline::from_system_time(t).unix_millis(), 2);
        assert_eq!(Deadline::from_unix_millis(0).unix_millis(), 1);
        assert_eq!(Deadline::millis(Some(Deadline::from_unix_millis(0))), 1);
        assert_eq!(Deadline::from_millis(kivi_log::NO_DEADLINE), None);
    }

    #[test]
    fn a_manual_clock_moves_when_told_and_its_clones_share_it() {
        let c = Clock::manual(1_000);
        let d = c.clone();
        c.advance(Duration::from_millis(250));
        assert_eq!(d.now_millis(), 1_250);
        assert_eq!(d.after(Duration::from_secs(1)).unix_millis(), 2_250);
        d.set(5);
        assert_eq!(c.now_millis(), 5);
        // The system clock is not moved by telling it to.
        let system = Clock::system();
        let before = system.now_millis();
        system.advance(Duration::from_secs(3600));
        assert!(system.now_millis() < before + 60_000);
    }
}
