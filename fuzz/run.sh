#!/usr/bin/env bash
# Fuzz each target for SECONDS with AFL++ (cargo-afl, stable Rust), from the
# seeds in fuzz/seeds/TARGET; findings go to fuzz/out/TARGET. Exits non-zero
# if any target found a crash or a hang, after printing it.
# usage: fuzz/run.sh [SECONDS=15] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
SECS=${1:-15}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(wire_decode server_requests client_replies regions)
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_QUIET=1 AFL_NO_AFFINITY=1
cargo afl build --release --quiet
mkdir -p out
bad=0
for t in "${TARGETS[@]}"; do
    rm -rf "out/$t"
    cargo afl fuzz -i "seeds/$t" -o "out/$t" -V "$SECS" -- "target/release/$t" > "out-$t.log" 2>&1 || true
    stats="out/$t/default/fuzzer_stats"
    if [ ! -f "$stats" ]; then
        echo "fuzz $t: AFL++ did not run:"; tail -20 "out-$t.log"; bad=1; continue
    fi
    execs=$(awk -F: '/^execs_done/ {gsub(/ /,"",$2); print $2}' "$stats")
    speed=$(awk -F: '/^execs_per_sec/ {gsub(/ /,"",$2); print $2}' "$stats")
    crashes=$(awk -F: '/^saved_crashes/ {gsub(/ /,"",$2); print $2}' "$stats")
    hangs=$(awk -F: '/^saved_hangs/ {gsub(/ /,"",$2); print $2}' "$stats")
    edges=$(awk -F: '/^edges_found/ {gsub(/ /,"",$2); print $2}' "$stats")
    echo "fuzz $t: ${execs} cases in ${SECS} s (${speed}/s), ${edges} edges, ${crashes} crashes, ${hangs} hangs"
    if [ "$crashes" != 0 ] || [ "$hangs" != 0 ]; then
        bad=1
        for f in "out/$t"/default/crashes/id* "out/$t"/default/hangs/id*; do
            [ -f "$f" ] || continue
            echo "  $f:"; od -An -tx1 "$f" | head -4
            "target/release/$t" < "$f" 2>&1 | grep -m3 -E 'panicked|assert' || true
        done
    fi
done
exit $bad
