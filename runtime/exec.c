/* exec.c: the Engine (runtime/runtime.h). It opens one backend rank per rank of the grid (dp x tp,
 * runtime/grid.h; rank = dp_rank*tp + tp_rank), runs
 * each rank on its own persistent worker thread, walks the plan's steps in order on every rank
 * (collectives synchronise the ranks inside the backend), and does what sits around the steps:
 * TP-invariant initialisation, the global gradient norm, clipping, the AdamW schedule, and
 * gathering/scattering canonical tensors. Backend-agnostic: all backend work goes through the
 * Backend vtable, so the same code drives cpu and cuda. Multi-process mode (a world in the
 * environment, runtime/world.h; cuda with NCCL for tp, or cpu under mpirun with one process per rank
 * of the whole dp x tp grid and MPI as every group's transport): the Engine holds this process's rank
 * alone, and the gathers across ranks (canonical tensors, the gradient norm, the dp ranks' losses)
 * sum over the processes in rank order, as one process adds its threads' parts. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/backend.h"
#include "runtime/runtime.h"
#include "runtime/world.h"
#include "runtime/profile.h"
#include "runtime/grid.h"
#include "runtime/comm_mpi.h"   // defines: comm_mpi_launched
#include "runtime/overlap.h"    // defines: overlap_first_use, plan_overlap_report
#include "runtime/flight.h"     // defines: Flight, flight_*
#include "common/env.h"         // defines: runtime_env
#include "common/test_hooks.h"  // defines: test_hook_skip_coll_wait

typedef int (*RankJob)(Engine *e, int rank, void *arg);

struct Engine {
    const Plan *p;
    const Backend *be;
    int tp;
    Grid grid;                    /* dp x pp x tp (runtime/grid.h) */
    int nranks;                   /* ranks[] entries: grid.world (multi-process mode: only ranks[lead] is set) */
    int micro;                    /* micro-batches run since the last optimizer step (micro=last steps) */
    int zero;                     /* zero=1 at dp > 1: AdamW state sharded over dp (ZeRO-1) */
    BackendRank **ranks;          /* by grid rank */
    /* worker pool: one thread per rank */
    pthread_t *threads;
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    int gen, remaining, quit;
    RankJob job;
    void *job_arg;
    int first_failed;             /* rank whose job failed first in this run, -1 none */
    char (*rank_err)[512];
    int broken;                   /* a pass failed part way: the ranks are out of step */
    int fwd0, fwd1, bwd0, bwd1;   /* step index ranges [a, b) of the sections */
    int64_t coll_bytes;
    int world;                    /* multi-process mode: 1, and this process holds rank `lead` only */
    int lead;                     /* the lowest rank this process holds (0 in local mode; its grid rank = world rank) */
    /* overlap (backends with collective_issue): collective steps whose coll_wait goes right before
     * step s are wait_list[wait_first[s] .. wait_first[s+1]); first_use[c] per collective step c
     * (bwd1 when nothing in the passes touches its memory again: waited at the end of the pass) */
    int async_colls;
    int skip_waits;               /* BOOST_TEST_SKIP_COLL_WAIT=1: leave the waits out (tests show the hazard is caught);
                                   * 2 (=gather): only those of ZeRO-1's gather_shards */
    int *first_use, *wait_first, *wait_list;
    /* zero=1 issuing gather_shards: the optimizer step's gathers run on the collectives' stream
     * into the next pass; first_use[g] of a gather step g is the first step of a pass that touches
     * its param (bwd1 when none). gather_pending[rank]: issued and not all waited for yet. */
    int gather_async;
    unsigned char *gather_pending;
    StepProfile *prof;            /* BOOST_PROFILE=1: rank `lead`'s seconds per step (runtime/profile.h), else NULL */
    Flight *flight;               /* each rank's last collectives, printed when one fails
                                   * (runtime/flight.h) */
};

/* The tensor-parallel rank of grid rank `rank` (what %r means in the plan) and its dp rank. */
static int tp_of(const Engine *e, int rank) { return rank % e->tp; }
static int dp_of(const Engine *e, int rank) { return (rank / e->tp) % e->grid.dp; }
/* Its ep rank (expert parallelism: which experts it holds; 0 at ep=1), and whether it holds part pt. */
static int ep_of(const Engine *e, int rank) { return dp_of(e, rank) % e->grid.ep; }
static int holds_part(const Engine *e, int rank, const PlanPart *pt) { return pt->ep < 0 || pt->ep == ep_of(e, rank); }

/* ---------------- worker pool ---------------- */
typedef struct { Engine *e; int rank; } WorkerArg;
static int job_pass(Engine *e, int rank, void *argp);
static int settle_gathers(Engine *e, int rank);

/* A rank failed: when a collective of it was outstanding (a peer died, a timeout, an aborted
 * group), its flight record goes to stderr. */
static void flight_report(Engine *e, int rank) {
    if (!flight_pending(e->flight, rank)) return;
    char who[64];
    snprintf(who, sizeof who, "rank %d of %d", rank, e->nranks);
    flight_print(e->flight, rank, who, stderr);
}

static void *worker_main(void *argp) {
    WorkerArg *wa = argp;
    Engine *e = wa->e;
    int rank = wa->rank;
    free(wa);
    int seen = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->quit && e->gen == seen) pthread_cond_wait(&e->cv_work, &e->mu);
        if (e->quit) break;
        seen = e->gen;
        RankJob job = e->job;
        void *arg = e->job_arg;
        pthread_mutex_unlock(&e->mu);
        e->rank_err[rank][0] = 0;
        int rc = job != job_pass ? settle_gathers(e, rank) : 0;   /* passes wait at each gather's first use */
        if (!rc) rc = job(e, rank, arg);
        if (rc) flight_report(e, rank);
        pthread_mutex_lock(&e->mu);
        if (rc && e->first_failed < 0) e->first_failed = rank;
        if (--e->remaining == 0) pthread_cond_signal(&e->cv_done);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Run job on every rank at once; returns 0, or -1 with the first failing rank's message. */
static int run_all(Engine *e, RankJob job, void *arg, char *err, size_t errlen) {
    pthread_mutex_lock(&e->mu);
    e->job = job; e->job_arg = arg;
    e->remaining = e->nthreads;
    e->first_failed = -1;
    e->gen++;
    pthread_cond_broadcast(&e->cv_work);
    while (e->remaining > 0) pthread_cond_wait(&e->cv_done, &e->mu);
    int failed = e->first_failed;
    pthread_mutex_unlock(&e->mu);
    if (failed >= 0) {
        if (err && errlen) snprintf(err, errlen, "%s", e->rank_err[failed]);
        return -1;
    }
    return 0;
}

static int rank_error(Engine *e, int rank, const char *fmt, const char *a, const char *b) {
    snprintf(e->rank_err[rank], sizeof e->rank_err[rank], fmt, a, b);
    return -1;
}

static const char *backend_msg(Engine *e, int rank) {
    if (!e->ranks || !e->ranks[rank] || !e->be->last_error) return "backend error";
    const char *m = e->be->last_error(e->ranks[rank]);
    return m && *m ? m : "backend error";
}

/* ---------------- create / free ---------------- */

