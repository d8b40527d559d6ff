//! Server workloads (`kivi bench --server`): `kivi serve` measured over
//! the network protocols, client and server on the same machine, and
//! measured alongside the servers it is compared with, in the same run.
//!
//! - kivaloo's six kvlds workloads (see `kvlds_workload`) on kivaloo's own
//!   data (`mkpairs`), every answer checked, each driven by two clients:
//!   - the trickling client (`kvlds_client`), which drives a server
//!     exactly as kivaloo's bench tools do: 4,096 requests in flight on
//!     one connection, one new request per answer, 4 KiB reads and
//!     writes. This is the client the goals are judged on.
//!   - the bursty client: a writer thread that fills a 256 KiB buffer and
//!     flushes it only when 4,096 requests are outstanding, and a reader
//!     thread with a 1 MiB buffer; the load a pipelining client gives.
//!
//!   Timed workloads run `--warmup` seconds, then `--seconds` one-second
//!   windows, and report the median window, as kivaloo's tools do (they
//!   use 50 s and 10 or 100 s). Bulk insert ends when all N pairs are in:
//!   its median is over one-second windows, or over 250 ms windows when
//!   it took under three seconds. Every workload starts on a fresh server
//!   over a Unix socket; all but bulk insert find the N pairs loaded first
//!   (by the trickling client's SETs, untimed). Each bulk insert gets its
//!   own fresh server.
//! - With `--kivaloo DIR`, a built kivaloo source tree: each workload runs
//!   on kivaloo too (lbs and kvlds started as kivaloo's bench-local.sh
//!   starts them), stores alternating within each workload so a noisy
//!   moment hits both, and the ratios come from this run. The store's
//!   size on disk after random mixed is recorded for both.
//! - redis-benchmark (Debian's redis-tools) against `kivi serve` and, in
//!   the same round, against a real redis-server with `appendfsync always`
//!   and with `appendfsync everysec`: SET and GET with 1,000-command
//!   pipelines, with 16-command pipelines from 50 clients, and unpipelined
//!   from 50 clients.
//! - On an object store (`s3`, not run unless asked): SETs from 1,000
//!   redis-benchmark connections, unpipelined and with 16-command
//!   pipelines, against `kivi serve` on the S3 server the `AWS_*`
//!   variables name with every request delayed 30 ms (`KIVI_OBJECT_DELAY_MS`,
//!   the round trip of S3 Standard) and without, and in the same round on a
//!   local directory and against redis-server with `appendfsync always`;
//!   the object puts per SET from INFO.
//! - TLS (`tls`, not run unless asked): SET and GET with 1,000-command
//!   pipelines from redis-benchmark, plain and over TLS, against `kivi
//!   serve` and redis-server (always and everysec), each on a fresh server,
//!   all in the same round; the certificate is a self-signed one made with
//!   the openssl CLI.

use crate::kvlds_client::{trickle, Conn, Pending, Run, Stats, IN_FLIGHT};
use crate::kvlds_workload::{Answers, Expect, Kind, Meter, Requests, Timing};
use crate::measure::disk_bytes;
use crate::mkpairs::Pairs;
use crate::{io_err, BenchError, Record};
use kivi_kvlds_wire::packet;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// kvlds PARAMS: the bursty client's end marker (every kvlds answers it).
const PARAMS: u32 = 0x100;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The kivi program (`kivi serve` is started from it).
    pub program: PathBuf,
    pub dir: PathBuf,
    pub n: u64,
    pub rounds: u32,
    pub timing: Timing,
    /// A built kivaloo source tree (DIR/lbs/lbs and DIR/kvlds/kvlds).
    pub kivaloo: Option<PathBuf>,
    /// The kvlds workloads to run (all by default), and whether to run
    /// redis-benchmark.
    pub kvlds: Vec<Kind>,
    pub redis: bool,
    /// Whether to run the TLS comparison.
    pub tls: bool,
    /// The bucket for the object-store runs (`s3`), on the server the
    /// `AWS_*` variables name; `None`: not run.
    pub s3: Option<String>,
}

/// A `kivi serve` child on a fresh store, stopped (SIGTERM) on drop.
pub struct KiviServer {
    child: Child,
    pub kvlds: Option<String>,
    pub resp: Option<String>,
    pub tls: Option<String>,
}

impl KiviServer {
    /// Starts `kivi serve` on the store in `dir`; `kvlds` is the kvlds
    /// listener's address, if one is wanted (a Unix socket path, or
    /// host:port), and `resp` asks for a RESP listener on a free port.
    pub fn start(
        program: &Path,
        dir: &Path,
        kvlds: Option<&str>,
        resp: bool,
    ) -> Result<Self, BenchError> {
        Self::start_in(program, dir, kvlds, resp, None)
    }

    /// [`start`](Self::start), the server started inside `cgroup` if given.
    pub fn start_in(
        program: &Path,
        dir: &Path,
        kvlds: Option<&str>,
        resp: bool,
        cgroup: Option<&crate::cgroup::MemoryCgroup>,
    ) -> Result<Self, BenchError> {
        let mut cmd = Command::new(program);
        if let Some(c) = cgroup {
            c.run_inside(&mut cmd);
        }
        cmd.arg("-d").arg(dir).arg("serve");
        if resp {
            cmd.args(["--resp", "127.0.0.1:0"]);
        } else {
            cmd.arg("--no-resp");
        }
        if let Some(a) = kvlds {
            cmd.args(["--kvlds", a]);
        }
        Self::spawn(cmd, kvlds, usize::from(kvlds.is_some()) + usize::from(resp))
    }

    /// `kivi serve` on the object store at `url` (RESP on a free port),
    /// every request to it delayed `delay_ms` (`KIVI_OBJECT_DELAY_MS`).
    pub fn start_url(program: &Path, url: &str, delay_ms: u64) -> Result<Self, BenchError> {
        let mut cmd = Command::new(program);
        cmd.args(["-d", url, "serve", "--resp", "127.0.0.1:0"])
            .env("KIVI_OBJECT_DELAY_MS", delay_ms.to_string());
        Self::spawn(cmd, None, 1)
    }

    /// `kivi serve` with only a TLS RESP listener, on a free port.
    pub fn start_tls(program: &Path, dir: &Path, tls: &TlsFiles) -> Result<Self, BenchError> {
        let mut cmd = Command::new(program);
        cmd.arg("-d").arg(dir).arg("serve");
        cmd.args(["--no-resp", "--tls", "127.0.0.1:0", "--tls-cert"])
            .arg(&tls.cert)
            .arg("--tls-key")
            .arg(&tls.key);
        Self::spawn(cmd, None, 1)
    }

