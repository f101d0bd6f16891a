/* What the kernel microbenchmarks share: stop with the failing call's
 * name, a monotonic clock, a second thread that spins on the other CPU
 * (so that every TLB flush of the process must interrupt it), and the
 * UFFDIO_MOVE ABI (Linux 6.8), which Debian 12's headers predate.
 * Include it after the system headers. */
#ifndef KBENCH_H
#define KBENCH_H

#include <linux/userfaultfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef UFFDIO_MOVE
#define _UFFDIO_MOVE 0x05
struct uffdio_move {
    __u64 dst, src, len, mode;
    __s64 move;
};
#define UFFDIO_MOVE _IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#endif
#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
#endif

static inline void must(int ok, const char *what) {
    if (!ok) {
        perror(what);
        exit(1);
    }
}

/* Nanoseconds on the monotonic clock. */
static inline double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* The spinning thread runs until `spin_stop` is set. */
static volatile int spin_stop;
static inline void *spin(void *arg) {
    (void)arg;
    while (!spin_stop) {
    }
    return NULL;
}

#endif
