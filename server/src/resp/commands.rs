//! What each RESP command does. Plain writes (`write_plan`) become one
//! batch each and are pipelined: many wait for the same commit. Everything
//! else (`execute`) runs after the connection's earlier writes are
//! answered, so a pipeline reads its own writes; commands that read and
//! then write (INCR, DEL's count, SET ... GET, GETDEL) run as transactions
//! of one command (`transaction::run_alone`): a conditional batch, made
//! again until no other write came between.

use super::glob;
use super::parser::Args;
use super::random_key;
use super::reply::Reply;
use super::scripts;
use super::transaction::{self, Transaction, Watched};
use crate::Shared;
use kivi::{Deadline, WriteBatch, WriteOutcome};
use std::ops::Bound;

/// Pairs a RANGE returns at most (and without LIMIT).
pub const MAX_RANGE_PAIRS: usize = 100_000;
/// Keys a SCAN looks at per call, at most, whatever COUNT says.
const MAX_SCAN_COUNT: usize = 100_000;

/// Per-connection state the handshake commands change.
#[derive(Debug, Default)]
pub struct Session {
    pub id: u64,
    pub resp3: bool,
    pub name: Option<Vec<u8>>,
    pub quit: bool,
    /// The open transaction, after MULTI.
    pub multi: Option<Transaction>,
    /// The keys WATCH noted, until EXEC, DISCARD or UNWATCH.
    pub watched: Vec<Watched>,
    /// Who the connection is (`None`: not authenticated yet).
    pub identity: Option<crate::auth::Identity>,
    /// The client's address, for the log.
    pub peer: String,
}

/// How many arguments, the command's name included, a command takes.
#[derive(Debug, Clone, Copy)]
pub enum Arity {
    Exactly(usize),
    AtLeast(usize),
    Either(usize, usize),
    /// The name, then one or more key-value pairs.
    Pairs,
    Any,
}

impl Arity {
    pub fn allows(self, n: usize) -> bool {
        match self {
            Arity::Exactly(a) => n == a,
            Arity::AtLeast(a) => n >= a,
            Arity::Either(a, b) => n == a || n == b,
            Arity::Pairs => n >= 3 && !n.is_multiple_of(2),
            Arity::Any => true,
        }
    }
}

/// Every command kivi answers and its arity: the plain writes'
/// (`write_plan`) and the others' (`execute`). A command of another arity
/// is refused with "wrong number of arguments" before it runs.
pub const COMMANDS: &[(&str, Arity)] = &[
    // Plain writes.
    ("SET", Arity::AtLeast(3)),
    ("SETNX", Arity::Exactly(3)),
    ("MSET", Arity::Pairs),
    ("CAS", Arity::Exactly(4)),
    ("CAD", Arity::Exactly(3)),
    ("SETEX", Arity::Exactly(4)),
    ("PSETEX", Arity::Exactly(4)),
    // Reads.
    ("GET", Arity::Exactly(2)),
    ("STRLEN", Arity::Exactly(2)),
    ("EXISTS", Arity::AtLeast(2)),
    ("MGET", Arity::AtLeast(2)),
    ("DBSIZE", Arity::Exactly(1)),
    ("RANDOMKEY", Arity::Exactly(1)),
    ("SCAN", Arity::AtLeast(2)),
    ("KEYS", Arity::Exactly(2)),
    ("RANGE", Arity::Either(3, 5)),
    // Reads, then writes.
    ("GETDEL", Arity::Exactly(2)),
    ("DEL", Arity::AtLeast(2)),
    ("INCR", Arity::Exactly(2)),
    ("DECR", Arity::Exactly(2)),
    ("INCRBY", Arity::Exactly(3)),
    ("DECRBY", Arity::Exactly(3)),
    ("GETSET", Arity::Exactly(3)),
    ("APPEND", Arity::Exactly(3)),
    ("GETRANGE", Arity::Exactly(4)),
    ("SUBSTR", Arity::Exactly(4)),
    ("SETRANGE", Arity::Exactly(4)),
    ("MSETNX", Arity::Pairs),
    ("UNLINK", Arity::AtLeast(2)),
    ("TOUCH", Arity::AtLeast(2)),
    ("COPY", Arity::AtLeast(3)),
    ("RENAME", Arity::Exactly(3)),
    ("RENAMENX", Arity::Exactly(3)),
    ("TYPE", Arity::Exactly(2)),
    ("INCRBYFLOAT", Arity::Exactly(3)),
    // Deadlines.
    ("GETEX", Arity::AtLeast(2)),
    ("EXPIRE", Arity::AtLeast(3)),
    ("PEXPIRE", Arity::AtLeast(3)),
    ("EXPIREAT", Arity::AtLeast(3)),
    ("PEXPIREAT", Arity::AtLeast(3)),
    ("TTL", Arity::Exactly(2)),
    ("PTTL", Arity::Exactly(2)),
    ("EXPIRETIME", Arity::Exactly(2)),
    ("PEXPIRETIME", Arity::Exactly(2)),
    ("PERSIST", Arity::Exactly(2)),
    // The whole keyspace, in one commit.
    ("FLUSHDB", Arity::Either(1, 2)),
    ("FLUSHALL", Arity::Either(1, 2)),
    // redis-py's lock scripts, and no others (scripts.rs).
    ("EVAL", Arity::AtLeast(3)),
    ("EVALSHA", Arity::AtLeast(3)),
    ("SCRIPT", Arity::AtLeast(2)),
    // The connection and the server.
    ("PING", Arity::Either(1, 2)),
    ("ECHO", Arity::Exactly(2)),
    ("INFO", Arity::Any),
    ("HELLO", Arity::Any),
    ("AUTH", Arity::AtLeast(2)),
    ("ACL", Arity::AtLeast(2)),
    ("CLIENT", Arity::AtLeast(2)),
    ("COMMAND", Arity::Any),
    ("CONFIG", Arity::AtLeast(2)),
    ("SELECT", Arity::Exactly(2)),
    ("QUIT", Arity::Exactly(1)),
    ("ROLE", Arity::Exactly(1)),
    ("REPLICAOF", Arity::Exactly(3)),
    ("SLAVEOF", Arity::Exactly(3)),
    // Transactions (transaction.rs).
    ("MULTI", Arity::Exactly(1)),
    ("EXEC", Arity::Exactly(1)),
    ("DISCARD", Arity::Exactly(1)),
    ("WATCH", Arity::AtLeast(2)),
    ("UNWATCH", Arity::Exactly(1)),
];

