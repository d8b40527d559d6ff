"""Followers on a real S3-compatible server (versitygw): `kivi serve --follow
URL` shows what the writer (`kivi serve -d URL`) acknowledged, soon and in
order, refuses writes as a Redis replica does, and says what it is (ROLE,
INFO replication).

Run by test.sh with the environment versitygw.sh writes:
KIVI_BIN=target/debug/kivi python3 -m pytest tests/s3
"""

import threading
import time

import pytest
import redis

from test_s3 import BUCKET, Server, fresh_url

pytestmark = pytest.mark.skipif(
    not BUCKET, reason="no S3 server: run tests/s3/versitygw.sh and source its env"
)


def wait_for(what, check, seconds=20):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_follower_shows_the_writers_commits_in_order_and_refuses_writes():
    url = fresh_url()
    writer = Server(url)
    writer.client.set("before", "1")
    follower = Server(url, follow=True)
    w, f = writer.client, follower.client
    try:
        assert f.get("before") == b"1"
        # Writes are refused as on a Redis replica, in a transaction too.
        with pytest.raises(redis.exceptions.ReadOnlyError):
            f.set("k", "v")
        with pytest.raises(redis.exceptions.ReadOnlyError):
            f.incr("counter")
        # (redis-py raises the queued command's error, which made EXEC abort.)
        with pytest.raises(redis.exceptions.ReadOnlyError):
            with f.pipeline(transaction=True) as p:
                p.get("before").set("k", "v").execute()
        # The same by hand: EXEC answers EXECABORT.
        c = f.connection_pool.get_connection()
        try:
            for cmd in (["MULTI"], ["SET", "k", "v"], ["EXEC"]):
                c.send_command(*cmd)
                try:
                    reply = c.read_response()
                except redis.exceptions.ResponseError as e:
                    reply = e
            assert isinstance(reply, redis.exceptions.ExecAbortError), reply
        finally:
            f.connection_pool.release(c)
        assert f.get("k") is None
        # Reads, CONFIG GET, INFO and ROLE work.
        assert f.config_get("maxclients")
        info = f.info("replication")
        assert info["role"] == "slave", info
        assert info["master_link_status"] == "up", info
        assert f.execute_command("ROLE")[0] == b"slave"
        assert w.execute_command("ROLE")[0] == b"master"
        assert w.info("replication")["role"] == "master"

        # A counter the writer increments, read on one follower connection
        # all the while: it never goes back, and reaches the last value.
        last = 300
        seen = []
        done = threading.Event()

        def read():
            while not done.is_set():
                v = f.get("counter")
                seen.append(int(v) if v is not None else 0)

        reader = threading.Thread(target=read)
        reader.start()
        for _ in range(last):
            w.incr("counter")
        # Batches of 16 pipelined SETs beside it: each shows whole.
        for b in range(20):
            p = w.pipeline(transaction=True)
            for j in range(16):
                p.set(f"b{b}-{j}", b)
            p.execute()
        wait_for("the last increment", lambda: f.get("counter") == str(last).encode())
        done.set()
        reader.join()
        assert seen == sorted(seen), "a follower connection went back in time"
        wait_for("the last batch", lambda: f.get("b19-15") == b"19")
        for b in range(20):
            got = f.mget([f"b{b}-{j}" for j in range(16)])
            assert got == [str(b).encode()] * 16, (b, got)
        info = f.info("replication")
        assert info["slave_repl_offset"] == int(w.info("replication")["master_repl_offset"])
        assert info["kivi_follower_polls_with_commits"] > 0, info
    finally:
        follower.stop()
        writer.stop()


