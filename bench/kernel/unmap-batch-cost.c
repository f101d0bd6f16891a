/* What unmapping scattered pages costs, per page: one madvise(MADV_DONTNEED)
 * per page against one process_madvise(PIDFD_SELF, iovec[BATCH]) per batch
 * (Linux 6.15+ advises the caller with no descriptor; 6.16+ flushes TLBs
 * once per call). With THREADS=1 a second thread spins meanwhile, so every
 * flush must reach its CPU (in a VM, an exit). Pages are every third of
 * 128 MiB, so no two are adjacent.
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/unmap-batch-cost bench/kernel/unmap-batch-cost.c
 *        /tmp/unmap-batch-cost [THREADS=0|1] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kbench.h"

#define PIDFD_SELF_THREAD_GROUP (-10001)
#define PAGE 4096UL
#define PAGES (1UL << 15)

static void touch(char *a) {
    for (size_t i = 0; i < PAGES; i++)
        a[i * PAGE] = 1;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    spin_start(threads);
    char *a = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED)
        return 2;
    printf("%s\n", threads ? "a second thread spinning" : "one thread");
    for (size_t batch = 1; batch <= 64; batch *= 4) {
        double each = 0, batched = 0;
        size_t n = 0;
        for (int rep = 0; rep < 4; rep++) {
            touch(a);
            double t = now_ns();
            for (size_t i = 0; i + 3 * batch <= PAGES; i += 3 * batch)
                for (size_t j = 0; j < batch; j++)
                    madvise(a + (i + 3 * j) * PAGE, PAGE, MADV_DONTNEED);
            each += now_ns() - t;
            touch(a);
            struct iovec iov[64];
            n = 0;
            t = now_ns();
            for (size_t i = 0; i + 3 * batch <= PAGES; i += 3 * batch) {
                for (size_t j = 0; j < batch; j++) {
                    iov[j].iov_base = a + (i + 3 * j) * PAGE;
                    iov[j].iov_len = PAGE;
                }
                long r = syscall(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, iov, batch,
                                 MADV_DONTNEED, 0);
                if (r != (long)(batch * PAGE)) {
                    perror("process_madvise");
                    return 1;
                }
                n += batch;
            }
            batched += now_ns() - t;
        }
        printf("batch %2zu: madvise each %6.0f ns/page, process_madvise %6.0f ns/page\n", batch,
               each / (4.0 * n), batched / (4.0 * n));
    }
    spin_end();
    return 0;
}
