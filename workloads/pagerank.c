/* pagerank: PageRank by pull-style power iteration over a synthetic graph.
 * usage: pagerank SIZE [ITERATIONS=5] [--degree D]
 *
 * The graph is generated here, deterministically (no input file): R-MAT
 * sources by destination, in CSR form (graph.h, shared with bfs).
 *
 * SIZE is the whole footprint: per vertex 4*D bytes of edges plus an 8-byte
 * offset (the "stream" arrays, read once in order per iteration) and 20 bytes
 * of per-vertex state (rank, contribution, out-degree: the "hot" arrays; the
 * contribution array is read at random once per edge). With D = 16 the stream
 * arrays are about 78% of SIZE.
 *
 * Each iteration:  rank[v] = (1-d)/nv + d*dangling/nv + d * sum contrib[u]
 * over the in-edges (u, v), then contrib[u] = rank[u] / outdeg[u]. Pull order
 * makes each vertex's sum one fixed sequence of additions (no atomics, same
 * bits for any thread count).
 *
 * Timed: the iterations only (not generation, not verification).
 * Check, after the timed region: (1) the ranks sum to 1 within 1e-6; (2) the
 * same iterations recomputed from the definition (edges regenerated from the
 * RNG, not read from the arrays that were timed, own rank arrays) agree on
 * every vertex within 1e-9 relative, and their weighted checksums agree. A
 * wrong page anywhere in the edge, offset or rank arrays fails (2). The
 * reference arrays come from wl_alloc like the data (with ssd-mmap, file
 * pages the kernel can write back rather than anonymous memory that would
 * meet the cgroup limit with no swap).
 * Metric: million edges processed per second (edges * iterations / seconds).
 * hot_bytes= and stream_bytes= let a harness bound the bytes a pager must
 * move: with a budget B >= hot_bytes, about iterations * stream_bytes
 * - (B - hot_bytes). */
#include "graph.h"
#include <math.h>
#include <omp.h>

static const double DAMP = 0.85;

/* A weight per vertex for the checksum, so that misplaced values count. */
static inline double weight(uint64_t v) { return 0.5 + (double)(mix64(v) >> 54) / 1024.0; }

/* contrib[] from rank[]; returns the dangling vertices' total rank. */
static double contributions(const double *rank, double *contrib, const uint32_t *deg, uint64_t nv) {
    double dangling = 0;
#pragma omp parallel for reduction(+ : dangling) schedule(static)
    for (uint64_t v = 0; v < nv; v++) {
        if (deg[v]) {
            contrib[v] = rank[v] / deg[v];
        } else {
            contrib[v] = 0;
            dangling += rank[v];
        }
    }
    return dangling;
}

int main(int argc, char **argv) {
    const char *size = NULL;
    int iters = 5;
    uint32_t degree = 16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--degree") && i + 1 < argc)
            degree = (uint32_t)atoi(argv[++i]);
        else if (!size)
            size = argv[i];
        else
            iters = atoi(argv[i]);
    }
    if (!size) {
        fprintf(stderr, "usage: pagerank SIZE [ITERATIONS=5] [--degree D]\n");
        return 2;
    }
    if (iters < 1 || degree < 1 || degree > 1000) {
        fprintf(stderr, "ITERATIONS must be at least 1 and --degree between 1 and 1000\n");
        return 2;
    }
    size_t bytes = wl_size(size);
    uint64_t nv = bytes / (4 * (uint64_t)degree + 8 + 20);
    if (nv < 1024 || nv > UINT32_MAX) {
        fprintf(stderr, "SIZE gives %llu vertices; it must give 1024 to 2^32-1\n", (unsigned long long)nv);
        return 2;
    }
    uint64_t perm = graph_perm(nv);
    uint64_t *off;
    uint32_t *src;
    uint64_t ne = graph_build(nv, degree, perm, &off, &src);
    uint32_t *deg = wl_alloc(nv * 4);
    double *rank = wl_alloc(nv * 8), *contrib = wl_alloc(nv * 8);
