#!/usr/bin/env bash
# LazyFS (a FUSE file system that keeps every write in its own cache until
# fsync, and drops what is unsynced on command) for the power-cut campaign
# (tests/faults/power_cut.py). Built from source into target/lazyfs/, never
# into the repository's tracked files.
#
#   tests/faults/lazyfs.sh install             build target/lazyfs/bin/lazyfs if missing
#   tests/faults/lazyfs.sh mount ROOT MNT FIFO  mount LazyFS at MNT over the directory ROOT;
#                                              fault commands go to FIFO (prints LazyFS's pid)
#   tests/faults/lazyfs.sh run ROOT MNT FIFO    the same in the foreground: this process becomes
#                                              LazyFS (for a driver that waits on it)
#   tests/faults/lazyfs.sh umount MNT          unmount (also a LazyFS that was killed)
#   tests/faults/lazyfs.sh clear FIFO          drop every unsynced write (lazyfs::clear-cache)
#
# The source: LAZYFS_SRC (a directory holding lazyfs/ and libs/), else the
# git mirror at /work/.mirror/dsrhaslab+lazyfs/repo. LazyFS fetches toml11
# and spdlog with CMake's FetchContent at build time; here they come from
# Debian's packages instead (libtoml11-dev 3.7.1 and libspdlog-dev 1.10.0,
# the versions LazyFS pins), so the build needs no network beyond apt.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
base=${LAZYFS_DIR:-$repo/target/lazyfs}
bin=$base/bin/lazyfs
mirror=/work/.mirror/dsrhaslab+lazyfs/repo

need_packages() {
    local missing=()
    for p in g++ cmake libfuse3-dev fuse3 libtoml11-dev libspdlog-dev; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "lazyfs.sh: installing ${missing[*]}" >&2
        apt-get install -y "${missing[@]}" >/dev/null 2>&1 ||
            { apt-get update >/dev/null && apt-get install -y "${missing[@]}" >/dev/null; }
    fi
}

install() {
    [ -x "$bin" ] && return 0
    need_packages
    local src=$base/src
    rm -rf "$src"
    mkdir -p "$src" "$base/bin"
    if [ -n "${LAZYFS_SRC:-}" ]; then
        cp -r "$LAZYFS_SRC"/. "$src"/
    elif [ -d "$mirror" ]; then
        git -C "$mirror" archive HEAD lazyfs libs 2>/dev/null | tar -x -C "$src"
        git -C "$mirror" rev-parse HEAD >"$base/REVISION"
    else
        echo "lazyfs.sh: no LazyFS source: set LAZYFS_SRC to a checkout of github.com/dsrhaslab/lazyfs" >&2
        exit 2
    fi
    # libpcache: the packaged toml11 and spdlog instead of FetchContent.
    local pc=$src/libs/libpcache/CMakeLists.txt
    python3 - "$pc" <<'EOF'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = re.sub(r"include\(FetchContent\).*?FetchContent_MakeAvailable\(spdlog\)\s*"
           r"set_target_properties\(spdlog PROPERTIES POSITION_INDEPENDENT_CODE ON\)",
           "find_package(toml11 REQUIRED)\nfind_package(spdlog REQUIRED)", s, flags=re.S)
s = s.replace("target_link_libraries(pcache toml11::toml11 spdlog)",
              "target_link_libraries(pcache toml11::toml11 spdlog::spdlog)")
assert "FetchContent" not in s and "spdlog::spdlog" in s, "libpcache CMakeLists.txt changed shape"
open(p, "w").write(s)
EOF
    local lc=$src/lazyfs/CMakeLists.txt
    sed -i 's|^find_package(Threads REQUIRED)|find_package(Threads REQUIRED)\nfind_package(spdlog REQUIRED)|; s|target_link_libraries(${CMAKE_PROJECT_NAME} fuse3 Threads::Threads libpcache.so)|target_link_libraries(${CMAKE_PROJECT_NAME} fuse3 Threads::Threads libpcache.so spdlog::spdlog)|' "$lc"
    grep -q 'spdlog::spdlog' "$lc" || { echo "lazyfs.sh: lazyfs CMakeLists.txt changed shape" >&2; exit 2; }
    (cd "$src/libs/libpcache" && mkdir -p build && cd build && cmake .. >/dev/null && cmake --build . -j2 >/dev/null)
    (cd "$src/lazyfs" && mkdir -p build && cd build && cmake -DLAZYFS_BUILD_TESTS=OFF .. >/dev/null && cmake --build . -j2 >/dev/null)
    cp "$src/libs/libpcache/build"/libpcache.so* "$base/bin/"
    cp "$src/lazyfs/build/lazyfs" "$base/bin/lazyfs.real"
    cat >"$bin" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$base/bin\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$base/bin/lazyfs.real" "\$@"
EOF
    chmod +x "$bin"
    echo "lazyfs.sh: built $bin" >&2
}

write_config() {
    local root=$1 mnt=$2 fifo=$3
    mkdir -p "$root" "$mnt"
    [ -p "$fifo" ] || { rm -f "$fifo"; mkfifo "$fifo"; }
    local conf=$fifo.toml log=$fifo.log
    # No eviction: nothing unsynced reaches ROOT until fsync. A large cache
    # (it holds synced pages too, until unmount).
    cat >"$conf" <<EOF
[faults]
fifo_path="$fifo"
[cache]
apply_eviction=false
[cache.simple]
custom_size="${LAZYFS_CACHE:-4gb}"
blocks_per_page=1
[filesystem]
log_all_operations=false
logfile="$log"
EOF
}

mount_lazyfs() {
    local root=$1 mnt=$2 fifo=$3 conf=$3.toml log=$3.log
    install
    write_config "$root" "$mnt" "$fifo"
    "$bin" "$mnt" --config-path "$conf" -o allow_other -o modules=subdir -o subdir="$root" -f \
        >>"$log.stdout" 2>&1 </dev/null &
    local pid=$!
    for _ in $(seq 200); do
        if grep -qs " $mnt fuse" /proc/mounts; then
            echo "$pid"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "lazyfs.sh: LazyFS did not mount at $mnt (see $log.stdout)" >&2
    kill "$pid" 2>/dev/null || true
    exit 2
}

umount_lazyfs() {
    local mnt=$1
    if grep -qs " $mnt fuse" /proc/mounts; then
        fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
    fi
}

case "${1:-}" in
install) install ;;
mount) mount_lazyfs "$2" "$3" "$4" ;;
run)
    install
    write_config "$2" "$3" "$4"
    LD_LIBRARY_PATH="$base/bin" exec "$base/bin/lazyfs.real" "$3" --config-path "$4.toml" \
        -o allow_other -o modules=subdir -o subdir="$2" -f
    ;;
umount) umount_lazyfs "$2" ;;
clear) printf 'lazyfs::clear-cache\n' >"$2" ;;
*)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
