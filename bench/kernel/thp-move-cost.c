/* Pages in and out 2 MiB at a time (issue 42, "huge pages where a stream is
 * long enough"): can UFFDIO_MOVE carry a transparent huge page from a bin
 * into the userfaultfd arena and back, and what does a page cost so?
 *
 * "4 KiB": farmem's path today for a run of 64 pages: pread the run from a
 * memory file into a buffer, UFFDIO_COPY it in write-protected (clean),
 * and unmap it (MADV_DONTNEED) when it leaves.
 * "2 MiB": a bin of huge pages (MADV_HUGEPAGE, touched once); pread 2 MiB
 * from the file into a bin page, UFFDIO_MOVE it into the arena (one PMD),
 * write-protect it (a move drops the protection), and UFFDIO_MOVE it back
 * into the bin when it leaves.
 * Each also times a first write to a clean unit (SIGBUS, then lifting the
 * protection) and the write-protect a dirty unit needs before it leaves.
 * The arena is checked after each move in: every unit must be mapped by a
 * huge page (AnonHugePages in /proc/self/smaps), and hold the file's data.
 * With THREADS=1 a second thread spins, so every TLB flush interrupts its
 * CPU (a VM exit on this host), as in a two-thread program. ARENA says how
 * the arena is advised: "huge" (MADV_HUGEPAGE) or "nohuge"
 * (MADV_NOHUGEPAGE, as farmem's arena is today); USED=1 installs and
 * unmaps a 4 KiB run in every unit first, so that each unit's page table
 * has been made (and emptied) before a huge page moves in; USED=2 does the
 * same but unmaps the whole unit, which lets the kernel free the emptied
 * page table (CONFIG_PT_RECLAIM).
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/thp-move-cost bench/kernel/thp-move-cost.c
 *        /tmp/thp-move-cost [THREADS=0|1] [ARENA=huge|nohuge] [USED=0|1|2]
 *        (root, or vm.unprivileged_userfaultfd=1; transparent huge pages
 *        "always" or "madvise") */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
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

#define PAGE 4096UL
#define HUGE (2UL << 20)
#define UNITS 32 /* 64 MiB of arena */
#define BIN 4    /* huge pages in the bin */
#define REPS 3

static int uffd, file;
static char *arena, *bin, *buf;
/* The unit a write fault lifts the protection from. */
static volatile size_t unit_now = PAGE;