    /// Starts `cmd` and reads the addresses of its `listeners`.
    fn spawn(mut cmd: Command, kvlds: Option<&str>, listeners: usize) -> Result<Self, BenchError> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| io_err("start kivi serve", e))?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut s = KiviServer {
            child,
            kvlds: None,
            resp: None,
            tls: None,
        };
        for _ in 0..listeners {
            let line = lines
                .next()
                .ok_or_else(|| BenchError("kivi serve ended before listening".into()))?
                .map_err(|e| io_err("read kivi serve's output", e))?;
            let addr = |proto: &str| {
                line.strip_prefix(&format!("kivi serve: {proto} listening on "))
                    .and_then(|r| r.split(' ').next())
                    .map(str::to_string)
            };
            if let Some(a) = addr("kvlds") {
                // A socket path is known already (and may hold a space).
                s.kvlds = Some(kvlds.filter(|k| k.contains('/')).map_or(a, str::to_string));
            } else if let Some(a) = addr("resp") {
                s.resp = Some(a);
            } else if let Some(a) = addr("tls") {
                s.tls = Some(a);
            } else {
                return Err(BenchError(format!("kivi serve said: {line}")));
            }
        }
        Ok(s)
    }

    /// Whether the server is still running (not exited, not killed).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for KiviServer {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a child we spawned and have not yet
        // waited for (so not reused); no memory is involved.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// kivaloo's lbs and kvlds, started as its bench-local.sh starts them, in
/// the work directory `w`. Both daemonize, so they are not our children:
/// on drop they are stopped through their pid files (kvlds first), and
/// the drop returns once both are gone.
pub struct Kivaloo {
    /// kvlds then lbs.
    pids: Vec<i32>,
    pub socket: PathBuf,
}

impl Kivaloo {
    /// Checks that `src` is a built kivaloo tree.
    pub fn check(src: &Path) -> Result<(), BenchError> {
        for tool in ["lbs/lbs", "kvlds/kvlds"] {
            if !src.join(tool).is_file() {
                return Err(BenchError(format!(
                    "--kivaloo {}: no {tool} there; build kivaloo with bench/kivaloo-build.sh \
                     and pass the directory it prints",
                    src.display()
                )));
            }
        }
        Ok(())
    }

    pub fn start(src: &Path, w: &Path) -> Result<Self, BenchError> {
        // The daemons' parents exit at once, leaving them to init, which in
        // a container may never reap them: made this process's orphans,
        // they are reaped here when stopped. Best effort; on failure they
        // are still stopped, only maybe left as zombies.
        #[cfg(target_os = "linux")]
        // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer and sets a flag
        // on this process; no memory is involved.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        std::fs::create_dir_all(w).map_err(|e| io_err(format!("create {}", w.display()), e))?;
        let mut k = Kivaloo {
            pids: Vec::new(),
            socket: w.join("sock_kvlds"),
        };
        let path = |name: &str| w.join(name).into_os_string();
        daemon(
            &src.join("lbs/lbs"),
            &[
                "-d".into(),
                w.as_os_str().to_owned(),
                "-s".into(),
                path("sock_lbs"),
                "-b".into(),
                "2048".into(),
                "-p".into(),
                path("lbs.pid"),
            ],
        )?;
        k.pids.insert(0, read_pid(&w.join("lbs.pid"))?);
        daemon(
            &src.join("kvlds/kvlds"),
            &[
                "-s".into(),
                path("sock_kvlds"),
                "-l".into(),
                path("sock_lbs"),
                "-p".into(),
                path("kvlds.pid"),
            ],
        )?;
        k.pids.insert(0, read_pid(&w.join("kvlds.pid"))?);
        Ok(k)
    }
}

/// Runs a program that daemonizes: it returns once the daemon is ready.
fn daemon(program: &Path, args: &[std::ffi::OsString]) -> Result<(), BenchError> {
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| io_err(format!("start {}", program.display()), e))?;
    if !status.success() {
        return Err(BenchError(format!(
            "{} failed: {status}",
            program.display()
        )));
    }
    Ok(())
}

fn read_pid(path: &Path) -> Result<i32, BenchError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| io_err(format!("read {}", path.display()), e))?;
    text.trim()
        .parse()
        .map_err(|_| BenchError(format!("{}: not a pid: {text:?}", path.display())))
}

/// Whether process `pid` has exited: reaped here (it became our child),
/// gone, or a zombie left to an init that does not reap.
fn exited(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid(2) on one pid, writing only to `status`.
    match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
        r if r == pid => return true,
        // Our child, still running.
        0 => return false,
        // Not our child: ask the kernel about it.
        _ => {}
    }
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false)
}

