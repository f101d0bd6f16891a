/* What installing and evicting a far page costs the kernel, per page, for
 * the two ways userfaultfd offers:
 *   copy: UFFDIO_COPY a batch in (allocate, charge, copy), MADV_DONTNEED it
 *         out (unmap, free): what farmem does today;
 *   move: UFFDIO_MOVE a batch of already-populated staging pages in and back
 *         out (kernel 6.8+): no allocation, no copy, no free;
 * plus a 4 KiB memcpy for scale, and MOVE one page per ioctl (what a staging
 * pool of scattered pages would pay).
 * With a second argument `spin`, a second thread of the process spins on the
 * other CPU meanwhile, so every TLB flush of these pages must reach it (an
 * IPI; in a VM an exit): what a multithreaded program pays.
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/uffd-install-cost bench/kernel/uffd-install-cost.c
 *        /tmp/uffd-install-cost [BATCH=32] [spin]   (root, or vm.unprivileged_userfaultfd=1) */
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
#define ROUNDS 20000

int main(int argc, char **argv) {
    long b = argc > 1 ? atol(argv[1]) : 32;
    must(b >= 1 && b <= 512, "BATCH must be 1..512");
    int spin_on = argc > 2 && strcmp(argv[2], "spin") == 0;
    spin_start(spin_on);
    int uffd = uffd_open(O_CLOEXEC | O_NONBLOCK, UFFD_FEATURE_SIGBUS | UFFD_FEATURE_MOVE, "UFFDIO_API (UFFDIO_MOVE needs Linux 6.8+)");
    long len = b * PAGE * 64;
    char *arena = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    char *stage = mmap(NULL, (size_t)(b * PAGE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *src = mmap(NULL, (size_t)(b * PAGE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    must(arena != MAP_FAILED && stage != MAP_FAILED && src != MAP_FAILED, "mmap");
    madvise(arena, (size_t)len, MADV_NOHUGEPAGE);
    madvise(stage, (size_t)(b * PAGE), MADV_NOHUGEPAGE);
    memset(src, 1, (size_t)(b * PAGE));
    memset(stage, 2, (size_t)(b * PAGE)); /* populated before registering */
    struct uffdio_register r1 = {.range = {(unsigned long)arena, (unsigned long)len}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    struct uffdio_register r2 = {.range = {(unsigned long)stage, (unsigned long)(b * PAGE)}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    must(ioctl(uffd, UFFDIO_REGISTER, &r1) == 0 && ioctl(uffd, UFFDIO_REGISTER, &r2) == 0, "UFFDIO_REGISTER");

    double t = now_ns() * 1e-9;
    for (int i = 0; i < ROUNDS; i++) {
        char *d = arena + (long)(i % 64) * b * PAGE;
        struct uffdio_copy c = {.dst = (unsigned long)d, .src = (unsigned long)src, .len = (unsigned long)(b * PAGE), .mode = 0, .copy = 0};
        must(ioctl(uffd, UFFDIO_COPY, &c) == 0, "UFFDIO_COPY");
        d[0]++;
        must(madvise(d, (size_t)(b * PAGE), MADV_DONTNEED) == 0, "MADV_DONTNEED");
    }
    double copy = (now_ns() * 1e-9 - t) / ROUNDS / (double)b * 1e6;

    t = now_ns() * 1e-9;
    for (int i = 0; i < ROUNDS; i++) {
        char *d = arena + (long)(i % 64) * b * PAGE;
        stage[0]++; /* a receive would write the staging page first */
        uffd_move(uffd, d, stage, b * PAGE);
        d[0]++;
        uffd_move(uffd, stage, d, b * PAGE);
    }
    double mv = (now_ns() * 1e-9 - t) / ROUNDS / (double)b * 1e6;

    /* What a fetch slot would do without recycled pages: move its received
     * pages in, populate fresh pages for the next receive, unmap victims.
     * Its buffer is not registered: populating must not fault to userfaultfd. */
    char *slot = mmap(NULL, (size_t)(b * PAGE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    must(slot != MAP_FAILED, "mmap");
    madvise(slot, (size_t)(b * PAGE), MADV_NOHUGEPAGE);
    memset(slot, 3, (size_t)(b * PAGE));
    t = now_ns() * 1e-9;
    for (int i = 0; i < ROUNDS; i++) {
        char *d = arena + (long)(i % 64) * b * PAGE;
        slot[0]++;
        uffd_move(uffd, d, slot, b * PAGE);
        must(madvise(slot, (size_t)(b * PAGE), MADV_POPULATE_WRITE) == 0, "MADV_POPULATE_WRITE");
        d[0]++;
        must(madvise(d, (size_t)(b * PAGE), MADV_DONTNEED) == 0, "MADV_DONTNEED");
    }
    double mvpop = (now_ns() * 1e-9 - t) / ROUNDS / (double)b * 1e6;

    t = now_ns() * 1e-9;
    for (int i = 0; i < ROUNDS; i++)
        memcpy(stage, src + (i & 1), (size_t)(b * PAGE) - 1);
    double cp = (now_ns() * 1e-9 - t) / ROUNDS / (double)b * 1e6;

    t = now_ns() * 1e-9;
    for (int i = 0; i < ROUNDS / 8; i++) {
        char *d = arena + (long)(i % 64) * b * PAGE;
        for (long k = 0; k < b; k++)
            uffd_move(uffd, d + k * PAGE, stage + k * PAGE, PAGE);
        for (long k = 0; k < b; k++)
            uffd_move(uffd, stage + k * PAGE, d + k * PAGE, PAGE);
    }
    double one = (now_ns() * 1e-9 - t) / (ROUNDS / 8) / (double)b * 1e6;

    spin_end();
    printf("%sbatch %ld pages: copy in + DONTNEED out %.3f us/page | move in + out %.3f us/page | "
           "move in + populate + DONTNEED out %.3f us/page | "
           "memcpy 4 KiB %.3f us | move one page per ioctl, in + out %.3f us/page\n",
           spin_on ? "second thread spinning, " : "", b, copy, mv, mvpop, cp, one);
    return 0;
}
