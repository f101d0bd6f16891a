/* qsort: sort N 32-bit keys with the C library's qsort (Nuzura's test).
 * usage: qsort SIZE   (SIZE bytes of keys). Checks sortedness and that the
 * key sum is unchanged. Metric: million keys sorted per second. */
#include "wl.h"

static int cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: qsort SIZE\n");
        return 2;
    }
    size_t n = wl_size(argv[1]) / 4;
    uint32_t *k = wl_alloc(n * 4);
    uint64_t s = 0x9E3779B97F4A7C15ULL, sum = 0;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        k[i] = (uint32_t)(s >> 17);
        sum += k[i];
    }
    wl_timed_begin();
    double t = wl_now();
    qsort(k, n, 4, cmp);
    t = wl_now() - t;
    wl_timed_end();
    int ok = 1;
    uint64_t sum2 = k[0];
    for (size_t i = 1; i < n; i++) {
        ok &= k[i - 1] <= k[i];
        sum2 += k[i];
    }
    ok &= sum == sum2;
    char extra[64];
    snprintf(extra, sizeof extra, "keys=%zu", n);
    wl_result("qsort", t, (double)n / t / 1e6, "Mkeys/s", ok, extra);
    return ok ? 0 : 1;
}
