/* cpu.c: backend_cpu, the fp32 reference backend. Each tensor-parallel rank is a thread of one
 * process; a rank owns an activation arena (2*arena_bytes: every buffer at 2*offset, see
 * docs/plan-format.md), its params, grads and AdamW state. The ranks of the grid (dp x tp, all threads)
 * form tp groups and dp groups (runtime/grid.h); a collective meets its group at a barrier and sums
 * in index order 0..n-1, so every member gets bit-identical results at any degree.
 * Under mpirun a rank is a process: its tp group's transport is then MPI (runtime/comm_mpi.h),
 * which gathers every member's part and sums in the same index order, so processes and threads
 * agree bit for bit (data parallelism stays threads of one process). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>          // defines: cblas_sgemm, openblas_set_num_threads
#include "runtime/backend.h"
#include "runtime/cpu.h"
#include "runtime/grid.h"
#include "runtime/comm_mpi.h"   // defines: CommMpi, comm_mpi_*

#define CPU_MAX_TP 64

/* One communication group (a tp group or a dp group of the rank grid, runtime/grid.h): its size, a
 * barrier generation and each member's published pointer. */
typedef struct {
    int n, count, gen;
    void **ptr;               /* [n], by index in the group */
    CommMpi *mpi;             /* multi-process mode: the group's MPI communicator (this process holds one member) */
} CpuGroup;

/* All the groups of one Engine's ranks. One mutex and condition variable serve every group's
 * barrier, so one failing rank wakes and stops the ranks waiting in any group. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int aborted, refs, ngroups;
    CpuGroup *groups;         /* [ngroups]: the tp groups, then the dp groups */
} CpuComm;

struct BackendRank {
    const Plan *p;
    int rank, tp;                 /* rank: the tensor-parallel rank (what %r means in the plan) */
    float *arena;                 /* 2*arena_bytes */
    void **ptr;                   /* per tensor */
    float **m, **v;               /* per param: AdamW state */
    float *scratch; size_t scratch_elems;
    CpuComm *comm;
    CpuGroup *grp[GROUP_COUNT];   /* this rank's tp and dp groups (pp: unused) */
    int gidx[GROUP_COUNT];        /* its index in each */
    int zero;                     /* zero=1 at dp > 1: m, v hold this dp rank's shard only (zero_shard) */
    char err[512];
};

/* Threads: each of the tp ranks of this process gets cpu_threads() = BOOST_THREADS (default: the
 * online cores less the machine's 1-minute load, which a busy shared machine needs) / tp, at least 1,
 * for the kernels' OpenMP loops and the GEMMs, so tp ranks x threads never oversubscribe the cores.
 * The split never changes a result's bits: a kernel row's arithmetic does not depend on it, and a
 * GEMM is cut into blocks fixed by its shape alone, each one single-threaded OpenBLAS call (OpenBLAS's
 * own threading would change the sums with the thread count). tests/sh/train_threads.sh checks a run. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single(void) { openblas_set_num_threads(1); }
static void blas_threads_for(int tp) {
    pthread_once(&blas_once, blas_single);
    cpu_threads_set(tp);
}

static int64_t numel(const PlanTensor *t) { return t->rows * t->cols; }

static void comm_abort(CpuComm *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->aborted = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Every member of g meets here. Returns -1 when a rank failed (the pass is abandoned). */
static int group_barrier(CpuComm *c, CpuGroup *g) {
    pthread_mutex_lock(&c->mu);
    if (c->aborted) { pthread_mutex_unlock(&c->mu); return -1; }
    int gen = g->gen;
    if (++g->count == g->n) {
        g->count = 0;
        g->gen++;
        pthread_cond_broadcast(&c->cv);
    } else {
        while (gen == g->gen && !c->aborted) pthread_cond_wait(&c->cv, &c->mu);
    }
    int ab = c->aborted && gen == g->gen;
    pthread_mutex_unlock(&c->mu);
    return ab ? -1 : 0;
}

static void comm_release(CpuComm *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left) return;
    for (int i = 0; i < c->ngroups; i++) { free(c->groups[i].ptr); comm_mpi_free(c->groups[i].mpi); }
    free(c->groups);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static int rfail(BackendRank *r, const char *msg) {
    snprintf(r->err, sizeof r->err, "cpu rank %d: %s", r->rank, msg);
    comm_abort(r->comm);
    return -1;
}

