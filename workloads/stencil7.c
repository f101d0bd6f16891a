/* stencil7: 7-point 3-D Jacobi stencil (DLM's workload), four variants:
 *   naive     one sweep over the whole grid per time step
 *   spatial   the same sweep in cache-sized tiles of the j-k plane
 *   temporal  overlapped temporal blocking: blocks of Z planes, each advanced
 *             T steps at once in a local buffer with T halo planes per side,
 *             so far memory is read and written once per T steps (the halo
 *             planes are computed by both neighbouring blocks)
 *   wavefront temporal blocking without redundant work: one wave over the
 *             planes advances each plane T steps as soon as its neighbours
 *             allow, in 3T planes of local memory; far memory is read and
 *             written once per T steps, and every point is computed once
 *             per step
 * usage: stencil7 SIZE [naive|spatial|temporal|wavefront] [STEPS=8] [T=4]
 *                 [--block-steps T] [--block BZ] [--budget BYTES]
 * SIZE: bytes of the two n^3 double grids. STEPS: time steps in all. T (the
 * 4th argument, or --block-steps): time steps per block or wave (temporal
 * and wavefront).
 * BZ, the planes per block, comes from --block, or else from the local memory
 * budget (see block_planes); the budget is --budget, else the smaller of
 * FARMEM_LOCAL (set by `farmem run --local`) and this process's memory cgroup
 * limit (the kernel baselines of `farmem bench`). With none of these, BZ is
 * n/8 (at least 8). After the timed region, the result is checked against
 * the naive variant run again on the same data: bitwise equal on every point
 * (same arithmetic per point), when both fit in 512 MiB; otherwise a range
 * check. Metric: MFLOPS (8 flops per point per step). */
#include "wl.h"
#include <math.h>
#include <omp.h>

#define IDX(i, j, k) (((size_t)(i) * n + (size_t)(j)) * n + (size_t)(k))
static size_t n;
static const double C0 = 0.4, C1 = 0.1;

static void init(double *a) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            for (size_t k = 0; k < n; k++)
                a[IDX(i, j, k)] = sin(0.01 * (double)i) + cos(0.02 * (double)j) + 0.001 * (double)k;
}

/* One step from src to dst for planes [i0, i1) of a grid with nz planes
 * (interior points only; boundaries are copied). */
static void step_planes(const double *src, double *dst, size_t nz, size_t i0, size_t i1) {
#pragma omp parallel for schedule(static)
    for (size_t i = i0; i < i1; i++)
        for (size_t j = 0; j < n; j++)
            for (size_t k = 0; k < n; k++) {
                size_t p = (i * n + j) * n + k;
                if (i == 0 || i == nz - 1 || j == 0 || j == n - 1 || k == 0 || k == n - 1) {
                    dst[p] = src[p];
                    continue;
                }
                dst[p] = C0 * src[p] + C1 * (src[p - n * n] + src[p + n * n] + src[p - n] + src[p + n] + src[p - 1] + src[p + 1]);
            }
}

/* Each variant returns the grid that holds the result. */
static double *naive(double *a, double *b, int steps) {
    for (int s = 0; s < steps; s++) {
        step_planes(a, b, n, 0, n);
        double *t = a;
        a = b, b = t;
    }
    return a;
}

static double *spatial(double *a, double *b, int steps) {
    const size_t TJ = 32, TK = 256;
    for (int s = 0; s < steps; s++) {
#pragma omp parallel for collapse(2) schedule(static)
        for (size_t jj = 0; jj < n; jj += TJ)
            for (size_t kk = 0; kk < n; kk += TK)
                for (size_t i = 0; i < n; i++)
                    for (size_t j = jj; j < jj + TJ && j < n; j++)
                        for (size_t k = kk; k < kk + TK && k < n; k++) {
                            size_t p = IDX(i, j, k);
                            if (i == 0 || i == n - 1 || j == 0 || j == n - 1 || k == 0 || k == n - 1) {
                                b[p] = a[p];
                                continue;
                            }
                            b[p] = C0 * a[p] + C1 * (a[p - n * n] + a[p + n * n] + a[p - n] + a[p + n] + a[p - 1] + a[p + 1]);
                        }
        double *t = a;
        a = b, b = t;
    }
    return a;
}

