"""`kivi serve --config FILE` and CONFIG GET / SET: the file's settings
are the server's, flags win over the file, a bad file is refused by name,
and what is safe to change live changes live."""

import os
import socket
import subprocess
import tempfile
import time

import pytest
import redis

from test_resp import KIVI, Server, server  # noqa: F401

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def start(tmp, *args):
    """`kivi serve` with `args` (no -d, no --resp unless given), as a
    Server once its RESP listener is up."""
    s = Server.__new__(Server)
    s.proc = subprocess.Popen([os.path.abspath(KIVI), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp)
    line = s.proc.stdout.readline()
    prefix = "kivi serve: resp listening on "
    assert line.startswith(prefix), (line, s.proc.stderr.read())
    s.addr, s.store = line[len(prefix):].rstrip().split(" (store ")
    s.store = s.store.rstrip(")")
    s.host, port = s.addr.rsplit(":", 1)
    s.port = int(port)
    return s


def refused(tmp, *args):
    """The exit status and standard error of a `kivi serve` that must not start."""
    out = subprocess.run([os.path.abspath(KIVI), *args], capture_output=True, text=True,
                         timeout=60, cwd=tmp)
    assert out.returncode != 0, out
    return out.stderr


def test_the_file_sets_the_store_listener_passwords_users_and_limits():
    with tempfile.TemporaryDirectory() as tmp:
        conf = write(os.path.join(tmp, "serve.toml"), f"""
data-dir = "{tmp}/from-file"
no-fsync = true
resp = "127.0.0.1:0"
requirepass = "file-pass"
max-connections = 3
timeout = 7
output-timeout = 9

[[user]]
name = "reports"
role = "read-only"
password = "r:ead"
""")
        s = start(tmp, "serve", "--config", conf)
        try:
            assert s.store == f"{tmp}/from-file"
            with pytest.raises(redis.AuthenticationError):
                redis.Redis(host=s.host, port=s.port).ping()
            r = redis.Redis(host=s.host, port=s.port, password="file-pass")
            assert r.set("k", "v")
            got = r.config_get("*")
            assert got["data-dir"] == f"{tmp}/from-file" and got["dir"] == got["data-dir"]
            assert got["no-fsync"] == "yes" and got["appendfsync"] == "no"
            assert got["max-connections"] == "3" and got["maxclients"] == "3"
            assert got["timeout"] == "7" and got["output-timeout"] == "9"
            assert got["requirepass"] == "(hidden)" and "file-pass" not in str(got)
            assert got["user"] == "reports:read-only"
            ro = redis.Redis(host=s.host, port=s.port, username="reports", password="r:ead")
            assert ro.get("k") == b"v"
            with pytest.raises(redis.exceptions.NoPermissionError):
                ro.set("k", "w")
            with pytest.raises(redis.exceptions.NoPermissionError):
                ro.config_set("timeout", 1)
            # max-connections = 3: r, ro, and one more.
            third = redis.Redis(host=s.host, port=s.port, password="file-pass")
            assert third.ping()
            with pytest.raises(redis.ConnectionError, match="max number of clients"):
                redis.Redis(host=s.host, port=s.port, password="file-pass").ping()
        finally:
            s.proc.terminate()
            assert s.proc.wait(timeout=60) == 0
        assert os.path.isdir(os.path.join(tmp, "from-file"))


def test_flags_win_over_the_file():
    with tempfile.TemporaryDirectory() as tmp:
        conf = write(os.path.join(tmp, "serve.toml"), f"""
data-dir = "{tmp}/from-file"
resp = "127.0.0.1:1"
timeout = 7
max-connections = 3
""")
        s = start(tmp, "-d", f"{tmp}/from-flag", "serve", "--config", conf,
                  "--resp", "127.0.0.1:0", "--timeout", "5")
        try:
            assert s.store == f"{tmp}/from-flag"
            r = redis.Redis(host=s.host, port=s.port)
            got = r.config_get("*")
            assert got["timeout"] == "5"
            # Not given as a flag: the file's.
            assert got["max-connections"] == "3"
            assert got["no-fsync"] == "no"
        finally:
            s.proc.terminate()
            assert s.proc.wait(timeout=60) == 0


def test_a_bad_file_is_refused_naming_the_key_or_the_file():
    with tempfile.TemporaryDirectory() as tmp:
        typo = write(os.path.join(tmp, "typo.toml"), 'resp = "127.0.0.1:0"\nrequirepas = "x"\n')
        err = refused(tmp, "serve", "--config", typo)
        assert "typo.toml" in err and "requirepas" in err and "line 2" in err, err
        wrong = write(os.path.join(tmp, "wrong.toml"), 'timeout = "soon"\n')
        err = refused(tmp, "serve", "--config", wrong)
        assert "wrong.toml" in err and "line 1" in err, err
        err = refused(tmp, "serve", "--config", os.path.join(tmp, "absent.toml"))
        assert "absent.toml" in err, err
        # Protected mode holds for the file's settings too, and nothing is
        # created for a server that does not start.
        open_ = write(os.path.join(tmp, "open.toml"),
                      f'data-dir = "{tmp}/never"\nresp = "0.0.0.0:0"\n')
        err = refused(tmp, "serve", "--config", open_)
        assert "without a password" in err, err
        assert not os.path.exists(os.path.join(tmp, "never"))


def test_a_world_readable_file_with_passwords_is_warned_about():
    with tempfile.TemporaryDirectory() as tmp:
        conf = write(os.path.join(tmp, "serve.toml"),
                     'resp = "127.0.0.1:0"\nrequirepass = "p"\n', mode=0o644)
        s = start(tmp, "-d", f"{tmp}/store", "serve", "--config", conf)
        s.proc.terminate()
        assert s.proc.wait(timeout=60) == 0
        assert "every user of this machine can read it" in s.proc.stderr.read()


def test_the_example_config_file_starts_a_server():
    with tempfile.TemporaryDirectory() as tmp:
        example = os.path.join(REPO, "docs", "kivi-serve.example.toml")
        # Its directory and address are the production ones; the flags
        # point them here, everything else is the example's.
        s = start(tmp, "-d", f"{tmp}/store", "serve", "--config", example,
                  "--resp", "127.0.0.1:0")
        try:
            r = redis.Redis(host=s.host, port=s.port, password="change-me")
            assert r.set("k", "v") and r.get("k") == b"v"
            ro = redis.Redis(host=s.host, port=s.port, username="reports",
                             password="change-me-too")
            assert ro.get("k") == b"v"
        finally:
            s.proc.terminate()
            assert s.proc.wait(timeout=60) == 0


def test_config_set_changes_the_idle_timeout_live(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    idle = socket.create_connection((server.host, server.port))
    idle.sendall(b"PING\r\n")
    assert idle.recv(64) == b"+PONG\r\n"
    time.sleep(2)
    # Already idle 2 s when the timeout becomes 1 s: closed at once, not a
    # second later.
    assert r.config_set("timeout", 1)
    changed = time.monotonic()
    idle.settimeout(5)
    assert idle.recv(64) == b""
    assert time.monotonic() - changed < 0.9
    assert r.config_get("timeout") == {"timeout": "1"}
    assert r.config_set("timeout", 0)
    kept = socket.create_connection((server.host, server.port))
    time.sleep(1.5)
    kept.sendall(b"PING\r\n")
    assert kept.recv(64) == b"+PONG\r\n"


def test_config_set_changes_the_connection_limit_live(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    assert r.ping()
    assert r.config_set("maxclients", 2)
    assert r.config_get("max-connections") == {"max-connections": "2"}
    second = redis.Redis(host=server.host, port=server.port)
    assert second.ping()
    with pytest.raises(redis.ConnectionError, match="max number of clients"):
        redis.Redis(host=server.host, port=server.port).ping()
    # (redis-py retries a refused connection: at least one refusal.)
    assert r.info("stats")["rejected_connections"] >= 1
    assert r.config_set("max-connections", 3)
    assert redis.Redis(host=server.host, port=server.port).ping()


def test_config_set_checks_every_pair_before_changing_any(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    with pytest.raises(redis.ResponseError, match="'maxclients'.*integer"):
        r.execute_command("CONFIG", "SET", "timeout", "5", "maxclients", "many")
    with pytest.raises(redis.ResponseError, match="'port'.*immutable"):
        r.execute_command("CONFIG", "SET", "timeout", "5", "port", "7000")
    with pytest.raises(redis.ResponseError, match="Unknown option.*'no-such'"):
        r.execute_command("CONFIG", "SET", "timeout", "5", "no-such", "1")
    with pytest.raises(redis.ResponseError, match="duplicate parameter"):
        r.execute_command("CONFIG", "SET", "timeout", "5", "timeout", "6")
    with pytest.raises(redis.ResponseError, match="between 1 and"):
        r.execute_command("CONFIG", "SET", "maxclients", "0")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        r.execute_command("CONFIG", "SET", "timeout")
    assert r.config_get("timeout") == {"timeout": "0"}
    assert r.config_get("maxclients") == {"maxclients": "10000"}
    assert r.execute_command("CONFIG", "SET", "timeout", "5", "output-timeout", "30") == b"OK"
    assert r.config_get("*timeout") == {"timeout": "5", "output-timeout": "30"}
