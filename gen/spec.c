/* spec.c: evaluates a run spec (and the model and GPU specs it names) in the Lua sandbox into a
 * Run, checks every field against a typed registry and the cross-field rules, applies -D
 * overrides, and closes the Lua state. Every error is "file:line: what is wrong (what to do)". */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <lua.h>       // defines: lua_State, lua_getfield, lua_next, lua_call, lua_error
#include <lauxlib.h>   // defines: luaL_typename
#include "gen/gen.h"   // defines: spec_load_run, parse_override
#include "common/train_settings.h"   // defines: TRAIN_SETTING_ROWS, DATA_SETTING_ROWS, train_setting_bounds
#include "gen/model.h" // defines: Run, Model, Gpu, Override, enums
#include "gen/factor.h"   // defines: the factorization table
#include "gen/sandbox.h"
#include "common/crc32c.h"   // defines: crc32c_file
#include "common/files.h"    // defines: file_read_all
#include "common/env.h"      // defines: env_specs_dir

/* ---------------------------------------------------------------- the field registry */

enum Kind {
    K_INT,     /* integer in [lo, hi] */
    K_NUM,     /* number in [lo, hi] (lo exclusive when open_lo) */
    K_BOOL,
    K_STR,
    K_CHOICE,  /* one of choices "a|b|c"; stored as its index */
    K_TABLE,   /* a nested table with its own schema */
    K_RANK,    /* integer, {attn=, mlp=, q=, ...} or function(layer, proj) */
    K_FACTOR,  /* cola{...} | svd{...} | lax{...} | full{} */
    K_MODEL,   /* a model name, a path to a model file, or model "x" {...} inline */
    K_GPU,     /* a GPU name or gpu "x" {...} inline */
};

typedef struct {
    const char *key;
    enum Kind kind;
    double lo, hi;
    int open_lo;             /* 1: value must be > lo */
    const char *choices;     /* K_CHOICE: "megatron|naive|btp" */
    const char *def;         /* default as text; NULL: required or computed by the caller */
    const char *help;        /* what it is, for messages */
} Field;

typedef struct {
    const char *what;        /* the table's name in messages: "model", "train", ... */
    const Field *fields;
} Schema;

#define BIG 1e9
static const Field MODEL_FIELDS[] = {
    {"hidden", K_INT, 1, 65536, 0, NULL, NULL, "the model width d, e.g. hidden = 4096"},
    {"layers", K_INT, 1, MAX_LAYERS, 0, NULL, NULL, "the number of decoder layers"},
    {"heads", K_INT, 1, 1024, 0, NULL, NULL, "the number of attention heads"},
    {"kv_heads", K_INT, 1, 1024, 0, NULL, NULL, "key/value heads (GQA); defaults to heads"},
    {"ffn", K_INT, 1, 1048576, 0, NULL, NULL, "the MLP width d_ff"},
    {"vocab", K_INT, 1, 4194304, 0, NULL, NULL, "the vocabulary size"},
    {"norm_eps", K_NUM, 0, 1, 1, NULL, "1e-5", "the RMSNorm epsilon"},
    {"rope_theta", K_NUM, 0, BIG, 1, NULL, "10000", "the RoPE base"},
    {"init_std", K_NUM, 0, 1, 1, NULL, "0.02", "std of the initial full-rank weights"},
    {"mlp_gate_act", K_CHOICE, 0, 0, 0, "none|silu", NULL, "activation on the MLP gate"},
    {"lowrank", K_FACTOR, 0, 0, 0, NULL, NULL, "cola{rank=}, svd{rank=}, lax{rank=} or full{}"},
    {"moe", K_TABLE, 0, 0, 0, NULL, NULL, "moe{experts=, top_k=, capacity_factor=, aux_loss=, every=}"},
    {NULL},
};
static const Field MOE_FIELDS[] = {
    {"experts", K_INT, 1, 1024, 0, NULL, NULL, "the number of experts E, e.g. experts = 8"},
    {"top_k", K_INT, 1, 128, 0, NULL, "1", "experts per token k (at most experts)"},
    {"capacity_factor", K_NUM, 0, 1024, 1, NULL, "1.25", "slots per expert = ceil(c * tokens * top_k / experts)"},
    {"aux_loss", K_NUM, 0, 100, 0, NULL, "0.01", "weight of the load-balance loss"},
    {"z_loss", K_NUM, 0, 100, 0, NULL, "0", "weight of the router z-loss (mean over tokens of logsumexp(logits)^2)"},
    {"every", K_INT, 1, MAX_LAYERS, 0, NULL, "1", "every n-th layer (from layer 0) is MoE, or function(layer) -> bool"},
    {"expert_ffn", K_INT, 1, 1048576, 0, NULL, NULL, "d_ff of one expert (defaults to the model's ffn)"},
    {"shared", K_TABLE, 0, 0, 0, NULL, NULL, "factors shared by all experts of a layer: {\"gate.A\", \"up.A\", \"down.B\"} (any subset)"},
    {NULL},
};
static const Field COLA_FIELDS[] = {
    {"rank", K_RANK, 0, 0, 0, NULL, NULL, "a number, {attn=, mlp=} or function(layer, proj)"},
    {"act", K_CHOICE, 0, 0, 0, "none|silu", "silu", "sigma between A and B"},
    {NULL},
};
static const Field SVD_FIELDS[] = {
    {"rank", K_RANK, 0, 0, 0, NULL, NULL, "a number, {attn=, mlp=} or function(layer, proj)"},
    {"act", K_CHOICE, 0, 0, 0, "none|silu", "none", "sigma between A and B"},
    {NULL},
};
static const Field LAX_FIELDS[] = {
    {"rank", K_RANK, 0, 0, 0, NULL, NULL, "a number, {attn=, mlp=} or function(layer, proj)"},
    {"base", K_CHOICE, 0, 0, 0, "cola|svd", "cola", "the factorisation LaX is added to"},
    {"act", K_CHOICE, 0, 0, 0, "none|silu", NULL, "sigma between A and B (default: the base's)"},
    {NULL},
};
static const Field USV_FIELDS[] = {
    {"rank", K_RANK, 0, 0, 0, NULL, NULL, "a number, {attn=, mlp=} or function(layer, proj)"},
    {"act", K_CHOICE, 0, 0, 0, "none|silu", "none", "sigma between A and the core S"},
    {NULL},
};
static const Field FULL_FIELDS[] = {{NULL}};
static const Field RANK_TABLE_FIELDS[] = {
    {"attn", K_INT, 1, 1048576, 0, NULL, NULL, "rank of q, k, v, o"},
    {"mlp", K_INT, 1, 1048576, 0, NULL, NULL, "rank of gate, up, down"},
    {"q", K_INT, 1, 1048576, 0, NULL, NULL, "rank of q"},
    {"k", K_INT, 1, 1048576, 0, NULL, NULL, "rank of k"},
    {"v", K_INT, 1, 1048576, 0, NULL, NULL, "rank of v"},
    {"o", K_INT, 1, 1048576, 0, NULL, NULL, "rank of o"},
    {"gate", K_INT, 1, 1048576, 0, NULL, NULL, "rank of gate"},
    {"up", K_INT, 1, 1048576, 0, NULL, NULL, "rank of up"},
    {"down", K_INT, 1, 1048576, 0, NULL, NULL, "rank of down"},
    {NULL},
};
static const Field GPU_FIELDS[] = {
    {"arch", K_STR, 0, 0, 0, NULL, NULL,
     "the CUDA architecture, e.g. arch = \"sm_90\" or \"sm_100a\""},
    {"smem_block_kib", K_INT, 48, 4096, 0, NULL, "48",
     "shared memory one block may opt in to, KiB (the driver's ..._PER_BLOCK_OPTIN)"},
    {"smem_sm_kib", K_INT, 0, 4096, 0, NULL, "0",
     "shared memory of an SM usable by blocks, KiB (0: unknown)"},
    {"regs_sm", K_INT, 0, 1 << 20, 0, NULL, "0", "32-bit registers of an SM (0: unknown)"},
    {"threads_sm", K_INT, 0, 1 << 16, 0, NULL, "0", "resident threads of an SM (0: unknown)"},
    {"blocks_sm", K_INT, 0, 1024, 0, NULL, "0", "resident blocks of an SM (0: unknown)"},
    {"kernel_report", K_BOOL, 0, 0, 0, NULL, "false",
     "compile for this arch in every report's kernel table"},
    {"sm_count", K_INT, 1, 4096, 0, NULL, NULL, "the number of SMs"},
    {"bf16_tflops", K_NUM, 0, 1e6, 1, NULL, NULL, "dense bf16 peak, TFLOP/s"},
    {"hbm_gbs", K_NUM, 0, 1e6, 1, NULL, NULL, "HBM bandwidth, GB/s"},
    {"nvlink_gbs", K_NUM, 0, 1e6, 1, NULL, NULL, "NVLink bandwidth per GPU per direction, GB/s"},
    {"net_gbs", K_NUM, 0, 1e6, 1, NULL, NULL, "inter-node bandwidth per GPU, GB/s"},
    {"nvlink_latency_us", K_NUM, 0, 1e6, 0, NULL, "10", "all-reduce latency within a node, us"},
    {"net_latency_us", K_NUM, 0, 1e6, 0, NULL, "20", "all-reduce latency across nodes, us"},
    {"gpus_per_node", K_INT, 1, 1024, 0, NULL, "8", "GPUs in one node"},
    {"memory_gb", K_NUM, 0, 1e6, 1, NULL, NULL, "device memory, GB"},
    {"tune", K_TABLE, 0, 0, 0, NULL, NULL, "kernel tuning {row_block=, elem_block=, attn_block_q=, attn_block_k=}"},
    {NULL},
};
static const Field TUNE_FIELDS[] = {
    {"row_block", K_INT, 32, 1024, 0, NULL, "256", "threads per block of row-wise kernels (a multiple of 32)"},
    {"elem_block", K_INT, 32, 1024, 0, NULL, "256", "threads per block of elementwise kernels (a multiple of 32)"},
    {"attn_block_q", K_INT, 16, 256, 0, NULL, "64", "queries per attention block (a power of two)"},
    {"attn_block_k", K_INT, 16, 256, 0, NULL, "64", "keys per attention tile (a power of two)"},
    {NULL},
};
static const Field RUN_FIELDS[] = {
    {"model", K_MODEL, 0, 0, 0, NULL, NULL, "a model name from specs/models, e.g. model = \"cola-llama-7b\""},
    {"gpu", K_GPU, 0, 0, 0, NULL, "h100", "a GPU name from specs/gpus"},
    {"parallel", K_TABLE, 0, 0, 0, NULL, NULL, "{tp=, pp=, dp=, ep=, layout=, dp_bucket_mb=, dp_dtype=, zero=, stages=, virtual_stages=}"},
    {"features", K_TABLE, 0, 0, 0, NULL, NULL, "{online_rmsnorm=, group_linears=, checkpoint=}"},
    {"train", K_TABLE, 0, 0, 0, NULL, NULL, "{micro_batch=, seq=, lr=, steps=, ...}"},
    {"data", K_TABLE, 0, 0, 0, NULL, NULL, "{path=, val_fraction=} or a path"},
    {NULL},
};
static const Field PARALLEL_FIELDS[] = {
    {"tp", K_INT, 1, 64, 0, NULL, "1", "tensor-parallel degree"},
    {"pp", K_INT, 1, MAX_LAYERS, 0, NULL, "1", "pipeline-parallel degree"},
    {"dp", K_INT, 1, 65536, 0, NULL, "1", "data-parallel degree"},
    {"ep", K_INT, 1, 65536, 0, NULL, "1", "expert-parallel degree: groups of ep dp ranks share out an MoE layer's experts"},
    {"layout", K_CHOICE, 0, 0, 0, "megatron|naive|btp", NULL, "how layers are split across tp ranks"},
    {"dp_bucket_mb", K_NUM, 0, 65536, 1, NULL, "25", "MB of gradients per data-parallel all-reduce bucket (PyTorch DDP's 25)"},
    {"dp_dtype", K_CHOICE, 0, 0, 0, "fp32|bf16", "fp32", "dtype of the dp gradient reduction (bf16: half the bytes, ~2^-8 relative error)"},
    {"zero", K_INT, 0, 2, 0, NULL, "0", "ZeRO stage: 0 (replicated AdamW state), 1 (AdamW state and masters sharded over dp) "
                                          "or 2 (the gradients sharded too)"},
    {"stages", K_TABLE, 0, 0, 0, NULL, NULL, "a list of layer counts, one per pipeline stage, e.g. {8, 8, 8, 8}"},
    {"virtual_stages", K_INT, 1, 64, 0, NULL, "1", "layer chunks per pipeline rank (interleaved 1F1B when > 1)"},
    {NULL},
};
static const Field FEATURES_FIELDS[] = {
    {"online_rmsnorm", K_BOOL, 0, 0, 0, NULL, "true", "RMSNorm statistics ride in the next all-reduce"},
    {"group_linears", K_BOOL, 0, 0, 0, NULL, "true", "concatenate A's, batch B's"},
    {"checkpoint", K_CHOICE, 0, 0, 0, "none|lowrank", "none", "activation checkpointing"},
    {NULL},
};
/* A row of common/train_settings.h as a field of the train or data table. */
#define SPEC_FIELD(name, integer, lo, hi, open_lo, dflt, help) {#name, (integer) ? K_INT : K_NUM, lo, hi, open_lo, NULL, dflt, help},
static const Field TRAIN_FIELDS[] = {
    {"micro_batch", K_INT, 1, 65536, 0, NULL, "4", "sequences per micro-batch"},
    {"seq", K_INT, 1, 1048576, 0, NULL, "4096", "sequence length"},
    {"grad_accum", K_INT, 1, 65536, 0, NULL, "1", "micro-batches per optimizer step"},
    {"dtype", K_CHOICE, 0, 0, 0, "bf16|fp32", "bf16", "activation and weight dtype on the GPU"},
    TRAIN_SETTING_ROWS(SPEC_FIELD)   /* common/train_settings.h: lr, min_lr, ..., max_bad_steps */
    {"seed", K_INT, 0, 9007199254740992.0, 0, NULL, "1234", "random seed"},
    {"decay_embeddings", K_BOOL, 0, 0, 0, NULL, "false", "weight decay on embedding and LM head"},
    {NULL},
};
static const Field DATA_FIELDS[] = {
    {"path", K_STR, 0, 0, 0, NULL, "corpus", "\"corpus\", a .bin token file or a .txt file"},
    {"tokenizer", K_STR, 0, 0, 0, NULL, "", "a tokenizer.json for text data (\"\": bytes)"},
    DATA_SETTING_ROWS(SPEC_FIELD)    /* val_fraction */
    {"sources", K_TABLE, 0, 0, 0, NULL, NULL,
     "a mixture instead of path: a list of {path=, weight=, tokenizer=}"},
    {NULL},
};
static const Field SOURCE_FIELDS[] = {   /* one source of a data mixture */
    {"path", K_STR, 0, 0, 0, NULL, NULL, "\"corpus\", a .bin token file, a glob or a text file"},
    {"weight", K_NUM, 0, 1e9, 1, NULL, NULL, "its share of the training sequences (normalised)"},
    {"tokenizer", K_STR, 0, 0, 0, NULL, "", "the run's tokenizer.json (\"\": the data table's)"},
    {NULL},
};

