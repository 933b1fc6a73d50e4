/* test_torch_ref.c: the engine against the PyTorch reference states tests/torch_ref.py wrote under
 * tests/data/: logits, loss, every gradient and three AdamW steps of tiny-cola at tp=1/2/4, btp and
 * naive layouts, feature variants and two accumulated micro-batches; logits, loss, chosen gradients
 * and AdamW of tiny-cola-gqa, tiny-lax, tiny-svd and tiny-llama (megatron layout). Plans are
 * generated here with the references' sizes and hyper-parameters as -D overrides
 * (build/tmp/torch_ref_*); a copy of each keeps the logits where the arena does not reuse them.
 * cpu backend, or $BOOST_TORCH_REF_BACKEND. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tests/unit/testlib.h"   // defines: CHECK, TEST_EXIT
#include "gen/gen.h"              // defines: Run, Override, spec_load_run, gen_write
#include "runtime/runtime.h"      // defines: Engine, engine_*, Plan, plan_load, kernel_op, kernel_int

#define REF_PATH "tests/data/torch_ref_v1.bin"
#define REF_VERSION 1
#define REF_REGEN "run 'python3 tests/torch_ref.py' to write it"
#define REF_NAME_LEN 96
#define REF_MAX_CONFIG 64

/* ---- the reference file (format: the header of tests/torch_ref.py) ---- */

enum { ENC_F32 = 0, ENC_F24 = 1, ENC_NORMAL = 2 };

typedef struct {
    char name[REF_NAME_LEN];
    int rows, cols;
    int is_weight;            /* stored as a generator (enc 2): a canonical weight */
    uint64_t seed;            /* enc 2 only */
    double mean, std;         /* enc 2 only */
    float *data;              /* rows x cols, row-major */
} RefTensor;

typedef struct {
    int nints, nfloats, ntensors;
    char int_name[REF_MAX_CONFIG][REF_NAME_LEN];
    int64_t int_val[REF_MAX_CONFIG];
    char float_name[REF_MAX_CONFIG][REF_NAME_LEN];
    double float_val[REF_MAX_CONFIG];
    RefTensor *tensors;
} Ref;

typedef struct { const unsigned char *p; size_t n, pos; } Cursor;