/* Overlapped temporal blocking along i. The block [z0, z1) plus T halo planes
 * each side (clamped at the grid's faces) is copied to local buffers, advanced
 * T steps there, and its interior written to the output grid. Halo planes go
 * stale one plane per step, but T planes of halo keep the block's own planes
 * exact. Grid faces stay fixed, as in the naive sweep.
 *
 * Each thread allocates its two buffers once, for all rounds, and BZ comes
 * from the budget (issue 11: the buffers were allocated again every round, so
 * under `farmem run` each round faulted in fresh far pages, and BZ was n/8
 * whatever the budget, so the buffers alone could outgrow it and be evicted
 * between their own steps). Far memory is then read
 * (BZ + 2T) / BZ grids and written one grid per T steps, against one read and
 * one write per step for the naive sweep. The result is in b after an odd
 * number of rounds (ceil(steps / T)), whatever the parity of steps. */
static double *temporal(double *a, double *b, int steps, int T, size_t BZ) {
    size_t plane = n * n;
    size_t cap = (BZ + 2 * (size_t)T) * plane;
#pragma omp parallel
    {
        double *la = malloc(cap * sizeof(double)), *lb = malloc(cap * sizeof(double));
        if (!la || !lb) {
            fprintf(stderr, "out of memory for the temporal blocking buffers (%zu bytes per thread)\n", 2 * cap * sizeof(double));
            exit(2);
        }
        /* Every thread swaps its own copies of the grid pointers in step. */
        double *src = a, *dst = b;
        for (int s0 = 0; s0 < steps; s0 += T) {
            int ts = steps - s0 < T ? steps - s0 : T;
            /* Blocks in parallel: one barrier per T steps, not per block and step. */
#pragma omp for schedule(dynamic, 1)
            for (size_t z0 = 0; z0 < n; z0 += BZ) {
                size_t z1 = z0 + BZ < n ? z0 + BZ : n;
                size_t lo = z0 >= (size_t)ts ? z0 - (size_t)ts : 0, hi = z1 + (size_t)ts < n ? z1 + (size_t)ts : n;
                size_t nz = hi - lo;
                double *x = la, *y = lb;
                memcpy(x, src + lo * plane, nz * plane * sizeof(double));
                for (int t = 0; t < ts; t++) {
                    /* Local planes 0 and nz-1 are grid faces (lo == 0, hi == n)
                     * or halo whose values go stale; either way they are kept
                     * as copied, and staleness never reaches [z0, z1). */
                    for (size_t li = 0; li < nz; li++) {
                        size_t gi = lo + li;
                        for (size_t j = 0; j < n; j++)
                            for (size_t k = 0; k < n; k++) {
                                size_t p = (li * n + j) * n + k;
                                if (gi == 0 || gi == n - 1 || li == 0 || li == nz - 1 || j == 0 || j == n - 1 || k == 0 || k == n - 1) {
                                    y[p] = x[p];
                                    continue;
                                }
                                y[p] = C0 * x[p] + C1 * (x[p - plane] + x[p + plane] + x[p - n] + x[p + n] + x[p - 1] + x[p + 1]);
                            }
                    }
                    double *w = x;
                    x = y, y = w;
                }
                memcpy(dst + z0 * plane, x + (z0 - lo) * plane, (z1 - z0) * plane * sizeof(double));
            }
            double *w = src;
            src = dst, dst = w;
        }
        free(la), free(lb);
    }
    return ((size_t)steps + (size_t)T - 1) / (size_t)T % 2 ? b : a;
}

/* Wavefront temporal blocking along i. With L_t(p) plane p after t steps,
 * L_t(p) needs L_{t-1} at p-1, p and p+1. Wave w loads plane w (level 0)
 * from the input grid and computes, for t = 1..T in that order, plane
 * p = w - t of level t; L_{t-1}(p+1) was made earlier in the same wave. A
 * level keeps its last three planes (ring slot p % 3): the slot wave w
 * overwrites held plane p-2, which level t no longer needs. Level T goes
 * straight to the output grid. The threads share the wave and split each
 * plane's rows: one barrier per plane and level, and the far grids are
 * read and written in plane order, once per T steps. */
