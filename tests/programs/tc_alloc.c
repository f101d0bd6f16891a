/* A plain C program linked with tcmalloc (gperftools' libtcmalloc_minimal),
 * run under `farmem run --local 32M --stats`: the program's own allocator
 * stays in charge (farmem forwards every allocator entry point to it), and
 * its big chunks still go far through the mmap calls tcmalloc makes.
 *
 * Allocates 64 MiB blocks with malloc, calloc, realloc and posix_memalign,
 * fills and verifies them, asks malloc_usable_size, frees them; many small
 * allocations are mixed in and checked too. Prints `NAME ok` or
 * `NAME FAILED why` per check, how many of the big blocks are far memory
 * (through the shim's fm_is_far, when run under farmem), and exits 1 on any
 * failure.
 *
 * Build: gcc -O2 tc_alloc.c -o tc_alloc -ltcmalloc_minimal
 * (or .../libtcmalloc_minimal.so.4 where there is no -dev symlink). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MB (1024UL * 1024UL)
#define BLOCK (64 * MB)

static int failures;
static int (*is_far)(void *);
static int far_blocks, big_blocks;

static void result(const char *name, int ok, const char *why) {
    printf("%s %s%s%s\n", name, ok ? "ok" : "FAILED", ok ? "" : " ", ok ? "" : why);
    if (!ok)
        failures++;
}

static uint64_t val(size_t i, uint64_t seed) { return (i * 0x9E3779B97F4A7C15ULL) ^ (seed << 32) ^ (i >> 7); }

static void fill(void *p, size_t n, uint64_t seed) {
    uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        w[i] = val(i, seed);
}

static long check(const void *p, size_t n, uint64_t seed) {
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i] != val(i, seed))
            return (long)i;
    return -1;
}

static void note_big(void *p) {
    big_blocks++;
    if (is_far && is_far(p) == 1)
        far_blocks++;
}

/* Small allocations of many sizes, each holding its own pattern. */
#define SMALL 20000
static unsigned char *small[SMALL];
static size_t small_n[SMALL];
static unsigned rng = 12345;
static unsigned next(void) {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}
static void small_churn(int rounds) {
    for (int r = 0; r < rounds; r++) {
        size_t k = next() % SMALL;
        if (small[k]) {
            for (size_t i = 0; i < small_n[k]; i++)
                if (small[k][i] != (unsigned char)(k + i)) {
                    result("small-allocations", 0, "a small block lost its contents");
                    exit(1);
                }
            free(small[k]);
        }
        size_t n = 1 + next() % 4096;
        small[k] = malloc(n);
        if (!small[k]) {
            result("small-allocations", 0, "malloc returned NULL");
            exit(1);
        }
        small_n[k] = n;
        for (size_t i = 0; i < n; i++)
            small[k][i] = (unsigned char)(k + i);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    is_far = (int (*)(void *))dlsym(RTLD_DEFAULT, "fm_is_far");
    int tc = dlsym(RTLD_DEFAULT, "tc_malloc") != NULL;
    printf("allocator %s\n", tc ? "tcmalloc" : "not tcmalloc");
    result("linked-with-tcmalloc", tc, "tc_malloc not found: not linked with tcmalloc");
    char why[200];

    /* malloc */
    small_churn(50000);
    unsigned char *a = malloc(BLOCK), *b = malloc(BLOCK);
    if (!a || !b) {
        result("malloc-64M", 0, "malloc returned NULL");
        return 1;
    }
    note_big(a);
    note_big(b);
    fill(a, BLOCK, 1);
    small_churn(20000);
    fill(b, BLOCK, 2);
    long ea = check(a, BLOCK, 1), eb = check(b, BLOCK, 2);
    snprintf(why, sizeof why, "word %ld / %ld differs", ea, eb);
    result("malloc-64M", ea < 0 && eb < 0, why);
    size_t ua = malloc_usable_size(a);
    snprintf(why, sizeof why, "malloc_usable_size %zu < %lu", ua, BLOCK);
    result("malloc_usable_size", ua >= BLOCK, why);

    /* calloc: zero even where tcmalloc reuses memory a freed block had. */
    free(a);
    small_churn(20000);
    uint64_t *c = calloc(BLOCK / 8, 8);
    if (!c) {
        result("calloc-64M", 0, "calloc returned NULL");
        return 1;
    }
    note_big(c);
    long nz = -1;
    for (size_t i = 0; i < BLOCK / 8; i++)
        if (c[i] != 0) {
            nz = (long)i;
            break;
        }
    fill(c, BLOCK, 3);
    long ec = check(c, BLOCK, 3);
    snprintf(why, sizeof why, "word %ld not zero / word %ld differs", nz, ec);
    result("calloc-64M", nz < 0 && ec < 0, why);
    size_t uc = malloc_usable_size(c);
    snprintf(why, sizeof why, "malloc_usable_size %zu", uc);
    result("calloc-usable-size", uc >= BLOCK, why);

    /* realloc: grow 16M -> 64M -> 96M, shrink to 40M; data kept. */
    unsigned char *r = malloc(16 * MB);
    fill(r, 16 * MB, 4);
    r = realloc(r, BLOCK);
    long er1 = r ? check(r, 16 * MB, 4) : -2;
    if (r) {
        fill(r + 16 * MB, BLOCK - 16 * MB, 5);
        small_churn(10000);
        r = realloc(r, 96 * MB);
    }
    long er2 = r ? check(r, 16 * MB, 4) : -2, er3 = r ? check(r + 16 * MB, BLOCK - 16 * MB, 5) : -2;
    if (r) {
        note_big(r);
        r = realloc(r, 40 * MB);
    }
    long er4 = r ? check(r, 16 * MB, 4) : -2;
    snprintf(why, sizeof why, "first 16M differs at %ld / %ld / %ld, next part at %ld", er1, er2, er4, er3);
    result("realloc-64M-96M-40M", er1 < 0 && er2 < 0 && er3 < 0 && er4 < 0, why);
    size_t ur = r ? malloc_usable_size(r) : 0;
    snprintf(why, sizeof why, "malloc_usable_size %zu", ur);
    result("realloc-usable-size", ur >= 40 * MB, why);

    /* posix_memalign with page and 2M alignment. */
    void *pa = NULL, *pb = NULL;
    int ra = posix_memalign(&pa, 4096, BLOCK), rb = posix_memalign(&pb, 2 * MB, BLOCK);
    int ok = ra == 0 && rb == 0 && ((uintptr_t)pa % 4096) == 0 && ((uintptr_t)pb % (2 * MB)) == 0;
    if (ok) {
        note_big(pa);
        note_big(pb);
        fill(pa, BLOCK, 6);
        fill(pb, BLOCK, 7);
        ok = check(pa, BLOCK, 6) < 0 && check(pb, BLOCK, 7) < 0;
    }
    snprintf(why, sizeof why, "posix_memalign returned %d/%d, %p %p", ra, rb, pa, pb);
    result("posix_memalign-64M", ok, why);
    size_t up = pa ? malloc_usable_size(pa) : 0;
    snprintf(why, sizeof why, "malloc_usable_size %zu", up);
    result("posix_memalign-usable-size", up >= BLOCK, why);

    /* Everything still intact after all of that. */
    long eb2 = check(b, BLOCK, 2), ec2 = check(c, BLOCK, 3);
    snprintf(why, sizeof why, "word %ld / %ld differs", eb2, ec2);
    result("blocks-still-intact", eb2 < 0 && ec2 < 0, why);
    free(b);
    free(c);
    free(r);
    free(pa);
    free(pb);

    /* Freed memory is reused: allocate and check again. */
    unsigned char *d = malloc(BLOCK);
    fill(d, BLOCK, 8);
    long ed = check(d, BLOCK, 8);
    snprintf(why, sizeof why, "word %ld differs", ed);
    result("malloc-after-free", ed < 0, why);
    note_big(d);
    free(d);

    small_churn(50000);
    for (int k = 0; k < SMALL; k++)
        free(small[k]);
    result("small-allocations", 1, "");

    if (is_far)
        printf("far blocks: %d of %d\n", far_blocks, big_blocks);
    printf("%s\n", failures ? "tc_alloc FAILED" : "tc_alloc ok");
    return failures ? 1 : 0;
}
