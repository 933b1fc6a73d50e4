/* import.c: `boost import HF_DIR -o OUT`: a dense Hugging Face LLaMA checkpoint (config.json and
 * model.safetensors, or shards named by model.safetensors.index.json; F32, BF16 or F16) becomes a
 * BOOST model spec (OUT/NAME.lua), a run spec (OUT/NAME-run.lua), its plan (OUT/plan/) and a step-0
 * checkpoint (OUT/step-000000) that `boost train OUT/NAME-run.lua --resume OUT -o OUT` continues.
 * Full rank as is, or each projection factorized by a truncated SVD (LAPACK sgesdd from the static
 * OpenBLAS): W = U S V^T, A = U_r sqrt(S_r), B = sqrt(S_r) V_r^T (docs/import-export.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli/commands.h"
#include "gen/gen.h" // defines: spec_load_run, gen_write
#include "runtime/checkpoint.h" // defines: ckpt_save, CkptState, ckpt_fingerprint
#include "runtime/plan.h" // defines: plan_load, Plan, PlanCanon
#include "runtime/safetensors.h" // defines: st_open, st_find, json_parse, json_get
#include "common/files.h"    // defines: file_read_all

/* LAPACK's divide-and-conquer SVD of a column-major m x n matrix (OpenBLAS's LAPACK). */
void sgesdd_(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s,
             float *u, const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork,
             int *iwork, int *info);

/* OpenBLAS's LAPACK is Fortran compiled by gfortran, and a few of its routines (sormbr, sormlq:
 * parts of sgesdd) join option strings with this gfortran runtime call. bin/boost links no
 * libgfortran (it must start on machines without one), so here is the one call, with gfortran's
 * ABI: dest is filled with s1 then s2, cut at destlen or padded with blanks as Fortran strings are.
 */
void _gfortran_concat_string(size_t destlen, char *dest, size_t len1, const char *s1, size_t len2,
                             const char *s2);
void _gfortran_concat_string(size_t destlen, char *dest, size_t len1, const char *s1, size_t len2,
                             const char *s2) {
    if (len1 >= destlen) {
        memcpy(dest, s1, destlen);
        return;
    }
    memcpy(dest, s1, len1);
    dest += len1;
    destlen -= len1;
    if (len2 >= destlen) {
        memcpy(dest, s2, destlen);
        return;
    }
    memcpy(dest, s2, len2);
    memset(dest + len2, ' ', destlen - len2);
}

#define NPROJ_HF 7
static const char *const PROJ[NPROJ_HF] = {"q", "k", "v", "o", "gate", "up", "down"};
static const char *const HF_PROJ[NPROJ_HF] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
#define MAX_FILES 512

enum { FAM_FULL, FAM_SVD, FAM_COLA };
static const char *const FAMILY[] = {"full", "svd", "cola"};

typedef struct {
    const char *hf_dir, *out, *name;
    int family; /* FAM_* */
    int rank; /* --rank R (0: not given) */
    double energy; /* --energy E (0: not given) */
    int seq; /* the run spec's seq (0: min(max_position_embeddings, 1024)) */
} ImportOptions;

typedef struct { /* what config.json says */
    int hidden, layers, heads, kv_heads, ffn, vocab, max_pos, tied;
    double eps, theta;
} HfConfig;

typedef struct { /* the checkpoint's files, all open (st_open reads each whole) */
    StFile files[MAX_FILES];
    int nfiles;
} HfWeights;

typedef struct { /* one projection of one layer after the SVD: A [din, r], B [r, dout] */
    float *A, *B;
    int r, din, dout;
    double err, norm; /* Frobenius norms of W - A B and of W */
} Factor;

static void import_usage(FILE *f) {
    fprintf(
        f,
        "usage: boost import HF_DIR -o OUT [--family full|svd|cola] [--rank R | --energy E] "
        "[--name NAME] [--seq N]\n"
        "  HF_DIR      a Hugging Face LLaMA checkpoint: config.json and model.safetensors, or the "
        "shards\n"
        "              model.safetensors.index.json names (F32, BF16 or F16)\n"
        "  -o OUT      writes OUT/NAME.lua (model spec), OUT/NAME-run.lua (run spec), OUT/plan/ "
        "and the\n"
        "              step-0 checkpoint OUT/step-000000\n"
        "  --family    full (default: the weights as they are), svd (A = U sqrt(S), B = sqrt(S) "
        "V^T, no\n"
        "              activation: exact at full rank) or cola (the same split, SiLU between the "
        "factors)\n"
        "  --rank R    every projection truncated to rank min(R, d_in, d_out)\n"
        "  --energy E  per projection the smallest rank whose singular values keep the share E (0 "
        "< E <= 1)\n"
        "              of sum(S^2); without --rank or --energy the SVD is at full rank\n"
        "  --name NAME the model's name (default: OUT's last component)\n"
        "  --seq N     the run spec's sequence length (default min(max_position_embeddings, "
        "1024))\n"
        "Then: boost train OUT/NAME-run.lua --resume OUT -o OUT   (from the repository's root)\n");
}

