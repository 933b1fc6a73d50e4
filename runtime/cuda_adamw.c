/* cuda_adamw.c: the CUDA backend's optimizer step (multi-tensor AdamW, ZeRO-1's sharded update) and
 * the gradient's sum of squares for clipping (replicated blocks counted once, shards, experts). */
#include "runtime/cuda_internal.h"

int cuda_adamw(BackendRank *r, float lr, float grad_scale, int t_step) {
    if (ctx_set(r, "the AdamW update")) return -1;
    const Plan *p = r->p;
    float b1 = (float)p->beta1, b2 = (float)p->beta2, eps = (float)p->adam_eps;
    float bias1 = (float)(1.0 - pow(p->beta1, t_step)), bias2 = (float)(1.0 - pow(p->beta2, t_step));
    /* zero=1: every shard in one launch */
    if (r->zero && !r->gshard && r->adam_nchunks > 0 && get_fn(KERNEL_ADAMW_SHARDED)) {
        float wd = (float)p->weight_decay;
        void *args[] = {&r->master, &r->params, &r->grads, &r->adam_m, &r->adam_v, &r->adam_chunks,
                        &lr, &b1, &b2, &eps, &wd, &grad_scale, &bias1, &bias2};
        if (launch(r, KERNEL_ADAMW_SHARDED, r->adam_nchunks, 256, 0, args)) return -1;
        return after_step(r, "adamw");
    }
    if (!r->zero && r->adam_nchunks > 0 && get_fn(KERNEL_ADAMW_MULTI)) {   /* every parameter in one launch */
        float wd = (float)p->weight_decay;
        void *args[] = {&r->master, &r->params, &r->grads, &r->adam_m, &r->adam_v, &r->adam_chunks,
                        &lr, &b1, &b2, &eps, &wd, &grad_scale, &bias1, &bias2};
        if (launch(r, KERNEL_ADAMW_MULTI, r->adam_nchunks, 256, 0, args)) return -1;
        return after_step(r, "adamw");
    }
    /* a kernels.cu from before the multi-tensor kernels, or zero=2 (gradient shards in gshard) */
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        int64_t lo, hi, mi, si;
        own_range(r, pp->rows * pp->cols, &lo, &hi);   /* zero=1: this dp rank's shard */
        state_index(r, i, lo, lo, &mi, &si);
        int64_t off = r->param_off[i] + lo;
        long long n = hi - lo;
        if (n <= 0) continue;
        CUdeviceptr master = r->master + mi * 4, m = r->adam_m + si * 4, v = r->adam_v + si * 4;
        CUdeviceptr grad = r->gshard ? r->gshard + si * 4 : r->grads + off * 4;
        CUdeviceptr param = p->tensors[pp->tensor].dtype == PDT_BF16 ? r->params + off * 2 : 0;
        float wd = pp->decay ? (float)p->weight_decay : 0.f;
        void *args[] = {&master, &param, &grad, &m, &v, &n, &lr, &b1, &b2, &eps, &wd, &grad_scale, &bias1, &bias2};
        int64_t blocks = (n + 255) / 256;
        if (blocks > 4096) blocks = 4096;
        if (launch(r, "adamw_fp32_master_bf16", blocks, 256, 0, args)) return -1;
    }
    return after_step(r, "adamw");   /* in stream order: the next step's work needs no host wait */
}

/* Sum of squares of n fp32 values at x (device), added in double on the host in a fixed order. */
static int dev_sumsq(BackendRank *r, CUdeviceptr x, long long n, double *out) {
    CUdeviceptr part = r->scratch;
    void *args[] = {&x, &n, &part};
    if (launch(r, "boost_sumsq_fp32", SUMSQ_BLOCKS, 256, 0, args)) return -1;
    float h[SUMSQ_BLOCKS];
    if (read_back(r, h, part, sizeof h, "the gradient norm")) return -1;
    double s = 0;
    for (int i = 0; i < SUMSQ_BLOCKS; i++) s += h[i];
    *out = s;
    return 0;
}

static int sq_blocks(int64_t n) { return n >= (int64_t)SUMSQ_BLOCKS * 256 ? SUMSQ_BLOCKS : (int)((n + 255) / 256); }

/* zero=1: the sum of squares over this rank's ranges (sq_ranges), on the device when their partial
 * sums fit the scratch, else from a read-back of the gradients. */
