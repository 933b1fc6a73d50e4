/* planner.c: the search behind `boost plan`: enumerates the grids of a model on N GPUs, bounds
 * each from below with closed forms (time and memory per rank, from small generated models of one
 * and two layers), and generates and prices the candidates the bounds cannot rule out, fastest
 * bound first, until no bound is below the N-th best priced time. docs/planner.md is its prose. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/dp.h"         // defines: dp_zero_bytes_per_param, dp_zero2_live_grad_bytes
#include "gen/planner.h"
#include "gen/factor.h"
#include "gen/pipeline.h"

/* stage graphs may price a little under the whole graph: keep the bounds below */
#define BOUND_SLACK 0.99
/* a stage's arena per slot is at least 0.8 x its layers' arena increments */
#define ACT_SLACK 0.8
#define MAX_MICRO 32

void planner_opts_default(PlanOpts *o) {
    memset(o, 0, sizeof *o);
    o->top = 5;
    o->workspace_bytes = 1.5 * 1073741824.0; /* CUDA context, cuBLAS workspace, NCCL buffers */
}

int planner_zero2_shards(const PlanOpts *o, int ga, int pp, int ep) {
    /* at pp 1 the reduce-scatters run on every micro-batch (gen/dp.h dp_zero2_every_micro) */
    if (o->backend == PLAN_BACKEND_CPU) return ga <= 1 || pp <= 1;
    return project_cuda_zero2_shards(ga, pp, ep);
}

double planner_state_bytes_per_param(const PlanOpts *o, const PlanCand *cd) {
    int how = o->backend == PLAN_BACKEND_CPU ? ZERO2_FULL_AND_SHARD : ZERO2_AS_ZERO1;
    int shards_only = planner_zero2_shards(o, cd->ga, cd->pp, cd->ep);
    return dp_zero_bytes_per_param(cd->zero, cd->dp, shards_only, how);
}

/* What the closed forms of one (layout, tp, micro-batch, checkpoint, ep) know: one micro-batch's
 * forward + backward through the whole model (s), its local parameters, one layer's activations. */
typedef struct {
    int layout, tp, mb, ckpt, ep;
    int ok;
    double w_s, params, act_layer;
    char why[200];
} Key;

static int model_uniform(const Model *m) {
    for (int l = 1; l < m->layers; l++) {
        if (m->moe_layer[l] != m->moe_layer[0]) return 0;
        for (int p = 0; p < NPROJ; p++)
            if (memcmp(&m->proj[l][p], &m->proj[0][p], sizeof m->proj[0][p])) return 0;
    }
    return 1;
}

/* Price one micro-batch of the key's run with `layers` layers at pp = 1. */
static int key_project(const Run *base, const Key *k, int layers, const CostConsts *c,
                       const GemmRates *rates, Projection *p, char *why, size_t n) {
    Run *r = malloc(sizeof *r);
    if (!r) {
        snprintf(why, n, "out of memory");
        return 1;
    }
    *r = *base;
    r->model.layers = layers;
    r->layout = k->layout;
    r->tp = k->tp;
    r->pp = 1;
    r->pp_virtual = 1;
    r->pp_nstages = 0;
    r->ep = k->ep;
    r->dp = k->ep;
    r->zero = 0;
    r->checkpoint = k->ckpt;
    r->micro_batch = k->mb;
    r->grad_accum = 1;
    int rc = project_layout(r, k->layout, c, rates, p, why, n);
    free(r);
    return rc;
}

