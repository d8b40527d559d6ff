#!/usr/bin/env python3
"""fdatasync latency of an append, by what lies where it lands.

Reproduces the table behind `SIZE_STEP` in storage/src/local.rs
(docs/benchmarks.md, "Commit segments grown with written zeros"): a file
written at increasing offsets, each write followed by fdatasync, when the
file
  - append:  grows with each write (the write is past the end),
  - hole:    was made long first with ftruncate (a sparse hole),
  - zeroed:  was filled with written zeros first (blocks allocated),
  - falloc:  was preallocated with posix_fallocate (unwritten extents).

Usage: python3 bench/fdatasync_tail.py [DIR]   (DIR on the file system to
measure; default /tmp). Prints p50 and p99 per case, for 85,000-byte writes
(a 1,000-pair kv40 commit) and 100-byte ones (a single put).
"""
import os
import sys
import time


def run(path, mode, n, size):
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_RDWR)
    total = n * size + (1 << 20)
    if mode == "hole":
        os.ftruncate(fd, total)
    elif mode == "zeroed":
        zeros = b"\0" * (1 << 20)
        for off in range(0, total, 1 << 20):
            os.pwrite(fd, zeros, off)
        os.fdatasync(fd)
    elif mode == "falloc":
        os.posix_fallocate(fd, 0, total)
        os.fdatasync(fd)
    data = b"x" * size
    lat = []
    for i in range(n):
        start = time.perf_counter()
        os.pwrite(fd, data, i * size)
        os.fdatasync(fd)
        lat.append(time.perf_counter() - start)
    os.close(fd)
    os.unlink(path)
    lat.sort()
    return lat[n // 2] * 1e6, lat[n * 99 // 100] * 1e6


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
    path = os.path.join(directory, "fdatasync_tail.tmp")
    for size, n in ((85000, 2000), (100, 5000)):
        for mode in ("append", "hole", "zeroed", "falloc"):
            p50, p99 = run(path, mode, n, size)
            print(f"{size:6} B  {mode:7} p50 {p50:6.0f} us  p99 {p99:6.0f} us")


if __name__ == "__main__":
    main()
