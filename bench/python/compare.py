#!/usr/bin/env python3
"""kivi from Python beside the stores Python users pick: plyvel (LevelDB),
rocksdict (RocksDB) and py-lmdb (LMDB).

Every store runs in this one process, on the same pairs, through the calls
its own documentation shows, one workload at a time with the stores taking
turns, so that the ratios printed at the end compare like with like on a
noisy machine. The workloads are the embedded suite's (docs/workloads.md,
"Python"):

  load          N pairs in key order, 1,000 per durable batch
  update        N puts of random present keys, 1,000 per durable batch
  read          N gets of random present keys, every value checked
  scan          one ordered pass over every pair, order checked
  short-scans   N/100 scans of 100 pairs from random keys
  table-read    N random lookups in a sealed table (kivi.Table) against the
                same lookups in an LMDB environment opened read-only,
                holding the same pairs (one read transaction, as py-lmdb's
                documentation does for many reads)
  table-many    the same lookups, 1,000 keys a call (Table.get_many against
                py-lmdb's Cursor.getmulti)

"Durable" means the call returns only once what it wrote is fsynced:
kivi's default, plyvel's write_batch(sync=True), rocksdict's
WriteOptions.sync = True, py-lmdb's default (sync=True).

    python bench/python/compare.py --n 1000000 --dir /tmp/pybench

prints a table (operations a second, and kivi's ratio to each peer) and, with
--json FILE, appends one JSON object per figure.
"""

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time

BATCH = 1000
SCAN_LEN = 100
MANY = 1000


def pair(i, version=0):
    """The kv40 pair i: a 40-byte key whose first 8 bytes order it, a 40-byte
    value naming i and its version (bench/src/kv40.rs's scheme, made with
    BLAKE2b here)."""
    noise = hashlib.blake2b(i.to_bytes(8, "big"), digest_size=56).digest()
    key = i.to_bytes(8, "big") + noise[:32]
    value = i.to_bytes(8, "big") + version.to_bytes(8, "big") + noise[32:56]
    return key, value


# ---------------------------------------------------------------- the stores


class Kivi:
    name = "kivi"

    def __init__(self, path):
        import kivi

        self.kivi = kivi
        self.db = kivi.Db(path)
        self.get = self.db.get

    def write_batch(self, pairs):
        batch = self.kivi.WriteBatch()
        put = batch.put
        for k, v in pairs:
            put(k, v)
        self.db.write(batch)

    def scan(self):
        return iter(self.db.range())

    def scan_from(self, key, count):
        out = []
        for kv in self.db.range(start=key):
            out.append(kv)
            if len(out) == count:
                break
        return out

    def close(self):
        self.db.close()


class Plyvel:
    name = "plyvel"

    def __init__(self, path):
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True)
        self.get = self.db.get

    def write_batch(self, pairs):
        with self.db.write_batch(sync=True) as batch:
            put = batch.put
            for k, v in pairs:
                put(k, v)

    def scan(self):
        return self.db.iterator()

    def scan_from(self, key, count):
        out = []
        with self.db.iterator(start=key) as it:
            for kv in it:
                out.append(kv)
                if len(out) == count:
                    break
        return out

    def close(self):
        self.db.close()


class RocksDict:
    name = "rocksdict"

    def __init__(self, path):
        import rocksdict

        self.rocksdict = rocksdict
        self.db = rocksdict.Rdict(path, rocksdict.Options(raw_mode=True))
        self.sync = rocksdict.WriteOptions()
        self.sync.sync = True
        self.get = self.db.get

    def write_batch(self, pairs):
        batch = self.rocksdict.WriteBatch(raw_mode=True)
        put = batch.put
        for k, v in pairs:
            put(k, v)
        self.db.write(batch, self.sync)

    def scan(self):
        return self.db.items()

    def scan_from(self, key, count):
        out = []
        for kv in self.db.items(from_key=key):
            out.append(kv)
            if len(out) == count:
                break
        return out

    def close(self):
        self.db.close()