static int job_open(Engine *e, int rank, void *arg) {
    e->ranks[rank] = e->be->rank_open(e->p, tp_of(e, rank), e->tp, e->rank_err[rank], sizeof e->rank_err[rank]);
    if (!e->ranks[rank] && !e->rank_err[rank][0]) rank_error(e, rank, "%s backend: cannot open rank%s", e->be->name, "");
    return e->ranks[rank] ? 0 : -1;
}

static int job_close(Engine *e, int rank, void *arg) {
    if (e->ranks[rank] && e->be->rank_close) e->be->rank_close(e->ranks[rank]);
    e->ranks[rank] = NULL;
    return 0;
}

static void pool_stop(Engine *e) {
    pthread_mutex_lock(&e->mu);
    e->quit = 1;
    pthread_cond_broadcast(&e->cv_work);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < e->nthreads; i++) pthread_join(e->threads[i], NULL);
    e->nthreads = 0;
}

static void engine_release(Engine *e) {
    if (!e) return;
    if (e->nthreads == (e->world ? 1 : e->nranks) && e->ranks) run_all(e, job_close, NULL, NULL, 0);
    pool_stop(e);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv_work);
    pthread_cond_destroy(&e->cv_done);
    free(e->threads); free(e->ranks); free(e->rank_err);
    free(e->first_use); free(e->wait_first); free(e->wait_list); free(e->gather_pending);
    if (e->prof) { profile_print(e->prof, stderr); profile_free(e->prof); }
    flight_free(e->flight);
    free(e);
}

/* Refuse, at open, a plan holding a collective kind the backend does not run (its coll_kinds). */
static int refuse_collectives(const Plan *plan, const Backend *be, char *err, size_t errlen) {
    for (int i = 0; i < plan->nsteps; i++) {
        const PlanStep *st = &plan->steps_[i];
        int k = step_coll_kind(st->kind);
        if (k < 0 || (be->collective && (be->coll_kinds >> k & 1u))) continue;
        snprintf(err, errlen, "%.300s:%d: the %s backend cannot run %s (%s); use --backend cpu, or "
                 "regenerate without it (alltoall: -D ep=1; reduce_scatter, gather_shards: -D zero=0)",
                 plan->path, st->line, be->name, ccat_word(k), ccat_kind(k)->what);
        return -1;
    }
    return 0;
}

static Engine *engine_open(const Plan *plan, const Backend *be, int world_rank_or_minus1, const StageLink *stage,
                           char *err, size_t errlen) {
    if (!be->rank_open || !be->tensor_ptr || !be->kernel) {
        snprintf(err, errlen, "the %s backend is not available in this binary; use --backend cpu", be->name);
        return NULL;
    }
    Engine *e = calloc(1, sizeof *e);
    if (!e) { snprintf(err, errlen, "out of memory creating the engine"); return NULL; }
    e->p = plan; e->be = be; e->tp = plan->tp;
    if (grid_make(&e->grid, plan->dp, plan->pp, plan->tp, err, errlen) || grid_set_ep(&e->grid, plan->ep > 1 ? plan->ep : 1, err, errlen)) {
        free(e);
        return NULL;
    }
    if (refuse_collectives(plan, be, err, errlen)) {
        free(e);
        return NULL;
    }
    e->world = world_rank_or_minus1 >= 0;
    e->nranks = e->grid.world;
    e->zero = plan->zero && plan->dp > 1;
    e->lead = e->world ? world_rank_or_minus1 : 0;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv_work, NULL);
    pthread_cond_init(&e->cv_done, NULL);
    e->threads = calloc((size_t)e->nranks, sizeof *e->threads);
    e->ranks = calloc((size_t)e->nranks, sizeof *e->ranks);
    e->rank_err = calloc((size_t)e->nranks, sizeof *e->rank_err);
    if (!e->threads || !e->ranks || !e->rank_err) { snprintf(err, errlen, "out of memory creating the engine"); engine_release(e); return NULL; }
    int nlocal = e->world ? 1 : e->nranks;
    for (int r = 0; r < nlocal; r++) {
        WorkerArg *wa = malloc(sizeof *wa);
        if (!wa) break;
        wa->e = e; wa->rank = e->lead + r;
        if (pthread_create(&e->threads[r], NULL, worker_main, wa)) { free(wa); break; }
        e->nthreads++;
    }
    if (e->nthreads != nlocal) { snprintf(err, errlen, "cannot start %d worker threads", nlocal); engine_release(e); return NULL; }
    if (run_all(e, job_open, NULL, err, errlen)) { engine_release(e); return NULL; }
    if (stage && be->stage_init) {   /* a pipeline stage's communicators */
        if (be->stage_init(e->ranks, &e->grid, stage, err, errlen)) { engine_release(e); return NULL; }
    } else if (be->grid_init) {   /* cpu: threads, or under mpirun one process per grid rank */
        if (be->grid_init(e->ranks, &e->grid, err, errlen)) { engine_release(e); return NULL; }
    } else if (be->group_init && be->group_init(e->ranks, e->tp, err, errlen)) {
        engine_release(e);
        return NULL;
    }
    /* section ranges and collective bytes */
    e->fwd0 = e->fwd1 = e->bwd0 = e->bwd1 = 0;
    int i = 0;
    while (i < plan->nsteps && plan->steps_[i].section == 0) i++;
    e->fwd1 = i; e->bwd0 = i;
    while (i < plan->nsteps && plan->steps_[i].section == 1) i++;
    e->bwd1 = i;
    e->coll_bytes = plan_collective_bytes(plan);
    /* overlap: once per plan, where each collective must be waited for (BOOST_NO_OVERLAP=1: at
     * once, for comparing timings) */
    e->async_colls = be->collective_issue && be->coll_wait && be->coll_issue_kinds;
    if (e->async_colls) {
        e->skip_waits = test_hook_skip_coll_wait();
        e->gather_async = e->zero && (be->coll_issue_kinds >> CK_GATHER_SHARDS & 1u) &&
                          !runtime_env()->no_overlap;
        e->gather_pending = calloc((size_t)e->nranks, 1);
        e->first_use = malloc((size_t)(plan->nsteps + 1) * sizeof *e->first_use);
        e->wait_first = calloc((size_t)(plan->nsteps + 2), sizeof *e->wait_first);
        e->wait_list = malloc((size_t)(plan->nsteps + 1) * sizeof *e->wait_list);
        if (!e->first_use || !e->wait_first || !e->wait_list || !e->gather_pending) {
            snprintf(err, errlen, "out of memory planning the collectives");
            engine_release(e);
            return NULL;
        }
        overlap_first_use(plan, e->bwd1, runtime_env()->no_overlap, e->first_use);
        for (int s = e->bwd1; s < plan->nsteps; s++)   /* gathers waited for at once: none to place */
            if (!e->gather_async) e->first_use[s] = -1;
        for (int s = 0; s < plan->nsteps; s++) if (e->first_use[s] >= 0) e->wait_first[e->first_use[s] + 1]++;
        for (int s = 0; s <= plan->nsteps; s++) e->wait_first[s + 1] += e->wait_first[s];
        int *fill = calloc((size_t)(plan->nsteps + 1), sizeof *fill);
        if (!fill) { snprintf(err, errlen, "out of memory planning the collectives"); engine_release(e); return NULL; }
        for (int s = 0; s < plan->nsteps; s++)
            if (e->first_use[s] >= 0) e->wait_list[e->wait_first[e->first_use[s]] + fill[e->first_use[s]]++] = s;
        free(fill);
    }
    e->prof = profile_open(plan, be->name);
    e->flight = flight_new(e->nranks, 64);
    if (runtime_env()->verbose && e->lead == 0) {
        char rep[8192];
        if (plan_overlap_report(plan, rep, sizeof rep) == 0) fprintf(stderr, "%s", rep);
    }
    return e;
}

