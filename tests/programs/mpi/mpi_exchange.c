/* Two MPI ranks, each under `farmem run`, exchanging 64 MiB buffers that
 * live in far memory (plain malloc under the shim):
 *
 *   mpirun --allow-run-as-root --oversubscribe -np 2 \
 *       --mca btl self,vader --mca btl_vader_single_copy_mechanism cma \
 *       TARGET/farmem run --local 16M -- ./mpi_exchange
 *
 * (an argument sets another buffer size in MiB; 64 by default).
 *
 * 1. MPI_Send/MPI_Recv, both directions; 2. one-sided MPI_Put and MPI_Get
 * on a window created with MPI_Win_create over a far buffer. Before every
 * transfer each rank evicts its far buffers (fm_advise DONTNEED, found with
 * dlsym), so the kernel meets non-resident far pages on both sides. Every
 * byte is verified. Prints `NAME ok` / `NAME FAILED why` (rank 0 collects
 * both ranks' results) and exits 1 on a failure.
 *
 * Which path the data took: Open MPI's vader BTL moves large messages with
 * a single copy, process_vm_readv/process_vm_writev (CMA), from one rank
 * into the other rank's memory. This program defines those two functions
 * itself (linked with -rdynamic, so the definitions are in the dynamic
 * symbol table and come first in lookup order, before farmem's shim and
 * libc): each call is counted and passed on to the next definition
 * (farmem's wrapper under `farmem run`). Each rank prints
 * `rank R cma: N calls, B bytes`; the Rust test (crates/cli/tests/
 * kernel_access.rs) requires both to be non-zero, which shows the CMA path
 * was taken. The same was checked by hand with
 * `strace -f -e trace=process_vm_readv,process_vm_writev mpirun ...`.
 *
 * Build: mpicc -O2 -rdynamic mpi_exchange.c -o mpi_exchange (-ldl on old
 * glibc). Kept out of the tests/programs C lint loop, which has no mpi.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#define MB (1024UL * 1024UL)
static size_t N = 64 * MB; /* argv[1]: size in MiB */

/* ---- counting CMA calls -------------------------------------------- */
typedef ssize_t (*vm_fn)(pid_t, const struct iovec *, unsigned long, const struct iovec *, unsigned long,
                         unsigned long);
static unsigned long cma_calls, cma_bytes;

static ssize_t vm_forward(const char *name, pid_t pid, const struct iovec *l, unsigned long ln,
                          const struct iovec *r, unsigned long rn, unsigned long fl) {
    vm_fn f = (vm_fn)dlsym(RTLD_NEXT, name);
    if (!f)
        abort();
    ssize_t got = f(pid, l, ln, r, rn, fl);
    __atomic_add_fetch(&cma_calls, 1, __ATOMIC_RELAXED);
    if (got > 0)
        __atomic_add_fetch(&cma_bytes, (unsigned long)got, __ATOMIC_RELAXED);
    return got;
}
ssize_t process_vm_readv(pid_t pid, const struct iovec *l, unsigned long ln, const struct iovec *r,
                         unsigned long rn, unsigned long fl) {
    return vm_forward("process_vm_readv", pid, l, ln, r, rn, fl);
}
ssize_t process_vm_writev(pid_t pid, const struct iovec *l, unsigned long ln, const struct iovec *r,
                          unsigned long rn, unsigned long fl) {
    return vm_forward("process_vm_writev", pid, l, ln, r, rn, fl);
}

/* ---- far memory helpers -------------------------------------------- */
static int (*fm_advise_p)(void *, size_t, int);
static int (*fm_is_far_p)(void *);
static void evict(void *p, size_t n) {
    if (fm_advise_p && fm_advise_p(p, n, 4 /* FM_ADV_DONTNEED */) != 0) {
        fprintf(stderr, "fm_advise failed\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static inline unsigned char pat(size_t i, unsigned seed) {
    return (unsigned char)((i * 131 + seed * 7 + (i >> 12) + (i >> 20) * 3) & 0xff);
}
static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = pat(i, seed);
}
/* -1 if p holds pattern `seed`, else the first differing offset. */
static long verify(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(i, seed))
            return (long)i;
    return -1;
}

static int rank, failures;