/* ---- config.json ---- */

static int cfg_num(const Json *cfg, const char *key, double def, double *out, const char *path) {
    const Json *v = json_get(cfg, key);
    if (!v || v->type == JSON_NULL) {
        *out = def;
        return def == def ? 0 : 2;
    }
    if (v->type != JSON_NUMBER) {
        fprintf(stderr, "boost import: %s: \"%s\" must be a number\n", path, key);
        return 2;
    }
    *out = v->num;
    return 0;
}

static int cfg_int(const Json *cfg, const char *key, int def, int *out, const char *path) {
    double d;
    if (cfg_num(cfg, key, def < 0 ? NAN : def, &d, path)) {
        fprintf(stderr, "boost import: %s: \"%s\" is missing\n", path, key);
        return 2;
    }
    if (d != floor(d) || d < 1 || d > 1e8) {
        fprintf(stderr, "boost import: %s: \"%s\" = %g is not a positive whole number\n", path, key,
                d);
        return 2;
    }
    *out = (int)d;
    return 0;
}

/* The RoPE settings: plain RoPE only ("rope_scaling" null, or "rope_parameters" of type "default").
 */
static int check_rope(const Json *cfg, const char *path, double *theta) {
    const Json *sc = json_get(cfg, "rope_scaling"), *rp = json_get(cfg, "rope_parameters");
    const Json *rt = json_get(sc, "rope_type") ? json_get(sc, "rope_type") : json_get(sc, "type");
    if (!rt) rt = json_get(rp, "rope_type");
    if ((sc && sc->type != JSON_NULL) ||
        (rt && rt->type == JSON_STRING && strcmp(rt->str, "default"))) {
        fprintf(
            stderr,
            "boost import: %s: RoPE scaling \"%s\" is not supported: BOOST's RoPE is the plain one "
            "(theta^(-2i/head_dim), positions as they are); import a checkpoint without "
            "rope_scaling\n",
            path, rt && rt->type == JSON_STRING ? rt->str : "(rope_scaling set)");
        return 2;
    }
    if (cfg_num(cfg, "rope_theta", 10000, theta, path)) return 2;
    const Json *t = json_get(rp, "rope_theta");
    if (t && t->type == JSON_NUMBER) *theta = t->num;
    return 0;
}

/* A whole JSON file (at most 64 MiB) parsed; NULL with a message printed. */
static Json *read_json_file(const char *path) {
    char err[512];
    size_t len = 0;
    char *text = file_read_all(path, (size_t)64 << 20, &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "boost import: %s\n", err);
        return NULL;
    }
    Json *j = json_parse(text ? text : "", len, err, sizeof err);
    free(text);
    if (!j || j->type != JSON_OBJECT) {
        fprintf(stderr, "boost import: %s: not a JSON object%s%s\n", path, j ? "" : ": ",
                j ? "" : err);
        json_free(j);
        return NULL;
    }
    return j;
}

static int read_config(const char *dir, HfConfig *c) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "boost import: %s: %s (HF_DIR must hold a Hugging Face config.json)\n",
                path, strerror(errno));
        return 2;
    }
    Json *cfg = read_json_file(path);
    if (!cfg) return 2;
    int rc = 0;
    const Json *arch = json_get(cfg, "architectures"), *mt = json_get(cfg, "model_type");
    const char *a =
        arch && arch->type == JSON_ARRAY && arch->n == 1 && arch->items[0].type == JSON_STRING
            ? arch->items[0].str
            : NULL;
    if (!a || strcmp(a, "LlamaForCausalLM") ||
        (mt && (mt->type != JSON_STRING || strcmp(mt->str, "llama")))) {
        fprintf(stderr,
                "boost import: %s: architecture %s (model_type %s) is not supported: the one "
                "supported is "
                "LlamaForCausalLM (model_type \"llama\")\n",
                path, a ? a : "(none)", mt && mt->type == JSON_STRING ? mt->str : "(none)");
        json_free(cfg);
        return 2;
    }
    rc |= cfg_int(cfg, "hidden_size", -1, &c->hidden, path) |
          cfg_int(cfg, "num_hidden_layers", -1, &c->layers, path) |
          cfg_int(cfg, "num_attention_heads", -1, &c->heads, path) |
          cfg_int(cfg, "intermediate_size", -1, &c->ffn, path) |
          cfg_int(cfg, "vocab_size", -1, &c->vocab, path) |
          cfg_int(cfg, "max_position_embeddings", 2048, &c->max_pos, path);
    if (!rc) rc = cfg_int(cfg, "num_key_value_heads", c->heads, &c->kv_heads, path);
    if (!rc)
        rc = cfg_num(cfg, "rms_norm_eps", 1e-6, &c->eps, path) | check_rope(cfg, path, &c->theta);
    const Json *tie = json_get(cfg, "tie_word_embeddings"), *act = json_get(cfg, "hidden_act");
    c->tied = tie && tie->type == JSON_BOOL && tie->num != 0;
    if (!rc && act && (act->type != JSON_STRING || strcmp(act->str, "silu"))) {
        fprintf(stderr,
                "boost import: %s: hidden_act %s is not supported: BOOST's MLP gate is SiLU\n",
                path, act->type == JSON_STRING ? act->str : "(not a string)");
        rc = 2;
    }
    const char *flags[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2 && !rc; i++) {
        const Json *b = json_get(cfg, flags[i]);
        if (b && b->type == JSON_BOOL && b->num) {
            fprintf(
                stderr,
                "boost import: %s: %s = true is not supported: BOOST's projections have no bias\n",
                path, flags[i]);
            rc = 2;
        }
    }
    double hd;
    if (!rc && !cfg_num(cfg, "head_dim", c->hidden / c->heads, &hd, path) &&
        (c->hidden % c->heads || hd != c->hidden / c->heads)) {
        fprintf(stderr,
                "boost import: %s: head_dim %g with hidden_size %d and %d heads: BOOST needs "
                "head_dim = "
                "hidden_size / num_attention_heads\n",
                path, hd, c->hidden, c->heads);
        rc = 2;
    }
    if (!rc && c->heads % c->kv_heads) {
        fprintf(stderr, "boost import: %s: %d heads are not a multiple of %d key/value heads\n",
                path, c->heads, c->kv_heads);
        rc = 2;
    }
    json_free(cfg);
    return rc ? 2 : 0;
}

