//! CONFIG: GET answers what this server really does, in Redis's parameter
//! names, so that tools which read the configuration (redis-benchmark asks
//! for `save` and `appendonly`, monitoring asks for `maxclients` and
//! `maxmemory`) learn the truth. Nothing can be changed at run time: kivi
//! is configured on its command line.

use super::commands::wrong_args;
use super::glob;
use super::reply::Reply;
use crate::Shared;
use kivi::Durability;

/// What CONFIG GET reports, from the server's own settings.
pub struct Settings<'a> {
    pub durability: Durability,
    pub max_connections: usize,
    /// The RESP listener's bound address: `host:port` or a socket path.
    pub resp_addr: Option<&'a str>,
    /// The idle timeout, in seconds (0: none).
    pub timeout_secs: u64,
    /// The TLS listener's port (0: none) and its files.
    pub tls_port: u16,
    pub tls: Option<&'a crate::tls::Files>,
}

/// Every parameter CONFIG GET knows, with its value (CONFIG GET answers
/// in this order).
pub fn params(s: &Settings) -> Vec<(&'static str, String)> {
    let (bind, port, socket) = match s.resp_addr {
        // A Unix socket: Redis's `unixsocket`, and no TCP port.
        Some(a) if a.contains('/') => (String::new(), "0".to_string(), a.to_string()),
        Some(a) => match a.rsplit_once(':') {
            Some((host, port)) => (
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
                port.to_string(),
                String::new(),
            ),
            None => (String::new(), "0".into(), String::new()),
        },
        // Only the kvlds listener.
        None => (String::new(), "0".into(), String::new()),
    };
    vec![
        // Every write goes to the commit log before it is answered.
        ("appendonly", "yes".into()),
        // `always`: each write is fdatasync'ed before its reply; with
        // --no-fsync it is handed to the OS only, which Redis calls `no`.
        (
            "appendfsync",
            match s.durability {
                Durability::Fsync => "always",
                Durability::NoFsync => "no",
            }
            .into(),
        ),
        // No snapshots to schedule: checkpoints are the engine's business.
        ("save", String::new()),
        ("databases", "1".into()),
        // No memory limit on data, and so nothing evicted: the data lives
        // on disk, the cache has its own bound.
        ("maxmemory", "0".into()),
        ("maxmemory-policy", "noeviction".into()),
        // --max-connections: the (N+1)th connection is refused.
        ("maxclients", s.max_connections.to_string()),
        ("port", port),
        ("bind", bind),
        ("unixsocket", socket),
        // Idle connections are never closed by the server.
        ("timeout", s.timeout_secs.to_string()),
        ("tls-port", s.tls_port.to_string()),
        ("tls-cert-file", tls_path(s.tls.map(|t| &t.cert))),
        ("tls-key-file", tls_path(s.tls.map(|t| &t.key))),
        (
            "tls-ca-cert-file",
            tls_path(s.tls.and_then(|t| t.ca.as_ref())),
        ),
        // Client certificates are required exactly when a CA is given.
        (
            "tls-auth-clients",
            if s.tls.is_some_and(|t| t.ca.is_some()) {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
    ]
}

fn tls_path(p: Option<&std::path::PathBuf>) -> String {
    p.map(|p| p.display().to_string()).unwrap_or_default()
}

/// CONFIG GET pattern... (each a glob, matched case-insensitively as
/// Redis does), CONFIG RESETSTAT; anything else is refused.
pub fn config(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
    match sub.as_str() {
        "GET" if args.len() >= 3 => {
            let settings = Settings {
                durability: shared.durability,
                max_connections: shared.max_connections,
                resp_addr: shared.resp_addr.as_deref(),
                timeout_secs: shared.idle_timeout.map_or(0, |t| t.as_secs()),
                tls_port: shared.tls_port,
                tls: shared.tls.as_ref().map(|t| t.files()),
            };
            Ok(Reply::Map(get(&params(&settings), &args[2..])))
        }
        "GET" => Err(wrong_args("config|get")),
        "RESETSTAT" if args.len() == 2 => {
            shared.counters.reset();
            if let Ok(st) = shared.db.stats() {
                shared
                    .counters
                    .expired_keys_at_reset
                    .store(st.expired_reclaimed, std::sync::atomic::Ordering::Relaxed);
            }
            shared.ops.lock().reset();
            Ok(Reply::ok())
        }
        "RESETSTAT" => Err(wrong_args("config|resetstat")),
        "SET" | "REWRITE" => Err(Reply::err(format!(
            "CONFIG {sub} is not supported: kivi is configured on its command line \
             (kivi serve --help); CONFIG GET tells the settings"
        ))),
        _ => Err(Reply::err(format!(
            "unknown subcommand '{}'. Try CONFIG GET or CONFIG RESETSTAT.",
            String::from_utf8_lossy(&args[1])
        ))),
    }
}

/// The parameters any of `patterns` matches, each once: an unknown name
/// matches nothing, and the answer is then empty, as Redis's is.
fn get(params: &[(&'static str, String)], patterns: &[Vec<u8>]) -> Vec<(Reply, Reply)> {
    params
        .iter()
        .filter(|(k, _)| {
            patterns
                .iter()
                .any(|p| glob::matches(&p.to_ascii_lowercase(), k.as_bytes()))
        })
        .map(|(k, v)| (Reply::bulk(*k), Reply::bulk(v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(params: &[(&'static str, String)], name: &str) -> String {
        params.iter().find(|(k, _)| *k == name).unwrap().1.clone()
    }

    #[test]
    fn the_parameters_are_the_servers_own() {
        let p = params(&Settings {
            durability: Durability::Fsync,
            max_connections: 123,
            resp_addr: Some("127.0.0.1:6390"),
            timeout_secs: 300,
            tls_port: 0,
            tls: None,
        });
        assert_eq!(value(&p, "appendfsync"), "always");
        assert_eq!(value(&p, "maxclients"), "123");
        assert_eq!(value(&p, "timeout"), "300");
        assert_eq!(value(&p, "port"), "6390");
        assert_eq!(value(&p, "bind"), "127.0.0.1");
        assert_eq!(value(&p, "unixsocket"), "");
        assert_eq!(value(&p, "tls-port"), "0");
        assert_eq!(value(&p, "tls-cert-file"), "");
        assert_eq!(value(&p, "tls-auth-clients"), "no");
        let p = params(&Settings {
            durability: Durability::NoFsync,
            max_connections: 1,
            resp_addr: Some("[::1]:7000"),
            timeout_secs: 0,
            tls_port: 6443,
            tls: Some(&crate::tls::Files {
                cert: "/etc/kivi/cert.pem".into(),
                key: "/etc/kivi/key.pem".into(),
                ca: None,
            }),
        });
        assert_eq!(value(&p, "appendfsync"), "no");
        assert_eq!(value(&p, "bind"), "::1");
        assert_eq!(value(&p, "tls-port"), "6443");
        assert_eq!(value(&p, "tls-cert-file"), "/etc/kivi/cert.pem");
        assert_eq!(value(&p, "tls-key-file"), "/etc/kivi/key.pem");
        assert_eq!(value(&p, "tls-ca-cert-file"), "");
        assert_eq!(value(&p, "tls-auth-clients"), "no");
        let p = params(&Settings {
            durability: Durability::Fsync,
            max_connections: 1,
            resp_addr: Some("/tmp/kivi.sock"),
            timeout_secs: 0,
            tls_port: 6443,
            tls: Some(&crate::tls::Files {
                cert: "c.pem".into(),
                key: "k.pem".into(),
                ca: Some("/etc/kivi/ca.pem".into()),
            }),
        });
        assert_eq!(value(&p, "unixsocket"), "/tmp/kivi.sock");
        assert_eq!(value(&p, "port"), "0");
        assert_eq!(value(&p, "tls-ca-cert-file"), "/etc/kivi/ca.pem");
        assert_eq!(value(&p, "tls-auth-clients"), "yes");
    }

    #[test]
    fn patterns_select_parameters_and_unknown_ones_nothing() {
        let p = params(&Settings {
            durability: Durability::Fsync,
            max_connections: 10,
            resp_addr: None,
            timeout_secs: 0,
            tls_port: 0,
            tls: None,
        });
        let names = |pats: &[&str]| -> Vec<Reply> {
            let pats: Vec<Vec<u8>> = pats.iter().map(|s| s.as_bytes().to_vec()).collect();
            get(&p, &pats).into_iter().map(|(k, _)| k).collect()
        };
        assert_eq!(
            names(&["max*"]),
            vec![
                Reply::bulk("maxmemory"),
                Reply::bulk("maxmemory-policy"),
                Reply::bulk("maxclients")
            ]
        );
        assert_eq!(names(&["*"]).len(), p.len());
        assert_eq!(names(&["APPENDONLY"]), vec![Reply::bulk("appendonly")]);
        assert!(names(&["no-such-parameter"]).is_empty());
        // Two patterns naming one parameter answer it once.
        assert_eq!(names(&["save", "s*"]), vec![Reply::bulk("save")]);
    }
}