#pragma omp parallel for schedule(static)
    for (uint64_t e = 0; e < ne; e++) {
#pragma omp atomic
        deg[src[e]]++;
    }
    uint64_t dangling_vertices = 0;
    for (uint64_t v = 0; v < nv; v++) {
        rank[v] = 1.0 / (double)nv;
        dangling_vertices += deg[v] == 0;
    }
    double dangling = contributions(rank, contrib, deg, nv);

    double *iter_s = malloc((size_t)iters * sizeof(double));
    if (!iter_s)
        return 2;
    wl_timed_begin();
    double t = wl_now();
    for (int it = 0; it < iters; it++) {
        double t0 = wl_now();
        double base = (1 - DAMP) / (double)nv + DAMP * dangling / (double)nv;
#pragma omp parallel for schedule(static)
        for (uint64_t v = 0; v < nv; v++) {
            double s = 0;
            for (uint64_t e = off[v]; e < off[v + 1]; e++)
                s += contrib[src[e]];
            rank[v] = base + DAMP * s;
        }
        dangling = contributions(rank, contrib, deg, nv);
        iter_s[it] = wl_now() - t0;
    }
    t = wl_now() - t;
    wl_timed_end();

    /* Verify: the same iterations from the definition, in separate arrays.
     * The reference regenerates every edge from the RNG instead of reading
     * off[] and src[], and counts the out-degrees again. */
    uint32_t *rdeg = wl_alloc(nv * 4);
    double *rrank = wl_alloc(nv * 8), *rcontrib = wl_alloc(nv * 8);
#pragma omp parallel for schedule(static)
    for (uint64_t v = 0; v < nv; v++) {
        struct gen g = {0, nv, perm, 0, 0};
        uint32_t d = gen_start(&g, v, degree);
        for (uint32_t e = 0; e < d; e++) {
            uint32_t u = gen_src(&g);
#pragma omp atomic
            rdeg[u]++;
        }
    }
    for (uint64_t v = 0; v < nv; v++)
        rrank[v] = 1.0 / (double)nv;
    double rdangling = contributions(rrank, rcontrib, rdeg, nv);
    for (int it = 0; it < iters; it++) {
        double base = (1 - DAMP) / (double)nv + DAMP * rdangling / (double)nv;
#pragma omp parallel for schedule(static)
        for (uint64_t v = 0; v < nv; v++) {
            struct gen g = {0, nv, perm, 0, 0};
            uint32_t d = gen_start(&g, v, degree);
            double s = 0;
            for (uint32_t e = 0; e < d; e++)
                s += rcontrib[gen_src(&g)];
            rrank[v] = base + DAMP * s;
        }
        rdangling = contributions(rrank, rcontrib, rdeg, nv);
    }
    double sum = 0, cks = 0, rcks = 0, maxrel = 0;
#pragma omp parallel for reduction(+ : sum, cks, rcks) reduction(max : maxrel) schedule(static)
    for (uint64_t v = 0; v < nv; v++) {
        sum += rank[v];
        cks += rank[v] * weight(v);
        rcks += rrank[v] * weight(v);
        double rel = fabs(rank[v] - rrank[v]) / rrank[v];
        if (!(rel <= maxrel)) /* also catches NaN */
            maxrel = isnan(rel) ? INFINITY : rel;
    }
    int ok = fabs(sum - 1.0) < 1e-6 && maxrel < 1e-9 && fabs(cks - rcks) <= 1e-9 * fabs(rcks);

    uint64_t hot = nv * (8 + 8 + 4), stream = ne * 4 + (nv + 1) * 8;
    size_t cap = 512 + (size_t)iters * 16;
    char *extra = malloc(cap);
    if (!extra)
        return 2;
    int len = snprintf(extra, cap,
                       "vertices=%llu edges=%llu degree=%u iterations=%d dangling=%llu hot_bytes=%llu stream_bytes=%llu "
                       "rank_sum=%.12f checksum=%.12e ref_checksum=%.12e max_rel_err=%.1e iter_seconds=",
                       (unsigned long long)nv, (unsigned long long)ne, degree, iters, (unsigned long long)dangling_vertices,
                       (unsigned long long)hot, (unsigned long long)stream, sum, cks, rcks, maxrel);
    for (int it = 0; it < iters; it++)
        len += snprintf(extra + len, cap - (size_t)len, "%s%.4f", it ? "," : "", iter_s[it]);
    wl_result("pagerank", t, (double)ne * iters / t / 1e6, "Medges/s", ok, extra);
    return ok ? 0 : 1;
}