/* ---- the weights ---- */

/* Open model.safetensors, or every shard model.safetensors.index.json's weight_map names. */
static int open_weights(const char *dir, HfWeights *w) {
    char path[1200], err[1400];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) != 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (st_open(path, &w->files[0], err, sizeof err)) {
            fprintf(
                stderr,
                "boost import: %s (HF_DIR needs model.safetensors or model.safetensors.index.json; "
                "PyTorch .bin checkpoints: save them again with "
                "save_pretrained(safe_serialization=True))\n",
                err);
            return 2;
        }
        w->nfiles = 1;
        return 0;
    }
    Json *idx = read_json_file(path);
    const Json *map = json_get(idx, "weight_map");
    if (!map || map->type != JSON_OBJECT) {
        if (idx) fprintf(stderr, "boost import: %s: no \"weight_map\" object\n", path);
        json_free(idx);
        return 2;
    }
    for (int i = 0; i < map->n; i++) {
        const Json *v = &map->items[i];
        if (v->type != JSON_STRING || !v->str[0] || strchr(v->str, '/')) {
            fprintf(stderr, "boost import: %s: weight_map[\"%s\"] must name a file in HF_DIR\n",
                    path, map->keys[i]);
            json_free(idx);
            return 2;
        }
        int seen = 0;
        for (int k = 0; k < w->nfiles && !seen; k++) {
            const char *slash = strrchr(w->files[k].path, '/');
            seen = !strcmp(slash ? slash + 1 : w->files[k].path, v->str);
        }
        if (seen) continue;
        if (w->nfiles == MAX_FILES) {
            fprintf(stderr, "boost import: %s: more than %d shards\n", path, MAX_FILES);
            json_free(idx);
            return 2;
        }
        char shard[1200];
        snprintf(shard, sizeof shard, "%s/%s", dir, v->str);
        if (st_open(shard, &w->files[w->nfiles], err, sizeof err)) {
            fprintf(stderr, "boost import: %s (named in %s)\n", err, path);
            json_free(idx);
            return 2;
        }
        w->nfiles++;
    }
    json_free(idx);
    return 0;
}

static void close_weights(HfWeights *w) {
    for (int i = 0; i < w->nfiles; i++) st_close(&w->files[i]);
    w->nfiles = 0;
}

