/* test_kernels_emu.c: the generated CUDA kernels, run without a GPU, against the CPU backend's
 * reference kernels (runtime/cpu_kernels.c). Every catalog kind is specialised at small shapes
 * (vector and scalar paths, head dims 32, 64 and 128, GQA), emitted into one kernels.cu, compiled with
 * g++ against tests/gpu/cuda_emu.hpp (a CPU stand-in for the device: a thread per CUDA thread,
 * real barriers and shuffles, bit-exact bf16) and launched with the same inputs the reference gets
 * (bf16-representable values). Each output must match within bf16 accuracy.
 * The module is built with the emulator's race and divergence detection (tests/gpu/cuda_emu.hpp):
 * each case runs round-robin and then under BOOST_EMU_SEEDS (default 2) seeded random interleavings,
 * and must report no shared-memory race, no cp.async read in flight, no divergent warp collective,
 * no deadlock, and the same results every time. BOOST_EMU_KINDS=a,b keeps only the cases whose kind
 * contains a or b; BOOST_EMU_STOP=1 stops at the first failure (tests/sh/emu_mutations.sh runs mutated
 * templates that way, with BOOST_HOME set). */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>
#include "tests/unit/testlib.h"
#include "gen/kernels.h"
#include "runtime/plan.h"
#include "runtime/cpu_kernels.h"   // defines: cpu_kernel_run

/* every load and store of the kernels calls the emulator's logging hooks (cuda_emu.hpp) */
#define EMU_RACE_FLAGS "-fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 " \
                       "--param asan-stack=0 --param asan-globals=0"
#define NBUF (1 << 17)          /* elements per operand buffer: enough for every case below */
#define MAXCASE 96

typedef struct {
    KernelInst k;
    const char *init[10];       /* per operand (catalog order): "rand", "pos", "zero", "tok", "tgt" */
    int chain;                  /* attention_bwd: take q,k,v,out,lse from the previous case's run */
    int bq, bk;                 /* attention tiles asked of the specialiser (0: the run's) */
    const char *arch;           /* the GPU's arch for the specialiser (NULL: none, 48 KiB of shared memory) */
} Case;

static Case cases[MAXCASE];
static int ncases;

static uint64_t rng = 12345;
static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* The catalog's operands of each kind with the CUDA dtype (0 bf16, 1 fp32, 2 i32) and whether the
 * kernel writes it (1) or accumulates into it (2). */
typedef struct { const char *name; int dtype, out; } Opnd;
static const struct { const char *kind; Opnd ops[10]; } KINDS[] = {
    {"embedding_fwd", {{"tokens", 2, 0}, {"table", 0, 0}, {"out", 0, 1}}},
    {"embedding_bwd", {{"tokens", 2, 0}, {"dout", 0, 0}, {"dtable", 1, 2}}},
    {"rmsnorm_fwd", {{"x", 0, 0}, {"gamma", 0, 0}, {"out", 0, 1}, {"rstd", 1, 1}, {"sumsq", 1, 0}}},
    {"rmsnorm_bwd", {{"x", 0, 0}, {"gamma", 0, 0}, {"rstd", 1, 0}, {"dout", 0, 0}, {"dot", 1, 1}, {"dx", 0, 2}, {"dgamma", 1, 2}}},
    {"sumsq", {{"x", 0, 0}, {"out", 1, 1}}},
    {"online_norm_fwd", {{"x", 0, 0}, {"gamma", 0, 0}, {"xhat", 0, 1}, {"rho", 1, 1}, {"stat", 0, 1}}},
    {"online_norm_rescale", {{"h", 0, 2}, {"rho", 1, 0}}},
    {"bottleneck_act", {{"h", 0, 0}, {"y", 0, 1}, {"z", 0, 1}, {"rstd", 1, 1}, {"stat", 0, 0}}},
    {"bottleneck_act_bwd", {{"h", 0, 0}, {"y", 0, 0}, {"rstd", 1, 0}, {"rho", 1, 0}, {"dz", 0, 0}, {"dh", 0, 2}, {"dstat", 1, 1}}},
    {"online_norm_bwd", {{"x", 0, 0}, {"gamma", 0, 0}, {"rho", 1, 0}, {"dxhat", 0, 0}, {"dstat", 1, 0}, {"dx", 0, 2}, {"dgamma", 1, 2}}},
    {"rope", {{"x", 0, 2}}},
    {"attention_fwd", {{"q", 0, 0}, {"k", 0, 0}, {"v", 0, 0}, {"out", 0, 1}, {"lse", 1, 1}}},
    {"attention_bwd", {{"q", 0, 0}, {"k", 0, 0}, {"v", 0, 0}, {"out", 0, 0}, {"dout", 0, 0}, {"lse", 1, 0},
                       {"dq", 0, 1}, {"dk", 0, 1}, {"dv", 0, 1}}},
    {"glu_fwd", {{"gate", 0, 0}, {"up", 0, 0}, {"out", 0, 1}}},
    {"glu_bwd", {{"gate", 0, 0}, {"up", 0, 0}, {"dout", 0, 0}, {"dgate", 0, 1}, {"dup", 0, 1}}},
    {"add", {{"a", 0, 0}, {"b", 0, 0}, {"out", 0, 1}}},
    {"copy", {{"src", 0, 0}, {"dst", 0, 2}}},
    {"xent_fwd", {{"logits", 0, 0}, {"targets", 2, 0}, {"stats", 1, 1}}},
    {"xent_combine", {{"stats_all", 1, 0}, {"lse", 1, 1}, {"loss", 1, 1}}},
    {"xent_bwd", {{"logits", 0, 0}, {"targets", 2, 0}, {"lse", 1, 0}, {"dlogits", 0, 1}}},
    /* inference (gen/infer_plan.c); pos: an exact integer in fp32; the caches keep what is not written */
    {"rope_at", {{"x", 0, 2}, {"pos", 1, 0}}},
    {"kv_append", {{"k", 0, 0}, {"v", 0, 0}, {"pos", 1, 0}, {"kcache", 0, 2}, {"vcache", 0, 2}}},
    {"attention_decode", {{"q", 0, 0}, {"kcache", 0, 0}, {"vcache", 0, 0}, {"pos", 1, 0}, {"out", 0, 1}}},
};