impl Drop for Kivaloo {
    fn drop(&mut self) {
        for &pid in &self.pids {
            // SAFETY: kill(2) on the pid the daemon wrote to its pid file;
            // no memory is involved.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while !exited(pid) {
                if Instant::now() > deadline {
                    // SAFETY: as above.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

// ---- the bursty client ----

/// Reads one kvlds packet; returns its ID and leaves its record in `buf`.
fn read_packet(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<u64, BenchError> {
    buf.resize(packet::HEADER_LEN, 0);
    r.read_exact(buf)
        .map_err(|e| io_err("read a kvlds answer", e))?;
    let n = u32::from_be_bytes(buf[8..12].try_into().expect("4 bytes")) as usize;
    buf.resize(packet::HEADER_LEN + n + packet::TRAILER_LEN, 0);
    r.read_exact(&mut buf[packet::HEADER_LEN..])
        .map_err(|e| io_err("read a kvlds answer", e))?;
    // Check the framing exactly as the server checks requests (the length
    // cap is for requests; answers may be longer).
    let id = u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
    if packet::crc(&buf[..12]) != buf[12..16] {
        return Err(BenchError("kvlds answer with a bad header CRC".into()));
    }
    let mut want = packet::crc(&buf[packet::HEADER_LEN..packet::HEADER_LEN + n]);
    for i in 0..4 {
        want[i] ^= buf[12 + i];
    }
    if buf[packet::HEADER_LEN + n..] != want {
        return Err(BenchError("kvlds answer with a bad record CRC".into()));
    }
    buf.drain(..packet::HEADER_LEN);
    buf.truncate(n);
    Ok(id)
}

/// The bursty client: a writer thread keeps up to 4,096 requests
/// unanswered, writing through a 256 KiB buffer that it flushes only when
/// the limit is reached (or the buffer fills), and a reader checks the
/// answers through a 1 MiB buffer. Same workloads, same checks and same
/// rates as the trickling client; only the traffic's shape differs.
pub fn bursty(addr: &str, pairs: &Pairs, kind: Kind, timing: &Timing) -> Result<Run, BenchError> {
    if kind == Kind::BulkExtract {
        // One RANGE at a time either way: nothing to burst.
        return bursty_extract(addr, pairs, timing);
    }
    let conn = Conn::connect(addr)?;
    let mut reader = BufReader::with_capacity(1 << 20, conn.try_clone()?);
    let answered = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    // Each request's expected answer, in ID order; sent before the request
    // is written, so it is there when the answer is read.
    let (tx, rx) = mpsc::channel::<Expect>();
    let start = Instant::now();
    let mut meter = Meter::new(kind, timing, start);
    let mut stats = Stats::default();
    let mut completions = 0u64;
    let mut last = start;
    let (read, wrote) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut w = BufWriter::with_capacity(256 << 10, conn.try_clone()?);
            let send = |e: std::io::Error| io_err("send kvlds requests", e);
            let mut requests = Requests::new(kind, pairs);
            let (mut record, mut p) = (Vec::new(), Vec::new());
            let mut id = 0u64;
            'requests: loop {
                while id - answered.load(Ordering::Acquire) >= IN_FLIGHT as u64 {
                    w.flush().map_err(send)?;
                    if stop.load(Ordering::Relaxed) {
                        break 'requests;
                    }
                    std::thread::park_timeout(Duration::from_micros(200));
                }
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                record.clear();
                let Some(e) = requests.next(&mut record) else {
                    break;
                };
                if tx.send(e).is_err() {
                    break;
                }
                p.clear();
                packet::write(&mut p, id, &record);
                w.write_all(&p).map_err(send)?;
                id += 1;
            }
            // The end marker: its answer tells the reader that no request
            // follows it, so it can stop once the others are answered.
            let _ = tx.send(Expect::Any);
            p.clear();
            packet::write(&mut p, id, &PARAMS.to_be_bytes());
            w.write_all(&p).map_err(send)?;
            w.flush().map_err(send)?;
            Ok::<u64, BenchError>(id)
        });
        let mut pending = Pending::default();
        let mut answers = Answers::new(pairs);
        let mut buf = Vec::new();
        let mut ended = false;
        let read = (|| -> Result<(), BenchError> {
            while !ended || pending.len() > 0 {
                let id = read_packet(&mut reader, &mut buf)?;
                while let Ok(e) = rx.try_recv() {
                    pending.add(e);
                }
                let e = pending
                    .take(id)
                    .ok_or_else(|| BenchError(format!("an answer to request {id}, not awaited")))?;
                if e == Expect::Any {
                    ended = true;
                    continue;
                }
                let c = answers
                    .check(e, &buf)
                    .map_err(|why| BenchError(format!("{}: request {id}: {why}", kind.name())))?;
                stats.checked += 1;
                completions += c.completions;
                last = Instant::now();
                if meter.tick(last, c.completions) {
                    stop.store(true, Ordering::Relaxed);
                }
                answered.fetch_add(1, Ordering::Release);
                writer.thread().unpark();
            }
            Ok(())
        })();
        if read.is_err() {
            // Unblock a writer stuck on a full socket, and stop it.
            stop.store(true, Ordering::Relaxed);
            conn.shutdown();
        }
        let wrote = writer
            .join()
            .unwrap_or_else(|_| Err(BenchError("the request writer panicked".into())));
        (read, wrote)
    });
    read?;
    stats.sent = wrote?;
    Ok(Run {
        rate: meter.rate(last),
        overall: completions as f64 / start.elapsed().as_secs_f64(),
        stats,
    })
}

/// Bulk extract for the bursty client: each RANGE written whole, each
/// answer read through a 4 MiB buffer.
fn bursty_extract(addr: &str, pairs: &Pairs, timing: &Timing) -> Result<Run, BenchError> {
    let mut conn = Conn::connect(addr)?;
    let mut reader = BufReader::with_capacity(4 << 20, conn.try_clone()?);
    let mut requests = Requests::new(Kind::BulkExtract, pairs);
    let mut answers = Answers::new(pairs);
    let start = Instant::now();
    let mut meter = Meter::new(Kind::BulkExtract, timing, start);
    let mut stats = Stats::default();
    let (mut record, mut p, mut buf) = (Vec::new(), Vec::new(), Vec::new());
    let mut completions = 0u64;
    let last = loop {
        record.clear();
        let e = requests
            .next(&mut record)
            .expect("a RANGE once the last is answered");
        p.clear();
        packet::write(&mut p, stats.sent, &record);
        conn.write_all(&p)
            .map_err(|e| io_err("send a RANGE request", e))?;
        stats.sent += 1;
        let id = read_packet(&mut reader, &mut buf)?;
        if id != stats.sent - 1 {
            return Err(BenchError(format!(
                "RANGE answer {id} to request {}",
                stats.sent - 1
            )));
        }
        let c = answers
            .check(e, &buf)
            .map_err(|why| BenchError(format!("kvlds_bulk_extract: request {id}: {why}")))?;
        stats.checked += 1;
        completions += c.completions;
        requests.range_answered(c.range_next.unwrap_or_default());
        let now = Instant::now();
        if meter.tick(now, c.completions) {
            break now;
        }
    };
    Ok(Run {
        rate: meter.rate(last),
        overall: completions as f64 / start.elapsed().as_secs_f64(),
        stats,
    })
}

// ---- the kvlds rounds ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Trickling,
    Bursty,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Trickling => "trickling",
            Client::Bursty => "bursty",
        }
    }

    fn run(self, addr: &str, pairs: &Pairs, kind: Kind, t: &Timing) -> Result<Run, BenchError> {
        match self {
            Client::Trickling => trickle(addr, pairs, kind, t),
            Client::Bursty => bursty(addr, pairs, kind, t),
        }
    }
}

/// A kvlds server to measure.
#[derive(Clone, Copy)]
enum Target<'a> {
    Kivi(&'a Path),
    Kivaloo(&'a Path),
}

/// A running kvlds server: its socket and its store's directory; stopped
/// on drop.
struct Served {
    addr: String,
    data: PathBuf,
    _server: Box<dyn std::any::Any>,
}

impl Target<'_> {
    fn name(self) -> &'static str {
        match self {
            Target::Kivi(_) => "kivi-serve",
            Target::Kivaloo(_) => "kivaloo",
        }
    }

    fn start(self, w: &Path) -> Result<Served, BenchError> {
        match self {
            Target::Kivi(program) => {
                std::fs::create_dir_all(w)
                    .map_err(|e| io_err(format!("create {}", w.display()), e))?;
                let socket = w.join("sock_kvlds");
                let data = w.join("data");
                let s = KiviServer::start(program, &data, Some(&path_str(&socket)?), false)?;
                Ok(Served {
                    addr: s.kvlds.clone().expect("a kvlds listener"),
                    data,
                    _server: Box::new(s),
                })
            }
            Target::Kivaloo(src) => {
                let k = Kivaloo::start(src, w)?;
                Ok(Served {
                    addr: path_str(&k.socket)?,
                    data: w.to_path_buf(),
                    _server: Box::new(k),
                })
            }
        }
    }
}