static const StTensor *find_weight(const HfWeights *w, const char *name, const StFile **file) {
    for (int i = 0; i < w->nfiles; i++) {
        const StTensor *t = st_find(&w->files[i], name);
        if (t) {
            *file = &w->files[i];
            return t;
        }
    }
    return NULL;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, ex = (h >> 10) & 31, man = h & 1023u, bits;
    if (ex == 31)
        bits = sign | 0x7f800000u | (man << 13);
    else if (ex)
        bits = sign | ((ex + 112) << 23) | (man << 13);
    else if (!man)
        bits = sign;
    else { /* subnormal: normalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 1024u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 1023u) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* HF tensor `name` (a [rows, cols] matrix, or a [cols] vector when rows is 0) as floats: out is
 * [rows, cols] row-major, or its transpose [cols, rows] when transpose is set. 0, or 2 with a
 * message. */
static int load_weight(const HfWeights *w, const char *name, int64_t rows, int64_t cols,
                       int transpose, float *out) {
    const StFile *f = NULL;
    const StTensor *t = find_weight(w, name, &f);
    if (!t) {
        fprintf(stderr, "boost import: tensor %s is missing\n", name);
        return 2;
    }
    int shape_ok = rows ? t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols
                        : t->ndim == 1 && t->shape[0] == cols;
    int fp32 = !strcmp(t->dtype, "F32"), bf16 = !strcmp(t->dtype, "BF16"),
        fp16 = !strcmp(t->dtype, "F16");
    if (!shape_ok || !(fp32 || bf16 || fp16)) {
        fprintf(stderr,
                "boost import: %s: tensor %s is %s of %d dims [%lld, %lld], expected F32, BF16 or "
                "F16 [%lld%s%lld]\n",
                f->path, name, t->dtype, t->ndim, (long long)t->shape[0],
                (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)(rows ? rows : cols),
                rows ? ", " : "", (long long)(rows ? cols : 0));
        return 2;
    }
    const unsigned char *src = f->data + t->begin;
    int64_t n = (rows ? rows : 1) * cols, R = rows ? rows : 1;
    for (int64_t i = 0; i < n; i++) {
        float v;
        if (fp32)
            memcpy(&v, src + 4 * i, 4);
        else {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            if (fp16)
                v = half_to_float(h);
            else {
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&v, &bits, 4);
            }
        }
        if (transpose)
            out[(i % cols) * R + i / cols] = v;
        else
            out[i] = v;
    }
    return 0;
}

/* Projection p's HF weight [dout, din] (nn.Linear) and its shape. */
static void proj_shape(const HfConfig *c, int p, int *din, int *dout) {
    int hd = c->hidden / c->heads;
    int outs[NPROJ_HF] = {c->heads * hd, c->kv_heads * hd, c->kv_heads * hd, c->hidden,
                          c->ffn,        c->ffn,           c->hidden};
    int ins[NPROJ_HF] = {c->hidden, c->hidden, c->hidden, c->heads * hd,
                         c->hidden, c->hidden, c->ffn};
    *din = ins[p];
    *dout = outs[p];
}

/* Every tensor the model needs, present with its shape: all missing or misshapen ones named. */
static int check_weights(const HfWeights *w, const HfConfig *c) {
    char name[160];
    int bad = 0;
    const StFile *f;
    for (int i = -1; i < c->layers; i++)
        for (int k = 0; k < (i < 0 ? 3 : NPROJ_HF + 2); k++) {
            int64_t rows = 0, cols = c->hidden;
            if (i < 0) {
                static const char *const top[] = {"model.embed_tokens.weight", "model.norm.weight",
                                                  "lm_head.weight"};
                if (k == 2 && c->tied) continue;
                snprintf(name, sizeof name, "%s", top[k]);
                if (k != 1) rows = c->vocab;
            } else if (k >= NPROJ_HF) {
                snprintf(name, sizeof name, "model.layers.%d.%s.weight", i,
                         k == NPROJ_HF ? "input_layernorm" : "post_attention_layernorm");
            } else {
                int din, dout;
                proj_shape(c, k, &din, &dout);
                snprintf(name, sizeof name, "model.layers.%d.%s.weight", i, HF_PROJ[k]);
                rows = dout;
                cols = din;
            }
            const StTensor *t = find_weight(w, name, &f);
            int ok = t && (rows ? t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols
                                : t->ndim == 1 && t->shape[0] == cols);
            if (ok) continue;
            if (++bad <= 12) {
                if (t)
                    fprintf(stderr,
                            "boost import: %s: tensor %s has %d dims [%lld, ...], expected "
                            "[%lld%s%lld]\n",
                            f->path, name, t->ndim, (long long)t->shape[0],
                            (long long)(rows ? rows : cols), rows ? ", " : "",
                            (long long)(rows ? cols : 0));
                else
                    fprintf(stderr, "boost import: tensor %s is missing\n", name);
            }
        }
    if (bad)
        fprintf(
            stderr,
            "boost import: %d tensor%s missing or of the wrong shape for the LLaMA of config.json: "
            "HF_DIR is not a complete LlamaForCausalLM checkpoint\n",
            bad, bad > 1 ? "s" : "");
    return bad ? 2 : 0;
}

/* ---- the truncated SVD ---- */

/* Factor layer i's projection p: W_x = W_hf^T [din, dout] (x @ W orientation; W_hf's row-major
 * bytes are W_x column-major, as LAPACK wants it) = U diag(S) V^T; keep rank r (o->rank, o->energy
 * or full) and split sqrt(S) into each factor. 0, 1 (LAPACK failed, out of memory) or 2. */
static int factor_projection(const HfWeights *w, const HfConfig *c, const ImportOptions *o, int i,
                             int p, Factor *fa) {
    char name[160];
    int m, n; /* m = din, n = dout */
    proj_shape(c, p, &m, &n);
    int k = m < n ? m : n, info = 0, lwork = -1;
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", i, HF_PROJ[p]);
    float *a = malloc(sizeof(float) * (size_t)m * n), *s = malloc(sizeof(float) * (size_t)k);
    float *u = malloc(sizeof(float) * (size_t)m * k), *vt = malloc(sizeof(float) * (size_t)k * n),
          query = 0;
    int *iwork = malloc(sizeof(int) * 8 * (size_t)k);
    float *work = NULL;
    int rc = !a || !s || !u || !vt || !iwork;
    if (!rc) rc = load_weight(w, name, n, m, 0, a);
    if (!rc) {
        sgesdd_("S", &m, &n, a, &m, s, u, &m, vt, &k, &query, &lwork, iwork, &info);
        lwork = info ? 0 : (int)query + 1;
        work = lwork > 0 ? malloc(sizeof(float) * (size_t)lwork) : NULL;
        if (work) sgesdd_("S", &m, &n, a, &m, s, u, &m, vt, &k, work, &lwork, iwork, &info);
        if (!work || info) {
            fprintf(stderr, "boost import: %s: the SVD (LAPACK sgesdd) failed (info %d)\n", name,
                    info);
            rc = 1;
        }
    }
    if (!rc) {
        double total = 0, kept = 0;
        for (int j = 0; j < k; j++) total += (double)s[j] * s[j];
        int r = o->rank ? (o->rank < k ? o->rank : k) : k;
        if (o->energy > 0) {
            for (r = 0; r < k && (r == 0 || kept < o->energy * total); r++)
                kept += (double)s[r] * s[r];
        }
        double rest = 0;
        for (int j = r; j < k; j++) rest += (double)s[j] * s[j];
        *fa = (Factor){malloc(sizeof(float) * (size_t)m * r),
                       malloc(sizeof(float) * (size_t)r * n),
                       r,
                       m,
                       n,
                       sqrt(rest),
                       sqrt(total)};
        if (!fa->A || !fa->B) rc = 1;
        for (int j = 0; j < r && !rc; j++) {
            float root = sqrtf(s[j]);
            for (int row = 0; row < m; row++)
                fa->A[(size_t)row * r + j] = u[row + (size_t)j * m] * root;
            for (int col = 0; col < n; col++)
                fa->B[(size_t)j * n + col] = root * vt[j + (size_t)col * k];
        }
    }
    if (rc == 1 && !work && !info)
        fprintf(stderr, "boost import: out of memory factorizing %s\n", name);
    free(a);
    free(s);
    free(u);
    free(vt);
    free(iwork);
    free(work);
    return rc;
}

/* ---- the specs ---- */

/* OUT/NAME.lua: the model, with a rank per projection when they differ. */
static int write_model_spec(const char *path, const ImportOptions *o, const HfConfig *c,
                            const Factor *fa) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "boost import: %s: cannot create: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "-- %s: imported by `boost import` from the LlamaForCausalLM checkpoint in %s\n",
            o->name, o->hf_dir);
    if (o->family == FAM_FULL)
        fprintf(f, "-- at full rank (the weights as they were).\n");
    else
        fprintf(f, "-- factorized by truncated SVD (%s), A = U sqrt(S), B = sqrt(S) V^T%s.\n",
                o->energy > 0 ? "per projection the smallest rank keeping the given energy"
                : o->rank     ? "rank per projection "
                                "min(R, d_in, d_out)"
                              : "at full rank",
                o->family == FAM_COLA ? ", SiLU between them (CoLA)" : "");
    int same = 1;
    for (int i = 0; fa && i < c->layers * NPROJ_HF; i++) same &= fa[i].r == fa[0].r;
    if (fa && !same) {
        fprintf(f, "local ranks = {   -- layer 0, 1, ...: {q, k, v, o, gate, up, down}\n");
        for (int i = 0; i < c->layers; i++) {
            fprintf(f, "  {");
            for (int p = 0; p < NPROJ_HF; p++)
                fprintf(f, "%s = %d%s", PROJ[p], fa[i * NPROJ_HF + p].r,
                        p < NPROJ_HF - 1 ? ", " : "");
            fprintf(f, "},\n");
        }
        fprintf(f, "}\n");
    }
    fprintf(f,
            "return model \"%s\" {\n  hidden = %d, layers = %d, heads = %d, kv_heads = %d, ffn = "
            "%d, vocab = %d,\n"
            "  norm_eps = %.9g, rope_theta = %.9g, mlp_gate_act = \"silu\",\n",
            o->name, c->hidden, c->layers, c->heads, c->kv_heads, c->ffn, c->vocab, c->eps,
            c->theta);
    if (!fa)
        fprintf(f, "  lowrank = full {},\n");
    else if (same)
        fprintf(f, "  lowrank = %s { rank = %d },\n", FAMILY[o->family], fa[0].r);
    else
        fprintf(
            f,
            "  lowrank = %s { rank = function(layer, proj) return ranks[layer + 1][proj] end },\n",
            FAMILY[o->family]);
    fprintf(f, "}\n");
    if (fclose(f)) {
        fprintf(stderr, "boost import: %s: write failed: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* OUT/NAME-run.lua: one GPU (or CPU), the byte corpus; the user edits data, steps and parallel. */
static int write_run_spec(const char *path, const ImportOptions *o, const HfConfig *c) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "boost import: %s: cannot create: %s\n", path, strerror(errno));
        return 1;
    }
    int seq = o->seq ? o->seq : c->max_pos < 1024 ? c->max_pos : 1024;
    fprintf(f,
            "-- %s-run: continue training the imported %s (written by `boost import`). Set data to "
            "tokens of\n"
            "-- the checkpoint's own tokenizer (an llm.c .bin file); \"corpus\" is bytes (ids "
            "0..255).\n"
            "-- Train (from the repository root): boost train %s --resume %s -o %s\n",
            o->name, o->name, path, o->out, o->out);
    fprintf(f,
            "return run {\n  model = \"%s.lua\",\n  gpu = \"h100\",\n"
            "  parallel = { tp = 1, pp = 1, dp = 1, layout = \"%s\" },\n"
            "  features = { online_rmsnorm = %s, group_linears = true, checkpoint = \"none\" },\n"
            "  train = {\n    micro_batch = 1, seq = %d, grad_accum = 1, dtype = \"bf16\",\n"
            "    lr = 1e-4, min_lr = 1e-5, warmup = 0, steps = 1000, seed = 1234, eval_every = "
            "100,\n  },\n"
            "  data = { path = \"corpus\", val_fraction = 0.1 },\n}\n",
            o->name, o->family == FAM_FULL ? "megatron" : "btp",
            o->family == FAM_FULL ? "false" : "true", seq);
    if (fclose(f)) {
        fprintf(stderr, "boost import: %s: write failed: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- the step-0 checkpoint ---- */

typedef struct {
    const HfWeights *w;
    const HfConfig *c;
    const Factor *fa; /* [layers * NPROJ_HF], NULL at full rank */
    const Plan *p;
} ImportFill;

/* Canon `canon` of the plan from the HF weights (slot 0); AdamW's moments (slots 1, 2) start at 0.
 */
static int fill_canon(void *ctx, int slot, int canon, float *out) {
    const ImportFill *x = ctx;
    const PlanCanon *k = &x->p->canons[canon];
    const HfConfig *c = x->c;
    if (slot) {
        memset(out, 0, sizeof(float) * (size_t)(k->rows * k->cols));
        return 0;
    }
    int layer, p = -1;
    char part[32], tail[8], name[160];
    if (!strcmp(k->name, "embed"))
        return load_weight(x->w, "model.embed_tokens.weight", c->vocab, c->hidden, 0, out);
    if (!strcmp(k->name, "head")) /* tied: the embedding's copy, trained apart from here on */
        return load_weight(x->w, c->tied ? "model.embed_tokens.weight" : "lm_head.weight", c->vocab,
                           c->hidden, 1, out);
    if (!strcmp(k->name, "final_norm"))
        return load_weight(x->w, "model.norm.weight", 0, c->hidden, 0, out);
    if (sscanf(k->name, "L%d.%31[a-z_]", &layer, part) == 2 &&
        (!strcmp(part, "attn_norm") || !strcmp(part, "mlp_norm"))) {
        snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer,
                 part[0] == 'a' ? "input_layernorm" : "post_attention_layernorm");
        return load_weight(x->w, name, 0, c->hidden, 0, out);
    }
    if (sscanf(k->name, "L%d.%31[a-z].%7s", &layer, part, tail) == 3 && layer >= 0 &&
        layer < c->layers)
        for (int j = 0; j < NPROJ_HF; j++)
            if (!strcmp(part, PROJ[j])) p = j;
    if (p < 0) {
        fprintf(stderr, "boost import: the plan's tensor %s has no source in a LLaMA checkpoint\n",
                k->name);
        return 2;
    }
    int din, dout;
    proj_shape(c, p, &din, &dout);
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer, HF_PROJ[p]);
    if (!strcmp(tail, "W") && k->rows == din && k->cols == dout)
        return load_weight(x->w, name, dout, din, 1, out);
    const Factor *f = x->fa ? &x->fa[layer * NPROJ_HF + p] : NULL;
    if (f && !strcmp(tail, "A") && k->rows == din && k->cols == f->r) {
        memcpy(out, f->A, sizeof(float) * (size_t)din * f->r);
        return 0;
    }
    if (f && !strcmp(tail, "B") && k->rows == f->r && k->cols == dout) {
        memcpy(out, f->B, sizeof(float) * (size_t)f->r * dout);
        return 0;
    }
    fprintf(stderr, "boost import: the plan's tensor %s [%lld, %lld] does not match %s\n", k->name,
            (long long)k->rows, (long long)k->cols, name);
    return 2;
}