static int kind_index(const char *kind) {
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++) if (!strcmp(KINDS[i].kind, kind)) return (int)i;
    return -1;
}

/* add a case: kind, constants "key=value ..." ("a%rb": per rank), operand inits "op=init ...". */
static Case *add(const char *kind, const char *kv, const char *inits) {
    Case *c = &cases[ncases++];
    memset(c, 0, sizeof *c);
    KernelInst *k = &c->k;
    snprintf(k->kind, sizeof k->kind, "%s", kind);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", kv);
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
        char *eq = strchr(t, '=');
        *eq = 0;
        snprintf(k->key[k->nconst], sizeof k->key[0], "%s", t);
        k->val[k->nconst] = atof(eq + 1);
        char *pr = strstr(eq + 1, "%r");
        if (pr) k->per_rank[k->nconst] = atof(pr + 2);
        k->nconst++;
    }
    int ki = kind_index(kind);
    for (int o = 0; o < 10 && KINDS[ki].ops[o].name; o++) c->init[o] = "rand";
    snprintf(buf, sizeof buf, "%s", inits ? inits : "");
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
        char *eq = strchr(t, '=');
        *eq = 0;
        for (int o = 0; o < 10 && KINDS[ki].ops[o].name; o++)
            if (!strcmp(KINDS[ki].ops[o].name, t)) c->init[o] = !strcmp(eq + 1, "pos") ? "pos" : !strcmp(eq + 1, "zero") ? "zero"
                                                             : !strcmp(eq + 1, "tok") ? "tok" : !strcmp(eq + 1, "tgt") ? "tgt"
                                                             : !strcmp(eq + 1, "null") ? "null" : "rand";
    }
    return c;
}

/* BOOST_EMU_KINDS: keep the cases whose kind contains one of the comma-separated words (an
 * attention_bwd case keeps the forward case it takes its inputs from). */
static int filter_cases(void) {
    const char *f = getenv("BOOST_EMU_KINDS");
    if (!f || !*f) return 0;
    int keep[MAXCASE] = {0}, n = 0;
    for (int i = 0; i < ncases; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", f);
        for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) if (strstr(cases[i].k.kind, t)) keep[i] = 1;
    }
    for (int i = ncases - 1; i > 0; i--) if (keep[i] && cases[i].chain) keep[i - 1] = 1;
    for (int i = 0; i < ncases; i++) if (keep[i]) cases[n++] = cases[i];
    ncases = n;
    return 1;
}

