"""`kivi serve` driven by real Redis clients: redis-py (from PyPI), and
redis-cli and redis-benchmark (Debian's redis-tools). Each test starts a
real server process on a temporary store.

Run by test.sh: KIVI_BIN=target/debug/kivi python3 -m pytest tests/server
"""

import os
import subprocess
import tempfile

import pytest
import redis

KIVI = os.environ.get("KIVI_BIN", "target/release/kivi")


class Server:
    def __init__(self, store, resp="127.0.0.1:0", flags=()):
        """`flags`: more arguments for `kivi serve` (its own or the global
        ones, such as --no-fsync)."""
        self.proc = subprocess.Popen(
            [KIVI, "-d", store, "serve", "--resp", resp, *flags],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        prefix = "kivi serve: resp listening on "
        assert line.startswith(prefix), line
        self.addr = line[len(prefix):].split(" ")[0]
        if "/" in self.addr:
            self.host, self.port = None, None
        else:
            self.host, port = self.addr.rsplit(":", 1)
            self.port = int(port)

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=60)


def read_exactly(sock, n):
    """The next `n` bytes the server sends on `sock`."""
    got = b""
    while len(got) < n:
        chunk = sock.recv(1 << 16)
        assert chunk, "the server closed the connection"
        got += chunk
    return got


@pytest.fixture
def server():
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(os.path.join(tmp, "store"))
        yield s
        if s.proc.poll() is None:
            assert s.stop() == 0


def cli(server, *args, resp3=False):
    cmd = ["redis-cli", "-h", server.host, "-p", str(server.port)]
    if resp3:
        cmd.append("-3")
    out = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_commands(server, protocol):
    r = redis.Redis(host=server.host, port=server.port, protocol=protocol)
    assert r.ping()
    assert r.set("greeting", "hello")
    assert r.get("greeting") == b"hello"
    assert r.get("absent") is None
    assert r.set("greeting", "hi", get=True) == b"hello"
    assert r.set("greeting", "x", nx=True) is None
    assert r.set("other", "x", xx=True) is None
    assert r.setnx("counter", "10")
    assert r.incr("counter") == 11
    assert r.incrby("counter", 5) == 16
    assert r.decr("counter") == 15
    assert r.mset({"a": "1", "b": "2"})
    assert r.mget("a", "b", "c") == [b"1", b"2", None]
    assert r.exists("a", "b", "c") == 2
    assert r.strlen("greeting") == 2
    assert r.getdel("a") == b"1"
    assert r.delete("a", "b", "c") == 1
    assert r.dbsize() == 2
    assert r.execute_command("CAS", "greeting", "hi", "hey") == 1
    assert r.execute_command("CAD", "greeting", "hi") == 0
    assert r.execute_command("RANGE", "", "") == [b"counter", b"15", b"greeting", b"hey"]
    assert r.client_setname("tester")
    assert r.client_getname() in ("tester", b"tester")
    info = r.info()
    assert info["redis_version"]
    assert info["db0"]["keys"] == 2
    assert r.config_get("appendonly") == {"appendonly": "yes"}
    with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
        r.execute_command("NOSUCHCOMMAND", "x")
    # The connection is still usable after errors.
    assert r.get("greeting") == b"hey"


def test_redis_py_pipeline_and_scan(server):
    r = redis.Redis(host=server.host, port=server.port)
    p = r.pipeline(transaction=False)
    for i in range(2000):
        p.set(f"key:{i:05}", str(i))
        if i % 100 == 0:
            p.get(f"key:{i:05}")
    results = p.execute()
    assert results.count(True) == 2000
    assert [x for x in results if x is not True] == [str(i).encode() for i in range(0, 2000, 100)]
    keys = list(r.scan_iter(match="key:01*", count=50))
    assert keys == [f"key:{i:05}".encode() for i in range(1000, 2000)]
    assert sorted(r.scan_iter(count=1000)) == [f"key:{i:05}".encode() for i in range(2000)]


def test_a_long_pipeline_is_read_in_large_chunks_that_share_commits(server):
    # 20,000 SETs (about 800 KB) sent before any answer is read: the
    # connection's read buffer grows while reads fill it, so the commands
    # share a few dozen group commits. Read 4 KiB at a time (about 100 of
    # these commands), they took over 200, an fsync each.
    import socket
    r = redis.Redis(host=server.host, port=server.port)
    before = r.info("stats")["kivi_group_commits"]
    n = 20_000
    wire = b"".join(
        b"*3\r\n$3\r\nSET\r\n$9\r\nkey:%05d\r\n$9\r\nval:%05d\r\n" % (i, i)
        for i in range(n)
    )
    with socket.create_connection((server.host, server.port)) as s:
        s.sendall(wire)
        want = b"+OK\r\n" * n
        assert read_exactly(s, len(want)) == want
    commits = r.info("stats")["kivi_group_commits"] - before
    assert 1 <= commits <= 60, commits
    assert r.get("key:19999") == b"val:19999" and r.dbsize() == n


def test_redis_py_connection_pool_across_threads(server):
    import threading

    pool = redis.ConnectionPool(host=server.host, port=server.port, max_connections=20)
    errors = []

    def work(t):
        try:
            r = redis.Redis(connection_pool=pool)
            for i in range(200):
                r.set(f"t{t}:{i}", i)
                r.incr("shared")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    r = redis.Redis(connection_pool=pool)
    # INCR is atomic across connections.
    assert r.get("shared") == b"1600"
    assert r.dbsize() == 1601


def test_redis_cli(server):
    assert cli(server, "ping") == "PONG"
    assert cli(server, "set", "k1", "v1") == "OK"
    assert cli(server, "get", "k1") == "v1"
    assert cli(server, "mset", "k2", "v2", "x", "y") == "OK"
    assert cli(server, "--scan", "--pattern", "k*").split() == ["k1", "k2"]
    assert cli(server, "dbsize") == "3"
    assert "ERR" in cli(server, "get")
    assert "proto" in cli(server, "hello", "3", resp3=True)
    assert "db0:keys=3" in cli(server, "info", "keyspace")


def test_redis_benchmark_runs_against_kivi(server):
    out = subprocess.run(
        ["redis-benchmark", "-h", server.host, "-p", str(server.port),
         "-t", "set,get", "-n", "5000", "-P", "50", "-c", "10", "-q"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "SET:" in out.stdout and "GET:" in out.stdout, out.stdout
    assert "error" not in (out.stdout + out.stderr).lower()
    # redis-benchmark writes key:__rand_int__ keys.
    assert int(cli(server, "dbsize")) >= 1


def test_unix_socket_and_restart():
    with tempfile.TemporaryDirectory() as tmp:
        store, sock = os.path.join(tmp, "store"), os.path.join(tmp, "kivi.sock")
        s = Server(store, resp=sock)
        r = redis.Redis(unix_socket_path=sock)
        assert r.set("durable", "yes")
        assert s.stop() == 0
        assert not os.path.exists(sock)
        s = Server(store, resp=sock)
        assert redis.Redis(unix_socket_path=sock).get("durable") == b"yes"
        assert s.stop() == 0
