//! Server workloads redis-benchmark cannot drive: transactions (MULTI, ten
//! SETs, EXEC, as redis-py's `pipeline()` sends them) and a cache whose keys
//! expire (SET ... PX at a steady rate, the store's files watched against
//! the live data). Each speaks RESP through a small client of its own that
//! sends what real clients send and checks every answer.

use crate::{io_err, BenchError};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A RESP answer, as far as these workloads need one.
#[derive(Debug, PartialEq)]
enum Answer {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Answer>),
}

struct Client {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
}

impl Client {
    fn connect(addr: &str) -> Result<Client, BenchError> {
        let s = TcpStream::connect(addr).map_err(|e| io_err(format!("connect to {addr}"), e))?;
        s.set_nodelay(true)
            .map_err(|e| io_err("set TCP_NODELAY", e))?;
        let r = s.try_clone().map_err(|e| io_err("clone a socket", e))?;
        Ok(Client {
            r: BufReader::with_capacity(1 << 16, r),
            w: BufWriter::with_capacity(1 << 16, s),
        })
    }

    /// Queues one command (sent by `flush`).
    fn send(&mut self, args: &[&[u8]]) -> Result<(), BenchError> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&out).map_err(|e| io_err("send", e))
    }

    fn flush(&mut self) -> Result<(), BenchError> {
        self.w.flush().map_err(|e| io_err("send", e))
    }

    fn line(&mut self) -> Result<String, BenchError> {
        let mut l = String::new();
        let n = self.r.read_line(&mut l).map_err(|e| io_err("receive", e))?;
        if n == 0 || !l.ends_with("\r\n") {
            return Err(BenchError("the server closed the connection".into()));
        }
        l.truncate(l.len() - 2);
        Ok(l)
    }

    fn read(&mut self) -> Result<Answer, BenchError> {
        let l = self.line()?;
        let (kind, rest) = l.split_at(1);
        let int = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| BenchError(format!("not a number in an answer: {l:?}")))
        };
        Ok(match kind {
            "+" => Answer::Simple(rest.to_string()),
            "-" => Answer::Error(rest.to_string()),
            ":" => Answer::Int(int(rest)?),
            "$" => match int(rest)? {
                -1 => Answer::Bulk(None),
                n => {
                    let mut b = vec![0; n as usize + 2];
                    std::io::Read::read_exact(&mut self.r, &mut b)
                        .map_err(|e| io_err("receive", e))?;
                    b.truncate(n as usize);
                    Answer::Bulk(Some(b))
                }
            },
            "*" => {
                let n = int(rest)?;
                let mut items = Vec::with_capacity(n.max(0) as usize);
                for _ in 0..n {
                    items.push(self.read()?);
                }
                Answer::Array(items)
            }
            _ => return Err(BenchError(format!("not a RESP answer: {l:?}"))),
        })
    }

    /// Sends a command and reads its answer.
    fn call(&mut self, args: &[&[u8]]) -> Result<Answer, BenchError> {
        self.send(args)?;
        self.flush()?;
        self.read()
    }

    /// A field of INFO's answer.
    fn info_field(&mut self, section: &str, field: &str) -> Result<u64, BenchError> {
        let Answer::Bulk(Some(text)) = self.call(&[b"INFO", section.as_bytes()])? else {
            return Err(BenchError("INFO answered no text".into()));
        };
        let text = String::from_utf8_lossy(&text);
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| BenchError(format!("INFO {section} has no {field}")))
    }
}

/// A numeric field of the server's INFO `section`.
pub fn info_u64(addr: &str, section: &str, field: &str) -> Result<u64, BenchError> {
    Client::connect(addr)?.info_field(section, field)
}