int64_t plan_collective_bytes(const Plan *plan) {
    int64_t bytes = 0;
    for (int s = 0; s < plan->nsteps && plan->steps_[s].section <= 1; s++) {   /* forward and backward */
        const PlanStep *st = &plan->steps_[s];
        if (st->kind == ST_ALLREDUCE && st->coll.group == GROUP_TP)
            bytes += st->coll.elems * (int64_t)plan_dtype_size(st->coll.dtype);
        if (st->kind == ST_ALLGATHER)
            bytes += st->coll.rows * st->coll.cols * plan->tp * (int64_t)plan_dtype_size(st->coll.dtype);
    }
    return bytes;
}

Engine *engine_create_stage(const Plan *plan, const char *backend, int rank, int size, const StageLink *stage,
                            char *err, size_t errlen) {
    if (!plan || plan->pp != 1 || size != plan->dp * plan->tp || rank < 0 || rank >= size) {
        snprintf(err, errlen, "engine_create_stage: rank %d of %d does not fit the stage's grid", rank, size);
        return NULL;
    }
    if (backend && !strcmp(backend, "cuda")) return engine_open(plan, &backend_cuda, rank, stage, err, errlen);
    return engine_open(plan, &backend_cpu, size > 1 ? rank : -1, stage, err, errlen);
}

BackendRank *engine_backend_rank(Engine *e, int rank) {
    return rank >= e->lead && rank < e->lead + e->nthreads ? e->ranks[rank] : NULL;
}

int engine_tensor_span(Engine *e, int rank, const char *name, BackendRank **br, void **ptr, int64_t *elems, int *dtype,
                       char *err, size_t errlen) {
    if (rank < e->lead || rank >= e->lead + e->nthreads) {
        snprintf(err, errlen, "rank %d is not held by this process (it holds %d..%d)", rank, e->lead, e->lead + e->nthreads - 1);
        return -1;
    }
    int t = plan_find_tensor(e->p, name);
    if (t < 0) { snprintf(err, errlen, "the plan has no tensor named %s", name); return -1; }
    *br = e->ranks[rank];
    *ptr = e->be->tensor_ptr(e->ranks[rank], t);
    *elems = e->p->tensors[t].rows * e->p->tensors[t].cols;
    *dtype = e->be->elem_bytes_fp32_only ? PDT_FP32 : e->p->tensors[t].dtype;
    return 0;
}

Engine *engine_create(const Plan *plan, const char *backend, char *err, size_t errlen) {
    if (!plan) { snprintf(err, errlen, "engine_create: no plan"); return NULL; }
    if (plan->pp > 1) {
        snprintf(err, errlen, "%.300s: pp=%d: one Engine runs one pipeline stage; a pp > 1 plan runs through "
                 "runtime/pipeline.c (boost train opens it), or regenerate with -D pp=1", plan->path, plan->pp);
        return NULL;
    }
    int wrank = 0, wsize = 1;
    int world = world_from_env(&wrank, &wsize, err, errlen);
    if (world < 0) return NULL;
    int grid = plan->dp * plan->pp * plan->tp;
    if (world && wsize != grid) {
        snprintf(err, errlen, "%.300s: the environment gives a world of %d processes but the plan's grid is dp %d x pp %d x tp %d "
                 "= %d ranks: launch that many processes or regenerate with matching -D dp= -D tp=", plan->path, wsize, plan->dp,
                 plan->pp, plan->tp, grid);
        return NULL;
    }
    if (!world && plan->dp > 1 && backend && !strcmp(backend, "auto")) backend = "cpu";
    if (!world && plan->dp > 1 && backend && strcmp(backend, "cpu")) {
        snprintf(err, errlen, "%.300s: dp=%d on the %s backend runs one process per GPU: launch dp x tp = %d processes "
                 "(mpirun, srun, or BOOST_WORLD_SIZE/BOOST_RANK), or use --backend cpu (ranks as threads)", plan->path,
                 plan->dp, backend, plan->dp * plan->tp);
        return NULL;
    }
    if (world) {   /* one process per rank: this process runs grid rank wrank (a GPU, or a CPU process under mpirun) */
        int cpu = !backend || !strcmp(backend, "cpu");
        if (cpu && !comm_mpi_launched()) {
            snprintf(err, errlen, "the environment gives a world of %d processes (rank %d), but the cpu backend runs one "
                     "process per rank only under Open MPI's mpirun; launch with mpirun, or one process (tp ranks as threads)",
                     wsize, wrank);
            return NULL;
        }
        if (cpu) return engine_open(plan, &backend_cpu, wrank, NULL, err, errlen);   /* MPI: cpu.c's group transports */
        if (!backend_cuda.rank_open || !backend_cuda.world_allreduce_host) {
            snprintf(err, errlen, "one process per GPU needs the cuda backend, which this binary lacks; launch one process");
            return NULL;
        }
        return engine_open(plan, &backend_cuda, wrank, NULL, err, errlen);   /* auto too: a world means GPUs */
    }
    if (!backend || !strcmp(backend, "cpu")) return engine_open(plan, &backend_cpu, -1, NULL, err, errlen);
    if (!strcmp(backend, "cuda")) return engine_open(plan, &backend_cuda, -1, NULL, err, errlen);
    if (!strcmp(backend, "auto")) {
        char quiet[512];
        Engine *e = backend_cuda.rank_open ? engine_open(plan, &backend_cuda, -1, NULL, quiet, sizeof quiet) : NULL;
        return e ? e : engine_open(plan, &backend_cpu, -1, NULL, err, errlen);
    }
    snprintf(err, errlen, "unknown backend '%s': use cpu, cuda or auto", backend);
    return NULL;
}

void engine_free(Engine *e) { engine_release(e); }

const char *engine_backend_name(const Engine *e) { return e->be->name; }

int64_t engine_collective_bytes(const Engine *e) { return e->coll_bytes; }

/* ---------------- steps ---------------- */
static void *resolve(Engine *e, int rank, const Operand *op) {
    const PlanTensor *t = &e->p->tensors[op->tensor];
    size_t esize = e->be->elem_bytes_fp32_only ? 4 : plan_dtype_size(t->dtype);
    char *base = e->be->tensor_ptr(e->ranks[rank], op->tensor);
    return base + rank_int(op->off, tp_of(e, rank)) * (int64_t)esize;
}


/* Whether run_step issues collective st (done later, on the backend's stream) or runs it all. */
static int coll_issued(const Engine *e, const PlanStep *st) {
    int k = step_coll_kind(st->kind);
    if (k == CK_GATHER_SHARDS) return e->gather_async;   /* only when the next pass may overlap it */
    return k >= 0 && e->async_colls && (e->be->coll_issue_kinds >> k & 1u);
}

