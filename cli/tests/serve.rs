//! `kivi serve` end to end: a real server process on a temporary store,
//! driven over real sockets by a kvlds client written here from the spec
//! (docs/kvlds-protocol.md, checked against its test vectors)
//! and a minimal RESP client; kill -9 in the middle of pipelined writes
//! from several connections; malformed input on one connection while
//! another keeps working. (redis-cli, redis-py and redis-benchmark drive
//! it in `tests/server/test_resp.py`.)

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KIVI: &str = env!("CARGO_BIN_EXE_kivi");

/// A running `kivi serve` on ports the kernel chose.
struct Server {
    child: Child,
    resp: String,
    kvlds: String,
}

impl Server {
    fn start(store: &Path) -> Server {
        Server::start_with(store, &[])
    }

    fn start_with(store: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(KIVI)
            .arg("-d")
            .arg(store)
            .args(["serve", "--resp", "127.0.0.1:0", "--kvlds", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kivi serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut addr = |proto: &str| {
            let line = lines
                .next()
                .expect("kivi serve prints its listeners")
                .unwrap();
            let prefix = format!("kivi serve: {proto} listening on ");
            let rest = line
                .strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{line}"));
            rest.split(' ').next().unwrap().to_string()
        };
        let resp = addr("resp");
        let kvlds = addr("kvlds");
        Server { child, resp, kvlds }
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, and the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) with a pid we spawned and still own (not yet
        // waited for, so not reused) touches no memory.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- a kvlds client, written from the spec ----

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// kivaloo's CRC: CRC-32C started at 0x82F63B78, no final XOR, little-endian.
fn kcrc(data: &[u8]) -> [u8; 4] {
    (!crc32c::crc32c_append(!0x82F6_3B78u32, data)).to_le_bytes()
}

fn packet(id: u64, record: &[u8]) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    p.extend_from_slice(&(record.len() as u32).to_be_bytes());
    let h = kcrc(&p);
    p.extend_from_slice(&h);
    p.extend_from_slice(record);
    let r = kcrc(record);
    p.extend((0..4).map(|i| r[i] ^ h[i]));
    p
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn record(ty: u32, fields: &[&[u8]]) -> Vec<u8> {
    let mut r = ty.to_be_bytes().to_vec();
    for f in fields {
        r.push(f.len() as u8);
        r.extend_from_slice(f);
    }
    r
}

fn range_record(max: u32, start: &[u8], end: &[u8]) -> Vec<u8> {
    let mut r = 0x131u32.to_be_bytes().to_vec();
    r.extend_from_slice(&max.to_be_bytes());
    r.push(start.len() as u8);
    r.extend_from_slice(start);
    r.push(end.len() as u8);
    r.extend_from_slice(end);
    r
}

struct Kvlds {
    s: TcpStream,
    next_id: u64,
}

impl Kvlds {
    fn connect(addr: &str) -> Kvlds {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Kvlds { s, next_id: 1 }
    }

    fn send(&mut self, record: &[u8]) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.s.write_all(&packet(id, record)).unwrap();
        id
    }

    /// The next response: (id, record); None if the server closed.
    fn recv(&mut self) -> Option<(u64, Vec<u8>)> {
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h).ok()?;
        assert_eq!(kcrc(&h[..12]), h[12..16], "response header CRC");
        let id = u64::from_be_bytes(h[..8].try_into().unwrap());
        let n = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
        let mut body = vec![0u8; n + 4];
        self.s.read_exact(&mut body).ok()?;
        let r = kcrc(&body[..n]);
        let want: Vec<u8> = (0..4).map(|i| r[i] ^ h[12 + i]).collect();
        assert_eq!(body[n..], want[..], "response record CRC");
        body.truncate(n);
        Some((id, body))
    }

    fn call(&mut self, record: &[u8]) -> Vec<u8> {
        let id = self.send(record);
        let (got, r) = self.recv().expect("a response");
        assert_eq!(got, id);
        r
    }

    fn status(&mut self, record: &[u8]) -> u32 {
        let r = self.call(record);
        assert_eq!(r.len(), 4, "a status response");
        u32::from_be_bytes(r[..4].try_into().unwrap())
    }

    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        let r = self.call(&record(0x130, &[key]));
        match u32::from_be_bytes(r[..4].try_into().unwrap()) {
            0 => {
                assert_eq!(r.len(), 5 + r[4] as usize);
                Some(r[5..].to_vec())
            }
            1 => None,
            s => panic!("GET status {s}"),
        }
    }

    /// One RANGE call: (pairs, next).
    fn range(&mut self, max: u32, start: &[u8], end: &[u8]) -> (Pairs, Vec<u8>) {
        let r = self.call(&range_record(max, start, end));
        assert_eq!(r[..4], [0, 0, 0, 0]);
        let count = u32::from_be_bytes(r[4..8].try_into().unwrap());
        let mut at = 8;
        let string = |at: &mut usize| {
            let n = r[*at] as usize;
            let s = r[*at + 1..*at + 1 + n].to_vec();
            *at += 1 + n;
            s
        };
        let next = string(&mut at);
        let mut pairs = Vec::new();
        for _ in 0..count {
            let k = string(&mut at);
            let v = string(&mut at);
            pairs.push((k, v));
        }
        assert_eq!(at, r.len(), "nothing after the pairs");
        (pairs, next)
    }

    /// A whole range, as kivaloo's client loops: until `next` is empty
    /// (empty end) or at least the end.
    fn scan(&mut self, max: u32, start: &[u8], end: &[u8]) -> (Pairs, usize) {
        let mut all = Vec::new();
        let mut from = start.to_vec();
        let mut calls = 0;
        loop {
            let (pairs, next) = self.range(max, &from, end);
            calls += 1;
            all.extend(pairs);
            let done = if end.is_empty() {
                next.is_empty()
            } else {
                next.as_slice() >= end
            };
            if done {
                return (all, calls);
            }
            assert!(next > from, "RANGE made progress");
            from = next;
        }
    }
}

// ---- a minimal RESP client ----

struct Resp {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

#[derive(Debug, PartialEq)]
enum Val {
    Ok(String),
    Err(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Val>),
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

    fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    fn send(&mut self, args: &[&[u8]]) {
        self.w.write_all(&Self::encode(args)).unwrap();
    }

    fn read(&mut self) -> Option<Val> {
        let mut line = Vec::new();
        if self.r.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        Some(match line[0] {
            b'+' => Val::Ok(text),
            b'-' => Val::Err(text),
            b':' => Val::Int(text.parse().unwrap()),
            b'$' => {
                let n: i64 = text.parse().unwrap();
                if n < 0 {
                    Val::Bulk(None)
                } else {
                    let mut b = vec![0u8; n as usize + 2];
                    self.r.read_exact(&mut b).ok()?;
                    b.truncate(n as usize);
                    Val::Bulk(Some(b))
                }
            }
            b'*' => {
                let n: i64 = text.parse().unwrap();
                let mut v = Vec::new();
                for _ in 0..n.max(0) {
                    v.push(self.read()?);
                }
                Val::Array(v)
            }
            c => panic!("unexpected reply type {:?}", c as char),
        })
    }

    fn call(&mut self, args: &[&[u8]]) -> Val {
        self.send(args);
        self.read().expect("a reply")
    }
}

fn bulk(s: &str) -> Val {
    Val::Bulk(Some(s.as_bytes().to_vec()))
}

#[test]
fn the_test_client_matches_the_spec_vectors() {
    assert_eq!(kcrc(b"hello world"), [0xca, 0x13, 0x0b, 0xaa]);
    assert_eq!(
        packet(1, &record(0x100, &[])),
        unhex("000000000000000100000004ab1233e700000100805f339a")
    );
    assert_eq!(
        packet(2, &record(0x110, &[b"a", b"b"])),
        unhex("0000000000000002000000088f6d43e20000011001610162475a43e9")
    );
    assert_eq!(
        packet(2, &[0, 0, 0, 0]),
        unhex("0000000000000002000000045fa200af000000000377a2c1")
    );
}

#[test]
fn kvlds_requests_answer_as_the_spec_says_and_share_data_with_resp() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let mut c = Kvlds::connect(&server.kvlds);
    // The spec's own PARAMS request, byte for byte.
    c.s.write_all(&unhex("000000000000000100000004ab1233e700000100805f339a"))
        .unwrap();
    let (id, r) = c.recv().unwrap();
    assert_eq!((id, r), (1, [0, 0, 0, 255, 0, 0, 0, 255].to_vec()));
    c.next_id = 2;
    assert_eq!(c.status(&record(0x110, &[b"a", b"b"])), 0, "SET");
    assert_eq!(c.get(b"a"), Some(b"b".to_vec()));
    assert_eq!(c.get(b"zz"), None);
    assert_eq!(
        c.status(&record(0x111, &[b"a", b"x", b"c"])),
        1,
        "CAS, wrong old"
    );
    assert_eq!(c.status(&record(0x111, &[b"a", b"b", b"c"])), 0, "CAS");
    assert_eq!(
        c.status(&record(0x112, &[b"a", b"d"])),
        1,
        "ADD of a present key"
    );
    assert_eq!(c.status(&record(0x112, &[b"n", b"1"])), 0, "ADD");
    assert_eq!(
        c.status(&record(0x113, &[b"m", b"1"])),
        1,
        "MODIFY of an absent key"
    );
    assert_eq!(c.status(&record(0x113, &[b"n", b"2"])), 0, "MODIFY");
    assert_eq!(c.status(&record(0x121, &[b"n", b"1"])), 1, "CAD, wrong old");
    assert_eq!(c.status(&record(0x121, &[b"n", b"2"])), 0, "CAD");
    assert_eq!(
        c.status(&record(0x120, &[b"n"])),
        0,
        "DELETE of an absent key"
    );
    assert_eq!(c.get(b"n"), None);
    let max = vec![0xffu8; 255];
    assert_eq!(
        c.status(&record(0x110, &[&max, &max])),
        0,
        "255-byte key and value"
    );
    assert_eq!(c.get(&max), Some(max.clone()));

    // What kvlds wrote, RESP reads, and the other way round.
    let mut r = Resp::connect(&server.resp);
    assert_eq!(r.call(&[b"GET", b"a"]), bulk("c"));
    assert_eq!(
        r.call(&[b"SET", b"from-resp", b"yes"]),
        Val::Ok("OK".into())
    );
    assert_eq!(c.get(b"from-resp"), Some(b"yes".to_vec()));
    // A value kvlds cannot carry closes only that connection.
    let big = vec![b'v'; 300];
    assert_eq!(r.call(&[b"SET", b"big", &big]), Val::Ok("OK".into()));
    let mut c2 = Kvlds::connect(&server.kvlds);
    c2.send(&record(0x130, &[b"big"]));
    assert!(
        c2.recv().is_none(),
        "a 300-byte value closes the kvlds connection"
    );
    assert_eq!(c.get(b"a"), Some(b"c".to_vec()));
    drop(server);
}

/// A key that expires (its deadline set through RESP) is gone on kvlds too:
/// GET, RANGE and ADD (which finds it absent) all see it absent.
#[test]
fn kvlds_never_returns_an_expired_key() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let mut r = Resp::connect(&server.resp);
    assert_eq!(
        r.call(&[b"SET", b"soon", b"1", b"PX", b"300"]),
        Val::Ok("OK".into())
    );
    assert_eq!(r.call(&[b"SET", b"stays", b"2"]), Val::Ok("OK".into()));
    let mut c = Kvlds::connect(&server.kvlds);
    assert_eq!(c.get(b"soon"), Some(b"1".to_vec()));
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(c.get(b"soon"), None);
    let (pairs, _) = c.range(100, b"", b"");
    let keys: Vec<&[u8]> = pairs.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(keys, [b"stays".as_slice()]);
    assert_eq!(
        c.status(&record(0x112, &[b"soon", b"3"])),
        0,
        "ADD of an expired key"
    );
    assert_eq!(c.get(b"soon"), Some(b"3".to_vec()));
    drop(server);
}