/* The next `len` bytes, or NULL when the file ends first. */
static const unsigned char *take(Cursor *c, size_t len) {
    if (c->n - c->pos < len) return NULL;
    const unsigned char *q = c->p + c->pos;
    c->pos += len;
    return q;
}
static uint32_t le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t le64(const unsigned char *b) { return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32; }
static float bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static double bits_to_double(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

static int take_i32(Cursor *c, int32_t *v) {
    const unsigned char *b = take(c, 4);
    if (!b) return -1;
    *v = (int32_t)le32(b);
    return 0;
}
static int take_name(Cursor *c, char *name) {
    int32_t len;
    if (take_i32(c, &len) || len < 0 || len >= REF_NAME_LEN) return -1;
    const unsigned char *b = take(c, (size_t)len);
    if (!b) return -1;
    memcpy(name, b, (size_t)len);
    name[len] = 0;
    return 0;
}

/* The counter-based standard normal of docs/plan-format.md ("Parameters"). */
static uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double counter_normal(uint64_t seed, uint64_t idx) {
    double u1 = (double)(splitmix64(seed ^ (2 * idx)) >> 11) * 0x1p-53;
    double u2 = (double)(splitmix64(seed ^ (2 * idx + 1)) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

static void ref_free(Ref *r) {
    if (r->tensors)
        for (int i = 0; i < r->ntensors; i++) free(r->tensors[i].data);
    free(r->tensors);
    memset(r, 0, sizeof *r);
}

/* Decode one tensor record at the cursor into t. Returns 0, or -1 with a message in err. */
static int ref_read_tensor(Cursor *c, RefTensor *t, const char *path, char *err, size_t errlen) {
    int32_t rows, cols, enc, nsel;
    if (take_name(c, t->name) || take_i32(c, &rows) || take_i32(c, &cols) || take_i32(c, &enc) ||
        take_i32(c, &nsel)) {
        snprintf(err, errlen, "%s: truncated or bad tensor header at byte %zu", path, c->pos);
        return -1;
    }
    if (rows <= 0 || cols <= 0 || (int64_t)rows * cols > (1 << 26) || nsel < -1 || nsel > rows ||
        enc < ENC_F32 || enc > ENC_NORMAL) {
        snprintf(err, errlen, "%s: tensor %s: bad shape %dx%d, encoding %d or row count %d", path,
                 t->name, rows, cols, enc, nsel);
        return -1;
    }
    t->rows = rows; t->cols = cols;
    t->data = calloc((size_t)rows * cols, sizeof(float));
    if (!t->data) { snprintf(err, errlen, "out of memory reading %s", path); return -1; }
    if (enc == ENC_NORMAL) {
        const unsigned char *b = take(c, 24);
        if (!b) { snprintf(err, errlen, "%s: tensor %s: truncated", path, t->name); return -1; }
        t->is_weight = 1;
        t->seed = le64(b); t->mean = bits_to_double(le64(b + 8)); t->std = bits_to_double(le64(b + 16));
        for (int64_t i = 0; i < (int64_t)rows * cols; i++)
            t->data[i] = (float)(t->mean + t->std * counter_normal(t->seed, (uint64_t)i));
        return 0;
    }
    int nstored = nsel < 0 ? rows : nsel;
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)(nstored ? nstored : 1));
    if (!sel) { snprintf(err, errlen, "out of memory reading %s", path); return -1; }
    for (int k = 0; k < nstored; k++) {
        if (nsel < 0) { sel[k] = k; continue; }
        if (take_i32(c, &sel[k]) || sel[k] < 0 || sel[k] >= rows) {
            snprintf(err, errlen, "%s: tensor %s: bad or truncated row list", path, t->name);
            free(sel);
            return -1;
        }
    }
    size_t width = enc == ENC_F32 ? 4 : 3;
    const unsigned char *b = take(c, width * (size_t)nstored * cols);
    if (!b) {
        snprintf(err, errlen, "%s: tensor %s: truncated data", path, t->name);
        free(sel);
        return -1;
    }
    for (int k = 0; k < nstored; k++)
        for (int j = 0; j < cols; j++) {
            const unsigned char *e = b + width * ((size_t)k * cols + j);
            uint32_t u = enc == ENC_F32 ? le32(e)
                                        : ((uint32_t)e[0] << 8 | (uint32_t)e[1] << 16 | (uint32_t)e[2] << 24);
            t->data[(size_t)sel[k] * cols + j] = bits_to_float(u);
        }
    free(sel);
    return 0;
}

/* Read a reference file. Returns 0, or -1 with "PATH: what is wrong (what to do)" in err. */
static int ref_load(const char *path, Ref *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s (%s)", path, strerror(errno), REF_REGEN);
        return -1;
    }
    size_t cap = 1 << 20, n = 0, got;
    unsigned char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *bigger = realloc(buf, cap * 2);
            if (!bigger) { free(buf); buf = NULL; break; }
            buf = bigger; cap *= 2;
        }
    }
    fclose(f);
    if (!buf) { snprintf(err, errlen, "out of memory reading %s", path); return -1; }
    Cursor c = { buf, n, 0 };
    int rc = -1;
    int32_t version, count;
    const unsigned char *magic = take(&c, 8);
    if (!magic || memcmp(magic, "BOOSTREF", 8) != 0) {
        snprintf(err, errlen, "%s: not a reference state file (no BOOSTREF magic; %s)", path, REF_REGEN);
        goto done;
    }
    if (take_i32(&c, &version)) { snprintf(err, errlen, "%s: truncated header", path); goto done; }
    if (version != REF_VERSION) {
        snprintf(err, errlen, "%s: version %d, this test reads version %d: regenerate it with "
                 "'python3 tests/torch_ref.py' or update the test", path, version, REF_VERSION);
        goto done;
    }
    if (take_i32(&c, &count) || count < 0 || count > REF_MAX_CONFIG) goto bad_header;
    for (r->nints = 0; r->nints < count; r->nints++) {
        const unsigned char *b;
        if (take_name(&c, r->int_name[r->nints]) || !(b = take(&c, 8))) goto bad_header;
        r->int_val[r->nints] = (int64_t)le64(b);
    }
    if (take_i32(&c, &count) || count < 0 || count > REF_MAX_CONFIG) goto bad_header;
    for (r->nfloats = 0; r->nfloats < count; r->nfloats++) {
        const unsigned char *b;
        if (take_name(&c, r->float_name[r->nfloats]) || !(b = take(&c, 8))) goto bad_header;
        r->float_val[r->nfloats] = bits_to_double(le64(b));
    }
    if (take_i32(&c, &count) || count < 0 || count > 100000) goto bad_header;
    r->tensors = calloc((size_t)(count ? count : 1), sizeof(RefTensor));
    if (!r->tensors) { snprintf(err, errlen, "out of memory reading %s", path); goto done; }
    for (r->ntensors = 0; r->ntensors < count; r->ntensors++)
        if (ref_read_tensor(&c, &r->tensors[r->ntensors], path, err, errlen)) { r->ntensors++; goto done; }
    if (c.pos != c.n) {
        snprintf(err, errlen, "%s: %zu bytes after the last tensor (damaged file? %s)", path, c.n - c.pos, REF_REGEN);
        goto done;
    }
    rc = 0;
    goto done;
bad_header:
    snprintf(err, errlen, "%s: truncated or damaged configuration block (%s)", path, REF_REGEN);
done:
    free(buf);
    if (rc) ref_free(r);
    return rc;
}

static int64_t ref_int(const Ref *r, const char *name) {
    for (int i = 0; i < r->nints; i++)
        if (!strcmp(r->int_name[i], name)) return r->int_val[i];
    fprintf(stderr, "reference file: no config integer '%s' (%s)\n", name, REF_REGEN);
    return -1;
}
static double ref_float(const Ref *r, const char *name) {
    for (int i = 0; i < r->nfloats; i++)
        if (!strcmp(r->float_name[i], name)) return r->float_val[i];
    fprintf(stderr, "reference file: no config number '%s' (%s)\n", name, REF_REGEN);
    return NAN;
}
static const RefTensor *ref_tensor(const Ref *r, const char *name) {
    for (int i = 0; i < r->ntensors; i++)
        if (!strcmp(r->tensors[i].name, name)) return &r->tensors[i];
    return NULL;
}

/* ---- comparisons ---- */

