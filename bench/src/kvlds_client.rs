//! The trickling kvlds client: one connection driven the way kivaloo's
//! bench tools drive a server, so that kivi and kivaloo are measured under
//! the load kivaloo's published figures were taken with.
//!
//! kivaloo's tools run one single-threaded event loop (libcperciva's
//! `events`, `netbuf` and `network` layers under kivaloo's `wire` request
//! queue). This client does what that loop does, step for step:
//!
//! - It sends 4,096 requests first. After that, each answer read calls
//!   back the workload, which makes exactly one new request, so after the
//!   first burst requests trickle out a few dozen at a time and every
//!   answer is wanted at once.
//! - Reading (netbuf_read): a 4,096-byte buffer, grown only for a packet
//!   longer than it (bulk extract's RANGE answers); each `poll` that finds
//!   the socket readable gives one `recv` into the free space after the
//!   buffered bytes, and bytes are moved to the front only when the packet
//!   waited for would not fit. Every complete packet in the buffer is then
//!   handled before the next `poll`.
//! - Writing (netbuf_write): requests are appended to 4,096-byte buffers
//!   in a queue. When no write is under way, the front buffer is handed to
//!   the writer as it is (often one lone request, the first made since the
//!   last write ended) and later requests go into a new buffer; each
//!   `poll` that finds the socket writable gives one `send` of the rest of
//!   the buffer being written. So no write is ever over 4,096 bytes (a
//!   request is at most a few hundred), and nothing else batches.
//!
//! Every answer is checked (framing CRCs, then its content against the
//! workload), and the client counts its reads and writes and the most
//! bytes any one moved, so a test can see the shape of its traffic.

use crate::kvlds_workload::{Answers, Expect, Kind, Meter, Rate, Requests, Timing};
use crate::mkpairs::Pairs;
use crate::{io_err, BenchError};
use kivi_kvlds_wire::packet;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Requests in flight on the connection (kivaloo's tools keep 4,096).
pub const IN_FLIGHT: usize = 4096;
/// netbuf_read's first buffer size.
pub const READ_BUFFER: usize = 4096;
/// netbuf_write's buffer size (WBUFLEN).
pub const WRITE_BUFFER: usize = 4096;
/// A server that sends nothing for this long has stalled: the run fails
/// rather than hang.
const STALL: Duration = Duration::from_secs(60);

/// A connection to a kvlds server: `host:port`, or a Unix socket path
/// (anything with a '/', as `kivi serve --kvlds` reads it).
pub enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    pub fn connect(addr: &str) -> Result<Conn, BenchError> {
        let c = if addr.contains('/') {
            Conn::Unix(
                UnixStream::connect(addr).map_err(|e| io_err(format!("connect to {addr}"), e))?,
            )
        } else {
            let s =
                TcpStream::connect(addr).map_err(|e| io_err(format!("connect to {addr}"), e))?;
            // As netbuf_write asks: its own buffering is all there is.
            let _ = s.set_nodelay(true);
            Conn::Tcp(s)
        };
        Ok(c)
    }

    pub fn try_clone(&self) -> Result<Conn, BenchError> {
        let c = match self {
            Conn::Tcp(s) => Conn::Tcp(s.try_clone().map_err(|e| io_err("clone a socket", e))?),
            Conn::Unix(s) => Conn::Unix(s.try_clone().map_err(|e| io_err("clone a socket", e))?),
        };
        Ok(c)
    }

    /// Ends both directions, so a thread blocked on the other handle of
    /// the connection returns.
    pub fn shutdown(&self) {
        let _ = match self {
            Conn::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Conn::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }

    fn set_nonblocking(&self) -> Result<(), BenchError> {
        match self {
            Conn::Tcp(s) => s.set_nonblocking(true),
            Conn::Unix(s) => s.set_nonblocking(true),
        }
        .map_err(|e| io_err("make a socket non-blocking", e))
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Conn {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Conn::Tcp(s) => s.as_raw_fd(),
            Conn::Unix(s) => s.as_raw_fd(),
        }
    }
}

/// Requests awaiting their answers, by ID. IDs are given in sequence, as
/// kivaloo's seqptrmap gives them; answers may come in any order.
#[derive(Default)]
pub(crate) struct Pending {
    first: u64,
    slots: VecDeque<Option<Expect>>,
    count: usize,
}

impl Pending {
    /// Records a request; returns its ID.
    pub(crate) fn add(&mut self, e: Expect) -> u64 {
        self.slots.push_back(Some(e));
        self.count += 1;
        self.first + self.slots.len() as u64 - 1
    }

    /// The request with ID `id`, which is then answered.
    pub(crate) fn take(&mut self, id: u64) -> Option<Expect> {
        let i = usize::try_from(id.checked_sub(self.first)?).ok()?;
        let e = self.slots.get_mut(i)?.take()?;
        self.count -= 1;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.first += 1;
        }
        Some(e)
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }
}