class Lmdb:
    name = "lmdb"

    def __init__(self, path, readonly=False):
        import lmdb

        os.makedirs(path, exist_ok=True)
        self.env = lmdb.open(
            path, map_size=64 << 30, readonly=readonly, lock=not readonly
        )
        self.txn = self.env.begin(buffers=False)
        self.get = self.txn.get

    def write_batch(self, pairs):
        self.txn.abort()
        with self.env.begin(write=True) as txn:
            put = txn.put
            for k, v in pairs:
                put(k, v)
        self.txn = self.env.begin(buffers=False)
        self.get = self.txn.get

    def scan(self):
        return self.txn.cursor().iternext()

    def scan_from(self, key, count):
        out = []
        cursor = self.txn.cursor()
        if cursor.set_range(key):
            for kv in cursor.iternext():
                out.append(kv)
                if len(out) == count:
                    break
        return out

    def get_many(self, keys):
        return [v for _, v in self.txn.cursor().getmulti(keys)]

    def close(self):
        self.txn.abort()
        self.env.close()


STORES = {s.name: s for s in (Kivi, Plyvel, RocksDict, Lmdb)}


# ------------------------------------------------------------- the workloads


def timed(fn):
    start = time.perf_counter()
    ops = fn()
    return ops, time.perf_counter() - start


def load_batches(n):
    """The load's batches: keys 0..n-1 in order, BATCH a batch."""
    return [[pair(i) for i in range(lo, min(lo + BATCH, n))] for lo in range(0, n, BATCH)]


def update_batches(n, rng):
    """The update's batches: random present keys, new values, each key at
    most once a batch (in key order, as a batch sorts them anyway)."""
    batches = []
    done = 0
    while done < n:
        picked = sorted({rng.randrange(n) for _ in range(min(BATCH, n - done))})
        batches.append([pair(i, version=1) for i in picked])
        done += len(picked)
    return batches


def write_all(store, batches):
    for batch in batches:
        store.write_batch(batch)
    return sum(len(b) for b in batches)


def check_reads(get, keys, values):
    for k, v in zip(keys, values):
        if get(k) != v:
            raise AssertionError(f"wrong value for {k.hex()}")
    return len(keys)


def check_scan(it, n):
    last = b""
    count = 0
    for k, _v in it:
        if k <= last:
            raise AssertionError("scan out of order")
        last = k
        count += 1
    if count != n:
        raise AssertionError(f"scan saw {count} pairs, not {n}")
    return n


def short_scans(store, starts):
    for k in starts:
        got = store.scan_from(k, SCAN_LEN)
        if len(got) != SCAN_LEN or got[0][0] != k:
            raise AssertionError("short scan came back short")
    return len(starts)


# ------------------------------------------------------------------ the run


def versions():
    found = {"python": platform.python_version()}
    for module in ("kivi", "plyvel", "rocksdict", "lmdb"):
        try:
            __import__(module)
            found[module] = importlib.metadata.version(
                "kivi-db" if module == "kivi" else module
            )
        except (ImportError, importlib.metadata.PackageNotFoundError):
            pass
    return found


