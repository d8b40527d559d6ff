#!/usr/bin/env bash
# A real full disk: kivi on a small ext4 file system (a loop device), filled
# under load. Needs root (losetup, mount).
#
#   tests/faults/full_disk.sh [ROUNDS]      (default 3; KIVI=path/to/kivi to choose the binary,
#                                            SIZE_MIB=256 the file system, FILLER_MIB=32 the filler)
#
# Each round, on a fresh SIZE_MIB ext4 with a FILLER_MIB filler file made first:
#   1. `kivi serve` on a store there; four connections pipeline SETs of new
#      keys until the disk is full: writes must be refused with an error
#      (its text is printed), not hang, not kill the server;
#   2. GETs of acknowledged keys go on answering, right; refused keys are absent;
#   3. the filler is deleted and, without restarting the server, writes must
#      be accepted again (then 400 more, none refused);
#   4. every acknowledged write is read back; the server stops (SIGTERM),
#      `kivi check` must be clean, the server starts again and every
#      acknowledged write is read back again, no refused one visible;
#   5. embedded: the file system is filled to its last block with the server
#      stopped; `kivi put` must fail with an error and leave nothing, `kivi
#      get` must answer, and after freeing space `kivi put` must work again.
# Exits non-zero on any failure; the loop device and mount go on every exit.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rounds=${1:-3}
size=${SIZE_MIB:-256}
filler=${FILLER_MIB:-32}
[ "$(id -u)" = 0 ] || { echo "full_disk.sh: needs root (losetup, mount)" >&2; exit 2; }
kivi_src=${KIVI:-$repo/target/release/kivi}
[ -x "$kivi_src" ] || kivi_src=$repo/target/debug/kivi
work=$(mktemp -d /tmp/kivi-full-disk.XXXXXX)
# A copy, so that a build elsewhere cannot swap the binary mid-test.
cp "$kivi_src" "$work/kivi"
kivi=$work/kivi
img=$work/disk.img
mnt=$work/mnt
mkdir -p "$mnt"
loop=""
server=""

cleanup() {
    set +e
    [ -n "$server" ] && kill -9 "$server" 2>/dev/null && wait "$server" 2>/dev/null
    mountpoint -q "$mnt" && umount "$mnt"
    [ -n "$loop" ] && losetup -d "$loop"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "FAILED: $*"
    exit 1
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_server() {
    local port=$1
    "$kivi" -d "$mnt/store" serve --resp "127.0.0.1:$port" --log-level warn >>"$work/serve.log" 2>&1 &
    server=$!
    for _ in $(seq 600); do
        if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),timeout=1)" 2>/dev/null; then
            return 0
        fi
        kill -0 "$server" 2>/dev/null || fail "kivi serve exited at start: $(tail -5 "$work/serve.log")"
        sleep 0.1
    done
    fail "kivi serve did not start listening"
}

stop_server() {
    kill -TERM "$server"
    local rc=0
    wait "$server" || rc=$?
    server=""
    echo "server stopped (SIGTERM): exit $rc"
}

echo "full_disk: kivi $kivi_src ($(cd "$repo" && git rev-parse --short HEAD)), $rounds rounds, $size MiB ext4 on a loop device, $filler MiB filler"
t0=$(date +%s)
for round in $(seq "$rounds"); do
    echo "== round $round"
    rm -f "$img"
    truncate -s "${size}M" "$img"
    mkfs.ext4 -q -F "$img"
    loop=$(losetup -f --show "$img")
    mount "$loop" "$mnt"
    dd if=/dev/zero of="$mnt/filler" bs=1M count="$filler" conv=fsync status=none
    echo "file system: $(df -h --output=size,avail "$mnt" | tail -1 | xargs) (size, available) after a $filler MiB filler"

    port=$(free_port)
    start_server "$port"
    python3 "$here/full_disk_load.py" fill "$port" "$work/state.json" "$mnt/filler" || fail "round $round: fill"
    kill -0 "$server" 2>/dev/null || fail "the server died"
    stop_server
    grep -i "error\|warn" "$work/serve.log" | sed 's/^/  server log: /' | sort | uniq -c | sort -rn | head -8 || true
    : >"$work/serve.log"
    out=$("$kivi" -d "$mnt/store" check 2>&1) || fail "kivi check after the full disk: $out"
    echo "kivi check: $out"
    start_server "$port"
    python3 "$here/full_disk_load.py" verify "$port" "$work/state.json" || fail "round $round: verify after restart"
    stop_server

    # Embedded: the command line on the same store, the file system filled to its last block.
    python3 "$here/full_disk_load.py" embedded "$kivi" "$mnt/store" "$work/state.json" || fail "round $round: embedded"
    out=$("$kivi" -d "$mnt/store" check 2>&1) || fail "kivi check at the end: $out"
    echo "kivi check at the end: $out"

    umount "$mnt"
    losetup -d "$loop"
    loop=""
done
echo "full_disk: $rounds rounds passed in $(($(date +%s) - t0)) s"