/// What a run of a workload measured and how its traffic looked.
#[derive(Debug, Clone)]
pub struct Run {
    pub rate: Rate,
    /// Completions over the whole run, warm-up and drain included, per
    /// second.
    pub overall: f64,
    pub stats: Stats,
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Requests sent.
    pub sent: u64,
    /// Answers received, each checked.
    pub checked: u64,
    /// `send` calls, and the most bytes one wrote.
    pub writes: u64,
    pub max_write: usize,
    /// `recv` calls, and the most bytes one read.
    pub reads: u64,
    pub max_read: usize,
}

/// netbuf_read: one buffer; reads append after the buffered bytes.
struct Reader {
    buf: Vec<u8>,
    /// Start of the unconsumed bytes, and end of the buffered ones.
    pos: usize,
    end: usize,
    /// Buffered bytes wanted before packets are looked at: a header, or
    /// the whole packet whose header is in.
    want: usize,
}

impl Reader {
    fn new() -> Self {
        Reader {
            buf: vec![0; READ_BUFFER],
            pos: 0,
            end: 0,
            want: packet::HEADER_LEN,
        }
    }

    /// One `recv` into the free space; false when it would block.
    fn recv(&mut self, conn: &mut Conn, stats: &mut Stats) -> Result<bool, BenchError> {
        let got = match conn.read(&mut self.buf[self.end..]) {
            Ok(0) => return Err(BenchError("the kvlds server closed the connection".into())),
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(false),
            Err(e) => return Err(io_err("read kvlds answers", e)),
        };
        self.end += got;
        stats.reads += 1;
        stats.max_read = stats.max_read.max(got);
        Ok(true)
    }

    fn ready(&self) -> bool {
        self.end - self.pos >= self.want
    }

    /// The next complete packet's ID and record, framing checked.
    fn packet(&mut self) -> Result<Option<(u64, std::ops::Range<usize>)>, BenchError> {
        let data = &self.buf[self.pos..self.end];
        if data.len() < packet::HEADER_LEN {
            return Ok(None);
        }
        // Answers may be longer than the server's request limit (RANGE),
        // so the framing is checked here rather than by packet::parse.
        if packet::crc(&data[..12]) != data[12..16] {
            return Err(BenchError("kvlds answer with a bad header CRC".into()));
        }
        let id = u64::from_be_bytes(data[..8].try_into().expect("8 bytes"));
        let len = u32::from_be_bytes(data[8..12].try_into().expect("4 bytes")) as usize;
        let total = packet::HEADER_LEN + len + packet::TRAILER_LEN;
        if data.len() < total {
            return Ok(None);
        }
        let mut want = packet::crc(&data[packet::HEADER_LEN..packet::HEADER_LEN + len]);
        for (w, h) in want.iter_mut().zip(&data[12..16]) {
            *w ^= h;
        }
        if data[packet::HEADER_LEN + len..total] != want {
            return Err(BenchError("kvlds answer with a bad record CRC".into()));
        }
        let start = self.pos + packet::HEADER_LEN;
        self.pos += total;
        Ok(Some((id, start..start + len)))
    }