static double *wavefront(double *a, double *b, int steps, int T) {
    size_t plane = n * n;
    double *ring = malloc(3 * (size_t)T * plane * sizeof(double));
    if (!ring) {
        fprintf(stderr, "out of memory for the wavefront buffers (%zu bytes)\n", 3 * (size_t)T * plane * sizeof(double));
        exit(2);
    }
#define LV(t, p) (ring + ((size_t)(t) * 3 + (p) % 3) * plane)
    double *src = a, *dst = b;
    for (int s0 = 0; s0 < steps; s0 += T) {
        int ts = steps - s0 < T ? steps - s0 : T;
#pragma omp parallel
        for (size_t w = 0; w < n + (size_t)ts; w++) {
            if (w < n) {
                double *l0 = LV(0, w);
#pragma omp for schedule(static)
                for (size_t j = 0; j < n; j++)
                    memcpy(l0 + j * n, src + w * plane + j * n, n * sizeof(double));
            }
            for (int t = 1; t <= ts && (size_t)t <= w; t++) {
                size_t p = w - (size_t)t;
                if (p >= n)
                    continue;
                const double *mid = LV(t - 1, p), *lo = p > 0 ? LV(t - 1, p - 1) : mid, *hi = p + 1 < n ? LV(t - 1, p + 1) : mid;
                double *out = t == ts ? dst + p * plane : LV(t, p);
#pragma omp for schedule(static)
                for (size_t j = 0; j < n; j++)
                    for (size_t k = 0; k < n; k++) {
                        size_t q = j * n + k;
                        if (p == 0 || p == n - 1 || j == 0 || j == n - 1 || k == 0 || k == n - 1) {
                            out[q] = mid[q];
                            continue;
                        }
                        /* The same sum, in the same order, as step_planes. */
                        out[q] = C0 * mid[q] + C1 * (lo[q] + hi[q] + mid[q - n] + mid[q + n] + mid[q - 1] + mid[q + 1]);
                    }
            }
        }
        double *x = src;
        src = dst, dst = x;
    }
#undef LV
    free(ring);
    return src;
}

/* This process's memory cgroup limit (v1 or v2) in bytes; 0 if none. Only
 * the process's own group is read, not its ancestors' limits: enough for
 * `farmem bench`, whose groups sit at the top. */
static size_t cgroup_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[4096], fn[4200];
    size_t lim = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *m = strstr(line, ":memory:");
        if (m)
            snprintf(fn, sizeof fn, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", m + 8);
        else if (!strncmp(line, "0::", 3))
            snprintf(fn, sizeof fn, "/sys/fs/cgroup%s/memory.max", line + 3);
        else
            continue;
        FILE *g = fopen(fn, "r");
        unsigned long long v;
        if (g && fscanf(g, "%llu", &v) == 1 && (!lim || v < lim)) /* "max" reads as no number */
            lim = (size_t)v;
        if (g)
            fclose(g);
    }
    fclose(f);
    /* v1 writes "no limit" as a huge number. */
    size_t phys = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    return lim >= phys ? 0 : lim;
}

/* Planes per block for a local budget: all threads' two buffers of BZ + 2T
 * planes, plus the plane each thread is copying in and the plane it is
 * copying out (the planes in flight: the rest of a block's input and output
 * is streamed once and need not stay), in half the budget. The other half is
 * for the pager's own streaming (prefetched and dirty grid pages) and the
 * rest of the process. */
static size_t block_planes(size_t budget, int threads, int T) {
    double planes = (double)budget / 2 / ((double)threads * (double)(n * n * sizeof(double)));
    double bz = (planes - 2) / 2 - 2 * T;
    if (bz < 1) {
        fprintf(stderr,
                "stencil7: a budget of %zu bytes cannot hold %d threads' buffers with %d halo planes a side; using one plane per block "
                "(fewer --block-steps or threads would help)\n",
                budget, threads, T);
        return 1;
    }
    return bz > (double)n ? n : (size_t)bz;
}

