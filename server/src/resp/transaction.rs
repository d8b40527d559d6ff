//! MULTI / EXEC / DISCARD / WATCH / UNWATCH: Redis transactions on the
//! engine's conditional batches, with no lock that stops other clients.
//!
//! After MULTI a connection's commands are checked (known, right arity,
//! allowed in a transaction) and queued; one that is not makes EXEC answer
//! EXECABORT and apply nothing. EXEC evaluates the queue against one
//! snapshot plus the transaction's own writes, then commits every write as
//! one batch guarded by conditions: each watched key still holds what it
//! held at WATCH, and each key the transaction read before writing still
//! holds what it read. A watched key that changed answers nil (Redis's
//! "aborted by WATCH"); a read key that changed means another client wrote
//! between the snapshot and the commit, and the whole evaluation is made
//! again on a newer snapshot. So the writes are one atomic, durable commit
//! and the replies are those of running the queue alone at that commit.
//!
//! Unlike Redis, WATCH compares values and deadlines (by SHA-256, so a
//! connection holds 32 bytes per watched key, not the value): a key set back
//! to the value and deadline it had at WATCH counts as unchanged. A key that
//! expired since, or whose deadline changed, has changed.
//!
//! Values carry their deadlines through every command as Redis's do: SET,
//! GETSET and MSET write values that never expire (unless SET says
//! otherwise), the commands that change a value in place (INCR, APPEND,
//! SETRANGE, ...) keep its deadline, RENAME and COPY carry it to the new
//! key. A whole evaluation decides expiry at one moment.

use super::commands::{self, Arity};
use super::parser::Args;
use super::reply::Reply;
use super::scripts;
use crate::Shared;
use kivi::limits::{MAX_BATCH_BYTES, MAX_KEY_LEN, MAX_VALUE_LEN};
use kivi::{Deadline, Snapshot, WriteBatch, WriteOutcome};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};

/// Commands one transaction may queue, at most.
pub const MAX_QUEUED_COMMANDS: usize = 100_000;
/// Bytes of arguments one transaction may queue, at most (its writes must
/// fit one batch anyway).
pub const MAX_QUEUED_BYTES: usize = MAX_BATCH_BYTES;
/// Keys one connection may watch, at most.
pub const MAX_WATCHED_KEYS: usize = 10_000;
/// Evaluations of one EXEC before it gives up (each retry means another
/// client wrote a key the transaction read, between its read and commit).
const MAX_RETRIES: usize = 1000;

/// The commands a transaction may hold: the ones whose effect is on named
/// keys, which EXEC can evaluate over its snapshot.
const QUEUEABLE: &[&str] = &[
    "SET",
    "SETNX",
    "MSET",
    "CAS",
    "CAD",
    "GET",
    "STRLEN",
    "EXISTS",
    "MGET",
    "GETDEL",
    "DEL",
    "INCR",
    "DECR",
    "INCRBY",
    "DECRBY",
    "PING",
    "ECHO",
    "GETSET",
    "APPEND",
    "GETRANGE",
    "SUBSTR",
    "SETRANGE",
    "MSETNX",
    "UNLINK",
    "TOUCH",
    "COPY",
    "RENAME",
    "RENAMENX",
    "TYPE",
    "INCRBYFLOAT",
    "SETEX",
    "PSETEX",
    "GETEX",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "TTL",
    "PTTL",
    "EXPIRETIME",
    "PEXPIRETIME",
    "PERSIST",
];

/// A value and its deadline (milliseconds since the Unix epoch; `None`:
/// it never expires).
pub type Held = (Vec<u8>, Option<u64>);

/// A connection's open transaction.
#[derive(Debug, Default)]
pub struct Transaction {
    queued: Vec<Vec<Vec<u8>>>,
    bytes: usize,
    /// A command was refused while queuing: EXEC applies nothing.
    aborted: bool,
}

/// A watched key and the digest of its value and deadline at WATCH
/// (`None`: absent).
pub type Watched = (Vec<u8>, Option<[u8; 32]>);

fn digest((v, deadline): &Held) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(v);
    h.update(deadline.unwrap_or(0).to_le_bytes());
    h.finalize().into()
}

