//! `kivi serve`: the store over TCP or Unix sockets (see the kivi-server crate).

use crate::error::{CliError, Result};
use crate::Store;
use kivi_server::listen::Addr;
use kivi_server::Config;
use std::io::Write;
use std::time::Duration;

pub struct ServeArgs<'a> {
    pub resp: &'a str,
    pub no_resp: bool,
    pub kvlds: Option<&'a str>,
    pub max_connections: usize,
    pub requirepass: Option<&'a str>,
    pub users: &'a [String],
    pub kvlds_allow_remote: bool,
    pub idle_timeout: u64,
    pub output_timeout: u64,
    pub metrics: Option<&'a str>,
    pub metrics_allow_remote: bool,
}

pub fn run(store: &Store, a: ServeArgs<'_>) -> Result<()> {
    if a.max_connections == 0 {
        return Err(CliError::Input(
            "--max-connections must be at least 1".into(),
        ));
    }
    let resp = (!a.no_resp)
        .then(|| Addr::parse(a.resp).map_err(|e| CliError::Input(format!("--resp: {e}"))))
        .transpose()?;
    let kvlds = a
        .kvlds
        .map(|k| Addr::parse(k).map_err(|e| CliError::Input(format!("--kvlds: {e}"))))
        .transpose()?;
    if resp.is_none() && kvlds.is_none() {
        return Err(CliError::Input(
            "--no-resp without --kvlds leaves nothing to listen on".into(),
        ));
    }
    let metrics = match a.metrics {
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
    let users = kivi_server::auth::Users::new(a.requirepass, a.users)
        .map_err(|e| CliError::Input(format!("--requirepass / --user: {e}")))?;
    let config = Config {
        resp,
        kvlds,
        max_connections: a.max_connections,
        durability: store.durability,
        allocator: Some(crate::ALLOCATOR),
        users: std::sync::Arc::new(users),
        kvlds_remote: a.kvlds_allow_remote,
        idle_timeout: (a.idle_timeout > 0).then(|| Duration::from_secs(a.idle_timeout)),
        output_timeout: Duration::from_secs(a.output_timeout.max(1)),
        metrics,
        metrics_remote: a.metrics_allow_remote,
    };
    // Refused before the store is opened (or made).
    kivi_server::protected_mode(&config).map_err(|e| CliError::Input(e.to_string()))?;
    raise_open_file_limit(a.max_connections);
    disable_transparent_huge_pages();
    let db = store.open_writable()?;
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
