/* plan.c: reads plan.txt (docs/plan-format.md, version 1) into a Plan and checks every line:
 * known line/step/kernel kinds, known tensors, numbers, part blocks inside their canon and param,
 * operand extents inside their tensors for every rank, live buffers disjoint in the arena.
 * Anything wrong gives NULL and "PATH:LINE: what is wrong"; garbage never crashes it. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/plan.h"
#include "runtime/grid.h"
#include "common/checked.h" // defines: ck_add, ck_mul, ck_span, CK_MAX_SIZE
#include "common/kernel_catalog.h"   // defines: kcat_find, kcat_operand, kcat_const, kcat_eval
#include "common/files.h"   // defines: file_read_stream
#include "common/train_settings.h"   // defines: TRAIN_SETTINGS, train_setting_parse, train_setting_default

#define MAX_TOKENS 96
#define MAX_PLAN_BYTES ((size_t)1 << 30)

/* ---- kernel catalog (common/kernel_catalog.h): the kinds, their operands in launch order (the
 * CUDA backend orders its launch arguments by plan_catalog_operand) and their extents ---- */
const char *plan_catalog_kind(int i) { return kcat_kind(i) ? kcat_name(i) : NULL; }

double plan_step_flops(const Plan *p, const PlanStep *st) {
    if (st->kind == ST_GEMM || st->kind == ST_BATCHED_GEMM)
        return 2.0 * st->gemm.m * st->gemm.n * st->gemm.k * (st->gemm.batch > 1 ? st->gemm.batch : 1);
    double f = 0;
    if (st->kind == ST_GROUPED_GEMM)
        for (int i = 0; i < st->nmembers; i++) {
            const GemmArgs *g = &p->members[st->first_member + i];
            f += 2.0 * g->m * g->n * g->k;
        }
    return f;
}

const char *plan_step_kind_name(int kind) {
    static const char *names[] = {"gemm", "batched_gemm", "grouped_gemm", "kernel", "save",
                                  "recompute begin", "recompute end", "optimizer"};
    if (step_coll_kind(kind) >= 0) return ccat_word(step_coll_kind(kind));
    return kind >= 0 && kind < (int)(sizeof names / sizeof names[0]) ? names[kind] : "step";
}

int plan_catalog_operand(const char *kind, int o, char *key, size_t n, int *dtype, int *optional) {
    int c = kcat_find(kind);
    if (c < 0) return -1;
    KcatOperand op;
    if (kcat_operand(c, o, &op) != 0) return 1;
    if (n) snprintf(key, n, "%s", op.key);
    if (dtype)
        *dtype = !strcmp(op.dtype, "bf16")   ? PDT_BF16
                 : !strcmp(op.dtype, "fp32") ? PDT_FP32
                                             : PDT_I32;
    if (optional) *optional = op.optional;
    return 0;
}

/* Catalog kind c's operand `key`, when it has one. */
static int catalog_operand_of(int c, const char *key, KcatOperand *op) {
    for (int o = 0; kcat_operand(c, o, op) == 0; o++)
        if (!strcmp(op->key, key)) return 1;
    return 0;
}

/* ---- loader state ---- */
typedef struct {
    Plan *p;
    const char *path;
    int line;
    char *err; size_t errlen;
    int failed;
    /* name -> tensor index hash */
    int *hash; int hcap;
    int *part_param; int part_cap;  /* param index of each part, in file order */
    int tcap, ccap, pcap, scap, mcap;
    int section;                   /* -1 header, 0 fwd, 1 bwd, 2 optimizer */
    int saw_optimizer_line;
    int seen_model, seen_run, seen_train, seen_arena, seen_data;
    int sources_read;              /* `source` lines so far (the data line's sources=N wants N) */
    int pending_members;           /* members still expected by the last grouped_gemm */
    int step_index;                /* over forward + backward */
} Loader;