/* The plan of OUT's run spec (written to OUT/plan/, where eval, export and train -o OUT find it).
 */
static Plan *make_plan(const ImportOptions *o, const char *run_path) {
    char err[8192], dir[1200], file[1300];
    Run *run = calloc(1, sizeof *run);
    if (!run) {
        fprintf(stderr, "boost import: out of memory\n");
        return NULL;
    }
    int rc = spec_load_run(run_path, NULL, 0, run, err, sizeof err);
    snprintf(dir, sizeof dir, "%s/plan", o->out);
    if (!rc) rc = gen_write(run, dir, err, sizeof err);
    free(run);
    if (rc) {
        fprintf(stderr, "%s\nboost import: the written spec %s does not generate a plan\n", err,
                run_path);
        return NULL;
    }
    snprintf(file, sizeof file, "%s/plan.txt", dir);
    Plan *p = plan_load(file, err, sizeof err);
    if (!p) fprintf(stderr, "boost import: %s\n", err);
    return p;
}

static int save_step0(const ImportOptions *o, const Plan *p, ImportFill *fill) {
    StEntry *e = calloc((size_t)p->ncanons, sizeof *e);
    if (!e) {
        fprintf(stderr, "boost import: out of memory\n");
        return 1;
    }
    for (int i = 0; i < p->ncanons; i++)
        e[i] = (StEntry){p->canons[i].name, p->canons[i].rows, p->canons[i].cols};
    CkptState st;
    memset(&st, 0, sizeof st);
    st.seed = p->seed;
    snprintf(st.model, sizeof st.model, "%s", p->model_name);
    snprintf(st.run, sizeof st.run, "%s", p->run_name);
    snprintf(st.layout, sizeof st.layout, "%s", p->layout);
    snprintf(st.backend, sizeof st.backend, "import");
    st.fingerprint = ckpt_fingerprint(e, p->ncanons);
    st.ncanons = p->ncanons;
    st.tp = p->tp;
    char saved[1300], err[4096] = "";
    int rc = ckpt_save(o->out, &st, e, p->ncanons, fill_canon, fill, saved, sizeof saved, err,
                       sizeof err);
    if (rc && err[0]) fprintf(stderr, "boost import: %s\n", err);
    free(e);
    return rc ? (rc == 2 ? 2 : 1) : 0;
}