static const Schema S_MODEL = {"model", MODEL_FIELDS}, S_COLA = {"cola", COLA_FIELDS},
    S_SVD = {"svd", SVD_FIELDS}, S_LAX = {"lax", LAX_FIELDS}, S_USV = {"usv", USV_FIELDS},
    S_FULL = {"full", FULL_FIELDS},
    S_RANK = {"rank", RANK_TABLE_FIELDS}, S_GPU = {"gpu", GPU_FIELDS}, S_TUNE = {"tune", TUNE_FIELDS},
    S_RUN = {"run", RUN_FIELDS}, S_PARALLEL = {"parallel", PARALLEL_FIELDS},
    S_FEATURES = {"features", FEATURES_FIELDS}, S_TRAIN = {"train", TRAIN_FIELDS},
    S_DATA = {"data", DATA_FIELDS}, S_MOE = {"moe", MOE_FIELDS},
    S_SOURCE = {"source", SOURCE_FIELDS};

/* The fields of a factorization's constructor (a row of gen/factor.c): cola{...}, full{}. */
static const Schema *factor_schema(const char *family) {
    static const struct { const char *family; const Schema *fields; } BY_FAMILY[] = {
        {"cola", &S_COLA}, {"svd", &S_SVD}, {"lax", &S_LAX}, {"usv", &S_USV}, {"full", &S_FULL},
    };
    for (size_t i = 0; i < sizeof BY_FAMILY / sizeof BY_FAMILY[0]; i++)
        if (!strcmp(BY_FAMILY[i].family, family)) return BY_FAMILY[i].fields;
    return &S_FULL;
}

/* -D names and the field each one sets (table "run" = the run's top level). */
typedef struct { const char *name; const Schema *schema; const char *key; } OverrideTarget;
static const OverrideTarget OVERRIDES[] = {
    {"tp", &S_PARALLEL, "tp"}, {"pp", &S_PARALLEL, "pp"}, {"dp", &S_PARALLEL, "dp"}, {"ep", &S_PARALLEL, "ep"}, {"virtual_stages", &S_PARALLEL, "virtual_stages"},
    {"layout", &S_PARALLEL, "layout"}, {"dp_bucket_mb", &S_PARALLEL, "dp_bucket_mb"}, {"zero", &S_PARALLEL, "zero"}, {"dp_dtype", &S_PARALLEL, "dp_dtype"},
    {"online_rmsnorm", &S_FEATURES, "online_rmsnorm"}, {"group_linears", &S_FEATURES, "group_linears"},
    {"checkpoint", &S_FEATURES, "checkpoint"},
    {"micro_batch", &S_TRAIN, "micro_batch"}, {"seq", &S_TRAIN, "seq"},
    {"grad_accum", &S_TRAIN, "grad_accum"}, {"dtype", &S_TRAIN, "dtype"}, {"lr", &S_TRAIN, "lr"},
    {"min_lr", &S_TRAIN, "min_lr"}, {"warmup", &S_TRAIN, "warmup"}, {"steps", &S_TRAIN, "steps"},
    {"beta1", &S_TRAIN, "beta1"}, {"beta2", &S_TRAIN, "beta2"}, {"adam_eps", &S_TRAIN, "adam_eps"},
    {"weight_decay", &S_TRAIN, "weight_decay"}, {"clip", &S_TRAIN, "clip"},
    {"seed", &S_TRAIN, "seed"}, {"eval_every", &S_TRAIN, "eval_every"},
    {"max_bad_steps", &S_TRAIN, "max_bad_steps"}, {"spike_window", &S_TRAIN, "spike_window"},
    {"spike_z", &S_TRAIN, "spike_z"}, {"spike_rollback_after", &S_TRAIN, "spike_rollback_after"},
    {"spike_max_rollbacks", &S_TRAIN, "spike_max_rollbacks"},
    {"decay_embeddings", &S_TRAIN, "decay_embeddings"},
    {"data", &S_DATA, "path"}, {"val_fraction", &S_DATA, "val_fraction"},
    {"tokenizer", &S_DATA, "tokenizer"},
    {"gpu", &S_RUN, "gpu"}, {"model", &S_RUN, "model"},
    {NULL},
};

/* Copy src into dst[n], cut short if it does not fit. */
static void copy_str(char *dst, size_t n, const char *src) {
    size_t len = strlen(src);
    if (len >= n) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = 0;
}

static const Field *field_of(const Schema *s, const char *key) {
    for (const Field *f = s->fields; f->key; f++)
        if (strcmp(f->key, key) == 0) return f;
    return NULL;
}

static const OverrideTarget *override_target(const char *name) {
    for (const OverrideTarget *t = OVERRIDES; t->name; t++)
        if (strcmp(t->name, name) == 0) return t;
    return NULL;
}

/* "an integer from 1 to 64", "a number > 0 and <= 10", "one of megatron, naive, btp" */
static void describe_kind(const Field *f, char *buf, size_t n) {
    switch (f->kind) {
    case K_INT: case K_NUM: train_setting_bounds(f->kind == K_INT, f->lo, f->hi, f->open_lo, buf, n); break;
    case K_BOOL: snprintf(buf, n, "true or false"); break;
    case K_STR: snprintf(buf, n, "a string"); break;
    case K_CHOICE: {
        snprintf(buf, n, "one of ");
        size_t len = strlen(buf);
        for (const char *p = f->choices; *p && len + 3 < n; p++) {
            if (*p == '|') { buf[len++] = ','; buf[len++] = ' '; } else buf[len++] = *p;
        }
        buf[len] = 0;
        break;
    }
    default: snprintf(buf, n, "%s", f->help); break;
    }
}

/* Index of s in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *s) {
    size_t n = strlen(s);
    int i = 0;
    for (const char *p = choices; ; i++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, s, n) == 0) return i;
        if (!bar) return -1;
        p = bar + 1;
    }
}

/* ---------------------------------------------------------------- context and locations */

#define MAX_SOURCES 8
#define MAX_OVERRIDES 64

typedef struct {
    char path[PATH_LEN];     /* as shown in messages */
    char *text;
} Source;

typedef struct {
    Sandbox *sb;
    lua_State *L;
    Source src[MAX_SOURCES];
    int nsrc;
    const Override *ov;
    int nov;
    const Schema *ov_schema[MAX_OVERRIDES];   /* which field each override set */
    const char *ov_key[MAX_OVERRIDES];
    char specs_dir[PATH_LEN];
    char run_path[PATH_LEN];
    Run *run;
    int for_projection;      /* boost project: a run priced, not planned (grad_accum < pp is allowed) */
} Ctx;

/* Where a message points: a file and line, or a -D override. */
typedef struct {
    int src;                 /* index into Ctx.src, -1: none */
    int line;
    int ov;                  /* index into Ctx.ov, -1: none */
} Loc;

/* A Lua table being read with a schema. */
typedef struct {
    int idx;                 /* absolute stack index */
    const Schema *schema;
    Loc loc;                 /* where the table starts */
} Obj;

static const Loc NOWHERE = {-1, 0, -1};

/* Raise "file:line: message" (or "-D name=value: message") as a Lua error; never returns. */
static int spec_error(Ctx *c, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
static int spec_error(Ctx *c, Loc loc, const char *fmt, ...) {
    char msg[1500], full[3400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (loc.ov >= 0)
        snprintf(full, sizeof full, "-D %s=%s: %s", c->ov[loc.ov].name, c->ov[loc.ov].value, msg);
    else if (loc.src >= 0)
        snprintf(full, sizeof full, "%s:%d: %s", c->src[loc.src].path, loc.line > 0 ? loc.line : 1, msg);
    else
        snprintf(full, sizeof full, "%s: %s", c->run_path, msg);
    lua_pushstring(c->L, full);
    lua_error(c->L);
    abort();   /* not reached: lua_error does not return */
}

/* Line (1-based) of the first "key =" at or after from_line, ignoring comments; 0 if none. */
static int find_key_line(const char *text, int from_line, const char *key) {
    size_t klen = strlen(key);
    int line = 1;
    const char *p = text;
    while (*p && line < from_line) { if (*p == '\n') line++; p++; }
    while (*p) {
        const char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        const char *comment = NULL;
        for (const char *q = p; q + 1 < eol; q++)
            if (q[0] == '-' && q[1] == '-') { comment = q; break; }
        const char *end = comment ? comment : eol;
        for (const char *q = p; q + klen <= end; q++) {
            if (strncmp(q, key, klen) != 0) continue;
            if (q > p && (q[-1] == '_' || q[-1] == '.' || isalnum((unsigned char)q[-1]))) continue;
            const char *r = q + klen;
            if (r < end && (*r == '_' || isalnum((unsigned char)*r))) continue;
            while (r < end && (*r == ' ' || *r == '\t')) r++;
            if (r < end && *r == '=' && (r + 1 >= end || r[1] != '=')) return line;
        }
        if (!*eol) break;
        p = eol + 1;
        line++;
    }
    return 0;
}

/* Location of key inside table o: the override that set it, the line where it is written, or
 * the table's own line. */
static Loc key_loc(Ctx *c, const Obj *o, const char *key) {
    for (int i = 0; i < c->nov; i++)
        if (c->ov_schema[i] == o->schema && strcmp(c->ov_key[i], key) == 0) return (Loc){-1, 0, i};
    Loc loc = o->loc;
    loc.ov = -1;
    if (loc.src >= 0) {
        int line = find_key_line(c->src[loc.src].text, loc.line > 0 ? loc.line : 1, key);
        if (line > 0) loc.line = line;
    }
    return loc;
}

static int source_index(Ctx *c, const char *lua_source) {
    if (!lua_source || lua_source[0] != '@') return -1;
    for (int i = 0; i < c->nsrc; i++)
        if (strcmp(c->src[i].path, lua_source + 1) == 0) return i;
    return -1;
}

/* ---------------------------------------------------------------- helpers visible to specs */

static const char META_KEY = 0;   /* its address is the registry key of the weak table: spec table -> {kind, name, line, source} */

/* Record who made table at index idx (the Lua code one level up from the running helper). */
static void record_meta(lua_State *L, int idx, const char *kind, const char *name, const char *family) {
    idx = lua_absindex(L, idx);
    lua_Debug ar;
    int line = 0;
    const char *source = "";
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar)) { line = ar.currentline; source = ar.source; }
    lua_rawgetp(L, LUA_REGISTRYINDEX, &META_KEY);
    lua_pushvalue(L, idx);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, kind); lua_setfield(L, -2, "kind");
    if (name) { lua_pushstring(L, name); lua_setfield(L, -2, "name"); }
    if (family) { lua_pushstring(L, family); lua_setfield(L, -2, "family"); }
    lua_pushinteger(L, line); lua_setfield(L, -2, "line");
    lua_pushstring(L, source); lua_setfield(L, -2, "source");
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

