/* himeno: the Himeno benchmark (Poisson equation by Jacobi iteration, the
 * published algorithm: 19-point stencil, 14 float arrays, 34 flops per point
 * per iteration), written for farmem. Grid sizes S (65x65x129), M
 * (129x129x257), L (257x257x513), or a size in bytes (custom, n x n x 2n).
 * usage: himeno S|M|L|SIZE [ITERATIONS=20] [--hints]
 * --hints: when run under `farmem run`, advise the coefficient arrays
 * READ_MOSTLY and SEQUENTIAL, and try to pin the pressure array (Nuzura's
 * hand tuning: clean pages dropped, the updated array kept resident).
 * Check: the residual gosa is finite and never grows. Metric: MFLOPS. */
#include "wl.h"
#include <dlfcn.h>
#include <math.h>
#include <omp.h>

static size_t I, J, K;
#define AT(m, i, j, k) m[((size_t)(i) * J + (size_t)(j)) * K + (size_t)(k)]

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: himeno S|M|L|SIZE [ITERATIONS] [--hints]\n");
        return 2;
    }
    const char *g = argv[1];
    if (!strcmp(g, "S")) I = 65, J = 65, K = 129;
    else if (!strcmp(g, "M")) I = 129, J = 129, K = 257;
    else if (!strcmp(g, "L")) I = 257, J = 257, K = 513;
    else {
        size_t bytes = wl_size(g);
        size_t n = (size_t)cbrt((double)bytes / (14.0 * 4.0 * 2.0));
        if (n < 8) {
            fprintf(stderr, "SIZE too small for a grid\n");
            return 2;
        }
        I = n, J = n, K = 2 * n;
    }
    int iters = 20, hints = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--hints"))
            hints = 1;
        else
            iters = atoi(argv[i]);
    }
    if (iters < 1) {
        fprintf(stderr, "ITERATIONS must be at least 1\n");
        return 2;
    }
    size_t N = I * J * K;
    float *p = wl_alloc(N * 4), *bnd = wl_alloc(N * 4), *wrk1 = wl_alloc(N * 4), *wrk2 = wl_alloc(N * 4);
    float *a[4], *b[3], *c[3];
    for (int m = 0; m < 4; m++)
        a[m] = wl_alloc(N * 4);
    for (int m = 0; m < 3; m++)
        b[m] = wl_alloc(N * 4), c[m] = wl_alloc(N * 4);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < I; i++)
        for (size_t j = 0; j < J; j++)
            for (size_t k = 0; k < K; k++) {
                AT(a[0], i, j, k) = AT(a[1], i, j, k) = AT(a[2], i, j, k) = 1.0f;
                AT(a[3], i, j, k) = 1.0f / 6.0f;
                AT(b[0], i, j, k) = AT(b[1], i, j, k) = AT(b[2], i, j, k) = 0.0f;
                AT(c[0], i, j, k) = AT(c[1], i, j, k) = AT(c[2], i, j, k) = 1.0f;
                AT(p, i, j, k) = (float)(i * i) / (float)((I - 1) * (I - 1));
                AT(wrk1, i, j, k) = 0.0f;
                AT(bnd, i, j, k) = 1.0f;
            }
    const char *pinned = "no";
    if (hints) {
        int (*adv)(void *, size_t, int) = (int (*)(void *, size_t, int))dlsym(RTLD_DEFAULT, "fm_advise");
        if (adv) {
            float *ro[] = {a[0], a[1], a[2], a[3], b[0], b[1], b[2], c[0], c[1], c[2], bnd, wrk1};
            for (size_t m = 0; m < sizeof ro / sizeof ro[0]; m++) {
                adv(ro[m], N * 4, 7 /* FM_ADV_READ_MOSTLY */);
                adv(ro[m], N * 4, 1 /* FM_ADV_SEQUENTIAL */);
            }
            if (adv(p, N * 4, 5 /* FM_ADV_PIN */) == 0)
                pinned = "yes";
        }
    }
    const float omega = 0.8f;
    double first = 0, last = 0;
    int ok = 1;
    double t = wl_now();
    for (int it = 0; it < iters; it++) {
        double gosa = 0;
#pragma omp parallel for reduction(+ : gosa) schedule(static)
        for (size_t i = 1; i < I - 1; i++)
            for (size_t j = 1; j < J - 1; j++)
                for (size_t k = 1; k < K - 1; k++) {
                    float s0 = AT(a[0], i, j, k) * AT(p, i + 1, j, k) + AT(a[1], i, j, k) * AT(p, i, j + 1, k) +
                               AT(a[2], i, j, k) * AT(p, i, j, k + 1) +
                               AT(b[0], i, j, k) * (AT(p, i + 1, j + 1, k) - AT(p, i + 1, j - 1, k) - AT(p, i - 1, j + 1, k) + AT(p, i - 1, j - 1, k)) +
                               AT(b[1], i, j, k) * (AT(p, i, j + 1, k + 1) - AT(p, i, j - 1, k + 1) - AT(p, i, j + 1, k - 1) + AT(p, i, j - 1, k - 1)) +
                               AT(b[2], i, j, k) * (AT(p, i + 1, j, k + 1) - AT(p, i - 1, j, k + 1) - AT(p, i + 1, j, k - 1) + AT(p, i - 1, j, k - 1)) +
                               AT(c[0], i, j, k) * AT(p, i - 1, j, k) + AT(c[1], i, j, k) * AT(p, i, j - 1, k) +
                               AT(c[2], i, j, k) * AT(p, i, j, k - 1) + AT(wrk1, i, j, k);
                    float ss = (s0 * AT(a[3], i, j, k) - AT(p, i, j, k)) * AT(bnd, i, j, k);
                    gosa += (double)ss * ss;
                    AT(wrk2, i, j, k) = AT(p, i, j, k) + omega * ss;
                }
#pragma omp parallel for schedule(static)
        for (size_t i = 1; i < I - 1; i++)
            for (size_t j = 1; j < J - 1; j++)
                for (size_t k = 1; k < K - 1; k++)
                    AT(p, i, j, k) = AT(wrk2, i, j, k);
        if (!isfinite(gosa) || (it > 0 && gosa > last * (1 + 1e-6)))
            ok = 0;
        if (it == 0)
            first = gosa;
        last = gosa;
    }
    t = wl_now() - t;
    double flops = 34.0 * (double)(I - 2) * (double)(J - 2) * (double)(K - 2) * iters;
    char extra[160];
    snprintf(extra, sizeof extra, "grid=%zux%zux%zu iterations=%d gosa_first=%.6e gosa_last=%.6e hints=%s pinned=%s", I, J, K, iters,
             first, last, hints ? "yes" : "no", pinned);
    wl_result("himeno", t, flops / t / 1e6, "MFLOPS", ok, extra);
    return ok ? 0 : 1;
}
