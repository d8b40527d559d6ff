#!/usr/bin/env python3
"""The client half of tests/faults/full_disk.sh (standard library only).

  full_disk_load.py fill PORT STATE FILLER [--fault-cmd CMD --free-cmd CMD] [--resume no]
      Four RESP connections pipeline SETs of new keys (1-16 KiB values)
      until the disk is full and every connection has had writes refused
      for a while; records each error text. Then: GETs of acknowledged keys
      must go on answering, whole and right; deletes FILLER (a file made to
      be freed) and, without restarting the server, sends SETs until they
      are accepted again, then 100 more per connection, all of which must
      be accepted; then reads every key back. Writes STATE (JSON).
      With --fault-cmd, that shell command, run after 2 s of writing, makes
      writes fail (instead of the disk filling), and --free-cmd ends it;
      --resume no: writes are not expected to resume (the file system has
      gone read-only), only reads are checked.
  full_disk_load.py verify PORT STATE
      Every acknowledged write is there with its value, and no refused
      write appeared.
  full_disk_load.py embedded KIVI STORE STATE
      The command line on the same store, no server: fills the file system
      to its last block (files FILL1, FILL2 beside the store), `kivi put`
      must fail with an error and leave nothing, `kivi get` must answer
      acknowledged keys; then the fill is deleted and `kivi put` must work.
Prints a summary; exits 1 on any failure.
"""

import json
import os
import re
import socket
import sys
import threading
import time

M64 = (1 << 64) - 1
CONNS = 4
WINDOW = 16


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def write(c, seq):
    key = b"c%d/s%08d" % (c, seq)
    y = mix((c << 32) | seq)
    n = 1024 + y % (15 << 10)
    head = b"v:%d:%d:" % (c, seq)
    return key, head + (mix(y).to_bytes(8, "little") * (n // 8 + 1))[:n]


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb")

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))

    def reply(self):
        line = self.f.readline()
        if not line.endswith(b"\r\n"):
            raise EOFError("connection closed")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return ("ok", rest.decode())
        if t == b"-":
            return ("err", rest.decode("utf-8", "replace"))
        if t == b"$":
            n = int(rest)
            if n < 0:
                return ("nil", None)
            data = self.f.read(n + 2)
            return ("bulk", data[:-2])
        if t == b":":
            return ("int", int(rest))
        raise ValueError("unexpected reply %r" % line)

    def call(self, *args):
        self.send(*args)
        return self.reply()


class Writer:
    """One connection's writes: seqs acknowledged and refused."""

    def __init__(self, port, c):
        self.c = c
        self.conn = Conn(port)
        self.seq = 0
        self.acked = []
        self.refused = []
        self.errors = {}
        self.first_refusal = None

    def pipeline(self, stop, count=None):
        """Pipelined SETs until stop() (checked per reply) or `count` replies."""
        inflight = []
        done = 0
        while True:
            want = WINDOW if count is None else min(WINDOW, count - done - len(inflight))
            out = []
            while len(inflight) < want:
                key, val = write(self.c, self.seq)
                out.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(val), val))
                inflight.append(self.seq)
                self.seq += 1
            if out:
                self.conn.s.sendall(b"".join(out))
            if not inflight:
                return
            kind, text = self.conn.reply()
            seq = inflight.pop(0)
            done += 1
            self.note(seq, kind, text)
            if count is None and stop():
                # Stop sending; collect the replies still owed.
                while inflight:
                    kind, text = self.conn.reply()
                    self.note(inflight.pop(0), kind, text)
                return

    def note(self, seq, kind, text):
        if kind == "ok":
            self.acked.append(seq)
        else:
            self.refused.append(seq)
            shape = re.sub(r"/[^ ]*/(\d{10})\.seg", "/.../NNNNNNNNNN.seg", text)
            self.errors[shape] = self.errors.get(shape, 0) + 1
            if self.first_refusal is None:
                self.first_refusal = time.time()