static int fail(Loader *L, const char *fmt, ...) {
    if (L->failed) return -1;
    L->failed = 1;
    int n = snprintf(L->err, L->errlen, "%s:%d: ", L->path, L->line);
    if (n < 0) n = 0;
    if ((size_t)n < L->errlen) {
        va_list ap; va_start(ap, fmt);
        vsnprintf(L->err + n, L->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void *grow(void *arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return arr;
    int nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *n = realloc(arr, (size_t)nc * elem);
    if (!n) return NULL;
    memset((char *)n + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *cap = nc;
    return n;
}

static uint64_t fnv(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 1099511628211ULL; }
    return h;
}

static int hash_rebuild(Loader *L) {
    int cap = 64;
    while (cap < 2 * L->p->ntensors + 2) cap *= 2;
    int *h = malloc((size_t)cap * sizeof *h);
    if (!h) return -1;
    for (int i = 0; i < cap; i++) h[i] = -1;
    for (int t = 0; t < L->p->ntensors; t++) {
        uint64_t k = fnv(L->p->tensors[t].name) & (uint64_t)(cap - 1);
        while (h[k] >= 0) k = (k + 1) & (uint64_t)(cap - 1);
        h[k] = t;
    }
    free(L->hash); L->hash = h; L->hcap = cap;
    return 0;
}

static int find_tensor(const Loader *L, const char *name) {
    if (!L->hash) return -1;
    uint64_t k = fnv(name) & (uint64_t)(L->hcap - 1);
    while (L->hash[k] >= 0) {
        if (!strcmp(L->p->tensors[L->hash[k]].name, name)) return L->hash[k];
        k = (k + 1) & (uint64_t)(L->hcap - 1);
    }
    return -1;
}

/* ---- number parsing ----
 * Every integer of a plan is at most CK_MAX_SIZE (2^50) in magnitude, so the sums and products of
 * the checks below never wrap (they are overflow-checked as well where they can grow). */
static int parse_i64(const char *s, int64_t *out) {
    if (!*s) return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 0);
    if (*end || errno || v > CK_MAX_SIZE || v < -CK_MAX_SIZE) return -1;
    *out = v;
    return 0;
}

/* "a" or "a%rb" */
static int parse_rankint(const char *s, RankInt *out) {
    const char *pct = strstr(s, "%r");
    if (!pct) { out->per_rank = 0; return parse_i64(s, &out->base); }
    char a[64];
    size_t n = (size_t)(pct - s);
    if (n == 0 || n >= sizeof a) return -1;
    memcpy(a, s, n); a[n] = 0;
    if (parse_i64(a, &out->base) || parse_i64(pct + 2, &out->per_rank)) return -1;
    return 0;
}

static int parse_f64(const char *s, double *out) {
    if (!*s) return -1;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out) {
    if (!*s || *s == '-') return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end || errno) return -1;
    *out = v;
    return 0;
}

/* ---- key=value access on one tokenised line ---- */
typedef struct {
    int n;
    char *tok[MAX_TOKENS];
    char *key[MAX_TOKENS], *val[MAX_TOKENS];   /* key NULL: a bare word */
    unsigned char used[MAX_TOKENS];
} Line;

static const char *get(Line *ln, const char *key) {
    for (int i = 0; i < ln->n; i++)
        if (ln->key[i] && !strcmp(ln->key[i], key)) { ln->used[i] = 1; return ln->val[i]; }
    return NULL;
}

static int need_str(Loader *L, Line *ln, const char *key, const char **out) {
    *out = get(ln, key);
    if (!*out) return fail(L, "'%s' line: missing key %s=", ln->tok[0], key);
    return 0;
}

static int need_i64(Loader *L, Line *ln, const char *key, int64_t *out, int64_t min) {
    const char *v;
    if (need_str(L, ln, key, &v)) return -1;
    if (parse_i64(v, out))
        return fail(L, "'%s' line: %s=%s is not an integer of at most 2^50", ln->tok[0], key, v);
    if (*out < min) return fail(L, "'%s' line: %s=%s must be at least %lld", ln->tok[0], key, v, (long long)min);
    return 0;
}

static int need_int(Loader *L, Line *ln, const char *key, int *out, int min) {
    int64_t v;
    if (need_i64(L, ln, key, &v, min)) return -1;
    if (v > 2000000000) return fail(L, "'%s' line: %s=%lld is too large", ln->tok[0], key, (long long)v);
    *out = (int)v;
    return 0;
}

static int opt_int(Loader *L, Line *ln, const char *key, int *out, int dflt) {
    if (!get(ln, key)) { *out = dflt; return 0; }
    return need_int(L, ln, key, out, 0);
}

static int need_f64(Loader *L, Line *ln, const char *key, double *out) {
    const char *v;
    if (need_str(L, ln, key, &v)) return -1;
    if (parse_f64(v, out)) return fail(L, "'%s' line: %s=%s is not a number", ln->tok[0], key, v);
    return 0;
}

static int opt_f64(Loader *L, Line *ln, const char *key, double *out, double dflt) {
    if (!get(ln, key)) { *out = dflt; return 0; }
    return need_f64(L, ln, key, out);
}

static void copy_name(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

static int parse_dtype(const char *s) {
    if (!strcmp(s, "bf16")) return PDT_BF16;
    if (!strcmp(s, "fp32")) return PDT_FP32;
    if (!strcmp(s, "i32")) return PDT_I32;
    return -1;
}

/* "RxC" */
static int parse_shape(Loader *L, const char *s, int64_t *rows, int64_t *cols) {
    char buf[64];
    if (strlen(s) >= sizeof buf) return fail(L, "shape=%.40s... is malformed (want ROWSxCOLS)", s);
    strcpy(buf, s);
    char *x = strchr(buf, 'x');
    if (!x) {  /* a 1-D shape N is 1xN */
        *rows = 1;
        if (parse_i64(buf, cols) || *cols <= 0) return fail(L, "shape=%s is malformed (want ROWSxCOLS)", s);
        return 0;
    }
    *x = 0;
    if (parse_i64(buf, rows) || parse_i64(x + 1, cols) || *rows <= 0 || *cols <= 0)
        return fail(L, "shape=%s is malformed (want ROWSxCOLS with positive sizes)", s);
    if (*rows > ((int64_t)1 << 40) / *cols) return fail(L, "shape=%s is too large", s);
    return 0;
}

static int add_tensor(Loader *L, const char *name, int kind, int dtype, int64_t rows, int64_t cols) {
    Plan *p = L->p;
    if (strlen(name) >= PLAN_NAME_LEN) return fail(L, "name %.40s... is longer than %d characters", name, PLAN_NAME_LEN - 1);
    if (find_tensor(L, name) >= 0) return fail(L, "tensor %s is defined twice", name);
    PlanTensor *nt = grow(p->tensors, &L->tcap, p->ntensors + 1, sizeof *nt);
    if (!nt) return fail(L, "out of memory");
    p->tensors = nt;
    PlanTensor *t = &p->tensors[p->ntensors++];
    memset(t, 0, sizeof *t);
    copy_name(t->name, sizeof t->name, name);
    t->kind = kind; t->dtype = dtype; t->rows = rows; t->cols = cols; t->param = -1;
    t->live0 = -1; t->live1 = -1;
    if (2 * p->ntensors + 2 > L->hcap) { if (hash_rebuild(L)) return fail(L, "out of memory"); }
    else {
        uint64_t k = fnv(name) & (uint64_t)(L->hcap - 1);
        while (L->hash[k] >= 0) k = (k + 1) & (uint64_t)(L->hcap - 1);
        L->hash[k] = p->ntensors - 1;
    }
    return p->ntensors - 1;
}

/* Reject keys the line kind does not know (steps only: header lines ignore unknown keys). */
static int no_unused(Loader *L, Line *ln, int from) {
    for (int i = from; i < ln->n; i++)
        if (!ln->used[i]) {
            if (ln->key[i]) return fail(L, "'%s' line: unknown key %s=", ln->tok[0], ln->key[i]);
            return fail(L, "'%s' line: unexpected word '%s'", ln->tok[0], ln->tok[i]);
        }
    return 0;
}

/* ---- header lines ---- */
static int line_model(Loader *L, Line *ln) {
    Plan *p = L->p;
    const char *v;
    if ((v = get(ln, "name"))) copy_name(p->model_name, sizeof p->model_name, v);
    if ((v = get(ln, "family"))) copy_name(p->family, sizeof p->family, v);
    if (need_int(L, ln, "hidden", &p->hidden, 1) || need_int(L, ln, "layers", &p->layers, 0) ||
        need_int(L, ln, "heads", &p->heads, 1) || opt_int(L, ln, "kv_heads", &p->kv_heads, p->heads) ||
        need_int(L, ln, "head_dim", &p->head_dim, 1) || opt_int(L, ln, "ffn", &p->ffn, 0) ||
        need_int(L, ln, "vocab", &p->vocab, 1) || opt_f64(L, ln, "eps", &p->eps, 1e-5) ||
        opt_f64(L, ln, "rope_theta", &p->rope_theta, 10000))
        return -1;
    L->seen_model = 1;
    return 0;
}

static int line_run(Loader *L, Line *ln) {
    Plan *p = L->p;
    const char *v;
    if ((v = get(ln, "name"))) copy_name(p->run_name, sizeof p->run_name, v);
    if ((v = get(ln, "layout"))) copy_name(p->layout, sizeof p->layout, v);
    if ((v = get(ln, "gpu"))) copy_name(p->gpu, sizeof p->gpu, v);
    if ((v = get(ln, "arch"))) copy_name(p->arch, sizeof p->arch, v);
    if (need_int(L, ln, "tp", &p->tp, 1) || opt_int(L, ln, "pp", &p->pp, 1) || opt_int(L, ln, "dp", &p->dp, 1) ||
        need_int(L, ln, "micro_batch", &p->micro_batch, 1) || need_int(L, ln, "seq", &p->seq, 1) ||
        opt_int(L, ln, "grad_accum", &p->grad_accum, 1) || opt_int(L, ln, "online_rmsnorm", &p->online_rmsnorm, 0) ||
        opt_int(L, ln, "group_linears", &p->group_linears, 0))
        return -1;
    if (p->tp > 64) return fail(L, "run: tp=%d is more than this runtime supports (64)", p->tp);
    if (p->dp < 1 || p->pp < 1) return fail(L, "run: dp=%d pp=%d: each must be at least 1", p->dp, p->pp);
    if (opt_int(L, ln, "zero", &p->zero, 0)) return -1;
    p->ep = 1;
    if (opt_int(L, ln, "ep", &p->ep, 1)) return -1;
    if (p->ep < 1 || p->dp % p->ep)
        return fail(L, "run: ep=%d must be at least 1 and divide dp=%d (an ep group is ep of the dp ranks)", p->ep, p->dp);
    if (p->zero < 0 || p->zero > 2) return fail(L, "run: zero=%d: only ZeRO stages 0, 1 and 2 exist here", p->zero);
    if ((int64_t)p->dp * p->pp * p->tp > 4096)
        return fail(L, "run: dp=%d x pp=%d x tp=%d is a world of more than 4096 ranks", p->dp, p->pp, p->tp);
    if (p->grad_accum < 1) return fail(L, "run: grad_accum must be at least 1");
    p->dtype = PDT_BF16;
    if ((v = get(ln, "dtype"))) {
        p->dtype = parse_dtype(v);
        if (p->dtype < 0) return fail(L, "run: dtype=%s is not one of bf16, fp32", v);
    }
    p->checkpoint = 0;
    if ((v = get(ln, "checkpoint"))) p->checkpoint = strcmp(v, "none") ? 1 : 0;
    L->seen_run = 1;
    return 0;
}

/* ---- the training settings of the train and data lines: common/train_settings.h's table, so a
 * plan is checked, and a key it lacks defaulted, exactly as a spec's train and data tables are ---- */

void plan_set_train_setting(Plan *p, const char *name, double v) {
    if (!strcmp(name, "steps")) p->steps = (int)v;
    else if (!strcmp(name, "warmup")) p->warmup = (int)v;
    else if (!strcmp(name, "eval_every")) p->eval_every = (int)v;
    else if (!strcmp(name, "max_bad_steps")) p->max_bad_steps = (int)v;
    else if (!strcmp(name, "spike_window")) p->spike_window = (int)v;
    else if (!strcmp(name, "spike_z")) p->spike_z = v;
    else if (!strcmp(name, "spike_rollback_after")) p->spike_rollback_after = (int)v;
    else if (!strcmp(name, "spike_max_rollbacks")) p->spike_max_rollbacks = (int)v;
    else if (!strcmp(name, "lr")) p->lr = v;
    else if (!strcmp(name, "min_lr")) p->min_lr = v;
    else if (!strcmp(name, "beta1")) p->beta1 = v;
    else if (!strcmp(name, "beta2")) p->beta2 = v;
    else if (!strcmp(name, "adam_eps")) p->adam_eps = v;
    else if (!strcmp(name, "weight_decay")) p->weight_decay = v;
    else if (!strcmp(name, "clip")) p->clip = v;
    else if (!strcmp(name, "val_fraction")) p->val_fraction = v;
}

/* Every setting of the line's kind (data: 1 for the data line): its value checked against the
 * table's bounds, or the table's default (min_lr: lr/10; lr comes first in the table). */
static int line_settings(Loader *L, Line *ln, int data) {
    for (const TrainSetting *s = TRAIN_SETTINGS; s->name; s++) {
        if (s->data != data) continue;
        const char *v = get(ln, s->name);
        double x = train_setting_default(s, L->p->lr);
        char msg[300];
        if (v && train_setting_parse(s, v, &x, msg, sizeof msg)) return fail(L, "'%s' line: %s", ln->tok[0], msg);
        plan_set_train_setting(L->p, s->name, x);
    }
    return 0;
}

static int line_train(Loader *L, Line *ln) {
    Plan *p = L->p;
    const char *v;
    if (line_settings(L, ln, 0)) return -1;
    if (p->min_lr > p->lr) return fail(L, "'train' line: min_lr=%g must not exceed lr=%g", p->min_lr, p->lr);
    p->seed = 0;
    if ((v = get(ln, "seed")) && parse_u64(v, &p->seed)) return fail(L, "train: seed=%s is not an integer", v);
    L->seen_train = 1;
    return 0;
}

static int line_data(Loader *L, Line *ln) {
    Plan *p = L->p;
    const char *v = get(ln, "path");
    if (v && strlen(v) >= sizeof p->data_path)
        return fail(L, "data: path= is %zu bytes long; at most %zu are read (use a shorter path)",
                    strlen(v), sizeof p->data_path - 1);
    copy_name(p->data_path, sizeof p->data_path, v);
    if ((v = get(ln, "tokenizer"))) {
        if (strlen(v) >= sizeof p->tokenizer_path)
            return fail(L, "data: tokenizer= is %zu bytes long; at most %zu are read", strlen(v),
                        sizeof p->tokenizer_path - 1);
        copy_name(p->tokenizer_path, sizeof p->tokenizer_path, v);
        const char *crc = get(ln, "tokenizer_crc32c");
        char *end = NULL;
        unsigned long x = crc ? strtoul(crc, &end, 16) : 0;
        if (!crc || !*crc || *end || x > 0xffffffffUL)
            return fail(L, "data: tokenizer= needs tokenizer_crc32c=XXXXXXXX (8 hex digits, the "
                        "CRC-32C of the file): regenerate the plan with 'boost gen'");
        p->tokenizer_crc = (uint32_t)x;
    }
    if (line_settings(L, ln, 1)) return -1;
    int64_t n = 0;
    if ((v = get(ln, "sources")) && (parse_i64(v, &n) || n < 1 || n > DATA_MAX_SOURCES))
        return fail(L, "data: sources=%s: want 1 to %d (the source lines of a mixture)", v,
                    DATA_MAX_SOURCES);
    p->nsources = (int)n;
    L->seen_data = 1;
    return 0;
}

/* `source path=P weight=W`: one source of the data line's mixture, in order. */
static int line_source(Loader *L, Line *ln) {
    Plan *p = L->p;
    const char *v = get(ln, "path"), *w = get(ln, "weight");
    double weight = 0;
    if (!L->seen_data || L->sources_read >= p->nsources)
        return fail(L, "source: more source lines than the data line's sources=%d", p->nsources);
    if (!v || !v[0] || strlen(v) >= sizeof p->sources[0].path)
        return fail(L, "source: path= is missing, empty or longer than %zu bytes",
                    sizeof p->sources[0].path - 1);
    if (!w || parse_f64(w, &weight) || !(weight > 0))
        return fail(L, "source: weight=%s: want a number > 0", w ? w : "(missing)");
    copy_name(p->sources[L->sources_read].path, sizeof p->sources[0].path, v);
    p->sources[L->sources_read++].weight = weight;
    return 0;
}

static int line_arena(Loader *L, Line *ln) {
    if (ln->n < 2 || strcmp(ln->tok[1], "act")) return fail(L, "arena: expected 'arena act bytes=N'");
    int64_t b;
    if (need_i64(L, ln, "bytes", &b, 0)) return -1;
    L->p->arena_bytes = b;
    if (opt_int(L, ln, "slots", &L->p->arena_slots, 1)) return -1;   /* pipeline stages: micro-batches in flight */
    if (L->p->arena_slots < 1 || L->p->arena_slots > 64) return fail(L, "arena: slots=%d must be 1..64", L->p->arena_slots);
    L->seen_arena = 1;
    return 0;
}

static int line_canon(Loader *L, Line *ln) {
    Plan *p = L->p;
    if (ln->n < 2 || ln->key[1]) return fail(L, "canon: expected 'canon NAME shape=RxC ...'");
    const char *name = ln->tok[1];
    if (strlen(name) >= PLAN_NAME_LEN) return fail(L, "canon name too long");
    for (int i = 0; i < p->ncanons; i++)
        if (!strcmp(p->canons[i].name, name)) return fail(L, "canon %s is defined twice", name);
    PlanCanon c = {0};
    copy_name(c.name, sizeof c.name, name);
    const char *v;
    if (need_str(L, ln, "shape", &v) || parse_shape(L, v, &c.rows, &c.cols)) return -1;
    if (need_str(L, ln, "init", &v)) return -1;
    if (!strcmp(v, "normal")) c.init = 0;
    else if (!strcmp(v, "ones")) c.init = 1;
    else if (!strcmp(v, "zeros")) c.init = 2;
    else return fail(L, "canon %s: init=%s is not one of normal, ones, zeros", name, v);
    if (opt_f64(L, ln, "std", &c.std, 0)) return -1;
    if (c.init == 0 && !(c.std >= 0)) return fail(L, "canon %s: std must be >= 0", name);
    if ((v = get(ln, "seed")) && parse_u64(v, &c.seed)) return fail(L, "canon %s: seed=%s is not an integer", name, v);
    if (opt_int(L, ln, "decay", &c.decay, 0)) return -1;
    PlanCanon *n = grow(p->canons, &L->ccap, p->ncanons + 1, sizeof *n);
    if (!n) return fail(L, "out of memory");
    p->canons = n;
    p->canons[p->ncanons++] = c;
    return 0;
}

static int line_param(Loader *L, Line *ln) {
    Plan *p = L->p;
    if (ln->n < 2 || ln->key[1]) return fail(L, "param: expected 'param NAME shape=RxC dtype=D'");
    const char *name = ln->tok[1], *v;
    int64_t rows, cols;
    if (need_str(L, ln, "shape", &v) || parse_shape(L, v, &rows, &cols)) return -1;
    int dtype = PDT_FP32;
    if ((v = get(ln, "dtype")) && (dtype = parse_dtype(v)) < 0) return fail(L, "param %s: dtype=%s is unknown", name, v);
    char gname[PLAN_NAME_LEN + 4];
    snprintf(gname, sizeof gname, "d.%s", name);
    if (strlen(gname) >= PLAN_NAME_LEN) return fail(L, "param name %s is too long", name);
    int t = add_tensor(L, name, TK_PARAM, dtype, rows, cols);
    if (t < 0) return -1;
    int g = add_tensor(L, gname, TK_GRAD, PDT_FP32, rows, cols);
    if (g < 0) return -1;
    PlanParam *np = grow(p->params, &L->pcap, p->nparams + 1, sizeof *np);
    if (!np) return fail(L, "out of memory");
    p->params = np;
    PlanParam *pp = &p->params[p->nparams];
    memset(pp, 0, sizeof *pp);
    copy_name(pp->name, sizeof pp->name, name);
    pp->tensor = t; pp->grad = g; pp->rows = rows; pp->cols = cols; pp->decay = -1;
    p->tensors[t].param = p->tensors[g].param = p->nparams;
    p->nparams++;
    return 0;
}

static int parse_range(const char *s, RankInt *a, RankInt *b) {
    char buf[64];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    char *c = strchr(buf, ':');
    if (!c) return -1;
    *c = 0;
    return parse_rankint(buf, a) || parse_rankint(c + 1, b) ? -1 : 0;
}

static int line_part(Loader *L, Line *ln) {
    Plan *p = L->p;
    if (ln->n < 2 || ln->key[1]) return fail(L, "part: expected 'part PARAM canon=C src=r0:r1,c0:c1 dst=lr,lc rep=R'");
    int t = find_tensor(L, ln->tok[1]);
    if (t < 0 || p->tensors[t].kind != TK_PARAM) return fail(L, "part: %s is not a param defined above", ln->tok[1]);
    const char *v;
    PlanPart part = {0};
    if (need_str(L, ln, "canon", &v)) return -1;
    part.canon = plan_find_canon(p, v);
    if (part.canon < 0) return fail(L, "part %s: canon %s is not defined above", ln->tok[1], v);
    if (need_str(L, ln, "src", &v)) return -1;
    char buf[128];
    if (strlen(v) >= sizeof buf) return fail(L, "part %s: src= is malformed", ln->tok[1]);
    strcpy(buf, v);
    char *comma = strchr(buf, ',');
    if (!comma) return fail(L, "part %s: src=%s is malformed (want r0:r1,c0:c1)", ln->tok[1], v);
    *comma = 0;
    if (parse_range(buf, &part.r0, &part.r1) || parse_range(comma + 1, &part.c0, &part.c1))
        return fail(L, "part %s: src=%s is malformed (want r0:r1,c0:c1, numbers of at most 2^50)",
                    ln->tok[1], v);
    if (need_str(L, ln, "dst", &v)) return -1;
    if (strlen(v) >= sizeof buf) return fail(L, "part %s: dst= is malformed", ln->tok[1]);
    strcpy(buf, v);
    comma = strchr(buf, ',');
    if (!comma) return fail(L, "part %s: dst=%s is malformed (want lr,lc)", ln->tok[1], v);
    *comma = 0;
    if (parse_rankint(buf, &part.lr) || parse_rankint(comma + 1, &part.lc))
        return fail(L, "part %s: dst=%s is malformed (want lr,lc, numbers of at most 2^50)",
                    ln->tok[1], v);
    if (opt_int(L, ln, "rep", &part.rep, 0)) return -1;
    if (part.rep > 1) return fail(L, "part %s: rep must be 0 or 1", ln->tok[1]);
    part.ep = -1;
    if (get(ln, "ep")) {
        if (opt_int(L, ln, "ep", &part.ep, 0)) return -1;
        if (part.ep < 0 || part.ep >= p->ep)
            return fail(L, "part %s: ep=%d is not an ep rank of the run's ep=%d", ln->tok[1], part.ep, p->ep);
    }
    /* bounds for every rank */
    const PlanCanon *c = &p->canons[part.canon];
    const PlanTensor *pt = &p->tensors[t];
    for (int r = 0; r < p->tp; r++) {
        int64_t r0 = rank_int(part.r0, r), r1 = rank_int(part.r1, r), c0 = rank_int(part.c0, r), c1 = rank_int(part.c1, r);
        int64_t lr = rank_int(part.lr, r), lc = rank_int(part.lc, r);
        if (r0 < 0 || c0 < 0 || r1 <= r0 || c1 <= c0 || r1 > c->rows || c1 > c->cols)
            return fail(L, "part %s: src block %lld:%lld,%lld:%lld (rank %d) is outside canon %s (%lldx%lld)",
                        ln->tok[1], (long long)r0, (long long)r1, (long long)c0, (long long)c1, r, c->name,
                        (long long)c->rows, (long long)c->cols);
        if (ck_span(lr, r1 - r0, pt->rows) || ck_span(lc, c1 - c0, pt->cols))
            return fail(L, "part %s: block lands at %lld,%lld (rank %d), outside the param (%lldx%lld)",
                        ln->tok[1], (long long)lr, (long long)lc, r, (long long)pt->rows, (long long)pt->cols);
    }
    PlanParam *pp = &p->params[pt->param];
    if (pp->decay < 0) pp->decay = c->decay;
    else if (pp->decay != c->decay) return fail(L, "part %s: canon %s has decay=%d but the param's other parts have %d",
                                                ln->tok[1], c->name, c->decay, pp->decay);
    PlanPart *np = grow(p->parts, &L->scap, p->nparts + 1, sizeof *np);
    if (!np) return fail(L, "out of memory");
    p->parts = np;
    int cap = L->part_cap;
    int *pi = grow(L->part_param, &cap, p->nparts + 1, sizeof *pi);
    if (!pi) return fail(L, "out of memory");
    L->part_param = pi; L->part_cap = cap;
    L->part_param[p->nparts] = pt->param;
    p->parts[p->nparts++] = part;
    return 0;
}

static int line_buffer(Loader *L, Line *ln, int kind) {
    Plan *p = L->p;
    if (ln->n < 2 || ln->key[1]) return fail(L, "%s: expected '%s NAME dtype=D shape=S ...'", ln->tok[0], ln->tok[0]);
    const char *v;
    int dtype;
    if (need_str(L, ln, "dtype", &v)) return -1;
    if ((dtype = parse_dtype(v)) < 0) return fail(L, "%s %s: dtype=%s is not one of bf16, fp32, i32", ln->tok[0], ln->tok[1], v);
    int64_t rows, cols;
    if (need_str(L, ln, "shape", &v) || parse_shape(L, v, &rows, &cols)) return -1;
    int t = add_tensor(L, ln->tok[1], kind, dtype, rows, cols);
    if (t < 0) return -1;
    PlanTensor *pt = &p->tensors[t];
    if (kind == TK_ACT) {
        if (need_i64(L, ln, "offset", &pt->offset, 0) || need_str(L, ln, "live", &v)) return -1;
        RankInt a, b;
        if (parse_range(v, &a, &b) || a.per_rank || b.per_rank || a.base < 0 || b.base < a.base || b.base > 2000000000)
            return fail(L, "buffer %s: live=%s is malformed (want FIRST:LAST step indices)", pt->name, v);
        pt->live0 = (int)a.base; pt->live1 = (int)b.base;
        if (!L->seen_arena) return fail(L, "buffer %s: the 'arena act bytes=N' line must come before the buffers", pt->name);
        if (pt->offset % (int64_t)plan_dtype_size(dtype))
            return fail(L, "buffer %s: offset %lld is not a multiple of its element size (%d bytes)", pt->name,
                        (long long)pt->offset, (int)plan_dtype_size(dtype));
        int64_t bytes =
            rows * cols * (int64_t)plan_dtype_size(dtype); /* shapes are at most 2^40 elements */
        if (ck_span(pt->offset, bytes, p->arena_bytes))
            return fail(L, "buffer %s: offset %lld + %lld bytes is past the arena's %lld bytes", pt->name,
                        (long long)pt->offset, (long long)bytes, (long long)p->arena_bytes);
    }
    if (kind == TK_INPUT && !strcmp(pt->name, "tokens")) p->tokens = t;
    if (kind == TK_INPUT && !strcmp(pt->name, "targets")) p->targets = t;
    if (kind == TK_OUTPUT && !strcmp(pt->name, "loss")) p->loss = t;
    return 0;
}

/* ---- operands ---- */
static int parse_operand(Loader *L, const char *s, Operand *op) {
    char name[PLAN_NAME_LEN + 2];
    const char *plus = strchr(s, '+');
    size_t n = plus ? (size_t)(plus - s) : strlen(s);
    if (n == 0 || n >= PLAN_NAME_LEN) return fail(L, "operand '%.60s' is malformed", s);
    memcpy(name, s, n); name[n] = 0;
    op->tensor = find_tensor(L, name);
    if (op->tensor < 0) return fail(L, "unknown tensor %s", name);
    op->off.base = 0; op->off.per_rank = 0;
    if (plus && parse_rankint(plus + 1, &op->off)) return fail(L, "operand %s: offset '%s' is not a number", s, plus + 1);
    return 0;
}

static int64_t numel(const PlanTensor *t) { return t->rows * t->cols; }

/* Does a rows x cols view with leading dimension ld (plus `extra` elements further, e.g. batch
 * strides) starting at op fit its tensor on every rank? */
static int check_view(Loader *L, const Plan *p, const Operand *op, int64_t rows, int64_t cols, int64_t ld,
                      int64_t extra, const char *what) {
    const PlanTensor *t = &p->tensors[op->tensor];
    if (rows <= 0 || cols <= 0) return fail(L, "%s: empty view (%lld x %lld)", what, (long long)rows, (long long)cols);
    if (rows > 1 && ld < cols) return fail(L, "%s: ld=%lld is smaller than its %lld columns", what, (long long)ld, (long long)cols);
    if (extra < 0) return fail(L, "%s: negative stride", what);
    for (int r = 0; r < p->tp; r++) {
        int64_t off = rank_int(op->off, r);
        if (off < 0) return fail(L, "%s: offset %lld (rank %d) is negative", what, (long long)off, r);
        double end = (double)off + (double)(rows - 1) * (double)ld + (double)cols + (double)extra;
        if (end > (double)numel(t))
            return fail(L, "%s: operand range outside tensor %s: %lldx%lld view, ld %lld, offset %lld (rank %d) needs %.0f elements, the tensor has %lld",
                        what, t->name, (long long)rows, (long long)cols, (long long)ld, (long long)off, r, end, (long long)numel(t));
    }
    return 0;
}

/* Mark step index use of activation buffers (liveness check). */
static int check_live(Loader *L, const Plan *p, const Operand *op) {
    const PlanTensor *t = &p->tensors[op->tensor];
    if (t->kind != TK_ACT || L->section > 1) return 0;
    if (L->step_index < t->live0 || L->step_index > t->live1)
        return fail(L, "buffer %s is used at step %d, outside its live range %d:%d", t->name, L->step_index, t->live0, t->live1);
    return 0;
}

static int parse_gemm_fields(Loader *L, Line *ln, GemmArgs *g, int batched) {
    const char *v;
    int64_t ta, tb;
    if (need_i64(L, ln, "ta", &ta, 0) || need_i64(L, ln, "tb", &tb, 0)) return -1;
    if (ta > 1 || tb > 1) return fail(L, "%s: ta and tb must be 0 or 1", ln->tok[0]);
    g->ta = (int)ta; g->tb = (int)tb;
    if (need_i64(L, ln, "m", &g->m, 1) || need_i64(L, ln, "n", &g->n, 1) || need_i64(L, ln, "k", &g->k, 1) ||
        need_i64(L, ln, "lda", &g->lda, 1) || need_i64(L, ln, "ldb", &g->ldb, 1) || need_i64(L, ln, "ldc", &g->ldc, 1))
        return -1;
    if (need_str(L, ln, "A", &v) || parse_operand(L, v, &g->A) || need_str(L, ln, "B", &v) || parse_operand(L, v, &g->B) ||
        need_str(L, ln, "C", &v) || parse_operand(L, v, &g->C))
        return -1;
    g->alpha = 1; g->beta = 0;
    if (opt_f64(L, ln, "alpha", &g->alpha, 1) || opt_f64(L, ln, "beta", &g->beta, 0)) return -1;
    g->batch = 1; g->sA = g->sB = g->sC = 0;
    if (batched) {
        if (need_i64(L, ln, "batch", &g->batch, 1) || need_i64(L, ln, "sA", &g->sA, 0) ||
            need_i64(L, ln, "sB", &g->sB, 0) || need_i64(L, ln, "sC", &g->sC, 0))
            return -1;
    }
    const Plan *p = L->p;
    int64_t xA, xB, xC; /* the batch's extra extent: (batch - 1) * stride */
    if (ck_mul(g->batch - 1, g->sA, &xA) || ck_mul(g->batch - 1, g->sB, &xB) ||
        ck_mul(g->batch - 1, g->sC, &xC))
        return fail(L, "%s: batch=%lld times its strides is out of range", ln->tok[0],
                    (long long)g->batch);
    int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
    int64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
    if (check_view(L, p, &g->A, ar, ac, g->lda, xA, "gemm operand A") ||
        check_view(L, p, &g->B, br, bc, g->ldb, xB, "gemm operand B") ||
        check_view(L, p, &g->C, g->m, g->n, g->ldc, xC, "gemm operand C"))
        return -1;
    if (ar == 1 && g->lda < ac) return fail(L, "gemm: lda=%lld is smaller than A's %lld columns", (long long)g->lda, (long long)ac);
    if (br == 1 && g->ldb < bc) return fail(L, "gemm: ldb=%lld is smaller than B's %lld columns", (long long)g->ldb, (long long)bc);
    if (g->m == 1 && g->ldc < g->n) return fail(L, "gemm: ldc=%lld is smaller than C's %lld columns", (long long)g->ldc, (long long)g->n);
    if (p->tensors[g->C.tensor].kind == TK_PARAM || p->tensors[g->C.tensor].kind == TK_INPUT)
        return fail(L, "gemm: C=%s is a param or an input; steps never write those", p->tensors[g->C.tensor].name);
    for (int i = 0; i < 3; i++) {
        const Operand *o = i == 0 ? &g->A : i == 1 ? &g->B : &g->C;
        if (p->tensors[o->tensor].dtype == PDT_I32) return fail(L, "gemm: operand %s is i32", p->tensors[o->tensor].name);
        if (check_live(L, p, o)) return -1;
    }
    return 0;
}

/* ---- kernels: operand extents, from the catalog's rows, and the rules of a few kinds ---- */
static int64_t kc(const KernelArgs *k, const char *key, int64_t d) {
    return kernel_int(k, key, 0, d);
}

static int kview(Loader *L, const KernelArgs *k, const char *key, int64_t rows, int64_t cols,
                 int64_t ld) {
    int i = kernel_op(k, key);
    if (i < 0) return 0;
    char what[80];
    snprintf(what, sizeof what, "kernel %s operand %s", k->kind, key);
    return check_view(L, L->p, &k->op[i], rows, cols, ld, 0, what);
}

static int need_op(Loader *L, const KernelArgs *k, const char *key, const char *why) {
    if (kernel_op(k, key) < 0)
        return fail(L, "kernel %s: operand %s= is required %s", k->kind, key, why);
    return 0;
}

/* rmsnorm_bwd: phase 0 (whole), 1 (the per-row dot, summed across ranks next), 2 (from the sum). */
static int rule_rmsnorm_bwd(Loader *L, const KernelArgs *k) {
    int64_t phase = kc(k, "phase", 0);
    if (phase < 0 || phase > 2) return fail(L, "kernel rmsnorm_bwd: phase must be 0, 1 or 2");
    if (phase != 0 && need_op(L, k, "dot", "with phase 1 or 2")) return -1;
    if (phase != 1 && need_op(L, k, "dx", "with phase 0 or 2")) return -1;
    return 0;
}

static int rule_bottleneck_act(Loader *L, const KernelArgs *k) {
    if (kc(k, "norm", 0) &&
        (need_op(L, k, "rstd", "with norm=1") || need_op(L, k, "stat", "with norm=1")))
        return -1;
    return 0;
}

static int rule_bottleneck_act_bwd(Loader *L, const KernelArgs *k) {
    if (!kc(k, "norm", 0)) return 0;
    if (need_op(L, k, "rstd", "with norm=1") || need_op(L, k, "rho", "with norm=1") ||
        need_op(L, k, "dstat", "with norm=1"))
        return -1;
    if (!kernel_has(k, "divisor")) return fail(L, "kernel %s: missing key divisor=", k->kind);
    return 0;
}

static int rule_rope(Loader *L, const KernelArgs *k) {
    if (kc(k, "head_dim", 0) % 2) return fail(L, "kernel %s: head_dim must be even", k->kind);
    if (kcat_find(k->kind) == KK_ROPE && kc(k, "seq", 0) <= 0)
        return fail(L, "kernel rope: seq must be positive");
    return 0;
}

static int rule_attention(Loader *L, const KernelArgs *k) {
    int64_t b = kc(k, "batch", 0), s = kc(k, "seq", 0), h = kc(k, "heads", 0),
            kvh = kc(k, "kv_heads", 0);
    int64_t hd = kc(k, "head_dim", 0), bhs;   /* constants are at most 2^31: pairs never wrap */
    if (b <= 0 || s <= 0 || h <= 0 || kvh <= 0 || hd <= 0 || h % kvh)
        return fail(L,
                    "kernel %s: batch, seq, heads, kv_heads, head_dim must be positive and heads a "
                    "multiple of kv_heads",
                    k->kind);
    if (ck_mul(b * s, h, &bhs))
        return fail(L, "kernel %s: batch*heads*seq is out of range", k->kind);
    return 0;
}

static int rule_xent_combine(Loader *L, const KernelArgs *k) {
    if (kc(k, "tp", 0) < 1) return fail(L, "kernel xent_combine: tp must be positive");
    return 0;
}

/* The moe_* kinds: rows is tokens (M) or slots (experts*capacity) as the catalog says; the
 * router's aux holds 1 + 2E floats, with a z-loss also z and each token's lse. */
static int rule_moe(Loader *L, const KernelArgs *k) {
    int id = kcat_find(k->kind);
    int64_t rows = kc(k, "rows", 0), K = kc(k, "top_k", 1);
    if (rows <= 0 || K <= 0) return fail(L, "kernel %s: rows and top_k must be positive", k->kind);
    if (id == KK_MOE_ROUTER || id == KK_MOE_ROUTER_BWD) {
        int64_t E = kc(k, "experts", 0), cap = kc(k, "capacity", 1);
        if (E < K || cap < 1)
            return fail(L, "kernel %s: need 1 <= top_k <= experts and capacity >= 1", k->kind);
        int64_t auxn = kernel_num(k, "zcoef", 0) > 0 ? 2 + 2 * E + rows : 1 + 2 * E;
        return kview(L, k, "aux", 1, auxn, auxn);
    }
    if ((id == KK_MOE_DISPATCH_BWD || id == KK_MOE_COMBINE || id == KK_MOE_GATES_BWD) &&
        kc(k, "experts", 0) * kc(k, "capacity", 0) < 1)
        return fail(L, "kernel %s: experts and capacity must be positive", k->kind);
    return 0;
}

static int rule_kv(Loader *L, const KernelArgs *k) {
    int64_t kvh = kc(k, "kv_heads", 0), hd = kc(k, "head_dim", 0), ms = kc(k, "max_seq", 0);
    if (kvh <= 0 || hd <= 0 || ms <= 0 || kc(k, "heads", kvh) % kvh)
        return fail(L,
                    "kernel %s: kv_heads, head_dim and max_seq must be positive, heads a multiple "
                    "of kv_heads",
                    k->kind);
    return 0;
}

/* What a kind needs beyond its catalog row (its required constants and operands' extents). */
static int (*const kernel_rules[KK_COUNT])(Loader *L, const KernelArgs *k) = {
    [KK_RMSNORM_BWD] = rule_rmsnorm_bwd, [KK_BOTTLENECK_ACT] = rule_bottleneck_act,
    [KK_BOTTLENECK_ACT_BWD] = rule_bottleneck_act_bwd, [KK_ROPE] = rule_rope,
    [KK_ROPE_AT] = rule_rope, [KK_ATTENTION_FWD] = rule_attention,
    [KK_ATTENTION_BWD] = rule_attention, [KK_XENT_COMBINE] = rule_xent_combine,
    [KK_MOE_ROUTER] = rule_moe, [KK_MOE_ROUTER_BWD] = rule_moe, [KK_MOE_DISPATCH] = rule_moe,
    [KK_MOE_DISPATCH_BWD] = rule_moe, [KK_MOE_COMBINE] = rule_moe, [KK_MOE_COMBINE_BWD] = rule_moe,
    [KK_MOE_GATES_BWD] = rule_moe, [KK_MOE_AUX_ADD] = rule_moe, [KK_KV_APPEND] = rule_kv,
    [KK_ATTENTION_DECODE] = rule_kv,
};

/* A kernel's constant at rank 0, for the catalog's evaluator. */
static int args_lookup(const void *ctx, const char *key, double *value) {
    const KernelArgs *k = ctx;
    if (!kernel_has(k, key)) return 0;
    *value = (double)kc(k, key, 0);
    return 1;
}

/* An extent expression of kernel k, an integer of at most 2^50 in magnitude. */
static int extent(Loader *L, const KernelArgs *k, int c, const KcatOperand *op, const char *expr,
                  int64_t *out) {
    double v = kcat_eval(c, expr, args_lookup, k);
    if (!(fabs(v) <= (double)CK_MAX_SIZE))
        return fail(L, "kernel %s operand %s: %s = %.0f is out of range", k->kind, op->key, expr,
                    v);
    *out = (int64_t)v;
    return 0;
}

/* The catalog's required constants are given, the kind's rule holds and every operand's view
 * lies inside its tensor. */
static int check_kernel_extents(Loader *L, const KernelArgs *k) {
    int c = kcat_find(k->kind);
    if (c < 0) return fail(L, "unknown kernel kind %s", k->kind);
    KcatConst kcst;
    for (int i = 0; kcat_const(c, i, &kcst) == 0; i++)
        if (!kcst.plan_optional && !kernel_has(k, kcst.key))
            return fail(L, "kernel %s: missing key %s=", k->kind, kcst.key);
    if (kernel_rules[c] && kernel_rules[c](L, k)) return -1;
    KcatOperand op;
    for (int o = 0; kcat_operand(c, o, &op) == 0; o++) {
        int64_t rows = 0, cols = 0, ld = 0;
        if (!op.rows[0] || kernel_op(k, op.key) < 0) continue;
        if (extent(L, k, c, &op, op.rows, &rows) || extent(L, k, c, &op, op.cols, &cols) ||
            extent(L, k, c, &op, op.ld, &ld) || kview(L, k, op.key, rows, cols, ld))
            return -1;
    }
    return 0;
}

static int line_kernel(Loader *L, Line *ln, KernelArgs *k) {
    if (ln->n < 2 || ln->key[1]) return fail(L, "kernel: expected 'kernel KIND name=N grid=G block=B smem=S ...'");
    int c = kcat_find(ln->tok[1]);
    if (c < 0) return fail(L, "unknown kernel kind %s (the catalog is in docs/plan-format.md)", ln->tok[1]);
    copy_name(k->kind, sizeof k->kind, ln->tok[1]);
    ln->used[1] = 1;
    const char *v = get(ln, "name");
    if (!v) return fail(L, "kernel %s: missing key name=", k->kind);
    copy_name(k->name, sizeof k->name, v);
    if (need_i64(L, ln, "grid", &k->grid, 0) || need_i64(L, ln, "block", &k->block, 0) || need_i64(L, ln, "smem", &k->smem, 0))
        return -1;
    for (int i = 2; i < ln->n; i++) {
        if (ln->used[i]) continue;
        if (!ln->key[i]) return fail(L, "kernel %s: unexpected word '%s'", k->kind, ln->tok[i]);
        ln->used[i] = 1;
        const char *key = ln->key[i], *val = ln->val[i];
        if (strlen(key) >= sizeof k->op_key[0]) return fail(L, "kernel %s: key %s is too long", k->kind, key);
        for (int j = 0; j < k->nops; j++) if (!strcmp(k->op_key[j], key)) return fail(L, "kernel %s: duplicate key %s=", k->kind, key);
        for (int j = 0; j < k->nconst; j++) if (!strcmp(k->const_key[j], key)) return fail(L, "kernel %s: duplicate key %s=", k->kind, key);
        KcatOperand cop;
        if (catalog_operand_of(c, key, &cop)) {
            if (k->nops >= PLAN_MAX_KEYS) return fail(L, "kernel %s: too many operands", k->kind);
            if (parse_operand(L, val, &k->op[k->nops])) return -1;
            if (check_live(L, L->p, &k->op[k->nops])) return -1;
            int want_i32 = !strcmp(cop.dtype, "i32");
            const PlanTensor *ot = &L->p->tensors[k->op[k->nops].tensor];
            if (want_i32 != (ot->dtype == PDT_I32))
                return fail(L, "kernel %s: operand %s=%s is %s, it must be %s", k->kind, key, ot->name,
                            ot->dtype == PDT_I32 ? "i32" : "a float tensor", want_i32 ? "i32" : "bf16 or fp32");
            copy_name(k->op_key[k->nops], sizeof k->op_key[0], key);
            k->nops++;
        } else {
            if (k->nconst >= PLAN_MAX_KEYS) return fail(L, "kernel %s: too many constants", k->kind);
            RankInt ri = {0, 0};
            double d;
            if (!strcmp(val, "silu")) { ri.base = 1; d = 1; }
            else if (!strcmp(val, "none")) { ri.base = 0; d = 0; }
            else if (parse_dtype(val) >= 0) { ri.base = parse_dtype(val); d = (double)ri.base;
            } else if (!parse_rankint(val, &ri)) {
                if (ri.base > INT32_MAX || ri.base < -INT32_MAX || ri.per_rank > INT32_MAX ||
                    ri.per_rank < -INT32_MAX)
                    return fail(
                        L, "kernel %s: %s=%s is out of range (integer constants are at most 2^31)",
                        k->kind, key, val);
                d = (double)ri.base;
            } else if (!parse_f64(
                           val,
                           &d)) { /* its integer view: the range checked before the conversion */
                ri.base = fabs(d) <= INT32_MAX ? (int64_t)d : d > 0 ? INT32_MAX : -INT32_MAX;
            } else
                return fail(
                    L, "kernel %s: %s=%s is neither a tensor operand of this kind nor a number",
                    k->kind, key, val);
            copy_name(k->const_key[k->nconst], sizeof k->const_key[0], key);
            k->const_int[k->nconst] = ri;
            k->const_val[k->nconst] = d;
            k->nconst++;
        }
    }
    /* required operands */
    char key[32];
    int optional;
    for (int o = 0; plan_catalog_operand(k->kind, o, key, sizeof key, NULL, &optional) == 0; o++)
        if (!optional && kernel_op(k, key) < 0) return fail(L, "kernel %s: missing operand %s=", k->kind, key);
    return check_kernel_extents(L, k);
}

static PlanStep *new_step(Loader *L, int kind);

/* ---- collective lines, read by their catalog row (common/collective_catalog.h) ---- */

static const char *const SECTION_NAMES[] = {"forward", "backward", "optimizer"};

/* The grid group (enum GridGroup) of a catalog group (CG_*). */
static int grid_group_of(int cg) {
    static const int grid[CG_COUNT] = {GROUP_TP, GROUP_DP, GROUP_EP, GROUP_EDP};
    return grid[cg];
}

/* Members of grid group `group` in this plan's run (edp: the dp ranks holding the same experts). */
static int64_t run_group_size(const Plan *p, int group) {
    int ep = p->ep > 0 ? p->ep : 1;
    switch (group) {
    case GROUP_TP: return p->tp;
    case GROUP_DP: return p->dp;
    case GROUP_EP: return ep;
    case GROUP_EDP: return p->dp / ep;
    }
    return 1;
}

/* "tp, dp, ep or edp": the names of the groups (or sections) in `bits`, for messages. */
static void bit_names(unsigned bits, const char *const *names, int count, char *out, size_t n) {
    int left = 0;
    for (int i = 0; i < count; i++)
        left += (bits >> i) & 1u;
    out[0] = 0;
    for (int i = 0; i < count; i++) {
        if (!((bits >> i) & 1u)) continue;
        left--;
        size_t at = strlen(out);
        snprintf(out + at, n - at, "%s%s", names[i], left > 1 ? ", " : left == 1 ? " or " : "");
    }
}

/* group=NAME (default: the row's first group), checked against the row: the grid group, or -1. */
static int coll_group(Loader *L, Line *ln, int ck) {
    const CollKindRow *row = ccat_kind(ck);
    const char *names[CG_COUNT], *v = get(ln, "group");
    char allowed[64];
    for (int i = 0; i < CG_COUNT; i++)
        names[i] = ccat_group_name(i);
    bit_names(row->groups, names, CG_COUNT, allowed, sizeof allowed);
    int cg = 0;
    while (!v && !((row->groups >> cg) & 1u))
        cg++;
    if (v && (cg = ccat_group_find(v)) < 0)
        return fail(L,
                    "%s: group=%s is not tp or dp (nor ep or edp), the groups a collective runs "
                    "on: write group=%s",
                    row->word, v, allowed);
    if (!ccat_allows_group(ck, cg))
        return fail(L, "%s: group=%s: %s runs on group=%s only: write one of those", row->word, v,
                    row->word, allowed);
    return grid_group_of(cg);
}

/* Keys every collective line may carry: the row's operands (buf= src= dst= map=), dtype=, dir=,
 * tag=, group=. dtype= may be left out on gather_shards (the parameter's dtype). */
static int coll_common(Loader *L, Line *ln, int ck, CollArgs *c) {
    const CollKindRow *row = ccat_kind(ck);
    static const char *const keys[] = {"buf", "src", "dst", "map"};
    Operand *ops[] = {&c->buf, &c->src, &c->dst, &c->map};
    const char *v;
    char where[64];
    bit_names(row->sections, SECTION_NAMES, 3, where, sizeof where);
    if (!((row->sections >> L->section) & 1u))
        return fail(L, "%s belongs in the %s section, not the %s section: move the line there",
                    row->word, where, SECTION_NAMES[L->section]);
    for (int i = 0; i < 4; i++)
        if ((row->operands >> i) & 1u)
            if (need_str(L, ln, keys[i], &v) || parse_operand(L, v, ops[i])) return -1;
    c->dtype = -1;
    if ((v = get(ln, "dtype")) || ck != CK_GATHER_SHARDS) {
        if (need_str(L, ln, "dtype", &v)) return -1;
        if ((c->dtype = parse_dtype(v)) < 0)
            return fail(L, "%s: dtype=%s is unknown (fp32, bf16, ...)", row->word, v);
    }
    c->bwd = 0;
    if ((v = get(ln, "dir"))) {
        if (!strcmp(v, "bwd"))
            c->bwd = 1;
        else if (strcmp(v, "fwd"))
            return fail(L, "%s: dir=%s is not fwd or bwd", row->word, v);
    }
    copy_name(c->tag, sizeof c->tag, get(ln, "tag"));
    c->bucket = -1;
    return (c->group = coll_group(L, ln, ck)) < 0 ? -1 : 0;
}

/* micro=last, bucket=K and scale=S (allreduce, allgather, reduce_scatter). */
static int coll_options(Loader *L, Line *ln, CollArgs *c) {
    const char *v, *word = ln->tok[0];
    c->scale = 0;
    if (get(ln, "scale")) {
        if (need_f64(L, ln, "scale", &c->scale)) return -1;
        if (!(c->scale > 0) || c->group != GROUP_EDP)
            return fail(L, "%s: scale=%s: a positive factor, on group=edp steps only", word,
                        get(ln, "scale"));
    }
    c->last_micro = 0;
    if ((v = get(ln, "micro"))) {
        if (strcmp(v, "last"))
            return fail(L, "%s: micro=%s: the only value is micro=last", word, v);
        c->last_micro = 1;
    }
    int64_t bucket = -1;
    if (get(ln, "bucket") && need_i64(L, ln, "bucket", &bucket, 0)) return -1;
    c->bucket = (int)bucket;
    return 0;
}

/* allreduce | reduce_scatter buf= elems= [op=sum|avg]: buf [elems] on any group. group=dp and
 * group=edp all-reduces are gradient reductions (backward, d.NAME); a reduce_scatter group=dp of a
 * parameter gradient in a zero plan is ZeRO's (zero_grad: at zero=2 the backend keeps its shard
 * only, so buf must be the whole gradient). */
static int coll_reduce(Loader *L, Line *ln, int ck, CollArgs *c) {
    const Plan *p = L->p;
    const char *v, *word = ln->tok[0];
    if (coll_options(L, ln, c) || need_i64(L, ln, "elems", &c->elems, 1)) return -1;
    c->avg = 0;
    if ((v = get(ln, "op")) && strcmp(v, "sum")) {
        if (strcmp(v, "avg")) return fail(L, "%s: op=%s is not supported (sum or avg)", word, v);
        c->avg = 1;
    }
    const PlanTensor *bt = &p->tensors[c->buf.tensor];
    int grad = bt->kind == TK_GRAD, dp = c->group == GROUP_DP || c->group == GROUP_EDP;
    c->zero_grad = ck == CK_REDUCE_SCATTER && c->group == GROUP_DP && p->zero && grad;
    if (ck == CK_ALLREDUCE && dp && !grad)
        return fail(L, "allreduce group=%s: buf=%s is not a parameter gradient (d.NAME)",
                    grid_group_name(c->group), bt->name);
    if ((c->zero_grad || (ck == CK_ALLREDUCE && dp)) && L->section != 1)
        return fail(L, "%s group=%s of gradient %s belongs in the backward section", word,
                    grid_group_name(c->group), bt->name);
    if (c->zero_grad && p->zero == 2 &&
        (c->elems != numel(bt) || c->buf.off.base || c->buf.off.per_rank))
        return fail(L,
                    "reduce_scatter group=dp at zero=2: buf=%s must be the whole gradient "
                    "(elems=%lld, no offset): the rank keeps only its shard of it",
                    bt->name, (long long)numel(bt));
    if (check_view(L, p, &c->buf, 1, c->elems, c->elems, 0,
                   ck == CK_ALLREDUCE ? "allreduce buf" : "reduce_scatter buf") ||
        check_live(L, p, &c->buf))
        return -1;
    /* a dp reduction of an fp32 gradient may travel as bf16 (parallel.dp_dtype) */
    int wire_bf16 = c->group == GROUP_DP && c->dtype == PDT_BF16 && bt->dtype == PDT_FP32;
    if (bt->dtype != c->dtype && !wire_bf16)
        return fail(L, "%s: dtype does not match buffer %s's dtype", word, bt->name);
    return 0;
}

/* allgather src= dst= rows= cols= [ld_src= ld_dst=]: src [rows, cols] -> dst [rows, cols*n], n the
 * group's size in the run (tp, dp, ep, or dp/ep for edp). */
static int coll_allgather(Loader *L, Line *ln, CollArgs *c) {
    const Plan *p = L->p;
    if (coll_options(L, ln, c) || need_i64(L, ln, "rows", &c->rows, 1) ||
        need_i64(L, ln, "cols", &c->cols, 1))
        return -1;
    int64_t n = run_group_size(p, c->group), wide;
    if (ck_mul(c->cols, n, &wide))
        return fail(L, "allgather: cols=%lld x %lld ranks is out of range", (long long)c->cols,
                    (long long)n);
    c->ld_src = c->cols;
    c->ld_dst = wide;
    if ((get(ln, "ld_src") && need_i64(L, ln, "ld_src", &c->ld_src, 1)) ||
        (get(ln, "ld_dst") && need_i64(L, ln, "ld_dst", &c->ld_dst, 1)))
        return -1;
    if (check_view(L, p, &c->src, c->rows, c->cols, c->ld_src, 0, "allgather src") ||
        check_view(L, p, &c->dst, c->rows, wide, c->ld_dst, 0, "allgather dst") ||
        check_live(L, p, &c->src) || check_live(L, p, &c->dst))
        return -1;
    if (p->tensors[c->src.tensor].dtype != c->dtype || p->tensors[c->dst.tensor].dtype != c->dtype)
        return fail(L, "allgather: dtype does not match the dtypes of %s and %s",
                    p->tensors[c->src.tensor].name, p->tensors[c->dst.tensor].name);
    return 0;
}

/* gather_shards buf= elems= [dtype=] [group=dp]: after 'optimizer adamw' in a zero plan, buf a
 * whole parameter. */
static int coll_gather_shards(Loader *L, Line *ln, CollArgs *c) {
    const Plan *p = L->p;
    if (!L->saw_optimizer_line)
        return fail(L, "gather_shards: belongs after the 'optimizer adamw' line: move it below");
    if (!p->zero)
        return fail(L,
                    "gather_shards: only in a zero=1 or zero=2 plan (the run line has no zero=)");
    if (need_i64(L, ln, "elems", &c->elems, 1)) return -1;
    const PlanTensor *bt = &p->tensors[c->buf.tensor];
    if (bt->kind != TK_PARAM || c->elems != bt->rows * bt->cols || c->buf.off.base ||
        c->buf.off.per_rank)
        return fail(L, "gather_shards: buf=%s must be a whole parameter (elems=%lld)", bt->name,
                    (long long)(bt->rows * bt->cols));
    if (c->dtype >= 0 && c->dtype != bt->dtype)
        return fail(L, "gather_shards: dtype=%s is not %s's dtype", get(ln, "dtype"), bt->name);
    c->dtype = bt->dtype;
    return 0;
}

/* alltoall src= dst= map= experts= capacity= cols= way=out|back dtype= group=ep dir= tag= */
static int coll_alltoall(Loader *L, Line *ln, CollArgs *c) {
    const Plan *p = L->p;
    const char *v;
    if (need_str(L, ln, "way", &v)) return -1;
    if (strcmp(v, "out") && strcmp(v, "back"))
        return fail(L, "alltoall: way=%s is not out or back", v);
    c->way = v[0] == 'b';
    if (need_i64(L, ln, "experts", &c->experts, 1) ||
        need_i64(L, ln, "capacity", &c->capacity, 1) || need_i64(L, ln, "cols", &c->cols, 1))
        return -1;
    if (c->experts % p->ep)
        return fail(L, "alltoall: experts=%lld are not divisible by the run's ep=%d",
                    (long long)c->experts, p->ep);
    if (ck_mul(c->experts, c->capacity, &c->rows) || c->rows > ((int64_t)1 << 40))
        return fail(L, "alltoall: experts=%lld x capacity=%lld is out of range",
                    (long long)c->experts, (long long)c->capacity);
    if (check_view(L, p, &c->src, c->rows, c->cols, c->cols, 0, "alltoall src") ||
        check_view(L, p, &c->dst, c->rows, c->cols, c->cols, 0, "alltoall dst") ||
        check_view(L, p, &c->map, 1, c->rows, c->rows, 0, "alltoall map") ||
        check_live(L, p, &c->src) || check_live(L, p, &c->dst) || check_live(L, p, &c->map))
        return -1;
    if (p->tensors[c->map.tensor].dtype != PDT_FP32)
        return fail(L, "alltoall: map=%s must be fp32 (the router's src)",
                    p->tensors[c->map.tensor].name);
    if (p->tensors[c->src.tensor].dtype != c->dtype || p->tensors[c->dst.tensor].dtype != c->dtype)
        return fail(L, "alltoall: dtype does not match the dtypes of %s and %s",
                    p->tensors[c->src.tensor].name, p->tensors[c->dst.tensor].name);
    return 0;
}

/* A collective line (its first word a catalog row's): the common keys, then the kind's shapes. */
static int line_coll_step(Loader *L, Line *ln, int ck) {
    PlanStep *s = new_step(L, ST_COLL_FIRST + ck);
    if (!s || coll_common(L, ln, ck, &s->coll)) return -1;
    int rc = -1;
    switch (ck) {
    case CK_ALLREDUCE:
    case CK_REDUCE_SCATTER: rc = coll_reduce(L, ln, ck, &s->coll); break;
    case CK_ALLGATHER: rc = coll_allgather(L, ln, &s->coll); break;
    case CK_GATHER_SHARDS: rc = coll_gather_shards(L, ln, &s->coll); break;
    case CK_ALLTOALL: rc = coll_alltoall(L, ln, &s->coll); break;
    default: rc = fail(L, "%s: the loader has no shape rules for this collective", ln->tok[0]);
    }
    return rc || no_unused(L, ln, 1);
}

static PlanStep *new_step(Loader *L, int kind) {
    Plan *p = L->p;
    PlanStep *n = grow(p->steps_, &L->mcap, p->nsteps + 1, sizeof *n);
    if (!n) { fail(L, "out of memory"); return NULL; }
    p->steps_ = n;
    PlanStep *s = &p->steps_[p->nsteps++];
    memset(s, 0, sizeof *s);
    s->kind = kind; s->section = L->section; s->line = L->line; s->marker_tensor = -1;
    s->coll.kind = step_coll_kind(kind);
    return s;
}

static int line_step(Loader *L, Line *ln) {
    Plan *p = L->p;
    const char *w = ln->tok[0];
    if (L->pending_members && strcmp(w, "member"))
        return fail(L, "grouped_gemm: %d member line(s) missing before this line", L->pending_members);
    int ck = ccat_find(w);
    if (ck >= 0) {
        int rc = line_coll_step(L, ln, ck);
        if (L->section < 2) L->step_index++;
        return rc ? -1 : 0;
    }
    if (L->section == 2) {
        if (strcmp(w, "optimizer")) return fail(L, "section optimizer holds the 'optimizer adamw' line (and gather_shards), not '%s'", w);
        if (ln->n < 2 || strcmp(ln->tok[1], "adamw")) return fail(L, "optimizer: only 'optimizer adamw' is supported");
        if (L->saw_optimizer_line) return fail(L, "optimizer line given twice");
        ln->used[1] = 1;
        int64_t z = 0;
        if (get(ln, "zero") && need_i64(L, ln, "zero", &z, 0)) return -1;
        if (z != p->zero) return fail(L, "optimizer adamw zero=%lld does not match the run line's zero=%d", (long long)z, p->zero);
        if (!new_step(L, ST_OPTIMIZER)) return -1;
        L->saw_optimizer_line = 1;
        return no_unused(L, ln, 1);
    }
    if (!strcmp(w, "member")) {
        if (!L->pending_members) return fail(L, "member line outside a grouped_gemm");
        GemmArgs g;
        memset(&g, 0, sizeof g);
        L->step_index--;   /* members belong to their grouped_gemm's step */
        int rc = parse_gemm_fields(L, ln, &g, 0);
        L->step_index++;
        if (rc || no_unused(L, ln, 1)) return -1;
        GemmArgs *nm = realloc(p->members, (size_t)(p->nmembers + 1) * sizeof *nm);
        if (!nm) return fail(L, "out of memory");
        p->members = nm;
        p->members[p->nmembers++] = g;
        p->steps_[p->nsteps - 1].nmembers++;
        L->pending_members--;
        return 0;
    }
    PlanStep *s;
    int rc = 0;
    if (!strcmp(w, "gemm") || !strcmp(w, "batched_gemm")) {
        int b = w[0] == 'b';
        if (!(s = new_step(L, b ? ST_BATCHED_GEMM : ST_GEMM))) return -1;
        rc = parse_gemm_fields(L, ln, &s->gemm, b) || no_unused(L, ln, 1);
    } else if (!strcmp(w, "grouped_gemm")) {
        if (!(s = new_step(L, ST_GROUPED_GEMM))) return -1;
        int64_t count;
        if (need_i64(L, ln, "count", &count, 1) || no_unused(L, ln, 1)) return -1;
        if (count > 4096) return fail(L, "grouped_gemm: count=%lld is too large", (long long)count);
        s->first_member = p->nmembers; s->nmembers = 0;
        L->pending_members = (int)count;
    } else if (!strcmp(w, "kernel")) {
        if (!(s = new_step(L, ST_KERNEL))) return -1;
        s->kernel = calloc(1, sizeof *s->kernel);
        if (!s->kernel) return fail(L, "out of memory");
        rc = line_kernel(L, ln, s->kernel);
    } else if (!strcmp(w, "save")) {
        if (!(s = new_step(L, ST_SAVE))) return -1;
        const char *v;
        if (need_str(L, ln, "buf", &v)) return -1;
        s->marker_tensor = find_tensor(L, v);
        if (s->marker_tensor < 0) return fail(L, "save: unknown tensor %s", v);
        rc = no_unused(L, ln, 1);
    } else if (!strcmp(w, "recompute")) {
        if (ln->n < 2 || (strcmp(ln->tok[1], "begin") && strcmp(ln->tok[1], "end")))
            return fail(L, "recompute: expected 'recompute begin|end chunk=NAME'");
        if (!(s = new_step(L, ln->tok[1][0] == 'b' ? ST_RECOMPUTE_BEGIN : ST_RECOMPUTE_END))) return -1;
        ln->used[1] = 1;
        copy_name(s->chunk, sizeof s->chunk, get(ln, "chunk"));
        rc = no_unused(L, ln, 1);
    } else if (!strcmp(w, "optimizer")) {
        return fail(L, "the optimizer line belongs in 'section optimizer'");
    } else {
        return fail(L, "unknown step kind '%s'", w);
    }
    L->step_index++;
    return rc ? -1 : 0;
}

static int line_section(Loader *L, Line *ln) {
    const char *const *names = SECTION_NAMES;
    if (ln->n != 2) return fail(L, "section: expected 'section forward|backward|optimizer'");
    if (L->pending_members) return fail(L, "grouped_gemm: %d member line(s) missing", L->pending_members);
    int want = L->section + 1;
    if (want > 2 || strcmp(ln->tok[1], names[want]))
        return fail(L, "section %s out of order: sections are forward, backward, optimizer, each once", ln->tok[1]);
    if (want == 0 && (!L->seen_model || !L->seen_run || !L->seen_train || !L->seen_arena))
        return fail(L, "the header lines (model, run, train, arena) must come before section forward");
    if (want == 0 && L->sources_read != L->p->nsources)
        return fail(L, "data: sources=%d but %d source lines before section forward",
                    L->p->nsources, L->sources_read);
    L->section = want;
    return 0;
}

/* Tokenise in place; returns -1 on too many tokens. */
/* One quoted part of a token ("..." with \" \\ \n \t \r \xHH, docs/plan-format.md "Strings"), s
 * at its opening quote; the bytes it stands for go to *w. The character after the closing quote,
 * or NULL when the quote is not closed or an escape is bad. */
static char *unquote(char *s, char **w) {
    for (s++; *s && *s != '"'; s++) {
        if (*s != '\\') {
            *(*w)++ = *s;
            continue;
        }
        char e = *++s;
        if (e == '"' || e == '\\')
            *(*w)++ = e;
        else if (e == 'n')
            *(*w)++ = '\n';
        else if (e == 't')
            *(*w)++ = '\t';
        else if (e == 'r')
            *(*w)++ = '\r';
        else if (e == 'x' && isxdigit((unsigned char)s[1]) && isxdigit((unsigned char)s[2])) {
            char hex[3] = {s[1], s[2], 0};
            long v = strtol(hex, NULL, 16);
            if (v == 0) return NULL; // a NUL would cut the string short
            *(*w)++ = (char)v;
            s += 2;
        } else
            return NULL;
    }
    return *s == '"' ? s + 1 : NULL;
}

/* Tokenise in place; returns -1 on too many tokens, -2 on a bad quoted string. */
static int tokenise(char *s, Line *ln) {
    memset(ln, 0, sizeof *ln);
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == '\r') *s++ = 0;
        if (!*s) break;
        if (ln->n >= MAX_TOKENS) return -1;
        ln->tok[ln->n] = s;
        char *w = s; /* unquoting writes the token's bytes back in place (never longer) */
        while (*s && *s != ' ' && *s != '\t' && *s != '\r') {
            if (*s != '"') {
                *w++ = *s++;
                continue;
            }
            if (!(s = unquote(s, &w))) return -2;
        }
        char sep = *s;
        *w = 0;
        if (sep) s++;
        ln->n++;
    }
    for (int i = 0; i < ln->n; i++) {
        char *eq = strchr(ln->tok[i], '=');
        if (eq && i > 0) {
            /* key=value: the key is copied into the token storage by splitting at '=' */
            *eq = 0;
            ln->key[i] = ln->tok[i];
            ln->val[i] = eq + 1;
        }
    }
    return 0;
}

