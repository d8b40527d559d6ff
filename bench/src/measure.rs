//! Timing for the benchmark: wall clock, process CPU time and latency
//! percentiles.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// CPU time (user + system) of the whole process, all threads included, so
/// the engine's background work counts against the operations that caused it.
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct we hand it; zeroed is a valid
    // starting value for a plain C struct.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Bytes this process made the kernel read from and write to the devices
/// (`/proc/self/io`: `read_bytes`, and `write_bytes` less
/// `cancelled_write_bytes`; every thread counts, and a write counts when
/// the page is dirtied), or zeros where the kernel does not say.
pub fn device_io() -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string("/proc/self/io") else {
        return (0, 0);
    };
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let written = field("write_bytes:").saturating_sub(field("cancelled_write_bytes:"));
    (field("read_bytes:"), written)
}

/// Started at the beginning of a measured phase.
pub struct Meter {
    wall: Instant,
    cpu: Duration,
    io: (u64, u64),
}

/// What one phase measured.
#[derive(Debug, Clone)]
pub struct Figure {
    pub workload: &'static str,
    pub label: &'static str,
    pub ops: u64,
    pub wall: Duration,
    pub cpu: Duration,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub bytes_per_pair: Option<f64>,
    /// Bytes read from and written to the devices during the phase.
    pub device_read: u64,
    pub device_written: u64,
    /// The workload reached the time cap before its operations were done
    /// (`ops` counts those it did).
    pub stopped_early: bool,
}

impl Figure {
    /// Marks the figure as cut short by the time cap when `done` is under
    /// the operations the workload was to do.
    pub fn cut_at(mut self, planned: u64) -> Self {
        self.stopped_early = self.ops < planned;
        self
    }

    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    pub fn cpu_us_per_op(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.ops.max(1) as f64
    }

    pub fn with_latencies(mut self, mut nanos: Vec<u64>) -> Self {
        nanos.sort_unstable();
        self.p50_us = percentile(&nanos, 50.0);
        self.p99_us = percentile(&nanos, 99.0);
        self.p999_us = percentile(&nanos, 99.9);
        self
    }
}

thread_local! {
    /// `--max-seconds` in milliseconds (0: none): how long a timed
    /// workload run on this thread goes on before it stops and counts the
    /// operations it did. Per thread, so that tests running workloads side
    /// by side do not cut each other short.
    static TIME_CAP_MS: Cell<u64> = const { Cell::new(0) };
}

/// Sets the time cap of the timed workloads this thread runs from here on.
pub fn set_time_cap(cap: Option<Duration>) {
    TIME_CAP_MS.set(cap.map_or(0, |c| c.as_millis().max(1) as u64));
}

impl Meter {
    /// Whether the workload this meter times has run past the time cap.
    pub fn spent(&self) -> bool {
        let cap = TIME_CAP_MS.get();
        cap > 0 && self.wall.elapsed() >= Duration::from_millis(cap)
    }

    pub fn start() -> Meter {
        Meter {
            cpu: process_cpu(),
            io: device_io(),
            wall: Instant::now(),
        }
    }

    pub fn finish(self, workload: &'static str, label: &'static str, ops: u64) -> Figure {
        let wall = self.wall.elapsed();
        let (read, written) = device_io();
        Figure {
            workload,
            label,
            ops,
            wall,
            cpu: process_cpu().saturating_sub(self.cpu),
            p50_us: None,
            p99_us: None,
            p999_us: None,
            bytes_per_pair: None,
            device_read: read.saturating_sub(self.io.0),
            device_written: written.saturating_sub(self.io.1),
            stopped_early: false,
        }
    }
}

/// Nearest-rank percentile of sorted nanoseconds, in microseconds.
pub fn percentile(sorted_nanos: &[u64], p: f64) -> Option<f64> {
    if sorted_nanos.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted_nanos.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted_nanos.len()) - 1;
    Some(sorted_nanos[i] as f64 / 1000.0)
}

/// The nearest-rank `p`-th percentile (0-100) of `v`, in microseconds.
pub fn percentile_us(v: &[std::time::Duration], p: f64) -> Option<f64> {
    let mut nanos: Vec<u64> = v.iter().map(|d| d.as_nanos() as u64).collect();
    nanos.sort_unstable();
    percentile(&nanos, p)
}

/// Nanoseconds since `t`, for latency samples.
pub fn nanos_since(t: Instant) -> u64 {
    t.elapsed().as_nanos().try_into().unwrap_or(u64::MAX)
}

/// Resets the process's peak resident set size (Linux: writing 5 to
/// /proc/self/clear_refs), so the next [`peak_rss`] covers what follows.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak resident set size in bytes since the last reset
/// (VmHWM), if the system says.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes the files under `dir` occupy on disk (allocated blocks, so
/// preallocated or sparse files count what they really take).
pub fn disk_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        // A store may delete a file between the listing and here.
        let meta = match entry.metadata() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            m => m?,
        };
        total += if meta.is_dir() {
            disk_bytes(&entry.path())?
        } else {
            meta.blocks() * 512
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[7000], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn cpu_time_advances_with_work() {
        let before = process_cpu();
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_add(crate::kv40::mix(x));
        }
        assert!(x != 1 && process_cpu() > before);
    }
}