/* |a - b| / |b| over n values (norm-wise relative error); |a - b| when b is all zeros. */
static double rel_err(const float *a, const float *b, size_t n) {
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        diff += d * d;
        ref += (double)b[i] * b[i];
    }
    return ref > 0 ? sqrt(diff / ref) : sqrt(diff);
}
static double rel1(double a, double b) { return fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1.0); }

/* ---- one configuration: generate the plan, run the engine, compare ---- */

/* Tolerances (relative; norm-wise for tensors). The cpu backend computes in fp32 against float64
 * references. BOOST_TORCH_REF_BACKEND=cuda runs the same comparisons on the CUDA backend (bf16
 * activations and weights, fp32 accumulation) with looser bounds: set from bf16's 2^-9 rounding
 * through two layers, not yet measured on a device. They still catch the norm, gate, RoPE and
 * bias-correction mutants of tests/sh/torch_mutants.sh, but not decay on embed/head (1% of the
 * distance moved): tighten them once measured. */
typedef struct { double loss, logits, grad, norm, step_loss, moved; } Tolerance;
static const Tolerance TOL_CPU = { 1e-5, 1e-5, 1e-4, 1e-4, 1e-4, 1e-3 };
static const Tolerance TOL_BF16 = { 1e-2, 3e-2, 5e-2, 3e-2, 2e-2, 5e-2 };
static const char *g_backend = "cpu";
static const Tolerance *g_tol = &TOL_CPU;

typedef struct {
    const char *run;          /* the run spec (specs/runs/RUN.lua) the reference mirrors */
    int tp;
    const char *layout;
    const char *extra;        /* one more override "name=value", or NULL */
    const char *label;
    int accum;                /* > 1: the batch as this many micro-batches of one optimizer step */
} Config;

/* The xent_fwd step of a plan (it names the logits buffer and each rank's vocab slice). */
static const KernelArgs *xent_fwd_step(const Plan *p) {
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps_[s].kind == ST_KERNEL && !strcmp(p->steps_[s].kernel->kind, "xent_fwd")) return p->steps_[s].kernel;
    return NULL;
}

/* The arena reuses the logits' memory once the forward is past them, so reading them after the
 * pass needs them where nothing else goes: write DIR/plan_pinned.txt, the same plan with the
 * logits buffer moved past the end of the arena (the arena grown to hold it), and load that.
 * Only an address changes; every step computes what it did. Returns NULL with a message in err. */
static Plan *pin_logits(const Plan *p, const char *dir, char *err, size_t errlen) {
    const KernelArgs *k = xent_fwd_step(p);
    int op = k ? kernel_op(k, "logits") : -1;
    if (op < 0) { snprintf(err, errlen, "%s: no xent_fwd step with a logits operand", p->path); return NULL; }
    const PlanTensor *t = &p->tensors[k->op[op].tensor];
    if (t->kind != TK_ACT) { snprintf(err, errlen, "%s: logits %s are not an arena buffer", p->path, t->name); return NULL; }
    int64_t offset = (p->arena_bytes + 255) / 256 * 256;
    int64_t bytes = offset + t->rows * t->cols * (int64_t)plan_dtype_size(t->dtype);
    char out_path[320], prefix[PLAN_NAME_LEN + 16];
    snprintf(out_path, sizeof out_path, "%s/plan_pinned.txt", dir);
    snprintf(prefix, sizeof prefix, "buffer %s ", t->name);
    FILE *in = fopen(p->path, "r"), *out = fopen(out_path, "w");
    int moved = 0, grown = 0;
    char line[8192];
    while (in && out && fgets(line, sizeof line, in)) {
        if (!strncmp(line, "arena act bytes=", 16)) {
            fprintf(out, "arena act bytes=%lld\n", (long long)bytes);
            grown++;
        } else if (!strncmp(line, prefix, strlen(prefix)) && strstr(line, " offset=")) {
            char *at = strstr(line, " offset="), *rest = strchr(at + 1, ' ');
            fprintf(out, "%.*s offset=%lld%s", (int)(at - line), line, (long long)offset, rest ? rest : "\n");
            moved++;
        } else {
            fputs(line, out);
        }
    }
    int io_ok = in && out && !ferror(in);
    if (in) fclose(in);
    if (out && fclose(out)) io_ok = 0;
    if (!io_ok || moved != 1 || grown != 1) {
        snprintf(err, errlen, "could not write %s with the logits buffer moved (%d buffer line(s), "
                 "%d arena line(s) found)", out_path, moved, grown);
        return NULL;
    }
    return plan_load(out_path, err, errlen);
}

/* Generate the run's plan with the reference's sizes and hyper-parameters into
 * build/tmp/torch_ref_LABEL and load it. Returns NULL with a message in err. */
