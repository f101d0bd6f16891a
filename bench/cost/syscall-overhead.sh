#!/usr/bin/env bash
# The cost of farmem's system-call wrappers on a syscall-heavy server:
# memcached under memcslap (4 threads, small items, every request a few
# system calls), all-local against `farmem run` with a budget larger than
# the data (so no page ever moves: what is left is the wrappers and the
# raw-call net), rounds interleaved, medians printed. memcached first
# stores 64 MiB of 64 KiB items so its slabs are far memory under farmem.
#
#   bench/cost/syscall-overhead.sh [ROUNDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}
F=$PWD/target/release/farmem
PY=/usr/bin/python3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

wait_port() {
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

one() {
    local port=$((25000 + RANDOM % 2000))
    "$@" memcached -u root -l 127.0.0.1 -p $port -U 0 -t 1 -m 1024 >/dev/null 2>&1 &
    local pid=$!
    wait_port $port
    $PY tests/clients/memcache_check.py --port $port load-verify --total-mib 64 >/dev/null
    timeout 120 memcslap --servers=127.0.0.1:$port --concurrency=1 --execute-number=50000 \
        --test=get >"$OUT/slap" 2>&1 || true
    kill -TERM $pid; wait $pid 2>/dev/null || true
    awk '/Time to get/ {print $(NF-1)}' "$OUT/slap" | head -1
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

: >"$OUT/local"; : >"$OUT/farmem"; : >"$OUT/allow"
for _ in $(seq "$ROUNDS"); do
    one >>"$OUT/local"
    one "$F" run --local 2G -- >>"$OUT/farmem"
    FARMEM_RAW_SYSCALLS=allow one "$F" run --local 2G -- >>"$OUT/allow"
done
l=$(median <"$OUT/local"); f=$(median <"$OUT/farmem"); a=$(median <"$OUT/allow")
echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs, $ROUNDS rounds, memcslap: 50000 gets, 1 client thread"
echo "all-local                          median $l s   ($(tr '\n' ' ' <"$OUT/local"))"
echo "farmem run --local 2G              median $f s   ($(tr '\n' ' ' <"$OUT/farmem"))"
echo "  same, FARMEM_RAW_SYSCALLS=allow  median $a s   ($(tr '\n' ' ' <"$OUT/allow"))"
awk -v l="$l" -v f="$f" -v a="$a" 'BEGIN {printf "overhead: %+.1f%% (net on), %+.1f%% (net off)\n", (f/l-1)*100, (a/l-1)*100}'