def test_a_follower_of_a_store_that_is_not_there_says_so():
    import subprocess

    from test_s3 import KIVI

    out = subprocess.run(
        [KIVI, "serve", "--follow", fresh_url(), "--resp", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "no store" in out.stderr, out.stderr


def test_kivi_promote_makes_the_follower_the_writer_and_loses_nothing():
    import subprocess

    from test_s3 import KIVI

    url = fresh_url()
    writer = Server(url)
    follower = Server(url, follow=True)
    host = writer.client.connection_pool.connection_kwargs["host"]
    wport = writer.client.connection_pool.connection_kwargs["port"]
    fport = follower.client.connection_pool.connection_kwargs["port"]
    acked = [[] for _ in range(4)]
    failed_after = []
    promoted = threading.Event()

    def write(w):
        c = redis.Redis(host=host, port=wport)
        i = 0
        tries_after = 0
        while tries_after < 20:
            before = promoted.is_set()
            key = f"w{w}-{i}"
            try:
                c.set(key, key)
            except redis.exceptions.RedisError:
                if before:
                    tries_after += 1
                    continue
                # Fenced by the takeover while it was under way.
                promoted.wait()
                continue
            if before:
                failed_after.append(key)  # acknowledged after the takeover
                tries_after += 1
            else:
                acked[w].append(key)
            i += 1

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        out = subprocess.run(
            [KIVI, "promote", f"{host}:{fport}"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert "writer now" in out.stdout, out.stdout
        promoted.set()
        for t in threads:
            t.join(timeout=60)
        assert not failed_after, f"the old writer acknowledged {failed_after[:5]} after the takeover"
        f = follower.client
        total = sum(len(a) for a in acked)
        assert total > 20, total
        for a in acked:
            if a:
                got = f.mget(a)
                missing = [k for k, v in zip(a, got) if v != k.encode()]
                assert not missing, f"lost in the takeover: {missing[:5]}"
        # The new writer writes; it says it is the master.
        f.set("after", "takeover")
        assert f.get("after") == b"takeover"
        assert f.execute_command("ROLE")[0] == b"master"
        assert f.info("replication")["role"] == "master"
        # REPLICAOF to another server is not how kivi follows.
        with pytest.raises(redis.exceptions.ResponseError, match="kivi serve --follow"):
            f.execute_command("REPLICAOF", "127.0.0.1", "6379")
    finally:
        promoted.set()
        follower.stop()
        writer.kill()


def test_a_standby_takes_over_from_a_paused_writer_which_then_commits_nothing():
    import os
    import signal

    url = fresh_url()
    writer = Server(url)
    standby = Server(url, follow=True, args=["--take-over-after-ms", "1500"])
    w, s = writer.client, standby.client
    try:
        for i in range(100):
            w.set(f"k{i}", i)
        # The standby says where the writer is (its lease), and stays a
        # follower while the writer lives.
        wport = w.connection_pool.connection_kwargs["port"]
        wait_for("the writer's address", lambda: s.info("replication")["master_port"] == wport)
        assert s.info("replication")["master_host"] == "127.0.0.1"
        time.sleep(2.5)
        assert s.execute_command("ROLE")[0] == b"slave"

        os.kill(writer.proc.pid, signal.SIGSTOP)
        paused = time.monotonic()
        while True:
            try:
                s.set("after", "takeover")
                break
            except redis.exceptions.ReadOnlyError:
                assert time.monotonic() - paused < 10, "the standby never took over"
                time.sleep(0.02)
        took = time.monotonic() - paused
        print(f"first write on the new writer {took * 1000:.0f} ms after the pause")
        assert s.execute_command("ROLE")[0] == b"master"
        assert s.mget([f"k{i}" for i in range(100)]) == [str(i).encode() for i in range(100)]

        # The old writer, resumed, says at once that it is no longer the
        # writer (it asks the store), and commits nothing more.
        os.kill(writer.proc.pid, signal.SIGCONT)
        assert w.execute_command("ROLE")[0] == b"slave"
        assert w.info("replication")["role"] == "slave"
        with pytest.raises(redis.exceptions.ResponseError):
            w.set("stale", "write")
        assert s.get("stale") is None
    finally:
        os.kill(writer.proc.pid, signal.SIGCONT)
        standby.stop()
        writer.kill()
