//! `kivi serve`: the store over TCP or Unix sockets (see the kivi-server crate).

use crate::config_file::ServeFile;
use crate::error::{CliError, Result};
use crate::{Global, Store};
use kivi_server::listen::Addr;
use kivi_server::Config;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `kivi serve`'s flags. Each setting is optional here so that one given
/// in a config file (`--config`) counts unless the flag is given too.
#[derive(clap::Args, Debug, Default)]
pub struct ServeFlags {
    /// Read settings from this TOML file (docs/config.md); a flag given here wins over it
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// RESP listener: host:port, or a Unix socket path (anything with a '/')
    /// [default: 127.0.0.1:6380]
    #[arg(long, value_name = "ADDR")]
    pub resp: Option<String>,
    /// Do not listen for RESP in plain text (with --tls or --kvlds)
    #[arg(long)]
    pub no_resp: bool,
    /// A RESP listener over TLS, host:port (Redis's tls-port), besides --resp;
    /// needs --tls-cert and --tls-key
    #[arg(long, value_name = "ADDR")]
    pub tls: Option<String>,
    /// The server's certificate chain for --tls (PEM, its own certificate first)
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM)
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Require TLS clients to present a certificate signed by this CA (PEM)
    /// (Redis's tls-auth-clients yes)
    #[arg(long, value_name = "FILE")]
    pub tls_ca_cert: Option<PathBuf>,
    /// kvlds listener: host:port or a Unix socket path; none unless given
    #[arg(long, value_name = "ADDR")]
    pub kvlds: Option<String>,
    /// Most connections open at once, over both listeners [default: 10000]
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// The default user's password (Redis's requirepass: AUTH PASSWORD, redis-cli -a);
    /// every RESP connection must then authenticate. Other users of this machine see
    /// command lines: a config file keeps it out of sight
    #[arg(long, value_name = "PASSWORD")]
    pub requirepass: Option<String>,
    /// A user with a role, read-write or read-only (AUTH NAME PASSWORD, redis-cli
    /// --user NAME -a PASSWORD); repeat for more users
    #[arg(long = "user", value_name = "NAME:ROLE:PASSWORD")]
    pub users: Vec<String>,
    /// Let the kvlds listener, which has no authentication, listen on an address other
    /// machines reach
    #[arg(long)]
    pub kvlds_allow_remote: bool,
    /// Close a RESP connection that sends nothing for this many seconds (Redis's
    /// timeout); 0: never [default: 0]
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Close a connection (RESP or kvlds) whose replies wait this many seconds for the
    /// client to read them [default: 60]
    #[arg(long, value_name = "SECONDS")]
    pub output_timeout: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics (host:port); none unless given
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Let the metrics endpoint, which has no authentication, listen on an address other
    /// machines reach
    #[arg(long)]
    pub metrics_allow_remote: bool,
    /// Serve, read-only, the store at URL (s3://bucket/prefix) that another kivi writes,
    /// following its commits as they appear; writes are refused with READONLY. Instead of -d
    #[arg(long, value_name = "URL")]
    pub follow: Option<String>,
    /// With --follow: a standby, which takes over as the writer once the writer's lease has
    /// gone unrenewed this many milliseconds (at least 1500; the writer renews it every second)
    #[arg(long, value_name = "MS")]
    pub take_over_after_ms: Option<u64>,
    /// The address clients reach this server at, which followers of its store report as the
    /// writer's (INFO replication, ROLE) [default: the RESP listener's]
    #[arg(long, value_name = "HOST:PORT")]
    pub announce: Option<String>,
}

/// Where `kivi serve` listens and how: the flags over the config file
/// over the defaults.
struct ServeArgs {
    resp: String,
    no_resp: bool,
    tls: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca_cert: Option<PathBuf>,
    kvlds: Option<String>,
    max_connections: usize,
    requirepass: Option<String>,
    users: Vec<String>,
    kvlds_allow_remote: bool,
    idle_timeout: u64,
    output_timeout: u64,
    metrics: Option<String>,
    metrics_allow_remote: bool,
    follow: Option<String>,
    take_over_after_ms: Option<u64>,
    announce: Option<String>,
}

