#!/bin/sh
# Installs what the tests and kivi-bench's `peers` feature need on Debian
# (and derivatives):
#   librocksdb-dev  RocksDB's C API and library (bench/src/stores/rocksdb.rs)
#   libleveldb-dev  LevelDB's C API and library (bench/src/stores/leveldb.rs)
#   strace          to check that durable writes really call fsync/fdatasync
#   redis-tools     redis-cli and redis-benchmark, real clients of `kivi serve`
#                   (tests/server/, and the server benchmarks)
#   redis-server    the Redis the server benchmarks compare with
#   python3-venv    a virtual environment for the server tests' Python
#                   packages (Debian's Python refuses pip installs of its own)
# Only missing packages are installed. Uses sudo when not run as root.
# Exits non-zero, saying why, when it cannot install them.
set -eu

packages="librocksdb-dev libleveldb-dev strace redis-tools redis-server python3-venv"

fail() {
    echo "bench/setup.sh: $*" >&2
    exit 1
}

installed() {
    [ "$(dpkg-query -W -f '${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
    fail "needs Debian's dpkg and apt-get; install the equivalents of: $packages"

missing=""
for p in $packages; do
    installed "$p" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "bench/setup.sh: already installed: $packages"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
else
    fail "not root and no sudo: as root, run: apt-get install -y --no-install-recommends$missing"
fi

echo "bench/setup.sh: installing:$missing"
# An old package index may not know the packages (or their current versions).
# shellcheck disable=SC2086 # $as_root and $missing are word lists on purpose
$as_root apt-get update -q ||
    fail "apt-get update failed; cannot install:$missing"
# shellcheck disable=SC2086
$as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends $missing ||
    fail "apt-get install failed for:$missing"

for p in $missing; do
    installed "$p" || fail "$p is still not installed"
done
echo "bench/setup.sh: done"
