//! kivaloo's six kvlds benchmark workloads, as its bench tools run them:
//! what each sends, what each answer must be, and how each rate is taken.
//! Both of the suite's clients (the trickling one in `kvlds_client`, the
//! bursty one in `server`) send these requests; only how they put them on
//! the wire differs.
//!
//! | workload | kivaloo tool | requests |
//! | --- | --- | --- |
//! | bulk insert | bulk_insert | SET of every pair, in `mkpairs` order, once |
//! | bulk update | bulk_update | SET of every pair in `mkpairs` order, over and over; the value's last byte plus the pass number |
//! | bulk extract | bulk_extract | RANGE over the whole store (1 MiB answers), one at a time, scan after scan |
//! | random read | random_read | GET of pair `random() % N` |
//! | random mixed | random_mixed | per four requests, 2 GET then 2 SET of pair `random() % N`; a SET's value is its request count (8 bytes BE) and 32 zero bytes |
//! | hot-spot read | hotspot_read | GET of all 65,536 pairs of group `random() % (N / 65,536)`, `Y` in order 0, 1, 2, ...; then another group |
//!
//! Every answer is checked: a SET's status, a GET's value (the pair's
//! own, or in random mixed one that a SET of that key sent), every pair of
//! every RANGE answer in order and each scan's total.

use crate::mkpairs::{Pairs, Random, GROUP};
use std::time::{Duration, Instant};

const SET: u32 = 0x110;
const GET: u32 = 0x130;
const RANGE: u32 = 0x131;
/// The byte budget of bulk_extract's RANGE requests.
const RANGE_BUDGET: u32 = 0x10_0000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    BulkInsert,
    BulkUpdate,
    BulkExtract,
    RandomRead,
    RandomMixed,
    HotspotRead,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::BulkInsert,
        Kind::BulkUpdate,
        Kind::BulkExtract,
        Kind::RandomRead,
        Kind::RandomMixed,
        Kind::HotspotRead,
    ];

    /// The figure's name in the output and the JSON records.
    pub fn name(self) -> &'static str {
        match self {
            Kind::BulkInsert => "kvlds_bulk_insert",
            Kind::BulkUpdate => "kvlds_bulk_update",
            Kind::BulkExtract => "kvlds_bulk_extract",
            Kind::RandomRead => "kvlds_random_read",
            Kind::RandomMixed => "kvlds_random_mixed",
            Kind::HotspotRead => "kvlds_hotspot_read",
        }
    }

    /// The workload whose `short` name is `s`.
    pub fn from_short(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.short() == s)
    }

    /// A short name, for directory names (Unix socket paths are short).
    pub fn short(self) -> &'static str {
        match self {
            Kind::BulkInsert => "insert",
            Kind::BulkUpdate => "update",
            Kind::BulkExtract => "extract",
            Kind::RandomRead => "read",
            Kind::RandomMixed => "mixed",
            Kind::HotspotRead => "hotspot",
        }
    }

    /// Whether the workload runs until its measured seconds are over (all
    /// but bulk insert, which ends when every pair is in).
    pub fn timed(self) -> bool {
        self != Kind::BulkInsert
    }
}

/// What the answer to a request must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A SET: status 0.
    Done,
    /// A GET of pair `n`: found, with the pair's own value.
    Value(u64),
    /// A GET of pair `n` while random mixed SETs run: the pair's own value
    /// or one a random mixed SET of that key sent.
    MixedValue(u64),
    /// A RANGE continuing the current scan.
    Range,
    /// Not a workload request (the bursty client's end marker): any answer.
    Any,
}

/// The requests of one workload, in the order kivaloo's tool sends them.
pub struct Requests<'a> {
    kind: Kind,
    pairs: &'a Pairs,
    /// Insert and update: the next pair in `mkpairs` order.
    next: u64,
    /// Update: how many times the pairs have been gone through.
    pass: u64,
    random: Random,
    /// Random mixed: requests made so far (kivaloo's `Nr`).
    made: u64,
    /// Hot-spot: the group being read and the next `Y` in it.
    hot: (u64, u64),
    /// Extract: where the next RANGE starts, and whether one is out.
    from: Vec<u8>,
    range_out: bool,
}

