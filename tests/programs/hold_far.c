/* Writes a far region, then holds it until told to go on: a test can look
 * at (or kill) the memory servers while every page is stored, and the
 * program then checks every byte, rewrites half and checks again.
 * usage: hold_far SIZE_MB   (FARMEM_LOCAL sets the budget)
 * Prints "written pages=N" once the region is written, waits for a line on
 * stdin, then prints "mismatches=N" and exits 0 only when N == 0. */
#include <farmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t val(uint64_t round, uint64_t i) {
    uint64_t x = i * 0x9E3779B97F4A7C15ULL ^ round * 0xD1B54A32D192ED03ULL;
    return (x << 29) | (x >> 35);
}

static long check(const uint64_t *a, size_t n, size_t words_per_page) {
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        /* Odd pages were rewritten in round 2 (after the hold). */
        uint64_t round = 1;
        if (((i / words_per_page) & 1) && a[n] == 2)
            round = 2;
        if (a[i] != val(round, i))
            bad++;
    }
    return bad;
}

int main(int argc, char **argv) {
    size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    size_t n = mb * 1024 * 1024 / sizeof(uint64_t);
    size_t wpp = 4096 / sizeof(uint64_t);
    /* One word past the region says which round the odd pages are in. */
    uint64_t *a = fm_alloc((n + 1) * sizeof(uint64_t));
    if (!a) {
        fprintf(stderr, "fm_alloc: %s\n", fm_last_error());
        return 2;
    }
    for (size_t i = 0; i < n; i++)
        a[i] = val(1, i);
    a[n] = 1;
    printf("written pages=%zu\n", n / wpp);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) {
        fprintf(stderr, "hold_far: stdin closed before the go-ahead\n");
        return 2;
    }
    long bad = check(a, n, wpp);
    for (size_t i = 0; i < n; i++)
        if ((i / wpp) & 1)
            a[i] = val(2, i);
    a[n] = 2;
    bad += check(a, n, wpp);
    printf("mismatches=%ld\n", bad);
    fm_free(a);
    return bad == 0 ? 0 : 1;
}
