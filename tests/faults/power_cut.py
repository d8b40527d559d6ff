#!/usr/bin/env python3
"""Power cuts on a real file system: kivi on LazyFS, unsynced writes dropped.

LazyFS (tests/faults/lazyfs.sh) is a FUSE file system that keeps every
write in its own cache and passes it to the directory beneath only on fsync
or fdatasync; on command it drops everything unsynced. That is what a power
cut does to the page cache, on real files, through the real system calls.

Each cycle:
  1. mounts a fresh LazyFS over the backing directory (its cache empty);
  2. starts a writer on the store there and lets it run to a random point;
  3. cuts the power, one of these ways chosen at random:
     - "cut": freezes the writer (SIGSTOP), drops LazyFS's unsynced data
       (lazyfs::clear-cache), then SIGKILLs the writer;
     - "op": arms LazyFS's own crash fault (lazyfs::crash::timing=before|after
       ::op=fsync|write|create|rename|unlink|truncate) so that LazyFS kills
       itself, its unsynced data with it, at the next such call on the store,
       then SIGKILLs the writer;
     - "torn-seq": LazyFS persists some of the next run of unsynced writes
       to one of the newest segments (the ones before them lost: writes
       reordered) and kills itself;
     - "torn-op": LazyFS persists some parts of the next write to one of
       them (a torn write) and kills itself;
     some cuts land while the writer is still opening (recovering) the store;
  4. mounts a fresh LazyFS again, runs `kivi check` (must exit 0: no repair
     step) and reads the store (`kivi scan`);
  5. checks every acknowledged write is there with its value, or a later
     one of the same writer, each writer's writes a prefix of what it sent
     (nothing partial, nothing reordered).
The next cycle's writer opens the same store, so recovery after a recovery
is part of it. Exits 1 on any loss, wrong value or failed check.

Writers:
  child  `kivi-test-child kill-writer` (engine/tests/support/child.rs):
         4 threads of batches of 1-5 puts/deletes, 64 KiB segments, a
         checkpoint per 64 KiB of commit log and an explicit one every 97
         batches of thread 0, 512-byte pages: checkpoints, segment rolls
         and the cleaner run all the time. Prints `ACK t n` per commit.
  serve  `kivi serve` with default settings, 4 RESP connections pipelining
         SETs (16 in flight each) of values up to 64 KiB, logging each +OK.

Control (--no-fsync, serve only): the same campaign with `kivi serve
--no-fsync`, which acknowledges writes before they are synced. It must lose
acknowledged writes (exit 1 if it loses none: the campaign would then show
nothing); it must still lose none but the latest of each connection and
never part of one. Every run also starts with a file control: a file
written without fsync must be gone after clear-cache, one fsynced must not.

  python3 tests/faults/power_cut.py --writer child --cycles 300
  python3 tests/faults/power_cut.py --writer serve --cycles 100
  python3 tests/faults/power_cut.py --writer serve --no-fsync --cycles 30
"""

import argparse
import errno
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LAZYFS_SH = os.path.join(HERE, "lazyfs.sh")
M64 = (1 << 64) - 1


# --------------------------------------------------------------------------
# The child writer's batches, as engine/tests/common computes them.
# --------------------------------------------------------------------------

def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def hash_key(key):
    h = 0xCBF29CE484222325
    for b in key:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def batch_value(batch, key):
    h = mix(batch ^ rotl(hash_key(key), 17))
    m = h % 16
    if m in (0, 1):
        n = 1025 + (h >> 8) % 4000
    elif m == 2:
        n = 0
    else:
        n = (h >> 8) % 200
    out = bytearray(batch.to_bytes(8, "little"))
    x = h
    for _ in range(n):
        x = mix(x)
        out.append(x & 0xFF)
    return bytes(out)


KEYS_PER_THREAD = 64


