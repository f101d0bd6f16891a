/* What the kernel microbenchmarks share: stop with the failing call's
 * name, a monotonic clock, a second thread that spins on the other CPU
 * (so that every TLB flush of the process must interrupt it), and the
 * UFFDIO_MOVE ABI (Linux 6.8), which Debian 12's headers predate, with a
 * move that stops on failure.
 * Include it after the system headers. */
#ifndef KBENCH_H
#define KBENCH_H

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

/* Move `len` bytes of pages from `src` to `dst` with UFFDIO_MOVE, or stop. */
static inline void uffd_move(int uffd, char *dst, char *src, long len) {
    struct uffdio_move m = {.dst = (unsigned long)dst, .src = (unsigned long)src, .len = (unsigned long)len, .mode = 0, .move = 0};
    must(ioctl(uffd, UFFDIO_MOVE, &m) == 0, "UFFDIO_MOVE");
}

/* Nanoseconds on the monotonic clock. */
static inline double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* A userfaultfd opened with `flags` (O_CLOEXEC, O_NONBLOCK) and handshaken
 * for `features`; `what` names what a refusal means (the kernel lacks a
 * feature). */
static inline int uffd_open(int flags, __u64 features, const char *what) {
    int fd = (int)syscall(SYS_userfaultfd, flags);
    must(fd >= 0, "userfaultfd");
    struct uffdio_api api = {.api = UFFD_API, .features = features};
    must(ioctl(fd, UFFDIO_API, &api) == 0, what);
    return fd;
}

/* The spinning thread, started by `spin_start(1)`, runs until `spin_end`. */
static volatile int spin_stop;
static pthread_t spinner;
static int spinning;
static inline void *spin(void *arg) {
    (void)arg;
    while (!spin_stop) {
    }
    return NULL;
}
static inline void spin_start(int on) {
    spinning = on;
    if (on) {
        /* pthread_create returns its error instead of setting errno. */
        errno = pthread_create(&spinner, NULL, spin, NULL);
        must(errno == 0, "pthread_create");
    }
}
static inline void spin_end(void) {
    spin_stop = 1;
    if (spinning)
        pthread_join(spinner, NULL);
}

#endif