/* model "name" {fields} and gpu "name" {fields}: the second call. Upvalues: kind, name. */
static int helper_named_body(lua_State *L) {
    const char *kind = lua_tostring(L, lua_upvalueindex(1));
    const char *name = lua_tostring(L, lua_upvalueindex(2));
    if (lua_type(L, 1) != LUA_TTABLE)
        return luaL_error(L, "%s \"%s\" needs a table of fields: %s \"%s\" { ... } (got a %s)",
                          kind, name, kind, name, luaL_typename(L, 1));
    lua_settop(L, 1);
    record_meta(L, 1, kind, name, NULL);
    return 1;
}

/* model "name" / gpu "name": the first call. Upvalue: kind. */
static int helper_named(lua_State *L) {
    const char *kind = lua_tostring(L, lua_upvalueindex(1));
    if (lua_type(L, 1) != LUA_TSTRING)
        return luaL_error(L, "%s needs a name first: %s \"my-%s\" { ... } (got a %s)",
                          kind, kind, kind, luaL_typename(L, 1));
    const char *name = lua_tostring(L, 1);
    size_t n = strlen(name);
    if (n == 0 || n >= NAME_LEN)
        return luaL_error(L, "%s name must have 1 to %d characters", kind, NAME_LEN - 1);
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return luaL_error(L, "%s name \"%s\" may use only letters, digits, '-', '_' and '.'", kind, name);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 1);
    lua_pushcclosure(L, helper_named_body, 2);
    return 1;
}

/* run{...}, cola{...}, svd{...}, lax{...}, full{}, tune{...}. Upvalues: kind, family. */
static int helper_table(lua_State *L) {
    const char *kind = lua_tostring(L, lua_upvalueindex(1));
    const char *family = lua_tostring(L, lua_upvalueindex(2));
    const char *shown = family ? family : kind;
    const Factorization *fz = family ? factorization_find(family) : NULL;
    if (lua_isnoneornil(L, 1) && fz && !factorization_lowrank(fz)) lua_newtable(L);   /* full{} */
    else if (lua_type(L, 1) == LUA_TSTRING && strcmp(kind, "run") == 0)
        return luaL_error(L, "run takes no name (a run is named after its file): return run { model = ..., ... }");
    else if (lua_type(L, 1) != LUA_TTABLE)
        return luaL_error(L, "%s needs a table of fields: %s { ... } (got a %s)", shown, shown,
                          luaL_typename(L, 1));
    lua_settop(L, lua_type(L, 1) == LUA_TTABLE ? 1 : 2);
    if (lua_gettop(L) == 2) lua_remove(L, 1);
    record_meta(L, 1, kind, NULL, family);
    return 1;
}

/* The global constructor named family (a factorization) or kind (run, tune, moe). */
static void define_table_helper(Ctx *c, const char *kind, const char *family) {
    lua_pushstring(c->L, kind);
    if (family) lua_pushstring(c->L, family); else lua_pushnil(c->L);
    lua_pushcclosure(c->L, helper_table, 2);
    sandbox_define(c->sb, family ? family : kind);
}

static void define_helpers(Ctx *c) {
    lua_State *L = c->L;
    lua_newtable(L);                          /* weak-keyed meta table */
    lua_newtable(L);
    lua_pushstring(L, "k"); lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &META_KEY);
    const char *named[] = {"model", "gpu", "cluster"};
    for (int i = 0; i < 3; i++) {
        lua_pushstring(L, named[i]);
        lua_pushcclosure(L, helper_named, 1);
        sandbox_define(c->sb, named[i]);
    }
    define_table_helper(c, "run", NULL);
    define_table_helper(c, "tune", NULL);
    for (int f = 0; factorization_at(f); f++)   /* one per factorization: cola{...}, full{} */
        define_table_helper(c, "factor", factorization_at(f)->family);
    define_table_helper(c, "moe", NULL);
}

/* Push the meta table of the value at idx (or nil). Returns its kind or NULL. */
static const char *push_meta(Ctx *c, int idx) {
    lua_State *L = c->L;
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) != LUA_TTABLE) { lua_pushnil(L); return NULL; }
    lua_rawgetp(L, LUA_REGISTRYINDEX, &META_KEY);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    lua_remove(L, -2);
    if (lua_type(L, -1) != LUA_TTABLE) return NULL;
    lua_getfield(L, -1, "kind");
    const char *kind = lua_tostring(L, -1);
    lua_pop(L, 1);
    return kind;   /* the string is kept alive by the meta table on the stack */
}

static const char *meta_string(Ctx *c, const char *key) {   /* meta table on top */
    lua_getfield(c->L, -1, key);
    const char *s = lua_tostring(c->L, -1);
    lua_pop(c->L, 1);
    return s;
}

/* Obj for the table at idx made by a helper (meta gives its line and file) or nested under parent. */
static Obj make_obj(Ctx *c, int idx, const Schema *schema, Loc fallback) {
    Obj o = {lua_absindex(c->L, idx), schema, fallback};
    if (push_meta(c, idx)) {
        lua_getfield(c->L, -1, "line");
        int line = (int)lua_tointeger(c->L, -1);
        lua_pop(c->L, 1);
        int src = source_index(c, meta_string(c, "source"));
        if (src >= 0) o.loc = (Loc){src, line, -1};
    }
    lua_pop(c->L, 1);
    return o;
}

/* ---------------------------------------------------------------- reading fields */

/* Every key of o must be in its schema. */
static void check_keys(Ctx *c, const Obj *o) {
    lua_State *L = c->L;
    lua_pushnil(L);
    while (lua_next(L, o->idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) {
            spec_error(c, o->loc, "%s has a positional or non-string key (%s); write name = value",
                       o->schema->what, luaL_typename(L, -1));
        }
        const char *key = lua_tostring(L, -1);
        if (field_of(o->schema, key)) continue;
        char known[600] = "", near[80] = "";
        int best = 99;
        for (const Field *f = o->schema->fields; f->key; f++) {
            size_t n = strlen(known);
            snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", f->key);
            int d = name_distance(key, f->key);
            if (d < best) { best = d; if (d <= 2) snprintf(near, sizeof near, "did you mean '%s'? ", f->key); }
        }
        if (!o->schema->fields->key)
            spec_error(c, key_loc(c, o, key), "unknown key '%s' in %s{}: it takes no fields", key, o->schema->what);
        spec_error(c, key_loc(c, o, key), "unknown key '%s' in %s (%sknown keys: %s)", key,
                   o->schema->what, near, known);
    }
}

static const Field *field_or_die(Ctx *c, const Obj *o, const char *key) {
    const Field *f = field_of(o->schema, key);
    if (!f) spec_error(c, o->loc, "internal: no field '%s' in %s", key, o->schema->what);
    return f;
}

/* Push o[key]; returns its Lua type. */
static int push_field(Ctx *c, const Obj *o, const char *key) {
    lua_pushstring(c->L, key);
    return lua_rawget(c->L, o->idx);
}

static void require_present(Ctx *c, const Obj *o, const Field *f) {
    spec_error(c, o->loc, "%s needs %s (%s)", o->schema->what, f->key, f->help);
}

static void describe_value(lua_State *L, int idx, char *buf, size_t n) {
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER: snprintf(buf, n, "%.17g", lua_tonumber(L, idx)); break;
    case LUA_TSTRING: snprintf(buf, n, "the string \"%.40s\"", lua_tostring(L, idx)); break;
    case LUA_TBOOLEAN: snprintf(buf, n, "%s", lua_toboolean(L, idx) ? "true" : "false"); break;
    case LUA_TNIL: case LUA_TNONE: snprintf(buf, n, "nil"); break;
    default: snprintf(buf, n, "a %s", luaL_typename(L, idx)); break;
    }
}

/* Check the number on top of the stack against f; returns it. */
static double check_number(Ctx *c, const Obj *o, const Field *f, Loc loc) {
    lua_State *L = c->L;
    char want[200], got[100];
    describe_kind(f, want, sizeof want);
    describe_value(L, -1, got, sizeof got);
    if (lua_type(L, -1) != LUA_TNUMBER)
        spec_error(c, loc, "%s must be %s, got %s", f->key, want, got);
    double v = lua_tonumber(L, -1);
    if (f->kind == K_INT && (v != floor(v) || !isfinite(v)))
        spec_error(c, loc, "%s must be %s, got %s", f->key, want, got);
    if (!isfinite(v) || v > f->hi || v < f->lo || (f->open_lo && v <= f->lo))
        spec_error(c, loc, "%s must be %s, got %s", f->key, want, got);
    return v;
}

/* Integer or number field: returns 1 and sets *out when given; 0 and the default when absent
 * (absent and no default: *out untouched, or an error when required). */
static int get_number(Ctx *c, const Obj *o, const char *key, double *out, int required) {
    const Field *f = field_or_die(c, o, key);
    int t = push_field(c, o, key);
    if (t == LUA_TNIL) {
        lua_pop(c->L, 1);
        if (f->def) { *out = strtod(f->def, NULL); return 0; }
        if (required) require_present(c, o, f);
        return 0;
    }
    *out = check_number(c, o, f, key_loc(c, o, key));
    lua_pop(c->L, 1);
    return 1;
}

static int get_int(Ctx *c, const Obj *o, const char *key) {
    double v = 0;
    get_number(c, o, key, &v, 1);
    return (int)v;
}

static double get_num(Ctx *c, const Obj *o, const char *key) {
    double v = 0;
    get_number(c, o, key, &v, 1);
    return v;
}

static int get_bool(Ctx *c, const Obj *o, const char *key) {
    const Field *f = field_or_die(c, o, key);
    int t = push_field(c, o, key);
    int v;
    if (t == LUA_TNIL) v = f->def && strcmp(f->def, "true") == 0;
    else if (t == LUA_TBOOLEAN) v = lua_toboolean(c->L, -1);
    else {
        char got[100];
        describe_value(c->L, -1, got, sizeof got);
        spec_error(c, key_loc(c, o, key), "%s must be true or false, got %s", key, got);
    }
    lua_pop(c->L, 1);
    return v;
}

/* Choice field: its index, or dflt when absent and the field has no default. */
static int get_choice(Ctx *c, const Obj *o, const char *key, int dflt) {
    const Field *f = field_or_die(c, o, key);
    int t = push_field(c, o, key);
    int v = dflt;
    if (t == LUA_TNIL) {
        if (f->def) v = choice_index(f->choices, f->def);
    } else {
        char want[200], got[100];
        describe_kind(f, want, sizeof want);
        describe_value(c->L, -1, got, sizeof got);
        if (t != LUA_TSTRING || (v = choice_index(f->choices, lua_tostring(c->L, -1))) < 0)
            spec_error(c, key_loc(c, o, key), "%s must be %s, got %s", key, want, got);
    }
    lua_pop(c->L, 1);
    return v;
}

static void get_string(Ctx *c, const Obj *o, const char *key, char *out, size_t n) {
    const Field *f = field_or_die(c, o, key);
    int t = push_field(c, o, key);
    if (t == LUA_TNIL) {
        if (!f->def) require_present(c, o, f);
        snprintf(out, n, "%s", f->def);
    } else {
        char got[100];
        describe_value(c->L, -1, got, sizeof got);
        if (t != LUA_TSTRING) spec_error(c, key_loc(c, o, key), "%s must be a string (%s), got %s", key, f->help, got);
        size_t len;
        const char *s = lua_tolstring(c->L, -1, &len);
        if (len >= n) spec_error(c, key_loc(c, o, key), "%s is too long (at most %zu characters)", key, n - 1);
        memcpy(out, s, len + 1);
    }
    lua_pop(c->L, 1);
}

/* Nested plain table field: pushes it (an empty table when absent) and returns its Obj. */
static Obj get_table(Ctx *c, const Obj *o, const char *key, const Schema *schema) {
    int t = push_field(c, o, key);
    Loc loc = key_loc(c, o, key);
    if (t == LUA_TNIL) { lua_pop(c->L, 1); lua_newtable(c->L); }
    else if (t != LUA_TTABLE) {
        char got[100];
        describe_value(c->L, -1, got, sizeof got);
        spec_error(c, loc, "%s must be a table %s, got %s", key, field_or_die(c, o, key)->help, got);
    }
    Obj sub = make_obj(c, -1, schema, loc);
    check_keys(c, &sub);
    return sub;
}