/* A collective step: its operands resolved, then issued or run. */
static int run_collective(Engine *e, int rank, const PlanStep *st) {
    const CollArgs *c = &st->coll;
    unsigned ops = ccat_kind(c->kind)->operands;
    CollPtrs ptr = {
        .buf = ops & CO_BUF ? resolve(e, rank, &c->buf) : NULL,
        .src = ops & CO_SRC ? resolve(e, rank, &c->src) : NULL,
        .dst = ops & CO_DST ? resolve(e, rank, &c->dst) : NULL,
        .map = ops & CO_MAP ? resolve(e, rank, &c->map) : NULL,
    };
    if (coll_issued(e, st))
        return e->be->collective_issue(e->ranks[rank], (int)(st - e->p->steps_), c, &ptr);
    return e->be->collective(e->ranks[rank], c, &ptr);
}

static int run_step(Engine *e, int rank, const PlanStep *st) {
    const Backend *be = e->be;
    BackendRank *R = e->ranks[rank];
    int rc = 0;
    /* -1: no collective */
    int64_t flight_id = flight_plan_step(e->flight, rank, e->p, (int)(st - e->p->steps_));
    switch (st->kind) {
    case ST_GEMM:
    case ST_BATCHED_GEMM: {
        const GemmArgs *g = &st->gemm;
        rc = be->gemm(R, g, resolve(e, rank, &g->A), resolve(e, rank, &g->B), resolve(e, rank, &g->C));
        break;
    }
    case ST_GROUPED_GEMM: {
        int n = st->nmembers;
        void *stackp[3 * 16];
        void **ptrs = n <= 16 ? stackp : malloc((size_t)(3 * n) * sizeof *ptrs);
        if (!ptrs) return rank_error(e, rank, "grouped_gemm: out of memory%s%s", "", "");
        const GemmArgs *ms = &e->p->members[st->first_member];
        for (int i = 0; i < n; i++) {
            ptrs[i] = resolve(e, rank, &ms[i].A);
            ptrs[n + i] = resolve(e, rank, &ms[i].B);
            ptrs[2 * n + i] = resolve(e, rank, &ms[i].C);
        }
        rc = be->grouped_gemm(R, n, ms, ptrs, ptrs + n, ptrs + 2 * n);
        if (ptrs != stackp) free(ptrs);
        break;
    }
    case ST_KERNEL: {
        const KernelArgs *k = st->kernel;
        void *ops[PLAN_MAX_KEYS];
        for (int i = 0; i < k->nops; i++) ops[i] = resolve(e, rank, &k->op[i]);
        rc = be->kernel(R, k, ops);
        break;
    }
    default:
        if (step_coll_kind(st->kind) >= 0) rc = run_collective(e, rank, st);
        break;   /* else a marker */
    }
    if (!rc && !coll_issued(e, st)) flight_done(e->flight, rank, flight_id, 1);
    if (rc) {
        snprintf(e->rank_err[rank], sizeof e->rank_err[rank], "%.200s:%d: %s step failed on rank %d: %.250s", e->p->path, st->line,
                 plan_step_kind_name(st->kind), rank, backend_msg(e, rank));
        return -1;
    }
    return 0;
}

/* Make this rank wait for collective c (before a step that uses its memory). */
static int wait_coll(Engine *e, int rank, int c) {
    double t0 = flight_now();
    int rc = e->be->coll_wait(e->ranks[rank], c);
    flight_add_wait(e->flight, rank, flight_now() - t0);
    if (!rc) return 0;
    snprintf(e->rank_err[rank], sizeof e->rank_err[rank], "%.200s:%d: waiting for the collective failed on rank %d: %.250s",
             e->p->path, e->p->steps_[c].line, rank, backend_msg(e, rank));
    return -1;
}

/* Whether collective c is waited for at all: a gather_shards only after an optimizer step issued it;
 * BOOST_TEST_SKIP_COLL_WAIT=1 (every wait) or =gather (the gathers' waits) leaves them out, for the
 * tests that show a missing wait changes the numbers. */
static int coll_awaited(const Engine *e, int rank, int c) {
    if (c >= e->bwd1) return e->gather_pending[rank] && !e->skip_waits;
    return e->skip_waits != 1;
}

/* Plan step s on rank; timed: its seconds go to the BOOST_PROFILE table. */
static int run_step_timed(Engine *e, int rank, int s, int timed) {
    double t0 = timed ? profile_now() : 0;
    if (run_step(e, rank, &e->p->steps_[s])) return -1;
    if (timed) profile_step(e->prof, s, profile_now() - t0);
    return 0;
}

/* Steps [s0, s1) of a section (a whole pass, or a pipeline stage's forward or backward) on rank.
 * Each overlapped collective is waited for right before its first use; those issued before s0
 * were waited for at their own section's end. micro=last steps run only when last. */
static int section_steps(Engine *e, int rank, int s0, int s1, int last, int timed) {
    for (int s = s0; s < s1; s++) {
        const PlanStep *st = &e->p->steps_[s];
        for (int i = e->async_colls ? e->wait_first[s] : 0; e->async_colls && i < e->wait_first[s + 1]; i++) {
            int c = e->wait_list[i];
            if (c >= s0 && coll_awaited(e, rank, c) && wait_coll(e, rank, c)) return -1;
        }
        if ((st->kind == ST_ALLREDUCE || st->kind == ST_REDUCE_SCATTER) && st->coll.last_micro && !last) continue;
        if (run_step_timed(e, rank, s, timed)) return -1;
    }
    return 0;
}

/* The end of section [s0, s1): what is still outstanding is waited for (the section's collectives
 * first used after it, and the optimizer's gathers: the next section may run on another activation
 * slot, or be the optimizer). A section from the pass's first step has then met every gather. */
static int section_settle(Engine *e, int rank, int s0, int s1) {
    if (!e->async_colls) return 0;
    for (int c = s0; c < e->p->nsteps; c++) {
        if (c >= s1 && c < e->bwd1) continue;
        if (e->first_use[c] >= s1 && coll_awaited(e, rank, c) && wait_coll(e, rank, c)) return -1;
    }
    if (s0 == e->fwd0) e->gather_pending[rank] = 0;
    return 0;
}

/* tokens/targets: dp * micro_batch * seq each; dp rank i takes rows [i*M, (i+1)*M). loss[d]: the
 * mean loss of dp rank d's micro-batch (read by its tp rank 0). last: the last micro-batch of an
 * optimizer step (micro=last steps run). */
typedef struct { const int32_t *tokens, *targets; int backward, last; float *loss; } PassArg;

/* BOOST_TEST_SLOW_RANK=R:MS (tests): grid rank R sleeps MS ms at the start of each training pass,
 * outside the collectives, as a slower device or host would (the straggler check names it; the
 * other ranks wait for it in the pass's first collective; a long sleep looks like a hang). */
static void test_slow_rank(const Engine *e, int rank) {
    int r, ms = test_hook_slow_rank(&r);
    if (ms > 0 && r == rank) usleep((useconds_t)ms * 1000);
}