static Plan *make_plan(const Ref *r, const Config *cf, char *err, size_t errlen) {
    static const char *int_keys[] = { "seq", "seed", "warmup", "steps" };
    static const char *float_keys[] = { "lr", "min_lr", "beta1", "beta2", "adam_eps", "weight_decay", "clip" };
    int accum = cf->accum > 1 ? cf->accum : 1;
    char val[24][64];
    const char *name[24];
    int n = 0;
    snprintf(val[n], sizeof val[n], "%d", cf->tp); name[n++] = "tp";
    snprintf(val[n], sizeof val[n], "%s", cf->layout); name[n++] = "layout";
    snprintf(val[n], sizeof val[n], "%d", accum); name[n++] = "grad_accum";
    snprintf(val[n], sizeof val[n], "%lld", (long long)ref_int(r, "micro_batch") / accum); name[n++] = "micro_batch";
    for (size_t i = 0; i < sizeof int_keys / sizeof *int_keys; i++) {
        snprintf(val[n], sizeof val[n], "%lld", (long long)ref_int(r, int_keys[i]));
        name[n++] = int_keys[i];
    }
    for (size_t i = 0; i < sizeof float_keys / sizeof *float_keys; i++) {
        snprintf(val[n], sizeof val[n], "%.17g", ref_float(r, float_keys[i]));
        name[n++] = float_keys[i];
    }
    char extra_name[64] = "";
    if (cf->extra) {
        const char *eq = strchr(cf->extra, '=');
        snprintf(extra_name, sizeof extra_name, "%.*s", (int)(eq - cf->extra), cf->extra);
        snprintf(val[n], sizeof val[n], "%s", eq + 1);
        name[n++] = extra_name;
    }
    Override ov[24];
    for (int i = 0; i < n; i++) { ov[i].name = name[i]; ov[i].value = val[i]; }

    Run *run = calloc(1, sizeof *run);
    if (!run) { snprintf(err, errlen, "out of memory"); return NULL; }
    char dir[256], path[320];
    mkdir("build", 0777);
    mkdir("build/tmp", 0777);
    snprintf(dir, sizeof dir, "build/tmp/torch_ref_%s", cf->label);
    Plan *plan = NULL;
    if (spec_load_run(cf->run, ov, n, run, err, errlen) == 0 && gen_write(run, dir, err, errlen) == 0) {
        snprintf(path, sizeof path, "%s/plan.txt", dir);
        plan = plan_load(path, err, errlen);
        if (plan) {
            Plan *pinned = pin_logits(plan, dir, err, errlen);
            plan_free(plan);
            plan = pinned;
        }
    }
    free(run);
    return plan;
}

/* The plan's model against the reference's config: the sizes, eps, theta and the weight list. */
static int config_matches(const Ref *r, const Plan *p, char *why, size_t whylen) {
    struct { const char *key; int64_t plan; } sizes[] = {
        { "hidden", p->hidden }, { "layers", p->layers }, { "heads", p->heads },
        { "kv_heads", p->kv_heads }, { "head_dim", p->head_dim }, { "ffn", p->ffn },
        { "vocab", p->vocab }, { "micro_batch", (int64_t)p->micro_batch * p->grad_accum }, { "seq", p->seq },
    };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (sizes[i].plan != ref_int(r, sizes[i].key)) {
            snprintf(why, whylen, "plan %s=%lld, reference %lld: the spec changed; regenerate the "
                     "reference (python3 tests/torch_ref.py) with the new sizes",
                     sizes[i].key, (long long)sizes[i].plan, (long long)ref_int(r, sizes[i].key));
            return 0;
        }
    int plan_full = !strcmp(p->family, "full"), plan_lax = !strcmp(p->family, "lax");
    int plan_silu = !plan_full && strcmp(p->family, "svd") != 0;   /* sigma inside the factors */
    if (plan_full != ref_int(r, "full") || plan_lax != ref_int(r, "lax") || plan_silu != ref_int(r, "silu")) {
        snprintf(why, whylen, "plan family %s, reference full=%lld lax=%lld silu=%lld", p->family,
                 (long long)ref_int(r, "full"), (long long)ref_int(r, "lax"), (long long)ref_int(r, "silu"));
        return 0;
    }
    if (!(rel1(p->eps, ref_float(r, "eps")) <= 1e-9) || !(rel1(p->rope_theta, ref_float(r, "rope_theta")) <= 1e-9)) {
        snprintf(why, whylen, "plan eps=%g rope_theta=%g, reference %g %g", p->eps, p->rope_theta,
                 ref_float(r, "eps"), ref_float(r, "rope_theta"));
        return 0;
    }
    int nweights = 0;
    for (int i = 0; i < r->ntensors; i++) {
        const RefTensor *t = &r->tensors[i];
        if (!t->is_weight) continue;
        nweights++;
        int c = plan_find_canon(p, t->name);
        if (c < 0 || p->canons[c].rows != t->rows || p->canons[c].cols != t->cols) {
            snprintf(why, whylen, "reference weight %s %dx%d: %s in the plan", t->name, t->rows, t->cols,
                     c < 0 ? "no such canon" : "another shape");
            return 0;
        }
    }
    if (nweights != p->ncanons) {
        snprintf(why, whylen, "the plan has %d canonical tensors, the reference %d weights", p->ncanons, nweights);
        return 0;
    }
    return 1;
}

/* Gather the logits of every rank from the buffer the xent_fwd step reads into full [M, vocab].
 * Returns 0, or -1 with a message. */
