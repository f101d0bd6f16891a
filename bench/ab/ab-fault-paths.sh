#!/usr/bin/env bash
# The fault path on every page path, before and after, in one run: an OLD
# tree's sockets and its default (UCX shared memory, through the embedded
# server), and this tree's sockets, memory files (the embedded server, and
# a loopback TCP server with a shared secret through its side door) and UCX
# (its posix test path: that TCP server, the only kind that offers UCX
# now). Alternating, RUNS rounds.
#   faultlat 20000   random 4 KiB faults through the C API: p50/p99
#   memwrite 1G at 4x under `farmem run --local 256M`: MB/s per pass
# usage: bench/ab/ab-fault-paths.sh OLD_TREE [RUNS=2]
#   OLD_TREE: `git worktree add /tmp/old COMMIT`, built with cargo build --release.
set -euo pipefail
cd "$(dirname "$0")/../.."
OLD=$(cd "$1" && pwd); RUNS=${2:-2}
BENCH_COMMAND="bench/ab/ab-fault-paths.sh $*"
. bench/lib/results-dir.sh
results_dir ab-fault-paths
cargo build --release --quiet
make -C workloads >/dev/null
NEW=$PWD/target/release
W=$PWD/target/release/workloads
echo "old: $OLD ($(git -C "$OLD" rev-parse --short HEAD))  new: $(git rev-parse --short HEAD)" | tee -a "$R/RUN.md"
secret=$(mktemp -d)/secret
"$NEW/farmem" secret init --path "$secret" >/dev/null
"$NEW/farmem" serve --listen 127.0.0.1:0 --capacity 4G --secret-file "$secret" --log-level warn > "$R/serve.out" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$(dirname "$secret")"' EXIT
until grep -q listening "$R/serve.out"; do sleep 0.1; done
addr=$(sed -nE 's/.*listening on ([^ ]+).*/\1/p' "$R/serve.out")
# name | tree | transport | servers (empty: the embedded server)
sides=("socket-old|$OLD/target/release|socket|" "ucx-old|$OLD/target/release|auto|"
       "socket|$NEW|socket|" "memfd|$NEW|auto|" "memfd-tcp|$NEW|memfd|$addr" "ucx|$NEW|ucx|$addr")
for r in $(seq "$RUNS"); do
    for s in "${sides[@]}"; do
        IFS='|' read -r name T tr srv <<<"$s"
        env=(FARMEM_TRANSPORT=$tr FARMEM_SECRET_FILE=$secret)
        [ -n "$srv" ] && env+=(FARMEM_SERVERS=$srv)
        echo "faultlat $name $r: $(env "${env[@]}" FARMEM_LOCAL=320M LD_LIBRARY_PATH=$T "$W/faultlat" 20000 2>&1 \
            | grep -E '^far' | sed -E 's/ +/ /g; s/n=20000 //; s/p90=[ 0-9.]+us //' | tr '\n' ';')"
        echo "memwrite $name $r: $(env "${env[@]}" "$T/farmem" run --local 256M --stats -- "$W/memwrite" --size 1024 --passes 3 2>&1 \
            | grep -E 'pass=|^ *transport' | awk '/pass=/ {printf "%s ", $4} /transport/ {$1=""; printf "|%s", $0}')"
    done
done | tee "$R/runs.txt"
