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
# Scratch space for the benchmark smokes and the S3 server, removed at the
# end. A failed run says how much disk was left: a full disk makes the
# stores under test fail in their own ways (RocksDB aborts on an assertion).
scratch=$(mktemp -d)
finish() {
    status=$?
    set +e # (under set -e a failed kill of what already ended would exit here)
    [ -f "$scratch/s3/pid" ] && kill "$(cat "$scratch/s3/pid")" 2>/dev/null
    [ -n "${memory_limit:-}" ] && kill "$memory_limit" 2>/dev/null
    if [ "$status" -ne 0 ]; then
        echo "test.sh: failed (exit $status); disk left:" >&2
        df -h . "$scratch" >&2 || true
    fi
    rm -rf "$scratch"
}
trap finish EXIT
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
# The kivi those tests ran (optimized, with debug assertions, with the
# benchmark suite and every peer): the server, S3 and benchmark steps below
# run it too (a copy: the last step builds a plain kivi in its place).
kivi=$scratch/kivi
cp target/debug/kivi "$kivi"
# The memory-limit tests (cli/tests/memory_limit.rs, ignored by a plain
# cargo test: three minutes of a kivi in a memory cgroup) run in the
# background, beside the steps below that mostly wait on servers.
memory_test=$(cargo test --workspace --locked --features kivi-cli/peers,kivi-bench/peers \
    --test memory_limit --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("executable") and m["target"]["name"] == "memory_limit":
        print(m["executable"])')
"$memory_test" --ignored >"$scratch/memory_limit.log" 2>&1 &
memory_limit=$!
# Coverage-guided fuzzing (fuzz/, nightly toolchain, libFuzzer): every
# decoder of untrusted bytes a few seconds each, from its committed corpus.
# cargo test above replayed the corpora and the regression inputs; this
# builds the targets and searches briefly for new crashes, in the
# background too (the campaign's figures are in docs/reliability.md).
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
fuzz/run.sh 4 >"$scratch/fuzz.log" 2>&1 &
fuzzing=$!
# The server with redis-py, redis-cli and redis-benchmark. Their Python
# packages go into a virtual environment of the repository's own: stock
# Debian's Python refuses `pip install` into the system (PEP 668).
venv=target/test-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import redis, pytest, cachelib, prometheus_client' 2>/dev/null ||
    "$venv/bin/python" -m pip install --quiet 'redis>=5' pytest cachelib prometheus_client
KIVI_BIN=$kivi "$venv/bin/python" -m pytest -q tests/server
# The Python package (python/), built by the venv's maturin (on PATH for
# pip's build step; no isolated build environment to fetch each time) from
# this checkout into the same venv, unoptimized (the dev profile: the
# engine's crates build again for it, the dependency features differ;
# optimized, they took longer than all its tests and the benchmark smoke
# together), ~2 s when nothing changed; its tests ~5 s.
"$venv/bin/python" -c 'import maturin' 2>/dev/null ||
    "$venv/bin/python" -m pip install --quiet 'maturin>=1.9,<2'
PATH="$PWD/$venv/bin:$PATH" MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/python" -m pip install --quiet --no-build-isolation ./python
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
# The Python benchmark works, beside plyvel, rocksdict and py-lmdb (tiny;
# wheels from PyPI into the same venv).
"$venv/bin/python" -c 'import plyvel, rocksdict, lmdb' 2>/dev/null ||
    "$venv/bin/python" -m pip install --quiet plyvel rocksdict lmdb
"$venv/bin/python" bench/python/compare.py --n 10000 --dir "$scratch/bench-python" >/dev/null
# kivi on a real S3-compatible server: versitygw, whose atomic conditional
# puts the start script checks first (tests/s3/versitygw.sh).
wait "$versitygw_install" || { cat target/versitygw-install.log >&2; exit 1; }
s3dir=$scratch/s3
mkdir "$s3dir"
tests/s3/versitygw.sh start "$s3dir"
# TMPDIR: the caches of the servers these tests kill -9 (kivi's default
# cache of a store opened by URL is a temporary directory, which a killed
# process leaves behind) go with the scratch space.
(. "$s3dir/env" && TMPDIR=$scratch KIVI_BIN=$kivi "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/s3)
# The object-store benchmark suite works on the same server, kivi alone (the
# kivi the tests ran; SlateDB is a feature of its own, left out here): every
# step, as small as it goes (about 3.5 s).
(. "$s3dir/env" && $kivi bench --object-store -n 2000 --ops 200 \
    --write-seconds 0.2 --delay-ms 1 --dir "$scratch/bench-object")
# The follower suite works on the same server: lag under 8 writers for
# half a second, three takeovers on command, one after the writer's death
# (about 5 s).
(. "$s3dir/env" && $kivi bench --followers -n 2000 --ops 200 --writers 8 --write-seconds 0.5 \
    --takeovers 3 --kill-takeovers 1 --dir "$scratch/bench-followers")
# The benchmark suite works, on every store (a tiny run; real numbers come
# from docs/benchmarks.md).
# Each timed workload stops after a second (durable single puts, 10,000 of
# them, took 30 s a store where fdatasync is slow).
$kivi bench --stores kivi,lmdb,rocksdb,leveldb,redb,fjall -n 10000 --max-seconds 1 --dir "$scratch/bench"
# The sealed-table benchmark works (sparkey's workload, tiny).
$kivi bench --tables -n 10000 --lookups 10000 --dir "$scratch/bench-tables"
# The memory-limit tests and the fuzzing, started after cargo test above.
wait "$memory_limit" || { cat "$scratch/memory_limit.log" >&2; exit 1; }
grep -E "^test result" "$scratch/memory_limit.log"
wait "$fuzzing" || { cat "$scratch/fuzz.log" >&2; exit 1; }
cat "$scratch/fuzz.log"
# Linearizability under kill -9 (tests/linearizability/, Go and porcupine):
# two histories of 16 clients with the server killed mid-run, each checked,
# and the checker shown to reject planted violations.
KIVI_BIN=$kivi tests/linearizability/run.sh 2 "$scratch/linearizability"
# The kivi a plain build makes, without the benchmark suite: lint-clean, and
# `kivi bench` there says how to get it. Last: it builds kivi again in the
# place of the one the tests above ran. (Built beside the whole workspace
# with the peers' features, so that only kivi-cli builds again: on its
# own, -p kivi-cli unifies its dependencies' features differently, and
# ~30 crates build a second time.)
cargo clippy -p kivi-cli --all-targets --locked -- -D warnings
cargo test --workspace --locked --features kivi-bench/peers --test cli -- bench_without_the_suite help_lists