static int read_logits(Engine *e, const Plan *p, float *full, int64_t M, int64_t V, char *why, size_t whylen) {
    const KernelArgs *k = xent_fwd_step(p);
    int op = k ? kernel_op(k, "logits") : -1;
    if (op < 0) { snprintf(why, whylen, "no xent_fwd step with a logits operand in the plan"); return -1; }
    const PlanTensor *t = &p->tensors[k->op[op].tensor];
    float *local = malloc(sizeof(float) * (size_t)(t->rows * t->cols));
    char *covered = calloc((size_t)V, 1);
    int rc = 0;
    for (int rank = 0; rank < p->tp && rc == 0; rank++) {
        int64_t rows = kernel_int(k, "rows", rank, -1), cols = kernel_int(k, "cols", rank, -1);
        int64_t ld = kernel_int(k, "ldl", rank, cols), voff = kernel_int(k, "vocab_offset", rank, 0);
        int64_t off = rank_int(k->op[op].off, rank);
        if (rows != M || cols <= 0 || voff < 0 || voff + cols > V ||
            off + (rows - 1) * ld + cols > t->rows * t->cols) {
            snprintf(why, whylen, "xent_fwd at rank %d: rows=%lld cols=%lld vocab_offset=%lld do not fit "
                     "[%lld, %lld]", rank, (long long)rows, (long long)cols, (long long)voff, (long long)M,
                     (long long)V);
            rc = -1;
            break;
        }
        if (engine_read_tensor(e, rank, t->name, local, why, whylen)) { rc = -1; break; }
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < cols; j++) full[m * V + voff + j] = local[off + m * ld + j];
        for (int64_t j = 0; j < cols; j++) covered[voff + j]++;
    }
    for (int64_t j = 0; j < V && rc == 0; j++)
        if (covered[j] != 1) {
            snprintf(why, whylen, "vocab column %lld is held by %d ranks", (long long)j, covered[j]);
            rc = -1;
        }
    free(local);
    free(covered);
    return rc;
}

/* One optimizer step's worth of passes: the batch as `accum` micro-batches of Mc token rows
 * (forward only, or forward+backward accumulating gradients); *loss = the mean of their losses. */
static int passes(Engine *e, const int32_t *tokens, const int32_t *targets, int accum, int64_t Mc,
                  int backward, float *loss, char *err, size_t errlen) {
    double sum = 0;
    for (int c = 0; c < accum; c++) {
        float l = NAN;
        int rc = backward ? engine_forward_backward(e, tokens + c * Mc, targets + c * Mc, &l, err, errlen)
                          : engine_forward(e, tokens + c * Mc, targets + c * Mc, &l, err, errlen);
        if (rc) return rc;
        sum += l;
    }
    *loss = (float)(sum / accum);
    return 0;
}

