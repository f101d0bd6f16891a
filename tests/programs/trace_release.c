/* Pages given back, for the policy trace test: array A (32 MiB) is written
 * and read back, then freed; array B (12 MiB), allocated after it (where A
 * was, if the allocator reuses the range), is written and read back six
 * times. Under a 16 MiB budget B fits once A is gone; a replay that kept
 * A's dead pages would not fit it. Says whether B took A's range (the
 * test needs it to); every value is checked; prints "ok (0 bad)" when
 * every read saw what was written. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WORDS_PER_PAGE 512

static long fill_and_check(uint64_t *a, size_t pages, uint64_t salt, int passes) {
    long bad = 0;
    for (size_t i = 0; i < pages * WORDS_PER_PAGE; i++)
        a[i] = i * 2654435761u + salt;
    for (int k = 0; k < passes; k++)
        for (size_t i = 0; i < pages * WORDS_PER_PAGE; i += 64)
            bad += a[i] != i * 2654435761u + salt;
    return bad;
}

int main(void) {
    const size_t a_pages = 8192, b_pages = 3072;
    uint64_t *a = malloc(a_pages * WORDS_PER_PAGE * sizeof *a);
    if (!a) {
        perror("malloc");
        return 1;
    }
    long bad = fill_and_check(a, a_pages, 1, 1);
    uintptr_t a_lo = (uintptr_t)a, a_hi = a_lo + a_pages * WORDS_PER_PAGE * sizeof *a;
    free(a);
    uint64_t *b = malloc(b_pages * WORDS_PER_PAGE * sizeof *b);
    if (!b) {
        perror("malloc");
        return 1;
    }
    uintptr_t b_lo = (uintptr_t)b;
    printf("b reuses a's range: %s\n", b_lo >= a_lo && b_lo < a_hi ? "yes" : "no");
    bad += fill_and_check(b, b_pages, 2, 6);
    free(b);
    printf("%s (%ld bad)\n", bad ? "FAILED" : "ok", bad);
    return bad != 0;
}