impl<'a> Requests<'a> {
    pub fn new(kind: Kind, pairs: &'a Pairs) -> Self {
        Requests {
            kind,
            pairs,
            next: 0,
            pass: 0,
            random: Random::new(),
            made: 0,
            hot: (0, u64::MAX),
            from: Vec::new(),
            range_out: false,
        }
    }

    /// Appends the next request's record to `out` and says what its answer
    /// must be; `None` when there is nothing to send now (bulk insert has
    /// sent every pair, or bulk extract's RANGE is unanswered).
    pub fn next(&mut self, out: &mut Vec<u8>) -> Option<Expect> {
        let p = self.pairs;
        let n = p.len();
        match self.kind {
            Kind::BulkInsert => {
                if self.next == n {
                    return None;
                }
                let pair = p.nth(self.next);
                self.next += 1;
                set(out, &p.key(pair), &p.value(pair));
                Some(Expect::Done)
            }
            Kind::BulkUpdate => {
                if self.next == n {
                    self.next = 0;
                    self.pass += 1;
                }
                let pair = p.nth(self.next);
                self.next += 1;
                let mut value = p.value(pair);
                // bulk_update's "new (somewhat arbitrary) value": the last
                // byte plus the pass number, in a byte.
                value[39] = value[39].wrapping_add(self.pass as u8);
                set(out, &p.key(pair), &value);
                Some(Expect::Done)
            }
            Kind::BulkExtract => {
                if self.range_out {
                    return None;
                }
                self.range_out = true;
                out.extend_from_slice(&RANGE.to_be_bytes());
                out.extend_from_slice(&RANGE_BUDGET.to_be_bytes());
                string(out, &self.from);
                // The end "" means the end of the key space.
                string(out, b"");
                Some(Expect::Range)
            }
            Kind::RandomRead => {
                let pair = self.random.random() % n;
                get(out, &p.key(pair));
                Some(Expect::Value(pair))
            }
            Kind::RandomMixed => {
                let pair = self.random.random() % n;
                let count = self.made;
                self.made += 1;
                if count & 2 != 0 {
                    set(out, &p.key(pair), &mixed_value(self.made));
                    Some(Expect::Done)
                } else {
                    get(out, &p.key(pair));
                    Some(Expect::MixedValue(pair))
                }
            }
            Kind::HotspotRead => {
                if self.hot.1 >= GROUP.min(n) {
                    // Groups with all 65,536 pairs; a store smaller than
                    // one group has only group 0 (kivaloo's tool needs
                    // 65,536 pairs at least).
                    self.hot = (self.random.random() % (n / GROUP).max(1), 0);
                }
                let pair = self.hot.0 * GROUP + self.hot.1;
                self.hot.1 += 1;
                get(out, &p.key(pair));
                Some(Expect::Value(pair))
            }
        }
    }

    /// Bulk extract: the last RANGE was answered; the scan goes on from
    /// `next` (the answer's "next key"; "" once the scan is over, and the
    /// next scan starts from "" again).
    pub fn range_answered(&mut self, next: &[u8]) {
        self.range_out = false;
        self.from.clear();
        self.from.extend_from_slice(next);
    }
}

fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(u8::try_from(s.len()).expect("kvlds strings are at most 255 bytes"));
    out.extend_from_slice(s);
}

fn set(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.extend_from_slice(&SET.to_be_bytes());
    string(out, key);
    string(out, value);
}

fn get(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(&GET.to_be_bytes());
    string(out, key);
}

/// random_mixed's SET value: its request count after counting itself,
/// 8 bytes big-endian, then the 32 zero bytes its buffer started with.
fn mixed_value(count: u64) -> [u8; 40] {
    let mut v = [0u8; 40];
    v[..8].copy_from_slice(&count.to_be_bytes());
    v
}

/// What a checked answer amounted to.
pub struct Checked<'r> {
    /// Completions to count: 1, or the pairs of a RANGE answer (kivaloo's
    /// bulk_extract counts pairs read).
    pub completions: u64,
    /// A RANGE answer's "next key".
    pub range_next: Option<&'r [u8]>,
}

/// Checks the answers of one workload's requests.
pub struct Answers<'a> {
    pairs: &'a Pairs,
    /// Random mixed: pair number of request `i`, as far as needed so far.
    mixed_keys: Vec<u32>,
    mixed_random: Random,
    /// Extract: pairs of the current scan seen so far.
    scanned: u64,
}