/// A kvlds client that sends far more than it reads: the server stops
/// reading it (its answers waiting are bounded) instead of buffering
/// without end, and once the client reads, every answer arrives, right.
#[test]
fn kvlds_a_client_that_does_not_read_is_held_back_then_answered_in_full() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let mut c = Kvlds::connect(&server.kvlds);
    for i in 0..100u32 {
        let k = format!("r{i:03}");
        assert_eq!(c.status(&record(0x110, &[k.as_bytes(), &[i as u8; 40]])), 0);
    }
    // 400,000 requests (about 26 MB, more than the sockets' buffers hold):
    // GETs of the keys above and of missing ones, and a SET of other keys
    // now and then, sent before a single answer is read.
    const N: u64 = 400_000;
    let request = |i: u64| -> Vec<u8> {
        match i % 50 {
            0 => record(0x110, &[format!("w{i}").as_bytes(), b"v"]),
            1 => record(0x130, &[b"missing"]),
            _ => record(0x130, &[format!("r{:03}", i % 100).as_bytes()]),
        }
    };
    let first = c.next_id;
    let mut w = c.s.try_clone().unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let sender = {
        let finished = finished.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            for i in 0..N {
                buf.extend_from_slice(&packet(first + i, &request(i)));
                if buf.len() >= 64 << 10 {
                    w.write_all(&buf).unwrap();
                    buf.clear();
                }
            }
            w.write_all(&buf).unwrap();
            finished.store(true, Ordering::Release);
        })
    };
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        !finished.load(Ordering::Acquire),
        "the server took every request of a client that reads nothing"
    );
    let mut seen = vec![false; N as usize];
    for _ in 0..N {
        let (id, r) = c.recv().expect("an answer");
        let i = id.checked_sub(first).expect("an answer to a request sent");
        assert!(
            !std::mem::replace(&mut seen[i as usize], true),
            "answered twice"
        );
        let want = match i % 50 {
            0 => vec![0, 0, 0, 0],
            1 => vec![0, 0, 0, 1],
            _ => [&[0, 0, 0, 0, 40][..], &[(i % 100) as u8; 40]].concat(),
        };
        assert_eq!(r, want, "answer to request {i}");
    }
    sender.join().unwrap();
}

/// A kvlds client that sends and never reads is let go once its answers
/// have waited the output timeout, and the server goes on serving others.
#[test]
fn kvlds_a_client_that_never_reads_is_disconnected_after_the_output_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_with(&tmp.path().join("store"), &["--output-timeout", "1"]);
    let mut c = Kvlds::connect(&server.kvlds);
    assert_eq!(c.status(&record(0x110, &[b"k", &[7u8; 200]])), 0);
    let first = c.next_id;
    let mut w = c.s.try_clone().unwrap();
    // 200,000 GETs of a 200-byte value: 40 MB of answers, never read.
    let sender = std::thread::spawn(move || {
        let mut buf = Vec::new();
        for i in 0..200_000u64 {
            buf.extend_from_slice(&packet(first + i, &record(0x130, &[b"k"])));
            if buf.len() >= 64 << 10 && w.write_all(&std::mem::take(&mut buf)).is_err() {
                return false;
            }
        }
        w.write_all(&buf).is_ok()
    });
    std::thread::sleep(Duration::from_secs(4));
    // The server closed the connection: reading finds the end well before
    // every answer.
    let mut answers = 0u64;
    while c.recv().is_some() {
        answers += 1;
    }
    assert!(answers < 200_000, "all {answers} answers came");
    // The sender, blocked on a full socket, was let go too.
    let _ = sender.join().unwrap();
    let mut other = Kvlds::connect(&server.kvlds);
    assert_eq!(other.get(b"k"), Some(vec![7u8; 200]));
}

