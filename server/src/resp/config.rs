//! CONFIG: GET answers what this server really does, under the names of
//! kivi's own settings (those of `kivi serve`'s flags and config file) and
//! under Redis's parameter names, so that tools which read the
//! configuration (redis-benchmark asks for `save` and `appendonly`,
//! monitoring asks for `maxclients` and `maxmemory`) learn the truth. SET
//! changes what is safe to change live (`settings::LiveSettings`): the
//! timeouts and the connection limit; the rest is fixed at start-up.

use super::commands::wrong_args;
use super::glob;
use super::reply::Reply;
use crate::Shared;
use kivi::Durability;

/// What CONFIG GET reports, from the server's own settings.
pub struct Settings<'a> {
    pub durability: Durability,
    /// The store's directory.
    pub data_dir: &'a str,
    pub max_connections: usize,
    /// The RESP listener's bound address: `host:port` or a socket path.
    pub resp_addr: Option<&'a str>,
    pub kvlds_addr: Option<&'a str>,
    pub kvlds_remote: bool,
    pub metrics_addr: Option<&'a str>,
    pub metrics_remote: bool,
    /// The idle timeout, in seconds (0: none).
    pub timeout_secs: u64,
    pub output_timeout_secs: u64,
    pub requirepass: bool,
    /// `name:role` of each user other than the default one.
    pub users: Vec<String>,
    /// The TLS listener's port (0: none) and its files.
    pub tls_port: u16,
    pub tls: Option<&'a crate::tls::Files>,
}

impl<'a> Settings<'a> {
    pub fn of(shared: &'a Shared) -> Settings<'a> {
        Settings {
            durability: shared.durability,
            data_dir: shared.db.path(),
            max_connections: shared.live.max_connections(),
            resp_addr: shared.resp_addr.as_deref(),
            kvlds_addr: shared.kvlds_addr.as_deref(),
            kvlds_remote: shared.kvlds_remote,
            metrics_addr: shared.metrics_addr.as_deref(),
            metrics_remote: shared.metrics_remote,
            timeout_secs: shared.live.idle_timeout().map_or(0, |t| t.as_secs()),
            output_timeout_secs: shared.live.output_timeout().as_secs(),
            requirepass: shared.users.default_has_password(),
            users: shared
                .users
                .roles()
                .filter(|(name, _)| *name != crate::auth::DEFAULT_USER)
                .map(|(name, role)| format!("{name}:{}", role.name()))
                .collect(),
            tls_port: shared.tls_port,
            tls: shared.tls.as_ref().map(|t| t.files()),
        }
    }
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
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
        // kivi's own settings, by the names of its flags and config file.
        ("data-dir", s.data_dir.to_string()),
        ("no-fsync", yes_no(s.durability == Durability::NoFsync)),
        ("resp", s.resp_addr.unwrap_or_default().to_string()),
        ("no-resp", yes_no(s.resp_addr.is_none())),
        ("kvlds", s.kvlds_addr.unwrap_or_default().to_string()),
        ("kvlds-allow-remote", yes_no(s.kvlds_remote)),
        ("metrics", s.metrics_addr.unwrap_or_default().to_string()),
        ("metrics-allow-remote", yes_no(s.metrics_remote)),
        ("max-connections", s.max_connections.to_string()),
        // The password itself is not kept, only its hash: CONFIG GET
        // tells whether there is one.
        (
            "requirepass",
            if s.requirepass { "(hidden)" } else { "" }.into(),
        ),
        ("user", s.users.join(" ")),
        ("timeout", s.timeout_secs.to_string()),
        ("output-timeout", s.output_timeout_secs.to_string()),
        // Redis's names for the same, and what Redis tools ask about.
        ("dir", s.data_dir.to_string()),
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

/// The settings CONFIG SET may change: kivi's name or Redis's for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Live {
    Timeout,
    OutputTimeout,
    MaxConnections,
}

impl Live {
    fn named(name: &str) -> Option<Live> {
        match name {
            "timeout" => Some(Live::Timeout),
            "output-timeout" => Some(Live::OutputTimeout),
            "max-connections" | "maxclients" => Some(Live::MaxConnections),
            _ => None,
        }
    }
}

/// CONFIG SET name value [name value ...]: every pair checked before any
/// is applied, so a bad one changes nothing (as Redis does).
fn set(shared: &Shared, pairs: &[Vec<u8>]) -> Result<Reply, Reply> {
    let known = params(&Settings::of(shared));
    let failed = |name: &str, why: &str| {
        Reply::err(format!(
            "CONFIG SET failed (possibly related to argument '{name}') - {why}"
        ))
    };
    let mut changes: Vec<(Live, u64)> = Vec::new();
    for pair in pairs.chunks(2) {
        let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        let Some(setting) = Live::named(&name) else {
            if known.iter().any(|(k, _)| *k == name) {
                return Err(failed(
                    &name,
                    "can't set immutable config (kivi: set it in the config file or on \
                     the command line, and restart)",
                ));
            }
            return Err(Reply::err(format!(
                "Unknown option or number of arguments for CONFIG SET - '{name}'"
            )));
        };
        if changes.iter().any(|(s, _)| *s == setting) {
            return Err(failed(&name, "duplicate parameter"));
        }
        let value = std::str::from_utf8(&pair[1])
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| failed(&name, "argument couldn't be parsed into an integer"))?;
        let bounds = match setting {
            Live::Timeout => 0..=crate::settings::MAX_TIMEOUT_SECS,
            Live::OutputTimeout => 1..=crate::settings::MAX_TIMEOUT_SECS,
            Live::MaxConnections => 1..=u64::from(u32::MAX),
        };
        if !bounds.contains(&value) {
            return Err(failed(
                &name,
                &format!(
                    "argument must be between {} and {} inclusive",
                    bounds.start(),
                    bounds.end()
                ),
            ));
        }
        changes.push((setting, value));
    }
    for (setting, value) in changes {
        match setting {
            Live::Timeout => shared.live.set_idle_timeout_secs(value),
            Live::OutputTimeout => shared.live.set_output_timeout_secs(value),
            Live::MaxConnections => shared.live.set_max_connections(value as usize),
        }
    }
    Ok(Reply::ok())
}

