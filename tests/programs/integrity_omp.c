/* Integrity through the C API: OpenMP threads write, randomly update and
 * verify a far region several times larger than the local budget.
 * usage: integrity_omp SIZE_MB   (FARMEM_LOCAL sets the budget)
 * Prints "mismatches=N" and exits 0 only when N == 0. */
#include <farmem.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t val(uint64_t round, uint64_t i) {
    uint64_t x = i * 0x9E3779B97F4A7C15ULL ^ round * 0xD1B54A32D192ED03ULL;
    return (x << 17) | (x >> 47);
}

static uint64_t xs(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int main(int argc, char **argv) {
    size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    size_t n = mb * 1024 * 1024 / sizeof(uint64_t);
    uint64_t *a = fm_alloc(n * sizeof(uint64_t));
    if (!a) {
        fprintf(stderr, "fm_alloc: %s\n", fm_last_error());
        return 2;
    }
    int threads = omp_get_max_threads();
    long mismatches = 0;

    /* Pass 1: parallel sequential writes. */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        a[i] = val(1, i);

    /* Pass 2: random read-check-update; word i belongs to thread i % T so the
     * expected value is deterministic, but threads share pages. */
    size_t updates = n / 16;
#pragma omp parallel reduction(+ : mismatches)
    {
        int t = omp_get_thread_num();
        uint64_t s = 88172645463325252ULL + (uint64_t)t;
        for (size_t k = 0; k < updates / (size_t)threads; k++) {
            size_t i = (size_t)(xs(&s) % n) / (size_t)threads * (size_t)threads + (size_t)t;
            if (i >= n)
                continue;
            uint64_t v = a[i];
            if (v != val(1, i) && v != val(2, i))
                mismatches++;
            a[i] = val(2, i);
        }
    }

    /* Pass 3: verify everything against a local reference of which words
     * pass 2 updated. */
    unsigned char *upd = calloc(n, 1);
    if (!upd)
        return 2;
    for (int t = 0; t < threads; t++) {
        uint64_t s = 88172645463325252ULL + (uint64_t)t;
        for (size_t k = 0; k < updates / (size_t)threads; k++) {
            size_t i = (size_t)(xs(&s) % n) / (size_t)threads * (size_t)threads + (size_t)t;
            if (i < n)
                upd[i] = 1;
        }
    }
#pragma omp parallel for reduction(+ : mismatches) schedule(dynamic, 65536)
    for (size_t i = 0; i < n; i++)
        if (a[i] != (upd[i] ? val(2, i) : val(1, i)))
            mismatches++;

    struct fm_stats st;
    if (fm_stats(&st) != 0)
        return 2;
    printf("threads=%d size_mb=%zu budget_mb=%llu faults=%llu evictions=%llu written_back_mb=%llu mismatches=%ld\n",
           threads, mb, (unsigned long long)(st.budget_bytes >> 20), (unsigned long long)st.faults,
           (unsigned long long)st.evictions, (unsigned long long)(st.bytes_written_back >> 20), mismatches);
    if (st.resident_bytes > st.budget_bytes) {
        printf("resident %llu over budget %llu\n", (unsigned long long)st.resident_bytes,
               (unsigned long long)st.budget_bytes);
        return 1;
    }
    free(upd);
    fm_free(a);
    return mismatches == 0 ? 0 : 1;
}