static void cpu_rank_close(BackendRank *r) {
    if (!r) return;
    const Plan *p = r->p;
    if (r->ptr) {
        for (int t = 0; t < p->ntensors; t++)
            if (p->tensors[t].kind != TK_ACT) free(r->ptr[t]);
        free(r->ptr);
    }
    if (r->m) for (int i = 0; i < p->nparams; i++) free(r->m[i]);
    if (r->v) for (int i = 0; i < p->nparams; i++) free(r->v[i]);
    free(r->m); free(r->v); free(r->arena); free(r->scratch);
    comm_release(r->comm);
    free(r);
}

static BackendRank *cpu_rank_open(const Plan *p, int rank, int tp, char *err, size_t errlen) {
    if (tp > CPU_MAX_TP) { snprintf(err, errlen, "cpu backend: tp=%d is more than %d", tp, CPU_MAX_TP); return NULL; }
    blas_threads_for(tp);
    BackendRank *r = calloc(1, sizeof *r);
    if (!r) goto oom;
    r->p = p; r->rank = rank; r->tp = tp;
    size_t arena = (size_t)(2 * p->arena_bytes) * (size_t)(p->arena_slots > 1 ? p->arena_slots : 1);   /* slot k at k*2*bytes */
    r->arena = calloc(arena / sizeof(float) + 1, sizeof(float));
    r->ptr = calloc((size_t)p->ntensors + 1, sizeof *r->ptr);
    r->m = calloc((size_t)p->nparams + 1, sizeof *r->m);
    r->v = calloc((size_t)p->nparams + 1, sizeof *r->v);
    if (!r->arena || !r->ptr || !r->m || !r->v) goto oom;
    for (int t = 0; t < p->ntensors; t++) {
        const PlanTensor *pt = &p->tensors[t];
        if (pt->kind == TK_ACT) r->ptr[t] = (char *)r->arena + 2 * pt->offset;
        else if (!(r->ptr[t] = calloc((size_t)numel(pt), 4))) goto oom;
    }
    r->zero = p->zero && p->dp > 1;
    for (int i = 0; i < p->nparams; i++) {
        size_t n = (size_t)(p->params[i].rows * p->params[i].cols);
        if (r->zero) n = (n + (size_t)p->dp - 1) / (size_t)p->dp;   /* the largest shard */
        if (!(r->m[i] = calloc(n + 1, sizeof(float))) || !(r->v[i] = calloc(n + 1, sizeof(float)))) goto oom;
    }
    return r;
oom:
    cpu_rank_close(r);
    snprintf(err, errlen, "cpu backend: out of memory opening rank %d (arena %lld bytes); use a smaller micro_batch or seq",
             rank, (long long)(2 * p->arena_bytes));
    return NULL;
}

/* ranks[0..grid->world) by grid rank: one tp group per (pp, dp) and one dp group per (pp, tp). */
static int cpu_grid_init(BackendRank **ranks, const Grid *grid, char *err, size_t errlen) {
    CpuComm *c = calloc(1, sizeof *c);
    int ntp = grid->world / grid->tp, ndp = grid->world / grid->dp;
    if (c) c->groups = calloc((size_t)(ntp + ndp), sizeof *c->groups);
    if (!c || !c->groups) { free(c); snprintf(err, errlen, "cpu backend: out of memory"); return -1; }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->ngroups = ntp + ndp;
    c->refs = grid->world;
    int bad = 0;
    for (int i = 0; i < c->ngroups; i++) {
        c->groups[i].n = i < ntp ? grid->tp : grid->dp;
        if (!(c->groups[i].ptr = calloc((size_t)c->groups[i].n, sizeof(void *)))) bad = 1;
    }
    for (int r = 0; r < grid->world; r++) {
        GridCoord gc = grid_coord(grid, r);
        BackendRank *R = ranks[r];
        R->comm = c;
        /* tp group: numbered by its first rank / tp; dp group: by (pp, tp rank) */
        R->grp[GROUP_TP] = &c->groups[gc.first[GROUP_TP] / grid->tp];
        R->grp[GROUP_DP] = &c->groups[ntp + gc.pp_rank * grid->tp + gc.tp_rank];
        R->gidx[GROUP_TP] = gc.tp_rank;
        R->gidx[GROUP_DP] = gc.dp_rank;
    }
    if (bad) {
        for (int r = 0; r < grid->world; r++) ranks[r]->comm = NULL;
        c->refs = 1;
        comm_release(c);
        snprintf(err, errlen, "cpu backend: out of memory");
        return -1;
    }
    return 0;
}

