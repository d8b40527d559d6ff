//! Who may connect and what each may run: a password for the default user
//! (`--requirepass`, Redis's `requirepass`) and named users with a role
//! (`--user NAME:ROLE:PASSWORD`), as Redis's ACL users are reached by
//! `AUTH [user] password` and `HELLO ... AUTH user password`.
//!
//! Passwords are kept only as Argon2id hashes (the `argon2` crate, a
//! memory-hard hash with a random salt each) and checked by it, which
//! compares in constant time. A check costs milliseconds of CPU by design,
//! so checks run on tokio's blocking pool, at most `MAX_CHECKS_AT_ONCE` at a
//! time: a client that floods AUTH slows its own answers, not the server.
//!
//! Once a user's password has passed that check, its SHA-256 under a key
//! drawn at start-up is kept in memory, and a later AUTH with the same
//! password is checked against it in constant time, in microseconds: 50
//! clients connecting with a password took 0.75 s of hashing (GET -P 1000
//! ran at 0.35× the rate without a password), and a client that connects
//! per request would be held to a few connections a second. A wrong
//! password still pays the full hash, so guessing through AUTH stays slow;
//! only a copy of the process's memory would find the faster digest, and
//! it would find the key beside it (the config file holds the password in
//! plain text anyway).
//!
//! With no password and no user configured every connection is the default
//! user, allowed everything (a listener reachable from another machine then
//! refuses to start: see `protected`). Once any password is configured a
//! new connection may run only AUTH, HELLO and QUIT until it authenticates.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use sha2::{Digest, Sha256};
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::OnceLock;
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

/// What a user may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every command.
    ReadWrite,
    /// Commands that change nothing stored (`is_read_only`).
    ReadOnly,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "read-write" | "rw" => Some(Role::ReadWrite),
            "read-only" | "ro" => Some(Role::ReadOnly),
            _ => None,
        }
    }

    /// The name `parse` takes for it.
    pub fn name(self) -> &'static str {
        match self {
            Role::ReadWrite => "read-write",
            Role::ReadOnly => "read-only",
        }
    }
}

/// The user Redis clients authenticate as when they give no name.
pub const DEFAULT_USER: &str = "default";

/// Password checks running at once, at most.
const MAX_CHECKS_AT_ONCE: usize = 2;

/// A configured user.
struct User {
    name: String,
    role: Role,
    /// The PHC string of the password's Argon2id hash (`None`: the default
    /// user without a password, which needs none).
    hash: Option<String>,
    /// The keyed digest (`Users::digest`) of the password, once it has
    /// passed the Argon2id check.
    verified: OnceLock<[u8; 32]>,
}

/// The users a server knows.
pub struct Users {
    users: Vec<User>,
    checks: Arc<Semaphore>,
    /// Drawn at start-up, never stored: the key of `digest`.
    key: [u8; 32],
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names and roles only: never the hashes.
        f.debug_list()
            .entries(self.users.iter().map(|u| (&u.name, u.role)))
            .finish()
    }
}

impl Default for Users {
    /// No password: every connection is the default user.
    fn default() -> Self {
        Users {
            users: vec![User {
                name: DEFAULT_USER.into(),
                role: Role::ReadWrite,
                hash: None,
                verified: OnceLock::new(),
            }],
            checks: Arc::new(Semaphore::new(MAX_CHECKS_AT_ONCE)),
            // No password, so no digest is ever taken.
            key: [0; 32],
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UserError {
    #[error("an empty password is no password")]
    EmptyPassword,
    #[error("user {0:?} is given twice")]
    Duplicate(String),
    #[error("a user name is made of letters, digits, '-', '_' and '.', got {0:?}")]
    BadName(String),
    #[error("{0:?} is not NAME:ROLE:PASSWORD with ROLE read-write or read-only")]
    BadSpec(String),
    #[error("hashing a password failed: {0}")]
    Hash(String),
}

fn hash(password: &str) -> Result<String, UserError> {
    if password.is_empty() {
        return Err(UserError::EmptyPassword);
    }
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| UserError::Hash(e.to_string()))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| UserError::Hash(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| UserError::Hash(e.to_string()))
}

impl Users {
    /// Each user's name and role (never a hash), the default user first
    /// when it is one.
    pub fn roles(&self) -> impl Iterator<Item = (&str, Role)> {
        self.users.iter().map(|u| (u.name.as_str(), u.role))
    }

    /// The users of `--requirepass` (the default user's password, if any)
    /// and of each `--user NAME:ROLE:PASSWORD`. When users are named but
    /// the default user has no password, the default user is left out:
    /// every connection must then authenticate as someone.
    pub fn new(requirepass: Option<&str>, specs: &[String]) -> Result<Users, UserError> {
        let mut users = Vec::new();
        if let Some(p) = requirepass {
            users.push(User {
                name: DEFAULT_USER.into(),
                role: Role::ReadWrite,
                hash: Some(hash(p)?),
                verified: OnceLock::new(),
            });
        }
        for spec in specs {
            let mut parts = spec.splitn(3, ':');
            let (Some(name), Some(role), Some(password)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(UserError::BadSpec(spec.clone()));
            };
            let role = Role::parse(role).ok_or_else(|| UserError::BadSpec(spec.clone()))?;
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return Err(UserError::BadName(name.into()));
            }
            if users.iter().any(|u: &User| u.name == name) {
                return Err(UserError::Duplicate(name.into()));
            }
            users.push(User {
                name: name.into(),
                role,
                hash: Some(hash(password)?),
                verified: OnceLock::new(),
            });
        }
        if users.is_empty() {
            return Ok(Users::default());
        }
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| UserError::Hash(e.to_string()))?;
        Ok(Users {
            users,
            checks: Arc::new(Semaphore::new(MAX_CHECKS_AT_ONCE)),
            key,
        })
    }

