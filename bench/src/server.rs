//! Server workloads (`kivi bench --server`): `kivi serve` measured over
//! the network protocols, client and server on the same machine.
//!
//! - kivaloo's six over the kvlds protocol (`shared/workloads.md`, "Server
//!   workloads"): bulk insert, bulk update, bulk extract (RANGE), random
//!   read, random mixed (2 GET then 2 SET), hot-spot read; one connection
//!   with 4,096 requests in flight; every answer checked. The figure is the
//!   median rate over 250 ms windows after the first (warm-up), as
//!   kivaloo's tools report a median per-second rate.
//! - redis-benchmark (Debian's redis-tools) against `kivi serve` and, in
//!   the same round, against a real redis-server with `appendfsync always`
//!   and with `appendfsync everysec`: SET and GET with 1,000-command
//!   pipelines, and single SETs from 50 clients.

use crate::kv40::{index_of, key, mix, value};
use crate::{io_err, BenchError, Record};
use kivi_server::kvlds::packet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests in flight on the one connection (kivaloo's tools keep 4,096).
const IN_FLIGHT: u64 = 4096;
/// Rates are taken over windows this long; the first is warm-up.
const WINDOW: Duration = Duration::from_millis(250);
/// RANGE budget of the bulk extract.
const EXTRACT_BUDGET: u32 = 1 << 20;
/// Hot-spot groups: 65,536 consecutive keys, read in random order.
const HOT_GROUP: u64 = 65_536;

const SET: u32 = 0x110;
const GET: u32 = 0x130;
const RANGE: u32 = 0x131;

/// A `kivi serve` child on a fresh store, stopped (SIGTERM) on drop.
pub struct KiviServer {
    child: Child,
    pub kvlds: Option<String>,
    pub resp: Option<String>,
}

impl KiviServer {
    pub fn start(program: &Path, dir: &Path, kvlds: bool, resp: bool) -> Result<Self, BenchError> {
        let mut cmd = Command::new(program);
        cmd.arg("-d").arg(dir).arg("serve");
        if resp {
            cmd.args(["--resp", "127.0.0.1:0"]);
        } else {
            cmd.arg("--no-resp");
        }
        if kvlds {
            cmd.args(["--kvlds", "127.0.0.1:0"]);
        }
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
        };
        for _ in 0..(usize::from(kvlds) + usize::from(resp)) {
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
                s.kvlds = Some(a);
            } else if let Some(a) = addr("resp") {
                s.resp = Some(a);
            } else {
                return Err(BenchError(format!("kivi serve said: {line}")));
            }
        }
        Ok(s)
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

fn record(ty: u32, fields: &[&[u8]]) -> Vec<u8> {
    let mut r = ty.to_be_bytes().to_vec();
    for f in fields {
        r.push(f.len() as u8);
        r.extend_from_slice(f);
    }
    r
}

fn read_packet(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<u64, BenchError> {
    buf.resize(packet::HEADER_LEN, 0);
    r.read_exact(buf)
        .map_err(|e| io_err("read a kvlds response", e))?;
    let n = u32::from_be_bytes(buf[8..12].try_into().expect("4 bytes")) as usize;
    buf.resize(packet::HEADER_LEN + n + packet::TRAILER_LEN, 0);
    r.read_exact(&mut buf[packet::HEADER_LEN..])
        .map_err(|e| io_err("read a kvlds response", e))?;
    // Check the framing exactly as the server checks requests (the length
    // cap is for requests; responses may be longer).
    let id = u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
    if packet::crc(&buf[..12]) != buf[12..16] {
        return Err(BenchError("kvlds response with a bad header CRC".into()));
    }
    let mut want = packet::crc(&buf[packet::HEADER_LEN..packet::HEADER_LEN + n]);
    for i in 0..4 {
        want[i] ^= buf[12 + i];
    }
    if buf[packet::HEADER_LEN + n..] != want {
        return Err(BenchError("kvlds response with a bad record CRC".into()));
    }
    buf.drain(..packet::HEADER_LEN);
    buf.truncate(n);
    Ok(id)
}

/// Runs `ops` requests on one connection with up to `IN_FLIGHT`
/// unanswered: request `i` is `make(i)` and has ID `i`; `check(i, answer)`
/// judges its answer. Returns the completion rate (median over windows
/// after the first, or overall when the run is shorter than three
/// windows) and the whole run's rate.
fn pipelined(
    addr: &str,
    ops: u64,
    make: impl Fn(u64) -> Vec<u8> + Send + 'static,
    check: impl Fn(u64, &[u8]) -> Result<(), String> + Send + 'static,
) -> Result<(f64, f64), BenchError> {
    let stream = TcpStream::connect(addr).map_err(|e| io_err(format!("connect to {addr}"), e))?;
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::with_capacity(
        1 << 20,
        stream
            .try_clone()
            .map_err(|e| io_err("clone a socket", e))?,
    );
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let writer = {
        let (answered, failed) = (answered.clone(), failed.clone());
        let mut w = std::io::BufWriter::with_capacity(256 << 10, stream);
        std::thread::spawn(move || -> Result<(), BenchError> {
            let mut p = Vec::new();
            for i in 0..ops {
                while i - answered.load(Ordering::Acquire) >= IN_FLIGHT {
                    w.flush().map_err(|e| io_err("send kvlds requests", e))?;
                    if failed.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    std::thread::park_timeout(Duration::from_micros(200));
                }
                p.clear();
                packet::write(&mut p, i, &make(i));
                w.write_all(&p)
                    .map_err(|e| io_err("send kvlds requests", e))?;
            }
            w.flush().map_err(|e| io_err("send kvlds requests", e))
        })
    };
    let start = Instant::now();
    let mut windows = Vec::new();
    let mut window_end = start + WINDOW;
    let mut in_window = 0u64;
    let mut buf = Vec::new();
    let mut result = Ok(());
    for done in 0..ops {
        let id = match read_packet(&mut reader, &mut buf) {
            Ok(id) => id,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        if id >= ops {
            result = Err(BenchError(format!("an answer to request {id}, never sent")));
            break;
        }
        if let Err(e) = check(id, &buf) {
            result = Err(BenchError(format!("request {id}: {e}")));
            break;
        }
        answered.store(done + 1, Ordering::Release);
        writer.thread().unpark();
        in_window += 1;
        let now = Instant::now();
        if now >= window_end {
            windows.push(in_window);
            in_window = 0;
            window_end += WINDOW;
        }
    }
    let elapsed = start.elapsed();
    failed.store(result.is_err(), Ordering::Relaxed);
    let sent = writer
        .join()
        .map_err(|_| BenchError("the request writer panicked".into()))?;
    result?;
    sent?;
    let overall = ops as f64 / elapsed.as_secs_f64();
    Ok((median_rate(&windows).unwrap_or(overall), overall))
}

/// Median of the per-window counts after the first, as a rate per second.
fn median_rate(windows: &[u64]) -> Option<f64> {
    let mut w: Vec<u64> = windows.iter().skip(1).copied().collect();
    if w.len() < 2 {
        return None;
    }
    w.sort_unstable();
    Some(w[w.len() / 2] as f64 / WINDOW.as_secs_f64())
}

fn status_ok(_: u64, r: &[u8]) -> Result<(), String> {
    (r == [0, 0, 0, 0])
        .then_some(())
        .ok_or_else(|| format!("status {r:?}, expected 0"))
}

/// A GET answer must be found and hold the value of key `want`.
fn found(want: u64, r: &[u8]) -> Result<(), String> {
    if r.len() < 5 || r[..4] != [0, 0, 0, 0] || r.len() != 5 + usize::from(r[4]) {
        return Err(format!("GET of key {want}: answer {r:?}"));
    }
    match index_of(&r[5..]) {
        Some(i) if i == want => Ok(()),
        other => Err(format!("GET of key {want} returned the value of {other:?}")),
    }
}

/// Key of the `i`-th random read (0..n), the same for client and checker.
fn random_key(seed: u64, i: u64, n: u64) -> u64 {
    ((u128::from(mix(seed ^ i.wrapping_mul(0x9e37_79b9))) * u128::from(n)) >> 64) as u64
}

/// Key of the `i`-th hot-spot read: group `i / HOT_GROUP` starts at a
/// random key; within it, a bijection of 0..65,536 gives a random order.
fn hot_key(seed: u64, i: u64, n: u64) -> u64 {
    let group = HOT_GROUP.min(n);
    let start = random_key(seed, i / group, n - group + 1);
    let j = i % group;
    // An odd multiplier and an offset permute 0..2^16.
    let permuted = if group == HOT_GROUP {
        (j.wrapping_mul(0x9E37 | 1).wrapping_add(mix(i / group))) % HOT_GROUP
    } else {
        j
    };
    start + permuted
}

/// The kvlds workloads on one fresh server; (workload, rate) pairs.
pub fn kvlds_workloads(
    program: &Path,
    dir: &Path,
    n: u64,
    round: u32,
) -> Result<Vec<Record>, BenchError> {
    let server = KiviServer::start(program, dir, true, false)?;
    let addr = server.kvlds.clone().expect("kvlds listener");
    let mut out = Vec::new();
    let mut emit = |name: &str, (median, overall): (f64, f64)| {
        let mut r = Record::new("kivi-serve", name, n, round);
        r.ops_per_sec = Some(median);
        eprintln!(
            "[round {round}] kivi-serve {name:<22} {median:>12.0} ops/s (whole run {overall:.0})"
        );
        out.push(r);
    };
    let seed = 0x5eed_0000 + u64::from(round);

    emit(
        "kvlds_bulk_insert",
        pipelined(
            &addr,
            n,
            |i| record(SET, &[&key(i), &value(i, 0)]),
            status_ok,
        )?,
    );
    emit(
        "kvlds_bulk_update",
        pipelined(
            &addr,
            n,
            |i| record(SET, &[&key(i), &value(i, 1)]),
            status_ok,
        )?,
    );
    emit("kvlds_bulk_extract", extract(&addr, n)?);
    emit(
        "kvlds_random_read",
        pipelined(
            &addr,
            n,
            move |i| record(GET, &[&key(random_key(seed, i, n))]),
            move |i, r| found(random_key(seed, i, n), r),
        )?,
    );
    // 2 GET then 2 SET, repeating, on random keys.
    let mixed_key = move |i: u64| random_key(seed ^ 0xABCD, i, n);
    emit(
        "kvlds_random_mixed",
        pipelined(
            &addr,
            n,
            move |i| {
                let k = mixed_key(i);
                if i % 4 < 2 {
                    record(GET, &[&key(k)])
                } else {
                    record(SET, &[&key(k), &value(k, 2 + i)])
                }
            },
            move |i, r| {
                if i % 4 < 2 {
                    found(mixed_key(i), r)
                } else {
                    status_ok(i, r)
                }
            },
        )?,
    );
    emit(
        "kvlds_hotspot_read",
        pipelined(
            &addr,
            n,
            move |i| record(GET, &[&key(hot_key(seed, i, n))]),
            move |i, r| found(hot_key(seed, i, n), r),
        )?,
    );
    drop(server);
    Ok(out)
}

/// Bulk extract: full scans with RANGE (each call continues where the
/// last said), until about n pairs have been read; every scan checks it
/// got keys 0..n in order.
fn extract(addr: &str, n: u64) -> Result<(f64, f64), BenchError> {
    let mut s = TcpStream::connect(addr).map_err(|e| io_err(format!("connect to {addr}"), e))?;
    let _ = s.set_nodelay(true);
    let mut r = BufReader::with_capacity(4 << 20, s.try_clone().map_err(|e| io_err("clone", e))?);
    let start = Instant::now();
    let mut windows = Vec::new();
    let mut window_end = start + WINDOW;
    let mut in_window = 0u64;
    let mut total = 0u64;
    let mut buf = Vec::new();
    let mut p = Vec::new();
    let mut id = 0u64;
    // At least one whole scan, and at least 3 s of scanning.
    while total < n || start.elapsed() < Duration::from_secs(3) {
        let mut from: Vec<u8> = Vec::new();
        let mut expect = 0u64;
        loop {
            let mut rec = RANGE.to_be_bytes().to_vec();
            rec.extend_from_slice(&EXTRACT_BUDGET.to_be_bytes());
            rec.push(from.len() as u8);
            rec.extend_from_slice(&from);
            rec.push(0);
            p.clear();
            packet::write(&mut p, id, &rec);
            s.write_all(&p).map_err(|e| io_err("send RANGE", e))?;
            let got = read_packet(&mut r, &mut buf)?;
            if got != id {
                return Err(BenchError(format!("RANGE answer {got} to request {id}")));
            }
            id += 1;
            let (pairs, next) = parse_range(&buf)?;
            for (k, v) in &pairs {
                if k.as_slice() != key(expect) || index_of(v) != Some(expect) {
                    return Err(BenchError(format!(
                        "bulk extract: pair {expect} out of order or wrong"
                    )));
                }
                expect += 1;
            }
            let count = pairs.len() as u64;
            total += count;
            in_window += count;
            let now = Instant::now();
            while now >= window_end {
                windows.push(in_window);
                in_window = 0;
                window_end += WINDOW;
            }
            if next.is_empty() {
                break;
            }
            from = next;
        }
        if expect != n {
            return Err(BenchError(format!(
                "bulk extract: a scan found {expect} pairs, not {n}"
            )));
        }
    }
    let overall = total as f64 / start.elapsed().as_secs_f64();
    Ok((median_rate(&windows).unwrap_or(overall), overall))
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn parse_range(r: &[u8]) -> Result<(Pairs, Vec<u8>), BenchError> {
    let bad = || BenchError("malformed RANGE answer".into());
    if r.len() < 9 || r[..4] != [0, 0, 0, 0] {
        return Err(bad());
    }
    let count = u32::from_be_bytes(r[4..8].try_into().expect("4 bytes"));
    let mut at = 8;
    let string = |at: &mut usize| -> Result<Vec<u8>, BenchError> {
        let len = usize::from(*r.get(*at).ok_or_else(bad)?);
        let s = r.get(*at + 1..*at + 1 + len).ok_or_else(bad)?.to_vec();
        *at += 1 + len;
        Ok(s)
    };
    let next = string(&mut at)?;
    let mut pairs = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let k = string(&mut at)?;
        let v = string(&mut at)?;
        pairs.push((k, v));
    }
    if at != r.len() {
        return Err(bad());
    }
    Ok((pairs, next))
}

// ---- redis-benchmark ----

/// A redis-server child on a fresh directory, with AOF fsync `policy`.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start(dir: &Path, policy: &str) -> Result<Self, BenchError> {
        std::fs::create_dir_all(dir).map_err(|e| io_err("create redis dir", e))?;
        let port = free_port()?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
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
    let (host, port) = host_port
        .rsplit_once(':')
        .ok_or_else(|| BenchError(format!("bad address {host_port}")))?;
    let out = Command::new("redis-benchmark")
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
    let single = (n / 20).max(1000).to_string();
    let mut out = Vec::new();
    let runs: [(&str, Vec<&str>); 2] = [
        (
            "p1000",
            vec!["-t", "set,get", "-P", "1000", "-n", &n_s, "-r", &n_s],
        ),
        (
            "c50",
            vec![
                "-t", "set", "-P", "1", "-c", "50", "-n", &single, "-r", &n_s,
            ],
        ),
    ];
    for (label, args) in runs {
        for (test, rps) in redis_benchmark(addr, &args)? {
            let name = format!("redis_{}_{label}", test.to_ascii_lowercase());
            eprintln!("[round {round}] {target:<14} {name:<22} {rps:>12.0} requests/s");
            let mut r = Record::new(target, &name, n, round);
            r.ops_per_sec = Some(rps);
            out.push(r);
        }
    }
    Ok(out)
}

/// Every server workload, `rounds` times, targets interleaved.
pub fn run(program: &Path, dir: &Path, n: u64, rounds: u32) -> Result<Vec<Record>, BenchError> {
    let mut out = Vec::new();
    for round in 1..=rounds {
        let d = fresh(dir, &format!("round{round}-kvlds"))?;
        out.extend(kvlds_workloads(program, &d, n, round)?);
        let d = fresh(dir, &format!("round{round}-kivi-resp"))?;
        {
            let server = KiviServer::start(program, &d, false, true)?;
            let addr = server.resp.clone().expect("resp listener");
            out.extend(redis_runs("kivi-serve", &addr, n, round)?);
        }
        for policy in ["always", "everysec"] {
            let d = fresh(dir, &format!("round{round}-redis-{policy}"))?;
            let server = RedisServer::start(&d, policy)?;
            out.extend(redis_runs(
                &format!("redis-{policy}"),
                &format!("127.0.0.1:{}", server.port),
                n,
                round,
            )?);
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(out)
}

fn fresh(dir: &Path, name: &str) -> Result<PathBuf, BenchError> {
    let d = dir.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(dir).map_err(|e| io_err(format!("create {}", dir.display()), e))?;
    Ok(d)
}

/// kivaloo's figures from `shared/workloads.md` (the quiet run, the best
/// seen; kivaloo itself is not installable here), per second, for 1M and
/// 8M pairs, with the goal's ratio.
const KIVALOO: [(&str, f64, f64, f64); 6] = [
    ("kvlds_bulk_insert", 1.06e6, 0.55e6, 1.5),
    ("kvlds_bulk_update", 1.14e6, 0.27e6, 1.5),
    ("kvlds_bulk_extract", 0.91e6, 0.21e6, 5.0),
    ("kvlds_random_read", 0.58e6, 17e3, 1.5),
    ("kvlds_random_mixed", 60e3, 18e3, 3.0),
    ("kvlds_hotspot_read", 1.08e6, 0.22e6, 1.5),
];

fn best(records: &[Record], store: &str, workload: &str) -> Option<f64> {
    records
        .iter()
        .filter(|r| r.store == store && r.workload == workload)
        .filter_map(|r| r.ops_per_sec)
        .reduce(f64::max)
}

/// Prints the best round of every figure with the goal's ratio, and
/// writes every record as a JSON line to `json` if given.
pub fn report(records: &[Record], json: Option<&Path>) -> Result<(), BenchError> {
    if let Some(p) = json {
        let mut f =
            std::fs::File::create(p).map_err(|e| io_err(format!("create {}", p.display()), e))?;
        for r in records {
            let line = serde_json::to_string(r).expect("records serialize");
            writeln!(f, "{line}").map_err(|e| io_err("write JSON", e))?;
        }
    }
    let n = records.first().map_or(0, |r| r.n);
    println!("\nkvlds, one connection, 4,096 in flight, n = {n} (best round; kivaloo: shared/workloads.md)");
    println!(
        "{:<22} {:>14} {:>14} {:>8} {:>6}",
        "workload", "kivi serve/s", "kivaloo/s", "ratio", "goal"
    );
    for (w, k1, k8, goal) in KIVALOO {
        let Some(kivi) = best(records, "kivi-serve", w) else {
            continue;
        };
        let (kivaloo, goal) = if n >= 8_000_000 {
            (k8, if w == "kvlds_random_read" { 10.0 } else { goal })
        } else {
            (k1, goal)
        };
        println!(
            "{w:<22} {kivi:>14.0} {kivaloo:>14.0} {:>7.2}x {goal:>5.1}x",
            kivi / kivaloo
        );
    }
    println!("\nredis-benchmark (best round), requests/s");
    println!(
        "{:<22} {:>14} {:>14} {:>14} {:>12}",
        "test", "kivi serve", "redis always", "redis everysec", "kivi/always"
    );
    let mut tests: Vec<&str> = records
        .iter()
        .filter(|r| r.workload.starts_with("redis_"))
        .map(|r| r.workload.as_str())
        .collect();
    tests.sort_unstable();
    tests.dedup();
    for t in tests {
        let k = best(records, "kivi-serve", t).unwrap_or(f64::NAN);
        let a = best(records, "redis-always", t).unwrap_or(f64::NAN);
        let e = best(records, "redis-everysec", t).unwrap_or(f64::NAN);
        println!("{t:<22} {k:>14.0} {a:>14.0} {e:>14.0} {:>11.2}x", k / a);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_keys_cover_each_group_once() {
        let n = 200_000;
        let mut seen = std::collections::HashSet::new();
        let first = hot_key(1, 0, n);
        for i in 0..HOT_GROUP {
            let k = hot_key(1, i, n);
            assert!(k < n);
            assert!(seen.insert(k), "key {k} twice in a group");
        }
        // A run of consecutive keys, the first one included.
        assert_eq!(
            seen.iter().max().unwrap() - seen.iter().min().unwrap(),
            HOT_GROUP - 1
        );
        assert!(seen.contains(&first));
        let mut rng = crate::kv40::Rng::new(3);
        for _ in 0..1000 {
            assert!(random_key(7, rng.next_u64(), n) < n);
        }
    }
}
