//! `kivi serve`: a kivi store served over TCP or Unix sockets to many
//! clients at once, in two protocols: RESP (so Redis clients work) and
//! kivaloo's kvlds protocol. Writes from every connection share group
//! commits (`committer`); each is answered only once durable. Reads are
//! answered from the newest published version, which holds every write
//! answered before, so a client that saw a reply sees its effect on any
//! connection, across restarts too.
//!
//! Sockets are served by tokio; the store's own calls are blocking and
//! short (reads come from memory or one positioned read per missing page),
//! so they run on the tokio workers; writes wait on the commit thread, not
//! on a worker.

pub mod auth;
pub mod committer;
pub mod counters;
pub mod cursors;
pub mod info;
pub mod kvlds;
pub mod listen;
pub mod metrics;
pub mod resp;
pub mod settings;
pub mod tls;

use auth::Users;
use committer::Committer;
use counters::{CommandCounts, Counters, KvldsCounts, OpsSampler};
use cursors::Cursors;
use kivi::{Db, Durability};
use listen::{Addr, Listener};
use parking_lot::Mutex;
use settings::LiveSettings;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Default bound on open connections, over both listeners.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// How long a stopping server waits for its connections to answer what
/// they read before it closes the store anyway.
const STOP_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Config {
    pub resp: Option<Addr>,
    /// A second RESP listener, over TLS (Redis's tls-port), and its
    /// certificates.
    pub tls: Option<(Addr, Arc<tls::Tls>)>,
    pub kvlds: Option<Addr>,
    pub max_connections: usize,
    /// The durability the store was opened with. The `Db` does not tell
    /// it, and CONFIG GET appendfsync must answer what the server does.
    pub durability: Durability,
    /// The process's global allocator, for INFO's `used_memory`; `None`
    /// when the caller does not know it (INFO then reports the RSS).
    pub allocator: Option<Allocator>,
    /// Who may connect over RESP (see `auth`).
    pub users: Arc<Users>,
    /// Let the kvlds listener, which has no authentication, listen on an
    /// address other machines reach.
    pub kvlds_remote: bool,
    /// A RESP connection that sends nothing this long is closed (Redis's
    /// `timeout`; `None`: never).
    pub idle_timeout: Option<Duration>,
    /// The Prometheus endpoint's listener (`metrics`), if any.
    pub metrics: Option<Addr>,
    /// Let the metrics listener, which has no authentication, listen on an
    /// address other machines reach.
    pub metrics_remote: bool,
    /// A RESP connection whose replies wait this long for the client to
    /// read them is closed.
    pub output_timeout: Duration,
    /// The address clients reach this server at, announced in the writer's
    /// lease on an object store (what followers tell clients in INFO
    /// replication and ROLE); the RESP (or TLS) listener's when `None`.
    pub announce: Option<String>,
}

/// Where a follower's writer says its clients reach it (its lease's note,
/// `host:port`), as INFO replication's master_host and master_port; empty
/// and 0 when it said nothing (or a Unix socket path, as the host).
pub fn writer_address(f: &kivi::FollowerStatus) -> (String, u16) {
    let note = f.writer_note.clone().unwrap_or_default();
    match note.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>())) {
        Some((host, Ok(port))) => (host.trim_matches(['[', ']']).to_string(), port),
        _ => (note, 0),
    }
}

/// Whether this server was the writer and another took over: known
/// already (a failed commit or lease renewal), or found now by asking the
/// store (`Db::confirm_writer`: a request on an object store), so that a
/// writer paused or idle through a takeover never calls itself the master
/// in ROLE or INFO. False for a follower.
pub fn displaced(shared: &Shared) -> bool {
    if shared.db.is_fenced() {
        return true;
    }
    if shared.db.is_follower() {
        return false;
    }
    !shared.db.confirm_writer() && shared.db.is_fenced()
}