static void key_build(const Run *base, Key *k, const CostConsts *c, const GemmRates *rates) {
    int L = base->model.layers;
    Projection p1, p2;
    if (!model_uniform(&base->model) || L <= 2) {
        if (key_project(base, k, L, c, rates, &p1, k->why, sizeof k->why)) return;
        k->w_s = p1.stage_s;
        k->params = p1.params_local;
        k->act_layer = p1.act_bytes / L * 0.5;
        k->ok = 1;
        return;
    }
    if (key_project(base, k, 1, c, rates, &p1, k->why, sizeof k->why)) return;
    if (key_project(base, k, 2, c, rates, &p2, k->why, sizeof k->why)) return;
    k->w_s = p1.stage_s + (L - 1) * (p2.stage_s - p1.stage_s);
    k->params = p1.params_local + (L - 1) * (p2.params_local - p1.params_local);
    k->act_layer = p2.act_bytes - p1.act_bytes > 0 ? p2.act_bytes - p1.act_bytes : 0;
    k->ok = 1;
}

typedef struct {
    Key *k;
    int n, cap;
} Keys;

static Key *key_get(Keys *ks, const Run *base, const PlanCand *cd, const CostConsts *c,
                    const GemmRates *rates) {
    for (int i = 0; i < ks->n; i++) {
        Key *k = &ks->k[i];
        if (k->layout == cd->layout && k->tp == cd->tp && k->mb == cd->mb && k->ckpt == cd->ckpt &&
            k->ep == cd->ep)
            return k;
    }
    if (ks->n == ks->cap) {
        int cap = ks->cap ? 2 * ks->cap : 32;
        Key *grown = realloc(ks->k, cap * sizeof *grown);
        if (!grown) return NULL;
        ks->k = grown;
        ks->cap = cap;
    }
    Key *k = &ks->k[ks->n++];
    memset(k, 0, sizeof *k);
    k->layout = cd->layout;
    k->tp = cd->tp;
    k->mb = cd->mb;
    k->ckpt = cd->ckpt;
    k->ep = cd->ep;
    key_build(base, k, c, rates);
    return k;
}

/* ---- enumeration -------------------------------------------------------------------------- */

static int lowrank_model(const Model *m) { return factorization_lowrank(model_factorization(m)); }

/* tp splits every dimension the layouts shard (the spec loader's check_run is the full rule; the
 * generator refuses the rest, and such candidates end PC_INVALID). */
static int tp_ok(const Model *m, int layout, int tp) {
    if (m->heads % tp || m->kv_heads % tp || m->ffn % tp || m->vocab % tp || m->hidden % tp)
        return 0;
    if (m->moe_experts && m->moe_ffn % tp) return 0;
    if (layout == LAYOUT_NAIVE)
        for (int l = 0; l < m->layers; l++)
            for (int p = 0; p < NPROJ; p++)
                if (m->proj[l][p].rank % tp) return 0;
    return 1;
}

