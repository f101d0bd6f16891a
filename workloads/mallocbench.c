/* mallocbench: a malloc-heavy small-object workload (nothing large), to
 * measure what the farmem run shim costs a program that never uses far memory.
 * Keeps a window of live objects of 16..1040 bytes, replacing one per step,
 * touching each new object. usage: mallocbench [STEPS_MILLIONS=20] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIVE 4096

int main(int argc, char **argv) {
    long steps = (argc > 1 ? atol(argv[1]) : 20) * 1000000L;
    void *live[LIVE] = {0};
    uint64_t x = 88172645463325252ULL, sum = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < steps; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t k = x % LIVE, n = 16 + (x >> 20) % 1025;
        free(live[k]);
        char *p = malloc(n);
        if (!p)
            return 2;
        p[0] = (char)i, p[n - 1] = (char)n;
        sum += (unsigned char)p[0];
        live[k] = p;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int k = 0; k < LIVE; k++)
        free(live[k]);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("steps=%ld seconds=%.4f ns_per_step=%.2f checksum=%llu\n", steps, s, s * 1e9 / (double)steps,
           (unsigned long long)sum);
    return 0;
}
