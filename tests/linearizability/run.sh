#!/usr/bin/env bash
# Linearizability of `kivi serve` under SIGKILL (README.md in this folder).
#   tests/linearizability/run.sh [HISTORIES [OUT_DIR]] [-- DRIVER FLAGS...]
# Runs the checker's own tests (hand-made histories it must reject), builds
# the driver, then records and checks HISTORIES histories (default 3, about
# 13 s each): 16 clients, 3 SIGKILLs and restarts mid-run and one at the
# end, each history also checked with a planted stale read that must be
# rejected. Prints a line per history and a total; exits non-zero on any
# history not found linearizable (saved with porcupine's visualization
# under OUT_DIR, default target/linearizability-failures) or any planted
# fault not caught. KIVI_BIN: the kivi to test (default target/release/kivi,
# else target/debug/kivi). FOLLOWERS=N: the store on S3 (versitygw, started
# here by tests/s3/versitygw.sh) and N followers serving it to 4 more
# clients, whose reads are checked against the writer's order too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
histories=3
out=$root/target/linearizability-failures
if [ $# -gt 0 ] && [ "$1" != -- ]; then histories=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" != -- ]; then out=$1; shift; fi
[ "${1:-}" = -- ] && shift
kivi=${KIVI_BIN:-}
if [ -z "$kivi" ]; then
    kivi=$root/target/release/kivi
    [ -x "$kivi" ] || kivi=$root/target/debug/kivi
fi
[ -x "$kivi" ] && kivi=$(realpath "$kivi") || { echo "run.sh: no kivi binary at $kivi (cargo build -p kivi-cli, or set KIVI_BIN)" >&2; exit 2; }
followers=()
if [ -n "${FOLLOWERS:-}" ]; then
    s3=$(mktemp -d)
    trap 'kill "$(cat "$s3/pid")" 2>/dev/null; rm -rf "$s3"' EXIT
    "$root/tests/s3/versitygw.sh" start "$s3"
    # shellcheck disable=SC1091
    . "$s3/env"
    export AWS_ENDPOINT AWS_ALLOW_HTTP AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION KIVI_S3_BUCKET
    # The followers' caches: killed writers leave theirs behind.
    export TMPDIR=$s3
    followers=(-followers "$FOLLOWERS")
fi
cd "$here"
go test -count=1 -timeout 60s . >/dev/null || go test -count=1 -timeout 60s .
driver=$root/target/linearizability-driver
go build -o "$driver" .
"$driver" -kivi "$kivi" -histories "$histories" -tamper -out "$out" "${followers[@]}" "$@"
