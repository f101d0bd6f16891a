/* What evicting a run of dirty pages costs, per page, two ways:
 *   wp:   UFFDIO_WRITEPROTECT the run (writers then wait), pwrite it to a
 *         memory file (the far copy), MADV_DONTNEED it.
 *   wp-batched: the same, but LAZY runs unmapped by one process_madvise
 *         (one TLB flush): farmem's eviction (process_madvise on itself:
 *         Linux 6.15+; one flush a call: 6.16+).
 *   move: UFFDIO_MOVE the run out to a staging area (atomic against
 *         writers: the source becomes unmapped), pwrite it from there, and
 *         free the staging pages with one MADV_DONTNEED per LAZY runs.
 *   lazyfree: no write-protect. LAZY runs at a time: one
 *         process_madvise(MADV_FREE) (the pages become clean and lazily
 *         freeable: a later write dirties them again, and the kernel then
 *         keeps them), pwrite each run, one process_madvise(MADV_PAGEOUT),
 *         which frees those not written since. "kept" counts the pages
 *         still mapped after it (mincore).
 * Runs of 1, 16 and 64 pages, every other run of a 64 MiB arena (so no two
 * runs are adjacent); pages installed writable (dirty) by UFFDIO_COPY. With
 * THREADS=1 a second thread spins meanwhile, so every TLB flush must reach
 * its CPU (in a VM, an exit).
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/dirty-evict-cost bench/kernel/dirty-evict-cost.c
 *        /tmp/dirty-evict-cost [THREADS=0|1] [LAZY=8] */
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
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kbench.h"

#define PIDFD_SELF_THREAD_GROUP (-10001)
#define PAGE 4096UL
#define PAGES (1UL << 14)

static int uffd, mfd;
static char *arena, *stage, *src;

/* Every page of the arena mapped writable, afresh. */
static void populate(void) {
    must(madvise(arena, PAGES * PAGE, MADV_DONTNEED) == 0, "madvise arena");
    for (size_t i = 0; i < PAGES; i += 64) {
        struct uffdio_copy c = {.dst = (unsigned long)(arena + i * PAGE), .src = (unsigned long)src, .len = 64 * PAGE, .mode = 0, .copy = 0};
        must(ioctl(uffd, UFFDIO_COPY, &c) == 0, "UFFDIO_COPY");
    }
}

