/* kernels.c: specialises the fused kernels of the catalog (common/kernel_catalog.h) for one run
 * and GPU. kernel_specialise checks a kernel's constants against the catalog, names it procedurally
 * and picks its launch configuration; kernels_emit fills the templates/ text (holes {{KEY}}) with
 * the constants and writes one self-contained kernels.cu. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gen/kernels.h"
#include "gen/gen.h"
#include "common/kernel_catalog.h"
#include "common/files.h"   // defines: file_read_all
#include "common/env.h"     // defines: env_repo_root

/* A kind's catalog row (common/kernel_catalog.h) with its operands parsed. */
typedef struct {
    int id;
    int launch;
    int nops;
    KcatOperand ops[KMAX_OPS];
} KindSpec;

static int kind_spec(const char *kind, KindSpec *ks) {
    ks->id = kcat_find(kind);
    if (ks->id < 0) return -1;
    ks->launch = kcat_kind(ks->id)->launch;
    for (ks->nops = 0;
         ks->nops < KMAX_OPS && kcat_operand(ks->id, ks->nops, &ks->ops[ks->nops]) == 0;)
        ks->nops++;
    return 0;
}

int kernel_kind_count(void) { return KK_COUNT; }
const char *kernel_kind_name(int i) { return kcat_kind(i) ? kcat_name(i) : NULL; }
int kernel_kind_operand(int i, int o, char *name, size_t n, char *dtype, size_t dn) {
    KcatOperand op;
    if (o < 0 || o >= KMAX_OPS || kcat_operand(i, o, &op) != 0) return -1;
    snprintf(name, n, "%s", op.key);
    snprintf(dtype, dn, "%s", op.dtype);
    return 0;
}

static int find_const(const KernelInst *k, const char *key) {
    for (int i = 0; i < k->nconst; i++) if (!strcmp(k->key[i], key)) return i;
    return -1;
}

/* The constants kernel k was given, for the catalog's evaluator. */
static int inst_lookup(const void *ctx, const char *key, double *value) {
    const KernelInst *k = ctx;
    int i = find_const(k, key);
    if (i >= 0) *value = k->val[i];
    return i >= 0;
}

/* The value of a catalog constant of k: given, or its default expression. */
static double const_value(const KernelInst *k, const char *key) {
    int id = kcat_find(k->kind);
    return id >= 0 ? kcat_value(id, key, inst_lookup, k) : 0;
}

static const char *op_dtype(const KernelInst *k, const KindSpec *ks, int i) {
    if (i < KMAX_OPS && k->op_dtype[i][0]) return k->op_dtype[i];
    return ks->ops[i].dtype;
}

static int block_of(int tuned, int dflt) {
    int b = tuned > 0 ? tuned : dflt;
    if (b < 32) b = 32;
    if (b > 1024) b = 1024;
    return b & ~31;
}

/* 8-wide vectors when every row start stays a multiple of 8 elements. */
static int vec_width(const KernelInst *k, const KindSpec *ks) {
    if (ks->launch == KL_ROPE || ks->launch == KL_COLS || ks->launch == KL_SINGLE ||
        ks->launch == KL_ROW_THREAD || ks->launch == KL_ATTN_FWD || ks->launch == KL_ATTN_BWD ||
        ks->launch == KL_KV || ks->launch == KL_DECODE)
        return 1;
    if ((int64_t)const_value(k, "cols") % 8) return 1;
    KcatConst c;
    for (int i = 0; kcat_const(ks->id, i, &c) == 0; i++)
        if (!strncmp(c.key, "ld", 2) && strcmp(c.key, "ldstat") &&
            (int64_t)const_value(k, c.key) % 8)
            return 1;
    return 8;
}

static uint32_t fnv1a32(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 16777619u; }
    return h;
}