/// For a writer another one fenced: where the writer is now, as its lease
/// says (one request), as `writer_address` gives it.
pub fn fenced_writer_address(shared: &Shared) -> (String, u16) {
    let status = kivi::FollowerStatus {
        writer_note: shared.db.writer_lease().ok().flatten().map(|l| l.note),
        ..Default::default()
    };
    writer_address(&status)
}

/// Default `Config::output_timeout`.
pub const DEFAULT_OUTPUT_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for Config {
    fn default() -> Self {
        Config {
            resp: Some(Addr::Tcp("127.0.0.1:6380".into())),
            tls: None,
            kvlds: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            durability: Durability::default(),
            allocator: None,
            users: Arc::default(),
            kvlds_remote: false,
            idle_timeout: None,
            output_timeout: DEFAULT_OUTPUT_TIMEOUT,
            metrics: None,
            metrics_remote: false,
            announce: None,
        }
    }
}

/// The global allocator, as INFO reports it. The binary chooses the
/// allocator (`#[global_allocator]`), so it is the binary that says how to
/// ask it; the library only calls.
#[derive(Debug, Clone, Copy)]
pub struct Allocator {
    /// `mem_allocator` in INFO.
    pub name: &'static str,
    /// The bytes the allocator holds for the heap now (see the binary's
    /// function for which figure that is).
    pub used_bytes: fn() -> u64,
}

/// What every connection shares.
pub struct Shared {
    pub db: Db,
    pub committer: Committer,
    /// Turns true when the server stops.
    pub stop: watch::Receiver<bool>,
    pub cursors: Mutex<Cursors>,
    next_client_id: AtomicU64,
    pub connections: AtomicUsize,
    pub started: Instant,
    /// The RESP listener's TCP port (0 if none), for INFO.
    pub resp_port: u16,
    /// The address the RESP listener is bound to (`host:port` or a socket
    /// path), for CONFIG GET bind / port / unixsocket.
    pub resp_addr: Option<String>,
    /// The kvlds listener's bound address, for CONFIG GET.
    pub kvlds_addr: Option<String>,
    pub kvlds_remote: bool,
    /// The metrics endpoint's bound address, for CONFIG GET.
    pub metrics_addr: Option<String>,
    pub metrics_remote: bool,
    /// The TLS listener's TCP port (0 if none), and its certificates, for
    /// CONFIG GET.
    pub tls_port: u16,
    pub tls: Option<Arc<tls::Tls>>,
    pub durability: Durability,
    pub allocator: Option<Allocator>,
    pub users: Arc<Users>,
    /// The connection limit and the timeouts, which CONFIG SET may change.
    pub live: LiveSettings,
    /// INFO's Stats counters.
    pub counters: Counters,
    /// RESP commands by name, and kvlds requests by type, for the metrics
    /// endpoint.
    pub commands: CommandCounts,
    pub kvlds_requests: KvldsCounts,
    /// The recent command rates (`instantaneous_ops_per_sec`), filled by
    /// one sampling task; a command never takes this lock.
    pub ops: Mutex<OpsSampler>,
}

impl Shared {
    /// Whether the store follows a writer elsewhere (`kivi serve
    /// --follow`): commands that write are refused with READONLY until it
    /// takes over (REPLICAOF NO ONE, or on its own as a standby).
    pub fn is_follower(&self) -> bool {
        self.db.is_follower()
    }

    /// Whether writes are refused with READONLY: on a follower, and on a
    /// writer another one fenced (a takeover), so that Redis clients look
    /// for the writer again.
    pub fn refuses_writes(&self) -> bool {
        self.db.is_follower() || self.db.is_fenced()
    }

    /// REPLICAOF NO ONE: a follower takes over as the store's writer
    /// (`Db::promote`: fences the log, so the writer there was commits
    /// nothing more), then accepts writes. Nothing happens on a writer.
    pub async fn promote(&self) -> Result<(), kivi::Error> {
        if !self.is_follower() {
            return Ok(());
        }
        let db = self.db.clone();
        let started = Instant::now();
        match tokio::task::spawn_blocking(move || db.promote())
            .await
            .unwrap_or(Err(kivi::Error::Closed))
        {
            // A standby's own takeover won the race: the writer now.
            Err(kivi::Error::NotAFollower) | Ok(()) => {}
            Err(e) => return Err(e),
        }
        tracing::warn!(
            took_ms = started.elapsed().as_millis() as u64,
            "this server took over as the store's writer (REPLICAOF NO ONE)"
        );
        Ok(())
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Resp,
    /// RESP over TLS.
    Tls,
    Kvlds,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Resp => "resp",
            Protocol::Tls => "tls",
            Protocol::Kvlds => "kvlds",
        }
    }
}