static int job_pass(Engine *e, int rank, void *argp) {
    const PassArg *a = argp;
    BackendRank *R = e->ranks[rank];
    int64_t M = (int64_t)e->p->micro_batch * e->p->seq, row0 = (int64_t)dp_of(e, rank) * M;
    if (e->be->set_i32(R, e->p->tokens, a->tokens + row0) || e->be->set_i32(R, e->p->targets, a->targets + row0)) {
        snprintf(e->rank_err[rank], sizeof e->rank_err[rank], "rank %d: cannot load the batch: %s", rank, backend_msg(e, rank));
        return -1;
    }
    int end = a->backward ? e->bwd1 : e->fwd1;
    int replayed = e->be->pass_begin ? e->be->pass_begin(R, a->backward) : 0;
    if (replayed < 0) {
        snprintf(e->rank_err[rank], sizeof e->rank_err[rank], "rank %d: %s", rank, backend_msg(e, rank));
        return -1;
    }
    int timed = e->prof && a->backward && rank == e->lead;   /* training passes only (not evaluation) */
    double t0 = flight_now();
    if (a->backward) test_slow_rank(e, rank);
    if (!replayed && section_steps(e, rank, e->fwd0, end, a->last, timed)) return -1;
    if (timed) profile_pass(e->prof);
    if (!replayed && e->be->pass_end && e->be->pass_end(R, a->backward)) {
        snprintf(e->rank_err[rank], sizeof e->rank_err[rank], "rank %d: %s", rank, backend_msg(e, rank));
        return -1;
    }
    if (section_settle(e, rank, e->fwd0, end)) return -1;
    if (rank == e->lead || (!e->world && tp_of(e, rank) == 0)) {   /* read on the rank's own thread (a device context lives there) */
        if (e->be->to_host(R, e->p->loss, &a->loss[dp_of(e, rank)])) {
            snprintf(e->rank_err[rank], sizeof e->rank_err[rank], "cannot read the loss: %s", backend_msg(e, rank));
            return -1;
        }
    }
    flight_settle(e->flight, rank);   /* the loss is read: what the pass issued is done */
    if (a->backward) flight_job(e->flight, rank, flight_now() - t0);
    return 0;
}

/* Multi-process mode: a sum of n values (doubles when f64, else floats) over the processes, on
 * the flight record of this process's rank (printed when it fails). */
static int world_host_sum(Engine *e, void *host, int64_t n, int f64) {
    int64_t bytes = n * (f64 ? 8 : 4);
    int64_t id = flight_begin(e->flight, e->lead, FLIGHT_HOST_SUM, 0, "sum", "world", bytes);
    int rc = e->be->world_allreduce_host(e->ranks[e->lead], host, n, f64);
    if (!rc) flight_done(e->flight, e->lead, id, 1);
    else {
        flight_report(e, e->lead);
        flight_settle(e->flight, e->lead);   /* printed once */
    }
    return rc;
}

/* Multi-process mode: every process gets loss[0..dp) from the tp rank 0 of each dp rank (a sum over
 * the processes of values that are 0 elsewhere: exact), so all of them log and decide alike. */
static int world_losses(Engine *e, float *loss, char *err, size_t errlen) {
    double *v = calloc((size_t)e->grid.dp, sizeof *v);
    if (!v) { snprintf(err, errlen, "out of memory"); return -1; }
    if (tp_of(e, e->lead) == 0) v[dp_of(e, e->lead)] = loss[dp_of(e, e->lead)];
    int rc = world_host_sum(e, v, e->grid.dp, 1);
    if (rc) {
        snprintf(err, errlen, "summing the losses over the processes failed: %s", backend_msg(e, e->lead));
        e->broken = 1;
    }
    for (int d = 0; d < e->grid.dp && !rc; d++) loss[d] = (float)v[d];
    free(v);
    return rc ? -1 : 0;
}

static int run_pass(Engine *e, const int32_t *tokens, const int32_t *targets, float *loss, int backward, char *err,
                    size_t errlen) {
    if (e->broken) { snprintf(err, errlen, "the engine stopped after an earlier error; create a new one"); return -1; }
    int64_t M = (int64_t)e->p->micro_batch * e->p->seq * e->grid.dp, i0 = 0;
    if (e->world) {   /* this process reads and runs its own dp rank's micro-batch only */
        i0 = (int64_t)dp_of(e, e->lead) * e->p->micro_batch * e->p->seq;
        M = i0 + (int64_t)e->p->micro_batch * e->p->seq;
    }
    for (int64_t i = i0; i < M; i++)
        if (tokens[i] < 0 || tokens[i] >= e->p->vocab || targets[i] < 0 || targets[i] >= e->p->vocab) {
            snprintf(err, errlen, "batch: token %lld (%d -> %d) is outside the vocabulary 0..%d; the data does not match the model",
                     (long long)i, tokens[i], targets[i], e->p->vocab - 1);
            return -1;
        }
    float lossv[64], *lp = e->grid.dp <= 64 ? lossv : malloc((size_t)e->grid.dp * sizeof *lp);
    if (!lp) { snprintf(err, errlen, "out of memory"); return -1; }
    for (int d = 0; d < e->grid.dp; d++) lp[d] = NAN;
    PassArg a = {tokens, targets, backward, e->micro == e->p->grad_accum - 1, lp};
    if (run_all(e, job_pass, &a, err, errlen)) {
        e->broken = 1;
        if (lp != lossv) free(lp);
        return -1;
    }
    if (backward) e->micro = (e->micro + 1) % e->p->grad_accum;
    if (e->world && e->grid.dp > 1 && world_losses(e, lp, err, errlen)) {
        if (lp != lossv) free(lp);
        return -1;
    }
    double sum = 0;   /* the global loss: the mean over the dp ranks, in dp order */
    for (int d = 0; d < e->grid.dp; d++) sum += lp[d];
    if (loss) *loss = e->grid.dp == 1 ? lp[0] : (float)(sum / e->grid.dp);
    if (lp != lossv) free(lp);
    return 0;
}

int engine_forward_backward(Engine *e, const int32_t *tokens, const int32_t *targets, float *loss, char *err, size_t errlen) {
    return run_pass(e, tokens, targets, loss, 1, err, errlen);
}

int engine_forward(Engine *e, const int32_t *tokens, const int32_t *targets, float *loss, char *err, size_t errlen) {
    return run_pass(e, tokens, targets, loss, 0, err, errlen);
}

/* ---------------- optimizer ---------------- */
float engine_lr_at(const Plan *p, int step) {
    if (step < p->warmup) return (float)(p->lr * (step + 1) / p->warmup);
    int span = p->steps - p->warmup;
    if (span <= 0) return (float)p->min_lr;
    double progress = (double)(step - p->warmup) / span;
    if (progress > 1) progress = 1;
    return (float)(p->min_lr + 0.5 * (p->lr - p->min_lr) * (1.0 + cos(M_PI * progress)));
}

typedef struct { double *sq; float lr, scale; int t; } OptArg;

/* After the dp reduction every dp rank holds the same gradients: dp rank 0's tp group counts them. */
static int job_sq(Engine *e, int rank, void *argp) {
    OptArg *a = argp;
    /* zero=1: each its shard; ep > 1: the first ep group (the backend counts the expert blocks of its ep
       rank and, on dp rank 0 only, the rest) */
    if (dp_of(e, rank) < e->grid.ep || e->zero) a->sq[rank] = e->be->grad_sq_norm(e->ranks[rank]);
    return 0;
}