static void add_cases(void) {
    /* M = 2 x 16 rows; cols 32 (8-wide vectors) and 24 (scalar path) */
    for (int v = 0; v < 2; v++) {
        int c = v ? 24 : 32;
        char kv[512];
        snprintf(kv, sizeof kv, "rows=32 cols=%d vocab=40", c);
        add("embedding_fwd", kv, "tokens=tok");
        add("embedding_bwd", kv, "tokens=tok");
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldx=%d ldo=%d divisor=%d eps=1e-05", c, c + 8, c, 2 * c);
        add("rmsnorm_fwd", kv, "sumsq=null");
        add("rmsnorm_fwd", kv, "sumsq=pos");
        for (int ph = 0; ph < 3; ph++) {
            snprintf(kv, sizeof kv, "rows=32 cols=%d ldx=%d ldo=%d divisor=%d acc=%d phase=%d", c, c, c, 2 * c, ph == 2, ph);
            add("rmsnorm_bwd", kv, "rstd=pos");
        }
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldx=%d", c, c + 8); add("sumsq", kv, NULL);
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldx=%d ldstat=%d divisor=%d eps=1e-05", c, c, 3 * c + 1, 2 * c);
        add("online_norm_fwd", kv, NULL);
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldh=%d", 3 * c, 3 * c + 1); add("online_norm_rescale", kv, "rho=pos");
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldh=%d ldy=%d ldz=%d act=1 norm=1 eps=1e-05", c, c, c, c);
        add("bottleneck_act", kv, "h=pos stat=pos");
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldh=%d ldy=%d ldz=%d act=0 norm=0", c, c, c, c);
        add("bottleneck_act", kv, "rstd=null stat=null");
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldh=%d ldy=%d ldz=%d lddh=%d act=1 norm=1 divisor=%d", c, c + 1, c, c, c, 2 * c);
        add("bottleneck_act_bwd", kv, "rstd=pos rho=pos");
        snprintf(kv, sizeof kv, "rows=32 cols=%d act=1 norm=0 acc=1", c);
        add("bottleneck_act_bwd", kv, "rstd=null rho=null dstat=null");
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldx=%d acc=%d", c, c, v);
        add("online_norm_bwd", kv, "rho=pos");
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldg=%d ldu=%d ldo=%d act=1", c, 2 * c, 2 * c, c); add("glu_fwd", kv, NULL);
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldg=%d ldu=%d ldo=%d lddg=%d lddu=%d act=%d", c, 2 * c, 2 * c, c, 2 * c, 2 * c, 1 - v);
        add("glu_bwd", kv, NULL);
        snprintf(kv, sizeof kv, "rows=32 cols=%d lda=%d ldb=%d ldo=%d", c, c, 2 * c, c); add("add", kv, NULL);
        snprintf(kv, sizeof kv, "rows=32 cols=%d lds=%d ldd=%d acc=%d", c, 2 * c, c, v); add("copy", kv, NULL);
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldl=%d vocab_offset=0%%r%d", c, c, c); add("xent_fwd", kv, "targets=tgt");
        snprintf(kv, sizeof kv, "rows=32 cols=%d ldl=%d vocab_offset=0%%r%d scale=0.03125", c, c, c);
        add("xent_bwd", kv, "targets=tgt");
    }
    add("xent_combine", "rows=32 tp=2", "stats_all=pos");
    add("xent_combine", "rows=32 tp=1", "stats_all=pos");
    add("rope", "rows=32 heads=3 head_dim=32 ldx=112 seq=16 theta=10000 inverse=0", NULL);
    add("rope", "rows=32 heads=2 head_dim=64 ldx=128 seq=16 theta=500000 inverse=1", NULL);
    /* inference: positions pos[0] = 0..39 ("tok") + rows within a cache of 48; MHA and GQA */
    add("rope_at", "rows=4 heads=3 head_dim=32 ldx=112 theta=10000", "pos=tok");
    add("kv_append", "rows=1 kv_heads=2 head_dim=32 max_seq=48 ldk=192 ldv=192", "pos=tok");
    add("kv_append", "rows=8 kv_heads=2 head_dim=64 max_seq=48 ldk=512 ldv=512", "pos=tok");
    add("attention_decode", "rows=1 heads=4 kv_heads=2 head_dim=64 max_seq=48 ldq=512 ldo=256 scale=0.125", "pos=tok");
    add("attention_decode", "rows=8 heads=2 kv_heads=2 head_dim=32 max_seq=48 ldq=192 ldo=64 scale=0.1767767", "pos=tok");
    /* attention: MHA head_dim 32, GQA head_dim 64 and 128; the backward reuses the forward's outputs */
    add("attention_fwd", "batch=2 seq=16 heads=2 kv_heads=2 head_dim=32 ldq=192 ldk=192 ldv=192 ldo=64 scale=0.1767767", NULL);
    add("attention_bwd", "batch=2 seq=16 heads=2 kv_heads=2 head_dim=32 ldq=192 ldk=192 ldv=192 ldo=64 scale=0.1767767", NULL)->chain = 1;
    add("attention_fwd", "batch=2 seq=16 heads=4 kv_heads=2 head_dim=64 ldq=512 ldk=512 ldv=512 ldo=256 scale=0.125", NULL);
    add("attention_bwd", "batch=2 seq=16 heads=4 kv_heads=2 head_dim=64 ldq=512 ldk=512 ldv=512 ldo=256 scale=0.125", NULL)->chain = 1;
    add("attention_fwd", "batch=2 seq=16 heads=2 kv_heads=1 head_dim=128 ldq=512 ldk=512 ldv=512 ldo=256 scale=0.0883883", NULL);
    add("attention_bwd", "batch=2 seq=16 heads=2 kv_heads=1 head_dim=128 ldq=512 ldk=512 ldv=512 ldo=256 scale=0.0883883", NULL)->chain = 1;
    /* the tensor-core templates (head_dim <= 128) at sequence lengths that are and are not multiples
     * of the tiles, MHA and GQA, several tilings (more keys than queries a tile too, 8 warps); and
     * head_dim 256 on the CUDA-core templates
     * (the head dim 128 ones for an arch: tiles above 48 KiB of dynamic shared memory, 52,736 B at q64k32
     * and 88,064 B at q128k32 in the backward) */
    static const struct { int batch, seq, heads, kvh, hd, bq, bk; const char *arch; } ATT[] = {
        {2, 40, 2, 2, 32, 16, 16, NULL}, {1, 96, 4, 1, 32, 64, 64, NULL}, {2, 40, 4, 2, 64, 32, 16, NULL},
        {1, 64, 2, 2, 64, 16, 32, NULL}, {1, 96, 2, 1, 128, 64, 64, "sm_90"}, {1, 40, 2, 2, 128, 16, 16, NULL},
        {1, 64, 2, 2, 128, 128, 32, "sm_86"}, {2, 7, 4, 2, 64, 64, 64, NULL}, {2, 1, 2, 1, 32, 16, 16, NULL},
        {1, 24, 2, 1, 256, 8, 8, NULL},
    };
    for (size_t i = 0; i < sizeof ATT / sizeof ATT[0]; i++) {
        char kv[512];
        int ld = (ATT[i].heads + 2 * ATT[i].kvh) * ATT[i].hd;
        snprintf(kv, sizeof kv, "batch=%d seq=%d heads=%d kv_heads=%d head_dim=%d ldq=%d ldk=%d ldv=%d ldo=%d scale=%.9g",
                 ATT[i].batch, ATT[i].seq, ATT[i].heads, ATT[i].kvh, ATT[i].hd, ld, ld, ld, ATT[i].heads * ATT[i].hd,
                 1.0 / sqrt(ATT[i].hd));
        Case *f = add("attention_fwd", kv, NULL);
        f->bq = ATT[i].bq; f->bk = ATT[i].bk; f->arch = ATT[i].arch;
        Case *g = add("attention_bwd", kv, NULL);
        g->bq = ATT[i].bq; g->bk = ATT[i].bk; g->chain = 1; g->arch = ATT[i].arch;
    }
}

