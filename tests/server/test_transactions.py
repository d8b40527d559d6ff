"""MULTI / EXEC / DISCARD / WATCH against `kivi serve`, through redis-py
and raw RESP: Redis's semantics, one atomic durable commit per EXEC.

Run by test.sh: KIVI_BIN=target/debug/kivi python3 -m pytest tests/server
"""

import os
import signal
import socket
import tempfile
import threading
import time

import pytest
import redis

from test_resp import Server, server  # noqa: F401  (the fixture)


def in_threads(work, n):
    """Runs `work` in `n` threads at once and waits for them all."""
    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_pipeline_transaction_answers_each_command_in_order(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.set("n", "10")
    p = r.pipeline()  # transaction=True: MULTI ... EXEC
    p.incr("n").get("n").set("k", "v").getdel("k").exists("k").mget("n", "k", "none")
    assert p.execute() == [11, b"11", True, b"v", 0, [b"11", None, None]]
    assert r.get("n") == b"11"
    assert r.get("k") is None


def test_a_command_refused_while_queuing_applies_nothing(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.set("n", "1")
    c = r.connection_pool.get_connection()
    try:
        c.send_command("MULTI")
        assert c.read_response() == b"OK"
        c.send_command("INCR", "n")
        assert c.read_response() == b"QUEUED"
        c.send_command("SET", "k", "v")
        assert c.read_response() == b"QUEUED"
        c.send_command("NOSUCHCOMMAND", "x")
        with pytest.raises(redis.ResponseError, match="unknown command"):
            c.read_response()
        c.send_command("GET")  # wrong arity
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            c.read_response()
        c.send_command("EXEC")
        # redis-py turns the EXECABORT code into this class.
        with pytest.raises(redis.exceptions.ExecAbortError, match="previous errors"):
            c.read_response()
        # The connection is out of the transaction again.
        c.send_command("EXEC")
        with pytest.raises(redis.ResponseError, match="EXEC without MULTI"):
            c.read_response()
    finally:
        r.connection_pool.release(c)
    assert r.get("n") == b"1"
    assert r.get("k") is None


def test_errors_at_exec_do_not_stop_the_other_commands(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.set("text", "abc")
    p = r.pipeline()
    p.incr("text").set("after", "1")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        p.execute()
    # As in Redis, the other commands of the transaction took effect.
    assert r.get("after") == b"1"
    assert r.get("text") == b"abc"


def test_discard_and_nesting(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    c = r.connection_pool.get_connection()
    try:
        for cmd, want in [
            (("MULTI",), b"OK"),
            (("SET", "k", "v"), b"QUEUED"),
            (("DISCARD",), b"OK"),
            (("GET", "k"), None),
        ]:
            c.send_command(*cmd)
            assert c.read_response() == want, cmd
        c.send_command("DISCARD")
        with pytest.raises(redis.ResponseError, match="DISCARD without MULTI"):
            c.read_response()
        c.send_command("MULTI")
        assert c.read_response() == b"OK"
        c.send_command("MULTI")
        with pytest.raises(redis.ResponseError, match="can not be nested"):
            c.read_response()
        c.send_command("WATCH", "k")
        with pytest.raises(redis.ResponseError, match="WATCH inside MULTI"):
            c.read_response()
        c.send_command("SET", "k", "v2")
        assert c.read_response() == b"QUEUED"
        c.send_command("EXEC")
        assert c.read_response() == [b"OK"]
    finally:
        r.connection_pool.release(c)
    assert r.get("k") == b"v2"


def test_watch_conflict_answers_nil_and_applies_nothing(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    other = redis.Redis(host=server.host, port=server.port)
    r.set("balance", "100")
    with r.pipeline() as p:
        p.watch("balance")
        assert int(p.get("balance")) == 100
        other.set("balance", "50")  # another client, after the WATCH
        p.multi()
        p.set("balance", "90")
        p.set("log", "withdrew 10")
        with pytest.raises(redis.WatchError):
            p.execute()
    assert r.get("balance") == b"50"
    assert r.get("log") is None
    # Watching an absent key that another client creates also conflicts.
    with r.pipeline() as p:
        p.watch("lock")
        other.set("lock", "theirs")
        p.multi()
        p.set("lock", "mine")
        with pytest.raises(redis.WatchError):
            p.execute()
    assert r.get("lock") == b"theirs"
    # Unchanged, the same transaction goes through; UNWATCH forgets.
    with r.pipeline() as p:
        p.watch("balance")
        p.multi()
        p.set("balance", "40")
        assert p.execute() == [True]
    with r.pipeline() as p:
        p.watch("balance")
        p.unwatch()
        other.set("balance", "30")
        p.multi()
        p.set("balance", "20")
        assert p.execute() == [True]
    assert r.get("balance") == b"20"


def test_optimistic_increments_from_many_clients_lose_nothing(server):  # noqa: F811
    # The classic WATCH / GET / MULTI / SET loop from 8 threads: every
    # increment lands exactly once (a WatchError means try again).
    pool = redis.ConnectionPool(host=server.host, port=server.port, max_connections=16)
    errors = []

    def work():
        try:
            r = redis.Redis(connection_pool=pool)
            for _ in range(100):
                while True:
                    with r.pipeline() as p:
                        try:
                            p.watch("counter")
                            n = int(p.get("counter") or 0)
                            p.multi()
                            p.set("counter", n + 1)
                            p.execute()
                            break
                        except redis.WatchError:
                            pass
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    in_threads(work, 8)
    assert not errors
    assert redis.Redis(connection_pool=pool).get("counter") == b"800"


def test_incr_inside_transactions_is_atomic_across_clients(server):  # noqa: F811
    # A rate limiter's shape: INCR then read inside MULTI, from 8 threads;
    # each EXEC sees its own increment, and they are all distinct.
    pool = redis.ConnectionPool(host=server.host, port=server.port, max_connections=16)
    seen = []
    lock = threading.Lock()

    def work():
        r = redis.Redis(connection_pool=pool)
        for _ in range(50):
            p = r.pipeline()
            n, got = p.incr("hits").get("hits").execute()
            assert got == str(n).encode()
            with lock:
                seen.append(n)

    in_threads(work, 8)
    assert sorted(seen) == list(range(1, 401))


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def test_kill_during_exec_of_1000_sets_leaves_all_or_none():
    # Each round sends one EXEC of 1,000 SETs of 4 KiB and kills the server
    # with SIGKILL at a different moment: after a restart, every key of the
    # round is there with its value, or none is.
    value = b"x" * 4096
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        outcomes = set()
        for round_ in range(6):
            s = Server(store)
            sock = socket.create_connection((s.host, s.port))
            body = resp("MULTI")
            for i in range(1000):
                body += resp("SET", f"r{round_}:{i:04}", value + str(round_).encode())
            body += resp("EXEC")
            sock.sendall(body)
            time.sleep(0.002 * round_ * round_)
            os.kill(s.proc.pid, signal.SIGKILL)
            s.proc.wait(timeout=60)
            sock.close()
            s = Server(store)
            r = redis.Redis(host=s.host, port=s.port)
            present = sum(1 for _ in r.scan_iter(match=f"r{round_}:*", count=1000))
            assert present in (0, 1000), f"round {round_}: {present} of 1000 keys"
            if present:
                assert r.get(f"r{round_}:0999") == value + str(round_).encode()
            outcomes.add(present)
            assert s.stop() == 0
        # The rounds' timings are meant to see both outcomes; either alone
        # still shows atomicity, so this is not asserted.
        print("outcomes seen:", sorted(outcomes))