/// The arity of the command named `name` (any case), if kivi knows it.
pub fn arity(name: &[u8]) -> Option<Arity> {
    COMMANDS
        .iter()
        .find(|(c, _)| name.eq_ignore_ascii_case(c.as_bytes()))
        .map(|&(_, a)| a)
}

/// How a plain write's outcome becomes its reply.
pub type Answer = fn(WriteOutcome) -> Reply;

fn upper(name: &[u8]) -> String {
    String::from_utf8_lossy(name).to_ascii_uppercase()
}

/// A command's name in upper case: borrowed, without an allocation, when
/// the client sent it so (client libraries do).
pub(crate) fn upper_name(name: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(name) {
        Ok(s) if !s.bytes().any(|b| b.is_ascii_lowercase()) => std::borrow::Cow::Borrowed(s),
        _ => std::borrow::Cow::Owned(upper(name)),
    }
}

pub(crate) fn wrong_args(cmd: &str) -> Reply {
    Reply::err(format!(
        "wrong number of arguments for '{}' command",
        cmd.to_ascii_lowercase()
    ))
}

pub(crate) fn refused(e: kivi::Error) -> Reply {
    if e.is_full() {
        Reply::err(format!("disk full, write refused: {e}"))
    } else {
        Reply::err(e.to_string())
    }
}

fn syntax() -> Reply {
    Reply::err("syntax error")
}

/// What a SET does to the key's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ttl {
    /// The value never expires (a plain SET drops any deadline).
    Never,
    /// KEEPTTL: the deadline the key had stays.
    Keep,
    /// EX, PX, EXAT or PXAT: this deadline (milliseconds since the epoch).
    At(u64),
}

/// SET's options: NX / XX / GET, and EX / PX / EXAT / PXAT / KEEPTTL.
pub(crate) struct SetOptions {
    pub nx: bool,
    pub xx: bool,
    pub get: bool,
    pub ttl: Ttl,
}

fn invalid_expire(cmd: &str) -> Reply {
    Reply::err(format!(
        "invalid expire time in '{}' command",
        cmd.to_ascii_lowercase()
    ))
}

/// The deadline `amount` (a positive integer) `unit` milliseconds after
/// `now`, or, when `absolute`, at `amount` units since the epoch: SET's
/// EX/PX/EXAT/PXAT, SETEX's, GETEX's. Zero, negative and overflowing
/// amounts are refused as Redis refuses them.
fn deadline_of(
    amount: &[u8],
    unit: u64,
    absolute: bool,
    now: u64,
    cmd: &str,
) -> Result<u64, Reply> {
    let n = parse_i64(amount).ok_or_else(not_an_integer)?;
    if n <= 0 {
        return Err(invalid_expire(cmd));
    }
    let ms = (n as u64)
        .checked_mul(unit)
        .ok_or_else(|| invalid_expire(cmd))?;
    let at = if absolute {
        Some(ms)
    } else {
        now.checked_add(ms)
    };
    at.filter(|&d| d <= i64::MAX as u64)
        .ok_or_else(|| invalid_expire(cmd))
}

/// SETEX's and PSETEX's deadline: `amount` `unit` milliseconds from now.
pub(crate) fn deadline_after(amount: &[u8], unit: u64, now: u64, cmd: &str) -> Result<u64, Reply> {
    deadline_of(amount, unit, false, now, cmd)
}

/// An expiry option's deadline (EX s, PX ms, EXAT s, PXAT ms), or `None`
/// when `name` is not one.
fn expiry_option(name: &str, amount: &[u8], now: u64, cmd: &str) -> Option<Result<u64, Reply>> {
    let (unit, absolute) = match name {
        "EX" => (1000, false),
        "PX" => (1, false),
        "EXAT" => (1000, true),
        "PXAT" => (1, true),
        _ => return None,
    };
    Some(deadline_of(amount, unit, absolute, now, cmd))
}

