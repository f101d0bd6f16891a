/* himeno: the Himeno benchmark (Poisson equation by Jacobi iteration, the
 * published algorithm: 19-point stencil, 14 float arrays, 34 flops per point
 * per iteration), written for farmem. Grid sizes S (65x65x129), M
 * (129x129x257), L (257x257x513), or a size in bytes (custom, n x n x 2n).
 * usage: himeno S|M|L|SIZE [ITERATIONS=20] [--hints] [--classic]
 * --hints: when run under `farmem run`, advise the coefficient arrays
 * READ_MOSTLY and SEQUENTIAL, and try to pin the pressure array (Nuzura's
 * hand tuning: clean pages dropped, the updated array kept resident).
 *
 * Coefficients: the published benchmark fills a, b, c, bnd and wrk1 with
 * constants, which a compressing tier (zram) stores almost for free. Here each
 * value is the published constant plus a deterministic perturbation from a
 * hash of its position (coefs below): 14 to 24 pseudo-random low mantissa
 * bits per value, so no page is a repeated pattern, and the iteration still
 * contracts (see coefs for why). --classic uses the published constants
 * unperturbed, for comparison with published figures (and to show what a
 * compressing tier makes of them).
 * Check (untimed): sample boxes of the final pressure recomputed from the
 * definition (see check_boxes), and the residual gosa finite and never
 * growing. Metric: MFLOPS. */
#include "wl.h"
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>

static size_t I, J, K;
#define AT(m, i, j, k) m[((size_t)(i) * J + (size_t)(j)) * K + (size_t)(k)]
static const float OMEGA = 0.8f;

/* The 12 coefficients of one point. */
struct cf {
    float a0, a1, a2, a3, b0, b1, b2, c0, c1, c2, wrk1, bnd;
};

static inline uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Deterministic noise in [-1, 1) with 24 random bits, for array m at point x. */
static inline double noise(uint64_t x, unsigned m) { return (double)(mix64(x * 16 + m) >> 40) * 0x1p-23 - 1.0; }

/* The coefficients at point (i, j, k): the published constants (a0..a2 = c0..c2
 * = 1, a3 = 1/6, b = 0, wrk1 = 0, bnd = 1), perturbed.
 *   a0..a2, c0..c2 = 1 +- 1e-3;  b0..b2 = +-1e-4;  wrk1 = +-1e-4 (a source);
 *   bnd in (0.999, 1];  a3 = (1 - eps) / (a0+a1+a2+c0+c1+c2 + 4(|b0|+|b1|+|b2|))
 *   with eps in [0.005, 0.01).
 * Why it stays stable: the residual r = s0*a3 - p obeys r' = (I - w*B + w*B*J) r
 * (B = diag(bnd), J the neighbour weights a3*coef), and gosa = |B r|^2 evolves
 * by I - w*B + w*B*J. With eps chosen so, every row of J sums in absolute value
 * to at most 1 - eps and every column to at most about 0.9972; with bnd above
 * 0.999 both the row-sum and column-sum norms of that matrix are below 1, so
 * its 2-norm is too: gosa shrinks every iteration, as the check requires. */
static int classic;

static inline void coefs(size_t i, size_t j, size_t k, struct cf *c) {
    if (classic) {
        *c = (struct cf){.a0 = 1, .a1 = 1, .a2 = 1, .a3 = 1.0f / 6, .c0 = 1, .c1 = 1, .c2 = 1, .bnd = 1};
        return;
    }
    uint64_t x = ((uint64_t)i * J + j) * K + k;
    double a0 = 1 + 1e-3 * noise(x, 0), a1 = 1 + 1e-3 * noise(x, 1), a2 = 1 + 1e-3 * noise(x, 2);
    double c0 = 1 + 1e-3 * noise(x, 3), c1 = 1 + 1e-3 * noise(x, 4), c2 = 1 + 1e-3 * noise(x, 5);
    double b0 = 1e-4 * noise(x, 6), b1 = 1e-4 * noise(x, 7), b2 = 1e-4 * noise(x, 8);
    double eps = 5e-3 * (1.5 + 0.5 * noise(x, 9));
    c->a0 = (float)a0, c->a1 = (float)a1, c->a2 = (float)a2;
    c->c0 = (float)c0, c->c1 = (float)c1, c->c2 = (float)c2;
    c->b0 = (float)b0, c->b1 = (float)b1, c->b2 = (float)b2;
    c->a3 = (float)((1 - eps) / (a0 + a1 + a2 + c0 + c1 + c2 + 4 * (fabs(b0) + fabs(b1) + fabs(b2))));
    c->wrk1 = (float)(1e-4 * noise(x, 10));
    c->bnd = (float)(1 - 5e-4 * (1 + noise(x, 11)));
}

