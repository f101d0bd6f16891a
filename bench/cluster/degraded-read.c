/* degraded-read: the latency of a far read fault while every page's server
 * lives, and after one is lost (its pages then come from their other copy,
 * or are decoded from their row's other pages). Writes SIZE_MB of far
 * memory, prints "written", waits for a line on stdin (the script kills a
 * server meanwhile), then reads one word of every page in random order,
 * timing each fault, and prints the percentiles. With one server of N lost,
 * about 1/N of the reads are degraded: the upper percentiles are theirs.
 * usage: degraded-read SIZE_MB   (FARMEM_LOCAL small, FARMEM_PREFETCH=0) */
#include <farmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    size_t pages = mb * 256, wpp = 512;
    uint64_t *a = fm_alloc(pages * 4096);
    size_t *order = malloc(pages * sizeof *order);
    uint64_t *lat = malloc(pages * sizeof *lat);
    if (!a || !order || !lat) {
        fprintf(stderr, "allocation failed: %s\n", fm_last_error());
        return 2;
    }
    for (size_t i = 0; i < pages * wpp; i++)
        a[i] = i * 0x9E3779B97F4A7C15ULL;
    printf("written pages=%zu\n", pages);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 2;
    uint64_t s = 0x2545F4914F6CDD1DULL;
    for (size_t i = 0; i < pages; i++)
        order[i] = i;
    for (size_t i = pages - 1; i > 0; i--) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t j = s % (i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    long bad = 0;
    for (size_t i = 0; i < pages; i++) {
        size_t w = order[i] * wpp + 7;
        uint64_t t0 = ns();
        uint64_t v = ((volatile uint64_t *)a)[w];
        lat[i] = ns() - t0;
        bad += v != w * 0x9E3779B97F4A7C15ULL;
    }
    qsort(lat, pages, sizeof *lat, cmp);
    printf("reads=%zu mismatches=%ld p50=%.1f p80=%.1f p90=%.1f p95=%.1f p99=%.1f us\n", pages, bad,
           lat[pages / 2] / 1e3, lat[pages * 8 / 10] / 1e3, lat[pages * 9 / 10] / 1e3,
           lat[pages * 95 / 100] / 1e3, lat[pages * 99 / 100] / 1e3);
    return bad != 0;
}