int main(int argc, char **argv) {
    const char *pos[4] = {NULL, "temporal", "8", "4"};
    int npos = 0;
    size_t block = 0, budget = 0;
    const char *block_steps = NULL, *from = "default";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--block") && i + 1 < argc) {
            long v = atol(argv[++i]);
            if (v < 1) {
                fprintf(stderr, "--block must be at least 1 plane\n");
                return 2;
            }
            block = (size_t)v;
        } else if (!strcmp(argv[i], "--block-steps") && i + 1 < argc)
            block_steps = argv[++i];
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc)
            budget = wl_size(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "unknown option %s (or it lacks its value)\n", argv[i]);
            return 2;
        } else if (npos < 4)
            pos[npos++] = argv[i];
        else {
            fprintf(stderr, "too many arguments\n");
            return 2;
        }
    }
    if (npos < 1) {
        fprintf(stderr, "usage: stencil7 SIZE [naive|spatial|temporal|wavefront] [STEPS=8] [T=4] [--block-steps T] [--block BZ] [--budget BYTES]\n");
        return 2;
    }
    size_t bytes = wl_size(pos[0]);
    const char *v = pos[1];
    int steps = atoi(pos[2]), T = atoi(block_steps ? block_steps : pos[3]);
    if (steps < 1 || T < 1) {
        fprintf(stderr, "STEPS and T must be at least 1\n");
        return 2;
    }
    n = (size_t)cbrt((double)bytes / 16.0);
    if (n < 8) {
        fprintf(stderr, "SIZE too small for a grid\n");
        return 2;
    }
    if (budget)
        from = "budget";
    else {
        const char *e = getenv("FARMEM_LOCAL");
        size_t fl = e && *e ? wl_size(e) : 0, cg = cgroup_limit();
        budget = fl && (!cg || fl <= cg) ? fl : cg;
        from = !budget ? "default" : budget == fl ? "FARMEM_LOCAL" : "cgroup";
    }
    size_t BZ = 0;
    if (strcmp(v, "temporal"))
        ;
    else if (block)
        BZ = block, from = "option";
    else if (budget)
        BZ = block_planes(budget, omp_get_max_threads(), T);
    else
        BZ = n / 8 > 8 ? n / 8 : 8;
    if (BZ > n)
        BZ = n;
    if (strcmp(v, "naive") && strcmp(v, "spatial") && strcmp(v, "temporal") && strcmp(v, "wavefront")) {
        fprintf(stderr, "variant must be naive, spatial, temporal or wavefront\n");
        return 2;
    }
    double *a = wl_alloc(n * n * n * 8), *b = wl_alloc(n * n * n * 8), *res;
    init(a);
    wl_timed_begin();
    double t = wl_now();
    if (!strcmp(v, "naive"))
        res = naive(a, b, steps);
    else if (!strcmp(v, "spatial"))
        res = spatial(a, b, steps);
    else if (!strcmp(v, "temporal"))
        res = temporal(a, b, steps, T, BZ);
    else
        res = wavefront(a, b, steps, T);
    t = wl_now() - t;
    wl_timed_end();
    /* The check, untimed: the naive sweep again from the same initial data in
     * separate memory, compared bitwise on every point (every variant does
     * the same arithmetic per point). The reference grids come from wl_alloc
     * like the data: with ssd-mmap they are file pages the kernel can write
     * back, where anonymous ones would meet the cgroup limit with no swap. */
    int ok = 1;
    const char *check = "naive-reference";
    if (n * n * n * 16 <= (512UL << 20)) {
        double *ra = wl_alloc(n * n * n * 8), *rb = wl_alloc(n * n * n * 8);
        init(ra);
        double *ref = naive(ra, rb, steps);
        size_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
        for (size_t p = 0; p < n * n * n; p++)
            bad += ref[p] != res[p];
        if (bad) {
            fprintf(stderr, "stencil7: %zu of %zu points differ from the naive sweep\n", bad, n * n * n);
            ok = 0;
        }
    } else {
        /* Too large for a reference: check values stay in range. */
        check = "range";
        for (size_t p = 0; p < n * n * n; p += 4099)
            if (!isfinite(res[p]) || fabs(res[p]) > 10)
                ok = 0;
    }
    double flops = 8.0 * (double)(n - 2) * (double)(n - 2) * (double)(n - 2) * steps;
    char extra[256];
    int len = snprintf(extra, sizeof extra, "variant=%s n=%zu steps=%d T=%d", v, n, steps, T);
    if (!strcmp(v, "wavefront"))
        snprintf(extra + len, sizeof extra - (size_t)len, " buffer_bytes=%zu", 3 * (size_t)T * n * n * sizeof(double));
    else if (!strcmp(v, "temporal"))
        snprintf(extra + len, sizeof extra - (size_t)len, " block=%zu block_from=%s budget=%zu buffer_bytes=%zu", BZ, from, budget,
                 2 * (BZ + 2 * (size_t)T) * n * n * sizeof(double) * (size_t)omp_get_max_threads());
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " check_by=%s", check);
    wl_result("stencil7", t, flops / t / 1e6, "MFLOPS", ok, extra);
    return ok ? 0 : 1;
}