/* Multi-process mode (mpirun): this process holds the one rank r; its tp group is the world's processes
 * of the same tp group (world rank / tp), ordered by tp rank, with MPI as the transport. */
static int mpi_group_init(BackendRank *r, int tp, char *err, size_t errlen) {
    CommMpi *world = comm_mpi_init(err, errlen);
    if (!world) return -1;
    int wrank = comm_mpi_rank(world);
    if (wrank % tp != r->rank) {
        snprintf(err, errlen, "cpu backend: world rank %d holds tp rank %d, expected %d", wrank, r->rank, wrank % tp);
        return -1;
    }
    CpuComm *c = calloc(1, sizeof *c);
    if (c) c->groups = calloc(2, sizeof *c->groups);   /* [0] the tp group over MPI, [1] a dp group of one */
    if (!c || !c->groups) { free(c); snprintf(err, errlen, "cpu backend: out of memory"); return -1; }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->ngroups = 2;
    c->refs = 1;
    c->groups[0].n = tp;
    c->groups[1].n = 1;
    r->comm = c;
    r->grp[GROUP_TP] = &c->groups[0];
    r->grp[GROUP_DP] = &c->groups[1];
    r->gidx[GROUP_TP] = r->rank;
    r->gidx[GROUP_DP] = 0;
    CommMpi *g = comm_mpi_split(world, wrank / tp, r->rank);
    if (!g) { snprintf(err, errlen, "cpu backend: %s", comm_mpi_error()); return -1; }
    c->groups[0].mpi = g;
    if (comm_mpi_size(g) != tp || comm_mpi_rank(g) != r->rank) {
        snprintf(err, errlen, "cpu backend: the tp group of world rank %d has %d processes, the plan has tp=%d",
                 wrank, comm_mpi_size(g), tp);
        return -1;
    }
    return 0;
}

/* ranks[0..tp): every rank in this process (threads), or exactly one (a process of an mpirun job). */
static int cpu_group_init(BackendRank **ranks, int tp, char *err, size_t errlen) {
    int here = 0;
    BackendRank *mine = NULL;
    for (int i = 0; i < tp; i++) if (ranks[i]) { here++; mine = ranks[i]; }
    if (here == 1 && tp > 1) return mpi_group_init(mine, tp, err, errlen);
    if (here != tp) { snprintf(err, errlen, "cpu backend: %d of %d ranks in this process", here, tp); return -1; }
    Grid g;
    if (grid_make(&g, 1, 1, tp, err, errlen)) return -1;
    return cpu_grid_init(ranks, &g, err, errlen);
}

static void *cpu_tensor_ptr(BackendRank *r, int t) { return r->ptr[t]; }

/* The elements [lo, hi) of an n-element tensor this rank updates: all of them, or its zero=1 shard. */
static void own_range(const BackendRank *r, int64_t n, int64_t *lo, int64_t *hi) {
    if (!r->zero) { *lo = 0; *hi = n; return; }
    zero_shard(n, r->gidx[GROUP_DP], r->grp[GROUP_DP] ? r->grp[GROUP_DP]->n : 1, lo, hi);
}

/* C = alpha op(A) op(B) + beta C, batch times, split over the threads in blocks of C's rows (or of
 * its columns when it has more columns than rows): at most 16 blocks of at least GEMM_MIN_BLOCK, fixed
 * by the shape, so any thread count computes every element with the same calls. */
#define GEMM_MIN_BLOCK 64
void cpu_gemm(const GemmArgs *g, const float *A, const float *B, float *C) {
    pthread_once(&blas_once, blas_single);
    int by_rows = g->m >= g->n;
    int64_t len = by_rows ? g->m : g->n;
    int64_t nblk = len / GEMM_MIN_BLOCK;
    if (nblk < 1) nblk = 1;
    if (nblk > 16) nblk = 16;
    int64_t blk = (len + nblk - 1) / nblk;
    nblk = (len + blk - 1) / blk;
    int64_t items = g->batch * nblk;
    int nt = (double)g->m * g->n * g->k * g->batch < 4e6 || items < 2 ? 1 : cpu_threads();
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t i = it / nblk, b0 = (it % nblk) * blk, bl = len - b0 < blk ? len - b0 : blk;
        const float *a = A + i * g->sA, *bm = B + i * g->sB;
        float *c = C + i * g->sC;
        int64_t m = g->m, n = g->n;
        if (by_rows) {   /* rows b0.. of C and of op(A) */
            a += g->ta ? b0 : b0 * g->lda;
            c += b0 * g->ldc;
            m = bl;
        } else {         /* columns b0.. of C and of op(B) */
            bm += g->tb ? b0 * g->ldb : b0;
            c += b0;
            n = bl;
        }
        cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)g->k, (float)g->alpha, a, (int)g->lda, bm, (int)g->ldb, (float)g->beta, c,
                    (int)g->ldc);
    }
}