/// A value and its deadline as the engine gives them.
fn held(found: Option<(Vec<u8>, Option<Deadline>)>) -> Option<Held> {
    found.map(|(v, d)| (v, d.map(Deadline::unix_millis)))
}

/// The commands that act on the transaction itself rather than being
/// queued by it.
pub fn controls_transaction(name: &[u8]) -> bool {
    ["EXEC", "DISCARD", "MULTI", "WATCH", "QUIT"]
        .iter()
        .any(|c| name.eq_ignore_ascii_case(c.as_bytes()))
}

/// Marks the open transaction aborted (a command was refused while it was
/// queuing): EXEC will apply nothing.
pub fn abort(tx: &mut Transaction) {
    tx.aborted = true;
}

/// Queues `args` in the open transaction and answers QUEUED, or refuses it
/// (and marks the transaction aborted).
pub fn queue(tx: &mut Transaction, args: Vec<Vec<u8>>) -> Reply {
    let name = commands::upper_name(&args[0]);
    let refused = match commands::arity(name.as_bytes()) {
        None => Some(commands::unknown(&args)),
        Some(a) if !a.allows(args.len()) => Some(commands::wrong_args(&name)),
        Some(_) if !QUEUEABLE.contains(&&*name) => Some(Reply::err(format!(
            "'{}' is not supported inside MULTI by kivi",
            name.to_ascii_lowercase()
        ))),
        Some(_) => None,
    };
    let bytes: usize = args.iter().map(|a| a.len()).sum();
    drop(name);
    let refused = refused.or_else(|| {
        (tx.queued.len() >= MAX_QUEUED_COMMANDS || tx.bytes + bytes > MAX_QUEUED_BYTES).then(|| {
            Reply::err(format!(
                "transaction too large (at most {MAX_QUEUED_COMMANDS} commands and \
                 {MAX_QUEUED_BYTES} bytes)"
            ))
        })
    });
    if let Some(r) = refused {
        tx.aborted = true;
        return r;
    }
    tx.bytes += bytes;
    tx.queued.push(args);
    Reply::Simple("QUEUED")
}

/// WATCH key...: notes what each key holds now (the caller has answered
/// the connection's earlier writes, so they are seen).
pub fn watch(
    shared: &Shared,
    watched: &mut Vec<Watched>,
    keys: &[Vec<u8>],
) -> Result<Reply, Reply> {
    for k in keys {
        if watched.iter().any(|(w, _)| w == k) {
            continue;
        }
        if watched.len() >= MAX_WATCHED_KEYS {
            return Err(Reply::err(format!(
                "too many watched keys (at most {MAX_WATCHED_KEYS})"
            )));
        }
        let v = shared
            .db
            .get_with_deadline(k)
            .map_err(|e| Reply::err(e.to_string()))?;
        watched.push((k.clone(), held(v).as_ref().map(digest)));
    }
    Ok(Reply::ok())
}

/// What one evaluation of a transaction decided.
enum Evaluated {
    /// A watched key changed: EXEC answers nil.
    WatchFailed,
    /// Nothing to write: the replies are the answer.
    ReadOnly(Vec<Reply>),
    /// Commit this batch; its first `watch_ops` operations guard the
    /// watched keys.
    Write {
        batch: WriteBatch,
        watch_ops: usize,
        replies: Vec<Reply>,
    },
}

/// EXEC: runs the queue as one atomic commit (see the module's comment).
pub async fn exec(shared: &Shared, tx: Transaction, watched: Vec<Watched>) -> Reply {
    if tx.aborted {
        return Reply::coded(
            "EXECABORT",
            "Transaction discarded because of previous errors.",
        );
    }
    match run(shared, &tx.queued, &watched).await {
        Ok(replies) => {
            count_lookups(shared, &tx.queued, &replies);
            Reply::Array(replies)
        }
        Err(e) => e,
    }
}

