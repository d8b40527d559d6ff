//! `kivi serve --config FILE`: the server's settings in a TOML file, for
//! what a service manager starts and for passwords that should not show in
//! `ps`. Each key is the long name of a `kivi serve` flag (or of the global
//! `--data-dir`, `--no-fsync`, `--object-cache-dir`, `--object-cache-mib`
//! and `--commit-wait-ms`); users are `[[user]]` tables. A flag given
//! on the command line wins over the file, the file over the default. An
//! unknown key is refused, naming it, rather than ignored: a misspelt
//! `requirepas` must not leave a server open. The format is documented in
//! docs/config.md, with docs/kivi-serve.example.toml as an example.

use crate::error::{CliError, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Largest config file read: a config file is a page of settings, and a
/// path to something else by mistake should not be read whole.
const MAX_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServeFile {
    pub data_dir: Option<PathBuf>,
    pub no_fsync: Option<bool>,
    pub object_cache_dir: Option<PathBuf>,
    pub object_cache_mib: Option<u64>,
    pub commit_wait_ms: Option<u64>,
    pub resp: Option<String>,
    pub no_resp: Option<bool>,
    pub tls: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca_cert: Option<PathBuf>,
    pub kvlds: Option<String>,
    pub kvlds_allow_remote: Option<bool>,
    pub max_connections: Option<usize>,
    pub requirepass: Option<String>,
    #[serde(default)]
    pub user: Vec<UserEntry>,
    pub timeout: Option<u64>,
    pub output_timeout: Option<u64>,
    pub metrics: Option<String>,
    pub metrics_allow_remote: Option<bool>,
    pub log_level: Option<String>,
    pub follow: Option<String>,
    pub take_over_after_ms: Option<u64>,
    pub announce: Option<String>,
}

/// `[[user]]`: one user, as `--user NAME:ROLE:PASSWORD` gives it.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    pub name: String,
    pub role: String,
    pub password: String,
}

impl UserEntry {
    /// The `--user` form.
    pub fn spec(&self) -> String {
        format!("{}:{}:{}", self.name, self.role, self.password)
    }
}

impl ServeFile {
    pub fn read(path: &Path) -> Result<ServeFile> {
        let shown = path.display();
        let meta =
            std::fs::metadata(path).map_err(|e| CliError::io(format!("config file {shown}"), e))?;
        if !meta.is_file() {
            return Err(CliError::Input(format!(
                "config file {shown} is not a file"
            )));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(CliError::Input(format!(
                "config file {shown} is {} bytes; a config file is at most {MAX_FILE_BYTES}",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::io(format!("config file {shown}"), e))?;
        let file = Self::parse(&text)
            .map_err(|e| CliError::Input(format!("config file {shown}: {}", e.trim_end())))?;
        Ok(file)
    }

    /// The settings in `text`; the error names the line and the key.
    pub fn parse(text: &str) -> Result<ServeFile, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    fn has_passwords(&self) -> bool {
        self.requirepass.is_some() || !self.user.is_empty()
    }

    /// A file holding passwords that every local user can read gives them
    /// away; said at start-up (once the log is set up), as ssh says of a
    /// private key.
    pub fn warn_if_others_can_read(&self, path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let readable = std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0);
        if self.has_passwords() && readable {
            tracing::warn!(
                file = %path.display(),
                "config file holds passwords and every user of this machine can read it; \
                 chmod o-r it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_read() {
        let f = ServeFile::parse(
            r#"
            data-dir = "/var/lib/kivi"
            no-fsync = true
            object-cache-dir = "/var/cache/kivi"
            object-cache-mib = 2048
            commit-wait-ms = 5
            resp = "0.0.0.0:6380"
            no-resp = false
            tls = "0.0.0.0:6443"
            tls-cert = "/etc/kivi/server.pem"
            tls-key = "/etc/kivi/server.key"
            tls-ca-cert = "/etc/kivi/ca.pem"
            kvlds = "127.0.0.1:1234"
            kvlds-allow-remote = true
            max-connections = 500
            requirepass = "s3cret"
            timeout = 300
            output-timeout = 20
            metrics = "127.0.0.1:9121"
            metrics-allow-remote = false
            log-level = "warn"
            follow = "s3://bucket/store"
            take-over-after-ms = 3000
            announce = "10.0.0.7:6380"

            [[user]]
            name = "reports"
            role = "read-only"
            password = "r:3ad"
            "#,
        )
        .unwrap();
        assert_eq!(
            f,
            ServeFile {
                data_dir: Some("/var/lib/kivi".into()),
                no_fsync: Some(true),
                object_cache_dir: Some("/var/cache/kivi".into()),
                object_cache_mib: Some(2048),
                commit_wait_ms: Some(5),
                resp: Some("0.0.0.0:6380".into()),
                no_resp: Some(false),
                tls: Some("0.0.0.0:6443".into()),
                tls_cert: Some("/etc/kivi/server.pem".into()),
                tls_key: Some("/etc/kivi/server.key".into()),
                tls_ca_cert: Some("/etc/kivi/ca.pem".into()),
                kvlds: Some("127.0.0.1:1234".into()),
                kvlds_allow_remote: Some(true),
                max_connections: Some(500),
                requirepass: Some("s3cret".into()),
                user: vec![UserEntry {
                    name: "reports".into(),
                    role: "read-only".into(),
                    password: "r:3ad".into(),
                }],
                timeout: Some(300),
                output_timeout: Some(20),
                metrics: Some("127.0.0.1:9121".into()),
                metrics_allow_remote: Some(false),
                log_level: Some("warn".into()),
                follow: Some("s3://bucket/store".into()),
                take_over_after_ms: Some(3000),
                announce: Some("10.0.0.7:6380".into()),
            }
        );
        assert_eq!(f.user[0].spec(), "reports:read-only:r:3ad");
        assert_eq!(ServeFile::parse("").unwrap(), ServeFile::default());
    }

    #[test]
    fn a_misspelt_or_mistyped_key_is_refused_by_name() {
        let e = ServeFile::parse("requirepas = \"x\"\n").unwrap_err();
        assert!(e.contains("requirepas"), "{e}");
        assert!(e.contains("line 1"), "{e}");
        let e = ServeFile::parse("resp = \"a:1\"\ntimeout = \"5\"\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = ServeFile::parse("[[user]]\nname = \"a\"\nrole = \"read-only\"\n").unwrap_err();
        assert!(e.contains("password"), "{e}");
        let e = ServeFile::parse("max-connections = -1\n").unwrap_err();
        assert!(e.contains("max-connections") || e.contains("line 1"), "{e}");
    }

    #[test]
    fn the_example_in_the_repository_parses() {
        let text = include_str!("../../docs/kivi-serve.example.toml");
        let f = ServeFile::parse(text).unwrap();
        assert!(f.resp.is_some());
        assert!(f.requirepass.is_some());
    }
}
