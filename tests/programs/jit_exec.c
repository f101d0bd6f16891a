/* A JIT's code on far memory: write machine code into a large buffer
 * (past the threshold, so it is far), let it be evicted, mprotect it to
 * read+exec and run it. Executable pages must become local, content kept,
 * and never be far again: their mapping is no longer registered with
 * userfaultfd (VmFlags "um"/"uw" in /proc/self/smaps), so nothing can fetch
 * into it, and their content stays resident while other far memory is
 * paged through several times the budget. Also a piece in the middle of a
 * buffer: its neighbours stay far. Every check prints "ok" or "FAILED".
 *
 * usage: jit_exec MIB [far] (MIB: the memory paged through between the
 * checks, several times `farmem run --local`; far: under `farmem run`, so
 * the buffers must start far) */
#define _GNU_SOURCE
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
        printf("%-52s %s\n", what, ok_ ? "ok" : "FAILED");                                                              \
        fflush(stdout);                                                                                                \
        fails += !ok_;                                                                                                 \
    } while (0)

#define MiB (1024UL * 1024UL)
#define CODE_BYTES (4 * MiB)

/* mov eax, 42; ret */
static const unsigned char ret42[] = {0xb8, 42, 0, 0, 0, 0xc3};

/* The mapping of /proc/self/smaps that holds `p`: its VmFlags line (after
 * the colon) and its Rss in kB. Returns 0 if found. */
static int vma_of(const void *p, char *flags, size_t n, long *rss_kb, unsigned long *len) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int in = 0, found = -1;
    uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (in)
                break;
            in = a >= lo && a < hi;
            if (in)
                *len = hi - lo;
            continue;
        }
        if (!in)
            continue;
        if (strncmp(line, "Rss:", 4) == 0)
            *rss_kb = strtol(line + 4, NULL, 10);
        if (strncmp(line, "VmFlags:", 8) == 0) {
            size_t k = strlen(line + 8);
            k = k < n ? k : n - 1;
            memcpy(flags, line + 8, k);
            flags[k] = 0;
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/* Whether the mapping holding `p` is registered with userfaultfd: far. */
static int is_far(const void *p) {
    char flags[256] = "";
    long rss = 0;
    unsigned long len = 0;
    if (vma_of(p, flags, sizeof flags, &rss, &len) != 0)
        return -1;
    return strstr(flags, " um") != NULL || strstr(flags, " uw") != NULL;
}

static int has_flag(const void *p, const char *flag) {
    char flags[256] = "";
    long rss = 0;
    unsigned long len = 0;
    if (vma_of(p, flags, sizeof flags, &rss, &len) != 0)
        return 0;
    char want[8];
    snprintf(want, sizeof want, " %s", flag);
    return strstr(flags, want) != NULL;
}

/* Fill page i of `b` with a pattern of its own (page 0 keeps the code). */
static void fill(unsigned char *b, size_t bytes) {
    for (size_t i = 1; i < bytes / 4096; i++)
        memset(b + i * 4096, (int)(i * 7 + 1), 4096);
}

static size_t bad_pages(const unsigned char *b, size_t bytes) {
    size_t bad = 0;
    for (size_t i = 1; i < bytes / 4096; i++)
        for (size_t j = 0; j < 4096; j += 512)
            bad += b[i * 4096 + j] != (unsigned char)(i * 7 + 1);
    return bad;
}

/* Page through `mib` MiB of other far memory, twice: everything that can
 * leave the local budget does. */
static void thrash(size_t mib) {
    size_t bytes = mib * MiB;
    volatile unsigned char *t = malloc(bytes);
    if (!t) {
        perror("malloc");
        exit(2);
    }
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < bytes; i += 4096)
            t[i] = (unsigned char)(i >> 12) + (unsigned char)pass;
    free((void *)t);
}

static int call(const void *code) {
    int (*f)(void);
    memcpy(&f, &code, sizeof f);
    return f();
}