/// The keyspace hits and misses of the GETs and MGETs of a transaction
/// that ran, from their replies (counted once, whatever the retries).
fn count_lookups(shared: &Shared, queued: &[Vec<Vec<u8>>], replies: &[Reply]) {
    let mut note = |r: &Reply| match r {
        Reply::Bulk(_) => shared.counters.note_lookup(true),
        Reply::Null => shared.counters.note_lookup(false),
        _ => {}
    };
    for (args, reply) in queued.iter().zip(replies) {
        if args[0].eq_ignore_ascii_case(b"GET") {
            note(reply);
        } else if let (true, Reply::Array(items)) = (args[0].eq_ignore_ascii_case(b"MGET"), reply) {
            items.iter().for_each(&mut note);
        }
    }
}

/// A command that reads and then writes (INCR, DEL's count, SET ... GET,
/// GETDEL), outside a transaction: a transaction of one, so that it writes
/// only if what it read is unchanged, and is evaluated again if not.
pub async fn run_alone(shared: &Shared, args: Vec<Vec<u8>>) -> Reply {
    let queued = [args];
    match run(shared, &queued, &[]).await {
        Ok(mut replies) => {
            debug_assert_eq!(replies.len(), 1);
            replies.pop().unwrap_or(Reply::Null)
        }
        Err(e) => e,
    }
}

/// Evaluates and commits `queued`: each command's reply, or the reply for
/// the whole (nil when a watched key changed, or an error).
async fn run(
    shared: &Shared,
    queued: &[Vec<Vec<u8>>],
    watched: &[Watched],
) -> Result<Vec<Reply>, Reply> {
    for _ in 0..MAX_RETRIES {
        // The snapshot is dropped before the commit is awaited.
        let now = shared.db.clock().now_millis();
        let evaluated = evaluate(&shared.db.snapshot(), now, queued, watched)?;
        let (batch, watch_ops, replies) = match evaluated {
            Evaluated::WatchFailed => return Err(Reply::Null),
            Evaluated::ReadOnly(replies) => return Ok(replies),
            Evaluated::Write {
                batch,
                watch_ops,
                replies,
            } => (batch, watch_ops, replies),
        };
        match commands::write(shared, batch).await {
            Ok(WriteOutcome::Applied) => return Ok(replies),
            Ok(WriteOutcome::ConditionFailed { op }) if op < watch_ops => return Err(Reply::Null),
            Ok(WriteOutcome::ConditionFailed { .. }) => continue,
            Err(e) => return Err(commands::refused(e)),
        }
    }
    Err(Reply::err("the keys changed under every retry; try again"))
}

/// A guard that holds only if `key` still holds `old`, deadline included
/// (or is still absent, an expired key counting as absent). The engine has
/// no "is absent" condition on its own: a placeholder is inserted only if
/// absent, then deleted (later operations of the batch override both).
fn guard(b: &mut WriteBatch, key: &[u8], old: &Option<Held>) -> kivi::Result<()> {
    match old {
        Some((v, d)) => {
            let d = d.map(Deadline::from_unix_millis);
            b.compare_and_swap(key.to_vec(), v.clone(), v.clone())?
                .if_deadline(d)?
                .with_deadline(d)?
        }
        None => b
            .insert_if_absent(key.to_vec(), Vec::new())?
            .delete(key.to_vec())?,
    };
    Ok(())
}

/// Reads `key` from the snapshot as of `now`.
fn read(snap: &Snapshot, now: u64, key: &[u8]) -> Result<Option<Held>, Reply> {
    let found = snap
        .get_with_deadline(key)
        .map_err(|e| Reply::err(e.to_string()))?;
    Ok(held(found).filter(|(_, d)| d.is_none_or(|d| now <= d)))
}