/* KernelArgs for the CPU reference from a KernelInst (operands in catalog order). */
static void to_args(const KernelInst *k, int ki, const Case *c, KernelArgs *a) {
    memset(a, 0, sizeof *a);
    snprintf(a->kind, sizeof a->kind, "%.31s", k->kind);
    snprintf(a->name, sizeof a->name, "%.95s", k->name);
    for (int o = 0; o < 10 && KINDS[ki].ops[o].name; o++) {
        if (!strcmp(c->init[o], "null")) continue;
        snprintf(a->op_key[a->nops++], sizeof a->op_key[0], "%s", KINDS[ki].ops[o].name);
    }
    for (int i = 0; i < k->nconst; i++) {
        snprintf(a->const_key[i], sizeof a->const_key[0], "%s", k->key[i]);
        a->const_int[i].base = (int64_t)k->val[i];
        a->const_int[i].per_rank = (int64_t)k->per_rank[i];
        a->const_val[i] = k->val[i];
    }
    a->nconst = k->nconst;
}

/* The tensor-core helpers on their own: the prelude's fragment layout against the PTX ISA's table
 * for mma.m16n8k16 .bf16 (restated here in the ISA's own terms, so a slip in the prelude's bit
 * arithmetic shows even though the emulator shares it), and one warp's C = A B through the
 * ldmatrix loads mma_load_a / mma_load_b_nk / mma_load_b_kn against a plain product. */
static const char *MMA_PROBE =
    "extern \"C\" void emu_mma_layout(int *out) {\n"
    "    for (int lane = 0; lane < 32; lane++) {\n"
    "        int *o = out + lane * 32;\n"
    "        for (int e = 0; e < 8; e++) { o[e] = mma_a_row(lane, e); o[8 + e] = mma_a_col(lane, e); }\n"
    "        for (int e = 0; e < 4; e++) { o[16 + e] = mma_b_row(lane, e); o[20 + e] = mma_b_col(lane, e);\n"
    "                                      o[24 + e] = mma_c_row(lane, e); o[28 + e] = mma_c_col(lane, e); }\n"
    "    }\n"
    "}\n"
    "extern \"C\" __global__ void mma_probe(const bf16 *a, const bf16 *bt, const bf16 *b, float *c_nk, float *c_kn) {\n"
    "    const int lane = threadIdx.x & 31;\n"
    "    unsigned af[4], b0[2], b1[2];\n"
    "    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}}, d[2][4] = {{1.f, 1.f, 1.f, 1.f}, {1.f, 1.f, 1.f, 1.f}};\n"
    "    mma_load_a(af, a, 24);\n"
    "    mma_load_b_nk(b0, b1, bt, 24);\n"
    "    mma_bf16_16816(c[0], af, b0);\n"
    "    mma_bf16_16816(c[1], af, b1);\n"
    "    mma_load_b_kn(b0, b1, b, 24);\n"
    "    mma_bf16_16816(d[0], af, b0);\n"
    "    mma_bf16_16816(d[1], af, b1);\n"
    "    for (int n = 0; n < 2; n++)\n"
    "        for (int e = 0; e < 4; e++) {\n"
    "            c_nk[mma_c_row(lane, e) * 16 + n * 8 + mma_c_col(lane, e)] = c[n][e];\n"
    "            c_kn[mma_c_row(lane, e) * 16 + n * 8 + mma_c_col(lane, e)] = d[n][e];\n"
    "        }\n"
    "}\n"
    "EMU_ENTRY(mma_probe)\n";

static void (*set_seed)(unsigned);
static void (*set_dyn)(unsigned);   /* the next launches' dynamic shared memory (bytes) */
static unsigned (*report_count)(void);
static void (*report_clear)(void);
static int (*report_text)(unsigned, char *, size_t);