/* ---- attention: tensor-core (mma.sync) templates or the CUDA-core ones ----
 * templates/attention_{fwd,bwd}.cu run on the tensor cores with a warp per 16 rows; they need
 * head_dim a multiple of 16 and at most 128 (the output accumulators of a warp's 16 rows live in
 * registers: head_dim/2 floats a thread, twice that in the backward). Larger head dims (256) use
 * templates/attention_{fwd,bwd}_simt.cu. */
static int attention_on_tensor_cores(const KernelInst *k) {
    int hd = (int)const_value(k, "head_dim");
    return hd % 16 == 0 && hd >= 16 && hd <= 128;
}

/* Shared memory (bytes) of the tensor-core templates at tiles bq x bk: the forward holds K and V
 * tiles [bk, hd]; the backward its own rows [2 bq, hd], streamed tiles [2 bk, hd] and two fp32 row
 * statistics; rows padded by 8 bf16. */
static int attention_smem_mma(int bwd, int hd, int bq, int bk) {
    if (!bwd) return 2 * bk * (hd + 8) * 2;
    return (2 * bq + 2 * bk) * (hd + 8) * 2 + 2 * 4 * (bq > bk ? bq : bk);
}

/* The limits of archs no shipped GPU spec names (CUDA C Programming Guide, "Compute capabilities":
 * opt-in shared memory a block and usable an SM in KiB, registers, threads, blocks an SM; 0 unknown),
 * for `boost kernels --arch sm_86` and plans for such devices. The shipped archs live in specs/gpus. */
static const struct { const char *arch; int block_kib, sm_kib, regs, threads, blocks; }
OTHER_ARCHS[] = {
    {"sm_86", 99, 100, 65536, 1536, 16}, {"sm_87", 163, 0, 0, 0, 0},
    {"sm_89", 99, 100, 65536, 1536, 24},
};

/* The GPU spec (or the row above) whose arch is `arch` exactly; 1 found. */
static int arch_lookup(const char *arch, Gpu *out) {
    Gpu *gpus = calloc(MAX_GPU_SPECS, sizeof *gpus);
    char err[512];
    int n = gpus ? spec_load_gpus(NULL, gpus, MAX_GPU_SPECS, err, sizeof err) : -1, found = 0;
    for (int i = 0; i < n && !found; i++)
        if (!strcmp(gpus[i].arch, arch)) { *out = gpus[i]; found = 1; }
    free(gpus);
    for (size_t i = 0; !found && i < sizeof OTHER_ARCHS / sizeof OTHER_ARCHS[0]; i++) {
        if (strcmp(OTHER_ARCHS[i].arch, arch)) continue;
        snprintf(out->arch, sizeof out->arch, "%s", arch);
        out->smem_block_kib = OTHER_ARCHS[i].block_kib; out->smem_sm_kib = OTHER_ARCHS[i].sm_kib;
        out->regs_sm = OTHER_ARCHS[i].regs; out->threads_sm = OTHER_ARCHS[i].threads;
        out->blocks_sm = OTHER_ARCHS[i].blocks;
        found = 1;
    }
    return found;
}

int arch_limits(const char *arch, Gpu *out) {
    memset(out, 0, sizeof *out);
    out->smem_block_kib = KERNEL_SMEM_DEFAULT / 1024;
    if (!arch || !*arch) return 0;
    if (arch_lookup(arch, out)) return 1;
    char base[sizeof out->arch];   /* sm_90a: the limits of sm_90 */
    size_t n = strlen(arch);
    if (n < sizeof base && arch[n - 1] == 'a') {
        memcpy(base, arch, n - 1);
        base[n - 1] = 0;
        if (arch_lookup(base, out)) return 1;
    }
    return 0;
}

int64_t kernel_smem_optin(const char *arch) {
    Gpu g;
    arch_limits(arch, &g);
    return (int64_t)g.smem_block_kib * 1024;
}

/* The opt-in maximum of the run's GPU: its spec's figure, else its arch's. */
static int64_t gpu_smem_optin(const Gpu *gpu) {
    if (gpu->smem_block_kib > 0) return (int64_t)gpu->smem_block_kib * 1024;
    return kernel_smem_optin(gpu->arch);
}