static void run_config(const Ref *r, const Config *cf) {
    char err[1024], name[160];
    const char *L = cf->label;
    Plan *p = make_plan(r, cf, err, sizeof err);
    snprintf(name, sizeof name, "%s plan generated and loaded", L);
    CHECK(p != NULL, name, "%s", err);
    if (!p) return;
    char why[512] = "";
    snprintf(name, sizeof name, "%s plan matches the reference config", L);
    int match = config_matches(r, p, why, sizeof why);
    CHECK(match, name, "%s", why);
    Engine *e = match ? engine_create(p, g_backend, err, sizeof err) : NULL;
    if (match) {
        snprintf(name, sizeof name, "%s %s engine created", L, g_backend);
        CHECK(e != NULL, name, "%s", err);
    }
    if (!e) { plan_free(p); return; }

    int64_t M = ref_int(r, "micro_batch") * ref_int(r, "seq"), V = ref_int(r, "vocab");
    int nsteps = (int)ref_int(r, "opt_steps");
    const RefTensor *tok = ref_tensor(r, "tokens"), *tgt = ref_tensor(r, "targets");
    const RefTensor *logits = ref_tensor(r, "logits"), *loss_ref = ref_tensor(r, "loss");
    const RefTensor *opt_lr = ref_tensor(r, "opt.lr"), *opt_norm = ref_tensor(r, "opt.grad_norm");
    const RefTensor *opt_loss = ref_tensor(r, "opt.loss");
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)M), *targets = malloc(sizeof(int32_t) * (size_t)M);
    for (int64_t m = 0; m < M; m++) { tokens[m] = (int32_t)tok->data[m]; targets[m] = (int32_t)tgt->data[m]; }
    size_t maxw = 0;
    for (int i = 0; i < r->ntensors; i++)
        if ((size_t)r->tensors[i].rows * r->tensors[i].cols > maxw) maxw = (size_t)r->tensors[i].rows * r->tensors[i].cols;
    float *buf = malloc(sizeof(float) * maxw), *full = malloc(sizeof(float) * (size_t)(M * V));

    /* the engine's own initialisation against the doc's formula, for the matrices (whose std and
     * seed the reference draws by the doc's rule; the norms it draws around 1 instead of ones) */
    int rc = engine_init_params(e, err, sizeof err);
    snprintf(name, sizeof name, "%s engine_init_params", L);
    CHECK(rc == 0, name, "%s", err);
    int init_ok = 1;
    why[0] = 0;
    for (int i = 0; i < r->ntensors && rc == 0; i++) {
        const RefTensor *t = &r->tensors[i];
        if (!t->is_weight || t->mean != 0) continue;
        const PlanCanon *pc = &p->canons[plan_find_canon(p, t->name)];
        engine_get_canon(e, plan_find_canon(p, t->name), SLOT_PARAM, buf);
        double err_i = rel_err(buf, t->data, (size_t)t->rows * t->cols);
        if (pc->seed != t->seed || !(rel1(pc->std, t->std) <= 1e-6) || !(err_i <= 1e-6)) {
            snprintf(why, sizeof why, "%s: plan seed=0x%llx std=%.9g, reference seed=0x%llx std=%.9g; "
                     "values differ by %.3g", t->name, (unsigned long long)pc->seed, pc->std,
                     (unsigned long long)t->seed, t->std, err_i);
            init_ok = 0;
            break;
        }
    }
    snprintf(name, sizeof name, "%s initial matrices follow the doc's N(seed, idx) and init std", L);
    CHECK(rc == 0 && init_ok, name, "%s", why);

    /* the reference's weights */
    int set_ok = 1;
    for (int i = 0; i < r->ntensors; i++)
        if (r->tensors[i].is_weight &&
            engine_set_canon(e, plan_find_canon(p, r->tensors[i].name), SLOT_PARAM, r->tensors[i].data))
            set_ok = 0;
    snprintf(name, sizeof name, "%s engine_set_canon of every weight", L);
    CHECK(set_ok, name, "engine_set_canon failed");

    /* forward only: loss and logits (read before a backward pass can reuse their memory) */
    double m_loss = NAN, m_logits = NAN, m_grad = 0, m_opt = 0;   /* measured, for the summary */
    char m_grad_name[REF_NAME_LEN] = "";
    float loss = NAN;
    double loss_sum = 0;
    int accum = p->grad_accum, logits_rc = 0;
    int64_t Mc = M / accum;
    for (int c = 0; c < accum && rc == 0 && logits_rc == 0; c++) {
        rc = engine_forward(e, tokens + c * Mc, targets + c * Mc, &loss, err, sizeof err);
        loss_sum += loss;
        if (rc == 0) logits_rc = read_logits(e, p, full + c * Mc * V, Mc, V, why, sizeof why);
    }
    loss = (float)(loss_sum / accum);
    snprintf(name, sizeof name, "%s forward loss (rel %g)", L, g_tol->loss);
    CHECK(rc == 0 && rel1(loss, loss_ref->data[0]) < g_tol->loss, name, "%s loss %.7f, reference %.7f",
          rc ? err : "", loss, loss_ref->data[0]);
    snprintf(name, sizeof name, "%s logits (norm-wise rel %g)", L, g_tol->logits);
    if (rc == 0 && logits_rc == 0) {
        double le = m_logits = rel_err(full, logits->data, (size_t)(M * V));
        CHECK(le < g_tol->logits, name, "relative error %.3g", le);
    } else {
        CHECK(0, name, "%s", rc ? err : why);
    }

    /* forward + backward: loss and every gradient */
    rc = passes(e, tokens, targets, accum, Mc, 1, &loss, err, sizeof err);
    m_loss = rel1(loss, loss_ref->data[0]);
    int ncompared = 0;
    snprintf(name, sizeof name, "%s forward_backward loss (rel %g)", L, g_tol->loss);
    CHECK(rc == 0 && rel1(loss, loss_ref->data[0]) < g_tol->loss, name, "%s loss %.7f, reference %.7f",
          rc ? err : "", loss, loss_ref->data[0]);
    for (int i = 0; i < r->ntensors && rc == 0; i++) {
        const RefTensor *t = &r->tensors[i];
        if (!t->is_weight) continue;
        char gname[REF_NAME_LEN + 8];
        snprintf(gname, sizeof gname, "grad.%s", t->name);
        const RefTensor *g = ref_tensor(r, gname);
        if (!g && !ref_int(r, "all_grads")) continue;   /* a file with a chosen subset */
        ncompared++;
        int got = g && engine_get_canon(e, plan_find_canon(p, t->name), SLOT_GRAD, buf) == 0;
        double ge = got ? rel_err(buf, g->data, (size_t)t->rows * t->cols) : INFINITY;
        if (ge > m_grad) { m_grad = ge; snprintf(m_grad_name, sizeof m_grad_name, "%s", t->name); }
        snprintf(name, sizeof name, "%s %s (norm-wise rel %g)", L, gname, g_tol->grad);
        CHECK(ge < g_tol->grad, name, got ? "relative error %.3g" : "no reference or engine_get_canon failed", ge);
    }

    snprintf(name, sizeof name, "%s gradients compared", L);
    CHECK(rc == 0 && ncompared > 0, name, "no gradient in the reference (%s)", REF_REGEN);

    /* AdamW steps on the same batch: lr, pre-clip norm, then the loss with the new weights */
    for (int s = 0; s < nsteps && rc == 0; s++) {
        float gnorm = NAN, lr = NAN;
        rc = engine_optimizer_step(e, s, &gnorm, &lr, err, sizeof err);
        snprintf(name, sizeof name, "%s step %d lr", L, s);
        CHECK(rc == 0 && rel1(lr, opt_lr->data[s]) < 1e-6, name, "%s lr %.9g, reference %.9g", rc ? err : "",
              lr, opt_lr->data[s]);
        snprintf(name, sizeof name, "%s step %d gradient norm before clipping (rel %g)", L, s, g_tol->norm);
        CHECK(rc == 0 && rel1(gnorm, opt_norm->data[s]) < g_tol->norm, name, "norm %.7g, reference %.7g", gnorm,
              opt_norm->data[s]);
        if (rc) break;
        rc = passes(e, tokens, targets, accum, Mc, s + 1 < nsteps, &loss, err, sizeof err);
        if (rel1(loss, opt_loss->data[s]) > m_opt) m_opt = rel1(loss, opt_loss->data[s]);
        snprintf(name, sizeof name, "%s loss after step %d (rel %g)", L, s, g_tol->step_loss);
        CHECK(rc == 0 && rel1(loss, opt_loss->data[s]) < g_tol->step_loss, name, "%s loss %.7f, reference %.7f",
              rc ? err : "", loss, opt_loss->data[s]);
    }
    if (rc == 0) {
        /* how far each weight moved: catches a wrong decay set, bias correction or clip */
        double worst = 0;
        char worst_name[REF_NAME_LEN] = "";
        for (int i = 0; i < r->ntensors; i++) {
            const RefTensor *t = &r->tensors[i];
            if (!t->is_weight) continue;
            char dname[REF_NAME_LEN + 16];
            snprintf(dname, sizeof dname, "opt.delta.%s", t->name);
            const RefTensor *d = ref_tensor(r, dname);
            engine_get_canon(e, plan_find_canon(p, t->name), SLOT_PARAM, buf);
            double moved = 0;
            for (size_t j = 0; j < (size_t)t->rows * t->cols; j++)
                moved += ((double)buf[j] - t->data[j]) * ((double)buf[j] - t->data[j]);
            double de = d ? rel1(sqrt(moved), d->data[0]) : INFINITY;
            if (!(de <= worst)) { worst = de; snprintf(worst_name, sizeof worst_name, "%s", t->name); }
        }
        snprintf(name, sizeof name, "%s distance each weight moved in %d steps (rel %g)", L, nsteps, g_tol->moved);
        CHECK(worst < g_tol->moved, name, "worst %s: relative error %.3g", worst_name, worst);
        printf("# %s measured: loss %.2g, logits %.2g, worst gradient %.2g (%s), losses after steps %.2g, "
               "distance moved %.2g (%s)\n", L, m_loss, m_logits, m_grad, m_grad_name, m_opt, worst, worst_name);
    }
    free(tokens); free(targets); free(buf); free(full);
    engine_free(e);
    plan_free(p);
}