fn path_str(p: &Path) -> Result<String, BenchError> {
    let s = p
        .to_str()
        .ok_or_else(|| BenchError(format!("{}: not UTF-8", p.display())))?;
    // The kvlds address syntax tells a socket path by its '/'.
    Ok(if s.contains('/') {
        s.to_string()
    } else {
        format!("./{s}")
    })
}

fn record(target: &str, client: Client, kind: Kind, run: &Run, n: u64, round: u32) -> Record {
    let r = &run.rate;
    let how = match r.windows {
        0 => "whole run, shorter than one window".to_string(),
        w => format!("median of {w} windows of {} ms", r.window.as_millis()),
    };
    let st = &run.stats;
    // The bursty client's writes go through a BufWriter and its reads
    // through a BufReader: their system calls are not counted.
    let traffic = if st.writes > 0 {
        format!(
            ", {} writes of at most {} B, {} reads of at most {} B",
            st.writes, st.max_write, st.reads, st.max_read
        )
    } else {
        String::new()
    };
    eprintln!(
        "[round {round}] {target:<10} {:<9} {:<19} {:>10.0}/s ({how}; whole run {:.0}/s; {} requests{traffic})",
        client.name(),
        kind.name(),
        r.per_sec,
        run.overall,
        st.sent,
    );
    Record {
        ops_per_sec: Some(r.per_sec),
        client: Some(client.name().to_string()),
        window_seconds: Some(r.window.as_secs_f64()),
        windows: Some(r.windows),
        ..Record::new(target, kind.name(), n, round)
    }
}

/// One round of the kvlds workloads: each workload on each target in
/// turn (the order flips every round), each with both clients (likewise).
fn kvlds_round(
    cfg: &Config,
    targets: &[Target],
    pairs: &Pairs,
    round: u32,
) -> Result<Vec<Record>, BenchError> {
    let flip = round.is_multiple_of(2);
    let mut targets = targets.to_vec();
    let mut clients = vec![Client::Trickling, Client::Bursty];
    if flip {
        targets.reverse();
        clients.reverse();
    }
    let mut out = Vec::new();
    let n = cfg.n;
    for &kind in &cfg.kvlds {
        for &t in &targets {
            let w = cfg
                .dir
                .join(format!("r{round}-{}-{}", t.name(), kind.short()));
            if kind == Kind::BulkInsert {
                // Each client inserts into an empty store of its own.
                for &c in &clients {
                    let wc = w.with_extension(c.name());
                    let s = t.start(&wc)?;
                    out.push(record(
                        t.name(),
                        c,
                        kind,
                        &c.run(&s.addr, pairs, kind, &cfg.timing)?,
                        n,
                        round,
                    ));
                    drop(s);
                    remove(&wc)?;
                }
                continue;
            }
            let s = t.start(&w)?;
            trickle(&s.addr, pairs, Kind::BulkInsert, &cfg.timing)?;
            for &c in &clients {
                out.push(record(
                    t.name(),
                    c,
                    kind,
                    &c.run(&s.addr, pairs, kind, &cfg.timing)?,
                    n,
                    round,
                ));
            }
            let data = s.data.clone();
            drop(s);
            if kind == Kind::RandomMixed {
                let bytes = disk_bytes(&data)
                    .map_err(|e| io_err(format!("measure {}", data.display()), e))?;
                let per_pair = bytes as f64 / n as f64;
                eprintln!(
                    "[round {round}] {:<10} store after random mixed: {bytes} bytes, {per_pair:.1} per pair",
                    t.name()
                );
                out.push(Record {
                    bytes_per_pair: Some(per_pair),
                    ..Record::new(t.name(), "kvlds_space_after_mixed", n, round)
                });
            }
            remove(&w)?;
        }
    }
    Ok(out)
}

fn remove(dir: &Path) -> Result<(), BenchError> {
    std::fs::remove_dir_all(dir).map_err(|e| io_err(format!("delete {}", dir.display()), e))
}

// ---- redis-benchmark ----

/// A redis-server child on a fresh directory, with AOF fsync `policy`.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start(dir: &Path, policy: &str) -> Result<Self, BenchError> {
        Self::start_with(dir, policy, None)
    }

    /// With `tls`, listening over TLS only (its tls-port; no client
    /// certificates asked).
    fn start_with(dir: &Path, policy: &str, tls: Option<&TlsFiles>) -> Result<Self, BenchError> {
        std::fs::create_dir_all(dir).map_err(|e| io_err("create redis dir", e))?;
        let port = free_port()?;
        let mut cmd = Command::new("redis-server");
        match tls {
            None => cmd.args(["--port", &port.to_string()]),
            Some(t) => cmd
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(&t.cert)
                .arg("--tls-key-file")
                .arg(&t.key)
                .arg("--tls-ca-cert-file")
                .arg(&t.cert)
                .args(["--tls-auth-clients", "no"]),
        };
        let child = cmd
            .args(["--bind", "127.0.0.1"])
            .args(["--appendonly", "yes", "--appendfsync", policy, "--save", ""])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| io_err("start redis-server (bench/setup.sh installs it)", e))?;
        let s = RedisServer { child, port };
        // Ready once it answers.
        for _ in 0..200 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(s);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Err(BenchError("redis-server did not start listening".into()))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, BenchError> {
    let l =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| io_err("find a free port", e))?;
    Ok(l.local_addr()
        .map_err(|e| io_err("find a free port", e))?
        .port())
}

/// Runs redis-benchmark with `args` (plus `--csv`) and returns each test's
/// requests per second.
fn redis_benchmark(host_port: &str, args: &[&str]) -> Result<Vec<(String, f64)>, BenchError> {
    redis_benchmark_tls(host_port, None, args)
}