/* ---------------------------------------------------------------- files */

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* "a, b, c" of the NAME.lua files in dir (not NAME.tuning.lua), sorted. */
static void list_specs(const char *dir, char *buf, size_t n) {
    char names[128][NAME_LEN];
    int count = 0;
    buf[0] = 0;
    DIR *d = opendir(dir);
    if (!d) { snprintf(buf, n, "none: %s is missing", dir); return; }
    struct dirent *e;
    while ((e = readdir(d)) && count < 128) {
        size_t len = strlen(e->d_name);
        if (len < 5 || len - 4 >= NAME_LEN || strcmp(e->d_name + len - 4, ".lua") != 0) continue;
        if (len > 11 && strcmp(e->d_name + len - 11, ".tuning.lua") == 0) continue;
        memcpy(names[count], e->d_name, len - 4);
        names[count++][len - 4] = 0;
    }
    closedir(d);
    qsort(names, count, NAME_LEN, (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < count; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", i ? ", " : "", names[i]);
    }
    if (!count) snprintf(buf, n, "none in %s", dir);
}

/* Read a whole file into a new Source; returns its index. Errors are raised at loc. */
static int add_source(Ctx *c, const char *path, Loc loc) {
    for (int i = 0; i < c->nsrc; i++)
        if (strcmp(c->src[i].path, path) == 0) return i;
    if (c->nsrc == MAX_SOURCES) spec_error(c, loc, "too many spec files (at most %d)", MAX_SOURCES);
    char why[PATH_LEN + 100];
    char *text = file_read_all(path, (size_t)16 << 20, NULL, why, sizeof why);
    if (!text) spec_error(c, loc, "%s", why);
    Source *s = &c->src[c->nsrc];
    snprintf(s->path, sizeof s->path, "%s", path);
    s->text = text;
    return c->nsrc++;
}

/* Evaluate a spec file and leave its one result on the stack. */
static int eval_file(Ctx *c, const char *path, Loc loc) {
    int src = add_source(c, path, loc);
    char err[2000];
    if (sandbox_load(c->sb, c->src[src].path, c->src[src].text, strlen(c->src[src].text), err, sizeof err)) {
        lua_pushstring(c->L, err);
        lua_error(c->L);
    }
    lua_call(c->L, 0, 1);   /* errors go to the outer protected call, which adds file:line */
    return src;
}

/* The file's result must be made by helper `kind`; returns its Obj (table left on the stack). */
static Obj expect_kind(Ctx *c, int src, const char *kind, const char *example, const Schema *schema) {
    const char *got = push_meta(c, -1);
    int ok = got && strcmp(got, kind) == 0;
    lua_pop(c->L, 1);
    if (!ok) {
        char what[100];
        describe_value(c->L, -1, what, sizeof what);
        spec_error(c, (Loc){src, 1, -1}, "a %s spec must end with: return %s (it returned %s)",
                   kind, example, got ? got : what);
    }
    Obj o = make_obj(c, -1, schema, (Loc){src, 1, -1});
    check_keys(c, &o);
    return o;
}

/* ---------------------------------------------------------------- the model */

static const char *const PROJ_NAMES[NPROJ] = {"q", "k", "v", "o", "gate", "up", "down"};

static void proj_dims(const Model *m, int p, int *d_in, int *d_out) {
    int kv = m->kv_heads * m->head_dim;
    switch (p) {
    case PROJ_Q: case PROJ_O: *d_in = m->hidden; *d_out = m->hidden; break;
    case PROJ_K: case PROJ_V: *d_in = m->hidden; *d_out = kv; break;
    case PROJ_GATE: case PROJ_UP: *d_in = m->hidden; *d_out = m->ffn; break;
    default: *d_in = m->ffn; *d_out = m->hidden; break;
    }
}

/* Rank value at the top of the stack, from the rank field of factor table fo, into every
 * projection of every layer. */
static void read_ranks(Ctx *c, const Obj *fo, Model *m) {
    lua_State *L = c->L;
    Loc loc = key_loc(c, fo, "rank");
    int t = lua_type(L, -1);
    if (t == LUA_TNIL) spec_error(c, fo->loc, "%s needs rank (a number, {attn=, mlp=} or function(layer, proj))", fo->schema->what);
    if (t == LUA_TNUMBER) {
        double v = lua_tonumber(L, -1);
        if (v != floor(v) || !isfinite(v) || fabs(v) > 1e9)
            spec_error(c, loc, "rank must be a whole number, got %.17g", v);
        for (int l = 0; l < m->layers; l++)
            for (int p = 0; p < NPROJ; p++) m->proj[l][p].rank = (int)v;
    } else if (t == LUA_TTABLE) {
        Obj ro = make_obj(c, -1, &S_RANK, loc);
        check_keys(c, &ro);
        for (int p = 0; p < NPROJ; p++) {
            double v = 0;
            int have = get_number(c, &ro, PROJ_NAMES[p], &v, 0);
            if (!have) have = get_number(c, &ro, p <= PROJ_O ? "attn" : "mlp", &v, 0);
            if (!have)
                spec_error(c, loc, "rank table gives no rank for '%s' (give %s = ... or %s = ...)",
                           PROJ_NAMES[p], p <= PROJ_O ? "attn" : "mlp", PROJ_NAMES[p]);
            for (int l = 0; l < m->layers; l++) m->proj[l][p].rank = (int)v;
        }
    } else if (t == LUA_TFUNCTION) {
        for (int l = 0; l < m->layers; l++)
            for (int p = 0; p < NPROJ; p++) {
                lua_pushvalue(L, -1);
                lua_pushinteger(L, l);
                lua_pushstring(L, PROJ_NAMES[p]);
                if (lua_pcall(L, 2, 1, 0) != LUA_OK) {   /* say which call failed, then pass it on */
                    const char *msg = lua_tostring(L, -1);
                    if (msg && !strstr(msg, "spec runs too long"))
                        lua_pushfstring(L, "%s (in the rank function, called for layer %d, '%s')", msg, l, PROJ_NAMES[p]);
                    lua_error(L);
                }
                double v = lua_tonumber(L, -1);
                if (lua_type(L, -1) != LUA_TNUMBER || v != floor(v) || !isfinite(v) || fabs(v) > 1e9) {
                    char got[100];
                    describe_value(L, -1, got, sizeof got);
                    spec_error(c, loc, "rank function returned %s for layer %d, '%s': it must return a whole number",
                               got, l, PROJ_NAMES[p]);
                }
                m->proj[l][p].rank = (int)v;
                lua_pop(L, 1);
            }
    } else {
        char got[100];
        describe_value(L, -1, got, sizeof got);
        spec_error(c, loc, "rank must be a number, a table {attn=, mlp=} or a function(layer, proj), got %s", got);
    }
    /* each rank must fit its projection */
    for (int l = 0; l < m->layers; l++)
        for (int p = 0; p < NPROJ; p++) {
            int r = m->proj[l][p].rank, d_in, d_out;
            proj_dims(m, p, &d_in, &d_out);
            int limit = d_in < d_out ? d_in : d_out;
            if (r <= 0)
                spec_error(c, loc, "rank of '%s' in layer %d is %d: ranks must be at least 1 (use full{} for dense projections)",
                           PROJ_NAMES[p], l, r);
            if (r > limit)
                spec_error(c, loc, "rank %d of '%s' in layer %d is larger than min(d_in, d_out) = min(%d, %d) = %d: "
                           "a bottleneck wider than its projection saves nothing (use a rank <= %d or full{})",
                           r, PROJ_NAMES[p], l, d_in, d_out, limit, limit);
        }
}

/* moe{shared = {"gate.A", ...}}: the factors every expert of a layer shares (m->moe_shared, MOE_SHARE_*).
 * Only the factors next to the token (gate/up A, down B) can be shared: they move the dispatch into
 * the rank-r latent space; sharing needs low-rank experts. */
static void read_moe_shared(Ctx *c, Obj *mo, Model *m) {
    lua_State *L = c->L;
    int t = push_field(c, mo, "shared");
    Loc sloc = key_loc(c, mo, "shared");
    if (t == LUA_TNIL) { lua_pop(L, 1); return; }
    static const char *const names[3] = {"gate.A", "up.A", "down.B"};
    if (t != LUA_TTABLE) {
        char got[100];
        describe_value(L, -1, got, sizeof got);
        spec_error(c, sloc, "moe: shared must be a list of factor names such as {\"gate.A\", \"up.A\", \"down.B\"}, got %s", got);
    }
    int n = (int)lua_rawlen(L, -1);
    lua_pushnil(L);
    while (lua_next(L, -2)) {   /* only the list part: no other keys */
        if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) < 1 || lua_tointeger(L, -2) > n)
            spec_error(c, sloc, "moe: shared is a list of factor names, e.g. shared = {\"gate.A\", \"down.B\"} (no keys)");
        lua_pop(L, 1);
    }
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        char got[100];
        describe_value(L, -1, got, sizeof got);
        const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int j = 0;
        while (s && j < 3 && strcmp(s, names[j])) j++;
        if (!s || j == 3) {
            if (s && (!strcmp(s, "gate.B") || !strcmp(s, "up.B") || !strcmp(s, "down.A")))
                spec_error(c, sloc, "moe: shared factor \"%s\" cannot be shared: it sits inside the expert (after its "
                           "token-side factor); the factors that can be shared are \"gate.A\", \"up.A\" and \"down.B\"", s);
            spec_error(c, sloc, "moe: shared names %s, which is no factor of an expert: use \"gate.A\", \"up.A\" or \"down.B\"", got);
        }
        if (!model_factorization(m)->moe_share)
            spec_error(c, sloc, "moe: shared factor \"%s\" needs low-rank experts, but model %s is %s (full-rank experts have "
                       "no factors to share): drop shared or use lowrank = cola{...} or svd{...}", s, m->name, m->family);
        if (m->moe_shared & (1u << j))
            spec_error(c, sloc, "moe: shared lists \"%s\" twice", s);
        m->moe_shared |= 1u << j;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* moe{experts=, top_k=, capacity_factor=, aux_loss=, every=, expert_ffn=} into m (after the ranks:
 * the experts use each layer's gate/up/down ranks). */
static void read_moe(Ctx *c, Obj *o, Model *m) {
    lua_State *L = c->L;
    int t = push_field(c, o, "moe");
    if (t == LUA_TNIL) { lua_pop(L, 1); return; }
    lua_pop(L, 1);
    Loc loc = key_loc(c, o, "moe");
    Obj mo = get_table(c, o, "moe", &S_MOE);
    m->moe_experts = get_int(c, &mo, "experts");
    m->moe_top_k = get_int(c, &mo, "top_k");
    m->moe_capacity = get_num(c, &mo, "capacity_factor");
    m->moe_aux = get_num(c, &mo, "aux_loss");
    m->moe_z = get_num(c, &mo, "z_loss");
    double ff = m->ffn;
    get_number(c, &mo, "expert_ffn", &ff, 0);
    m->moe_ffn = (int)ff;
    if (m->moe_top_k > m->moe_experts)
        spec_error(c, key_loc(c, &mo, "top_k"), "top_k (%d) must not exceed experts (%d): each token picks top_k distinct experts",
                   m->moe_top_k, m->moe_experts);
    int ev = push_field(c, &mo, "every");
    Loc eloc = key_loc(c, &mo, "every");
    if (ev == LUA_TFUNCTION) {
        for (int l = 0; l < m->layers; l++) {
            lua_pushvalue(L, -1);
            lua_pushinteger(L, l);
            if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
                const char *msg = lua_tostring(L, -1);
                if (msg && !strstr(msg, "spec runs too long"))
                    lua_pushfstring(L, "%s (in the moe 'every' function, called for layer %d)", msg, l);
                lua_error(L);
            }
            if (lua_type(L, -1) != LUA_TBOOLEAN) {
                char got[100];
                describe_value(L, -1, got, sizeof got);
                spec_error(c, eloc, "the moe 'every' function returned %s for layer %d: it must return true or false", got, l);
            }
            m->moe_layer[l] = (unsigned char)lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    } else {
        lua_pop(L, 1);
        int every = get_int(c, &mo, "every");
        for (int l = 0; l < m->layers; l++) m->moe_layer[l] = (unsigned char)(l % every == 0);
    }
    int any = 0;
    for (int l = 0; l < m->layers; l++) any |= m->moe_layer[l];
    if (!any) spec_error(c, eloc, "moe: 'every' selects no layer of the %d: drop moe{} or select a layer", m->layers);
    read_moe_shared(c, &mo, m);
    if (!factorization_experts(model_factorization(m)))
        spec_error(c, loc, "moe experts are low-rank (cola, svd) or full rank (full, layout megatron); model family %s is not "
                   "supported with moe (use lowrank = cola{...}, svd{...} or full{})", m->family);
    for (int l = 0; l < m->layers && factorization_lowrank(model_factorization(m)); l++) {
        if (!m->moe_layer[l]) continue;
        static const int ps[3] = {PROJ_GATE, PROJ_UP, PROJ_DOWN};
        for (int j = 0; j < 3; j++) {
            int r = m->proj[l][ps[j]].rank;
            int limit = m->hidden < m->moe_ffn ? m->hidden : m->moe_ffn;
            if (r > limit)
                spec_error(c, loc, "moe: rank %d of the experts' '%s' in layer %d is larger than min(hidden, expert_ffn) = %d",
                           r, PROJ_NAMES[ps[j]], l, limit);
        }
    }
    lua_pop(L, 1);   /* the moe table */
}

static void read_model(Ctx *c, Obj *o, const char *name, Model *m) {
    lua_State *L = c->L;
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->file, sizeof m->file, "%s", o->loc.src >= 0 ? c->src[o->loc.src].path : c->run_path);
    m->hidden = get_int(c, o, "hidden");
    m->layers = get_int(c, o, "layers");
    m->heads = get_int(c, o, "heads");
    double kv = m->heads;
    get_number(c, o, "kv_heads", &kv, 0);
    m->kv_heads = (int)kv;
    m->ffn = get_int(c, o, "ffn");
    m->vocab = get_int(c, o, "vocab");
    m->norm_eps = get_num(c, o, "norm_eps");
    m->rope_theta = get_num(c, o, "rope_theta");
    m->init_std = get_num(c, o, "init_std");
    if (m->hidden % m->heads)
        spec_error(c, key_loc(c, o, "heads"), "hidden (%d) must be divisible by heads (%d): head_dim = hidden / heads",
                   m->hidden, m->heads);
    m->head_dim = m->hidden / m->heads;
    if (m->head_dim % 2)
        spec_error(c, key_loc(c, o, "heads"), "head_dim = hidden / heads = %d must be even (RoPE rotates pairs)", m->head_dim);
    if (m->heads % m->kv_heads)
        spec_error(c, key_loc(c, o, "kv_heads"), "heads (%d) must be divisible by kv_heads (%d): each kv head serves heads/kv_heads query heads",
                   m->heads, m->kv_heads);

    /* the factorisation */
    int t = push_field(c, o, "lowrank");
    const Factorization *fz = factorization_find("full");
    Obj fo = {0};
    if (t != LUA_TNIL) {
        const char *kind = push_meta(c, -1);
        const char *fam = kind && strcmp(kind, "factor") == 0 ? meta_string(c, "family") : NULL;
        lua_pop(L, 1);
        const Factorization *row = fam ? factorization_find(fam) : NULL;
        if (!row) {
            char got[100];
            describe_value(L, -1, got, sizeof got);
            spec_error(c, key_loc(c, o, "lowrank"), "lowrank must be cola{rank=}, svd{rank=}, lax{rank=} or full{}, got %s", got);
        }
        fz = row;
        fo = make_obj(c, -1, factor_schema(fz->family), key_loc(c, o, "lowrank"));
        check_keys(c, &fo);
    }
    snprintf(m->family, sizeof m->family, "%s", fz->family);
    if (!factorization_lowrank(fz)) {
        for (int l = 0; l < m->layers; l++)
            for (int p = 0; p < NPROJ; p++) m->proj[l][p] = (ProjSpec){fz->factor, 0, ACT_NONE};
        m->mlp_gate_act = get_choice(c, o, "mlp_gate_act", fz->gate_act);
    } else {
        m->lax = fz->lax;
        const Factorization *base = fz;   /* LaX is added to a base: cola (the default) or svd */
        if (fz->lax) base = factorization_find(get_choice(c, &fo, "base", 0) == 1 ? "svd" : "cola");
        int act = get_choice(c, &fo, "act", base->act);
        for (int l = 0; l < m->layers; l++)
            for (int p = 0; p < NPROJ; p++) m->proj[l][p] = (ProjSpec){base->factor, 0, act};
        push_field(c, &fo, "rank");
        read_ranks(c, &fo, m);
        lua_pop(L, 1);
        m->mlp_gate_act = get_choice(c, o, "mlp_gate_act", fz->gate_act);
        if (m->lax) {   /* B_p adds the latent of prev(p): the two ranks must match */
            static const int pairs[][2] = {{PROJ_O, PROJ_V}, {PROJ_GATE, PROJ_O}, {PROJ_UP, PROJ_O}, {PROJ_DOWN, PROJ_UP}};
            for (int l = 0; l < m->layers; l++)
                for (int i = 0; i < 4; i++) {
                    int a = pairs[i][0], b = pairs[i][1];
                    if (m->proj[l][a].rank != m->proj[l][b].rank)
                        spec_error(c, key_loc(c, &fo, "rank"),
                                   "LaX adds the latent of '%s' to that of '%s', so their ranks must be equal; "
                                   "layer %d has %d and %d", PROJ_NAMES[b], PROJ_NAMES[a], l,
                                   m->proj[l][b].rank, m->proj[l][a].rank);
                }
        }
    }
    lua_pop(L, 1);   /* the lowrank value */
    read_moe(c, o, m);
}