impl ServeArgs {
    fn merge(flags: &ServeFlags, file: ServeFile) -> ServeArgs {
        // The file's users come after the flags' (a name given in both is
        // refused as given twice, rather than one silently winning).
        let mut users = flags.users.clone();
        users.extend(file.user.iter().map(|u| u.spec()));
        ServeArgs {
            resp: flags
                .resp
                .clone()
                .or(file.resp)
                .unwrap_or_else(|| "127.0.0.1:6380".into()),
            no_resp: flags.no_resp || file.no_resp.unwrap_or(false),
            tls: flags.tls.clone().or(file.tls),
            tls_cert: flags.tls_cert.clone().or(file.tls_cert),
            tls_key: flags.tls_key.clone().or(file.tls_key),
            tls_ca_cert: flags.tls_ca_cert.clone().or(file.tls_ca_cert),
            kvlds: flags.kvlds.clone().or(file.kvlds),
            max_connections: flags
                .max_connections
                .or(file.max_connections)
                .unwrap_or(kivi_server::DEFAULT_MAX_CONNECTIONS),
            requirepass: flags.requirepass.clone().or(file.requirepass),
            users,
            kvlds_allow_remote: flags.kvlds_allow_remote
                || file.kvlds_allow_remote.unwrap_or(false),
            idle_timeout: flags.timeout.or(file.timeout).unwrap_or(0),
            output_timeout: flags
                .output_timeout
                .or(file.output_timeout)
                .unwrap_or(kivi_server::DEFAULT_OUTPUT_TIMEOUT.as_secs()),
            metrics: flags.metrics.clone().or(file.metrics),
            metrics_allow_remote: flags.metrics_allow_remote
                || file.metrics_allow_remote.unwrap_or(false),
            follow: flags.follow.clone().or(file.follow),
            take_over_after_ms: flags.take_over_after_ms.or(file.take_over_after_ms),
            announce: flags.announce.clone().or(file.announce),
        }
    }
}

pub fn run(global: &Global, flags: &ServeFlags) -> Result<()> {
    let file = match &flags.config {
        Some(path) => ServeFile::read(path)?,
        None => ServeFile::default(),
    };
    crate::init_logging(global.log_level.as_deref().or(file.log_level.as_deref()))?;
    if let Some(path) = &flags.config {
        file.warn_if_others_can_read(path);
    }
    // The store: -d and --no-fsync on the command line win over the file;
    // --follow names the store instead.
    let follow = flags.follow.clone().or(file.follow.clone());
    if follow.is_some() && global.data_dir.is_some() {
        return Err(CliError::Input(
            "--follow URL names the store to serve: give it without -d".into(),
        ));
    }
    let store = Store::with(
        follow
            .as_ref()
            .map(PathBuf::from)
            .or(global.data_dir.clone())
            .or(file.data_dir.clone()),
        global.hex,
        global.no_fsync || file.no_fsync.unwrap_or(false),
    )
    .tuned(&Global {
        object_cache_dir: global
            .object_cache_dir
            .clone()
            .or(file.object_cache_dir.clone()),
        object_cache_mib: global.object_cache_mib.or(file.object_cache_mib),
        commit_wait_ms: global.commit_wait_ms.or(file.commit_wait_ms),
        ..global.clone()
    });
    if file.commit_wait_ms.is_some_and(|ms| ms > 1000) {
        return Err(CliError::Input(
            "commit-wait-ms must be at most 1000".into(),
        ));
    }
    let a = ServeArgs::merge(flags, file);
    let take_over_after = match (a.take_over_after_ms, &a.follow) {
        (Some(_), None) => {
            return Err(CliError::Input(
                "--take-over-after-ms is for a standby: give it with --follow URL".into(),
            ))
        }
        (Some(ms), Some(_)) if ms < 1500 => return Err(CliError::Input(
            "--take-over-after-ms must be at least 1500 (the writer renews its lease every second)"
                .into(),
        )),
        (ms, _) => ms.map(Duration::from_millis),
    };
    if a.max_connections == 0 {
        return Err(CliError::Input(
            "--max-connections must be at least 1".into(),
        ));
    }
    let resp = (!a.no_resp)
        .then(|| Addr::parse(&a.resp).map_err(|e| CliError::Input(format!("--resp: {e}"))))
        .transpose()?;
    let kvlds = a
        .kvlds
        .as_deref()
        .map(|k| Addr::parse(k).map_err(|e| CliError::Input(format!("--kvlds: {e}"))))
        .transpose()?;
    if resp.is_none() && a.tls.is_none() && kvlds.is_none() {
        return Err(CliError::Input(
            "--no-resp without --tls or --kvlds leaves nothing to listen on".into(),
        ));
    }
    let tls = tls(&a)?;
    let metrics = match a.metrics.as_deref() {
        Some(m) => match Addr::parse(m) {
            Ok(Addr::Tcp(t)) => Some(Addr::Tcp(t)),
            _ => {
                return Err(CliError::Input(format!(
                    "--metrics: {m:?} is not host:port"
                )))
            }
        },
        None => None,
    };
    let users = kivi_server::auth::Users::new(a.requirepass.as_deref(), &a.users)
        .map_err(|e| CliError::Input(format!("--requirepass / --user: {e}")))?;
    let config = Config {
        resp,
        tls,
        kvlds,
        max_connections: a.max_connections,
        durability: store.durability,
        allocator: Some(crate::ALLOCATOR),
        users: Arc::new(users),
        kvlds_remote: a.kvlds_allow_remote,
        idle_timeout: (a.idle_timeout > 0).then(|| Duration::from_secs(a.idle_timeout)),
        output_timeout: Duration::from_secs(a.output_timeout.max(1)),
        metrics,
        metrics_remote: a.metrics_allow_remote,
        announce: a.announce.clone(),
    };
    // Refused before the store is opened (or made).
    kivi_server::protected_mode(&config).map_err(|e| CliError::Input(e.to_string()))?;
    raise_open_file_limit(a.max_connections);
    disable_transparent_huge_pages();
    let db = match &a.follow {
        Some(_) => store.open_follower(take_over_after)?,
        None => store.open_writable()?,
    };
    let dir = store.shown_dir();
    kivi_server::run(db, config, |bound| {
        // One line per listener on standard output (scripts and tests read
        // the port from it when they asked for port 0).
        let mut out = std::io::stdout().lock();
        for (proto, addr) in bound {
            let _ = writeln!(out, "kivi serve: {proto} listening on {addr} (store {dir})");
        }
        let _ = out.flush();
    })
    .map_err(|e| CliError::io("serve", e))
}

