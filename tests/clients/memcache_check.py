#!/usr/bin/env python3
"""A memcached client for farmem's real-program tests (text protocol, plain
sockets, standard library only).

    memcache_check.py --port P load-verify --total-mib 1024 [--batch 20]
    memcache_check.py --port P stats

load-verify stores items of 64-128 KiB (sizes and contents derived from the
key), then reads every item back with multi-gets (`get k1 ... kN`) and checks
each byte and the flags. It prints one summary line per phase and exits 0
only if every item was stored and came back intact. Any miss, mismatch,
server or client error exits 1 with a message that names the first problem.

stats prints the server's `stats` as `name value` lines.
"""

import argparse
import hashlib
import socket
import sys
import time
import zlib

PERIOD = 4099  # not a divisor of the 4 KiB page: a misplaced page shows


def size_of(i):
    return 65536 + (i * 7919) % 65536


def key_of(i):
    return b"fm:%07d" % i


def value_of(key, size):
    """Deterministic, key-seeded, not periodic at page granularity."""
    base = hashlib.shake_256(key).digest(PERIOD)
    return (base * (size // PERIOD + 1))[:size]


def flags_of(key):
    return zlib.crc32(key) & 0xFFFF


class Fail(Exception):
    pass


class Conn:
    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb", buffering=1 << 20)

    def line(self):
        ln = self.rf.readline(4096)
        if not ln.endswith(b"\r\n"):
            raise Fail("connection closed or bad line from server: %r" % ln[:200])
        return ln[:-2]

    def exact(self, n):
        data = self.rf.read(n)
        if data is None or len(data) != n:
            raise Fail("short read: wanted %d bytes, got %d" % (n, len(data or b"")))
        return data

    def send(self, data):
        self.sock.sendall(data)


def load(c, items, batch):
    """Pipelined sets, `batch` at a time; every reply must be STORED."""
    stored = 0
    nbytes = 0
    i = 0
    while i < items:
        n = min(batch, items - i)
        out = []
        for j in range(i, i + n):
            k = key_of(j)
            v = value_of(k, size_of(j))
            out.append(b"set %s %d 0 %d\r\n" % (k, flags_of(k), len(v)))
            out.append(v)
            out.append(b"\r\n")
            nbytes += len(v)
        c.send(b"".join(out))
        for j in range(i, i + n):
            r = c.line()
            if r != b"STORED":
                raise Fail("set %s: server replied %r" % (key_of(j).decode(), r[:200]))
            stored += 1
        i += n
    return stored, nbytes


def verify(c, items, batch):
    """Multi-gets of `batch` keys; every key must come back, byte for byte."""
    checked = 0
    nbytes = 0
    i = 0
    while i < items:
        keys = [key_of(j) for j in range(i, min(items, i + batch))]
        c.send(b"get " + b" ".join(keys) + b"\r\n")
        got = {}
        while True:
            r = c.line()
            if r == b"END":
                break
            parts = r.split()
            if len(parts) != 4 or parts[0] != b"VALUE":
                raise Fail("get %s...: unexpected reply %r" % (keys[0].decode(), r[:200]))
            k, fl, ln = parts[1], int(parts[2]), int(parts[3])
            data = c.exact(ln + 2)
            if data[-2:] != b"\r\n":
                raise Fail("get %s: value not followed by CRLF" % k.decode())
            if k in got:
                raise Fail("get: key %s returned twice" % k.decode())
            got[k] = (fl, data[:-2])
        for j, k in zip(range(i, i + len(keys)), keys):
            if k not in got:
                raise Fail(
                    "get: key %s missing (a miss) in a multi-get of %d keys; %d of them came back"
                    % (k.decode(), len(keys), len(got))
                )
            fl, v = got.pop(k)
            want = value_of(k, size_of(j))
            if fl != flags_of(k):
                raise Fail("key %s: flags %d, want %d" % (k.decode(), fl, flags_of(k)))
            if v != want:
                if len(v) != len(want):
                    raise Fail("key %s: %d bytes, want %d" % (k.decode(), len(v), len(want)))
                first = next(x for x in range(len(v)) if v[x] != want[x])
                bad = sum(1 for x in range(0, len(v), 4096) if v[x : x + 4096] != want[x : x + 4096])
                raise Fail(
                    "key %s: content differs from byte %d on (%d of %d 4 KiB blocks differ; "
                    "got %r, want %r)"
                    % (k.decode(), first, bad, (len(v) + 4095) // 4096, v[first : first + 16], want[first : first + 16])
                )
            checked += 1
            nbytes += len(v)
        if got:
            raise Fail("get: unrequested keys returned: %r" % sorted(got)[:5])
        i += len(keys)
    return checked, nbytes


def stats(c):
    c.send(b"stats\r\n")
    out = {}
    while True:
        r = c.line()
        if r == b"END":
            return out
        parts = r.decode().split(" ", 2)
        if len(parts) != 3 or parts[0] != "STAT":
            raise Fail("stats: unexpected reply %r" % r)
        out[parts[1]] = parts[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=30.0, help="per socket operation, seconds")
    sub = ap.add_subparsers(dest="cmd", required=True)
    lv = sub.add_parser("load-verify")
    lv.add_argument("--total-mib", type=int, default=1024)
    lv.add_argument("--batch", type=int, default=20)
    sub.add_parser("stats")
    a = ap.parse_args()

    c = Conn(a.host, a.port, a.timeout)
    try:
        if a.cmd == "stats":
            for k, v in sorted(stats(c).items()):
                print(k, v)
            return 0
        items = 0
        total = 0
        while total < a.total_mib << 20:
            total += size_of(items)
            items += 1
        t = time.monotonic()
        stored, nb = load(c, items, a.batch)
        dt = time.monotonic() - t
        print("stored %d items, %d bytes (%.1f MiB/s)" % (stored, nb, nb / (1 << 20) / max(dt, 1e-9)), flush=True)
        st = stats(c)
        print(
            "server: curr_items %s, bytes %s, evictions %s, limit_maxbytes %s"
            % (st.get("curr_items"), st.get("bytes"), st.get("evictions"), st.get("limit_maxbytes")),
            flush=True,
        )
        if st.get("evictions") != "0":
            raise Fail("the server evicted %s items: raise memcached's -m" % st.get("evictions"))
        t = time.monotonic()
        checked, nb = verify(c, items, a.batch)
        dt = time.monotonic() - t
        print(
            "verified %d items, %d bytes, in multi-gets of %d (%.1f MiB/s)"
            % (checked, nb, a.batch, nb / (1 << 20) / max(dt, 1e-9)),
            flush=True,
        )
        if checked != items:
            raise Fail("verified %d of %d items" % (checked, items))
        print("memcache check OK: %d items, 0 misses, 0 mismatches" % items)
        return 0
    except Fail as e:
        print("memcache check FAILED: %s" % e, file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print("memcache check FAILED: client error: %r" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