long long kernels_dynamic_smem(const char *src, const char *name) {
    const char *tag = "// boost:dynamic_smem ";
    size_t nl = strlen(name);
    for (const char *p = strstr(src, tag); p; p = strstr(p + 1, tag)) {
        const char *q = p + strlen(tag);
        if (!strncmp(q, name, nl) && q[nl] == ' ') return atoll(q + nl + 1);
    }
    return 0;
}

/* Tiles of the tensor-core templates from the tuned ones: multiples of 16 (a warp's rows, an mma's
 * k), at most 128 queries (8 warps); the streamed tile within the registers: a backward thread keeps
 * hd (dK, dV) + bk (S, dP) fp32 accumulators, a forward thread hd/2 (O) + bk/2 (S), at most 160 and
 * 96 (CUDA 13 ptxas, the A100's and H100's archs: the backward at head dim 128 with bk 64 takes 255 registers
 * and spills, with bk 32 it does not); then within `limit` bytes of (dynamic) shared memory, the
 * arch's opt-in maximum: the streamed tile shrinks first, then the block's rows. */
static void attention_tiles_mma(int bwd, int hd, int64_t limit, int *bq, int *bk) {
    if (*bq < 16) *bq = 16;
    if (*bq > 128) *bq = 128;
    if (*bk < 16) *bk = 16;
    if (*bk > 128) *bk = 128;
    while (*bk > 16 && (bwd ? hd + *bk > 160 : hd + *bk > 192)) *bk /= 2;
    while (attention_smem_mma(bwd, hd, *bq, *bk) > limit && *bk > 16) *bk /= 2;
    while (attention_smem_mma(bwd, hd, *bq, *bk) > limit && *bq > 16) *bq /= 2;
}

/* The template file of kernel k (without .cu): its kind, or the CUDA-core variant of attention. */
static void template_name(const KernelInst *k, char *out, size_t n) {
    int id = kcat_find(k->kind), attn = id == KK_ATTENTION_FWD || id == KK_ATTENTION_BWD;
    snprintf(out, n, "%s%s", k->kind, attn && !attention_on_tensor_cores(k) ? "_simt" : "");
}

/* Every constant k was given is one of its kind's, every one the generator must give is there. */
static int check_consts(const KernelInst *k, const KindSpec *ks, char *err, size_t errlen) {
    KcatConst c;
    for (int i = 0; i < k->nconst; i++)
        if (!kcat_const_find(ks->id, k->key[i], &c)) {
            snprintf(err, errlen, "kernel %s: constant '%s' is not one of its catalog keys (%s)",
                     k->kind, k->key[i], kcat_kind(ks->id)->constants);
            return -1;
        }
    for (int i = 0; kcat_const(ks->id, i, &c) == 0; i++)
        if (!c.gen_optional && find_const(k, c.key) < 0) {
            snprintf(err, errlen, "kernel %s: constant '%s' missing", k->kind, c.key);
            return -1;
        }
    return 0;
}

