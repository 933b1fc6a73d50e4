/* decode.c: prefill and decode steps over the KV cache (runtime/decode.h). The step and prefill
 * plans hold the same cache buffers (L{i}.kcache, L{i}.vcache; pos) by name; this file moves the
 * prefill's caches into the step engine and gathers the full logits from the ranks' vocab slices.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/decode.h"

static const KernelArgs *find_kernel(const Plan *p, const char *kind) {
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps_[s].kind == ST_KERNEL && !strcmp(p->steps_[s].kernel->kind, kind))
            return p->steps_[s].kernel;
    return NULL;
}

void decoder_keep_logits(Plan *p) {
    const KernelArgs *x = find_kernel(p, "xent_fwd");
    int op = x ? kernel_op(x, "logits") : -1;
    if (op < 0) return;
    PlanTensor *t = &p->tensors[x->op[op].tensor];
    if (t->kind != TK_ACT) return;
    t->offset = (p->arena_bytes + 255) / 256 * 256;
    p->arena_bytes = t->offset + t->rows * t->cols * (int64_t)plan_dtype_size(t->dtype);
}

static int is_cache(const PlanTensor *t) {
    size_t n = strlen(t->name);
    return t->kind == TK_ACT && n > 7 &&
           (!strcmp(t->name + n - 7, ".kcache") || !strcmp(t->name + n - 7, ".vcache"));
}

int decoder_init(Decoder *d, Plan *step, Engine *se, Plan *pre, Engine *pe, char *err,
                 size_t errlen) {
    memset(d, 0, sizeof *d);
    d->step = step; d->se = se; d->pre = pe ? pre : NULL; d->pe = pre ? pe : NULL;
    const KernelArgs *a = find_kernel(step, "attention_decode"), *x = find_kernel(step, "xent_fwd");
    if (!a || !x || step->micro_batch * step->seq != 1) {
        snprintf(err, errlen,
                 "%s: not a decode step (one token row with attention_decode "
                 "and xent_fwd): regenerate it with 'boost gen'", step->path);
        return -1;
    }
    d->max_seq = (int)kernel_int(a, "max_seq", 0, 0);
    d->vocab = step->vocab;
    if (d->pre) {
        const KernelArgs *pa = find_kernel(d->pre, "attention_decode");
        d->chunk = d->pre->micro_batch * d->pre->seq;
        if (!pa || kernel_int(pa, "max_seq", 0, 0) != d->max_seq || d->pre->vocab != step->vocab ||
            d->pre->tp != step->tp) {
            snprintf(err, errlen,
                     "%s and %s are not the prefill and decode steps of one model: regenerate both",
                     d->pre->path, step->path);
            return -1;
        }
    }
    int64_t lmax = 1;
    const Plan *ps[2] = {step, d->pre};
    for (int i = 0; i < 2 && ps[i]; i++) {
        const KernelArgs *k = find_kernel(ps[i], "xent_fwd");
        const PlanTensor *t = &ps[i]->tensors[k->op[kernel_op(k, "logits")].tensor];
        if (t->rows * t->cols > lmax) lmax = t->rows * t->cols;
    }
    for (int i = 0; i < step->ntensors; i++)
        if (is_cache(&step->tensors[i]) &&
            step->tensors[i].rows * step->tensors[i].cols > d->cache_elems)
            d->cache_elems = step->tensors[i].rows * step->tensors[i].cols;
    d->local = malloc(sizeof(float) * (size_t)lmax);
    d->cache = malloc(sizeof(float) * (size_t)(d->cache_elems > 0 ? d->cache_elems : 1));
    if (!d->local || !d->cache) {
        snprintf(err, errlen, "out of memory");
        decoder_release(d);
        return -1;
    }
    return 0;
}

/* Row `row` of the plan's last logits, gathered over the ranks' vocab slices: out [vocab]. */
static int logits_row(Decoder *d, const Plan *p, Engine *e, int64_t row, float *out, char *err,
                      size_t errlen) {
    const KernelArgs *x = find_kernel(p, "xent_fwd");
    int op = kernel_op(x, "logits");
    const PlanTensor *t = &p->tensors[x->op[op].tensor];
    for (int r = 0; r < p->tp; r++) {
        if (engine_read_tensor(e, r, t->name, d->local, err, errlen)) return -1;
        int64_t cols = kernel_int(x, "cols", r, -1), ld = kernel_int(x, "ldl", r, cols),
                voff = kernel_int(x, "vocab_offset", r, 0);
        int64_t off = rank_int(x->op[op].off, r) + row * ld;
        if (cols <= 0 || voff < 0 || voff + cols > p->vocab || off < 0 ||
            off + cols > t->rows * t->cols) {
            snprintf(err, errlen,
                     "%s: the xent_fwd step of rank %d does not cover row %lld of the logits",
                     p->path, r, (long long)row);
            return -1;
        }
        memcpy(out + voff, d->local + off, sizeof(float) * (size_t)cols);
    }
    return 0;
}

