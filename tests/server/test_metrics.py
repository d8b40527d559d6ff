"""Logs and metrics: `kivi serve --metrics` scraped and parsed with the
Prometheus client library's parser, the log's lines (time, level, the
filter from --log-level or RUST_LOG), refused connections and failed AUTH
logged once with why, and a background failure (a full disk) logged."""

import contextlib
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest
import redis
from prometheus_client.openmetrics import parser as openmetrics
from prometheus_client import parser as classic

from test_resp import KIVI, read_exactly

# A log line: an RFC 3339 UTC time, then the level.
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z\s+(ERROR|WARN|INFO|DEBUG|TRACE) ")


class Served:
    """`kivi serve` on `store` with `flags`; its listeners by name (from the
    lines it prints), its log in a file."""

    def __init__(self, store, flags=(), env=None, resp="127.0.0.1:0"):
        self.log_file = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.proc = subprocess.Popen(
            [KIVI, "-d", store, "serve", "--resp", resp, *flags],
            stdout=subprocess.PIPE,
            stderr=self.log_file,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.bound = {}
        want = 1 + sum(f in ("--metrics", "--kvlds") for f in flags)
        while len(self.bound) < want:
            line = self.proc.stdout.readline()
            m = re.match(r"kivi serve: (\w+) listening on (\S+) ", line)
            assert m, (line, self.log())
            self.bound[m.group(1)] = m.group(2)
        host, port = self.bound["resp"].rsplit(":", 1)
        self.host, self.port = host, int(port)

    def client(self, **kw):
        return redis.Redis(host=self.host, port=self.port, **kw)

    def scrape_text(self, path="/metrics"):
        with urllib.request.urlopen(f"http://{self.bound['metrics']}{path}", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            return r.read().decode()

    def scrape(self):
        """Every sample, by (name, sorted labels)."""
        text = self.scrape_text()
        samples = {}
        for family in openmetrics.text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return samples

    def log(self):
        self.log_file.flush()
        with open(self.log_file.name) as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=60)


@contextlib.contextmanager
def serving(*flags, env=None):
    with tempfile.TemporaryDirectory() as tmp:
        s = Served(os.path.join(tmp, "store"), flags, env)
        try:
            yield s
        finally:
            if s.proc.poll() is None:
                assert s.stop() == 0, s.log()


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0)


def test_the_endpoint_counts_commands_commits_fsyncs_and_connections():
    with serving("--metrics", "127.0.0.1:0") as s:
        before = s.scrape()
        r = s.client()
        for i in range(20):
            assert r.set(f"k{i}", "v" * 100)
        for i in range(30):
            assert r.get(f"k{i}") == (b"v" * 100 if i < 20 else None)
        after = s.scrape()

        def moved(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)

        assert moved("kivi_commands_total", command="SET") == 20
        assert moved("kivi_commands_total", command="GET") == 30
        # Each SET, sent alone, was its own submission and its own group.
        assert moved("kivi_commit_seconds_count") == 20
        assert moved("kivi_commit_seconds_sum") > 0
        assert moved("kivi_group_commit_writes_count") == 20
        assert value(after, "kivi_group_commit_writes_bucket", le="1.0") >= 20
        # Each durable group commit synced the commit log at least once.
        assert moved("kivi_fsync_seconds_count", log="commit") >= 20
        assert value(after, "kivi_fsync_seconds_bucket", log="commit", le="+Inf") == value(
            after, "kivi_fsync_seconds_count", log="commit")
        assert moved("kivi_keyspace_hits_total") == 20
        assert moved("kivi_keyspace_misses_total") == 10
        # redis-py holds one connection; the scrapes are not connections.
        assert value(after, "kivi_connections") == 1
        assert value(after, "kivi_connections_received_total") == 1
        assert value(after, "kivi_connections_rejected_total") == 0
        assert value(after, "kivi_pairs") == 20
        for name in ["kivi_cache_hits_total", "kivi_cache_misses_total", "kivi_live_bytes",
                     "kivi_file_bytes", "kivi_space_amplification", "kivi_redo_bytes",
                     "kivi_cleaner_deleted_segments_total", "kivi_cleaner_copied_bytes_total",
                     "kivi_cleaner_retiring_segments", "kivi_checkpoints_total",
                     "kivi_background_error"]:
            assert (name, ()) in after, name
        assert value(after, "kivi_background_error") == 0
        r.close()
        # The classic (Prometheus 0.0.4) parser reads it too.
        assert any(f.name == "kivi_commit_seconds" and f.type == "histogram"
                   for f in classic.text_string_to_metric_families(s.scrape_text()))
        with pytest.raises(urllib.error.HTTPError) as e:
            s.scrape_text("/")
        assert e.value.code == 404
        assert value(s.scrape(), "kivi_connections") == 0


def test_the_metrics_listener_stays_on_loopback_unless_allowed():
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [KIVI, "-d", os.path.join(tmp, "s"), "serve", "--resp", "127.0.0.1:0",
             "--metrics", "0.0.0.0:0"],
            capture_output=True, text=True, timeout=30)
        assert out.returncode != 0 and "--metrics-allow-remote" in out.stderr, out.stderr


