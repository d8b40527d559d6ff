#!/usr/bin/env bash
# Runs every test kivi has: formatting, lints, unit, property, crash-simulation,
# kill -9, corruption and command-line tests, `kivi serve` under real Redis
# clients, and a small run of the benchmark suite against every store. Works
# on a fresh Debian machine with Rust installed (https://rustup.rs);
# bench/setup.sh installs the system libraries the other stores need (RocksDB,
# LevelDB), strace, redis-tools and python3-venv; pip installs redis-py,
# pytest, cachelib (a cache library that stores through Redis, tested against
# kivi), prometheus_client (whose parser reads `kivi serve --metrics`) and
# maturin (which builds the Python package, python/), plyvel, rocksdict and
# lmdb (the Python benchmark's peers) into a virtual environment under target/.
# Go (https://go.dev/dl/) builds versitygw, the S3-compatible server the
# object-store tests run against, into target/ (tests/s3/versitygw.sh).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v cargo >/dev/null; then
    echo "test.sh: cargo not found; install Rust from https://rustup.rs" >&2
    exit 1
fi
bench/setup.sh
# versitygw (the S3-compatible server of the object-store tests, below) is
# built by `go install` on first use; started now, the build runs beside the
# Rust ones instead of after them.
mkdir -p target
tests/s3/versitygw.sh install >target/versitygw-install.log 2>&1 &
versitygw_install=$!

cargo fmt --all --check
# Every relative link in the docs leads to a file (and heading) in the repository.
python3 docs/check-links.py
cargo clippy --workspace --all-targets --locked --features kivi-cli/peers,kivi-bench/peers -- -D warnings
# The library stack is publishable: each crate packages (versions on its
# dependencies, licenses, only its sources) and builds from its .crate alone,
# against the others as packaged (a dry run: nothing is uploaded, no token
# needed; --allow-dirty so that uncommitted work is what is checked), and
# its documentation has no broken link.
published=(kivi-storage kivi-object-storage kivi-log kivi-tree kivi-tables kivi-db)
for p in "${published[@]}"; do
    files=$(cargo package --list --allow-dirty --locked --quiet -p "$p")
    grep -qx LICENSE-MIT <<<"$files" && grep -qx LICENSE-APACHE <<<"$files" ||
        { echo "test.sh: the package of $p lacks LICENSE-MIT or LICENSE-APACHE" >&2; exit 1; }
done
# Cargo takes the packaged crates of a dry run as registry crates, which it
# never expects to change: it reuses their sources extracted under
# CARGO_HOME and their builds, by name and version. So that a rerun after a
# change to one of them does not verify the others against its old build
# (the version stays 0.1.0 between releases), those sources and builds
# (the ones whose dependency files name sources under the registry) are
# removed first; the workspace's own builds stay.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/kivi-*
for dep in target/debug/deps/kivi_*.d; do
    [ -e "$dep" ] && grep -q '/registry/src/-[^/ ]*/kivi-' "$dep" || continue
    name=$(basename "${dep%.d}")
    rm -f "$dep" target/debug/deps/lib"$name".*
done
cargo publish --dry-run --allow-dirty --locked --quiet "${published[@]/#/--package=}"
RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps --locked --quiet "${published[@]/#/--package=}"
cargo test --workspace --locked --features kivi-cli/peers,kivi-bench/peers
# The kivi a plain build makes, without the benchmark suite: lint-clean, and
# `kivi bench` there says how to get it.
cargo clippy -p kivi-cli --all-targets --locked -- -D warnings
cargo test -p kivi-cli --locked --test cli -- bench_without_the_suite help_lists
# The server with redis-py, redis-cli and redis-benchmark. Their Python
# packages go into a virtual environment of the repository's own: stock
# Debian's Python refuses `pip install` into the system (PEP 668).
venv=target/test-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import redis, pytest, cachelib, prometheus_client' 2>/dev/null ||
    "$venv/bin/python" -m pip install --quiet 'redis>=5' pytest cachelib prometheus_client
cargo build --release --locked --quiet -p kivi-cli --features peers
KIVI_BIN=target/release/kivi "$venv/bin/python" -m pytest -q tests/server
# The Python package (python/), built by the venv's maturin (on PATH for
# pip's build step; no isolated build environment to fetch each time) from
# this checkout into the same venv: ~26 s on 2 cores after the release
# build above (the engine's crates build again for it: the dependency
# features differ), ~2 s when nothing changed; its tests ~2 s.
"$venv/bin/python" -c 'import maturin' 2>/dev/null ||
    "$venv/bin/python" -m pip install --quiet 'maturin>=1.9,<2'
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/python" -m pip install --quiet --no-build-isolation ./python
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
# The Python benchmark works, beside plyvel, rocksdict and py-lmdb (tiny;
# wheels from PyPI into the same venv).
"$venv/bin/python" -c 'import plyvel, rocksdict, lmdb' 2>/dev/null ||
    "$venv/bin/python" -m pip install --quiet plyvel rocksdict lmdb
"$venv/bin/python" bench/python/compare.py --n 10000 --dir "$(mktemp -d)/bench-python" >/dev/null
# kivi on a real S3-compatible server: versitygw, whose atomic conditional
# puts the start script checks first (tests/s3/versitygw.sh).
wait "$versitygw_install" || { cat target/versitygw-install.log >&2; exit 1; }
s3dir=$(mktemp -d)
tests/s3/versitygw.sh start "$s3dir"
trap 'kill "$(cat "$s3dir/pid")" 2>/dev/null || true' EXIT
(. "$s3dir/env" && KIVI_BIN=target/release/kivi "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/s3)
# The object-store benchmark suite works on the same server, kivi alone (the
# release kivi above; SlateDB is a feature of its own, left out here): every
# step, as small as it goes (about 3.5 s).
(. "$s3dir/env" && target/release/kivi bench --object-store -n 2000 --ops 200 \
    --write-seconds 0.2 --delay-ms 1 --dir "$(mktemp -d)/bench-object")
# The benchmark suite works, on every store (a tiny run; real numbers come
# from docs/benchmarks.md).
cargo run --release --locked --quiet -p kivi-cli --features peers -- \
    bench --stores kivi,lmdb,rocksdb,leveldb,redb,fjall -n 10000 --dir "$(mktemp -d)/bench"
# The sealed-table benchmark works (sparkey's workload, tiny).
cargo run --release --locked --quiet -p kivi-cli --features peers -- \
    bench --tables -n 10000 --lookups 10000 --dir "$(mktemp -d)/bench-tables"