/* Checks over the whole plan once every line is read. */
static int final_checks(Loader *L) {
    Plan *p = L->p;
    if (L->section < 2) return fail(L, "the plan is truncated: no 'section optimizer' (regenerate it with 'boost gen')");
    if (!L->saw_optimizer_line) return fail(L, "the plan is truncated: no 'optimizer' line (regenerate it with 'boost gen')");
    if (L->pending_members) return fail(L, "the plan is truncated inside a grouped_gemm");
    if (p->tokens < 0 || p->targets < 0 || p->loss < 0)
        return fail(L, "the plan lacks 'input tokens', 'input targets' or 'output loss'");
    int64_t M = (int64_t)p->micro_batch * p->seq;
    if (numel(&p->tensors[p->tokens]) != M || numel(&p->tensors[p->targets]) != M ||
        p->tensors[p->tokens].dtype != PDT_I32 || p->tensors[p->targets].dtype != PDT_I32)
        return fail(L, "inputs tokens/targets must be i32 with micro_batch*seq = %lld elements", (long long)M);
    /* group parts by param (stable) */
    PlanPart *sorted = malloc((size_t)(p->nparts ? p->nparts : 1) * sizeof *sorted);
    if (!sorted) return fail(L, "out of memory");
    int n = 0;
    for (int q = 0; q < p->nparams; q++) {
        p->params[q].first_part = n;
        for (int i = 0; i < p->nparts; i++)
            if (L->part_param[i] == q) sorted[n++] = p->parts[i];
        p->params[q].nparts = n - p->params[q].first_part;
        if (p->params[q].decay < 0) p->params[q].decay = 0;
    }
    free(p->parts);
    p->parts = sorted;
    /* parts cover each param exactly (area sum + no pairwise overlap) on every rank */
    for (int q = 0; q < p->nparams; q++) {
        const PlanParam *pp = &p->params[q];
        if (pp->nparts == 0) return fail(L, "param %s has no part lines (where do its values come from?)", pp->name);
        for (int r = 0; r < p->tp * p->ep; r++) {   /* each tp rank of each ep rank (ep=K parts: ep rank K only) */
            int64_t area = 0;
            int er = r / p->tp;
            r %= p->tp;
            for (int i = 0; i < pp->nparts; i++) {
                const PlanPart *a = &p->parts[pp->first_part + i];
                if (a->ep >= 0 && a->ep != er) continue;
                int64_t ah = rank_int(a->r1, r) - rank_int(a->r0, r), aw = rank_int(a->c1, r) - rank_int(a->c0, r);
                int64_t ar = rank_int(a->lr, r), acl = rank_int(a->lc, r);
                if (ck_add(area, ah * aw, &area))
                    return fail(L, "param %s: its parts' areas are out of range", pp->name);
                for (int j = 0; j < i; j++) {
                    const PlanPart *b = &p->parts[pp->first_part + j];
                    if (b->ep >= 0 && b->ep != er) continue;
                    int64_t bh = rank_int(b->r1, r) - rank_int(b->r0, r), bw = rank_int(b->c1, r) - rank_int(b->c0, r);
                    int64_t br = rank_int(b->lr, r), bcl = rank_int(b->lc, r);
                    if (ar < br + bh && br < ar + ah && acl < bcl + bw && bcl < acl + aw)
                        return fail(L, "param %s: two parts overlap in the local param (rank %d)", pp->name, r);
                }
            }
            if (area != pp->rows * pp->cols)
                return fail(L, "param %s: its parts cover %lld of its %lld elements (rank %d, ep rank %d)", pp->name, (long long)area,
                            (long long)(pp->rows * pp->cols), r, er);
            r += er * p->tp;
        }
    }
    /* live buffers never overlap in the arena */
    for (int a = 0; a < p->ntensors; a++) {
        const PlanTensor *ta = &p->tensors[a];
        if (ta->kind != TK_ACT) continue;
        int64_t a0 = ta->offset, a1 = a0 + numel(ta) * (int64_t)plan_dtype_size(ta->dtype);
        for (int b = 0; b < a; b++) {
            const PlanTensor *tb = &p->tensors[b];
            if (tb->kind != TK_ACT) continue;
            if (ta->live0 > tb->live1 || tb->live0 > ta->live1) continue;
            int64_t b0 = tb->offset, b1 = b0 + numel(tb) * (int64_t)plan_dtype_size(tb->dtype);
            if (a0 < b1 && b0 < a1)
                return fail(L, "buffers %s and %s overlap in the arena (bytes %lld..%lld and %lld..%lld) while both are live (steps %d:%d and %d:%d)",
                            tb->name, ta->name, (long long)b0, (long long)b1, (long long)a0, (long long)a1, tb->live0, tb->live1,
                            ta->live0, ta->live1);
        }
    }
    return 0;
}