static void protect(char *at, size_t len, int on) {
    struct uffdio_writeprotect w = {.range = {(unsigned long)at, len}, .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
    must(ioctl(uffd, UFFDIO_WRITEPROTECT, &w) == 0, "UFFDIO_WRITEPROTECT");
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    /* A write to a protected unit: lift the protection from the whole unit,
     * or from its page on the 4 KiB path, as the handler would. */
    unsigned long a = (unsigned long)si->si_addr;
    struct uffdio_writeprotect w = {.range = {a & ~(unit_now - 1), unit_now}, .mode = 0};
    if (ioctl(uffd, UFFDIO_WRITEPROTECT, &w) != 0)
        abort();
}

static char *aligned(size_t len) {
    char *p = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    must(p != MAP_FAILED, "mmap");
    return (char *)(((unsigned long)p + HUGE - 1) & ~(HUGE - 1));
}

/* Bytes of `at`'s mapping backed by huge pages, from /proc/self/smaps. */
static long huge_bytes(const char *at) {
    FILE *f = fopen("/proc/self/smaps", "r");
    must(f != NULL, "open /proc/self/smaps");
    char line[512];
    int in = 0;
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        /* A mapping's first line ("lo-hi perms ..."); no field line parses so. */
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            in = (unsigned long)at >= lo && (unsigned long)at < hi;
        else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb * 1024;
}

static void check_unit(const char *at, size_t u) {
    for (size_t i = 0; i < HUGE; i += PAGE)
        must(at[i] == (char)(u + i / PAGE), "a moved unit holds the file's data");
}

static void fill_file(void) {
    char *page = malloc(PAGE);
    must(page != NULL, "malloc");
    for (size_t u = 0; u < UNITS; u++)
        for (size_t i = 0; i < HUGE; i += PAGE) {
            memset(page, (char)(u + i / PAGE), PAGE);
            must(pwrite(file, page, PAGE, (off_t)(u * HUGE + i)) == (ssize_t)PAGE, "pwrite");
        }
    free(page);
}

static void run_4k(double *in, double *wfault, double *wp, double *out) {
    unit_now = PAGE;
    size_t run = 64 * PAGE;
    double tin = 0, tw = 0, tp = 0, tout = 0;
    for (int r = 0; r < REPS; r++)
        for (size_t off = 0; off < UNITS * HUGE; off += run) {
            double t0 = now_ns();
            must(pread(file, buf, run, (off_t)off) == (ssize_t)run, "pread");
            struct uffdio_copy c = {.dst = (unsigned long)(arena + off), .src = (unsigned long)buf, .len = run, .mode = UFFDIO_COPY_MODE_WP, .copy = 0};
            must(ioctl(uffd, UFFDIO_COPY, &c) == 0, "UFFDIO_COPY");
            double t1 = now_ns();
            for (size_t i = 0; i < run; i += PAGE)
                arena[off + i] ^= 1;
            double t2 = now_ns();
            protect(arena + off, run, 1);
            double t3 = now_ns();
            must(madvise(arena + off, run, MADV_DONTNEED) == 0, "MADV_DONTNEED");
            double t4 = now_ns();
            tin += t1 - t0, tw += t2 - t1, tp += t3 - t2, tout += t4 - t3;
        }
    double pages = (double)REPS * UNITS * (HUGE / PAGE);
    *in = tin / pages, *wfault = tw / pages, *wp = tp / pages, *out = tout / pages;
}

static void run_2m(double *in, double *wfault, double *wp, double *out, long *huge_seen) {
    unit_now = HUGE;
    double tin = 0, tw = 0, tp = 0, tout = 0;
    long seen = 0;
    for (int r = 0; r < REPS; r++)
        for (size_t u = 0; u < UNITS; u++) {
            char *slot = bin + (u % BIN) * HUGE, *dst = arena + u * HUGE;
            double t0 = now_ns();
            must(pread(file, slot, HUGE, (off_t)(u * HUGE)) == (ssize_t)HUGE, "pread");
            uffd_move(uffd, dst, slot, HUGE);
            protect(dst, HUGE, 1);
            double t1 = now_ns();
            if (r == 0) {
                check_unit(dst, u);
                /* One unit is in at a time: the arena's huge bytes are it. */
                seen += huge_bytes(dst) == (long)HUGE;
            }
            double t1b = now_ns();
            for (size_t i = 0; i < HUGE; i += PAGE)
                dst[i] ^= 1;
            double t2 = now_ns();
            protect(dst, HUGE, 1);
            double t3 = now_ns();
            uffd_move(uffd, slot, dst, HUGE);
            double t4 = now_ns();
            tin += t1 - t0, tw += t2 - t1b, tp += t3 - t2, tout += t4 - t3;
        }
    double pages = (double)REPS * UNITS * (HUGE / PAGE);
    *in = tin / pages, *wfault = tw / pages, *wp = tp / pages, *out = tout / pages;
    *huge_seen = seen;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    const char *advice = argc > 2 ? argv[2] : "huge";
    int used = argc > 3 ? atoi(argv[3]) : 0;
    must(threads == 0 || threads == 1, "THREADS must be 0 or 1");
    must(strcmp(advice, "huge") == 0 || strcmp(advice, "nohuge") == 0, "ARENA must be huge or nohuge");
    must(used >= 0 && used <= 2, "USED must be 0, 1 or 2");
    file = (int)syscall(SYS_memfd_create, "thp-move-cost", 0);
    must(file >= 0, "memfd_create");
    must(ftruncate(file, (off_t)(UNITS * HUGE)) == 0, "ftruncate");
    fill_file();
    struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
    must(sigaction(SIGBUS, &sa, NULL) == 0, "sigaction");
    spin_start(threads);

    uffd = uffd_open(O_CLOEXEC, UFFD_FEATURE_SIGBUS | UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_MOVE, "UFFDIO_API (UFFDIO_MOVE needs Linux 6.8)");
    arena = aligned(UNITS * HUGE);
    bin = aligned(BIN * HUGE);
    buf = aligned(HUGE);
    must(madvise(bin, BIN * HUGE, MADV_HUGEPAGE) == 0, "MADV_HUGEPAGE (bin)");
    must(madvise(arena, UNITS * HUGE, strcmp(advice, "huge") == 0 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0, "madvise (arena)");
    memset(buf, 0, HUGE);
    for (size_t i = 0; i < BIN * HUGE; i += PAGE)
        bin[i] = 1;
    printf("%s; bin backed by huge pages: %ld of %lu MiB\n", threads ? "a second thread spinning" : "one thread", huge_bytes(bin) >> 20, BIN * HUGE >> 20);
    /* A move needs both sides registered alike (the same page protection). */
    struct uffdio_register reg = {.range = {(unsigned long)arena, UNITS * HUGE}, .mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP};
    must(ioctl(uffd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER");
    reg.range = (struct uffdio_range){(unsigned long)bin, BIN * HUGE};
    must(ioctl(uffd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER (bin)");

    if (used)
        for (size_t u = 0; u < UNITS; u++) {
            struct uffdio_copy c = {.dst = (unsigned long)(arena + u * HUGE), .src = (unsigned long)buf, .len = 16 * PAGE, .mode = 0, .copy = 0};
            must(ioctl(uffd, UFFDIO_COPY, &c) == 0, "UFFDIO_COPY");
            must(madvise(arena + u * HUGE, used == 2 ? HUGE : 16 * PAGE, MADV_DONTNEED) == 0, "MADV_DONTNEED");
        }
    const char *history[] = {"fresh", "each unit used by 4 KiB pages first", "each unit used by 4 KiB pages, then unmapped whole"};
    printf("arena %s, %s\n", advice, history[used]);
    double in, wf, wp, out;
    long seen;
    run_2m(&in, &wf, &wp, &out, &seen);
    printf("2 MiB units moved in as huge pages: %ld of %d\n", seen, UNITS);
    printf("%-7s %10s %12s %14s %10s %8s   (ns a page)\n", "path", "in", "first write", "write-protect", "out", "sum");
    printf("%-7s %10.0f %12.0f %14.0f %10.0f %8.0f\n", "2 MiB", in, wf, wp, out, in + wf + wp + out);
    run_4k(&in, &wf, &wp, &out);
    printf("%-7s %10.0f %12.0f %14.0f %10.0f %8.0f\n", "4 KiB", in, wf, wp, out, in + wf + wp + out);
    spin_end();
    return 0;
}
