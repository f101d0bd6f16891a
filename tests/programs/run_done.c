/* Issue 3's "done means" program, run unmodified under `farmem run --local 64M`:
 * fill 512 MiB from two OpenMP threads and verify it; read a file into the
 * middle; write part of it to a pipe; realloc to 1 GiB; calloc 256 MiB more;
 * fork. Everything is checked to the byte. usage: run_done FILE
 * (FILE: 8 MiB made by the test, byte i = (i * 7 + 3) & 0xff). */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#define MB (1024UL * 1024UL)
static int fails;
#define CHECK(c, what)                                                                                                 \
    do {                                                                                                               \
        int ok_ = (c);                                                                                                 \
        printf("%-40s %s\n", what, ok_ ? "ok" : "FAILED");                                                              \
        fflush(stdout);                                                                                                \
        fails += !ok_;                                                                                                 \
    } while (0)

static uint64_t v(size_t i) { return i * 0x9E3779B97F4A7C15ULL + 17; }

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    size_t n = 512 * MB / 8;
    uint64_t *a = malloc(n * 8);
    if (!a)
        return 2;
    omp_set_num_threads(2);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        a[i] = v(i);
    size_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
    for (size_t i = 0; i < n; i++)
        bad += a[i] != v(i);
    CHECK(bad == 0, "fill 512M from 2 threads and verify");

    /* Read an 8 MiB file into the middle. */
    unsigned char *mid = (unsigned char *)a + 256 * MB + 12345;
    int fd = open(argv[1], O_RDONLY);
    size_t got = 0;
    while (got < 8 * MB) {
        ssize_t r = read(fd, mid + got, 8 * MB - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    int ok = got == 8 * MB;
    for (size_t i = 0; ok && i < 8 * MB; i++)
        ok = mid[i] == (unsigned char)((i * 7 + 3) & 0xff);
    CHECK(ok, "read a file into the middle");

    /* Write part of it to a pipe and read it back. */
    int pp[2];
    if (pipe(pp))
        return 2;
    unsigned char back[60000];
    ok = write(pp[1], (unsigned char *)a + 100 * MB, sizeof back) == (ssize_t)sizeof back;
    ok = ok && read(pp[0], back, sizeof back) == (ssize_t)sizeof back &&
         memcmp(back, (unsigned char *)a + 100 * MB, sizeof back) == 0;
    CHECK(ok, "write part of it to a pipe");

    /* realloc to 1 GiB keeps the content. */
    uint64_t *b = realloc(a, 1024 * MB);
    if (!b)
        return 2;
    unsigned char *mid2 = (unsigned char *)b + 256 * MB + 12345;
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = (unsigned char *)&b[i];
        if (p + 8 <= mid2 || p >= mid2 + 8 * MB)
            bad += b[i] != v(i);
    }
    for (size_t i = 0; i < 8 * MB; i++)
        bad += mid2[i] != (unsigned char)((i * 7 + 3) & 0xff);
    memset((unsigned char *)b + 512 * MB, 0x5A, 512 * MB);
    CHECK(bad == 0, "realloc to 1G keeps every byte");

    /* calloc 256 MiB more: zero. */
    unsigned char *c = calloc(256, MB);
    if (!c)
        return 2;
    bad = 0;
    for (size_t i = 0; i < 256 * MB; i += 4096 - 1)
        bad += c[i] != 0;
    CHECK(bad == 0, "calloc 256M reads zero");

    /* fork: a child that does not touch far memory runs normally; one that
     * does stops at once (it never sees zero or stale data). */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        _exit(42);
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42, "fork: a child that touches nothing");
    pid = fork();
    if (pid == 0) {
        volatile uint64_t x = b[12345];
        _exit(x == v(12345) ? 0 : 9);
    }
    waitpid(pid, &st, 0);
    CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0) || WIFSIGNALED(st), "fork: a touching child is right or stopped");

    /* The parent's data survived all of it. */
    bad = 0;
    for (size_t i = 512 * MB; i < 1024 * MB; i += 4093)
        bad += ((unsigned char *)b)[i] != 0x5A;
    for (size_t i = 0; i < 8 * MB; i += 97)
        bad += mid2[i] != (unsigned char)((i * 7 + 3) & 0xff);
    CHECK(bad == 0, "parent data intact after fork");
    free(b);
    free(c);
    printf("%d failed\n", fails);
    return fails ? 1 : 0;
}
