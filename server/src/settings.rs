//! The settings CONFIG SET may change while the server runs: the idle
//! timeout, the output timeout and the connection limit. Each is an atomic
//! that its reader loads when it needs it (a connection before it waits
//! for a read or writes a reply, an accept loop per connection), so a
//! change reaches every connection without a lock on any path. A change
//! also wakes the connections waiting for a read, so that a shorter idle
//! timeout closes a connection already idle past it.
//!
//! Everything else (listeners, passwords, durability) is fixed when the
//! server starts: changing it live would need a restart of what depends
//! on it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Longest a timeout may be set to (a year): beyond it the deadline
/// arithmetic of a sleeping connection could overflow, and nobody means it.
pub const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

pub struct LiveSettings {
    /// Seconds a RESP connection may send nothing; 0: forever.
    idle_timeout_secs: AtomicU64,
    /// Seconds a RESP connection's replies may wait for the client to read
    /// them (at least 1).
    output_timeout_secs: AtomicU64,
    /// Most connections open at once, over every listener (at least 1).
    max_connections: AtomicUsize,
    /// Bumped on every change; connections waiting for a read watch it.
    changed: watch::Sender<u64>,
}

impl LiveSettings {
    pub fn new(
        idle_timeout: Option<Duration>,
        output_timeout: Duration,
        max_connections: usize,
    ) -> LiveSettings {
        let s = LiveSettings {
            idle_timeout_secs: AtomicU64::new(0),
            output_timeout_secs: AtomicU64::new(1),
            max_connections: AtomicUsize::new(1),
            changed: watch::Sender::new(0),
        };
        s.set_idle_timeout_secs(idle_timeout.map_or(0, |t| t.as_secs()));
        s.set_output_timeout_secs(output_timeout.as_secs());
        s.set_max_connections(max_connections);
        s
    }

    pub fn idle_timeout(&self) -> Option<Duration> {
        match self.idle_timeout_secs.load(Ordering::Relaxed) {
            0 => None,
            s => Some(Duration::from_secs(s)),
        }
    }

    pub fn output_timeout(&self) -> Duration {
        Duration::from_secs(self.output_timeout_secs.load(Ordering::Relaxed))
    }

    pub fn max_connections(&self) -> usize {
        self.max_connections.load(Ordering::Relaxed)
    }

    /// 0 turns the idle timeout off; more than a year is taken as a year.
    pub fn set_idle_timeout_secs(&self, secs: u64) {
        self.idle_timeout_secs
            .store(secs.min(MAX_TIMEOUT_SECS), Ordering::Relaxed);
        self.announce();
    }

    /// At least one second (a zero timeout would close every connection
    /// whose reply does not fit the socket at once), at most a year.
    pub fn set_output_timeout_secs(&self, secs: u64) {
        self.output_timeout_secs
            .store(secs.clamp(1, MAX_TIMEOUT_SECS), Ordering::Relaxed);
        self.announce();
    }

    /// At least 1. Lowering it closes no connection: new ones are refused
    /// until the open ones are below it, as Redis's maxclients does.
    pub fn set_max_connections(&self, n: usize) {
        self.max_connections.store(n.max(1), Ordering::Relaxed);
        self.announce();
    }

    /// A receiver that sees every later change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn announce(&self) {
        self.changed.send_modify(|v| *v += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_kept_within_their_bounds() {
        let s = LiveSettings::new(None, Duration::from_secs(60), 10);
        assert_eq!(s.idle_timeout(), None);
        assert_eq!(s.output_timeout(), Duration::from_secs(60));
        assert_eq!(s.max_connections(), 10);
        s.set_idle_timeout_secs(5);
        assert_eq!(s.idle_timeout(), Some(Duration::from_secs(5)));
        s.set_idle_timeout_secs(u64::MAX);
        assert_eq!(
            s.idle_timeout(),
            Some(Duration::from_secs(MAX_TIMEOUT_SECS))
        );
        s.set_idle_timeout_secs(0);
        assert_eq!(s.idle_timeout(), None);
        s.set_output_timeout_secs(0);
        assert_eq!(s.output_timeout(), Duration::from_secs(1));
        s.set_max_connections(0);
        assert_eq!(s.max_connections(), 1);
    }

    #[test]
    fn a_change_wakes_the_subscribers() {
        let s = LiveSettings::new(None, Duration::from_secs(60), 10);
        let mut rx = s.subscribe();
        assert!(!rx.has_changed().unwrap());
        s.set_idle_timeout_secs(3);
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        s.set_max_connections(3);
        assert!(rx.has_changed().unwrap());
    }
}
