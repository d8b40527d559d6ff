"""The kivi Python package: kivi.Db, batches, snapshots, ranges, expiry, errors."""

import os
import subprocess
import sys
import threading
import time

import pytest

import kivi


@pytest.fixture
def db(tmp_path):
    with kivi.Db(tmp_path / "store", no_fsync=True) as d:
        yield d


def test_round_trip_and_delete(db):
    assert db.get(b"k") is None
    db.put(b"k", b"v")
    assert db.get(b"k") == b"v"
    assert isinstance(db.get(b"k"), bytes)
    assert b"k" in db and b"other" not in db
    db.put(b"k", b"")
    assert db.get(b"k") == b""
    db.delete(b"k")
    assert db.get(b"k") is None
    db.delete(b"never there")


def test_bytes_like_arguments(db):
    db.put(bytearray(b"a"), memoryview(b"1"))
    assert db.get(memoryview(b"a")) == b"1"
    db.put(b"b", bytearray(b"\x00\xff"))
    assert db.get(bytearray(b"b")) == b"\x00\xff"


@pytest.mark.parametrize("bad", ["text", 5, None, 1.5, object()])
def test_non_bytes_rejected_with_type_error(db, bad):
    with pytest.raises(TypeError):
        db.put(bad, b"v")
    with pytest.raises(TypeError):
        db.put(b"k", bad)
    with pytest.raises(TypeError):
        db.get(bad)
    assert db.get(b"k") is None


def test_str_refused_not_encoded(db):
    with pytest.raises(TypeError, match="str"):
        db.get("k")
    b = kivi.WriteBatch()
    with pytest.raises(TypeError):
        b.put("k", b"v")
    assert len(b) == 0


def test_large_values(db):
    big = os.urandom(3 << 20)
    db.put(b"big", big)
    assert db.get(b"big") == big
    assert db.get(b"big") == big


def test_oversized_key_is_invalid_argument(db):
    with pytest.raises(kivi.InvalidArgumentError) as e:
        db.put(b"k" * (kivi.MAX_KEY_LEN + 1), b"v")
    assert isinstance(e.value, ValueError)
    assert isinstance(e.value, kivi.Error)
    with pytest.raises(ValueError):
        db.get(b"k" * (kivi.MAX_KEY_LEN + 1))
    db.put(b"k" * kivi.MAX_KEY_LEN, b"v")


def test_conditional_writes(db):
    assert db.insert_if_absent(b"k", b"1")
    assert not db.insert_if_absent(b"k", b"2")
    assert db.get(b"k") == b"1"
    assert db.update_if_present(b"k", b"2")
    assert not db.update_if_present(b"absent", b"x")
    assert db.get(b"absent") is None
    assert not db.compare_and_swap(b"k", b"1", b"3")
    assert db.compare_and_swap(b"k", b"2", b"3")
    assert db.get(b"k") == b"3"
    assert not db.compare_and_delete(b"k", b"2")
    assert db.compare_and_delete(b"k", b"3")
    assert db.get(b"k") is None


def test_batch_all_or_nothing(db):
    db.put(b"a", b"1")
    b = kivi.WriteBatch()
    b.put(b"x", b"1")
    b.delete(b"a")
    b.compare_and_swap(b"a", b"1", b"2")  # sees the delete before it: fails
    assert len(b) == 3
    with pytest.raises(kivi.ConditionFailed) as e:
        db.write(b)
    assert e.value.op == 2
    assert db.get(b"x") is None and db.get(b"a") == b"1"

    b = kivi.WriteBatch()
    b.put(b"x", b"1")
    b.insert_if_absent(b"y", b"2")
    b.update_if_present(b"a", b"3")
    b.compare_and_delete(b"x", b"1")
    db.write(b)
    assert len(b) == 0  # written batches are emptied
    assert [db.get(k) for k in (b"x", b"y", b"a")] == [None, b"2", b"3"]


def test_batch_context_manager(db):
    with db.batch() as b:
        b.put(b"a", b"1")
        b.put(b"b", b"2")
        assert db.get(b"a") is None  # not before the block ends
    assert db.get(b"a") == b"1" and db.get(b"b") == b"2"

    with pytest.raises(RuntimeError):
        with db.batch() as b:
            b.put(b"c", b"3")
            raise RuntimeError("abandon")
    assert db.get(b"c") is None

    with pytest.raises(kivi.ConditionFailed):
        with db.batch() as b:
            b.put(b"d", b"4")
            b.insert_if_absent(b"a", b"x")
    assert db.get(b"d") is None


