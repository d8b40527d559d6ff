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

use auth::Users;
use committer::Committer;
use counters::{CommandCounts, Counters, KvldsCounts, OpsSampler};
use cursors::Cursors;
use kivi::{Db, Durability};
use listen::{Addr, Listener};
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Default bound on open connections, over both listeners.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// How long a stopping server waits for its connections to answer what
/// they read before it closes the store anyway.
const STOP_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Config {
    pub resp: Option<Addr>,
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
}

/// Default `Config::output_timeout`.
pub const DEFAULT_OUTPUT_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for Config {
    fn default() -> Self {
        Config {
            resp: Some(Addr::Tcp("127.0.0.1:6380".into())),
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
    pub max_connections: usize,
    pub durability: Durability,
    pub allocator: Option<Allocator>,
    pub users: Arc<Users>,
    pub idle_timeout: Option<Duration>,
    pub output_timeout: Duration,
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
    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Resp,
    Kvlds,
}

/// Protected mode, as Redis has it: a listener that other machines can
/// reach needs a way to keep them out. RESP without a password, and kvlds
/// (which has no authentication) without `kvlds_remote`, listen on
/// loopback or a Unix socket only.
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
    if config.resp.is_none() && config.kvlds.is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no listener: give --resp or --kvlds",
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
    for (addr, proto) in [
        (&config.resp, Protocol::Resp),
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
        .map(|(l, p)| {
            let name = match p {
                Protocol::Resp => "resp",
                Protocol::Kvlds => "kvlds",
            };
            (name, l.local_addr())
        })
        .collect();
    if let Some(l) = &metrics_listener {
        bound.push(("metrics", l.local_addr()));
    }
    let resp_port = bound
        .iter()
        .find(|(p, _)| *p == "resp")
        .and_then(|(_, a)| a.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(0);
    let resp_addr = bound
        .iter()
        .find(|(p, _)| *p == "resp")
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
        max_connections: config.max_connections,
        durability: config.durability,
        allocator: config.allocator,
        users: config.users.clone(),
        idle_timeout: config.idle_timeout,
        output_timeout: config.output_timeout,
        counters: Counters::default(),
        commands: CommandCounts::default(),
        kvlds_requests: KvldsCounts::default(),
        ops: Mutex::new(OpsSampler::default()),
    });
    ready(&bound);
    let sampler = {
        let (shared, stop) = (shared.clone(), shared.stop.clone());
        tokio::spawn(async move {
            counters::sample_ops(&shared.counters, &shared.ops, stop).await;
        })
    };
    let metrics = metrics_listener.map(|l| tokio::spawn(metrics::serve(l, shared.clone())));
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let mut accept_loops = JoinSet::new();
    for (l, proto) in listeners {
        accept_loops.spawn(accept_loop(l, proto, shared.clone(), slots.clone()));
    }
    wait_for_signal().await;
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

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install a SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Accepts connections until the server stops, then waits (at most
/// `STOP_GRACE`) for the ones it accepted to finish.
async fn accept_loop(l: Listener, proto: Protocol, shared: Arc<Shared>, slots: Arc<Semaphore>) {
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            Counters::add(&shared.counters.rejected_connections, 1);
            tracing::warn!(
                %peer,
                reason = "at the connection limit",
                max_connections = shared.max_connections,
                "refused a connection"
            );
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
            shared.connections.fetch_add(1, Ordering::Relaxed);
            match proto {
                Protocol::Resp => resp::serve(stream, peer, shared.clone()).await,
                Protocol::Kvlds => kvlds::serve(stream, peer, shared.clone()).await,
            }
            shared.connections.fetch_sub(1, Ordering::Relaxed);
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
