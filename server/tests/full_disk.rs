//! A full disk, served: the server (started in this process through the
//! library, as `kivi serve` starts it) on a store over the crash simulator
//! with a byte quota, driven over TCP by minimal RESP and kvlds clients.
//! Writes get errors (RESP) or close their connection (kvlds, which has no
//! error status), reads keep working, nothing answered before is lost, and
//! the server still stops.
//!
//! The server stops on SIGTERM, which this test sends to its own process
//! (tokio's handler takes it once the server runs): so it is the only test
//! in this binary.

use kivi::{Db, Options};
use kivi_kvlds_wire::{packet, request};
use kivi_server::listen::Addr;
use kivi_server::Config;
use kivi_storage::SimStorage;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// A server running on a thread of this process, on ports the kernel chose.
struct Server {
    resp: String,
    kvlds: String,
    metrics: String,
    thread: JoinHandle<io::Result<()>>,
}

impl Server {
    /// A server on an in-memory store whose disk is full after `bytes`.
    fn start_full_after(bytes: u64) -> Server {
        let sim = SimStorage::new();
        sim.set_quota(Some(bytes));
        let db = Db::open_with_storage(Arc::new(sim), Options::default()).unwrap();
        let config = Config {
            resp: Some(Addr::Tcp("127.0.0.1:0".into())),
            kvlds: Some(Addr::Tcp("127.0.0.1:0".into())),
            metrics: Some(Addr::Tcp("127.0.0.1:0".into())),
            ..Config::default()
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            kivi_server::run(db, config, |bound| {
                let bound: Vec<(String, String)> = bound
                    .iter()
                    .map(|(proto, addr)| (proto.to_string(), addr.clone()))
                    .collect();
                tx.send(bound).unwrap();
            })
        });
        let bound = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server binds its listeners");
        let addr = |proto: &str| {
            bound
                .iter()
                .find(|(p, _)| p == proto)
                .unwrap_or_else(|| panic!("no {proto} listener: {bound:?}"))
                .1
                .clone()
        };
        Server {
            resp: addr("resp"),
            kvlds: addr("kvlds"),
            metrics: addr("metrics"),
            thread,
        }
    }

    /// SIGTERM (to this process, which the server handles), and what
    /// `run` returned.
    fn stop(self) -> io::Result<()> {
        // SAFETY: kill(2) and getpid(2) take integers and touch no memory.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        self.thread.join().expect("the server thread panicked")
    }
}

// ---- a minimal RESP client ----

#[derive(Debug, PartialEq)]
enum Val {
    Ok(String),
    Err(String),
    Bulk(Option<Vec<u8>>),
}

struct Resp {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Resp {
    fn connect(addr: &str) -> Resp {
        let w = TcpStream::connect(addr).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Resp {
            r: BufReader::new(w.try_clone().unwrap()),
            w,
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> Val {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&out).unwrap();
        let mut line = Vec::new();
        self.r.read_until(b'\n', &mut line).unwrap();
        let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        match line[0] {
            b'+' => Val::Ok(text),
            b'-' => Val::Err(text),
            b'$' => {
                let n: i64 = text.parse().unwrap();
                if n < 0 {
                    return Val::Bulk(None);
                }
                let mut b = vec![0u8; n as usize + 2];
                self.r.read_exact(&mut b).unwrap();
                b.truncate(n as usize);
                Val::Bulk(Some(b))
            }
            c => panic!("unexpected reply type {:?}", c as char),
        }
    }
}

/// The metrics endpoint's answer to `GET /metrics`, as `name{labels}` to
/// value.
fn scrape(addr: &str) -> std::collections::HashMap<String, f64> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: kivi\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (name, v) = l.rsplit_once(' ').unwrap();
            (name.to_string(), v.parse().unwrap())
        })
        .collect()
}

// ---- a minimal kvlds client ----

struct Kvlds {
    s: TcpStream,
    next_id: u64,
}

fn record(ty: u32, fields: &[&[u8]]) -> Vec<u8> {
    let mut r = ty.to_be_bytes().to_vec();
    for f in fields {
        request::push_string(&mut r, f);
    }
    r
}

impl Kvlds {
    fn connect(addr: &str) -> Kvlds {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Kvlds { s, next_id: 1 }
    }