def test_range_both_directions_with_bounds(db):
    keys = [b"%03d" % i for i in range(300)]  # more than one chunk
    with db.batch() as b:
        for k in keys:
            b.put(k, b"v" + k)
    assert [k for k, _ in db.range()] == keys
    assert list(db.range())[5] == (b"005", b"v005")
    assert [k for k, _ in db.range(reverse=True)] == keys[::-1]
    assert [k for k, _ in db.range(b"010", b"020")] == keys[10:20]
    assert [k for k, _ in db.range(b"010", b"020", reverse=True)] == keys[10:20][::-1]
    assert [k for k, _ in db.range(start=b"295")] == keys[295:]
    assert [k for k, _ in db.range(stop=b"003", reverse=True)] == [b"002", b"001", b"000"]
    assert list(db.keys(b"1", b"101")) == keys[100:101]
    assert list(db.values(b"299")) == [b"v299"]
    assert [k for k, _ in db.items()] == keys and [k for k, _ in db] == keys
    assert list(db.range(b"5", b"6")) == []
    assert list(db.range(b"020", b"010")) == []


def test_range_is_a_snapshot(db):
    db.put(b"a", b"1")
    it = db.range()
    db.put(b"b", b"2")
    assert list(it) == [(b"a", b"1")]


def test_snapshot_isolated_from_later_writes(db):
    db.put(b"a", b"1")
    db.put(b"b", b"2")
    snap = db.snapshot()
    db.put(b"a", b"changed")
    db.delete(b"b")
    db.put(b"c", b"3")
    assert snap.get(b"a") == b"1" and snap.get(b"b") == b"2" and snap.get(b"c") is None
    assert list(snap.range()) == [(b"a", b"1"), (b"b", b"2")]
    assert list(snap.keys(reverse=True)) == [b"b", b"a"]
    assert len(snap) == 2
    assert list(db.range()) == [(b"a", b"changed"), (b"c", b"3")]
    snap.close()
    with pytest.raises(kivi.ClosedError):
        snap.get(b"a")


def test_ttl_expiry(db):
    db.put(b"short", b"v", ttl=0.2)
    db.put(b"long", b"v", ttl=60)
    db.put(b"forever", b"v")
    assert 59 < db.ttl(b"long") <= 60
    assert db.ttl(b"forever") is None
    with pytest.raises(KeyError):
        db.ttl(b"absent")
    assert db.get(b"short") == b"v"
    assert [k for k, _ in db.range()] == [b"forever", b"long", b"short"]
    time.sleep(0.35)
    assert db.get(b"short") is None
    assert [k for k, _ in db.range()] == [b"forever", b"long"]
    assert [k for k, _ in db.range(reverse=True)] == [b"long", b"forever"]
    with pytest.raises(KeyError):
        db.ttl(b"short")
    assert db.insert_if_absent(b"short", b"again")


def test_persist_and_ttl_on_conditional_writes(db):
    db.put(b"k", b"v", ttl=0.2)
    assert db.persist(b"k")
    assert db.ttl(b"k") is None
    assert not db.persist(b"absent")
    assert db.insert_if_absent(b"n", b"v", ttl=0.2)
    with db.batch() as b:
        b.put(b"bt", b"v", ttl=0.2)
    time.sleep(0.35)
    assert db.get(b"k") == b"v"
    assert db.get(b"n") is None and db.get(b"bt") is None


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf")])
def test_bad_ttl(db, ttl):
    with pytest.raises(ValueError):
        db.put(b"k", b"v", ttl=ttl)


def test_closed_db(tmp_path):
    db = kivi.Db(tmp_path / "s", no_fsync=True)
    for i in range(200):
        db.put(b"%03d" % i, b"v")
    it = db.range()
    assert next(it) == (b"000", b"v")  # a chunk is now buffered
    rev = db.keys(reverse=True)
    snap = db.snapshot()
    snap_it = snap.range()
    db.close()
    assert db.closed
    db.close()  # twice is fine
    for call in (
        lambda: next(it),
        lambda: next(rev),
        lambda: next(snap_it),
        lambda: snap.get(b"000"),
        lambda: db.get(b"000"),
        lambda: db.put(b"k", b"v"),
        lambda: db.delete(b"k"),
        lambda: db.write(kivi.WriteBatch()),
        lambda: db.range(),
        lambda: db.snapshot(),
        lambda: db.stats(),
        lambda: db.checkpoint(),
    ):
        with pytest.raises(kivi.ClosedError):
            call()
    # Everything was let go: the store opens again at once.
    with kivi.Db(tmp_path / "s") as again:
        assert again.get(b"199") == b"v"


def test_context_manager_closes(tmp_path):
    with kivi.Db(tmp_path / "s") as db:
        db.put(b"k", b"v")
    assert db.closed
    with pytest.raises(kivi.ClosedError):
        db.get(b"k")