/// The TLS listener and its certificates, read now: a missing or bad file
/// is refused before the store is opened.
fn tls(a: &ServeArgs) -> Result<Option<(Addr, Arc<kivi_server::tls::Tls>)>> {
    let Some(addr) = a.tls.as_deref() else {
        if a.tls_cert.is_some() || a.tls_key.is_some() || a.tls_ca_cert.is_some() {
            return Err(CliError::Input(
                "--tls-cert, --tls-key and --tls-ca-cert need --tls ADDR".into(),
            ));
        }
        return Ok(None);
    };
    let addr = Addr::parse(addr).map_err(|e| CliError::Input(format!("--tls: {e}")))?;
    let (Some(cert), Some(key)) = (a.tls_cert.as_deref(), a.tls_key.as_deref()) else {
        return Err(CliError::Input(
            "--tls needs --tls-cert FILE and --tls-key FILE (PEM)".into(),
        ));
    };
    let files = kivi_server::tls::Files {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        ca: a.tls_ca_cert.as_deref().map(Path::to_path_buf),
    };
    let tls =
        kivi_server::tls::Tls::load(files).map_err(|e| CliError::Input(format!("--tls: {e}")))?;
    Ok(Some((addr, Arc::new(tls))))
}

/// Turns transparent huge pages off for this process, as Redis and most
/// databases ask of their hosts. With them, the first touch of any byte of
/// a 2 MiB region has the kernel zero all of it; a server's tree grows and
/// churns in small allocations, and over half of the commit thread's time
/// under kvlds bulk writes went to that zeroing (`clear_page_erms` under
/// `do_huge_pmd_anonymous_page`). Without them only the 4 KiB pages
/// touched are zeroed: kvlds bulk insert 1.8-2.3 M/s against 1.2-1.7 M/s,
/// best rounds alternated
/// (docs/decisions/0001-serve-without-transparent-huge-pages.md). Random
/// reads lose some TLB reach in exchange. Best effort: on a kernel without
/// the call nothing changes.
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and touches
    // no memory of ours; it sets a flag on this process's address space.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Each connection is a file descriptor; the store needs some more (its
/// segments, bounded). Raises the soft limit to the hard one, and says so
/// when even that is below what `--max-connections` may need: accepting
/// then fails with "too many open files" and is retried, the store is not
/// affected.
fn raise_open_file_limit(max_connections: usize) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or fill the one rlimit struct we
    // pass, which lives on this stack frame for the whole call.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    let needed = max_connections as u64 + 256;
    if lim.rlim_cur < needed {
        tracing::warn!(
            "the open-file limit is {}, less than the {needed} that --max-connections {max_connections} may need; raise it (ulimit -n) or lower --max-connections",
            lim.rlim_cur
        );
    }
}
