/* infer_plan.c: the inference pass: from a run, the decode step of the same model with a KV cache
 * (infer.txt beside plan.txt, docs/plan-format.md "Inference plan"), the prefill step that takes
 * the prompt in chunks of up to 32 rows into the same caches (prefill.txt), their kernels, and the report's
 * decode section (per-token collective bytes of every layout, KV-cache memory).
 * The decode step is the forward schedule built for one token (micro_batch 1, seq 1, no
 * checkpointing) in the run's layout and tp, with each rope turned into rope_at (position from the
 * pos buffer) and each attention_fwd into kv_append + attention_decode over the layer's cache
 * [kv_heads/tp][max_seq][head_dim]; max_seq is the run's seq. Parameters are the training plan's. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/gen.h"
#include "gen/factor.h"
#include "gen/ir.h"
#include "gen/infer_plan.h"
#include "gen/pipeline.h"
#include "gen/plan_write.h"

static double kconst(const Op *o, const char *key, double dflt) {
    for (int i = 0; i < o->k.nconst; i++) if (!strcmp(o->k.key[i], key)) return o->k.val[i];
    return dflt;
}
static int kopnd(const Op *o, const char *key) {
    for (int i = 0; i < o->nops; i++) if (!strcmp(o->opkey[i], key)) return i;
    return -1;
}
static void add_op(Op *o, const char *key, Opnd v, int out) {
    snprintf(o->opkey[o->nops], sizeof o->opkey[0], "%s", key);
    o->ops[o->nops] = v;
    if (out) o->out_mask |= 1u << o->nops;
    o->nops++;
}
static Op new_kernel(const Op *from, const char *kind) {
    Op o;
    memset(&o, 0, sizeof o);
    o.kind = OP_KERNEL; o.section = SEC_FWD; o.layer = from->layer;
    memcpy(o.chunk, from->chunk, sizeof o.chunk);
    snprintf(o.k.kind, sizeof o.k.kind, "%s", kind);
    return o;
}

static void touch(Graph *g, Opnd v, int s) {
    if (v.t < 0 || v.t >= g->nt) return;
    Tensor *t = &g->t[v.t];
    if (t->role != TR_ACT && t->role != TR_GRAD) return;
    if (t->live0 < 0 || s < t->live0) t->live0 = s;
    if (s > t->live1) t->live1 = s;
}

/* A persistent buffer past the arena's end, live over the whole step. */
static int persistent(Graph *g, const char *name, int64_t rows, int64_t cols, int dtype) {
    int t = ir_tensor(g, name, rows, cols, dtype, TR_ACT, PS_SHARD1);
    int64_t off = (g->arena_bytes + 255) / 256 * 256;
    g->t[t].offset = off;
    g->arena_bytes = off + rows * cols * (int64_t)ir_dtype_size(dtype);
    g->t[t].live0 = 0;
    g->t[t].live1 = -2;   /* set to the last step below */
    return t;
}

