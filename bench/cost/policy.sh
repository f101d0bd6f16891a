#!/usr/bin/env bash
# Prefetch and replacement policy on real programs, before and after in one
# run: the same program under an older farmem build (BEFORE, a farmem binary
# with its libfarmem_preload.so beside it) and under this one, on sockets and
# on UCX, with all-local beside them. The programs are fetched by you and
# built here:
#
#   git clone https://github.com/sbeamer/gapbs
#   git clone https://github.com/GMAP/NPB-CPP       # optional: NPB=... below
#   git worktree add /tmp/before <commit> && (cd /tmp/before && cargo build --release)
#   [NPB=NPB-CPP] [PROGRAMS="bfs pr mg cg"] \
#       bench/cost/policy.sh GAPBS_DIR /tmp/before/target/release/farmem [RUNS] [FRACTIONS]
#
# One build against itself under other settings: pass this tree's farmem as
# BEFORE and the settings in BEFORE_ENV, e.g.
#   BEFORE_ENV="FARMEM_RESERVE=0" bench/cost/policy.sh GAPBS_DIR target/release/farmem
#
# GAPBS bfs -g 21 -n 10 and pr -g 21 -n 3; with NPB set, NPB-CPP's OpenMP
# MG and CG class B too (built with its own Makefile, CLASS=B).
# FRACTIONS: local memory as percentages of the program's peak RSS (default
# "50"). Prints per program, fraction and transport: the program's own time
# (GAPBS's average trial time or NPB's "Time in seconds", median of RUNS)
# and wall time, all-local and before and after (with the wall time against
# all-local's, measured in the same run); bytes fetched; prefetched pages
# wasted (evicted unused, as a share of those prefetched); fault p50; the
# share of evictions made while the faulting thread's own fetch was on the
# wire ("-" for a build that does not count them).
set -euo pipefail
cd "$(dirname "$0")/../.."
GAPBS=${1:?GAPBS checkout}; BEFORE=${2:?farmem binary of the build to compare with}
RUNS=${3:-3}; FRACTIONS=${4:-50}
AFTER=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
med() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
make -C "$GAPBS" bfs pr >/dev/null
progs=(
    "bfs|$GAPBS/bfs -g 21 -n 10"
    "pr|$GAPBS/pr -g 21 -n 3"
)
if [ -n "${NPB:-}" ]; then
    for k in mg cg; do
        [ -x "$NPB/NPB-OMP/bin/$k.B" ] || make -C "$NPB/NPB-OMP" "$k" CLASS=B >/dev/null
    done
    progs+=("mg|$NPB/NPB-OMP/bin/mg.B" "cg|$NPB/NPB-OMP/bin/cg.B")
fi
# GAPBS prints "Average Time:", NPB " Time in seconds =".
metric() { sed -nE "s/.*(Average Time:|Time in seconds =) *([0-9.]+).*/\2/p" | tail -1; }
echo "program | local | transport | all-local: trial s, wall s | before: trial s, wall s (x all-local wall), fetched, wasted, p50, evictions overlapped | after: the same"
for p in "${progs[@]}"; do
    IFS='|' read -r name cmd <<<"$p"
    case " ${PROGRAMS:-bfs pr mg cg} " in *" $name "*) ;; *) continue ;; esac
    ts=(); ws=(); rss=0
    for r in $(seq "$RUNS"); do
        o=$( { /usr/bin/time -f "RSS %M WALL %e" $cmd; } 2>&1)
        ts+=("$(echo "$o" | metric)")
        rss=$(echo "$o" | awk '/^RSS/ {print $2}')
        ws+=("$(echo "$o" | awk '/^RSS/ {print $4}')")
    done
    local_s=$(printf '%s\n' "${ts[@]}" | med)
    local_w=$(printf '%s\n' "${ws[@]}" | med)
    for f in $FRACTIONS; do
        loc=$((rss * f / 100))K
        for t in socket ucx; do
            row="$name | $f% ($((rss * f / 100 / 1024))M) | $t | $local_s, $local_w"
            for side in before after; do
                F=$AFTER; envs=()
                if [ $side = before ]; then
                    F=$BEFORE
                    [ -z "${BEFORE_ENV:-}" ] || read -ra envs <<<"$BEFORE_ENV"
                fi
                ts=(); ws=(); outs=()
                for r in $(seq "$RUNS"); do
                    o=$( { /usr/bin/time -f "WALL %e" env "${envs[@]}" "$F" run --local "$loc" --transport "$t" --stats -- $cmd; } 2>&1)
                    ts+=("$(echo "$o" | metric)"); ws+=("$(echo "$o" | awk '/^WALL/ {print $2}')")
                    outs+=("$o")
                done
                s=$(printf '%s\n' "${ts[@]}" | med); w=$(printf '%s\n' "${ws[@]}" | med)
                last=${outs[-1]}
                fetched=$(echo "$last" | awk '/fetched from backend/ {print $4}')
                waste=$(echo "$last" | awk '/prefetched \(used/ {gsub(/[()]/,""); if ($5>0) printf "%d/%d=%.0f%%", $8, $5, 100*$8/$5; else print "0"}')
                p50=$(echo "$last" | awk '/fault latency/ {print $4}')
                ovl=$(echo "$last" | awk '/evicted pages/ {gsub(/[()]/,""); if (NF >= 5 && $3 > 0) printf "%.0f%%", 100*$4/$3; else print "-"}')
                x=$(awk -v a="$w" -v b="$local_w" 'BEGIN {printf "%.1f", a / b}')
                row="$row | $s, $w (${x}x), $fetched, $waste, $p50, $ovl"
            done
            echo "$row"
        done
    done
done
