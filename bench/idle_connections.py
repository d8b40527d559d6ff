#!/usr/bin/env python3
"""What idle connections cost `kivi serve`: its resident memory before and
after N idle RESP connections (default 10,000), and that the first and the
last still answer.

    ./target/release/kivi -d /tmp/idle serve --resp 127.0.0.1:16390 &
    python3 bench/idle_connections.py 127.0.0.1:16390 $! [N]
"""

import resource
import socket
import sys
import time


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS")


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    pid = int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    before = rss_kib(pid)
    socks = [socket.create_connection((host, int(port))) for _ in range(n)]
    time.sleep(1)
    after = rss_kib(pid)
    for s in (socks[0], socks[-1]):
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert s.recv(100) == b"+PONG\r\n"
    print(f"RSS {before} KiB before, {after} KiB with {n} idle connections: "
          f"{(after - before) * 1024 / n:.0f} bytes each")
    for s in socks:
        s.close()


if __name__ == "__main__":
    main()