/* ---- the command ---- */

static int parse_import_args(int argc, char **argv, ImportOptions *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            import_usage(stdout);
            return -1;
        }
        int takes = !strcmp(a, "-o") || !strcmp(a, "--family") || !strcmp(a, "--rank") ||
                    !strcmp(a, "--energy") || !strcmp(a, "--name") || !strcmp(a, "--seq");
        if (takes && !v) {
            fprintf(stderr, "boost import: %s needs a value\n", a);
            return 2;
        }
        char *end = NULL;
        if (!strcmp(a, "-o"))
            o->out = v;
        else if (!strcmp(a, "--name"))
            o->name = v;
        else if (!strcmp(a, "--family")) {
            o->family = -1;
            for (int f = 0; f < 3; f++)
                if (!strcmp(v, FAMILY[f])) o->family = f;
            if (o->family < 0) {
                fprintf(stderr, "boost import: --family %s: one of full, svd, cola\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--rank") || !strcmp(a, "--seq")) {
            long n = strtol(v, &end, 10);
            if (!*v || *end || n < 1 || n > 1048576) {
                fprintf(stderr, "boost import: %s %s: a whole number from 1 to 1048576\n", a, v);
                return 2;
            }
            if (a[2] == 'r')
                o->rank = (int)n;
            else
                o->seq = (int)n;
        } else if (!strcmp(a, "--energy")) {
            o->energy = strtod(v, &end);
            if (!*v || *end || !(o->energy > 0 && o->energy <= 1)) {
                fprintf(stderr, "boost import: --energy %s: a number > 0 and <= 1\n", v);
                return 2;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "boost import: unknown option %s\n", a);
            import_usage(stderr);
            return 2;
        } else if (o->hf_dir) {
            fprintf(stderr, "boost import: one HF_DIR only (got '%s' and '%s')\n", o->hf_dir, a);
            return 2;
        } else
            o->hf_dir = a;
        if (takes) i++;
    }
    if (!o->hf_dir || !o->out) {
        import_usage(stderr);
        return 2;
    }
    if (o->family == FAM_FULL && (o->rank || o->energy > 0)) {
        fprintf(stderr,
                "boost import: --rank and --energy factorize: add --family svd or --family cola\n");
        return 2;
    }
    if (o->rank && o->energy > 0) {
        fprintf(stderr, "boost import: give --rank or --energy, not both\n");
        return 2;
    }
    return 0;
}