impl<'a> Answers<'a> {
    pub fn new(pairs: &'a Pairs) -> Self {
        Answers {
            pairs,
            mixed_keys: Vec::new(),
            mixed_random: Random::new(),
            scanned: 0,
        }
    }

    pub fn check<'r>(&mut self, expect: Expect, answer: &'r [u8]) -> Result<Checked<'r>, String> {
        let one = Checked {
            completions: 1,
            range_next: None,
        };
        match expect {
            Expect::Any => Ok(one),
            Expect::Done if answer == [0, 0, 0, 0] => Ok(one),
            Expect::Done => Err(format!("SET answered {answer:02x?}, not status 0")),
            Expect::Value(n) => {
                if found(answer)? == self.pairs.value(n) {
                    Ok(one)
                } else {
                    Err(format!("GET of pair {n} returned {answer:02x?}"))
                }
            }
            Expect::MixedValue(n) => {
                let v = found(answer)?;
                if v == self.pairs.value(n) || self.mixed_set(n, v) {
                    Ok(one)
                } else {
                    Err(format!(
                        "GET of pair {n} returned {v:02x?}, which no SET of it sent"
                    ))
                }
            }
            Expect::Range => self.range(answer),
        }
    }

    /// Whether `v` is the value of a random mixed SET of pair `n`.
    fn mixed_set(&mut self, n: u64, v: &[u8]) -> bool {
        if v.len() != 40 || v[8..].iter().any(|&b| b != 0) {
            return false;
        }
        // The value is its request's count after counting itself; request
        // number count - 1 must be a SET (the 3rd or 4th of its four).
        let count = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
        let Some(i) = count.checked_sub(1).filter(|i| i & 2 != 0) else {
            return false;
        };
        // Both clients draw keys from a fresh copy of the same stream, so
        // the key of request i is the i-th draw, whichever client sent it.
        if i > u64::from(u32::MAX) {
            return false;
        }
        while self.mixed_keys.len() as u64 <= i {
            let pair = self.mixed_random.random() % self.pairs.len();
            self.mixed_keys.push(pair as u32);
        }
        u64::from(self.mixed_keys[i as usize]) == n
    }

    fn range<'r>(&mut self, answer: &'r [u8]) -> Result<Checked<'r>, String> {
        let bad = |why: &str| format!("malformed RANGE answer: {why}");
        if answer.len() < 9 || answer[..4] != [0, 0, 0, 0] {
            return Err(bad("no status 0 and count"));
        }
        let count = u32::from_be_bytes(answer[4..8].try_into().expect("4 bytes"));
        let mut at = 8;
        let mut string = || -> Result<&'r [u8], String> {
            let len = usize::from(*answer.get(at).ok_or_else(|| bad("cut short"))?);
            let s = answer
                .get(at + 1..at + 1 + len)
                .ok_or_else(|| bad("cut short"))?;
            at += 1 + len;
            Ok(s)
        };
        let next = string()?;
        for _ in 0..count {
            let (k, v) = (string()?, string()?);
            let i = self.scanned;
            if i >= self.pairs.len() {
                return Err(format!("a scan returned more than {i} pairs"));
            }
            let pair = self.pairs.nth(i);
            if k != self.pairs.key(pair) || v != self.pairs.value(pair) {
                return Err(format!("scan position {i}: not pair {pair}"));
            }
            self.scanned += 1;
        }
        if at != answer.len() {
            return Err(bad("bytes after the last pair"));
        }
        if next.is_empty() {
            if self.scanned != self.pairs.len() {
                return Err(format!(
                    "a scan ended after {} pairs, not {}",
                    self.scanned,
                    self.pairs.len()
                ));
            }
            self.scanned = 0;
        }
        Ok(Checked {
            completions: u64::from(count),
            range_next: Some(next),
        })
    }
}

/// A GET answer's value, which must be there.
fn found(answer: &[u8]) -> Result<&[u8], String> {
    match answer {
        [0, 0, 0, 0, len, v @ ..] if v.len() == usize::from(*len) => Ok(v),
        _ => Err(format!(
            "GET answered {answer:02x?}, not status 0 and a value"
        )),
    }
}