/* The whole file as a NUL-terminated text (malloc'd), or NULL with a message in err. */
static char *plan_read_text(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open the plan: %s (run 'boost gen' to write it)", path, strerror(errno)); return NULL; }
    size_t len = 0;
    char why[600];
    char *text = file_read_stream(f, path, MAX_PLAN_BYTES, &len, why, sizeof why);
    fclose(f);
    if (!text) {
        snprintf(err, errlen, "%s (reading the plan)", why);
        return NULL;
    }
    if (memchr(text, 0, len)) {
        free(text);
        snprintf(err, errlen, "%s:1: the plan is not a text file (it contains NUL bytes)", path);
        return NULL;
    }
    return text;
}

Plan *plan_load(const char *path, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    char *text = plan_read_text(path, err, errlen);
    return text ? plan_parse_text(path, text, err, errlen) : NULL;
}

Plan *plan_parse_text(const char *path, char *text, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    Plan *p = calloc(1, sizeof *p);
    Loader L = {0};
    L.p = p; L.path = path; L.err = err; L.errlen = errlen; L.section = -1;
    if (!p || hash_rebuild(&L)) { free(p); free(text); snprintf(err, errlen, "%s: out of memory", path); return NULL; }
    copy_name(p->path, sizeof p->path, path);
    p->tokens = p->targets = p->loss = -1;
    p->tp = 1;

    char *s = text;
    int first = 1;
    while (*s && !L.failed) {
        char *nl = strchr(s, '\n');
        if (nl) *nl = 0;
        L.line++;
        Line ln;
        int trc;
        const char *lead = s + strspn(s, " \t");
        if (!first && *lead == '#') {
            s = nl ? nl + 1 : s + strlen(s);
            continue;
        } /* a comment: not tokenised */
        if (first) {
            first = 0;
            int ver;
            char extra;
            char *cr = strchr(s, '\r');
            if (cr) *cr = 0;
            if (sscanf(s, "boost-plan %d%c", &ver, &extra) != 1) {
                fail(&L, "not a plan file: the first line must be 'boost-plan 1'");
            } else if (ver != PLAN_VERSION) {
                L.failed = 1;
                snprintf(err, errlen, "plan.txt: version %d, this runtime reads version %d: regenerate it with 'boost gen' (%s)",
                         ver, PLAN_VERSION, path);
            }
        } else if (!nl) {   /* the writer ends every line with a newline: a file cut short ends without one */
            fail(&L, "the plan is truncated (its last line has no newline): regenerate it with 'boost gen'");
        } else if ((trc = tokenise(s, &ln))) {
            if (trc == -2)
                fail(&L, "a quoted string is not closed or has a bad escape (docs/plan-format.md, "
                         "\"Strings\")");
            else
                fail(&L, "too many fields on one line (at most %d)", MAX_TOKENS);
        } else if (ln.n == 0 || ln.tok[0][0] == '#') {
            /* blank or comment */
        } else {
            const char *w = ln.tok[0];
            ln.used[0] = 1;
            if (!strcmp(w, "section")) line_section(&L, &ln);
            else if (L.section >= 0) line_step(&L, &ln);
            else if (!strcmp(w, "model")) line_model(&L, &ln);
            else if (!strcmp(w, "run")) line_run(&L, &ln);
            else if (!strcmp(w, "train")) line_train(&L, &ln);
            else if (!strcmp(w, "data")) line_data(&L, &ln);
            else if (!strcmp(w, "source")) line_source(&L, &ln);
            else if (!strcmp(w, "arena")) line_arena(&L, &ln);
            else if (!L.seen_run && (!strcmp(w, "canon") || !strcmp(w, "param") || !strcmp(w, "part") || !strcmp(w, "buffer")))
                fail(&L, "'%s' before the 'run' line (the header comes first)", w);
            else if (!strcmp(w, "canon")) line_canon(&L, &ln);
            else if (!strcmp(w, "param")) line_param(&L, &ln);
            else if (!strcmp(w, "part")) line_part(&L, &ln);
            else if (!strcmp(w, "buffer")) line_buffer(&L, &ln, TK_ACT);
            else if (!strcmp(w, "input")) line_buffer(&L, &ln, TK_INPUT);
            else if (!strcmp(w, "output")) line_buffer(&L, &ln, TK_OUTPUT);
            else if (!strcmp(w, "pipeline") || !strcmp(w, "stage"))
                fail(&L, "a pipeline plan (pp > 1, one section per stage): 'boost train' runs it (runtime/pipeline.c); "
                     "for this command regenerate with -D pp=1");
            else fail(&L, "unknown line kind '%s'", w);
        }
        if (!nl) break;
        s = nl + 1;
    }
    if (first && !L.failed) { L.line = 1; fail(&L, "the plan is empty (regenerate it with 'boost gen')"); }
    if (!L.failed) final_checks(&L);
    free(text);
    free(L.hash);
    free(L.part_param);
    if (L.failed) { plan_free(p); return NULL; }
    return p;
}

