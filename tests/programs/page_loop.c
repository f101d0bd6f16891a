/* Pages for a while, for `farmem stat` tests: writes a 64 MiB array, then
 * reads it in random order (checking every value) for the seconds given as
 * the first argument (default 3), then prints "ok (0 bad)". Under
 * `farmem run --local 16M` every pass pages. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define PAGES 16384
#define WORDS_PER_PAGE 512

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    uint64_t *a = malloc((size_t)PAGES * WORDS_PER_PAGE * sizeof *a);
    if (!a) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < (size_t)PAGES * WORDS_PER_PAGE; i++)
        a[i] = i * 2654435761u;
    long bad = 0;
    uint64_t x = 88172645463325252ull;
    double end = now() + seconds;
    while (now() < end) {
        for (int k = 0; k < 1000; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t i = (x % PAGES) * WORDS_PER_PAGE + (x >> 40) % WORDS_PER_PAGE;
            bad += a[i] != i * 2654435761u;
        }
    }
    printf("%s (%ld bad)\n", bad ? "FAILED" : "ok", bad);
    free(a);
    return bad != 0;
}
