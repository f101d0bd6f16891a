/* A two-thread read sweep over far memory four times the budget, paged by
 * a SIGBUS handler in 2 MiB units or in 4 KiB runs (issue 42: does the
 * 2 MiB move hold its cost with both threads faulting, moving and
 * flushing at once, and what sweep speed does it give?).
 *
 * The far data is a memory file (the embedded server's memory files, as
 * farmem's one-host path reads them). The arena is registered for missing
 * faults with SIGBUS; each thread sums its half of the arena, PASSES times,
 * and its faults are served in the thread itself:
 *   unit: the fault's 2 MiB unit is read with one pread into a huge page
 *         of the thread's bin and moved in (one UFFDIO_MOVE); if the budget
 *         is full, the thread's oldest unit is moved out into an empty
 *         place of the bin first. The bin holds the budget's worth of huge
 *         pages and one more, touched before it is registered (a move needs
 *         both sides registered; an empty registered place could not be
 *         read into). Every page is read only, so units leave clean.
 *   4k:   the fault's run of RUN pages (to the end of its unit) is read with
 *         one pread and installed with UFFDIO_COPY; if the budget is full,
 *         the thread's oldest runs are unmapped in one madvise.
 * Each thread owns its half and its budget, so the threads never share a
 * unit. "local" sums the same data in plain memory. Printed: seconds a
 * pass and ns a page moved, each way, and the sums (all three must agree).
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/unit-sweep bench/kernel/unit-sweep.c
 *        /tmp/unit-sweep [MIB=512] [PASSES=4] [RUN=64]
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
#define UNIT_PAGES (HUGE / PAGE)
#define THREADS 2
#define EXPANSION 4

enum mode { UNIT, SMALL };

static enum mode mode;
static int uffd, file;
static char *arena;
static size_t units, run_pages;

/* Per thread: its half of the arena, its bin slot, its resident units or
 * runs in the order they came (a ring), and its counters. */
struct thread {
    const double *data;
    size_t n;
    char *bin, *buf;
    /* Places of the bin holding a page (full) and not (empty). */
    size_t *full, nfull, *empty, nempty;
    size_t *ring, cap, head, len;
    uint64_t pages_in, faults, busy;
    double sum;
};
static struct thread th[THREADS];
static __thread struct thread *me;

/* Move a unit; 0 if the kernel refused it whole with EBUSY (a page it
 * cannot move just now: the program falls back to copying or unmapping, as
 * farmem's bin does, and counts it). A move that stops part-way stops the
 * program. */
static int move_unit(char *dst, char *src) {
    struct uffdio_move m = {.dst = (unsigned long)dst, .src = (unsigned long)src, .len = HUGE, .mode = 0, .move = 0};
    if (ioctl(uffd, UFFDIO_MOVE, &m) == 0)
        return 1;
    if (errno != EBUSY || m.move > 0) {
        static const char msg[] = "UFFDIO_MOVE failed, or moved part of a unit\n";
        if (write(2, msg, sizeof msg - 1) < 0) {
        }
        abort();
    }
    me->busy++;
    return 0;
}

/* Make room: the oldest unit moves out into the slot; or the oldest runs,
 * as many as follow each other in the arena up to a unit's worth, are
 * unmapped in one call (farmem unmaps a round of victims in one call). */
