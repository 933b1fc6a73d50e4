/* cpu.c: backend_cpu, the fp32 reference backend. Each tensor-parallel rank is a thread of one
 * process; a rank owns an activation arena (2*arena_bytes: every buffer at 2*offset, see
 * docs/plan-format.md), its params, grads and AdamW state. The ranks of the grid (dp x tp, all threads)
 * form tp groups and dp groups (runtime/grid.h); a collective meets its group at a barrier and sums
 * in index order 0..n-1, so every member gets bit-identical results at any degree.
 * Under mpirun every rank of the grid is a process: each group (tp, dp) is then an MPI communicator
 * (runtime/comm_mpi.h, split once at start), and a sum over a group adds the members' parts in the
 * same index order, so processes and threads agree bit for bit. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/backend.h"
#include "runtime/cpu.h"
#include "runtime/cpu_gemm.h"      // defines: cpu_gemm, cpu_threads, cpu_threads_set
#include "runtime/cpu_kernels.h"   // defines: cpu_kernel_run
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
    char why[160];            /* a collective's timeout that aborted the ranks (for the others'
                               * messages), or "" */
    CpuGroup *groups;         /* [ngroups]: the tp groups, the dp groups, then (by first member) the ep and edp groups */
    CommMpi *world;           /* multi-process mode: the processes this Engine's grid spans (grid_init_in's world) */
} CpuComm;

struct BackendRank {
    const Plan *p;
    int rank, tp;                 /* rank: the tensor-parallel rank (what %r means in the plan) */
    float *arena;                 /* 2*arena_bytes */
    void **ptr;                   /* per tensor */
    float **m, **v;               /* per param: AdamW state */
    float *scratch; size_t scratch_elems;
    CpuComm *comm;
    CpuGroup *grp[GROUP_COUNT];   /* this rank's tp, dp, ep and edp groups (pp: unused) */
    int gidx[GROUP_COUNT];        /* its index in each */
    int zero;                     /* zero=1 at dp > 1: m, v hold this dp rank's shard only (zero_shard) */
    /* zero=2 at dp > 1: per param, this dp rank's shard of the reduced gradient (own_range, at j - lo);
     * a d.P's full-size buffer (ptr) exists only from its first use to its reduce_scatter (NULL else) */
    float **gsh;
    size_t grad_bytes, grad_peak;  /* fp32 gradient bytes held now and at most (cpu_gradient_bytes) */
    char err[512];
};

static int64_t numel(const PlanTensor *t) { return t->rows * t->cols; }

static void comm_abort(CpuComm *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->aborted = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* BOOST_COLL_TIMEOUT=S: a rank waiting longer than S seconds for its group's other members in a
 * collective gives up, names the wait and stops every rank (as a failure does); unset: no limit.
 * The rank that timed out is marked on its own thread, for its message (rfail). */
static __thread int barrier_timed_out;
static double coll_timeout_s(void) {
    const char *s = getenv("BOOST_COLL_TIMEOUT");
    return s && atof(s) > 0 ? atof(s) : 0;
}

/* Every member of g meets here. Returns -1 when a rank failed (the pass is abandoned). */
static int group_barrier(CpuComm *c, CpuGroup *g) {
    double limit = coll_timeout_s();
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)limit;
    until.tv_nsec += (long)((limit - (double)(time_t)limit) * 1e9);
    if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&c->mu);
    if (c->aborted) { pthread_mutex_unlock(&c->mu); return -1; }
    int gen = g->gen;
    if (++g->count == g->n) {
        g->count = 0;
        g->gen++;
        pthread_cond_broadcast(&c->cv);
    } else {
        while (gen == g->gen && !c->aborted)
            if (limit <= 0) pthread_cond_wait(&c->cv, &c->mu);
            else if (pthread_cond_timedwait(&c->cv, &c->mu, &until) != 0 && gen == g->gen
                     && !c->aborted) {
                barrier_timed_out = 1;
                if (!c->why[0])   /* for the other ranks' messages, set before they wake */
                    snprintf(c->why, sizeof c->why, "a collective did not finish within %g "
                             "s (BOOST_COLL_TIMEOUT) on a rank: another rank of its group hangs "
                             "or is far behind", limit);
                c->aborted = 1;
                pthread_cond_broadcast(&c->cv);
            }
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
    if (barrier_timed_out) {   /* "allreduce abandoned: ..." -> what it saw: the others did not */
        barrier_timed_out = 0;
        snprintf(r->err, sizeof r->err, "cpu rank %d: %.*s did not finish within %g s "
                 "(BOOST_COLL_TIMEOUT): another rank of its group hangs or is far behind; every "
                 "rank stops", r->rank, (int)strcspn(msg, " :"), msg, coll_timeout_s());
        comm_abort(r->comm);
        return -1;
    }
    char why[160] = "";
    if (r->comm) {
        pthread_mutex_lock(&r->comm->mu);
        memcpy(why, r->comm->why, sizeof why);
        pthread_mutex_unlock(&r->comm->mu);
    }
    snprintf(r->err, sizeof r->err, "cpu rank %d: %s%s%s%s", r->rank, msg, why[0] ? " (" : "", why,
             why[0] ? ")" : "");
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
    if (r->gsh) for (int i = 0; i < p->nparams; i++) free(r->gsh[i]);
    free(r->m); free(r->v); free(r->gsh); free(r->arena); free(r->scratch);
    comm_release(r->comm);
    free(r);
}