    /// Whether a connection must authenticate before anything else.
    pub fn require_auth(&self) -> bool {
        self.users.iter().any(|u| u.hash.is_some())
    }

    /// The identity a new connection starts with: the default user when no
    /// password is needed, else none.
    pub fn initial(&self) -> Option<Identity> {
        (!self.require_auth()).then(|| Identity {
            user: DEFAULT_USER.into(),
            role: Role::ReadWrite,
        })
    }

    /// Whether the default user has a password (AUTH with one argument
    /// means it).
    pub fn default_has_password(&self) -> bool {
        self.users
            .iter()
            .any(|u| u.name == DEFAULT_USER && u.hash.is_some())
    }

    /// SHA-256 of the process's key and `password`.
    fn digest(&self, password: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update(password);
        h.finalize().into()
    }

    /// Checks `password` for `user`: the identity it grants, or `None`.
    /// The password that passed before is recognized by its digest; any
    /// other costs an Argon2id hash, off the async workers, a few at a time.
    pub async fn check(&self, user: &[u8], password: &[u8]) -> Option<Identity> {
        let u = self.users.iter().find(|u| u.name.as_bytes() == user)?;
        let identity = Identity {
            user: u.name.clone(),
            role: u.role,
        };
        let Some(stored) = u.hash.clone() else {
            // The default user without a password takes any, as Redis's
            // `nopass` user does.
            return Some(identity);
        };
        let digest = self.digest(password);
        let known = || {
            u.verified
                .get()
                .is_some_and(|k| bool::from(k.ct_eq(&digest)))
        };
        if known() {
            return Some(identity);
        }
        let _permit = self.checks.clone().acquire_owned().await.ok()?;
        // Many clients connecting at once all wait here the first time:
        // the first check to pass lets the rest through.
        if known() {
            return Some(identity);
        }
        let password = password.to_vec();
        let ok = tokio::task::spawn_blocking(move || {
            PasswordHash::new(&stored)
                .is_ok_and(|h| Argon2::default().verify_password(&password, &h).is_ok())
        })
        .await
        .unwrap_or(false);
        if ok {
            // Only the one password can pass, so a race sets the same value.
            let _ = u.verified.set(digest);
        }
        ok.then_some(identity)
    }
}

/// Who a connection is, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub role: Role,
}

/// Commands a connection may run before it authenticates.
pub fn allowed_before_auth(name: &[u8]) -> bool {
    ["AUTH", "HELLO", "QUIT"]
        .iter()
        .any(|c| name.eq_ignore_ascii_case(c.as_bytes()))
}

/// Commands that change nothing stored, which a read-only user may run.
/// A command not listed is refused to it, new ones included.
const READ_ONLY: &[&str] = &[
    "GET",
    "MGET",
    "EXISTS",
    "STRLEN",
    "GETRANGE",
    "SUBSTR",
    "TTL",
    "PTTL",
    "EXPIRETIME",
    "PEXPIRETIME",
    "TYPE",
    "KEYS",
    "SCAN",
    "RANGE",
    "DBSIZE",
    "RANDOMKEY",
    "INFO",
    "PING",
    "ECHO",
    "HELLO",
    "AUTH",
    "CLIENT",
    "COMMAND",
    "SELECT",
    "QUIT",
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "ACL",
    "ROLE",
];