#[test]
fn kvlds_range_fills_its_budget_and_says_where_to_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let mut c = Kvlds::connect(&server.kvlds);
    let mut model = BTreeMap::new();
    // Pipelined: 3,000 SETs in flight, answered in any order.
    let mut pending = std::collections::HashSet::new();
    for i in 0..3000u32 {
        let k = format!("key{i:06}").into_bytes();
        let v = vec![(i % 251) as u8; 40];
        pending.insert(c.send(&record(0x110, &[&k, &v])));
        model.insert(k, v);
    }
    while !pending.is_empty() {
        let (id, r) = c.recv().unwrap();
        assert_eq!(r, [0, 0, 0, 0]);
        assert!(pending.remove(&id), "one answer per request");
    }
    let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    // 1 MiB budget: everything in one call, empty end.
    let (pairs, next) = c.range(1 << 20, b"", b"");
    assert_eq!((pairs.len(), next), (3000, Vec::new()));
    assert_eq!(pairs, all);
    // A bounded range that fits: next is the end itself.
    let (pairs, next) = c.range(1 << 20, b"key000100", b"key000200");
    assert_eq!(pairs, all[100..200].to_vec());
    assert_eq!(next, b"key000200".to_vec());
    // A budget of ten pairs: (1 + 9) + (1 + 40) = 51 bytes each.
    let (pairs, next) = c.range(510, b"", b"");
    assert_eq!(pairs, all[..10].to_vec());
    assert_eq!(next, all[10].0);
    // A budget smaller than one pair still returns one.
    let (pairs, next) = c.range(1, b"key000005", b"");
    assert_eq!(pairs, all[5..6].to_vec());
    assert_eq!(next, all[6].0);
    // Whole scans, the way kivaloo's client loops, bounded and not.
    let (got, calls) = c.scan(1000, b"", b"");
    assert_eq!(got, all);
    assert_eq!(calls, 3000 / (1000 / 51) + 1);
    let (got, _) = c.scan(1000, b"key001000", b"key002000");
    assert_eq!(got, all[1000..2000].to_vec());
    // An empty or inverted range is done at once.
    let (pairs, next) = c.range(1000, b"key002000", b"key001000");
    assert_eq!((pairs.len(), next), (0, b"key001000".to_vec()));
    drop(server);
}

#[test]
fn malformed_input_closes_only_its_own_connection() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let mut good = Kvlds::connect(&server.kvlds);
    assert_eq!(good.status(&record(0x110, &[b"k", b"v"])), 0);
    let mut goodr = Resp::connect(&server.resp);

    let bad_packets: Vec<Vec<u8>> = vec![
        // Header CRC flipped.
        {
            let mut p = packet(1, &record(0x130, &[b"k"]));
            p[13] ^= 1;
            p
        },
        // Record CRC flipped.
        {
            let mut p = packet(1, &record(0x130, &[b"k"]));
            let n = p.len();
            p[n - 1] ^= 1;
            p
        },
        // Unknown type, fields short, bytes left over.
        packet(1, &record(0x999, &[])),
        packet(1, &[0, 0, 1, 0x10, 5, b'a']),
        packet(1, &[0, 0, 1, 0x30, 1, b'k', 0]),
        // A header announcing a record far over any valid request.
        packet(1, &vec![0u8; 100_000])[..16].to_vec(),
    ];
    for (i, bad) in bad_packets.iter().enumerate() {
        let mut c = Kvlds::connect(&server.kvlds);
        // A valid SET in the same write, before the bad packet, is applied
        // whole or not at all; after it, nothing.
        let mut wire = packet(7, &record(0x110, &[b"before", format!("{i}").as_bytes()]));
        wire.extend_from_slice(bad);
        wire.extend_from_slice(&packet(8, &record(0x110, &[b"after", b"x"])));
        c.s.write_all(&wire).unwrap();
        loop {
            match c.recv() {
                Some((7, r)) => assert_eq!(r, [0, 0, 0, 0]),
                Some(other) => panic!("bad packet {i}: answered {other:?}"),
                None => break,
            }
        }
        assert_eq!(good.get(b"after"), None, "bad packet {i}");
        assert_eq!(good.get(b"k"), Some(b"v".to_vec()), "bad packet {i}");
    }

    // RESP: an oversized bulk string is refused from its header alone.
    let mut r = Resp::connect(&server.resp);
    r.w.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$99999999999\r\n")
        .unwrap();
    match r.read() {
        Some(Val::Err(e)) => assert!(e.contains("bulk"), "{e}"),
        other => panic!("oversized bulk: {other:?}"),
    }
    assert_eq!(r.read(), None, "and the connection is closed");
    // A frame that is not RESP.
    let mut r = Resp::connect(&server.resp);
    r.w.write_all(b"*1\r\n+PING\r\n").unwrap();
    match r.read() {
        Some(Val::Err(e)) => assert!(e.contains("expected '$', got '+'"), "{e}"),
        other => panic!("a frame that is not RESP: {other:?}"),
    }
    assert_eq!(r.read(), None);
    // Wrong arguments and unknown commands keep the connection.
    let mut r = Resp::connect(&server.resp);
    assert!(matches!(r.call(&[b"GET"]), Val::Err(e) if e.contains("wrong number")));
    assert!(matches!(r.call(&[b"NOSUCH", b"x"]), Val::Err(e) if e.contains("unknown command")));
    assert!(
        matches!(r.call(&[b"SET", b"k", b"v", b"EX", b"0"]), Val::Err(e) if e.contains("invalid expire time"))
    );
    let long_key = vec![b'k'; 5000];
    assert!(
        matches!(r.call(&[b"SET", &long_key, b"v"]), Val::Err(e) if e.contains("key of 5000 bytes"))
    );
    assert_eq!(r.call(&[b"PING"]), Val::Ok("PONG".into()));
    // The well-behaved connections never noticed.
    assert_eq!(good.get(b"k"), Some(b"v".to_vec()));
    assert_eq!(goodr.call(&[b"GET", b"k"]), bulk("v"));
    assert!(server.stop().success(), "SIGTERM stops the server cleanly");
}

