/* Dirty tracking by the kernel instead of by faults (issue 42): what
 * userfaultfd's asynchronous write-protection (UFFD_FEATURE_WP_ASYNC,
 * Linux 6.7) with PAGEMAP_SCAN would save against farmem's way today.
 *
 * Today ("sync"): a clean page is installed write-protected; its first
 * write raises SIGBUS, and the handler lifts the protection
 * (UFFDIO_WRITEPROTECT, mode 0) and marks the page dirty. An eviction round
 * write-protects each run of dirty victims (one call, one TLB flush, each)
 * before writing them back.
 * Asynchronous ("async"): the kernel lifts the protection itself on the
 * first write, with no signal, and remembers that the page was written. An
 * eviction round asks PAGEMAP_SCAN, over the span from its first victim to
 * its last, which pages were written, and write-protects those in the same
 * call: one call, one flush, for the round. It also protects the written
 * pages between the victims (kept pages), whose next write then costs an
 * asynchronous fault: the table counts that too ("+ kept rewritten").
 *
 * Printed, ns a page: the first write to a clean page each way; and for a
 * round of RUNS victim runs of RUN dirty pages, GAP kept dirty pages
 * apart, learning which victims are dirty and protecting them each way.
 * With THREADS=1 a second thread spins, so every flush interrupts its CPU
 * (a VM exit on this host), as in a two-thread program. Also checked: the
 * scan names exactly the pages written, and a page unmapped under
 * asynchronous protection still faults as missing (SIGBUS), never reads
 * as zero.
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/wp-async-cost bench/kernel/wp-async-cost.c
 *        /tmp/wp-async-cost [THREADS=0|1] [RUNS=8]   (root, or vm.unprivileged_userfaultfd=1) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kbench.h"

/* The ABI of Linux 6.7, which Debian 12's headers predate. */
#ifndef PAGEMAP_SCAN
#define PAGE_IS_WRITTEN (1 << 1)
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
struct page_region {
    __u64 start, end, categories;
};
struct pm_scan_arg {
    __u64 size, flags, start, end, walk_end, vec, vec_len, max_pages;
    __u64 category_inverted, category_mask, category_anyof_mask, return_mask;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif

#define PAGE 4096UL
#define PAGES (1UL << 15)
#define REPS 200
#define MAX_REGIONS 256

static int uffd, pagemap;
static char *arena;
static volatile sig_atomic_t missing;
static sigjmp_buf back;
static volatile int expect_missing;

static void protect(size_t first, size_t n, int on) {
    struct uffdio_writeprotect w = {
        .range = {(unsigned long)(arena + first * PAGE), n * PAGE},
        .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
    };
    must(ioctl(uffd, UFFDIO_WRITEPROTECT, &w) == 0, "UFFDIO_WRITEPROTECT");
}

/* SIGBUS: in the sync arena a write to a protected page (lift it, as
 * farmem's handler does); in the marker check a missing page. */
static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    if (expect_missing) {
        missing = 1;
        siglongjmp(back, 1);
    }
    size_t p = (size_t)((char *)si->si_addr - arena) / PAGE;
    struct uffdio_writeprotect w = {.range = {(unsigned long)(arena + p * PAGE), PAGE}, .mode = 0};
    if (ioctl(uffd, UFFDIO_WRITEPROTECT, &w) != 0)
        abort();
}

/* A fresh arena, every page installed write-protected (clean). */
static void setup(int async) {
    if (arena) {
        munmap(arena, PAGES * PAGE);
        close(uffd);
    }
    __u64 features = UFFD_FEATURE_SIGBUS | UFFD_FEATURE_PAGEFAULT_FLAG_WP;
    if (async)
        features |= UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED;
    uffd = uffd_open(O_CLOEXEC, features, async ? "UFFDIO_API (asynchronous write-protection needs Linux 6.7)" : "UFFDIO_API");
    arena = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    must(arena != MAP_FAILED, "mmap");
    madvise(arena, PAGES * PAGE, MADV_NOHUGEPAGE);
    struct uffdio_register r = {.range = {(unsigned long)arena, PAGES * PAGE}, .mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP};
    must(ioctl(uffd, UFFDIO_REGISTER, &r) == 0, "UFFDIO_REGISTER");
    static char src[64 * PAGE];
    memset(src, 7, sizeof src);
    for (size_t i = 0; i < PAGES; i += 64) {
        struct uffdio_copy c = {.dst = (unsigned long)(arena + i * PAGE), .src = (unsigned long)src, .len = 64 * PAGE, .mode = UFFDIO_COPY_MODE_WP, .copy = 0};
        must(ioctl(uffd, UFFDIO_COPY, &c) == 0, "UFFDIO_COPY");
    }
}

/* Which pages of [first, first + n) were written since the last scan;
 * write-protects them. Returns the regions, fills `out`. */