static void evict_oldest(void) {
    size_t at = me->ring[me->head];
    if (mode == UNIT) {
        me->head = (me->head + 1) % me->cap;
        me->len--;
        size_t e = me->empty[--me->nempty];
        if (move_unit(me->bin + e * HUGE, arena + at * HUGE)) {
            me->full[me->nfull++] = e;
        } else {
            me->empty[me->nempty++] = e;
            if (madvise(arena + at * HUGE, HUGE, MADV_DONTNEED) != 0)
                abort();
        }
        return;
    }
    size_t k = 0;
    while (k < me->len && k * run_pages < UNIT_PAGES && me->ring[(me->head + k) % me->cap] == at + k * run_pages)
        k++;
    me->head = (me->head + k) % me->cap;
    me->len -= k;
    if (madvise(arena + at * PAGE, k * run_pages * PAGE, MADV_DONTNEED) != 0)
        abort();
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    size_t off = (size_t)((char *)si->si_addr - arena);
    me->faults++;
    if (me->len == me->cap)
        evict_oldest();
    size_t slot_at = (me->head + me->len) % me->cap;
    if (mode == UNIT) {
        size_t u = off / HUGE, f = me->full[--me->nfull];
        if (pread(file, me->bin + f * HUGE, HUGE, (off_t)(u * HUGE)) != (ssize_t)HUGE)
            abort();
        if (move_unit(arena + u * HUGE, me->bin + f * HUGE)) {
            me->empty[me->nempty++] = f;
        } else {
            struct uffdio_copy c = {.dst = (unsigned long)(arena + u * HUGE), .src = (unsigned long)(me->bin + f * HUGE), .len = HUGE, .mode = 0, .copy = 0};
            if (ioctl(uffd, UFFDIO_COPY, &c) != 0)
                abort();
            me->full[me->nfull++] = f;
        }
        me->ring[slot_at] = u;
        me->pages_in += UNIT_PAGES;
    } else {
        size_t p = off / PAGE / run_pages * run_pages;
        if (pread(file, me->buf, run_pages * PAGE, (off_t)(p * PAGE)) != (ssize_t)(run_pages * PAGE))
            abort();
        struct uffdio_copy c = {.dst = (unsigned long)(arena + p * PAGE), .src = (unsigned long)me->buf, .len = run_pages * PAGE, .mode = 0, .copy = 0};
        if (ioctl(uffd, UFFDIO_COPY, &c) != 0)
            abort();
        me->ring[slot_at] = p;
        me->pages_in += run_pages;
    }
    me->len++;
}

static int passes;
static pthread_barrier_t start;

static void *sweep(void *arg) {
    me = arg;
    pthread_barrier_wait(&start);
    double s = 0;
    for (int r = 0; r < passes; r++)
        for (size_t i = 0; i < me->n; i++)
            s += me->data[i];
    me->sum = s;
    return NULL;
}

/* Both threads sweep their halves of `base`; returns seconds and the sum. */
static double run_threads(const char *base, double *sum) {
    pthread_t tid[THREADS];
    pthread_barrier_init(&start, NULL, THREADS + 1);
    for (int t = 0; t < THREADS; t++) {
        th[t].data = (const double *)(base + t * (units / THREADS) * HUGE);
        th[t].n = units / THREADS * HUGE / sizeof(double);
        errno = pthread_create(&tid[t], NULL, sweep, &th[t]);
        must(errno == 0, "pthread_create");
    }
    double t0 = now_ns();
    pthread_barrier_wait(&start);
    *sum = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
        *sum += th[t].sum;
    }
    pthread_barrier_destroy(&start);
    return (now_ns() - t0) / 1e9;
}

static char *aligned(size_t len) {
    char *p = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    must(p != MAP_FAILED, "mmap");
    return (char *)(((unsigned long)p + HUGE - 1) & ~(HUGE - 1));
}

