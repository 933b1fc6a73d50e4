/* plan_write.c: writes a finished Graph as plan.txt, exactly as docs/plan-format.md says:
 * header, canonical and local parameters with their parts, buffers with arena offsets and live
 * ranges, then the forward, backward and optimizer sections. Output is deterministic: the same
 * Graph always gives the same bytes. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "gen/dp.h"   // defines: dp_zero2_every_micro
#include "gen/ir.h"
#include "gen/plan_write.h"
#include "gen/factor.h"

static const char *dtype_name(int d) { return d == IR_BF16 ? "bf16" : d == IR_FP32 ? "fp32" : "i32"; }

static void pr_rint(FILE *f, RInt v) {
    if (v.per_rank) fprintf(f, "%" PRId64 "%%r%" PRId64, v.base, v.per_rank);
    else fprintf(f, "%" PRId64, v.base);
}

static void pr_opnd(FILE *f, const Graph *g, const char *key, Opnd o) {
    fprintf(f, " %s=%s", key, g->t[o.t].name);
    if (o.off.base || o.off.per_rank) { fputc('+', f); pr_rint(f, o.off); }
}

static void pr_num(FILE *f, const char *key, double v) { fprintf(f, " %s=%.9g", key, v); }

/* A string value (docs/plan-format.md, "Strings"): as it is when it is a plain word; in double
 * quotes otherwise (empty, or holding a space, a quote, a backslash or a control character), with
 * \" \\ \n \t \r and \xHH for the other control bytes, so the reader gets the same bytes back. */
