#!/usr/bin/env bash
# versitygw, an S3-compatible server, for kivi's object-store tests.
#   tests/s3/versitygw.sh install     builds it into target/ with `go install`
#                                     unless it is there (about 5 minutes on
#                                     2 cores, once)
#   tests/s3/versitygw.sh start DIR   installs it if needed, then serves a
#                                     fresh posix backend under DIR on a free
#                                     loopback port, creates the bucket `kivi`,
#                                     checks that its conditional puts are
#                                     atomic, and writes DIR/env (the AWS_*
#                                     variables that point kivi at it) and
#                                     DIR/pid.
#
# Why versitygw: its posix backend creates an object with If-None-Match: *
# atomically; several other S3 emulators check, then write, and let two
# conditional writers both win, which would hide exactly the races kivi's
# fencing exists for. The check below fails on such a server.
set -euo pipefail
usage="usage: versitygw.sh install | versitygw.sh start DIR"
version=v1.8.0
# Built into the repository's target/ (like the tests' Python venv), one
# folder per version: `go install` leaves no version in the binary.
gobin="$(cd "$(dirname "$0")/../.." && pwd)/target/versitygw-$version"
bin="$gobin/versitygw"
if ! [ -x "$bin" ]; then
    echo "installing versitygw $version (go install)..." >&2
    command -v go >/dev/null ||
        { echo "versitygw.sh: building versitygw needs Go (https://go.dev/dl/)" >&2; exit 1; }
    GOBIN="$gobin" go install "github.com/versity/versitygw/cmd/versitygw@$version"
fi
case "${1:-}" in
install) exit 0 ;;
start) dir=${2:?$usage} ;;
*) echo "$usage" >&2; exit 2 ;;
esac
mkdir -p "$dir/data"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ROOT_ACCESS_KEY=kivi ROOT_SECRET_KEY=kivisecret \
    nohup "$bin" -p "127.0.0.1:$port" posix "$dir/data" >"$dir/versitygw.log" 2>&1 &
echo $! >"$dir/pid"
endpoint="http://127.0.0.1:$port"
s3() { # METHOD PATH [curl args...]: one signed request; prints the HTTP status
    local method=$1 path=$2
    shift 2
    curl -s -o /dev/null -w '%{http_code}\n' --aws-sigv4 aws:amz:us-east-1:s3 \
        --user kivi:kivisecret -H x-amz-content-sha256:UNSIGNED-PAYLOAD \
        -X "$method" "$@" "$endpoint$path"
}
for _ in $(seq 100); do
    [ "$(s3 PUT /kivi)" = 200 ] && break
    sleep 0.1
done
[ "$(s3 HEAD /kivi)" = 200 ] || { echo "versitygw did not start: $dir/versitygw.log" >&2; exit 1; }
# The server itself first: 32 concurrent create-if-absent puts of one name.
export -f s3
export endpoint
codes=$(seq 32 | xargs -P 32 -I{} bash -c 's3 PUT /kivi/conditional-put-check --data-binary writer-{} -H "If-None-Match: *"' | sort | uniq -c)
wins=$(echo "$codes" | awk '$2 == 200 {print $1}')
if [ "${wins:-0}" != 1 ]; then
    echo "the S3 server is not fit for kivi's tests: 32 concurrent create-if-absent puts of one name gave ${wins:-0} successes, not exactly one (status counts: $(echo $codes))" >&2
    exit 1
fi
s3 DELETE /kivi/conditional-put-check >/dev/null
cat >"$dir/env" <<ENV
export AWS_ENDPOINT=$endpoint
export AWS_ALLOW_HTTP=true
export AWS_ACCESS_KEY_ID=kivi
export AWS_SECRET_ACCESS_KEY=kivisecret
export AWS_REGION=us-east-1
export KIVI_S3_BUCKET=kivi
ENV
echo "versitygw on $endpoint (bucket kivi); environment in $dir/env" >&2
