#!/usr/bin/env python3
"""System calls into large Python buffers, for farmem's real-program tests.

Run under `farmem run --local 32M -- python3 tests/clients/python_io.py`:
every buffer here (64-128 MiB) is larger than the budget, so the kernel
reads and writes far pages that are not resident. Sections:

  sendmsg     sendmsg/recvmsg_into (two iovecs each) over a socketpair and
              over TCP loopback, a sender thread and the main thread
  sendfile    file written from a far buffer, socket.sendfile() over TCP,
              recv_into() into a far buffer; the file read back with readinto
  getrandom   os.getrandom() into large bytes objects
  numpy       ndarray.tofile/fromfile round trip; numpy.memmap of that file
              and of a new file written through the map

Each section prints `NAME ok ...` or `NAME FAILED: ...`; the last line is
`python io OK` and the exit status 0 only if every section passed.
--require-far makes it a failure when the buffers are not far memory
(fm_is_far from the preloaded shim must say 1).
"""

import argparse
import ctypes
import hashlib
import os
import random
import socket
import sys
import tempfile
import threading
import time
import traceback

MIB = 1 << 20
TIMEOUT = 20  # seconds, for every socket operation and thread join
failures = []
far_checks = []


def fail(section, msg):
    failures.append("%s: %s" % (section, msg))
    print("%s FAILED: %s" % (section, msg), flush=True)


def address_of(buf):
    if isinstance(buf, bytes):
        return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value
    return ctypes.addressof((ctypes.c_char * 1).from_buffer(buf))


_fm_is_far = None
try:
    _fm_is_far = ctypes.CDLL(None).fm_is_far
    _fm_is_far.argtypes = [ctypes.c_void_p]
    _fm_is_far.restype = ctypes.c_int
except (AttributeError, OSError):
    pass


def note_far(section, name, buf):
    """Record whether the buffer is far memory (None: no shim loaded)."""
    far = None if _fm_is_far is None else _fm_is_far(address_of(buf))
    far_checks.append((section, name, far))
    return far


def pattern(seed, n):
    return random.Random(seed).randbytes(n)


def first_difference(a, b):
    if len(a) != len(b):
        return "lengths %d and %d" % (len(a), len(b))
    for off in range(0, len(a), MIB):
        if a[off : off + MIB] != b[off : off + MIB]:
            i = next(x for x in range(off, min(len(a), off + MIB)) if a[x] != b[x])
            bad_pages = sum(1 for p in range(0, len(a), 4096) if a[p : p + 4096] != b[p : p + 4096])
            return "first difference at byte %d (page %d); %d of %d pages differ" % (
                i,
                i // 4096,
                bad_pages,
                (len(a) + 4095) // 4096,
            )
    return "equal"


def run_thread(target, *args):
    errs = []

    def body():
        try:
            target(*args)
        except BaseException as e:  # reported by the joining thread
            errs.append("%r\n%s" % (e, traceback.format_exc()))

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, errs