static void pr_str(FILE *f, const char *s) {
    int plain = s[0] != 0;
    for (const unsigned char *c = (const unsigned char *)s; *c && plain; c++)
        plain = *c > ' ' && *c != '"' && *c != '\\' && *c != 0x7f;
    if (plain) { fputs(s, f); return; }
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c == '\n') fputs("\\n", f);
        else if (*c == '\t') fputs("\\t", f);
        else if (*c == '\r') fputs("\\r", f);
        else if (*c < ' ' || *c == 0x7f) fprintf(f, "\\x%02x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

static void pr_gemm_fields(FILE *f, const Graph *g, const Gemm *x, int batched) {
    fprintf(f, " ta=%d tb=%d m=%" PRId64 " n=%" PRId64 " k=%" PRId64, x->ta, x->tb, x->m, x->n, x->k);
    pr_opnd(f, g, "A", x->A); fprintf(f, " lda=%" PRId64, x->A.ld);
    if (batched) fprintf(f, " sA=%" PRId64, x->sA);
    pr_opnd(f, g, "B", x->B); fprintf(f, " ldb=%" PRId64, x->B.ld);
    if (batched) fprintf(f, " sB=%" PRId64, x->sB);
    pr_opnd(f, g, "C", x->C); fprintf(f, " ldc=%" PRId64, x->C.ld);
    if (batched) fprintf(f, " sC=%" PRId64, x->sC);
    pr_num(f, "alpha", x->alpha); pr_num(f, "beta", x->beta);
    if (batched) fprintf(f, " batch=%" PRId64, x->batch);
}

/* One collective, driven by its catalog row (docs/plan-format.md, "collectives"): the word, the
 * operands the row names (buf | src dst [map]) and their shape (elems | rows cols ld_src ld_dst |
 * experts capacity cols way), dtype, op= (and scale=) when it reduces, then its group: right after
 * dtype for a kind that runs on one group only, else after dir and only when not tp; a dp gradient
 * bucket adds micro=last bucket=K. dir in the forward and backward sections; tag when set. */
static void pr_collective(FILE *f, const Graph *g, const Op *o) {
    const CollKindRow *row = ccat_kind(ir_coll_kind(o));
    unsigned ops = row->operands;
    int one_group = (row->groups & (row->groups - 1)) == 0;
    fputs(row->word, f);
    if (ops & CO_BUF) { pr_opnd(f, g, "buf", o->buf); fprintf(f, " elems=%" PRId64, o->elems); }
    if (ops & CO_SRC) pr_opnd(f, g, "src", o->src);
    if (ops & CO_DST) pr_opnd(f, g, "dst", o->dst);
    if (ops & CO_MAP)
        fprintf(f, " map=%s experts=%" PRId64 " capacity=%" PRId64 " cols=%" PRId64 " way=%s",
                g->t[o->map].name, o->experts, o->rows, o->cols, o->way ? "back" : "out");
    else if (ops & CO_SRC)
        fprintf(f, " rows=%" PRId64 " cols=%" PRId64 " ld_src=%" PRId64 " ld_dst=%" PRId64,
                o->rows, o->cols, o->src.ld, o->dst.ld);
    fprintf(f, " dtype=%s", dtype_name(o->dtype));
    if (o->reduce) fprintf(f, " op=%s", o->reduce == RED_AVG ? "avg" : "sum");
    if (o->scale) pr_num(f, "scale", o->scale);
    if (one_group) fprintf(f, " group=%s", ccat_group_name(o->group));
    if (o->section != SEC_OPT) fprintf(f, " dir=%s", o->dir ? "bwd" : "fwd");
    if (!one_group && o->group != CG_TP) fprintf(f, " group=%s", ccat_group_name(o->group));
    /* zero=2 with grad_accum > 1 at pp = 1: ZeRO's reduce-scatters run on every micro-batch, each
       adding its shard to the rank's shard accumulator (gen/dp.h dp_zero2_every_micro) */
    const Run *r = g->run;
    int every = o->kind == OP_REDUCE_SCATTER && o->group == CG_DP && r && dp_zero2_every_micro(r);
    if (ir_dp_bucket(o)) fprintf(f, every ? " bucket=%d" : " micro=last bucket=%d", o->bucket);
    if (o->tag[0]) fprintf(f, " tag=%s", o->tag);
}

void plan_write_step(FILE *f, const Graph *g, const Op *o) {
    if (ir_coll_kind(o) >= 0) { pr_collective(f, g, o); fputc('\n', f); return; }
    switch (o->kind) {
    case OP_GEMM: fprintf(f, "gemm"); pr_gemm_fields(f, g, &o->g, 0); break;
    case OP_BATCHED_GEMM: fprintf(f, "batched_gemm"); pr_gemm_fields(f, g, &o->g, 1); break;
    case OP_GROUPED_GEMM:
        fprintf(f, "grouped_gemm count=%d", o->nmembers);
        for (int i = 0; i < o->nmembers; i++) { fprintf(f, "\nmember"); pr_gemm_fields(f, g, &o->members[i], 0); }
        break;
    case OP_KERNEL:
        fprintf(f, "kernel %s name=%s grid=%" PRId64 " block=%" PRId64 " smem=%" PRId64,
                o->k.kind, o->k.name, o->k.grid, o->k.block, o->k.smem);
        for (int i = 0; i < o->nops; i++) pr_opnd(f, g, o->opkey[i], o->ops[i]);
        for (int i = 0; i < o->k.nconst; i++) {
            if (o->k.per_rank[i]) {
                RInt v = {(int64_t)o->k.val[i], (int64_t)o->k.per_rank[i]};
                fprintf(f, " %s=", o->k.key[i]); pr_rint(f, v);
            } else pr_num(f, o->k.key[i], o->k.val[i]);
        }
        break;
    case OP_SAVE: fprintf(f, "save buf=%s", g->t[o->marker_tensor].name); break;
    case OP_RC_BEGIN: fprintf(f, "recompute begin chunk=%s", o->chunk); break;
    case OP_RC_END: fprintf(f, "recompute end chunk=%s", o->chunk); break;
    case OP_OPTIMIZER:
        fprintf(f, "optimizer adamw");
        if (g->run->zero) fprintf(f, " zero=%d", g->run->zero);
        break;
    }
    fputc('\n', f);
}

void plan_write_header(const Graph *g, FILE *f) {
    const Run *r = g->run;
    const Model *m = &r->model;
    fprintf(f, "boost-plan 1\n");
    fprintf(f, "model name=%s family=%s hidden=%d layers=%d heads=%d kv_heads=%d head_dim=%d ffn=%d vocab=%d eps=%.9g rope_theta=%.9g lax=%d\n",
            m->name, layout_factorization(m, g->layout)->family,
            m->hidden, m->layers, m->heads, m->kv_heads, m->head_dim, m->ffn, m->vocab, m->norm_eps, m->rope_theta,
            g->layout == LAYOUT_MEGATRON ? 0 : m->lax);
    fprintf(f, "run name=%s tp=%d pp=%d dp=%d layout=%s micro_batch=%d seq=%d grad_accum=%d dtype=%s online_rmsnorm=%d "
            "group_linears=%d checkpoint=%s gpu=%s arch=%s%s",
            r->name, r->tp, r->pp, r->dp, layout_name(g->layout), r->micro_batch, r->seq, r->grad_accum,
            r->dtype == DT_FP32 ? "fp32" : "bf16", r->online_rmsnorm, r->group_linears,
            r->checkpoint == CKPT_LOWRANK ? "lowrank" : "none", r->gpu.name, r->gpu.arch, "");
    if (r->zero) fprintf(f, " zero=%d", r->zero);
    if (g->ep > 1) fprintf(f, " ep=%d", g->ep);   /* expert parallelism: ep groups of the dp ranks */
    fputc('\n', f);
    fprintf(f, "train steps=%d lr=%.9g min_lr=%.9g warmup=%d beta1=%.9g beta2=%.9g adam_eps=%.9g weight_decay=%.9g "
            "clip=%.9g seed=%" PRIu64 " eval_every=%d",
            r->steps, r->lr, r->min_lr, r->warmup, r->beta1, r->beta2, r->adam_eps, r->weight_decay, r->clip,
            r->seed, r->eval_every);
    if (r->max_bad_steps > 0) fprintf(f, " max_bad_steps=%d", r->max_bad_steps);   /* optional: the reader's default is 5 */
    if (r->spike_window > 0)   /* optional: off by default, and then the plan does not change */
        fprintf(f, " spike_window=%d spike_z=%.9g spike_rollback_after=%d spike_max_rollbacks=%d",
                r->spike_window, r->spike_z, r->spike_rollback_after, r->spike_max_rollbacks);
    fputc('\n', f);
    fputs("data path=", f);
    pr_str(f, r->data);
    fprintf(f, " val_fraction=%.9g", r->val_fraction);
    if (r->tokenizer[0]) {   /* only when set: plans of byte-level runs keep their text */
        fputs(" tokenizer=", f);
        pr_str(f, r->tokenizer);
        fprintf(f, " tokenizer_crc32c=%08x", r->tokenizer_crc);
    }
    if (r->nsources) fprintf(f, " sources=%d", r->nsources);   /* a mixture: source lines follow */
    fputc('\n', f);
    for (int i = 0; i < r->nsources; i++) {
        fputs("source path=", f);
        pr_str(f, r->source_path[i]);
        fprintf(f, " weight=%.9g\n", r->source_weight[i]);
    }
}

int plan_write(const Graph *g, FILE *f) {
    plan_write_header(g, f);
    return plan_write_body(g, f, NULL, NULL, 1);
}

int plan_write_body(const Graph *g, FILE *f, const unsigned char *canon_used, const unsigned char *param_used, int slots) {
    fprintf(f, "arena act bytes=%" PRId64 "%s", g->arena_bytes, slots > 1 ? "" : "\n");
    if (slots > 1) fprintf(f, " slots=%d\n", slots);
    fprintf(f, "\n# canonical parameters (full tensors, the same for every layout and tp)\n");
    for (int i = 0; i < g->ncanons; i++) {
        const Canon *c = &g->canons[i];
        if (canon_used && !canon_used[i]) continue;
        fprintf(f, "canon %s shape=%" PRId64 "x%" PRId64 " init=%s std=%.9g seed=0x%016" PRIx64 " decay=%d\n",
                c->name, c->rows, c->cols, c->init == 0 ? "normal" : c->init == 1 ? "ones" : "zeros",
                c->std, c->seed, c->decay);
    }
    fprintf(f, "\n# local parameters of one rank and the canonical blocks they hold\n");
    for (int i = 0; i < g->nparams; i++) {
        const Param *p = &g->params[i];
        if (param_used && !param_used[i]) continue;
        fprintf(f, "param %s shape=%" PRId64 "x%" PRId64 " dtype=%s\n", p->name, p->rows, p->cols, dtype_name(p->dtype));
        for (int j = p->first_part; j < p->first_part + p->nparts; j++) {
            const Part *q = &g->parts[j];
            fprintf(f, "part %s canon=%s src=", p->name, g->canons[q->canon].name);
            pr_rint(f, q->r0); fputc(':', f); pr_rint(f, q->r1); fputc(',', f);
            pr_rint(f, q->c0); fputc(':', f); pr_rint(f, q->c1);
            fprintf(f, " dst=%" PRId64 ",%" PRId64 " rep=%d", q->lr, q->lc, q->rep);
            if (q->ep >= 0) fprintf(f, " ep=%d", q->ep);   /* held by the ranks of ep rank q->ep only */
            fputc('\n', f);
        }
    }
    fprintf(f, "\n# activation buffers and their gradients (arena offsets in bytes, live = step range)\n");
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if ((t->role != TR_ACT && t->role != TR_GRAD) || t->live0 < 0) continue;
        fprintf(f, "buffer %s dtype=%s shape=%" PRId64 "x%" PRId64 " offset=%" PRId64 " live=%d:%d\n",
                t->name, dtype_name(t->dtype), t->rows, t->cols, t->offset, t->live0, t->live1);
    }
    fprintf(f, "input tokens dtype=i32 shape=%" PRId64 "\n", g->M);
    fprintf(f, "input targets dtype=i32 shape=%" PRId64 "\n", g->M);
    fprintf(f, "output loss dtype=fp32 shape=1\n");
    fprintf(f, "\nsection forward\n");
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (s == g->nfwd_steps) fprintf(f, "\nsection backward\n");
        /* a comment line where a new chunk (the segment between two collectives) starts */
        if (s == 0 || s == g->nfwd_steps || strcmp(o->chunk, g->steps[s - 1].chunk))
            fprintf(f, "# %s %s (step %d)\n", o->chunk, s < g->nfwd_steps ? "forward" : "backward", s);
        plan_write_step(f, g, o);
    }
    if (g->nfwd_steps == g->nsteps) fprintf(f, "\nsection backward\n");
    fprintf(f, "\nsection optimizer\n");
    for (int i = 0; i < g->nopt; i++) {   /* a pipeline stage: the gathers of its own params only */
        const Op *o = &g->opt[i];
        if (param_used && ir_coll_kind(o) >= 0 && !param_used[g->t[o->buf.t].param]) continue;
        plan_write_step(f, g, o);
    }
    return ferror(f) ? 1 : 0;
}
