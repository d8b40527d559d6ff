#!/usr/bin/env python3
"""Draws the plots of docs/benchmarks.md from `kivi bench --json` output.

    pip install matplotlib
    python3 docs/plot.py OUT_PREFIX run.jsonl [more.jsonl ...]

writes OUT_PREFIX-throughput.png (each store's best round per workload, log
scale), OUT_PREFIX-concurrent.png (puts per second against writer threads)
OUT_PREFIX-space.png (bytes on disk per pair during workload 9's long
update run) and OUT_PREFIX-amplification.png (bytes on disk over live bytes
during that run, for the stores that count their live bytes: kivi), each
when the runs hold what it shows.
"""

import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tables import STORES  # noqa: E402  (docs/tables.py, beside this file)

THROUGHPUT = [
    "bulk_insert",
    "random_read",
    "random_update",
    "random_mixed",
    "range_scan",
    "hotspot_read",
    "zipfian_read",
    "zipfian_update",
    "short_scan",
]


def load(paths):
    best = defaultdict(dict)  # workload -> store -> best ops/s
    n = None
    for path in paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                v = r.get("ops_per_sec")
                if v is None:
                    continue
                n = r["n"]
                w, s = r["workload"], r["store"]
                best[w][s] = max(best[w].get(s, 0), v)
    return best, n


def throughput(best, n, out):
    # Only the workloads the runs measured (11-13 are in the memory-limited
    # suite's runs alone).
    workloads = [w for w in THROUGHPUT if best[w]]
    stores = [s for s in STORES if any(s in best[w] for w in workloads)]
    fig, ax = plt.subplots(figsize=(1.6 * len(workloads) + 1, 5))
    width = 0.8 / len(stores)
    for i, s in enumerate(stores):
        xs, ys = [], []
        for j, w in enumerate(workloads):
            if s in best[w]:
                xs.append(j + i * width)
                ys.append(best[w][s] / 1e6)
        ax.bar(xs, ys, width, label=s)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(workloads))])
    ax.set_xticklabels([w.replace("_", " ") for w in workloads])
    ax.set_yscale("log")
    ax.set_ylabel("million operations per second (log scale)")
    ax.set_title(f"kv40, n = {n:,}: best of the rounds, durable writes")
    ax.legend()
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def concurrent(best, n, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in STORES:
        points = [(t, best[f"concurrent_put_{t}"].get(s)) for t in (1, 2, 8, 64)]
        points = [(t, v) for t, v in points if v]
        if points:
            ax.plot([t for t, _ in points], [v for _, v in points], marker="o", label=s)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 8, 64])
    ax.set_xticklabels(["1", "2", "8", "64"])
    ax.set_xlabel("threads, each doing single durable puts")
    ax.set_ylabel("puts per second, all threads")
    ax.set_title(f"concurrent durable puts, n = {n:,}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def samples(paths, field):
    """Per store, the first round's `field` samples of workload 9's long
    update run, and n."""
    series = {}
    n = None
    for path in paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get(field) and r["store"] not in series:
                    n = r["n"]
                    series[r["store"]] = r[field]
    return series, n


def space(paths, out):
    """Bytes on disk per pair during workload 9's long update run, per store
    (the first round that has samples)."""
    series, n = samples(paths, "space_samples")
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in STORES:
        if s in series:
            pts = series[s]
            ax.plot([u / n for u, _ in pts], [b for _, b in pts], marker=".", label=s)
    ax.set_xlabel("random updates done, in multiples of n")
    ax.set_ylabel("bytes on disk per pair")
    ax.set_title(f"space during durable random updates, n = {n:,}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return True


def amplification(paths, out, target=2.0):
    """Bytes on disk over live bytes during workload 9's long update run,
    for the stores that report their live bytes, with the space target."""
    series, n = samples(paths, "amplification_samples")
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in STORES:
        if s in series:
            pts = series[s]
            ax.plot([u / n for u, _ in pts], [a for _, a in pts], marker=".", label=s)
    ax.axhline(target, color="grey", linestyle="--", label=f"target {target}")
    ax.set_xlabel("random updates done, in multiples of n")
    ax.set_ylabel("bytes on disk / live tree bytes")
    ax.set_title(f"kivi space amplification during durable random updates, n = {n:,}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return True


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    prefix, paths = sys.argv[1], sys.argv[2:]
    best, n = load(paths)
    if any(w in best for w in THROUGHPUT):
        throughput(best, n, f"{prefix}-throughput.png")
    if any(f"concurrent_put_{t}" in best for t in (1, 2, 8, 64)):
        concurrent(best, n, f"{prefix}-concurrent.png")
    space(paths, f"{prefix}-space.png")
    amplification(paths, f"{prefix}-amplification.png")


if __name__ == "__main__":
    main()