/* Every candidate of base on gpus GPUs into out (NULL: count only). */
static int enumerate(const Run *base, const PlanOpts *o, int gpus, PlanCand *out) {
    const Model *m = &base->model;
    int layouts[2], nl = 0;
    if (!lowrank_model(m))
        layouts[nl++] = LAYOUT_MEGATRON;
    else {
        layouts[nl++] = LAYOUT_BTP;
        /* naive: when the factorization runs in it (usv's core does not) and no MoE */
        if (!m->moe_experts && factorization_unsplit(model_factorization(m), LAYOUT_NAIVE) < 0)
            layouts[nl++] = LAYOUT_NAIVE;
    }
    int64_t seqs = base->seq > 0 ? o->global_tokens / base->seq : 0;
    int per_node = base->gpu.gpus_per_node > 0 ? base->gpu.gpus_per_node : 1, n = 0;
    for (int li = 0; li < nl; li++)
        for (int tp = 1; tp <= per_node && tp <= gpus; tp *= 2) {
            if (gpus % tp || !tp_ok(m, layouts[li], tp)) continue;
            for (int pp = 1; pp <= m->layers && pp <= gpus / tp; pp++) {
                if ((gpus / tp) % pp) continue;
                int dp = gpus / tp / pp;
                if (seqs <= 0 || seqs % dp) continue;
                int64_t per = seqs / dp;
                for (int mb = 1; mb <= MAX_MICRO; mb *= 2) {
                    if (per % mb || (double)mb * base->seq > (1 << 24)) continue;
                    int64_t ga = per / mb;
                    if (ga > 65536 || (pp > 1 && ga < pp)) continue;
                    for (int v = 1; v <= 2; v++) {
                        if (v > 1 && (pp < 2 || m->layers % (pp * v) || ga % pp)) continue;
                        for (int ep = 1; ep <= dp; ep++) {
                            if (ep > 1 && (!m->moe_experts || dp % ep || m->moe_experts % ep ||
                                           layouts[li] != LAYOUT_BTP))
                                continue;
                            /* zero=2 where the backend keeps only gradient shards (cpu: also
                               where it accumulates a shard beside the full-size gradients) */
                            int zmax = dp > 1 && ep == 1 ? 2 : 0;
                            if (zmax == 2 && o->backend == PLAN_BACKEND_CUDA &&
                                !planner_zero2_shards(o, (int)ga, pp, ep))
                                zmax = 1;
                            for (int zero = 0; zero <= zmax; zero++)
                                for (int ck = 0; ck <= (layouts[li] == LAYOUT_BTP); ck++) {
                                    if (out) {
                                        PlanCand *c = &out[n];
                                        memset(c, 0, sizeof *c);
                                        c->layout = layouts[li];
                                        c->tp = tp;
                                        c->pp = pp;
                                        c->v = v;
                                        c->dp = dp;
                                        c->ep = ep;
                                        c->zero = zero;
                                        c->ckpt = ck ? CKPT_LOWRANK : CKPT_NONE;
                                        c->mb = mb;
                                        c->ga = (int)ga;
                                    }
                                    n++;
                                }
                        }
                    }
                }
            }
        }
    return n;
}

int planner_count_grids(const Run *base, const PlanOpts *o, int gpus) {
    return enumerate(base, o, gpus, NULL);
}

void planner_run(const Run *base, const PlanCand *c, Run *out) {
    *out = *base;
    out->layout = c->layout;
    out->tp = c->tp;
    out->pp = c->pp;
    out->pp_virtual = c->v;
    out->pp_nstages = 0;
    out->dp = c->dp;
    out->ep = c->ep;
    out->zero = c->zero;
    out->checkpoint = c->ckpt;
    out->micro_batch = c->mb;
    out->grad_accum = c->ga;
}

/* ---- bounds and pricing ------------------------------------------------------------------- */

/* Lower bounds of one candidate from its key. The pipeline: rank r cannot start before micro-batch
 * 0 has crossed the stages before it, and its last backward still has to cross them, so
 * T >= m w_r + sum_{s<r} w_s for every r; the split minimising the largest of these makes them
 * equal, T >= W / (1 - (1 - 1/m)^pp). Interleaved: T >= max(m W / pp, W). Plus the optimizer over
 * the smallest share of the parameters, P / pp; dp reduction and sends >= 0. */
static void bound(const Run *base, const Key *k, const CostConsts *c, const PlanOpts *o,
                  PlanCand *cd) {
    double W = k->w_s, m = cd->ga, pp = cd->pp, pipe;
    if (cd->pp == 1)
        pipe = m * W;
    else if (cd->v == 1)
        pipe = W / (1 - pow(1 - 1 / m, pp));
    else
        pipe = fmax(m * W / pp, W);
    double optim = hbm_seconds(c, &base->gpu, k->params / pp * c->optim_bytes_per_param);
    /* the dp gradient reduction of the smallest share of the parameters, in one ring (the emitted
       buckets pay more latency), less what the backward can hide: at most one micro-batch's work */
    double dp_s = 0;
    if (cd->dp > 1) {
        const Gpu *g = &base->gpu;
        int in_node =
            (long)cd->tp * cd->pp * cd->dp <= (g->gpus_per_node > 0 ? g->gpus_per_node : 1);
        double bw = c->coll_eff * (in_node ? g->nvlink_gbs : g->net_gbs);
        double alpha = in_node ? g->nvlink_latency_us : g->net_latency_us;
        dp_s = fmax(
            0, allreduce_seconds(k->params / pp * (base->dp_bf16 ? 2 : 4), cd->dp, bw, alpha) - W);
    }
    cd->lb_s = BOUND_SLACK * (pipe + optim + dp_s);
    /* rank 0 holds the passes of its warm-up and one more (gen/pp.c emit_rank): 1F1B min(pp, m)
       micro-batches of L/pp layers; interleaved 2(pp-1) + (v-1)pp + 1 chunk passes of L/(pp v) */
    int v = cd->v, warm = v == 1 ? cd->pp - 1 : 2 * (cd->pp - 1) + (v - 1) * cd->pp;
    long passes = warm + 1 < (long)cd->ga * v ? warm + 1 : (long)cd->ga * v;
    int layers_per_pass = base->model.layers / (cd->pp * v);
    cd->mem_lb = k->params / pp * planner_state_bytes_per_param(o, cd) +
                 ACT_SLACK * passes * layers_per_pass * k->act_layer + o->workspace_bytes;
}

