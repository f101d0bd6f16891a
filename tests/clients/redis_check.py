#!/usr/bin/env python3
"""A Redis client for farmem's real-program tests (RESP over plain sockets,
standard library only).

    redis_check.py --port P wait                 PING until +PONG (not -LOADING)
    redis_check.py --port P load --keys N --size S [--batch B]
    redis_check.py --port P verify --keys N --size S [--batch B]
    redis_check.py --port P save-shutdown        SAVE, then SHUTDOWN NOSAVE

Values are derived from the key (key-seeded, not periodic at page
granularity), so `verify` can check every byte, also after a restart from the
dump. Every phase prints one summary line; any error, miss or mismatch exits 1
with a message that names the first problem.
"""

import argparse
import hashlib
import socket
import sys
import time

PERIOD = 4099  # not a divisor of the 4 KiB page: a misplaced page shows


def key_of(i):
    return b"fm:%07d" % i


def value_of(key, size):
    base = hashlib.shake_256(key).digest(PERIOD)
    return (base * (size // PERIOD + 1))[:size]


class Fail(Exception):
    pass


def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n" % len(a))
        out.append(a)
        out.append(b"\r\n")
    return b"".join(out)


class Conn:
    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb", buffering=1 << 20)

    def send(self, data):
        self.sock.sendall(data)

    def line(self):
        ln = self.rf.readline(65536)
        if not ln.endswith(b"\r\n"):
            raise Fail("connection closed or bad line from server: %r" % ln[:200])
        return ln[:-2]

    def reply(self):
        """One RESP reply: bytes for a simple/bulk string, int, None, list;
        an error reply raises Fail."""
        ln = self.line()
        t, rest = ln[:1], ln[1:]
        if t == b"+":
            return rest
        if t == b"-":
            raise Fail("server error: %s" % rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)
            if data is None or len(data) != n + 2 or data[-2:] != b"\r\n":
                raise Fail("short or malformed bulk reply (%d bytes wanted)" % n)
            return data[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise Fail("unexpected reply %r" % ln[:200])

    def call(self, *args):
        self.send(command(*args))
        return self.reply()


def wait(host, port, timeout, deadline_s):
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        try:
            c = Conn(host, port, timeout)
            try:
                if c.call("PING") == b"PONG":
                    return
            finally:
                c.sock.close()
        except (OSError, Fail) as e:  # refused, or -LOADING while the dump loads
            last = e
        time.sleep(0.1)
    raise Fail("server not ready within %.0f s: %r" % (deadline_s, last))


def load(c, keys, size, batch):
    nbytes = 0
    i = 0
    while i < keys:
        n = min(batch, keys - i)
        out = []
        for j in range(i, i + n):
            k = key_of(j)
            out.append(command(b"SET", k, value_of(k, size)))
            nbytes += size
        c.send(b"".join(out))
        for j in range(i, i + n):
            r = c.reply()
            if r != b"OK":
                raise Fail("SET %s: reply %r" % (key_of(j).decode(), r))
        i += n
    return nbytes


def verify(c, keys, size, batch):
    nbytes = 0
    i = 0
    while i < keys:
        n = min(batch, keys - i)
        c.send(b"".join(command(b"GET", key_of(j)) for j in range(i, i + n)))
        for j in range(i, i + n):
            k = key_of(j)
            v = c.reply()
            if v is None:
                raise Fail("GET %s: missing (nil)" % k.decode())
            want = value_of(k, size)
            if v != want:
                if len(v) != len(want):
                    raise Fail("GET %s: %d bytes, want %d" % (k.decode(), len(v), len(want)))
                first = next(x for x in range(len(v)) if v[x] != want[x])
                bad = sum(1 for x in range(0, len(v), 4096) if v[x : x + 4096] != want[x : x + 4096])
                raise Fail(
                    "GET %s: content differs from byte %d on (%d of %d 4 KiB blocks differ; got %r, want %r)"
                    % (k.decode(), first, bad, (len(v) + 4095) // 4096, v[first : first + 16], want[first : first + 16])
                )
            nbytes += len(v)
        i += n
    return nbytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=30.0, help="per socket operation, seconds")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait")
    w.add_argument("--seconds", type=float, default=60.0)
    for name in ("load", "verify"):
        p = sub.add_parser(name)
        p.add_argument("--keys", type=int, default=8192)
        p.add_argument("--size", type=int, default=65536 - 64)
        p.add_argument("--batch", type=int, default=32)
    sub.add_parser("save-shutdown")
    a = ap.parse_args()

    try:
        if a.cmd == "wait":
            wait(a.host, a.port, a.timeout, a.seconds)
            print("redis ready")
            return 0
        c = Conn(a.host, a.port, a.timeout)
        t = time.monotonic()
        if a.cmd == "load":
            nb = load(c, a.keys, a.size, a.batch)
            dt = time.monotonic() - t
            info = c.call("INFO", "memory").decode(errors="replace")
            used = [ln for ln in info.split("\r\n") if ln.startswith("used_memory_human:")]
            print(
                "SET %d keys, %d bytes (%.1f MiB/s); %s"
                % (a.keys, nb, nb / (1 << 20) / max(dt, 1e-9), used[0] if used else "no used_memory"),
                flush=True,
            )
        elif a.cmd == "verify":
            n = c.call("DBSIZE")
            if not isinstance(n, int) or n < a.keys:
                raise Fail("DBSIZE %r, want at least %d" % (n, a.keys))
            nb = verify(c, a.keys, a.size, a.batch)
            dt = time.monotonic() - t
            print(
                "verified %d keys, %d bytes (%.1f MiB/s), DBSIZE %d: redis check OK"
                % (a.keys, nb, nb / (1 << 20) / max(dt, 1e-9), n),
                flush=True,
            )
        elif a.cmd == "save-shutdown":
            r = c.call("SAVE")
            if r != b"OK":
                raise Fail("SAVE: reply %r" % r)
            dt = time.monotonic() - t
            c.send(command("SHUTDOWN", "NOSAVE"))
            try:
                r = c.rf.read(1)  # the server closes the connection without a reply
            except OSError:
                r = b""
            if r:
                raise Fail("SHUTDOWN NOSAVE: the server replied %r" % (r + c.rf.readline(200)))
            print("SAVE done in %.1f s; SHUTDOWN NOSAVE sent" % dt, flush=True)
        return 0
    except Fail as e:
        print("redis check FAILED: %s" % e, file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print("redis check FAILED: client error: %r" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