def test_survives_close_and_reopen(tmp_path):
    path = str(tmp_path / "s")
    with kivi.Db(path) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"2", ttl=600)
        with db.batch() as b:
            b.put(b"c", b"3")
            b.delete(b"a")
    with kivi.Db(path) as db:
        assert list(db.range()) == [(b"b", b"2"), (b"c", b"3")]
        assert db.ttl(b"b") > 590
        db.checkpoint()
        db.compact()
    with kivi.Db(path) as db:
        assert db.get(b"c") == b"3"


def test_second_opener_in_another_process_is_locked_out(tmp_path):
    path = str(tmp_path / "s")
    with kivi.Db(path) as db:
        db.put(b"k", b"v")
        code = (
            "import kivi, sys\n"
            "try:\n"
            f"    kivi.Db({path!r})\n"
            "except kivi.LockedError as e:\n"
            "    assert isinstance(e, OSError) and isinstance(e, kivi.StorageError)\n"
            "    print('locked', e.errno)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.stdout.startswith("locked"), out.stderr


def test_second_opener_in_this_process_is_locked_out(tmp_path):
    with kivi.Db(tmp_path / "s"):
        with pytest.raises(kivi.LockedError):
            kivi.Db(tmp_path / "s")


def test_not_a_store(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(kivi.NotAStoreError):
        kivi.Db(tmp_path / "file")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("hi")
    with pytest.raises(kivi.NotAStoreError):
        kivi.Db(tmp_path / "other")


def test_read_only(tmp_path):
    with kivi.Db(tmp_path / "s") as db:
        db.put(b"k", b"v")
    with kivi.Db(tmp_path / "s", read_only=True) as ro:
        assert ro.get(b"k") == b"v"
        with pytest.raises(kivi.ReadOnlyError):
            ro.put(b"k", b"w")


def test_stats(db):
    db.put(b"k", b"v")
    s = db.stats()
    assert s["pairs"] == 1 and isinstance(s["file_bytes"], int)


def test_threads_share_one_db(tmp_path):
    with kivi.Db(tmp_path / "s") as db:  # durable writes: they group-commit
        errors = []

        def work(t):
            try:
                for i in range(200):
                    k = b"t%d-%03d" % (t, i)
                    db.put(k, k)
                    assert db.get(k) == k
                    if i % 50 == 0:
                        assert len(list(db.range(b"t%d-" % t, b"t%d." % t))) == i + 1
            except Exception as e:  # pragma: no cover
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert db.stats()["pairs"] == 1600
        assert sum(1 for _ in db.keys()) == 1600


def test_close_while_other_threads_work(tmp_path):
    db = kivi.Db(tmp_path / "s", no_fsync=True)
    stop = threading.Event()
    seen = []

    def work():
        try:
            while not stop.is_set():
                db.put(b"k", b"v")
                db.get(b"k")
                list(db.range())
        except kivi.ClosedError:
            seen.append("closed")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    db.close()
    stop.set()
    for t in threads:
        t.join()
    assert seen == ["closed"] * 4


def test_exception_hierarchy():
    assert issubclass(kivi.ClosedError, kivi.Error)
    assert issubclass(kivi.CorruptionError, kivi.Error)
    assert issubclass(kivi.DiskFullError, kivi.StorageError)
    assert issubclass(kivi.LockedError, kivi.StorageError)
    assert issubclass(kivi.StorageError, OSError)
    assert issubclass(kivi.InvalidArgumentError, ValueError)
    assert issubclass(kivi.ConditionFailed, kivi.Error)
    assert kivi.Error.__module__ == "kivi"


def test_batch_outside_db_must_be_written_explicitly():
    b = kivi.WriteBatch()
    with pytest.raises(TypeError):
        with b:
            b.put(b"k", b"v")


def test_a_store_on_an_object_store_by_url(tmp_path):
    # file:// puts the objects an S3 bucket would hold in a directory;
    # tests/s3 opens s3:// on a real S3 server the same way.
    url = "file://" + str(tmp_path / "bucket")
    (tmp_path / "bucket").mkdir()
    cache = tmp_path / "cache"
    with kivi.Db(url, object_cache_dir=cache, object_cache_bytes=8 << 20) as db:
        with db.batch() as b:
            b.put(b"a", b"1")
            b.put(b"b", b"2")
        db.put(b"c", b"3")
        assert db.stats()["object_puts"] >= 2
    assert not any((tmp_path / "bucket").glob("KIVI")), "a directory store was made"
    with kivi.Db(url, object_cache_dir=tmp_path / "cache2") as db:
        assert [k for k, _ in db.range()] == [b"a", b"b", b"c"]
        assert db.get(b"c") == b"3"