/* The run's model field (a name, a path, or an inline model) into run->model. */
static void load_model(Ctx *c, const Obj *ro) {
    lua_State *L = c->L;
    Loc loc = key_loc(c, ro, "model");
    int t = push_field(c, ro, "model");
    if (t == LUA_TNIL)
        spec_error(c, ro->loc, "run needs model (a model name from %s/models, e.g. model = \"cola-llama-7b\", "
                   "or model \"name\" { ... } inline)", c->specs_dir);
    if (t == LUA_TTABLE) {
        const char *kind = push_meta(c, -1);
        int ok = kind && strcmp(kind, "model") == 0;
        char name[NAME_LEN] = "";
        if (ok) snprintf(name, sizeof name, "%s", meta_string(c, "name"));
        lua_pop(L, 1);
        if (!ok) spec_error(c, loc, "model must be a model name or model \"name\" { ... }, got a plain table");
        Obj mo = make_obj(c, -1, &S_MODEL, loc);
        check_keys(c, &mo);
        read_model(c, &mo, name, &c->run->model);
        lua_pop(L, 1);
        return;
    }
    if (t != LUA_TSTRING) {
        char got[100];
        describe_value(L, -1, got, sizeof got);
        spec_error(c, loc, "model must be a model name (a string) or model \"name\" { ... }, got %s", got);
    }
    char ref[PATH_LEN], path[PATH_LEN * 3];
    snprintf(ref, sizeof ref, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    size_t n = strlen(ref);
    int by_path = strchr(ref, '/') || (n > 4 && strcmp(ref + n - 4, ".lua") == 0);
    if (by_path) {
        if (ref[0] == '/' || loc.ov >= 0) snprintf(path, sizeof path, "%s", ref);   /* -D: from the cwd */
        else {
            char dir[PATH_LEN];
            snprintf(dir, sizeof dir, "%s", c->run_path);
            char *slash = strrchr(dir, '/');
            if (slash) { *slash = 0; snprintf(path, sizeof path, "%s/%s", dir, ref); }
            else snprintf(path, sizeof path, "%s", ref);
        }
        if (!file_exists(path)) spec_error(c, loc, "model file %s does not exist", path);
    } else {
        snprintf(path, sizeof path, "%s/models/%s.lua", c->specs_dir, ref);
        if (!file_exists(path)) {
            char dir[PATH_LEN + 16], known[4000];
            snprintf(dir, sizeof dir, "%s/models", c->specs_dir);
            list_specs(dir, known, sizeof known);
            spec_error(c, loc, "unknown model '%s' (known: %s; or write specs/models/%s.lua)", ref, known, ref);
        }
    }
    int src = eval_file(c, path, loc);
    Obj mo = expect_kind(c, src, "model", "model \"NAME\" { hidden = ..., ... }", &S_MODEL);
    push_meta(c, -1);
    char name[NAME_LEN];
    snprintf(name, sizeof name, "%s", meta_string(c, "name"));
    lua_pop(L, 1);
    if (!by_path && strcmp(name, ref) != 0)
        spec_error(c, mo.loc, "this file declares model \"%s\" but is named %s.lua: the name and the file name must match",
                   name, ref);
    read_model(c, &mo, name, &c->run->model);
    lua_pop(L, 1);
}

/* ---------------------------------------------------------------- the GPU */

static void read_tune(Ctx *c, const Obj *to, Gpu *g, int defaults) {
    double v;
    struct { const char *key; int *dst; int pow2; } f[] = {
        {"row_block", &g->tune_row_block, 0}, {"elem_block", &g->tune_elem_block, 0},
        {"attn_block_q", &g->tune_attn_block_q, 1}, {"attn_block_k", &g->tune_attn_block_k, 1},
    };
    for (int i = 0; i < 4; i++) {
        int given = get_number(c, to, f[i].key, &v, 0);
        if (!given && !defaults) continue;
        int x = (int)v;
        if (f[i].pow2 ? (x & (x - 1)) != 0 : x % 32 != 0)
            spec_error(c, key_loc(c, to, f[i].key), "%s must be %s, got %d", f[i].key,
                       f[i].pow2 ? "a power of two" : "a multiple of 32 (a whole number of warps)", x);
        *f[i].dst = x;
    }
}

static void read_gpu(Ctx *c, Obj *o, const char *name, Gpu *g) {
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", name);
    snprintf(g->file, sizeof g->file, "%s", o->loc.src >= 0 ? c->src[o->loc.src].path : c->run_path);
    get_string(c, o, "arch", g->arch, sizeof g->arch);
    int digits = 0;   /* sm_ + 2-3 digits + an optional "a" (arch-specific features, sm_90a) */
    for (const char *p = g->arch + 3; *p >= '0' && *p <= '9'; p++) digits++;
    const char *tail = g->arch + 3 + digits;
    int bad_tail = strcmp(tail, "") && strcmp(tail, "a");
    if (strncmp(g->arch, "sm_", 3) != 0 || digits < 2 || digits > 3 || bad_tail)
        spec_error(c, key_loc(c, o, "arch"),
                   "arch must look like \"sm_80\", \"sm_90\" or \"sm_100a\", got \"%s\"", g->arch);
    g->smem_block_kib = get_int(c, o, "smem_block_kib");
    g->smem_sm_kib = get_int(c, o, "smem_sm_kib");
    g->regs_sm = get_int(c, o, "regs_sm");
    g->threads_sm = get_int(c, o, "threads_sm");
    g->blocks_sm = get_int(c, o, "blocks_sm");
    g->kernel_report = get_bool(c, o, "kernel_report");
    g->sm_count = get_int(c, o, "sm_count");
    g->bf16_tflops = get_num(c, o, "bf16_tflops");
    g->hbm_gbs = get_num(c, o, "hbm_gbs");
    g->nvlink_gbs = get_num(c, o, "nvlink_gbs");
    g->net_gbs = get_num(c, o, "net_gbs");
    g->nvlink_latency_us = get_num(c, o, "nvlink_latency_us");
    g->net_latency_us = get_num(c, o, "net_latency_us");
    g->gpus_per_node = get_int(c, o, "gpus_per_node");
    g->memory_gb = get_num(c, o, "memory_gb");
    Obj to = get_table(c, o, "tune", &S_TUNE);
    read_tune(c, &to, g, 1);
    lua_pop(c->L, 1);
}

static void load_gpu(Ctx *c, const Obj *ro) {
    lua_State *L = c->L;
    Loc loc = key_loc(c, ro, "gpu");
    int t = push_field(c, ro, "gpu");
    if (t == LUA_TNIL) { lua_pop(L, 1); lua_pushstring(L, field_of(&S_RUN, "gpu")->def); t = LUA_TSTRING; }
    if (t == LUA_TTABLE) {
        const char *kind = push_meta(c, -1);
        int ok = kind && strcmp(kind, "gpu") == 0;
        char name[NAME_LEN] = "";
        if (ok) snprintf(name, sizeof name, "%s", meta_string(c, "name"));
        lua_pop(L, 1);
        if (!ok) spec_error(c, loc, "gpu must be a GPU name or gpu \"name\" { ... }, got a plain table");
        Obj go = make_obj(c, -1, &S_GPU, loc);
        check_keys(c, &go);
        read_gpu(c, &go, name, &c->run->gpu);
        lua_pop(L, 1);
        return;
    }
    if (t != LUA_TSTRING) {
        char got[100];
        describe_value(L, -1, got, sizeof got);
        spec_error(c, loc, "gpu must be a GPU name such as \"h100\", got %s", got);
    }
    char name[NAME_LEN], path[PATH_LEN * 2], dir[PATH_LEN + 8];
    snprintf(name, sizeof name, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    snprintf(dir, sizeof dir, "%s/gpus", c->specs_dir);
    snprintf(path, sizeof path, "%s/%s.lua", dir, name);
    if (strchr(name, '/') || !file_exists(path)) {
        char known[2000];
        list_specs(dir, known, sizeof known);
        spec_error(c, loc, "unknown gpu '%s' (known: %s; or write specs/gpus/%s.lua)", name, known, name);
    }
    int src = eval_file(c, path, loc);
    Obj go = expect_kind(c, src, "gpu", "gpu \"NAME\" { arch = ..., ... }", &S_GPU);
    push_meta(c, -1);
    int match = strcmp(meta_string(c, "name"), name) == 0;
    lua_pop(L, 1);
    if (!match) spec_error(c, go.loc, "this file must declare gpu \"%s\" (the name of its file)", name);
    read_gpu(c, &go, name, &c->run->gpu);
    lua_pop(L, 1);
    /* NAME.tuning.lua, written by `boost tune`, overrides the tune table */
    snprintf(path, sizeof path, "%s/%s.tuning.lua", dir, name);
    if (file_exists(path)) {
        int tsrc = eval_file(c, path, loc);
        if (lua_type(L, -1) != LUA_TTABLE)
            spec_error(c, (Loc){tsrc, 1, -1}, "a tuning file must return a table: return tune { row_block = ..., ... }");
        Obj to = make_obj(c, -1, &S_TUNE, (Loc){tsrc, 1, -1});
        check_keys(c, &to);
        read_tune(c, &to, &c->run->gpu, 0);
        lua_pop(L, 1);
    }
}

/* ---------------------------------------------------------------- overrides */

/* Parse an override's text by the field's kind and push the Lua value; msg on failure. */
static int override_value(const Field *f, const char *text, lua_State *L, char *msg, size_t n) {
    char want[200], *end;
    describe_kind(f, want, sizeof want);
    switch (f->kind) {
    case K_INT: case K_NUM: {
        errno = 0;
        double v = strtod(text, &end);
        if (!*text || *end || errno || !isfinite(v) || (f->kind == K_INT && v != floor(v))) {
            if (f->kind == K_INT) snprintf(msg, n, "%s must be an integer (from %.17g to %.17g)", f->key, f->lo, f->hi);
            else snprintf(msg, n, "%s must be a number (%s %g and <= %g)", f->key, f->open_lo ? ">" : ">=", f->lo, f->hi);
            return 1;
        }
        if (f->kind == K_INT && (v < f->lo || v > f->hi)) {   /* before (lua_Integer)v, which would wrap */
            snprintf(msg, n, "%s must be %s, got %s", f->key, want, text);
            return 1;
        }
        if (L) { if (f->kind == K_INT) lua_pushinteger(L, (lua_Integer)v); else lua_pushnumber(L, v); }
        return 0;
    }
    case K_BOOL: {
        int v = -1;
        if (!strcmp(text, "true") || !strcmp(text, "1") || !strcmp(text, "yes") || !strcmp(text, "on")) v = 1;
        if (!strcmp(text, "false") || !strcmp(text, "0") || !strcmp(text, "no") || !strcmp(text, "off")) v = 0;
        if (v < 0) { snprintf(msg, n, "%s must be true or false", f->key); return 1; }
        if (L) lua_pushboolean(L, v);
        return 0;
    }
    case K_CHOICE:
        if (choice_index(f->choices, text) < 0) { snprintf(msg, n, "%s must be %s", f->key, want); return 1; }
        if (L) lua_pushstring(L, text);
        return 0;
    default:
        if (!*text) { snprintf(msg, n, "%s must not be empty", f->key); return 1; }
        if (L) lua_pushstring(L, text);
        return 0;
    }
}

static void known_overrides(char *buf, size_t n) {
    buf[0] = 0;
    for (const OverrideTarget *t = OVERRIDES; t->name; t++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", len ? ", " : "", t->name);
    }
}

int parse_override(const char *arg, Override *ov, char *err, size_t errlen) {
    if (strncmp(arg, "-D", 2) == 0) arg += 2;   /* "-Dtp=4" and "-D tp=4" as one argument too */
    while (*arg == ' ') arg++;
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        snprintf(err, errlen, "-D %s: expected name=value, e.g. -D tp=4", arg);
        return -1;
    }
    size_t n = eq - arg;
    char name[64];
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, arg, n);
    name[n] = 0;
    const OverrideTarget *t = override_target(name);
    if (!t) {
        char known[600];
        known_overrides(known, sizeof known);
        snprintf(err, errlen, "-D %s: unknown setting '%s' (known: %s)", arg, name, known);
        return -1;
    }
    char msg[400];
    const Field *f = field_of(t->schema, t->key);
    if (override_value(f, eq + 1, NULL, msg, sizeof msg)) {
        if (f->kind == K_INT || f->kind == K_NUM) snprintf(err, errlen, "-D %s: %s", arg, msg);
        else snprintf(err, errlen, "-D %s: %s (%s)", arg, msg, f->help);
        return -1;
    }
    ov->name = t->name;   /* static storage: lives as long as the program */
    ov->value = eq + 1;
    return 1;
}