static int cpu_gemm_step(BackendRank *r, const GemmArgs *g, void *A, void *B, void *C) {
    cpu_gemm(g, A, B, C);
    return 0;
}

static int cpu_grouped_gemm(BackendRank *r, int n, const GemmArgs *g, void **A, void **B, void **C) {
    for (int i = 0; i < n; i++) cpu_gemm(&g[i], A[i], B[i], C[i]);
    return 0;
}

static int cpu_kernel(BackendRank *r, const KernelArgs *k, void **ops) {
    char msg[400];
    if (cpu_kernel_run(k, ops, r->rank, msg, sizeof msg)) return rfail(r, msg);
    return 0;
}

static float *scratch(BackendRank *r, size_t n) {
    if (n > r->scratch_elems) {
        float *s = realloc(r->scratch, n * sizeof *s);
        if (!s) return NULL;
        r->scratch = s; r->scratch_elems = n;
    }
    return r->scratch;
}

/* x rounded to the nearest bf16 (ties to even), as an fp32: what a bf16 wire carries. */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    else u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* The members of the step's group sum their buffers in index order 0..n-1 (deterministic, the same
 * bits on every member); op=avg then divides by n.
 * A bf16 step on an fp32 buffer (dp gradients, parallel.dp_dtype = "bf16") rounds every member's
 * values and the result to bf16, as a bf16 collective on a device would (the sum itself in fp32). */

/* The MPI transport: the same sums, in the same rank order (comm_mpi_allreduce_ordered). */
static int mpi_fail(BackendRank *r, const char *what) {
    char msg[480];
    snprintf(msg, sizeof msg, "%s over MPI: %s", what, comm_mpi_error());
    return rfail(r, msg);
}

static int mpi_allreduce(BackendRank *r, void *buf, int64_t n, int is_f64) {
    size_t esize = is_f64 ? sizeof(double) : sizeof(float);
    void *all = malloc((size_t)n * (size_t)r->grp[GROUP_TP]->n * esize + 1);
    if (!all) return rfail(r, "allreduce: out of memory");
    int rc = comm_mpi_allreduce_ordered(r->grp[GROUP_TP]->mpi, buf, n, is_f64 ? COMM_F64 : COMM_F32, all);
    free(all);
    return rc ? mpi_fail(r, "allreduce") : 0;
}

static int mpi_allgather(BackendRank *r, const CollArgs *c, const float *src, float *tmp) {
    int64_t rows = c->rows, cols = c->cols, t = r->tp;
    float *mine = malloc((size_t)(rows * cols) * sizeof *mine + 1), *all = malloc((size_t)(rows * cols * t) * sizeof *all + 1);
    if (!mine || !all) { free(mine); free(all); return rfail(r, "allgather: out of memory"); }
    for (int64_t i = 0; i < rows; i++) memcpy(mine + i * cols, src + i * c->ld_src, (size_t)cols * sizeof *mine);
    int rc = comm_mpi_allgather(r->grp[GROUP_TP]->mpi, mine, all, rows * cols, COMM_F32);
    for (int q = 0; !rc && q < t; q++)     // [t][rows][cols] -> [rows][t*cols]
        for (int64_t i = 0; i < rows; i++)
            memcpy(tmp + i * cols * t + q * cols, all + (q * rows + i) * cols, (size_t)cols * sizeof *tmp);
    free(mine); free(all);
    return rc ? mpi_fail(r, "allgather") : 0;
}

static int cpu_world_allreduce_host(BackendRank *r, void *host, int64_t n, int is_f64) {
    if (!r->grp[GROUP_TP] || !r->grp[GROUP_TP]->mpi) return rfail(r, "a sum over processes without MPI (not launched by mpirun)");
    return mpi_allreduce(r, host, n, is_f64);
}

