/* A known access pattern for the policy trace test: a sequential write pass
 * and read pass over 64 MiB, then random page reads, every value checked.
 * Prints "ok" when every read saw what was written. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define PAGES 16384
#define WORDS_PER_PAGE 512

int main(void) {
    uint64_t *a = malloc((size_t)PAGES * WORDS_PER_PAGE * sizeof *a);
    if (!a) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < (size_t)PAGES * WORDS_PER_PAGE; i++)
        a[i] = i * 2654435761u;
    long bad = 0;
    for (size_t i = 0; i < (size_t)PAGES * WORDS_PER_PAGE; i += 64)
        bad += a[i] != i * 2654435761u;
    uint64_t x = 88172645463325252ull;
    for (int k = 0; k < 20000; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t i = (x % PAGES) * WORDS_PER_PAGE + (x >> 40) % WORDS_PER_PAGE;
        bad += a[i] != i * 2654435761u;
    }
    printf("%s (%ld bad)\n", bad ? "FAILED" : "ok", bad);
    free(a);
    return bad != 0;
}