void plan_free(Plan *p) {
    if (!p) return;
    for (int i = 0; i < p->nsteps; i++) free(p->steps_[i].kernel);
    free(p->tensors); free(p->canons); free(p->params); free(p->parts); free(p->steps_); free(p->members);
    free(p);
}

int plan_find_tensor(const Plan *p, const char *name) {
    for (int i = 0; i < p->ntensors; i++)
        if (!strcmp(p->tensors[i].name, name)) return i;
    return -1;
}

int plan_find_canon(const Plan *p, const char *name) {
    for (int i = 0; i < p->ncanons; i++)
        if (!strcmp(p->canons[i].name, name)) return i;
    return -1;
}

size_t plan_dtype_size(int dtype) { return dtype == PDT_BF16 ? 2 : 4; }

int kernel_op(const KernelArgs *k, const char *key) {
    for (int i = 0; i < k->nops; i++)
        if (!strcmp(k->op_key[i], key)) return i;
    return -1;
}

int kernel_has(const KernelArgs *k, const char *key) {
    for (int i = 0; i < k->nconst; i++)
        if (!strcmp(k->const_key[i], key)) return 1;
    return 0;
}

int64_t kernel_int(const KernelArgs *k, const char *key, int rank, int64_t dflt) {
    for (int i = 0; i < k->nconst; i++)
        if (!strcmp(k->const_key[i], key)) return rank_int(k->const_int[i], rank);
    return dflt;
}

