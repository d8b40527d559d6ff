//! The follower suite's lag measurement, for any writer and reader (kivi's
//! writer and follower, SlateDB's writer and `DbReader`), so that both are
//! driven exactly alike: `writers` threads put random kv40 keys among the
//! n, each put returning once durable; a marker thread writes a numbered
//! key every 10 ms; a probe reads each marker on the reader, every 100 us,
//! from the writer's acknowledgement until it is there. A marker's lag is
//! that time.

use crate::kv40::{self, Rng};
use crate::BenchError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the probe waits for one marker before it gives up.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(30);

/// Between two markers.
const MARKER_EVERY: Duration = Duration::from_millis(10);

/// Between two reads of a marker not yet visible.
const PROBE_EVERY: Duration = Duration::from_micros(100);

/// What one measurement found.
pub(crate) struct Lag {
    /// Each marker's, in the order written.
    pub lags: Vec<Duration>,
    /// Puts the writer threads made (markers not counted).
    pub writes: u64,
    /// Seconds from the start to the writers' stop (the probe's wait for
    /// the last markers after it not counted).
    pub write_secs: f64,
    /// The marker the probe gave up on after `GIVE_UP`, and the markers
    /// left unprobed after it.
    pub gave_up: Option<(u64, u64)>,
}

/// What the probe returns: each marker's lag, and [`Lag::gave_up`].
type Probed = (Vec<Duration>, Option<(u64, u64)>);

/// The marker keys: `{prefix}{number:08}`.
fn marker(prefix: &str, m: u64) -> String {
    format!("{prefix}{m:08}")
}

/// Runs the load and the markers for `seconds`. `put` writes one pair and
/// returns once it is durable; `visible` reads a key on the reader.
pub(crate) fn measure<P, V>(
    writers: u64,
    n: u64,
    seconds: f64,
    marker_prefix: &str,
    put: P,
    visible: V,
) -> Result<Lag, BenchError>
where
    P: Fn(&[u8], &[u8]) -> Result<(), BenchError> + Sync,
    V: Fn(&[u8]) -> Result<bool, BenchError> + Sync,
{
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(u64, Instant)>();
    let started = Instant::now();
    let (put, visible) = (&put, &visible);
    std::thread::scope(|s| {
        let load: Vec<_> = (0..writers)
            .map(|w| {
                let stop = &stop;
                s.spawn(move || -> Result<u64, BenchError> {
                    let mut rng = Rng::new(w + 1);
                    let mut done = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let i = rng.below(n.max(1));
                        put(&kv40::key(i), &kv40::value(i, done + 1))?;
                        done += 1;
                    }
                    Ok(done)
                })
            })
            .collect();
        let markers = {
            let stop = &stop;
            s.spawn(move || -> Result<(), BenchError> {
                let mut m = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    put(marker(marker_prefix, m).as_bytes(), b"m")?;
                    let _ = tx.send((m, Instant::now()));
                    m += 1;
                    std::thread::sleep(MARKER_EVERY);
                }
                Ok(())
            })
        };
        let probe = s.spawn(move || -> Result<Probed, BenchError> {
            let mut lags = Vec::new();
            let mut rx = rx.into_iter();
            while let Some((m, acked)) = rx.next() {
                let key = marker(marker_prefix, m);
                let give_up = acked + GIVE_UP;
                while !visible(key.as_bytes())? {
                    if Instant::now() > give_up {
                        // The rest are counted, not waited for.
                        return Ok((lags, Some((m, rx.count() as u64))));
                    }
                    std::thread::sleep(PROBE_EVERY);
                }
                lags.push(acked.elapsed());
            }
            Ok((lags, None))
        });
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        let mut writes = 0;
        for h in load {
            writes += h.join().expect("writer thread")?;
        }
        markers.join().expect("marker thread")?;
        let write_secs = started.elapsed().as_secs_f64();
        let (lags, gave_up) = probe.join().expect("probe thread")?;
        Ok(Lag {
            lags,
            writes,
            write_secs,
            gave_up,
        })
    })
}