/* The model's name: --name, or OUT's last component; letters, digits, '-', '_', '.' only. */
static int import_name(ImportOptions *o, char *buf, size_t len) {
    if (!o->name) {
        snprintf(buf, len, "%s", o->out);
        size_t n = strlen(buf);
        while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
        const char *slash = strrchr(buf, '/');
        memmove(buf, slash ? slash + 1 : buf, strlen(slash ? slash + 1 : buf) + 1);
    } else
        snprintf(buf, len, "%s", o->name);
    int ok = buf[0] && buf[0] != '.' && strlen(buf) < 48;
    for (const char *p = buf; *p && ok; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
             *p == '-' || *p == '_' || *p == '.';
    if (!ok) {
        fprintf(stderr,
                "boost import: model name '%s': 1 to 47 letters, digits, '-', '_' or '.' (give "
                "--name NAME)\n",
                buf);
        return 2;
    }
    o->name = buf;
    return 0;
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Factor every projection; prints the ranks and the relative errors. 0, 1 or 2. */
static int factor_all(const HfWeights *w, const HfConfig *c, const ImportOptions *o, Factor *fa) {
    double err2 = 0, norm2 = 0, worst = 0;
    int64_t dense = 0, low = 0;
    for (int i = 0; i < c->layers; i++)
        for (int p = 0; p < NPROJ_HF; p++) {
            Factor *f = &fa[i * NPROJ_HF + p];
            int rc = factor_projection(w, c, o, i, p, f);
            if (rc) return rc;
            err2 += f->err * f->err;
            norm2 += f->norm * f->norm;
            if (f->norm > 0 && f->err / f->norm > worst) worst = f->err / f->norm;
            dense += (int64_t)f->din * f->dout;
            low += (int64_t)f->r * (f->din + f->dout);
        }
    printf("factorized %d projections (%s): %.1fM -> %.1fM parameters, relative error ||W - A B|| "
           "/ ||W||: "
           "%.3g overall, %.3g at worst\n",
           c->layers * NPROJ_HF, FAMILY[o->family], dense / 1e6, low / 1e6,
           norm2 > 0 ? sqrt(err2 / norm2) : 0.0, worst);
    return 0;
}

int cmd_import(int argc, char **argv) {
    ImportOptions o;
    memset(&o, 0, sizeof o);
    int rc = parse_import_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    char name[64];
    if (import_name(&o, name, sizeof name)) return 2;
    double t0 = seconds_now();
    HfConfig c;
    memset(&c, 0, sizeof c);
    if ((rc = read_config(o.hf_dir, &c))) return rc;
    HfWeights *w = calloc(1, sizeof *w);
    if (!w) {
        fprintf(stderr, "boost import: out of memory\n");
        return 1;
    }
    rc = open_weights(o.hf_dir, w);
    if (!rc) rc = check_weights(w, &c);
    double t_read = seconds_now();
    if (!rc && c.tied)
        printf("note: tie_word_embeddings: the LM head starts as a copy of the embedding and "
               "trains apart from it "
               "(BOOST keeps embed and head as two tensors)\n");
    Factor *fa = NULL;
    if (!rc && o.family != FAM_FULL) {
        fa = calloc((size_t)c.layers * NPROJ_HF, sizeof *fa);
        rc = fa ? factor_all(w, &c, &o, fa) : 1;
    }
    double t_svd = seconds_now();
    char model_path[1200], run_path[1200];
    snprintf(model_path, sizeof model_path, "%s/%s.lua", o.out, o.name);
    snprintf(run_path, sizeof run_path, "%s/%s-run.lua", o.out, o.name);
    if (!rc && mkdir(o.out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "boost import: %s: cannot create: %s\n", o.out, strerror(errno));
        rc = 1;
    }
    if (!rc) rc = write_model_spec(model_path, &o, &c, fa);
    if (!rc) rc = write_run_spec(run_path, &o, &c);
    Plan *p = rc ? NULL : make_plan(&o, run_path);
    if (!rc && !p) rc = 2;
    if (!rc) {
        ImportFill fill = {w, &c, fa, p};
        rc = save_step0(&o, p, &fill);
    }
    if (!rc) {
        double t1 = seconds_now();
        printf("imported %s (%d layers, hidden %d, heads %d/%d kv, vocab %d) as %s %s: %s, %s, "
               "%s/plan, %s/step-000000 "
               "(%d tensors; read %.1f s, SVD %.1f s, write %.1f s)\n",
               o.hf_dir, c.layers, c.hidden, c.heads, c.kv_heads, c.vocab, FAMILY[o.family], o.name,
               model_path, run_path, o.out, o.out, p->ncanons, t_read - t0, t_svd - t_read,
               t1 - t_svd);
        printf("continue training: boost train %s --resume %s -o %s\n", run_path, o.out, o.out);
    }
    if (p) plan_free(p);
    for (int i = 0; fa && i < c.layers * NPROJ_HF; i++) {
        free(fa[i].A);
        free(fa[i].B);
    }
    free(fa);
    close_weights(w);
    free(w);
    return rc;
}