static BackendRank *cpu_rank_open(const Plan *p, int rank, int tp, char *err, size_t errlen) {
    if (tp > CPU_MAX_TP) { snprintf(err, errlen, "cpu backend: tp=%d is more than %d", tp, CPU_MAX_TP); return NULL; }
    cpu_threads_set(tp);   /* runtime/cpu_gemm.c */
    BackendRank *r = calloc(1, sizeof *r);
    if (!r) goto oom;
    r->p = p; r->rank = rank; r->tp = tp;
    size_t arena = (size_t)(2 * p->arena_bytes) * (size_t)(p->arena_slots > 1 ? p->arena_slots : 1);   /* slot k at k*2*bytes */
    r->arena = calloc(arena / sizeof(float) + 1, sizeof(float));
    r->ptr = calloc((size_t)p->ntensors + 1, sizeof *r->ptr);
    r->m = calloc((size_t)p->nparams + 1, sizeof *r->m);
    r->v = calloc((size_t)p->nparams + 1, sizeof *r->v);
    if (!r->arena || !r->ptr || !r->m || !r->v) goto oom;
    r->zero = p->zero && p->dp > 1;
    if (p->zero == 2 && p->dp > 1 && !(r->gsh = calloc((size_t)p->nparams + 1, sizeof *r->gsh))) goto oom;
    for (int t = 0; t < p->ntensors; t++) {
        const PlanTensor *pt = &p->tensors[t];
        if (pt->kind == TK_ACT) r->ptr[t] = (char *)r->arena + 2 * pt->offset;
        else if (pt->kind == TK_GRAD && r->gsh) continue;   /* zero=2: allocated at first use (cpu_tensor_ptr) */
        else if (!(r->ptr[t] = calloc((size_t)numel(pt), 4))) goto oom;
        else if (pt->kind == TK_GRAD) r->grad_bytes += (size_t)numel(pt) * 4;
    }
    for (int i = 0; i < p->nparams; i++) {
        size_t n = (size_t)(p->params[i].rows * p->params[i].cols);
        if (r->zero) n = (n + (size_t)p->dp - 1) / (size_t)p->dp;   /* the largest shard */
        if (!(r->m[i] = calloc(n + 1, sizeof(float))) || !(r->v[i] = calloc(n + 1, sizeof(float)))) goto oom;
        if (r->gsh && !(r->gsh[i] = calloc(n + 1, sizeof(float)))) goto oom;
        if (r->gsh) r->grad_bytes += n * sizeof(float);
    }
    r->grad_peak = r->grad_bytes;
    return r;
oom:
    cpu_rank_close(r);
    snprintf(err, errlen, "cpu backend: out of memory opening rank %d (arena %lld bytes); use a smaller micro_batch or seq",
             rank, (long long)(2 * p->arena_bytes));
    return NULL;
}

static int mpi_grid_init(BackendRank *r, const Grid *grid, int wrank, CommMpi *world, char *err,
                         size_t errlen);

/* ranks[0..grid->world) by grid rank: one tp group per (pp, dp) and one dp group per (pp, tp). All of
 * them threads of this process, or exactly one set (a process of an mpirun job: MPI groups, split
 * from world: the processes the grid spans; NULL: the whole job). */
