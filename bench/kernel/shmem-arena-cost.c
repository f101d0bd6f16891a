/* Would an arena of shared memory (a memory file mapped MAP_SHARED, faults
 * taken in userfaultfd's MINOR mode) make far pages cheaper to move than
 * today's private anonymous arena? Per page, both ways:
 *
 *   anon (farmem today): install = pread the page into a buffer,
 *     UFFDIO_COPY it in write-protected; evict a dirty page =
 *     UFFDIO_WRITEPROTECT it (so no write slips in while it is copied:
 *     one TLB flush each), pwrite it to the far file, then unmap the batch
 *     with one process_madvise(MADV_DONTNEED).
 *   shmem: install = pread the page straight into the arena's file through
 *     a second mapping (one copy), UFFDIO_CONTINUE it in write-protected;
 *     evict a dirty page = unmap the batch first with one process_madvise
 *     (the page stays in the file; a writer now takes a MINOR fault and
 *     waits, so no write-protect is needed), pwrite it to the far file from
 *     the second mapping, then punch it out of the file (fallocate).
 *   shmem, no second mapping: the same, but the page is copied between the
 *     two files by copy_file_range, so no second mapping of it needs
 *     unmapping when it is punched out.
 * The last lines give the evictions' parts, per arena kind and pattern over
 * both rounds: the unmap, the write-back, and the write-protect (anon) or
 * the punch (shmem), in ns per page evicted.
 *
 * Pages are scattered (every third page of 64 MiB: random faults, a graph
 * builder's victims) in batches of 32 (farmem's eviction batch), or runs of
 * 64 (a stream). Every page is dirtied before it is evicted. With THREADS=1
 * a second thread spins meanwhile, so every TLB flush must reach its CPU
 * (in a VM, an exit). Two rounds.
 * usage: gcc -O2 -Wall -Wextra -Werror -pthread -o /tmp/shmem-arena-cost bench/kernel/shmem-arena-cost.c
 *        /tmp/shmem-arena-cost [THREADS=0|1]   (Linux 6.16+, root or vm.unprivileged_userfaultfd=1) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kbench.h"

#ifndef UFFDIO_CONTINUE_MODE_WP
#define UFFDIO_CONTINUE_MODE_WP ((__u64)1 << 1)
#endif
#define PIDFD_SELF_THREAD_GROUP (-10001)
#define PAGE 4096UL
#define PAGES (1UL << 14)
#define BATCH 32

/* The evictions' parts, by arena kind and pattern (0: scattered, 1: runs),
 * over both rounds: unmap, write back, and the punch (shmem) or the
 * write-protect (anon); pages. */
static double parts[3][2][3];
static size_t part_pages[3][2];
static int far;          /* the far copy: a memory file */
static char *buf;        /* anon's receive buffer, one run */
static char *zero_src;   /* source for the first fill */

struct arena {
    int shmem;
    int uffd;
    int mfd;     /* shmem: the arena's file */
    char *a;     /* the arena, registered */
    char *alias; /* shmem: the same file, mapped again, not registered */
};

/* shmem: 0 anonymous, 1 a memory file and a second mapping of it, 2 a
 * memory file copied to and from by copy_file_range. */
