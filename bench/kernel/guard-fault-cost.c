/* What a fault on an absent far page costs the kernel before farmem's
 * handler runs, as farmem leaves such pages today (an empty PTE in a
 * userfaultfd MISSING range, SIGBUS mode) against a guard marker
 * (MADV_GUARD_INSTALL, Linux 6.13) in the same range.
 *
 * Why: on a write to an empty PTE of an anonymous range, Linux allocates,
 * zeroes and charges a page, and only then sees that userfaultfd handles
 * the range, and frees it again (mm/memory.c, do_anonymous_page). A read
 * takes the zero-page branch, which asks userfaultfd first. A guard marker
 * makes the access fail with SIGSEGV before any allocation.
 *
 * Each round faults on ROUNDS x 8192 random pages of a 32 MiB range: the
 * handler installs the page with UFFDIO_COPY (which, on the kernel this
 * was written on, overwrites a guard marker as it does an empty PTE), then
 * the page is evicted again: MADV_DONTNEED (empty PTE) or
 * MADV_GUARD_INSTALL (marker), one call per page, or in batches of 64
 * scattered pages through process_madvise(PIDFD_SELF) as farmem evicts.
 * Modes alternate. With "spin", a second thread spins on the other CPU, so
 * that every TLB flush must interrupt it.
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/guard-fault-cost bench/kernel/guard-fault-cost.c
 *        /tmp/guard-fault-cost [ROUNDS=3] [spin] */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "kbench.h"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef PIDFD_SELF
#define PIDFD_SELF -10000
#endif

#define PAGE 4096UL
#define PAGES 8192UL
#define BATCH 64

static int uffd;
static char *arena, *src;

/* The fault handler farmem's does the least of: install the page. */
static void on_fault(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    unsigned long a = (unsigned long)si->si_addr & ~(PAGE - 1);
    struct uffdio_copy c = {.dst = a, .src = (unsigned long)src, .len = PAGE, .mode = 0, .copy = 0};
    if (ioctl(uffd, UFFDIO_COPY, &c) != 0) {
        /* Not async-signal-safe, but the program stops here anyway. */
        perror("UFFDIO_COPY over an absent page");
        _exit(1);
    }
}

static void evict(int advice, char **pages, int n) {
    if (n == 1) {
        must(madvise(pages[0], PAGE, advice) == 0, "madvise");
        return;
    }
    struct iovec iov[BATCH];
    for (int i = 0; i < n; i++)
        iov[i] = (struct iovec){.iov_base = pages[i], .iov_len = PAGE};
    long r = syscall(SYS_process_madvise, PIDFD_SELF, iov, (unsigned long)n, advice, 0U);
    must(r == (long)(n * PAGE), "process_madvise(PIDFD_SELF) (Linux 6.15+)");
}

/* One pass: fault on PAGES random pages (writes or reads), evicting them
 * `batch` at a time. Prints ns per fault and per page evicted. */
static void pass(const char *mode, int advice, int write, int batch, unsigned seed) {
    char *pending[BATCH];
    int n = 0;
    double tf = 0, te = 0;
    unsigned s = seed;
    for (unsigned long i = 0; i < PAGES; i++) {
        s = s * 1103515245u + 12345u;
        char *p = arena + ((s >> 8) % PAGES) * PAGE;
        /* A page drawn twice in one batch is resident already: no fault. */
        int again = 0;
        for (int k = 0; k < n; k++)
            again |= pending[k] == p;
        if (again)
            continue;
        double t0 = now_ns();
        if (write)
            *(volatile char *)(p + 8) = 1;
        else
            (void)*(volatile char *)(p + 8);
        tf += now_ns() - t0;
        pending[n++] = p;
        if (n == batch) {
            double t1 = now_ns();
            evict(advice, pending, n);
            te += now_ns() - t1;
            n = 0;
        }
    }
    if (n) {
        double t1 = now_ns();
        evict(advice, pending, n);
        te += now_ns() - t1;
    }
    printf("%-8s %-5s evicted %2d at a time: fault + install %6.0f ns, evict %6.0f ns a page\n", mode, write ? "write" : "read",
           batch, tf / PAGES, te / PAGES);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    int with_spin = argc > 2 && strcmp(argv[2], "spin") == 0;
    must(rounds > 0, "ROUNDS must be a positive number");
    uffd = uffd_open(O_CLOEXEC | O_NONBLOCK, UFFD_FEATURE_SIGBUS, "UFFDIO_API (UFFD_FEATURE_SIGBUS)");
    arena = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    must(arena != MAP_FAILED, "mmap");
    struct uffdio_register r = {.range = {.start = (unsigned long)arena, .len = PAGES * PAGE}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    must(ioctl(uffd, UFFDIO_REGISTER, &r) == 0, "UFFDIO_REGISTER");
    src = aligned_alloc(PAGE, PAGE);
    must(src != NULL, "aligned_alloc");
    memset(src, 7, PAGE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    must(sigaction(SIGBUS, &sa, NULL) == 0 && sigaction(SIGSEGV, &sa, NULL) == 0, "sigaction");
    spin_start(with_spin);
    printf("%s\n", with_spin ? "a second thread spinning" : "one thread");
    for (int round = 0; round < rounds; round++) {
        printf("round %d\n", round + 1);
        for (int batch = 1; batch <= BATCH; batch += BATCH - 1) {
            for (int write = 1; write >= 0; write--) {
                /* Empty PTEs: the range as farmem leaves it today. */
                must(madvise(arena, PAGES * PAGE, MADV_DONTNEED) == 0, "madvise(MADV_DONTNEED)");
                pass("empty", MADV_DONTNEED, write, batch, (unsigned)round + 1);
                /* Guard markers on every absent page. */
                must(madvise(arena, PAGES * PAGE, MADV_GUARD_INSTALL) == 0, "madvise(MADV_GUARD_INSTALL) (Linux 6.13+)");
                pass("guard", MADV_GUARD_INSTALL, write, batch, (unsigned)round + 1);
            }
        }
    }
    spin_end();
    return 0;
}
