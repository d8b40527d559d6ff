"""Limits that hold against a hostile client: a request past the size
limit, a client that never reads its replies, idle connections, and
replies bounded in bytes."""

import contextlib
import os
import socket
import tempfile
import threading
import time

import redis

from test_resp import Server


@contextlib.contextmanager
def serving(*flags):
    """A server on a fresh store with `flags`, stopped cleanly after."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(os.path.join(tmp, "store"), flags=list(flags))
        try:
            yield s
        finally:
            assert s.stop() == 0


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_600_mib_request_is_refused_and_memory_stays_bounded():
    with serving() as s:
        other = redis.Redis(host=s.host, port=s.port)
        other.set("k", "v")
        value_len = 15 << 20
        values = 40  # 600 MiB in all
        chunk = b"v" * (1 << 20)
        sent = [0]
        answer = []

        def hostile():
            c = socket.create_connection((s.host, s.port))
            try:
                c.sendall(b"*%d\r\n$4\r\nMSET\r\n" % (1 + 2 * values))
                for i in range(values):
                    c.sendall(b"$3\r\nk%02d\r\n$%d\r\n" % (i, value_len))
                    for _ in range(value_len >> 20):
                        c.sendall(chunk)
                        sent[0] += len(chunk)
                    c.sendall(b"\r\n")
            except OSError:
                pass
            try:
                c.settimeout(10)
                answer.append(c.recv(4096))
            except OSError as e:
                answer.append(repr(e).encode())
            c.close()

        t = threading.Thread(target=hostile)
        t.start()
        # Served meanwhile.
        for i in range(20):
            assert other.get("k") == b"v" and other.set(f"x{i}", "y")
            time.sleep(0.05)
        t.join(timeout=120)
        assert not t.is_alive()
        # Refused well before 600 MiB went in, with an error saying why.
        assert sent[0] < 200 << 20, sent[0]
        assert b"request of more than" in answer[0] or b"Connection reset" in answer[0], answer
        assert peak_rss_kib(s.proc.pid) < 300 << 10
        assert other.get("k") == b"v" and other.dbsize() == 21


def test_a_client_that_never_reads_its_replies_is_let_go():
    with serving("--output-timeout", "2") as s:
        r = redis.Redis(host=s.host, port=s.port)
        r.set("big", b"x" * (1 << 20))
        c = socket.create_connection((s.host, s.port))
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        # 500 MiB of replies asked for, none read.
        c.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 500)
        time.sleep(4)
        got = 0
        c.settimeout(10)
        try:
            while True:
                b = c.recv(1 << 20)
                if not b:
                    break
                got += len(b)
        except OSError:
            pass
        # The server closed it, with most replies never sent.
        assert got < 100 << 20, got
        assert r.get("big") == b"x" * (1 << 20)
        assert peak_rss_kib(s.proc.pid) < 300 << 10


def test_idle_connections_are_closed_after_the_timeout():
    with serving("--timeout", "1") as s:
        r = redis.Redis(host=s.host, port=s.port)
        assert r.config_get("timeout") == {"timeout": "1"}
        idle = socket.create_connection((s.host, s.port))
        half = socket.create_connection((s.host, s.port))
        half.sendall(b"*2\r\n$3\r\nGET\r\n")  # the rest never comes
        busy = socket.create_connection((s.host, s.port))
        for _ in range(6):
            busy.sendall(b"PING\r\n")
            assert busy.recv(64) == b"+PONG\r\n"
            time.sleep(0.4)
        for c in (idle, half):
            c.settimeout(5)
            assert c.recv(64) == b""
        busy.sendall(b"PING\r\n")
        assert busy.recv(64) == b"+PONG\r\n"


def test_mget_and_range_replies_are_bounded_in_bytes():
    with serving() as s:
        r = redis.Redis(host=s.host, port=s.port)
        big = 15 << 20
        for i in range(6):
            r.set(f"v{i}", bytes([65 + i]) * big)
        # Four values (60 MiB) are answered; six (90 MiB) are refused.
        assert [len(v) for v in r.mget([f"v{i}" for i in range(4)])] == [big] * 4
        try:
            r.mget([f"v{i}" for i in range(6)])
            raise AssertionError("MGET of 90 MiB answered")
        except redis.exceptions.ResponseError as e:
            assert "more than" in str(e)
        # RANGE stops once a reply's worth is in (64 MiB: the fifth
        # value passes it), as LIMIT would; the client goes on after
        # the last key.
        got = r.execute_command("RANGE", "", "")
        assert got[0::2] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
        rest = r.execute_command("RANGE", "v4\x00", "")
        assert rest[0::2] == [b"v5"] and rest[1] == b"F" * big