/* The cuda backend's zero=2 at grad_accum 1: the full-size gradients live at once (gen/dp.c), from
 * the candidate's generated schedule (project_layout does not keep it). -1 with why on failure. */
static int64_t zero2_live_grads(const Run *r, const PlanCand *cd, char *why, size_t n) {
    int status = 0;
    Graph *g = graph_build(r, cd->layout, cd->layout == LAYOUT_BTP ? cd->ckpt : CKPT_NONE, why, n,
                           &status);
    if (!g) return -1;
    int64_t live = dp_zero2_live_grad_bytes(g);
    if (live < 0) snprintf(why, n, "out of memory");
    graph_free(g);
    return live;
}

static void price(const Run *base, const PlanOpts *o, const CostConsts *c, const GemmRates *rates,
                  double flops_tok, PlanCand *cd) {
    Run *r = malloc(sizeof *r);
    if (!r) {
        cd->state = PC_INVALID;
        snprintf(cd->why, sizeof cd->why, "out of memory");
        return;
    }
    planner_run(base, cd, r);
    Projection p;
    char why[1024];
    if (project_layout(r, cd->layout, c, rates, &p, why, sizeof why)) {
        cd->state = PC_INVALID;
        snprintf(cd->why, sizeof cd->why, "%.199s", why);
        free(r);
        return;
    }
    /* cuda zero=2: none of the dp reduction hidden, as `boost project` prices it */
    project_backend_dp_wait(r, o->backend, &p);
    int cuda_zero2 = o->backend == PLAN_BACKEND_CUDA && cd->zero == 2 && cd->dp > 1;
    double seconds = p.seconds;
    double tokens = (double)cd->mb * cd->ga * cd->dp * base->seq;
    cd->seconds = seconds;
    cd->tok_s_gpu = tokens / seconds / o->gpus;
    cd->mfu = flops_tok * tokens / (o->gpus * base->gpu.bf16_tflops * 1e12 * seconds);
    cd->comm_share = seconds > 0 ? p.comm_s / seconds : 0;
    cd->weight_bytes = p.params_local * planner_state_bytes_per_param(o, cd);
    if (cuda_zero2) {
        int64_t live = zero2_live_grads(r, cd, why, sizeof why);
        if (live < 0) {
            cd->state = PC_INVALID;
            snprintf(cd->why, sizeof cd->why, "%.199s", why);
            free(r);
            return;
        }
        cd->weight_bytes += (double)live;
    }
    cd->act_bytes = p.act_bytes;
    cd->mem_bytes = cd->weight_bytes + cd->act_bytes + o->workspace_bytes;
    cd->state = cd->mem_bytes <= base->gpu.memory_gb * 1073741824.0 ? PC_FITS : PC_TOO_BIG;
    free(r);
}

/* Model FLOPs per token, forward + backward: the GEMMs of the tp = 1 schedule without recompute
 * (extrapolated from one and two layers like the keys), plus causal attention, 6 s d per layer
 * (PaLM's 12 s d per layer, halved by the causal mask). */
