/*
 * farmem.h — the farmem C API (libfarmem.so).
 *
 * Memory that lives on far tiers (memory servers on other machines, or an
 * SSD file) and comes to the program on demand, within a local-memory budget.
 *
 *   #include <farmem.h>
 *   double *a = fm_alloc(8UL << 30);     // 8 GiB, reads as zero
 *   ... use a[] like any memory, from any thread ...
 *   fm_free(a);
 *
 * Build: cc prog.c -I include -L target/release -lfarmem -Wl,-rpath,...
 * Configuration comes from FARMEM_* environment variables (see
 * docs/configuration.md) or from fm_init's string. With no servers and no
 * file, farmem starts a memory server on loopback inside the process.
 *
 * Linking libfarmem also wraps read, write, pread, pwrite, readv, writev,
 * recv, send, recvfrom, sendto, fread and fwrite, so that they work on far
 * buffers whose pages are not resident.
 *
 * Errors: functions returning int give 0 on success or a negative FM_E*
 * code; fm_alloc gives NULL. fm_strerror(code) names the code and
 * fm_last_error() gives this thread's last detailed message. A far page
 * that cannot be served (server gone) stops the program with a message: it
 * never reads as wrong data.
 */
#ifndef FARMEM_H
#define FARMEM_H

#include <stddef.h>
#include <stdint.h>

#define FARMEM_VERSION_MAJOR 0
#define FARMEM_VERSION_MINOR 1
#define FARMEM_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FM_EXPORT __attribute__((visibility("default")))
#define FM_ALLOC_SIZE(n) __attribute__((alloc_size(n), malloc, warn_unused_result))
#else
#define FM_EXPORT
#define FM_ALLOC_SIZE(n)
#endif

/* ---- error codes (returned negated) ------------------------------------ */
#define FM_OK 0
#define FM_ECONFIG 1  /* invalid configuration                              */
#define FM_EBACKEND 2 /* memory server or file failed / unreachable         */
#define FM_ENOSYS 3   /* userfaultfd unavailable                            */
#define FM_EALREADY 4 /* fm_init called twice                               */
#define FM_ENOMEM 5   /* far address space exhausted                        */
#define FM_EINVAL 6   /* bad argument                                       */
#define FM_EBUDGET 7  /* does not fit the local-memory budget               */
#define FM_EFORK 8    /* called in a fork() child                           */

/* ---- advice for fm_advise ---------------------------------------------- */
#define FM_ADV_NORMAL 0      /* forget earlier advice                         */
#define FM_ADV_SEQUENTIAL 1  /* prefetch the largest window at once           */
#define FM_ADV_RANDOM 2      /* no prefetch                                   */
#define FM_ADV_WILLNEED 3    /* fetch now (up to half the budget)             */
#define FM_ADV_DONTNEED 4    /* evict now; contents are kept (not zeroed)     */
#define FM_ADV_PIN 5         /* fetch and keep resident (like mlock); at most
                                3/4 of the budget may be pinned               */
#define FM_ADV_UNPIN 6       /* undo FM_ADV_PIN                               */
#define FM_ADV_READ_MOSTLY 7 /* clean pages get a second pass before eviction */

/* ---- statistics --------------------------------------------------------- */
struct fm_stats {
    uint64_t faults;             /* faults on non-resident pages             */
    uint64_t wp_faults;          /* first writes to clean resident pages     */
    uint64_t bytes_fetched;      /* from the backend                         */
    uint64_t bytes_written_back; /* dirty pages sent to the backend          */
    uint64_t evictions;          /* pages evicted                            */
    uint64_t prefetched;         /* pages fetched ahead of demand            */
    uint64_t prefetch_used;      /* ... of which seen used (lower bound)     */
    uint64_t prefetch_wasted;    /* ... evicted without being seen used      */
    uint64_t zero_filled_pages;  /* never-written pages served as zero       */
    uint64_t io_pins;            /* system calls on far buffers              */
    uint64_t resident_bytes;     /* far pages resident now                   */
    uint64_t budget_bytes;       /* local-memory budget                      */
    uint64_t fault_p50_ns;       /* fault service time percentiles, ns       */
    uint64_t fault_p90_ns;
    uint64_t fault_p99_ns;
    uint64_t fault_max_ns;
};

/* Initialise. config: NULL to read FARMEM_* from the environment, or
 * "key=value ..." words with the variable names lower-cased without the
 * prefix, e.g. "local=256M servers=10.0.0.2:7070,10.0.0.3:7070".
 * Optional: fm_alloc initialises from the environment on first use. */
FM_EXPORT int fm_init(const char *config);

/* Allocate size bytes of far memory: page-aligned, reads as zero. */
FM_EXPORT void *fm_alloc(size_t size) FM_ALLOC_SIZE(1);

/* Free memory from fm_alloc. NULL is a no-op. */
FM_EXPORT void fm_free(void *p);

/* Advise on [p, p+len), which must lie inside one allocation. */
FM_EXPORT int fm_advise(void *p, size_t len, int advice);

/* Fill *out with the current statistics. */
FM_EXPORT int fm_stats(struct fm_stats *out);

/* Restart the fault-latency percentiles (counters are kept). */
FM_EXPORT void fm_stats_reset_latency(void);

/* Print the statistics as a short table on stderr. */
FM_EXPORT void fm_stats_print(void);

/* 1 if p points into far memory, else 0. */
FM_EXPORT int fm_is_far(const void *p);

/* Static description of an FM_E* code (either sign). */
FM_EXPORT const char *fm_strerror(int code);

/* This thread's last detailed error message ("" if none). */
FM_EXPORT const char *fm_last_error(void);

/* "MAJOR.MINOR.PATCH" of the library. */
FM_EXPORT const char *fm_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FARMEM_H */
