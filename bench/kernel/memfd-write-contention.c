/* What two threads writing pages into one memory file cost, against each
 * writing its own file: shmem takes the file's lock for every write, so
 * writers of one file go one at a time. farmem writes dirty pages back into
 * the memory server's chunk files (one file per 64 MiB chunk), from every
 * thread that evicts.
 * Each thread writes 200,000 single pages at random offsets of a 64 MiB
 * memory file whose pages exist already (as in a steady state).
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/memfd-write-contention bench/kernel/memfd-write-contention.c
 *        /tmp/memfd-write-contention */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kbench.h"

#define PAGE 4096UL
#define PAGES 16384UL
#define WRITES 200000

struct writer {
    int fd;
    unsigned seed;
    double ns;
};

static void *write_pages(void *arg) {
    struct writer *w = arg;
    char *buf = aligned_alloc(PAGE, PAGE);
    must(buf != NULL, "aligned_alloc");
    memset(buf, (int)w->seed, PAGE);
    unsigned s = w->seed;
    double t0 = now_ns();
    for (int i = 0; i < WRITES; i++) {
        s = s * 1103515245u + 12345u;
        size_t p = (s >> 8) % PAGES;
        must(pwrite(w->fd, buf, PAGE, (off_t)(p * PAGE)) == (ssize_t)PAGE, "pwrite");
    }
    w->ns = (now_ns() - t0) / WRITES;
    free(buf);
    return NULL;
}

static int chunk_file(void) {
    int fd = memfd_create("chunk", MFD_CLOEXEC);
    must(fd >= 0 && ftruncate(fd, (off_t)(PAGES * PAGE)) == 0, "memfd");
    must(fallocate(fd, 0, 0, (off_t)(PAGES * PAGE)) == 0, "fallocate");
    return fd;
}

/* ns per page for each of `n` threads, writing file fds[i]. */
static void run(const char *what, int n, const int *fds) {
    pthread_t th[2];
    struct writer w[2];
    for (int i = 0; i < n; i++) {
        w[i] = (struct writer){.fd = fds[i], .seed = 7u * (unsigned)i + 1u, .ns = 0};
        must(pthread_create(&th[i], NULL, write_pages, &w[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    printf("%-28s", what);
    for (int i = 0; i < n; i++)
        printf(" %8.0f", w[i].ns);
    printf("  ns per page\n");
}

int main(void) {
    int a = chunk_file(), b = chunk_file();
    int one[] = {a}, same[] = {a, a}, two[] = {a, b};
    for (int round = 0; round < 2; round++) {
        run("one thread", 1, one);
        run("two threads, one file", 2, same);
        run("two threads, a file each", 2, two);
    }
    return 0;
}