static void open_arena(struct arena *r, int shmem) {
    r->shmem = shmem;
    r->uffd = uffd_open(O_CLOEXEC,
                        UFFD_FEATURE_PAGEFAULT_FLAG_WP |
                            (shmem ? UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_WP_HUGETLBFS_SHMEM : 0),
                        "UFFDIO_API");
    if (shmem) {
        r->mfd = memfd_create("arena", MFD_CLOEXEC);
        must(r->mfd >= 0 && ftruncate(r->mfd, (off_t)(PAGES * PAGE)) == 0, "memfd");
        r->a = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, r->mfd, 0);
        r->alias = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, r->mfd, 0);
        must(r->a != MAP_FAILED && r->alias != MAP_FAILED, "mmap shmem");
    } else {
        r->a = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        must(r->a != MAP_FAILED, "mmap anon");
        madvise(r->a, PAGES * PAGE, MADV_NOHUGEPAGE);
    }
    struct uffdio_register reg = {.range = {(unsigned long)r->a, PAGES * PAGE},
                                  .mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP |
                                          (shmem ? UFFDIO_REGISTER_MODE_MINOR : 0)};
    must(ioctl(r->uffd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER");
}

/* Bring pages [p, p+n) in from the far file, write-protected (clean). */
static void install(struct arena *r, size_t p, size_t n) {
    if (r->shmem) {
        if (r->shmem == 2) {
            loff_t i = (loff_t)(p * PAGE), o = (loff_t)(p * PAGE);
            must(copy_file_range(far, &i, r->mfd, &o, n * PAGE, 0) == (ssize_t)(n * PAGE), "copy_file_range in");
        } else
            must(pread(far, r->alias + p * PAGE, n * PAGE, (off_t)(p * PAGE)) == (ssize_t)(n * PAGE), "pread alias");
        struct uffdio_continue c = {.range = {(unsigned long)(r->a + p * PAGE), n * PAGE}, .mode = UFFDIO_CONTINUE_MODE_WP, .mapped = 0};
        must(ioctl(r->uffd, UFFDIO_CONTINUE, &c) == 0, "UFFDIO_CONTINUE (MODE_WP: Linux 6.4+)");
    } else {
        must(pread(far, buf, n * PAGE, (off_t)(p * PAGE)) == (ssize_t)(n * PAGE), "pread");
        struct uffdio_copy c = {.dst = (unsigned long)(r->a + p * PAGE), .src = (unsigned long)buf, .len = n * PAGE, .mode = UFFDIO_COPY_MODE_WP, .copy = 0};
        must(ioctl(r->uffd, UFFDIO_COPY, &c) == 0, "UFFDIO_COPY");
    }
}

/* Make pages [p, p+n) writable and write them (a write fault resolved). */
static void dirty(struct arena *r, size_t p, size_t n) {
    struct uffdio_writeprotect wp = {.range = {(unsigned long)(r->a + p * PAGE), n * PAGE}, .mode = 0};
    must(ioctl(r->uffd, UFFDIO_WRITEPROTECT, &wp) == 0, "UFFDIO_WRITEPROTECT off");
    for (size_t i = 0; i < n; i++)
        r->a[(p + i) * PAGE] ^= 1;
}

/* Evict the dirty runs [first[i], first[i]+n) of a batch. */
static void evict(struct arena *r, const size_t *first, size_t runs, size_t n) {
    struct iovec iov[BATCH];
    for (size_t i = 0; i < runs; i++) {
        iov[i].iov_base = r->a + first[i] * PAGE;
        iov[i].iov_len = n * PAGE;
    }
    if (r->shmem) {
        double t0 = now_ns();
        must(syscall(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, iov, runs, MADV_DONTNEED, 0) == (long)(runs * n * PAGE), "process_madvise");
        double t1 = now_ns();
        for (size_t i = 0; i < runs; i++) {
            if (r->shmem == 2) {
                loff_t i2 = (loff_t)(first[i] * PAGE), o = (loff_t)(first[i] * PAGE);
                must(copy_file_range(r->mfd, &i2, far, &o, n * PAGE, 0) == (ssize_t)(n * PAGE), "copy_file_range out");
            } else
                must(pwrite(far, r->alias + first[i] * PAGE, n * PAGE, (off_t)(first[i] * PAGE)) == (ssize_t)(n * PAGE), "pwrite");
        }
        double t2 = now_ns();
        for (size_t i = 0; i < runs; i++) {
            must(fallocate(r->mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(first[i] * PAGE), (off_t)(n * PAGE)) == 0, "punch");
        }
        double *pt = parts[r->shmem][n > 1];
        pt[0] += t1 - t0, pt[1] += t2 - t1, pt[2] += now_ns() - t2;
        part_pages[r->shmem][n > 1] += runs * n;
    } else {
        double t0 = now_ns(), wp_ns = 0;
        for (size_t i = 0; i < runs; i++) {
            double tw = now_ns();
            struct uffdio_writeprotect wp = {.range = {(unsigned long)(r->a + first[i] * PAGE), n * PAGE}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
            must(ioctl(r->uffd, UFFDIO_WRITEPROTECT, &wp) == 0, "UFFDIO_WRITEPROTECT");
            wp_ns += now_ns() - tw;
            must(pwrite(far, r->a + first[i] * PAGE, n * PAGE, (off_t)(first[i] * PAGE)) == (ssize_t)(n * PAGE), "pwrite");
        }
        double t1 = now_ns();
        must(syscall(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, iov, runs, MADV_DONTNEED, 0) == (long)(runs * n * PAGE), "process_madvise");
        double *pt = parts[0][n > 1];
        pt[0] += now_ns() - t1, pt[1] += t1 - t0 - wp_ns, pt[2] += wp_ns;
        part_pages[0][n > 1] += runs * n;
    }
}

/* One pass: runs of n pages every `gap` pages, installed, dirtied and
 * evicted in batches; adds ns per page installed and evicted. */
static void pass(struct arena *r, size_t n, size_t gap, double *tin, double *tout, size_t *pages) {
    size_t first[BATCH];
    size_t runs = n == 1 ? BATCH : 1;
    for (size_t p = 0; p + gap * runs <= PAGES; p += gap * runs) {
        for (size_t i = 0; i < runs; i++)
            first[i] = p + i * gap;
        double t = now_ns();
        for (size_t i = 0; i < runs; i++)
            install(r, first[i], n);
        *tin += now_ns() - t;
        for (size_t i = 0; i < runs; i++)
            dirty(r, first[i], n);
        t = now_ns();
        evict(r, first, runs, n);
        *tout += now_ns() - t;
        *pages += runs * n;
    }
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    spin_start(threads);
    far = memfd_create("far", MFD_CLOEXEC);
    must(far >= 0 && ftruncate(far, (off_t)(PAGES * PAGE)) == 0, "memfd far");
    buf = mmap(NULL, 64 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    zero_src = mmap(NULL, 64 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    must(buf != MAP_FAILED && zero_src != MAP_FAILED, "mmap");
    memset(zero_src, 5, 64 * PAGE);
    for (size_t p = 0; p < PAGES; p += 64)
        must(pwrite(far, zero_src, 64 * PAGE, (off_t)(p * PAGE)) == (ssize_t)(64 * PAGE), "fill far");
    struct arena ar[3];
    for (int v = 0; v < 3; v++)
        open_arena(&ar[v], v);
    printf("%s; ns per page (install / evict), two rounds\n", threads ? "a second thread spinning" : "one thread");
    printf("%-26s %16s %16s %16s\n", "pattern", "anon (today)", "shmem, 2 maps", "shmem, copies");
    const char *name[2] = {"scattered, batches of 32", "runs of 64"};
    for (int k = 0; k < 2; k++) {
        size_t n = k == 0 ? 1 : 64, gap = k == 0 ? 3 : 128;
        for (int round = 0; round < 2; round++) {
            double in[3] = {0, 0, 0}, out[3] = {0, 0, 0};
            size_t pages[3] = {0, 0, 0};
            for (int v = 0; v < 3; v++)
                pass(&ar[v], n, gap, &in[v], &out[v], &pages[v]);
            printf("%-26s", name[k]);
            for (int v = 0; v < 3; v++)
                printf(" %7.0f / %-6.0f", in[v] / (double)pages[v], out[v] / (double)pages[v]);
            printf("\n");
        }
    }
    const char *kind[3] = {"anon", "shmem, 2 maps", "shmem, copies"};
    for (int v = 0; v < 3; v++)
        for (int k = 0; k < 2; k++) {
            double pp = (double)part_pages[v][k];
            printf("%s, %s: evict's parts, ns per page: unmap %.0f, write back %.0f, %s %.0f\n", kind[v], name[k],
                   parts[v][k][0] / pp, parts[v][k][1] / pp, v ? "punch" : "write-protect", parts[v][k][2] / pp);
        }
    spin_end();
    return 0;
}
