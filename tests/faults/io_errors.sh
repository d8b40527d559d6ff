#!/usr/bin/env bash
# Real I/O errors under kivi serve. Device mapper (dm-error, dm-flakey) is
# not in every kernel (not in this one: `dmsetup targets` finds no driver),
# so the errors come from faultfs (tests/faults/faultfs.c), a FUSE
# passthrough whose every write, fsync, create, truncate, rename and unlink
# fails with EIO while it is told to fail (SIGUSR1; SIGUSR2 ends it). Needs
# root (FUSE, losetup, mount).
#
#   tests/faults/io_errors.sh [ROUNDS]     (default 2; KIVI=path/to/kivi to choose the binary)
#
# Each round runs two scenarios:
#   fuse  the store on faultfs itself: kivi's own writes and fdatasyncs get
#         EIO. Writes must be refused with an error, reads go on; once the
#         errors stop, writes must be accepted again without a restart; then
#         every acknowledged write is read back, before and after a restart,
#         no refused one visible, and `kivi check` is clean.
#   loop  the store on ext4 on a loop device whose backing file lies on
#         faultfs: the errors reach the kernel as a failing disk's, and ext4
#         (journal aborted) turns read-only. Writes must be refused, reads
#         go on; then the server is killed (-9), the file system unmounted,
#         fsck'd and mounted again, and every acknowledged write must be
#         there, no refused one, `kivi check` clean.
# Exits non-zero on any failure; mounts and loop devices go on every exit.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rounds=${1:-2}
[ "$(id -u)" = 0 ] || { echo "io_errors.sh: needs root (FUSE, losetup, mount)" >&2; exit 2; }
for p in libfuse3-dev fuse3 pkg-config; do
    dpkg -s "$p" >/dev/null 2>&1 || apt-get install -y "$p" >/dev/null
done
faultfs=$repo/target/faults/faultfs
if [ ! -x "$faultfs" ] || [ "$here/faultfs.c" -nt "$faultfs" ]; then
    mkdir -p "$repo/target/faults"
    cc -O2 -Wall -o "$faultfs" "$here/faultfs.c" $(pkg-config fuse3 --cflags --libs)
fi
kivi_src=${KIVI:-$repo/target/release/kivi}
[ -x "$kivi_src" ] || kivi_src=$repo/target/debug/kivi
work=$(mktemp -d /tmp/kivi-io-errors.XXXXXX)
cp "$kivi_src" "$work/kivi"
kivi=$work/kivi
ffroot=$work/ffroot
ffmnt=$work/ffmnt
ext=$work/ext
mkdir -p "$ffroot" "$ffmnt" "$ext"
ffpid=""
loop=""
server=""

cleanup() {
    set +e
    [ -n "$server" ] && kill -9 "$server" 2>/dev/null && wait "$server" 2>/dev/null
    [ -n "$ffpid" ] && kill -USR2 "$ffpid" 2>/dev/null
    mountpoint -q "$ext" && umount "$ext"
    [ -n "$loop" ] && losetup -d "$loop"
    mountpoint -q "$ffmnt" && { fusermount3 -u "$ffmnt" || umount -l "$ffmnt"; }
    [ -n "$ffpid" ] && wait "$ffpid" 2>/dev/null
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
    local dir=$1 port=$2
    "$kivi" -d "$dir" serve --resp "127.0.0.1:$port" --log-level warn >>"$work/serve.log" 2>&1 &
    server=$!
    for _ in $(seq 600); do
        if python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),timeout=1)" 2>/dev/null; then
            return 0
        fi
        kill -0 "$server" 2>/dev/null || fail "kivi serve exited at start: $(tail -5 "$work/serve.log")"
        sleep 0.1
    done
    fail "kivi serve did not start listening"
}

stop_server() {
    local sig=${1:-TERM} rc=0
    kill -"$sig" "$server"
    wait "$server" || rc=$?
    server=""
    echo "server stopped (SIG$sig): exit $rc"
}

server_log() {
    grep -i "error\|warn\|panic" "$work/serve.log" | sed -E 's/^[0-9T:.-]+Z //; s/[0-9]{10}\.seg/NNNNNNNNNN.seg/g' |
        sort | uniq -c | sort -rn | head -6 | sed 's/^/  server log: /' || true
    : >"$work/serve.log"
}

mount_faultfs() {
    "$faultfs" "$ffroot" "$ffmnt" -f -o allow_other >"$work/faultfs.log" 2>&1 &
    ffpid=$!
    for _ in $(seq 100); do
        mountpoint -q "$ffmnt" && return 0
        sleep 0.05
    done
    fail "faultfs did not mount"
}

echo "io_errors: kivi $kivi_src ($(cd "$repo" && git rev-parse --short HEAD)), $rounds rounds"
t0=$(date +%s)
mount_faultfs
for round in $(seq "$rounds"); do
    echo "== round $round: fuse (kivi's own calls get EIO)"
    rm -rf "$ffroot/store"
    port=$(free_port)
    start_server "$ffmnt/store" "$port"
    python3 "$here/full_disk_load.py" fill "$port" "$work/state.json" "$ffmnt/store" \
        --fault-cmd "kill -USR1 $ffpid" --free-cmd "kill -USR2 $ffpid" || fail "round $round fuse: load"
    kill -0 "$server" 2>/dev/null || fail "the server died"
    stop_server TERM
    server_log
    out=$("$kivi" -d "$ffmnt/store" check 2>&1) || fail "kivi check: $out"
    echo "kivi check: $out"
    start_server "$ffmnt/store" "$port"
    python3 "$here/full_disk_load.py" verify "$port" "$work/state.json" || fail "round $round fuse: verify after restart"
    stop_server TERM

    echo "== round $round: loop (ext4 on a loop device whose backing file gets EIO)"
    rm -f "$ffroot/disk.img"
    truncate -s 256M "$ffroot/disk.img"
    mkfs.ext4 -q -F "$ffroot/disk.img"
    loop=$(losetup -f --show "$ffmnt/disk.img")
    mount "$loop" "$ext"
    start_server "$ext/store" "$port"
    python3 "$here/full_disk_load.py" fill "$port" "$work/state.json" "$ext/store" \
        --fault-cmd "kill -USR1 $ffpid" --free-cmd "kill -USR2 $ffpid" --resume no ||
        fail "round $round loop: load"
    dmesg 2>/dev/null | grep -i "ext4\|I/O error\|loop" | tail -4 | sed 's/^/  kernel: /' || true
    stop_server 9
    server_log
    umount "$ext" || umount -l "$ext"
    losetup -d "$loop"
    loop=""
    set +e
    fsck.ext4 -f -y "$ffroot/disk.img" >"$work/fsck.log" 2>&1
    rc=$?
    set -e
    echo "fsck.ext4 -f -y: exit $rc ($(grep -c . "$work/fsck.log") lines; $(grep -ci "fix\|clear" "$work/fsck.log" || true) fixes)"
    [ "$rc" -le 1 ] || { cat "$work/fsck.log"; fail "fsck.ext4 exit $rc"; }
    loop=$(losetup -f --show "$ffmnt/disk.img")
    mount "$loop" "$ext"
    out=$("$kivi" -d "$ext/store" check 2>&1) || fail "kivi check after the device errors: $out"
    echo "kivi check: $out"
    start_server "$ext/store" "$port"
    python3 "$here/full_disk_load.py" verify "$port" "$work/state.json" || fail "round $round loop: verify after remount"
    stop_server TERM
    umount "$ext"
    losetup -d "$loop"
    loop=""
done
echo "io_errors: $rounds rounds passed in $(($(date +%s) - t0)) s"
