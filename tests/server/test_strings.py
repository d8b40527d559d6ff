"""The string and keyspace commands against `kivi serve`, through redis-py,
checked against what Redis answers (the values below are Redis 7's).

Run by test.sh: KIVI_BIN=target/debug/kivi python3 -m pytest tests/server
"""

import pytest
import redis

from test_resp import server  # noqa: F401  (the fixture)


def test_getset_append_and_ranges(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    assert r.getset("k", "a") is None
    assert r.getset("k", "Hello") == b"a"
    assert r.append("k", " World") == 11
    assert r.append("fresh", "xy") == 2
    assert r.getrange("k", 0, 4) == b"Hello"
    assert r.getrange("k", -5, -1) == b"World"
    assert r.getrange("k", 0, -100) == b"H"
    assert r.getrange("k", 20, 30) == b""
    assert r.getrange("missing", 0, -1) == b""
    assert r.execute_command("SUBSTR", "k", 6, 100) == b"World"
    assert r.setrange("k", 6, "Redis") == 11
    assert r.get("k") == b"Hello Redis"
    assert r.setrange("pad", 3, "x") == 4
    assert r.get("pad") == b"\x00\x00\x00x"
    assert r.setrange("nothing", 5, "") == 0
    assert r.exists("nothing") == 0
    with pytest.raises(redis.ResponseError, match="offset is out of range"):
        r.setrange("k", -1, "x")
    with pytest.raises(redis.ResponseError, match="maximum allowed size"):
        r.setrange("k", 64 << 20, "x")


def test_msetnx_touch_unlink_and_type(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    assert r.msetnx({"a": "1", "b": "2"}) is True
    assert r.msetnx({"b": "x", "c": "3"}) is False
    assert r.get("c") is None and r.get("b") == b"2"
    assert r.touch("a", "b", "none") == 2
    assert r.type("a") == b"string"
    assert r.type("none") == b"none"
    assert r.unlink("a", "b", "a", "none") == 2
    assert r.dbsize() == 0


def test_copy_and_rename(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.set("src", "v")
    assert r.copy("src", "dst") is True
    assert r.copy("src", "dst") is False
    r.set("src", "v2")
    assert r.copy("src", "dst", replace=True) is True
    assert r.get("dst") == b"v2"
    assert r.copy("missing", "x") is False
    assert r.rename("src", "moved") is True
    assert r.get("src") is None and r.get("moved") == b"v2"
    with pytest.raises(redis.ResponseError, match="no such key"):
        r.rename("src", "other")
    assert r.renamenx("moved", "dst") is False
    assert r.renamenx("moved", "new") is True
    assert r.get("new") == b"v2" and r.get("moved") is None
    # RENAME overwrites, atomically: one commit.
    r.set("a", "A")
    r.set("b", "B")
    assert r.rename("a", "b") is True
    assert r.get("b") == b"A" and r.get("a") is None


def test_incrbyfloat(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.set("f", "10.50")
    assert r.incrbyfloat("f", 0.1) == pytest.approx(10.6)
    assert r.get("f") == b"10.6"
    assert r.incrbyfloat("new", -5) == -5.0
    r.set("s", "abc")
    with pytest.raises(redis.ResponseError, match="not a valid float"):
        r.incrbyfloat("s", 1)
    with pytest.raises(redis.ResponseError, match="not a valid float"):
        r.execute_command("INCRBYFLOAT", "f", "nan")


def test_string_commands_inside_a_transaction(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.set("a", "x")
    p = r.pipeline()
    p.append("a", "yz").getrange("a", 1, 2).rename("a", "b").type("a").type("b")
    assert p.execute() == [3, b"yz", True, b"none", b"string"]
    assert r.get("b") == b"xyz"


def test_keys_and_bigkeys(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.mset({"user:1": "a", "user:2": "bb", "user:10": "c", "session:1": "x" * 100})
    assert r.keys("user:*") == [b"user:1", b"user:10", b"user:2"]
    assert r.keys("user:?") == [b"user:1", b"user:2"]
    assert r.keys("*:1") == [b"session:1", b"user:1"]
    assert r.keys("nothing*") == []
    assert len(r.keys()) == 4
    # redis-cli --bigkeys walks the keyspace with SCAN, TYPE and STRLEN.
    from test_resp import cli
    out = cli(server, "--bigkeys")
    assert "Biggest string found" in out and "session:1" in out, out


def test_flushdb_deletes_everything_in_one_commit(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.mset({f"k{i}": "v" for i in range(1000)})
    r.set("ttl", "v", ex=100)
    assert r.dbsize() == 1001
    assert r.flushdb() is True
    assert r.dbsize() == 0 and r.keys("*") == [] and r.get("k1") is None
    r.set("new", "1")
    assert r.flushall(asynchronous=True) is True
    assert r.dbsize() == 0
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("FLUSHDB", "LATER")
    # A watched key emptied by FLUSHDB fails the transaction.
    r.set("w", "1")
    with r.pipeline() as p:
        p.watch("w")
        redis.Redis(host=server.host, port=server.port).flushdb()
        p.multi()
        p.set("x", "1")
        with pytest.raises(redis.WatchError):
            p.execute()
    assert r.get("x") is None


def test_kill_9_around_flushdb_leaves_all_or_nothing():
    # Each round fills the store, sends FLUSHDB and kills the server with
    # SIGKILL at a different moment: after a restart every key is there or
    # none is; once FLUSHDB was answered, none is.
    import os
    import signal
    import socket
    import tempfile
    import time

    from test_resp import Server

    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        outcomes = set()
        for round_ in range(6):
            s = Server(store)
            r = redis.Redis(host=s.host, port=s.port)
            r.mset({f"k{i:04}": f"v{round_}" for i in range(2000)})
            sock = socket.create_connection((s.host, s.port))
            sock.sendall(b"*1\r\n$7\r\nFLUSHDB\r\n")
            time.sleep(0.0005 * round_ * round_)
            answered = False
            if round_ == 5:
                answered = sock.recv(16).startswith(b"+OK")
            os.kill(s.proc.pid, signal.SIGKILL)
            s.proc.wait(timeout=60)
            sock.close()
            s = Server(store)
            r = redis.Redis(host=s.host, port=s.port)
            present = r.dbsize()
            assert present in (0, 2000), f"round {round_}: {present} of 2000 keys"
            if answered:
                assert present == 0, "an answered FLUSHDB survives kill -9"
            if present:
                assert r.get("k1999") == f"v{round_}".encode()
            outcomes.add(present)
            r.flushdb()
            assert s.stop() == 0
        print("outcomes seen:", sorted(outcomes))
