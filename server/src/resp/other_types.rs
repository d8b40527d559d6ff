//! The commands of Redis's other data types and features, which kivi does
//! not have: each gets one clear error naming what it belongs to, instead
//! of "unknown command", so a client learns at once that it is the data
//! type, not a typo or an old server. A table of names rather than a rule
//! on prefixes: `SET`, `SETNX`, `GETRANGE` and the like start like these.

use super::reply::Reply;

/// Command names, by what they belong to.
const OTHER_TYPES: &[(&str, &[&str])] = &[
    (
        "hashes",
        &[
            "HSET",
            "HSETNX",
            "HGET",
            "HMSET",
            "HMGET",
            "HGETALL",
            "HDEL",
            "HEXISTS",
            "HLEN",
            "HKEYS",
            "HVALS",
            "HINCRBY",
            "HINCRBYFLOAT",
            "HSTRLEN",
            "HSCAN",
            "HRANDFIELD",
            "HEXPIRE",
            "HPEXPIRE",
            "HEXPIREAT",
            "HPEXPIREAT",
            "HTTL",
            "HPTTL",
            "HEXPIRETIME",
            "HPEXPIRETIME",
            "HPERSIST",
            "HGETDEL",
            "HGETEX",
            "HSETEX",
        ],
    ),
    (
        "lists",
        &[
            "LPUSH",
            "RPUSH",
            "LPUSHX",
            "RPUSHX",
            "LPOP",
            "RPOP",
            "LRANGE",
            "LLEN",
            "LINDEX",
            "LSET",
            "LREM",
            "LTRIM",
            "LINSERT",
            "LPOS",
            "LMOVE",
            "BLMOVE",
            "LMPOP",
            "BLMPOP",
            "RPOPLPUSH",
            "BRPOPLPUSH",
            "BLPOP",
            "BRPOP",
        ],
    ),
    (
        "sets",
        &[
            "SADD",
            "SREM",
            "SMEMBERS",
            "SISMEMBER",
            "SMISMEMBER",
            "SCARD",
            "SPOP",
            "SRANDMEMBER",
            "SMOVE",
            "SINTER",
            "SINTERSTORE",
            "SINTERCARD",
            "SUNION",
            "SUNIONSTORE",
            "SDIFF",
            "SDIFFSTORE",
            "SSCAN",
        ],
    ),
    (
        "sorted sets",
        &[
            "ZADD",
            "ZREM",
            "ZRANGE",
            "ZRANGESTORE",
            "ZRANGEBYSCORE",
            "ZRANGEBYLEX",
            "ZREVRANGE",
            "ZREVRANGEBYSCORE",
            "ZREVRANGEBYLEX",
            "ZSCORE",
            "ZMSCORE",
            "ZCARD",
            "ZCOUNT",
            "ZLEXCOUNT",
            "ZINCRBY",
            "ZRANK",
            "ZREVRANK",
            "ZPOPMIN",
            "ZPOPMAX",
            "BZPOPMIN",
            "BZPOPMAX",
            "ZMPOP",
            "BZMPOP",
            "ZRANDMEMBER",
            "ZREMRANGEBYRANK",
            "ZREMRANGEBYSCORE",
            "ZREMRANGEBYLEX",
            "ZUNION",
            "ZUNIONSTORE",
            "ZINTER",
            "ZINTERSTORE",
            "ZINTERCARD",
            "ZDIFF",
            "ZDIFFSTORE",
            "ZSCAN",
        ],
    ),
    (
        "streams",
        &[
            "XADD",
            "XREAD",
            "XREADGROUP",
            "XRANGE",
            "XREVRANGE",
            "XLEN",
            "XDEL",
            "XTRIM",
            "XGROUP",
            "XACK",
            "XPENDING",
            "XCLAIM",
            "XAUTOCLAIM",
            "XINFO",
            "XSETID",
        ],
    ),
    (
        "pub/sub",
        &[
            "PUBLISH",
            "SUBSCRIBE",
            "UNSUBSCRIBE",
            "PSUBSCRIBE",
            "PUNSUBSCRIBE",
            "PUBSUB",
            "SPUBLISH",
            "SSUBSCRIBE",
            "SUNSUBSCRIBE",
        ],
    ),
    (
        // EVAL, EVALSHA and SCRIPT are answered for redis-py's lock
        // scripts (scripts.rs); other scripts get their own error there.
        "scripting",
        &["EVAL_RO", "EVALSHA_RO", "FUNCTION", "FCALL", "FCALL_RO"],
    ),
    (
        "geo",
        &[
            "GEOADD",
            "GEOPOS",
            "GEODIST",
            "GEOHASH",
            "GEORADIUS",
            "GEORADIUS_RO",
            "GEORADIUSBYMEMBER",
            "GEORADIUSBYMEMBER_RO",
            "GEOSEARCH",
            "GEOSEARCHSTORE",
        ],
    ),
    (
        "hyperloglog",
        &["PFADD", "PFCOUNT", "PFMERGE", "PFDEBUG", "PFSELFTEST"],
    ),
    (
        "bitmaps",
        &[
            "SETBIT",
            "GETBIT",
            "BITCOUNT",
            "BITPOS",
            "BITOP",
            "BITFIELD",
            "BITFIELD_RO",
        ],
    ),
];

/// The refusal for `name` (any case) if it is a command of another data
/// type, else `None`.
pub fn refusal(name: &[u8]) -> Option<Reply> {
    OTHER_TYPES.iter().find_map(|(kind, names)| {
        names
            .iter()
            .find(|n| name.eq_ignore_ascii_case(n.as_bytes()))
            .map(|n| {
                Reply::err(format!(
                    "kivi stores strings only; '{n}' ({kind}) is not supported"
                ))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::commands::COMMANDS;
    use std::collections::HashSet;

    #[test]
    fn the_table_names_no_command_kivi_answers_and_none_twice() {
        let mut seen = HashSet::new();
        for (_, names) in OTHER_TYPES {
            for n in *names {
                assert_eq!(*n, n.to_ascii_uppercase());
                assert!(seen.insert(*n), "{n} twice");
                assert!(COMMANDS.iter().all(|(c, _)| c != n), "{n} is answered");
            }
        }
    }

    #[test]
    fn the_refusal_names_the_command_and_its_type() {
        assert_eq!(
            refusal(b"hset"),
            Some(Reply::err(
                "kivi stores strings only; 'HSET' (hashes) is not supported"
            ))
        );
        assert!(refusal(b"ZADD").is_some());
        assert!(refusal(b"SET").is_none());
        assert!(refusal(b"NOSUCH").is_none());
    }
}
