# Sourced by the bench scripts that keep their raw output: `results_dir NAME`
# makes bench/results/YYYYMMDD-HHMMSS-NAME/ (one folder per run), sets R to
# it, and writes R/RUN.md: the command as it was typed, the commit it ran
# (and whether the tree had changes), and the machine. `RESULTS_DIR=DIR`
# reuses a folder instead (a script rerunning one side of an earlier run).
results_dir() {
    local name=$1
    shift
    R=${RESULTS_DIR:-bench/results/$(date +%Y%m%d-%H%M%S)-$name}
    mkdir -p "$R"
    local dirty=""
    git diff --quiet HEAD 2>/dev/null || dirty=" (with uncommitted changes)"
    # A rerun into an earlier folder adds its own lines.
    local out=$R/RUN.md
    [ -e "$out" ] && { echo; echo "## Rerun"; } >> "$out"
    {
        echo "# $name, $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo
        echo "Command: \`$BENCH_COMMAND\`"
        echo
        echo "Commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$dirty"
        echo
        echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs," \
            "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
            "$(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l) NUMA node(s)," \
            "Linux $(uname -r), virtual machine: $(systemd-detect-virt --vm 2>/dev/null || echo none)"
    } >> "$out"
}

# `keep_output` (after results_dir): everything the script prints from here
# on goes to R/output.txt as well. Through a process substitution, so a bare
# `wait` in the script would wait for it too, and it ends only with the
# script: wait for named jobs (`wait $(jobs -p)`, never empty) instead.
keep_output() {
    exec > >(tee -a "$R/output.txt") 2>&1
}
