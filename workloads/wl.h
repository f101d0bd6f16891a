/* Shared helpers for farmem's C workloads.
 *
 * wl_alloc: plain memory by default (under `farmem run` large blocks go far);
 * with FARMEM_BENCH_FILE=PATH set, the data lives in a shared mapping of that
 * file instead: the "ssd-mmap" system of `farmem bench` (DLM's flash SSD
 * comparison). Each workload prints one machine-readable line:
 *   result workload=NAME seconds=S metric=M unit=U check=ok|FAILED [key=value...]
 */
#ifndef FARMEM_WL_H
#define FARMEM_WL_H
#define _GNU_SOURCE
#include "farmem.h"
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static inline double wl_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Bytes from "512M", "2G", "1T", "4096" (powers of 1024; "256MB" and "2GiB"
 * too). Exits with a message on bad input. */
static inline size_t wl_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    size_t m = 1;
    if (*end == 'K' || *end == 'k') m = 1UL << 10, end++;
    else if (*end == 'M' || *end == 'm') m = 1UL << 20, end++;
    else if (*end == 'G' || *end == 'g') m = 1UL << 30, end++;
    else if (*end == 'T' || *end == 't') m = 1UL << 40, end++;
    /* "256MB", "2GiB": the spellings FARMEM_LOCAL accepts too. */
    if (m > 1 && (!strcmp(end, "B") || !strcmp(end, "iB")))
        end += strlen(end);
    if (end == s || *end != '\0' || v <= 0) {
        fprintf(stderr, "bad size %s (write e.g. 256M)\n", s);
        exit(2);
    }
    return (size_t)(v * (double)m);
}

static size_t wl_file_off;
static int wl_fd = -1;

/* n bytes, zero-filled, page-aligned. */
static inline void *wl_alloc(size_t n) {
    const char *f = getenv("FARMEM_BENCH_FILE");
    n = (n + 4095) & ~(size_t)4095;
    if (f && *f) {
        if (wl_fd < 0) {
            wl_fd = open(f, O_RDWR | O_CREAT, 0600);
            if (wl_fd < 0) {
                perror(f);
                exit(2);
            }
        }
        if (ftruncate(wl_fd, (off_t)(wl_file_off + n)) != 0) {
            perror("ftruncate");
            exit(2);
        }
        void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, wl_fd, (off_t)wl_file_off);
        if (p == MAP_FAILED) {
            perror("mmap");
            exit(2);
        }
        wl_file_off += n;
        return p;
    }
    void *p = calloc(1, n);
    if (!p) {
        fprintf(stderr, "out of memory allocating %zu bytes\n", n);
        exit(2);
    }
    return p;
}

/* Far-memory traffic of the timed region alone (not set-up, not the result
 * check), when the program runs on farmem: wl_timed_begin() before it,
 * wl_timed_end() after, which prints one line
 *   timed fetched_bytes=B written_back_bytes=B faults=N wp_faults=N
 * Without a farmem runtime fm_stats fails and nothing is printed. */
static struct fm_stats wl_fm_start;
static int wl_fm_on;

static inline void wl_timed_begin(void) { wl_fm_on = fm_stats(&wl_fm_start) == 0; }

static inline void wl_timed_end(void) {
    struct fm_stats s;
    if (!wl_fm_on || fm_stats(&s) != 0)
        return;
    printf("timed fetched_bytes=%llu written_back_bytes=%llu faults=%llu wp_faults=%llu\n",
           (unsigned long long)(s.bytes_fetched - wl_fm_start.bytes_fetched),
           (unsigned long long)(s.bytes_written_back - wl_fm_start.bytes_written_back),
           (unsigned long long)(s.faults - wl_fm_start.faults), (unsigned long long)(s.wp_faults - wl_fm_start.wp_faults));
    fflush(stdout);
}

static inline void wl_result(const char *name, double secs, double metric, const char *unit, int ok, const char *extra) {
    printf("result workload=%s seconds=%.4f metric=%.4f unit=%s check=%s%s%s\n", name, secs, metric, unit, ok ? "ok" : "FAILED",
           extra && *extra ? " " : "", extra ? extra : "");
    fflush(stdout);
}
#endif
