// Does UFFDIO_MOVE report every page it moved? Thread A moves a run of N
// pages arena->bin and back; thread B keeps changing the first source page's
// PTE (write-protect on/off) so that the move's first try sees it unstable
// (-EAGAIN inside the kernel). After each call, compare the reported count
// with the pages actually present at the destination.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "/work/main/bench/kernel/kbench.h"
#ifndef UFFDIO_MOVE_MODE_DONTWAKE
#define UFFDIO_MOVE_MODE_DONTWAKE ((__u64)1 << 0)
#endif
#define PG 4096UL
#define N 64
static int uffd;
static char *arena, *bin;
static atomic_int stop;
#include <signal.h>
static void onbus(int sig, siginfo_t *si, void *c) { (void)sig; (void)c; char b[160]; int n = snprintf(b, sizeof b, "SIGBUS at %p (arena %p bin %p)\n", si->si_addr, (void*)arena, (void*)bin); write(2, b, n); _exit(3); }
static int present(char *p) { unsigned char v; if (mincore(p, PG, &v)) return -1; return v & 1; }
static void *toggler(void *x) {
    (void)x;
    while (!atomic_load(&stop)) {
        for (int i = 0; i < 2; i++) {
            struct uffdio_writeprotect wp = { .range = { (unsigned long)arena, PG }, .mode = i ? 0 : UFFDIO_WRITEPROTECT_MODE_WP };
            ioctl(uffd, UFFDIO_WRITEPROTECT, &wp);
            wp.range.start = (unsigned long)bin;
            ioctl(uffd, UFFDIO_WRITEPROTECT, &wp);
        }
    }
    return NULL;
}
int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    struct sigaction sa = { .sa_sigaction = onbus, .sa_flags = SA_SIGINFO }; sigaction(SIGBUS, &sa, NULL);
    uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
    struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_SIGBUS | UFFD_FEATURE_MOVE | UFFD_FEATURE_PAGEFAULT_FLAG_WP };
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) { perror("uffd"); return 2; }
    arena = mmap(NULL, N * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    bin = mmap(NULL, N * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(arena, N * PG, MADV_NOHUGEPAGE); madvise(bin, N * PG, MADV_NOHUGEPAGE);
    for (unsigned long i = 0; i < N; i++) memset(arena + i * PG, (int)i + 1, PG);
    for (int i = 0; i < 2; i++) {
        struct uffdio_register r = { .range = { (unsigned long)(i ? bin : arena), N * PG }, .mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP };
        if (ioctl(uffd, UFFDIO_REGISTER, &r)) { perror("register"); return 2; }
    }
    pthread_t t; pthread_create(&t, NULL, toggler, NULL);
    long short_calls = 0, lies = 0, errors = 0;
    char *src = arena, *dst = bin;
    for (long it = 0; it < iters; it++) {
        struct uffdio_move m = { .dst = (unsigned long)dst, .src = (unsigned long)src, .len = N * PG, .mode = UFFDIO_MOVE_MODE_DONTWAKE };
        int r = ioctl(uffd, UFFDIO_MOVE, &m);
        long moved = r == 0 ? (long)m.move : (m.move > 0 ? (long)m.move : 0);
        if (r != 0) { if (m.move > 0) short_calls++; else errors++; }
        long actual = 0;
        for (unsigned long i = 0; i < N; i++) actual += present(dst + i * PG) == 1;
        if (actual * (long)PG != moved) {
            lies++;
            if (lies <= 5) printf("iter %ld: reported %ld pages (rc %d, move %lld), %ld at the destination\n", it, moved / (long)PG, r, (long long)m.move, actual);
        }
        // Swap roles: what is at the destination now is moved back next round;
        // pages left behind at the source (a short move) are moved over one by one.
        for (unsigned long i = 0; i < N; i++) {
            if (present(src + i * PG) == 1) {
                struct uffdio_move b = { .dst = (unsigned long)(dst + i * PG), .src = (unsigned long)(src + i * PG), .len = PG, .mode = UFFDIO_MOVE_MODE_DONTWAKE };
                int tries = 0;
                while (ioctl(uffd, UFFDIO_MOVE, &b) && b.move <= 0) { if (++tries > 1000) { printf("cannot move page %lu: %lld\n", i, (long long)b.move); return 2; } b.move = 0; }
            }
        }
        char *tmp = src; src = dst; dst = tmp;
    }
    atomic_store(&stop, 1); pthread_join(t, NULL);
    char *home = src;
    for (unsigned long i = 0; i < N; i++) if (home[i * PG] != (char)(i + 1)) { printf("content of page %lu wrong\n", i); return 1; }
    printf("%ld calls: %ld short, %ld errors, %ld reported a count that differs from the pages moved\n", iters, short_calls, errors, lies);
    return lies ? 1 : 0;
}