pub(crate) fn set_options(args: Args<'_>, now: u64) -> Result<SetOptions, Reply> {
    let mut o = SetOptions {
        nx: false,
        xx: false,
        get: false,
        ttl: Ttl::Never,
    };
    let mut ttl_given = false;
    let mut i = 0;
    // Compared without allocating: SET with EX is a pipelined hot path.
    let is = |a: &[u8], name: &str| a.eq_ignore_ascii_case(name.as_bytes());
    while i < args.len() {
        let a = args.get(i);
        if is(a, "NX") {
            o.nx = true;
        } else if is(a, "XX") {
            o.xx = true;
        } else if is(a, "GET") {
            o.get = true;
        } else if is(a, "KEEPTTL") && !ttl_given {
            ttl_given = true;
            o.ttl = Ttl::Keep;
        } else if !ttl_given && i + 1 < args.len() {
            let name = ["EX", "PX", "EXAT", "PXAT"]
                .into_iter()
                .find(|n| is(a, n))
                .ok_or_else(syntax)?;
            let at = expiry_option(name, &args[i + 1], now, "set").ok_or_else(syntax)??;
            ttl_given = true;
            o.ttl = Ttl::At(at);
            i += 1;
        } else {
            return Err(syntax());
        }
        i += 1;
    }
    if o.nx && o.xx {
        return Err(syntax());
    }
    Ok(o)
}

/// GETEX's option: `None` to leave the deadline, `Some(None)` for PERSIST,
/// `Some(Some(d))` for a new deadline.
pub(crate) fn getex_option(args: &[Vec<u8>], now: u64) -> Result<Option<Option<u64>>, Reply> {
    match args {
        [] => Ok(None),
        [p] if p.eq_ignore_ascii_case(b"PERSIST") => Ok(Some(None)),
        [name, amount] => {
            let at = expiry_option(&upper(name), amount, now, "getex").ok_or_else(syntax)??;
            Ok(Some(Some(at)))
        }
        _ => Err(syntax()),
    }
}

/// EXPIRE's, PEXPIRE's, EXPIREAT's and PEXPIREAT's deadline, in
/// milliseconds since the epoch; it may be in the past (the key is then
/// deleted), so it is signed, and wide enough not to overflow.
pub(crate) fn expire_deadline(cmd: &str, amount: &[u8], now: u64) -> Result<i128, Reply> {
    let n = i128::from(parse_i64(amount).ok_or_else(not_an_integer)?);
    let (unit, base) = match cmd {
        "EXPIRE" => (1000, i128::from(now)),
        "PEXPIRE" => (1, i128::from(now)),
        "EXPIREAT" => (1000, 0),
        _ => (1, 0),
    };
    let at = n * unit + base;
    if at > i128::from(i64::MAX) {
        return Err(invalid_expire(cmd));
    }
    Ok(at)
}

/// EXPIRE's flags: NX (only if the key has no deadline), XX (only if it has
/// one), GT and LT (only if the new one is later or earlier).
#[derive(Debug, Default)]
pub(crate) struct ExpireFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
}