static int cpu_allreduce(BackendRank *r, const CollArgs *c, void *buf) {
    CpuGroup *g = r->grp[c->group];
    int n = g ? g->n : (c->group == GROUP_TP ? r->tp : 1);
    if (n == 1) return 0;
    if (!g) return rfail(r, "allreduce: the ranks were never grouped (group_init not called)");
    if (g->mpi) return mpi_allreduce(r, buf, c->elems, 0);
    size_t ne = (size_t)c->elems;
    float *sum = scratch(r, ne);
    if (!sum) return rfail(r, "allreduce: out of memory");
    g->ptr[r->gidx[c->group]] = buf;
    if (group_barrier(r->comm, g)) return rfail(r, "allreduce abandoned: another rank failed");
    int wire16 = c->dtype == PDT_BF16 && r->p->tensors[c->buf.tensor].dtype == PDT_FP32;
    memcpy(sum, g->ptr[0], ne * sizeof *sum);
    if (wire16) for (size_t i = 0; i < ne; i++) sum[i] = bf16_round(sum[i]);
    for (int q = 1; q < n; q++) {
        const float *src = g->ptr[q];
        if (wire16) for (size_t i = 0; i < ne; i++) sum[i] += bf16_round(src[i]);
        else for (size_t i = 0; i < ne; i++) sum[i] += src[i];
    }
    if (c->avg)
        for (size_t i = 0; i < ne; i++) sum[i] /= (float)n;
    if (wire16) for (size_t i = 0; i < ne; i++) sum[i] = bf16_round(sum[i]);
    if (group_barrier(r->comm, g)) return rfail(r, "allreduce abandoned: another rank failed");
    memcpy(buf, sum, ne * sizeof *sum);
    return 0;
}

static int cpu_allgather(BackendRank *r, const CollArgs *c, void *src, void *dst) {
    int64_t rows = c->rows, cols = c->cols, t = r->tp;
    float *tmp = scratch(r, (size_t)(rows * cols * t));
    if (!tmp) return rfail(r, "allgather: out of memory");
    CpuGroup *g = r->grp[GROUP_TP];
    if (t > 1 && !g) return rfail(r, "allgather: the ranks were never grouped (group_init not called)");
    if (t > 1 && g->mpi) {
        if (mpi_allgather(r, c, src, tmp)) return -1;
    } else if (t > 1) {
        g->ptr[r->gidx[GROUP_TP]] = src;
        if (group_barrier(r->comm, g)) return rfail(r, "allgather abandoned: another rank failed");
    }
    for (int q = 0; q < t && !(t > 1 && g->mpi); q++) {
        const float *s = t > 1 ? g->ptr[q] : src;
        for (int64_t i = 0; i < rows; i++)
            memcpy(tmp + i * cols * t + q * cols, s + i * c->ld_src, (size_t)cols * sizeof *tmp);
    }
    if (t > 1 && !g->mpi && group_barrier(r->comm, g)) return rfail(r, "allgather abandoned: another rank failed");
    float *d = dst;
    for (int64_t i = 0; i < rows; i++) memcpy(d + i * c->ld_dst, tmp + i * cols * t, (size_t)(cols * t) * sizeof *d);
    return 0;
}

/* ZeRO-1: average over the dp group like allreduce, but write only this member's shard. */
static int cpu_reduce_scatter(BackendRank *r, const CollArgs *c, void *buf) {
    CpuGroup *g = r->grp[GROUP_DP];
    if (!g || g->n == 1) return 0;
    int64_t lo, hi;
    zero_shard(c->elems, r->gidx[GROUP_DP], g->n, &lo, &hi);
    float *sum = scratch(r, (size_t)(hi - lo) + 1);
    if (!sum) return rfail(r, "reduce_scatter: out of memory");
    g->ptr[r->gidx[GROUP_DP]] = buf;
    if (group_barrier(r->comm, g)) return rfail(r, "reduce_scatter abandoned: another rank failed");
    int wire16 = c->dtype == PDT_BF16 && r->p->tensors[c->buf.tensor].dtype == PDT_FP32;
    for (int q = 0; q < g->n; q++) {
        const float *src = g->ptr[q];
        for (int64_t i = lo; i < hi; i++) {
            float x = wire16 ? bf16_round(src[i]) : src[i];
            sum[i - lo] = q ? sum[i - lo] + x : x;
        }
    }
    if (c->avg) for (int64_t i = lo; i < hi; i++) sum[i - lo] /= (float)g->n;
    if (wire16) for (int64_t i = lo; i < hi; i++) sum[i - lo] = bf16_round(sum[i - lo]);
    if (group_barrier(r->comm, g)) return rfail(r, "reduce_scatter abandoned: another rank failed");
    memcpy((float *)buf + lo, sum, (size_t)(hi - lo) * sizeof *sum);
    return 0;
}

