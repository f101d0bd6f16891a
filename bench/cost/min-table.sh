#!/usr/bin/env bash
# Pages brought in against Belady's MIN, per program, from policy traces:
# each program runs twice on a small input, once at LOCAL% of its footprint
# with farmem's policy (`--trace run`), once with prefetch off at the
# smallest budget (`--trace refs`, its page reference string), and
# `farmem trace run --refs refs` replays the references under MIN at the
# run's budget. GAPBS (and NPB-CPP, optional) are fetched by you (see
# bench/cost/policy.sh); NPB's kernels NPB_KERNELS (default "mg.W cg.W";
# "mg.B" adds a row of about three minutes) are built here. Where Debian's
# memcached is installed, a last row runs it storing and reading back
# MC_MIB (default 64) MiB of items (tests/clients/memcache_check.py) at
# MC_PERCENT (default 25) of its footprint, as bench/baselines/real-programs.sh does
# at 1 GiB.
#
#   [NPB=NPB-CPP] [NPB_KERNELS="mg.W cg.W"] [MC_MIB=64] [MC_PERCENT=25] [ROWS="bfs memcached"] \
#       bench/cost/min-table.sh GAPBS_DIR [LOCAL_PERCENT]
set -euo pipefail
cd "$(dirname "$0")/../.."
GAPBS=${1:?GAPBS checkout}; PCT=${2:-50}
BENCH_COMMAND="NPB=${NPB:-} NPB_KERNELS=\"${NPB_KERNELS:-}\" ROWS=\"${ROWS:-}\" bench/cost/min-table.sh $*"
. bench/lib/results-dir.sh
results_dir min-table
keep_output
F=$PWD/target/release/farmem
W=$PWD/target/release/workloads
export OMP_NUM_THREADS=2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
progs=(
    "bfs -g 16|$GAPBS/bfs -g 16 -n 2"
    "pr -g 16|$GAPBS/pr -g 16 -n 2"
    "qsort 16M|$W/qsort 16777216"
    # A fixed block: by default stencil7 sizes its blocks from FARMEM_LOCAL,
    # and the reference run's 1M budget would make it another program (one
    # plane a block) than the run MIN is compared with.
    "stencil7 16M|$W/stencil7 16777216 temporal 4 4 --block 18"
)
if [ -n "${NPB:-}" ]; then
    . bench/lib/npb.sh
    for kc in ${NPB_KERNELS:-mg.W cg.W}; do
        bin=$(npb_binary "$NPB" "$kc")
        progs+=("${kc%.*} ${kc#*.}|$bin")
    done
fi
# memcached under PREFIX... (none: all-local), loaded and read back by the
# checking client; prints its peak RSS in KiB.
mc() {
    local port=$((25000 + RANDOM % 2000)) pid rss
    "$@" memcached -u root -l 127.0.0.1 -p $port -U 0 -t 2 -m $((MC_MIB * 2)) >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
        sleep 0.1
    done
    python3 tests/clients/memcache_check.py --port $port load-verify --total-mib "$MC_MIB" >/dev/null
    # Under farmem run the server is farmem's child: its peak is the one read.
    rss=$(awk '/VmHWM/ {print $2}' /proc/"$(pgrep -n -P $pid memcached || echo $pid)"/status)
    kill -TERM $pid
    wait $pid || true
    echo "$rss"
}
MC_MIB=${MC_MIB:-64}; MC_PERCENT=${MC_PERCENT:-25}
if command -v memcached >/dev/null; then
    progs+=("memcached ${MC_MIB}M|mc")
else
    echo "memcached not installed: no memcached row (scripts/setup.sh installs it)" >&2
fi
ROWS=${ROWS:-}
echo "program | local | references (pages) | MIN | LRU seeing every hit (x MIN) | farmem brought in (x MIN) | replayed policy (x MIN) | prefetch wasted"
for p in "${progs[@]}"; do
    IFS='|' read -r name cmd <<<"$p"
    # ROWS="bfs memcached": only the rows whose names start so.
    if [ -n "$ROWS" ] && ! printf '%s\n' $ROWS | grep -qx "${name%% *}"; then
        continue
    fi
    if [ "$cmd" = mc ]; then
        rss=$(mc)
        loc=$((rss * MC_PERCENT / 100))K
        mc $F run --local "$loc" --trace "$T/run" -- >/dev/null
        # Its reference run needs 4M, not 1M: a multi-get of 20 items hands
        # the kernel up to 2.5M of far memory in one sendmsg, which must be
        # pinned (at most 3/4 of the budget). References to the last ~1,000
        # pages touched are hidden instead of the last ~256: MIN over what
        # is left is still a lower bound (dropping references never makes
        # MIN fetch more), so the ratio errs against farmem.
        FARMEM_PREFETCH=0 mc $F run --local 4M --trace "$T/refs" -- >/dev/null
    else
        rss=$( { /usr/bin/time -f "RSS %M" $cmd >/dev/null; } 2>&1 | awk '/^RSS/ {print $2}')
        loc=$((rss * PCT / 100))K
        $F run --local "$loc" --trace "$T/run" -- $cmd >/dev/null 2>&1
        FARMEM_PREFETCH=0 $F run --local 1M --trace "$T/refs" -- $cmd >/dev/null 2>&1
    fi
    o=$($F trace "$T/run" --refs "$T/refs")
    refs=$(echo "$o" | sed -nE 's/.*: ([0-9]+) references to ([0-9]+) pages.*/\1 (\2)/p')
    min=$(echo "$o" | awk '/Belady/ {print $4}')
    run=$(echo "$o" | awk '/this run brought in/ {print $5, $(NF-1)}')
    lru=$(echo "$o" | awk -v m="$min" '/LRU seeing every hit/ {printf "%s %.2fx", $5, $5 / m}')
    rep=$(echo "$o" | awk -v m="$min" '/policy, replayed/ {printf "%s %.2fx", $4, $4 / m}')
    waste=$(echo "$o" | sed -nE 's/.*\(([0-9]+%) of prefetched pages wasted\).*/\1/p')
    echo "$name | $loc | $refs | $min | $lru | $run | $rep | $waste"
done
