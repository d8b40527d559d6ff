//! The server's own counters for INFO's Stats section: plain atomics,
//! bumped with relaxed increments (a reader wants a recent figure, not an
//! ordering with anything else), so that counting costs a command no lock.

use crate::resp::commands::COMMANDS;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What INFO's Stats section counts. CONFIG RESETSTAT sets them to 0.
#[derive(Debug, Default)]
pub struct Counters {
    /// Commands read over RESP and answered: each once, as it arrives
    /// (a command queued by MULTI counts when queued, not again at EXEC).
    pub commands_processed: AtomicU64,
    /// Connections accepted and served, over both listeners.
    pub connections_received: AtomicU64,
    /// Connections turned away at the connection limit.
    pub rejected_connections: AtomicU64,
    /// Keys GET and MGET found, and did not find.
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    /// The engine's count of expired keys it reclaimed
    /// (`Stats::expired_reclaimed`) at the last CONFIG RESETSTAT: INFO's
    /// `expired_keys` counts from there.
    pub expired_keys_at_reset: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A key GET or MGET looked up: found, or not.
    pub fn note_lookup(&self, found: bool) {
        let c = if found {
            &self.keyspace_hits
        } else {
            &self.keyspace_misses
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// CONFIG RESETSTAT. `connected_clients` is a gauge, not a counter, and
    /// stays; the engine's own counters (the `kivi_` fields) cannot be reset
    /// from here and stay too.
    pub fn reset(&self) {
        for c in [
            &self.commands_processed,
            &self.connections_received,
            &self.rejected_connections,
            &self.keyspace_hits,
            &self.keyspace_misses,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Commands read over RESP, by name, for the metrics endpoint: one counter
/// per name in `resp::commands::COMMANDS`, in its order, and one more for
/// every other name. Never reset (Prometheus counters only grow).
#[derive(Debug)]
pub struct CommandCounts {
    counts: Box<[AtomicU64]>,
}

/// The label of the counter for names kivi does not answer.
pub const OTHER_COMMAND: &str = "other";

impl Default for CommandCounts {
    fn default() -> Self {
        CommandCounts {
            counts: (0..=COMMANDS.len()).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl CommandCounts {
    /// Adds a connection's tally, and empties it.
    pub fn fold(&self, tally: &mut CommandTally) {
        for (i, n) in tally.counts.drain(..) {
            self.counts[usize::from(i)].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Every name and its count (names never sent included, at 0).
    pub fn read(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        COMMANDS
            .iter()
            .map(|(name, _)| *name)
            .chain([OTHER_COMMAND])
            .zip(self.counts.iter().map(|c| c.load(Ordering::Relaxed)))
    }
}

/// One connection's commands by name since its last fold into
/// `CommandCounts` (once per read, as `commands_processed` is): pipelined
/// commands touch no shared counter each. A pipeline mostly repeats one
/// name, which is compared first.
#[derive(Debug, Default)]
pub struct CommandTally {
    /// (index in `CommandCounts`, count), the latest name last.
    counts: Vec<(u16, u64)>,
}

impl CommandTally {
    pub fn note(&mut self, name: &[u8]) {
        if let Some((i, n)) = self.counts.last_mut() {
            let same = COMMANDS
                .get(usize::from(*i))
                .is_some_and(|(c, _)| name.eq_ignore_ascii_case(c.as_bytes()));
            if same {
                *n += 1;
                return;
            }
        }
        let i = COMMANDS
            .iter()
            .position(|(c, _)| name.eq_ignore_ascii_case(c.as_bytes()))
            .unwrap_or(COMMANDS.len()) as u16;
        match self.counts.iter().position(|&(j, _)| j == i) {
            Some(at) => {
                let mut e = self.counts.remove(at);
                e.1 += 1;
                self.counts.push(e);
            }
            None => self.counts.push((i, 1)),
        }
    }
}

/// kvlds requests by type, in the order of `KVLDS_REQUESTS`; a connection
/// tallies its own (`[u64; KVLDS_REQUESTS.len()]`) and adds them here once
/// per read, as RESP's are.
#[derive(Debug, Default)]
pub struct KvldsCounts {
    counts: [AtomicU64; KVLDS_REQUESTS.len()],
}

/// The kvlds request types, as the metrics name them.
pub const KVLDS_REQUESTS: [&str; 9] = [
    "PARAMS", "GET", "RANGE", "SET", "CAS", "ADD", "MODIFY", "DELETE", "CAD",
];

impl KvldsCounts {
    pub fn fold(&self, tally: &mut [u64; KVLDS_REQUESTS.len()]) {
        for (c, n) in self.counts.iter().zip(tally.iter_mut()) {
            Counters::add(c, std::mem::take(n));
        }
    }

    pub fn read(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        KVLDS_REQUESTS
            .into_iter()
            .zip(self.counts.iter().map(|c| c.load(Ordering::Relaxed)))
    }
}

/// How often the commands counter is sampled, and how many samples the
/// rate is the mean of: Redis's own choice (a sample per 100 ms, 16 kept),
/// so `instantaneous_ops_per_sec` means what Redis's does: the rate over
/// the last 1.6 seconds.
pub const OPS_SAMPLE_EVERY: Duration = Duration::from_millis(100);
const OPS_SAMPLES: usize = 16;

/// The recent command rates, one per sampling period.
#[derive(Debug)]
pub struct OpsSampler {
    last: Option<(Instant, u64)>,
    rates: [f64; OPS_SAMPLES],
    next: usize,
}

impl Default for OpsSampler {
    fn default() -> Self {
        OpsSampler {
            last: None,
            rates: [0.0; OPS_SAMPLES],
            next: 0,
        }
    }
}

impl OpsSampler {
    /// Notes the commands counter as it is at `now`.
    pub fn sample(&mut self, now: Instant, commands: u64) {
        if let Some((then, before)) = self.last {
            let secs = now.duration_since(then).as_secs_f64();
            if secs > 0.0 {
                // A RESETSTAT between two samples moves the counter back:
                // that period counts as none, not as a huge negative rate.
                let done = commands.saturating_sub(before);
                self.rates[self.next] = done as f64 / secs;
                self.next = (self.next + 1) % OPS_SAMPLES;
            }
        }
        self.last = Some((now, commands));
    }

    /// Commands per second, the mean over the samples kept.
    pub fn per_second(&self) -> u64 {
        (self.rates.iter().sum::<f64>() / OPS_SAMPLES as f64).round() as u64
    }

    /// CONFIG RESETSTAT: the rate starts again from nothing.
    pub fn reset(&mut self) {
        *self = OpsSampler::default();
    }
}

/// Samples `counters.commands_processed` into `sampler` every
/// `OPS_SAMPLE_EVERY` until `stop` turns true. One task for the whole
/// server: a command pays only its counter increment.
pub async fn sample_ops(
    counters: &Counters,
    sampler: &Mutex<OpsSampler>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(OPS_SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let n = Counters::get(&counters.commands_processed);
        sampler.lock().sample(Instant::now(), n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_the_mean_of_the_recent_periods() {
        let mut s = OpsSampler::default();
        let t0 = Instant::now();
        s.sample(t0, 0);
        assert_eq!(s.per_second(), 0);
        // 16 periods of 100 ms with 50 commands each: 500 per second.
        for i in 1..=16u32 {
            s.sample(t0 + OPS_SAMPLE_EVERY * i, u64::from(i) * 50);
        }
        assert_eq!(s.per_second(), 500);
        // Then 16 idle periods: the rate falls back to 0.
        for i in 17..=32u32 {
            s.sample(t0 + OPS_SAMPLE_EVERY * i, 800);
        }
        assert_eq!(s.per_second(), 0);
        // A counter reset between samples is not a negative rate.
        s.sample(t0 + OPS_SAMPLE_EVERY * 33, 0);
        assert_eq!(s.per_second(), 0);
    }

    #[test]
    fn commands_are_tallied_by_name_and_folded() {
        let counts = CommandCounts::default();
        let mut t = CommandTally::default();
        for name in ["GET", "get", "SET", "GET", "NOSUCH", "set"] {
            t.note(name.as_bytes());
        }
        counts.fold(&mut t);
        t.note(b"GET");
        counts.fold(&mut t);
        let read: std::collections::HashMap<_, _> = counts.read().collect();
        assert_eq!(read["GET"], 4);
        assert_eq!(read["SET"], 2);
        assert_eq!(read[OTHER_COMMAND], 1);
        assert_eq!(read["DEL"], 0);
    }

    #[test]
    fn resetstat_zeroes_every_counter() {
        let c = Counters::default();
        Counters::add(&c.commands_processed, 5);
        Counters::add(&c.keyspace_hits, 2);
        c.reset();
        assert_eq!(Counters::get(&c.commands_processed), 0);
        assert_eq!(Counters::get(&c.keyspace_hits), 0);
    }
}