static void check_mma(void *so) {
    void (*layout)(int *) = (void (*)(int *))dlsym(so, "emu_mma_layout");
    int (*probe)(unsigned, unsigned, void **) = (int (*)(unsigned, unsigned, void **))dlsym(so, "emu_mma_probe");
    CHECK(layout && probe, "mma probe present", "emu_mma_layout / emu_mma_probe missing");
    if (!layout || !probe) return;
    static int got[32 * 32];
    layout(got);
    int bad = 0, first = -1;
    for (int lane = 0; lane < 32; lane++) {
        int group = lane / 4, tig = lane % 4, want[32];
        for (int i = 0; i < 8; i++) {           /* a0..a7: rows groupID (+8 for a2,a3,a6,a7), cols tig*2 + (i&1) (+8 for a4..a7) */
            want[i] = (i == 2 || i == 3 || i == 6 || i == 7) ? group + 8 : group;
            want[8 + i] = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
        }
        for (int i = 0; i < 4; i++) {           /* b0..b3: rows tig*2 + (i&1) (+8 for b2,b3), col groupID; c0..c3: row groupID (+8 for c2,c3), col tig*2 + (i&1) */
            want[16 + i] = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
            want[20 + i] = group;
            want[24 + i] = i >= 2 ? group + 8 : group;
            want[28 + i] = tig * 2 + (i & 1);
        }
        for (int j = 0; j < 32; j++) if (got[lane * 32 + j] != want[j]) { bad++; if (first < 0) first = lane * 32 + j; }
    }
    CHECK(bad == 0, "mma fragment layout = the PTX ISA's m16n8k16 .bf16 table", "%d entries differ (first: lane %d, slot %d)",
          bad, first / 32, first % 32);
    /* A [16, 16], B^T [16, 16] and B [16, 16] (two n-tiles), row stride 24, 16-byte aligned */
    static _Alignas(16) uint16_t a[16 * 24], bt[16 * 24], b[16 * 24];
    static float fa[16][16], fb[16][16], c_nk[256], c_kn[256];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float v = bf16_round((float)(2 * urand() - 1));
            uint32_t u; memcpy(&u, &v, 4);
            fa[i][j] = v; a[i * 24 + j] = (uint16_t)(u >> 16);
        }
    for (int kk = 0; kk < 16; kk++)
        for (int n = 0; n < 16; n++) {
            float v = bf16_round((float)(2 * urand() - 1));
            uint32_t u; memcpy(&u, &v, 4);
            fb[kk][n] = v; bt[n * 24 + kk] = (uint16_t)(u >> 16); b[kk * 24 + n] = (uint16_t)(u >> 16);
        }
    void *pa = a, *pbt = bt, *pb = b, *pc = c_nk, *pd = c_kn;
    void *params[5] = {&pa, &pbt, &pb, &pc, &pd};
    int rc = probe(1, 32, params);
    double worst = 0;
    for (int i = 0; i < 16; i++)
        for (int n = 0; n < 16; n++) {
            double ref = 0;
            for (int kk = 0; kk < 16; kk++) ref += (double)fa[i][kk] * fb[kk][n];
            double e1 = fabs(c_nk[i * 16 + n] - ref), e2 = fabs(c_kn[i * 16 + n] - (ref + 1));
            if (!(e1 <= worst)) worst = e1;
            if (!(e2 <= worst)) worst = e2;
        }
    CHECK(rc == 0 && worst < 1e-5, "mma: one warp's C = A B (+C) through the fragment loads", "rc=%d, worst error %.3g", rc, worst);
}

/* The multi-tensor AdamW of templates/runtime.cu (one launch, a block per chunk of up to 65536
 * elements of a parameter) against AdamW in double as the CPU backend computes it (runtime/cpu.c):
 * three parameters (1000, 70000 and 37 elements: one spans two chunks) at 64-element aligned
 * offsets, weight decay on the first two, a bf16 copy for the first and last; padding untouched. */