/// [`redis_benchmark`], over TLS when given the CA certificate to check the
/// server's with.
fn redis_benchmark_tls(
    host_port: &str,
    cacert: Option<&Path>,
    args: &[&str],
) -> Result<Vec<(String, f64)>, BenchError> {
    let (host, port) = host_port
        .rsplit_once(':')
        .ok_or_else(|| BenchError(format!("bad address {host_port}")))?;
    let mut cmd = Command::new("redis-benchmark");
    if let Some(ca) = cacert {
        cmd.arg("--tls").arg("--cacert").arg(ca);
    }
    let out = cmd
        .args(["-h", host, "-p", port, "--csv"])
        .args(args)
        .output()
        .map_err(|e| io_err("run redis-benchmark (bench/setup.sh installs it)", e))?;
    if !out.status.success() {
        return Err(BenchError(format!(
            "redis-benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rates = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split(',').map(|c| c.trim_matches('"')).collect();
        if cols.len() >= 2 {
            if let Ok(rps) = cols[1].parse::<f64>() {
                rates.push((cols[0].to_string(), rps));
            }
        }
    }
    if rates.is_empty() {
        return Err(BenchError(format!(
            "redis-benchmark printed no rates: {text}"
        )));
    }
    Ok(rates)
}

/// The redis-benchmark runs, against one target.
fn redis_runs(target: &str, addr: &str, n: u64, round: u32) -> Result<Vec<Record>, BenchError> {
    let n_s = n.to_string();
    // Unpipelined requests cost a round trip each: a twentieth as many.
    let single = (n / 20).max(1000).to_string();
    let mut out = Vec::new();
    let runs: [(&str, Vec<&str>); 3] = [
        (
            "p1000",
            vec!["-t", "set,get", "-P", "1000", "-n", &n_s, "-r", &n_s],
        ),
        (
            "p16c50",
            vec![
                "-t", "set,get", "-P", "16", "-c", "50", "-n", &n_s, "-r", &n_s,
            ],
        ),
        (
            "c50",
            vec![
                "-t", "set,get", "-P", "1", "-c", "50", "-n", &single, "-r", &n_s,
            ],
        ),
    ];
    for (label, args) in runs {
        for (test, rps) in redis_benchmark(addr, &args)? {
            let name = format!("redis_{}_{label}", test.to_ascii_lowercase());
            eprintln!("[round {round}] {target:<14} {name:<22} {rps:>12.0} requests/s");
            out.push(Record {
                ops_per_sec: Some(rps),
                client: Some("redis-benchmark".to_string()),
                ..Record::new(target, &name, n, round)
            });
        }
    }
    // SET with a deadline, as `-t set` sends SET (3-byte values, random
    // keys among n), plus EX.
    let set_ex = [
        "-P",
        "1000",
        "-n",
        &n_s,
        "-r",
        &n_s,
        "SET",
        "key:__rand_int__",
        "xxx",
        "EX",
        "3600",
    ];
    for (_, rps) in redis_benchmark(addr, &set_ex)? {
        let name = "redis_setex_p1000";
        eprintln!("[round {round}] {target:<14} {name:<22} {rps:>12.0} requests/s");
        out.push(Record {
            ops_per_sec: Some(rps),
            client: Some("redis-benchmark".to_string()),
            ..Record::new(target, name, n, round)
        });
    }
    // MULTI, ten SETs, EXEC from 50 connections, as redis-py's pipeline()
    // sends them; transactions per second.
    let txs = (n / 20).max(1000);
    let rate = crate::resp_workloads::multi_exec(addr, 50, txs)?;
    let name = "resp_multi10_c50";
    eprintln!("[round {round}] {target:<14} {name:<22} {rate:>12.0} transactions/s");
    out.push(Record {
        ops_per_sec: Some(rate),
        client: Some("resp-transactions".to_string()),
        ..Record::new(target, name, n, round)
    });
    Ok(out)
}

/// A certificate and its key for the TLS runs (self-signed: it is its own
/// CA for the client).
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// Makes them in `dir` with the openssl CLI: P-256, for 127.0.0.1.
    fn make(dir: &Path) -> Result<TlsFiles, BenchError> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(format!("create {}", dir.display()), e))?;
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        let out = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:P-256", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=localhost", "-addext"])
            .arg("subjectAltName=IP:127.0.0.1,DNS:localhost")
            .arg("-keyout")
            .arg(&files.key)
            .arg("-out")
            .arg(&files.cert)
            .output()
            .map_err(|e| io_err("run openssl to make a certificate", e))?;
        if !out.status.success() {
            return Err(BenchError(format!(
                "openssl could not make a certificate: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(files)
    }
}

/// SET and GET with 1,000-command pipelines against one server, over TLS
/// (checked against `cacert`) or not: records `tls_set_p1000` and
/// `tls_get_p1000`, with `_plain` after them for the runs without TLS.
fn tls_runs(
    target: &str,
    addr: &str,
    cacert: Option<&Path>,
    n: u64,
    round: u32,
) -> Result<Vec<Record>, BenchError> {
    let n_s = n.to_string();
    let args = ["-t", "set,get", "-P", "1000", "-n", &n_s, "-r", &n_s];
    let mut out = Vec::new();
    for (test, rps) in redis_benchmark_tls(addr, cacert, &args)? {
        let plain = if cacert.is_some() { "" } else { "_plain" };
        let name = format!("tls_{}_p1000{plain}", test.to_ascii_lowercase());
        eprintln!("[round {round}] {target:<14} {name:<22} {rps:>12.0} requests/s");
        out.push(Record {
            ops_per_sec: Some(rps),
            client: Some("redis-benchmark".to_string()),
            ..Record::new(target, &name, n, round)
        });
    }
    Ok(out)
}

/// One round of the TLS comparison: each server fresh, without TLS and
/// then with it.
fn tls_round(cfg: &Config, tls: &TlsFiles, round: u32) -> Result<Vec<Record>, BenchError> {
    let mut out = Vec::new();
    for over_tls in [false, true] {
        let d = fresh(&cfg.dir, &format!("round{round}-kivi-tls-{over_tls}"))?;
        let server = if over_tls {
            KiviServer::start_tls(&cfg.program, &d, tls)?
        } else {
            KiviServer::start(&cfg.program, &d, None, true)?
        };
        let addr = server
            .tls
            .clone()
            .or(server.resp.clone())
            .expect("a listener");
        let cacert = over_tls.then_some(tls.cert.as_path());
        out.extend(tls_runs("kivi-serve", &addr, cacert, cfg.n, round)?);
    }
    for policy in ["always", "everysec"] {
        for over_tls in [false, true] {
            let d = fresh(
                &cfg.dir,
                &format!("round{round}-redis-{policy}-tls-{over_tls}"),
            )?;
            let server = RedisServer::start_with(&d, policy, over_tls.then_some(tls))?;
            out.extend(tls_runs(
                &format!("redis-{policy}"),
                &format!("127.0.0.1:{}", server.port),
                over_tls.then_some(tls.cert.as_path()),
                cfg.n,
                round,
            )?);
        }
    }
    Ok(out)
}

/// The round trip injected for the object store's S3 Standard figures.
const S3_DELAY_MS: u64 = 30;
/// redis-benchmark connections of the object-store runs.
const S3_CLIENTS: &str = "1000";

/// SETs from 1,000 connections, unpipelined (`s3_set_c1000`, n / 2 of
/// them: each is a round trip) and with 16-command pipelines
/// (`s3_set_c1000_p16`), against one server; with `info`, the object puts
/// per SET each run made, from INFO.
fn s3_runs(
    target: &str,
    addr: &str,
    n: u64,
    round: u32,
    info: bool,
) -> Result<Vec<Record>, BenchError> {
    let n_s = n.to_string();
    let single = (n / 2).max(10_000).to_string();
    let c = S3_CLIENTS;
    let runs: [(&str, Vec<&str>); 2] = [
        (
            "c1000",
            vec!["-t", "set", "-c", c, "-n", &single, "-r", &n_s],
        ),
        (
            "c1000_p16",
            vec!["-t", "set", "-c", c, "-P", "16", "-n", &n_s, "-r", &n_s],
        ),
    ];
    let puts = || crate::resp_workloads::info_u64(addr, "stats", "kivi_object_puts");
    let mut out = Vec::new();
    for (label, args) in runs {
        let before = if info { puts()? } else { 0 };
        for (_, rps) in redis_benchmark(addr, &args)? {
            let name = format!("s3_set_{label}");
            let sets: u64 = args[args.iter().position(|a| *a == "-n").expect("-n") + 1]
                .parse()
                .expect("a count");
            let per_set = if info {
                Some((puts()? - before) as f64 / sets as f64)
            } else {
                None
            };
            eprintln!(
                "[round {round}] {target:<14} {name:<22} {rps:>12.0} requests/s{}",
                per_set.map_or(String::new(), |p| format!(", {p:.4} puts per SET"))
            );
            out.push(Record {
                ops_per_sec: Some(rps),
                object_puts_per_op: per_set,
                client: Some("redis-benchmark".to_string()),
                ..Record::new(target, &name, n, round)
            });
        }
    }
    Ok(out)
}

/// One round of the object-store comparison (see the module's doc).
fn s3_round(cfg: &Config, bucket: &str, round: u32) -> Result<Vec<Record>, BenchError> {
    let mut out = Vec::new();
    // A prefix of this run's own: the bucket may hold earlier runs' stores.
    let run = format!("bench-serve-{}-{round}", std::process::id());
    for (target, delay) in [("kivi-s3-30ms", S3_DELAY_MS), ("kivi-s3", 0)] {
        let url = format!("s3://{bucket}/{run}-{delay}ms");
        let server = KiviServer::start_url(&cfg.program, &url, delay)?;
        let addr = server.resp.clone().expect("resp listener");
        out.extend(s3_runs(target, &addr, cfg.n, round, true)?);
    }
    let d = fresh(&cfg.dir, &format!("round{round}-kivi-s3-local"))?;
    {
        let server = KiviServer::start(&cfg.program, &d, None, true)?;
        let addr = server.resp.clone().expect("resp listener");
        out.extend(s3_runs("kivi-serve", &addr, cfg.n, round, false)?);
    }
    let d = fresh(&cfg.dir, &format!("round{round}-redis-s3-always"))?;
    let server = RedisServer::start(&d, "always")?;
    let addr = format!("127.0.0.1:{}", server.port);
    out.extend(s3_runs("redis-always", &addr, cfg.n, round, false)?);
    Ok(out)
}

/// The object-store table, if it ran.
fn s3_report(records: &[Record], o: &mut String) -> std::fmt::Result {
    use std::fmt::Write as _;
    let rate = |store: &str, t: &str| {
        best(records, store, t, "redis-benchmark")
            .map_or(f64::NAN, |r| r.ops_per_sec.expect("a rate"))
    };
    if !rate("kivi-s3-30ms", "s3_set_c1000").is_finite() {
        return Ok(());
    }
    writeln!(
        o,
        "
kivi serve on an object store: SETs from {S3_CLIENTS} redis-benchmark connections (best round), requests/s"
    )?;
    writeln!(
        o,
        "{:<18} {:>14} {:>10} {:>14} {:>10} {:>12} {:>13} {:>12}",
        "test",
        "s3, 30 ms/req",
        "puts/SET",
        "s3, no delay",
        "puts/SET",
        "local dir",
        "redis always",
        "goal 20K/s"
    )?;
    for t in ["s3_set_c1000", "s3_set_c1000_p16"] {
        let puts = |store: &str| {
            best(records, store, t, "redis-benchmark")
                .and_then(|r| r.object_puts_per_op)
                .unwrap_or(f64::NAN)
        };
        let slow = rate("kivi-s3-30ms", t);
        writeln!(
            o,
            "{t:<18} {slow:>14.0} {:>10.4} {:>14.0} {:>10.4} {:>12.0} {:>13.0} {:>12}",
            puts("kivi-s3-30ms"),
            rate("kivi-s3", t),
            puts("kivi-s3"),
            rate("kivi-serve", t),
            rate("redis-always", t),
            met(slow, 20_000.0),
        )?;
    }
    Ok(())
}

/// The expiring cache (kivi only: it reads the store's files through INFO):
/// `n / 10` new keys a second, each living ten seconds, for thirty.
fn expiring_cache_run(addr: &str, n: u64, round: u32) -> Result<Record, BenchError> {
    let rate = (n / 10).max(1000);
    let r = crate::resp_workloads::expiring_cache(addr, rate, Duration::from_secs(10), 30)?;
    eprintln!(
        "[round {round}] kivi-serve     expiring_cache         {:>12.0} SETs/s, files at most {:.2}x the live data ({} live keys)",
        r.rate, r.peak_files_per_live, r.live_keys
    );
    Ok(Record {
        ops_per_sec: Some(r.rate),
        peak_files_per_live: Some(r.peak_files_per_live),
        client: Some("resp-expiring-cache".to_string()),
        ..Record::new("kivi-serve", "expiring_cache", n, round)
    })
}

/// Every server workload, `rounds` times, targets interleaved.
pub fn run(cfg: &Config) -> Result<Vec<Record>, BenchError> {
    if cfg.n > Pairs::MAX {
        return Err(BenchError(format!(
            "-n {}: kivaloo's tools pick keys with random() % N, so N is at most 2^31",
            cfg.n
        )));
    }
    if let Some(src) = &cfg.kivaloo {
        Kivaloo::check(src)?;
    }
    crate::prepare_dir(&cfg.dir)?;
    // kivaloo's daemons change directory: give them absolute paths.
    let dir = std::fs::canonicalize(&cfg.dir)
        .map_err(|e| io_err(format!("resolve {}", cfg.dir.display()), e))?;
    let cfg = &Config { dir, ..cfg.clone() };
    let kivaloo = cfg
        .kivaloo
        .as_ref()
        .map(|k| std::fs::canonicalize(k).unwrap_or_else(|_| k.clone()));
    let mut targets = vec![Target::Kivi(&cfg.program)];
    if let Some(k) = &kivaloo {
        targets.push(Target::Kivaloo(k));
    }
    eprintln!("kvlds: generating kivaloo's {} pairs (mkpairs)", cfg.n);
    let pairs = Pairs::new(cfg.n);
    let tls = if cfg.tls {
        Some(TlsFiles::make(&cfg.dir.join("tls"))?)
    } else {
        None
    };
    let mut out = Vec::new();
    for round in 1..=cfg.rounds {
        out.extend(kvlds_round(cfg, &targets, &pairs, round)?);
        if let Some(tls) = &tls {
            out.extend(tls_round(cfg, tls, round)?);
        }
        if let Some(bucket) = &cfg.s3 {
            out.extend(s3_round(cfg, bucket, round)?);
        }
        if !cfg.redis {
            continue;
        }
        let d = fresh(&cfg.dir, &format!("round{round}-kivi-resp"))?;
        {
            let server = KiviServer::start(&cfg.program, &d, None, true)?;
            let addr = server.resp.clone().expect("resp listener");
            out.extend(redis_runs("kivi-serve", &addr, cfg.n, round)?);
        }
        {
            let d = fresh(&cfg.dir, &format!("round{round}-kivi-expiring"))?;
            let server = KiviServer::start(&cfg.program, &d, None, true)?;
            let addr = server.resp.clone().expect("resp listener");
            out.push(expiring_cache_run(&addr, cfg.n, round)?);
        }
        for policy in ["always", "everysec"] {
            let d = fresh(&cfg.dir, &format!("round{round}-redis-{policy}"))?;
            let server = RedisServer::start(&d, policy)?;
            out.extend(redis_runs(
                &format!("redis-{policy}"),
                &format!("127.0.0.1:{}", server.port),
                cfg.n,
                round,
            )?);
        }
    }
    let _ = std::fs::remove_dir_all(&cfg.dir);
    Ok(out)
}

fn fresh(dir: &Path, name: &str) -> Result<PathBuf, BenchError> {
    let d = dir.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(dir).map_err(|e| io_err(format!("create {}", dir.display()), e))?;
    Ok(d)
}

/// The issue's goals for the trickling client: kivi at least this many
/// times kivaloo. Random read's is 2x at a million pairs, 10x from eight
/// million.
fn kvlds_goal(kind: Kind, n: u64) -> f64 {
    match kind {
        Kind::BulkInsert | Kind::BulkUpdate => 1.5,
        Kind::BulkExtract => 5.0,
        Kind::RandomRead if n >= 8_000_000 => 10.0,
        Kind::RandomRead | Kind::HotspotRead => 2.0,
        Kind::RandomMixed => 3.0,
    }
}

/// The goals for redis-benchmark: (test, kivi at least this many times the
/// redis-server with this appendfsync policy).
const REDIS_GOALS: [(&str, f64, &str); 4] = [
    ("redis_set_p1000", 2.0, "always"),
    ("redis_get_p1000", 0.8, "everysec"),
    ("redis_get_p16c50", 1.0, "everysec"),
    ("redis_set_p16c50", 1.5, "always"),
];

fn best<'r>(
    records: &'r [Record],
    store: &str,
    workload: &str,
    client: &str,
) -> Option<&'r Record> {
    records
        .iter()
        .filter(|r| r.store == store && r.workload == workload)
        .filter(|r| r.client.as_deref() == Some(client))
        .filter(|r| r.ops_per_sec.is_some())
        .max_by(|a, b| {
            a.ops_per_sec
                .partial_cmp(&b.ops_per_sec)
                .expect("rates are numbers")
        })
}