/* Attention's block, grid, dynamic shared memory and tiles (bq, bk in: the tuned ones). */
static int attention_launch(KernelInst *k, const KindSpec *ks, const Gpu *gpu, int *block,
                            int64_t *smem, int *bq, int *bk, char *err, size_t errlen) {
    int bwd = ks->launch == KL_ATTN_BWD;
    int hd = (int)const_value(k, "head_dim");
    int heads = (int)const_value(k, "heads"), kvh = (int)const_value(k, "kv_heads");
    if (hd % 16 || hd < 32 || (hd > 128 && hd != 256)) {
        snprintf(err, errlen,
                 "kernel %s: head_dim %d not supported (a multiple of 16 from 32 to 128, "
                 "or 256)",
                 k->kind, hd);
        return -1;
    }
    if (kvh <= 0 || heads % kvh) {
        snprintf(err, errlen, "kernel %s: heads %d not a multiple of kv_heads %d", k->kind, heads,
                 kvh);
        return -1;
    }
    if (attention_on_tensor_cores(k)) {   /* tiles in dynamic shared memory, to the arch's opt-in */
        attention_tiles_mma(bwd, hd, gpu_smem_optin(gpu), bq, bk);
        *block = 2 * *bq;   /* a warp per 16 rows */
        *smem = attention_smem_mma(bwd, hd, *bq, *bk);
    } else {
        /* the backward keeps 4 x 16 fp32 accumulators a thread: at most 256 threads a block so
         * that ptxas may use up to 255 registers (no spills) */
        int max_threads = bwd ? 256 : 1024;
        if (*bq * (hd / 16) > max_threads) *bq = max_threads / (hd / 16);
        *block = *bq * (hd / 16);
        /* static shared memory: two bf16 tiles of bk x hd (48 KiB limit) */
        while (*bk > 16 && 2 * *bk * hd * 2 + 8 * *bk > 48 * 1024) *bk /= 2;
    }
    int64_t b = (int64_t)const_value(k, "batch"), seq = (int64_t)const_value(k, "seq");
    int64_t nb = (seq + *bq - 1) / *bq;
    k->grid = b * heads * nb + (bwd ? b * kvh * nb : 0);
    return 0;
}

/* k's grid, block, dynamic shared memory, vector width and tiles from its launch shape and the
 * GPU's tuning table. */
static int launch_config(KernelInst *k, const KindSpec *ks, const Gpu *gpu, char *err,
                         size_t errlen) {
    int row_block = block_of(gpu->tune_row_block, 256);
    int elem_block = block_of(gpu->tune_elem_block, 256);
    int bq = gpu->tune_attn_block_q > 0 ? gpu->tune_attn_block_q : 64;
    int bk = gpu->tune_attn_block_k > 0 ? gpu->tune_attn_block_k : 64;
    int64_t rows = (int64_t)const_value(k, "rows"), cols = (int64_t)const_value(k, "cols");
    int vec = vec_width(k, ks);
    int block = row_block;
    int64_t smem = 0;   /* dynamic shared memory a block (bytes); the other kinds' is static */
    switch (ks->launch) {
    case KL_ROW: k->grid = rows; break;
    case KL_ROW_COLS:
        k->grid = rows;
        if (!(ks->id == KK_RMSNORM_BWD && (int)const_value(k, "phase") == 1))
            k->grid += (cols + row_block - 1) / row_block;
        break;
    case KL_ELEM: block = elem_block; k->grid = (rows * (cols / vec) + block - 1) / block; break;
    case KL_ROPE: {
        block = elem_block;
        int64_t pairs = rows * (int64_t)const_value(k, "heads") *
                        ((int64_t)const_value(k, "head_dim") / 2);
        k->grid = (pairs + block - 1) / block;
        break;
    }
    case KL_COLS: block = elem_block; k->grid = (cols + block - 1) / block; break;
    case KL_ATTN_FWD: case KL_ATTN_BWD:
        if (attention_launch(k, ks, gpu, &block, &smem, &bq, &bk, err, errlen)) return -1;
        break;
    case KL_SINGLE: k->grid = 1; break;
    case KL_ROW_THREAD: block = elem_block; k->grid = (rows + block - 1) / block; break;
    case KL_KV: {
        block = elem_block;
        int64_t n = rows * (int64_t)const_value(k, "kv_heads") *
                    (int64_t)const_value(k, "head_dim");
        k->grid = (n + block - 1) / block;
        break;
    }
    case KL_DECODE: {   /* the scores of one query live in shared memory: max_seq floats */
        block = 128;
        k->grid = rows * (int64_t)const_value(k, "heads");
        if ((int64_t)const_value(k, "max_seq") > 8192) {
            snprintf(err, errlen,
                     "kernel attention_decode: max_seq %lld above 8192 (its scores live "
                     "in shared memory)",
                     (long long)const_value(k, "max_seq"));
            return -1;
        }
        break;
    }
    }
    /* moe_router's shared memory: the chunk's block*top_k choices (4 B) within 16 KiB */
    if (ks->id == KK_MOE_ROUTER) {
        int64_t topk = (int64_t)const_value(k, "top_k");
        int64_t experts = (int64_t)const_value(k, "experts");
        while (block > 32 && 4 * block * topk > 16384) block /= 2;
        if (4 * block * topk > 16384 || experts > 1024) {
            snprintf(err, errlen,
                     "kernel moe_router: top_k %lld or experts %lld too large (at most "
                     "128 and 1024)",
                     (long long)topk, (long long)experts);
            return -1;
        }
    }
    k->block = block;
    k->smem = smem;
    k->tune_bq = bq; k->tune_bk = bk; k->vec = vec;
    if (rows <= 0 && ks->launch != KL_ATTN_FWD && ks->launch != KL_ATTN_BWD) {
        snprintf(err, errlen, "kernel %s: rows must be positive", k->kind);
        return -1;
    }
    return 0;
}