def test_a_refused_connection_is_counted_and_logged_once_with_why():
    with serving("--metrics", "127.0.0.1:0", "--max-connections", "1") as s:
        r = s.client()
        assert r.ping()
        with socket.create_connection((s.host, s.port)) as extra:
            assert read_exactly(extra, 10).startswith(b"-ERR max")
        deadline = time.time() + 5
        while value(s.scrape(), "kivi_connections_rejected_total") != 1:
            assert time.time() < deadline
            time.sleep(0.05)
        refused = [line for line in s.log().splitlines() if "refused a connection" in line]
        assert len(refused) == 1, s.log()
        assert LINE.match(refused[0]) and " WARN " in refused[0], refused
        assert "at the connection limit" in refused[0] and "peer=127.0.0.1:" in refused[0]
        r.close()


def test_a_failed_auth_is_logged_with_user_and_peer_never_the_password():
    with serving("--requirepass", "s3cret") as s:
        # (A raw socket: redis-py retries a failed AUTH on new connections.)
        with socket.create_connection((s.host, s.port)) as c:
            c.sendall(b"AUTH default wrong-pw\r\n")
            assert read_exactly(c, 10).startswith(b"-WRONGPASS")
        # Commands before AUTH are refused; one line per connection says so.
        with socket.create_connection((s.host, s.port)) as c:
            c.sendall(b"GET a\r\nGET b\r\nGET c\r\n")
            got = b""
            while got.count(b"NOAUTH") < 3:
                chunk = c.recv(4096)
                assert chunk
                got += chunk
        time.sleep(0.2)
        log = s.log()
        failed = [line for line in log.splitlines() if "AUTH failed" in line]
        assert len(failed) == 1 and LINE.match(failed[0]), log
        assert "user=default" in failed[0] and "peer=127.0.0.1:" in failed[0], failed
        assert "wrong-pw" not in log
        refused = [line for line in log.splitlines() if "refused a command" in line]
        assert len(refused) == 1 and "NOAUTH" in refused[0], log


def closed_for_a_bad_frame(s):
    """Sends a malformed frame (the server closes the connection, logging it
    at INFO); returns the log's lines about it."""
    with socket.create_connection((s.host, s.port)) as c:
        c.sendall(b"*1\r\n$x\r\n")
        while c.recv(4096):
            pass
    time.sleep(0.2)
    return [line for line in s.log().splitlines() if "closed a RESP connection" in line]


@pytest.mark.parametrize("flags,env,logged", [
    ((), {}, True),
    (("--log-level", "warn"), {}, False),
    ((), {"RUST_LOG": "warn"}, False),
    ((), {"RUST_LOG": "debug"}, True),
    # The flag wins over RUST_LOG.
    (("--log-level", "info"), {"RUST_LOG": "error"}, True),
])
def test_log_lines_carry_time_and_level_and_follow_the_filter(flags, env, logged):
    env = {"RUST_LOG": "", **env}
    with serving(*flags, env=env) as s:
        lines = closed_for_a_bad_frame(s)
        assert bool(lines) == logged, s.log()
        for line in lines:
            assert LINE.match(line) and " INFO " in line and "peer=127.0.0.1:" in line, line


def test_a_bad_log_level_is_refused():
    out = subprocess.run([KIVI, "--log-level", "kivi=loud", "stats"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--log-level" in out.stderr, out.stderr


@contextlib.contextmanager
def tmpfs(size):
    """A fresh tmpfs of `size` (needs root: skipped otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d = tempfile.mkdtemp()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", d],
                                 capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {mounted.stderr!r}")
        try:
            yield d
        finally:
            subprocess.run(["umount", "-l", d])
    finally:
        os.rmdir(d)


def test_a_background_failure_on_a_full_disk_is_logged_and_counted():
    with tmpfs("24m") as d:
        s = Served(os.path.join(d, "store"), ["--metrics", "127.0.0.1:0"])
        try:
            r = s.client()
            value_ = os.urandom(32 << 10)
            refused = False
            for i in range(4000):
                try:
                    r.set(f"key{i}", value_)
                except redis.exceptions.ResponseError as e:
                    assert "disk full" in str(e) or "write failed" in str(e), e
                    refused = True
                    break
            assert refused, "the disk never filled"
            # The refused commit is logged; then, the store idle, a
            # checkpoint is tried (it retries each second) and fails too.
            deadline = time.time() + 20
            while 'step="checkpoint' not in s.log():
                assert time.time() < deadline, s.log()
                time.sleep(0.1)
            errors = [line for line in s.log().splitlines() if " ERROR " in line]
            assert errors and all(LINE.match(line) for line in errors), s.log()
            # Each names the step that failed, and the error (the call, the
            # file, the OS's word).
            assert all("step=" in line and "error=" in line and "No space left" in line
                       and ".seg" in line for line in errors), errors
            assert any('step="group commit' in line for line in errors), errors
            assert value(s.scrape(), "kivi_background_error") == 1
            r.close()
        finally:
            s.stop()