fn met(ratio: f64, goal: f64) -> &'static str {
    if ratio >= goal {
        "met"
    } else {
        "NOT met"
    }
}

/// The report: for each client a table of the best round of every kvlds
/// workload (with kivaloo's and the ratio, and for the trickling client
/// the goal, when kivaloo ran), the store sizes after random mixed, and
/// the redis-benchmark table; and every record as a JSON line to `json`
/// if given.
pub fn report(
    cfg: &Config,
    records: &[Record],
    out: &mut dyn Write,
    json: Option<&Path>,
) -> Result<(), BenchError> {
    if let Some(p) = json {
        let mut f =
            std::fs::File::create(p).map_err(|e| io_err(format!("create {}", p.display()), e))?;
        for r in records {
            let line = serde_json::to_string(r).expect("records serialize");
            writeln!(f, "{line}").map_err(|e| io_err("write JSON", e))?;
        }
    }
    let mut text = String::new();
    report_text(cfg, records, &mut text).expect("formatting into a String");
    out.write_all(text.as_bytes())
        .map_err(|e| io_err("write output", e))
}

fn report_text(cfg: &Config, records: &[Record], o: &mut String) -> std::fmt::Result {
    use std::fmt::Write as _;
    let n = cfg.n;
    let kivaloo = cfg.kivaloo.is_some();
    let t = &cfg.timing;
    writeln!(
        o,
        "\nkvlds: n = {n} (kivaloo's mkpairs data), best of {} round(s); timed workloads: median of {} windows of {} s after {} s of warm-up",
        cfg.rounds,
        t.windows,
        t.window.as_secs_f64(),
        t.warmup.as_secs_f64()
    )?;
    if !kivaloo {
        writeln!(
            o,
            "(kivi only: run with --kivaloo DIR for kivaloo's figures and the ratios)"
        )?;
    }
    for client in [Client::Trickling, Client::Bursty] {
        let goals = client == Client::Trickling && kivaloo;
        let what = match client {
            Client::Trickling => "trickling client (as kivaloo's tools: 4,096 in flight, one new request per answer, 4 KiB reads and writes)",
            Client::Bursty => "bursty client (4,096 in flight, 256 KiB flushed when 4,096 are outstanding, 1 MiB reads)",
        };
        writeln!(o, "\n{what}")?;
        write!(o, "{:<20} {:>14}", "workload", "kivi serve/s")?;
        if kivaloo {
            write!(o, " {:>14} {:>8}", "kivaloo/s", "ratio")?;
        }
        if goals {
            write!(o, " {:>6} {:>8}", "goal", "")?;
        }
        writeln!(o, "  rate over")?;
        for kind in Kind::ALL {
            let Some(k) = best(records, "kivi-serve", kind.name(), client.name()) else {
                continue;
            };
            let rate = k.ops_per_sec.expect("a rate");
            write!(o, "{:<20} {rate:>14.0}", kind.name())?;
            if kivaloo {
                match best(records, "kivaloo", kind.name(), client.name()) {
                    Some(v) => {
                        let theirs = v.ops_per_sec.expect("a rate");
                        let ratio = rate / theirs;
                        write!(o, " {theirs:>14.0} {ratio:>7.2}x")?;
                        if goals {
                            let goal = kvlds_goal(kind, n);
                            write!(o, " {goal:>5.1}x {:>8}", met(ratio, goal))?;
                        }
                    }
                    None => write!(o, " {:>14} {:>8}", "-", "-")?,
                }
            }
            let windows = k.windows.unwrap_or(0);
            let secs = k.window_seconds.unwrap_or(0.0);
            if windows == 0 {
                write!(o, "  the whole run ({secs:.2} s; under one window)")?;
            } else {
                write!(o, "  {windows} windows of {} ms", (secs * 1000.0).round())?;
            }
            if kivaloo && cfg.rounds > 1 {
                // Each round's ratio: the two stores in the same minutes.
                let each: Vec<String> = (1..=cfg.rounds)
                    .filter_map(|round| {
                        let rate = |store: &str| {
                            records
                                .iter()
                                .find(|r| {
                                    r.store == store
                                        && r.workload == kind.name()
                                        && r.client.as_deref() == Some(client.name())
                                        && r.round == round
                                })
                                .and_then(|r| r.ops_per_sec)
                        };
                        Some(format!("{:.2}", rate("kivi-serve")? / rate("kivaloo")?))
                    })
                    .collect();
                write!(o, "; ratio by round {}", each.join("/"))?;
            }
            writeln!(o)?;
        }
    }
    let space: Vec<&Record> = records
        .iter()
        .filter(|r| r.workload == "kvlds_space_after_mixed")
        .collect();
    if !space.is_empty() {
        writeln!(
            o,
            "\nstore size on disk after random mixed, bytes per pair (each round)"
        )?;
        for store in ["kivi-serve", "kivaloo"] {
            let sizes: Vec<String> = space
                .iter()
                .filter(|r| r.store == store)
                .filter_map(|r| r.bytes_per_pair)
                .map(|b| format!("{b:.1}"))
                .collect();
            if !sizes.is_empty() {
                writeln!(o, "{store:<20} {}", sizes.join(", "))?;
            }
        }
    }
    tls_report(records, o)?;
    s3_report(records, o)?;
    let mut tests: Vec<&str> = records
        .iter()
        .filter(|r| r.workload.starts_with("redis_"))
        .map(|r| r.workload.as_str())
        .collect();
    tests.sort_unstable();
    tests.dedup();
    if tests.is_empty() {
        return Ok(());
    }
    writeln!(o, "\nredis-benchmark (best round), requests/s")?;
    writeln!(
        o,
        "{:<20} {:>12} {:>12} {:>14} {:>12} {:>14} {:>16}",
        "test",
        "kivi serve",
        "redis always",
        "redis everysec",
        "kivi/always",
        "kivi/everysec",
        "goal"
    )?;
    let rate = |store: &str, t: &str| {
        best(records, store, t, "redis-benchmark")
            .map_or(f64::NAN, |r| r.ops_per_sec.expect("a rate"))
    };
    for t in tests {
        let (k, a, e) = (
            rate("kivi-serve", t),
            rate("redis-always", t),
            rate("redis-everysec", t),
        );
        write!(
            o,
            "{t:<20} {k:>12.0} {a:>12.0} {e:>14.0} {:>11.2}x {:>13.2}x",
            k / a,
            k / e
        )?;
        match REDIS_GOALS.iter().find(|g| g.0 == t) {
            Some((_, goal, policy)) => {
                let ratio = if *policy == "always" { k / a } else { k / e };
                writeln!(o, " {goal:>4.1}x {policy:<8} {}", met(ratio, *goal))?
            }
            None => writeln!(o, " {:>16}", "-")?,
        }
    }
    // SET with a deadline against plain SET, both kivi's, best rounds.
    let (ex, plain) = (
        rate("kivi-serve", "redis_setex_p1000"),
        rate("kivi-serve", "redis_set_p1000"),
    );
    if ex.is_finite() && plain.is_finite() {
        writeln!(
            o,
            "kivi SET EX -P 1000 against its plain SET: {:.2}x (goal 0.9x, {})",
            ex / plain,
            met(ex / plain, 0.9)
        )?;
    }
    let tx = |store: &str| {
        best(records, store, "resp_multi10_c50", "resp-transactions")
            .map_or(f64::NAN, |r| r.ops_per_sec.expect("a rate"))
    };
    let (k, a, e) = (tx("kivi-serve"), tx("redis-always"), tx("redis-everysec"));
    if k.is_finite() {
        writeln!(
            o,
            "MULTI + 10 SETs + EXEC, 50 clients, transactions/s: kivi {k:.0}, redis always {a:.0}, \
             everysec {e:.0}; kivi/always {:.2}x (goal 2x, {})",
            k / a,
            met(k / a, 2.0)
        )?;
    }
    for r in records.iter().filter(|r| r.workload == "expiring_cache") {
        let peak = r.peak_files_per_live.unwrap_or(f64::NAN);
        writeln!(
            o,
            "expiring cache (round {}): {:.0} SETs/s living 10 s, files at most {peak:.2}x the live data \
             (goal 2x, {})",
            r.round,
            r.ops_per_sec.unwrap_or(f64::NAN),
            if peak <= 2.0 { "met" } else { "NOT met" }
        )?;
    }
    Ok(())
}

