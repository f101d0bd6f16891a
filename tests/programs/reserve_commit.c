/* A heap made the way the JVM makes one: reserve address space PROT_NONE
 * (at a hinted address), commit pieces with mmap(MAP_FIXED) and mprotect,
 * guard a page whose SIGSEGV the program handles itself, uncommit with
 * mmap(MAP_FIXED, PROT_NONE) and madvise, map a file and executable memory
 * at fixed addresses inside the reservation, and change protections with
 * the content kept. Every check prints "ok" or "FAILED".
 *
 * usage: reserve_commit MIB (the reservation; 3/4 of it is committed) */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int fails;
#define CHECK(c, what)                                                                                                 \
    do {                                                                                                               \
        int ok_ = (c);                                                                                                 \
        printf("%-44s %s\n", what, ok_ ? "ok" : "FAILED");                                                              \
        fflush(stdout);                                                                                                \
        fails += !ok_;                                                                                                 \
    } while (0)

static sigjmp_buf jb;
static volatile sig_atomic_t segvs;

static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    segvs++;
    siglongjmp(jb, 1);
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static size_t fill(uint64_t *a, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++)
        a[i] = mix(i + seed);
    return n;
}

static size_t bad_words(const uint64_t *a, size_t n, uint64_t seed) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += a[i] != mix(i + seed);
    return bad;
}

static size_t nonzero(const uint64_t *a, size_t n) {
    size_t nz = 0;
    for (size_t i = 0; i < n; i++)
        nz += a[i] != 0;
    return nz;
}

/* Whether reading p faults (SIGSEGV, handled here). */
static int faults_on_read(volatile const char *p) {
    int before = segvs;
    if (sigsetjmp(jb, 1) == 0)
        (void)*p;
    return segvs != before;
}