/* The procedural name: kind, constants in catalog order, operand dtypes, tuning. */
static void procedural_name(KernelInst *k, const KindSpec *ks) {
    char name[512];
    int n = snprintf(name, sizeof name, "%s", k->kind);
    KcatConst c;
    for (int j = 0; kcat_const(ks->id, j, &c) == 0 && n < (int)sizeof name - 64; j++) {
        const char *key = c.key;
        int i = find_const(k, key);
        if (i < 0) continue;
        if (k->per_rank[i] != 0) {
            n += snprintf(name + n, sizeof name - n, "_%sR", kcat_const_tag(key));
            continue;
        }
        if (!strcmp(key, "act")) {
            n += snprintf(name + n, sizeof name - n, "_%s", k->val[i] ? "silu" : "id");
            continue;
        }
        if (kcat_const_is_float(key))
            n += snprintf(name + n, sizeof name - n, "_%s%.7g", kcat_const_tag(key), k->val[i]);
        else
            n += snprintf(name + n, sizeof name - n, "_%s%lld", kcat_const_tag(key),
                          (long long)k->val[i]);
    }
    for (int i = 0; i < ks->nops; i++)
        if (strcmp(op_dtype(k, ks, i), ks->ops[i].dtype))
            n += snprintf(name + n, sizeof name - n, "_%s%s", ks->ops[i].key, op_dtype(k, ks, i));
    if (ks->launch == KL_ATTN_FWD || ks->launch == KL_ATTN_BWD)
        n += snprintf(name + n, sizeof name - n,
                      attention_on_tensor_cores(k) ? "_bf16_tc_q%dk%d" : "_bf16_q%dk%d", k->tune_bq,
                      k->tune_bk);
    else
        n += snprintf(name + n, sizeof name - n, "_bf16_b%lld", (long long)k->block);
    for (char *c = name; *c; c++)
        if (*c == '.') *c = 'p'; else if (*c == '-') *c = 'm'; else if (*c == '+') *c = 'P';
    if (n >= (int)sizeof k->name) {   /* too long: keep a prefix and a hash of the whole */
        uint32_t h = fnv1a32(name);
        snprintf(name + sizeof k->name - 10, 10, "_%08x", h);
    }
    memcpy(k->name, name, sizeof k->name - 1);
    k->name[sizeof k->name - 1] = 0;
}

int kernel_specialise(KernelInst *k, const Run *run, char *err, size_t errlen) {
    KindSpec ks;
    if (kind_spec(k->kind, &ks)) {
        snprintf(err, errlen, "kernel kind '%s' is not in the catalog (docs/plan-format.md)",
                 k->kind);
        return -1;
    }
    if (check_consts(k, &ks, err, errlen) || launch_config(k, &ks, &run->gpu, err, errlen))
        return -1;
    procedural_name(k, &ks);
    return 0;
}

/* ---- templates ---- */

/* The templates/ folder: $BOOST_HOME/templates, else the one in the nearest folder above the
 * binary that has one (bin/.., build/tests/../..). */
