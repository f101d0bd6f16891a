/* Writes a far region larger than the budget (so pages live on the server),
 * prints READY, waits for a line on stdin (the test kills the server then),
 * and reads the region back: farmem must stop the program with a message
 * naming the server, never return wrong data. */
#include <farmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    size_t n = 32UL << 20;
    uint64_t *a = fm_alloc(n);
    if (!a) {
        fprintf(stderr, "fm_alloc: %s\n", fm_last_error());
        return 2;
    }
    for (size_t i = 0; i < n / 8; i++)
        a[i] = i * 3 + 1;
    printf("READY\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 2;
    uint64_t bad = 0;
    for (size_t i = 0; i < n / 8; i++)
        bad += a[i] != i * 3 + 1;
    printf("survived, bad=%llu\n", (unsigned long long)bad);
    return bad ? 4 : 3;
}