static int run_at(Engine *e, int pos, const int32_t *tok, const int32_t *tgt, char *err,
                  size_t errlen) {
    float fp = (float)pos, loss;
    if (engine_write_tensor(e, -1, "pos", &fp, err, errlen)) return -1;
    return engine_forward(e, tok, tgt, &loss, err, errlen);
}

int decoder_step(Decoder *d, int32_t tok, float *logits, char *err, size_t errlen) {
    if (d->pos >= d->max_seq) {
        snprintf(err, errlen,
                 "the KV cache is full (%d positions): slide the "
                 "window (decoder_prefill of the last tokens)", d->max_seq);
        return -1;
    }
    int32_t tgt = 0;
    if (run_at(d->se, d->pos, &tok, &tgt, err, errlen)) return -1;
    d->pos++;
    return logits ? logits_row(d, d->step, d->se, 0, logits, err, errlen) : 0;
}

int decoder_prefill(Decoder *d, const int32_t *tok, int n, float *logits, char *err,
                    size_t errlen) {
    if (n < 1 || n > d->max_seq) {
        snprintf(err, errlen, "a prefill of %d tokens: it must hold 1 to %d", n, d->max_seq);
        return -1;
    }
    d->pos = 0;
    int head = d->pe && n - 1 >= 2 ? n - 1 : 0;   /* tokens 0..head-1 through the prefill chunks */
    if (head) {
        int C = d->chunk;
        int32_t *buf = calloc((size_t)2 * C, sizeof *buf);
        if (!buf) { snprintf(err, errlen, "out of memory"); return -1; }
        int rc = 0;
        for (int c0 = 0; c0 < head && !rc; c0 += C) {
            int m = head - c0 < C ? head - c0 : C;
            /* padding rows: token 0, overwritten later in the cache */
            memset(buf, 0, sizeof(int32_t) * (size_t)2 * C);
            memcpy(buf, tok + c0, sizeof(int32_t) * (size_t)m);
            rc = run_at(d->pe, c0, buf, buf + C, err, errlen);
        }
        free(buf);
        for (int i = 0; i < d->pre->ntensors && !rc; i++) {   /* the caches, rank by rank */
            const PlanTensor *t = &d->pre->tensors[i];
            if (!is_cache(t)) continue;
            int j = plan_find_tensor(d->step, t->name);
            if (j < 0 || d->step->tensors[j].rows != t->rows ||
                d->step->tensors[j].cols != t->cols) {
                snprintf(err, errlen,
                         "%s: cache %s has no twin of its shape in %s: regenerate both",
                         d->pre->path, t->name, d->step->path);
                return -1;
            }
            for (int r = 0; r < d->step->tp && !rc; r++)
                rc = engine_read_tensor(d->pe, r, t->name, d->cache, err, errlen) ||
                     engine_write_tensor(d->se, r, t->name, d->cache, err, errlen);
        }
        if (rc) return -1;
        d->pos = head;
    }
    for (int i = head; i < n; i++)
        if (decoder_step(d, tok[i], i == n - 1 ? logits : NULL, err, errlen)) return -1;
    return 0;
}

void decoder_release(Decoder *d) {
    free(d->local);
    free(d->cache);
    d->local = d->cache = NULL;
}
