#!/usr/bin/env bash
# Sockets against UCX one-sided pages, side by side in one run, median of
# RUNS (default 3): quiet and two-thread fault latency (workloads/faultlat),
# memwrite 1 GiB at 4x (256M local), the memory server's CPU per page moved,
# a pointer chase and random reads against zram (`farmem bench`), and
# `ucx_perftest -t ucp_get -s 4096` on each of UCX's transports here as
# the transport's own ceiling. Run as root on a quiet machine (no builds or
# tests beside it: 2 vCPUs). usage: bench/cluster/transport.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
FM=target/release/farmem
W=target/release/workloads
med() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "# machine: $(nproc) vCPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), UCX $(ucx_info -v | awk '/version/ {print $4; exit}')"

echo "## faultlat (random 4 KiB far faults; p50/p99 us), embedded server, median of $RUNS"
for t in socket ucx; do
    for r in $(seq "$RUNS"); do
        FARMEM_TRANSPORT=$t $FM run --local 320M -- $W/faultlat 2>&1 | grep -E "^far fetch" >"/tmp/fl-$t-$r.txt"
    done
    for row in "far fetch, read (no eviction)" "far fetch + evict, read (4x)" "far fetch + evict, 2 threads (4x)"; do
        p50=$(cat /tmp/fl-$t-*.txt | grep -F "$row" | sed -E 's/.*p50= *([0-9.]+).*/\1/' | med)
        p99=$(cat /tmp/fl-$t-*.txt | grep -F "$row" | sed -E 's/.*p99= *([0-9.]+).*/\1/' | med)
        echo "$t | $row | $p50 | $p99"
    done
done

echo "## memwrite 1 GiB at 4x (256M local): MB/s per pass, median of $RUNS"
for t in socket ucx; do
    for r in $(seq "$RUNS"); do
        FARMEM_TRANSPORT=$t $FM run --local 256M -- $W/memwrite --size 1024 --passes 3 2>&1 | grep -iE "pass|reread" >"/tmp/mw-$t-$r.txt" || true
    done
    echo "$t:"; cat /tmp/mw-$t-1.txt
    for r in $(seq 2 "$RUNS"); do echo "  run $r:"; cat /tmp/mw-$t-$r.txt; done
done

echo "## memory server CPU per page moved (memwrite 1 GiB at 4x, one farmem serve on a Unix socket)"
for t in socket ucx; do
    sock="unix:@farmem-bench-cpu-$$-$t"
    $FM serve --listen "$sock" --capacity 4G >/dev/null 2>&1 &
    spid=$!
    sleep 0.5
    c0=$(awk '{print $14+$15}' /proc/$spid/stat)
    out=$(FARMEM_TRANSPORT=$t $FM run --local 256M --stats --servers "$sock" -- $W/memwrite --size 1024 --passes 3 2>&1)
    c1=$(awk '{print $14+$15}' /proc/$spid/stat)
    kill $spid; wait $spid 2>/dev/null || true
    tick=$(getconf CLK_TCK)
    fetched=$(echo "$out" | awk '/fetched from backend/ {print $4}')
    written=$(echo "$out" | awk '/written back/ {print $3}')
    echo "$t: server CPU $(echo "($c1-$c0)/$tick" | bc -l | cut -c1-6) s; fetched $fetched; written back $written; $(echo "$out" | grep -E '^ +transport')"
done

echo "## pointer chase over 512 MiB at 4x (one dependent load per random page, 400k loads) against zram (farmem bench -- CMD), median of $RUNS"
for t in socket ucx; do
    echo "### $t"
    FARMEM_TRANSPORT=$t $FM bench --expansion 4 --systems local,farmem,zram --runs "$RUNS" -- $W/chase 536870912 4k 400000 2>&1 | tail -6
done

echo "## ucx_perftest -t ucp_get -s 4096 (the transport's ceiling)"
for tls in posix sysv tcp; do
    UCX_TLS=$tls,self ucx_perftest -t ucp_get -s 4096 -n 20000 >/tmp/perf-srv-$tls.txt 2>&1 &
    spid=$!
    sleep 1
    line=$(UCX_TLS=$tls,self timeout 60 ucx_perftest 127.0.0.1 -t ucp_get -s 4096 -n 20000 2>&1 | grep -E "^ +Final:|Final" | tail -1 || true)
    kill $spid 2>/dev/null; wait $spid 2>/dev/null || true
    echo "$tls: $line"
done