static void check_adamw_multi(void *so) {
    int (*launch)(unsigned, unsigned, void **) = (int (*)(unsigned, unsigned, void **))dlsym(so, "emu_adamw_multi_fp32_master_bf16");
    CHECK(launch != NULL, "multi-tensor AdamW present", "emu_adamw_multi_fp32_master_bf16 missing");
    if (!launch) return;
    const long long sizes[3] = {1000, 70000, 37}, decay[3] = {1, 1, 0}, copy[3] = {1, 0, 1};
    long long off[3], total = 0, tab[3 * 8];
    int nc = 0;
    for (int i = 0; i < 3; i++) {
        off[i] = total;
        total = (total + sizes[i] + 63) / 64 * 64;
        for (long long o = 0; o < sizes[i]; o += 65536, nc++) {
            tab[3 * nc] = off[i] + o;
            tab[3 * nc + 1] = sizes[i] - o < 65536 ? sizes[i] - o : 65536;
            tab[3 * nc + 2] = decay[i] | copy[i] << 1;
        }
    }
    float *w = malloc(total * 4), *g = malloc(total * 4), *m = malloc(total * 4), *v = malloc(total * 4);
    uint16_t *pb = malloc(total * 2);
    double *rw = malloc(total * 8), *rm = malloc(total * 8), *rv = malloc(total * 8);
    for (long long i = 0; i < total; i++) {
        w[i] = (float)(2 * urand() - 1); g[i] = (float)(2 * urand() - 1);
        m[i] = (float)(0.1 * (2 * urand() - 1)); v[i] = (float)(0.01 * urand());
        pb[i] = 0x7fc1;                         /* a NaN marker: must stay where no copy is kept */
        rw[i] = w[i]; rm[i] = m[i]; rv[i] = v[i];
    }
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    const int t = 3;
    const double c1 = 1.0 - pow(b1, t), c2 = 1.0 - pow(b2, t);
    float bias1 = (float)c1, bias2 = (float)c2;
    for (int i = 0; i < 3; i++)
        for (long long j = off[i]; j < off[i] + sizes[i]; j++) {
            double gj = (double)g[j] * gs, mj = b1 * rm[j] + (1.0 - b1) * gj, vj = b2 * rv[j] + (1.0 - b2) * gj * gj;
            rm[j] = mj; rv[j] = vj;
            rw[j] = rw[j] - lr * ((mj / c1) / (sqrt(vj / c2) + eps) + (decay[i] ? wd : 0.0) * rw[j]);
        }
    void *pw = w, *pp = pb, *pg = g, *pm = m, *pv = v, *pt = tab;
    float a_lr = lr, a_b1 = b1, a_b2 = b2, a_eps = eps, a_wd = wd, a_gs = gs;
    void *params[14] = {&pw, &pp, &pg, &pm, &pv, &pt, &a_lr, &a_b1, &a_b2, &a_eps, &a_wd, &a_gs, &bias1, &bias2};
    set_seed(0);
    report_clear();
    int rc = launch((unsigned)nc, 256, params);
    double worst = 0;
    long long bad_copy = 0, bad_pad = 0;
    for (int i = 0; i < 3; i++)
        for (long long j = off[i]; j < off[i] + sizes[i]; j++) {
            double e = fabs(w[j] - rw[j]) / (fabs(rw[j]) + 1e-3) + fabs(m[j] - rm[j]) / (fabs(rm[j]) + 1e-3) +
                       fabs(v[j] - rv[j]) / (fabs(rv[j]) + 1e-6);
            if (!(e <= worst)) worst = e;
            float back;
            uint32_t u = (uint32_t)pb[j] << 16;
            memcpy(&back, &u, 4);
            if (copy[i] ? !(fabsf(back - w[j]) <= fabsf(w[j]) * 0.008f) : pb[j] != 0x7fc1) bad_copy++;
        }
    for (int i = 0; i < 3; i++)
        for (long long j = off[i] + sizes[i]; j < (i < 2 ? off[i + 1] : total); j++) bad_pad += pb[j] != 0x7fc1 || w[j] != (float)rw[j];
    CHECK(rc == 0 && report_count() == 0 && worst < 1e-4 && bad_copy == 0 && bad_pad == 0,
          "multi-tensor AdamW (3 parameters, 4 chunks, one launch) = AdamW in double",
          "rc %d, %u reports, worst relative error %.3g, %lld bad bf16 copies, %lld padding elements touched", rc,
          report_count(), worst, bad_copy, bad_pad);
    free(w); free(g); free(m); free(v); free(pb); free(rw); free(rm); free(rv);
}