/* Write each override into the run table (creating sub-tables) before it is read. */
static void apply_overrides(Ctx *c, int run_idx) {
    lua_State *L = c->L;
    if (c->nov > MAX_OVERRIDES) spec_error(c, NOWHERE, "too many -D overrides (at most %d)", MAX_OVERRIDES);
    for (int i = 0; i < c->nov; i++) {
        Loc loc = {-1, 0, i};
        const OverrideTarget *t = override_target(c->ov[i].name ? c->ov[i].name : "");
        if (!t) {
            char known[600];
            known_overrides(known, sizeof known);
            spec_error(c, loc, "unknown setting '%s' (known: %s)", c->ov[i].name ? c->ov[i].name : "", known);
        }
        const Field *f = field_of(t->schema, t->key);
        c->ov_schema[i] = t->schema;
        c->ov_key[i] = t->key;
        int table_idx = run_idx;
        if (t->schema != &S_RUN) {
            int tt = lua_getfield(L, run_idx, t->schema->what);
            if (tt == LUA_TSTRING && t->schema == &S_DATA) {      /* data = "path" shorthand */
                lua_pop(L, 1);
                lua_createtable(L, 0, 2);
                lua_getfield(L, run_idx, "data");
                lua_setfield(L, -2, "path");
                lua_pushvalue(L, -1);
                lua_setfield(L, run_idx, "data");
            } else if (tt == LUA_TNIL) {
                lua_pop(L, 1);
                lua_newtable(L);
                lua_pushvalue(L, -1);
                lua_setfield(L, run_idx, t->schema->what);
            } else if (tt != LUA_TTABLE) {
                spec_error(c, loc, "the run's %s is not a table, so %s cannot be set", t->schema->what, t->key);
            }
            table_idx = lua_gettop(L);
        }
        char msg[400];
        if (override_value(f, c->ov[i].value ? c->ov[i].value : "", L, msg, sizeof msg)) {
            if (f->kind == K_INT || f->kind == K_NUM) spec_error(c, loc, "%s", msg);
            spec_error(c, loc, "%s (%s)", msg, f->help);
        }
        lua_setfield(L, table_idx, t->key);
        if (t->schema != &S_RUN) lua_pop(L, 1);
    }
}

/* ---------------------------------------------------------------- the run */

/* "1, 2, 4" : the tp degrees up to 64 that divide all of the model's split dimensions. */
static void valid_tps(const Model *m, int naive, char *buf, size_t n) {
    buf[0] = 0;
    for (int tp = 1; tp <= 64; tp++) {
        int ok = m->heads % tp == 0 && m->kv_heads % tp == 0 && m->ffn % tp == 0 && m->vocab % tp == 0 &&
                 m->hidden % tp == 0;
        for (int l = 0; ok && naive && l < m->layers; l++)
            for (int p = 0; p < NPROJ; p++) ok = ok && m->proj[l][p].rank % tp == 0;
        if (!ok) continue;
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%d", len ? ", " : "", tp);
    }
}

/* parallel.stages = {n0, n1, ...}: layers per pipeline stage. One count per stage, each at least 1,
 * summing to the model's layers. Absent: r->pp_nstages = 0 (gen/pp.c balances by cost). */
static void read_stages(Ctx *c, const Obj *par) {
    Run *r = c->run;
    lua_State *L = c->L;
    r->pp_nstages = 0;
    int t = push_field(c, par, "stages");
    if (t == LUA_TNIL) { lua_pop(L, 1); return; }
    Loc loc = key_loc(c, par, "stages");
    if (t != LUA_TTABLE) spec_error(c, loc, "stages must be a list of layer counts, one per pipeline stage, e.g. {8, 8}");
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    int count = 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) { count++; lua_pop(L, 1); }
    if (count != n || n != r->pp)
        spec_error(c, loc, "stages must list exactly pp (%d) layer counts, one per stage, e.g. {%d, %d}; it has %d entries",
                   r->pp, r->model.layers - r->model.layers / 2, r->model.layers / 2, count);
    int sum = 0;
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        if (!lua_isinteger(L, -1) && !(lua_isnumber(L, -1) && lua_tonumber(L, -1) == (lua_Integer)lua_tonumber(L, -1)))
            spec_error(c, loc, "stages[%d] must be an integer layer count", (int)i);
        lua_Integer v = (lua_Integer)lua_tonumber(L, -1);
        lua_pop(L, 1);
        if (v < 1) spec_error(c, loc, "stages[%d] is %lld: every pipeline stage needs at least one layer", (int)i, (long long)v);
        if (v > r->model.layers) spec_error(c, loc, "stages[%d] is %lld, more than the model's %d layers", (int)i, (long long)v, r->model.layers);
        r->pp_stages[i - 1] = (int)v;
        sum += (int)v;
    }
    lua_pop(L, 1);
    if (sum != r->model.layers)
        spec_error(c, loc, "stages sum to %d layers, but model %s has %d: make the counts add up to %d", sum, r->model.name,
                   r->model.layers, r->model.layers);
    r->pp_nstages = (int)n;
}

static void check_run(Ctx *c, const Obj *par, const Obj *feat, const Obj *train) {
    Run *r = c->run;
    const Model *m = &r->model;
    int lowrank = factorization_lowrank(model_factorization(m));
    Loc tp_loc = key_loc(c, par, "tp");
    char tps[300];
    valid_tps(m, r->layout == LAYOUT_NAIVE, tps, sizeof tps);
    struct { const char *what; int value; } splits[] = {
        {"heads", m->heads}, {"kv_heads", m->kv_heads}, {"ffn", m->ffn}, {"vocab", m->vocab}, {"hidden", m->hidden},
    };
    for (int i = 0; i < 5; i++)
        if (splits[i].value % r->tp)
            spec_error(c, tp_loc, "%s (%d) of model %s must be divisible by tp (%d): each rank holds %s/tp; "
                       "tp can be %s", splits[i].what, splits[i].value, m->name, r->tp, splits[i].what, tps);
    if (r->layout == LAYOUT_NAIVE)
        for (int l = 0; l < m->layers; l++)
            for (int p = 0; p < NPROJ; p++)
                if (m->proj[l][p].rank % r->tp)
                    spec_error(c, tp_loc, "the naive layout splits each rank across tp ranks, but '%s' in layer %d has "
                               "rank %d, not divisible by tp (%d); tp can be %s", PROJ_NAMES[p], l,
                               m->proj[l][p].rank, r->tp, tps);
    Loc layout_loc = key_loc(c, par, "layout");
    if (r->layout == LAYOUT_MEGATRON && lowrank)
        spec_error(c, layout_loc, "layout megatron needs a full-rank model, and %s is low-rank (%s): use layout \"btp\" "
                   "(or \"naive\" to compare)", m->name, m->family);
    if (r->layout != LAYOUT_MEGATRON && !lowrank)
        spec_error(c, layout_loc, "layout %s splits low-rank factors, and %s is full-rank: use layout \"megatron\"",
                   layout_name(r->layout), m->name);
    if (m->moe_experts && m->moe_shared && r->layout != LAYOUT_BTP)
        spec_error(c, layout_loc, "model %s shares expert factors (moe{shared=}), which is built for layout \"btp\" only: use "
                   "layout = \"btp\" or drop shared", m->name);
    if (m->moe_experts && m->moe_ffn % r->tp)
        spec_error(c, tp_loc, "the experts' ffn (%d) of model %s must be divisible by tp (%d): each rank holds expert_ffn/tp",
                   m->moe_ffn, m->name, r->tp);
    if (r->ep > 1) {   /* expert parallelism: docs/moe.md, "Expert parallelism" */
        Loc eloc = key_loc(c, par, "ep");
        if (!m->moe_experts)
            spec_error(c, eloc, "ep (%d) shares out MoE experts, and model %s has no moe{} layers: drop ep or use an MoE model",
                       r->ep, m->name);
        if (m->moe_experts % r->ep)
            spec_error(c, eloc, "ep (%d) must divide the %d experts of model %s: each ep rank holds experts/ep whole experts; "
                       "choose ep dividing %d", r->ep, m->moe_experts, m->name, m->moe_experts);
        if (r->dp % r->ep)
            spec_error(c, eloc, "ep (%d) must divide dp (%d): an ep group is ep neighbouring dp ranks; set dp to a multiple "
                       "of %d (e.g. -D dp=%d)", r->ep, r->dp, r->ep, r->ep);
        if (r->layout != LAYOUT_BTP)
            spec_error(c, eloc, "ep (%d) is built for layout \"btp\" only (layout %s keeps every expert on every rank): use "
                       "layout = \"btp\" or drop ep", r->ep, layout_name(r->layout));
        if (r->zero)
            spec_error(c, eloc, "ep (%d) with zero = %d is not supported: the expert gradients reduce over dp/ep ranks, "
                       "which ZeRO does not shard; use zero = 0 or drop ep", r->ep, r->zero);
    }
    if (r->pp > m->layers)
        spec_error(c, key_loc(c, par, "pp"), "pp (%d) is more than the %d layers of model %s: each pipeline stage needs at "
                   "least one layer; set pp to at most %d", r->pp, m->layers, m->name, m->layers);
    read_stages(c, par);
    r->pp_virtual = get_int(c, par, "virtual_stages");
    if (r->pp_virtual > 1) {
        Loc vloc = key_loc(c, par, "virtual_stages");
        if (r->pp < 2) spec_error(c, vloc, "virtual_stages (%d) interleaves pipeline stages: it needs pp > 1", r->pp_virtual);
        if (r->pp_nstages) spec_error(c, vloc, "virtual_stages and an explicit stages split do not go together: drop one of them");
        if (m->layers % (r->pp * r->pp_virtual))
            spec_error(c, vloc, "virtual_stages (%d) must divide the layers per stage: %d layers over pp=%d x %d chunks is not "
                       "whole; choose virtual_stages dividing %d", r->pp_virtual, m->layers, r->pp, r->pp_virtual,
                       m->layers % r->pp ? m->layers : m->layers / r->pp);
        if (r->grad_accum % r->pp)
            spec_error(c, key_loc(c, train, "grad_accum"), "interleaved 1F1B takes micro-batches in groups of pp: grad_accum (%d) "
                       "must be a multiple of pp (%d), e.g. %d", r->grad_accum, r->pp, r->pp * ((r->grad_accum + r->pp - 1) / r->pp));
    }
    if (r->pp > 1 && r->grad_accum < r->pp && !c->for_projection) {
        spec_error(c, key_loc(c, train, "grad_accum"), "grad_accum (%d) is less than pp (%d): the 1F1B pipeline "
                   "needs at least pp micro-batches per optimizer step; set train.grad_accum to %d or more (e.g. -D grad_accum=%d)",
                   r->grad_accum, r->pp, r->pp, 2 * r->pp);
    }
    if (r->tp > r->gpu.gpus_per_node)
        spec_error(c, tp_loc, "tp (%d) is more than the %d GPUs of one %s node: tensor parallelism stays within a node; "
                   "use pp or dp across nodes", r->tp, r->gpu.gpus_per_node, r->gpu.name);
    if ((double)r->tp * r->pp * r->dp > 65536)
        spec_error(c, tp_loc, "tp*pp*dp = %.0f GPUs is more than this generator plans for (65536)", (double)r->tp * r->pp * r->dp);
    if (r->checkpoint == CKPT_LOWRANK && !lowrank)
        spec_error(c, key_loc(c, feat, "checkpoint"), "checkpoint \"lowrank\" needs a low-rank model, and %s is full-rank: "
                   "use checkpoint = \"none\"", m->name);
    if ((double)r->micro_batch * r->seq > (1 << 24))
        spec_error(c, key_loc(c, train, "seq"), "micro_batch*seq = %.0f tokens per micro-batch is too many (at most %d)",
                   (double)r->micro_batch * r->seq, 1 << 24);
    if (r->min_lr > r->lr)
        spec_error(c, key_loc(c, train, "min_lr"), "min_lr (%g) must not exceed lr (%g)", r->min_lr, r->lr);
}

