/* System calls and stdio into and out of far pages that are not resident.
 * Each check evicts the far buffers first (FM_ADV_DONTNEED) so the kernel
 * meets non-resident pages. Prints one line per check; exits non-zero on the
 * first failure. Run with a small FARMEM_LOCAL (e.g. 8M). */
#define _GNU_SOURCE
#ifdef UNDER_SHIM
/* Built without -lfarmem and run under `farmem run`: plain malloc buffers
 * (far because they are large), eviction through the shim's fm_advise. */
#include <dlfcn.h>
#define FM_ADV_DONTNEED 4
static int (*fm_advise_p)(void *, size_t, int);
static const char *fm_last_error(void) { return "(under the shim)"; }
#define fm_alloc(n) malloc(n)
#define fm_advise(p, n, a) (fm_advise_p ? fm_advise_p(p, n, a) : -1)
struct fm_stats {
    unsigned long long s[16];
};
#define fm_stats(st) ((void)(st), 0)
#else
#include <farmem.h>
#endif
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define MB (1024UL * 1024UL)
static const char *dir;
static int failures, checks;

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 12)) & 0xff);
}

static int same(const unsigned char *a, const unsigned char *b, size_t n) { return memcmp(a, b, n) == 0; }

static void check(const char *what, int ok) {
    checks++;
    printf("%-44s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok)
        failures++;
}

static void evict(void *p, size_t n) {
    if (fm_advise(p, n, FM_ADV_DONTNEED) != 0) {
        fprintf(stderr, "fm_advise: %s\n", fm_last_error());
        exit(2);
    }
}

static int tmpfile_fd(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        exit(2);
    }
    return fd;
}

/* Read/write everything, looping over short transfers as careful programs do. */
static ssize_t full(ssize_t (*op)(int, void *, size_t), int fd, void *p, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = op(fd, (char *)p + done, n - done);
        if (r <= 0)
            return r < 0 ? r : (ssize_t)done;
        done += (size_t)r;
    }
    return (ssize_t)done;
}
static ssize_t wr(int fd, void *p, size_t n) { return write(fd, p, n); }