int main(void) {
    char err[8192];
    Run run;
    memset(&run, 0, sizeof run);
    snprintf(run.name, sizeof run.name, "emu");
    snprintf(run.model.name, sizeof run.model.name, "emu");
    run.gpu.tune_row_block = 64; run.gpu.tune_elem_block = 64;     /* fewer threads to emulate */
    run.gpu.tune_attn_block_q = 8; run.gpu.tune_attn_block_k = 8;  /* several tiles per sequence */
    add_cases();
    const int filtered = filter_cases();
    const int nseeds = getenv("BOOST_EMU_SEEDS") ? atoi(getenv("BOOST_EMU_SEEDS")) : 2;
    KernelInst ks[MAXCASE];
    for (int i = 0; i < ncases; i++) {
        Run tuned = run;
        if (cases[i].bq) { tuned.gpu.tune_attn_block_q = cases[i].bq; tuned.gpu.tune_attn_block_k = cases[i].bk; }
        if (cases[i].arch) snprintf(tuned.gpu.arch, sizeof tuned.gpu.arch, "%s", cases[i].arch);
        if (kernel_specialise(&cases[i].k, &tuned, err, sizeof err)) { CHECK(0, "specialise", "%s: %s", cases[i].k.kind, err); TEST_EXIT(); }
        ks[i] = cases[i].k;
    }
    char dir[] = "/tmp/boost-emu.XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "tmpdir", "mkdtemp failed"); TEST_EXIT(); }
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/cuda_bf16.h", dir);
    FILE *f = fopen(path, "w"); fclose(f);
    snprintf(path, sizeof path, "%s/kernels.cu", dir);
    f = fopen(path, "w");
    int rc = kernels_emit(f, ks, ncases, &run, err, sizeof err);
    for (int i = 0; i < ncases; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= !strcmp(ks[j].name, ks[i].name);
        if (!seen) fprintf(f, "EMU_ENTRY(%s)\n", ks[i].name);
    }
    fputs(MMA_PROBE, f);
    fputs("EMU_ENTRY(adamw_multi_fp32_master_bf16)\n", f);
    fclose(f);
    CHECK(rc == 0, "emit kernels.cu", "%s", err);
    snprintf(cmd, sizeof cmd, "g++ -std=c++17 -O1 -g -fno-strict-aliasing -fPIC -shared -w " EMU_RACE_FLAGS " -I%s "
             "-include tests/gpu/cuda_emu.hpp -x c++ %s/kernels.cu -o %s/kernels.so -lpthread 2>%s/cc.log", dir, dir, dir, dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "head -20 %s/cc.log", dir);
        CHECK(0, "g++ compiles kernels.cu against the emulator", "see below");
        if (system(cmd)) {}
        TEST_EXIT();
    }
    snprintf(path, sizeof path, "%s/kernels.so", dir);
    void *so = dlopen(path, RTLD_NOW);
    CHECK(so != NULL, "load the emulated kernels", "%s", dlerror());
    if (!so) TEST_EXIT();

    /* buffers: per operand a float copy (reference) and the device-typed copy (emulated) */
    float *ref[10], *keep[10];
    void *dev[10];
    for (int o = 0; o < 10; o++) {
        ref[o] = aligned_alloc(64, NBUF * sizeof(float));
        keep[o] = aligned_alloc(64, NBUF * sizeof(float));
        dev[o] = aligned_alloc(64, NBUF * sizeof(float));
    }
    float *chain_ref[10] = {0};
    for (int o = 0; o < 10; o++) chain_ref[o] = aligned_alloc(64, NBUF * sizeof(float));
    set_seed = (void (*)(unsigned))dlsym(so, "emu_set_seed");
    report_count = (unsigned (*)(void))dlsym(so, "emu_report_count");
    report_clear = (void (*)(void))dlsym(so, "emu_report_clear");
    report_text = (int (*)(unsigned, char *, size_t))dlsym(so, "emu_report_text");
    set_dyn = (void (*)(unsigned))dlsym(so, "emu_set_dynamic_shared");
    CHECK(set_seed && report_count && report_clear && report_text && set_dyn, "the emulator's race reports",
          "emu_report_* or emu_set_dynamic_shared missing");
    if (!set_seed || !report_count || !report_clear || !report_text || !set_dyn) TEST_EXIT();
    check_mma(so);
    check_adamw_multi(so);
    int kinds_ok[32] = {0}, kinds_seen[32] = {0}, short_checked = 0;
    const int stop_early = getenv("BOOST_EMU_STOP") != NULL;   /* the mutation runs: the first failure is the verdict */
    for (int ci = 0; ci < ncases && !(stop_early && tl_failed); ci++) {
        Case *c = &cases[ci];
        KernelInst *k = &c->k;
        int ki = kind_index(k->kind);
        int nop = 0;
        while (nop < 10 && KINDS[ki].ops[nop].name) nop++;
        int vocab_total = 64;
        for (int o = 0; o < nop; o++) {
            const char *in = c->init[o];
            for (int i = 0; i < NBUF; i++) {
                float v;
                if (!strcmp(in, "tok")) v = (float)(int)(urand() * 40);
                else if (!strcmp(in, "tgt")) v = (float)(int)(urand() * vocab_total);
                else if (!strcmp(in, "pos")) v = (float)(0.5 + urand());
                else if (!strcmp(in, "zero")) v = 0;
                else v = (float)(2 * urand() - 1);
                if (KINDS[ki].ops[o].out == 1 && strcmp(in, "null")) v = 0;    /* plain outputs start at 0 */
                if (KINDS[ki].ops[o].dtype == 0) v = bf16_round(v);
                ref[o][i] = v;
            }
        }
        if (!strcmp(k->kind, "xent_combine"))    /* plausible per-rank maxima, sums, target logits */
            for (int i = 0; i < NBUF; i++) ref[0][i] = (i % 3 == 1) ? (float)(1 + 20 * urand()) : (float)(4 * urand() - 2);
        if (c->chain)   /* attention_bwd: q, k, v, out, lse of the forward case before it */
            for (int o = 0; o < 6; o++) {
                int from = o == 5 ? 4 : o == 4 ? -1 : o;
                if (from < 0) continue;
                memcpy(ref[o], chain_ref[from], NBUF * sizeof(float));
                if (o == 3) for (int i = 0; i < NBUF; i++) ref[o][i] = bf16_round(ref[o][i]);
            }
        for (int o = 0; o < nop; o++) memcpy(keep[o], ref[o], NBUF * sizeof(float));
        /* the reference: fp32 inputs (int operands as int32 arrays) */
        KernelArgs a;
        to_args(k, ki, c, &a);
        void *rops[10];
        int32_t *ints[10] = {0};
        int na = 0;
        for (int o = 0; o < nop; o++) {
            if (!strcmp(c->init[o], "null")) continue;
            if (KINDS[ki].ops[o].dtype == 2) {
                ints[o] = malloc(NBUF * sizeof(int32_t));
                for (int i = 0; i < NBUF; i++) ints[o][i] = (int32_t)ref[o][i];
                rops[na++] = ints[o];
            } else rops[na++] = ref[o];
        }
        char name[160];
        snprintf(name, sizeof name, "%.95s (%.31s)", k->name, k->kind);
        if (cpu_kernel_run(&a, rops, 0, err, sizeof err)) { CHECK(0, name, "cpu reference: %s", err); continue; }
        /* the emulated launch: pointers in catalog order (NULL when absent), then per-rank constants */
        void *ptrs[10];
        long long rankc[KMAX_CONST];
        void *params[10 + KMAX_CONST];
        int np = 0, nr = 0;
        for (int o = 0; o < nop; o++) { ptrs[o] = strcmp(c->init[o], "null") ? dev[o] : NULL; params[np++] = &ptrs[o]; }
        for (int i = 0; i < k->nconst; i++) if (k->per_rank[i] != 0) { rankc[nr] = (long long)k->val[i]; params[np++] = &rankc[nr++]; }
        char sym[140];
        snprintf(sym, sizeof sym, "emu_%s", k->name);
        int (*launch)(unsigned, unsigned, void **) = (int (*)(unsigned, unsigned, void **))dlsym(so, sym);
        if (!launch) { CHECK(0, name, "no %s in the emulated module", sym); continue; }
        double worst_all = 0;
        for (int seed = 0; seed <= nseeds; seed++) {
        /* device copies of the inputs (again for every interleaving) */
        for (int o = 0; o < nop; o++) {
            int dt = KINDS[ki].ops[o].dtype;
            for (int i = 0; i < NBUF; i++) {
                if (dt == 0) { uint32_t u; memcpy(&u, &keep[o][i], 4); ((uint16_t *)dev[o])[i] = (uint16_t)(u >> 16); }
                else if (dt == 1) ((float *)dev[o])[i] = keep[o][i];
                else ((int32_t *)dev[o])[i] = (int32_t)keep[o][i];
            }
        }
        char sname[200];
        if (seed) snprintf(sname, sizeof sname, "%s, interleaving seed %d", name, seed);
        else snprintf(sname, sizeof sname, "%s", name);
        set_seed((unsigned)seed);
        report_clear();
        set_dyn((unsigned)k->smem);
        int lrc = launch((unsigned)k->grid, (unsigned)k->block, params);
        if (report_count()) {   /* before the deadlock verdict: a divergence often ends in one */
            char txt[4096];
            for (unsigned r = 0; r < 3 && report_text(r, txt, sizeof txt) == 0; r++) printf("    %s\n", txt);
            CHECK(0, sname, "%u race/divergence reports (the first above)", report_count());
            worst_all = INFINITY;
            break;
        }
        if (lrc != 0) { CHECK(0, sname, "deadlock: a barrier or warp collective some threads never reach"); worst_all = INFINITY; break; }
        /* compare every operand the kernel writes */
        double worst = 0, total_changed = 0;
        char where[64] = "";
        for (int o = 0; o < nop; o++) {
            if (!KINDS[ki].ops[o].out || !strcmp(c->init[o], "null")) continue;
            int dt = KINDS[ki].ops[o].dtype;
            double d2 = 0, r2 = 0, changed = 0;
            for (int i = 0; i < NBUF; i++) {
                float got;
                if (dt == 0) { uint32_t u = (uint32_t)((uint16_t *)dev[o])[i] << 16; memcpy(&got, &u, 4); }
                else got = ((float *)dev[o])[i];
                double d = (double)got - ref[o][i];
                if (!isfinite(got)) d = INFINITY;
                d2 += d * d;
                if (ref[o][i] != keep[o][i]) { r2 += (double)ref[o][i] * ref[o][i]; changed++; }
            }
            double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
            total_changed += changed;
            if (rel > worst || !isfinite(rel)) { worst = rel; snprintf(where, sizeof where, "%s", KINDS[ki].ops[o].name); }
        }
        if (total_changed == 0) { worst = INFINITY; snprintf(where, sizeof where, "(the reference wrote nothing)"); }
        if (!(worst < 2e-2)) {
            CHECK(0, sname, "operand %s: relative L2 error %.3g against the CPU reference", where, worst);
            worst_all = INFINITY;
            break;
        }
        if (worst > worst_all) worst_all = worst;
        }
        CHECK(worst_all < 2e-2, name, "see above");
        kinds_seen[ki] = 1;
        kinds_ok[ki] += worst_all < 2e-2;
        if (!strcmp(k->kind, "attention_fwd")) for (int o = 0; o < 5; o++) memcpy(chain_ref[o], ref[o], NBUF * sizeof(float));
        /* the emulator honours the launch's dynamic shared memory: the largest tile launched with 16 B
         * less must stop (in a child process) at the inaccessible page after the buffer */
        if (!strcmp(k->kind, "attention_bwd") && k->smem > 48 * 1024 && !short_checked) {
            short_checked = 1;
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                freopen("/dev/null", "w", stderr);
                set_seed(0);
                set_dyn((unsigned)k->smem - 16);
                _exit(launch((unsigned)k->grid, (unsigned)k->block, params) == 0 ? 0 : 3);
            }
            int st = 0;
            waitpid(pid, &st, 0);
            CHECK(pid > 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
                  "emulator: a launch with 16 B less dynamic shared memory than the tiles need stops at the buffer's end",
                  "%s, %lld B: child %s %d", k->name, (long long)k->smem, WIFSIGNALED(st) ? "signal" : "exit",
                  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        }
        for (int o = 0; o < 10; o++) free(ints[o]);
    }
    int covered = 0;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++) covered += kinds_seen[i];
    int nkinds = (int)(sizeof KINDS / sizeof KINDS[0]);
    if (!filtered) CHECK(covered == nkinds, "every catalog kind emulated", "%d of %d", covered, nkinds);
    dlclose(so);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    TEST_EXIT();
}
