/* cpu.c: backend_cpu, the fp32 reference backend. Each tensor-parallel rank is a thread of one
 * process; a rank owns an activation arena (2*arena_bytes: every buffer at 2*offset, see
 * docs/plan-format.md), its params, grads and AdamW state. Collectives meet at a barrier and sum
 * in rank order 0..t-1, so every rank gets bit-identical results at any TP degree. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>          // defines: cblas_sgemm, openblas_set_num_threads
#include "runtime/backend.h"
#include "runtime/cpu.h"

#define CPU_MAX_TP 64

/* The ranks of one Engine: a barrier that can be aborted, and each rank's published pointer. */
typedef struct {
    int tp;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int count, gen, aborted, refs;
    void *ptr[CPU_MAX_TP];
} CpuGroup;

struct BackendRank {
    const Plan *p;
    int rank, tp;
    float *arena;                 /* 2*arena_bytes */
    void **ptr;                   /* per tensor */
    float **m, **v;               /* per param: AdamW state */
    float *scratch; size_t scratch_elems;
    CpuGroup *group;
    char err[512];
};

/* Threads: each of the tp ranks of this process gets cpu_threads() = BOOST_THREADS (default: the
 * online cores less the machine's 1-minute load, which a busy shared machine needs) / tp, at least 1, for OpenBLAS and for the kernels' OpenMP loops, so tp ranks x
 * threads never oversubscribe the cores. The split never changes a result's bits (a GEMM's or a
 * kernel row's arithmetic does not depend on it; tests/sh/train_threads.sh checks a run). */
static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;
static int blas_threads = 0;
static void blas_threads_for(int tp) {
    pthread_mutex_lock(&blas_mu);
    int n = cpu_threads_set(tp);
    if (n != blas_threads) { openblas_set_num_threads(n); blas_threads = n; }
    pthread_mutex_unlock(&blas_mu);
}
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_default(void) { if (!blas_threads) blas_threads_for(1); }

static int64_t numel(const PlanTensor *t) { return t->rows * t->cols; }

