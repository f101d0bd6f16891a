/* What reading a far page out of a sealed memory file costs, per random
 * 4 KiB page of a 256 MiB file, three ways:
 *   pread:          one system call, one copy (the memory-file page path);
 *   mapped, cold:   memcpy from a shared mapping whose page is not mapped
 *                   yet (a minor fault maps it: what mapping on demand pays);
 *   mapped, warm:   memcpy from a page already mapped (what a path that
 *                   keeps the server's memory mapped in the program pays,
 *                   and why its resident memory grows with everything read).
 * usage: gcc -O2 -Wall -Wextra -Werror -o /tmp/memfd-read-cost bench/kernel/memfd-read-cost.c
 *        /tmp/memfd-read-cost [SAMPLES=20000] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    const size_t pages = 65536, len = pages * 4096;
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
    if (n == 0 || 2 * n > pages) {
        fprintf(stderr, "SAMPLES must be 1 to %zu\n", pages / 2);
        return 2;
    }
    int fd = memfd_create("read-cost", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        perror("memfd");
        return 1;
    }
    char *w = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (w == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(w, 1, len);
    munmap(w, len);
    char *buf = aligned_alloc(4096, 4096);
    unsigned *idx = malloc(pages * sizeof *idx);
    if (!buf || !idx)
        return 1;
    for (size_t i = 0; i < pages; i++)
        idx[i] = (unsigned)i;
    srand(1);
    for (size_t i = pages - 1; i > 0; i--) {
        size_t j = (size_t)rand() % (i + 1);
        unsigned t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    double t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        if (pread(fd, buf, 4096, (off_t)idx[i] * 4096) != 4096)
            return 1;
    printf("pread            %.2f us a page\n", (now_ns() - t0) / n / 1000);
    char *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return 1;
    /* Other pages than pread's, so none is cached in the CPU from there. */
    t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        memcpy(buf, m + (size_t)idx[n + i] * 4096, 4096);
    printf("mapped, cold     %.2f us a page\n", (now_ns() - t0) / n / 1000);
    t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        memcpy(buf, m + (size_t)idx[n + i] * 4096, 4096);
    printf("mapped, warm     %.2f us a page  [%d]\n", (now_ns() - t0) / n / 1000, buf[0]);
    return 0;
}
