/* test_cpu_kernels.c: the CPU backend's kernels against their math. Every backward kernel is
 * checked by central finite differences of a scalar loss L = sum(w * forward output) built from
 * the forward kernels; forwards are checked against direct formulas computed here in double
 * (online norm + all-reduce == full RMSNorm @ A, sharded cross-entropy == direct cross-entropy). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "runtime/cpu_kernels.h"   // defines: cpu_kernel_run
#include "runtime/cpu_gemm.h"      // defines: cpu_gemm

/* ---------- helpers ---------- */
static uint64_t rng_state = 12345;
static double urand(void) {   /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) * 0x1p-53 * 2.0 - 1.0;
}
static float *rnd(int64_t n, double scale) {
    float *a = malloc((size_t)n * sizeof *a);
    for (int64_t i = 0; i < n; i++) a[i] = (float)(urand() * scale);
    return a;
}
static float *zeros(int64_t n) { return calloc((size_t)n, sizeof(float)); }

/* Build kernel arguments: consts "rows=4 cols=8 ...", operands as key/pointer pairs. */
typedef struct { KernelArgs k; void *ops[PLAN_MAX_KEYS]; } Kern;
static void kset(Kern *K, const char *kind, const char *consts) {
    memset(K, 0, sizeof *K);
    snprintf(K->k.kind, sizeof K->k.kind, "%s", kind);
    snprintf(K->k.name, sizeof K->k.name, "test_%s", kind);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", consts);
    for (char *s = strtok(buf, " "); s; s = strtok(NULL, " ")) {
        char *eq = strchr(s, '=');
        *eq = 0;
        int i = K->k.nconst++;
        snprintf(K->k.const_key[i], sizeof K->k.const_key[i], "%s", s);
        double v = strtod(eq + 1, NULL);
        K->k.const_val[i] = v;
        K->k.const_int[i].base = (int64_t)v;
    }
}
static void kop(Kern *K, const char *key, void *ptr) {
    int i = K->k.nops++;
    snprintf(K->k.op_key[i], sizeof K->k.op_key[i], "%s", key);
    K->k.op[i].tensor = -1;
    K->ops[i] = ptr;
}
static void krun(Kern *K) {
    char err[256];
    if (cpu_kernel_run(&K->k, K->ops, 0, err, sizeof err)) { printf("FAIL - kernel_run: %s\n", err); exit(1); }
}

static double wsum(const float *w, const float *x, int64_t rows, int64_t cols, int64_t ld) {
    double s = 0;
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) s += (double)w[m * cols + j] * x[m * ld + j];
    return s;
}

/* Central differences of loss() wrt x[idx[i]] against the analytic gradient g[i]; norm-wise. */
typedef double (*LossFn)(void *ctx);
static double fd_rel_err(LossFn loss, void *ctx, float *x, const int64_t *idx, int n, const float *g, double eps) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        float keep = x[idx[i]];
        x[idx[i]] = (float)(keep + eps);
        double lp = loss(ctx);
        x[idx[i]] = (float)(keep - eps);
        double lm = loss(ctx);
        x[idx[i]] = keep;
        double fd = (lp - lm) / (2 * eps);
        num += (fd - g[i]) * (fd - g[i]);
        den += fd * fd;
    }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

/* Gradient check over a dense rows x cols region with leading dimension ld. */
static double fd_region(LossFn loss, void *ctx, float *x, const float *g, int64_t rows, int64_t cols, int64_t ld,
                        int64_t ldg, double eps) {
    int n = (int)(rows * cols);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    float *gg = malloc((size_t)n * sizeof *gg);
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) { idx[m * cols + j] = m * ld + j; gg[m * cols + j] = g[m * ldg + j]; }
    double e = fd_rel_err(loss, ctx, x, idx, n, gg, eps);
    free(idx); free(gg);
    return e;
}

