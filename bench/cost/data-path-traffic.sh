#!/usr/bin/env bash
# Far traffic and time of three workloads' timed regions under `farmem run`
# (each prints a `timed` line: bytes fetched and written back between the
# start and the end of its timed loop, set-up and result check excluded).
#   stencil7 temporal, 512M of grids at 4x (128M local)
#   qsort of 256M of keys (512M with glibc's merge buffer) at 6x (85M local)
#   pagerank over a 512M graph at 2x (256M local), with its hot/stream sizes
# usage: bench/cost/data-path-traffic.sh [RUNS=1]   (after cargo build --release
# and make -C workloads)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
B=target/release/workloads
F=target/release/farmem
keep() { grep -E '^(timed|result)' | sed -E 's/ (check|variant|n|steps|T|block|block_from|budget|buffer_bytes|check_by|vertices|edges|degree|iterations|dangling|rank_sum|checksum|ref_checksum|max_rel_err)=[^ ]*//g' | tr '\n' ' '; echo; }
for _ in $(seq "$RUNS"); do
    echo -n "stencil7: "; $F run --local 128M -- $B/stencil7 512M temporal 2>&1 | keep
    echo -n "qsort:    "; $F run --local 85M -- $B/qsort 256M 2>&1 | keep
    echo -n "pagerank: "; $F run --local 256M -- $B/pagerank 512M 5 2>&1 | keep
done