double kernel_num(const KernelArgs *k, const char *key, double dflt) {
    for (int i = 0; i < k->nconst; i++)
        if (!strcmp(k->const_key[i], key)) return k->const_val[i];
    return dflt;
}

/* ---------------- pipeline plans: stage sections and schedules (docs/plan-format.md) ---------------- */
/* The file is read once and cut into one plan text per stage: the header plus that stage's section,
 * every other line blanked so line numbers stay those of the file; each pipeline rank's `schedule`
 * lines are parsed into steps and checked against the stage plans. */
static int starts_with_word(const char *s, const char *w) {
    size_t n = strlen(w);
    return !strncmp(s, w, n) && (s[n] == ' ' || s[n] == '\n' || s[n] == '\r' || s[n] == 0);
}

int plan_is_pipeline(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fclose(f);
    char quiet[8];
    char *t = plan_read_text(path, quiet, sizeof quiet);
    if (!t) return 0;   /* not a text plan: plan_load says why */
    int is = 0;
    for (char *s = t; s && *s && !is; s = strchr(s, '\n'), s = s ? s + 1 : NULL) {
        if (starts_with_word(s, "pipeline")) is = 1;
        if (starts_with_word(s, "section") || starts_with_word(s, "canon")) break;   /* past the header */
    }
    free(t);
    return is;
}