static double model_flops_per_token(const Run *base, const CostConsts *c, const GemmRates *rates) {
    int layout = lowrank_model(&base->model) ? LAYOUT_BTP : LAYOUT_MEGATRON, L = base->model.layers;
    Key k = {layout, 1, 1, CKPT_NONE, 1, 0, 0, 0, 0, ""};
    Projection p1, p2;
    double f;
    if (!model_uniform(&base->model) || L <= 2) {
        if (key_project(base, &k, L, c, rates, &p1, k.why, sizeof k.why)) return 0;
        f = p1.gemm_flops;
    } else {
        if (key_project(base, &k, 1, c, rates, &p1, k.why, sizeof k.why)) return 0;
        if (key_project(base, &k, 2, c, rates, &p2, k.why, sizeof k.why)) return 0;
        f = p1.gemm_flops + (L - 1) * (p2.gemm_flops - p1.gemm_flops);
    }
    return f / base->seq + 6.0 * base->seq * base->model.hidden * L;
}

/* The search order: by time bound, then by index (a candidate's place in the enumeration). */
typedef struct { double lb; int i; } Order;
static int by_bound(const void *a, const void *b) {
    const Order *x = a, *y = b;
    if (x->lb != y->lb) return x->lb < y->lb ? -1 : 1;
    return x->i - y->i;
}
/* The result order: seconds, then memory, then index. */
static int better(const PlanCand *c, int a, int b) { /* candidate a before b */
    if (c[a].seconds != c[b].seconds) return c[a].seconds < c[b].seconds;
    if (c[a].mem_bytes != c[b].mem_bytes) return c[a].mem_bytes < c[b].mem_bytes;
    return a < b;
}

static void keep_best(PlanResult *res, int top, int i) {
    int pos = res->nbest;
    while (pos > 0 && better(res->c, i, res->best[pos - 1])) pos--;
    if (pos >= top) return;
    int end = res->nbest < top ? res->nbest : top - 1;
    for (int j = end; j > pos; j--) res->best[j] = res->best[j - 1];
    res->best[pos] = i;
    if (res->nbest < top) res->nbest++;
}

/* The candidate needing the least memory: priced where priced, else its bound. */
static void find_min_mem(PlanResult *res) {
    for (int i = 0; i < res->n; i++) {
        const PlanCand *cd = &res->c[i];
        double mem = cd->state == PC_FITS || cd->state == PC_TOO_BIG ? cd->mem_bytes : cd->mem_lb;
        if (cd->state == PC_INVALID) continue;
        if (res->min_mem < 0) {
            res->min_mem = i;
            continue;
        }
        const PlanCand *b = &res->c[res->min_mem];
        double bm = b->state == PC_FITS || b->state == PC_TOO_BIG ? b->mem_bytes : b->mem_lb;
        if (mem < bm) res->min_mem = i;
    }
}

/* ---- pricing side by side ----------------------------------------------------------------- */

/* Copies of candidates priced by several threads, each taking the next index. */
typedef struct {
    const Run *base;
    const PlanOpts *o;
    const CostConsts *c;
    const GemmRates *rates;
    double flops_tok;
    PlanCand *cand; /* [n] copies, priced in place */
    int n;
    int next; /* the next index to price (taken atomically) */
} PriceBatch;

static void *price_worker(void *arg) {
    PriceBatch *b = arg;
    for (int i; (i = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED)) < b->n;)
        price(b->base, b->o, b->c, b->rates, b->flops_tok, &b->cand[i]);
    return NULL;
}

/* b's candidates priced by up to `threads` threads, this one among them (a thread that cannot
 * start leaves its share to the others). The generator and the cost model keep no state outside
 * their arguments, so candidates price independently. */
