#!/usr/bin/env bash
# Scale-out over emulated links (docs/benchmarks.md, "Scale-out").
#
#   bench/cluster/scaleout.sh fig3       one server on a 10 Gbit/s link: far
#                                throughput by transfer size (Nuzura Fig. 3)
#   bench/cluster/scaleout.sh workloads  the same link: writemem/reread and qsort at
#                                1.67x and 6x, each against all-local
#   bench/cluster/scaleout.sh scaling    1, 2 and 4 servers, each on a 2 Gbit/s link,
#                                the client on 5 Gbit/s: far throughput by
#                                transfer size, one curve per server count,
#                                and a sequential workload
#
# Hosts are network namespaces (scripts/netns-hosts.sh), rate-limited with
# tc tbf on both ends of each link. Open MPI starts the servers through a
# hostfile, as on a cluster; the client finds them with @DIR. Output goes to
# bench/results/DATE-scaleout/ (with RUN.md: command, commit, machine).
# Needs root, iproute2 and openmpi-bin.
set -euo pipefail
BENCH_COMMAND="$0 $*"
cd "$(dirname "$0")/../.."
. bench/lib/results-dir.sh
ROOT=$PWD
F=$ROOT/target/release/farmem
W=$ROOT/target/release/workloads
H=$ROOT/scripts/netns-hosts.sh
results_dir scaleout
OUT=$ROOT/$R
NAME=fmb
SECRET=/tmp/fmb-secret
mkdir -p "$OUT"
[ -x "$F" ] && [ -x "$W/memwrite" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 2; }
[ -f "$SECRET" ] || "$F" secret init --path "$SECRET" >/dev/null

MPIRUNS=()
cleanup() {
    for p in "${MPIRUNS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    bash "$H" down "$NAME"
}
trap cleanup EXIT

# start_job DIR FIRST COUNT: mpirun starts `farmem serve` on hosts
# sFIRST..s(FIRST+COUNT-1), publishing in DIR.
start_job() {
    local dir=$1 first=$2 count=$3 hosts
    rm -rf "$dir"
    hosts=$(mktemp)
    for i in $(seq "$first" $((first + count - 1))); do echo "10.77.0.$((10 + i)) slots=1"; done >"$hosts"
    ip netns exec "$NAME-c" mpirun --allow-run-as-root --oversubscribe \
        --mca plm_rsh_agent "$(bash "$H" agent "$NAME")" --hostfile "$hosts" -np "$count" \
        "$F" serve --capacity 3G --rendezvous "$dir" --secret-file "$SECRET" \
        >"/tmp/fmb-mpirun-$(basename "$dir").log" 2>&1 &
    MPIRUNS+=($!)
}

client() { ip netns exec "$NAME-c" env FARMEM_SECRET_FILE="$SECRET" "$@"; }

# The far-throughput table of a `farmem probe far --json` output.
far_table() {
    python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for t in r["far"]:
    print(f"{t['name']}: one-page round trip p50 {t['rtt']['p50_us']:.1f} us, p99 {t['rtt']['p99_us']:.1f} us")
    print("  transfer   read MB/s   write MB/s")
    for c in t["curve"]:
        kb = c["transfer_bytes"] // 1024
        size = f"{kb} KiB" if kb < 1024 else f"{kb // 1024} MiB"
        print(f"  {size:>8}   {c['read_mbps']:9.0f}   {c['write_mbps']:10.0f}")
PY
}

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" | tail -1; }

# local_vs_far LABEL LOCAL_BUDGET CMD...: the workload all-local, then under
# farmem with the budget; one line each with the ratio and bytes moved.
local_vs_far() {
    local label=$1 budget=$2
    shift 2
    local l f
    l=$(client "$@")
    f=$(client "$F" run --local "$budget" --servers "@/tmp/fmb-r1" -- "$@" 2>/dev/null)
    echo "$f" | grep -q "check=ok" || { echo "$label: check failed under farmem" >&2; echo "$f" >&2; exit 1; }
    local ls fs
    ls=$(echo "$l" | grep '^result' | field seconds)
    fs=$(echo "$f" | grep '^result' | field seconds)
    printf '%-28s local %7.2f s  farmem %7.2f s  = %5.2fx local   fetched %s B, written back %s B (timed region)\n' \
        "$label" "$ls" "$fs" "$(python3 -c "print($fs/$ls)")" \
        "$(echo "$f" | grep '^timed' | field fetched_bytes)" "$(echo "$f" | grep '^timed' | field written_back_bytes)"
    echo "$l" | { grep '^pass=' || true; } | sed 's/^/    local  /'
    echo "$f" | { grep '^pass=' || true; } | sed 's/^/    farmem /'
}

case "${1:-}" in
    fig3)
        bash "$H" up "$NAME" 1 10gbit 10gbit
        start_job /tmp/fmb-r1 1 1
        client "$F" probe far --servers @/tmp/fmb-r1 --json --plot "$OUT/scaleout-fig3.svg" >"$OUT/scaleout-fig3.json"
        far_table "$OUT/scaleout-fig3.json" | tee "$OUT/scaleout-fig3.txt"
        echo "Nuzura (RDMA 10GbE, Fig. 3): 122 MB/s at 4 KiB, 740 MB/s at 4 MiB; 4 KiB read 32 us" | tee -a "$OUT/scaleout-fig3.txt"
        ;;
    workloads)
        bash "$H" up "$NAME" 1 10gbit 10gbit
        start_job /tmp/fmb-r1 1 1
        {
            echo "one server, 10 Gbit/s link both ways"
            local_vs_far "writemem/reread 700M at 1.67x" 420M "$W/memwrite" --size 700 --passes 1
            local_vs_far "writemem/reread 700M at 6x" 117M "$W/memwrite" --size 700 --passes 1
            local_vs_far "qsort 600M at 1.67x" 360M "$W/qsort" 600M
            local_vs_far "qsort 600M at 6x" 100M "$W/qsort" 600M
            echo "Nuzura: writemem 204 MB/s (local 810), reread 131 MB/s (local 5385); qsort 1.16x at 1.67x, 1.82x at 6x"
        } | tee "$OUT/scaleout-workloads.txt"
        ;;
    scaling)
        bash "$H" up "$NAME" 7 2gbit 5gbit
        start_job /tmp/fmb-r1 1 1
        start_job /tmp/fmb-r2 2 2
        start_job /tmp/fmb-r4 4 4
        client "$F" probe far --servers @/tmp/fmb-r1 --servers @/tmp/fmb-r2 --servers @/tmp/fmb-r4 \
            --json --plot "$ROOT/docs/img/scaleout-scaling.png" >"$OUT/scaleout-scaling.json"
        {
            echo "servers on 2 Gbit/s links each, client on 5 Gbit/s"
            far_table "$OUT/scaleout-scaling.json"
            for n in 1 2 4; do
                f=$(client "$F" run --local 128M --servers "@/tmp/fmb-r$n" -- "$W/memwrite" --size 1024 --passes 2 2>/dev/null)
                echo "$f" | grep -q "check=ok" || { echo "memwrite failed with $n servers" >&2; exit 1; }
                echo "memwrite 1G at 8x, $n server(s): $(echo "$f" | grep '^pass=' | tr '\n' ' ')"
            done
        } | tee "$OUT/scaleout-scaling.txt"
        ;;
    *) echo "usage: bench/cluster/scaleout.sh fig3|workloads|scaling" >&2; exit 2 ;;
esac
