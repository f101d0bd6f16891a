/* Could a clean install move a recycled page in instead of copying? (issue 42)
 *
 * farmem installs a clean run with UFFDIO_COPY in write-protect mode: the
 * kernel allocates, charges and copies each page, and the page arrives
 * protected, so the program's first write faults and marks it dirty. A run
 * moved in with UFFDIO_MOVE arrives writable (the move drops the uffd-wp
 * bit), so a write between the move and a later UFFDIO_WRITEPROTECT would go
 * unseen. One way to close that window without trusting timing: protect the
 * run right after the move, then compare each page with the data it was
 * given. After the write-protect returns, every earlier write through the
 * writable entry has landed (the flush reached every CPU), and every later
 * one faults; a page that still equals what came from the server may be
 * dropped clean, since a write that left it equal lost nothing.
 *
 * Per page, in runs of BATCH pages, range registered MISSING | WP:
 *   copy:      UFFDIO_COPY (mode WP) in, read, MADV_DONTNEED out (today)
 *   move:      memcpy into a recycled page, UFFDIO_MOVE in, read, UFFDIO_MOVE
 *              out (what writable installs do today)
 *   move+wp:   the same with UFFDIO_WRITEPROTECT of the run after the move
 *   move+wp+cmp: and the compare (memcmp of the run with the received data)
 * The four alternate over REPS rounds; medians are printed. With `spin` a
 * second thread spins on the other CPU, so each TLB flush must reach it.
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/clean-move-cost bench/kernel/clean-move-cost.c
 *        /tmp/clean-move-cost [BATCH=64] [spin]   (root, or vm.unprivileged_userfaultfd=1) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kbench.h"

#define PAGE 4096L
#define ROUNDS 4000
#define REPS 7
#define SLOTS 64

static void protect(int uffd, char *at, long len) {
    struct uffdio_writeprotect w = {.range = {(unsigned long)at, (unsigned long)len}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    must(ioctl(uffd, UFFDIO_WRITEPROTECT, &w) == 0, "UFFDIO_WRITEPROTECT");
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int uffd;
static long b;
static char *arena, *stage, *src;
static volatile long sink;

/* One round of `way` over the whole arena, in µs per page. */
static double round_of(int way) {
    double t = now_ns();
    for (int i = 0; i < ROUNDS; i++) {
        char *d = arena + (long)(i % SLOTS) * b * PAGE;
        src[(i % b) * PAGE] = (char)i; /* a receive writes the data anew */
        if (way == 0) {
            struct uffdio_copy c = {.dst = (unsigned long)d, .src = (unsigned long)src, .len = (unsigned long)(b * PAGE), .mode = UFFDIO_COPY_MODE_WP, .copy = 0};
            must(ioctl(uffd, UFFDIO_COPY, &c) == 0, "UFFDIO_COPY");
            sink += d[0];
            must(madvise(d, (size_t)(b * PAGE), MADV_DONTNEED) == 0, "MADV_DONTNEED");
        } else {
            memcpy(stage, src, (size_t)(b * PAGE));
            uffd_move(uffd, d, stage, b * PAGE);
            if (way >= 2)
                protect(uffd, d, b * PAGE);
            if (way >= 3)
                must(memcmp(d, src, (size_t)(b * PAGE)) == 0, "the run moved in differs from its data");
            sink += d[0];
            uffd_move(uffd, stage, d, b * PAGE);
        }
    }
    return (now_ns() - t) / ROUNDS / (double)b / 1e3;
}

int main(int argc, char **argv) {
    b = argc > 1 ? atol(argv[1]) : 64;
    must(b >= 1 && b <= 512, "BATCH must be 1..512");
    int spin_on = argc > 2 && strcmp(argv[2], "spin") == 0;
    spin_start(spin_on);
    uffd = uffd_open(O_CLOEXEC | O_NONBLOCK, UFFD_FEATURE_SIGBUS | UFFD_FEATURE_MOVE, "UFFDIO_API (UFFDIO_MOVE needs Linux 6.8+)");
    long len = b * PAGE * SLOTS;
    arena = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    stage = mmap(NULL, (size_t)(b * PAGE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    src = mmap(NULL, (size_t)(b * PAGE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    must(arena != MAP_FAILED && stage != MAP_FAILED && src != MAP_FAILED, "mmap");
    madvise(arena, (size_t)len, MADV_NOHUGEPAGE);
    madvise(stage, (size_t)(b * PAGE), MADV_NOHUGEPAGE);
    memset(src, 1, (size_t)(b * PAGE));
    memset(stage, 2, (size_t)(b * PAGE)); /* populated before registering */
    struct uffdio_register r1 = {.range = {(unsigned long)arena, (unsigned long)len}, .mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP};
    struct uffdio_register r2 = {.range = {(unsigned long)stage, (unsigned long)(b * PAGE)}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    must(ioctl(uffd, UFFDIO_REGISTER, &r1) == 0 && ioctl(uffd, UFFDIO_REGISTER, &r2) == 0, "UFFDIO_REGISTER");

    static const char *names[4] = {"copy (WP) in + DONTNEED out", "memcpy + move in + out", "memcpy + move in + write-protect + out",
                                   "memcpy + move in + write-protect + compare + out"};
    double us[4][REPS];
    for (int r = 0; r < REPS; r++)
        for (int w = 0; w < 4; w++)
            us[w][r] = round_of(w);
    spin_end();
    printf("%sruns of %ld pages, median of %d rounds (min-max), us a page:", spin_on ? "second thread spinning, " : "", b, REPS);
    for (int w = 0; w < 4; w++) {
        qsort(us[w], REPS, sizeof(double), cmp_dbl);
        printf(" | %s %.3f (%.3f-%.3f)", names[w], us[w][REPS / 2], us[w][0], us[w][REPS - 1]);
    }
    printf("\n");
    return 0;
}
