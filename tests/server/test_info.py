"""INFO and CONFIG GET tell the truth about the server, RANDOMKEY answers a
real key, and the other data types' commands get one clear error: against
`kivi serve` through redis-py.

Run by test.sh: KIVI_BIN=target/debug/kivi python3 -m pytest tests/server
"""

import contextlib
import os
import re
import tempfile
import time

import pytest
import redis

from test_resp import Server, cli, server  # noqa: F401  (the fixture)


@contextlib.contextmanager
def started(*flags):
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(os.path.join(tmp, "store"), flags=flags)
        try:
            yield s
        finally:
            if s.proc.poll() is None:
                assert s.stop() == 0


def client(server):  # noqa: F811
    return redis.Redis(host=server.host, port=server.port)


def statm_rss(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def human(s):
    """Redis's `*_human` text back to bytes (about)."""
    m = re.fullmatch(r"([0-9.]+)([BKMGT])", s)
    assert m, s
    return float(m.group(1)) * 1024 ** "BKMGT".index(m.group(2))


def test_info_has_redis_sections_and_fields(server):  # noqa: F811
    r = client(server)
    text = cli(server, "info")
    sections = re.findall(r"^# (\w+)", text, re.M)
    for name in ["Server", "Clients", "Memory", "Persistence", "Stats",
                 "Replication", "CPU", "Cluster", "Keyspace"]:
        assert name in sections, sections
    assert sections[-1] == "Keyspace"
    info = r.info()
    assert info["process_id"] == server.proc.pid
    assert info["tcp_port"] == server.port
    assert info["role"] == "master"
    assert info["connected_slaves"] == 0
    assert info["cluster_enabled"] == 0
    assert info["aof_enabled"] == 1
    assert info["expired_keys"] == 0
    assert info["maxmemory"] == 0
    assert info["used_cpu_user"] + info["used_cpu_sys"] > 0
    # kivi's own fields are still there.
    for field in ["kivi_version", "kivi_cache_capacity", "kivi_checkpoints",
                  "kivi_group_commits", "pairs", "file_bytes"]:
        assert field in info, field
    # One section alone.
    # A writer: Redis's master fields, its offset the last commit.
    replication = r.info("replication")
    assert set(replication) == {"role", "connected_slaves", "master_repl_offset"}
    assert replication["master_repl_offset"] >= 0


def test_used_memory_is_the_allocators_and_rss_the_oss(server):  # noqa: F811
    r = client(server)
    info = r.info("memory")
    assert info["mem_allocator"] == "mimalloc"
    used, rss = info["used_memory"], info["used_memory_rss"]
    # mimalloc's committed bytes: some MiB for a fresh server, not its RSS
    # (which holds the binary's pages too).
    assert 64 << 10 < used < 1 << 30, used
    assert used != rss
    assert abs(human(info["used_memory_human"]) - used) <= used * 0.01
    assert abs(human(info["used_memory_rss_human"]) - rss) <= rss * 0.01
    # The OS's figure for the server process, read around INFO's.
    before = statm_rss(server.proc.pid)
    rss = r.info("memory")["used_memory_rss"]
    after = statm_rss(server.proc.pid)
    low, high = min(before, after), max(before, after)
    assert low * 0.9 - (1 << 20) <= rss <= high * 1.1 + (1 << 20), (before, rss, after)


def test_used_memory_follows_the_heap(server):  # noqa: F811
    r = client(server)
    before = r.info("memory")["used_memory"]
    # 48 MiB of values: the engine holds them in its write buffer until a
    # checkpoint writes them out (its default buffer is 64 MiB).
    p = r.pipeline(transaction=False)
    for i in range(48):
        p.set(f"big:{i}", os.urandom(1 << 20))
    p.execute()
    after = r.info("memory")["used_memory"]
    assert after > before + (8 << 20), (before, after)


def test_connected_clients_and_connections_received(server):  # noqa: F811
    r1, r2 = client(server), client(server)
    assert r1.ping() and r2.ping()
    info = r1.info("clients")
    assert info["connected_clients"] == 2
    assert info["maxclients"] == 10000
    received = r1.info("stats")["total_connections_received"]
    assert received >= 2
    r2.close()
    deadline = time.monotonic() + 10
    while r1.info("clients")["connected_clients"] != 1:
        assert time.monotonic() < deadline, "a closed connection still counted"
        time.sleep(0.05)
    r3 = client(server)
    assert r3.ping()
    assert r1.info("stats")["total_connections_received"] == received + 1


def test_total_commands_processed_counts_each_command(server):  # noqa: F811
    r = client(server)
    start = r.info("stats")["total_commands_processed"]
    sent = 0
    r.set("k", "v")
    r.get("k")
    r.get("missing")
    r.incr("n")
    r.mget("k", "n")
    r.ping()
    sent += 6
    p = r.pipeline(transaction=False)
    for i in range(20):
        p.set(f"p{i}", i)
        p.get(f"p{i}")
    p.execute()
    sent += 40
    # MULTI, the three queued commands and EXEC.
    p = r.pipeline(transaction=True)
    p.set("t", 1).incr("t").get("t")
    assert p.execute() == [True, 2, b"2"]
    sent += 5
    with pytest.raises(redis.ResponseError):
        r.execute_command("NOSUCH")
    sent += 1
    now = r.info("stats")["total_commands_processed"]
    # The first INFO counts too, once it had run; the last does not yet.
    assert now - start == sent + 1


def test_instantaneous_ops_per_sec_is_the_recent_rate(server):  # noqa: F811
    r = client(server)
    end = time.monotonic() + 0.8
    sent = 0
    while time.monotonic() < end:
        p = r.pipeline(transaction=False)
        for _ in range(500):
            p.ping()
        p.execute()
        sent += 500
    busy = r.info("stats")["instantaneous_ops_per_sec"]
    # The rate over the last 1.6 s, of which 0.8 s were this busy.
    assert busy > 100, (busy, sent)
    assert busy < sent * 2, (busy, sent)
    time.sleep(2.0)
    idle = r.info("stats")["instantaneous_ops_per_sec"]
    assert idle <= 5, idle


def test_keyspace_hits_and_misses_move_on_reads(server):  # noqa: F811
    r = client(server)
    r.set("k", "v")
    stats = r.info("stats")
    hits, misses = stats["keyspace_hits"], stats["keyspace_misses"]
    assert r.get("k") == b"v"  # hit
    assert r.get("missing") is None  # miss
    assert r.mget("k", "no1", "no2") == [b"v", None, None]  # 1 hit, 2 misses
    p = r.pipeline(transaction=False)  # GETs looked up together
    p.get("k").get("no3")
    p.execute()
    p = r.pipeline(transaction=True)  # GETs inside EXEC
    p.get("k").get("no4")
    p.execute()
    r.set("k", "w")  # a write is no lookup
    stats = r.info("stats")
    assert stats["keyspace_hits"] - hits == 4
    assert stats["keyspace_misses"] - misses == 5


def test_keyspace_db0_keys_is_dbsize(server):  # noqa: F811
    r = client(server)
    assert "db0" not in r.info("keyspace") or r.info("keyspace")["db0"]["keys"] == 0
    r.mset({f"k{i}": i for i in range(30)})
    r.delete("k1", "k2", "k3")
    db0 = r.info("keyspace")["db0"]
    assert db0["keys"] == r.dbsize() == 27
    assert db0["expires"] == 0 and db0["avg_ttl"] == 0
    # Keys with a deadline are `expires`; an expired one is in neither
    # count, a PERSIST takes one out, a plain SET drops the deadline.
    r.expire("k4", 1000)
    r.set("k5", "v", ex=1000)
    r.set("k6", "v", px=1)
    r.set("new", "v", ex=1000)
    r.setex("k7", 1000, "v")
    time.sleep(0.05)
    db0 = r.info("keyspace")["db0"]
    assert (db0["keys"], db0["expires"]) == (r.dbsize(), 4) == (27, 4)
    r.persist("k4")
    r.set("k5", "plain")
    r.delete("k7")
    db0 = r.info("keyspace")["db0"]
    assert (db0["keys"], db0["expires"]) == (26, 1)


def test_config_get_answers_what_the_server_does(server):  # noqa: F811
    r = client(server)
    assert r.config_get("appendfsync") == {"appendfsync": "always"}
    assert r.config_get("appendonly") == {"appendonly": "yes"}
    assert r.config_get("save") == {"save": ""}
    assert r.config_get("databases") == {"databases": "1"}
    assert r.config_get("timeout") == {"timeout": "0"}
    assert r.config_get("port") == {"port": str(server.port)}
    assert r.config_get("bind") == {"bind": server.host}
    maxes = r.config_get("max*")
    assert maxes["maxmemory"] == "0"
    assert maxes["maxclients"] == "10000"
    assert len(maxes) >= 2
    assert all(k.startswith("max") for k in maxes)
    everything = r.config_get("*")
    assert everything["appendfsync"] == "always" and len(everything) > len(maxes)
    assert r.config_get("no-such-parameter") == {}
    with pytest.raises(redis.ResponseError, match="can't set immutable config"):
        r.config_set("appendfsync", "no")
    assert r.config_get("appendfsync") == {"appendfsync": "always"}


def test_config_get_under_no_fsync_and_a_connection_limit():
    with started("--no-fsync", "--max-connections", "7") as s:
        r = client(s)
        assert r.config_get("appendfsync") == {"appendfsync": "no"}
        assert r.config_get("maxclients") == {"maxclients": "7"}
        assert r.info("clients")["maxclients"] == 7


def test_config_resetstat_zeroes_the_counters(server):  # noqa: F811
    r = client(server)
    r.set("k", "v")
    r.get("k")
    r.get("missing")
    stats = r.info("stats")
    assert stats["total_commands_processed"] > 3 and stats["keyspace_hits"] == 1
    assert r.config_resetstat()
    stats = r.info("stats")
    # CONFIG RESETSTAT itself, counted once it had run.
    assert stats["total_commands_processed"] == 1
    assert stats["keyspace_hits"] == 0 and stats["keyspace_misses"] == 0
    assert stats["total_connections_received"] == 0
    # The data is not a stat.
    assert r.get("k") == b"v"


def test_randomkey(server):  # noqa: F811
    r = client(server)
    assert r.randomkey() is None
    r.set("only", "1")
    assert r.randomkey() == b"only"
    keys = {f"user:{i:03}".encode() for i in range(100)}
    r.mset({k: "x" for k in keys})
    keys.add(b"only")
    drawn = [r.randomkey() for _ in range(300)]
    assert all(k in keys for k in drawn)
    # Not a fixed key: about 95 distinct keys are expected.
    assert len(set(drawn)) > 50, len(set(drawn))
    r.delete(*keys)
    assert r.randomkey() is None


def test_other_data_types_get_one_clear_error(server):  # noqa: F811
    r = client(server)
    with pytest.raises(redis.ResponseError,
                       match=r"^kivi stores strings only; 'HSET' \(hashes\) is not supported$"):
        r.hset("h", "f", "v")
    assert r.dbsize() == 0 and r.exists("h") == 0
    for call, kind in [
        (lambda: r.lpush("l", "x"), "lists"),
        (lambda: r.sadd("s", "x"), "sets"),
        (lambda: r.zadd("z", {"x": 1}), "sorted sets"),
        (lambda: r.xadd("x", {"f": "v"}), "streams"),
        (lambda: r.publish("c", "m"), "pub/sub"),
        (lambda: r.fcall("f", 0), "scripting"),
        (lambda: r.pfadd("p", "x"), "hyperloglog"),
        (lambda: r.geoadd("g", (0, 0, "x")), "geo"),
        (lambda: r.setbit("b", 1, 1), "bitmaps"),
    ]:
        with pytest.raises(redis.ResponseError, match=f"strings only; .*\\({kind}\\)"):
            call()
    assert r.dbsize() == 0
    # Scripts other than redis-py's lock scripts are refused (scripts.rs).
    with pytest.raises(redis.ResponseError, match="runs no Lua scripts"):
        r.eval("return 1", 0)
    # Inside MULTI the same error, and the transaction is discarded.
    p = r.pipeline(transaction=True)
    p.set("a", "1").hset("h", "f", "v")
    with pytest.raises(redis.ResponseError, match="EXECABORT|strings only"):
        p.execute()
    assert r.dbsize() == 0
    # An unknown command is still one.
    with pytest.raises(redis.ResponseError, match="unknown command 'HSETT'"):
        r.execute_command("HSETT", "h", "f", "v")