/// CONFIG GET pattern... (each a glob, matched case-insensitively as
/// Redis does), CONFIG SET, CONFIG RESETSTAT; anything else is refused.
pub fn config(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
    match sub.as_str() {
        "GET" if args.len() >= 3 => Ok(Reply::Map(get(&params(&Settings::of(shared)), &args[2..]))),
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
        "SET" if args.len() >= 4 && args.len().is_multiple_of(2) => set(shared, &args[2..]),
        "SET" => Err(wrong_args("config|set")),
        "REWRITE" => Err(Reply::err(
            "CONFIG REWRITE is not supported: kivi serve reads its config file and \
             never writes it; a change made by CONFIG SET lasts until the server stops",
        )),
        _ => Err(Reply::err(format!(
            "unknown subcommand '{}'. Try CONFIG GET, CONFIG SET or CONFIG RESETSTAT.",
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

    fn settings() -> Settings<'static> {
        Settings {
            durability: Durability::Fsync,
            data_dir: "/var/lib/kivi",
            max_connections: 10,
            resp_addr: Some("127.0.0.1:6380"),
            kvlds_addr: None,
            kvlds_remote: false,
            metrics_addr: None,
            metrics_remote: false,
            timeout_secs: 0,
            output_timeout_secs: 60,
            requirepass: false,
            users: Vec::new(),
            tls_port: 0,
            tls: None,
        }
    }

    fn value(params: &[(&'static str, String)], name: &str) -> String {
        params.iter().find(|(k, _)| *k == name).unwrap().1.clone()
    }

    #[test]
    fn the_parameters_are_the_servers_own() {
        let p = params(&Settings {
            max_connections: 123,
            resp_addr: Some("127.0.0.1:6390"),
            timeout_secs: 300,
            ..settings()
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
            resp_addr: Some("[::1]:7000"),
            tls_port: 6443,
            tls: Some(&crate::tls::Files {
                cert: "/etc/kivi/cert.pem".into(),
                key: "/etc/kivi/key.pem".into(),
                ca: None,
            }),
            ..settings()
        });
        assert_eq!(value(&p, "appendfsync"), "no");
        assert_eq!(value(&p, "bind"), "::1");
        assert_eq!(value(&p, "tls-port"), "6443");
        assert_eq!(value(&p, "tls-cert-file"), "/etc/kivi/cert.pem");
        assert_eq!(value(&p, "tls-key-file"), "/etc/kivi/key.pem");
        assert_eq!(value(&p, "tls-ca-cert-file"), "");
        assert_eq!(value(&p, "tls-auth-clients"), "no");
        let p = params(&Settings {
            resp_addr: Some("/tmp/kivi.sock"),
            tls_port: 6443,
            tls: Some(&crate::tls::Files {
                cert: "c.pem".into(),
                key: "k.pem".into(),
                ca: Some("/etc/kivi/ca.pem".into()),
            }),
            ..settings()
        });
        assert_eq!(value(&p, "unixsocket"), "/tmp/kivi.sock");
        assert_eq!(value(&p, "port"), "0");
        assert_eq!(value(&p, "tls-ca-cert-file"), "/etc/kivi/ca.pem");
        assert_eq!(value(&p, "tls-auth-clients"), "yes");
    }

    #[test]
    fn kivis_own_settings_are_told_and_passwords_are_not() {
        let p = params(&Settings {
            durability: Durability::NoFsync,
            max_connections: 77,
            kvlds_addr: Some("127.0.0.1:1234"),
            kvlds_remote: true,
            metrics_addr: Some("127.0.0.1:9121"),
            timeout_secs: 9,
            output_timeout_secs: 31,
            requirepass: true,
            users: vec!["reports:read-only".into(), "app:read-write".into()],
            ..settings()
        });
        assert_eq!(value(&p, "data-dir"), "/var/lib/kivi");
        assert_eq!(value(&p, "dir"), "/var/lib/kivi");
        assert_eq!(value(&p, "no-fsync"), "yes");
        assert_eq!(value(&p, "resp"), "127.0.0.1:6380");
        assert_eq!(value(&p, "no-resp"), "no");
        assert_eq!(value(&p, "kvlds"), "127.0.0.1:1234");
        assert_eq!(value(&p, "kvlds-allow-remote"), "yes");
        assert_eq!(value(&p, "metrics"), "127.0.0.1:9121");
        assert_eq!(value(&p, "metrics-allow-remote"), "no");
        assert_eq!(value(&p, "max-connections"), "77");
        assert_eq!(value(&p, "maxclients"), "77");
        assert_eq!(value(&p, "timeout"), "9");
        assert_eq!(value(&p, "output-timeout"), "31");
        assert_eq!(value(&p, "requirepass"), "(hidden)");
        assert_eq!(value(&p, "user"), "reports:read-only app:read-write");
        let p = params(&Settings {
            resp_addr: None,
            ..settings()
        });
        assert_eq!(value(&p, "requirepass"), "");
        assert_eq!(value(&p, "user"), "");
        assert_eq!(value(&p, "no-resp"), "yes");
        assert_eq!(value(&p, "no-fsync"), "no");
        // Each name once.
        let mut names: Vec<_> = p.iter().map(|(k, _)| *k).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), p.len());
    }

    #[test]
    fn the_live_settings_go_by_both_names() {
        assert_eq!(Live::named("maxclients"), Some(Live::MaxConnections));
        assert_eq!(Live::named("max-connections"), Some(Live::MaxConnections));
        assert_eq!(Live::named("timeout"), Some(Live::Timeout));
        assert_eq!(Live::named("output-timeout"), Some(Live::OutputTimeout));
        assert_eq!(Live::named("port"), None);
    }

    #[test]
    fn patterns_select_parameters_and_unknown_ones_nothing() {
        let p = params(&Settings {
            resp_addr: None,
            ..settings()
        });
        let names = |pats: &[&str]| -> Vec<Reply> {
            let pats: Vec<Vec<u8>> = pats.iter().map(|s| s.as_bytes().to_vec()).collect();
            get(&p, &pats).into_iter().map(|(k, _)| k).collect()
        };
        assert_eq!(
            names(&["max*"]),
            vec![
                Reply::bulk("max-connections"),
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