/* ---- the reader's own errors ---- */

static int write_bytes(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(b, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static void reader_errors(void) {
    char err[1024];
    Ref r;
    mkdir("build", 0777);
    mkdir("build/tmp", 0777);
    const char *path = "build/tmp/torch_ref_bad.bin";
    int rc = ref_load("build/tmp/no-such-reference.bin", &r, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "tests/torch_ref.py"), "reader: a missing file says how to write it", "%s",
          rc ? err : "accepted");
    unsigned char v2[16] = { 'B', 'O', 'O', 'S', 'T', 'R', 'E', 'F', 2, 0, 0, 0, 0, 0, 0, 0 };
    rc = write_bytes(path, v2, sizeof v2) ? 1 : ref_load(path, &r, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "version 2"), "reader: another version is refused by name", "%s",
          rc ? err : "accepted");
    /* a valid header and one f32 tensor cut short */
    unsigned char cut[] = { 'B', 'O', 'O', 'S', 'T', 'R', 'E', 'F', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                            1, 0, 0, 0, 1, 0, 0, 0, 'x', 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff,
                            0xff, 0, 0, 0x80, 0x3f };
    rc = write_bytes(path, cut, sizeof cut) ? 1 : ref_load(path, &r, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "truncated"), "reader: a truncated tensor is refused", "%s",
          rc ? err : "accepted");
    /* the same tensor complete: [1, 2] = {1.0, 2.0} */
    unsigned char whole[sizeof cut + 4];
    memcpy(whole, cut, sizeof cut);
    memcpy(whole + sizeof cut, (unsigned char[]){ 0, 0, 0, 0x40 }, 4);
    rc = write_bytes(path, whole, sizeof whole) ? 1 : ref_load(path, &r, err, sizeof err);
    CHECK(rc == 0 && r.ntensors == 1 && r.tensors[0].data[0] == 1.0f && r.tensors[0].data[1] == 2.0f,
          "reader: a small valid file decodes", "%s", rc ? err : "wrong values");
    if (rc == 0) ref_free(&r);
    remove(path);
}

/* Load one reference file and run its configurations. */
static void run_reference(const char *path, const Config *configs, int nconfigs) {
    char err[1024], name[256];
    Ref r;
    int rc = ref_load(path, &r, err, sizeof err);
    snprintf(name, sizeof name, "reference state %s read", path);
    CHECK(rc == 0, name, "%s", err);
    if (rc) return;
    int complete = ref_tensor(&r, "tokens") && ref_tensor(&r, "targets") && ref_tensor(&r, "logits") &&
                   ref_tensor(&r, "loss") && ref_tensor(&r, "opt.lr") && ref_tensor(&r, "opt.grad_norm") &&
                   ref_tensor(&r, "opt.loss") && ref_int(&r, "opt_steps") > 0 &&
                   ref_tensor(&r, "opt.lr")->cols >= ref_int(&r, "opt_steps") &&
                   ref_int(&r, "lax") >= 0 && ref_int(&r, "silu") >= 0 && ref_int(&r, "all_grads") >= 0 &&
                   ref_int(&r, "full") >= 0;
    snprintf(name, sizeof name, "%s holds inputs, logits, loss and the optimizer record", path);
    CHECK(complete, name, "a tensor or config value is missing (%s)", REF_REGEN);
    if (complete)
        for (int i = 0; i < nconfigs; i++) run_config(&r, &configs[i]);
    ref_free(&r);
}