/// Protected mode, as Redis has it: a listener that other machines can
/// reach needs a way to keep them out. RESP without a password, TLS
/// without a password or client certificates (mutual TLS authenticates
/// the client), and kvlds (which has no authentication) without
/// `kvlds_remote`, listen on loopback or a Unix socket only.
pub fn protected_mode(config: &Config) -> io::Result<()> {
    let refuse = |msg: String| Err(io::Error::new(io::ErrorKind::PermissionDenied, msg));
    if let Some(Addr::Tcp(a)) = &config.resp {
        if !config.users.require_auth() && !auth::is_loopback(a) {
            return refuse(format!(
                "refusing to listen for RESP on {a} without a password: other machines \
                 could reach it. Set one with --requirepass (or add users with --user \
                 NAME:ROLE:PASSWORD), or listen on 127.0.0.1 or a Unix socket"
            ));
        }
    }
    if let Some((Addr::Tcp(a), tls)) = &config.tls {
        if !config.users.require_auth() && !tls.auth_clients() && !auth::is_loopback(a) {
            return refuse(format!(
                "refusing to listen for TLS on {a} without a password or client \
                 certificates: other machines could reach it. Set a password with \
                 --requirepass (or add users with --user NAME:ROLE:PASSWORD), require \
                 client certificates with --tls-ca-cert, or listen on 127.0.0.1"
            ));
        }
    }
    if let Some(Addr::Tcp(a)) = &config.kvlds {
        if !config.kvlds_remote && !auth::is_loopback(a) {
            return refuse(format!(
                "refusing to listen for kvlds on {a}: the kvlds protocol has no \
                 authentication. Listen on 127.0.0.1 or a Unix socket, or say \
                 --kvlds-allow-remote to let other machines in"
            ));
        }
    }
    if let Some(Addr::Tcp(a)) = &config.metrics {
        if !config.metrics_remote && !auth::is_loopback(a) {
            return refuse(format!(
                "refusing to serve metrics on {a}: the endpoint has no authentication. \
                 Listen on 127.0.0.1, or say --metrics-allow-remote to let other machines in"
            ));
        }
    }
    Ok(())
}

/// Serves `db` until SIGTERM or SIGINT, then stops accepting, lets every
/// connection answer what it has read, and closes the store. `ready` is
/// called once every listener is bound, with (protocol, address) pairs.
pub fn run(db: Db, config: Config, ready: impl FnOnce(&[(&str, String)])) -> io::Result<()> {
    if config.resp.is_none() && config.tls.is_none() && config.kvlds.is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no listener: give --resp, --tls or --kvlds",
        ));
    }
    protected_mode(&config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kivi-serve")
        .build()?;
    let (committer, commit_thread) = Committer::start(db.clone());
    let result = rt.block_on(serve(db.clone(), committer, config, ready));
    // Every connection is gone; with the last `Committer` dropped the
    // commit thread drains its queue and ends.
    drop(rt);
    let _ = commit_thread.join();
    let closed = db.close().map_err(|e| {
        io::Error::other(format!(
            "closing the store: {e} (nothing answered is lost: the next open replays the log)"
        ))
    });
    result.and(closed)
}

