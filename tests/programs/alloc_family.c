/* Every allocation entry point under `farmem run` (threshold 1M): large
 * blocks must be far (asked through fm_is_far, found with dlsym), small ones
 * local, and content must survive every realloc crossing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MB (1024UL * 1024UL)
static int fails;
static int (*is_far)(const void *);
#define CHECK(c, what)                                                                                                 \
    do {                                                                                                               \
        int ok_ = (c);                                                                                                 \
        printf("%-48s %s\n", what, ok_ ? "ok" : "FAILED");                                                              \
        fails += !ok_;                                                                                                 \
    } while (0)

static void fill(unsigned char *p, size_t n, unsigned s) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 13 + s);
}
static int same(const unsigned char *p, size_t n, unsigned s) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 13 + s))
            return 0;
    return 1;
}

int main(void) {
    is_far = (int (*)(const void *))dlsym(RTLD_DEFAULT, "fm_is_far");
    CHECK(is_far != NULL, "the farmem shim is preloaded");
    if (!is_far)
        return 1;

    unsigned char *small = malloc(1000), *big = malloc(8 * MB);
    CHECK(small && !is_far(small), "small malloc stays local");
    CHECK(big && is_far(big), "large malloc is far");
    CHECK(malloc_usable_size(big) >= 8 * MB, "malloc_usable_size of a far block");
    CHECK(malloc_usable_size(small) >= 1000, "malloc_usable_size of a local block");

    unsigned char *z = calloc(3, 2 * MB);
    int zero = z && is_far(z);
    for (size_t i = 0; zero && i < 6 * MB; i += 511)
        zero = z[i] == 0;
    CHECK(zero, "large calloc is far and zero");
    errno = 0;
    volatile size_t huge = SIZE_MAX / 2; /* volatile: keep gcc from rejecting it at compile time */
    CHECK(calloc(huge, 4) == NULL && errno == ENOMEM, "calloc overflow is ENOMEM");

    /* realloc: far growth, far shrink, far->local, local->far. */
    fill(big, 8 * MB, 1);
    big = realloc(big, 24 * MB);
    CHECK(big && is_far(big) && same(big, 8 * MB, 1), "realloc far growth keeps content");
    big = realloc(big, 6 * MB);
    CHECK(big && is_far(big) && same(big, 6 * MB, 1), "realloc far shrink keeps content");
    big = realloc(big, 4000);
    CHECK(big && !is_far(big) && same(big, 4000, 1), "realloc far->local keeps content");
    fill(small, 1000, 2);
    small = realloc(small, 3 * MB);
    CHECK(small && is_far(small) && same(small, 1000, 2), "realloc local->far keeps content");
    CHECK(realloc(small, 0) == NULL, "realloc(p, 0) frees");
    free(big);
    free(z);

    void *pm = NULL;
    CHECK(posix_memalign(&pm, 64, 2 * MB) == 0 && is_far(pm) && (uintptr_t)pm % 64 == 0, "posix_memalign large");
    free(pm);
    CHECK(posix_memalign(&pm, 3, 2 * MB) == EINVAL, "posix_memalign bad alignment is EINVAL");
    CHECK(posix_memalign(&pm, 1 << 16, 2 * MB) == 0 && (uintptr_t)pm % (1 << 16) == 0, "posix_memalign 64K alignment");
    free(pm);
    void *aa = aligned_alloc(4096, 4 * MB), *ma = memalign(256, 2 * MB), *va = valloc(2 * MB), *pv = pvalloc(MB + 1);
    CHECK(aa && is_far(aa) && (uintptr_t)aa % 4096 == 0, "aligned_alloc large");
    CHECK(ma && is_far(ma) && (uintptr_t)ma % 256 == 0, "memalign large");
    CHECK(va && is_far(va) && (uintptr_t)va % 4096 == 0, "valloc large");
    CHECK(pv && is_far(pv) && malloc_usable_size(pv) >= MB + 4096, "pvalloc rounds up to pages");
    free(aa), free(ma), free(va), free(pv);

    /* Anonymous private mmap above the threshold. */
    unsigned char *m = mmap(NULL, 16 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED && is_far(m), "large anonymous mmap is far");
    fill(m, 16 * MB, 3);
    unsigned char *m2 = mremap(m, 16 * MB, 40 * MB, MREMAP_MAYMOVE);
    CHECK(m2 != MAP_FAILED && is_far(m2) && same(m2, 16 * MB, 3), "mremap grows and keeps content");
    CHECK(munmap(m2 + 32 * MB, 8 * MB) == 0, "partial munmap of a far mapping");
    CHECK(munmap(m2, 40 * MB) == 0, "munmap of a far mapping");
    unsigned char *sh = mmap(NULL, 4 * MB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED && !is_far(sh), "shared mmap stays local");
    munmap(sh, 4 * MB);
    unsigned char *sm = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(sm != MAP_FAILED && !is_far(sm), "small mmap stays local");
    munmap(sm, 4096);

    printf("%d failed\n", fails);
    return fails ? 1 : 0;
}