def fill(port, state_path, filler, fault_cmd=None, free_cmd=None, resume=True):
    """FILLER: the file to delete to free space (or, with free_cmd, a path
    on the file system to report the space of). fault_cmd: a shell command
    run after 2 s of writing that makes writes fail (else the disk fills);
    free_cmd: the shell command that ends the fault (else FILLER is deleted)."""
    import subprocess
    t0 = time.time()
    ws = [Writer(port, c) for c in range(CONNS)]
    failures = []
    if fault_cmd:
        def fault():
            time.sleep(2)
            print("fault: after %.1f s of writing: %s" % (time.time() - t0, fault_cmd), flush=True)
            subprocess.run(fault_cmd, shell=True, check=True)
        threading.Thread(target=fault, daemon=True).start()

    # 1. Fill: until every connection has had writes refused for 2 s (or 300 s in all).
    def stop_for(w):
        return lambda: (w.first_refusal is not None and time.time() - w.first_refusal > 2) \
            or time.time() - t0 > 300
    ts = [threading.Thread(target=w.pipeline, args=(stop_for(w),)) for w in ws]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    acked = sum(len(w.acked) for w in ws)
    refused = sum(len(w.refused) for w in ws)
    errors = {}
    for w in ws:
        for k, v in w.errors.items():
            errors[k] = errors.get(k, 0) + v
    first = min((w.first_refusal for w in ws if w.first_refusal), default=None)
    print("fill: %d writes acknowledged (%.1f MiB of values), then %d refused in %.1f s; "
          "first refusal after %.1f s" % (
              acked, sum(len(write(w.c, s)[1]) for w in ws for s in w.acked) / 2**20, refused,
              time.time() - t0, (first - t0) if first else -1))
    for text, n in sorted(errors.items(), key=lambda kv: -kv[1]):
        print("  error clients got (%d times): -%s" % (n, text))
    if refused == 0:
        failures.append("no write was refused: the fault never showed")

    # 2. Reads go on while writes are refused.
    c = Conn(port)
    t1 = time.time()
    checked = bad = 0
    for w in ws:
        sample = w.acked[:: max(1, len(w.acked) // 250)]
        for seq in sample:
            key, val = write(w.c, seq)
            kind, got = c.call(b"GET", key)
            checked += 1
            if got != val:
                bad += 1
        for seq in w.refused[:20]:
            key, _ = write(w.c, seq)
            kind, got = c.call(b"GET", key)
            checked += 1
            if kind != "nil":
                bad += 1
                failures.append("refused write %r is visible" % key)
    kind, still = c.call(b"SET", b"probe-while-full", b"x" * 65536)
    try:
        st = os.statvfs(os.path.dirname(filler))
        print("file system: %d KiB available" % (st.f_bavail * st.f_frsize // 1024))
    except OSError as e:
        print("file system: statvfs: %s" % e)
    print("reads while refusing writes: %d GETs (acknowledged keys and refused ones) in %.2f s, %d wrong; "
          "a SET then: %s %s" % (checked, time.time() - t1, bad, kind, still))
    if bad:
        failures.append("%d reads wrong while writes were refused" % bad)

    # 3. Free space (or end the fault), no restart: writes must resume.
    if free_cmd:
        print("fault ends: %s" % free_cmd)
        subprocess.run(free_cmd, shell=True, check=True)
    else:
        os.unlink(filler)
        os.sync()
    if not resume:
        state = {"acked": {w.c: w.acked for w in ws}, "refused": {w.c: w.refused for w in ws},
                 "errors": errors}
        with open(state_path, "w") as f:
            json.dump(state, f)
        return failures + verify_state(port, state, "with the fault over, before restart")
    t2 = time.time()
    resumed = None
    tries = 0
    while time.time() - t2 < 60:
        w = ws[0]
        seq = w.seq
        key, val = write(w.c, seq)
        w.seq += 1
        kind, text = w.conn.call(b"SET", key, val)
        tries += 1
        w.note(seq, kind, text)
        if kind == "ok":
            resumed = time.time() - t2
            break
        time.sleep(0.05)
    if resumed is None:
        failures.append("writes did not resume within 60 s of the fault's end (%d tries; last: %s)" % (tries, text))
        print("resume: FAILED: %d tries in 60 s, last reply -%s" % (tries, text))
    else:
        print("resume: %s; the first write accepted %.2f s later (try %d), no restart"
              % ("fault ended" if free_cmd else os.path.basename(filler) + " deleted", resumed, tries))
        before = [len(w.refused) for w in ws]
        ts = [threading.Thread(target=w.pipeline, args=(lambda: False, 100)) for w in ws]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        late = sum(len(w.refused) - b for w, b in zip(ws, before))
        print("after resuming: %d more writes, %d refused" % (100 * CONNS, late))
        if late:
            failures.append("%d writes refused after writing had resumed" % late)

    # 4. Everything acknowledged is there, nothing refused is.
    state = {"acked": {w.c: w.acked for w in ws}, "refused": {w.c: w.refused for w in ws},
             "errors": errors}
    with open(state_path, "w") as f:
        json.dump(state, f)
    failures += verify_state(port, state, "before restart")
    return failures


def verify_state(port, state, when):
    c = Conn(port)
    failures = []
    n = lost = wrong = seen_refused = 0
    for cs, seqs in state["acked"].items():
        for seq in seqs:
            key, val = write(int(cs), seq)
            c.send(b"GET", key)
        for seq in seqs:
            key, val = write(int(cs), seq)
            kind, got = c.reply()
            n += 1
            if got is None:
                lost += 1
            elif got != val:
                wrong += 1
    for cs, seqs in state["refused"].items():
        for seq in seqs:
            key, _ = write(int(cs), seq)
            kind, got = c.call(b"GET", key)
            if kind != "nil":
                seen_refused += 1
    nref = sum(len(s) for s in state["refused"].values())
    print("verify (%s): %d acknowledged writes read back: %d lost, %d wrong; "
          "%d refused writes: %d visible" % (when, n, lost, wrong, nref, seen_refused))
    if lost or wrong:
        failures.append("%s: %d acknowledged writes lost, %d wrong" % (when, lost, wrong))
    if seen_refused:
        failures.append("%s: %d refused writes are visible" % (when, seen_refused))
    return failures


def put_and_judge(kivi, store, key, value, when, must_store):
    """`kivi put KEY VALUE`: what it reports must be true. Exit 0: stored.
    An error saying the put is durable (the final checkpoint failed, not
    the put): stored. Any other error: nothing stored."""
    import subprocess
    p = subprocess.run([kivi, "-d", store, "put", key, value], capture_output=True)
    err = (p.stdout + p.stderr).decode("utf-8", "replace").strip()
    last = err.splitlines()[-1] if err else ""
    g = subprocess.run([kivi, "-d", store, "get", key], capture_output=True)
    stored = g.returncode == 0 and g.stdout.rstrip(b"\n") == value
    says_durable = p.returncode == 0 or "durable" in last
    print("embedded: kivi put %s: exit %d%s; then kivi get: %s" % (
        when, p.returncode, ": " + last if last else "",
        "stored" if stored else "absent (exit %d)" % g.returncode))
    failures = []
    if says_durable != stored:
        failures.append("kivi put %s %s, but the value is %s" % (
            when, "reported it durable" if says_durable else "reported an error", "stored" if stored else "absent"))
    if must_store and not stored:
        failures.append("kivi put %s did not store the value" % when)
    return failures


def embedded(kivi, store, state_path):
    import subprocess
    with open(state_path) as f:
        state = json.load(f)
    failures = []
    top = os.path.dirname(store)
    fills = [os.path.join(top, "fill1"), os.path.join(top, "fill2")]
    # To the last block: 1 MiB writes, then 4 KiB ones.
    for path, bs in zip(fills, (1 << 20, 4096)):
        try:
            f = open(path, "wb")
        except OSError:
            continue
        with f:
            try:
                while True:
                    f.write(b"\0" * bs)
                    f.flush()
            except OSError:
                pass
            try:
                os.fsync(f.fileno())
            except OSError:
                pass
    os.sync()
    st = os.statvfs(top)
    print("embedded: file system filled: %d KiB available" % (st.f_bavail * st.f_frsize // 1024))
    failures += put_and_judge(kivi, store, b"embedded-full", b"value", "on the full file system",
                              must_store=False)
    n = bad = 0
    for cs, seqs in state["acked"].items():
        for seq in seqs[:: max(1, len(seqs) // 10)]:
            key, val = write(int(cs), seq)
            g = subprocess.run([kivi, "--hex", "-d", store, "get", key.hex()], capture_output=True)
            n += 1
            if g.returncode != 0 or bytes.fromhex(g.stdout.decode().strip()) != val:
                bad += 1
    print("embedded: kivi get of %d acknowledged keys on the full file system: %d wrong" % (n, bad))
    if bad:
        failures.append("%d kivi gets wrong on the full file system" % bad)
    for path in fills:
        if os.path.exists(path):
            os.unlink(path)
    os.sync()
    failures += put_and_judge(kivi, store, b"embedded-after", b"value-after", "after freeing space",
                              must_store=True)
    return failures


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "fill":
        opts = dict(zip(sys.argv[5::2], sys.argv[6::2]))
        failures = fill(int(sys.argv[2]), sys.argv[3], sys.argv[4],
                        fault_cmd=opts.get("--fault-cmd"), free_cmd=opts.get("--free-cmd"),
                        resume=opts.get("--resume", "yes") == "yes")
    elif len(sys.argv) >= 4 and sys.argv[1] == "verify":
        with open(sys.argv[3]) as f:
            state = json.load(f)
        failures = verify_state(int(sys.argv[2]), state, "after restart")
    elif len(sys.argv) >= 5 and sys.argv[1] == "embedded":
        failures = embedded(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