/* ZeRO-1: every member copies the other members' shards of buf into its own buf. */
static int cpu_gather_shards(BackendRank *r, const CollArgs *c, void *buf) {
    CpuGroup *g = r->grp[GROUP_DP];
    if (!g || g->n == 1) return 0;
    g->ptr[r->gidx[GROUP_DP]] = buf;
    if (group_barrier(r->comm, g)) return rfail(r, "gather_shards abandoned: another rank failed");
    for (int q = 0; q < g->n; q++) {
        if (q == r->gidx[GROUP_DP]) continue;
        int64_t lo, hi;
        zero_shard(c->elems, q, g->n, &lo, &hi);
        memcpy((float *)buf + lo, (const float *)g->ptr[q] + lo, (size_t)(hi - lo) * sizeof(float));
    }
    if (group_barrier(r->comm, g)) return rfail(r, "gather_shards abandoned: another rank failed");
    return 0;
}

static int cpu_to_host(BackendRank *r, int t, float *host) {
    const PlanTensor *pt = &r->p->tensors[t];
    int64_t n = numel(pt);
    if (pt->dtype == PDT_I32) {
        const int32_t *s = r->ptr[t];
        for (int64_t i = 0; i < n; i++) host[i] = (float)s[i];
    } else {
        memcpy(host, r->ptr[t], (size_t)n * sizeof *host);
    }
    return 0;
}

static int cpu_from_host(BackendRank *r, int t, const float *host) {
    const PlanTensor *pt = &r->p->tensors[t];
    int64_t n = numel(pt);
    if (pt->dtype == PDT_I32) {
        int32_t *d = r->ptr[t];
        for (int64_t i = 0; i < n; i++) d[i] = (int32_t)host[i];
    } else {
        memcpy(r->ptr[t], host, (size_t)n * sizeof *host);
    }
    return 0;
}

static int cpu_set_i32(BackendRank *r, int t, const int32_t *host) {
    memcpy(r->ptr[t], host, (size_t)numel(&r->p->tensors[t]) * sizeof *host);
    return 0;
}

/* AdamW in one fp32 sweep per param (as PyTorch's), split over the threads: element-wise, so the
 * split changes no bits. */
static int cpu_adamw(BackendRank *r, float lr, float grad_scale, int t_step) {
    const Plan *p = r->p;
    double c1 = 1.0 - pow(p->beta1, t_step), c2 = 1.0 - pow(p->beta2, t_step);
    const float b1 = (float)p->beta1, b2 = (float)p->beta2, a1 = (float)(1.0 - p->beta1), a2 = (float)(1.0 - p->beta2);
    const float ic1 = (float)(1.0 / c1), ic2 = (float)(1.0 / c2), eps = (float)p->adam_eps, gs = grad_scale;
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        float *w = r->ptr[pp->tensor];
        const float *g = r->ptr[pp->grad];
        float *m = r->m[i], *v = r->v[i];   /* element j's state at j - lo (the shard starts at lo) */
        const float wd = (float)(p->weight_decay * pp->decay);
        int64_t lo, hi;
        own_range(r, pp->rows * pp->cols, &lo, &hi);
        int nt = hi - lo < 65536 ? 1 : cpu_threads();
        #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (int64_t j = lo; j < hi; j++) {
            float gj = g[j] * gs;
            float mj = b1 * m[j - lo] + a1 * gj;
            float vj = b2 * v[j - lo] + a2 * gj * gj;
            m[j - lo] = mj; v[j - lo] = vj;
            float upd = (mj * ic1) / (sqrtf(vj * ic2) + eps) + wd * w[j];
            w[j] = w[j] - lr * upd;
        }
    }
    return 0;
}

/* Sum of squares of the local grads: each row of a part in 8 fixed double lanes, rows and parts in
 * order (the same bits at any thread count). */