int main(int argc, char **argv) {
#if !defined(__x86_64__)
    (void)argc;
    (void)argv;
    puts("skipped: the machine code is x86-64");
    return 0;
#else
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    int under_farmem = argc > 2 && strcmp(argv[2], "far") == 0;

    unsigned char *code = mmap(NULL, CODE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(code != MAP_FAILED, "a large read-write buffer");
    if (code == MAP_FAILED)
        return 1;
    if (under_farmem)
        CHECK(is_far(code) == 1, "it is far memory (registered with userfaultfd)");
    memcpy(code, ret42, sizeof ret42);
    fill(code, CODE_BYTES);
    /* Its pages leave for the server before it becomes code. */
    thrash(mib);
    CHECK(mprotect(code, CODE_BYTES, PROT_READ | PROT_EXEC) == 0, "mprotect(PROT_READ | PROT_EXEC)");
    CHECK(call(code) == 42, "the code runs: 42");
    CHECK(bad_pages(code, CODE_BYTES) == 0, "its other pages kept their content");
    CHECK(is_far(code) == 0, "the code is local (not registered with userfaultfd)");
    CHECK(has_flag(code, "ex"), "the code's mapping is executable");

    /* Far memory paged through again: the code stays, resident. */
    thrash(mib);
    CHECK(call(code) == 42, "after paging through other memory: 42");
    CHECK(is_far(code) == 0, "the code is still local");
    {
        char flags[256] = "";
        long rss = 0;
        unsigned long len = 0;
        CHECK(vma_of(code, flags, sizeof flags, &rss, &len) == 0 && len >= CODE_BYTES &&
                  rss * 1024 >= (long)CODE_BYTES,
              "all of its pages stayed resident");
    }
    /* Back to read-write (a JIT patching its code), and exec again: local. */
    CHECK(mprotect(code, CODE_BYTES, PROT_READ | PROT_WRITE) == 0, "mprotect back to read-write");
    code[1] = 43;
    CHECK(mprotect(code, CODE_BYTES, PROT_READ | PROT_EXEC) == 0, "and to read+exec again");
    CHECK(call(code) == 43, "the patched code runs: 43");
    CHECK(is_far(code) == 0, "still local");
    CHECK(munmap(code, CODE_BYTES) == 0, "munmap the code");

    /* A piece in the middle of a buffer: only it becomes local. */
    unsigned char *buf = mmap(NULL, 8 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(buf != MAP_FAILED, "a second buffer");
    if (buf == MAP_FAILED)
        return 1;
    fill(buf, 8 * MiB);
    unsigned char *piece = buf + 2 * MiB;
    memcpy(piece, ret42, sizeof ret42);
    thrash(mib);
    CHECK(mprotect(piece, MiB, PROT_READ | PROT_EXEC) == 0, "mprotect a piece in the middle to read+exec");
    CHECK(call(piece) == 42, "the piece runs: 42");
    CHECK(is_far(piece) == 0, "the piece is local");
    if (under_farmem) {
        CHECK(is_far(buf) == 1, "the part before it is still far");
        CHECK(is_far(buf + 4 * MiB) == 1, "the part after it is still far");
    }
    {
        /* Every page kept its pattern (but the code's first bytes). */
        size_t bad = 0;
        for (size_t i = 1; i < 8 * MiB / 4096; i++)
            for (size_t j = (i == 512 ? 512 : 0); j < 4096; j += 512)
                bad += buf[i * 4096 + j] != (unsigned char)(i * 7 + 1);
        CHECK(bad == 0, "the whole buffer kept its content");
    }
    buf[4096] = 1; /* the page before the piece stays writable */
    buf[4 * MiB] = 1;
    CHECK(munmap(buf, 8 * MiB) == 0, "munmap the second buffer");

    puts(fails ? "FAILED" : "all ok");
    return fails != 0;
#endif
}