Graph *infer_graph_build(const Run *run, int layout, int rows, int64_t *cache_bytes, char *err, size_t errlen, int *status) {
    if (run->model.moe_experts > 0) {
        snprintf(err, errlen, "model %s has MoE layers: the decode step with a KV cache covers dense models only", run->model.name);
        *status = 2;
        return NULL;
    }
    Run r = *run;
    r.micro_batch = 1; r.seq = rows > 0 ? rows : 1; r.grad_accum = 1; r.dp = 1; r.pp = 1; r.zero = 0;
    Graph *g = graph_build(&r, layout, CKPT_NONE, err, errlen, status);
    if (!g) return NULL;
    const int64_t max_seq = run->seq;
    const int act = ir_act_dtype(g);
    int nf = g->nfwd_steps, n = 0, pos = -1;
    Op *ns = calloc((size_t)(2 * nf + 1), sizeof *ns);
    if (!ns) { graph_free(g); snprintf(err, errlen, "out of memory"); *status = 1; return NULL; }
    pos = persistent(g, "pos", 1, 1, IR_FP32);
    int64_t cache = 0;
    char kerr[256] = "";
    int rc = 0;
    for (int s = 0; s < nf && !rc; s++) {
        Op *o = &g->steps[s];
        if (o->kind == OP_KERNEL && !strcmp(o->k.kind, "rope")) {
            Op x = new_kernel(o, "rope_at");
            add_op(&x, "x", o->ops[kopnd(o, "x")], 1);
            add_op(&x, "pos", opnd(pos, 0, 1), 0);
            k_const(&x, "rows", kconst(o, "rows", 0));
            k_const(&x, "heads", kconst(o, "heads", 0));
            k_const(&x, "head_dim", kconst(o, "head_dim", 0));
            k_const(&x, "ldx", o->ops[kopnd(o, "x")].ld);
            k_const(&x, "theta", kconst(o, "theta", 10000));
            ns[n++] = x;
        } else if (o->kind == OP_KERNEL && !strcmp(o->k.kind, "attention_fwd")) {
            int64_t heads = (int64_t)kconst(o, "heads", 0), kvh = (int64_t)kconst(o, "kv_heads", (double)heads);
            int64_t hd = (int64_t)kconst(o, "head_dim", 0), rows = (int64_t)kconst(o, "batch", 1) * (int64_t)kconst(o, "seq", 1);
            char name[96];
            snprintf(name, sizeof name, "L%d.kcache", o->layer);
            int kc = persistent(g, name, kvh * max_seq, hd, act);
            snprintf(name, sizeof name, "L%d.vcache", o->layer);
            int vc = persistent(g, name, kvh * max_seq, hd, act);
            cache += 2 * kvh * max_seq * hd * (int64_t)ir_dtype_size(act);
            Op a = new_kernel(o, "kv_append");
            add_op(&a, "k", o->ops[kopnd(o, "k")], 0);
            add_op(&a, "v", o->ops[kopnd(o, "v")], 0);
            add_op(&a, "pos", opnd(pos, 0, 1), 0);
            add_op(&a, "kcache", opnd(kc, 0, hd), 1);
            add_op(&a, "vcache", opnd(vc, 0, hd), 1);
            k_const(&a, "rows", (double)rows); k_const(&a, "kv_heads", (double)kvh); k_const(&a, "head_dim", (double)hd);
            k_const(&a, "max_seq", (double)max_seq);
            k_const(&a, "ldk", (double)o->ops[kopnd(o, "k")].ld); k_const(&a, "ldv", (double)o->ops[kopnd(o, "v")].ld);
            ns[n++] = a;
            Op d = new_kernel(o, "attention_decode");
            add_op(&d, "q", o->ops[kopnd(o, "q")], 0);
            add_op(&d, "kcache", opnd(kc, 0, hd), 0);
            add_op(&d, "vcache", opnd(vc, 0, hd), 0);
            add_op(&d, "pos", opnd(pos, 0, 1), 0);
            add_op(&d, "out", o->ops[kopnd(o, "out")], 1);
            k_const(&d, "rows", (double)rows); k_const(&d, "heads", (double)heads); k_const(&d, "kv_heads", (double)kvh);
            k_const(&d, "head_dim", (double)hd); k_const(&d, "max_seq", (double)max_seq);
            k_const(&d, "ldq", (double)o->ops[kopnd(o, "q")].ld); k_const(&d, "ldo", (double)o->ops[kopnd(o, "out")].ld);
            k_const(&d, "scale", kconst(o, "scale", 1.0 / sqrt((double)hd)));
            ns[n++] = d;
        } else {
            ns[n++] = *o;
            continue;
        }
        if (kernel_specialise(&ns[n - 1].k, &r, kerr, sizeof kerr) ||
            (!strcmp(ns[n - 1].k.kind, "attention_decode") && kernel_specialise(&ns[n - 2].k, &r, kerr, sizeof kerr))) {
            snprintf(err, errlen, "inference plan: kernel %s: %s", ns[n - 1].k.kind, kerr);
            rc = 2;
        }
    }
    if (rc) { free(ns); graph_free(g); *status = rc; return NULL; }
    /* the backward is gone: steps are the decode step only; live ranges over it */
    Op *old = g->steps;
    for (int s = nf; s < g->nsteps; s++) free(old[s].members);
    g->steps = ns; g->nsteps = g->nfwd_steps = n; g->caps = 2 * nf + 1;
    free(old);
    for (int i = 0; i < g->nt; i++)
        if ((g->t[i].role == TR_ACT || g->t[i].role == TR_GRAD) && g->t[i].live1 != -2) { g->t[i].live0 = -1; g->t[i].live1 = -1; }
    for (int s = 0; s < n; s++) {
        const Op *o = &g->steps[s];
        if (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM) { touch(g, o->g.A, s); touch(g, o->g.B, s); touch(g, o->g.C, s); }
        for (int i = 0; o->kind == OP_GROUPED_GEMM && i < o->nmembers; i++) {
            touch(g, o->members[i].A, s); touch(g, o->members[i].B, s); touch(g, o->members[i].C, s);
        }
        for (int i = 0; o->kind == OP_KERNEL && i < o->nops; i++) touch(g, o->ops[i], s);
        int rd[3], wr[2], nr, nw;   /* a collective: the operands of its catalog row */
        ir_coll_rw(o, rd, &nr, wr, &nw);
        for (int i = 0; i < nr; i++) touch(g, opnd(rd[i], 0, 0), s);
        for (int i = 0; i < nw; i++) touch(g, opnd(wr[i], 0, 0), s);
        if (o->kind == OP_SAVE && o->marker_tensor >= 0) touch(g, opnd(o->marker_tensor, 0, 0), s);
    }
    for (int i = 0; i < g->nt; i++) if (g->t[i].live1 == -2) g->t[i].live1 = n - 1;
    if (cache_bytes) *cache_bytes = cache;
    *status = 0;
    return g;
}

/* Per-token forward collective bytes of one rank's decode step. */
static int64_t decode_coll_bytes(const Graph *g, int *count) {
    int64_t b = 0;
    *count = 0;
    for (int s = 0; s < g->nsteps; s++)
        if (ir_coll_kind(&g->steps[s]) >= 0) { b += g->steps[s].bytes; (*count)++; }
    return b;
}