static int grid_init_in(BackendRank **ranks, const Grid *grid, CommMpi *world, char *err, size_t errlen) {
    int here = 0, mine = -1;
    for (int r = 0; r < grid->world; r++) if (ranks[r]) { here++; mine = r; }
    if (here == 1 && grid->world > 1) return mpi_grid_init(ranks[mine], grid, mine, world, err, errlen);
    if (here != grid->world) { snprintf(err, errlen, "cpu backend: %d of %d ranks in this process", here, grid->world); return -1; }
    CpuComm *c = calloc(1, sizeof *c);
    int ntp = grid->world / grid->tp, ndp = grid->world / grid->dp, ep = grid->ep > 1 ? grid->ep : 1;
    /* ep and edp groups: one slot per grid rank each, numbered by the group's first member */
    if (c) c->groups = calloc((size_t)(ntp + ndp + 2 * grid->world), sizeof *c->groups);
    if (!c || !c->groups) { free(c); snprintf(err, errlen, "cpu backend: out of memory"); return -1; }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->ngroups = ntp + ndp + 2 * grid->world;
    c->refs = grid->world;
    int bad = 0;
    for (int i = 0; i < c->ngroups; i++) {
        c->groups[i].n = i < ntp ? grid->tp : i < ntp + ndp ? grid->dp : i < ntp + ndp + grid->world ? ep : grid->dp / ep;
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
        R->grp[GROUP_EP] = &c->groups[ntp + ndp + gc.first[GROUP_EP]];
        R->grp[GROUP_EDP] = &c->groups[ntp + ndp + grid->world + gc.first[GROUP_EDP]];
        R->gidx[GROUP_EP] = gc.index[GROUP_EP];
        R->gidx[GROUP_EDP] = gc.index[GROUP_EDP];
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

static int cpu_grid_init(BackendRank **ranks, const Grid *grid, char *err, size_t errlen) {
    return grid_init_in(ranks, grid, NULL, err, errlen);
}

/* Multi-process mode (mpirun): this process holds the one rank r, grid rank wrank = its world rank.
 * Its tp group and its dp group are the world's processes of the same group (runtime/grid.h),
 * ordered by index in the group, each an MPI communicator split once here (every process splits the
 * world twice, in the same order). A group of one has no communicator (its collectives are no-ops). */
static int mpi_grid_init(BackendRank *r, const Grid *grid, int wrank, CommMpi *world, char *err,
                         size_t errlen) {
    CommMpi *job = comm_mpi_init(err, errlen);
    if (!job) return -1;
    if (!world) world = job;   /* else one pipeline stage's processes (runtime/pipeline.c) */
    if (comm_mpi_size(world) != grid->world || comm_mpi_rank(world) != wrank) {
        snprintf(err, errlen, "cpu backend: mpirun started world rank %d of %d, but the engine holds grid rank %d of a grid of "
                 "%d ranks (dp %d x pp %d x tp %d): launch mpirun -np %d", comm_mpi_rank(world), comm_mpi_size(world), wrank,
                 grid->world, grid->dp, grid->pp, grid->tp, grid->world);
        return -1;
    }
    GridCoord gc = grid_coord(grid, wrank);
    if (gc.tp_rank != r->rank) {
        snprintf(err, errlen, "cpu backend: world rank %d holds tp rank %d, expected %d", wrank, r->rank, gc.tp_rank);
        return -1;
    }
    CpuComm *c = calloc(1, sizeof *c);
    if (c) c->groups = calloc(4, sizeof *c->groups);   /* this rank's tp, dp, ep and edp groups */
    if (!c || !c->groups) { free(c); snprintf(err, errlen, "cpu backend: out of memory"); return -1; }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->ngroups = 4;
    c->refs = 1;
    c->world = world;
    r->comm = c;
    const int kinds[4] = {GROUP_TP, GROUP_DP, GROUP_EP, GROUP_EDP};
    for (int i = 0; i < 4; i++) {
        int k = kinds[i];
        c->groups[i].n = gc.size[k];
        r->grp[k] = &c->groups[i];
        r->gidx[k] = gc.index[k];
        /* color: the group's first member (one per group); key: the index in it */
        CommMpi *g = comm_mpi_split(world, gc.first[k], gc.index[k]);
        if (!g) { snprintf(err, errlen, "cpu backend: making the %s groups: %s", grid_group_name(k), comm_mpi_error()); return -1; }
        if (comm_mpi_size(g) != gc.size[k] || comm_mpi_rank(g) != gc.index[k]) {
            snprintf(err, errlen, "cpu backend: the %s group of world rank %d has %d processes (this one at %d), the plan's grid "
                     "has %s=%d (index %d)", grid_group_name(k), wrank, comm_mpi_size(g), comm_mpi_rank(g), grid_group_name(k),
                     gc.size[k], gc.index[k]);
            comm_mpi_free(g);
            return -1;
        }
        if (gc.size[k] > 1) c->groups[i].mpi = g;
        else comm_mpi_free(g);
    }
    /* the OpenMP threads: the node's cores shared by the processes on it (the bits do not depend on it) */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int nlocal = local && atoi(local) > 0 ? atoi(local) : grid->world;
    cpu_threads_set(nlocal);
    return 0;
}

/* A pipeline stage's Engine (engine_create_stage): its grid (the stage plan's dp x tp, pp=1) over the
 * stage's processes, stage->mpi (under mpirun; NULL: the whole job, or ranks as threads). */
static int cpu_stage_init(BackendRank **ranks, const Grid *grid, const StageLink *stage, char *err,
                          size_t errlen) {
    return grid_init_in(ranks, grid, stage->mpi, err, errlen);
}

/* ranks[0..tp): every rank in this process (threads), or exactly one (a process of an mpirun job). */
static int cpu_group_init(BackendRank **ranks, int tp, char *err, size_t errlen) {
    Grid g;
    if (grid_make(&g, 1, 1, tp, err, errlen)) return -1;
    return cpu_grid_init(ranks, &g, err, errlen);
}

/* zero=2: a gradient's full-size buffer is allocated (zeroed) when a step first uses it and freed
 * after its reduce_scatter, so only the gradients between the two are held at full size. Out of
 * memory there leaves no way to report through a step's pointer: the process stops with a message. */
static void *cpu_tensor_ptr(BackendRank *r, int t) {
    if (!r->ptr[t] && r->gsh && r->p->tensors[t].kind == TK_GRAD) {
        size_t n = (size_t)numel(&r->p->tensors[t]);
        if (!(r->ptr[t] = calloc(n, sizeof(float)))) {
            fprintf(stderr, "boost: cpu rank %d: out of memory allocating gradient %s (zero=2); use a smaller "
                    "model or more dp ranks\n", r->rank, r->p->tensors[t].name);
            exit(1);
        }
        r->grad_bytes += n * sizeof(float);
        if (r->grad_bytes > r->grad_peak) r->grad_peak = r->grad_bytes;
    }
    return r->ptr[t];
}

/* zero=2: gradient tensor t's full-size buffer released (if held). */
static void drop_full_grad(BackendRank *r, int t) {
    if (!r->ptr[t]) return;
    free(r->ptr[t]);
    r->ptr[t] = NULL;
    r->grad_bytes -= (size_t)numel(&r->p->tensors[t]) * sizeof(float);
}

size_t cpu_gradient_bytes(const BackendRank *r, size_t *peak) {
    if (peak) *peak = r->grad_peak;
    return r->grad_bytes;
}

/* The elements [lo, hi) of an n-element tensor this rank updates: all of them, or its zero=1 shard. */
static void own_range(const BackendRank *r, int64_t n, int64_t *lo, int64_t *hi) {
    if (!r->zero) { *lo = 0; *hi = n; return; }
    zero_shard(n, r->gidx[GROUP_DP], r->grp[GROUP_DP] ? r->grp[GROUP_DP]->n : 1, lo, hi);
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
 * values and the result to bf16, as a bf16 collective on a device would (the sum itself in fp32).
 * ordered_sum is that one definition, for both transports: dst[0..len) from member q's
 * src[q] + off, q = 0..n-1 (dst aliases none of them). */
static void ordered_sum(float *dst, void *const *src, int64_t off, int n, int64_t len, int avg, int wire16) {
    const float *s0 = (const float *)src[0] + off;
    if (wire16) for (int64_t i = 0; i < len; i++) dst[i] = bf16_round(s0[i]);
    else memcpy(dst, s0, (size_t)len * sizeof *dst);
    for (int q = 1; q < n; q++) {
        const float *sq = (const float *)src[q] + off;
        if (wire16) for (int64_t i = 0; i < len; i++) dst[i] += bf16_round(sq[i]);
        else for (int64_t i = 0; i < len; i++) dst[i] += sq[i];
    }
    if (avg) for (int64_t i = 0; i < len; i++) dst[i] /= (float)n;
    if (wire16) for (int64_t i = 0; i < len; i++) dst[i] = bf16_round(dst[i]);
}

static int wire16_of(const BackendRank *r, const CollArgs *c) {
    return c->dtype == PDT_BF16 && r->p->tensors[c->buf.tensor].dtype == PDT_FP32;
}

/* ---- the MPI transport (one rank per process) ---- */
static int mpi_fail(BackendRank *r, const char *what) {
    char msg[480];
    snprintf(msg, sizeof msg, "%s over MPI: %s", what, comm_mpi_error());
    return rfail(r, msg);
}

/* A bf16 wire value: the top half of the rounded fp32, and back. */
static uint16_t bf16_bits(float x) { x = bf16_round(x); uint32_t u; memcpy(&u, &x, 4); return (uint16_t)(u >> 16); }
static float bf16_value(uint16_t h) { uint32_t u = (uint32_t)h << 16; float x; memcpy(&x, &u, 4); return x; }

/* MPI_Alltoallv counts and displacements in bytes for the zero_shard split of len elements of es
 * bytes over n members: to_all=0 scatters (member q gets shard q of src; this member receives n
 * copies of its own shard me, side by side), to_all=1 gathers (this member's shard to every member,
 * each shard q landing at its place in dst). 0, or -1 when a count exceeds what MPI carries. */
static int shard_counts(int64_t len, int n, int me, int es, int to_all, int *sc, int *sd, int *rc, int *rd) {
    int64_t lo, hi, mlo, mhi;
    if (len * es > 0x7fffffff) return -1;
    zero_shard(len, me, n, &mlo, &mhi);
    for (int q = 0; q < n; q++) {
        zero_shard(len, q, n, &lo, &hi);
        sc[q] = (int)((to_all ? mhi - mlo : hi - lo) * es);
        sd[q] = to_all ? 0 : (int)(lo * es);
        rc[q] = (int)((to_all ? hi - lo : mhi - mlo) * es);
        rd[q] = (int)(to_all ? lo * es : q * (mhi - mlo) * es);
    }
    return 0;
}

/* The group's sum of buf[0..c->elems) over MPI, in the thread group's order: a reduce-scatter (this
 * member receives every member's part of its zero_shard and adds them with ordered_sum), then with
 * gather=1 (all-reduce) an all-gather of the summed shards into buf; gather=0 (reduce_scatter, on
 * any group g, me this member's index in it) writes this member's shard of buf only. A bf16 wire
 * sends 2-byte values. */
static int mpi_group_sum(BackendRank *r, CpuGroup *g, int me, const CollArgs *c, float *buf, int gather) {
    int n = g->n, wire16 = wire16_of(r, c), es = wire16 ? 2 : 4;
    int64_t len = c->elems, lo, hi;
    zero_shard(len, me, n, &lo, &hi);
    int64_t m = hi - lo;
    int *cnt = malloc((size_t)(4 * n) * sizeof *cnt);
    void **src = calloc((size_t)n, sizeof *src);
    uint16_t *wire = wire16 ? malloc((size_t)len * 2 + 2) : NULL;
    float *parts = malloc((size_t)(n * m) * sizeof *parts + 4), *mine = malloc((size_t)m * sizeof *mine + 4);
    uint16_t *parts16 = wire16 ? malloc((size_t)(n * m) * 2 + 2) : NULL;
    int rc = -1;
    if (!cnt || !src || !parts || !mine || (wire16 && (!wire || !parts16))) {
        rfail(r, gather ? "allreduce over MPI: out of memory" : "reduce_scatter over MPI: out of memory");
        goto done;
    }
    if (shard_counts(len, n, me, es, 0, cnt, cnt + n, cnt + 2 * n, cnt + 3 * n)) {
        rfail(r, "allreduce over MPI: the buffer is more than 2 GiB (one MPI call's limit); use smaller dp buckets (dp_bucket_mb)");
        goto done;
    }
    if (wire16) for (int64_t i = 0; i < len; i++) wire[i] = bf16_bits(buf[i]);
    if (comm_mpi_alltoallv(g->mpi, wire16 ? (void *)wire : (void *)buf, cnt, cnt + n, wire16 ? (void *)parts16 : (void *)parts,
                           cnt + 2 * n, cnt + 3 * n)) { mpi_fail(r, "reduce-scatter"); goto done; }
    if (wire16) for (int64_t i = 0; i < n * m; i++) parts[i] = bf16_value(parts16[i]);
    for (int q = 0; q < n; q++) src[q] = parts + q * m;
    ordered_sum(mine, src, 0, n, m, c->avg, wire16);
    if (!gather) { memcpy(buf + lo, mine, (size_t)m * sizeof *mine); rc = 0; goto done; }
    shard_counts(len, n, me, es, 1, cnt, cnt + n, cnt + 2 * n, cnt + 3 * n);
    if (wire16) for (int64_t i = 0; i < m; i++) parts16[i] = bf16_bits(mine[i]);   /* exact: already bf16 */
    if (comm_mpi_alltoallv(g->mpi, wire16 ? (void *)parts16 : (void *)mine, cnt, cnt + n, wire16 ? (void *)wire : (void *)buf,
                           cnt + 2 * n, cnt + 3 * n)) { mpi_fail(r, "all-gather"); goto done; }
    if (wire16) for (int64_t i = 0; i < len; i++) buf[i] = bf16_value(wire[i]);
    rc = 0;
done:
    free(cnt); free(src); free(wire); free(parts); free(mine); free(parts16);
    return rc;
}

/* allgather over MPI on group g of n members: src [rows, cols] (ld_src) of every member into tmp
 * [rows, n*cols], member q's block at columns q*cols.. (the thread transport's layout). */
static int mpi_allgather(BackendRank *r, CpuGroup *g, const CollArgs *c, const float *src,
                         float *tmp) {
    int64_t rows = c->rows, cols = c->cols, n = g->n;
    float *mine = malloc((size_t)(rows * cols) * sizeof *mine + 1);
    float *all = malloc((size_t)(rows * cols * n) * sizeof *all + 1);
    if (!mine || !all) { free(mine); free(all); return rfail(r, "allgather: out of memory"); }
    for (int64_t i = 0; i < rows; i++)
        memcpy(mine + i * cols, src + i * c->ld_src, (size_t)cols * sizeof *mine);
    int rc = comm_mpi_allgather(g->mpi, mine, all, rows * cols, COMM_F32);
    for (int q = 0; !rc && q < n; q++)     // [n][rows][cols] -> [rows][n*cols]
        for (int64_t i = 0; i < rows; i++)
            memcpy(tmp + i * cols * n + q * cols, all + (q * rows + i) * cols,
                   (size_t)cols * sizeof *tmp);
    free(mine); free(all);
    return rc ? mpi_fail(r, "allgather") : 0;
}

/* A host sum over every process of the Engine's world (the job, or one pipeline stage's processes:
 * canonical tensors, the gradient norm, the losses), in world rank order = grid rank order, as the
 * Engine adds its ranks' parts in one process. */
static int cpu_world_allreduce_host(BackendRank *r, void *host, int64_t n, int is_f64) {
    CommMpi *world = r->comm && r->comm->world ? r->comm->world : comm_mpi_world();
    if (!world) return rfail(r, "a sum over processes without MPI (not launched by mpirun)");
    void *all = malloc((size_t)n * (size_t)comm_mpi_size(world) * (is_f64 ? sizeof(double) : sizeof(float)) + 1);
    if (!all) return rfail(r, "a sum over the processes: out of memory");
    int rc = comm_mpi_allreduce_ordered(world, host, n, is_f64 ? COMM_F64 : COMM_F32, all);
    free(all);
    return rc ? mpi_fail(r, "a sum over the processes") : 0;
}

/* scale=S (expert gradients over group=edp): the sum times S, after the sum as at every group size. */
static int scaled(const CollArgs *c, void *buf, int rc) {
    if (!rc && c->scale > 0) {
        float *x = buf, s = (float)c->scale;
        for (int64_t i = 0; i < c->elems; i++) x[i] *= s;
    }
    return rc;
}

static int cpu_allreduce(BackendRank *r, const CollArgs *c, void *buf) {
    CpuGroup *g = r->grp[c->group];
    int n = g ? g->n : (c->group == GROUP_TP ? r->tp : 1);
    if (n == 1) return scaled(c, buf, 0);
    if (!g) return rfail(r, "allreduce: the ranks were never grouped (group_init not called)");
    if (g->mpi) return scaled(c, buf, mpi_group_sum(r, g, r->gidx[c->group], c, buf, 1));
    size_t ne = (size_t)c->elems;
    float *sum = scratch(r, ne);
    if (!sum) return rfail(r, "allreduce: out of memory");
    g->ptr[r->gidx[c->group]] = buf;
    if (group_barrier(r->comm, g)) return rfail(r, "allreduce abandoned: another rank failed");
    ordered_sum(sum, g->ptr, 0, n, (int64_t)ne, c->avg, wire16_of(r, c));
    if (group_barrier(r->comm, g)) return rfail(r, "allreduce abandoned: another rank failed");
    memcpy(buf, sum, ne * sizeof *sum);
    return scaled(c, buf, 0);
}

/* ---- expert parallelism: the ep all-to-all (docs/plan-format.md "alltoall") ---- */

/* Filled slots of each of the E experts in a token side's map [E*C] (the router fills an expert's
 * slots from the first: the count is the run of entries >= 0 from its first slot). */
static void ep_counts(const float *map, int64_t E, int64_t C, int *cnt) {
    for (int64_t e = 0; e < E; e++) {
        int k = 0;
        while (k < C && map[e * C + k] >= 0) k++;
        cnt[e] = k;
    }
}

/* Rows of one (source q, expert e) block: where they sit on the token side and on the owner. */
static int64_t ep_tok_row(int64_t e, int64_t C) { return e * C; }

/* Over MPI: each member's counts to all (an all-gather of E values), then one MPI_Alltoallv of the
 * filled rows packed per destination; the receiver unpacks them into its slot layout, zeros elsewhere. */
static int mpi_alltoall(BackendRank *r, CpuGroup *g, const CollArgs *c, const float *src, float *dst, const float *map) {
    int n = g->n, me = r->gidx[GROUP_EP];
    int64_t E = c->experts, C = c->capacity, El = E / n, w = c->cols;
    float *mc = malloc((size_t)E * sizeof *mc + 4), *allc = malloc((size_t)(E * n) * sizeof *allc + 4);
    int *cnt = malloc((size_t)(E * n) * sizeof *cnt + 4), *sc = malloc((size_t)(4 * n) * sizeof *sc);
    float *sbuf = malloc((size_t)(E * C * w) * sizeof *sbuf + 4), *rbuf = malloc((size_t)(E * C * w) * sizeof *rbuf + 4);
    int rc = -1;
    if (!mc || !allc || !cnt || !sc || !sbuf || !rbuf) { rfail(r, "alltoall over MPI: out of memory"); goto done; }
    if (E * C * w * 4 > 2147483647LL) { rfail(r, "alltoall over MPI: more than 2 GiB in one call; use a smaller micro_batch"); goto done; }
    ep_counts(map, E, C, cnt);
    for (int64_t e = 0; e < E; e++) mc[e] = (float)cnt[e];
    if (comm_mpi_allgather(g->mpi, mc, allc, E, COMM_F32)) { mpi_fail(r, "alltoall counts"); goto done; }
    for (int64_t i = 0; i < E * n; i++) cnt[i] = (int)allc[i];   /* cnt[q*E + e]: source q's filled slots of expert e */
    int *scnt = sc, *sdis = sc + n, *rcnt = sc + 2 * n, *rdis = sc + 3 * n;
    int64_t so = 0, ro = 0;
    for (int q = 0; q < n; q++) {   /* pack what goes to q; size what comes from q */
        int64_t s0 = so, r0 = ro;
        for (int64_t j = 0; j < El; j++) {
            if (!c->way) {   /* out: my slots of q's experts */
                int64_t e = q * El + j, k = cnt[me * E + e];
                memcpy(sbuf + so * w, src + ep_tok_row(e, C) * w, (size_t)(k * w) * sizeof *sbuf);
                so += k;
                ro += cnt[q * E + me * El + j];
            } else {         /* back: q's slots of my experts */
                int64_t k = cnt[q * E + me * El + j];
                memcpy(sbuf + so * w, src + ep_owner_row(j, q, n, C) * w, (size_t)(k * w) * sizeof *sbuf);
                so += k;
                ro += cnt[me * E + q * El + j];
            }
        }
        scnt[q] = (int)((so - s0) * w * 4); sdis[q] = (int)(s0 * w * 4);
        rcnt[q] = (int)((ro - r0) * w * 4); rdis[q] = (int)(r0 * w * 4);
    }
    if (comm_mpi_alltoallv(g->mpi, sbuf, scnt, sdis, rbuf, rcnt, rdis)) { mpi_fail(r, "alltoall"); goto done; }
    memset(dst, 0, (size_t)(E * C * w) * sizeof *dst);
    ro = 0;
    for (int q = 0; q < n; q++)
        for (int64_t j = 0; j < El; j++) {
            int64_t row = !c->way ? ep_owner_row(j, q, n, C) : ep_tok_row(q * El + j, C);
            int64_t k = !c->way ? cnt[q * E + me * El + j] : cnt[me * E + q * El + j];
            memcpy(dst + row * w, rbuf + ro * w, (size_t)(k * w) * sizeof *dst);
            ro += k;
        }
    rc = 0;
done:
    free(mc); free(allc); free(cnt); free(sc); free(sbuf); free(rbuf);
    return rc;
}

/* Threads: every member publishes its src and map; each one pulls the filled rows it receives.
 * way=out: owner me takes, for local expert j and source q, q's filled slots of expert me*El+j into
 * rows (j*ep + q)*C..; way=back: token side me takes its filled slots of expert e = p*El+j back from
 * owner p's rows (j*ep + me)*C... Unfilled rows are zero. */
static int cpu_alltoall(BackendRank *r, const CollArgs *c, void *srcp, void *dstp, const void *mapp) {
    CpuGroup *g = r->grp[GROUP_EP];
    int n = g ? g->n : 1, me = g ? r->gidx[GROUP_EP] : 0;
    int64_t E = c->experts, C = c->capacity, w = c->cols;
    if (E % n) return rfail(r, "alltoall: the experts do not divide over the ep group");
    int64_t El = E / n;
    const float *src = srcp, *map = mapp;
    float *dst = dstp;
    if (g && g->mpi) return mpi_alltoall(r, g, c, src, dst, map);
    struct { const float *src, *map; } mine = {src, map};
    if (n > 1) {
        g->ptr[me] = &mine;
        if (group_barrier(r->comm, g)) return rfail(r, "alltoall abandoned: another rank failed");
    }
    int *cnt = malloc((size_t)E * sizeof *cnt + 4);
    if (!cnt) { if (n > 1) group_barrier(r->comm, g); return rfail(r, "alltoall: out of memory"); }
    if (c->way) ep_counts(map, E, C, cnt);   /* back: my own slots decide what returns */
    for (int q = 0; q < n; q++) {
        const float *qsrc = n > 1 ? ((const float *const *)g->ptr[q])[0] : src;
        const float *qmap = n > 1 ? ((const float *const *)g->ptr[q])[1] : map;
        if (!c->way) ep_counts(qmap, E, C, cnt);   /* out: source q's slots */
        for (int64_t j = 0; j < El; j++) {
            int64_t e = c->way ? q * El + j : me * El + j, k = cnt[e];
            int64_t from = c->way ? ep_owner_row(j, me, n, C) : ep_tok_row(e, C);
            int64_t to = c->way ? ep_tok_row(e, C) : ep_owner_row(j, q, n, C);
            memcpy(dst + to * w, qsrc + from * w, (size_t)(k * w) * sizeof *dst);
            memset(dst + (to + k) * w, 0, (size_t)((C - k) * w) * sizeof *dst);
        }
    }
    free(cnt);
    if (n > 1 && group_barrier(r->comm, g)) return rfail(r, "alltoall abandoned: another rank failed");
    return 0;
}

/* The members of the group a collective step runs on: its CpuGroup (NULL when the ranks were
 * never grouped, or in a group of one), via *g, and the group's size. */
static int coll_group_size(BackendRank *r, const CollArgs *c, CpuGroup **g) {
    *g = r->grp[c->group];
    return *g ? (*g)->n : c->group == GROUP_TP ? r->tp : 1;
}

/* allgather on any group of n members: src [rows, cols] (ld_src) of member q becomes dst's column
 * block q (dst [rows, n*cols], ld_dst) on every member. */
static int cpu_allgather(BackendRank *r, const CollArgs *c, void *src, void *dst) {
    CpuGroup *g;
    int64_t rows = c->rows, cols = c->cols, t = coll_group_size(r, c, &g);
    float *tmp = scratch(r, (size_t)(rows * cols * t));
    if (!tmp) return rfail(r, "allgather: out of memory");
    if (t > 1 && !g) return rfail(r, "allgather: the ranks were never grouped (group_init not called)");
    int mpi = t > 1 && g->mpi;
    if (mpi) {
        if (mpi_allgather(r, g, c, src, tmp)) return -1;
    } else if (t > 1) {
        g->ptr[r->gidx[c->group]] = src;
        if (group_barrier(r->comm, g)) return rfail(r, "allgather abandoned: another rank failed");
    }
    for (int q = 0; q < t && !mpi; q++) {
        const float *s = t > 1 ? g->ptr[q] : src;
        for (int64_t i = 0; i < rows; i++)
            memcpy(tmp + i * cols * t + q * cols, s + i * c->ld_src, (size_t)cols * sizeof *tmp);
    }
    if (t > 1 && !mpi && group_barrier(r->comm, g))
        return rfail(r, "allgather abandoned: another rank failed");
    float *d = dst;
    for (int64_t i = 0; i < rows; i++)
        memcpy(d + i * c->ld_dst, tmp + i * cols * t, (size_t)(cols * t) * sizeof *d);
    return 0;
}

/* zero=2: this member's shard of the reduced gradient buf added to its shard accumulator (zeroed
 * by zero_grads: at grad_accum > 1 the plan reduces every micro-batch, and the shards sum them);
 * the full-size buffer is freed (cpu_tensor_ptr allocates it again at its next first use). */
static int keep_grad_shard(BackendRank *r, const CollArgs *c, void *buf) {
    const Plan *p = r->p;
    for (int i = 0; i < p->nparams; i++) {
        int t = p->params[i].grad;
        if (r->ptr[t] != buf || numel(&p->tensors[t]) != c->elems) continue;
        int64_t lo, hi;
        own_range(r, c->elems, &lo, &hi);
        const float *reduced = (const float *)buf + lo;
        for (int64_t j = 0; j < hi - lo; j++) r->gsh[i][j] += reduced[j];
        drop_full_grad(r, t);
        return 0;
    }
    return rfail(r, "reduce_scatter at zero=2: buf is not a whole parameter gradient (plan generator bug)");
}

/* reduce_scatter on any group of n members: the sum (op=avg: the mean) of buf over the group, as
 * allreduce adds it, written to this member's zero_shard of buf only. ZeRO's gradient reduction
 * (c->zero_grad, group=dp) at zero=2 then keeps only that shard (keep_grad_shard). */
static int cpu_reduce_scatter(BackendRank *r, const CollArgs *c, void *buf) {
    CpuGroup *g;
    int n = coll_group_size(r, c, &g), me = r->gidx[c->group];
    if (n == 1) return 0;
    if (!g) return rfail(r, "reduce_scatter: the ranks were never grouped (group_init not called)");
    int zero2 = c->zero_grad && r->gsh;
    if (g->mpi) {
        int rc = mpi_group_sum(r, g, me, c, buf, 0);
        return rc || !zero2 ? rc : keep_grad_shard(r, c, buf);
    }
    int64_t lo, hi;
    zero_shard(c->elems, me, n, &lo, &hi);
    float *sum = scratch(r, (size_t)(hi - lo) + 1);
    if (!sum) return rfail(r, "reduce_scatter: out of memory");
    g->ptr[me] = buf;
    if (group_barrier(r->comm, g)) return rfail(r, "reduce_scatter abandoned: another rank failed");
    ordered_sum(sum, g->ptr, lo, n, hi - lo, c->avg, wire16_of(r, c));
    if (group_barrier(r->comm, g)) return rfail(r, "reduce_scatter abandoned: another rank failed");
    memcpy((float *)buf + lo, sum, (size_t)(hi - lo) * sizeof *sum);
    return zero2 ? keep_grad_shard(r, c, buf) : 0;
}

/* ZeRO-1: every member copies the other members' shards of buf into its own buf (over MPI: this
 * member's shard to every member, an all-gather of the zero_shard pieces). */
static int cpu_gather_shards(BackendRank *r, const CollArgs *c, void *buf) {
    CpuGroup *g = r->grp[GROUP_DP];
    if (!g || g->n == 1) return 0;
    if (g->mpi) {
        int n = g->n, me = r->gidx[GROUP_DP];
        int64_t lo, hi;
        zero_shard(c->elems, me, n, &lo, &hi);
        int *cnt = malloc((size_t)(4 * n) * sizeof *cnt);
        float *mine = malloc((size_t)(hi - lo) * sizeof *mine + 4);   /* MPI's send and receive buffers may not overlap */
        int rc = !cnt || !mine ? rfail(r, "gather_shards: out of memory")
                 : shard_counts(c->elems, n, me, 4, 1, cnt, cnt + n, cnt + 2 * n, cnt + 3 * n)
                     ? rfail(r, "gather_shards over MPI: the tensor is more than 2 GiB (one MPI call's limit)") : 0;
        if (!rc) {
            memcpy(mine, (float *)buf + lo, (size_t)(hi - lo) * sizeof *mine);
            if (comm_mpi_alltoallv(g->mpi, mine, cnt, cnt + n, buf, cnt + 2 * n, cnt + 3 * n)) rc = mpi_fail(r, "gather_shards");
        }
        free(cnt); free(mine);
        return rc;
    }
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

/* One collective step (common/collective_catalog.h), complete when it returns. */
static int cpu_collective(BackendRank *r, const CollArgs *c, const CollPtrs *ptr) {
    switch (c->kind) {
    case CK_ALLREDUCE: return cpu_allreduce(r, c, ptr->buf);
    case CK_ALLGATHER: return cpu_allgather(r, c, ptr->src, ptr->dst);
    case CK_REDUCE_SCATTER: return cpu_reduce_scatter(r, c, ptr->buf);
    case CK_GATHER_SHARDS: return cpu_gather_shards(r, c, ptr->buf);
    case CK_ALLTOALL: return cpu_alltoall(r, c, ptr->src, ptr->dst, ptr->map);
    }
    return rfail(r, "a collective kind the CPU backend does not know (plan loader bug)");
}

static int cpu_to_host(BackendRank *r, int t, float *host) {
    const PlanTensor *pt = &r->p->tensors[t];
    int64_t n = numel(pt);
    if (!r->ptr[t] && r->gsh && pt->kind == TK_GRAD) {   /* zero=2, reduced: the shard, zeros elsewhere */
        int64_t lo, hi;
        own_range(r, n, &lo, &hi);
        memset(host, 0, (size_t)n * sizeof *host);
        memcpy(host + lo, r->gsh[pt->param], (size_t)(hi - lo) * sizeof *host);
    } else if (pt->dtype == PDT_I32) {
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
    if (r->gsh && pt->kind == TK_GRAD) {   /* zero=2: the shard (and the full buffer where one is held) */
        int64_t lo, hi;
        own_range(r, n, &lo, &hi);
        memcpy(r->gsh[pt->param], host + lo, (size_t)(hi - lo) * sizeof *host);
        if (r->ptr[t]) memcpy(r->ptr[t], host, (size_t)n * sizeof *host);
    } else if (pt->dtype == PDT_I32) {
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
        float *m = r->m[i], *v = r->v[i];   /* element j's state at j - lo (the shard starts at lo) */
        const float wd = (float)(p->weight_decay * pp->decay);
        int64_t lo, hi;
        own_range(r, pp->rows * pp->cols, &lo, &hi);
        /* element j's gradient at g[j - gbase]: d.P, or (zero=2) the shard accumulator */
        const float *g = r->gsh ? r->gsh[i] : r->ptr[pp->grad];
        const int64_t gbase = r->gsh ? lo : 0;
        int nt = hi - lo < 65536 ? 1 : cpu_threads();
        #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (int64_t j = lo; j < hi; j++) {
            float gj = g[j - gbase] * gs;
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
    int ep = p->ep > 1 ? p->ep : 1, dpr = r->grp[GROUP_DP] ? r->gidx[GROUP_DP] : 0;
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        int64_t own0, own1;
        own_range(r, pp->rows * pp->cols, &own0, &own1);
        /* element j's gradient at g[j - gbase]: d.P, or (zero=2) the shard accumulator */
        const float *g = r->gsh ? r->gsh[i] : r->ptr[pp->grad];
        const int64_t gbase = r->gsh ? own0 : 0;
        for (int q = 0; q < pp->nparts; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (pt->rep && r->rank != 0) continue;
            if (ep > 1 && (pt->ep >= 0 ? pt->ep != dpr % ep : dpr != 0)) continue;   /* each block once over the first ep group */
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            for (int64_t a = 0; a < h; a++) {
                int64_t base = (lr + a) * pp->cols + lc;   /* zero=1: only the elements in this dp rank's shard */
                int64_t b0 = own0 > base ? own0 - base : 0, b1 = own1 - base < w ? own1 - base : w;
                if (b1 <= b0) continue;
                const float *x = g + (base + b0 - gbase);   /* element b of the row at x[b - b0] */
                double l[8] = {0};
                int64_t b = b0;
                for (; b + 8 <= b1; b += 8)
                    for (int k = 0; k < 8; k++) l[k] += (double)x[b - b0 + k] * x[b - b0 + k];
                for (; b < b1; b++) l[b & 7] += (double)x[b - b0] * x[b - b0];
                s += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
            }
        }
    }
    return s;
}

static int cpu_zero_grads(BackendRank *r) {
    const Plan *p = r->p;
    for (int i = 0; r->gsh && i < p->nparams; i++) {   /* zero=2: shards zeroed, full buffers dropped */
        int64_t lo, hi;
        own_range(r, p->params[i].rows * p->params[i].cols, &lo, &hi);
        memset(r->gsh[i], 0, (size_t)(hi - lo) * sizeof(float));
        drop_full_grad(r, p->params[i].grad);
    }
    for (int i = 0; !r->gsh && i < p->nparams; i++)
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
    .coll_kinds = (1u << CK_COUNT) - 1,
    .collective = cpu_collective,
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
    .stage_init = cpu_stage_init,
    .world_allreduce_host = cpu_world_allreduce_host,
};
