/* Cost per system call on each path farmem adds, for docs/benchmarks.md.
 *
 *   syscall_cost [far]
 *
 * Without "far" the program allocates nothing large (under `farmem run` the
 * runtime never starts: the wrappers' fast path). With "far" it first makes
 * one large allocation, so under `farmem run` the runtime and the
 * raw-syscall net are on, and the "far" rows use a buffer in far memory
 * (resident: the cost measured is the pin/unpin, not a fetch).
 * Prints one line per path: name, calls, ns per call. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long raw_getppid(void) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
    return ret;
}

#define N 400000

static void report(const char *name, double t0, long n) {
    printf("%-28s %8ld %9.1f ns\n", name, n, (now() - t0) * 1e9 / (double)n);
}

int main(int argc, char **argv) {
    int far = argc > 1 && strcmp(argv[1], "far") == 0;
    char local[4096];
    memset(local, 1, sizeof local);
    char *big = NULL;
    if (far) {
        big = malloc(8 << 20);
        if (!big)
            return 1;
        memset(big, 2, 8 << 20);
    }
    int null = open("/dev/null", O_WRONLY);
    int sv[2];
    if (null < 0 || socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0)
        return 1;
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    volatile long sink = 0;
    double t0;

    t0 = now();
    for (long i = 0; i < N; i++)
        sink += getppid();
    report("getppid (libc)", t0, N);

    t0 = now();
    for (long i = 0; i < N; i++)
        sink += syscall(SYS_getppid);
    report("getppid (syscall(2))", t0, N);

    t0 = now();
    for (long i = 0; i < N; i++)
        sink += raw_getppid();
    report("getppid (raw instruction)", t0, N);

    t0 = now();
    for (long i = 0; i < N; i++)
        sink += write(null, local, 64);
    report("write 64 B, local buffer", t0, N);

    struct iovec iov = {local, 64};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    char rbuf[128];
    t0 = now();
    for (long i = 0; i < N; i++) {
        sink += sendmsg(sv[0], &msg, 0);
        sink += recv(sv[1], rbuf, sizeof rbuf, 0);
    }
    report("sendmsg+recv 64 B, local", t0, N);

    t0 = now();
    for (long i = 0; i < N; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
    report("mutex lock+unlock, local", t0, N);

    if (far) {
        t0 = now();
        for (long i = 0; i < N; i++)
            sink += write(null, big + (i % 1024) * 4096, 64);
        report("write 64 B, far (resident)", t0, N);

        iov.iov_base = big;
        t0 = now();
        for (long i = 0; i < N; i++) {
            sink += sendmsg(sv[0], &msg, 0);
            sink += recv(sv[1], rbuf, sizeof rbuf, 0);
        }
        report("sendmsg+recv 64 B, far", t0, N);

        pthread_mutex_t *fm = (pthread_mutex_t *)(big + 4096);
        pthread_mutex_init(fm, NULL);
        t0 = now();
        for (long i = 0; i < N; i++) {
            pthread_mutex_lock(fm);
            pthread_mutex_unlock(fm);
        }
        report("mutex lock+unlock, far", t0, N);
    }
    return sink == 42;
}
