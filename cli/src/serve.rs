//! `kivi serve`: the store over TCP or Unix sockets (see the kivi-server crate).

use crate::error::{CliError, Result};
use crate::Store;
use kivi_server::listen::Addr;
use kivi_server::Config;
use std::io::Write;

pub struct ServeArgs<'a> {
    pub resp: &'a str,
    pub no_resp: bool,
    pub kvlds: Option<&'a str>,
    pub max_connections: usize,
    /// For tests: an in-memory store that runs out of space after this many
    /// bytes, instead of the directory.
    pub full_after: Option<u64>,
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
    let db = match a.full_after {
        None => store.open_writable()?,
        Some(bytes) => {
            let sim = kivi::storage::SimStorage::new();
            sim.set_quota(Some(bytes));
            kivi::Db::open_with_storage(std::sync::Arc::new(sim), kivi::Options::default())?
        }
    };
    let config = Config {
        resp,
        kvlds,
        max_connections: a.max_connections,
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