/* The initial pressure, as published. */
static inline float p0(size_t i) { return (float)(i * i) / (float)((I - 1) * (I - 1)); }

/* The residual at one point for the check, q pointing at p(i,j,k), si and sj
 * the strides of i and j: the timed sweep's expression in main, term for term
 * in the same order, so both round alike. (The sweep keeps its own copy,
 * written out on the arrays as published: through this function, GCC 12 -O2
 * compiled it about 10% slower.) A change to one must go to the other; the
 * check fails if they differ. */
static inline float residual(const float *q, ptrdiff_t si, ptrdiff_t sj, const struct cf *c) {
    float s0 = c->a0 * q[si] + c->a1 * q[sj] + c->a2 * q[1] + c->b0 * (q[si + sj] - q[si - sj] - q[-si + sj] + q[-si - sj]) +
               c->b1 * (q[sj + 1] - q[-sj + 1] - q[sj - 1] + q[-sj - 1]) + c->b2 * (q[si + 1] - q[-si + 1] - q[si - 1] + q[-si - 1]) +
               c->c0 * q[-si] + c->c1 * q[-sj] + c->c2 * q[-1] + c->wrk1;
    return (s0 * c->a3 - q[0]) * c->bnd;
}

/* The check. Recomputing the whole grid would double the footprint, and a
 * second run of a small grid in plain memory would not look at the data that
 * was timed. Instead: p at a point after `iters` iterations depends only on
 * the initial data within `iters` points of it (the stencil reaches one point
 * each way), and the initial data are a function of position (coefs, p0). So
 * around each of a few boxes, a region `iters` points wider on every side
 * (clipped at the grid's faces, which never change) is recomputed from that
 * definition in separate memory. Region points on the region's own edge are
 * not updated and go stale, one point further in per iteration, which never
 * reaches the box. The box's final p must match the timed run's; a wrong page
 * of any of the 14 arrays within a region changes the box. The match must be
 * exact: the two loops evaluate the same expression in the same order (GCC
 * also contracts both alike to FMA at -O3 -march=native), and a 1e-3 error in
 * one coefficient of one point moves the box by less than 1e-6. Returns the
 * largest difference. */
