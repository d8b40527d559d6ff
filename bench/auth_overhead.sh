#!/usr/bin/env bash
# What a password costs per command: SET and GET with -P 1000 against two
# kivi servers on fresh stores, one without a password and one with
# --requirepass (every connection authenticates once), alternated ROUNDS
# times in one run. Prints each rate and, per command, the median ratio
# with/without. Usage: bench/auth_overhead.sh [KIVI] [ROUNDS]
set -euo pipefail
KIVI=${1:-./target/release/kivi}
ROUNDS=${2:-5}
dir=$(mktemp -d)
trap 'kill $open $locked 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
"$KIVI" --log-level warn -d "$dir/open" serve --resp 127.0.0.1:6411 > /dev/null & open=$!
"$KIVI" --log-level warn -d "$dir/locked" serve --resp 127.0.0.1:6412 --requirepass bench-pass > /dev/null & locked=$!
sleep 1
# rate PORT [PASSWORD] -- COMMAND...
rate() {
    local conn=(-p "$1"); shift
    [ "$1" != -- ] && { conn+=(-a "$1"); shift; }
    shift
    redis-benchmark "${conn[@]}" -P 1000 -n 1000000 -r 1000000 -q "$@" 2>/dev/null | tr '\r' '\n' |
        grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}
for cmd in SET GET; do
    args=(SET key:__rand_int__ xxx); [ $cmd = GET ] && args=(GET key:__rand_int__)
    ratios=()
    for i in $(seq "$ROUNDS"); do
        a=$(rate 6411 -- "${args[@]}"); b=$(rate 6412 bench-pass -- "${args[@]}")
        r=$(python3 -c "print(f'{$b/$a:.2f}')"); ratios+=("$r")
        echo "$cmd round $i: no password $a/s, password $b/s: ${r}x"
    done
    echo "$cmd median with/without: $(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(( (ROUNDS+1)/2 ))p")x"
done