static int job_adamw(Engine *e, int rank, void *argp) {
    OptArg *a = argp;
    double t0 = e->prof && rank == e->lead ? profile_now() : 0;
    if (e->be->adamw(e->ranks[rank], a->lr, a->scale, a->t) || e->be->zero_grads(e->ranks[rank])) {
        snprintf(e->rank_err[rank], sizeof e->rank_err[rank], "optimizer step failed on rank %d: %s", rank, backend_msg(e, rank));
        return -1;
    }
    if (e->prof && rank == e->lead) profile_optimizer(e->prof, profile_now() - t0);
    for (int s = e->bwd1; s < e->p->nsteps; s++)   /* zero=1: the updated shards to every dp rank */
        if (e->p->steps_[s].kind == ST_GATHER_SHARDS && run_step(e, rank, &e->p->steps_[s])) return -1;
    if (e->gather_async) e->gather_pending[rank] = 1;   /* waited for in the next pass, or by settle_gathers */
    return 0;
}

/* Before any use of the rank other than a pass (host reads and writes of params and state,
 * checkpoints, the next optimizer step, closing the engine): the compute stream waits for every
 * gather still outstanding, so what follows on it sees the gathered params. */
static int settle_gathers(Engine *e, int rank) {
    if (!e->gather_pending || !e->gather_pending[rank] || !e->ranks[rank] || e->broken) return 0;
    e->gather_pending[rank] = 0;
    for (int s = e->bwd1; s < e->p->nsteps && !e->skip_waits; s++)
        if (e->p->steps_[s].kind == ST_GATHER_SHARDS && e->be->coll_wait(e->ranks[rank], s)) {
            snprintf(e->rank_err[rank], sizeof e->rank_err[rank], "%.200s:%d: waiting for gather_shards failed on rank %d: %.250s",
                     e->p->path, e->p->steps_[s].line, rank, backend_msg(e, rank));
            return -1;
        }
    return 0;
}

static int job_zero(Engine *e, int rank, void *argp) { return e->be->zero_grads(e->ranks[rank]); }

int engine_discard_grads(Engine *e, char *err, size_t errlen) {
    if (e->broken) { snprintf(err, errlen, "the engine stopped after an earlier error; create a new one"); return -1; }
    if (run_all(e, job_zero, NULL, err, errlen)) {
        if (err && !err[0]) snprintf(err, errlen, "zeroing the gradients failed");
        return -1;
    }
    return 0;
}

int engine_optimizer_step(Engine *e, int step, float *grad_norm, float *lr, char *err, size_t errlen) {
    if (e->broken) { snprintf(err, errlen, "the engine stopped after an earlier error; create a new one"); return -1; }
    double sq[64];
    double *sqp = e->nranks <= 64 ? sq : malloc((size_t)e->nranks * sizeof *sqp);
    if (!sqp) { snprintf(err, errlen, "out of memory"); return -1; }
    memset(sqp, 0, (size_t)e->nranks * sizeof *sqp);   /* multi-process mode: other processes' ranks stay 0 */
    e->micro = 0;
    OptArg a = {sqp, 0, 1, step + 1};
    run_all(e, job_sq, &a, NULL, 0);
    double total = 0;
    for (int r = 0; r < e->nranks; r++) total += sqp[r];   /* rank order: deterministic */
    if (sqp != sq) free(sqp);
    if (e->world && world_host_sum(e, &total, 1, 1)) {
        snprintf(err, errlen, "optimizer step %d: summing the gradient norm over the processes failed: %s", step,
                 backend_msg(e, e->lead));
        e->broken = 1;
        return -1;
    }
    double norm = sqrt(total);
    if (grad_norm) *grad_norm = (float)norm;
    a.lr = engine_lr_at(e->p, step);
    if (lr) *lr = a.lr;
    if (!isfinite(norm)) {
        run_all(e, job_zero, NULL, NULL, 0);   /* the next micro-batches start clean */
        snprintf(err, errlen, "optimizer step %d: the gradient norm is not finite (%g); the update was skipped "
                 "(lower the learning rate or check the data)", step, norm);
        return -1;
    }
    if (e->p->norm_skip_above > 0 && norm > e->p->norm_skip_above) {   /* a loss spike: no update */
        run_all(e, job_zero, NULL, NULL, 0);
        return 1;
    }
    a.scale = (e->p->clip > 0 && norm > e->p->clip) ? (float)(e->p->clip / norm) : 1.0f;
    return run_all(e, job_adamw, &a, err, errlen);
}

