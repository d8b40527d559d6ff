"""kivi on a real S3-compatible server (versitygw, started by
tests/s3/versitygw.sh): `kivi serve -d s3://...` killed with SIGKILL under
load loses nothing it acknowledged; a paused writer resumed after another
took over commits nothing more.

Run by test.sh with the environment versitygw.sh writes:
KIVI_BIN=target/debug/kivi python3 -m pytest tests/s3
"""

import os
import signal
import subprocess
import threading
import time
import uuid

import pytest
import redis

KIVI = os.environ.get("KIVI_BIN", "target/release/kivi")
BUCKET = os.environ.get("KIVI_S3_BUCKET")

pytestmark = pytest.mark.skipif(
    not BUCKET, reason="no S3 server: run tests/s3/versitygw.sh and source its env"
)


def fresh_url():
    return f"s3://{BUCKET}/test-{uuid.uuid4().hex[:12]}"


class Server:
    """`kivi serve` on an object store (`follow`: a follower of it); each
    has a local cache of its own (a temporary directory), so a restart
    starts with an empty cache."""

    def __init__(self, url, follow=False, args=()):
        store = ["serve", "--follow", url] if follow else ["-d", url, "serve"]
        self.proc = subprocess.Popen(
            [KIVI, *store, "--resp", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        prefix = "kivi serve: resp listening on "
        assert line.startswith(prefix), line
        host, port = line[len(prefix):].split(" ")[0].rsplit(":", 1)
        self.client = redis.Redis(host=host, port=int(port))

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=60)

    def stop(self):
        self.proc.terminate()
        assert self.proc.wait(timeout=60) == 0


def kivi(url, *args):
    out = subprocess.run([KIVI, "-d", url, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_kill_9_under_load_loses_nothing_acknowledged():
    url = fresh_url()
    server = Server(url)
    acked = [[] for _ in range(8)]
    stop = threading.Event()

    def writer(w):
        c = redis.Redis(
            host=server.client.connection_pool.connection_kwargs["host"],
            port=server.client.connection_pool.connection_kwargs["port"],
        )
        i = 0
        try:
            while not stop.is_set():
                pipe = c.pipeline(transaction=False)
                keys = [f"w{w}-{i + j}" for j in range(16)]
                for k in keys:
                    pipe.set(k, f"value of {k}")
                pipe.execute()
                acked[w].extend(keys)
                i += 16
        except (redis.ConnectionError, redis.ResponseError):
            pass  # the server was killed mid-request: that one is unknown

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    server.kill()
    stop.set()
    for t in threads:
        t.join()
    total = sum(len(a) for a in acked)
    assert total > 500, f"only {total} writes acknowledged before the kill"

    after = Server(url)
    for w in range(8):
        keys = acked[w]
        for start in range(0, len(keys), 500):
            part = keys[start:start + 500]
            got = after.client.mget(part)
            for k, v in zip(part, got):
                assert v == f"value of {k}".encode(), f"{k} acknowledged, then lost"
    # One put per group commit, counted in INFO; lists only at the open.
    stats = after.client.info("stats")
    assert stats["kivi_object_puts"] > 0 and stats["kivi_object_lists"] > 0, stats
    after.client.set("warm", "up")  # the first write after an open starts a commit segment
    stats = after.client.info("stats")
    before = stats["kivi_object_puts"], stats["kivi_group_commits"], stats["kivi_object_lists"]
    for i in range(20):
        after.client.set(f"counted-{i}", "v")
    stats = after.client.info("stats")
    puts = stats["kivi_object_puts"] - before[0]
    commits = stats["kivi_group_commits"] - before[1]
    assert commits == 20 and puts == 20, (puts, commits)
    assert stats["kivi_object_lists"] == before[2], "a commit listed"
    after.stop()
    assert "no problems" in kivi(url, "check")


def test_a_paused_writer_commits_nothing_after_a_takeover():
    url = fresh_url()
    first = Server(url)
    first.client.set("before", "1")
    first.proc.send_signal(signal.SIGSTOP)
    try:
        second = Server(url)  # takes the writer's role: fences the log
        second.client.set("during", "2")
    finally:
        first.proc.send_signal(signal.SIGCONT)
    with pytest.raises(redis.ResponseError, match="another writer took over"):
        first.client.set("late", "3")
    with pytest.raises(redis.ResponseError):
        first.client.set("later", "4")
    assert first.client.get("before") == b"1"  # it still reads
    second.client.set("after", "5")
    first.kill()
    second.stop()
    missing = subprocess.run([KIVI, "-d", url, "get", "late"], capture_output=True, text=True)
    assert missing.returncode == 1 and "key not found" in missing.stderr, missing
    assert kivi(url, "scan").split("\n")[:-1] == ["after\t5", "before\t1", "during\t2"]


def test_metrics_count_object_requests_by_kind():
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
    from test_metrics import Served

    served = Served(fresh_url(), flags=("--metrics", "127.0.0.1:0"))
    try:
        c = served.client()
        for i in range(10):
            c.set(f"k{i}", "v")
        samples = served.scrape()
        puts = samples[("kivi_object_requests_total", (("kind", "put"),))]
        assert puts >= 10, samples
        assert samples[("kivi_object_requests_total", (("kind", "list"),))] >= 1
        assert samples[("kivi_object_bytes_total", (("direction", "put"),))] > 0
        assert ("kivi_object_cache_bytes", ()) in samples
    finally:
        assert served.stop() == 0


def test_the_python_package_opens_a_store_by_s3_url(tmp_path):
    kivi_py = pytest.importorskip("kivi")
    url = fresh_url()
    with kivi_py.Db(url, object_cache_dir=tmp_path / "cache") as db:
        with db.batch() as b:
            for i in range(100):
                b.put(b"k%03d" % i, b"v%d" % i)
        assert db.stats()["object_puts"] >= 1
    # Another process, on a cache of its own, finds it.
    assert kivi(url, "get", "k042").strip() == "v42"
    with kivi_py.Db(url, object_cache_dir=tmp_path / "cache2") as db:
        assert len(list(db.range())) == 100