static double rel_diff(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { num += (a[i] - b[i]) * (a[i] - b[i]); den += b[i] * b[i]; }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

#define TOL 1e-2
#define EPS 1e-2

/* ---------- rmsnorm ---------- */
enum { RM = 3, RC = 8, RLD = 11 };
typedef struct { float *x, *gamma, *w, *out, *rstd; } RmsCtx;
static double rms_loss(void *p) {
    RmsCtx *c = p;
    Kern K;
    kset(&K, "rmsnorm_fwd", "rows=3 cols=8 ldx=11 ldo=8 divisor=8 eps=1e-5");
    kop(&K, "x", c->x); kop(&K, "gamma", c->gamma); kop(&K, "out", c->out); kop(&K, "rstd", c->rstd);
    krun(&K);
    return wsum(c->w, c->out, RM, RC, RC);
}

static void test_rmsnorm(void) {
    RmsCtx c = {rnd(RM * RLD, 1), rnd(RC, 1), rnd(RM * RC, 1), zeros(RM * RC), zeros(RM)};
    for (int j = 0; j < RC; j++) c.gamma[j] += 1.5f;
    rms_loss(&c);
    /* forward against the formula */
    double ref[RM * RC];
    for (int m = 0; m < RM; m++) {
        double s = 0;
        for (int j = 0; j < RC; j++) s += (double)c.x[m * RLD + j] * c.x[m * RLD + j];
        for (int j = 0; j < RC; j++) ref[m * RC + j] = c.x[m * RLD + j] / sqrt(s / RC + 1e-5) * c.gamma[j];
    }
    CHECK(rel_diff(c.out, ref, RM * RC) < 1e-6, "rmsnorm_fwd matches x/sqrt(mean(x^2)+eps)*gamma", "rel %g", rel_diff(c.out, ref, RM * RC));
    /* phase 0 backward */
    float *dx = zeros(RM * RLD), *dg = zeros(RC);
    Kern K;
    kset(&K, "rmsnorm_bwd", "rows=3 cols=8 ldx=11 ldo=8 lddx=11 divisor=8 phase=0 acc=0");
    kop(&K, "x", c.x); kop(&K, "gamma", c.gamma); kop(&K, "rstd", c.rstd); kop(&K, "dout", c.w);
    kop(&K, "dx", dx); kop(&K, "dgamma", dg);
    krun(&K);
    double ex = fd_region(rms_loss, &c, c.x, dx, RM, RC, RLD, RLD, EPS);
    double eg = fd_region(rms_loss, &c, c.gamma, dg, 1, RC, RC, RC, EPS);
    CHECK(ex < TOL, "rmsnorm_bwd phase 0 dx (finite differences)", "rel err %g", ex);
    CHECK(eg < TOL, "rmsnorm_bwd dgamma (finite differences)", "rel err %g", eg);

    /* acc=1 adds to what is there */
    float *dx2 = zeros(RM * RLD);
    for (int i = 0; i < RM * RLD; i++) dx2[i] = 1.0f;
    float *dg2 = zeros(RC);
    kset(&K, "rmsnorm_bwd", "rows=3 cols=8 ldx=11 ldo=8 lddx=11 divisor=8 phase=0 acc=1");
    kop(&K, "x", c.x); kop(&K, "gamma", c.gamma); kop(&K, "rstd", c.rstd); kop(&K, "dout", c.w);
    kop(&K, "dx", dx2); kop(&K, "dgamma", dg2);
    krun(&K);
    double worst = 0;
    for (int m = 0; m < RM; m++)
        for (int j = 0; j < RC; j++) worst = tl_worst(worst, fabs(dx2[m * RLD + j] - 1.0f - dx[m * RLD + j]));
    CHECK(worst < 1e-6, "rmsnorm_bwd acc=1 accumulates", "max diff %g", worst);

    /* sync norm: two column shards, sumsq + sum, fwd with sumsq, bwd phase 1 -> sum -> phase 2 */
    rms_loss(&c);   /* the finite differences left a perturbed forward in c.out */
    float S[RM], part[2][RM], dots[2][RM], dsum[RM], out2[RM * RC], rstd2[RM], dxs[RM * RLD], dgs[RC];
    memset(dxs, 0, sizeof dxs); memset(dgs, 0, sizeof dgs);
    for (int r = 0; r < 2; r++) {
        kset(&K, "sumsq", "rows=3 cols=4 ldx=11");
        kop(&K, "x", c.x + 4 * r); kop(&K, "out", part[r]);
        krun(&K);
    }
    for (int m = 0; m < RM; m++) S[m] = part[0][m] + part[1][m];
    for (int r = 0; r < 2; r++) {
        kset(&K, "rmsnorm_fwd", "rows=3 cols=4 ldx=11 ldo=8 divisor=8 eps=1e-5");
        kop(&K, "x", c.x + 4 * r); kop(&K, "gamma", c.gamma + 4 * r); kop(&K, "out", out2 + 4 * r);
        kop(&K, "rstd", rstd2); kop(&K, "sumsq", S);
        krun(&K);
    }
    double d = 0;
    for (int i = 0; i < RM * RC; i++) d = tl_worst(d, fabs(out2[i] - c.out[i]));
    CHECK(d < 1e-6, "rmsnorm_fwd with summed sumsq over 2 shards == full rmsnorm", "max diff %g", d);
    for (int r = 0; r < 2; r++) {
        kset(&K, "rmsnorm_bwd", "rows=3 cols=4 ldx=11 ldo=8 divisor=8 phase=1");
        kop(&K, "x", c.x + 4 * r); kop(&K, "gamma", c.gamma + 4 * r); kop(&K, "rstd", c.rstd);
        kop(&K, "dout", c.w + 4 * r); kop(&K, "dot", dots[r]);
        krun(&K);
    }
    for (int m = 0; m < RM; m++) dsum[m] = dots[0][m] + dots[1][m];
    for (int r = 0; r < 2; r++) {
        kset(&K, "rmsnorm_bwd", "rows=3 cols=4 ldx=11 ldo=8 lddx=11 divisor=8 phase=2 acc=0");
        kop(&K, "x", c.x + 4 * r); kop(&K, "gamma", c.gamma + 4 * r); kop(&K, "rstd", c.rstd);
        kop(&K, "dout", c.w + 4 * r); kop(&K, "dot", dsum); kop(&K, "dx", dxs + 4 * r); kop(&K, "dgamma", dgs + 4 * r);
        krun(&K);
    }
    d = 0;
    for (int m = 0; m < RM; m++)
        for (int j = 0; j < RC; j++) d = tl_worst(d, fabs(dxs[m * RLD + j] - dx[m * RLD + j]));
    for (int j = 0; j < RC; j++) d = tl_worst(d, fabs(dgs[j] - dg[j]));
    CHECK(d < 1e-5, "rmsnorm_bwd phase 1 + sum + phase 2 over 2 shards == phase 0", "max diff %g", d);
}

/* ---------- online norm chain (2 shards) ---------- */
enum { OM = 4, OD = 8, OR = 3, OT = 2 };
typedef struct {
    float *x, *gamma, *A, *w;     /* x [OM, OD], gamma [OD], A [OD, OR], w [OM, OR] */
    /* H: the all-reduce buffer of one rank, [OM, OR] activations then the OM statistics */
    float xhat[OT][OM * (OD / OT)], rho[OT][OM], H[OT][OM * (OR + 1)], Hsum[OM * (OR + 1)];
    float y[OM * OR], z[OM * OR], rstd[OM];
    int act;
} OnCtx;

static void online_forward(OnCtx *c) {
    const int dl = OD / OT;
    Kern K;
    GemmArgs g = {0};
    g.m = OM; g.n = OR; g.k = dl; g.lda = dl; g.ldb = OR; g.ldc = OR; g.alpha = 1; g.beta = 0; g.batch = 1;
    for (int r = 0; r < OT; r++) {
        kset(&K, "online_norm_fwd", "rows=4 cols=4 ldx=8 ldstat=1 divisor=8 eps=1e-5");
        kop(&K, "x", c->x + r * dl); kop(&K, "gamma", c->gamma + r * dl); kop(&K, "xhat", c->xhat[r]);
        kop(&K, "rho", c->rho[r]); kop(&K, "stat", c->H[r] + OM * OR);
        krun(&K);
        cpu_gemm(&g, c->xhat[r], c->A + r * dl * OR, c->H[r]);
        kset(&K, "online_norm_rescale", "rows=4 cols=3 ldh=3");
        kop(&K, "h", c->H[r]); kop(&K, "rho", c->rho[r]);
        krun(&K);
    }
    for (int i = 0; i < OM * (OR + 1); i++) c->Hsum[i] = c->H[0][i] + c->H[1][i];   /* the all-reduce */
    char consts[128];
    snprintf(consts, sizeof consts, "rows=4 cols=3 ldh=3 ldy=3 ldz=3 act=%d norm=1 eps=1e-5", c->act);
    kset(&K, "bottleneck_act", consts);
    kop(&K, "h", c->Hsum); kop(&K, "y", c->y); kop(&K, "z", c->z); kop(&K, "rstd", c->rstd);
    kop(&K, "stat", c->Hsum + OM * OR);
    krun(&K);
}
static double online_loss(void *p) {
    OnCtx *c = p;
    online_forward(c);
    return wsum(c->w, c->z, OM, OR, OR);
}

static void test_online_norm(int act) {
    OnCtx *c = calloc(1, sizeof *c);
    c->x = rnd(OM * OD, 1); c->gamma = rnd(OD, 0.5); c->A = rnd(OD * OR, 0.5); c->w = rnd(OM * OR, 1); c->act = act;
    for (int j = 0; j < OD; j++) c->gamma[j] += 1.0f;
    online_forward(c);
    /* direct: Y = rmsnorm(x) * gamma @ A over the full hidden size */
    double ref[OM * OR];
    for (int m = 0; m < OM; m++) {
        double s = 0;
        for (int j = 0; j < OD; j++) s += (double)c->x[m * OD + j] * c->x[m * OD + j];
        double r = 1 / sqrt(s / OD + 1e-5);
        for (int n = 0; n < OR; n++) {
            double a = 0;
            for (int j = 0; j < OD; j++) a += c->x[m * OD + j] * r * c->gamma[j] * c->A[j * OR + n];
            ref[m * OR + n] = a;
        }
    }
    char name[128];
    snprintf(name, sizeof name, "online norm (2 shards) + all-reduce == RMSNorm(x) @ A (act=%s)", act ? "silu" : "none");
    CHECK(rel_diff(c->y, ref, OM * OR) < 1e-5, name, "rel %g", rel_diff(c->y, ref, OM * OR));

    /* backward: bottleneck_act_bwd (norm=1) -> dxhat = dh @ A^T, dA = xhat^T dh -> online_norm_bwd */
    const int dl = OD / OT;
    float dx[OM * OD], dgamma[OD], dA[OD * OR];
    memset(dgamma, 0, sizeof dgamma);
    for (int r = 0; r < OT; r++) {
        float dh[OM * OR], dstat[OM], dxhat[OM * 4];
        Kern K;
        char consts[160];
        snprintf(consts, sizeof consts, "rows=4 cols=3 ldh=3 ldy=3 ldz=3 lddh=3 act=%d norm=1 divisor=8", act);
        kset(&K, "bottleneck_act_bwd", consts);
        kop(&K, "h", c->Hsum); kop(&K, "y", c->y); kop(&K, "rstd", c->rstd); kop(&K, "rho", c->rho[r]);
        kop(&K, "dz", c->w); kop(&K, "dh", dh); kop(&K, "dstat", dstat);
        krun(&K);
        GemmArgs g = {0};
        g.tb = 1; g.m = OM; g.n = dl; g.k = OR; g.lda = OR; g.ldb = OR; g.ldc = dl; g.alpha = 1; g.batch = 1;
        cpu_gemm(&g, dh, c->A + r * dl * OR, dxhat);
        GemmArgs ga = {0};
        ga.ta = 1; ga.m = dl; ga.n = OR; ga.k = OM; ga.lda = dl; ga.ldb = OR; ga.ldc = OR; ga.alpha = 1; ga.batch = 1;
        cpu_gemm(&ga, c->xhat[r], dh, dA + r * dl * OR);
        kset(&K, "online_norm_bwd", "rows=4 cols=4 ldx=8 lddx=8 acc=0");
        kop(&K, "x", c->x + r * dl); kop(&K, "gamma", c->gamma + r * dl); kop(&K, "rho", c->rho[r]);
        kop(&K, "dxhat", dxhat); kop(&K, "dstat", dstat); kop(&K, "dx", dx + r * dl); kop(&K, "dgamma", dgamma + r * dl);
        krun(&K);
    }
    double ex = fd_region(online_loss, c, c->x, dx, OM, OD, OD, OD, EPS);
    double eg = fd_region(online_loss, c, c->gamma, dgamma, 1, OD, OD, OD, EPS);
    double ea = fd_region(online_loss, c, c->A, dA, OD, OR, OR, OR, EPS);
    snprintf(name, sizeof name, "online norm chain backward dx (finite differences, act=%s)", act ? "silu" : "none");
    CHECK(ex < TOL, name, "rel err %g", ex);
    snprintf(name, sizeof name, "online norm chain backward dgamma (finite differences, act=%s)", act ? "silu" : "none");
    CHECK(eg < TOL, name, "rel err %g", eg);
    snprintf(name, sizeof name, "online norm chain backward dA (finite differences, act=%s)", act ? "silu" : "none");
    CHECK(ea < TOL, name, "rel err %g", ea);
    free(c->x); free(c->gamma); free(c->A); free(c->w); free(c);
}

/* ---------- bottleneck_act norm=0 ---------- */
typedef struct { float *h, *w, *y, *z; int act; } BaCtx;
static double ba_loss(void *p) {
    BaCtx *c = p;
    Kern K;
    char consts[128];
    snprintf(consts, sizeof consts, "rows=3 cols=5 ldh=7 ldy=5 ldz=5 act=%d norm=0", c->act);
    kset(&K, "bottleneck_act", consts);
    kop(&K, "h", c->h); kop(&K, "y", c->y); kop(&K, "z", c->z);
    krun(&K);
    return wsum(c->w, c->z, 3, 5, 5);
}
static void test_bottleneck_act(int act) {
    BaCtx c = {rnd(3 * 7, 2), rnd(15, 1), zeros(15), zeros(15), act};
    ba_loss(&c);
    float dh[3 * 6];
    Kern K;
    char consts[160];
    snprintf(consts, sizeof consts, "rows=3 cols=5 ldh=7 ldy=5 ldz=5 lddh=6 act=%d norm=0 acc=0", act);
    kset(&K, "bottleneck_act_bwd", consts);
    kop(&K, "h", c.h); kop(&K, "y", c.y); kop(&K, "dz", c.w); kop(&K, "dh", dh);
    krun(&K);
    double e = fd_region(ba_loss, &c, c.h, dh, 3, 5, 7, 6, EPS);
    char name[96];
    snprintf(name, sizeof name, "bottleneck_act_bwd norm=0 act=%s (finite differences)", act ? "silu" : "none");
    CHECK(e < TOL, name, "rel err %g", e);
    free(c.h); free(c.w); free(c.y); free(c.z);
}

/* ---------- glu ---------- */
typedef struct { float *gate, *up, *w, *out; int act; } GluCtx;
static double glu_loss(void *p) {
    GluCtx *c = p;
    Kern K;
    char consts[128];
    snprintf(consts, sizeof consts, "rows=3 cols=4 ldg=9 ldu=9 ldo=4 act=%d", c->act);
    kset(&K, "glu_fwd", consts);
    kop(&K, "gate", c->gate); kop(&K, "up", c->up); kop(&K, "out", c->out);
    krun(&K);
    return wsum(c->w, c->out, 3, 4, 4);
}
static void test_glu(int act) {
    float *gu = rnd(3 * 9, 2);   /* gate and up as column slices of one [3, 9] buffer */
    GluCtx c = {gu, gu + 4, rnd(12, 1), zeros(12), act};
    glu_loss(&c);
    double ref[12];
    for (int m = 0; m < 3; m++)
        for (int j = 0; j < 4; j++) {
            double g = c.gate[m * 9 + j];
            ref[m * 4 + j] = (act ? g / (1 + exp(-g)) : g) * c.up[m * 9 + j];
        }
    char name[96];
    snprintf(name, sizeof name, "glu_fwd act=%s == sigma(gate)*up", act ? "silu" : "none");
    CHECK(rel_diff(c.out, ref, 12) < 1e-6, name, "rel %g", rel_diff(c.out, ref, 12));
    float dgu[3 * 8];
    Kern K;
    char consts[160];
    snprintf(consts, sizeof consts, "rows=3 cols=4 ldg=9 ldu=9 ldo=4 lddg=8 lddu=8 act=%d", act);
    kset(&K, "glu_bwd", consts);
    kop(&K, "gate", c.gate); kop(&K, "up", c.up); kop(&K, "dout", c.w); kop(&K, "dgate", dgu); kop(&K, "dup", dgu + 4);
    krun(&K);
    double eg = fd_region(glu_loss, &c, c.gate, dgu, 3, 4, 9, 8, EPS);
    double eu = fd_region(glu_loss, &c, c.up, dgu + 4, 3, 4, 9, 8, EPS);
    snprintf(name, sizeof name, "glu_bwd act=%s dgate, dup (finite differences)", act ? "silu" : "none");
    CHECK(eg < TOL && eu < TOL, name, "rel err %g %g", eg, eu);
    free(gu); free(c.w); free(c.out);
}

/* ---------- rope ---------- */
typedef struct { float *x, *w, *tmp; } RopeCtx;
static void rope_apply(float *x, int inverse) {
    Kern K;
    kset(&K, "rope", inverse ? "rows=6 heads=2 head_dim=4 ldx=10 seq=3 theta=10000 inverse=1"
                             : "rows=6 heads=2 head_dim=4 ldx=10 seq=3 theta=10000 inverse=0");
    kop(&K, "x", x);
    krun(&K);
}
static double rope_loss(void *p) {
    RopeCtx *c = p;
    memcpy(c->tmp, c->x, 60 * sizeof(float));
    rope_apply(c->tmp, 0);
    return wsum(c->w, c->tmp, 6, 8, 10);
}
static void test_rope(void) {
    RopeCtx c = {rnd(60, 1), rnd(48, 1), zeros(60)};
    /* direct formula at one entry: row 4 (position 1), head 1, pair i=1 */
    memcpy(c.tmp, c.x, 60 * sizeof(float));
    rope_apply(c.tmp, 0);
    double f = 1.0 * pow(10000.0, -2.0 * 1 / 4), a = c.x[40 + 4 + 1], b = c.x[40 + 4 + 3];
    double ea = fabs(c.tmp[40 + 4 + 1] - (a * cos(f) - b * sin(f))) + fabs(c.tmp[40 + 4 + 3] - (b * cos(f) + a * sin(f)));
    CHECK(ea < 1e-6, "rope matches the rotate_half formula", "diff %g", ea);
    rope_apply(c.tmp, 1);
    double d = 0;
    for (int i = 0; i < 60; i++) d = tl_worst(d, fabs(c.tmp[i] - c.x[i]));
    CHECK(d < 1e-6, "rope inverse undoes rope", "max diff %g", d);
    /* the backward of rope is the inverse rotation of the output gradient */
    float g[60] = {0};
    for (int m = 0; m < 6; m++)
        for (int j = 0; j < 8; j++) g[m * 10 + j] = c.w[m * 8 + j];
    rope_apply(g, 1);
    double e = fd_region(rope_loss, &c, c.x, g, 6, 8, 10, 10, EPS);
    CHECK(e < TOL, "rope inverse is the gradient of rope (finite differences)", "rel err %g", e);
    free(c.x); free(c.w); free(c.tmp);
}

/* ---------- attention ---------- */
typedef struct { float *q, *k, *v, *w, *out, *lse; int heads, kvh; } AttCtx;
enum { AB = 2, AS = 5, AHD = 4 };
static void att_consts(const AttCtx *c, char *buf, size_t n) {
    snprintf(buf, n, "batch=2 seq=5 heads=%d kv_heads=%d head_dim=4 ldq=%d ldk=%d ldv=%d ldo=%d scale=0.5", c->heads, c->kvh,
             c->heads * AHD + 1, c->kvh * AHD, c->kvh * AHD + 2, c->heads * AHD);
}
static double att_loss(void *p) {
    AttCtx *c = p;
    Kern K;
    char consts[200];
    att_consts(c, consts, sizeof consts);
    kset(&K, "attention_fwd", consts);
    kop(&K, "q", c->q); kop(&K, "k", c->k); kop(&K, "v", c->v); kop(&K, "out", c->out); kop(&K, "lse", c->lse);
    krun(&K);
    return wsum(c->w, c->out, AB * AS, c->heads * AHD, c->heads * AHD);
}
static void test_attention(int heads, int kvh) {
    int M = AB * AS, wq = heads * AHD, wk = kvh * AHD;
    AttCtx c = {rnd(M * (wq + 1), 1), rnd(M * wk, 1), rnd(M * (wk + 2), 1), rnd(M * wq, 1), zeros(M * wq),
                zeros(AB * heads * AS), heads, kvh};
    att_loss(&c);
    /* direct reference */
    double *ref = calloc((size_t)(M * wq), sizeof *ref);
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < heads; h++) {
            int kh = h / (heads / kvh);
            for (int i = 0; i < AS; i++) {
                double s[AS], mx = -1e300, sum = 0;
                for (int j = 0; j <= i; j++) {
                    double d = 0;
                    for (int e = 0; e < AHD; e++) d += (double)c.q[(b * AS + i) * (wq + 1) + h * AHD + e] * c.k[(b * AS + j) * wk + kh * AHD + e];
                    s[j] = 0.5 * d;
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
                for (int e = 0; e < AHD; e++) {
                    double a = 0;
                    for (int j = 0; j <= i; j++) a += exp(s[j] - mx) / sum * c.v[(b * AS + j) * (wk + 2) + kh * AHD + e];
                    ref[(b * AS + i) * wq + h * AHD + e] = a;
                }
            }
        }
    char name[96];
    snprintf(name, sizeof name, "attention_fwd heads=%d kv_heads=%d matches causal softmax", heads, kvh);
    CHECK(rel_diff(c.out, ref, M * wq) < 1e-5, name, "rel %g", rel_diff(c.out, ref, M * wq));
    free(ref);
    float *dq = zeros(M * (wq + 1)), *dk = zeros(M * wk), *dv = zeros(M * (wk + 2));
    Kern K;
    char consts[240];
    att_consts(&c, consts, sizeof consts);
    kset(&K, "attention_bwd", consts);
    kop(&K, "q", c.q); kop(&K, "k", c.k); kop(&K, "v", c.v); kop(&K, "out", c.out); kop(&K, "dout", c.w);
    kop(&K, "lse", c.lse); kop(&K, "dq", dq); kop(&K, "dk", dk); kop(&K, "dv", dv);
    krun(&K);
    double eq = fd_region(att_loss, &c, c.q, dq, M, wq, wq + 1, wq + 1, EPS);
    double ek = fd_region(att_loss, &c, c.k, dk, M, wk, wk, wk, EPS);
    double ev = fd_region(att_loss, &c, c.v, dv, M, wk, wk + 2, wk + 2, EPS);
    snprintf(name, sizeof name, "attention_bwd heads=%d kv_heads=%d dq dk dv (finite differences)", heads, kvh);
    CHECK(eq < TOL && ek < TOL && ev < TOL, name, "rel err dq %g dk %g dv %g", eq, ek, ev);
    free(c.q); free(c.k); free(c.v); free(c.w); free(c.out); free(c.lse); free(dq); free(dk); free(dv);
}

/* ---------- embedding ---------- */
typedef struct { int32_t tok[6]; float *table, *w, *out; } EmbCtx;
static double emb_loss(void *p) {
    EmbCtx *c = p;
    Kern K;
    kset(&K, "embedding_fwd", "rows=6 cols=3 vocab=5");
    kop(&K, "tokens", c->tok); kop(&K, "table", c->table); kop(&K, "out", c->out);
    krun(&K);
    return wsum(c->w, c->out, 6, 3, 3);
}
static void test_embedding(void) {
    EmbCtx c = {{4, 1, 1, 0, 4, 2}, rnd(15, 1), rnd(18, 1), zeros(18)};
    emb_loss(&c);
    CHECK(c.out[3 * 3 + 1] == c.table[0 * 3 + 1] && c.out[0] == c.table[12], "embedding_fwd gathers rows", "mismatch");
    float *dt = zeros(15);
    Kern K;
    kset(&K, "embedding_bwd", "rows=6 cols=3 vocab=5");
    kop(&K, "tokens", c.tok); kop(&K, "dout", c.w); kop(&K, "dtable", dt);
    krun(&K);
    double e = fd_region(emb_loss, &c, c.table, dt, 5, 3, 3, 3, EPS);
    CHECK(e < TOL, "embedding_bwd with repeated tokens (finite differences)", "rel err %g", e);
    CHECK(dt[3 * 3] == 0 && dt[3 * 3 + 2] == 0, "embedding_bwd leaves unused rows zero", "row 3 = %g", dt[9]);
    int32_t bad[6] = {0, 1, 5, 0, 0, 0};
    char err[256];
    kset(&K, "embedding_fwd", "rows=6 cols=3 vocab=5");
    kop(&K, "tokens", bad); kop(&K, "table", c.table); kop(&K, "out", c.out);
    CHECK(cpu_kernel_run(&K.k, K.ops, 0, err, sizeof err) != 0 && strstr(err, "outside the vocabulary"),
          "embedding_fwd rejects a token outside the vocabulary", "rc/message: %s", err);
    free(c.table); free(c.w); free(c.out); free(dt);
}

/* ---------- cross-entropy, 2 vocab shards ---------- */
enum { XM = 4, XV = 10, XT = 2 };
typedef struct { float *logits; int32_t tg[XM]; float stats[XT][XM * 3], all[XM * 3 * XT], lse[XM], loss; } XCtx;
static double xent_loss(void *p) {
    XCtx *c = p;
    Kern K;
    for (int r = 0; r < XT; r++) {
        char consts[96];
        snprintf(consts, sizeof consts, "rows=4 cols=5 ldl=%d vocab_offset=%d", XV + 1, r * 5);
        kset(&K, "xent_fwd", consts);
        kop(&K, "logits", c->logits + r * 5); kop(&K, "targets", c->tg); kop(&K, "stats", c->stats[r]);
        krun(&K);
    }
    for (int m = 0; m < XM; m++)   /* the allgather */
        for (int r = 0; r < XT; r++)
            for (int j = 0; j < 3; j++) c->all[m * 3 * XT + r * 3 + j] = c->stats[r][m * 3 + j];
    kset(&K, "xent_combine", "rows=4 tp=2");
    kop(&K, "stats_all", c->all); kop(&K, "lse", c->lse); kop(&K, "loss", &c->loss);
    krun(&K);
    return c->loss;
}
static void test_xent(void) {
    XCtx c;
    memset(&c, 0, sizeof c);
    c.logits = rnd(XM * (XV + 1), 3);
    c.tg[0] = 9; c.tg[1] = 0; c.tg[2] = 4; c.tg[3] = 5;
    double L = xent_loss(&c), ref = 0;
    for (int m = 0; m < XM; m++) {
        double mx = -1e300, s = 0;
        for (int j = 0; j < XV; j++) mx = fmax(mx, c.logits[m * (XV + 1) + j]);
        for (int j = 0; j < XV; j++) s += exp(c.logits[m * (XV + 1) + j] - mx);
        ref += mx + log(s) - c.logits[m * (XV + 1) + c.tg[m]];
    }
    ref /= XM;
    CHECK(fabs(L - ref) < 1e-5 * fabs(ref), "xent_fwd + allgather + xent_combine == direct cross-entropy", "%g vs %g", L, ref);
    float dl[XM * XV];
    for (int r = 0; r < XT; r++) {
        Kern K;
        char consts[128];
        snprintf(consts, sizeof consts, "rows=4 cols=5 ldl=%d lddl=%d vocab_offset=%d scale=0.25", XV + 1, XV, r * 5);
        kset(&K, "xent_bwd", consts);
        kop(&K, "logits", c.logits + r * 5); kop(&K, "targets", c.tg); kop(&K, "lse", c.lse); kop(&K, "dlogits", dl + r * 5);
        krun(&K);
    }
    double e = fd_region(xent_loss, &c, c.logits, dl, XM, XV, XV + 1, XV, EPS);
    CHECK(e < TOL, "xent_bwd (finite differences of the combined loss)", "rel err %g", e);
    free(c.logits);
}

/* ---------- small kernels and GEMM ---------- */
static void test_misc(void) {
    float a[12], b[12], out[12], dst[12];
    for (int i = 0; i < 12; i++) { a[i] = (float)i; b[i] = (float)(2 * i); dst[i] = 1; }
    Kern K;
    kset(&K, "add", "rows=2 cols=3 lda=6 ldb=6 ldo=3");
    kop(&K, "a", a); kop(&K, "b", b + 3); kop(&K, "out", out);
    krun(&K);
    CHECK(out[0] == 0 + 6 && out[4] == 7 + 20, "add with strides", "out %g %g", out[0], out[4]);
    kset(&K, "copy", "rows=2 cols=2 lds=6 ldd=3 acc=1");
    kop(&K, "src", a + 1); kop(&K, "dst", dst);
    krun(&K);
    CHECK(dst[0] == 2 && dst[1] == 3 && dst[3] == 8 && dst[2] == 1, "copy acc=1 adds a 2-D slice", "dst %g %g %g %g", dst[0], dst[1], dst[3], dst[2]);
    /* batched transposed GEMM against loops */
    float *A = rnd(2 * 4 * 5, 1), *B = rnd(2 * 3 * 4, 1), *C = rnd(2 * 5 * 3, 1), *C0 = malloc(30 * sizeof(float));
    memcpy(C0, C, 30 * sizeof(float));
    GemmArgs g = {0};
    g.ta = 1; g.tb = 1; g.m = 5; g.n = 3; g.k = 4; g.lda = 5; g.ldb = 4; g.ldc = 3; g.alpha = 0.5; g.beta = 1;
    g.batch = 2; g.sA = 20; g.sB = 12; g.sC = 15;
    cpu_gemm(&g, A, B, C);
    double d = 0;
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 3; j++) {
                double s = 0;
                for (int l = 0; l < 4; l++) s += (double)A[t * 20 + l * 5 + i] * B[t * 12 + j * 4 + l];
                d = tl_worst(d, fabs(C[t * 15 + i * 3 + j] - (0.5 * s + C0[t * 15 + i * 3 + j])));
            }
    CHECK(d < 1e-5, "batched gemm ta=1 tb=1 alpha beta == loops", "max diff %g", d);
    free(A); free(B); free(C); free(C0);
}

int main(void) {
    test_rmsnorm();
    test_online_norm(1);
    test_online_norm(0);
    test_bottleneck_act(1);
    test_bottleneck_act(0);
    test_glu(1);
    test_glu(0);
    test_rope();
    test_attention(2, 2);
    test_attention(4, 2);
    test_embedding();
    test_xent();
    test_misc();
    TEST_EXIT();
}