async fn serve(
    db: Db,
    committer: Committer,
    config: Config,
    ready: impl FnOnce(&[(&str, String)]),
) -> io::Result<()> {
    let mut listeners = Vec::new();
    let tls_addr = config.tls.as_ref().map(|(a, _)| a.clone());
    for (addr, proto) in [
        (&config.resp, Protocol::Resp),
        (&tls_addr, Protocol::Tls),
        (&config.kvlds, Protocol::Kvlds),
    ] {
        if let Some(a) = addr {
            let l = Listener::bind(a)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {a}: {e}")))?;
            listeners.push((l, proto));
        }
    }
    let metrics_listener = match &config.metrics {
        Some(a) => Some(Listener::bind(a).await.map_err(|e| {
            io::Error::new(e.kind(), format!("cannot listen for metrics on {a}: {e}"))
        })?),
        None => None,
    };
    let mut bound: Vec<(&str, String)> = listeners
        .iter()
        .map(|(l, p)| (p.name(), l.local_addr()))
        .collect();
    if let Some(l) = &metrics_listener {
        bound.push(("metrics", l.local_addr()));
    }
    let port_of = |proto: Protocol| {
        bound
            .iter()
            .find(|(p, _)| *p == proto.name())
            .and_then(|(_, a)| a.rsplit_once(':'))
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or(0)
    };
    let (resp_port, tls_port) = (port_of(Protocol::Resp), port_of(Protocol::Tls));
    let resp_addr = bound
        .iter()
        .find(|(p, _)| *p == "resp")
        .map(|(_, a)| a.clone());
    let metrics_addr = bound
        .iter()
        .find(|(p, _)| *p == "metrics")
        .map(|(_, a)| a.clone());
    let kvlds_addr = bound
        .iter()
        .find(|(p, _)| *p == "kvlds")
        .map(|(_, a)| a.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        db,
        committer,
        stop: stop_rx,
        cursors: Mutex::new(Cursors::new(u64::from(std::process::id()) << 20)),
        next_client_id: AtomicU64::new(1),
        connections: AtomicUsize::new(0),
        started: Instant::now(),
        resp_port,
        resp_addr,
        kvlds_addr,
        kvlds_remote: config.kvlds_remote,
        metrics_addr,
        metrics_remote: config.metrics_remote,
        tls_port,
        tls: config.tls.as_ref().map(|(_, t)| t.clone()),
        durability: config.durability,
        allocator: config.allocator,
        users: config.users.clone(),
        live: LiveSettings::new(
            config.idle_timeout,
            config.output_timeout,
            config.max_connections,
        ),
        counters: Counters::default(),
        commands: CommandCounts::default(),
        kvlds_requests: KvldsCounts::default(),
        ops: Mutex::new(OpsSampler::default()),
    });
    // Before `ready`: a SIGTERM sent as soon as the listeners are
    // announced must stop the server cleanly, not kill it.
    let signals = Signals::install(config.tls.is_some())?;
    // Where clients reach this server, in the lease it renews as the writer
    // (a follower keeps it for when it takes over).
    let announced = config.announce.clone().or_else(|| {
        bound
            .iter()
            .find(|(p, _)| *p == "resp" || *p == "tls")
            .map(|(_, a)| a.clone())
    });
    if let Some(a) = &announced {
        shared.db.announce(a);
    }
    ready(&bound);
    let sampler = {
        let (shared, stop) = (shared.clone(), shared.stop.clone());
        tokio::spawn(async move {
            counters::sample_ops(&shared.counters, &shared.ops, stop).await;
        })
    };
    let metrics = metrics_listener.map(|l| tokio::spawn(metrics::serve(l, shared.clone())));
    let mut accept_loops = JoinSet::new();
    for (l, proto) in listeners {
        accept_loops.spawn(accept_loop(l, proto, shared.clone()));
    }
    signals.wait(config.tls.as_ref().map(|(_, t)| &**t)).await;
    tracing::info!("stopping: no new connections; answering what was read");
    let _ = stop_tx.send(true);
    while accept_loops.join_next().await.is_some() {}
    let _ = sampler.await;
    if let Some(m) = metrics {
        let _ = m.await;
    }
    drop(shared);
    Ok(())
}