static void price_batch(PriceBatch *b, int threads) {
    pthread_t tid[PLAN_MAX_THREADS];
    int started = 0;
    b->next = 0;
    for (int t = 1; t < threads && t < b->n; t++)
        if (pthread_create(&tid[started], NULL, price_worker, b) == 0) started++;
    price_worker(b);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

static int plan_threads(const PlanOpts *o) {
    return o->threads < 1 ? 1 : o->threads > PLAN_MAX_THREADS ? PLAN_MAX_THREADS : o->threads;
}

/* Candidate i's time bound is above the fastest priced time: pricing it cannot change the best. */
static int beyond_best(const PlanResult *res, int i) {
    return res->nbest > 0 && res->c[i].lb_s > res->c[res->best[0]].seconds;
}

/* The candidates order[0..m) priced fastest bound first until a bound is above the best priced
 * time (brute: every one). They are priced `threads` at a time and taken in order with the same
 * stopping rule as one at a time, so the outcome does not depend on the thread count (a candidate
 * priced past the stop is dropped). 0, or 1 when out of memory. */
static int price_in_order(PlanResult *res, const Order *order, int m, const Run *base,
                          const PlanOpts *o, const CostConsts *c, const GemmRates *rates) {
    int threads = plan_threads(o);
    PriceBatch b = {base, o, c, rates, res->flops_per_token, NULL, 0, 0};
    b.cand = malloc(threads * sizeof *b.cand);
    if (!b.cand) return 1;
    int j = 0, stop = 0;
    while (j < m && !stop) {
        for (b.n = 0; b.n < threads && j + b.n < m; b.n++) {
            if (!o->brute && beyond_best(res, order[j + b.n].i)) break;
            b.cand[b.n] = res->c[order[j + b.n].i];
        }
        stop = b.n == 0;
        price_batch(&b, threads);
        for (int q = 0; q < b.n && !stop; q++, j++) {
            if ((stop = !o->brute && beyond_best(res, order[j].i))) break;
            PlanCand *cd = &res->c[order[j].i];
            *cd = b.cand[q];
            res->generated++;
            if (cd->state == PC_FITS)
                keep_best(res, o->top, order[j].i);
            else if (cd->state == PC_TOO_BIG)
                res->too_big++;
            else
                res->invalid++;
        }
    }
    for (; j < m; j++) {
        res->c[order[j].i].state = PC_PRUNED_TIME;
        res->pruned_time++;
    }
    free(b.cand);
    return 0;
}

/* GPU counts near n (n/2 .. 2n) that have a grid, into buf. */
static void counts_that_work(const Run *base, const PlanOpts *o, char *buf, size_t len) {
    int found = 0;
    size_t at = 0;
    buf[0] = 0;
    for (int d = 1; d <= o->gpus && found < 8; d++)
        for (int s = -1; s <= 1; s += 2) {
            int g = o->gpus + s * d;
            if (g < 1 || g > 2 * o->gpus || g < o->gpus / 2 || found >= 8) continue;
            if (planner_count_grids(base, o, g) > 0) {
                at += snprintf(buf + at, at < len ? len - at : 0, "%s%d", found ? ", " : "", g);
                found++;
            }
        }
    if (!found) snprintf(buf, len, "none between %d and %d", o->gpus / 2, 2 * o->gpus);
}

int planner_search(const Run *base, const PlanOpts *o, const CostConsts *c, const GemmRates *rates,
                   PlanResult *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    res->min_mem = -1;
    if (o->gpus < 1 || o->top < 1 || o->top > PLAN_MAX_TOP) {
        snprintf(err, errlen, "plan: --gpus must be at least 1 and --top in 1..%d", PLAN_MAX_TOP);
        return 2;
    }
    if (base->seq < 1 || o->global_tokens < base->seq || o->global_tokens % base->seq) {
        snprintf(
            err, errlen,
            "plan: the global batch (%lld tokens) must be a whole number of sequences of %d tokens",
            (long long)o->global_tokens, base->seq);
        return 2;
    }
    int n = enumerate(base, o, o->gpus, NULL);
    if (n == 0) {
        char works[200];
        counts_that_work(base, o, works, sizeof works);
        snprintf(
            err, errlen,
            "plan: no grid of %s on %d GPUs divides a global batch of %lld sequences (tp within a "
            "node of %d dividing heads, pp up to %d layers, dp dividing the sequences); GPU counts "
            "that work: %s",
            base->model.name, o->gpus, (long long)(o->global_tokens / base->seq),
            base->gpu.gpus_per_node, base->model.layers, works);
        return 2;
    }
    res->c = calloc(n, sizeof *res->c);
    Order *order = malloc(n * sizeof *order);
    Keys ks = {0};
    if (!res->c || !order) {
        free(order);
        free(res->c);
        res->c = NULL;
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    res->n = enumerate(base, o, o->gpus, res->c);
    res->capacity_bytes = base->gpu.memory_gb * 1073741824.0;
    res->flops_per_token = model_flops_per_token(base, c, rates);
    int m = 0;
    for (int i = 0; i < n; i++) {
        PlanCand *cd = &res->c[i];
        Key *k = key_get(&ks, base, cd, c, rates);
        if (!k) {
            free(order);
            free(ks.k);
            snprintf(err, errlen, "out of memory");
            return 1;
        }
        if (!k->ok) {
            cd->state = PC_INVALID;
            snprintf(cd->why, sizeof cd->why, "%s", k->why);
            res->invalid++;
            continue;
        }
        bound(base, k, c, o, cd);
        if (!o->brute && cd->mem_lb > res->capacity_bytes) {
            cd->state = PC_PRUNED_MEM;
            res->pruned_mem++;
            continue;
        }
        order[m++] = (Order){cd->lb_s, i};
    }
    res->keys = ks.n;
    free(ks.k);
    qsort(order, m, sizeof *order, by_bound);
    int rc = price_in_order(res, order, m, base, o, c, rates);
    free(order);
    if (rc) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    find_min_mem(res);
    return 0;
}

void planner_free(PlanResult *res) {
    free(res->c);
    memset(res, 0, sizeof *res);
}

void planner_write_spec(const Run *base, const PlanCand *c, const char *cluster, FILE *f) {
    fprintf(
        f,
        "-- %s on %d GPUs%s%s: the fastest feasible layout found by `boost plan` (cost model:\n"
        "-- %.3f s/iteration, %.0f tokens/s per GPU, MFU %.1f%%, %.1f GB per rank). Train it with\n"
        "-- `boost train THIS_FILE`; `boost project THIS_FILE` prices it again.\n",
        base->model.name, c->tp * c->pp * c->dp, cluster ? " of cluster " : "",
        cluster ? cluster : "", c->seconds, c->tok_s_gpu, 100 * c->mfu,
        c->mem_bytes / 1073741824.0);
    fprintf(f, "return run {\n  model = \"%s\",\n  gpu = \"%s\",\n", base->model.name,
            base->gpu.name);
    fprintf(f, "  parallel = { tp = %d, pp = %d, dp = %d, layout = \"%s\"", c->tp, c->pp, c->dp,
            layout_name(c->layout));
    if (c->ep > 1) fprintf(f, ", ep = %d", c->ep);
    if (c->zero) fprintf(f, ", zero = %d", c->zero);
    if (c->v > 1) fprintf(f, ", virtual_stages = %d", c->v);
    fprintf(f,
            " },\n  features = { online_rmsnorm = %s, group_linears = %s, checkpoint = \"%s\" },\n",
            base->online_rmsnorm ? "true" : "false", base->group_linears ? "true" : "false",
            c->ckpt == CKPT_LOWRANK ? "lowrank" : "none");
    fprintf(f,
            "  train = { micro_batch = %d, grad_accum = %d, seq = %d, lr = %.9g, min_lr = %.9g, "
            "warmup = %d, "
            "steps = %d },\n}\n",
            c->mb, c->ga, base->seq, base->lr, base->min_lr, base->warmup, base->steps);
}
