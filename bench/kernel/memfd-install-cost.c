/* Bringing a run of far pages in from a memory file, per page, three ways
 * (issue 42: can the two copies of the memory-file path become one?):
 *   pread:    pread the run into a private buffer, checksum it there,
 *             UFFDIO_COPY it in (what farmem does: two copies);
 *   map:      mmap the run of the file (MAP_POPULATE), checksum it there,
 *             UFFDIO_COPY straight from the mapping, munmap (one copy);
 *   populate: one mapping of the whole file; MADV_POPULATE_READ the run,
 *             checksum, UFFDIO_COPY from it, MADV_DONTNEED it (one copy).
 * Each then unmaps the installed run (MADV_DONTNEED), as an eviction would,
 * and sweeps a 512 MiB file in order. A fourth figure times the pread alone.
 * The checksum is CRC32C with SSE4.2, 8 bytes a step, as a stand-in for the
 * runtime's. Two rounds, to see the spread.
 * usage: gcc -O2 -msse4.2 -Wall -Wextra -Werror -o /tmp/memfd-install-cost bench/kernel/memfd-install-cost.c
 *        /tmp/memfd-install-cost [BATCH=64]   (root, or vm.unprivileged_userfaultfd=1) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <nmmintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kbench.h"

#define PAGE 4096L
#define FILE_BYTES (512L << 20)
#define REGION_BYTES (64L << 20)

static uint64_t crc(const char *p) {
    uint64_t c = 0;
    for (long i = 0; i < PAGE; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        c = _mm_crc32_u64(c, w);
    }
    return c;
}

static void install(int uffd, char *dst, const char *src, long len) {
    struct uffdio_copy c = {.dst = (unsigned long)dst, .src = (unsigned long)src, .len = (unsigned long)len, .mode = 0, .copy = 0};
    must(ioctl(uffd, UFFDIO_COPY, &c) == 0, "UFFDIO_COPY");
    must(madvise(dst, (size_t)len, MADV_DONTNEED) == 0, "MADV_DONTNEED");
}

int main(int argc, char **argv) {
    long b = argc > 1 ? atol(argv[1]) : 64;
    must(b >= 1 && b <= 512, "BATCH must be 1..512");
    long run = b * PAGE, npages = FILE_BYTES / PAGE;
    int fd = memfd_create("far", 0);
    must(fd >= 0 && ftruncate(fd, FILE_BYTES) == 0, "memfd_create");
    char *w = mmap(NULL, (size_t)FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    must(w != MAP_FAILED, "mmap");
    memset(w, 7, (size_t)FILE_BYTES);
    munmap(w, (size_t)FILE_BYTES);
    int uffd = uffd_open(O_CLOEXEC | O_NONBLOCK, UFFD_FEATURE_SIGBUS, "UFFDIO_API");
    char *region = mmap(NULL, (size_t)REGION_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    char *slot = mmap(NULL, (size_t)run, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *whole = mmap(NULL, (size_t)FILE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    must(region != MAP_FAILED && slot != MAP_FAILED && whole != MAP_FAILED, "mmap");
    madvise(region, (size_t)REGION_BYTES, MADV_NOHUGEPAGE);
    memset(slot, 1, (size_t)run);
    struct uffdio_register r = {.range = {(unsigned long)region, (unsigned long)REGION_BYTES}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    must(ioctl(uffd, UFFDIO_REGISTER, &r) == 0, "UFFDIO_REGISTER");
    volatile uint64_t sink = 0;
    for (int round = 1; round <= 2; round++) {
        double t = now_ns() * 1e-9, per[4];
        long n = 0;
        for (long p = 0; p + b <= npages; p += b, n++) {
            char *dst = region + (p * PAGE) % REGION_BYTES;
            must(pread(fd, slot, (size_t)run, p * PAGE) == run, "pread");
            for (long k = 0; k < b; k++)
                sink += crc(slot + k * PAGE);
            install(uffd, dst, slot, run);
        }
        per[0] = (now_ns() * 1e-9 - t) / (double)(n * b) * 1e6;
        t = now_ns() * 1e-9;
        n = 0;
        for (long p = 0; p + b <= npages; p += b, n++) {
            char *dst = region + (p * PAGE) % REGION_BYTES;
            char *m = mmap(NULL, (size_t)run, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, p * PAGE);
            must(m != MAP_FAILED, "mmap run");
            for (long k = 0; k < b; k++)
                sink += crc(m + k * PAGE);
            install(uffd, dst, m, run);
            munmap(m, (size_t)run);
        }
        per[1] = (now_ns() * 1e-9 - t) / (double)(n * b) * 1e6;
        t = now_ns() * 1e-9;
        n = 0;
        for (long p = 0; p + b <= npages; p += b, n++) {
            char *dst = region + (p * PAGE) % REGION_BYTES, *m = whole + p * PAGE;
            must(madvise(m, (size_t)run, MADV_POPULATE_READ) == 0, "MADV_POPULATE_READ");
            for (long k = 0; k < b; k++)
                sink += crc(m + k * PAGE);
            install(uffd, dst, m, run);
            must(madvise(m, (size_t)run, MADV_DONTNEED) == 0, "MADV_DONTNEED (file)");
        }
        per[2] = (now_ns() * 1e-9 - t) / (double)(n * b) * 1e6;
        t = now_ns() * 1e-9;
        n = 0;
        for (long p = 0; p + b <= npages; p += b, n++)
            must(pread(fd, slot, (size_t)run, p * PAGE) == run, "pread");
        per[3] = (now_ns() * 1e-9 - t) / (double)(n * b) * 1e6;
        printf("round %d, runs of %ld pages, us/page: pread+crc+copy+unmap %.3f | map+crc+copy+munmap+unmap %.3f | "
               "populate+crc+copy+drop+unmap %.3f | pread alone %.3f\n",
               round, b, per[0], per[1], per[2], per[3]);
    }
    return (int)(sink & 0);
}