static double cpu_grad_sq_norm(BackendRank *r) {
    const Plan *p = r->p;
    double s = 0;
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        const float *g = r->ptr[pp->grad];
        int64_t own0, own1;
        own_range(r, pp->rows * pp->cols, &own0, &own1);
        for (int q = 0; q < pp->nparts; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (pt->rep && r->rank != 0) continue;
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            for (int64_t a = 0; a < h; a++) {
                int64_t base = (lr + a) * pp->cols + lc;   /* zero=1: only the elements in this dp rank's shard */
                int64_t b0 = own0 > base ? own0 - base : 0, b1 = own1 - base < w ? own1 - base : w;
                if (b1 <= b0) continue;
                const float *x = g + base;
                double l[8] = {0};
                int64_t b = b0;
                for (; b + 8 <= b1; b += 8)
                    for (int k = 0; k < 8; k++) l[k] += (double)x[b + k] * x[b + k];
                for (; b < b1; b++) l[b & 7] += (double)x[b] * x[b];
                s += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
            }
        }
    }
    return s;
}

static int cpu_zero_grads(BackendRank *r) {
    const Plan *p = r->p;
    for (int i = 0; i < p->nparams; i++)
        memset(r->ptr[p->params[i].grad], 0, (size_t)(p->params[i].rows * p->params[i].cols) * sizeof(float));
    return 0;
}

static int cpu_state_to_host(BackendRank *r, int param, int slot, float *host) {
    const PlanParam *pp = &r->p->params[param];
    if (slot != 1 && slot != 2) return rfail(r, "state_to_host: slot must be 1 (m) or 2 (v)");
    int64_t lo, hi, n = pp->rows * pp->cols;
    own_range(r, n, &lo, &hi);   /* zero=1: the shard, zeros elsewhere (the Engine sums over dp) */
    memset(host, 0, (size_t)n * sizeof *host);
    memcpy(host + lo, slot == 1 ? r->m[param] : r->v[param], (size_t)(hi - lo) * sizeof *host);
    return 0;
}

static int cpu_state_from_host(BackendRank *r, int param, int slot, const float *host) {
    const PlanParam *pp = &r->p->params[param];
    if (slot != 1 && slot != 2) return rfail(r, "state_from_host: slot must be 1 (m) or 2 (v)");
    int64_t lo, hi;
    own_range(r, pp->rows * pp->cols, &lo, &hi);
    memcpy(slot == 1 ? r->m[param] : r->v[param], host + lo, (size_t)(hi - lo) * sizeof *host);
    return 0;
}

static const char *cpu_last_error(BackendRank *r) { return r->err; }

/* Pipeline stages: activation buffers in slot k of the arena from now on (runtime/pipeline.c). */
static int cpu_arena_slot(BackendRank *r, int slot) {
    const Plan *p = r->p;
    if (slot < 0 || slot >= (p->arena_slots > 1 ? p->arena_slots : 1)) {
        snprintf(r->err, sizeof r->err, "arena slot %d is outside the plan's %d", slot, p->arena_slots);
        return -1;
    }
    for (int t = 0; t < p->ntensors; t++)
        if (p->tensors[t].kind == TK_ACT) r->ptr[t] = (char *)r->arena + 2 * (p->tensors[t].offset + slot * p->arena_bytes);
    return 0;
}

const Backend backend_cpu = {
    .arena_slot = cpu_arena_slot,
    .name = "cpu",
    .elem_bytes_fp32_only = 1,
    .rank_open = cpu_rank_open,
    .rank_close = cpu_rank_close,
    .tensor_ptr = cpu_tensor_ptr,
    .gemm = cpu_gemm_step,
    .grouped_gemm = cpu_grouped_gemm,
    .kernel = cpu_kernel,
    .allreduce = cpu_allreduce,
    .allgather = cpu_allgather,
    .reduce_scatter = cpu_reduce_scatter,
    .gather_shards = cpu_gather_shards,
    .to_host = cpu_to_host,
    .from_host = cpu_from_host,
    .set_i32 = cpu_set_i32,
    .adamw = cpu_adamw,
    .grad_sq_norm = cpu_grad_sq_norm,
    .zero_grads = cpu_zero_grads,
    .state_to_host = cpu_state_to_host,
    .state_from_host = cpu_state_from_host,
    .last_error = cpu_last_error,
    .group_init = cpu_group_init,
    .grid_init = cpu_grid_init,
    .world_allreduce_host = cpu_world_allreduce_host,
};