int kernels_template_dir(char *dir, size_t n, char *err, size_t errlen) {
    char probe[PATH_MAX + 64], home[PATH_MAX];
    int from = env_repo_root("BOOST_HOME", "templates/prelude.cuh", home, sizeof home);
    if (from == 1) {
        snprintf(probe, sizeof probe, "%s/templates/prelude.cuh", home);
        if (access(probe, R_OK) == 0) { snprintf(dir, n, "%s/templates", home); return 0; }
        snprintf(err, errlen, "BOOST_HOME=%s has no templates/prelude.cuh: point BOOST_HOME at the "
                 "BOOST repository", home);
        return -1;
    }
    if (from == 0) { snprintf(dir, n, "%s/templates", home); return 0; }
    snprintf(err, errlen, "templates/ not found next to the binary's folder: set BOOST_HOME to the "
             "BOOST repository (the folder holding templates/)");
    return -1;
}

static char *read_text(const char *path, char *err, size_t errlen) {
    return file_read_all(path, (size_t)64 << 20, NULL, err, errlen);
}

static const char *ctype_of(const char *dtype) {
    if (!strcmp(dtype, "fp32")) return "float";
    if (!strcmp(dtype, "i32")) return "int";
    return "bf16";
}

/* Value of hole `hole` (upper case) for kernel k, written into out; 0 when unknown. */
static int hole_value(const KernelInst *k, const KindSpec *ks, const char *hole, char *out, size_t n) {
    char lower[64];
    size_t i;
    for (i = 0; hole[i] && i < sizeof lower - 1; i++) lower[i] = (char)tolower((unsigned char)hole[i]);
    lower[i] = 0;
    if (!strcmp(hole, "NAME")) { snprintf(out, n, "%s", k->name); return 1; }
    if (!strcmp(hole, "BLOCK")) { snprintf(out, n, "%lld", (long long)k->block); return 1; }
    if (!strcmp(hole, "VEC")) { snprintf(out, n, "%d", k->vec); return 1; }
    if (!strcmp(hole, "BLOCK_Q")) { snprintf(out, n, "%d", k->tune_bq); return 1; }
    if (!strcmp(hole, "BLOCK_K")) { snprintf(out, n, "%d", k->tune_bk); return 1; }
    if (!strcmp(hole, "SMEM")) { snprintf(out, n, "%lld", (long long)k->smem); return 1; }
    if (!strcmp(hole, "RANK_ARGS")) {
        size_t m = 0; out[0] = 0;
        for (int c = 0; c < k->nconst; c++)
            if (k->per_rank[c] != 0) m += snprintf(out + m, n - m, ", long long %s_arg", k->key[c]);
        return 1;
    }
    if (!strncmp(hole, "T_", 2)) {
        for (int o = 0; o < ks->nops; o++)
            if (!strcmp(ks->ops[o].key, lower + 2)) {
                snprintf(out, n, "%s", ctype_of(op_dtype(k, ks, o)));
                return 1;
            }
        return 0;
    }
    KcatConst kc;
    if (!kcat_const_find(ks->id, lower, &kc)) return 0;
    const char *key = kc.key;
    int c = find_const(k, key), is_float = kcat_const_is_float(key);
    if (c >= 0 && k->per_rank[c] != 0) { snprintf(out, n, "%s_arg", key); return 1; }
    double v = const_value(k, key);
    if (is_float) snprintf(out, n, "%.9gf", v);
    else snprintf(out, n, "%lldLL", (long long)v);
    /* plain int literals read better and keep int arithmetic where it fits */
    if (!is_float && v >= -2147483647.0 && v <= 2147483647.0)
        snprintf(out, n, "%lld", (long long)v);
    if (is_float && !strchr(out, '.') && !strchr(out, 'e') && !strchr(out, 'n') &&
        !strchr(out, 'i'))
        snprintf(out, n, "%.9g.f", v);
    return 1;
}

