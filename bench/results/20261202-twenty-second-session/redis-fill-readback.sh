#!/usr/bin/env bash
# redis filled to ~600 MB and read back under farmem run --local 128M, unix socket only.
set -u
FM=${FM:-/work/main/target/release/farmem}
D=/tmp/redis-t   # the Python below connects to $D/redis.sock by this path
mkdir -p $D
rm -f $D/redis.sock $D/dump.rdb
$FM run --local 128M --stats -- redis-server --port 0 --unixsocket $D/redis.sock --save '' --appendonly no --dir $D > $D/redis.out 2>&1 &
pid=$!
for i in $(seq 100); do [ -S $D/redis.sock ] && break; sleep 0.2; done
python3 - <<'PY'
import socket, hashlib
s = socket.socket(socket.AF_UNIX); s.connect("/tmp/redis-t/redis.sock")
f = s.makefile("rb")
def cmd_batch(cmds):
    out = b"".join(b"*%d\r\n" % len(c) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in c) for c in cmds)
    s.sendall(out)
def read_reply():
    l = f.readline()
    if l[:1] == b"$":
        n = int(l[1:-2]); 
        if n < 0: return None
        d = f.read(n + 2)[:-2]; return d
    return l
N = 150000
def val(i): return (hashlib.sha256(str(i).encode()).digest() * 128)[:4000]
for b in range(0, N, 1000):
    cmd_batch([[b"SET", b"k%d" % i, val(i)] for i in range(b, b + 1000)])
    for _ in range(1000): assert read_reply() == b"+OK\r\n"
bad = 0
for b in range(0, N, 1000):
    cmd_batch([[b"GET", b"k%d" % i] for i in range(b, b + 1000)])
    for i in range(b, b + 1000):
        if read_reply() != val(i): bad += 1
cmd_batch([[b"INFO", b"memory"]]); info = read_reply()
print("keys", N, "mismatches", bad, [l for l in info.split(b"\r\n") if l.startswith(b"used_memory_rss_human") or l.startswith(b"used_memory_human")])
PY
echo "== ss -ltnp while paging"; ss -ltnp | grep -v "^State" || echo "(no TCP listeners)"
echo "== ss -lxp of the program"; ss -lxp | grep -E "redis|farmem" | head
redis-cli -s $D/redis.sock shutdown nosave >/dev/null 2>&1
wait $pid
grep -E "fetched from|written back|resident / budget|faults \(missing" $D/redis.out
