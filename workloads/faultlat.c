/* faultlat: the cost of one 4 KiB fault, end to end, as the program sees it.
 *  native  first touch of a fresh anonymous page (kernel zero-fill)
 *  far     first read of a far page held by the memory server (no prefetch,
 *          room in the budget: one fetch round trip per fault)
 *  far+ev  the same at 4x expansion, each fault also evicting (steady state)
 *  2 thr   two threads faulting at once at 4x, half the resident pages dirty
 *          (so evictions write back while the other thread fetches)
 * Pages are touched in random order; each access is timed with
 * clock_gettime(CLOCK_MONOTONIC). usage: faultlat [SAMPLES] */
#define _GNU_SOURCE
#include <farmem.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define PAGE 4096UL

static uint64_t ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void shuffle(size_t *v, size_t n) {
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (size_t i = n - 1; i > 0; i--) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t j = s % (i + 1), t = v[i];
        v[i] = v[j], v[j] = t;
    }
}

static void report(const char *name, uint64_t *lat, size_t n) {
    qsort(lat, n, sizeof *lat, cmp);
    printf("%-34s n=%-7zu p50=%7.2f us  p90=%7.2f us  p99=%7.2f us\n", name, n, lat[n / 2] / 1e3,
           lat[n * 9 / 10] / 1e3, lat[n * 99 / 100] / 1e3);
}

/* Touch pages idx[0..n) of p in order, timing each access. */
static void touch(volatile char *p, const size_t *idx, size_t n, uint64_t *lat, int write) {
    for (size_t k = 0; k < n; k++) {
        uint64_t t = ns();
        if (write)
            p[idx[k] * PAGE] = (char)idx[k]; /* the value the final check expects */
        else
            (void)p[idx[k] * PAGE];
        lat[k] = ns() - t;
    }
}

struct half {
    volatile char *far;
    const size_t *idx;
    size_t n;
    uint64_t *lat;
};

static void *touch_half(void *arg) {
    struct half *h = arg;
    touch(h->far, h->idx, h->n, h->lat, 0);
    return NULL;
}

int main(int argc, char **argv) {
    size_t samples = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
    size_t budget_pages = 4 * samples; /* FARMEM_LOCAL must be at least this */
    size_t region_pages = 4 * budget_pages;
    uint64_t *lat = malloc(region_pages * sizeof *lat); /* the fill pass times budget_pages accesses */
    size_t *idx = malloc(region_pages * sizeof *idx);
    if (!lat || !idx)
        return 2;

    /* native first touch */
    volatile char *nat = mmap(NULL, samples * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (size_t i = 0; i < samples; i++)
        idx[i] = i;
    shuffle(idx, samples);
    touch(nat, idx, samples, lat, 1);
    report("native first-touch (write)", lat, samples);

    char *far = fm_alloc(region_pages * PAGE);
    if (!far) {
        fprintf(stderr, "faultlat: %s\n", fm_last_error());
        return 2;
    }
    struct fm_stats st;
    fm_stats(&st);
    if (st.budget_bytes < budget_pages * PAGE) {
        fprintf(stderr, "faultlat: set FARMEM_LOCAL to at least %zuM\n", budget_pages * PAGE >> 20);
        return 2;
    }
    /* Put every page on the server: write them all, then evict them all. */
    for (size_t i = 0; i < region_pages; i++)
        far[i * PAGE] = (char)i;
    fm_advise(far, region_pages * PAGE, FM_ADV_DONTNEED);
    fm_advise(far, region_pages * PAGE, FM_ADV_RANDOM);

    for (size_t i = 0; i < region_pages; i++)
        idx[i] = i;
    shuffle(idx, region_pages);
    fm_stats_reset_latency();
    touch(far, idx, samples, lat, 0);
    report("far fetch, read (no eviction)", lat, samples);
    fm_stats(&st);
    printf("%-34s p50=%7.2f us  p90=%7.2f us  p99=%7.2f us\n", "  (runtime's fault-handler time)", st.fault_p50_ns / 1e3,
           st.fault_p90_ns / 1e3, st.fault_p99_ns / 1e3);
    fm_stats(&st);
    uint64_t wp0 = st.wp_faults, f0 = st.faults;
    fm_stats_reset_latency();
    touch(far, idx + samples, samples, lat, 1);
    report("far fetch, write (no eviction)", lat, samples);
    fm_stats(&st);
    printf("%-34s p50=%7.2f us  p90=%7.2f us  p99=%7.2f us\n", "  (runtime's fault-handler time)", st.fault_p50_ns / 1e3,
           st.fault_p90_ns / 1e3, st.fault_p99_ns / 1e3);
    printf("%-34s faults=%llu write-protect faults=%llu\n", "  (counters for the write pass)",
           (unsigned long long)(st.faults - f0), (unsigned long long)(st.wp_faults - wp0));

    /* Steady state at 4x expansion: fill the budget, then fault with eviction. */
    fm_advise(far, region_pages * PAGE, FM_ADV_DONTNEED);
    shuffle(idx, region_pages);
    touch(far, idx, budget_pages, lat, 0); /* fill; latencies discarded */
    fm_stats_reset_latency();
    size_t faulted = 0;
    for (size_t k = budget_pages; k < region_pages && faulted < samples; k++) {
        uint64_t t = ns();
        (void)((volatile char *)far)[idx[k] * PAGE];
        lat[faulted++] = ns() - t;
    }
    report("far fetch + evict, read (4x)", lat, faulted);
    fm_stats(&st);
    printf("%-34s p50=%7.2f us  p90=%7.2f us  p99=%7.2f us\n", "  (runtime's fault-handler time)", st.fault_p50_ns / 1e3,
           st.fault_p90_ns / 1e3, st.fault_p99_ns / 1e3);
    /* Two threads at once: dirty the resident half, then both fault. */
    for (size_t k = 0; k < budget_pages / 2; k++)
        far[idx[k] * PAGE] = (char)idx[k];
    shuffle(idx, region_pages);
    size_t per = samples / 2;
    struct half h[2] = {{far, idx, per, lat}, {far, idx + per, per, lat + per}};
    pthread_t th;
    fm_stats_reset_latency();
    pthread_create(&th, NULL, touch_half, &h[1]);
    touch_half(&h[0]);
    pthread_join(th, NULL);
    report("far fetch + evict, 2 threads (4x)", lat, 2 * per);
    fm_stats(&st);
    printf("%-34s p50=%7.2f us  p90=%7.2f us  p99=%7.2f us\n", "  (runtime's fault-handler time)", st.fault_p50_ns / 1e3,
           st.fault_p90_ns / 1e3, st.fault_p99_ns / 1e3);
    for (size_t i = 0; i < region_pages; i++)
        if (far[i * PAGE] != (char)i) {
            printf("check=FAILED at page %zu\n", i);
            return 1;
        }
    printf("check=ok\n");
    return 0;
}