/* Write template text with its holes filled. */
static int fill_template(FILE *out, const char *text, const char *path, const KernelInst *k,
                         const KindSpec *ks, char *err, size_t errlen) {
    for (const char *s = text; *s; ) {
        const char *open = strstr(s, "{{");
        if (!open) { fputs(s, out); break; }
        fwrite(s, 1, open - s, out);
        const char *close = strstr(open + 2, "}}");
        if (!close || close - open - 2 >= 64) {
            snprintf(err, errlen, "%s: unterminated '{{' hole", path);
            return -1;
        }
        char hole[64], val[512];
        memcpy(hole, open + 2, close - open - 2);
        hole[close - open - 2] = 0;
        if (!hole_value(k, ks, hole, val, sizeof val)) {
            int line = 1;
            for (const char *c = text; c < open; c++) line += (*c == '\n');
            snprintf(err, errlen, "%s:%d: unknown hole {{%s}} for kernel kind %s", path, line, hole, k->kind);
            return -1;
        }
        fputs(val, out);
        s = close + 2;
    }
    return 0;
}

static int emit_to(FILE *out, const KernelInst *ks, int n, const Run *run, char *err, size_t errlen) {
    char dir[PATH_MAX], path[PATH_MAX + 64];
    if (kernels_template_dir(dir, sizeof dir, err, errlen) != 0) return -1;
    char *prelude, *runtime;
    snprintf(path, sizeof path, "%s/prelude.cuh", dir);
    if (!(prelude = read_text(path, err, errlen))) return -1;
    snprintf(path, sizeof path, "%s/runtime.cu", dir);
    if (!(runtime = read_text(path, err, errlen))) { free(prelude); return -1; }

    int distinct = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(ks[j].name, ks[i].name);
        if (!seen) distinct++;
    }
    fprintf(out, "// kernels.cu: the fused kernels of run %s (model %s) for %s (%s), specialised from\n"
                 "// BOOST's templates/ by 'boost gen'; %d kernels plus the runtime's own. Do not edit:\n"
                 "// regenerate. Compiled at run time with NVRTC; every kernel is extern \"C\".\n",
            run->name, run->model.name, run->gpu.name[0] ? run->gpu.name : "any GPU",
            run->gpu.arch[0] ? run->gpu.arch : "any arch", distinct);
    fprintf(out, "#include <cuda_bf16.h>\n\n");
    fputs(prelude, out);
    fputs("\n", out);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(ks[j].name, ks[i].name);
        if (seen) continue;
        KindSpec spec;
        if (kind_spec(ks[i].kind, &spec) || !ks[i].name[0]) {
            snprintf(err, errlen, "kernel %d (%s) was not specialised before kernels_emit", i, ks[i].kind);
            rc = -1; break;
        }
        char tmpl[48];
        template_name(&ks[i], tmpl, sizeof tmpl);
        snprintf(path, sizeof path, "%s/%s.cu", dir, tmpl);
        char *text = read_text(path, err, errlen);
        if (!text) { rc = -1; break; }
        fprintf(out, "\n");
        if (ks[i].smem > 0)   /* read back by `boost kernels` (shared memory and occupancy without the plan) */
            fprintf(out, "// boost:dynamic_smem %s %lld\n", ks[i].name, (long long)ks[i].smem);
        rc = fill_template(out, text, path, &ks[i], &spec, err, errlen);
        free(text);
    }
    if (rc == 0) { fprintf(out, "\n"); fputs(runtime, out); }
    free(prelude); free(runtime);
    return rc;
}

/* Build the whole text in memory first, so a failure leaves no partial kernels.cu. */
int kernels_emit(FILE *out, const KernelInst *ks, int n, const Run *run, char *err, size_t errlen) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) { snprintf(err, errlen, "out of memory"); return -1; }
    int rc = emit_to(mem, ks, n, run, err, errlen);
    fclose(mem);
    if (rc == 0 && fwrite(buf, 1, len, out) != len) {
        snprintf(err, errlen, "writing kernels.cu failed: %s", strerror(errno));
        rc = -1;
    }
    free(buf);
    return rc;
}