/* ---------------- parameters ---------------- */
static uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The counter-based standard normal N(seed, idx) of docs/plan-format.md. */
static double counter_normal(uint64_t seed, uint64_t idx) {
    double u1 = (double)(splitmix64(seed ^ (2 * idx)) >> 11) * 0x1p-53;
    double u2 = (double)(splitmix64(seed ^ (2 * idx + 1)) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

static float canon_init_value(const PlanCanon *c, int64_t i, int64_t j) {
    if (c->init == 1) return 1.0f;
    if (c->init == 2) return 0.0f;
    return (float)(c->std * counter_normal(c->seed, (uint64_t)(i * c->cols + j)));
}

static int job_init(Engine *e, int grank, void *argp) {
    const Plan *p = e->p;
    BackendRank *R = e->ranks[grank];
    int rank = tp_of(e, grank);
    for (int q = 0; q < p->nparams; q++) {
        const PlanParam *pp = &p->params[q];
        size_t n = (size_t)(pp->rows * pp->cols);
        float *buf = calloc(n, sizeof *buf);
        if (!buf) return rank_error(e, grank, "out of memory initialising %s%s", pp->name, "");
        for (int k = 0; k < pp->nparts; k++) {
            const PlanPart *pt = &p->parts[pp->first_part + k];
            const PlanCanon *c = &p->canons[pt->canon];
            if (!holds_part(e, grank, pt)) continue;
            int64_t r0 = rank_int(pt->r0, rank), r1 = rank_int(pt->r1, rank), c0 = rank_int(pt->c0, rank), c1 = rank_int(pt->c1, rank);
            int64_t lr = rank_int(pt->lr, rank), lc = rank_int(pt->lc, rank);
            for (int64_t i = r0; i < r1; i++)
                for (int64_t j = c0; j < c1; j++) buf[(lr + i - r0) * pp->cols + lc + j - c0] = canon_init_value(c, i, j);
        }
        int rc = e->be->from_host(R, pp->tensor, buf);
        memset(buf, 0, n * sizeof *buf);
        rc = rc || e->be->from_host(R, pp->grad, buf) || e->be->state_from_host(R, q, 1, buf) || e->be->state_from_host(R, q, 2, buf);
        free(buf);
        if (rc) return rank_error(e, grank, "initialising %s failed: %s", pp->name, backend_msg(e, grank));
    }
    return 0;
}

int engine_init_params(Engine *e, char *err, size_t errlen) {
    return run_all(e, job_init, NULL, err, errlen);
}

/* full: the canonical tensor; per_dp (zero=1, get of params and AdamW slots): one zeroed canon-sized
 * buffer per dp rank, each rank writing its shard's blocks there (the Engine then sums them in dp
 * order). Params too: a backend may hold exact fp32 masters for its shard only (CUDA). */
typedef struct { int canon, slot, set; float *full; float **per_dp; } CanonArg;

static int slot_io(Engine *e, int rank, int q, int slot, float *buf, int to_backend) {
    const PlanParam *pp = &e->p->params[q];
    BackendRank *R = e->ranks[rank];
    const Backend *be = e->be;
    switch (slot) {
    case SLOT_PARAM: return to_backend ? be->from_host(R, pp->tensor, buf) : be->to_host(R, pp->tensor, buf);
    case SLOT_GRAD: return to_backend ? be->from_host(R, pp->grad, buf) : be->to_host(R, pp->grad, buf);
    case SLOT_ADAM_M: return to_backend ? be->state_from_host(R, q, 1, buf) : be->state_to_host(R, q, 1, buf);
    case SLOT_ADAM_V: return to_backend ? be->state_from_host(R, q, 2, buf) : be->state_to_host(R, q, 2, buf);
    }
    return -1;
}

/* Get: dp rank 0's tp group writes the blocks (the other dp ranks hold the same values; an ep=K block
 * comes from dp rank K, of the first ep group); set: every rank takes the blocks it holds. */
static int job_canon(Engine *e, int grank, void *argp) {
    CanonArg *a = argp;
    int rank = tp_of(e, grank);
    float *full = a->full;
    if (a->per_dp) full = a->per_dp[dp_of(e, grank)];
    else if (!a->set && dp_of(e, grank) >= e->grid.ep) return 0;
    int first_dp = dp_of(e, grank) == 0;   /* get: the blocks without an ep rank come from dp rank 0 */
    const Plan *p = e->p;
    const PlanCanon *c = &p->canons[a->canon];
    for (int q = 0; q < p->nparams; q++) {
        const PlanParam *pp = &p->params[q];
        int uses = 0;
        for (int k = 0; k < pp->nparts; k++) {
            const PlanPart *pt = &p->parts[pp->first_part + k];
            if (pt->canon == a->canon && holds_part(e, grank, pt) && (a->set || ((!pt->rep || rank == 0) && (pt->ep >= 0 || first_dp || a->per_dp))))
                uses = 1;
        }
        if (!uses) continue;
        float *buf = malloc((size_t)(pp->rows * pp->cols) * sizeof *buf);
        if (!buf) return rank_error(e, grank, "out of memory reading %s%s", pp->name, "");
        if (slot_io(e, grank, q, a->slot, buf, 0)) {
            free(buf);
            return rank_error(e, grank, "reading %s failed: %s", pp->name, backend_msg(e, grank));
        }
        if (a->per_dp) {   /* this dp rank's shard only (the backend zeroes the moments itself) */
            int64_t lo, hi;
            zero_shard(pp->rows * pp->cols, dp_of(e, grank), e->grid.dp, &lo, &hi);
            for (int64_t i = 0; i < pp->rows * pp->cols; i++) if (i < lo || i >= hi) buf[i] = 0;
        }
        for (int k = 0; k < pp->nparts; k++) {
            const PlanPart *pt = &p->parts[pp->first_part + k];
            if (pt->canon != a->canon || (!a->set && pt->rep && rank != 0) || !holds_part(e, grank, pt)) continue;
            if (!a->set && !a->per_dp && pt->ep < 0 && !first_dp) continue;
            int64_t r0 = rank_int(pt->r0, rank), r1 = rank_int(pt->r1, rank), c0 = rank_int(pt->c0, rank), c1 = rank_int(pt->c1, rank);
            int64_t lr = rank_int(pt->lr, rank), lc = rank_int(pt->lc, rank);
            for (int64_t i = r0; i < r1; i++) {
                float *local = buf + (lr + i - r0) * pp->cols + lc;
                float *canon = full + i * c->cols + c0;
                if (a->set) memcpy(local, canon, (size_t)(c1 - c0) * sizeof *local);
                else memcpy(canon, local, (size_t)(c1 - c0) * sizeof *local);
            }
        }
        int rc = a->set ? slot_io(e, grank, q, a->slot, buf, 1) : 0;
        free(buf);
        if (rc) return rank_error(e, grank, "writing %s failed: %s", pp->name, backend_msg(e, grank));
    }
    return 0;
}

int engine_get_canon(Engine *e, int canon, int slot, float *full) {
    if (canon < 0 || canon >= e->p->ncanons || slot < SLOT_PARAM || slot > SLOT_GRAD) return -1;
    const PlanCanon *c = &e->p->canons[canon];
    int64_t n = c->rows * c->cols;
    memset(full, 0, (size_t)n * sizeof *full);
    CanonArg a = {canon, slot, 0, full, NULL};
    /* each dp rank gives its shard, zeros elsewhere (zero=2: the gradients too, once reduced) */
    if (e->zero && (slot != SLOT_GRAD || e->p->zero == 2)) {
        a.per_dp = calloc((size_t)e->grid.dp, sizeof *a.per_dp);
        int ok = a.per_dp != NULL;
        for (int d = 0; ok && d < e->grid.dp; d++) ok = (a.per_dp[d] = calloc((size_t)n, sizeof(float))) != NULL;
        int rc = ok ? run_all(e, job_canon, &a, NULL, 0) : -1;
        for (int d = 0; ok && d < e->grid.dp; d++)
            for (int64_t i = 0; i < n; i++) full[i] += a.per_dp[d][i];
        for (int d = 0; a.per_dp && d < e->grid.dp; d++) free(a.per_dp[d]);
        free(a.per_dp);
        /* multi-process mode: this process added its own shard; the other dp ranks' come from theirs */
        if (e->world && world_host_sum(e, full, n, 0)) rc = -1;
        return rc;
    }
    int rc = run_all(e, job_canon, &a, NULL, 0);
    /* multi-process mode: each process wrote its own blocks (rep=1 ones from rank 0 only) into the
     * zeroed tensor; the sum over the processes is the full tensor. Every process takes part. */
    if (e->world && world_host_sum(e, full, c->rows * c->cols, 0)) rc = -1;
    return rc;
}

int engine_set_canon(Engine *e, int canon, int slot, const float *full) {
    if (canon < 0 || canon >= e->p->ncanons || slot < SLOT_PARAM || slot > SLOT_GRAD) return -1;
    CanonArg a = {canon, slot, 1, (float *)full, NULL};
    return run_all(e, job_canon, &a, NULL, 0);
}

typedef struct { int target, tensor; float *host; } ReadArg;

static int job_read(Engine *e, int rank, void *argp) {
    ReadArg *a = argp;
    if (rank != a->target) return 0;
    if (e->be->to_host(e->ranks[rank], a->tensor, a->host))
        return rank_error(e, rank, "reading %s failed: %s", e->p->tensors[a->tensor].name, backend_msg(e, rank));
    return 0;
}

int engine_read_tensor(Engine *e, int rank, const char *name, float *host, char *err, size_t errlen) {
    if (rank < 0 || rank >= e->nranks) { snprintf(err, errlen, "rank %d is outside 0..%d", rank, e->nranks - 1); return -1; }
    if (e->world && rank != e->lead) { snprintf(err, errlen, "rank %d runs in another process (this one holds rank %d)", rank, e->lead); return -1; }
    int t = plan_find_tensor(e->p, name);
    if (t < 0) { snprintf(err, errlen, "the plan has no tensor named %s", name); return -1; }
    ReadArg a = {rank, t, host};
    return run_all(e, job_read, &a, err, errlen);
}

typedef struct { int target, param, slot; float *host; } LocalArg;

static int job_local(Engine *e, int rank, void *argp) {
    LocalArg *a = argp;
    if (rank != a->target) return 0;
    if (slot_io(e, rank, a->param, a->slot, a->host, 0))
        return rank_error(e, rank, "reading %s failed: %s", e->p->params[a->param].name, backend_msg(e, rank));
    return 0;
}

int engine_read_local(Engine *e, int rank, int param, int slot, float *host, char *err, size_t errlen) {
    if (param < 0 || param >= e->p->nparams || slot < SLOT_PARAM || slot > SLOT_GRAD) {
        snprintf(err, errlen, "engine_read_local: param %d slot %d out of range", param, slot);
        return -1;
    }
    if (rank < e->lead || rank >= e->lead + e->nthreads) {
        snprintf(err, errlen, "rank %d is not held by this process (it holds %d..%d)", rank, e->lead, e->lead + e->nthreads - 1);
        return -1;
    }
    LocalArg a = {rank, param, slot, host};
    return run_all(e, job_local, &a, err, errlen);
}

int engine_rank_busy(Engine *e, double *busy) {
    for (int r = e->lead; r < e->lead + e->nthreads; r++) busy[r] = flight_take_busy(e->flight, r);
    return e->nranks;
}

void engine_flight_step(Engine *e, int step) { flight_mark_step(e->flight, step); }

int engine_world_sum(Engine *e, double *vals, int64_t n) {
    if (!e->world) return 0;
    if (world_host_sum(e, vals, n, 1) == 0) return 0;
    fprintf(stderr, "boost: rank %d: a sum across the processes failed: %s\n", e->lead, backend_msg(e, e->lead));
    return -1;
}

/* ---------------- pipeline stages (runtime/pipeline.c drives one Engine per stage) ---------------- */
typedef struct { const int32_t *tokens, *targets; int backward, flags, slot; float *loss; } StageArg;

static int job_stage(Engine *e, int rank, void *argp) {
    const StageArg *a = argp;
    BackendRank *R = e->ranks[rank];
    if (e->be->arena_slot(R, a->slot)) return rank_error(e, rank, "rank %s: %s", "", backend_msg(e, rank));
    int64_t M = (int64_t)e->p->micro_batch * e->p->seq, row0 = (int64_t)dp_of(e, rank) * M;
    if (a->tokens && (e->be->set_i32(R, e->p->tokens, a->tokens + row0) || e->be->set_i32(R, e->p->targets, a->targets + row0)))
        return rank_error(e, rank, "cannot load the batch: %s%s", backend_msg(e, rank), "");
    int s0 = a->backward ? e->bwd0 : e->fwd0, s1 = a->backward ? e->bwd1 : e->fwd1;
    int timed = e->prof && (a->flags & STAGE_TRAIN) && rank == e->lead;   /* training passes only (not validation) */
    if (section_steps(e, rank, s0, s1, a->flags & STAGE_LAST, timed)) return -1;
    if (timed && a->backward) profile_pass(e->prof);
    if (section_settle(e, rank, s0, s1)) return -1;
    if (!a->backward && a->loss && tp_of(e, rank) == 0 && e->be->to_host(R, e->p->loss, &a->loss[dp_of(e, rank)]))
        return rank_error(e, rank, "cannot read the loss: %s%s", backend_msg(e, rank), "");
    return 0;
}

void engine_profile_label(Engine *e, const char *label) { profile_label(e->prof, label); }

int engine_stage_pass(Engine *e, int backward, int slot, const int32_t *tokens, const int32_t *targets, int flags,
                      float *loss_per_dp, char *err, size_t errlen) {
    if (e->broken) { snprintf(err, errlen, "the engine stopped after an earlier error; create a new one"); return -1; }
    if (!e->be->arena_slot) {
        snprintf(err, errlen, "%.300s: the %s backend has no activation slots, so it cannot run pipeline stages: use "
                 "--backend cpu or cuda, or regenerate with -D pp=1", e->p->path, e->be->name);
        return -1;
    }
    StageArg a = {tokens, targets, backward, flags, slot, loss_per_dp};
    if (run_all(e, job_stage, &a, err, errlen)) { e->broken = 1; return -1; }
    return 0;
}

static int job_slot(Engine *e, int rank, void *argp) {
    if (e->be->arena_slot(e->ranks[rank], *(int *)argp)) return rank_error(e, rank, "rank %s: %s", "", backend_msg(e, rank));
    return 0;
}

int engine_set_slot(Engine *e, int slot, char *err, size_t errlen) {
    if (!e->be->arena_slot) { snprintf(err, errlen, "the %s backend has no activation slots", e->be->name); return -1; }
    return run_all(e, job_slot, &slot, err, errlen);
}

typedef struct { int target, tensor; const float *host; } WriteArg;

static int job_write(Engine *e, int rank, void *argp) {
    WriteArg *a = argp;
    if (a->target >= 0 && rank != a->target) return 0;
    if (e->be->from_host(e->ranks[rank], a->tensor, a->host))
        return rank_error(e, rank, "writing %s failed: %s", e->p->tensors[a->tensor].name, backend_msg(e, rank));
    return 0;
}

int engine_write_tensor(Engine *e, int rank, const char *name, const float *host, char *err, size_t errlen) {
    if (rank < -1 || rank >= e->nranks) { snprintf(err, errlen, "rank %d is outside 0..%d", rank, e->nranks - 1); return -1; }
    if (e->world && rank >= 0 && rank != e->lead) { snprintf(err, errlen, "rank %d runs in another process (this one holds rank %d)", rank, e->lead); return -1; }
    int t = plan_find_tensor(e->p, name);
    if (t < 0) { snprintf(err, errlen, "the plan has no tensor named %s", name); return -1; }
    WriteArg a = {rank, t, host};
    return run_all(e, job_write, &a, err, errlen);
}

int engine_grad_sq(Engine *e, double *sq_out) {
    double sq[64];
    double *sqp = e->nranks <= 64 ? sq : malloc((size_t)e->nranks * sizeof *sqp);
    if (!sqp) return -1;
    memset(sqp, 0, (size_t)e->nranks * sizeof *sqp);
    OptArg a = {sqp, 0, 1, 1};
    run_all(e, job_sq, &a, NULL, 0);
    double total = 0;
    for (int r = 0; r < e->nranks; r++) total += sqp[r];
    if (sqp != sq) free(sqp);
    *sq_out = total;
    return 0;
}

int engine_adamw_clipped(Engine *e, int step, double global_norm, char *err, size_t errlen) {
    if (e->broken) { snprintf(err, errlen, "the engine stopped after an earlier error; create a new one"); return -1; }
    e->micro = 0;
    OptArg a = {NULL, engine_lr_at(e->p, step), 1, step + 1};
    a.scale = (e->p->clip > 0 && global_norm > e->p->clip) ? (float)(e->p->clip / global_norm) : 1.0f;
    return run_all(e, job_adamw, &a, err, errlen);
}