static void write_back(const char *from, size_t off, size_t len) {
    must(pwrite(mfd, from, len, (off_t)off) == (ssize_t)len, "pwrite");
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    size_t lazy = argc > 2 ? (size_t)atoi(argv[2]) : 8;
    must(lazy >= 1 && lazy <= 16, "LAZY must be 1-16");
    spin_start(threads);
    uffd = uffd_open(O_CLOEXEC, UFFD_FEATURE_MOVE | UFFD_FEATURE_PAGEFAULT_FLAG_WP, "UFFDIO_API (UFFDIO_MOVE needs Linux 6.8+)");
    arena = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    stage = mmap(NULL, 16 * 64 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    src = mmap(NULL, 64 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    must(arena != MAP_FAILED && stage != MAP_FAILED && src != MAP_FAILED, "mmap");
    madvise(arena, PAGES * PAGE, MADV_NOHUGEPAGE);
    madvise(stage, 16 * 64 * PAGE, MADV_NOHUGEPAGE);
    memset(src, 7, 64 * PAGE);
    struct uffdio_register r1 = {.range = {(unsigned long)arena, PAGES * PAGE}, .mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP};
    struct uffdio_register r2 = {.range = {(unsigned long)stage, 16 * 64 * PAGE}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    must(ioctl(uffd, UFFDIO_REGISTER, &r1) == 0 && ioctl(uffd, UFFDIO_REGISTER, &r2) == 0, "UFFDIO_REGISTER");
    mfd = memfd_create("far", MFD_CLOEXEC);
    must(mfd >= 0 && ftruncate(mfd, (off_t)(PAGES * PAGE)) == 0, "memfd");
    /* The far copy exists already, as in a steady state. */
    for (size_t i = 0; i < PAGES; i += 64)
        write_back(src, i * PAGE, 64 * PAGE);
    printf("%s, staging freed every %zu runs; ns per page\n", threads ? "a second thread spinning" : "one thread", lazy);
    printf("%5s %10s %12s %10s %10s %6s\n", "run", "wp", "wp-batched", "move", "lazyfree", "kept");
    for (size_t run = 1; run <= 64; run *= (run == 1 ? 16 : 4)) {
        double twp = 0, twb = 0, tmv = 0, tlf = 0;
        size_t kept = 0;
        size_t n = 0;
        for (int rep = 0; rep < 3; rep++) {
            populate();
            double t = now_ns();
            n = 0;
            for (size_t i = 0; i + run <= PAGES; i += 2 * run) {
                char *a = arena + i * PAGE;
                struct uffdio_writeprotect wp = {.range = {(unsigned long)a, run * PAGE}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
                must(ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) == 0, "UFFDIO_WRITEPROTECT");
                write_back(a, i * PAGE, run * PAGE);
                must(madvise(a, run * PAGE, MADV_DONTNEED) == 0, "madvise");
                n += run;
            }
            twp += now_ns() - t;
            populate();
            t = now_ns();
            struct iovec iov[16];
            size_t k = 0;
            for (size_t i = 0; i + run <= PAGES; i += 2 * run) {
                char *a = arena + i * PAGE;
                struct uffdio_writeprotect wp = {.range = {(unsigned long)a, run * PAGE}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
                must(ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) == 0, "UFFDIO_WRITEPROTECT");
                write_back(a, i * PAGE, run * PAGE);
                iov[k].iov_base = a;
                iov[k].iov_len = run * PAGE;
                if (++k == lazy) {
                    must(syscall(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, iov, k, MADV_DONTNEED, 0) == (long)(k * run * PAGE),
                         "process_madvise (Linux 6.15+)");
                    k = 0;
                }
            }
            if (k > 0)
                must(syscall(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, iov, k, MADV_DONTNEED, 0) == (long)(k * run * PAGE),
                     "process_madvise (Linux 6.15+)");
            twb += now_ns() - t;
            populate();
            t = now_ns();
            k = 0;
            for (size_t i = 0; i + run <= PAGES; i += 2 * run) {
                char *a = arena + i * PAGE, *s = stage + k * 64 * PAGE;
                struct uffdio_move m = {.dst = (unsigned long)s, .src = (unsigned long)a, .len = run * PAGE, .mode = 0, .move = 0};
                must(ioctl(uffd, UFFDIO_MOVE, &m) == 0 && m.move == (__s64)(run * PAGE), "UFFDIO_MOVE");
                write_back(s, i * PAGE, run * PAGE);
                if (++k == lazy) {
                    must(madvise(stage, 16 * 64 * PAGE, MADV_DONTNEED) == 0, "madvise stage");
                    k = 0;
                }
            }
            must(madvise(stage, 16 * 64 * PAGE, MADV_DONTNEED) == 0, "madvise stage");
            tmv += now_ns() - t;
            populate();
            t = now_ns();
            k = 0;
            for (size_t i = 0; i + run <= PAGES; i += 2 * run) {
                iov[k].iov_base = arena + i * PAGE;
                iov[k].iov_len = run * PAGE;
                if (++k == lazy || i + 3 * run > PAGES) {
                    must(syscall(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, iov, k, MADV_FREE, 0) == (long)(k * run * PAGE),
                         "process_madvise MADV_FREE");
                    for (size_t j = 0; j < k; j++)
                        write_back(iov[j].iov_base, (size_t)((char *)iov[j].iov_base - arena), run * PAGE);
                    must(syscall(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, iov, k, MADV_PAGEOUT, 0) == (long)(k * run * PAGE),
                         "process_madvise MADV_PAGEOUT");
                    k = 0;
                }
            }
            tlf += now_ns() - t;
            unsigned char vec[64];
            for (size_t i = 0; i + run <= PAGES; i += 2 * run) {
                must(mincore(arena + i * PAGE, run * PAGE, vec) == 0, "mincore");
                for (size_t j = 0; j < run; j++)
                    kept += vec[j] & 1;
            }
        }
        printf("%5zu %10.0f %12.0f %10.0f %10.0f %6zu\n", run, twp / (3.0 * n), twb / (3.0 * n), tmv / (3.0 * n), tlf / (3.0 * n), kept);
    }
    spin_end();
    return 0;
}