/* ---------------------------------------------------------------- data mixtures */

/* The line of each table item of the list `key = { {...}, {...} }` written at or after from_line:
 * the line of each '{' one level inside the list (strings and -- comments skipped). Returns the
 * items found (at most max); a list built by code rather than written out finds fewer. */
static int list_item_lines(const char *text, int from_line, const char *key, int *lines, int max) {
    int line = find_key_line(text, from_line, key), n = 0, depth = 0;
    if (line <= 0) return 0;
    const char *p = text;
    for (int l = 1; *p && l < line; p++) if (*p == '\n') l++;
    p = strstr(p, key);
    while (p && *p && n < max) {
        char q = *p;
        if (q == '\n') line++;
        else if (q == '"' || q == '\'') {   /* a string: to its closing quote */
            for (p++; *p && *p != q && *p != '\n'; p++) if (*p == '\\' && p[1]) p++;
            if (!*p) break;
        } else if (q == '-' && p[1] == '-') {   /* a comment: to the end of the line */
            while (p[1] && p[1] != '\n') p++;
        } else if (q == '{') {
            if (++depth == 2) lines[n++] = line;
        } else if (q == '}' && --depth <= 0) break;
        p++;
    }
    return n;
}

/* A source's path names data: "corpus", or a file or glob matching one from the current folder
 * or the repository root (the folder above specs/), as the runtime resolves it. */
static int source_found(const Ctx *c, const char *path) {
    if (!strcmp(path, "corpus")) return 1;
    char alt[2 * PATH_LEN + 8];
    snprintf(alt, sizeof alt, "%s/../%s", c->specs_dir, path);
    for (int k = 0; k < (path[0] == '/' ? 1 : 2); k++) {
        glob_t g;
        int found = glob(k ? alt : path, 0, NULL, &g) == 0 && g.gl_pathc > 0;
        if (found) found = file_exists(g.gl_pathv[0]);
        globfree(&g);
        if (found) return 1;
    }
    return 0;
}

/* One source of data.sources (the item on top of the stack, the index-th, written at line):
 * path, weight and its tokenizer, which must be the run's one tokenizer. */
static void read_source(Ctx *c, const Obj *data, int index, int line) {
    Run *r = c->run;
    Loc at = data->loc;
    if (line > 0) at.line = line;
    if (lua_type(c->L, -1) != LUA_TTABLE)
        spec_error(c, at, "data.sources[%d] must be a table {path = ..., weight = ...}", index + 1);
    Obj so = make_obj(c, -1, &S_SOURCE, at);
    check_keys(c, &so);
    char *path = r->source_path[index], tok[PATH_LEN];
    get_string(c, &so, "path", path, PATH_LEN);
    if (!path[0]) spec_error(c, at, "data.sources[%d] has an empty path: name its file", index + 1);
    if (!source_found(c, path))
        spec_error(c, key_loc(c, &so, "path"), "data.sources[%d]: %s matches no file (paths are "
                   "taken from the current folder, then from the repository root)", index + 1,
                   path);
    r->source_weight[index] = get_num(c, &so, "weight");
    get_string(c, &so, "tokenizer", tok, sizeof tok);
    if (!tok[0]) return;
    uint32_t crc = 0;
    Loc tloc = key_loc(c, &so, "tokenizer");
    if (crc32c_file(tok, &crc) != 0)
        spec_error(c, tloc, "tokenizer %s: %s (give the path of a tokenizer.json relative to the "
                   "current folder)", tok, strerror(errno));
    if (!r->tokenizer[0]) {
        snprintf(r->tokenizer, sizeof r->tokenizer, "%s", tok);
        r->tokenizer_crc = crc;
    } else if (crc != r->tokenizer_crc)
        spec_error(c, tloc, "data.sources[%d] names tokenizer %s, but the run's is %s (another "
                   "file): all sources of a run share one tokenizer, as the model has one "
                   "vocabulary; name the same tokenizer.json or none", index + 1, tok,
                   r->tokenizer);
}

/* data.sources = { {path=, weight=, tokenizer=}, ... }: a mixture instead of data.path. */
static void read_mixture(Ctx *c, const Obj *data) {
    lua_State *L = c->L;
    Run *r = c->run;
    r->nsources = 0;
    int t = push_field(c, data, "sources");
    if (t == LUA_TNIL) { lua_pop(L, 1); return; }
    Loc loc = key_loc(c, data, "sources"), path_loc = key_loc(c, data, "path");
    lua_pushstring(L, "path");
    int has_path = lua_rawget(L, data->idx) != LUA_TNIL;
    lua_pop(L, 1);
    if (has_path && path_loc.ov >= 0) { lua_pop(L, 1); return; }   /* -D data=: one source */
    if (has_path)
        spec_error(c, path_loc, "data has both path and sources: a mixture names its files in "
                   "sources; drop path");
    lua_Integer n = t == LUA_TTABLE ? (lua_Integer)lua_rawlen(L, -1) : 0;
    if (n < 1 || n > DATA_MAX_SOURCES)
        spec_error(c, loc, "sources must be a list of 1 to %d tables {path = ..., weight = ...}",
                   DATA_MAX_SOURCES);
    int lines[DATA_MAX_SOURCES] = {0};
    if (loc.src >= 0 && loc.ov < 0)
        list_item_lines(c->src[loc.src].text, loc.line, "sources", lines, DATA_MAX_SOURCES);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        read_source(c, data, (int)i - 1, lines[i - 1]);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    r->nsources = (int)n;
    snprintf(r->data, sizeof r->data, "%s", r->source_path[0]);   /* what eval reads by default */
}

static void read_run(Ctx *c, int run_src) {
    lua_State *L = c->L;
    Run *r = c->run;
    Obj ro = make_obj(c, -1, &S_RUN, (Loc){run_src, 1, -1});
    apply_overrides(c, ro.idx);
    check_keys(c, &ro);
    load_model(c, &ro);
    load_gpu(c, &ro);
    const Model *m = &r->model;
    int lowrank = factorization_lowrank(model_factorization(m));

    Obj par = get_table(c, &ro, "parallel", &S_PARALLEL);
    r->tp = get_int(c, &par, "tp");
    r->pp = get_int(c, &par, "pp");
    r->dp = get_int(c, &par, "dp");
    r->ep = get_int(c, &par, "ep");
    r->dp_bucket_bytes = (int64_t)(get_num(c, &par, "dp_bucket_mb") * 1e6);
    r->zero = get_int(c, &par, "zero");
    r->dp_bf16 = get_choice(c, &par, "dp_dtype", 0) == 1;
    r->layout = get_choice(c, &par, "layout", lowrank ? LAYOUT_BTP : LAYOUT_MEGATRON);

    Obj feat = get_table(c, &ro, "features", &S_FEATURES);
    r->online_rmsnorm = get_bool(c, &feat, "online_rmsnorm");
    r->group_linears = get_bool(c, &feat, "group_linears");
    r->checkpoint = get_choice(c, &feat, "checkpoint", CKPT_NONE);

    Obj train = get_table(c, &ro, "train", &S_TRAIN);
    r->micro_batch = get_int(c, &train, "micro_batch");
    r->seq = get_int(c, &train, "seq");
    r->grad_accum = get_int(c, &train, "grad_accum");
    r->dtype = get_choice(c, &train, "dtype", DT_BF16);
    r->lr = get_num(c, &train, "lr");
    double min_lr = r->lr / 10;
    get_number(c, &train, "min_lr", &min_lr, 0);
    r->min_lr = min_lr;
    r->warmup = get_int(c, &train, "warmup");
    r->steps = get_int(c, &train, "steps");
    r->beta1 = get_num(c, &train, "beta1");
    r->beta2 = get_num(c, &train, "beta2");
    r->adam_eps = get_num(c, &train, "adam_eps");
    r->weight_decay = get_num(c, &train, "weight_decay");
    r->clip = get_num(c, &train, "clip");
    r->seed = (uint64_t)get_num(c, &train, "seed");
    r->eval_every = get_int(c, &train, "eval_every");
    r->max_bad_steps = get_int(c, &train, "max_bad_steps");
    r->spike_window = get_int(c, &train, "spike_window");
    r->spike_z = get_num(c, &train, "spike_z");
    r->spike_rollback_after = get_int(c, &train, "spike_rollback_after");
    r->spike_max_rollbacks = get_int(c, &train, "spike_max_rollbacks");
    r->decay_embeddings = get_bool(c, &train, "decay_embeddings");

    if (push_field(c, &ro, "data") == LUA_TSTRING) {   /* data = "path" is short for {path = "path"} */
        lua_pop(L, 1);
        lua_createtable(L, 0, 1);
        lua_getfield(L, ro.idx, "data");
        lua_setfield(L, -2, "path");
        lua_setfield(L, ro.idx, "data");
    } else lua_pop(L, 1);
    Obj data = get_table(c, &ro, "data", &S_DATA);
    get_string(c, &data, "path", r->data, sizeof r->data);
    r->val_fraction = get_num(c, &data, "val_fraction");
    get_string(c, &data, "tokenizer", r->tokenizer, sizeof r->tokenizer);
    if (r->tokenizer[0] && crc32c_file(r->tokenizer, &r->tokenizer_crc) != 0)
        spec_error(c, key_loc(c, &data, "tokenizer"), "tokenizer %s: %s (give the path of a "
                   "tokenizer.json, e.g. one made by 'boost tokenizer train', relative to the "
                   "current folder)", r->tokenizer, strerror(errno));
    read_mixture(c, &data);

    check_run(c, &par, &feat, &train);
}

