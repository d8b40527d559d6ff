#!/usr/bin/env bash
# Makes the certificates server/src/tls.rs's unit tests load: a CA, two
# server certificates it signed (for 127.0.0.1 and localhost; two, to see a
# reload change which one is served), a client certificate it signed, a
# client certificate from another CA, and a key that matches no certificate.
# Valid for 100 years; rerun to remake them. With a folder, makes them there
# (tests/server/test_tls.py does).
set -euo pipefail
cd "${1:-$(dirname "$0")}"
days=36500
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # name
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -subj "/CN=kivi test $1" -days $days -out "$1.pem"
}
signed() { # name ca extensions
    key "$1.key"
    openssl req -new -key "$1.key" -subj "/CN=kivi test $1" -out "$1.csr"
    openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
        -days $days -extfile <(printf '%s\n' "$3") -out "$1.pem" 2>/dev/null
    rm "$1.csr"
}
ca ca
ca other-ca
server_ext='subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth'
client_ext='extendedKeyUsage=clientAuth'
signed server ca "$server_ext"
signed server2 ca "$server_ext"
signed client ca "$client_ext"
signed stranger other-ca "$client_ext"
key unrelated.key
rm -f ./*.srl other-ca.key ca.key
