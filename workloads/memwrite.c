/* memwrite: seed 000's memory-write program and Nuzura's writemem/reread.
 * Write 4 bytes in every 64-byte cache line of a region, pass after pass,
 * then read every line back and check it.
 *
 * usage: memwrite [--size SIZE_MB] [--passes P] [--alloc mmap|farmem]
 * One result line per pass: "pass=N kind=write|reread seconds=S mbps=M"
 * where mbps is megabytes of region swept per second (Nuzura's measure);
 * the last line is "check=ok" or "check=FAILED". Exit 0 only if ok. */
#include "wl.h"
#include <farmem.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t mb = 512;
    int passes = 3;
    const char *alloc = "mmap";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--size"))
            mb = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--passes"))
            passes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--alloc"))
            alloc = argv[i + 1];
        else {
            fprintf(stderr, "memwrite: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (mb == 0 || passes < 1) {
        fprintf(stderr, "memwrite: --size and --passes must be positive\n");
        return 2;
    }
    size_t n = mb << 20;
    volatile uint32_t *a;
    if (!strcmp(alloc, "farmem")) {
        a = fm_alloc(n);
        if (!a) {
            fprintf(stderr, "memwrite: %s\n", fm_last_error());
            return 2;
        }
    } else if (!strcmp(alloc, "mmap")) {
        /* FARMEM_BENCH_FILE: the region is a file mapping (farmem bench's ssd-mmap). */
        void *p = getenv("FARMEM_BENCH_FILE") ? wl_alloc(n) : mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 2;
        }
        a = p;
    } else {
        fprintf(stderr, "memwrite: --alloc must be mmap or farmem\n");
        return 2;
    }
    size_t lines = n / 64;
    wl_timed_begin();
    double t0 = now();
    for (int p = 1; p <= passes; p++) {
        double t = now();
        for (size_t i = 0; i < lines; i++)
            a[i * 16] = (uint32_t)(i * 2654435761u) + (uint32_t)p;
        t = now() - t;
        printf("pass=%d kind=write seconds=%.4f mbps=%.1f\n", p, t, (double)n / t / 1e6);
        fflush(stdout);
    }
    double t = now();
    size_t bad = 0;
    for (size_t i = 0; i < lines; i++)
        bad += a[i * 16] != (uint32_t)(i * 2654435761u) + (uint32_t)passes;
    t = now() - t;
    printf("pass=%d kind=reread seconds=%.4f mbps=%.1f\n", passes + 1, t, (double)n / t / 1e6);
    wl_timed_end();
    printf("check=%s\n", bad ? "FAILED" : "ok");
    double total = now() - t0;
    char extra[64];
    snprintf(extra, sizeof extra, "passes=%d size_mb=%zu", passes, mb);
    wl_result("memwrite", total, (double)n * (passes + 1) / total / 1e6, "MB/s", !bad, extra);
    return bad ? 1 : 0;
}