/// A pipeline of GETs (looked up together) mixed with writes and large
/// values: every reply in order, each GET seeing the writes sent before it.
#[test]
fn resp_pipelined_gets_answer_in_order_around_writes_and_large_values() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let mut r = Resp::connect(&server.resp);
    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    assert_eq!(r.call(&[b"SET", b"big", &big]), Val::Ok("OK".into()));
    for i in 0..50u32 {
        let k = format!("k{i}");
        assert_eq!(
            r.call(&[b"SET", k.as_bytes(), &i.to_be_bytes()]),
            Val::Ok("OK".into())
        );
    }
    // 3 MiB values among small ones, so replies pass the output flush
    // point in the middle of a batch of GETs; a SET then GETs of its key.
    let mut model: std::collections::HashMap<Vec<u8>, Vec<u8>> = (0..50u32)
        .map(|i| (format!("k{i}").into_bytes(), i.to_be_bytes().to_vec()))
        .collect();
    model.insert(b"big".to_vec(), big);
    let mut want = Vec::new();
    let mut pipeline = Vec::new();
    for round in 0..4u32 {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for i in 0..60u32 {
            keys.push(format!("k{}", i % 55).into_bytes());
            if i % 20 == 7 {
                keys.push(b"big".to_vec());
            }
        }
        for k in &keys {
            pipeline.extend(Resp::encode(&[b"GET", k]));
            want.push(Val::Bulk(model.get(k).cloned()));
        }
        let v = format!("round{round}").into_bytes();
        pipeline.extend(Resp::encode(&[b"SET", b"k3", &v]));
        want.push(Val::Ok("OK".into()));
        model.insert(b"k3".to_vec(), v.clone());
        pipeline.extend(Resp::encode(&[b"GET", b"k3"]));
        want.push(Val::Bulk(Some(v)));
    }
    // A key too long to be stored among gathered GETs: its own error, and
    // the GETs around it answered.
    let long = vec![b'k'; kivi::limits::MAX_KEY_LEN + 1];
    for k in [&b"k1"[..], &long, b"k2"] {
        pipeline.extend(Resp::encode(&[b"GET", k]));
    }
    let mut w = r.w.try_clone().unwrap();
    let sender = std::thread::spawn(move || w.write_all(&pipeline).unwrap());
    for (i, want) in want.iter().enumerate() {
        assert_eq!(r.read().as_ref(), Some(want), "reply {i}");
    }
    assert_eq!(r.read(), Some(Val::Bulk(Some(1u32.to_be_bytes().to_vec()))));
    assert!(
        matches!(r.read(), Some(Val::Err(e)) if e.contains("key")),
        "the long key's error"
    );
    assert_eq!(r.read(), Some(Val::Bulk(Some(2u32.to_be_bytes().to_vec()))));
    sender.join().unwrap();
}

/// Pipelined GETs of large values: replies go out as they are made, not
/// all gathered first (64 GETs of a 16 MiB value would be 1 GiB).
#[cfg(target_os = "linux")]
#[test]
fn resp_pipelined_gets_of_large_values_are_not_all_buffered() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let mut r = Resp::connect(&server.resp);
    let big = vec![7u8; 16 << 20];
    assert_eq!(r.call(&[b"SET", b"big", &big]), Val::Ok("OK".into()));
    let pipeline: Vec<u8> = (0..64)
        .flat_map(|_| Resp::encode(&[b"GET", b"big"]))
        .collect();
    r.w.write_all(&pipeline).unwrap();
    for i in 0..64 {
        assert_eq!(r.read(), Some(Val::Bulk(Some(big.clone()))), "reply {i}");
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/PID/status");
    assert!(
        peak_kib < 512 << 10,
        "the server's peak resident memory was {} MiB",
        peak_kib >> 10
    );
}

#[test]
fn resp_commands_and_pipelines() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let mut r = Resp::connect(&server.resp);
    // A pipeline of writes and reads: replies in order, each read seeing
    // the writes before it.
    let mut wire = Vec::new();
    for i in 0..500 {
        wire.extend(Resp::encode(&[b"SET", b"p", format!("{i}").as_bytes()]));
        wire.extend(Resp::encode(&[b"GET", b"p"]));
        wire.extend(Resp::encode(&[b"INCR", b"n"]));
    }
    r.w.write_all(&wire).unwrap();
    for i in 0..500 {
        assert_eq!(r.read(), Some(Val::Ok("OK".into())));
        assert_eq!(r.read(), Some(bulk(&i.to_string())));
        assert_eq!(r.read(), Some(Val::Int(i + 1)));
    }
    assert_eq!(r.call(&[b"SET", b"n", b"x"]), Val::Ok("OK".into()));
    assert!(matches!(r.call(&[b"INCR", b"n"]), Val::Err(e) if e.contains("not an integer")));
    assert_eq!(r.call(&[b"SET", b"a", b"1", b"NX"]), Val::Ok("OK".into()));
    assert_eq!(r.call(&[b"SET", b"a", b"2", b"NX"]), Val::Bulk(None));
    assert_eq!(r.call(&[b"SET", b"b", b"2", b"XX"]), Val::Bulk(None));
    assert_eq!(r.call(&[b"SET", b"a", b"3", b"GET"]), bulk("1"));
    assert_eq!(r.call(&[b"SETNX", b"a", b"4"]), Val::Int(0));
    assert_eq!(
        r.call(&[b"MSET", b"b", b"2", b"c", b"3"]),
        Val::Ok("OK".into())
    );
    assert_eq!(
        r.call(&[b"MGET", b"a", b"b", b"nope"]),
        Val::Array(vec![bulk("3"), bulk("2"), Val::Bulk(None)])
    );
    assert_eq!(r.call(&[b"EXISTS", b"a", b"a", b"nope"]), Val::Int(2));
    assert_eq!(r.call(&[b"STRLEN", b"a"]), Val::Int(1));
    assert_eq!(r.call(&[b"CAS", b"a", b"3", b"5"]), Val::Int(1));
    assert_eq!(r.call(&[b"CAS", b"a", b"3", b"6"]), Val::Int(0));
    assert_eq!(r.call(&[b"CAD", b"c", b"3"]), Val::Int(1));
    assert_eq!(r.call(&[b"GETDEL", b"b"]), bulk("2"));
    assert_eq!(r.call(&[b"GETDEL", b"b"]), Val::Bulk(None));
    assert_eq!(r.call(&[b"DEL", b"a", b"a", b"nope", b"p"]), Val::Int(2));
    assert_eq!(r.call(&[b"DECRBY", b"m", b"5"]), Val::Int(-5));
    assert_eq!(r.call(&[b"DBSIZE"]), Val::Int(2));
    // RANGE and SCAN in key order.
    for i in 0..30 {
        r.send(&[b"SET", format!("s{i:02}").as_bytes(), b"v"]);
    }
    for _ in 0..30 {
        r.read();
    }
    let Val::Array(flat) = r.call(&[b"RANGE", b"s05", b"s08"]) else {
        panic!()
    };
    assert_eq!(
        flat,
        vec![
            bulk("s05"),
            bulk("v"),
            bulk("s06"),
            bulk("v"),
            bulk("s07"),
            bulk("v")
        ]
    );
    let Val::Array(flat) = r.call(&[b"RANGE", b"s05", b"", b"LIMIT", b"1"]) else {
        panic!()
    };
    assert_eq!(flat, vec![bulk("s05"), bulk("v")]);
    let mut cursor = b"0".to_vec();
    let mut seen = Vec::new();
    loop {
        let Val::Array(v) = r.call(&[b"SCAN", &cursor, b"MATCH", b"s1*", b"COUNT", b"7"]) else {
            panic!()
        };
        let [Val::Bulk(Some(next)), Val::Array(keys)] = &v[..] else {
            panic!("{v:?}")
        };
        for k in keys {
            let Val::Bulk(Some(k)) = k else { panic!() };
            seen.push(String::from_utf8(k.clone()).unwrap());
        }
        cursor = next.clone();
        if cursor == b"0" {
            break;
        }
        // Another connection may continue the scan.
        r = Resp::connect(&server.resp);
    }
    let want: Vec<String> = (10..20).map(|i| format!("s{i}")).collect();
    assert_eq!(seen, want);
    drop(server);
}

