#!/usr/bin/env bash
# What watching costs a paging program: memwrite 1 GiB at 4x (--local 256M)
# through a `farmem serve --metrics` on loopback (sockets, so that every page
# passes through the server's connection threads), three ways, alternating:
#   quiet   nobody watching
#   stat    `farmem stat --watch 1` reading the program's counters
#   scrape  a Prometheus-style GET /metrics every second
# Prints MB/s of each write pass and the wall time of each run.
# usage: bench/cost/observe-overhead.sh [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
FM=$PWD/target/release/farmem
MW=$PWD/target/release/workloads/memwrite
cargo build --release --quiet
make -s -C workloads >/dev/null
PORT=$((20000 + RANDOM % 20000))
MPORT=$((PORT + 1))
"$FM" serve --listen 127.0.0.1:$PORT --capacity 4G --metrics $MPORT --log-level warn >/dev/null &
SERVER=$!
WATCH=
trap 'kill $SERVER ${WATCH:-} 2>/dev/null || true' EXIT
sleep 0.5
# A scraper in Python (no curl needed): GET /metrics once a second.
cat > "${TMPDIR:-/tmp}/farmem-scrape.py" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
while True:
    t = time.time()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    while s.recv(65536):
        pass
    s.close()
    time.sleep(max(0.0, 1.0 - (time.time() - t)))
PY
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); commit $(git rev-parse --short HEAD)"
for r in $(seq "$RUNS"); do
    for how in quiet stat scrape; do
        WATCH=
        case $how in
            stat) "$FM" stat --watch 1 >/dev/null & WATCH=$! ;;
            scrape) python3 "${TMPDIR:-/tmp}/farmem-scrape.py" "$MPORT" & WATCH=$! ;;
        esac
        t0=$(date +%s.%N)
        passes=$(FARMEM_SERVERS=127.0.0.1:$PORT FARMEM_TRANSPORT=socket \
            "$FM" run --local 256M -- "$MW" --size 1024 --passes 3 2>&1 |
            grep -E 'pass=' | awk '{printf "%s ", $4}')
        t1=$(date +%s.%N)
        [ -n "$WATCH" ] && { kill $WATCH 2>/dev/null || true; wait $WATCH 2>/dev/null || true; }
        printf '%-6s run %d: MB/s per pass %s wall %s s\n' $how "$r" "$passes" "$(awk "BEGIN {printf \"%.2f\", $t1 - $t0}")"
    done
done
curl -s 127.0.0.1:$MPORT/metrics 2>/dev/null | grep -E '^farmem_(requests_total\{op="(read|write)"\}|sent_bytes_total|received_bytes_total)' || true
