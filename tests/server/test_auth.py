"""Access control: passwords (--requirepass), users with roles (--user),
and protected mode, through redis-py and redis-cli as users reach them."""

import os
import subprocess
import tempfile

import pytest
import redis

from test_resp import KIVI, Server, read_exactly


@pytest.fixture
def locked():
    """A server with a default password, a read-only and a read-write user."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(
            os.path.join(tmp, "store"),
            flags=[
                "--requirepass", "s3cret",
                "--user", "reader:read-only:r3ad",
                "--user", "app:read-write:app:pw",
            ],
        )
        yield s
        if s.proc.poll() is None:
            assert s.stop() == 0


def test_nothing_runs_before_auth(locked):
    r = redis.Redis(host=locked.host, port=locked.port)
    for call in [lambda: r.set("k", "v"), lambda: r.get("k"), lambda: r.dbsize(),
                 lambda: r.execute_command("MULTI")]:
        # (redis-py may open with HELLO 3, refused first.)
        with pytest.raises(redis.exceptions.AuthenticationError, match="(?i)authenticat"):
            call()
    # HELLO without AUTH is refused too (redis-py's RESP3 handshake).
    r3 = redis.Redis(host=locked.host, port=locked.port, protocol=3)
    with pytest.raises(redis.exceptions.AuthenticationError, match="HELLO must be called"):
        r3.ping()
    # Many refusals in one read are all answered, in order.
    import socket
    with socket.create_connection((locked.host, locked.port)) as c:
        n = 10_000
        c.sendall(b"GET k\r\n" * n + b"AUTH s3cret\r\nDBSIZE\r\n")
        want = b"-NOAUTH Authentication required.\r\n" * n + b"+OK\r\n:0\r\n"
        assert read_exactly(c, len(want)) == want
    # The refused commands did nothing.
    ok = redis.Redis(host=locked.host, port=locked.port, password="s3cret")
    assert ok.dbsize() == 0


def test_a_wrong_password_is_refused_and_a_right_one_lets_in(locked):
    for kw in [dict(password="wrong"), dict(password="s3cret "), dict(username="app", password="s3cret"),
               dict(username="nobody", password="s3cret"), dict(password="wrong", protocol=3)]:
        r = redis.Redis(host=locked.host, port=locked.port, **kw)
        with pytest.raises(redis.exceptions.AuthenticationError, match="invalid username-password"):
            r.ping()
    for kw in [dict(password="s3cret"), dict(username="default", password="s3cret", protocol=3),
               dict(username="app", password="app:pw")]:
        r = redis.Redis(host=locked.host, port=locked.port, **kw)
        assert r.set("k", "v") and r.get("k") == b"v"
    r = redis.Redis(host=locked.host, port=locked.port, username="app", password="app:pw")
    assert r.execute_command("ACL", "WHOAMI") == b"app"
    # AUTH again on the same connection changes who it is.
    assert r.execute_command("AUTH", "reader", "r3ad") is True
    assert r.execute_command("ACL", "WHOAMI") == b"reader"
    # A failed AUTH leaves the connection as it was (on one raw connection:
    # redis-py drops a connection whose AUTH failed).
    import socket
    with socket.create_connection((locked.host, locked.port)) as c:
        c.sendall(b"AUTH reader r3ad\r\nAUTH reader wrong\r\nACL WHOAMI\r\nGET k\r\nSET k w\r\n")
        want = (b"+OK\r\n-WRONGPASS invalid username-password pair or user is disabled.\r\n"
                b"$6\r\nreader\r\n$1\r\nv\r\n"
                b"-NOPERM User reader has no permissions to run the 'set' command\r\n")
        assert read_exactly(c, len(want)) == want


def test_a_read_only_user_reads_and_cannot_write(locked):
    rw = redis.Redis(host=locked.host, port=locked.port, password="s3cret")
    rw.set("k", "v")
    ro = redis.Redis(host=locked.host, port=locked.port, username="reader", password="r3ad")
    assert ro.get("k") == b"v" and ro.exists("k") == 1 and ro.dbsize() == 1
    assert list(ro.scan_iter()) == [b"k"]
    assert ro.config_get("maxclients")
    for call in [lambda: ro.set("k", "w"), lambda: ro.delete("k"), lambda: ro.incr("n"),
                 lambda: ro.expire("k", 10), lambda: ro.flushdb(), lambda: ro.config_resetstat()]:
        with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions"):
            call()
    # In a transaction the write is refused while queuing and EXEC applies nothing.
    p = ro.pipeline(transaction=True)
    p.get("k")
    p.set("k", "w")
    # (redis-py raises the queued command's error ahead of EXEC's EXECABORT.)
    with pytest.raises((redis.exceptions.ExecAbortError, redis.exceptions.NoPermissionError)):
        p.execute()
    assert rw.get("k") == b"v" and rw.dbsize() == 1


def test_redis_cli_authenticates_with_a_password_and_a_user(locked):
    base = ["redis-cli", "-h", locked.host, "-p", str(locked.port), "--no-auth-warning"]

    def cli(*args):
        out = subprocess.run(base + list(args), capture_output=True, text=True, timeout=60)
        return out.stdout.strip()

    assert cli("-a", "s3cret", "set", "k", "v") == "OK"
    assert cli("--user", "reader", "-a", "r3ad", "get", "k") == "v"
    assert "NOPERM" in cli("--user", "reader", "-a", "r3ad", "set", "k", "w")
    assert "WRONGPASS" in cli("-a", "wrong", "get", "k") or "NOAUTH" in cli("-a", "wrong", "get", "k")
    assert "NOAUTH" in cli("get", "k")
    assert cli("-a", "s3cret", "get", "k") == "v"


def test_without_a_password_auth_says_so_and_the_default_user_is_everyone():
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(os.path.join(tmp, "store"))
        try:
            r = redis.Redis(host=s.host, port=s.port)
            assert r.set("k", "v")
            with pytest.raises(redis.exceptions.RedisError, match="without any password configured"):
                r.execute_command("AUTH", "anything")
            assert r.execute_command("AUTH", "default", "anything") is True
            with pytest.raises(redis.exceptions.AuthenticationError):
                r.execute_command("AUTH", "someone", "anything")
            assert r.execute_command("ACL", "WHOAMI") == b"default"
        finally:
            assert s.stop() == 0


def start(store, *flags):
    return subprocess.run([KIVI, "-d", store, "serve", *flags],
                          capture_output=True, text=True, timeout=60)


def test_protected_mode_refuses_to_listen_for_other_machines_without_a_password():
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        out = start(store, "--resp", "0.0.0.0:0")
        assert out.returncode != 0
        assert "without a password" in out.stderr and "--requirepass" in out.stderr
        # Refused before the store was made.
        assert not os.path.exists(store)
        out = start(store, "--resp", "127.0.0.1:0", "--kvlds", "0.0.0.0:0")
        assert out.returncode != 0 and "--kvlds-allow-remote" in out.stderr
        # With a password it listens on every address.
        s = Server(store, resp="0.0.0.0:0", flags=["--requirepass", "s3cret"])
        try:
            r = redis.Redis(host="127.0.0.1", port=s.port, password="s3cret")
            assert r.ping()
        finally:
            assert s.stop() == 0