/// Transactions per second: `clients` connections, each sending MULTI, ten
/// SETs of distinct keys (16-byte values) and EXEC in one write, as
/// redis-py's `pipeline()` does, and waiting for the answers before the
/// next, `total` transactions in all. Every answer is checked byte for byte
/// (OK, QUEUED ten times, then ten OKs). The connections are driven from
/// one thread by `poll(2)`, as redis-benchmark drives its own: a thread per
/// connection (fifty blocking threads on two cores) spent more on switching
/// between them than either server spent on the transactions, and held
/// Redis without fsync to within 10% of Redis with it.
pub fn multi_exec(addr: &str, clients: usize, total: u64) -> Result<f64, BenchError> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    // What every transaction is answered, byte for byte.
    let mut answer = b"+OK\r\n".to_vec();
    answer.extend(b"+QUEUED\r\n".repeat(10));
    answer.extend(b"*10\r\n");
    answer.extend(b"+OK\r\n".repeat(10));
    struct Conn {
        s: TcpStream,
        /// Transactions answered.
        done: u64,
        /// The request not yet sent, from `at`.
        out: Vec<u8>,
        at: usize,
        /// Answer bytes received for the transaction in flight.
        got: Vec<u8>,
        waiting: bool,
    }
    let per_client = total / clients as u64;
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        let s = TcpStream::connect(addr).map_err(|e| io_err(format!("connect to {addr}"), e))?;
        s.set_nodelay(true)
            .map_err(|e| io_err("set TCP_NODELAY", e))?;
        s.set_nonblocking(true)
            .map_err(|e| io_err("set non-blocking", e))?;
        conns.push(Conn {
            s,
            done: 0,
            out: Vec::with_capacity(1024),
            at: 0,
            got: Vec::with_capacity(answer.len()),
            waiting: false,
        });
    }
    let value = [b'v'; 16];
    let request = |out: &mut Vec<u8>, c: usize, t: u64| {
        out.clear();
        out.extend_from_slice(b"*1\r\n$5\r\nMULTI\r\n");
        for i in 0..10 {
            let key = format!("tx:{c}:{t}:{i}");
            out.extend_from_slice(format!("*3\r\n$3\r\nSET\r\n${}\r\n", key.len()).as_bytes());
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(format!("\r\n${}\r\n", value.len()).as_bytes());
            out.extend_from_slice(&value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"*1\r\n$4\r\nEXEC\r\n");
    };
    let started = Instant::now();
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(clients);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        fds.clear();
        let mut live = 0;
        for (c, conn) in conns.iter_mut().enumerate() {
            if !conn.waiting && conn.done < per_client {
                request(&mut conn.out, c, conn.done);
                conn.at = 0;
                conn.waiting = true;
            }
            if conn.at < conn.out.len() {
                match conn.s.write(&conn.out[conn.at..]) {
                    Ok(n) => conn.at += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(io_err("send", e)),
                }
            }
            let mut events = 0;
            if conn.waiting {
                events |= libc::POLLIN;
                live += 1;
            }
            if conn.at < conn.out.len() {
                events |= libc::POLLOUT;
            }
            fds.push(libc::pollfd {
                fd: conn.s.as_raw_fd(),
                events,
                revents: 0,
            });
        }
        if live == 0 {
            break;
        }
        // SAFETY: `fds` holds `fds.len()` valid pollfds for the call's
        // duration; the sockets outlive it.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 60_000) };
        if r < 0 {
            return Err(io_err("poll", std::io::Error::last_os_error()));
        }
        if r == 0 {
            return Err(BenchError("no answer for a minute".into()));
        }
        for (conn, p) in conns.iter_mut().zip(&fds) {
            if p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0 {
                continue;
            }
            match conn.s.read(&mut buf) {
                Ok(0) => return Err(BenchError("the server closed the connection".into())),
                Ok(n) => conn.got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(io_err("receive", e)),
            }
            if conn.got.len() > answer.len() || !answer.starts_with(&conn.got) {
                return Err(BenchError(format!(
                    "a transaction answered {:?}",
                    String::from_utf8_lossy(&conn.got)
                )));
            }
            if conn.got.len() == answer.len() {
                conn.got.clear();
                conn.waiting = false;
                conn.done += 1;
            }
        }
    }
    Ok((per_client * clients as u64) as f64 / started.elapsed().as_secs_f64())
}

/// What the expiring-cache workload saw.
#[derive(Debug, Clone, Copy)]
pub struct ExpiringCache {
    /// SETs per second the writer kept up.
    pub rate: f64,
    /// The most the store's files held, against the live data (DBSIZE ×
    /// the bytes of a key and its value), over the samples after the first
    /// round of deadlines passed.
    pub peak_files_per_live: f64,
    /// Live keys at the last sample.
    pub live_keys: u64,
}