int main(int argc, char **argv) {
    dir = argc > 1 ? argv[1] : "/tmp";
#ifdef UNDER_SHIM
    fm_advise_p = (int (*)(void *, size_t, int))dlsym(RTLD_DEFAULT, "fm_advise");
    if (!fm_advise_p) {
        fprintf(stderr, "not running under the farmem shim\n");
        return 2;
    }
#endif
    size_t big = 48 * MB; /* several times FARMEM_LOCAL */
    unsigned char *far = fm_alloc(big), *far2 = fm_alloc(big);
    unsigned char *ref = malloc(big), *loc = malloc(big);
    if (!far || !far2 || !ref || !loc) {
        fprintf(stderr, "allocation failed: %s\n", fm_last_error());
        return 2;
    }
    fill(ref, big, 1);
    memcpy(far, ref, big);

    /* write(2) from evicted far memory, read back into local memory. */
    int fd = tmpfile_fd("farmem-sys-1");
    evict(far, big);
    check("write from non-resident far buffer (48M)", full(wr, fd, far, big) == (ssize_t)big);
    memset(loc, 0, big);
    check("  file content", pread(fd, loc, big, 0) == (ssize_t)big && same(loc, ref, big));

    /* read(2) into never-touched and into evicted far memory. */
    lseek(fd, 0, SEEK_SET);
    check("read into untouched far buffer (48M)", full(read, fd, far2, big) == (ssize_t)big && same(far2, ref, big));
    evict(far2, big);
    lseek(fd, 0, SEEK_SET);
    memset(far2, 0, big);
    evict(far2, big);
    check("read into evicted far buffer", full(read, fd, far2, big) == (ssize_t)big && same(far2, ref, big));

    /* pread/pwrite at offsets, unaligned. */
    evict(far, big);
    check("pwrite from far, unaligned offset", pwrite(fd, far + 12345, 3 * MB, 777) == (ssize_t)(3 * MB));
    evict(far2, big);
    check("pread into far, unaligned", pread(fd, far2 + 4099, 3 * MB, 777) == (ssize_t)(3 * MB) &&
                                           same(far2 + 4099, ref + 12345, 3 * MB));

    /* readv/writev with several far iovecs. */
    fill(ref, big, 2);
    memcpy(far, ref, big);
    evict(far, big);
    struct iovec wv[3] = {{far, MB}, {far + 20 * MB, 2 * MB}, {far + 40 * MB, 5000}};
    int fd2 = tmpfile_fd("farmem-sys-2");
    check("writev from three far iovecs", writev(fd2, wv, 3) == (ssize_t)(3 * MB + 5000));
    evict(far2, big);
    struct iovec rv[3] = {{far2 + 100, MB}, {far2 + 30 * MB, 2 * MB}, {far2 + 44 * MB, 5000}};
    lseek(fd2, 0, SEEK_SET);
    check("readv into three far iovecs", readv(fd2, rv, 3) == (ssize_t)(3 * MB + 5000) &&
                                             same(far2 + 100, ref, MB) &&
                                             same(far2 + 30 * MB, ref + 20 * MB, 2 * MB) &&
                                             same(far2 + 44 * MB, ref + 40 * MB, 5000));
    /* A vector larger than the pinning chunk goes element by element. */
    struct iovec wbig[2] = {{far, 20 * MB}, {far + 24 * MB, 20 * MB}};
    evict(far, big);
    int fd3 = tmpfile_fd("farmem-sys-3");
    check("writev of 40M (over the pin chunk)", writev(fd3, wbig, 2) == (ssize_t)(40 * MB));
    check("  file content", pread(fd3, loc, 40 * MB, 0) == (ssize_t)(40 * MB) && same(loc, ref, 20 * MB) &&
                               same(loc + 20 * MB, ref + 24 * MB, 20 * MB));

    /* send/recv over a socketpair, both buffers far and evicted. */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 2;
    evict(far, big);
    evict(far2, big);
    size_t chunk = 100000;
    int ok = 1;
    for (int i = 0; i < 4 && ok; i++) {
        ok = send(sv[0], far + (size_t)i * 9 * MB, chunk, 0) == (ssize_t)chunk;
        ok = ok && recv(sv[1], far2 + (size_t)i * 7 * MB, chunk, MSG_WAITALL) == (ssize_t)chunk;
        ok = ok && same(far2 + (size_t)i * 7 * MB, ref + (size_t)i * 9 * MB, chunk);
    }
    check("send/recv far <-> far over a socket", ok);

    /* A pipe: write(2) far data in, read(2) it out into far memory. */
    int pp[2];
    if (pipe(pp) != 0)
        return 2;
    evict(far, big);
    evict(far2, big);
    ok = write(pp[1], far + 5 * MB, 60000) == 60000;
    ok = ok && full(read, pp[0], far2 + 11 * MB, 60000) == 60000 && same(far2 + 11 * MB, ref + 5 * MB, 60000);
    check("pipe write/read with far buffers", ok);

    /* stdio. */
    char path[512];
    snprintf(path, sizeof path, "%s/farmem-sys-4", dir);
    FILE *f = fopen(path, "w+");
    if (!f)
        return 2;
    evict(far, big);
    check("fwrite from far (30M)", fwrite(far + MB, 1, 30 * MB, f) == 30 * MB);
    fflush(f);
    rewind(f);
    evict(far2, big);
    check("fread into far (30M)", fread(far2 + 3, 1, 30 * MB, f) == 30 * MB && same(far2 + 3, ref + MB, 30 * MB));
    rewind(f);
    evict(far2, big);
    check("fread items of 4096 into far", fread(far2, 4096, 100, f) == 100 && same(far2, ref + MB, 409600));
    fclose(f);

    /* Data written by the program after the calls is intact too. */
    far2[0] ^= 0xff;
    evict(far2, big);
    check("write after read is kept", far2[0] == (unsigned char)(ref[MB] ^ 0xff));

#ifndef UNDER_SHIM
    struct fm_stats st;
    fm_stats(&st);
    printf("io_pins=%llu faults=%llu\n", (unsigned long long)st.io_pins, (unsigned long long)st.faults);
#endif
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