/* Each rank reports `ok` (1) or a failing offset; rank 0 prints. */
static void report(const char *name, long my_bad) {
    long all[2] = {-1, -1};
    MPI_Gather(&my_bad, 1, MPI_LONG, all, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all[0] < 0 && all[1] < 0)
            printf("%s ok\n", name);
        else
            printf("%s FAILED rank 0: %s%ld, rank 1: %s%ld\n", name, all[0] < 0 ? "ok " : "byte ", all[0],
                   all[1] < 0 ? "ok " : "byte ", all[1]);
        fflush(stdout);
    }
    if (all[0] >= 0 || all[1] >= 0)
        failures++;
    MPI_Bcast(&failures, 1, MPI_INT, 0, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "run with -np 2\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    fm_advise_p = (int (*)(void *, size_t, int))dlsym(RTLD_DEFAULT, "fm_advise");
    fm_is_far_p = (int (*)(void *))dlsym(RTLD_DEFAULT, "fm_is_far");
    int peer = 1 - rank;
    if (argc > 1)
        N = (size_t)atol(argv[1]) * MB;
    if (rank == 0)
        printf("message size %zu MiB\n", N / MB);

    unsigned char *sbuf = malloc(N), *rbuf = malloc(N), *wbuf = malloc(N);
    if (!sbuf || !rbuf || !wbuf)
        MPI_Abort(MPI_COMM_WORLD, 2);
    int far = fm_is_far_p && fm_is_far_p(sbuf) == 1 && fm_is_far_p(rbuf) == 1 && fm_is_far_p(wbuf) == 1;
    printf("rank %d: buffers %s\n", rank, far ? "far" : fm_is_far_p ? "NOT far" : "local (not under farmem)");
    fflush(stdout);
    report("buffers-far", fm_is_far_p && !far ? 0 : -1);

    /* 1. Send/Recv: rank 0 -> rank 1, then rank 1 -> rank 0. */
    fill(sbuf, N, 10 + (unsigned)rank);
    memset(rbuf, 0, N);
    for (int dir = 0; dir < 2; dir++) {
        int sender = dir;
        evict(sbuf, N);
        evict(rbuf, N);
        MPI_Barrier(MPI_COMM_WORLD);
        long bad = -1;
        if (rank == sender) {
            MPI_Send(sbuf, (int)N, MPI_BYTE, peer, 100 + dir, MPI_COMM_WORLD);
        } else {
            MPI_Status st;
            MPI_Recv(rbuf, (int)N, MPI_BYTE, peer, 100 + dir, MPI_COMM_WORLD, &st);
            int count;
            MPI_Get_count(&st, MPI_BYTE, &count);
            bad = count == (int)N ? verify(rbuf, N, 10 + (unsigned)peer) : 0;
        }
        report(dir == 0 ? "send-recv-0-to-1" : "send-recv-1-to-0", bad);
    }
    /* The sent buffers are unchanged. */
    evict(sbuf, N);
    report("send-buffers-intact", verify(sbuf, N, 10 + (unsigned)rank));

    /* 2. One-sided: every rank exposes wbuf (far) in a window. */
    fill(wbuf, N, 20 + (unsigned)rank);
    MPI_Win win;
    MPI_Win_create(wbuf, N, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);

    /* Put: rank 0 writes its sbuf into rank 1's window. */
    evict(sbuf, N);
    evict(wbuf, N);
    MPI_Win_fence(0, win);
    if (rank == 0)
        MPI_Put(sbuf, (int)N, MPI_BYTE, 1, 0, (int)N, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    report("put-0-into-1", rank == 1 ? verify(wbuf, N, 10) : -1);

    /* Get: rank 1 reads rank 0's window into its rbuf. */
    memset(rbuf, 0, N);
    evict(rbuf, N);
    evict(wbuf, N);
    MPI_Win_fence(0, win);
    if (rank == 1)
        MPI_Get(rbuf, (int)N, MPI_BYTE, 0, 0, (int)N, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    report("get-1-from-0", rank == 1 ? verify(rbuf, N, 20) : -1);

    /* Get in the other direction, at an unaligned offset. */
    memset(rbuf, 0, N);
    evict(rbuf, N);
    evict(wbuf, N);
    MPI_Win_fence(0, win);
    size_t off = 12345, len = N - 2 * off;
    if (rank == 0)
        MPI_Get(rbuf + 7, (int)len, MPI_BYTE, 1, (MPI_Aint)off, (int)len, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    long gb = -1;
    if (rank == 0)
        for (size_t i = 0; i < len; i++)
            if (rbuf[7 + i] != pat(off + i, 10)) { /* rank 1's window now holds rank 0's sbuf */
                gb = (long)i;
                break;
            }
    report("get-0-from-1-unaligned", gb);
    MPI_Win_free(&win);

    printf("rank %d cma: %lu calls, %lu bytes\n", rank, cma_calls, cma_bytes);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s\n", failures ? "mpi_exchange FAILED" : "mpi_exchange ok");
    free(sbuf);
    free(rbuf);
    free(wbuf);
    MPI_Finalize();
    return failures ? 1 : 0;
}