// REPLICAOF and SLAVEOF change no data, but they make a follower the
// store's writer: not for a read-only user (they are not in READ_ONLY),
// and not refused on a follower, where they are how it takes over.

/// Whether `args` may run for a read-only user: a command of `READ_ONLY`,
/// or CONFIG GET.
pub fn is_read_only(args: crate::resp::parser::Args<'_>) -> bool {
    let name = &args[0];
    if name.eq_ignore_ascii_case(b"CONFIG") {
        return args.len() > 1 && args[1].eq_ignore_ascii_case(b"GET");
    }
    READ_ONLY
        .iter()
        .any(|c| name.eq_ignore_ascii_case(c.as_bytes()))
}

/// Whether `args` would change what is stored: refused on a follower.
/// Commands that change only the server's settings (CONFIG SET) or its
/// script cache (SCRIPT LOAD) run there as on a Redis replica, and
/// REPLICAOF NO ONE makes it the writer.
pub fn writes_data(args: crate::resp::parser::Args<'_>) -> bool {
    let name = &args[0];
    !is_read_only(args)
        && !["CONFIG", "SCRIPT", "REPLICAOF", "SLAVEOF"]
            .iter()
            .any(|c| name.eq_ignore_ascii_case(c.as_bytes()))
}

/// The refusal for running `args` as `identity` (`None`: not
/// authenticated), if it may not: NOAUTH before AUTH, READONLY for a
/// write on a `follower`, NOPERM for a read-only user's write.
pub fn refusal(
    identity: Option<&Identity>,
    args: crate::resp::parser::Args<'_>,
    follower: bool,
) -> Option<crate::resp::reply::Reply> {
    use crate::resp::reply::Reply;
    match identity {
        None if allowed_before_auth(&args[0]) => None,
        None => Some(Reply::coded("NOAUTH", "Authentication required.")),
        Some(_) if follower && writes_data(args) => Some(Reply::coded(
            "READONLY",
            "You can't write against a read only replica.",
        )),
        Some(id) if id.role == Role::ReadOnly && !is_read_only(args) => Some(Reply::coded(
            "NOPERM",
            format!(
                "User {} has no permissions to run the '{}' command",
                id.user,
                String::from_utf8_lossy(&args[0]).to_ascii_lowercase()
            ),
        )),
        Some(_) => None,
    }
}

