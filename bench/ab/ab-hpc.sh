#!/usr/bin/env bash
# The HPC programs of issue 42 under an OLD tree and this one, in one run,
# alternating, on the default page path (memory files from the embedded
# server): each NPB binary given and GAPBS BFS, all-local first (its time and
# peak RSS set the budget), then each side at PERCENT of that peak. Prints the
# program's own time, the bytes fetched, the faults and the pages each fault
# brought in (a stream split by kept pages comes in many short runs, and each
# run costs a fault, an install and an unmap), and the program's own check.
# usage: bench/ab/ab-hpc.sh OLD_TREE RUNS PERCENT PROGRAM...
#   OLD_TREE: `git worktree add /tmp/old COMMIT`, built with cargo build --release.
#   PROGRAM: an NPB binary (NPB-CPP's NPB-OMP, `make cg CLASS=B`: NPB-OMP/bin/cg.B)
#   or GAPBS's bfs (`make bfs` in a GAPBS checkout: GAPBS/bfs, run as `-g 20 -n 1 -v`).
#   Both are fetched, never copied here.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 4 ] || { echo "usage: $0 OLD_TREE RUNS PERCENT PROGRAM..." >&2; exit 2; }
OLD=$(cd "$1" && pwd); RUNS=$2; PCT=$3; shift 3
BENCH_COMMAND="bench/ab/ab-hpc.sh $OLD $RUNS $PCT $*"
. bench/lib/results-dir.sh
results_dir ab-hpc
cargo build --release --quiet
NEW=$PWD/target/release
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
args() { case $(basename "$1") in bfs|pr|cc|sssp|bc|tc) echo "-g 20 -n 1 -v";; *) echo "";; esac; }
secs() {
    local s
    s=$(grep -E 'Time in seconds' | awk '{print $NF}')
    [ -n "$s" ] && echo "$s" || echo "-"
}
wall() { awk '/Elapsed \(wall clock\)/ {print $NF}'; }
check() { grep -qE 'Verification( += +SUCCESSFUL|: +PASS)' && echo verified || echo NOT-VERIFIED; }
field() { sed -nE "s|^ *$1 +([^ ].*)\$|\\1|p" | head -1 | sed -E 's/ +/ /g'; }
for prog in "$@"; do
    P=$(realpath "$prog"); name=$(basename "$P")
    # shellcheck disable=SC2046
    out=$( { /usr/bin/time -v "$P" $(args "$P"); } 2>&1 )
    peak_kb=$(echo "$out" | awk -F: '/Maximum resident set size/ {gsub(/ /,"",$2); print $2}')
    local_mb=$(( peak_kb * PCT / 100 / 1024 ))
    echo "## $name: all-local $(echo "$out" | secs) s (wall $(echo "$out" | wall)), peak RSS $((peak_kb / 1024)) MiB; at ${PCT}%: --local ${local_mb}M"
    for r in $(seq "$RUNS"); do
        for side in old new; do
            T=$NEW; [ $side = old ] && T=$OLD/target/release
            # shellcheck disable=SC2046
            o=$( { /usr/bin/time -v "$T/farmem" run --local "${local_mb}M" --stats -- "$P" $(args "$P"); } 2>&1 )
            echo "$o" > "$R/$name-$side-$r.txt"
            f=$(echo "$o" | field 'faults \(missing / first write\)' | cut -d/ -f1 | tr -d ' ')
            pages=$(echo "$o" | field 'evicted pages' | cut -d' ' -f1)
            echo "$name $side run $r: $(echo "$o" | secs) s (wall $(echo "$o" | wall)), $(echo "$o" | check);" \
                "fetched $(echo "$o" | field 'fetched from backend'), missing faults $f," \
                "pages moved per fault (evicted / missing faults) $(awk -v p="$pages" -v f="$f" 'BEGIN { if (f > 0) printf "%.1f", p / f; else print "-" }')"
        done
    done
done | tee "$R/runs.txt"