/* One paged run in `m`; returns seconds, fills pages and faults. */
static double paged(enum mode m, double *sum, uint64_t *pages, uint64_t *faults, uint64_t *busy) {
    mode = m;
    uffd = uffd_open(O_CLOEXEC, UFFD_FEATURE_SIGBUS | UFFD_FEATURE_MOVE, "UFFDIO_API (UFFDIO_MOVE needs Linux 6.8)");
    arena = aligned(units * HUGE);
    must(madvise(arena, units * HUGE, MADV_NOHUGEPAGE) == 0, "MADV_NOHUGEPAGE");
    size_t budget_units = units / EXPANSION / THREADS, per = budget_units + 1;
    char *bins = NULL;
    if (m == UNIT) {
        bins = aligned(THREADS * per * HUGE);
        must(madvise(bins, THREADS * per * HUGE, MADV_HUGEPAGE) == 0, "MADV_HUGEPAGE");
        for (size_t i = 0; i < THREADS * per * HUGE; i += PAGE)
            bins[i] = 0;
    }
    struct uffdio_register reg = {.range = {(unsigned long)arena, units * HUGE}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    must(ioctl(uffd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER");
    if (m == UNIT) {
        reg.range = (struct uffdio_range){(unsigned long)bins, THREADS * per * HUGE};
        must(ioctl(uffd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER (bin)");
    }
    for (int t = 0; t < THREADS; t++) {
        th[t] = (struct thread){.bin = bins ? bins + t * per * HUGE : NULL};
        th[t].full = calloc(per, sizeof(size_t));
        th[t].empty = calloc(per, sizeof(size_t));
        must(th[t].full != NULL && th[t].empty != NULL, "calloc");
        for (size_t i = 0; i < per; i++)
            th[t].full[i] = per - 1 - i;
        th[t].nfull = per;
        th[t].buf = aligned(HUGE);
        th[t].cap = m == UNIT ? budget_units : budget_units * UNIT_PAGES / run_pages;
        th[t].ring = calloc(th[t].cap, sizeof(size_t));
        must(th[t].ring != NULL, "calloc");
    }
    double secs = run_threads(arena, sum);
    *pages = 0, *faults = 0, *busy = 0;
    for (int t = 0; t < THREADS; t++)
        *pages += th[t].pages_in, *faults += th[t].faults, *busy += th[t].busy;
    for (int t = 0; t < THREADS; t++) {
        free(th[t].ring);
        free(th[t].full);
        free(th[t].empty);
    }
    if (bins)
        munmap(bins, THREADS * per * HUGE);
    munmap(arena, units * HUGE);
    close(uffd);
    return secs;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 512;
    passes = argc > 2 ? atoi(argv[2]) : 4;
    run_pages = argc > 3 ? (size_t)atol(argv[3]) : 64;
    must(mib >= 64 && mib % 16 == 0, "MIB must be a multiple of 16, at least 64");
    must(passes >= 1, "PASSES must be at least 1");
    must(run_pages >= 1 && UNIT_PAGES % run_pages == 0, "RUN must divide 512");
    units = mib * (1 << 20) / HUGE;
    file = (int)syscall(SYS_memfd_create, "unit-sweep", 0);
    must(file >= 0, "memfd_create");
    must(ftruncate(file, (off_t)(units * HUGE)) == 0, "ftruncate");
    /* Local data: the same values the file holds. */
    double *local = (double *)aligned(units * HUGE);
    size_t n = units * HUGE / sizeof(double);
    for (size_t i = 0; i < n; i++)
        local[i] = (double)(i % 1000) * 0.5;
    must(pwrite(file, local, units * HUGE, 0) == (ssize_t)(units * HUGE), "pwrite");
    struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
    must(sigaction(SIGBUS, &sa, NULL) == 0, "sigaction");

    double lsum;
    double lsecs = run_threads((const char *)local, &lsum);
    printf("%zu MiB, %d passes, 2 threads each over its half, budget a quarter (%zu MiB); runs of %zu pages on the 4 KiB path\n", mib, passes, mib / EXPANSION, run_pages);
    printf("local: %.3f s\n", lsecs);
    for (int m = 0; m < 2; m++) {
        double sum;
        uint64_t pages, faults, busy;
        double secs = paged((enum mode)m, &sum, &pages, &faults, &busy);
        printf("%-6s %.3f s, %.2fx local, %.0f ns a page moved, %lu pages in, %lu faults, %lu moves refused (EBUSY), sum %s\n", m == UNIT ? "2 MiB" : "4 KiB", secs, secs / lsecs, secs * 1e9 / (double)pages, (unsigned long)pages, (unsigned long)faults, (unsigned long)busy, sum == lsum ? "right" : "WRONG");
        must(sum == lsum, "the paged sweep's sum equals the local one");
    }
    return 0;
}
