/* Whether dirty victims separated by kept dirty pages can share one TLB
 * flush: write-protect them one range at a time ("each", farmem's way), or
 * write-protect the whole span from the first victim to the last in one
 * call and then lift the protection from every kept gap ("span").
 * "span" was meant to pay one flush for the batch and one cheap call per
 * gap, since making a page more permissive needs no TLB flush on x86 in
 * general (pte_needs_flush); but UFFDIO_WRITEPROTECT's lift is measured
 * here to cost as much as a protect with a second thread running, so it
 * flushes too (docs/benchmarks.md, sixth and twenty-ninth sessions).
 * The arena's pages are all installed writable by UFFDIO_COPY. A batch is
 * RUNS victim runs of RUN pages, GAP kept pages apart; with THREADS=1 a
 * second thread spins, so every flush must interrupt its CPU (a VM exit).
 * Printed: ns per victim page, each way, and one call of each kind alone.
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/wp-span-cost bench/kernel/wp-span-cost.c
 *        /tmp/wp-span-cost [THREADS=0|1] [RUNS=8] */
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
#include <unistd.h>

#include "kbench.h"

#define PAGE 4096UL
#define PAGES (1UL << 15)
#define REPS 200

static int uffd;
static char *arena;

static void protect(size_t first, size_t n, int on) {
    struct uffdio_writeprotect w = {
        .range = {(unsigned long)(arena + first * PAGE), n * PAGE},
        .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
    };
    must(ioctl(uffd, UFFDIO_WRITEPROTECT, &w) == 0, "UFFDIO_WRITEPROTECT");
}

/* ns per victim page for one batch, averaged over REPS batches placed one
 * after another through the arena (so no batch finds its span in the TLB). */
static double batch(int span, size_t runs, size_t run, size_t gap) {
    size_t stride = run + gap, width = runs * stride - gap;
    size_t batches = PAGES / (width + gap);
    double t = 0;
    for (size_t b = 0; b < REPS; b++) {
        size_t base = (b % batches) * (width + gap);
        /* Touch the batch so its translations are cached, as a program's
         * would be. */
        for (size_t p = base; p < base + width; p++)
            arena[p * PAGE] += 1;
        double t0 = now_ns();
        if (span) {
            protect(base, width, 1);
            for (size_t i = 0; i + 1 < runs; i++)
                protect(base + i * stride + run, gap, 0);
        } else {
            for (size_t i = 0; i < runs; i++)
                protect(base + i * stride, run, 1);
        }
        t += now_ns() - t0;
        /* Untimed: make the victims writable again for a later batch. */
        protect(base, width, 0);
    }
    return t / REPS / (double)(runs * run);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    size_t runs = argc > 2 ? (size_t)atoi(argv[2]) : 8;
    must(runs >= 1 && runs <= 64, "RUNS must be 1-64");
    spin_start(threads);
    uffd = uffd_open(O_CLOEXEC, UFFD_FEATURE_PAGEFAULT_FLAG_WP, "UFFDIO_API");
    arena = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    char *src = mmap(NULL, 64 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    must(arena != MAP_FAILED && src != MAP_FAILED, "mmap");
    madvise(arena, PAGES * PAGE, MADV_NOHUGEPAGE);
    memset(src, 7, 64 * PAGE);
    struct uffdio_register r = {.range = {(unsigned long)arena, PAGES * PAGE}, .mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP};
    must(ioctl(uffd, UFFDIO_REGISTER, &r) == 0, "UFFDIO_REGISTER");
    for (size_t i = 0; i < PAGES; i += 64) {
        struct uffdio_copy c = {.dst = (unsigned long)(arena + i * PAGE), .src = (unsigned long)src, .len = 64 * PAGE, .mode = 0, .copy = 0};
        must(ioctl(uffd, UFFDIO_COPY, &c) == 0, "UFFDIO_COPY");
    }

    /* One call alone: protect one page, lift it again. */
    double on = 0, off = 0;
    for (size_t i = 0; i < 2000; i++) {
        size_t p = (i * 97) % PAGES;
        arena[p * PAGE] += 1;
        double t0 = now_ns();
        protect(p, 1, 1);
        double t1 = now_ns();
        protect(p, 1, 0);
        on += t1 - t0;
        off += now_ns() - t1;
    }
    printf("%s; one page: protect %.0f ns, lift %.0f ns\n", threads ? "a second thread spinning" : "one thread", on / 2000, off / 2000);
    printf("%zu victim runs a batch; ns per victim page\n%5s %5s %8s %8s\n", runs, "run", "gap", "each", "span");
    size_t run_lens[] = {1, 16};
    size_t gaps[] = {1, 4, 16, 64, 256};
    for (size_t r = 0; r < 2; r++)
        for (size_t g = 0; g < 5; g++)
            printf("%5zu %5zu %8.0f %8.0f\n", run_lens[r], gaps[g], batch(0, runs, run_lens[r], gaps[g]), batch(1, runs, run_lens[r], gaps[g]));
    spin_end();
    return 0;
}