    /// Sends a request and waits for its response record; None if the
    /// server closed the connection instead.
    fn call(&mut self, record: &[u8]) -> Option<Vec<u8>> {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        packet::write(&mut out, id, record);
        self.s.write_all(&out).unwrap();
        let mut buf = vec![0u8; packet::HEADER_LEN];
        self.s.read_exact(&mut buf).ok()?;
        let n = u32::from_be_bytes(buf[8..12].try_into().unwrap()) as usize;
        buf.resize(packet::HEADER_LEN + n + packet::TRAILER_LEN, 0);
        self.s.read_exact(&mut buf[packet::HEADER_LEN..]).ok()?;
        let p = packet::parse(&buf)
            .expect("a well-framed response")
            .expect("a whole response");
        assert_eq!(p.id, id, "the response answers the request");
        Some(p.record.to_vec())
    }

    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        let r = self
            .call(&record(request::GET, &[key]))
            .expect("a GET response");
        match u32::from_be_bytes(r[..4].try_into().unwrap()) {
            request::OK => {
                assert_eq!(r.len(), 5 + r[4] as usize);
                Some(r[5..].to_vec())
            }
            request::NOT_DONE => None,
            s => panic!("GET status {s}"),
        }
    }
}

/// A full disk: writes get errors (RESP) or close their connection (kvlds,
/// which has no error status), reads keep working, and nothing answered
/// before is lost.
#[test]
fn a_full_disk_refuses_writes_and_keeps_serving_reads() {
    let server = Server::start_full_after(4 << 20);
    let mut r = Resp::connect(&server.resp);
    let value = vec![b'v'; 1000];
    let mut stored = Vec::new();
    let err = loop {
        let k = format!("k{:06}", stored.len()).into_bytes();
        match r.call(&[b"SET", &k, &value]) {
            Val::Ok(_) => stored.push(k),
            Val::Err(e) => break e,
            other => panic!("SET answered {other:?}"),
        }
        assert!(stored.len() < 100_000, "the disk never filled");
    };
    assert!(err.contains("disk full"), "{err}");
    assert!(stored.len() > 100, "only {} writes fit", stored.len());
    // The connection stays usable, and what was answered is all there.
    // (Small writes may still fit, and checkpoints free space as they
    // retire old log segments: "full" is per write.)
    assert_eq!(r.call(&[b"PING"]), Val::Ok("PONG".into()));
    for k in &stored {
        assert_eq!(r.call(&[b"GET", k]), Val::Bulk(Some(value.clone())));
    }
    // kvlds has no error status: the write that meets the full disk closes
    // its connection, and reads on another connection still work.
    let mut c = Kvlds::connect(&server.kvlds);
    let big = vec![b'w'; 255];
    let mut answered = Vec::new();
    loop {
        let k = format!("kv{:06}", answered.len()).into_bytes();
        match c.call(&record(request::SET, &[&k, &big])) {
            Some(s) if s == request::OK.to_be_bytes() => answered.push(k),
            Some(other) => panic!("kvlds SET answered {other:?}"),
            None => break,
        }
        assert!(answered.len() < 100_000, "the disk never filled for kvlds");
    }
    let mut c = Kvlds::connect(&server.kvlds);
    for k in &answered {
        assert_eq!(c.get(k), Some(big.clone()));
    }
    drop(c);
    // The metrics saw it all: the requests by type, the refused writes, the
    // failure the store logged.
    let m = scrape(&server.metrics);
    let at = |name: &str| m.get(name).copied().unwrap_or_else(|| panic!("no {name}"));
    assert_eq!(
        at(r#"kivi_kvlds_requests_total{request="SET"}"#),
        answered.len() as f64 + 1.0
    );
    assert_eq!(
        at(r#"kivi_kvlds_requests_total{request="GET"}"#),
        answered.len() as f64
    );
    assert_eq!(
        at(r#"kivi_commands_total{command="SET"}"#),
        stored.len() as f64 + 1.0
    );
    assert!(at("kivi_failed_commits_total") >= 2.0);
    assert_eq!(at("kivi_background_error"), 1.0);
    assert!(at(r#"kivi_fsync_seconds_count{log="commit"}"#) >= stored.len() as f64);
    // Stopping still answers and returns; closing the store may fail for
    // want of space, which is reported (the log holds everything).
    if let Err(e) = server.stop() {
        assert!(e.to_string().contains("nothing answered is lost"), "{e}");
    }
}