/* Which tiny model a reference mirrors, from its config. */
static const char *ref_run(const Ref *r) {
    if (ref_int(r, "full") == 1) return "tiny-llama";
    if (ref_int(r, "lax") == 1) return "tiny-lax";
    if (ref_int(r, "silu") == 0) return "tiny-svd";
    if (ref_int(r, "kv_heads") != ref_int(r, "heads")) return "tiny-cola-gqa";
    return "tiny-cola";
}

int main(void) {
    const char *backend = getenv("BOOST_TORCH_REF_BACKEND");
    if (backend && *backend) {
        g_backend = backend;
        g_tol = strcmp(backend, "cpu") ? &TOL_BF16 : &TOL_CPU;
        printf("# backend %s\n", g_backend);
    }
    reader_errors();
    /* tiny-cola: every gradient, every layout variant */
    static const Config cola[] = {
        { "tiny-cola", 1, "btp", NULL, "tp1_btp", 1 },
        { "tiny-cola", 2, "btp", NULL, "tp2_btp", 1 },
        { "tiny-cola", 2, "naive", NULL, "tp2_naive", 1 },
        { "tiny-cola", 1, "naive", NULL, "tp1_naive", 1 },
        { "tiny-cola", 4, "btp", NULL, "tp4_btp", 1 },
        { "tiny-cola", 2, "btp", "online_rmsnorm=false", "tp2_btp_syncnorm", 1 },
        { "tiny-cola", 2, "btp", "checkpoint=none", "tp2_btp_nockpt", 1 },
        { "tiny-cola", 2, "btp", "group_linears=false", "tp2_btp_ungrouped", 1 },
        { "tiny-cola", 2, "btp", NULL, "tp2_btp_accum2", 2 },
    };
    static const Config gqa[] = {
        { "tiny-cola-gqa", 1, "btp", NULL, "gqa_tp1_btp", 1 },
        { "tiny-cola-gqa", 2, "btp", NULL, "gqa_tp2_btp", 1 },
        { "tiny-cola-gqa", 2, "naive", NULL, "gqa_tp2_naive", 1 },
        { "tiny-cola-gqa", 2, "btp", "checkpoint=none", "gqa_tp2_btp_nockpt", 1 },
    };
    static const Config lax[] = {
        { "tiny-lax", 1, "btp", NULL, "lax_tp1_btp", 1 },
        { "tiny-lax", 2, "btp", NULL, "lax_tp2_btp", 1 },
        { "tiny-lax", 2, "naive", NULL, "lax_tp2_naive", 1 },
        { "tiny-lax", 4, "btp", "online_rmsnorm=false", "lax_tp4_btp_syncnorm", 1 },
    };
    static const Config svd[] = {
        { "tiny-svd", 1, "btp", NULL, "svd_tp1_btp", 1 },
        { "tiny-svd", 2, "btp", NULL, "svd_tp2_btp", 1 },
        { "tiny-svd", 2, "naive", NULL, "svd_tp2_naive", 1 },
        { "tiny-svd", 4, "btp", NULL, "svd_tp4_btp", 1 },
    };
    static const Config llama[] = {   /* dense: the megatron layout */
        { "tiny-llama", 1, "megatron", NULL, "llama_tp1_megatron", 1 },
        { "tiny-llama", 2, "megatron", NULL, "llama_tp2_megatron", 1 },
        { "tiny-llama", 4, "megatron", NULL, "llama_tp4_megatron", 1 },
        { "tiny-llama", 2, "megatron", "group_linears=false", "llama_tp2_megatron_ungrouped", 1 },
    };
    struct { const char *path; const Config *configs; int n; } sets[] = {
        { REF_PATH, cola, (int)(sizeof cola / sizeof *cola) },
        { "tests/data/torch_ref_gqa_v1.bin", gqa, (int)(sizeof gqa / sizeof *gqa) },
        { "tests/data/torch_ref_lax_v1.bin", lax, (int)(sizeof lax / sizeof *lax) },
        { "tests/data/torch_ref_svd_v1.bin", svd, (int)(sizeof svd / sizeof *svd) },
        { "tests/data/torch_ref_llama_v1.bin", llama, (int)(sizeof llama / sizeof *llama) },
    };
    int nsets = (int)(sizeof sets / sizeof *sets);
    /* BOOST_TORCH_REF: one other reference file, run with the configurations of the model its
     * config names (tests/sh/torch_mutants.sh feeds deliberately wrong ones) */
    const char *other = getenv("BOOST_TORCH_REF");
    if (other && *other) {
        char err[1024];
        Ref r;
        if (ref_load(other, &r, err, sizeof err)) {
            CHECK(0, "reference state read", "%s", err);
            TEST_EXIT();
        }
        const char *run = ref_run(&r);
        ref_free(&r);
        for (int i = 0; i < nsets; i++)
            if (!strcmp(sets[i].configs[0].run, run)) run_reference(other, sets[i].configs, sets[i].n);
        TEST_EXIT();
    }
    for (int i = 0; i < nsets; i++) run_reference(sets[i].path, sets[i].configs, sets[i].n);
    TEST_EXIT();
}