/// Several connections pipeline writes (RESP and kvlds); the server is
/// killed with SIGKILL at a random moment; `kivi check` then finds the
/// store clean, and after a restart every write that was answered is there
/// with its answered value or a later one of the same writer: this round's
/// writes all, and a sample of every earlier round's (which later rounds
/// never overwrite). One store through every cycle, so each round also
/// recovers what the kills before it left.
///
/// `KIVI_TEST_CASES` sets the number of kill cycles (3 by default; the
/// campaign in docs/reliability.md runs 1,000), `KIVI_TEST_SEED` the seed
/// of the kill delays and the sample.
#[test]
fn every_acknowledged_write_survives_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let rounds: u64 = std::env::var("KIVI_TEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut seed = std::env::var("KIVI_TEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15)
        .max(1);
    println!("kill -9 cycles: {rounds}, KIVI_TEST_SEED={seed}");
    // Every write answered so far, by round (the last value answered).
    let mut earlier: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let (mut verified, mut answered_total) = (0u64, 0u64);
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..rounds {
        let server = Server::start(&store);
        let acked: Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>> = Arc::default();
        let writes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let dead = Arc::new(AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..4u64 {
            let (acked, dead, writes) = (acked.clone(), dead.clone(), writes.clone());
            let (resp, kvlds) = (server.resp.clone(), server.kvlds.clone());
            writers.push(std::thread::spawn(move || {
                // Each writer owns its keys, so the last value answered
                // for a key is the one that must survive.
                let mut i = 0u64;
                if w % 2 == 0 {
                    let mut r = Resp::connect(&resp);
                    while !dead.load(Ordering::Relaxed) {
                        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..64)
                            .map(|j| {
                                (
                                    format!("r{round}-w{w}-k{}", j % 50).into_bytes(),
                                    format!("{i}-{j}").into_bytes(),
                                )
                            })
                            .collect();
                        let mut wire = Vec::new();
                        for (k, v) in &batch {
                            wire.extend(Resp::encode(&[b"SET", k, v]));
                        }
                        if r.w.write_all(&wire).is_err() {
                            return;
                        }
                        for (k, v) in batch {
                            match r.read() {
                                Some(Val::Ok(_)) => {
                                    acked.lock().unwrap().insert(k, v);
                                    writes.fetch_add(1, Ordering::Relaxed);
                                }
                                _ => return,
                            }
                        }
                        i += 1;
                    }
                } else {
                    let mut c = Kvlds::connect(&kvlds);
                    while !dead.load(Ordering::Relaxed) {
                        let mut sent = BTreeMap::new();
                        let mut order = Vec::new();
                        for j in 0..64u64 {
                            let k = format!("k{round}-w{w}-k{}", j % 50).into_bytes();
                            let v = format!("{i}-{j}").into_bytes();
                            let id = c.next_id;
                            c.next_id += 1;
                            if c.s
                                .write_all(&packet(id, &record(0x110, &[&k, &v])))
                                .is_err()
                            {
                                return;
                            }
                            sent.insert(id, (k, v));
                            order.push(id);
                        }
                        // Answers may come in any order; a key's value is
                        // acknowledged once it and every earlier write of
                        // the key are answered (writes of one key apply in
                        // the order sent).
                        let mut answered = std::collections::HashSet::new();
                        while answered.len() < order.len() {
                            match c.recv() {
                                Some((id, r)) if r == [0, 0, 0, 0] => {
                                    answered.insert(id);
                                    writes.fetch_add(1, Ordering::Relaxed);
                                }
                                _ => return,
                            }
                            let mut a = acked.lock().unwrap();
                            for id in &order {
                                if !answered.contains(id) {
                                    break;
                                }
                                let (k, v) = &sent[id];
                                a.insert(k.clone(), v.clone());
                            }
                        }
                        i += 1;
                    }
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(200 + rand() % 800));
        dead.store(true, Ordering::Relaxed);
        server.kill9();
        for w in writers {
            w.join().unwrap();
        }
        let acked = acked.lock().unwrap().clone();
        assert!(
            acked.len() > 10,
            "round {round}: only {} writes answered",
            acked.len()
        );
        // The store the kill left, checked as is (no repair step first).
        let check = Command::new(KIVI)
            .arg("-d")
            .arg(&store)
            .arg("check")
            .output()
            .expect("run kivi check");
        assert!(
            check.status.success(),
            "round {round}: kivi check after kill -9: {}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let server = Server::start(&store);
        let mut c = Kvlds::connect(&server.kvlds);
        // Earlier rounds' keys are never written again: exactly their value.
        for _ in 0..earlier.len().min(200) {
            let (k, v) = &earlier[(rand() % earlier.len() as u64) as usize];
            let got = c.get(k);
            assert!(
                got.as_ref() == Some(v),
                "round {round}: {} from an earlier round is {:?}, was answered {}",
                String::from_utf8_lossy(k),
                got.map(|g| String::from_utf8_lossy(&g).into_owned()),
                String::from_utf8_lossy(v)
            );
            verified += 1;
        }
        for (k, v) in &acked {
            let got = c
                .get(k)
                .unwrap_or_else(|| panic!("round {round}: {} lost", String::from_utf8_lossy(k)));
            // A later write of the key may have applied without its answer
            // arriving; it must then be a later one of the same writer.
            if &got != v {
                let seq = |b: &[u8]| -> (u64, u64) {
                    let s = String::from_utf8(b.to_vec()).unwrap();
                    let (a, b) = s.split_once('-').unwrap();
                    (a.parse().unwrap(), b.parse().unwrap())
                };
                assert!(
                    seq(&got) > seq(v),
                    "round {round}: {} went back from {} to {}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(v),
                    String::from_utf8_lossy(&got)
                );
            }
            verified += 1;
        }
        answered_total += writes.load(Ordering::Relaxed);
        // What the server holds now is what later rounds must find: the
        // answered value, or the later one that applied unanswered.
        for k in acked.keys() {
            let v = c.get(k).expect("just read");
            earlier.push((k.clone(), v));
        }
        drop(c);
        assert!(server.stop().success());
    }
    println!(
        "kill -9 cycles: {rounds}, writes answered: {answered_total}, reads verified: {verified}, \
         lost: 0, wrong: 0, kivi check clean: {rounds} of {rounds}"
    );
}

/// The connection limit: one more gets Redis's error and is closed; a
/// slot frees when a connection closes.
#[test]
fn connections_past_the_limit_are_refused_with_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_with(&tmp.path().join("store"), &["--max-connections", "3"]);
    let mut open: Vec<Resp> = (0..3).map(|_| Resp::connect(&server.resp)).collect();
    for c in &mut open {
        assert_eq!(c.call(&[b"PING"]), Val::Ok("PONG".into()));
    }
    let mut extra = Resp::connect(&server.resp);
    match extra.read() {
        Some(Val::Err(e)) => assert!(e.contains("max number of clients"), "{e}"),
        other => panic!("the fourth connection got {other:?}"),
    }
    assert_eq!(extra.read(), None);
    drop(open.pop());
    // The slot is free once the server has seen the close.
    let mut again = None;
    for _ in 0..100 {
        let mut c = Resp::connect(&server.resp);
        c.send(&[b"PING"]);
        if c.read() == Some(Val::Ok("PONG".into())) {
            again = Some(c);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        again.is_some(),
        "a closed connection's slot was never freed"
    );
}

/// Many active connections all make progress, each writing and reading its
/// own keys, and a client that sends far more than it reads is slowed down,
/// not buffered without bound, and still gets every answer in order.
#[test]
fn many_connections_progress_and_a_fast_sender_is_held_back() {
    // 1,024 sockets here: raise this process's soft open-file limit to its
    // hard limit (the server raises its own), as a default of 1,024 would
    // not do.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or fill the one struct passed, which
    // lives on this stack frame for the whole call.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    assert!(
        lim.rlim_cur >= 2048,
        "this test needs 2,048 open files; the hard limit is {}",
        lim.rlim_max
    );
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let addr = server.resp.clone();
            std::thread::spawn(move || {
                // 64 connections per thread, 1,024 in all, used in turn.
                let mut conns: Vec<Resp> = (0..64).map(|_| Resp::connect(&addr)).collect();
                for round in 0..5 {
                    for (i, c) in conns.iter_mut().enumerate() {
                        let k = format!("t{t}-c{i}");
                        let v = format!("{round}");
                        assert_eq!(
                            c.call(&[b"SET", k.as_bytes(), v.as_bytes()]),
                            Val::Ok("OK".into())
                        );
                    }
                    for (i, c) in conns.iter_mut().enumerate() {
                        let k = format!("t{t}-c{i}");
                        assert_eq!(c.call(&[b"GET", k.as_bytes()]), bulk(&round.to_string()));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut r = Resp::connect(&server.resp);
    assert_eq!(r.call(&[b"DBSIZE"]), Val::Int(16 * 64));

    // 200,000 pipelined commands (a SET now and then, each GET seeing the
    // SET before it) sent before a single reply is read.
    let w = r.w.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut w = std::io::BufWriter::new(w);
        for i in 0..200_000u32 {
            let cmd: &[&[u8]] = if i % 100 == 0 {
                &[b"SET", b"fast", &i.to_be_bytes()]
            } else {
                &[b"GET", b"fast"]
            };
            w.write_all(&Resp::encode(cmd)).unwrap();
        }
        w.flush().unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..200_000u32 {
        let want = if i % 100 == 0 {
            Val::Ok("OK".into())
        } else {
            Val::Bulk(Some((i - i % 100).to_be_bytes().to_vec()))
        };
        assert_eq!(r.read(), Some(want), "reply {i}");
    }
    sender.join().unwrap();
}

/// SIGTERM while a client's pipeline is in flight: what the server read is
/// answered, it exits cleanly, and every answered write is there after a
/// restart.
#[test]
fn sigterm_answers_what_was_read_then_exits_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let server = Server::start(&store);
    let mut r = Resp::connect(&server.resp);
    let mut wire = Vec::new();
    for i in 0..20_000u32 {
        wire.extend(Resp::encode(&[b"SET", format!("k{i}").as_bytes(), b"v"]));
    }
    let w = r.w.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut w = w;
        let _ = w.write_all(&wire);
    });
    // Some answers first, so the stop lands in the middle.
    let mut answered = 0u32;
    while answered < 100 {
        assert_eq!(r.read(), Some(Val::Ok("OK".into())));
        answered += 1;
    }
    let pid = server.child.id() as i32;
    // SAFETY: kill(2) on our own child, not yet waited for.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    while let Some(v) = r.read() {
        assert_eq!(v, Val::Ok("OK".into()), "reply {answered}");
        answered += 1;
    }
    let _ = sender.join();
    let mut server = server;
    assert!(server.child.wait().unwrap().success(), "a clean exit");
    drop(server);
    let server = Server::start(&store);
    let mut r = Resp::connect(&server.resp);
    for i in 0..answered {
        assert_eq!(
            r.call(&[b"GET", format!("k{i}").as_bytes()]),
            bulk("v"),
            "k{i} was answered"
        );
    }
}

#[cfg(target_os = "linux")]
#[test]
fn the_server_runs_without_transparent_huge_pages() {
    // Linux reports the process's THP flag (PR_SET_THP_DISABLE) here.
    let status = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    let line = status(server.child.id())
        .lines()
        .find(|l| l.starts_with("THP_enabled:"))
        .map(str::to_string);
    // Kernels before 6.0 do not report the flag; nothing to check there.
    if let Some(line) = line {
        assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    }
}

/// The server suite's own RESP workloads (`kivi bench --server`) run against
/// `kivi serve`: their clients check every answer byte for byte, so they
/// fail when kivi answers otherwise than Redis would.
#[cfg(feature = "bench")]
#[test]
fn the_server_suites_resp_workloads_run_against_kivi_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("store"));
    // 8 connections, 50 transactions each, ten keys apiece.
    let rate = kivi_bench::resp_workloads::multi_exec(&server.resp, 8, 400).unwrap();
    assert!(rate > 0.0);
    let mut c = Resp::connect(&server.resp);
    assert_eq!(c.call(&[b"DBSIZE"]), Val::Int(4000));
    assert_eq!(c.call(&[b"GET", b"tx:7:49:9"]), bulk("vvvvvvvvvvvvvvvv"));
    // A second of keys living one second, watched for a second after.
    let cache =
        kivi_bench::resp_workloads::expiring_cache(&server.resp, 2000, Duration::from_secs(1), 3)
            .unwrap();
    assert!(cache.rate > 1000.0, "{cache:?}");
    assert!(
        cache.live_keys > 0 && cache.peak_files_per_live > 0.0,
        "{cache:?}"
    );
}

/// `kivi stats` and `kivi check` work on a store that `kivi serve` has open
/// and is writing to (checkpoints and the cleaner included): they read
/// beside it, without its lock, and find the store healthy.
#[test]
fn stats_and_check_read_a_store_the_server_is_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let server = Server::start(&store);
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (addr, writing) = (server.resp.clone(), writing.clone());
        std::thread::spawn(move || {
            let mut c = Resp::connect(&addr);
            let value = vec![b'v'; 1000];
            let mut round = 0u64;
            // Overwrites of 20,000 keys, 1 KB each: checkpoints and
            // cleaning go on while the commands below read.
            while writing.load(Ordering::Relaxed) || round < 3 {
                for i in 0..20_000u64 {
                    c.send(&[b"SET", format!("k{i:05}").as_bytes(), &value]);
                    if i % 1000 == 999 {
                        for _ in 0..1000 {
                            assert_eq!(c.read(), Some(Val::Ok("OK".into())));
                        }
                    }
                }
                round += 1;
            }
            round
        })
    };
    let kivi = |args: &[&str]| {
        Command::new(KIVI)
            .arg("-d")
            .arg(&store)
            .args(args)
            .output()
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        let out = kivi(&["stats", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let pairs = stats["pairs"].as_u64().unwrap();
        assert!(pairs > 0 && pairs <= 20_000, "{pairs}");
        let out = kivi(&["check"]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && said.starts_with("ok: "), "{said}");
        let out = kivi(&["get", "k00000"]);
        assert!(
            out.stdout == [&[b'v'; 1000][..], b"\n"].concat(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    writing.store(false, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    assert!(rounds >= 3);
    // The server, meanwhile, was not disturbed.
    assert!(server.stop().success());
    let out = kivi(&["check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
