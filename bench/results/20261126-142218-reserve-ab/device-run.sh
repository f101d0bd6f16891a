#!/bin/bash
# Device check: the free reserve (FARMEM_RESERVE 0 vs 64) with the memory
# server on cores of its own (as on a cluster), the program on two cores.
cd "$(dirname "$0")"
export OMP_NUM_THREADS=2
nproc; grep -m1 "model name" /proc/cpuinfo; uname -r
ldd ./bfs ./mg.B ./farmem | grep "not found"
./farmem secret init --path /tmp/sec >/dev/null 2>&1 || true
taskset -c 8-11 ./farmem serve --capacity 8G --listen 127.0.0.1:7070 --secret-file /tmp/sec >/tmp/serve.log 2>&1 &
sleep 1
run() { # name local reserve cmd...
    local name=$1 loc=$2 res=$3; shift 3
    local o
    o=$( { /usr/bin/time -f "WALL %e" env FARMEM_SECRET_FILE=/tmp/sec FARMEM_RESERVE=$res taskset -c 0-1 ./farmem run --servers 127.0.0.1:7070 --transport socket --local "$loc" --stats -- "$@"; } 2>&1)
    echo "$name reserve=$res: wall $(echo "$o" | awk '/^WALL/ {print $2}') kernel $(echo "$o" | sed -nE 's/.*(Average Time:|Time in seconds =) *([0-9.]+).*/\2/p' | tail -1) | $(echo "$o" | grep -E 'evicted pages|fault latency|fetched from' | tr -s ' ' | tr '\n' ';')"
    echo "$o" | grep -iE "error|farmem:" | head -3
}
for prog in "bfs|279M|./bfs -g 21 -n 10" "mg|217M|./mg.B"; do
    IFS='|' read -r name loc cmd <<<"$prog"
    o=$( { /usr/bin/time -f "WALL %e" taskset -c 0-1 $cmd; } 2>&1)
    echo "$name all-local: wall $(echo "$o" | awk '/^WALL/ {print $2}')"
    for r in 1 2; do
        for res in 0 64; do run "$name" "$loc" "$res" $cmd; done
    done
done
cat /tmp/serve.log | tail -3
