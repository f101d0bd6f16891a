/* The fault path must never call malloc: a SIGBUS can arrive while the
 * program holds its allocator's lock (jemalloc and tcmalloc place far
 * chunks). This program interposes malloc, calloc, realloc and free; while a
 * thread "holds its allocator lock" (a thread-local flag, as a real
 * allocator's lock would be held), any allocation on that thread -- which
 * can then only come from farmem's fault handler -- aborts with a message.
 * Two threads take far faults (fetches, evictions, write-backs) under the
 * flag, then check every word. usage: malloc_in_handler [MIB] */
#define _GNU_SOURCE
#include <farmem.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static __thread int holding_lock;

static void caught(const char *what) {
    static const char msg[] = "malloc_in_handler: allocation inside the fault handler: ";
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, what, strlen(what)) < 0 ||
        write(2, "\n", 1) < 0)
        _exit(3);
    abort();
}

void *malloc(size_t n) {
    if (holding_lock)
        caught("malloc");
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    if (holding_lock)
        caught("calloc");
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    if (holding_lock)
        caught("realloc");
    return __libc_realloc(p, n);
}
void free(void *p) {
    if (holding_lock && p)
        caught("free");
    __libc_free(p);
}

struct job {
    uint64_t *a;
    size_t words;
    unsigned seed;
    size_t bad;
};

static void *run(void *arg) {
    struct job *j = arg;
    uint64_t x = j->seed * 0x9E3779B97F4A7C15ULL + 1;
    holding_lock = 1;
    /* Random reads and read-modify-writes: every fault fetches, and at 8x
     * expansion most also evict and write back. */
    for (size_t k = 0; k < 200000; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t i = (size_t)(x % j->words);
        uint64_t v = j->a[i];
        if ((v ^ i) % 3 == 0 && (i % 2) == j->seed % 2)
            j->a[i] = v + 3; /* stays ≡ its class: checked below */
    }
    holding_lock = 0;
    return NULL;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    size_t words = (mib << 20) / 8;
    uint64_t *a = fm_alloc(mib << 20);
    if (!a) {
        fprintf(stderr, "fm_alloc failed\n");
        return 2;
    }
    for (size_t i = 0; i < words; i++)
        a[i] = i * 3 + (i & 1); /* (v - (i&1)) % 3 == 0 is kept by +3 */
    struct job jobs[2] = {{a, words, 1, 0}, {a, words, 2, 0}};
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        pthread_create(&t[k], NULL, run, &jobs[k]);
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    size_t bad = 0;
    for (size_t i = 0; i < words; i++)
        bad += (a[i] - (i & 1)) % 3 != 0 || a[i] < i * 3;
    printf("faults under the allocator lock: bad=%zu\n", bad);
    return bad == 0 ? 0 : 1;
}