/// How long a workload runs and how its rate is taken.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Timed workloads: time before counting starts.
    pub warmup: Duration,
    /// Timed workloads: windows counted; the rate is their median.
    pub windows: u32,
    /// Length of a window (kivaloo's tools: one second).
    pub window: Duration,
}

impl Timing {
    /// Bulk insert, when shorter than three windows, is counted in
    /// windows this much shorter (250 ms for one-second windows).
    pub const FINER: u32 = 4;
}

/// A rate: the median count over windows, per second.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub per_sec: f64,
    pub window: Duration,
    /// Windows the median was taken over; 0 when the run was too short
    /// for a median and `per_sec` is its overall rate.
    pub windows: usize,
}

/// kivaloo's bench_median: the middle count, or the mean of the two
/// middle ones.
fn median(counts: &[u64]) -> f64 {
    let mut s = counts.to_vec();
    s.sort_unstable();
    let mid = (s.len() - 1) / 2;
    if s.len().is_multiple_of(2) {
        (s[mid] + s[mid + 1]) as f64 / 2.0
    } else {
        s[mid] as f64
    }
}

/// Counts completions the way kivaloo's bench.c does for its time-bounded
/// tools: nothing until the warm-up is over; then the first completion
/// starts a window, and the first completion after a window's end starts
/// the next; done when the completion after the last window comes.
pub struct Ticks {
    start_at: Instant,
    window: Duration,
    counts: Vec<u64>,
    current: usize,
    window_end: Option<Instant>,
    done: bool,
}

impl Ticks {
    pub fn new(t: &Timing, now: Instant) -> Self {
        Ticks {
            start_at: now + t.warmup,
            window: t.window,
            counts: vec![0; t.windows.max(1) as usize],
            current: 0,
            window_end: None,
            done: false,
        }
    }

    /// Counts `completions` done at `now`; true once counting is over.
    pub fn tick(&mut self, now: Instant, completions: u64) -> bool {
        if self.done {
            return true;
        }
        let end = match self.window_end {
            None if now < self.start_at => return false,
            None => *self.window_end.insert(now + self.window),
            Some(end) => end,
        };
        if now > end {
            self.current += 1;
            if self.current == self.counts.len() {
                self.done = true;
                return true;
            }
            self.window_end = Some(now + self.window);
        }
        self.counts[self.current] += completions;
        false
    }

    pub fn rate(&self) -> Rate {
        Rate {
            per_sec: median(&self.counts) / self.window.as_secs_f64(),
            window: self.window,
            windows: self.counts.len(),
        }
    }
}

/// Counts a count-bounded run (bulk insert) in fine windows from its
/// start, so the rate can be taken over whole windows when the run is
/// long enough and over finer ones when it is not.
pub struct Bins {
    start: Instant,
    bin: Duration,
    per_window: u32,
    counts: Vec<u64>,
}

impl Bins {
    pub fn new(t: &Timing, start: Instant) -> Self {
        Bins {
            start,
            bin: t.window / Timing::FINER,
            per_window: Timing::FINER,
            counts: Vec::new(),
        }
    }

    pub fn tick(&mut self, now: Instant, completions: u64) {
        let i = (now.duration_since(self.start).as_nanos() / self.bin.as_nanos()) as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += completions;
    }

    /// The median over whole windows if the run (ending at `end`) lasted
    /// three windows or more, else over the finer ones; the last, partial
    /// one left out either way. A run shorter than three fine windows gets
    /// its overall rate: a median of one or two windows says little.
    pub fn rate(&self, end: Instant) -> Rate {
        let elapsed = end.duration_since(self.start);
        let whole = (elapsed.as_nanos() / self.bin.as_nanos()) as usize;
        let bins = &self.counts[..whole.min(self.counts.len())];
        let per = self.per_window as usize;
        if whole >= 3 * per {
            let windows: Vec<u64> = bins.chunks_exact(per).map(|c| c.iter().sum()).collect();
            let window = self.bin * self.per_window;
            return Rate {
                per_sec: median(&windows) / window.as_secs_f64(),
                window,
                windows: windows.len(),
            };
        }
        if bins.len() < 3 {
            let total: u64 = self.counts.iter().sum();
            return Rate {
                per_sec: total as f64 / elapsed.as_secs_f64(),
                window: elapsed,
                windows: 0,
            };
        }
        Rate {
            per_sec: median(bins) / self.bin.as_secs_f64(),
            window: self.bin,
            windows: bins.len(),
        }
    }
}