static double check_boxes(const float *p, int iters, int *nboxes) {
    const size_t side = 8;
    size_t sz[3] = {I - 2 < side ? I - 2 : side, J - 2 < side ? J - 2 : side, K - 2 < side ? K - 2 : side};
    size_t dim[3] = {I, J, K};
    /* At most 16 boxes, fewer when their regions would cost more than about
     * half the timed run's point updates (but at least one box). */
    double region = 1;
    for (int d = 0; d < 3; d++) {
        double r = (double)(sz[d] + 2 * (size_t)iters);
        region *= r < (double)dim[d] ? r : (double)dim[d];
    }
    double budget = (double)I * J * K * iters / 2;
    int nb = 16;
    while (nb > 1 && nb * region * iters > (budget > 2e7 ? budget : 2e7))
        nb--;
    *nboxes = nb;
    double maxdiff = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(max : maxdiff)
    for (int b = 0; b < nb; b++) {
        /* Box corners: the first two at the grid's low and high corners, the
         * rest spread by a hash. */
        size_t lo[3], hi[3], bx[3];
        for (int d = 0; d < 3; d++) {
            size_t span = dim[d] - 2 - sz[d] + 1; /* box starts in [1, dim-1-sz] */
            bx[d] = 1 + (b == 0 ? 0 : b == 1 ? span - 1 : mix64((uint64_t)b * 3 + (uint64_t)d) % span);
            lo[d] = bx[d] > (size_t)iters ? bx[d] - (size_t)iters : 0;
            hi[d] = bx[d] + sz[d] + (size_t)iters < dim[d] ? bx[d] + sz[d] + (size_t)iters : dim[d];
        }
        size_t ri = hi[0] - lo[0], rj = hi[1] - lo[1], rk = hi[2] - lo[2], rn = ri * rj * rk;
        struct cf *c = malloc(rn * sizeof *c);
        float *q = malloc(rn * 4), *qn = malloc(rn * 4);
        if (!c || !q || !qn) {
            fprintf(stderr, "out of memory for the check\n");
            exit(2);
        }
        for (size_t li = 0; li < ri; li++)
            for (size_t lj = 0; lj < rj; lj++)
                for (size_t lk = 0; lk < rk; lk++) {
                    size_t x = (li * rj + lj) * rk + lk;
                    coefs(lo[0] + li, lo[1] + lj, lo[2] + lk, &c[x]);
                    q[x] = p0(lo[0] + li);
                }
        for (int it = 0; it < iters; it++) {
            for (size_t li = 0; li < ri; li++)
                for (size_t lj = 0; lj < rj; lj++)
                    for (size_t lk = 0; lk < rk; lk++) {
                        size_t x = (li * rj + lj) * rk + lk, gi = lo[0] + li, gj = lo[1] + lj, gk = lo[2] + lk;
                        int grid_inner = gi >= 1 && gi + 1 < I && gj >= 1 && gj + 1 < J && gk >= 1 && gk + 1 < K;
                        int region_inner = li >= 1 && li + 1 < ri && lj >= 1 && lj + 1 < rj && lk >= 1 && lk + 1 < rk;
                        qn[x] = grid_inner && region_inner ? q[x] + OMEGA * residual(&q[x], (ptrdiff_t)(rj * rk), (ptrdiff_t)rk, &c[x]) : q[x];
                    }
            float *t = q;
            q = qn, qn = t;
        }
        for (size_t i = bx[0]; i < bx[0] + sz[0]; i++)
            for (size_t j = bx[1]; j < bx[1] + sz[1]; j++)
                for (size_t k = bx[2]; k < bx[2] + sz[2]; k++) {
                    float want = q[((i - lo[0]) * rj + (j - lo[1])) * rk + (k - lo[2])];
                    double d = fabs((double)AT(p, i, j, k) - (double)want);
                    if (!(d <= maxdiff)) /* NaN counts as infinitely wrong */
                        maxdiff = isnan(d) ? INFINITY : d;
                }
        free(c), free(q), free(qn);
    }
    return maxdiff;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: himeno S|M|L|SIZE [ITERATIONS] [--hints] [--classic]\n");
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
        else if (!strcmp(argv[i], "--classic"))
            classic = 1;
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
                struct cf v;
                coefs(i, j, k, &v);
                AT(a[0], i, j, k) = v.a0, AT(a[1], i, j, k) = v.a1, AT(a[2], i, j, k) = v.a2, AT(a[3], i, j, k) = v.a3;
                AT(b[0], i, j, k) = v.b0, AT(b[1], i, j, k) = v.b1, AT(b[2], i, j, k) = v.b2;
                AT(c[0], i, j, k) = v.c0, AT(c[1], i, j, k) = v.c1, AT(c[2], i, j, k) = v.c2;
                AT(wrk1, i, j, k) = v.wrk1, AT(bnd, i, j, k) = v.bnd;
                AT(p, i, j, k) = p0(i);
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
    double first = 0, last = 0;
    int ok = 1;
    wl_timed_begin();
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
                    AT(wrk2, i, j, k) = AT(p, i, j, k) + OMEGA * ss;
                }
#pragma omp parallel for schedule(static)
        for (size_t i = 1; i < I - 1; i++)
            for (size_t j = 1; j < J - 1; j++)
                for (size_t k = 1; k < K - 1; k++)
                    AT(p, i, j, k) = AT(wrk2, i, j, k);
        /* Growth beyond rounding: once converged (thousands of iterations on
         * a small grid), gosa is float noise of about 1e-15 per point. */
        if (!isfinite(gosa) || (it > 0 && gosa > last * (1 + 1e-6) + 1e-12 * (double)N))
            ok = 0;
        if (it == 0)
            first = gosa;
        last = gosa;
    }
    t = wl_now() - t;
    wl_timed_end();
    int nboxes;
    double maxdiff = check_boxes(p, iters, &nboxes);
    if (maxdiff != 0)
        ok = 0;
    double flops = 34.0 * (double)(I - 2) * (double)(J - 2) * (double)(K - 2) * iters;
    char extra[256];
    snprintf(extra, sizeof extra,
             "grid=%zux%zux%zu iterations=%d gosa_first=%.6e gosa_last=%.6e hints=%s pinned=%s coefficients=%s check_boxes=%d check_maxdiff=%.1e",
             I, J, K, iters, first, last, hints ? "yes" : "no", pinned, classic ? "classic" : "perturbed", nboxes, maxdiff);
    wl_result("himeno", t, flops / t / 1e6, "MFLOPS", ok, extra);
    return ok ? 0 : 1;
}