static void group_abort(CpuGroup *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->aborted = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Returns -1 when another rank failed (the pass is abandoned). */
static int group_barrier(CpuGroup *g) {
    pthread_mutex_lock(&g->mu);
    if (g->aborted) { pthread_mutex_unlock(&g->mu); return -1; }
    int gen = g->gen;
    if (++g->count == g->tp) {
        g->count = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->gen && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
    }
    int ab = g->aborted && gen == g->gen;
    pthread_mutex_unlock(&g->mu);
    return ab ? -1 : 0;
}

static int rfail(BackendRank *r, const char *msg) {
    snprintf(r->err, sizeof r->err, "cpu rank %d: %s", r->rank, msg);
    group_abort(r->group);
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
    if (r->group) {
        CpuGroup *g = r->group;
        pthread_mutex_lock(&g->mu);
        int left = --g->refs;
        pthread_mutex_unlock(&g->mu);
        if (left == 0) {
            pthread_mutex_destroy(&g->mu);
            pthread_cond_destroy(&g->cv);
            free(g);
        }
    }
    free(r);
}

static BackendRank *cpu_rank_open(const Plan *p, int rank, int tp, char *err, size_t errlen) {
    if (tp > CPU_MAX_TP) { snprintf(err, errlen, "cpu backend: tp=%d is more than %d", tp, CPU_MAX_TP); return NULL; }
    blas_threads_for(tp);
    BackendRank *r = calloc(1, sizeof *r);
    if (!r) goto oom;
    r->p = p; r->rank = rank; r->tp = tp;
    size_t arena = (size_t)(2 * p->arena_bytes);
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
    for (int i = 0; i < p->nparams; i++) {
        size_t n = (size_t)(p->params[i].rows * p->params[i].cols);
        if (!(r->m[i] = calloc(n, sizeof(float))) || !(r->v[i] = calloc(n, sizeof(float)))) goto oom;
    }
    return r;
oom:
    cpu_rank_close(r);
    snprintf(err, errlen, "cpu backend: out of memory opening rank %d (arena %lld bytes); use a smaller micro_batch or seq",
             rank, (long long)(2 * p->arena_bytes));
    return NULL;
}

static int cpu_group_init(BackendRank **ranks, int tp, char *err, size_t errlen) {
    CpuGroup *g = calloc(1, sizeof *g);
    if (!g) { snprintf(err, errlen, "cpu backend: out of memory"); return -1; }
    g->tp = tp;
    g->refs = tp;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    for (int i = 0; i < tp; i++) ranks[i]->group = g;
    return 0;
}

static void *cpu_tensor_ptr(BackendRank *r, int t) { return r->ptr[t]; }

void cpu_gemm(const GemmArgs *g, const float *A, const float *B, float *C) {
    pthread_once(&blas_once, blas_default);
    for (int64_t i = 0; i < g->batch; i++)
        cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                    (int)g->m, (int)g->n, (int)g->k, (float)g->alpha, A + i * g->sA, (int)g->lda,
                    B + i * g->sB, (int)g->ldb, (float)g->beta, C + i * g->sC, (int)g->ldc);
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

static int cpu_allreduce(BackendRank *r, const CollArgs *c, void *buf) {
    if (r->tp == 1) return 0;
    CpuGroup *g = r->group;
    if (!g) return rfail(r, "allreduce: the ranks were never grouped (group_init not called)");
    size_t n = (size_t)c->elems;
    float *sum = scratch(r, n);
    if (!sum) return rfail(r, "allreduce: out of memory");
    g->ptr[r->rank] = buf;
    if (group_barrier(g)) return rfail(r, "allreduce abandoned: another rank failed");
    memcpy(sum, g->ptr[0], n * sizeof *sum);
    for (int q = 1; q < r->tp; q++) {
        const float *src = g->ptr[q];
        for (size_t i = 0; i < n; i++) sum[i] += src[i];
    }
    if (group_barrier(g)) return rfail(r, "allreduce abandoned: another rank failed");
    memcpy(buf, sum, n * sizeof *sum);
    return 0;
}

static int cpu_allgather(BackendRank *r, const CollArgs *c, void *src, void *dst) {
    int64_t rows = c->rows, cols = c->cols, t = r->tp;
    float *tmp = scratch(r, (size_t)(rows * cols * t));
    if (!tmp) return rfail(r, "allgather: out of memory");
    CpuGroup *g = r->group;
    if (t > 1 && !g) return rfail(r, "allgather: the ranks were never grouped (group_init not called)");
    if (t > 1) {
        g->ptr[r->rank] = src;
        if (group_barrier(g)) return rfail(r, "allgather abandoned: another rank failed");
    }
    for (int q = 0; q < t; q++) {
        const float *s = t > 1 ? g->ptr[q] : src;
        for (int64_t i = 0; i < rows; i++)
            memcpy(tmp + i * cols * t + q * cols, s + i * c->ld_src, (size_t)cols * sizeof *tmp);
    }
    if (t > 1 && group_barrier(g)) return rfail(r, "allgather abandoned: another rank failed");
    float *d = dst;
    for (int64_t i = 0; i < rows; i++) memcpy(d + i * c->ld_dst, tmp + i * cols * t, (size_t)(cols * t) * sizeof *d);
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
        float *m = r->m[i], *v = r->v[i];
        const float wd = (float)(p->weight_decay * pp->decay);
        int64_t n = pp->rows * pp->cols;
        int nt = n < 65536 ? 1 : cpu_threads();
        #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (int64_t j = 0; j < n; j++) {
            float gj = g[j] * gs;
            float mj = b1 * m[j] + a1 * gj;
            float vj = b2 * v[j] + a2 * gj * gj;
            m[j] = mj; v[j] = vj;
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
        for (int q = 0; q < pp->nparts; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (pt->rep && r->rank != 0) continue;
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            for (int64_t a = 0; a < h; a++) {
                const float *x = g + (lr + a) * pp->cols + lc;
                double l[8] = {0};
                int64_t b = 0;
                for (; b + 8 <= w; b += 8)
                    for (int k = 0; k < 8; k++) l[k] += (double)x[b + k] * x[b + k];
                for (; b < w; b++) l[b & 7] += (double)x[b] * x[b];
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
    memcpy(host, slot == 1 ? r->m[param] : r->v[param], (size_t)(pp->rows * pp->cols) * sizeof *host);
    return 0;
}

static int cpu_state_from_host(BackendRank *r, int param, int slot, const float *host) {
    const PlanParam *pp = &r->p->params[param];
    if (slot != 1 && slot != 2) return rfail(r, "state_from_host: slot must be 1 (m) or 2 (v)");
    memcpy(slot == 1 ? r->m[param] : r->v[param], host, (size_t)(pp->rows * pp->cols) * sizeof *host);
    return 0;
}

static const char *cpu_last_error(BackendRank *r) { return r->err; }

const Backend backend_cpu = {
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
};
