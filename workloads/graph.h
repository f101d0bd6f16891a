/* The synthetic graph of the graph workloads (pagerank, bfs), generated
 * deterministically in CSR form by destination: off[v]..off[v+1] index
 * src[], the sources of v's in-edges.
 *   - in-degrees are uniform in [1, 2D-1] (mean D);
 *   - each source is drawn by the R-MAT recursion (Kronecker quadrant
 *     probabilities a, b, c, d = 0.57, 0.19, 0.19, 0.05, Graph500's),
 *     conditioned on the destination: one bit at a time from the top, a
 *     source bit is 1 with probability c/(a+c) where the destination's bit
 *     is 0 and d/(b+d) where it is 1. Low ids are popular sources, so
 *     out-degrees follow a power law (from tens of thousands down to 0);
 *   - the source then goes through a fixed bijection of the vertex ids
 *     (x -> x * perm mod nv), so that the popular vertices are scattered
 *     over the id space and the arrays, not clustered at 0.
 * Every vertex's edge list comes from its own RNG stream (seeded by its id),
 * so the graph does not depend on the thread count, and a check can
 * regenerate any vertex's in-edges without reading the stored arrays. */
#ifndef FARMEM_GRAPH_H
#define FARMEM_GRAPH_H
#include "wl.h"

static inline uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* One vertex's stream. */
struct gen {
    uint64_t s;
    uint64_t nv, perm, v;
    int bits;
};

static inline uint64_t gen_next(struct gen *g) {
    g->s ^= g->s << 13, g->s ^= g->s >> 7, g->s ^= g->s << 17;
    return g->s * 0x2545F4914F6CDD1DULL;
}

/* Start vertex v's stream; returns its in-degree. */
static inline uint32_t gen_start(struct gen *g, uint64_t v, uint32_t degree) {
    g->s = mix64(v ^ 0x5EED0000ULL) | 1;
    g->v = v;
    g->bits = 0;
    while ((1ULL << g->bits) < g->nv)
        g->bits++;
    return 1 + (uint32_t)(gen_next(g) % (2 * (uint64_t)degree - 1));
}

/* The next source of the vertex's in-edges. */
static inline uint32_t gen_src(struct gen *g) {
    /* P(source bit 1 | destination bit 0) = c/(a+c), (| 1) = d/(b+d), in
     * units of 2^-32. */
    const uint64_t P0 = (uint64_t)(0.19 / 0.76 * 4294967296.0), P1 = (uint64_t)(0.05 / 0.24 * 4294967296.0);
    for (int tries = 0;; tries++) {
        uint64_t x = 0, r = 0;
        for (int b = g->bits - 1; b >= 0; b--) {
            if ((g->bits - 1 - b) % 2 == 0)
                r = gen_next(g);
            uint64_t u = (g->bits - 1 - b) % 2 ? r >> 32 : r & 0xFFFFFFFFULL;
            uint64_t p = (g->v >> b) & 1 ? P1 : P0;
            x |= (uint64_t)(u < p) << b;
        }
        /* Ids beyond the last vertex are drawn again (a few times at most:
         * low ids are the likely ones). */
        if (x < g->nv || tries >= 8)
            return (uint32_t)((x % g->nv) * g->perm % g->nv);
    }
}

static uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* A multiplier coprime with nv: x -> x * perm mod nv is a bijection. */
static uint64_t graph_perm(uint64_t nv) {
    uint64_t perm = 2654435761ULL % nv;
    while (perm < 2 || gcd(perm, nv) != 1)
        perm = perm + 1 < nv ? perm + 1 : 1;
    return perm;
}

/* Build the CSR arrays (from wl_alloc); returns the number of edges. */
static uint64_t graph_build(uint64_t nv, uint32_t degree, uint64_t perm, uint64_t **off_out, uint32_t **src_out) {
    uint64_t *off = wl_alloc((nv + 1) * 8);
#pragma omp parallel for schedule(static)
    for (uint64_t v = 0; v < nv; v++) {
        struct gen g = {0, nv, perm, 0, 0};
        off[v + 1] = gen_start(&g, v, degree);
    }
    for (uint64_t v = 0; v < nv; v++)
        off[v + 1] += off[v];
    uint64_t ne = off[nv];
    uint32_t *src = wl_alloc(ne * 4);
#pragma omp parallel for schedule(static)
    for (uint64_t v = 0; v < nv; v++) {
        struct gen g = {0, nv, perm, 0, 0};
        gen_start(&g, v, degree);
        for (uint64_t e = off[v]; e < off[v + 1]; e++)
            src[e] = gen_src(&g);
    }
    *off_out = off;
    *src_out = src;
    return ne;
}
#endif
