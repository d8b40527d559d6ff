#!/bin/sh
# Runs kivaloo's own benchmark tools (bench/*/ in kivaloo's source, built by
# bench/kivaloo-build.sh) against `kivi serve --kvlds` and against kivaloo's
# lbs + kvlds, one after the other on this machine, each workload on a fresh
# store, as kivaloo's bench/bench-local.sh does; then prints both figures and
# their ratio. The tools are run unchanged: each warms up 50 s and reports the
# median of its per-second rates over the next 10 s (100 s for random_read
# and random_mixed), so the whole run takes about 20 minutes at N = 1048576.
#
#   bench/kivaloo-tools.sh KIVALOO_DIR [N] [KIVI]
#
# KIVALOO_DIR: a built kivaloo source tree; N: pairs (default 1048576); KIVI:
# the kivi program (default target/release/kivi). Scratch files go under
# ${TMPDIR:-/tmp}. bulk_insert prints a rate at every power of two of pairs
# done; the figure given is the median of those rates.
set -eu

fail() {
    echo "bench/kivaloo-tools.sh: $*" >&2
    exit 1
}

[ $# -ge 1 ] && [ $# -le 3 ] || fail "usage: bench/kivaloo-tools.sh KIVALOO_DIR [N] [KIVI]"
k=$(CDPATH='' cd -- "$1" && pwd -P) || fail "$1: no such directory"
n=${2:-1048576}
kivi=$(realpath "${3:-target/release/kivi}") || fail "no kivi program (cargo build --release -p kivi-cli)"
for tool in lbs/lbs kvlds/kvlds bench/mkpairs/mkpairs bench/bulk_insert/bulk_insert \
    bench/bulk_update/bulk_update bench/bulk_extract/bulk_extract \
    bench/random_read/random_read bench/random_mixed/random_mixed \
    bench/hotspot_read/hotspot_read; do
    [ -x "$k/$tool" ] || fail "$k/$tool missing: run bench/kivaloo-build.sh $1"
done
[ -x "$kivi" ] || fail "$kivi is not a program"

work=$(mktemp -d "${TMPDIR:-/tmp}/kivaloo-tools.XXXXXX")
pairs=$work/pairs
server_pid=""
cleanup() {
    stop_server
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# The socket path is short: Unix socket paths are at most 107 bytes.
start_server() { # STORE DIR
    mkdir -p "$2"
    if [ "$1" = kivaloo ]; then
        "$k/lbs/lbs" -d "$2" -s "$2/lbs.sock" -b 2048 -p "$2/lbs.pid"
        "$k/kvlds/kvlds" -s "$2/kvlds.sock" -l "$2/lbs.sock" -p "$2/kvlds.pid"
        server_pid="$(cat "$2/kvlds.pid") $(cat "$2/lbs.pid")"
    else
        "$kivi" -d "$2/data" serve --no-resp --kvlds "$2/kvlds.sock" >/dev/null &
        server_pid=$!
        i=0
        while [ ! -S "$2/kvlds.sock" ]; do
            i=$((i + 1))
            [ $i -le 200 ] || fail "kivi serve did not start"
            sleep 0.05
        done
    fi
}

stop_server() {
    [ -n "$server_pid" ] || return 0
    # shellcheck disable=SC2086 # a list of pids
    kill $server_pid 2>/dev/null || true
    for p in $server_pid; do
        while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
    done
    server_pid=""
}

run() { # STORE WORKLOAD: prints the tool's figure
    d=$work/$1-$2
    start_server "$1" "$d"
    s=$d/kvlds.sock
    if [ "$2" != bulk_insert ]; then
        "$k/bench/bulk_insert/bulk_insert" "$s" <"$pairs" >/dev/null
    fi
    case $2 in
    bulk_insert) "$k/bench/bulk_insert/bulk_insert" "$s" <"$pairs" |
        awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}' ;;
    bulk_update) "$k/bench/bulk_update/bulk_update" "$s" <"$pairs" ;;
    bulk_extract) "$k/bench/bulk_extract/bulk_extract" "$s" ;;
    *) "$k/bench/$2/$2" "$s" "$n" ;;
    esac
    if [ "$2" = random_mixed ]; then
        du -sb "$d" | awk -v s="$1" -v n="$n" '{printf "%s store after random_mixed: %.0f bytes, %.1f per pair\n", s, $1, $1 / n}' >&2
    fi
    stop_server
    rm -rf "$d"
}

"$k/bench/mkpairs/mkpairs" "$n" >"$pairs"
echo "kivaloo's tools, N = $n, $(date -u +%Y-%m-%dT%H:%MZ), $("$kivi" --version 2>/dev/null || echo "kivi ?")"
printf '%-14s %12s %12s %8s\n' workload "kivi/s" "kivaloo/s" ratio
first=kivi
second=kivaloo
for w in bulk_insert bulk_update bulk_extract random_read random_mixed hotspot_read; do
    # Alternate which store goes first, so a noisy minute hits both.
    a=$(run $first $w)
    b=$(run $second $w)
    if [ $first = kivi ]; then ki=$a ka=$b; else ki=$b ka=$a; fi
    printf '%-14s %12s %12s %7.2fx\n' $w "$ki" "$ka" "$(echo "$ki $ka" | awk '{print $1 / $2}')"
    t=$first first=$second second=$t
done