/// A workload's rate keeper: ticks for timed workloads, bins for bulk
/// insert.
pub enum Meter {
    Timed(Ticks),
    Counted(Bins),
}

impl Meter {
    pub fn new(kind: Kind, t: &Timing, now: Instant) -> Self {
        if kind.timed() {
            Meter::Timed(Ticks::new(t, now))
        } else {
            Meter::Counted(Bins::new(t, now))
        }
    }

    /// Counts completions; true once a timed workload's counting is over.
    pub fn tick(&mut self, now: Instant, completions: u64) -> bool {
        match self {
            Meter::Timed(t) => t.tick(now, completions),
            Meter::Counted(b) => {
                b.tick(now, completions);
                false
            }
        }
    }

    /// The rate, for a run whose last counted completion came at `end`.
    pub fn rate(&self, end: Instant) -> Rate {
        match self {
            Meter::Timed(t) => t.rate(),
            Meter::Counted(b) => b.rate(end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(r: &mut Requests) -> (Vec<u8>, Expect) {
        let mut out = Vec::new();
        let e = r.next(&mut out).expect("a request");
        (out, e)
    }

    #[test]
    fn insert_sends_every_pair_once_in_mkpairs_order() {
        let p = Pairs::new(100);
        let mut r = Requests::new(Kind::BulkInsert, &p);
        for i in 0..100 {
            let (rec, e) = record(&mut r);
            assert_eq!(e, Expect::Done);
            let n = p.nth(i);
            assert_eq!(&rec[..4], &SET.to_be_bytes());
            assert_eq!(&rec[5..45], &p.key(n));
            assert_eq!(&rec[46..86], &p.value(n));
        }
        assert!(r.next(&mut Vec::new()).is_none());
    }

    #[test]
    fn update_changes_the_last_value_byte_by_the_pass() {
        let p = Pairs::new(3);
        let mut r = Requests::new(Kind::BulkUpdate, &p);
        for pass in 0..3u8 {
            for i in 0..3 {
                let (rec, _) = record(&mut r);
                let mut v = p.value(p.nth(i));
                v[39] = v[39].wrapping_add(pass);
                assert_eq!(&rec[46..86], &v, "pass {pass}, pair {i}");
            }
        }
    }

    #[test]
    fn mixed_is_two_gets_then_two_sets_and_its_values_check() {
        let p = Pairs::new(1000);
        let mut r = Requests::new(Kind::RandomMixed, &p);
        let mut a = Answers::new(&p);
        let mut draws = Random::new();
        for i in 0..40u64 {
            let (rec, e) = record(&mut r);
            let pair = draws.random() % 1000;
            assert_eq!(&rec[5..45], &p.key(pair));
            if i % 4 < 2 {
                assert_eq!(e, Expect::MixedValue(pair));
            } else {
                assert_eq!(&rec[..4], &SET.to_be_bytes());
                let v = &rec[46..86];
                assert_eq!(v, &mixed_value(i + 1));
                // The value this SET wrote is what a GET of it may find...
                let mut answer = vec![0, 0, 0, 0, 40];
                answer.extend_from_slice(v);
                a.check(Expect::MixedValue(pair), &answer).unwrap();
                // ...and not what a GET of another pair may.
                let other = (pair + 1) % 1000;
                assert!(a.check(Expect::MixedValue(other), &answer).is_err());
            }
        }
        // A GET's count is not a SET's.
        let mut answer = vec![0, 0, 0, 0, 40];
        answer.extend_from_slice(&mixed_value(1));
        let first = Random::new().random() % 1000;
        assert!(a.check(Expect::MixedValue(first), &answer).is_err());
    }

    #[test]
    fn hotspot_reads_whole_groups_in_order() {
        let p = Pairs::new(3 * GROUP + 5);
        let mut r = Requests::new(Kind::HotspotRead, &p);
        let mut draws = Random::new();
        for _ in 0..2 {
            let x = draws.random() % 3;
            for y in 0..GROUP {
                assert_eq!(record(&mut r).1, Expect::Value(x * GROUP + y));
            }
        }
    }

    #[test]
    fn answers_that_are_wrong_are_refused() {
        let p = Pairs::new(10);
        let mut a = Answers::new(&p);
        let mut good = vec![0, 0, 0, 0, 40];
        good.extend_from_slice(&p.value(3));
        assert!(a.check(Expect::Value(3), &good).is_ok());
        assert!(a.check(Expect::Value(4), &good).is_err());
        assert!(a.check(Expect::Value(3), &[0, 0, 0, 1]).is_err());
        assert!(a.check(Expect::Done, &[0, 0, 0, 0]).is_ok());
        assert!(a.check(Expect::Done, &[0, 0, 0, 1]).is_err());
    }

    /// A RANGE answer holding pairs `from..to` (in mkpairs order).
    fn range_answer(p: &Pairs, from: u64, to: u64, next: &[u8]) -> Vec<u8> {
        let mut a = vec![0, 0, 0, 0];
        a.extend_from_slice(&((to - from) as u32).to_be_bytes());
        string(&mut a, next);
        for i in from..to {
            string(&mut a, &p.key(p.nth(i)));
            string(&mut a, &p.value(p.nth(i)));
        }
        a
    }

    #[test]
    fn scans_must_return_every_pair_in_order() {
        let p = Pairs::new(10);
        let mut a = Answers::new(&p);
        let mid = p.key(p.nth(6));
        let first = range_answer(&p, 0, 6, &mid);
        let c = a.check(Expect::Range, &first).unwrap();
        assert_eq!((c.completions, c.range_next), (6, Some(&mid[..])));
        let rest = range_answer(&p, 6, 10, b"");
        let c = a.check(Expect::Range, &rest).unwrap();
        assert_eq!((c.completions, c.range_next), (4, Some(&b""[..])));
        // A scan that skips a pair, or ends early, is refused.
        assert!(a
            .check(Expect::Range, &range_answer(&p, 1, 10, b""))
            .is_err());
        let mut a = Answers::new(&p);
        assert!(a
            .check(Expect::Range, &range_answer(&p, 0, 9, b""))
            .is_err());
    }

    #[test]
    fn ticks_skip_the_warmup_and_take_the_median() {
        let t = Timing {
            warmup: Duration::from_secs(2),
            windows: 3,
            window: Duration::from_secs(1),
        };
        let s = Instant::now();
        let at = |ms: u64| s + Duration::from_millis(ms);
        let mut ticks = Ticks::new(&t, s);
        assert!(!ticks.tick(at(1000), 1_000_000)); // warm-up: not counted
        assert!(!ticks.tick(at(2000), 10)); // starts window 1, ends at 3000
        assert!(!ticks.tick(at(2999), 10));
        assert!(!ticks.tick(at(3001), 50)); // window 2, ends at 4001
        assert!(!ticks.tick(at(4100), 30)); // window 3, ends at 5100
        assert!(ticks.tick(at(5200), 1)); // over
        assert_eq!(ticks.rate().per_sec, 30.0);
    }

    #[test]
    fn short_inserts_are_counted_in_finer_windows() {
        let t = Timing {
            warmup: Duration::ZERO,
            windows: 5,
            window: Duration::from_secs(1),
        };
        let s = Instant::now();
        let mut b = Bins::new(&t, s);
        for ms in 0..1100u64 {
            b.tick(s + Duration::from_millis(ms), 1 + ms / 250);
        }
        // Bins of 250 ms: 250, 500, 750, 1000 per bin, and a partial one.
        let r = b.rate(s + Duration::from_millis(1100));
        assert_eq!(r.window, Duration::from_millis(250));
        assert_eq!(r.windows, 4);
        assert_eq!(r.per_sec, 625.0 * 4.0);
        // Three seconds or more: whole seconds.
        let mut b = Bins::new(&t, s);
        for ms in 0..3500u64 {
            b.tick(s + Duration::from_millis(ms), 1);
        }
        let r = b.rate(s + Duration::from_millis(3500));
        assert_eq!(
            (r.window, r.windows, r.per_sec),
            (Duration::from_secs(1), 3, 1000.0)
        );
    }
}
