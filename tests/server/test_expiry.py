"""Expiry through `kivi serve`: SET's options, SETEX and PSETEX, GETEX, the
EXPIRE family with its flags, TTL and its kin, PERSIST, deadlines kept or
dropped by the other commands, deadlines surviving kill -9, and the
libraries that rely on them (redis-py's Lock, a rate limiter in MULTI,
cachelib's RedisCache, which Flask-Caching and Flask-Session store through).
The answers expected are Redis 7's.

Run by test.sh: KIVI_BIN=target/debug/kivi python3 -m pytest tests/server
"""

import os
import signal
import tempfile
import threading
import time

import cachelib
import pytest
import redis
from redis.lock import Lock

from test_resp import Server, cli, server  # noqa: F401  (the fixture)


def test_set_options_ttl_and_its_kin(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    assert r.ttl("missing") == -2 and r.pttl("missing") == -2
    r.set("plain", "v")
    assert r.ttl("plain") == -1 and r.expiretime("plain") == -1
    assert r.set("ex", "v", ex=100)
    assert 99 <= r.ttl("ex") <= 100
    assert 99_000 < r.pttl("ex") <= 100_000
    assert r.set("px", "v", px=5000)
    assert 4_000 < r.pttl("px") <= 5_000
    at = int(time.time()) + 1000
    assert r.set("exat", "v", exat=at)
    assert r.expiretime("exat") == at
    assert r.set("pxat", "v", pxat=at * 1000 + 123)
    assert r.execute_command("PEXPIRETIME", "pxat") == at * 1000 + 123
    # KEEPTTL keeps the deadline; a plain SET drops it.
    assert r.set("ex", "w", keepttl=True)
    assert r.get("ex") == b"w" and r.ttl("ex") > 90
    assert r.set("ex", "x")
    assert r.ttl("ex") == -1
    # NX with a deadline: the lock idiom.
    assert r.set("nx", "1", nx=True, px=10_000)
    assert r.set("nx", "2", nx=True, px=10_000) is None
    assert r.get("nx") == b"1"
    # The errors Redis gives.
    for bad in (dict(ex=0), dict(px=-5)):
        with pytest.raises(redis.ResponseError, match="invalid expire time in 'set' command"):
            r.set("k", "v", **bad)
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("SET", "k", "v", "EX", "10", "PX", "100")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("SET", "k", "v", "KEEPTTL", "EX", "10")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.execute_command("SET", "k", "v", "EX", "ten")
    assert r.get("k") is None


@pytest.mark.filterwarnings("ignore:Call to deprecated setex")
def test_setex_psetex_getex_and_persist(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    assert r.setex("a", 100, "1")
    assert 99 <= r.ttl("a") <= 100
    assert r.psetex("b", 100_000, "2")
    assert 99_000 < r.pttl("b") <= 100_000
    with pytest.raises(redis.ResponseError, match="invalid expire time in 'setex' command"):
        r.setex("c", 0, "x")
    with pytest.raises(redis.ResponseError, match="invalid expire time in 'psetex' command"):
        r.psetex("c", -1, "x")
    assert r.exists("c") == 0
    assert r.getex("a") == b"1" and r.ttl("a") > 90
    assert r.getex("a", ex=1000) == b"1" and r.ttl("a") > 990
    assert r.getex("a", persist=True) == b"1" and r.ttl("a") == -1
    assert r.getex("missing", ex=10) is None
    with pytest.raises(redis.ResponseError, match="invalid expire time in 'getex' command"):
        r.getex("a", ex=0)
    assert r.persist("a") is False  # no deadline to remove
    assert r.persist("b") is True and r.ttl("b") == -1
    assert r.persist("missing") is False


def test_expire_family_and_its_flags(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    assert r.expire("missing", 10) is False
    r.set("k", "v")
    # NX: only without a deadline; XX: only with one.
    assert r.expire("k", 100, xx=True) is False
    assert r.expire("k", 100, nx=True) is True
    assert r.expire("k", 200, nx=True) is False
    assert r.expire("k", 200, xx=True) is True and r.ttl("k") > 190
    # GT and LT: no deadline counts as an infinite one.
    assert r.expire("k", 100, gt=True) is False
    assert r.expire("k", 300, gt=True) is True and r.ttl("k") > 290
    assert r.expire("k", 400, lt=True) is False
    assert r.expire("k", 50, lt=True) is True and r.ttl("k") <= 50
    r.set("nodeadline", "v")
    assert r.expire("nodeadline", 10, gt=True) is False
    assert r.expire("nodeadline", 10, lt=True) is True
    assert r.pexpire("k", 123_000) is True and 120_000 < r.pttl("k") <= 123_000
    at = int(time.time()) + 500
    assert r.expireat("k", at) is True and r.expiretime("k") == at
    assert r.pexpireat("k", at * 1000 + 7) is True
    assert r.execute_command("PEXPIRETIME", "k") == at * 1000 + 7
    with pytest.raises(redis.ResponseError, match="not compatible"):
        r.execute_command("EXPIRE", "k", "10", "NX", "XX")
    with pytest.raises(redis.ResponseError, match="not compatible"):
        r.execute_command("EXPIRE", "k", "10", "GT", "LT")
    with pytest.raises(redis.ResponseError, match="Unsupported option"):
        r.execute_command("EXPIRE", "k", "10", "SOON")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.execute_command("EXPIRE", "k", "soon")
    # A deadline already past deletes the key, and says it did.
    assert r.expire("k", -1) is True
    assert r.exists("k") == 0
    assert r.pexpireat("nodeadline", 1) is True and r.get("nodeadline") is None


def test_other_commands_keep_or_drop_deadlines_as_redis_does(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.set("n", "1", ex=100)
    assert r.incr("n") == 2 and r.ttl("n") > 90
    assert r.incrbyfloat("n", 0.5) == 2.5 and r.ttl("n") > 90
    r.set("s", "ab", ex=100)
    assert r.append("s", "cd") == 4 and r.ttl("s") > 90
    assert r.setrange("s", 0, "X") == 4 and r.ttl("s") > 90
    assert r.rename("s", "t") and r.ttl("t") > 90
    assert r.copy("t", "u") and r.ttl("u") > 90
    assert r.getset("t", "new") == b"Xbcd" and r.ttl("t") == -1
    r.mset({"u": "plain"})
    assert r.ttl("u") == -1


def test_a_key_with_a_second_to_live_is_gone_after_it(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.set("short", "v", px=1000)
    r.set("long", "v", ex=100)
    r.set("forever", "v")
    # Redis's nearest-second rounding: 1,000 ms are 1 s.
    assert r.ttl("short") == 1
    assert r.get("short") == b"v"
    time.sleep(1.2)
    assert r.get("short") is None
    assert r.exists("short", "long", "forever") == 2
    assert r.mget("short", "long") == [None, b"v"]
    assert r.ttl("short") == -2
    assert sorted(r.keys("*")) == [b"forever", b"long"]
    assert sorted(r.scan_iter()) == [b"forever", b"long"]
    assert r.execute_command("RANGE", "a", "z") == [b"forever", b"v", b"long", b"v"]
    assert r.type("short") == b"none"
    # An expired key is absent to every condition.
    assert r.set("short", "again", nx=True)
    assert cli(server, "GET", "short") == "again"


def test_a_deadline_survives_kill_9():
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        s = Server(store)
        r = redis.Redis(host=s.host, port=s.port)
        r.set("k", "v", ex=1000)
        r.set("soon", "v", px=1500)
        os.kill(s.proc.pid, signal.SIGKILL)
        s.proc.wait(timeout=60)
        s = Server(store)
        r = redis.Redis(host=s.host, port=s.port)
        assert 990 <= r.ttl("k") <= 1000
        assert r.get("soon") == b"v"
        time.sleep(1.6)
        assert r.get("soon") is None
        assert s.stop() == 0
        # And after a clean stop (a checkpoint: the deadline in a page).
        s = Server(store)
        r = redis.Redis(host=s.host, port=s.port)
        assert 980 <= r.ttl("k") <= 1000
        assert r.get("soon") is None
        assert s.stop() == 0


def test_watch_sees_a_key_expire_or_its_deadline_change(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    r.set("w", "v", px=300)
    with r.pipeline() as p:
        p.watch("w")
        time.sleep(0.4)
        p.multi()
        p.set("other", "x")
        with pytest.raises(redis.WatchError):
            p.execute()
    assert r.get("other") is None
    r.set("w", "v")
    with r.pipeline() as p:
        p.watch("w")
        r.expire("w", 100)  # another client changes only the deadline
        p.multi()
        p.set("other", "x")
        with pytest.raises(redis.WatchError):
            p.execute()
    assert r.get("other") is None


def test_redis_py_lock(server):  # noqa: F811
    r = redis.Redis(host=server.host, port=server.port)
    lock = Lock(r, "resource", timeout=0.5, blocking_timeout=0.1)
    assert lock.acquire()
    other = Lock(r, "resource", timeout=0.5, blocking_timeout=0.1)
    assert not other.acquire(), "a held lock is not taken twice"
    assert lock.extend(1)
    assert 1000 < r.pttl("resource") <= 1500
    lock.release()
    assert other.acquire()
    # A holder that dies: its lock expires and the next one gets it.
    forgotten = Lock(r, "crashed", timeout=0.3)
    assert forgotten.acquire()
    waiting = Lock(r, "crashed", timeout=1, blocking_timeout=2)
    started = time.monotonic()
    assert waiting.acquire()
    assert 0.1 < time.monotonic() - started < 1.5
    waiting.release()
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        forgotten.release()


def test_rate_limiter_with_incr_and_expire_in_multi(server):  # noqa: F811
    # The fixed-window limiter of Redis's INCR documentation, from threads:
    # exactly `limit` requests pass per window, and the window ends.
    r = redis.Redis(host=server.host, port=server.port)
    limit, passed = 10, []

    def request():
        with r.pipeline(transaction=True) as p:
            p.incr("rate:user")
            p.expire("rate:user", 1, nx=True)
            count, _ = p.execute()
        passed.append(count <= limit)

    threads = [threading.Thread(target=request) for _ in range(25)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert passed.count(True) == limit
    assert 0 < r.pttl("rate:user") <= 1000
    time.sleep(1.1)
    request()
    assert passed[-1] is True, "a new window after the deadline"


def test_cachelib_redis_cache(server):  # noqa: F811
    cache = cachelib.RedisCache(host=server.host, port=server.port, key_prefix="app:")
    assert cache.set("page", {"html": "<p>hi</p>"}, timeout=1)
    assert cache.get("page") == {"html": "<p>hi</p>"}
    assert cache.add("page", "other") is False
    assert cache.set_many({"a": 1, "b": 2}, timeout=100)
    assert cache.get_many("a", "b", "c") == [1, 2, None]
    assert cache.inc("hits") == 1 and cache.inc("hits", 5) == 6
    assert cache.has("a") and cache.delete("a") and not cache.has("a")
    time.sleep(1.2)
    assert cache.get("page") is None, "the entry expired with its timeout"
    assert cache.add("page", "fresh", timeout=100) is True
    assert cache.get("page") == "fresh"
    assert cache.clear()
    assert cache.get("b") is None and cache.get("page") is None


def test_expired_keys_leave_the_count_at_once_and_their_space_comes_back(server):  # noqa: F811
    # 5,000 keys of 1 KiB that live three seconds, beside one that stays:
    # DBSIZE drops at the deadline, the background deletes the entries
    # (INFO's expired_keys), and the store's files shrink back.
    r = redis.Redis(host=server.host, port=server.port)
    r.set("stay", "v")
    started = time.monotonic()
    p = r.pipeline(transaction=False)
    for i in range(5_000):
        p.set(f"k{i:05}", b"x" * 1024, px=3000)
    p.execute()
    assert time.monotonic() - started < 3, "written within the three seconds"
    assert r.dbsize() == 5_001
    full = r.info("kivi")["live_bytes"]
    assert full > 5_000 * 1024
    # The last key was written before now, so it expires within 3.1 s.
    time.sleep(3.1)
    assert r.dbsize() == 1
    assert r.keys("*") == [b"stay"]
    deadline = time.monotonic() + 60
    while r.info("stats")["expired_keys"] < 5_000:
        assert time.monotonic() < deadline, r.info("stats")["expired_keys"]
        time.sleep(0.05)
    assert r.info("stats")["expired_keys"] == 5_000
    # The deletes reach the pages with the next checkpoint (one second of
    # quiet takes one), and the cleaner gives the old pages back.
    while r.info("kivi")["live_bytes"] > full // 10 or r.info("kivi")["file_bytes"] > full // 2:
        assert time.monotonic() < deadline, r.info("kivi")
        time.sleep(0.1)
    assert r.get("stay") == b"v"
