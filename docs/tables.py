#!/usr/bin/env python3
"""Prints the Markdown tables of docs/benchmarks.md from `kivi bench --json`.

    python3 docs/tables.py run.jsonl [more.jsonl ...]

One table: a row per workload, a column per store, each cell the store's
best round (as the terminal table picks it) and, for the peers, kivi's
figure divided by theirs in the direction where above 1 means kivi is
better. A second table lists every round of every figure, so the spread is
visible too.
"""

import json
import sys
from collections import defaultdict

ORDER = [
    "sync_check",
    "fdatasync",
    "bulk_insert",
    "random_read",
    "random_update",
    "random_mixed",
    "range_scan",
    "hotspot_read",
    "zipfian_read",
    "zipfian_update",
    "short_scan",
    "single_put",
    "concurrent_put_1",
    "concurrent_put_2",
    "concurrent_put_8",
    "concurrent_put_64",
    "space_after_load",
    "space_after_updates",
    "space_steady",
    "recovery",
]
failures = []  # records of stores that stopped early ("failed")
STORES = ["kivi", "kivi-nocleaner", "lmdb", "rocksdb", "leveldb", "redb", "fjall", "machine"]


def headline(r):
    """(value, more_is_better, unit) of a record, as bench/src/report.rs has it."""
    if r.get("syncs_per_commit") is not None:
        return r["syncs_per_commit"], False, "syncs/commit"
    if r.get("reopen_seconds") is not None:
        return r["reopen_seconds"], False, "s"
    if r.get("bytes_per_pair") is not None:
        return r["bytes_per_pair"], False, "B/pair"
    if r["workload"] in ("single_put", "fdatasync"):
        return r.get("p50_us"), False, "µs p50"
    if r.get("failure") is not None:
        return None, True, "ops/s"
    return r.get("ops_per_sec"), True, "ops/s"


def fmt(v, unit):
    if v is None:
        return "—"
    if unit == "ops/s":
        if v >= 1e6:
            return f"{v / 1e6:.2f} M/s"
        return f"{v / 1e3:.1f} K/s"
    if unit == "syncs/commit":
        return f"{v:.2f}"
    if unit == "s":
        return f"{v:.2f} s" if v >= 0.1 else f"{v * 1000:.1f} ms"
    if unit == "B/pair":
        return f"{v:.1f} B"
    return f"{v:.1f} µs"


def load(paths):
    rows = defaultdict(list)  # workload -> records
    n = None
    failures.clear()
    for path in paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                n = r["n"]
                if r["workload"] == "failed":
                    failures.append(r)
                    continue
                rows[r["workload"]].append(r)
    return rows, n


def best_of(records):
    best = {}
    for r in records:
        v, more, unit = headline(r)
        if v is None:
            continue
        old = best.get(r["store"])
        if old is None or (v > old[0] if more else v < old[0]):
            best[r["store"]] = (v, more, unit, r.get("stopped_early") is not None)
    return best


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows, n = load(sys.argv[1:])
    stores = [s for s in STORES if any(r["store"] == s for rs in rows.values() for r in rs)]
    print(f"n = {n:,}; best round of each store; (×) = kivi ÷ store, above 1 kivi is better\n")
    print("| workload | " + " | ".join(stores) + " |")
    print("|---|" + "---|" * len(stores))
    for w in [w for w in ORDER if w in rows] + sorted(set(rows) - set(ORDER)):
        best = best_of(rows[w])
        kivi = best.get("kivi")
        cells = []
        for s in stores:
            if s not in best:
                cells.append("")
                continue
            v, more, unit, stopped = best[s]
            cell = fmt(v, unit) + (" †" if stopped else "")
            if s not in ("kivi", "machine") and kivi and v and kivi[0]:
                ratio = kivi[0] / v if more else v / kivi[0]
                cell += f" ({ratio:.2f}×)"
            if s == "kivi":
                cell = f"**{cell}**"
            cells.append(cell)
        print(f"| {w} | " + " | ".join(cells) + " |")

    print("\nEvery round (store: round 1, 2, 3, ...):\n")
    print("| workload | " + " | ".join(stores) + " |")
    print("|---|" + "---|" * len(stores))
    for w in [w for w in ORDER if w in rows] + sorted(set(rows) - set(ORDER)):
        per = defaultdict(list)
        for r in sorted(rows[w], key=lambda r: r["round"]):
            v, _, unit = headline(r)
            per[r["store"]].append(fmt(v, unit) + (" †" if r.get("stopped_early") else ""))
        print(f"| {w} | " + " | ".join(", ".join(per.get(s, [])) for s in stores) + " |")

    if any(r.get("stopped_early") for rs in rows.values() for r in rs):
        print("\n† stopped at `--max-seconds`; the rate is over the operations it did.")
    io_table(rows, stores)
    for r in failures:
        print(f"\n{r['store']}, round {r['round']}: {r['failure']}")


def io_table(rows, stores):
    """With --memory-limit: each store's peak memory (its cgroup: process and
    page cache) and device bytes read / written per operation, from the round
    the first table shows."""
    records = [r for rs in rows.values() for r in rs]
    limited = [r for r in records if r.get("memory_limit_bytes")]
    if not limited:
        return
    limit = limited[0]["memory_limit_bytes"] >> 20
    print(f"\nIn a memory cgroup of {limit} MiB: peak memory of the cgroup (MiB), then device "
          "bytes read / written per operation, from the round above:\n")
    print("| workload | " + " | ".join(stores) + " |")
    print("|---|" + "---|" * len(stores))
    for w in [w for w in ORDER if w in rows] + sorted(set(rows) - set(ORDER)):
        cells = []
        for s in stores:
            mine = [r for r in rows[w] if r["store"] == s and r.get("peak_memory_bytes")]
            best = best_of(mine).get(s)
            pick = next((r for r in mine if best and headline(r)[0] == best[0]), None)
            if pick is None:
                cells.append("")
                continue
            cell = f"{pick['peak_memory_bytes'] >> 20}"
            if pick.get("device_read_per_op") is not None:
                cell += f" · {pick['device_read_per_op']:.0f} / {pick['device_written_per_op']:.0f} B"
            cells.append(cell)
        if any(cells):
            print(f"| {w} | " + " | ".join(cells) + " |")



if __name__ == "__main__":
    main()