/// The TLS comparison's table, if it ran: kivi over TLS against itself
/// without (goal 0.8x) and against redis-server over TLS (goal 1.0x: SET
/// against appendfsync always, GET against everysec, as for the plain
/// -P 1000 goals).
fn tls_report(records: &[Record], o: &mut String) -> std::fmt::Result {
    use std::fmt::Write as _;
    let rate = |store: &str, t: &str| {
        best(records, store, t, "redis-benchmark")
            .map_or(f64::NAN, |r| r.ops_per_sec.expect("a rate"))
    };
    if !rate("kivi-serve", "tls_set_p1000").is_finite() {
        return Ok(());
    }
    writeln!(
        o,
        "\nredis-benchmark -P 1000 over TLS and without (best round), requests/s"
    )?;
    writeln!(
        o,
        "{:<5} {:>11} {:>11} {:>10} {:>12} {:>14} {:>16} {:>16} {:>17}",
        "test",
        "kivi plain",
        "kivi TLS",
        "TLS/plain",
        "goal 0.8x",
        "redis alw TLS",
        "redis evsec TLS",
        "kivi/redis TLS",
        "goal 1.0x"
    )?;
    for (test, policy) in [("set", "always"), ("get", "everysec")] {
        let t = format!("tls_{test}_p1000");
        let (kp, kt) = (
            rate("kivi-serve", &format!("{t}_plain")),
            rate("kivi-serve", &t),
        );
        let (ra, re) = (rate("redis-always", &t), rate("redis-everysec", &t));
        let r = if policy == "always" { ra } else { re };
        writeln!(
            o,
            "{test:<5} {kp:>11.0} {kt:>11.0} {:>9.2}x {:>12} {ra:>14.0} {re:>16.0} {:>15.2}x {:>17}",
            kt / kp,
            met(kt / kp, 0.8),
            kt / r,
            format!("{} ({policy})", met(kt / r, 1.0)),
        )?;
    }
    let own = |store: &str, test: &str| {
        let t = format!("tls_{test}_p1000");
        rate(store, &t) / rate(store, &format!("{t}_plain"))
    };
    writeln!(
        o,
        "redis's own TLS/plain: SET {:.2}x, GET {:.2}x (always); SET {:.2}x, GET {:.2}x (everysec)",
        own("redis-always", "set"),
        own("redis-always", "get"),
        own("redis-everysec", "set"),
        own("redis-everysec", "get"),
    )
}