/// Whether a listener on `addr` (host:port) is reached from this machine
/// only: every address the host names is a loopback one.
pub fn is_loopback(addr: &str) -> bool {
    let Ok(mut addrs) = addr.to_socket_addrs() else {
        return false;
    };
    addrs.all(|a| match a.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::parser::Args;

    fn args(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[tokio::test]
    async fn passwords_are_checked_against_their_hashes() {
        let users = Users::new(
            Some("s3cret"),
            &["reader:read-only:rpw".into(), "writer:rw:a:b".into()],
        )
        .unwrap();
        assert!(users.require_auth() && users.default_has_password());
        assert_eq!(users.initial(), None);
        let id = |user: &str, role| {
            Some(Identity {
                user: user.into(),
                role,
            })
        };
        assert_eq!(
            users.check(b"default", b"s3cret").await,
            id("default", Role::ReadWrite)
        );
        assert_eq!(users.check(b"default", b"s3cret ").await, None);
        assert_eq!(
            users.check(b"reader", b"rpw").await,
            id("reader", Role::ReadOnly)
        );
        assert_eq!(users.check(b"reader", b"s3cret").await, None);
        // The password is everything after the role, colons included.
        assert_eq!(
            users.check(b"writer", b"a:b").await,
            id("writer", Role::ReadWrite)
        );
        assert_eq!(users.check(b"nobody", b"rpw").await, None);
        // Kept hashed: no password appears in what is stored.
        for u in &users.users {
            let h = u.hash.as_deref().unwrap();
            assert!(h.starts_with("$argon2id$"), "{h}");
            assert!(!h.contains("s3cret") && !h.contains("rpw"));
        }
        assert!(!format!("{users:?}").contains("argon2"));
    }

    #[tokio::test]
    async fn a_password_that_passed_is_known_by_its_digest_and_no_other_is() {
        let users = Users::new(Some("s3cret"), &["reader:read-only:rpw".into()]).unwrap();
        let default = &users.users[0];
        assert!(default.verified.get().is_none());
        // A wrong password leaves nothing behind.
        assert_eq!(users.check(b"default", b"wrong").await, None);
        assert!(default.verified.get().is_none());
        assert!(users.check(b"default", b"s3cret").await.is_some());
        assert_eq!(default.verified.get(), Some(&users.digest(b"s3cret")));
        // Answered from the digest: with every hashing permit taken, a
        // check that hashed would wait forever.
        let held = users
            .checks
            .clone()
            .acquire_many_owned(MAX_CHECKS_AT_ONCE as u32)
            .await;
        let quick = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            users.check(b"default", b"s3cret"),
        )
        .await;
        assert!(quick.expect("checked without hashing").is_some());
        // Any other password, and the other user's, still go to the hash.
        for (user, password) in [(&b"default"[..], &b"s3cret "[..]), (b"reader", b"rpw")] {
            let slow = tokio::time::timeout(
                std::time::Duration::from_millis(200),
                users.check(user, password),
            )
            .await;
            assert!(slow.is_err(), "{password:?} was not hashed");
        }
        drop(held);
        assert!(users.check(b"reader", b"rpw").await.is_some());
        // Digests are keyed: another server's differ.
        let other = Users::new(Some("s3cret"), &[]).unwrap();
        assert_ne!(other.digest(b"s3cret"), users.digest(b"s3cret"));
    }

    #[tokio::test]
    async fn without_passwords_everyone_is_the_default_user() {
        let users = Users::new(None, &[]).unwrap();
        assert!(!users.require_auth() && !users.default_has_password());
        let default = Identity {
            user: DEFAULT_USER.into(),
            role: Role::ReadWrite,
        };
        assert_eq!(users.initial(), Some(default.clone()));
        assert_eq!(users.check(b"default", b"anything").await, Some(default));
        assert_eq!(users.check(b"someone", b"anything").await, None);
        // Named users without a default password: the default user is gone.
        let users = Users::new(None, &["app:rw:pw".into()]).unwrap();
        assert!(users.require_auth() && !users.default_has_password());
        assert_eq!(users.check(b"default", b"").await, None);
    }

    #[test]
    fn bad_user_specs_are_refused() {
        let bad = |spec: &str| Users::new(None, &[spec.to_string()]).unwrap_err();
        assert!(matches!(bad("app:admin:pw"), UserError::BadSpec(_)));
        assert!(matches!(bad("app:rw"), UserError::BadSpec(_)));
        assert_eq!(bad("app:rw:"), UserError::EmptyPassword);
        assert!(matches!(bad("a b:rw:pw"), UserError::BadName(_)));
        assert!(matches!(bad(":rw:pw"), UserError::BadName(_)));
        assert_eq!(
            Users::new(Some(""), &[]).unwrap_err(),
            UserError::EmptyPassword
        );
        assert!(matches!(
            Users::new(None, &["a:rw:x".into(), "a:ro:y".into()]).unwrap_err(),
            UserError::Duplicate(_)
        ));
    }

    #[test]
    fn read_only_users_run_only_what_changes_nothing() {
        let ro = |v: &[&str]| is_read_only(Args::Owned(&args(v)));
        assert!(ro(&["get", "k"]) && ro(&["SCAN", "0"]) && ro(&["config", "get", "maxclients"]));
        assert!(!ro(&["SET", "k", "v"]) && !ro(&["del", "k"]) && !ro(&["FLUSHDB"]));
        assert!(!ro(&["CONFIG", "SET", "x", "y"]) && !ro(&["CONFIG"]) && !ro(&["EVALSHA", "x"]));
        assert!(!ro(&["NOSUCHCOMMAND"]));
        assert!(allowed_before_auth(b"auth") && allowed_before_auth(b"HELLO"));
        assert!(!allowed_before_auth(b"GET"));
    }

    #[test]
    fn loopback_addresses_are_told_apart() {
        for a in [
            "127.0.0.1:6380",
            "[::1]:6380",
            "localhost:6380",
            "127.3.2.1:1",
        ] {
            assert!(is_loopback(a), "{a}");
        }
        for a in [
            "0.0.0.0:6380",
            "[::]:6380",
            "10.1.2.3:6380",
            "no-such-host.invalid:1",
        ] {
            assert!(!is_loopback(a), "{a}");
        }
    }
}
