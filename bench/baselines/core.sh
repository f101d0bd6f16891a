#!/usr/bin/env bash
# Core benchmark (issue: far-memory core), all systems in one run:
#   1. writemem/reread (Nuzura's test; memwrite.c) at EXPANSION x over the
#      local budget: all-local, farmem (embedded loopback server), Linux swap
#      (cgroup v1 memory limit + swap file), side by side, with ratios;
#   2. random 4 KiB far-fault latency next to native first touch (faultlat.c).
# usage: bench/baselines/core.sh [SIZE_MB=1024] [EXPANSION=4]      (root; Linux swap needs it)
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZE=${1:-1024}
EXP=${2:-4}
LOCAL=$((SIZE / EXP))
PASSES=3
T=target/release
[ -e $T/libfarmem.so ] || cargo build --release --quiet
for p in memwrite faultlat; do
    gcc -O2 -Wall -Wextra -Werror -Iinclude workloads/$p.c -L$T -lfarmem -Wl,-rpath,"$PWD/$T" -o $T/$p
done

CG=/sys/fs/cgroup/memory/farmem-bench-$$
SWAP=/var/tmp/farmem-bench-$$.swap
cleanup() {
    swapoff "$SWAP" 2>/dev/null || true
    rm -f "$SWAP"
    [ -d "$CG" ] && rmdir "$CG" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "workload: memwrite --size ${SIZE}M --passes $PASSES (write 4 B per 64 B line; then reread and check)"
echo "local budget: ${LOCAL}M (${EXP}x expansion)"
echo

run() { # name, command...: prints "name pass mbps" lines
    local name=$1; shift
    "$@" | awk -v n="$name" '/^pass=/ { split($1,a,"="); split($2,k,"="); split($4,m,"="); print n, a[2], k[2], m[2] } /^check=/ { if ($0 != "check=ok") { print "CHECK FAILED in " n > "/dev/stderr"; exit 1 } }'
}

R=$(mktemp)
run local $T/memwrite --size "$SIZE" --passes $PASSES --alloc mmap >>"$R"
FARMEM_LOCAL=${LOCAL}M run farmem $T/memwrite --size "$SIZE" --passes $PASSES --alloc farmem >>"$R"

swap_ok=0
if [ "$(id -u)" = 0 ] && [ -d /sys/fs/cgroup/memory ]; then
    if fallocate -l $((SIZE * 2))M "$SWAP" && chmod 600 "$SWAP" && mkswap -q "$SWAP" && swapon "$SWAP"; then
        mkdir -p "$CG"
        echo $((LOCAL * 1024 * 1024)) >"$CG/memory.limit_in_bytes"
        run swap bash -c "echo \$\$ > $CG/tasks; exec $T/memwrite --size $SIZE --passes $PASSES --alloc mmap" >>"$R"
        swap_ok=1
    fi
fi
[ $swap_ok = 1 ] || echo "(Linux swap baseline skipped: needs root, cgroup v1 memory controller and swapon)"

awk -v swap=$swap_ok '
{ v[$1, $2] = $4; kind[$2] = $3; if ($2 > np) np = $2 }
END {
    printf "%-6s %-7s %12s %12s %12s %14s %14s\n", "pass", "kind", "local MB/s", "farmem MB/s", "swap MB/s", "farmem/local", "farmem/swap"
    for (p = 1; p <= np; p++) {
        s = swap ? sprintf("%12.0f", v["swap", p]) : sprintf("%12s", "-")
        r = swap ? sprintf("%13.1fx", v["farmem", p] / v["swap", p]) : sprintf("%14s", "-")
        printf "%-6d %-7s %12.0f %12.0f %s %13.2fx %s\n", p, kind[p], v["local", p], v["farmem", p], s, v["farmem", p] / v["local", p], r
    }
}' "$R"
rm -f "$R"
echo
echo "random 4 KiB far faults, embedded server (Unix socket) (faultlat, FARMEM_LOCAL=320M):"
FARMEM_LOCAL=320M $T/faultlat 20000
echo
echo "random 4 KiB far faults, farmem serve over TCP loopback:"
PORT=$((20000 + $$ % 20000))
$T/farmem serve --listen 127.0.0.1:$PORT --capacity 4G >/dev/null &
SERVE=$!
sleep 0.5
FARMEM_LOCAL=320M FARMEM_SERVERS=127.0.0.1:$PORT $T/faultlat 20000 || true
kill $SERVE; wait $SERVE 2>/dev/null || true