/// A cache whose keys expire: `rate` SETs a second of new keys (100-byte
/// values) with `ttl` to live, for `seconds`, so that about `rate × ttl`
/// keys are live once the first keys expire. A writer thread sends on
/// schedule (at most 64 Ki answers outstanding) while a reader checks the
/// answers. Each second after the first `ttl` (plus one), the store's files
/// (INFO's `file_bytes`, kivi only) are compared with the live data: DBSIZE
/// × the bytes of a key and its value.
pub fn expiring_cache(
    addr: &str,
    rate: u64,
    ttl: Duration,
    seconds: u64,
) -> Result<ExpiringCache, BenchError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    const BATCH: u64 = 1000;
    const OUTSTANDING: u64 = 64 << 10;
    let cl = Client::connect(addr)?;
    let socket =
        cl.w.get_ref()
            .try_clone()
            .map_err(|e| io_err("clone a socket", e))?;
    let Client { mut r, mut w } = cl;
    let mut probe = Client::connect(addr)?;
    let value = [b'c'; 100];
    let px = ttl.as_millis().to_string();
    let key_bytes = "cache:00000000".len() as u64;
    let answered = AtomicU64::new(0);
    let started = Instant::now();
    let run = Duration::from_secs(seconds);
    std::thread::scope(|s| -> Result<ExpiringCache, BenchError> {
        let writer = s.spawn(|| -> Result<u64, BenchError> {
            let mut sent = 0u64;
            while started.elapsed() < run {
                let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
                if sent >= due || sent - answered.load(Ordering::Acquire) >= OUTSTANDING {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let mut out = Vec::with_capacity(BATCH as usize * 160);
                for i in sent..sent + BATCH {
                    let key = format!("cache:{i:08}");
                    out.extend_from_slice(
                        format!("*5\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$100\r\n", key.len())
                            .as_bytes(),
                    );
                    out.extend_from_slice(&value);
                    out.extend_from_slice(
                        format!("\r\n$2\r\nPX\r\n${}\r\n{px}\r\n", px.len()).as_bytes(),
                    );
                }
                w.write_all(&out).map_err(|e| io_err("send", e))?;
                w.flush().map_err(|e| io_err("send", e))?;
                sent += BATCH;
            }
            Ok(sent)
        });
        let reader = s.spawn(|| -> Result<(), BenchError> {
            let mut line = String::new();
            loop {
                line.clear();
                let n = r.read_line(&mut line).map_err(|e| io_err("receive", e))?;
                if n == 0 {
                    return Ok(());
                }
                if line != "+OK\r\n" {
                    return Err(BenchError(format!("SET answered {line:?}")));
                }
                answered.fetch_add(1, Ordering::Release);
            }
        });
        let mut peak: f64 = 0.0;
        let mut live_keys = 0;
        let mut next_sample = ttl.as_secs() + 1;
        while started.elapsed() < run {
            std::thread::sleep(Duration::from_millis(50));
            if started.elapsed().as_secs() < next_sample {
                continue;
            }
            next_sample += 1;
            let Answer::Int(keys) = probe.call(&[b"DBSIZE"])? else {
                return Err(BenchError("DBSIZE answered no number".into()));
            };
            let files = probe.info_field("kivi", "file_bytes")?;
            let live = keys as u64 * (key_bytes + value.len() as u64);
            if live > 0 {
                peak = peak.max(files as f64 / live as f64);
            }
            live_keys = keys as u64;
        }
        let sent = writer
            .join()
            .unwrap_or_else(|_| Err(BenchError("the writer panicked".into())))?;
        // Every answer, then the connection is done.
        let waited = Instant::now();
        while answered.load(Ordering::Acquire) < sent {
            if waited.elapsed() > Duration::from_secs(60) {
                return Err(BenchError("answers missing after a minute".into()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let elapsed = started.elapsed().as_secs_f64();
        // Every answer is in: closing the socket ends the reader.
        let _ = socket.shutdown(std::net::Shutdown::Both);
        reader
            .join()
            .unwrap_or_else(|_| Err(BenchError("the reader panicked".into())))?;
        Ok(ExpiringCache {
            rate: sent as f64 / elapsed,
            peak_files_per_live: peak,
            live_keys,
        })
    })
}