static long scan(size_t first, size_t n, struct page_region *out) {
    struct pm_scan_arg a = {
        .size = sizeof a,
        .flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
        .start = (unsigned long)(arena + first * PAGE),
        .end = (unsigned long)(arena + (first + n) * PAGE),
        .vec = (unsigned long)out,
        .vec_len = MAX_REGIONS,
        .category_mask = PAGE_IS_WRITTEN,
        .return_mask = PAGE_IS_WRITTEN,
    };
    long got = ioctl(pagemap, PAGEMAP_SCAN, &a);
    must(got >= 0, "PAGEMAP_SCAN");
    return got;
}

static void write_pages(size_t first, size_t n) {
    for (size_t p = first; p < first + n; p++)
        arena[p * PAGE] += 1;
}

/* ns a page for the first write to each of n clean pages. */
static double first_writes(size_t n) {
    double t0 = now_ns();
    write_pages(0, n);
    return (now_ns() - t0) / (double)n;
}

/* One eviction round's dirtiness check and protection, ns a victim page;
 * `kept` gets the later rewrite of the kept pages the scan protected. */
static double round_cost(int async, size_t runs, size_t run, size_t gap, double *kept) {
    size_t stride = run + gap, width = runs * stride - gap;
    size_t rounds = PAGES / (width + gap);
    double t = 0, k = 0;
    struct page_region regions[MAX_REGIONS];
    /* Every page dirty, and (sync) writable, before the first round. */
    write_pages(0, PAGES);
    for (size_t b = 0; b < REPS; b++) {
        size_t base = (b % rounds) * (width + gap);
        /* The victims were protected by the round before at this place
         * (or not yet): dirty them again, untimed. Touch the span so its
         * translations are cached, as a program's would be. */
        for (size_t i = 0; i < runs; i++)
            write_pages(base + i * stride, run);
        write_pages(base, width);
        double t0 = now_ns();
        if (async) {
            long got = scan(base, width, regions);
            must(got == 1 && regions[0].start == (unsigned long)(arena + base * PAGE) && regions[0].end == (unsigned long)(arena + (base + width) * PAGE), "the scan names every written page of the span");
        } else {
            for (size_t i = 0; i < runs; i++)
                protect(base + i * stride, run, 1);
        }
        t += now_ns() - t0;
        if (async) {
            double k0 = now_ns();
            for (size_t i = 0; i + 1 < runs; i++)
                write_pages(base + i * stride + run, gap);
            k += now_ns() - k0;
        }
    }
    *kept = k / REPS / (double)(runs * run);
    return t / REPS / (double)(runs * run);
}

/* Under asynchronous protection, a page unmapped and then read must fault
 * as missing (SIGBUS here), not read as a zero page; and the scan must
 * name a written page and no other. */
static void check_async(void) {
    struct page_region regions[MAX_REGIONS];
    scan(0, PAGES, regions);
    arena[5 * PAGE + 9] = 1;
    long got = scan(0, 64, regions);
    must(got == 1 && regions[0].start == (unsigned long)(arena + 5 * PAGE) && regions[0].end == (unsigned long)(arena + 6 * PAGE), "the scan names the one page written");
    got = scan(0, 64, regions);
    must(got == 0, "a second scan finds the page protected again");
    must(madvise(arena + 7 * PAGE, PAGE, MADV_DONTNEED) == 0, "MADV_DONTNEED");
    expect_missing = 1;
    missing = 0;
    volatile char c = 0;
    if (sigsetjmp(back, 1) == 0)
        c = arena[7 * PAGE];
    expect_missing = 0;
    must(missing == 1, "an unmapped page under asynchronous protection faults as missing");
    (void)c;
    printf("checked: the scan names exactly the page written; an unmapped page faults as missing\n");
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    size_t runs = argc > 2 ? (size_t)atoi(argv[2]) : 8;
    must(threads == 0 || threads == 1, "THREADS must be 0 or 1");
    must(runs >= 2 && runs <= 64, "RUNS must be 2-64");
    pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    must(pagemap >= 0, "open /proc/self/pagemap");
    struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
    must(sigaction(SIGBUS, &sa, NULL) == 0, "sigaction");
    spin_start(threads);
    printf("%s\n", threads ? "a second thread spinning" : "one thread");

    setup(1);
    check_async();
    double fw[2];
    for (int async = 0; async < 2; async++) {
        setup(async);
        fw[async] = first_writes(PAGES);
    }
    printf("first write to a clean page, ns: sync (SIGBUS, lift) %.0f, async (in the kernel) %.0f\n", fw[0], fw[1]);

    printf("a round of %zu dirty victim runs; ns a victim page\n%5s %5s %8s %8s %16s\n", runs, "run", "gap", "sync", "async", "+ kept rewritten");
    size_t run_lens[] = {1, 4, 16};
    size_t gaps[] = {1, 16, 256};
    for (size_t r = 0; r < 3; r++)
        for (size_t g = 0; g < 3; g++) {
            double kept, c[2];
            for (int async = 0; async < 2; async++) {
                setup(async);
                c[async] = round_cost(async, runs, run_lens[r], gaps[g], &kept);
            }
            printf("%5zu %5zu %8.0f %8.0f %16.0f\n", run_lens[r], gaps[g], c[0], c[1], c[1] + kept);
        }
    spin_end();
    return 0;
}
