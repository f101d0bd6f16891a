# Sourced by bench/baselines/jvm.sh and bench/baselines/spark.sh (managed
# runtimes beside Linux swap). Needs $T (the run's scratch directory) and $R
# (its results file).
#
# swap_start SIZE  a swap file of SIZE and a cgroup v1 memory group; sets
#                  SWAP_OK=1 when both are there (root, cgroup v1, swapon)
# swap_limit MB    the group's memory limit
# in_swap CMD...   runs CMD inside the group
# gc_seconds LOG   the sum of the pauses in a -Xlog:gc file, in seconds
#                  (lines matching $GC_SKIP, if set, left out)
# median_table AWK_END
#                  reads $R ("KIND NAME FIELD..." lines) and runs AWK_END
#                  with med(KIND, FIELD) (the median over the runs of KIND)
#                  and the kinds in first-seen order, order[1..nk]
CG=/sys/fs/cgroup/memory/farmem-managed-$$
SWAP=/var/tmp/farmem-managed-$$.swap
SWAP_OK=0

swap_start() {
    if [ "$(id -u)" = 0 ] && [ -d /sys/fs/cgroup/memory ] &&
        fallocate -l "$1" "$SWAP" && chmod 600 "$SWAP" && mkswap -q "$SWAP" && swapon "$SWAP"; then
        mkdir -p "$CG"
        SWAP_OK=1
    else
        echo "(Linux swap baseline skipped: needs root, cgroup v1 memory controller and swapon)"
    fi
}

swap_limit() {
    echo $(($1 * 1024 * 1024)) >"$CG/memory.limit_in_bytes"
}

in_swap() {
    bash -c "echo \$\$ > $CG/tasks; exec \"\$@\"" in_swap "$@"
}

managed_cleanup() {
    swapoff "$SWAP" 2>/dev/null || true
    rm -f "$SWAP"
    rmdir "$CG" 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$T"
}

gc_seconds() {
    grep -v "${GC_SKIP:-^$}" "$1" | awk '/Pause/{v=$NF; sub(/ms$/, "", v); s+=v} END{printf "%.3f", s/1000}'
}

median_table() {
    grep -E "FAILED|DIFFERS" "$R" || true
    awk '
function med(k, f,   n, i, j, t, a) {
    n = 0
    for (i = 1; i <= cnt[k]; i++) a[++n] = val[k, i, f]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return a[int((n + 1) / 2)]
}
NF >= 5 && $3 != "FAILED" && $3 != "OUTPUT-DIFFERS" {
    k = $1; c = ++cnt[k]
    for (f = 3; f <= NF; f++) val[k, c, f] = $f
    if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
}
END {'"$1"'}' "$R"
}
