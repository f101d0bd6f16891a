/* chase: random pointer chase (latency-bound), multichase-style, written
 * independently of farmem's Rust probe so the two can check each other.
 * A random cyclic chain through the 64-byte lines of SIZE bytes; 16 dependent
 * loads per loop turn; result kept alive through an asm sink; one warm-up
 * pass; median of 5 timed runs of about 50 ms.
 * usage: chase SIZE_BYTES [4k|thp] [LOADS]   prints "bytes=N ns=X" and a
 * result line. With LOADS, exactly that many loads (rounded down to a
 * multiple of 16) are timed once (for `farmem bench`, where the working set
 * may be far memory); the same loads are then walked again, untimed, to
 * count the pages they touch (pages_touched=) and to check that they end
 * where the timed walk ended. */
#include "wl.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void **run(void **p, long turns) {
    for (long i = 0; i < turns; i++) {
#define S p = (void **)*p;
        S S S S S S S S S S S S S S S S
    }
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    size_t size = strtoull(argv[1], NULL, 10);
    int thp = argc > 2 && !strcmp(argv[2], "thp");
    size_t len = (size + (2UL << 20) - 1) & ~((2UL << 20) - 1);
    long fixed = argc > 3 ? atol(argv[3]) : 0;
    char *buf = getenv("FARMEM_BENCH_FILE") ? wl_alloc(len + (2UL << 20))
                                            : mmap(NULL, len + (2UL << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return 2;
    buf = (char *)(((uintptr_t)buf + (2UL << 20) - 1) & ~((2UL << 20) - 1));
    madvise(buf, len, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    size_t n = size / 64;
    uint32_t *perm = malloc(n * sizeof *perm);
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    uint64_t s = 0x123456789abcdefULL; /* splitmix64, not the Rust probe's xorshift */
    for (size_t i = n - 1; i > 0; i--) {
        s += 0x9E3779B97F4A7C15ULL;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        size_t j = z % (i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        *(void **)(buf + (size_t)perm[i] * 64) = buf + (size_t)perm[(i + 1) % n] * 64;
    void **p = (void **)(buf + (size_t)perm[0] * 64);
    free(perm);
    if (fixed > 0) {
        void **start = p;
        long loads = fixed / 16 * 16;
        wl_timed_begin();
        double t0 = now();
        p = run(p, fixed / 16);
        double secs = (now() - t0) * 1e-9;
        wl_timed_end();
        /* Untimed: walk the same loads again and count the pages they
         * touch, for the bound on far traffic (`farmem bench`). */
        size_t npages = len / 4096, touched = 0;
        unsigned char *seen = calloc(npages, 1);
        if (!seen)
            return 2;
        void **q = start;
        for (long i = 0; i < loads; i++) {
            size_t pg = (size_t)((char *)q - buf) / 4096;
            touched += !seen[pg];
            seen[pg] = 1;
            q = (void **)*q;
        }
        free(seen);
        printf("bytes=%zu ns=%.3f\n", size, secs * 1e9 / (double)loads);
        char extra[96];
        snprintf(extra, sizeof extra, "loads=%ld pages_touched=%zu", loads, touched);
        wl_result("chase", secs, secs * 1e9 / (double)loads, "ns/load", p != NULL && q == p, extra);
        return 0;
    }
    long warm = (long)(n / 16 + 4096);
    double t = now();
    p = run(p, warm);
    double per = (now() - t) / (double)(warm * 16);
    long turns = (long)(50e6 / per / 16) + 1;
    double r[5];
    for (int k = 0; k < 5; k++) {
        t = now();
        p = run(p, turns);
        r[k] = (now() - t) / (double)(turns * 16);
    }
    qsort(r, 5, sizeof r[0], cmp);
    printf("bytes=%zu ns=%.3f\n", size, r[2]);
    return 0;
}
