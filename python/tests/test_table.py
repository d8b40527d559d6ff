"""kivi.Table: sealed tables (sparkey's format)."""

import pytest

import kivi


def pairs(n):
    return [(b"key%05d" % i, b"value%d" % i * (i % 7)) for i in range(n)]


@pytest.mark.parametrize("compression", [None, "snappy", "zstd"])
def test_create_get_iterate(tmp_path, compression):
    data = pairs(2000)
    base = str(tmp_path / "t")
    with kivi.Table.create(base, iter(data), compression=compression, block_size=4096) as t:
        assert len(t) == 2000
        assert t.get(b"key00042") == data[42][1]
        assert t.get(b"absent") is None
        assert b"key01999" in t
        assert sorted(t) == data  # iteration in write order
        assert list(t) == data
    with kivi.Table.open(base) as t:
        keys = [k for k, _ in data[::97]] + [b"absent", memoryview(b"key00001")]
        assert t.get_many(keys) == [v for _, v in data[::97]] + [None, data[1][1]]
    with kivi.Table(base) as t:
        assert t.get(bytearray(b"key00007")) == data[7][1]


def test_create_from_dict_and_later_pairs_win(tmp_path):
    t = kivi.Table.create(tmp_path / "d", {b"a": b"1", b"b": b"2"})
    assert dict(t) == {b"a": b"1", b"b": b"2"}
    t.close()
    t = kivi.Table.create(tmp_path / "e", [(b"a", b"1"), (b"a", b"2")])
    assert len(t) == 1 and t.get(b"a") == b"2"


def test_large_table_crosses_chunks(tmp_path):
    data = [(b"%08d" % i, b"x" * 1000) for i in range(6000)]  # > 4 MiB of input
    t = kivi.Table.create(tmp_path / "big", data, compression="zstd")
    assert len(t) == 6000
    assert sum(1 for _ in t) == 6000
    assert t.get(b"00005999") == b"x" * 1000


def test_bad_input(tmp_path):
    with pytest.raises(TypeError):
        kivi.Table.create(tmp_path / "a", [("str", b"v")])
    with pytest.raises(TypeError):
        kivi.Table.create(tmp_path / "b", [b"not a pair"])
    with pytest.raises(ValueError):
        kivi.Table.create(tmp_path / "c", [], compression="lz4")
    with pytest.raises(kivi.StorageError):
        kivi.Table.open(tmp_path / "missing")
    assert not (tmp_path / "a.spl").exists()  # a failed create leaves nothing


def test_closed_table(tmp_path):
    t = kivi.Table.create(tmp_path / "t", pairs(300))
    it = iter(t)
    next(it)
    t.close()
    with pytest.raises(kivi.ClosedError):
        t.get(b"key00001")
    with pytest.raises(kivi.ClosedError):
        next(it)
    with pytest.raises(kivi.ClosedError):
        len(t)


def test_corrupt_table(tmp_path):
    kivi.Table.create(tmp_path / "t", pairs(10))
    (tmp_path / "t.spi").write_bytes(b"garbage" * 10)
    with pytest.raises(kivi.CorruptionError):
        kivi.Table.open(tmp_path / "t")
