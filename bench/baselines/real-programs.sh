#!/usr/bin/env bash
# memcached and redis-server from Debian: all-local, and under `farmem run`
# with a budget larger than their data (the cost of the wrappers on a
# syscall-heavy server) and with a quarter of their footprint. One run,
# side by side. Prints one table; the raw logs stay in $OUT.
#
#   bench/baselines/real-programs.sh [OUT_DIR]   (default bench/results/DATE-real-programs,
#   with RUN.md: the command, the commit, the machine)
#
# memcached: 1 GiB of 64-128 KiB items stored and read back by
# tests/clients/memcache_check.py (every byte checked), then memcslap
# (4 threads, small items: syscall-bound). redis: 512 MiB of 64 KiB values
# (tests/clients/redis_check.py), then redis-benchmark GET/SET with
# 64-byte values (syscall-bound).
set -euo pipefail
BENCH_COMMAND="$0 $*"
cd "$(dirname "$0")/../.."
. bench/lib/results-dir.sh
RESULTS_DIR=${1:-${RESULTS_DIR:-}} results_dir real-programs
OUT=$R
F=$PWD/target/release/farmem
PY=/usr/bin/python3
[ -x "$F" ] || { echo "build first: cargo build --release" >&2; exit 1; }
for b in memcached memcslap redis-server redis-benchmark; do
    command -v $b >/dev/null || { echo "missing $b (scripts/setup.sh installs it)" >&2; exit 1; }
done

wait_port() {
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "port $1 never opened" >&2
    return 1
}

# run_mc NAME PREFIX...: memcached under PREFIX (empty: all-local)
run_mc() {
    local label=$1; shift
    local name
    name=$(printf %s "$label" | tr -c 'a-zA-Z0-9' '_')
    local port=$((21000 + RANDOM % 2000))
    "$@" memcached -u root -l 127.0.0.1 -p $port -U 0 -t 2 -m 2048 >"$OUT/mc-$name.server" 2>&1 &
    local pid=$!
    wait_port $port
    $PY tests/clients/memcache_check.py --port $port load-verify --total-mib 1024 >"$OUT/mc-$name.client"
    timeout 120 memcslap --servers=127.0.0.1:$port --concurrency=4 --execute-number=20000 \
        --test=get >"$OUT/mc-$name.slap" 2>&1 || true
    kill -TERM $pid; wait $pid || true
    local store verify slap
    store=$(grep -o '([0-9.]* MiB/s)' "$OUT/mc-$name.client" | head -1 | tr -d '()' || true)
    verify=$(grep -o '([0-9.]* MiB/s)' "$OUT/mc-$name.client" | tail -1 | tr -d '()' || true)
    slap=$(awk '/Time to get/ {print $(NF-1)}' "$OUT/mc-$name.slap" | head -1)
    local fetched
    fetched=$(awk '/fetched from backend/ {print $NF}' "$OUT/mc-$name.server")
    printf "%-30s store %-14s verify %-14s memcslap get %6s s  fetched %s\n" \
        "memcached $label" "$store" "$verify" "${slap:-?}" "${fetched:--}"
}

run_redis() {
    local label=$1; shift
    local name
    name=$(printf %s "$label" | tr -c 'a-zA-Z0-9' '_')
    local port=$((23000 + RANDOM % 2000))
    local dir
    dir=$(mktemp -d)
    "$@" redis-server --port $port --save '' --appendonly no --dir "$dir" >"$OUT/redis-$name.server" 2>&1 &
    local pid=$!
    wait_port $port
    $PY tests/clients/redis_check.py --port $port load --keys 8192 >"$OUT/redis-$name.client"
    $PY tests/clients/redis_check.py --port $port verify --keys 8192 >>"$OUT/redis-$name.client"
    timeout 300 redis-benchmark -p $port -n 200000 -q -c 4 -t set,get -d 64 \
        >"$OUT/redis-$name.bench-small" 2>&1 || true
    redis-cli -p $port shutdown nosave >/dev/null 2>&1 || kill -TERM $pid
    wait $pid || true
    rm -rf "$dir"
    local w v s g
    w=$(grep -o '([0-9.]* MiB/s)' "$OUT/redis-$name.client" | head -1 | tr -d '()' || true)
    v=$(grep -o '([0-9.]* MiB/s)' "$OUT/redis-$name.client" | tail -1 | tr -d '()' || true)
    s=$(tr '\r' '\n' <"$OUT/redis-$name.bench-small" | awk '/^SET:/ {print $2}' | tail -1)
    g=$(tr '\r' '\n' <"$OUT/redis-$name.bench-small" | awk '/^GET:/ {print $2}' | tail -1)
    local fetched
    fetched=$(awk '/fetched from backend/ {print $NF}' "$OUT/redis-$name.server")
    printf "%-30s write %-14s verify %-14s 64B SET %9s GET %9s rps  fetched %s\n" \
        "redis $label" "$w" "$v" "${s:-?}" "${g:-?}" "${fetched:--}"
}

{
    echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs"
    run_mc local
    run_mc "farmem 2G (> data)" "$F" run --stats --local 2G --
    run_mc "farmem 256M (1/4)" "$F" run --stats --local 256M --
    run_redis local
    run_redis "farmem 2G (> data)" "$F" run --stats --local 2G --
    run_redis "farmem 128M (1/4)" "$F" run --stats --local 128M --
} | tee "$OUT/summary.txt"
