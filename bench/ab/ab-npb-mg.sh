#!/usr/bin/env bash
# NPB MG (the seeds' OpenMP sweep) at half its footprint on every page path,
# in one run, alternating: an OLD tree's default path, and this tree's
# sockets, memory files (the embedded server), memory files through a
# loopback TCP server's side door, and UCX's posix test path on that server.
# All-local first, and the footprint from its peak RSS (GNU time).
# usage: bench/ab/ab-npb-mg.sh MG_BINARY OLD_TREE [RUNS=2] [PERCENT=50]
#   MG_BINARY: NPB's mg (for example NPB-CPP's NPB-OMP: `make mg CLASS=B`,
#   then NPB-OMP/bin/mg.B); NPB is fetched, never copied here.
#   OLD_TREE: `git worktree add /tmp/old COMMIT`, built with cargo build --release.
set -euo pipefail
cd "$(dirname "$0")/../.."
MG=$(realpath "$1"); OLD=$(cd "$2" && pwd); RUNS=${3:-2}; PCT=${4:-50}
BENCH_COMMAND="bench/ab/ab-npb-mg.sh $*"
. bench/lib/results-dir.sh
results_dir ab-npb-mg
cargo build --release --quiet
NEW=$PWD/target/release
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
secret=$(mktemp -d)/secret
"$NEW/farmem" secret init --path "$secret" >/dev/null
"$NEW/farmem" serve --listen 127.0.0.1:0 --capacity 8G --secret-file "$secret" --log-level warn > "$R/serve.out" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$(dirname "$secret")"' EXIT
until grep -q listening "$R/serve.out"; do sleep 0.1; done
addr=$(sed -nE 's/.*listening on ([^ ]+).*/\1/p' "$R/serve.out")
secs() { grep -E 'Time in seconds' | awk '{print $NF}'; }
ok() { grep -qE 'Verification += +SUCCESSFUL' && echo verified || echo NOT-VERIFIED; }
out=$( { /usr/bin/time -v "$MG" ; } 2>&1 )
peak_kb=$(echo "$out" | awk -F: '/Maximum resident set size/ {gsub(/ /,"",$2); print $2}')
local_mb=$(( peak_kb * PCT / 100 / 1024 ))
echo "all-local: $(echo "$out" | secs) s, $(echo "$out" | ok), peak RSS $((peak_kb / 1024)) MiB; farmem runs at ${PCT}%: --local ${local_mb}M" | tee "$R/runs.txt"
sides=("old-default|$OLD/target/release|auto|" "socket|$NEW|socket|" "memfd|$NEW|auto|"
       "memfd-tcp|$NEW|memfd|$addr" "ucx|$NEW|ucx|$addr")
for r in $(seq "$RUNS"); do
    for s in "${sides[@]}"; do
        IFS='|' read -r name T tr srv <<<"$s"
        env=(FARMEM_TRANSPORT=$tr FARMEM_SECRET_FILE=$secret)
        [ -n "$srv" ] && env+=(FARMEM_SERVERS=$srv)
        o=$(env "${env[@]}" "$T/farmem" run --local "${local_mb}M" --stats -- "$MG" 2>&1)
        echo "$name run $r: $(echo "$o" | secs) s, $(echo "$o" | ok) | $(echo "$o" | grep -E '^ *(transport|fetched|fault latency)' | sed -E 's/ +/ /g' | tr '\n' ';')"
    done
done | tee -a "$R/runs.txt"