fn evaluate(
    snap: &Snapshot,
    now: u64,
    queued: &[Vec<Vec<u8>>],
    watched: &[Watched],
) -> Result<Evaluated, Reply> {
    let get = |k: &[u8]| read(snap, now, k);
    let mut b = WriteBatch::new();
    let too_large = |e: kivi::Error| Reply::err(format!("transaction refused: {e}"));
    let mut guarded: HashSet<&[u8]> = HashSet::new();
    for (k, d) in watched {
        let current = get(k)?;
        if current.as_ref().map(digest) != *d {
            return Ok(Evaluated::WatchFailed);
        }
        guard(&mut b, k, &current).map_err(too_large)?;
        guarded.insert(k);
    }
    let watch_ops = b.len();
    let mut state = State {
        snap,
        now,
        seen: HashMap::new(),
        read: Vec::new(),
        writes: Vec::new(),
    };
    let replies: Vec<Reply> = queued
        .iter()
        .map(|args| state.run(args).unwrap_or_else(|e| e))
        .collect();
    if state.writes.is_empty() {
        return Ok(Evaluated::ReadOnly(replies));
    }
    for (k, old) in &state.read {
        if !guarded.contains(k) {
            guard(&mut b, k, old).map_err(too_large)?;
        }
    }
    for (k, v) in state.writes {
        match v {
            Some((v, d)) => b
                .put(k, v)
                .and_then(|b| b.with_deadline(d.map(Deadline::from_unix_millis))),
            None => b.delete(k),
        }
        .map_err(too_large)?;
    }
    Ok(Evaluated::Write {
        batch: b,
        watch_ops,
        replies,
    })
}

/// The store as the transaction sees it: the snapshot under its own writes,
/// at one moment.
/// Where a key's newest value in a transaction lies: what it read, or its
/// latest write.
#[derive(Clone, Copy)]
enum At {
    Read(usize),
    Write(usize),
}

