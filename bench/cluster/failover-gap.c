/* How long a program stalls when a memory server dies under
 * FARMEM_REPLICAS=2: random 8-byte reads over a far region several times
 * the local budget (so most reads fault), for SECONDS, noting the longest
 * gap between two consecutive reads and when it began. A server killed
 * during the loop shows as that gap: the time from its death to the next
 * page served from another copy (plus one fault).
 *
 * usage: failover-gap SIZE_MB SECONDS
 * prints: reads=N max_gap_us=G gap_at_s=T p50_read_us=... checksum=...
 * (build: see bench/cluster/failover-gap.sh) */
#include <farmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: failover-gap SIZE_MB SECONDS\n");
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 10) * (1024 * 1024 / sizeof(uint64_t));
    double secs = strtod(argv[2], NULL);
    uint64_t *a = fm_alloc(n * sizeof(uint64_t));
    if (!a) {
        fprintf(stderr, "fm_alloc: %s\n", fm_last_error());
        return 2;
    }
    for (size_t i = 0; i < n; i++)
        a[i] = i * 0x9E3779B97F4A7C15ULL;
    uint64_t x = 88172645463325252ULL, sum = 0, reads = 0, bad = 0;
    double start = now(), last = start, max_gap = 0, gap_at = 0;
    while (last - start < secs) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t i = x % n;
        uint64_t v = a[i];
        bad += v != i * 0x9E3779B97F4A7C15ULL;
        sum += v;
        reads++;
        double t = now();
        if (t - last > max_gap) {
            max_gap = t - last;
            gap_at = last - start;
        }
        last = t;
    }
    printf("reads=%llu max_gap_us=%.0f gap_at_s=%.3f mean_read_us=%.2f wrong=%llu checksum=%llu\n",
           (unsigned long long)reads, max_gap * 1e6, gap_at, (last - start) * 1e6 / (double)reads,
           (unsigned long long)bad, (unsigned long long)sum);
    return bad != 0;
}