def abort(*socks):
    """Wake a blocked sender: shut the sockets down, then close them."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def sender_state(t, errs):
    if t.is_alive():
        return "still running (blocked)"
    if errs:
        return "raised " + errs[0]
    return "finished without error"


def join(section, t, errs, timeout=TIMEOUT):
    t.join(timeout)
    if t.is_alive():
        fail(section, "the sender thread did not finish in %d s" % timeout)
        return False
    if errs:
        fail(section, "the sender thread raised " + errs[0])
        return False
    return True


def sendmsg_all(sock, mv, chunk):
    """sendmsg with two iovecs of uneven sizes per call; partial sends resumed."""
    off = 0
    n = len(mv)
    try:
        while off < n:
            end = min(n, off + chunk)
            mid = off + (end - off) * 3 // 7
            bufs = [mv[off:mid], mv[mid:end]] if mid > off else [mv[off:end]]
            off += sock.sendmsg(bufs)
    finally:
        sock.shutdown(socket.SHUT_WR)  # on an error too: the receiver sees EOF at once


def recvmsg_all(sock, mv, chunk):
    got = 0
    n = len(mv)
    while got < n:
        end = min(n, got + chunk)
        mid = got + (end - got) // 3
        bufs = [mv[got:mid], mv[mid:end]] if mid > got else [mv[got:end]]
        r, _anc, flags, _addr = sock.recvmsg_into(bufs)
        if r == 0:
            break
        if flags & socket.MSG_TRUNC:
            raise RuntimeError("MSG_TRUNC on a stream socket")
        got += r
    extra = sock.recv(1)
    return got, extra


def tcp_pair():
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    a = socket.create_connection(ls.getsockname(), timeout=TIMEOUT)
    b, _ = ls.accept()
    b.settimeout(TIMEOUT)
    ls.close()
    return a, b


def section_sendmsg(size):
    name = "sendmsg"
    src = bytearray(pattern(1, size))
    note_far(name, "source bytearray", src)
    want = hashlib.sha256(src).hexdigest()
    for kind in ("socketpair", "tcp"):
        if kind == "socketpair":
            a, b = socket.socketpair()
            a.settimeout(TIMEOUT)
            b.settimeout(TIMEOUT)
        else:
            a, b = tcp_pair()
        dst = bytearray(size)  # fresh far memory: untouched pages
        note_far(name, "receive bytearray (%s)" % kind, dst)
        t0 = time.monotonic()
        t, errs = run_thread(sendmsg_all, a, memoryview(src), 3 * MIB + 123)
        try:
            got, extra = recvmsg_all(b, memoryview(dst), 5 * MIB + 77)
        except OSError as e:
            abort(a, b)
            t.join(10)
            fail(name, "%s: recvmsg_into raised %r; the sender: %s" % (kind, e, sender_state(t, errs)))
            continue
        ok = join(name, t, errs)
        a.close()
        b.close()
        if not ok:
            continue
        dt = time.monotonic() - t0
        if got != size or extra:
            fail(name, "%s: received %d bytes (+%d extra), want %d" % (kind, got, len(extra), size))
            continue
        h = hashlib.sha256(dst).hexdigest()
        if h != want:
            fail(name, "%s: sha256 differs: %s" % (kind, first_difference(src, dst)))
            continue
        print(
            "sendmsg ok: %s, %d MiB sent and received (%.0f MiB/s), sha256 %s"
            % (kind, size // MIB, size / MIB / max(dt, 1e-9), h[:16]),
            flush=True,
        )
        del dst


def section_sendfile(size, tmp):
    name = "sendfile"
    src = bytearray(pattern(2, size))
    note_far(name, "source bytearray", src)
    want = hashlib.sha256(src).hexdigest()
    path = os.path.join(tmp, "sendfile.dat")
    with open(path, "wb", buffering=0) as f:
        mv = memoryview(src)
        off = 0
        while off < size:
            off += f.write(mv[off : off + 16 * MIB + 5])
    if os.path.getsize(path) != size:
        fail(name, "file written from the far buffer has %d bytes, want %d" % (os.path.getsize(path), size))
        return
    with open(path, "rb") as f:
        h = hashlib.file_digest(f, "sha256").hexdigest()
    if h != want:
        with open(path, "rb") as f:
            disk = f.read()
        fail(name, "write() from the far buffer: file content differs: %s" % first_difference(src, disk))
        return
    del src

    a, b = tcp_pair()
    dst = bytearray(size)
    note_far(name, "receive bytearray", dst)
    sent = []

    def sender():
        try:
            with open(path, "rb") as f:
                sent.append(a.sendfile(f))
        finally:
            a.shutdown(socket.SHUT_WR)  # on an error too: the receiver sees EOF at once

    t0 = time.monotonic()
    t, errs = run_thread(sender)
    mv = memoryview(dst)
    got = 0
    try:
        while got < size:
            r = b.recv_into(mv[got:], min(size - got, 7 * MIB + 3))
            if r == 0:
                break
            got += r
    except OSError as e:
        abort(a, b)
        t.join(10)
        fail(name, "recv_into raised %r after %d bytes; the sender: %s" % (e, got, sender_state(t, errs)))
        return
    ok = join(name, t, errs)
    a.close()
    b.close()
    if not ok:
        return
    dt = time.monotonic() - t0
    if got != size or sent != [size]:
        fail(name, "socket.sendfile sent %r, received %d, want %d" % (sent, got, size))
        return
    h = hashlib.sha256(dst).hexdigest()
    if h != want:
        fail(name, "received content differs from the file: sha256 %s, want %s" % (h[:16], want[:16]))
        return
    print("sendfile ok: %d MiB file -> TCP -> far buffer (%.0f MiB/s)" % (size // MIB, size / MIB / max(dt, 1e-9)), flush=True)

    back = bytearray(size)
    note_far(name, "readinto bytearray", back)
    with open(path, "rb", buffering=0) as f:
        mv = memoryview(back)
        got = 0
        while got < size:
            r = f.readinto(mv[got : got + 9 * MIB + 1])
            if not r:
                break
            got += r
    if got != size or hashlib.sha256(back).hexdigest() != want:
        fail(name, "readinto: %d bytes, content %s" % (got, "differs" if got == size else "short"))
        return
    print("sendfile ok: file read back with readinto into a far buffer, sha256 %s" % want[:16], flush=True)
    os.unlink(path)


def section_getrandom(size):
    name = "getrandom"
    chunk = 8 * MIB
    out = bytearray(size)
    note_far(name, "destination bytearray", out)
    prev = None
    for off in range(0, size, chunk):
        want = min(chunk, size - off)
        b = os.getrandom(want)
        if len(b) != want:
            fail(
                name,
                "os.getrandom(%d) returned %d bytes (a short write into the new far bytes object)" % (want, len(b)),
            )
            return
        if off == 0:
            note_far(name, "os.getrandom result (bytes)", b)
        if b == prev:
            fail(name, "two os.getrandom calls returned the same %d bytes" % want)
            return
        prev = b
        out[off : off + want] = b
    zero_pages = [p for p in range(0, size, 4096) if out[p : p + 4096].count(0) == 4096]
    if zero_pages:
        fail(
            name,
            "%d of %d pages are all zero (first at offset %d): the kernel's write did not land"
            % (len(zero_pages), size // 4096, zero_pages[0]),
        )
        return
    zeros = out.count(0)
    expect = size / 256
    if not expect / 2 < zeros < expect * 2:
        fail(name, "%d zero bytes in %d random bytes (expected about %d)" % (zeros, size, expect))
        return
    print(
        "getrandom ok: %d MiB in %d calls, no zero page, %d zero bytes (expected ~%d)"
        % (size // MIB, (size + chunk - 1) // chunk, zeros, expect),
        flush=True,
    )


def section_numpy(n, tmp):
    name = "numpy"
    try:
        import numpy as np
    except ImportError as e:
        fail(name, "cannot import numpy: %r" % e)
        return
    path = os.path.join(tmp, "array.f64")
    a = np.arange(n, dtype=np.float64) * 1.5 + 0.5
    note_far(name, "ndarray", a)
    want_sum = 1.5 * (n * (n - 1) // 2) + 0.5 * n  # exact: multiples of 0.5 below 2**52
    a.tofile(path)
    if os.path.getsize(path) != n * 8:
        fail(name, "tofile wrote %d bytes, want %d" % (os.path.getsize(path), n * 8))
        return
    del a
    b = np.fromfile(path, dtype=np.float64)
    note_far(name, "fromfile ndarray", b)
    idx = np.arange(n, dtype=np.float64)
    if b.shape != (n,) or not np.array_equal(b, idx * 1.5 + 0.5):
        bad = int(np.count_nonzero(b != idx * 1.5 + 0.5)) if b.shape == (n,) else -1
        fail(name, "fromfile: %d of %d elements differ (shape %r)" % (bad, n, b.shape))
        return
    if float(b.sum()) != want_sum:
        fail(name, "fromfile: sum %r, want %r" % (float(b.sum()), want_sum))
        return
    del b, idx
    print("numpy ok: tofile/fromfile of %d MiB, every element and the sum checked" % (n * 8 // MIB), flush=True)

    m = np.memmap(path, dtype=np.float64, mode="r")
    step = 4099
    if m.shape != (n,) or not np.array_equal(m[::step], np.arange(0, n, step, dtype=np.float64) * 1.5 + 0.5):
        fail(name, "memmap of the file: sampled elements differ")
        return
    if float(m.sum()) != want_sum:
        fail(name, "memmap of the file: sum %r, want %r" % (float(m.sum()), want_sum))
        return
    c = np.array(m)  # a far copy of the mapped file
    note_far(name, "copy of the memmap", c)
    if float(c.sum()) != want_sum:
        fail(name, "copy of the memmap: sum %r, want %r" % (float(c.sum()), want_sum))
        return
    del m, c

    path2 = os.path.join(tmp, "written.i64")
    w = np.memmap(path2, dtype=np.int64, mode="w+", shape=(n // 2,))
    w[:] = np.arange(n // 2, dtype=np.int64) * 3 - 7
    w.flush()
    del w
    r = np.fromfile(path2, dtype=np.int64)
    if r.shape != (n // 2,) or not np.array_equal(r, np.arange(n // 2, dtype=np.int64) * 3 - 7):
        fail(name, "memmap w+: the file read back with fromfile differs")
        return
    del r
    os.unlink(path)
    os.unlink(path2)
    print("numpy ok: memmap read (sampled + sum) and memmap w+ written and read back", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=96, help="socket and getrandom buffers")
    ap.add_argument("--numpy-mib", type=int, default=128, help="the numpy array")
    ap.add_argument("--require-far", action="store_true")
    ap.add_argument("--only", help="comma-separated sections to run")
    a = ap.parse_args()
    size = a.size_mib * MIB
    sections = ["sendmsg", "sendfile", "getrandom", "numpy"]
    if a.only:
        sections = [s for s in sections if s in a.only.split(",")]
    with tempfile.TemporaryDirectory(prefix="farmem-python-io-") as tmp:
        for s in sections:
            t0 = time.monotonic()
            try:
                if s == "sendmsg":
                    section_sendmsg(size)
                elif s == "sendfile":
                    section_sendfile(size, tmp)
                elif s == "getrandom":
                    section_getrandom(size)
                elif s == "numpy":
                    section_numpy(a.numpy_mib * MIB // 8, tmp)
            except Exception as e:
                fail(s, "raised %r\n%s" % (e, traceback.format_exc()))
            print("%s took %.2f s" % (s, time.monotonic() - t0), flush=True)
    for section, what, far in far_checks:
        print("far %s %s: %s" % (section, what, {None: "no shim", 0: "0 (local)", 1: "1"}.get(far, far)))
        if a.require_far and far != 1:
            fail(section, "%s is not far memory (fm_is_far says %r)" % (what, far))
    if failures:
        print("python io FAILED: %d problem(s): %s" % (len(failures), "; ".join(f.splitlines()[0] for f in failures)))
        return 1
    print("python io OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