struct State<'a, 'q> {
    snap: &'a Snapshot,
    /// The moment expiry is decided at (milliseconds since the Unix epoch).
    now: u64,
    /// Each key's value after the transaction's writes so far (and every
    /// key read, as read). Keys are borrowed from the queued commands, and
    /// values are not copied: a transaction of SETs copies each key and
    /// value once, into the batch.
    seen: HashMap<&'q [u8], At>,
    /// Keys read from the snapshot before the transaction wrote them, and
    /// what they held: the commit's guards.
    read: Vec<(&'q [u8], Option<Held>)>,
    writes: Vec<(&'q [u8], Option<Held>)>,
}

impl<'q> State<'_, 'q> {
    /// The value under `key` and its deadline, unless expired.
    fn get_held(&mut self, key: &'q [u8]) -> Result<Option<Held>, Reply> {
        let now = self.now;
        let live = |v: &Option<Held>| v.clone().filter(|(_, d)| d.is_none_or(|d| now <= d));
        match self.seen.get(key) {
            Some(&At::Read(i)) => return Ok(live(&self.read[i].1)),
            Some(&At::Write(i)) => return Ok(live(&self.writes[i].1)),
            None => {}
        }
        let v = read(self.snap, now, key)?;
        self.seen.insert(key, At::Read(self.read.len()));
        self.read.push((key, v.clone()));
        Ok(v)
    }

    fn get(&mut self, key: &'q [u8]) -> Result<Option<Vec<u8>>, Reply> {
        Ok(self.get_held(key)?.map(|(v, _)| v))
    }

    /// Writes `key` (`None`: deletes it).
    fn set_held(&mut self, key: &'q [u8], value: Option<Held>) {
        self.seen.insert(key, At::Write(self.writes.len()));
        self.writes.push((key, value));
    }

    /// Writes a value that never expires (`None`: deletes the key).
    fn set(&mut self, key: &'q [u8], value: Option<Vec<u8>>) {
        self.set_held(key, value.map(|v| (v, None)));
    }

    /// Writes a value in place of the one under `key`, keeping its deadline.
    fn replace(&mut self, key: &'q [u8], value: Vec<u8>) -> Result<(), Reply> {
        let deadline = self.get_held(key)?.and_then(|(_, d)| d);
        self.set_held(key, Some((value, deadline)));
        Ok(())
    }

    /// The remaining life of `key` as TTL and its kin answer it: -2 when
    /// absent, -1 without a deadline, else `of(deadline)`.
    fn life(&mut self, key: &'q [u8], of: impl Fn(u64) -> i64) -> Result<Reply, Reply> {
        Ok(Reply::Int(match self.get_held(key)? {
            None => -2,
            Some((_, None)) => -1,
            Some((_, Some(d))) => of(d),
        }))
    }

    /// One queued command: its reply, or its error (which, as in Redis,
    /// does not stop the others).
    fn run(&mut self, args: &'q [Vec<u8>]) -> Result<Reply, Reply> {
        let name = commands::upper_name(&args[0]);
        debug_assert!(
            name.starts_with('\0')
                || commands::arity(name.as_bytes()).is_some_and(|a: Arity| a.allows(args.len()))
        );
        // The engine's own errors for what a batch would refuse.
        if let Some(k) = keys_of(&name, args).find(|k| k.len() > MAX_KEY_LEN) {
            return Err(commands::refused(kivi::Error::KeyTooLarge {
                len: k.len(),
                max: MAX_KEY_LEN,
            }));
        }
        let value_ok = |v: &[u8]| {
            if v.len() > MAX_VALUE_LEN {
                Err(commands::refused(kivi::Error::ValueTooLarge {
                    len: v.len(),
                    max: MAX_VALUE_LEN,
                }))
            } else {
                Ok(())
            }
        };
        let bulk_or_nil = |v: Option<Vec<u8>>| v.map_or(Reply::Null, Reply::Bulk);
        match &*name {
            "PING" if args.len() == 1 => Ok(Reply::Simple("PONG")),
            "PING" | "ECHO" => Ok(Reply::bulk(args[1].clone())),
            "GET" => self.get(&args[1]).map(bulk_or_nil),
            "STRLEN" => Ok(Reply::Int(
                self.get(&args[1])?.map_or(0, |v| v.len() as i64),
            )),
            "EXISTS" => {
                let mut n = 0;
                for k in &args[1..] {
                    n += i64::from(self.get(k)?.is_some());
                }
                Ok(Reply::Int(n))
            }
            "MGET" => args[1..]
                .iter()
                .map(|k| self.get(k).map(bulk_or_nil))
                .collect::<Result<Vec<_>, _>>()
                .map(Reply::Array),
            "SET" => {
                let o = commands::set_options(Args::Owned(&args[3..]), self.now)?;
                value_ok(&args[2])?;
                // A plain SET reads nothing, so it adds no condition.
                let keep = matches!(o.ttl, commands::Ttl::Keep);
                let old = if o.nx || o.xx || o.get || keep {
                    self.get_held(&args[1])?
                } else {
                    None
                };
                let applies = !(o.nx && old.is_some() || o.xx && old.is_none());
                if applies {
                    let deadline = match o.ttl {
                        commands::Ttl::Never => None,
                        commands::Ttl::Keep => old.as_ref().and_then(|(_, d)| *d),
                        commands::Ttl::At(d) => Some(d),
                    };
                    self.set_held(&args[1], Some((args[2].clone(), deadline)));
                }
                Ok(match (o.get, applies) {
                    (true, _) => bulk_or_nil(old.map(|(v, _)| v)),
                    (false, true) => Reply::ok(),
                    (false, false) => Reply::Null,
                })
            }
            "SETEX" | "PSETEX" => {
                let unit = if name == "SETEX" { 1000 } else { 1 };
                let deadline = commands::deadline_after(&args[2], unit, self.now, &name)?;
                value_ok(&args[3])?;
                self.set_held(&args[1], Some((args[3].clone(), Some(deadline))));
                Ok(Reply::ok())
            }
            "GETEX" => {
                let change = commands::getex_option(&args[2..], self.now)?;
                let Some((v, _)) = self.get_held(&args[1])? else {
                    return Ok(Reply::Null);
                };
                if let Some(deadline) = change {
                    if deadline.is_some_and(|d| d <= self.now) {
                        self.set(&args[1], None);
                    } else {
                        self.set_held(&args[1], Some((v.clone(), deadline)));
                    }
                }
                Ok(Reply::Bulk(v))
            }
            "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" => {
                let when = commands::expire_deadline(&name, &args[2], self.now)?;
                let flags = commands::expire_flags(&args[3..])?;
                let Some((v, current)) = self.get_held(&args[1])? else {
                    return Ok(Reply::Int(0));
                };
                // No deadline counts as an infinite one for GT and LT.
                let refused = (flags.nx && current.is_some())
                    || (flags.xx && current.is_none())
                    || (flags.gt && current.is_none_or(|c| when <= i128::from(c)))
                    || (flags.lt && current.is_some_and(|c| when >= i128::from(c)));
                if refused {
                    return Ok(Reply::Int(0));
                }
                if when <= i128::from(self.now) {
                    self.set(&args[1], None);
                } else {
                    self.set_held(&args[1], Some((v, Some(when as u64))));
                }
                Ok(Reply::Int(1))
            }
            "PERSIST" => match self.get_held(&args[1])? {
                Some((v, Some(_))) => {
                    self.set_held(&args[1], Some((v, None)));
                    Ok(Reply::Int(1))
                }
                _ => Ok(Reply::Int(0)),
            },
            // Redis rounds seconds to the nearest (`(ms + 500) / 1000`).
            "TTL" => {
                let now = self.now;
                self.life(&args[1], |d| ((d.saturating_sub(now) + 500) / 1000) as i64)
            }
            "PTTL" => {
                let now = self.now;
                self.life(&args[1], |d| d.saturating_sub(now) as i64)
            }
            "EXPIRETIME" => self.life(&args[1], |d| (d.saturating_add(500) / 1000) as i64),
            "PEXPIRETIME" => self.life(&args[1], |d| d as i64),
            // redis-py's lock scripts (scripts.rs): key, token, ...
            scripts::LOCK_RELEASE | scripts::LOCK_EXTEND | scripts::LOCK_REACQUIRE => {
                let Some((v, deadline)) = self.get_held(&args[1])? else {
                    return Ok(Reply::Int(0));
                };
                if v != args[2] {
                    return Ok(Reply::Int(0));
                }
                if name == scripts::LOCK_RELEASE {
                    self.set(&args[1], None);
                    return Ok(Reply::Int(1));
                }
                let ms = commands::parse_i64(&args[3]).ok_or_else(commands::not_an_integer)?;
                let new = match (&*name, deadline) {
                    // A lock without a deadline is not extended.
                    (scripts::LOCK_EXTEND, None) => return Ok(Reply::Int(0)),
                    // Extend by `ms` (ARGV[3] "0"), or to `ms` from now.
                    (scripts::LOCK_EXTEND, Some(d)) if args[4] == b"0" => {
                        i128::from(d) + i128::from(ms)
                    }
                    _ => i128::from(self.now) + i128::from(ms),
                };
                if new <= i128::from(self.now) {
                    self.set(&args[1], None);
                } else {
                    let new = u64::try_from(new).map_err(|_| commands::not_an_integer())?;
                    self.set_held(&args[1], Some((v, Some(new))));
                }
                Ok(Reply::Int(1))
            }
            "SETNX" => {
                value_ok(&args[2])?;
                let absent = self.get(&args[1])?.is_none();
                if absent {
                    self.set(&args[1], Some(args[2].clone()));
                }
                Ok(Reply::Int(i64::from(absent)))
            }
            "MSET" => {
                for kv in args[1..].chunks(2) {
                    value_ok(&kv[1])?;
                }
                for kv in args[1..].chunks(2) {
                    self.set(&kv[0], Some(kv[1].clone()));
                }
                Ok(Reply::ok())
            }
            "CAS" => {
                value_ok(&args[3])?;
                let swap = self.get(&args[1])?.as_deref() == Some(args[2].as_slice());
                if swap {
                    self.set(&args[1], Some(args[3].clone()));
                }
                Ok(Reply::Int(i64::from(swap)))
            }
            "CAD" => {
                let matches = self.get(&args[1])?.as_deref() == Some(args[2].as_slice());
                if matches {
                    self.set(&args[1], None);
                }
                Ok(Reply::Int(i64::from(matches)))
            }
            "GETSET" => {
                value_ok(&args[2])?;
                let old = self.get(&args[1])?;
                self.set(&args[1], Some(args[2].clone()));
                Ok(bulk_or_nil(old))
            }
            "APPEND" => {
                let mut v = self.get(&args[1])?.unwrap_or_default();
                v.extend_from_slice(&args[2]);
                value_ok(&v)?;
                let len = v.len() as i64;
                self.replace(&args[1], v)?;
                Ok(Reply::Int(len))
            }
            "GETRANGE" | "SUBSTR" => {
                let (Some(start), Some(end)) =
                    (commands::parse_i64(&args[2]), commands::parse_i64(&args[3]))
                else {
                    return Err(commands::not_an_integer());
                };
                let v = self.get(&args[1])?.unwrap_or_default();
                Ok(Reply::Bulk(byte_range(&v, start, end).to_vec()))
            }
            "SETRANGE" => {
                let offset = commands::parse_i64(&args[2])
                    .and_then(|o| usize::try_from(o).ok())
                    .ok_or_else(|| Reply::err("offset is out of range"))?;
                let old = self.get(&args[1])?;
                if args[3].is_empty() {
                    // Redis writes nothing for an empty value.
                    return Ok(Reply::Int(old.map_or(0, |v| v.len() as i64)));
                }
                let end = offset.saturating_add(args[3].len());
                if end > MAX_VALUE_LEN {
                    return Err(Reply::err("string exceeds maximum allowed size"));
                }
                let mut v = old.unwrap_or_default();
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[offset..end].copy_from_slice(&args[3]);
                let len = v.len() as i64;
                self.replace(&args[1], v)?;
                Ok(Reply::Int(len))
            }
            "MSETNX" => {
                for kv in args[1..].chunks(2) {
                    value_ok(&kv[1])?;
                }
                for kv in args[1..].chunks(2) {
                    if self.get(&kv[0])?.is_some() {
                        return Ok(Reply::Int(0));
                    }
                }
                for kv in args[1..].chunks(2) {
                    self.set(&kv[0], Some(kv[1].clone()));
                }
                Ok(Reply::Int(1))
            }
            "TOUCH" => {
                let mut n = 0;
                for k in &args[1..] {
                    n += i64::from(self.get(k)?.is_some());
                }
                Ok(Reply::Int(n))
            }
            "TYPE" => Ok(Reply::Simple(match self.get(&args[1])? {
                Some(_) => "string",
                None => "none",
            })),
            "COPY" => {
                let mut replace = false;
                let mut rest = args[3..].iter();
                while let Some(a) = rest.next() {
                    if a.eq_ignore_ascii_case(b"REPLACE") {
                        replace = true;
                    } else if a.eq_ignore_ascii_case(b"DB") {
                        match rest.next().map(|d| commands::parse_i64(d)) {
                            Some(Some(0)) => {}
                            Some(Some(_)) => return Err(Reply::err("DB index is out of range")),
                            _ => return Err(commands::not_an_integer()),
                        }
                    } else {
                        return Err(Reply::err("syntax error"));
                    }
                }
                let Some(v) = self.get_held(&args[1])? else {
                    return Ok(Reply::Int(0));
                };
                if args[1] == args[2] {
                    return Err(Reply::err("source and destination objects are the same"));
                }
                if !replace && self.get(&args[2])?.is_some() {
                    return Ok(Reply::Int(0));
                }
                // The copy takes the deadline too, as in Redis.
                self.set_held(&args[2], Some(v));
                Ok(Reply::Int(1))
            }
            "RENAME" | "RENAMENX" => {
                let nx = name == "RENAMENX";
                let Some(v) = self.get_held(&args[1])? else {
                    return Err(Reply::err("no such key"));
                };
                if args[1] == args[2] {
                    return Ok(if nx { Reply::Int(0) } else { Reply::ok() });
                }
                if nx && self.get(&args[2])?.is_some() {
                    return Ok(Reply::Int(0));
                }
                self.set(&args[1], None);
                self.set_held(&args[2], Some(v));
                Ok(if nx { Reply::Int(1) } else { Reply::ok() })
            }
            "INCRBYFLOAT" => {
                let not_float = || Reply::err("value is not a valid float");
                let by = parse_f64(&args[2]).ok_or_else(not_float)?;
                let current = match self.get(&args[1])? {
                    None => 0.0,
                    Some(v) => parse_f64(&v).ok_or_else(not_float)?,
                };
                let new = current + by;
                if !new.is_finite() {
                    return Err(Reply::err("increment would produce NaN or Infinity"));
                }
                let text = format!("{new}").into_bytes();
                self.replace(&args[1], text.clone())?;
                Ok(Reply::Bulk(text))
            }
            "GETDEL" => {
                let old = self.get(&args[1])?;
                if old.is_some() {
                    self.set(&args[1], None);
                }
                Ok(bulk_or_nil(old))
            }
            "DEL" | "UNLINK" => {
                let mut n = 0;
                let mut seen: Vec<&[u8]> = Vec::new();
                for k in &args[1..] {
                    if seen.contains(&k.as_slice()) {
                        continue;
                    }
                    seen.push(k);
                    if self.get(k)?.is_some() {
                        self.set(k, None);
                        n += 1;
                    }
                }
                Ok(Reply::Int(n))
            }
            "INCR" | "DECR" | "INCRBY" | "DECRBY" => {
                let by = match &*name {
                    "INCR" => 1,
                    "DECR" => -1,
                    _ => {
                        let by =
                            commands::parse_i64(&args[2]).ok_or_else(commands::not_an_integer)?;
                        if name == "DECRBY" {
                            by.checked_neg()
                                .ok_or_else(|| Reply::err("decrement would overflow"))?
                        } else {
                            by
                        }
                    }
                };
                let current = match self.get(&args[1])? {
                    None => 0,
                    Some(v) => commands::parse_i64(&v).ok_or_else(commands::not_an_integer)?,
                };
                let new = current
                    .checked_add(by)
                    .ok_or_else(|| Reply::err("increment or decrement would overflow"))?;
                self.replace(&args[1], new.to_string().into_bytes())?;
                Ok(Reply::Int(new))
            }
            _ => Err(Reply::err(format!(
                "'{}' is not supported inside MULTI by kivi",
                name.to_ascii_lowercase()
            ))),
        }
    }
}

/// Redis's GETRANGE: `start` and `end` inclusive, negative ones counted
/// from the end, clamped to the value.
fn byte_range(v: &[u8], start: i64, end: i64) -> &[u8] {
    let len = v.len() as i64;
    let at = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (at(start), at(end).min(len - 1));
    if len == 0 || start > end {
        return &[];
    }
    &v[start as usize..=end as usize]
}

/// A float as INCRBYFLOAT takes it: decimal text, no NaN or infinity.
fn parse_f64(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.trim() != s {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// The keys a queued command names.
fn keys_of<'a>(name: &str, args: &'a [Vec<u8>]) -> impl Iterator<Item = &'a Vec<u8>> {
    let (from, to, step) = match name {
        "PING" | "ECHO" => (1, 1, 1),
        "MSET" | "MSETNX" => (1, args.len(), 2),
        "EXISTS" | "MGET" | "DEL" | "UNLINK" | "TOUCH" => (1, args.len(), 1),
        "COPY" | "RENAME" | "RENAMENX" => (1, 3, 1),
        _ => (1, 2, 1),
    };
    args[from..to].iter().step_by(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_command_aborts_the_transaction() {
        let mut tx = Transaction::default();
        assert_eq!(
            queue(&mut tx, vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]),
            Reply::Simple("QUEUED")
        );
        assert!(!tx.aborted);
        assert!(matches!(
            queue(&mut tx, vec![b"NOSUCH".to_vec()]),
            Reply::Error(_)
        ));
        assert!(tx.aborted);
        let mut tx = Transaction::default();
        assert!(matches!(
            queue(&mut tx, vec![b"GET".to_vec()]),
            Reply::Error(_)
        ));
        assert!(tx.aborted);
        let mut tx = Transaction::default();
        assert!(matches!(
            queue(&mut tx, vec![b"SCAN".to_vec(), b"0".to_vec()]),
            Reply::Error(_)
        ));
        assert!(tx.aborted);
    }

    #[test]
    fn a_transaction_is_bounded_in_commands() {
        let mut tx = Transaction::default();
        for _ in 0..MAX_QUEUED_COMMANDS {
            assert_eq!(
                queue(&mut tx, vec![b"PING".to_vec()]),
                Reply::Simple("QUEUED")
            );
        }
        assert!(matches!(
            queue(&mut tx, vec![b"PING".to_vec()]),
            Reply::Error(_)
        ));
        assert!(tx.aborted);
    }
}
