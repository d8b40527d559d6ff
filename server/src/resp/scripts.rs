//! EVAL, EVALSHA and SCRIPT, for the scripts kivi knows and no others.
//!
//! kivi runs no Lua. But redis-py's `Lock` (what most Python programs use
//! for a distributed lock) releases, extends and reacquires its lock with
//! three short scripts, sent by their SHA-1 (EVALSHA) and loaded on demand
//! (SCRIPT LOAD). kivi recognizes those three by their SHA-1 and does what
//! each does as one transaction of one command (see transaction.rs), so it
//! is as atomic as the script is in Redis. Any other script gets NOSCRIPT
//! for EVALSHA and an error saying so for EVAL and SCRIPT LOAD. The scripts'
//! text has been the same from redis-py 4 to 8.

use super::commands;
use super::reply::Reply;
use sha1::{Digest, Sha1};

/// What a known script does, as the command the transaction evaluator runs
/// for it (these names are not commands a client can send: `execute`
/// refuses them as unknown before they could reach the evaluator).
pub const LOCK_RELEASE: &str = "\0LOCK-RELEASE";
pub const LOCK_EXTEND: &str = "\0LOCK-EXTEND";
pub const LOCK_REACQUIRE: &str = "\0LOCK-REACQUIRE";

/// The scripts kivi knows: SHA-1 of the text, what it does, and its keys
/// and arguments. (Release: delete the key if it holds the token. Extend:
/// if it holds the token and has a deadline, move the deadline by ARGV[2]
/// ms, or to ARGV[2] ms from now if ARGV[3] is not "0". Reacquire: if it
/// holds the token, set its deadline ARGV[2] ms from now.)
const KNOWN: &[(&str, &str, usize, usize)] = &[
    (
        "c3f8721cbb97f72bc19e972846bd7aaf91901658",
        LOCK_RELEASE,
        1,
        1,
    ),
    (
        "a4e8783852e6b949f9ef3a97212805108459a890",
        LOCK_EXTEND,
        1,
        3,
    ),
    (
        "1cac51482acf5858da00f6d685d68f886cd6b6b2",
        LOCK_REACQUIRE,
        1,
        2,
    ),
];

fn sha1_hex(text: &[u8]) -> String {
    hex::encode(Sha1::digest(text))
}

fn known(sha: &[u8]) -> Option<(&'static str, usize, usize)> {
    let sha = std::str::from_utf8(sha).ok()?.to_ascii_lowercase();
    KNOWN
        .iter()
        .find(|(s, ..)| *s == sha)
        .map(|&(_, c, k, a)| (c, k, a))
}

fn runs_no_lua() -> Reply {
    Reply::err(
        "kivi runs no Lua scripts; it knows only the lock scripts of redis-py \
         (release, extend, reacquire)",
    )
}

/// EVALSHA sha numkeys key... arg... and EVAL script numkeys ...: the
/// command to run for a known script, or the reply refusing it.
pub fn command_for(args: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, Reply> {
    let eval = args[0].eq_ignore_ascii_case(b"EVAL");
    let sha = if eval {
        sha1_hex(&args[1]).into_bytes()
    } else {
        args[1].clone()
    };
    let Some((command, keys, argv)) = known(&sha) else {
        return Err(if eval {
            runs_no_lua()
        } else {
            Reply::coded("NOSCRIPT", "No matching script. Please use EVAL.")
        });
    };
    let n = commands::parse_i64(&args[2]).ok_or_else(commands::not_an_integer)?;
    let rest = &args[3..];
    if n < 0 || n as usize > rest.len() {
        return Err(Reply::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    if n as usize != keys || rest.len() != keys + argv {
        return Err(Reply::err(
            "wrong number of keys or arguments for this script",
        ));
    }
    let mut cmd = vec![command.as_bytes().to_vec()];
    cmd.extend(rest.iter().cloned());
    Ok(cmd)
}

/// SCRIPT LOAD / EXISTS / FLUSH.
pub fn script(args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
    match (sub.as_str(), args.len()) {
        ("LOAD", 3) => {
            let sha = sha1_hex(&args[2]);
            match known(sha.as_bytes()) {
                Some(_) => Ok(Reply::bulk(sha.into_bytes())),
                None => Err(runs_no_lua()),
            }
        }
        ("EXISTS", n) if n >= 3 => Ok(Reply::Array(
            args[2..]
                .iter()
                .map(|s| Reply::Int(i64::from(known(s).is_some())))
                .collect(),
        )),
        // Nothing is cached, so there is nothing to flush.
        ("FLUSH", 2 | 3) => Ok(Reply::ok()),
        _ => Err(Reply::err(format!(
            "unknown subcommand or wrong number of arguments for 'script|{}'",
            sub.to_ascii_lowercase()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// redis-py's `Lock.LUA_RELEASE_SCRIPT`, as sent by SCRIPT LOAD.
    const RELEASE: &str = "\n        local token = redis.call('get', KEYS[1])\n        if not token or token ~= ARGV[1] then\n            return 0\n        end\n        redis.call('del', KEYS[1])\n        return 1\n    ";

    fn args(a: &[&str]) -> Vec<Vec<u8>> {
        a.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn known_scripts_are_recognized_by_their_text_and_their_sha() {
        let loaded = script(&args(&["SCRIPT", "LOAD", RELEASE])).unwrap();
        assert_eq!(
            loaded,
            Reply::bulk(b"c3f8721cbb97f72bc19e972846bd7aaf91901658".to_vec())
        );
        let cmd = command_for(&args(&["EVAL", RELEASE, "1", "lock", "token"])).unwrap();
        assert_eq!(cmd, args(&[LOCK_RELEASE, "lock", "token"]));
        let by_sha = command_for(&args(&[
            "evalsha",
            "C3F8721CBB97F72BC19E972846BD7AAF91901658",
            "1",
            "lock",
            "token",
        ]))
        .unwrap();
        assert_eq!(by_sha, cmd);
        // The wrong shape of keys and arguments is refused.
        assert!(command_for(&args(&["EVAL", RELEASE, "2", "a", "b"])).is_err());
        assert!(command_for(&args(&["EVAL", RELEASE, "5", "a"])).is_err());
    }

    #[test]
    fn other_scripts_are_refused() {
        let other = "return redis.call('get', KEYS[1])";
        assert!(matches!(
            command_for(&args(&["EVAL", other, "1", "k"])),
            Err(Reply::Error(e)) if e.contains("no Lua")
        ));
        assert!(matches!(
            command_for(&args(&["EVALSHA", "0000", "0"])),
            Err(Reply::Error(e)) if e.starts_with("NOSCRIPT")
        ));
        assert!(script(&args(&["SCRIPT", "LOAD", other])).is_err());
        assert_eq!(
            script(&args(&[
                "SCRIPT",
                "EXISTS",
                "c3f8721cbb97f72bc19e972846bd7aaf91901658",
                "0000"
            ]))
            .unwrap(),
            Reply::Array(vec![Reply::Int(1), Reply::Int(0)])
        );
    }
}
