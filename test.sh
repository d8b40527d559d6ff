#!/usr/bin/env bash
# Runs every test kivi has: formatting, lints, unit, property, crash-simulation,
# kill -9, corruption and command-line tests. Works on a fresh machine with
# Rust installed (https://rustup.rs); installs nothing else.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v cargo >/dev/null; then
    echo "test.sh: cargo not found; install Rust from https://rustup.rs" >&2
    exit 1
fi

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The benchmark works (a tiny run; real numbers come from docs/benchmarks.md).
cargo run --release --locked --quiet -p kivi-cli -- bench -n 10000 --dir "$(mktemp -d)/bench"
