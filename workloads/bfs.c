/* bfs: breadth-first search over the R-MAT graph of graph.h (the graph
 * pagerank runs on), bottom-up (Beamer's "pull" direction): every level,
 * each vertex not yet reached scans its in-edges until it finds a source on
 * the current frontier. The graph is stored by destination, so this is the
 * direction it can be searched in without a transposed copy.
 * usage: bfs SIZE [--degree D] [--root R]
 *
 * SIZE is the footprint: per vertex 4*D bytes of edges, an 8-byte offset and
 * a 4-byte level. The level array (the small, randomly read hot set) is
 * about 5% of it; the edges and offsets are scanned in order, once per level
 * for the vertices not yet reached.
 *
 * Timed: the search only. Check, after it, Graph500's way, from edges
 * regenerated from each vertex's RNG stream (not read from the arrays that
 * were timed): the root is at level 0 and nothing else is; every edge
 * (u, v) with u reached has v reached with level[v] <= level[u] + 1; and
 * every reached v other than the root has an in-edge from level[v] - 1.
 * Together these make every level the exact BFS distance.
 * Metric: million in-edges scanned per second. */
#include "graph.h"
#include <omp.h>

int main(int argc, char **argv) {
    const char *size = NULL;
    uint32_t degree = 16;
    long long root_arg = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--degree") && i + 1 < argc)
            degree = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--root") && i + 1 < argc)
            root_arg = atoll(argv[++i]);
        else if (!size)
            size = argv[i];
        else {
            fprintf(stderr, "bfs: unexpected argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!size) {
        fprintf(stderr, "usage: bfs SIZE [--degree D] [--root R]\n");
        return 2;
    }
    if (degree < 1 || degree > 1000) {
        fprintf(stderr, "--degree must be between 1 and 1000\n");
        return 2;
    }
    size_t bytes = wl_size(size);
    uint64_t nv = bytes / (4 * (uint64_t)degree + 8 + 4);
    if (nv < 1024 || nv > INT32_MAX) {
        fprintf(stderr, "SIZE gives %llu vertices; it must give 1024 to 2^31-1\n", (unsigned long long)nv);
        return 2;
    }
    if (root_arg < 0 || (uint64_t)root_arg >= nv) {
        fprintf(stderr, "--root must be a vertex, 0 to %llu\n", (unsigned long long)nv - 1);
        return 2;
    }
    uint64_t root = (uint64_t)root_arg;
    uint64_t perm = graph_perm(nv);
    uint64_t *off;
    uint32_t *src;
    uint64_t ne = graph_build(nv, degree, perm, &off, &src);
    int32_t *level = wl_alloc(nv * 4);
#pragma omp parallel for schedule(static)
    for (uint64_t v = 0; v < nv; v++)
        level[v] = -1;
    level[root] = 0;

    wl_timed_begin();
    double t = wl_now();
    int32_t depth = 0;
    uint64_t scanned = 0, reached = 1;
    for (;;) {
        uint64_t found = 0, seen = 0;
#pragma omp parallel for reduction(+ : found, seen) schedule(dynamic, 4096)
        for (uint64_t v = 0; v < nv; v++) {
            if (level[v] >= 0)
                continue;
            for (uint64_t e = off[v]; e < off[v + 1]; e++) {
                seen++;
                /* A source reached in this very level (level depth + 1) is
                 * not on the frontier: only == depth counts. */
                /* Relaxed atomics: other threads set levels in this pass. */
                if (__atomic_load_n(&level[src[e]], __ATOMIC_RELAXED) == depth) {
                    __atomic_store_n(&level[v], depth + 1, __ATOMIC_RELAXED);
                    found++;
                    break;
                }
            }
        }
        scanned += seen;
        if (!found)
            break;
        reached += found;
        depth++;
    }
    t = wl_now() - t;
    wl_timed_end();

    /* The check, from regenerated edges. */
    uint64_t bad = 0, reached2 = 0;
#pragma omp parallel for reduction(+ : bad, reached2) schedule(dynamic, 4096)
    for (uint64_t v = 0; v < nv; v++) {
        struct gen g = {0, nv, perm, 0, 0};
        uint32_t d = gen_start(&g, v, degree);
        int32_t lv = level[v];
        int parent = 0;
        for (uint32_t e = 0; e < d; e++) {
            int32_t lu = level[gen_src(&g)];
            if (lu >= 0 && (lv < 0 || lv > lu + 1))
                bad++;
            parent |= lu >= 0 && lu == lv - 1;
        }
        reached2 += lv >= 0;
        if (v == root ? lv != 0 : (lv == 0 || (lv > 0 && !parent)))
            bad++;
    }
    int ok = bad == 0 && reached2 == reached;
    if (!ok)
        fprintf(stderr, "bfs: %llu violations of the BFS level rules\n", (unsigned long long)bad);
    char extra[256];
    snprintf(extra, sizeof extra, "vertices=%llu edges=%llu degree=%u root=%llu levels=%d reached=%llu scanned=%llu",
             (unsigned long long)nv, (unsigned long long)ne, degree, (unsigned long long)root, depth + 1,
             (unsigned long long)reached, (unsigned long long)scanned);
    wl_result("bfs", t, (double)scanned / t / 1e6, "Medges/s", ok, extra);
    return ok ? 0 : 1;
}