pub(crate) fn expire_flags(args: &[Vec<u8>]) -> Result<ExpireFlags, Reply> {
    let mut f = ExpireFlags::default();
    for a in args {
        match upper(a).as_str() {
            "NX" => f.nx = true,
            "XX" => f.xx = true,
            "GT" => f.gt = true,
            "LT" => f.lt = true,
            other => return Err(Reply::err(format!("Unsupported option {other}"))),
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(Reply::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if f.gt && f.lt {
        return Err(Reply::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(f)
}

/// The batch for a plain write and how to answer it, if `args` is one:
/// `None` for any other command; `Some(Err(reply))` for a write refused
/// before it reaches the store.
/// Expiry options count from `clock`'s time, read only when there are some.
pub fn write_plan(
    args: Args<'_>,
    clock: &kivi::Clock,
) -> Option<Result<(WriteBatch, Answer), Reply>> {
    // The hot path of pipelined writes: no allocation to find the command
    // or read its options; keys and values are copied once, from the bytes
    // read into the batch.
    const WRITES: [&str; 7] = ["SET", "SETNX", "MSET", "CAS", "CAD", "SETEX", "PSETEX"];
    let cmd = *WRITES
        .iter()
        .find(|w| args[0].eq_ignore_ascii_case(w.as_bytes()))?;
    let n = args.len();
    if !arity(cmd.as_bytes()).is_some_and(|a| a.allows(n)) {
        return Some(Err(wrong_args(cmd)));
    }
    let mut b = WriteBatch::new();
    let take = |args: Args<'_>, i: usize| args[i].to_vec();
    let built: kivi::Result<Answer> = match cmd {
        "SET" => {
            let now = if n > 3 { clock.now_millis() } else { 0 };
            let o = match set_options(args.from(3), now) {
                Ok(o) => o,
                Err(r) => return Some(Err(r)),
            };
            // GET and KEEPTTL read the key first: a transaction of one.
            let deadline = match o.ttl {
                _ if o.get => return None,
                Ttl::Keep => return None,
                Ttl::Never => None,
                Ttl::At(d) => Some(Deadline::from_unix_millis(d)),
            };
            let (k, v) = (take(args, 1), take(args, 2));
            let r = if o.nx {
                b.insert_if_absent(k, v)
            } else if o.xx {
                b.update_if_present(k, v)
            } else {
                b.put(k, v)
            };
            r.and_then(|b| b.with_deadline(deadline))
                .map(|_| ok_or_nil as Answer)
        }
        "SETEX" | "PSETEX" => {
            let unit = if cmd == "SETEX" { 1000 } else { 1 };
            let deadline = match deadline_after(&args[2], unit, clock.now_millis(), cmd) {
                Ok(d) => Some(Deadline::from_unix_millis(d)),
                Err(r) => return Some(Err(r)),
            };
            b.put(take(args, 1), take(args, 3))
                .and_then(|b| b.with_deadline(deadline))
                .map(|_| (|_| Reply::ok()) as Answer)
        }
        "SETNX" => b
            .insert_if_absent(take(args, 1), take(args, 2))
            .map(|_| int_outcome as Answer),
        "MSET" => (1..n)
            .step_by(2)
            .try_for_each(|i| b.put(args[i].to_vec(), args[i + 1].to_vec()).map(|_| ()))
            .map(|_| (|_| Reply::ok()) as Answer),
        "CAS" => b
            .compare_and_swap(take(args, 1), take(args, 2), take(args, 3))
            .map(|_| int_outcome as Answer),
        "CAD" => b
            .compare_and_delete(take(args, 1), take(args, 2))
            .map(|_| int_outcome as Answer),
        _ => unreachable!("one of WRITES"),
    };
    Some(built.map(|answer| (b, answer)).map_err(refused))
}

fn ok_or_nil(o: WriteOutcome) -> Reply {
    match o {
        WriteOutcome::Applied => Reply::ok(),
        WriteOutcome::ConditionFailed { .. } => Reply::Null,
    }
}

fn int_outcome(o: WriteOutcome) -> Reply {
    Reply::Int(i64::from(o == WriteOutcome::Applied))
}

/// Submits `b` and waits for its outcome.
pub async fn write(shared: &Shared, b: WriteBatch) -> kivi::Result<WriteOutcome> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    shared
        .committer
        .submit(
            b,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        )
        .await;
    rx.await.unwrap_or(Err(kivi::Error::Closed))
}

fn get(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    shared.db.get(key).map_err(|e| Reply::err(e.to_string()))
}

/// GET's and MGET's lookup: `get`, counted in `keyspace_hits` or
/// `keyspace_misses`.
fn lookup(shared: &Shared, key: &[u8]) -> Result<Reply, Reply> {
    let v = get(shared, key)?;
    shared.counters.note_lookup(v.is_some());
    Ok(v.map_or(Reply::Null, Reply::Bulk))
}

/// Runs any command but the plain writes.
pub async fn execute(shared: &Shared, s: &mut Session, args: Vec<Vec<u8>>) -> Reply {
    let cmd = upper(&args[0]);
    let n = args.len();
    match arity(cmd.as_bytes()) {
        None => return unknown(&args),
        Some(a) if !a.allows(n) => return wrong_args(&cmd),
        Some(_) => {}
    }
    let r = match cmd.as_str() {
        "PING" if n == 1 => Ok(Reply::Simple("PONG")),
        "PING" | "ECHO" => Ok(Reply::bulk(args[1].clone())),
        "GET" => lookup(shared, &args[1]),
        "STRLEN" => get(shared, &args[1]).map(|v| Reply::Int(v.map_or(0, |v| v.len() as i64))),
        "EXISTS" => args[1..]
            .iter()
            .map(|k| get(shared, k).map(|v| i64::from(v.is_some())))
            .sum::<Result<i64, Reply>>()
            .map(Reply::Int),
        "MGET" => mget(shared, &args[1..]),
        "DBSIZE" => shared
            .db
            .stats()
            .map(|st| Reply::Int(st.pairs as i64))
            .map_err(|e| Reply::err(e.to_string())),
        "RANDOMKEY" => random_key::random_key(&shared.db.snapshot(), random_key::random_below)
            .map(|k| k.map_or(Reply::Null, Reply::Bulk))
            .map_err(|e| Reply::err(e.to_string())),
        "SCAN" => scan(shared, &args),
        "KEYS" => keys(shared, &args[1]),
        "RANGE" => range(shared, &args),
        // SET ... GET (plain SETs are pipelined writes) and the other
        // commands that read, then write.
        "SET" | "GETDEL" | "DEL" | "INCR" | "DECR" | "INCRBY" | "DECRBY" | "GETSET" | "APPEND"
        | "GETRANGE" | "SUBSTR" | "SETRANGE" | "MSETNX" | "UNLINK" | "TOUCH" | "COPY"
        | "RENAME" | "RENAMENX" | "TYPE" | "INCRBYFLOAT" | "GETEX" | "EXPIRE" | "PEXPIRE"
        | "EXPIREAT" | "PEXPIREAT" | "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME" | "PERSIST" => {
            Ok(transaction::run_alone(shared, args).await)
        }
        "EVAL" | "EVALSHA" => match scripts::command_for(&args) {
            Ok(command) => Ok(transaction::run_alone(shared, command).await),
            Err(e) => Err(e),
        },
        "SCRIPT" => scripts::script(&args),
        "FLUSHDB" | "FLUSHALL" => flush(shared, &args).await,
        "INFO" => Ok(Reply::bulk(crate::info::render(shared, &args[1..]))),
        "HELLO" => match hello_auth(shared, s, &args).await {
            // As Redis: a locked server answers HELLO only with AUTH.
            Ok(()) if s.identity.is_none() => Err(Reply::coded(
                "NOAUTH",
                "HELLO must be called with the client already authenticated, otherwise the \
                 HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client \
                 and select the RESP protocol version at the same time",
            )),
            Ok(()) => hello(s, &args),
            Err(e) => Err(e),
        },
        "AUTH" => auth(shared, s, &args).await,
        "ACL" => acl(s, &args),
        "CLIENT" => client(s, &args),
        "COMMAND" => Ok(command(s, &args)),
        "CONFIG" => super::config::config(shared, &args),
        "ROLE" => Ok(role(shared)),
        "REPLICAOF" | "SLAVEOF" => replicaof(shared, &args).await,
        "SELECT" => match parse_i64(&args[1]) {
            Some(0) => Ok(Reply::ok()),
            Some(_) => Err(Reply::err("DB index is out of range")),
            None => Err(not_an_integer()),
        },
        "QUIT" => {
            s.quit = true;
            Ok(Reply::ok())
        }
        "MULTI" if s.multi.is_some() => Err(Reply::err("MULTI calls can not be nested")),
        "MULTI" => {
            s.multi = Some(Transaction::default());
            Ok(Reply::ok())
        }
        "EXEC" => match s.multi.take() {
            None => Err(Reply::err("EXEC without MULTI")),
            Some(tx) => Ok(transaction::exec(shared, tx, std::mem::take(&mut s.watched)).await),
        },
        "DISCARD" => match s.multi.take() {
            None => Err(Reply::err("DISCARD without MULTI")),
            Some(_) => {
                s.watched.clear();
                Ok(Reply::ok())
            }
        },
        "WATCH" if s.multi.is_some() => Err(Reply::err("WATCH inside MULTI is not allowed")),
        "WATCH" => transaction::watch(shared, &mut s.watched, &args[1..]),
        "UNWATCH" => {
            s.watched.clear();
            Ok(Reply::ok())
        }
        // The plain writes (SETNX, MSET, CAS, CAD, SETEX, PSETEX) are `write_plan`'s and
        // never come here.
        _ => Err(unknown(&args)),
    };
    r.unwrap_or_else(|e| e)
}

/// The reply to a command kivi does not answer: a command of another data
/// type gets its own error (`other_types`), anything else Redis's
/// "unknown command".
/// FLUSHDB and FLUSHALL (one database, so the same): every key deleted by
/// one durable commit (`Db::clear`), whatever the store holds; after a
/// crash either all of it happened or none. ASYNC and SYNC are accepted;
/// both answer once the commit is durable.
async fn flush(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    if let Some(mode) = args.get(1) {
        if !mode.eq_ignore_ascii_case(b"ASYNC") && !mode.eq_ignore_ascii_case(b"SYNC") {
            return Err(syntax());
        }
    }
    let db = shared.db.clone();
    match tokio::task::spawn_blocking(move || db.clear()).await {
        Ok(Ok(())) => Ok(Reply::ok()),
        Ok(Err(e)) => Err(refused(e)),
        Err(e) => Err(Reply::err(format!("FLUSHDB failed: {e}"))),
    }
}

pub(crate) fn unknown(args: &[Vec<u8>]) -> Reply {
    if let Some(refused) = super::other_types::refusal(&args[0]) {
        return refused;
    }
    let shown = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(128)]).into_owned();
    let rest: Vec<String> = args[1..]
        .iter()
        .take(8)
        .map(|a| format!("'{}'", shown(a)))
        .collect();
    Reply::err(format!(
        "unknown command '{}', with args beginning with: {}",
        shown(&args[0]),
        rest.join(" ")
    ))
}

pub(crate) fn not_an_integer() -> Reply {
    Reply::err("value is not an integer or out of range")
}

pub(crate) fn parse_i64(b: &[u8]) -> Option<i64> {
    // By hand, without a UTF-8 check first: SET's EX amount is on the hot
    // path of pipelined writes.
    let (negative, digits) = match b {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, b),
    };
    // Redis refuses "+1", " 1", "01" and "-0"; so does this.
    match digits {
        [] | [b'0', _, ..] => return None,
        [b'0'] if negative => return None,
        _ => {}
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        n = n.checked_mul(10)?;
        n = if negative {
            n.checked_sub(d)?
        } else {
            n.checked_add(d)?
        };
    }
    Some(n)
}

/// SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]. Cursors are numbers
/// (clients parse them as such) standing for the last key returned, kept
/// server-wide, since a client's pool may continue on another connection.
fn scan(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let cursor: u64 = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| Reply::err("invalid cursor"))?;
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut only_strings = true;
    let mut i = 2;
    while i < args.len() {
        let value = args.get(i + 1).ok_or_else(syntax)?;
        match upper(&args[i]).as_str() {
            "MATCH" => pattern = Some(value),
            "COUNT" => {
                count = match parse_i64(value) {
                    Some(c) if c >= 1 => (c as usize).min(MAX_SCAN_COUNT),
                    Some(_) => return Err(syntax()),
                    None => return Err(not_an_integer()),
                }
            }
            // Every kivi value is a string.
            "TYPE" => only_strings = value.eq_ignore_ascii_case(b"string"),
            _ => return Err(syntax()),
        }
        i += 2;
    }
    let after = match cursor {
        0 => None,
        c => Some(
            shared
                .cursors
                .lock()
                .get(c)
                .ok_or_else(|| Reply::err("invalid cursor (unknown or expired)"))?,
        ),
    };
    let lower = match &after {
        Some(k) => Bound::Excluded(k.as_slice()),
        None => Bound::Unbounded,
    };
    let mut keys = Vec::new();
    let mut last = None;
    let mut seen = 0;
    let mut bytes = 0;
    if only_strings {
        for item in shared.db.range::<&[u8], _>((lower, Bound::Unbounded)) {
            let (k, _) = item.map_err(|e| Reply::err(e.to_string()))?;
            seen += 1;
            if pattern.is_none_or(|p| glob::matches(p, &k)) {
                bytes += k.len();
                keys.push(Reply::Bulk(k.clone()));
            }
            // COUNT keys looked at, or a reply's worth of bytes: a cursor
            // goes on from there.
            if seen == count || bytes >= MAX_KEYS_REPLY_BYTES {
                last = Some(k);
                break;
            }
        }
    }
    let next = match last {
        Some(k) => shared.cursors.lock().insert(k),
        None => 0,
    };
    Ok(Reply::Array(vec![
        Reply::bulk(next.to_string()),
        Reply::Array(keys),
    ]))
}