    /// After the complete packets are handled: what to wait for next, and
    /// room for it (netbuf_read_wait's grow-then-move).
    fn prepare(&mut self) {
        let data = &self.buf[self.pos..self.end];
        self.want = if data.len() < packet::HEADER_LEN {
            packet::HEADER_LEN
        } else {
            let len = u32::from_be_bytes(data[8..12].try_into().expect("4 bytes")) as usize;
            packet::HEADER_LEN + len + packet::TRAILER_LEN
        };
        if self.ready() {
            return;
        }
        if self.buf.len() < self.want {
            let size = (self.buf.len() * 2).max(self.want);
            let mut grown = vec![0; size];
            grown[..self.end - self.pos].copy_from_slice(&self.buf[self.pos..self.end]);
            self.buf = grown;
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.buf.len() - self.pos < self.want {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
    }
}

/// netbuf_write: a queue of buffers, one of them being written.
struct Writer {
    queue: VecDeque<Vec<u8>>,
    current: Option<(Vec<u8>, usize)>,
    spare: Vec<Vec<u8>>,
}

impl Writer {
    fn new() -> Self {
        Writer {
            queue: VecDeque::new(),
            current: None,
            spare: Vec::new(),
        }
    }

    /// Appends a request packet to the last buffer, or to a new one if it
    /// does not fit; then starts a write if none is under way.
    fn push(&mut self, id: u64, record: &[u8]) {
        let len = packet::HEADER_LEN + record.len() + packet::TRAILER_LEN;
        let fits = self
            .queue
            .back()
            .is_some_and(|b| b.len() + len <= WRITE_BUFFER);
        if !fits {
            let mut b = self.spare.pop().unwrap_or_default();
            b.reserve(WRITE_BUFFER.max(len));
            self.queue.push_back(b);
        }
        let b = self.queue.back_mut().expect("a buffer");
        packet::write(b, id, record);
        if self.current.is_none() {
            self.current = self.queue.pop_front().map(|b| (b, 0));
        }
    }

    fn busy(&self) -> bool {
        self.current.is_some()
    }

    /// One `send` of the rest of the buffer being written.
    fn send(&mut self, conn: &mut Conn, stats: &mut Stats) -> Result<(), BenchError> {
        let Some((buf, at)) = self.current.as_mut() else {
            return Ok(());
        };
        match conn.write(&buf[*at..]) {
            Ok(n) => {
                *at += n;
                stats.writes += 1;
                stats.max_write = stats.max_write.max(n);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(io_err("send kvlds requests", e)),
        }
        if *at == buf.len() {
            let (mut done, _) = self.current.take().expect("a write under way");
            done.clear();
            self.spare.push(done);
            self.current = self.queue.pop_front().map(|b| (b, 0));
        }
        Ok(())
    }
}

/// Waits for the socket to be readable (and writable, if `write`); returns
/// (readable, writable).
fn wait(fd: RawFd, write: bool) -> Result<(bool, bool), BenchError> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN | if write { libc::POLLOUT } else { 0 },
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, for the duration of the call.
        let r = unsafe { libc::poll(&mut p, 1, STALL.as_millis() as libc::c_int) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io_err("poll the kvlds connection", e));
        }
        if r == 0 {
            return Err(BenchError(format!(
                "the kvlds server sent nothing for {} s",
                STALL.as_secs()
            )));
        }
        // An error or hang-up shows in the read (or write) that follows.
        let broken = p.revents & (libc::POLLERR | libc::POLLHUP) != 0;
        return Ok((
            broken || p.revents & libc::POLLIN != 0,
            write && (broken || p.revents & libc::POLLOUT != 0),
        ));
    }
}

/// kivaloo's sendbatch: makes requests until 4,096 are in flight or the
/// workload has nothing to send now.
fn send_batch(
    pending: &mut Pending,
    writer: &mut Writer,
    requests: &mut Requests,
    record: &mut Vec<u8>,
    stats: &mut Stats,
) {
    while pending.len() < IN_FLIGHT {
        record.clear();
        let Some(e) = requests.next(record) else {
            break;
        };
        let id = pending.add(e);
        writer.push(id, record);
        stats.sent += 1;
    }
}

/// Runs workload `kind` over `pairs` on one connection to `addr`, the way
/// kivaloo's tool for it does, until its measured windows are over (or,
/// bulk insert, until every pair is in); then stops making requests and
/// checks the answers still due.
pub fn trickle(addr: &str, pairs: &Pairs, kind: Kind, timing: &Timing) -> Result<Run, BenchError> {
    let mut conn = Conn::connect(addr)?;
    conn.set_nonblocking()?;
    let fd = conn.as_raw_fd();
    let mut stats = Stats::default();
    let mut reader = Reader::new();
    let mut writer = Writer::new();
    let mut pending = Pending::default();
    let mut requests = Requests::new(kind, pairs);
    let mut answers = Answers::new(pairs);
    let mut record = Vec::with_capacity(256);
    let start = Instant::now();
    let mut meter = Meter::new(kind, timing, start);
    let mut stopping = false;
    let mut last = start;
    let mut completions = 0u64;

    send_batch(
        &mut pending,
        &mut writer,
        &mut requests,
        &mut record,
        &mut stats,
    );

    while pending.len() > 0 {
        let (readable, writable) = wait(fd, writer.busy())?;
        if readable && reader.recv(&mut conn, &mut stats)? && reader.ready() {
            while let Some((id, at)) = reader.packet()? {
                let e = pending
                    .take(id)
                    .ok_or_else(|| BenchError(format!("an answer to request {id}, not awaited")))?;
                let checked = answers
                    .check(e, &reader.buf[at])
                    .map_err(|why| BenchError(format!("{}: request {id}: {why}", kind.name())))?;
                if let Some(next) = checked.range_next {
                    requests.range_answered(next);
                }
                stats.checked += 1;
                completions += checked.completions;
                last = Instant::now();
                stopping |= meter.tick(last, checked.completions);
                if !stopping {
                    send_batch(
                        &mut pending,
                        &mut writer,
                        &mut requests,
                        &mut record,
                        &mut stats,
                    );
                }
            }
            reader.prepare();
        }
        if writable {
            writer.send(&mut conn, &mut stats)?;
        }
    }
    Ok(Run {
        rate: meter.rate(last),
        overall: completions as f64 / start.elapsed().as_secs_f64(),
        stats,
    })
}
