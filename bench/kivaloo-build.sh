#!/bin/sh
# Builds kivaloo from its source tree, for `kivi bench --server --kivaloo DIR`,
# which runs kivaloo's lbs and kvlds next to `kivi serve` in the same run.
# Nothing of kivaloo is part of this repository: get its source yourself
# (it is BSD-licensed, by Colin Percival) and pass its directory.
#
#   bench/kivaloo-build.sh /path/to/kivaloo
#
# Runs `make -C SRC all` (kivaloo needs a C compiler, make and OpenSSL's
# headers: Debian's build-essential and libssl-dev), then prints the
# directory to pass as --kivaloo. Exits non-zero, saying why, when it cannot.
set -eu

fail() {
    echo "bench/kivaloo-build.sh: $*" >&2
    exit 1
}

[ $# -eq 1 ] || fail "usage: bench/kivaloo-build.sh KIVALOO_SOURCE_DIR"
src=$1
[ -d "$src" ] || fail "$src: no such directory"
src=$(CDPATH='' cd -- "$src" && pwd -P)
[ -f "$src/Makefile" ] && [ -d "$src/lbs" ] && [ -d "$src/kvlds" ] ||
    fail "$src does not look like kivaloo's source (no Makefile, lbs/ and kvlds/)"

command -v make >/dev/null 2>&1 || fail "make not found (Debian: apt-get install build-essential)"
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || fail "C compiler $cc not found (Debian: apt-get install build-essential)"
# kivaloo includes <openssl/...> headers; find them the way its build will.
printf '#include <openssl/sha.h>\n' | "$cc" ${CFLAGS:-} -E - >/dev/null 2>&1 ||
    fail "OpenSSL's headers not found (<openssl/sha.h>); install them (Debian: apt-get install libssl-dev)"

make -C "$src" all >&2 || fail "make -C $src all failed"
for tool in lbs/lbs kvlds/kvlds; do
    [ -x "$src/$tool" ] || fail "the build made no $src/$tool"
done
echo "$src"