/* The body of the one protected call: evaluate the run file and everything it names. */
static int l_load(lua_State *L) {
    Ctx *c = lua_touserdata(L, 1);
    lua_settop(L, 0);
    Loc loc = NOWHERE;
    int src = eval_file(c, c->run_path, loc);
    const char *kind = push_meta(c, -1);
    int ok = kind && strcmp(kind, "run") == 0;
    lua_pop(L, 1);
    if (!ok) {
        char got[100];
        describe_value(L, -1, got, sizeof got);
        spec_error(c, (Loc){src, 1, -1}, "a run spec must end with: return run { model = ..., ... } (it returned %s)",
                   kind ? kind : got);
    }
    read_run(c, src);
    return 0;
}

/* ---------------------------------------------------------------- entry point */

static void dirname_of(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash == out) out[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(out, n, ".");
}

/* Show paths under the working directory relative to it (messages stay short and clickable). */
static void display_path(const char *path, char *out, size_t n) {
    char cwd[PATH_LEN];
    size_t len;
    if (path[0] == '/' && getcwd(cwd, sizeof cwd) && (len = strlen(cwd)) > 1 &&
        strncmp(path, cwd, len) == 0 && path[len] == '/')
        copy_str(out, n, path + len + 1);
    else copy_str(out, n, path);
}

static int load_run(const char *run_arg, const Override *ov, int nov, int for_projection, Run *run, char *err,
                    size_t errlen) {
    Ctx ctx = {0};
    Ctx *c = &ctx;
    c->for_projection = for_projection;
    c->ov = ov;
    c->nov = nov < 0 ? 0 : nov;
    if (!run_arg || !*run_arg) { snprintf(err, errlen, "no run spec given (a path or a name in specs/runs)"); return 2; }
    if (strlen(run_arg) > PATH_LEN - 64) { snprintf(err, errlen, "%.60s...: path too long", run_arg); return 2; }

    /* the run file: a path, or a name in the specs folder */
    const char *specs = env_specs_dir();
    char path[PATH_LEN * 2];
    snprintf(path, sizeof path, "%s", run_arg);
    if (!file_exists(path)) {
        size_t n = strlen(run_arg);
        int is_name = !strchr(run_arg, '/') && !(n > 4 && strcmp(run_arg + n - 4, ".lua") == 0);
        snprintf(path, sizeof path, "%s/runs/%s.lua", specs, run_arg);
        if (!is_name || !file_exists(path)) {
            char dir[PATH_LEN + 8], known[4000];
            snprintf(dir, sizeof dir, "%s/runs", specs);
            list_specs(dir, known, sizeof known);
            if (is_name) snprintf(err, errlen, "%s: no such run spec (not a file, and not a name in %s: %s)", run_arg, dir, known);
            else snprintf(err, errlen, "%s: no such file", run_arg);
            return 2;
        }
    }
    display_path(path, c->run_path, sizeof c->run_path);

    /* the specs folder: $BOOST_SPECS, else the folder above the run's folder when it has gpus/, else ./specs */
    if (env_specs_named()) snprintf(c->specs_dir, sizeof c->specs_dir, "%s", specs);
    else {
        char dir[PATH_LEN], up[PATH_LEN], gpus[PATH_LEN + 8];
        dirname_of(c->run_path, dir, sizeof dir);
        dirname_of(dir, up, sizeof up);
        snprintf(gpus, sizeof gpus, "%s/gpus", up);
        if (strcmp(dir, ".") != 0 && dir_exists(gpus)) snprintf(c->specs_dir, sizeof c->specs_dir, "%s", up);
        else snprintf(c->specs_dir, sizeof c->specs_dir, "specs");
    }

    Run *out = calloc(1, sizeof *out);
    c->sb = sandbox_new(SANDBOX_MEM_CAP, SANDBOX_INSTR_LIMIT);
    if (!out || !c->sb) {
        free(out);
        sandbox_close(c->sb);
        snprintf(err, errlen, "%s: out of memory while starting the spec interpreter", c->run_path);
        return 1;
    }
    c->run = out;
    c->L = sandbox_lua(c->sb);
    define_helpers(c);
    /* run name = file name without .lua */
    const char *base = strrchr(c->run_path, '/');
    base = base ? base + 1 : c->run_path;
    size_t base_len = strlen(base);
    if (base_len > 4 && strcmp(base + base_len - 4, ".lua") == 0) base_len -= 4;
    snprintf(out->name, sizeof out->name, "%.*s", (int)base_len, base);
    copy_str(out->file, sizeof out->file, c->run_path);

    lua_pushcfunction(c->L, l_load);
    lua_pushlightuserdata(c->L, c);
    int rc = sandbox_pcall(c->sb, 1, 0, err, errlen);
    sandbox_close(c->sb);
    for (int i = 0; i < c->nsrc; i++) free(c->src[i].text);
    if (rc == 0) *run = *out;
    free(out);
    return rc ? 2 : 0;
}

int spec_load_run(const char *run_arg, const Override *ov, int nov, Run *run, char *err, size_t errlen) {
    return load_run(run_arg, ov, nov, 0, run, err, errlen);
}

int spec_load_run_projection(const char *run_arg, const Override *ov, int nov, Run *run, char *err, size_t errlen) {
    return load_run(run_arg, ov, nov, 1, run, err, errlen);
}

/* ---------------------------------------------------------------- cluster specs (boost plan) */

/* cluster "name" { gpu = ..., gpus_per_node = ..., ... }: a machine's nodes and links; the figures
 * it leaves out are the GPU file's (docs/planner.md). */
static const Field CLUSTER_FIELDS[] = {
    {"gpu", K_STR, 0, 0, 0, NULL, NULL, "a GPU name from specs/gpus, e.g. gpu = \"a100\""},
    {"gpus_per_node", K_INT, 1, 1024, 0, NULL, NULL, "GPUs in one node"},
    {"nodes", K_INT, 1, 1000000, 0, NULL, "0", "nodes in the cluster (0: no limit)"},
    {"nvlink_gbs", K_NUM, 0, 1e6, 1, NULL, NULL, "NVLink bandwidth per GPU per direction, GB/s"},
    {"net_gbs", K_NUM, 0, 1e6, 1, NULL, NULL, "inter-node bandwidth per GPU, GB/s"},
    {"nvlink_latency_us", K_NUM, 0, 1e6, 0, NULL, NULL, "all-reduce latency within a node, us"},
    {"net_latency_us", K_NUM, 0, 1e6, 0, NULL, NULL, "all-reduce latency across nodes, us"},
    {"memory_gb", K_NUM, 0, 1e6, 1, NULL, NULL, "device memory per GPU, GB"},
    {NULL},
};
static const Schema S_CLUSTER = {"cluster", CLUSTER_FIELDS};

static int l_load_cluster(lua_State *L) {
    Ctx *c = lua_touserdata(L, 1);
    Cluster *cl = lua_touserdata(L, 2);
    lua_settop(L, 0);
    int src = eval_file(c, c->run_path, NOWHERE);
    Obj o = expect_kind(c, src, "cluster", "cluster \"NAME\" { gpu = ..., gpus_per_node = ..., ... }", &S_CLUSTER);
    push_meta(c, -1);
    snprintf(cl->name, sizeof cl->name, "%s", meta_string(c, "name"));
    lua_pop(L, 1);
    get_string(c, &o, "gpu", cl->gpu, sizeof cl->gpu);
    cl->gpus_per_node = get_int(c, &o, "gpus_per_node");
    cl->nodes = get_int(c, &o, "nodes");
    double *opt[] = {&cl->nvlink_gbs, &cl->net_gbs, &cl->nvlink_latency_us, &cl->net_latency_us, &cl->memory_gb};
    const char *keys[] = {"nvlink_gbs", "net_gbs", "nvlink_latency_us", "net_latency_us", "memory_gb"};
    for (int i = 0; i < 5; i++) { *opt[i] = -1; get_number(c, &o, keys[i], opt[i], 0); }
    return 0;
}

int spec_load_cluster(const char *arg, Cluster *out, char *err, size_t errlen) {
    Ctx ctx = {0};
    Ctx *c = &ctx;
    memset(out, 0, sizeof *out);
    const char *specs = env_specs_dir();
    char dir[PATH_LEN], path[PATH_LEN * 2];
    snprintf(dir, sizeof dir, "%s/clusters", specs);
    if (!arg || !*arg || strlen(arg) > PATH_LEN - 64) { snprintf(err, errlen, "a cluster is a name in %s or a path", dir); return 2; }
    snprintf(path, sizeof path, "%s", arg);
    if (!file_exists(path)) {
        snprintf(path, sizeof path, "%s/%s.lua", dir, arg);
        if (strchr(arg, '/') || !file_exists(path)) {
            char known[2000];
            list_specs(dir, known, sizeof known);
            snprintf(err, errlen, "%s: no such cluster (not a file, and not a name in %s: %s)", arg, dir, known);
            return 2;
        }
    }
    display_path(path, c->run_path, sizeof c->run_path);
    c->sb = sandbox_new(SANDBOX_MEM_CAP, SANDBOX_INSTR_LIMIT);
    if (!c->sb) { snprintf(err, errlen, "%s: out of memory while starting the spec interpreter", c->run_path); return 1; }
    c->L = sandbox_lua(c->sb);
    define_helpers(c);
    lua_pushcfunction(c->L, l_load_cluster);
    lua_pushlightuserdata(c->L, c);
    lua_pushlightuserdata(c->L, out);
    int rc = sandbox_pcall(c->sb, 2, 0, err, errlen);
    sandbox_close(c->sb);
    for (int i = 0; i < c->nsrc; i++) free(c->src[i].text);
    return rc ? 2 : 0;
}

void cluster_apply(const Cluster *cl, Gpu *g) {
    if (cl->gpus_per_node > 0) g->gpus_per_node = cl->gpus_per_node;
    if (cl->nvlink_gbs > 0) g->nvlink_gbs = cl->nvlink_gbs;
    if (cl->net_gbs > 0) g->net_gbs = cl->net_gbs;
    if (cl->nvlink_latency_us >= 0) g->nvlink_latency_us = cl->nvlink_latency_us;
    if (cl->net_latency_us >= 0) g->net_latency_us = cl->net_latency_us;
    if (cl->memory_gb > 0) g->memory_gb = cl->memory_gb;
}

/* ---------------------------------------------------------------- every GPU spec */

static int l_load_gpu_file(lua_State *L) {
    Ctx *c = lua_touserdata(L, 1);
    Gpu *g = lua_touserdata(L, 2);
    const char *name = lua_touserdata(L, 3);
    lua_settop(L, 0);
    int src = eval_file(c, c->run_path, NOWHERE);
    Obj go = expect_kind(c, src, "gpu", "gpu \"NAME\" { arch = ..., ... }", &S_GPU);
    push_meta(c, -1);
    int match = strcmp(meta_string(c, "name"), name) == 0;
    lua_pop(L, 1);
    if (!match)
        spec_error(c, go.loc, "this file must declare gpu \"%s\" (the name of its file)", name);
    read_gpu(c, &go, name, g);
    return 0;
}

int spec_load_gpus(const char *gpus_dir, Gpu *out, int max, char *err, size_t errlen) {
    const char *specs = env_specs_dir();
    char dir[PATH_LEN], names[4000];
    if (gpus_dir) snprintf(dir, sizeof dir, "%s", gpus_dir);
    else snprintf(dir, sizeof dir, "%s/gpus", specs);
    if (!dir_exists(dir)) {
        snprintf(err, errlen, "%s: no such folder (set BOOST_SPECS to the specs folder)", dir);
        return -1;
    }
    list_specs(dir, names, sizeof names);
    int n = 0;
    char *save = NULL;
    for (char *name = strtok_r(names, ", ", &save); name && n < max;
         name = strtok_r(NULL, ", ", &save)) {
        Ctx ctx = {0};
        Ctx *c = &ctx;
        char path[PATH_LEN * 2];
        snprintf(path, sizeof path, "%s/%s.lua", dir, name);
        display_path(path, c->run_path, sizeof c->run_path);
        c->sb = sandbox_new(SANDBOX_MEM_CAP, SANDBOX_INSTR_LIMIT);
        if (!c->sb) {
            snprintf(err, errlen, "%s: out of memory while starting the spec interpreter", path);
            return -1;
        }
        c->L = sandbox_lua(c->sb);
        define_helpers(c);
        lua_pushcfunction(c->L, l_load_gpu_file);
        lua_pushlightuserdata(c->L, c);
        lua_pushlightuserdata(c->L, &out[n]);
        lua_pushlightuserdata(c->L, name);
        int rc = sandbox_pcall(c->sb, 3, 0, err, errlen);
        sandbox_close(c->sb);
        for (int i = 0; i < c->nsrc; i++) free(c->src[i].text);
        if (rc) return -1;
        n++;
    }
    return n;
}