static double zero_sq_norm(BackendRank *r) {
    int max = (int)(r->scratch_bytes / (SUMSQ_BLOCKS * sizeof(float)));
    double total = 0;
    if (r->nsq <= max) {   /* range i's partial sums at scratch[i*SUMSQ_BLOCKS ..], as many as its blocks */
        for (int i = 0; i < r->nsq; i++) {
            CUdeviceptr x = (r->gshard ? r->gshard : r->grads) + r->sq_off[i] * 4;
            CUdeviceptr part = r->scratch + (size_t)i * SUMSQ_BLOCKS * sizeof(float);
            long long n = r->sq_n[i];
            void *args[] = {&x, &n, &part};
            if (launch(r, "boost_sumsq_fp32", sq_blocks(n), 256, 0, args)) return NAN;
        }
        float *h = malloc((size_t)(r->nsq ? r->nsq : 1) * SUMSQ_BLOCKS * sizeof *h);
        if (!h || (r->nsq && read_back(r, h, r->scratch, (size_t)r->nsq * SUMSQ_BLOCKS * sizeof *h, "the gradient norm"))) {
            free(h);
            return NAN;
        }
        for (int i = 0; i < r->nsq; i++) {
            double part = 0;
            for (int b = 0; b < sq_blocks(r->sq_n[i]); b++) part += h[(size_t)i * SUMSQ_BLOCKS + b];
            total += r->sq_sign[i] * part;
        }
        free(h);
        return total < 0 ? 0 : total;
    }
    int64_t ng = r->gshard ? r->nstate : r->nelems;   /* zero=2: the shards */
    float *g = malloc((size_t)ng * sizeof *g);
    CUdeviceptr src = r->gshard ? r->gshard : r->grads;
    if (!g || read_back(r, g, src, (size_t)ng * 4, "the gradients for their norm")) {
        free(g);
        return NAN;
    }
    for (int i = 0; i < r->nsq; i++) {
        double part = 0;
        for (int64_t j = 0; j < r->sq_n[i]; j++) part += (double)g[r->sq_off[i] + j] * g[r->sq_off[i] + j];
        total += r->sq_sign[i] * part;
    }
    free(g);
    return total < 0 ? 0 : total;
}

/* Expert parallelism, dp ranks 1..ep-1 of the first ep group (the executor asks only those and dp
 * rank 0): the expert params' gradients, which this ep rank alone holds there (dp rank 0 counts
 * everything else). A replicated (rep=1) block counts on tp rank 0 only, summed on the host. */
static double ep_sq_norm(BackendRank *r) {
    const Plan *p = r->p;
    double total = 0;
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        int expert = 0, rep = 0;
        for (int q = 0; q < pp->nparts; q++) {
            expert |= p->parts[pp->first_part + q].ep >= 0;
            rep |= p->parts[pp->first_part + q].rep;
        }
        if (!expert) continue;
        if (!rep || r->rank == 0) {
            double x = 0;
            if (dev_sumsq(r, r->grads + r->param_off[i] * 4, (long long)(pp->rows * pp->cols), &x)) return NAN;
            total += x;
            continue;
        }
        float *g = malloc((size_t)(pp->rows * pp->cols) * sizeof *g);
        if (!g || read_back(r, g, r->grads + r->param_off[i] * 4, (size_t)(pp->rows * pp->cols) * 4, pp->name)) {
            free(g);
            return NAN;
        }
        for (int q = 0; q < pp->nparts; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (pt->rep || pt->ep < 0) continue;
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            for (int64_t a = 0; a < h; a++)
                for (int64_t b = 0; b < w; b++) {
                    double v = g[(lr + a) * pp->cols + lc + b];
                    total += v * v;
                }
        }
        free(g);
    }
    return total;
}

double cuda_grad_sq_norm(BackendRank *r) {
    if (ctx_set(r, "the gradient norm")) return NAN;
    if (r->zero) return zero_sq_norm(r);
    if (r->ep > 1 && r->dp_rank > 0) return ep_sq_norm(r);
    const Plan *p = r->p;
    double total = 0;
    if (r->nrep > 0) {   /* all grads, then each replicated range, into scratch; one read-back */
        int nr = 1 + r->nrep;
        for (int i = 0; i < nr; i++) {
            CUdeviceptr x = i ? r->grads + r->rep_off[i - 1] * 4 : r->grads;
            long long n = i ? (long long)r->rep_n[i - 1] : (long long)r->nelems;
            CUdeviceptr part = r->scratch + (size_t)i * SUMSQ_BLOCKS * sizeof(float);
            void *args[] = {&x, &n, &part};
            if (launch(r, "boost_sumsq_fp32", SUMSQ_BLOCKS, 256, 0, args)) return NAN;
        }
        float *h = malloc((size_t)nr * SUMSQ_BLOCKS * sizeof *h);
        if (!h || read_back(r, h, r->scratch, (size_t)nr * SUMSQ_BLOCKS * sizeof *h, "the gradient norm")) {
            free(h);
            return NAN;
        }
        double rep = 0;
        for (int i = 0; i < SUMSQ_BLOCKS; i++) total += h[i];
        for (int i = SUMSQ_BLOCKS; i < nr * SUMSQ_BLOCKS; i++) rep += h[i];
        free(h);
        total -= rep;
        return total < 0 ? 0 : total;
    }
    if (dev_sumsq(r, r->grads, (long long)r->nelems, &total)) return NAN;   /* padding is zero */
    if (r->rank == 0 || r->nrep == 0) return total;
    /* too many replicated ranges for the scratch: read back and summed on the host */
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        float *g = NULL;
        for (int q = 0; q < pp->nparts; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (!pt->rep) continue;
            if (!g) {
                g = malloc(pp->rows * pp->cols * sizeof *g);
                if (!g || read_back(r, g, r->grads + r->param_off[i] * 4, pp->rows * pp->cols * 4, pp->name)) {
                    free(g);
                    return NAN;
                }
            }
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            for (int64_t a = 0; a < h; a++)
                for (int64_t b = 0; b < w; b++) {
                    double x = g[(lr + a) * pp->cols + lc + b];
                    total -= x * x;
                }
        }
        free(g);
    }
    return total < 0 ? 0 : total;
}
