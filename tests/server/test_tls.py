"""RESP over TLS (--tls): redis-cli and redis-py as users reach it, client
certificates (--tls-ca-cert), reloading the certificates on SIGHUP,
protected mode, and the errors for bad files. The certificates are made
with the openssl CLI for each run (server/testdata/tls/make.sh)."""

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from test_resp import KIVI, read_exactly

# Refusals are asserted: no retries (redis-py retries with back-off).
NO_RETRY = Retry(NoBackoff(), 0)
MAKE_CERTS = os.path.join(os.path.dirname(__file__), "../../server/testdata/tls/make.sh")


@pytest.fixture(scope="module")
def certs():
    """A folder with ca.pem, server.{pem,key} and server2.{pem,key} (for
    127.0.0.1 and localhost, signed by ca), client.{pem,key} (signed by
    ca), stranger.{pem,key} (signed by another CA) and unrelated.key."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["bash", MAKE_CERTS, tmp], check=True, capture_output=True)
        yield lambda name: os.path.join(tmp, name)


class TlsServer:
    """`kivi serve` with a TLS listener on 127.0.0.1 (and the plain one,
    unless the flags say otherwise); its log goes to a file."""

    def __init__(self, store, certs, flags=(), tls="127.0.0.1:0"):
        self.log = tempfile.NamedTemporaryFile(mode="w+", suffix=".log")
        args = [KIVI, "-d", store, "serve", "--resp", "127.0.0.1:0", "--tls", tls]
        if "--tls-cert" not in flags:
            args += ["--tls-cert", certs("server.pem"), "--tls-key", certs("server.key")]
        self.proc = subprocess.Popen(args + list(flags), stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        self.bound = {}
        while "tls" not in self.bound:
            line = self.proc.stdout.readline()
            assert line.startswith("kivi serve: "), (line, self.stderr())
            words = line[len("kivi serve: "):].split(" ")
            self.bound[words[0]] = words[3]
        self.port = int(self.bound["tls"].rsplit(":", 1)[1])
        self.ca = certs("ca.pem")

    def stderr(self):
        with open(self.log.name) as f:
            return f.read()

    def redis(self, **kw):
        return redis.Redis(host="127.0.0.1", port=self.port, ssl=True,
                           ssl_ca_certs=self.ca, **kw)

    def tls_socket(self, cert=None, key=None):
        ctx = ssl.create_default_context(cafile=self.ca)
        if cert:
            ctx.load_cert_chain(cert, key)
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return ctx.wrap_socket(sock, server_hostname="localhost")

    def stop(self):
        self.proc.terminate()
        code = self.proc.wait(timeout=60)
        self.log.close()
        return code


@contextlib.contextmanager
def serving(certs, *flags, **kw):
    with tempfile.TemporaryDirectory() as tmp:
        s = TlsServer(os.path.join(tmp, "store"), certs, flags, **kw)
        try:
            yield s
        finally:
            assert s.stop() == 0


def command(sock, *args, reply):
    """Sends one command; its reply must be `reply`."""
    sock.sendall(b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
    assert read_exactly(sock, len(reply)) == reply


def test_redis_cli_over_tls_and_the_plain_listener_beside_it(certs):
    with serving(certs) as s:
        tls = ["redis-cli", "--tls", "--cacert", certs("ca.pem"), "-h", "127.0.0.1",
               "-p", str(s.port)]

        def run(*cmd):
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            return out.stdout.strip()

        assert run(*tls, "set", "greeting", "hello") == "OK"
        assert run(*tls, "get", "greeting") == "hello"
        # The same store through the plain listener.
        host, port = s.bound["resp"].rsplit(":", 1)
        plain = redis.Redis(host=host, port=int(port))
        assert plain.get("greeting") == b"hello"
        # Without --tls, redis-cli gets no answer from the TLS port.
        out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(s.port), "ping"],
                             capture_output=True, text=True, timeout=60)
        assert "PONG" not in out.stdout
        config = plain.config_get("tls-*")
        assert config == {
            "tls-port": str(s.port),
            "tls-cert-file": certs("server.pem"),
            "tls-key-file": certs("server.key"),
            "tls-ca-cert-file": "",
            "tls-auth-clients": "no",
        }


def test_redis_py_over_tls_with_a_password(certs):
    with serving(certs, "--requirepass", "s3cret") as s:
        r = s.redis(password="s3cret")
        assert r.set("k", "v") and r.get("k") == b"v"
        assert r.ping()
        with pytest.raises(redis.exceptions.AuthenticationError):
            s.redis(retry=NO_RETRY).get("k")
        with pytest.raises(redis.exceptions.AuthenticationError):
            s.redis(password="wrong", retry=NO_RETRY).get("k")
        # The server's certificate is checked by the client: one signed by
        # another CA is refused.
        with pytest.raises(redis.exceptions.ConnectionError):
            redis.Redis(host="127.0.0.1", port=s.port, ssl=True,
                        ssl_ca_certs=certs("other-ca.pem"), password="s3cret",
                        retry=NO_RETRY).ping()


def test_a_plain_text_client_on_the_tls_port_is_closed_and_others_are_served(certs):
    with serving(certs) as s:
        r = s.redis()
        assert r.set("k", "v")
        # A client that connects and says nothing holds its own connection
        # only: the others are accepted and served meanwhile.
        silent = socket.create_connection(("127.0.0.1", s.port))
        connected = time.time()
        plain = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        plain.sendall(b"*1\r\n$4\r\nPING\r\n")
        got = b""
        while True:
            chunk = plain.recv(4096)
            if not chunk:
                break
            got += chunk
        assert b"PONG" not in got
        plain.close()
        # (In well under the 10 s a handshake may take.)
        fresh = s.redis(socket_connect_timeout=3, socket_timeout=3, retry=NO_RETRY)
        assert fresh.get("k") == b"v"
        assert r.get("k") == b"v"
        # The silent one is let go when its handshake has taken 10 s.
        silent.settimeout(30)
        assert silent.recv(1) == b""
        assert time.time() - connected > 9
        silent.close()
        deadline = time.time() + 10
        while "TLS handshake not done in time" not in s.stderr() and time.time() < deadline:
            time.sleep(0.05)
        log = s.stderr()
        failed = [line for line in log.splitlines() if "TLS handshake failed" in line]
        assert len(failed) == 1 and "WARN" in failed[0] and "peer=127.0.0.1:" in failed[0], log
        slow = [line for line in log.splitlines() if "TLS handshake not done in time" in line]
        assert len(slow) == 1 and "timeout=10s" in slow[0], log


def test_client_certificates_signed_by_the_ca_are_required(certs):
    with serving(certs, "--tls-ca-cert", certs("ca.pem")) as s:
        # Without a certificate, or with one another CA signed: refused.
        for cert, key in [(None, None), (certs("stranger.pem"), certs("stranger.key"))]:
            with pytest.raises(redis.exceptions.ConnectionError):
                s.redis(ssl_certfile=cert, ssl_keyfile=key, retry=NO_RETRY).ping()
        r = s.redis(ssl_certfile=certs("client.pem"), ssl_keyfile=certs("client.key"))
        assert r.set("k", "v") and r.get("k") == b"v"
        config = r.config_get("tls-*")
        assert config["tls-auth-clients"] == "yes"
        assert config["tls-ca-cert-file"] == certs("ca.pem")


def der(pem_file):
    with open(pem_file) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def wait_for_log(s, text, count):
    deadline = time.time() + 10
    while s.stderr().count(text) < count:
        assert time.time() < deadline, s.stderr()
        time.sleep(0.05)


def test_sighup_reloads_the_certificates_for_new_connections(certs):
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        shutil.copy(certs("server.pem"), cert)
        shutil.copy(certs("server.key"), key)
        with serving(certs, "--tls-cert", cert, "--tls-key", key) as s:
            old = s.tls_socket()
            assert old.getpeercert(binary_form=True) == der(certs("server.pem"))
            command(old, b"SET", b"k", b"v", reply=b"+OK\r\n")
            shutil.copy(certs("server2.pem"), cert)
            shutil.copy(certs("server2.key"), key)
            # Not before the signal.
            assert s.tls_socket().getpeercert(binary_form=True) == der(certs("server.pem"))
            s.proc.send_signal(signal.SIGHUP)
            wait_for_log(s, "reloaded the TLS certificates", 1)
            new = s.tls_socket()
            assert new.getpeercert(binary_form=True) == der(certs("server2.pem"))
            command(new, b"GET", b"k", reply=b"$1\r\nv\r\n")
            # The connection from before goes on.
            command(old, b"GET", b"k", reply=b"$1\r\nv\r\n")
            # A reload that fails keeps what was loaded, and says why.
            shutil.copy(certs("unrelated.key"), key)
            s.proc.send_signal(signal.SIGHUP)
            wait_for_log(s, "TLS certificates not reloaded", 1)
            assert "does not match the certificate" in s.stderr()
            assert s.tls_socket().getpeercert(binary_form=True) == der(certs("server2.pem"))
            command(old, b"PING", reply=b"+PONG\r\n")


def start(store, *flags):
    return subprocess.run([KIVI, "-d", store, "serve", *flags],
                          capture_output=True, text=True, timeout=60)


def test_protected_mode_needs_a_password_or_client_certificates(certs):
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        tls_files = ["--tls-cert", certs("server.pem"), "--tls-key", certs("server.key")]
        out = start(store, "--resp", "127.0.0.1:0", "--tls", "0.0.0.0:0", *tls_files)
        assert out.returncode != 0
        assert "refusing to listen for TLS on 0.0.0.0:0" in out.stderr, out.stderr
        assert "--tls-ca-cert" in out.stderr
        assert not os.path.exists(store)
    # Mutual TLS is authentication enough.
    with serving(certs, "--tls-ca-cert", certs("ca.pem"), tls="0.0.0.0:0") as s:
        r = s.redis(ssl_certfile=certs("client.pem"), ssl_keyfile=certs("client.key"))
        assert r.ping()
    # So is a password.
    with serving(certs, "--requirepass", "s3cret", tls="0.0.0.0:0") as s:
        assert s.redis(password="s3cret").ping()


def test_bad_tls_files_are_refused_at_start_naming_the_file(certs):
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        garbage = os.path.join(tmp, "garbage.key")
        with open(garbage, "w") as f:
            f.write("-----BEGIN PRIVATE KEY-----\nnot base64!\n-----END PRIVATE KEY-----\n")
        cases = [
            (["--tls-cert", certs("server.pem"), "--tls-key", certs("unrelated.key")],
             f"the private key in {certs('unrelated.key')} does not match the certificate "
             f"in {certs('server.pem')}"),
            (["--tls-cert", certs("server.pem"), "--tls-key", garbage],
             f"{garbage}: not a valid PEM private key"),
            (["--tls-cert", certs("server.pem"), "--tls-key", os.path.join(tmp, "absent")],
             f"cannot read {os.path.join(tmp, 'absent')}"),
            (["--tls-cert", certs("server.key"), "--tls-key", certs("server.key")],
             f"{certs('server.key')}: no PEM certificate in it"),
            (["--tls-cert", certs("server.pem")], "--tls needs --tls-cert FILE and --tls-key"),
            (["--tls-cert", certs("server.pem"), "--tls-key", certs("server.key"),
              "--tls-ca-cert", certs("server.key")],
             f"{certs('server.key')}: no PEM CA certificate in it"),
        ]
        for flags, message in cases:
            out = start(store, "--resp", "127.0.0.1:0", "--tls", "127.0.0.1:0", *flags)
            assert out.returncode != 0, flags
            assert message in out.stderr, (flags, out.stderr)
            # Refused before the store was made.
            assert not os.path.exists(store)