int main(int argc, char **argv) {
    const size_t MiB = 1UL << 20;
    size_t size = (argc > 1 ? strtoul(argv[1], NULL, 10) : 512) * MiB;
    size_t guard = 2 * MiB, committed = size / 4 * 3 - guard;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);

    /* Reserve, at a hinted address the program may not get. */
    char *base = mmap((void *)0xc0000000UL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(base != MAP_FAILED, "reserve PROT_NONE");
    CHECK(faults_on_read(base + size / 2), "reserved memory faults");

    /* Commit with mmap(MAP_FIXED), fill beyond the budget, read back. */
    uint64_t *heap = (uint64_t *)(base + guard);
    CHECK(mmap(heap, committed, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == heap,
          "commit with mmap(MAP_FIXED)");
    size_t n = fill(heap, committed / 8, 1);
    CHECK(bad_words(heap, n, 1) == 0, "committed memory keeps its content");

    /* A fixed mapping at an address not on a page boundary: refused. */
    errno = 0;
    CHECK(mmap((char *)heap + 1, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
                  MAP_FAILED &&
              errno == EINVAL,
          "unaligned MAP_FIXED is EINVAL");

    /* The guard page: implicit null checks fault there. */
    CHECK(mprotect(base, guard, PROT_NONE) == 0, "guard with mprotect(PROT_NONE)");
    CHECK(faults_on_read(base + 16), "guard faults to the program's handler");

    /* Commit the rest with mprotect. */
    uint64_t *tail = (uint64_t *)(base + guard + committed);
    size_t tail_bytes = size - guard - committed;
    CHECK(mprotect(tail, tail_bytes, PROT_READ | PROT_WRITE) == 0, "commit with mprotect");
    CHECK(nonzero(tail, tail_bytes / 8) == 0, "mprotect-committed memory reads zero");
    fill(tail, tail_bytes / 8, 7);
    CHECK(bad_words(tail, tail_bytes / 8, 7) == 0, "mprotect-committed memory keeps content");

    /* Read-only, then no access, then read-write: content kept. */
    size_t piece = 16 * MiB;
    uint64_t *ro = heap + (8 * MiB) / 8;
    CHECK(mprotect(ro, piece, PROT_READ) == 0, "mprotect(PROT_READ)");
    CHECK(bad_words(ro, piece / 8, 1 + 1 * MiB) == 0, "read-only memory keeps content");
    CHECK(mprotect(ro, piece, PROT_NONE) == 0, "mprotect(PROT_NONE) over content");
    CHECK(faults_on_read((char *)ro + 4096), "protected memory faults");
    CHECK(mprotect(ro, piece, PROT_READ | PROT_WRITE) == 0, "mprotect back to read-write");
    CHECK(bad_words(ro, piece / 8, 1 + 1 * MiB) == 0, "content kept across PROT_NONE");

    /* Uncommit the last 64 MiB of the mmap-committed part, then commit again. */
    size_t un = 64 * MiB;
    char *u = (char *)heap + committed - un;
    CHECK(mmap(u, un, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == u,
          "uncommit with mmap(MAP_FIXED, PROT_NONE)");
    CHECK(faults_on_read(u + 4096), "uncommitted memory faults");
    CHECK(mmap(u, un, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == u,
          "commit again");
    CHECK(nonzero((uint64_t *)u, un / 8) == 0, "recommitted memory reads zero");
    CHECK(bad_words(heap, (committed - un) / 8, 1) == 0, "the rest is untouched");

    /* madvise(MADV_DONTNEED): zero. */
    CHECK(madvise(heap, 4 * MiB, MADV_DONTNEED) == 0, "madvise(MADV_DONTNEED)");
    CHECK(nonzero(heap, 4 * MiB / 8) == 0, "dropped memory reads zero");

    /* A file mapped at a fixed address inside the reservation (the JVM's
     * class-data archive), and executable memory (its code cache). */
    char path[] = "/tmp/reserve_commit.XXXXXX";
    int fd = mkstemp(path);
    char text[8192];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + i % 26);
    CHECK(fd >= 0 && write(fd, text, sizeof text) == (ssize_t)sizeof text, "write a file");
    char *f = (char *)heap + 32 * MiB;
    CHECK(mmap(f, sizeof text, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == f, "map a file at a fixed address");
    CHECK(memcmp(f, text, sizeof text) == 0, "the file's bytes are there");
    close(fd);
    unlink(path);
    char *code = (char *)heap + 40 * MiB;
    CHECK(mmap(code, MiB, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == code,
          "executable memory at a fixed address");
    static const unsigned char ret42[] = {0xb8, 42, 0, 0, 0, 0xc3}; /* mov eax, 42; ret */
    memcpy(code, ret42, sizeof ret42);
    CHECK(((int (*)(void))(void *)code)() == 42, "code runs there");
    CHECK(mprotect(code, MiB, PROT_READ | PROT_EXEC) == 0, "mprotect of the executable piece");
    CHECK(((int (*)(void))(void *)code)() == 42, "code still runs");
    /* Commit over the lent pieces: far again, zero. */
    CHECK(mmap(f, 16 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == f,
          "commit over the file mapping");
    CHECK(nonzero((uint64_t *)f, 16 * MiB / 8) == 0, "it reads zero");

    /* Second pass over everything committed far. */
    CHECK(bad_words(ro, piece / 8, 1 + 1 * MiB) == 0, "second pass: protected piece");
    CHECK(bad_words(heap + (48 * MiB) / 8, (committed - un - 48 * MiB) / 8, 1 + 6 * MiB) == 0,
          "second pass: the heap");
    CHECK(bad_words(tail, tail_bytes / 8, 7) == 0, "second pass: the tail");

    /* Give it back: part, then all. */
    CHECK(munmap(code, MiB) == 0, "munmap the executable piece");
    CHECK(munmap(base, size) == 0, "munmap the reservation");
    printf("%s\n", fails ? "FAILED" : "all ok");
    return fails != 0;
}