int infer_report_write(const Run *run, FILE *f) {
    fprintf(f, "\n## Inference: decode with a KV cache (infer.txt)\n\n");
    int st;
    char err[512];
    int64_t cache = 0;
    Graph *g = infer_graph_build(run, run->layout, 1, &cache, err, sizeof err, &st);
    if (!g) { fprintf(f, "No inference plan: %s.\n", err); return 0; }
    const Model *m = &run->model;
    int64_t per_tok = cache / (run->seq > 0 ? run->seq : 1);
    fprintf(f, "One decode step is the forward schedule for one token (%s layout, tp=%d) over a KV cache of "
               "max_seq = %d positions: per rank and layer two tensors [kv_heads/tp = %d][%d][head_dim = %d].\n\n"
               "| KV cache per rank | bytes |\n|---|---:|\n| all %d layers, %d positions | %" PRId64 " (%.2f MiB) |\n"
               "| per token position | %" PRId64 " |\n| decode-step arena (with the cache) | %" PRId64 " |\n",
            layout_name(run->layout), run->tp, run->seq, m->kv_heads / run->tp, run->seq, m->head_dim, m->layers, run->seq,
            cache, cache / 1048576.0, per_tok, g->arena_bytes);
    graph_free(g);
    fprintf(f, "\nPer-token decode collectives per rank (forward only, every layer plus the head), by layout:\n\n"
               "| layout | collectives | bytes per token | per layer (layer 0) |\n|---|---:|---:|---:|\n");
    static const int order[3] = {LAYOUT_MEGATRON, LAYOUT_NAIVE, LAYOUT_BTP};
    for (int i = 0; i < 3; i++) {
        Graph *h = infer_graph_build(run, order[i], 1, NULL, err, sizeof err, &st);
        if (!h) { fprintf(f, "| %s | - | - | %s |\n", layout_name(order[i]), err); continue; }
        int cnt;
        int64_t b = decode_coll_bytes(h, &cnt), l0 = 0;
        for (int s = 0; s < h->nsteps; s++)
            if (ir_coll_kind(&h->steps[s]) >= 0 && h->steps[s].layer == 0) l0 += h->steps[s].bytes;
        int twin = order[i] == LAYOUT_MEGATRON && factorization_lowrank(model_factorization(m));
        fprintf(f, "| %s%s | %d | %" PRId64 " | %" PRId64 " |\n", layout_name(order[i]),
                twin ? " (full-rank twin)" : "", cnt, b, l0);
        graph_free(h);
    }
    return 0;
}

/* Rows of the prefill step (prefill.txt): the prompt goes through it in chunks of this many tokens. */
#define PREFILL_ROWS 32

static int write_plan(const Graph *g, const char *dir, const char *file, char *err, size_t errlen) {
    char path[GEN_OUT_PATH + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    int rc = f ? plan_write(g, f) : 1;
    if (!f || fclose(f) || rc) { snprintf(err, errlen, "%s: cannot write", path); return 1; }
    return 0;
}

int infer_files_write(const Run *run, const char *dir, char *err, size_t errlen) {
    int st;
    Graph *g = infer_graph_build(run, run->layout, 1, NULL, err, errlen, &st);
    if (!g) return st == 2 && run->model.moe_experts > 0 ? 0 : (st ? st : 1);   /* MoE: no inference plan */
    int rows = run->seq < PREFILL_ROWS ? run->seq : PREFILL_ROWS;
    Graph *pg = infer_graph_build(run, run->layout, rows, NULL, err, errlen, &st);
    if (!pg) { graph_free(g); return st ? st : 1; }
    int rc = write_plan(g, dir, "infer.txt", err, errlen);
    if (!rc) rc = write_plan(pg, dir, "prefill.txt", err, errlen);
    char path[GEN_OUT_PATH + 64];
    snprintf(path, sizeof path, "%s/infer-kernels.cu", dir);
    FILE *f = rc ? NULL : fopen(path, "w");
    if (!rc && !f) { snprintf(err, errlen, "%s: cannot write", path); rc = 1; }
    if (!rc) {   /* the kernels of both steps in one file */
        int nk = 0;
        KernelInst *ks = malloc((size_t)(g->nsteps + pg->nsteps + 1) * sizeof *ks);
        for (int s = 0; ks && s < g->nsteps; s++) if (g->steps[s].kind == OP_KERNEL) ks[nk++] = g->steps[s].k;
        for (int s = 0; ks && s < pg->nsteps; s++) if (pg->steps[s].kind == OP_KERNEL) ks[nk++] = pg->steps[s].k;
        char kerr[512] = "";
        rc = ks ? kernels_emit(f, ks, nk, run, kerr, sizeof kerr) : 1;
        free(ks);
        if (fclose(f) || rc) { snprintf(err, errlen, "%s: %s", path, kerr[0] ? kerr : "write failed"); rc = 1; }
    }
    graph_free(g);
    graph_free(pg);
    return rc;
}