def batch_ops(run, t, n):
    bid = (run << 40) | (t << 32) | n
    x = mix(bid)
    count = 1 + x % 5
    ops = []
    for _ in range(count):
        x = mix(x)
        key = b"t%d/k%03d" % (t, x % KEYS_PER_THREAD)
        if (x >> 32) % 7 == 0:
            ops.append((key, None))
        else:
            ops.append((key, batch_value(bid, key)))
    return ops


# --------------------------------------------------------------------------
# The serve writer's writes.
# --------------------------------------------------------------------------

SERVE_KEYS = 200


def serve_write(run, c, seq):
    """Key and value of write `seq` of connection `c` in run `run`."""
    x = mix((run << 40) | (c << 32) | seq)
    key = b"c%d/k%03d" % (c, x % SERVE_KEYS)
    y = mix(x)
    if y % 4 == 0:
        n = 4096 + (y >> 8) % (60 << 10)
    else:
        n = (y >> 8) % 1500
    head = b"v:%d:%d:%d:" % (run, c, seq)
    fill = (mix(y).to_bytes(8, "little") * (n // 8 + 1))[:n]
    return key, head + fill


def serve_value_id(v):
    """(run, c, seq) a value written by serve_write names, or None."""
    try:
        tag, run, c, seq = v.split(b":", 4)[:4]
        if tag != b"v":
            return None
        return int(run), int(c), int(seq)
    except ValueError:
        return None


# --------------------------------------------------------------------------
# LazyFS.
# --------------------------------------------------------------------------

class LazyFS:
    def __init__(self, base, cache):
        self.cache = cache  # LazyFS's cache, allocated whole at each mount
        self.root = os.path.join(base, "root")
        self.mnt = os.path.join(base, "mnt")
        self.fifo = os.path.join(base, "faults.fifo")
        self.log = self.fifo + ".log"
        self.proc = None
        # LazyFS names files by their path beneath its root in fault
        # commands, which it reads 100 bytes at a time: a short link to the
        # root keeps a segment's path short enough.
        self.short_root = "/tmp/kl-%s" % os.path.basename(base.rstrip("/"))
        os.makedirs(self.root, exist_ok=True)
        if os.path.realpath(self.short_root) != os.path.realpath(self.root):
            if os.path.lexists(self.short_root):
                os.unlink(self.short_root)
            os.symlink(self.root, self.short_root)
        os.makedirs(self.mnt, exist_ok=True)
        if not os.path.exists(self.fifo):
            os.mkfifo(self.fifo)

    def mounted(self):
        with open("/proc/mounts") as f:
            return any(line.split()[1] == self.mnt for line in f)

    def mount(self):
        self.umount()
        # LazyFS starts its log afresh at each mount.
        try:
            os.unlink(self.log)
        except FileNotFoundError:
            pass
        out = open(self.log + ".stdout", "ab")
        env = dict(os.environ, LAZYFS_CACHE=self.cache)
        self.proc = subprocess.Popen(
            [LAZYFS_SH, "run", self.short_root, self.mnt, self.fifo],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        deadline = time.time() + 20
        while not self.mounted():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("LazyFS did not mount (see %s.stdout)" % self.log)
            time.sleep(0.02)
        # Its fault thread opens the FIFO after the mount; a command sent
        # before that would block, so wait for its word.
        while "waiting for fault commands" not in self.log_tail():
            if time.time() > deadline:
                raise RuntimeError("LazyFS's fault thread did not start")
            time.sleep(0.02)

    def log_tail(self):
        """What LazyFS has logged since this mount."""
        try:
            with open(self.log, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def command(self, cmd):
        """Sends a fault command; False if LazyFS is gone (nobody reads its FIFO)."""
        try:
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return False
            raise
        try:
            os.write(fd, (cmd + "\n").encode())
        finally:
            os.close(fd)
        return True

    def last_words(self):
        """The last line LazyFS printed (why it died, when it died by itself)."""
        try:
            with open(self.log + ".stdout", "rb") as f:
                f.seek(max(0, os.path.getsize(self.log + ".stdout") - 4000))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
            return lines[-1] if lines else ""
        except OSError:
            return ""

    def clear_cache(self):
        before = self.log_tail().count("cache is cleared")
        self.command("lazyfs::clear-cache")
        deadline = time.time() + 20
        while self.log_tail().count("cache is cleared") == before:
            if time.time() > deadline:
                raise RuntimeError("LazyFS did not report clearing its cache")
            time.sleep(0.005)

    def cache_usage(self):
        """LazyFS's cache use in percent of its pages (its own report)."""
        before = self.log_tail().count("cache usage")
        self.command("lazyfs::display-cache-usage")
        deadline = time.time() + 20
        while True:
            tail = self.log_tail()
            if tail.count("cache usage") > before:
                line = tail[tail.rindex("cache usage"):].split("\n")[0]
                return float(line.split(" is ")[1].rstrip("%"))
            if time.time() > deadline:
                raise RuntimeError("LazyFS did not report its cache usage")
            time.sleep(0.005)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def umount(self):
        if self.mounted():
            if subprocess.call(["fusermount3", "-u", self.mnt],
                               stderr=subprocess.DEVNULL) != 0:
                subprocess.call(["umount", "-l", self.mnt])
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def file_control(fs):
    """A file written without fsync is gone after clear-cache; one fsynced is not."""
    fs.mount()
    a = os.path.join(fs.mnt, "control-synced")
    b = os.path.join(fs.mnt, "control-unsynced")
    with open(a, "wb") as f:
        f.write(b"s" * 100000)
        f.flush()
        os.fsync(f.fileno())
        f.write(b"u" * 100000)
    with open(b, "wb") as f:
        f.write(b"u" * 100000)
    fs.clear_cache()
    fs.umount()
    fs.mount()
    sa, sb = os.path.getsize(a), os.path.getsize(b)
    da = open(a, "rb").read()
    os.unlink(a)
    os.unlink(b)
    fs.umount()
    ok = sa == 100000 and da == b"s" * 100000 and sb == 0
    print("file control: fsynced file %d bytes (100000 written, all synced), "
          "unsynced file %d bytes (100000 written): %s"
          % (sa, sb, "the layer drops unsynced writes" if ok else "FAILED"), flush=True)
    return ok


# --------------------------------------------------------------------------
# Writers.
# --------------------------------------------------------------------------

class ChildWriter:
    THREADS = 4

    def __init__(self, exe, store, run):
        self.run = run
        self.acks = [-1] * self.THREADS
        self.ready = threading.Event()
        self.errors = []
        self.err_line = None
        self.proc = subprocess.Popen(
            [exe, "kill-writer", store, str(run), str(self.THREADS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.err_reader = threading.Thread(target=self._read_err, daemon=True)
        self.err_reader.start()

    def _read(self):
        for line in self.proc.stdout:
            if not line.endswith(b"\n"):
                break  # cut mid-line by the kill: not a whole acknowledgment
            parts = line.split()
            if parts[:1] == [b"READY"]:
                self.ready.set()
            elif parts[:1] == [b"ERR"]:
                self.err_line = line.decode("utf-8", "replace").strip()
            elif parts[:1] == [b"ACK"]:
                t, n = int(parts[1]), int(parts[2])
                if n != self.acks[t] + 1:
                    self.errors.append("thread %d acknowledged %d after %d" % (t, n, self.acks[t]))
                self.acks[t] = n

    def _read_err(self):
        self.stderr = self.proc.stderr.read()

    def wait_ready(self, timeout):
        return self.ready.wait(timeout)

    def finish(self):
        self.reader.join()
        self.err_reader.join()
        self.proc.wait()

    def acked_ops(self):
        return sum(len(batch_ops(self.run, t, n))
                   for t in range(self.THREADS) for n in range(self.acks[t] + 1))


class ServeWriter:
    CONNS = 4
    WINDOW = 16

    def __init__(self, exe, store, run, port, no_fsync, log):
        self.run = run
        self.port = port
        self.acked = [-1] * self.CONNS   # the last seq answered +OK, per connection
        self.sent = [-1] * self.CONNS    # the last seq sent
        self.refused = [0] * self.CONNS  # answered with an error
        self.ready = threading.Event()
        self.errors = []
        self.first_error = None
        args = [exe, "-d", store, "serve", "--resp", "127.0.0.1:%d" % port,
                "--log-level", "warn"]
        if no_fsync:
            args.insert(3, "--no-fsync")
        self.errlog = open(log, "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.errlog,
                                     stdin=subprocess.DEVNULL)
        self.threads = [threading.Thread(target=self._conn, args=(c,), daemon=True)
                        for c in range(self.CONNS)]
        self.starter = threading.Thread(target=self._start, daemon=True)
        self.starter.start()

    def _start(self):
        deadline = time.time() + 60
        while self.proc.poll() is None and time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        else:
            return
        for t in self.threads:
            t.start()
        self.ready.set()

    def _conn(self, c):
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            f = s.makefile("rb")
            seq = 0
            inflight = []
            while True:
                out = []
                while len(inflight) < self.WINDOW:
                    key, val = serve_write(self.run, c, seq)
                    out.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
                               % (len(key), key, len(val), val))
                    inflight.append(seq)
                    self.sent[c] = seq
                    seq += 1
                s.sendall(b"".join(out))
                line = f.readline()
                if not line.endswith(b"\r\n"):
                    return
                done = inflight.pop(0)
                if line == b"+OK\r\n":
                    if done != self.acked[c] + 1 and self.refused[c] == 0:
                        self.errors.append("connection %d: +OK for %d after %d" % (c, done, self.acked[c]))
                    if self.refused[c] == 0:
                        self.acked[c] = done
                    else:
                        # An error earlier, then an OK: the write is acknowledged but
                        # does not extend a prefix; keep it apart.
                        self.errors.append("connection %d: +OK for %d after an error" % (c, done))
                else:
                    self.refused[c] += 1
                    if self.first_error is None:
                        self.first_error = line.strip().decode("utf-8", "replace")
                    return  # stop writing on this connection at its first error
        except OSError:
            return

    def wait_ready(self, timeout):
        return self.ready.wait(timeout)

    def finish(self):
        self.proc.wait()
        for t in self.threads:
            if t.is_alive() or t.ident is not None:
                t.join(timeout=30)
        self.errlog.close()

    def acked_ops(self):
        return sum(a + 1 for a in self.acked)


# --------------------------------------------------------------------------
# Reading and checking the store.
# --------------------------------------------------------------------------

def check_store(kivi, store):
    p = subprocess.run([kivi, "-d", store, "check"], capture_output=True, timeout=600)
    return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace").strip()


def scan_store(kivi, store):
    p = subprocess.run([kivi, "--hex", "-d", store, "scan"], capture_output=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("kivi scan failed: %s" % p.stderr.decode("utf-8", "replace"))
    out = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition(b"\t")
        out[bytes.fromhex(k.decode())] = bytes.fromhex(v.decode())
    return out


def verify_child(w, base, got):
    """Per thread: the store must hold the state after its acknowledged
    batches, or after one more (the one in flight), exactly."""
    lost = wrong = 0
    landed = 0
    notes = []
    for t in range(w.THREADS):
        prefix = b"t%d/" % t
        state = {k: v for k, v in base.items() if k.startswith(prefix)}
        actual = {k: v for k, v in got.items() if k.startswith(prefix)}
        for n in range(w.acks[t] + 1):
            for k, v in batch_ops(w.run, t, n):
                if v is None:
                    state.pop(k, None)
                else:
                    state[k] = v
        if actual == state:
            continue
        more = dict(state)
        for k, v in batch_ops(w.run, t, w.acks[t] + 1):
            if v is None:
                more.pop(k, None)
            else:
                more[k] = v
        if actual == more:
            landed += 1
            continue
        # Neither: name each key that differs from the acknowledged state.
        for k in sorted(set(state) | set(actual)):
            want, have = state.get(k), actual.get(k)
            if want == have or (have == more.get(k) and have is not None):
                continue
            bid = int.from_bytes(have[:8], "little") if have and len(have) >= 8 else None
            older = (bid is not None and have == batch_value(bid, k)) or have is None
            if older and have != more.get(k):
                lost += 1
                what = "lost"
            else:
                wrong += 1
                what = "wrong"
            notes.append("%s: key %r: want %s, have %s" % (
                what, k, describe(want), describe(have)))
    return lost, wrong, landed, notes


def describe(v):
    if v is None:
        return "absent"
    if len(v) >= 8:
        b = int.from_bytes(v[:8], "little")
        return "batch run=%d t=%d n=%d (%d bytes)" % (b >> 40, (b >> 32) & 0xFF, b & 0xFFFFFFFF, len(v))
    return "%d bytes %r" % (len(v), v[:20])


def verify_serve(w, base, got, allow_loss):
    """Per connection: the store holds, for some E >= the last write
    acknowledged (E below it only with --no-fsync), exactly the connection's
    writes up to E: each key's last write at or before E, every value whole."""
    lost = wrong = 0
    notes = []
    lost_conns = 0
    for c in range(w.CONNS):
        prefix = b"c%d/" % c
        actual = {k: v for k, v in got.items() if k.startswith(prefix)}
        # E: the newest write of this run the store shows for c.
        e = -1
        for k, v in actual.items():
            vid = serve_value_id(v)
            if vid and vid[0] == w.run and vid[1] == c:
                e = max(e, vid[2])
        if e > w.sent[c]:
            wrong += 1
            notes.append("wrong: connection %d shows write %d, but only %d were sent" % (c, e, w.sent[c] + 1))
            continue
        if e < w.acked[c]:
            n = w.acked[c] - e
            lost += n
            lost_conns += 1
            if not allow_loss:
                notes.append("lost: connection %d: the store ends at write %d, %d was acknowledged (%d lost)"
                             % (c, e, w.acked[c], n))
        state = {k: v for k, v in base.items() if k.startswith(prefix)}
        for seq in range(e + 1):
            k, v = serve_write(w.run, c, seq)
            state[k] = v
        for k in sorted(set(state) | set(actual)):
            if state.get(k) != actual.get(k):
                wrong += 1
                if len(notes) < 20:
                    notes.append("wrong: key %r: want %s, have %s (not a prefix of connection %d's writes)"
                                 % (k, sdescribe(state.get(k)), sdescribe(actual.get(k)), c))
    return lost, wrong, lost_conns, notes


def sdescribe(v):
    if v is None:
        return "absent"
    return "%r.. (%d bytes)" % (v[:24], len(v))


# --------------------------------------------------------------------------
# The campaign.
# --------------------------------------------------------------------------

OPS = [("before", "fsync"), ("after", "fsync"), ("before", "fsync"), ("after", "fsync"),
       ("before", "write"), ("after", "write"), ("before", "create"), ("after", "create"),
       ("before", "rename"), ("after", "rename"), ("before", "unlink"), ("after", "unlink"),
       ("before", "truncate"), ("after", "truncate")]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writer", choices=["child", "serve"], default="child")
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--mode", choices=["mixed", "cut", "op", "torn-seq", "torn-op"], default="mixed",
                    help="how the power is cut: clear-cache with the writer frozen, LazyFS's crash at "
                         "a file operation, LazyFS persisting some unsynced writes of a segment "
                         "(torn-seq) or parts of one (torn-op) and crashing, or any at random (default)")
    ap.add_argument("--no-fsync", action="store_true", help="the control: kivi serve --no-fsync")
    ap.add_argument("--kivi", default=None, help="kivi binary (default target/release/kivi, else target/debug/kivi)")
    ap.add_argument("--child", default=os.path.join(REPO, "target/debug/kivi-test-child"))
    ap.add_argument("--max-run", type=float, default=None,
                    help="longest a writer runs before the cut, seconds (default 1.5 child, 4 serve)")
    ap.add_argument("--dir", default=None, help="work directory (default target/lazyfs/campaign-WRITER)")
    a = ap.parse_args()
    if a.no_fsync and a.writer != "serve":
        ap.error("--no-fsync is for --writer serve (the child has no such option)")
    if os.geteuid() != 0:
        print("power_cut.py: needs root (FUSE mounts)", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    max_run = a.max_run or (1.5 if a.writer == "child" else 4.0)
    kivi = a.kivi or next(p for p in (os.path.join(REPO, "target/release/kivi"),
                                      os.path.join(REPO, "target/debug/kivi")) if os.path.exists(p))
    name = "campaign-%s%s" % (a.writer, "-nofsync" if a.no_fsync else "")
    base = os.path.abspath(a.dir or os.path.join(REPO, "target/lazyfs", name))
    subprocess.check_call([LAZYFS_SH, "install"])

    # A write that finds LazyFS's cache full goes straight to the backing
    # file (as if written back early): sized so that no cycle fills it.
    fs = LazyFS(base, "256mb" if a.writer == "child" else "1gb")
    fs.umount()
    shutil.rmtree(fs.root, ignore_errors=True)
    os.makedirs(fs.root)
    # Copies of the binaries: a build elsewhere in the tree must not swap them mid-campaign.
    bindir = os.path.join(base, "bin")
    os.makedirs(bindir, exist_ok=True)
    shutil.copy2(kivi, os.path.join(bindir, "kivi"))
    kivi = os.path.join(bindir, "kivi")
    if a.writer == "child":
        shutil.copy2(a.child, os.path.join(bindir, "kivi-test-child"))
        child = os.path.join(bindir, "kivi-test-child")
    print("power_cut: writer %s%s, %d cycles, seed %d, kivi %s, store %s/store on LazyFS over %s"
          % (a.writer, " --no-fsync" if a.no_fsync else "", a.cycles, seed, a.kivi or "target/release|debug/kivi",
             fs.mnt, fs.root), flush=True)

    if not file_control(fs):
        return 1

    store = os.path.join(fs.mnt, "store")
    base_state = {}
    t0 = time.time()
    tot = dict(cycles=0, acked_batches=0, acked_ops=0, keys=0, lost=0, wrong=0, check_failed=0,
               landed=0, during_open=0, cut=0, op=0, op_fired=0, lossy_cycles=0, writer_errors=0,
               cache_max=0.0)
    modes = {}
    failed = False
    try:
        for cycle in range(1, a.cycles + 1):
            run = cycle
            fs.mount()
            if a.writer == "child":
                w = ChildWriter(child, store, run)
            else:
                w = ServeWriter(kivi, store, run, free_port(), a.no_fsync,
                                os.path.join(base, "serve.stderr"))
            during_open = rng.random() < 0.1
            if during_open:
                time.sleep(rng.uniform(0, 0.2))
                when = "while opening"
            else:
                if not w.wait_ready(120):
                    raise RuntimeError("writer did not start: %s" % getattr(w, "stderr", b"")[-2000:])
                time.sleep(rng.uniform(0.02, max_run))
                when = "running"
            if not fs.alive():
                # LazyFS failed by itself (it has died of its own bugs under
                # load): its cache is gone, as in a power cut at that moment.
                mode = "died"
                point = "LazyFS died by itself: %s" % fs.last_words()
            elif a.mode != "mixed":
                mode = a.mode
            else:
                r = rng.random()
                mode = "cut" if r < 0.35 else "op" if r < 0.7 else "torn-seq" if r < 0.85 else "torn-op"
            armed = True
            if mode != "died":
                point = ""
            if mode in ("torn-seq", "torn-op"):
                # One of the newest segments (the commit log's, or the page
                # segment a checkpoint writes): LazyFS persists some of its
                # next unsynced writes (torn-seq: some writes of a run with no
                # fsync between, the ones before them lost; torn-op: some
                # parts of one write), then kills itself.
                try:
                    segs = sorted(n for n in os.listdir(os.path.join(fs.root, "store")) if n.endswith(".seg"))
                except FileNotFoundError:
                    segs = []
                what = mode
                if segs:
                    seg = segs[-1] if rng.random() < 0.6 else rng.choice(segs[-3:])
                    path = "%s/store/%s" % (fs.short_root, seg)
                    if mode == "torn-seq":
                        persist = rng.choice(["2", "3", "1,3", "2,3", "2,4", "1,2,4"])
                        armed = fs.command("lazyfs::torn-seq::op=write::file=%s::persist=%s" % (path, persist))
                        what = "torn-seq persist=%s" % persist
                    else:
                        parts = rng.randrange(2, 5)
                        keep = sorted(rng.sample(range(1, parts + 1), rng.randrange(1, parts)))
                        persist = ",".join(map(str, keep))
                        armed = fs.command("lazyfs::torn-op::file=%s::parts=%d::persist=%s" % (path, parts, persist))
                        what = "torn-op parts=%d persist=%s" % (parts, persist)
                    deadline = time.time() + 3
                    while fs.alive() and time.time() < deadline and w.proc.poll() is None:
                        time.sleep(0.002)
                    deadline = time.time() + 2
                    while fs.alive() and w.proc.poll() is not None and time.time() < deadline:
                        time.sleep(0.01)
                if fs.alive():
                    point = "%s never came: cut" % what
                    mode = "cut"
                else:
                    point = "LazyFS %s on %s" % (what, seg)
                    tot["op_fired"] += 1
            if mode == "op":
                timing, op = rng.choice(OPS)
                armed = fs.command("lazyfs::crash::timing=%s::op=%s::from_rgx=%s" % (timing, op, "/store/"))
                deadline = time.time() + 3
                while fs.alive() and time.time() < deadline and w.proc.poll() is None:
                    time.sleep(0.002)
                # LazyFS closes its device before it is seen dead: a writer
                # failing on its death can exit first.
                deadline = time.time() + 2
                while fs.alive() and w.proc.poll() is not None and time.time() < deadline:
                    time.sleep(0.01)
                if fs.alive():
                    point = "%s %s never came: cut" % (timing, op)
                    mode = "cut"
                else:
                    point = "LazyFS killed itself %s %s" % (timing, op)
                    tot["op_fired"] += 1
            if not armed:
                mode = "died"
                point = "LazyFS died by itself: %s" % fs.last_words()
            if "never came" in point and during_open and w.ready.is_set():
                during_open = False  # it opened while the armed fault waited
                when = "running"
            exited = w.proc.poll()
            if exited is not None and fs.alive():
                # The writer stopped by itself, with no fault to explain it.
                w.finish()
                err = getattr(w, "stderr", b"") or b""
                if not err:
                    try:
                        with open(os.path.join(base, "serve.stderr"), "rb") as f:
                            err = f.read()
                    except OSError:
                        pass
                print("cycle %d: the writer exited by itself (status %s) before the cut (%s): %s\n   %s"
                      % (cycle, exited, point or "clear-cache", getattr(w, "err_line", None) or "",
                         err.decode("utf-8", "replace")[-3000:].replace("\n", "\n   ")), flush=True)
                fs.umount()
                keep = os.path.join(base, "failed-cycle-%d" % cycle)
                shutil.rmtree(keep, ignore_errors=True)
                shutil.copytree(fs.root, keep)
                print("   the store: %s (seed %d)" % (keep, seed), flush=True)
                failed = True
                break
            if mode == "cut":
                w.proc.send_signal(signal.SIGSTOP)
                if fs.alive():
                    usage = fs.cache_usage()
                    tot["cache_max"] = max(tot["cache_max"], usage)
                    if usage >= 99:
                        print("   LazyFS's cache is full (%.0f%%): writes went past it unsynced" % usage)
                    fs.clear_cache()
                point = point or "clear-cache"
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait()
            if fs.alive():
                fs.clear_cache()  # in case LazyFS got something after the kill
            fs.umount()
            w.finish()
            tot["during_open"] += during_open
            tot[mode] = tot.get(mode, 0) + 1
            if "never came" in point:
                key = "clear-cache (the fault armed never came)"
            elif point.startswith("LazyFS torn"):
                key = " ".join(point.split()[:2])
            else:
                key = point.split(":")[0]
            modes[key] = modes.get(key, 0) + 1
            tot["writer_errors"] += len(w.errors)

            fs.mount()
            rc, out = check_store(kivi, store)
            if rc != 0:
                tot["check_failed"] += 1
            got = scan_store(kivi, store)
            fs.umount()
            if a.writer == "child":
                lost, wrong, landed, notes = verify_child(w, base_state, got)
                acked = sum(x + 1 for x in w.acks)
                acked_ops = w.acked_ops()
                extra = "in-flight batch present in %d/%d threads" % (landed, w.THREADS)
            else:
                lost, wrong, landed, notes = verify_serve(w, base_state, got, a.no_fsync)
                acked = acked_ops = w.acked_ops()
                extra = "%d connections lost writes" % landed if a.no_fsync else \
                    "refused: %s" % (w.first_error or "none")
            tot["cycles"] += 1
            tot["acked_batches"] += acked
            tot["acked_ops"] += acked_ops
            tot["keys"] += len(got)
            tot["lost"] += lost
            tot["wrong"] += wrong
            tot["landed"] += landed
            tot["lossy_cycles"] += lost > 0
            print("cycle %d: cut %s (%s): %d writes acknowledged (%d operations); check %s; "
                  "%d keys read; lost %d, wrong %d; %s"
                  % (cycle, when, point, acked, acked_ops, "ok" if rc == 0 else "FAILED (exit %d)" % rc,
                     len(got), lost, wrong, extra), flush=True)
            for n in notes[:20]:
                print("   " + n, flush=True)
            for e in w.errors[:5]:
                print("   writer: " + e, flush=True)
            bad = rc != 0 or wrong > 0 or (lost > 0 and not a.no_fsync) or w.errors
            if bad:
                if rc != 0:
                    print("   kivi check: " + out.replace("\n", "\n   "), flush=True)
                keep = os.path.join(base, "failed-cycle-%d" % cycle)
                shutil.rmtree(keep, ignore_errors=True)
                shutil.copytree(fs.root, keep)
                print("   the store as the cut left it: %s (seed %d)" % (keep, seed), flush=True)
                failed = True
                break
            base_state = got
    finally:
        fs.umount()
    took = time.time() - t0
    print("\npower_cut total: %d cycles (crash points: %d clear-cache with the writer frozen, "
          "%d LazyFS killed itself at a file operation, %d torn-seq, %d torn-op, %d LazyFS died "
          "by itself; %d while the store was opening), %.0f s"
          % (tot["cycles"], tot["cut"], tot["op"], tot.get("torn-seq", 0), tot.get("torn-op", 0),
             tot.get("died", 0), tot["during_open"], took))
    print("  LazyFS's cache at most %.1f%% full at a cut (%s)" % (tot["cache_max"], fs.cache))
    print("  crash points by kind: " + ", ".join("%s %d" % kv for kv in sorted(modes.items())))
    print("  acknowledged writes checked: %d (%d operations); keys read back: %d; "
          "lost %d (in %d cycles), wrong %d; kivi check failed %d times; writer protocol errors %d"
          % (tot["acked_batches"], tot["acked_ops"], tot["keys"], tot["lost"], tot["lossy_cycles"],
             tot["wrong"], tot["check_failed"], tot["writer_errors"]))
    if a.no_fsync:
        if failed:
            return 1
        if tot["lost"] == 0:
            print("CONTROL SHOWS NOTHING: kivi serve --no-fsync lost no acknowledged write; "
                  "the campaign cannot tell a lost sync from a kept one")
            return 1
        print("control: --no-fsync lost %d acknowledged writes in %d of %d cycles, as it must; "
              "nothing wrong, nothing but the latest writes" % (tot["lost"], tot["lossy_cycles"], tot["cycles"]))
        return 0
    if failed:
        print("FAILED")
        return 1
    print("%d passed, 0 failed" % tot["cycles"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