/// Bytes of keys one KEYS reply holds, at most: past it the client is
/// told to use SCAN (Redis has no bound; a reply of the whole keyspace
/// can be the server's memory). Also the most bytes of values an MGET or
/// a RANGE answers, and of keys a SCAN does.
pub const MAX_KEYS_REPLY_BYTES: usize = 64 << 20;

/// MGET key...: refused past `MAX_KEYS_REPLY_BYTES` of values (a million
/// keys of 16 MiB values would be 16 TiB of reply held in memory).
fn mget(shared: &Shared, keys: &[Vec<u8>]) -> Result<Reply, Reply> {
    let mut out = Vec::with_capacity(keys.len());
    let mut bytes = 0;
    for k in keys {
        let r = lookup(shared, k)?;
        if let Reply::Bulk(v) = &r {
            bytes += v.len();
            if bytes > MAX_KEYS_REPLY_BYTES {
                return Err(Reply::err(format!(
                    "MGET would answer more than {MAX_KEYS_REPLY_BYTES} bytes of values; \
                     ask for fewer keys at a time"
                )));
            }
        }
        out.push(r);
    }
    Ok(Reply::Array(out))
}

/// KEYS pattern: every key matching, in key order, from one snapshot. A
/// pattern that starts with literal bytes scans only the keys with that
/// prefix.
fn keys(shared: &Shared, pattern: &[u8]) -> Result<Reply, Reply> {
    let prefix_len = pattern
        .iter()
        .position(|c| matches!(c, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    let prefix = &pattern[..prefix_len];
    let mut keys = Vec::new();
    let mut bytes = 0;
    for item in shared
        .db
        .range::<&[u8], _>((Bound::Included(prefix), Bound::Unbounded))
    {
        let (k, _) = item.map_err(|e| Reply::err(e.to_string()))?;
        if !k.starts_with(prefix) {
            break;
        }
        if glob::matches(pattern, &k) {
            bytes += k.len();
            if bytes > MAX_KEYS_REPLY_BYTES {
                return Err(Reply::err(format!(
                    "KEYS would answer more than {MAX_KEYS_REPLY_BYTES} bytes of keys; use SCAN"
                )));
            }
            keys.push(Reply::Bulk(k));
        }
    }
    Ok(Reply::Array(keys))
}

/// RANGE start end [LIMIT n]: pairs with start <= key < end (an empty end:
/// to the end of the keyspace) as a flat array key, value, key, value...
fn range(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let mut limit = MAX_RANGE_PAIRS;
    if args.len() == 5 {
        if !args[3].eq_ignore_ascii_case(b"LIMIT") {
            return Err(syntax());
        }
        limit = match parse_i64(&args[4]) {
            Some(l) if l >= 0 => (l as usize).min(MAX_RANGE_PAIRS),
            _ => return Err(not_an_integer()),
        };
    }
    let (start, end) = (args[1].as_slice(), args[2].as_slice());
    let upper = if end.is_empty() {
        Bound::Unbounded
    } else {
        Bound::Excluded(end)
    };
    let mut out = Vec::new();
    let mut bytes = 0;
    if limit > 0 && (end.is_empty() || start < end) {
        for item in shared
            .db
            .range::<&[u8], _>((Bound::Included(start), upper))
            .take(limit)
        {
            let (k, v) = item.map_err(|e| Reply::err(e.to_string()))?;
            bytes += k.len() + v.len();
            out.push(Reply::Bulk(k));
            out.push(Reply::Bulk(v));
            // At least one pair; past a reply's worth of bytes the answer
            // ends early, as under LIMIT: the client goes on after its
            // last key.
            if bytes >= MAX_KEYS_REPLY_BYTES {
                break;
            }
        }
    }
    Ok(Reply::Array(out))
}

/// The version clients are told: the Redis protocol level kivi answers
/// (RESP2/RESP3 as of Redis 7.2). kivi's own is `kivi_version` in INFO.
pub const REDIS_VERSION: &str = "7.2.0";

fn hello(s: &mut Session, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let mut i = 1;
    if let Some(v) = args.get(1) {
        match parse_i64(v) {
            Some(2) => s.resp3 = false,
            Some(3) => s.resp3 = true,
            Some(_) => {
                return Err(Reply::coded(
                    "NOPROTO",
                    "sorry, this protocol version is not supported",
                ))
            }
            None => {
                return Err(Reply::err(
                    "Protocol version is not an integer or out of range",
                ))
            }
        }
        i = 2;
    }
    while i < args.len() {
        match upper(&args[i]).as_str() {
            // Checked before (`hello_auth`).
            "AUTH" if i + 2 < args.len() => i += 3,
            "SETNAME" if i + 1 < args.len() => {
                s.name = Some(args[i + 1].clone());
                i += 2;
            }
            _ => return Err(syntax()),
        }
    }
    let proto = if s.resp3 { 3 } else { 2 };
    Ok(Reply::Map(vec![
        (Reply::bulk("server"), Reply::bulk("redis")),
        (Reply::bulk("version"), Reply::bulk(REDIS_VERSION)),
        (Reply::bulk("proto"), Reply::Int(proto)),
        (Reply::bulk("id"), Reply::Int(s.id as i64)),
        (Reply::bulk("mode"), Reply::bulk("standalone")),
        (Reply::bulk("role"), Reply::bulk("master")),
        (Reply::bulk("modules"), Reply::Array(Vec::new())),
    ]))
}

fn wrongpass() -> Reply {
    Reply::coded(
        "WRONGPASS",
        "invalid username-password pair or user is disabled.",
    )
}

/// Checks `password` for `user` and, if it holds, makes the connection
/// that user; a failure is logged with the peer's user name.
async fn authenticate(
    shared: &Shared,
    s: &mut Session,
    user: &[u8],
    password: &[u8],
) -> Result<(), Reply> {
    match shared.users.check(user, password).await {
        Some(id) => {
            s.identity = Some(id);
            Ok(())
        }
        None => {
            // The user name and where from; never the password.
            tracing::warn!(
                user = %String::from_utf8_lossy(user),
                peer = %s.peer,
                client = s.id,
                "AUTH failed: wrong user name or password"
            );
            Err(wrongpass())
        }
    }
}

/// AUTH password | AUTH user password.
async fn auth(shared: &Shared, s: &mut Session, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    match args.len() {
        2 if !shared.users.default_has_password() => Err(Reply::err(
            "AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        )),
        2 => authenticate(shared, s, crate::auth::DEFAULT_USER.as_bytes(), &args[1]).await,
        3 => authenticate(shared, s, &args[1], &args[2]).await,
        _ => Err(syntax()),
    }
    .map(|()| Reply::ok())
}

/// HELLO's AUTH user password, checked before the rest of HELLO applies.
async fn hello_auth(shared: &Shared, s: &mut Session, args: &[Vec<u8>]) -> Result<(), Reply> {
    let Some(i) = args
        .iter()
        .skip(2)
        .position(|a| a.eq_ignore_ascii_case(b"AUTH"))
    else {
        return Ok(());
    };
    let i = i + 2;
    match (args.get(i + 1), args.get(i + 2)) {
        (Some(user), Some(password)) => authenticate(shared, s, user, password).await,
        _ => Err(syntax()),
    }
}

/// ACL WHOAMI; ACL is otherwise configured at start (`--user`).
fn acl(s: &Session, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    match (upper(&args[1]).as_str(), args.len()) {
        ("WHOAMI", 2) => Ok(Reply::bulk(
            s.identity.as_ref().map_or("default", |i| i.user.as_str()),
        )),
        _ => Err(Reply::err(
            "kivi supports ACL WHOAMI only; users and roles are set when the server starts \
             (--requirepass, --user NAME:ROLE:PASSWORD)",
        )),
    }
}

fn client(s: &mut Session, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let sub = upper(&args[1]);
    match (sub.as_str(), args.len()) {
        ("SETNAME", 3) => {
            s.name = (!args[2].is_empty()).then(|| args[2].clone());
            Ok(Reply::ok())
        }
        ("GETNAME", 2) => Ok(s.name.clone().map_or(Reply::Null, Reply::Bulk)),
        ("ID", 2) => Ok(Reply::Int(s.id as i64)),
        // Library name and version, sent by redis-py and others.
        ("SETINFO", 4) => Ok(Reply::ok()),
        ("SETNAME" | "GETNAME" | "ID" | "SETINFO", _) => Err(wrong_args(&format!("client|{sub}"))),
        _ => Err(Reply::err(format!(
            "unknown subcommand '{}'. Try CLIENT SETNAME, GETNAME, ID or SETINFO.",
            String::from_utf8_lossy(&args[1])
        ))),
    }
}

/// COMMAND, COMMAND DOCS, COMMAND COUNT: kivi gives no command table (an
/// empty one is valid: clients then use their built-in knowledge).
/// REPLICAOF NO ONE (SLAVEOF NO ONE): a follower takes over as the
/// store's writer (`Shared::promote`); on the writer, nothing to do. A
/// kivi server follows a store, not another server: REPLICAOF HOST PORT
/// is refused and says how to follow.
async fn replicaof(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    if !(args[1].eq_ignore_ascii_case(b"NO") && args[2].eq_ignore_ascii_case(b"ONE")) {
        return Err(Reply::err(
            "kivi follows a store, not a server: start the follower with \
             kivi serve --follow URL (the writer's store), or send REPLICAOF NO ONE \
             to a follower to make it the writer",
        ));
    }
    shared
        .promote()
        .await
        .map(|()| Reply::Simple("OK"))
        .map_err(|e| Reply::err(format!("the takeover failed: {e}")))
}

/// ROLE, as Redis answers it: a writer is a master with no replicas
/// connected (followers read the object store); a follower is a replica,
/// connected while its polls reach the writer's log, whose offset is the
/// last commit it shows, and whose master is where the writer's lease says
/// its clients reach it. A writer asks the store first whether another
/// one took over (`crate::displaced`).
fn role(shared: &Shared) -> Reply {
    if crate::displaced(shared) {
        let (host, port) = crate::fenced_writer_address(shared);
        let seq = shared.db.stats().map_or(0, |st| st.seq);
        return Reply::Array(vec![
            Reply::bulk(b"slave".to_vec()),
            Reply::bulk(host.into_bytes()),
            Reply::Int(i64::from(port)),
            Reply::bulk(b"connect".to_vec()),
            Reply::Int(seq as i64),
        ]);
    }
    match shared.db.follower_status() {
        None => {
            let seq = shared.db.stats().map_or(0, |st| st.seq);
            Reply::Array(vec![
                Reply::bulk(b"master".to_vec()),
                Reply::Int(seq as i64),
                Reply::Array(Vec::new()),
            ])
        }
        Some(f) => {
            let up = f.last_error.is_none() && f.last_contact_ms < 5_000;
            let (host, port) = crate::writer_address(&f);
            Reply::Array(vec![
                Reply::bulk(b"slave".to_vec()),
                Reply::bulk(host.into_bytes()),
                Reply::Int(i64::from(port)),
                Reply::bulk(if up {
                    b"connected".to_vec()
                } else {
                    b"connect".to_vec()
                }),
                Reply::Int(f.applied_seq as i64),
            ])
        }
    }
}

fn command(s: &Session, args: &[Vec<u8>]) -> Reply {
    match args.get(1).map(|a| upper(a)) {
        Some(sub) if sub == "COUNT" => Reply::Int(0),
        Some(sub) if sub == "DOCS" => {
            if s.resp3 {
                Reply::Map(Vec::new())
            } else {
                Reply::Array(Vec::new())
            }
        }
        _ => Reply::Array(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table allows exactly the argument counts each command's code
    /// was written for.
    #[test]
    fn arities_are_the_commands_own() {
        let expected = |cmd: &str, n: usize| match cmd {
            "SET" => n >= 3,
            "SETNX" | "CAD" => n == 3,
            "MSET" => n >= 3 && n % 2 == 1,
            "CAS" => n == 4,
            "PING" => n == 1 || n == 2,
            "ECHO" | "GET" | "STRLEN" | "GETDEL" | "INCR" | "DECR" | "SELECT" | "TYPE" | "KEYS"
            | "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME" | "PERSIST" => n == 2,
            "ROLE" => n == 1,
            "REPLICAOF" | "SLAVEOF" => n == 3,
            "SETEX" | "PSETEX" => n == 4,
            "GETEX" | "SCRIPT" => n >= 2,
            "EVAL" | "EVALSHA" => n >= 3,
            "FLUSHDB" | "FLUSHALL" => n == 1 || n == 2,
            "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" => n >= 3,
            "EXISTS" | "MGET" | "SCAN" | "DEL" | "CLIENT" | "CONFIG" | "WATCH" | "UNLINK"
            | "TOUCH" | "AUTH" | "ACL" => n >= 2,
            "GETSET" | "APPEND" | "RENAME" | "RENAMENX" | "INCRBYFLOAT" => n == 3,
            "GETRANGE" | "SUBSTR" | "SETRANGE" => n == 4,
            "MSETNX" => n >= 3 && n % 2 == 1,
            "COPY" => n >= 3,
            "DBSIZE" | "RANDOMKEY" | "QUIT" | "MULTI" | "EXEC" | "DISCARD" | "UNWATCH" => n == 1,
            "RANGE" => n == 3 || n == 5,
            "INCRBY" | "DECRBY" => n == 3,
            "INFO" | "HELLO" | "COMMAND" => true,
            other => panic!("{other} is not in the test"),
        };
        for (cmd, a) in COMMANDS {
            for n in 1..10 {
                assert_eq!(a.allows(n), expected(cmd, n), "{cmd} with {n}");
            }
            assert!(arity(cmd.to_ascii_lowercase().as_bytes()).is_some());
        }
        assert!(arity(b"FLUSHEVERYTHING").is_none());
        let args = vec![b"mset".to_vec(), b"k".to_vec()];
        match write_plan(Args::Owned(&args), &kivi::Clock::system()) {
            Some(Err(r)) => assert_eq!(
                r,
                Reply::err("wrong number of arguments for 'mset' command")
            ),
            _ => panic!("MSET k is refused"),
        }
    }

    #[test]
    fn integers_parse_as_redis_reads_them() {
        for (text, want) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-7", Some(-7)),
            ("3600", Some(3600)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("", None),
            ("-", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("01", None),
            ("-0", None),
            ("-01", None),
            ("1e3", None),
            ("١", None),
        ] {
            assert_eq!(parse_i64(text.as_bytes()), want, "{text:?}");
        }
    }
}
