#!/bin/bash
# CPU time of `farmem run`'s watch thread (farmem-watch) over 40 s of a
# program keeping 6 GiB resident in far memory (`--local 8G`), and how long
# one read of its /proc/PID/smaps takes. usage: watch-cpu.sh FARMEM_BIN_DIR
set -u
dir=$1
cat > /tmp/watch-big.c <<'C'
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    size_t n = (size_t)atol(argv[1]) << 20;
    char *p = malloc(n);
    if (!p) return 1;
    for (int r = 0; r < atoi(argv[2]); r++)
        for (size_t i = 0; i < n; i += 4096) p[i] += 1;
    printf("done %d\n", p[4096]);
    return 0;
}
C
gcc -O2 -Wall -Wextra -Werror -o /tmp/watch-big /tmp/watch-big.c
"$dir/farmem" run --local 8G --stats -- /tmp/watch-big 6144 100000 > /tmp/watch-big.out 2>&1 &
sleep 10
pid=$(pgrep -x watch-big | head -1)
grep VmRSS "/proc/$pid/status"
/usr/bin/time -f "one smaps read: %e s" cat "/proc/$pid/smaps" > /dev/null
fr=$(pgrep -f "farmem run --local 8G" | head -1)
tid=$(ps -L -o tid=,comm= -p "$fr" | awk '$2 == "farmem-watch" {print $1}')
t0=$(awk '{print $14 + $15}' "/proc/$fr/task/$tid/stat")
sleep 40
t1=$(awk '{print $14 + $15}' "/proc/$fr/task/$tid/stat")
echo "farmem-watch: $((t1 - t0)) ticks of CPU in 40 s ($(getconf CLK_TCK) a second)"
pkill -x watch-big
wait
grep "local outside" /tmp/watch-big.out