def commit():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="pairs (default 1M)")
    ap.add_argument("--dir", required=True, help="scratch directory (emptied)")
    ap.add_argument(
        "--stores",
        default="kivi,plyvel,rocksdict,lmdb",
        help="comma-separated: kivi, plyvel, rocksdict, lmdb",
    )
    ap.add_argument(
        "--workloads",
        default="load,update,read,scan,short-scans,table-read,table-many",
    )
    ap.add_argument("--json", help="append one JSON object per figure here")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--rounds", type=int, default=1, help="rounds, each on fresh stores")
    args = ap.parse_args()

    names = args.stores.split(",")
    for name in names:
        if name not in STORES:
            sys.exit(f"compare.py: unknown store {name!r} (know {', '.join(STORES)})")
    workloads = args.workloads.split(",")
    n = args.n
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    rng = random.Random(args.seed)
    meta = {"commit": commit(), "n": n, **versions()}
    print(f"# {meta}", flush=True)

    results = {}  # (workload, store) -> [ops/s of each round]

    def record(round_no, workload, store, ops, seconds):
        rate = ops / seconds
        results.setdefault((workload, store), []).append(rate)
        print(
            f"[round {round_no}] {workload:12} {store:10} {rate:14,.0f} ops/s  ({seconds:.2f} s)",
            flush=True,
        )
        if args.json:
            with open(args.json, "a") as out:
                row = {**meta, "round": round_no, "workload": workload, "store": store,
                       "ops_per_sec": rate}
                out.write(json.dumps(row) + "\n")

    read_order = list(range(n))
    rng.shuffle(read_order)
    keys = [pair(i)[0] for i in read_order]
    starts = [pair(rng.randrange(max(1, n - SCAN_LEN)))[0] for _ in range(max(1, n // 100))]
    # The batches are made before the clock starts: making pairs costs
    # Python more than some stores take to store them.
    loads = load_batches(n)
    updates = update_batches(n, random.Random(args.seed))
    touched = {k for batch in updates for k, _ in batch}
    fresh = [pair(i)[1] for i in read_order]
    updated = [pair(i, version=1)[1] if k in touched else v
               for i, k, v in zip(read_order, keys, fresh)]

    for round_no in range(1, args.rounds + 1):
        # The stores take turns going first, round by round.
        turn = (round_no - 1) % len(names)
        order = names[turn:] + names[:turn]
        where = os.path.join(args.dir, f"round{round_no}")
        os.makedirs(where)
        stores = {name: STORES[name](os.path.join(where, name)) for name in order}

        def each(workload, fn):
            for name, store in stores.items():
                ops, seconds = timed(lambda: fn(store))
                if workload in workloads:
                    record(round_no, workload, name, ops, seconds)

        each("load", lambda store: write_all(store, loads))
        values = fresh
        if "update" in workloads:
            each("update", lambda store: write_all(store, updates))
            values = updated
        if "read" in workloads:
            each("read", lambda store: check_reads(store.get, keys, values))
        if "scan" in workloads:
            each("scan", lambda store: check_scan(store.scan(), n))
        if "short-scans" in workloads:
            each("short-scans", lambda store: short_scans(store, starts))
        for store in stores.values():
            store.close()
        if "table-read" in workloads or "table-many" in workloads:
            tables(round_no, where, record, workloads, n, keys, fresh)
        shutil.rmtree(where, ignore_errors=True)

    print()
    print(f"Best round of {args.rounds}, ops/s; kivi's best over each peer's best, and "
          "in brackets the same ratio round by round.")
    print()
    peers = [s for s in names if s != "kivi"]
    if "lmdb" not in peers and any(w.startswith("table") for w in workloads):
        peers.append("lmdb")
    print("| workload | " + " | ".join(["kivi"] + peers) + " | "
          + " | ".join(f"kivi / {s}" for s in peers) + " |")
    print("|---" * (2 + 2 * len(peers)) + "|")
    for workload in ["load", "update", "read", "scan", "short-scans", "table-build",
                     "table-read", "table-many"]:
        mine = results.get((workload, "kivi"))
        if not mine:
            continue
        cells = [f"{max(mine):,.0f}"]
        ratios = []
        for s in peers:
            theirs = results.get((workload, s))
            cells.append(f"{max(theirs):,.0f}" if theirs else "")
            if theirs:
                each_round = " / ".join(f"{a / b:.2f}" for a, b in zip(mine, theirs))
                ratios.append(f"{max(mine) / max(theirs):.2f}× ({each_round})")
            else:
                ratios.append("")
        print(f"| {workload} | " + " | ".join(cells + ratios) + " |")


def tables(round_no, where, record, workloads, n, keys, fresh):
    """A sealed table of the N load pairs against an LMDB environment of
    the same pairs opened read-only: the build, then the lookups."""
    import kivi

    table_path = os.path.join(where, "table.spl")
    lmdb_path = os.path.join(where, "lmdb-sealed")
    pairs = [pair(i) for i in range(n)]
    record(round_no, "table-build", "kivi",
           *timed(lambda: (kivi.Table.create(table_path, pairs), n)[1]))
    writer = Lmdb(lmdb_path)
    record(round_no, "table-build", "lmdb", *timed(lambda: (writer.write_batch(pairs), n)[1]))
    writer.close()
    del pairs
    table = kivi.Table.open(table_path)
    reader = Lmdb(lmdb_path, readonly=True)
    if "table-read" in workloads:
        record(round_no, "table-read", "kivi", *timed(lambda: check_reads(table.get, keys, fresh)))
        record(round_no, "table-read", "lmdb", *timed(lambda: check_reads(reader.get, keys, fresh)))
    if "table-many" in workloads:

        def many(get_many):
            for lo in range(0, n, MANY):
                if get_many(keys[lo : lo + MANY]) != fresh[lo : lo + MANY]:
                    raise AssertionError("get_many: wrong values")
            return n

        record(round_no, "table-many", "kivi", *timed(lambda: many(table.get_many)))
        record(round_no, "table-many", "lmdb", *timed(lambda: many(reader.get_many)))
    table.close()
    reader.close()


if __name__ == "__main__":
    main()