static const char *kv(const char *line, const char *key, char *out, size_t n) {
    size_t kl = strlen(key);
    for (const char *s = line; (s = strstr(s, key)); s += kl)
        if ((s == line || s[-1] == ' ') && s[kl] == '=') {
            const char *v = s + kl + 1;
            size_t len = strcspn(v, " \n\r");
            if (len >= n) len = n - 1;
            memcpy(out, v, len); out[len] = 0;
            return out;
        }
    return NULL;
}

static int kv_int(const char *line, const char *key, int *out) {
    char b[64];
    if (!kv(line, key, b, sizeof b)) return -1;
    char *end;
    long v = strtol(b, &end, 10);
    if (*end || v < -1000000 || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

static int parse_sched_line(PlanStages *pl, const char *path, int s, const char *line, int lineno, char *err,
                            size_t errlen) {
    PlanSchedStep x = {0};
    x.line = lineno;
    if (starts_with_word(line, "forward")) x.kind = PS_FORWARD;
    else if (starts_with_word(line, "backward")) x.kind = PS_BACKWARD;
    else if (starts_with_word(line, "send")) x.kind = PS_SEND;
    else if (starts_with_word(line, "recv")) x.kind = PS_RECV;
    else {
        snprintf(err, errlen, "%.300s:%d: unknown schedule step (forward, backward, send or recv)", path, lineno);
        return -1;
    }
    x.vs = s;
    if (kv(line, "stage", (char[16]){0}, 16) && (kv_int(line, "stage", &x.vs) || x.vs < 0 || x.vs >= pl->nv || x.vs % pl->pp != s)) {
        snprintf(err, errlen, "%.300s:%d: stage= must be a stage of pipeline rank %d (k with k %% %d = %d, below %d)", path,
                 lineno, s, pl->pp, s, pl->nv);
        return -1;
    }
    const Plan *p = pl->stage[x.vs];
    int slots = p->arena_slots > 1 ? p->arena_slots : 1;
    if (kv_int(line, "micro", &x.micro) || x.micro < 0 || x.micro >= pl->m || kv_int(line, "slot", &x.slot) || x.slot < 0 ||
        x.slot >= slots) {
        snprintf(err, errlen, "%.300s:%d: micro= must be 0..%d and slot= 0..%d", path, lineno, pl->m - 1, slots - 1);
        return -1;
    }
    if (x.kind == PS_SEND || x.kind == PS_RECV) {
        char dir[16];
        if (!kv(line, "dir", dir, sizeof dir) || (strcmp(dir, "fwd") && strcmp(dir, "bwd")) || !kv(line, "buf", x.buf, sizeof x.buf) ||
            kv_int(line, "peer", &x.peer)) {
            snprintf(err, errlen, "%.300s:%d: %s needs dir=fwd|bwd buf=NAME peer=STAGE", path, lineno, x.kind == PS_SEND ? "send" : "recv");
            return -1;
        }
        x.bwd = !strcmp(dir, "bwd");
        int nb = (x.kind == PS_SEND) != x.bwd ? x.vs + 1 : x.vs - 1;   /* the neighbouring stage */
        if (nb < 0 || nb >= pl->nv || x.peer != nb % pl->pp) {
            snprintf(err, errlen, "%.300s:%d: stage %d's %s %s has no neighbour there or goes to rank %d, not %d", path, lineno,
                     x.vs, x.kind == PS_SEND ? "send" : "recv", dir, nb < 0 || nb >= pl->nv ? -1 : nb % pl->pp, x.peer);
            return -1;
        }
        int t = plan_find_tensor(p, x.buf);
        if (t < 0 || p->tensors[t].kind != TK_ACT) {
            snprintf(err, errlen, "%.300s:%d: %s is not an activation buffer of stage %d", path, lineno, x.buf, x.vs);
            return -1;
        }
    }
    pl->sched[s][pl->nsched[s]++] = x;
    return 0;
}

PlanStages *plan_stages_load(const char *path, char *err, size_t errlen) {
    PlanStages *pl = calloc(1, sizeof *pl);
    if (!pl) { snprintf(err, errlen, "out of memory"); return NULL; }
    char *text = plan_read_text(path, err, errlen);
    if (!text) { free(pl); return NULL; }
    size_t len = strlen(text);
    /* line starts and what each line is: -1 header, s in stage s's plan, 1000+s stage s's schedule,
     * -2 the pipeline/stage/schedule lines themselves */
    int nlines = 0;
    for (size_t i = 0; i < len; i++) nlines += text[i] == '\n';
    int *owner = malloc(sizeof *owner * (size_t)(nlines + 2));
    size_t *start = malloc(sizeof *start * (size_t)(nlines + 2));
    if (!owner || !start) {
        free(text); free(owner); free(start); free(pl);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int cur = -1, pp = 0, v = 1, m = 0, rc = 0, last_stage = -1, last_rank = -1;
    size_t pos = 0;
    for (int l = 0; l < nlines + 1 && pos <= len; l++) {
        start[l] = pos;
        const char *s = text + pos;
        if (starts_with_word(s, "pipeline")) {
            if (kv_int(s, "virtual", &v)) v = 1;
            char lt[32];
            if (kv(s, "loss_terms", lt, sizeof lt)) {
                if (strcmp(lt, "moe_aux")) {
                    snprintf(err, errlen, "%s:%d: loss_terms=%s: this runtime knows loss_terms=moe_aux only (regenerate the plan "
                             "with this build's 'boost gen')", path, l + 1, lt);
                    rc = -1; break;
                }
                pl->moe_aux = 1;
            }
            if (kv_int(s, "stages", &pp) || kv_int(s, "micro_batches", &m) || pp < 2 || v < 1 || pp * v > PLAN_MAX_STAGES || m < 1) {
                snprintf(err, errlen, "%s:%d: expected 'pipeline stages=P virtual=V micro_batches=M' with 2 <= P and P*V <= %d", path,
                         l + 1, PLAN_MAX_STAGES);
                rc = -1; break;
            }
            owner[l] = -2;
        } else if (starts_with_word(s, "stage")) {
            int st = -1;
            if (sscanf(s, "stage %d", &st) != 1 || st != last_stage + 1 || st >= pp * v || last_rank >= 0) {
                snprintf(err, errlen, "%s:%d: expected 'stage %d' (stage sections in order, %d of them, before the schedules)", path,
                         l + 1, last_stage + 1, pp * v);
                rc = -1; break;
            }
            cur = last_stage = st;
            owner[l] = -2;
        } else if (starts_with_word(s, "schedule")) {
            int r = -1;
            if (kv_int(s, "rank", &r) || r != last_rank + 1 || r >= pp || last_stage != pp * v - 1) {
                snprintf(err, errlen, "%s:%d: expected 'schedule rank=%d' after the %d stage sections", path, l + 1, last_rank + 1, pp * v);
                rc = -1; break;
            }
            cur = 1000 + (last_rank = r);
            owner[l] = -2;
        } else owner[l] = cur;
        char *nl = strchr(text + pos, '\n');
        pos = nl ? (size_t)(nl - text) + 1 : len + 1;
    }
    if (!rc && (pp < 2 || last_rank != pp - 1)) {
        snprintf(err, errlen, "%s: a pipeline plan needs a 'pipeline stages=P ...' line and P stage sections each ending with its "
                 "schedule (regenerate it with 'boost gen')", path);
        rc = -1;
    }
    pl->pp = pp; pl->v = v; pl->nv = pp * v; pl->m = m;
    for (int s = 0; s < pl->nv && !rc; s++) {
        char *copy = malloc(len + 1);
        if (!copy) { snprintf(err, errlen, "out of memory"); rc = -1; break; }
        memcpy(copy, text, len + 1);
        for (int l = 0; l <= nlines && start[l] < len; l++) {
            if (owner[l] == -1 || owner[l] == s) continue;
            for (size_t i = start[l]; i < len && copy[i] != '\n'; i++) copy[i] = ' ';   /* blank: the line numbers stay */
        }
        pl->stage[s] = plan_parse_text(path, copy, err, errlen);
        if (!pl->stage[s]) { rc = -1; break; }
        if (pl->stage[s]->pp != pp || pl->stage[s]->grad_accum != m) {
            snprintf(err, errlen, "%s: the run line says pp=%d grad_accum=%d, the pipeline line %d stages and %d micro-batches",
                     path, pl->stage[s]->pp, pl->stage[s]->grad_accum, pp, m);
            rc = -1; break;
        }
        pl->stage[s]->pp = 1;   /* the stage's Engine runs its dp x tp slice of the grid */
    }
    for (int s = 0; s < pp && !rc; s++) {   /* the schedules, by pipeline rank */
        pl->sched[s] = malloc(sizeof *pl->sched[s] * (size_t)(nlines + 1));
        if (!pl->sched[s]) { snprintf(err, errlen, "out of memory"); rc = -1; break; }
        for (int l = 0; l <= nlines && start[l] < len && !rc; l++) {
            if (owner[l] != 1000 + s) continue;
            const char *line = text + start[l];
            while (*line == ' ') line++;
            if (*line == '\n' || *line == '#' || !*line) continue;
            rc = parse_sched_line(pl, path, s, line, l + 1, err, errlen);
        }
    }
    free(text); free(owner); free(start);
    if (rc) { plan_stages_free(pl); return NULL; }
    return pl;
}

void plan_stages_free(PlanStages *ps) {
    if (!ps) return;
    for (int k = 0; k < PLAN_MAX_STAGES; k++) { plan_free(ps->stage[k]); free(ps->sched[k]); }
    free(ps);
}