/// The signals that stop the server (and, with TLS, SIGHUP, which reloads
/// the certificates), caught from the moment they are installed. Without
/// TLS, SIGHUP keeps its default: it ends the process.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install(tls: bool) -> io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: if tls {
                Some(signal(SignalKind::hangup())?)
            } else {
                None
            },
        })
    }

    /// Waits for SIGTERM or SIGINT, reloading `tls` on each SIGHUP.
    async fn wait(mut self, tls: Option<&tls::Tls>) {
        loop {
            tokio::select! {
                _ = self.term.recv() => return,
                _ = self.int.recv() => return,
                Some(_) = async { self.hup.as_mut()?.recv().await } => {
                    let Some(tls) = tls else { continue };
                    match tls.reload() {
                        Ok(()) => tracing::info!(
                            "SIGHUP: reloaded the TLS certificates; new connections get them"
                        ),
                        Err(e) => tracing::error!(
                            error = %e,
                            "SIGHUP: TLS certificates not reloaded, keeping the ones before"
                        ),
                    }
                }
            }
        }
    }
}

/// One open connection, counted in `Shared::connections` from its accept
/// until it is dropped.
struct ConnectionSlot(Arc<Shared>);

impl ConnectionSlot {
    /// A slot, unless as many connections as the limit allows are open
    /// (the limit as it is now: CONFIG SET maxclients may have changed it).
    /// Counted before the check, so two listeners accepting at once cannot
    /// both take the last slot.
    fn take(shared: &Arc<Shared>) -> Option<ConnectionSlot> {
        let open = shared.connections.fetch_add(1, Ordering::Relaxed);
        if open >= shared.live.max_connections() {
            shared.connections.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnectionSlot(shared.clone()))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts connections until the server stops, then waits (at most
/// `STOP_GRACE`) for the ones it accepted to finish.
async fn accept_loop(l: Listener, proto: Protocol, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    let mut stop = shared.stop.clone();
    loop {
        let accepted = tokio::select! {
            a = l.accept() => a,
            _ = stop.changed() => break,
            // Reap finished connections as they go.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (mut stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of descriptors, or the peer gave up: keep accepting,
                // after a pause so a persistent error does not spin.
                tracing::error!(listener = %l.local_addr(), error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(slot) = ConnectionSlot::take(&shared) else {
            Counters::add(&shared.counters.rejected_connections, 1);
            tracing::warn!(
                %peer,
                reason = "at the connection limit",
                max_connections = shared.live.max_connections(),
                "refused a connection"
            );
            // (Not over TLS: that would take a handshake.)
            if proto == Protocol::Resp {
                use tokio::io::AsyncWriteExt;
                let _ = stream
                    .write_all(b"-ERR max number of clients reached\r\n")
                    .await;
            }
            continue;
        };
        Counters::add(&shared.counters.connections_received, 1);
        let shared = shared.clone();
        conns.spawn(async move {
            match proto {
                Protocol::Resp => resp::serve(stream, peer, shared.clone()).await,
                Protocol::Tls => {
                    // Here, not in the accept loop: a slow client holds its
                    // own slot only.
                    let tls = shared
                        .tls
                        .as_ref()
                        .expect("a TLS listener has its certificates");
                    let handshake = tls.acceptor().accept(stream);
                    match tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, handshake).await {
                        Ok(Ok(s)) => resp::serve(Box::new(s), peer, shared.clone()).await,
                        Ok(Err(e)) => {
                            tracing::warn!(%peer, error = %e, "refused a connection: TLS handshake failed")
                        }
                        Err(_) => tracing::warn!(
                            %peer,
                            timeout = ?tls::HANDSHAKE_TIMEOUT,
                            "refused a connection: TLS handshake not done in time"
                        ),
                    }
                }
                Protocol::Kvlds => kvlds::serve(stream, peer, shared.clone()).await,
            }
            drop(slot);
        });
    }
    drop(l);
    let drained = tokio::time::timeout(STOP_GRACE, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            busy = conns.len(),
            grace = ?STOP_GRACE,
            "connections still busy after the grace period; closing anyway"
        );
        conns.abort_all();
    }
}
