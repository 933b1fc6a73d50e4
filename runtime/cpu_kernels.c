/* cpu_kernels.c: the fp32 reference of every kernel kind of the catalog (docs/plan-format.md),
 * written as directly as the math allows, with double accumulation in reductions and a fixed
 * loop order so results are deterministic. The CUDA kernels are checked against these.
 * Speed without losing that: rows are split over cpu_threads() OpenMP threads (statically; a row's
 * math never depends on the split, and sums over rows run over column blocks in row order), exp and
 * SiLU in fp32 with a polynomial exp the compiler vectorises, row sums in 8 fixed lanes. */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cpu_kernels.h"
#include "runtime/cpu_gemm.h"    // defines: cpu_gemm, cpu_threads
#include "runtime/cpu_infer.h"   // defines: cpu_infer_kernel_run
#include "common/kernel_catalog.h"   // defines: kcat_find, KK_*

typedef struct {
    const KernelArgs *k;
    void **ops;
    int rank;
    char *err; size_t errlen;
} KCtx;

static float *opf(const KCtx *c, const char *key) {
    int i = kernel_op(c->k, key);
    return i < 0 ? NULL : (float *)c->ops[i];
}
static const int32_t *opi(const KCtx *c, const char *key) {
    int i = kernel_op(c->k, key);
    return i < 0 ? NULL : (const int32_t *)c->ops[i];
}
static int64_t ci(const KCtx *c, const char *key, int64_t d) { return kernel_int(c->k, key, c->rank, d); }
static double cf(const KCtx *c, const char *key, double d) { return kernel_num(c->k, key, d); }

static int kfail(const KCtx *c, const char *msg) {
    snprintf(c->err, c->errlen, "kernel %s (%s): %s", c->k->kind, c->k->name, msg);
    return -1;
}

/* threads for a pass over `work` elements: one below about 32k (a team costs more than it saves) */
static int nthr(int64_t work) { return work < 32768 ? 1 : cpu_threads(); }

/* A row-major GEMM through cpu_gemm (split over the threads with the same bits at any count). */
static void gemm_rm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    GemmArgs g;
    memset(&g, 0, sizeof g);
    g.ta = ta; g.tb = tb; g.m = m; g.n = n; g.k = k; g.lda = lda; g.ldb = ldb; g.ldc = ldc;
    g.batch = 1; g.alpha = alpha; g.beta = beta;
    cpu_gemm(&g, A, B, C);
}

/* exp in fp32 that vectorises: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial (about
 * 1 ulp), 2^n by the exponent bits, in two factors 2^(n/2) 2^(n - n/2) so that n = 128 (x from
 * 88.38 up) does not reach the infinity's exponent; 0 below -87.3, +inf above FEXP_MAX (as expf:
 * finite up to 88.7228), NaN for NaN. No libm call, same bits on every thread and at every vector
 * width. A NaN (a diverging run) is clamped like a number before the float->int conversion and
 * the shift, which would be undefined for it. */
#define FEXP_MAX 0x1.62e42ep+6f   /* 88.72283: the largest float whose exp is finite in fp32 */
static inline float fexp(float x) {
    float xc = x >= -87.3f ? (x <= FEXP_MAX ? x : FEXP_MAX) : -87.3f;   /* NaN -> -87.3 */
    float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;           /* round to nearest */
    float r = xc - n * 0.693145752f;
    r = r - n * 1.42860677e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t ni = (int32_t)n, half = ni / 2;   /* n in [-126, 128]: both halves in [-63, 64] */
    uint32_t bits1 = (uint32_t)(half + 127) << 23, bits2 = (uint32_t)(ni - half + 127) << 23;
    float sc1, sc2;
    memcpy(&sc1, &bits1, sizeof sc1);
    memcpy(&sc2, &bits2, sizeof sc2);
    float y = p * sc1 * sc2;   /* exact products: the result is a normal number */
    y = x > FEXP_MAX ? INFINITY : y;   /* selects, not branches: the loops around it vectorise */
    y = x != x ? x : y;
    return x < -87.3f ? 0.0f : y;
}

static inline float logistic(float y) { return 1.0f / (1.0f + fexp(-y)); }
static inline float act_f(int act, float y) { return act ? y * logistic(y) : y; }
static inline float act_df(int act, float y) {
    if (!act) return 1.0f;
    float s = logistic(y);
    return s * (1.0f + y * (1.0f - s));
}

/* sum of n floats in double, 8 lanes j mod 8 then the lanes in order: a fixed order */
static double sum8(const float *x, int64_t n) {
    double l[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int q = 0; q < 8; q++) l[q] += x[j + q];
    for (; j < n; j++) l[j & 7] += x[j];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* sum of x[j]*y[j] in double, the same 8 lanes */
static double dot8(const float *x, const float *y, int64_t n) {
    double l[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int q = 0; q < 8; q++) l[q] += (double)x[j + q] * y[j + q];
    for (; j < n; j++) l[j & 7] += (double)x[j] * y[j];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static float maxf_row(const float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

static int k_embedding(const KCtx *c, int bwd) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), vocab = ci(c, "vocab", 0), ldo = ci(c, "ldo", cols);
    const int32_t *tok = opi(c, "tokens");
    float *table = opf(c, bwd ? "dtable" : "table"), *out = opf(c, bwd ? "dout" : "out");
    for (int64_t m = 0; m < rows; m++) {
        int64_t t = tok[m];
        if (t >= 0 && t < vocab) continue;
        char msg[128];
        snprintf(msg, sizeof msg, "token id %lld at row %lld is outside the vocabulary 0..%lld", (long long)t,
                 (long long)m, (long long)vocab - 1);
        return kfail(c, msg);
    }
    if (!bwd) {   /* rows apart: split over the threads; backward may add two rows into one table row */
        int nt = nthr(rows * cols);
        #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (int64_t m = 0; m < rows; m++) memcpy(out + m * ldo, table + (int64_t)tok[m] * cols, (size_t)cols * sizeof *out);
        return 0;
    }
    for (int64_t m = 0; m < rows; m++) {
        int64_t t = tok[m];
        if (t < 0 || t >= vocab) {
            char msg[128];
            snprintf(msg, sizeof msg, "token id %lld at row %lld is outside the vocabulary 0..%lld", (long long)t,
                     (long long)m, (long long)vocab - 1);
            return kfail(c, msg);
        }
        float *row = table + t * cols, *o = out + m * ldo;
        if (bwd) for (int64_t j = 0; j < cols; j++) row[j] += o[j];
        else memcpy(o, row, (size_t)cols * sizeof *o);
    }
    return 0;
}

static int k_rmsnorm_fwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldx = ci(c, "ldx", cols), ldo = ci(c, "ldo", cols);
    double divisor = cf(c, "divisor", (double)cols), eps = cf(c, "eps", 1e-5);
    const float *x = opf(c, "x"), *gamma = opf(c, "gamma"), *sumsq = opf(c, "sumsq");
    float *out = opf(c, "out"), *rstd = opf(c, "rstd");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        const float *xr = x + m * ldx;
        double S = sumsq ? (double)sumsq[m] : dot8(xr, xr, cols);
        double r = 1.0 / sqrt(S / divisor + eps);
        if (rstd) rstd[m] = (float)r;
        float *o = out + m * ldo;
        for (int64_t j = 0; j < cols; j++) o[j] = (float)(xr[j] * r * gamma[j]);
    }
    return 0;
}

static int k_rmsnorm_bwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldx = ci(c, "ldx", cols), ldo = ci(c, "ldo", cols);
    int64_t lddx = ci(c, "lddx", ldx), phase = ci(c, "phase", 0), acc = ci(c, "acc", 0);
    double divisor = cf(c, "divisor", (double)cols);
    const float *x = opf(c, "x"), *gamma = opf(c, "gamma"), *rstd = opf(c, "rstd"), *dout = opf(c, "dout");
    float *dot = opf(c, "dot"), *dx = opf(c, "dx"), *dgamma = opf(c, "dgamma");
    double *dg = NULL;
    if (phase != 1 && dgamma && !(dg = calloc((size_t)cols, sizeof *dg))) return kfail(c, "out of memory");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        const float *xr = x + m * ldx, *dr = dout + m * ldo;
        double r = rstd[m], D = 0;
        if (phase == 2) D = dot[m];
        else for (int64_t j = 0; j < cols; j++) D += (double)dr[j] * gamma[j] * xr[j];
        if (phase == 1) { dot[m] = (float)D; continue; }
        float *o = dx + m * lddx;
        double k3 = r * r * r * D / divisor;
        for (int64_t j = 0; j < cols; j++) {
            double g = r * gamma[j] * dr[j] - xr[j] * k3;
            o[j] = (float)(acc ? o[j] + g : g);
        }
    }
    if (dg) {   /* column sums over the rows in row order, columns split over the threads */
        #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (int64_t j = 0; j < cols; j++) {
            double s = 0;
            for (int64_t m = 0; m < rows; m++) s += (double)dout[m * ldo + j] * x[m * ldx + j] * (double)rstd[m];
            dgamma[j] += (float)s;
        }
    }
    free(dg);
    return 0;
}

static int k_sumsq(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldx = ci(c, "ldx", cols);
    const float *x = opf(c, "x");
    float *out = opf(c, "out");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) out[m] = (float)dot8(x + m * ldx, x + m * ldx, cols);
    return 0;
}

static int k_online_norm_fwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldx = ci(c, "ldx", cols), ldxh = ci(c, "ldxhat", cols);
    int64_t ldstat = ci(c, "ldstat", 1);
    double divisor = cf(c, "divisor", (double)cols), eps = cf(c, "eps", 1e-5);
    const float *x = opf(c, "x"), *gamma = opf(c, "gamma");
    float *xhat = opf(c, "xhat"), *rho = opf(c, "rho"), *stat = opf(c, "stat");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        const float *xr = x + m * ldx;
        double s = dot8(xr, xr, cols);
        double r = sqrt(s / (double)cols + eps);
        rho[m] = (float)r;
        stat[m * ldstat] = (float)(s / divisor);
        for (int64_t j = 0; j < cols; j++) xhat[m * ldxh + j] = (float)(xr[j] / r * gamma[j]);
    }
    return 0;
}

static int k_online_norm_rescale(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldh = ci(c, "ldh", cols);
    float *h = opf(c, "h"), *rho = opf(c, "rho");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) h[m * ldh + j] *= rho[m];
    return 0;
}

static int k_bottleneck_act(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), norm = ci(c, "norm", 0), act = ci(c, "act", 0);
    int64_t ldh = ci(c, "ldh", cols), ldy = ci(c, "ldy", cols), ldz = ci(c, "ldz", cols);
    double eps = cf(c, "eps", 1e-5);
    const float *h = opf(c, "h"), *stat = opf(c, "stat");
    float *y = opf(c, "y"), *z = opf(c, "z"), *rstd = opf(c, "rstd");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        double r = 1;
        if (norm) { r = 1.0 / sqrt((double)stat[m] + eps); rstd[m] = (float)r; }
        const float *hr = h + m * ldh;
        float *yr = y ? y + m * ldy : NULL, *zr = z + m * ldz;
        for (int64_t j = 0; j < cols; j++) {
            float yv = norm ? (float)(hr[j] * r) : hr[j];
            if (yr) yr[j] = yv;
            zr[j] = act ? yv / (1.0f + fexp(-yv)) : yv;
        }
    }
    return 0;
}

static int k_bottleneck_act_bwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), norm = ci(c, "norm", 0), act = ci(c, "act", 0);
    int64_t ldh = ci(c, "ldh", cols), ldy = ci(c, "ldy", cols), ldz = ci(c, "ldz", cols), lddh = ci(c, "lddh", cols);
    int64_t acc = ci(c, "acc", 0);
    double divisor = cf(c, "divisor", 1);
    const float *h = opf(c, "h"), *y = opf(c, "y"), *rstd = opf(c, "rstd"), *rho = opf(c, "rho"), *dz = opf(c, "dz");
    float *dh = opf(c, "dh"), *dstat = opf(c, "dstat");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        double dot = 0, scale = norm ? (double)rstd[m] * rho[m] : 1.0;
        for (int64_t j = 0; j < cols; j++) {
            double dy = dz[m * ldz + j] * act_df((int)act, y[m * ldy + j]);
            if (norm) dot += dy * h[m * ldh + j];
            float *o = &dh[m * lddh + j];
            *o = (float)(acc ? *o + dy * scale : dy * scale);
        }
        if (norm) {
            double r = rstd[m];
            dstat[m] = (float)(-dot * r * r * r / (2.0 * divisor));
        }
    }
    return 0;
}

static int k_online_norm_bwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldx = ci(c, "ldx", cols), acc = ci(c, "acc", 0);
    int64_t lddxh = ci(c, "lddxhat", cols), lddx = ci(c, "lddx", ldx);
    const float *x = opf(c, "x"), *gamma = opf(c, "gamma"), *rho = opf(c, "rho"), *dxhat = opf(c, "dxhat"), *dstat = opf(c, "dstat");
    float *dx = opf(c, "dx"), *dgamma = opf(c, "dgamma");
    double *dg = NULL;
    if (dgamma && !(dg = calloc((size_t)cols, sizeof *dg))) return kfail(c, "out of memory");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        double inv = 1.0 / rho[m], ds = dstat[m];
        for (int64_t j = 0; j < cols; j++) {
            double xv = x[m * ldx + j], dxh = dxhat[m * lddxh + j];
            double g = gamma[j] * dxh * inv + 2.0 * xv * ds;
            float *o = &dx[m * lddx + j];
            *o = (float)(acc ? *o + g : g);
        }
    }
    if (dg) {   /* column sums over the rows in row order, columns split over the threads */
        #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (int64_t j = 0; j < cols; j++) {
            double s = 0;
            for (int64_t m = 0; m < rows; m++) s += (double)x[m * ldx + j] * dxhat[m * lddxh + j] * (1.0 / rho[m]);
            dgamma[j] += (float)s;
        }
    }
    free(dg);
    return 0;
}

/* RoPE tables cos/sin(pos * theta^(-2i/hd)), [seq][hd/2] in double, made once per (seq, head_dim,
 * theta) for the life of the process (a plan needs one or two) and shared by the ranks. */
typedef struct { int64_t seq, hd; double theta; double *cs, *sn; } RopeTable;
static RopeTable rope_tables[16];
static int rope_ntables;
static pthread_mutex_t rope_mu = PTHREAD_MUTEX_INITIALIZER;

static const RopeTable *rope_table(int64_t seq, int64_t hd, double theta) {
    const RopeTable *found = NULL;
    pthread_mutex_lock(&rope_mu);
    for (int i = 0; i < rope_ntables && !found; i++)
        if (rope_tables[i].seq == seq && rope_tables[i].hd == hd && rope_tables[i].theta == theta) found = &rope_tables[i];
    if (!found && rope_ntables < 16) {
        int64_t half = hd / 2;
        size_t n = (size_t)(seq * half > 0 ? seq * half : 1);
        double *cs = malloc(n * sizeof *cs), *sn = malloc(n * sizeof *sn);
        if (cs && sn) {
            for (int64_t i = 0; i < half; i++) {
                double inv_freq = pow(theta, -2.0 * (double)i / (double)hd);
                for (int64_t p = 0; p < seq; p++) {
                    double f = (double)p * inv_freq;
                    cs[p * half + i] = cos(f); sn[p * half + i] = sin(f);
                }
            }
            rope_tables[rope_ntables] = (RopeTable){seq, hd, theta, cs, sn};
            found = &rope_tables[rope_ntables++];
        } else { free(cs); free(sn); }
    }
    pthread_mutex_unlock(&rope_mu);
    return found;
}

static int k_rope(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), heads = ci(c, "heads", 0), hd = ci(c, "head_dim", 0), seq = ci(c, "seq", 1);
    int64_t ldx = ci(c, "ldx", heads * hd), inverse = ci(c, "inverse", 0);
    double theta = cf(c, "theta", 10000);
    float *x = opf(c, "x");
    int64_t half = hd / 2;
    if (seq < 1) return kfail(c, "seq must be at least 1");
    const RopeTable *t = rope_table(seq, hd, theta);
    if (!t) return kfail(c, "out of memory (RoPE table)");
    double sg = inverse ? -1.0 : 1.0;
    int nt = nthr(rows * heads * hd);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        const double *cr = t->cs + (m % seq) * half, *sr = t->sn + (m % seq) * half;
        for (int64_t h = 0; h < heads; h++) {
            float *base = x + m * ldx + h * hd;
            for (int64_t i = 0; i < half; i++) {
                double cs = cr[i], sn = sg * sr[i];
                double a = base[i], b = base[i + half];
                base[i] = (float)(a * cs - b * sn);
                base[i + half] = (float)(b * cs + a * sn);
            }
        }
    }
    return 0;
}

typedef struct {
    int64_t batch, seq, heads, kvh, hd, ldq, ldk, ldv, ldo;
    double scale;
} AttnDims;

static AttnDims attn_dims(const KCtx *c) {
    AttnDims d;
    d.batch = ci(c, "batch", 0); d.seq = ci(c, "seq", 0); d.heads = ci(c, "heads", 0);
    d.kvh = ci(c, "kv_heads", d.heads); d.hd = ci(c, "head_dim", 0);
    d.ldq = ci(c, "ldq", d.heads * d.hd); d.ldk = ci(c, "ldk", d.kvh * d.hd);
    d.ldv = ci(c, "ldv", d.kvh * d.hd); d.ldo = ci(c, "ldo", d.heads * d.hd);
    d.scale = cf(c, "scale", 1.0 / sqrt((double)d.hd));
    return d;
}

/* Causal attention per (batch, head) as GEMMs over blocks of ATT_BLOCK query rows: rows i0..i1-1
 * need keys 0..i1-1 only, so the masked blocks above the diagonal are never computed. S = scale Q
 * K^T, P = softmax over j <= i (fp32 exp, row sums in double), out = P V. */
#define ATT_BLOCK 64

/* rows i0..i0+nr-1 of the scores, each of length ld = i1 (row r is query i0 + r) */
static void causal_probs(float *S, int64_t nr, int64_t ld, int64_t i0, const float *lse_row, float *lse_out) {
    int nt = nthr(nr * ld);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t r = 0; r < nr; r++) {
        int64_t i = i0 + r;
        float *row = S + r * ld;
        if (lse_row) {   /* backward: P from the saved log-sum-exp */
            float l = lse_row[r];
            for (int64_t j = 0; j <= i; j++) row[j] = fexp(row[j] - l);
        } else {
            float mx = maxf_row(row, i + 1);
            for (int64_t j = 0; j <= i; j++) row[j] = fexp(row[j] - mx);
            double sum = sum8(row, i + 1);
            float inv = (float)(1.0 / sum);
            for (int64_t j = 0; j <= i; j++) row[j] *= inv;
            lse_out[r] = (float)(mx + log(sum));
        }
        for (int64_t j = i + 1; j < ld; j++) row[j] = 0;
    }
}

static int k_attention_fwd(const KCtx *c) {
    AttnDims d = attn_dims(c);
    const float *q = opf(c, "q"), *k = opf(c, "k"), *v = opf(c, "v");
    float *out = opf(c, "out"), *lse = opf(c, "lse");
    float *S = malloc((size_t)(ATT_BLOCK * d.seq) * sizeof *S);
    if (!S) return kfail(c, "out of memory (block x seq scores)");
    int64_t group = d.heads / d.kvh;
    for (int64_t b = 0; b < d.batch; b++)
        for (int64_t h = 0; h < d.heads; h++) {
            int64_t kh = h / group;
            const float *Q = q + b * d.seq * d.ldq + h * d.hd, *K = k + b * d.seq * d.ldk + kh * d.hd;
            const float *V = v + b * d.seq * d.ldv + kh * d.hd;
            for (int64_t i0 = 0; i0 < d.seq; i0 += ATT_BLOCK) {
                int64_t i1 = i0 + ATT_BLOCK < d.seq ? i0 + ATT_BLOCK : d.seq, nr = i1 - i0;
                gemm_rm(0, 1, (int)nr, (int)i1, (int)d.hd, (float)d.scale, Q + i0 * d.ldq,
                            (int)d.ldq, K, (int)d.ldk, 0.0f, S, (int)i1);
                causal_probs(S, nr, i1, i0, NULL, lse + (b * d.heads + h) * d.seq + i0);
                gemm_rm(0, 0, (int)nr, (int)d.hd, (int)i1, 1.0f, S, (int)i1, V,
                            (int)d.ldv, 0.0f, out + (b * d.seq + i0) * d.ldo + h * d.hd, (int)d.ldo);
            }
        }
    free(S);
    return 0;
}

static int k_attention_bwd(const KCtx *c) {
    AttnDims d = attn_dims(c);
    int64_t lddo = ci(c, "lddo", d.ldo), lddq = ci(c, "lddq", d.ldq), lddk = ci(c, "lddk", d.ldk), lddv = ci(c, "lddv", d.ldv);
    const float *q = opf(c, "q"), *k = opf(c, "k"), *v = opf(c, "v"), *dout = opf(c, "dout"), *lse = opf(c, "lse");
    float *dq = opf(c, "dq"), *dk = opf(c, "dk"), *dv = opf(c, "dv");
    size_t ss = (size_t)(ATT_BLOCK * d.seq);
    float *P = malloc(ss * sizeof *P), *dS = malloc(ss * sizeof *dS);
    if (!P || !dS) { free(P); free(dS); return kfail(c, "out of memory (block x seq scores)"); }
    int64_t group = d.heads / d.kvh;
    int hd = (int)d.hd;
    float sc = (float)d.scale;
    for (int64_t b = 0; b < d.batch; b++)
        for (int64_t kh = 0; kh < d.kvh; kh++) {
            const float *K = k + b * d.seq * d.ldk + kh * d.hd, *V = v + b * d.seq * d.ldv + kh * d.hd;
            float *dK = dk + b * d.seq * lddk + kh * d.hd, *dV = dv + b * d.seq * lddv + kh * d.hd;
            for (int64_t j = 0; j < d.seq; j++) {
                memset(dK + j * lddk, 0, (size_t)d.hd * sizeof *dK);
                memset(dV + j * lddv, 0, (size_t)d.hd * sizeof *dV);
            }
            for (int64_t h = kh * group; h < (kh + 1) * group; h++)
                for (int64_t i0 = 0; i0 < d.seq; i0 += ATT_BLOCK) {
                    int64_t i1 = i0 + ATT_BLOCK < d.seq ? i0 + ATT_BLOCK : d.seq, nr = i1 - i0;
                    int n = (int)i1, m = (int)nr;
                    const float *Q = q + (b * d.seq + i0) * d.ldq + h * d.hd, *dO = dout + (b * d.seq + i0) * lddo + h * d.hd;
                    gemm_rm(0, 1, m, n, hd, sc, Q, (int)d.ldq, K, (int)d.ldk, 0.0f, P, n);
                    causal_probs(P, nr, i1, i0, lse + (b * d.heads + h) * d.seq + i0, NULL);
                    gemm_rm(0, 1, m, n, hd, 1.0f, dO, (int)lddo, V, (int)d.ldv, 0.0f, dS, n);
                    int nt = nthr(nr * i1);
                    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
                    for (int64_t r = 0; r < nr; r++) {   /* dS = P (dP - D) scale, D_i = sum_j P_ij dP_ij */
                        int64_t i = i0 + r;
                        float *pr = P + r * i1, *dr = dS + r * i1;
                        float D = (float)dot8(pr, dr, i + 1);
                        for (int64_t j = 0; j <= i; j++) dr[j] = pr[j] * (dr[j] - D) * sc;
                        for (int64_t j = i + 1; j < i1; j++) dr[j] = 0.0f;
                    }
                    gemm_rm(0, 0, m, hd, n, 1.0f, dS, n, K, (int)d.ldk, 0.0f,
                                dq + (b * d.seq + i0) * lddq + h * d.hd, (int)lddq);
                    gemm_rm(1, 0, n, hd, m, 1.0f, dS, n, Q, (int)d.ldq, 1.0f, dK, (int)lddk);
                    gemm_rm(1, 0, n, hd, m, 1.0f, P, n, dO, (int)lddo, 1.0f, dV, (int)lddv);
                }
        }
    free(P); free(dS);
    return 0;
}

static int k_glu(const KCtx *c, int bwd) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), act = ci(c, "act", 0);
    int64_t ldg = ci(c, "ldg", cols), ldu = ci(c, "ldu", cols), ldo = ci(c, "ldo", cols);
    int64_t lddg = ci(c, "lddg", cols), lddu = ci(c, "lddu", cols);
    const float *gate = opf(c, "gate"), *up = opf(c, "up");
    float *out = opf(c, bwd ? "dout" : "out"), *dgate = opf(c, "dgate"), *dup = opf(c, "dup");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        const float *gr = gate + m * ldg, *ur = up + m * ldu;
        float *o = out + m * ldo;
        if (!bwd) {
            if (act) for (int64_t j = 0; j < cols; j++) o[j] = gr[j] / (1.0f + fexp(-gr[j])) * ur[j];
            else for (int64_t j = 0; j < cols; j++) o[j] = gr[j] * ur[j];
            continue;
        }
        float *dg = dgate + m * lddg, *du = dup + m * lddu;
        for (int64_t j = 0; j < cols; j++) {
            float g = gr[j], s = act ? 1.0f / (1.0f + fexp(-g)) : 1.0f;
            float a = act ? g * s : g, da = act ? s * (1.0f + g * (1.0f - s)) : 1.0f;
            dg[j] = o[j] * ur[j] * da;
            du[j] = o[j] * a;
        }
    }
    return 0;
}

static int k_add(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0);
    int64_t lda = ci(c, "lda", cols), ldb = ci(c, "ldb", cols), ldo = ci(c, "ldo", cols);
    const float *a = opf(c, "a"), *b = opf(c, "b");
    float *out = opf(c, "out");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) out[m * ldo + j] = a[m * lda + j] + b[m * ldb + j];
    return 0;
}

static int k_copy(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), lds = ci(c, "lds", cols), ldd = ci(c, "ldd", cols);
    int64_t acc = ci(c, "acc", 0);
    const float *src = opf(c, "src");
    float *dst = opf(c, "dst");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        const float *sr = src + m * lds;
        float *o = dst + m * ldd;
        if (acc) for (int64_t j = 0; j < cols; j++) o[j] += sr[j];
        else memcpy(o, sr, (size_t)cols * sizeof *o);
    }
    return 0;
}

static int k_xent_fwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldl = ci(c, "ldl", cols), voff = ci(c, "vocab_offset", 0);
    const float *logits = opf(c, "logits");
    const int32_t *targets = opi(c, "targets");
    float *stats = opf(c, "stats");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        const float *l = logits + m * ldl;
        float mx = maxf_row(l, cols), e[256];
        double se = 0, tl = 0, lane[8] = {0};
        for (int64_t j0 = 0; j0 < cols; j0 += 256) {   /* exp in blocks of 256, summed in 8 lanes */
            int64_t n = cols - j0 < 256 ? cols - j0 : 256;
            for (int64_t j = 0; j < n; j++) e[j] = fexp(l[j0 + j] - mx);
            int64_t j = 0;
            for (; j + 8 <= n; j += 8)
                for (int q = 0; q < 8; q++) lane[q] += e[j + q];
            for (; j < n; j++) lane[j & 7] += e[j];
        }
        se = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        int64_t t = (int64_t)targets[m] - voff;
        if (t >= 0 && t < cols) tl = l[t];
        stats[m * 3 + 0] = (float)mx; stats[m * 3 + 1] = (float)se; stats[m * 3 + 2] = (float)tl;
    }
    return 0;
}

static int k_xent_combine(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), tp = ci(c, "tp", 1);
    const float *st = opf(c, "stats_all");
    float *lse = opf(c, "lse"), *loss = opf(c, "loss");
    double total = 0;
    for (int64_t m = 0; m < rows; m++) {
        const float *s = st + m * 3 * tp;
        double g = -INFINITY, sum = 0, tl = 0;
        for (int64_t r = 0; r < tp; r++) if (s[3 * r] > g) g = s[3 * r];
        for (int64_t r = 0; r < tp; r++) { sum += s[3 * r + 1] * exp((double)s[3 * r] - g); tl += s[3 * r + 2]; }
        double l = g + log(sum);
        lse[m] = (float)l;
        total += l - tl;
    }
    loss[0] = (float)(total / (double)rows);
    return 0;
}

static int k_xent_bwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldl = ci(c, "ldl", cols), voff = ci(c, "vocab_offset", 0);
    int64_t lddl = ci(c, "lddl", ldl);
    double scale = cf(c, "scale", 1);
    const float *logits = opf(c, "logits"), *lse = opf(c, "lse");
    const int32_t *targets = opi(c, "targets");
    float *dl = opf(c, "dlogits");
    int nt = nthr(rows * cols);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t m = 0; m < rows; m++) {
        const float *l = logits + m * ldl;
        float *o = dl + m * lddl, lm = lse[m], sc = (float)scale;
        for (int64_t j = 0; j < cols; j++) o[j] = fexp(l[j] - lm) * sc;
        int64_t t = (int64_t)targets[m] - voff;
        if (t >= 0 && t < cols) o[t] = (float)(((double)fexp(l[t] - lm) - 1.0) * scale);
    }
    return 0;
}

/* ---- MoE (docs/plan-format.md, kinds moe_*): routing indices travel as exact integers in fp32 ---- */

/* Router: softmax over experts, top-k (ties to the lower index), gates, capacity slots in token
 * order then choice order, the inverse slot map and the load-balance statistics. */
static int k_moe_router(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), E = ci(c, "experts", 0), K = ci(c, "top_k", 1), cap = ci(c, "capacity", 0);
    int64_t ldl = ci(c, "ldl", E), norm = ci(c, "norm", 1);
    double coef = cf(c, "coef", 0), zcoef = cf(c, "zcoef", 0), zsum = 0;
    const float *logits = opf(c, "logits");
    float *probs = opf(c, "probs"), *sel = opf(c, "sel"), *gates = opf(c, "gates"), *slot = opf(c, "slot");
    float *src = opf(c, "src"), *aux = opf(c, "aux");
    if (E < 1 || K < 1 || K > E || cap < 1) return kfail(c, "experts, top_k, capacity must satisfy 1 <= top_k <= experts, capacity >= 1");
    int64_t *count = calloc((size_t)E, sizeof *count), *routed = calloc((size_t)E, sizeof *routed);
    double *psum = calloc((size_t)E, sizeof *psum);
    unsigned char *taken = malloc((size_t)E);
    if (!count || !routed || !psum || !taken) { free(count); free(routed); free(psum); free(taken); return kfail(c, "out of memory"); }
    for (int64_t r = 0; r < E * cap; r++) src[r] = -1.0f;
    for (int64_t m = 0; m < rows; m++) {
        const float *l = logits + m * ldl;
        float *p = probs + m * E;
        double mx = -INFINITY, se = 0;
        for (int64_t e = 0; e < E; e++) if (l[e] > mx) mx = l[e];
        for (int64_t e = 0; e < E; e++) se += exp((double)l[e] - mx);
        for (int64_t e = 0; e < E; e++) { p[e] = (float)(exp((double)l[e] - mx) / se); psum[e] += p[e]; }
        if (zcoef > 0) {   /* router z-loss: each token's logsumexp, kept for the backward */
            double lse = mx + log(se);
            aux[2 + 2 * E + m] = (float)lse;
            zsum += lse * lse;
        }
        memset(taken, 0, (size_t)E);
        double chosen = 0;
        for (int64_t k = 0; k < K; k++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
            taken[best] = 1;
            sel[m * K + k] = (float)best;
            chosen += p[best];
            routed[best]++;
            if (count[best] < cap) {
                slot[m * K + k] = (float)count[best];
                src[best * cap + count[best]] = (float)(m * K + k);
                count[best]++;
            } else slot[m * K + k] = -1.0f;
        }
        for (int64_t k = 0; k < K; k++) {
            double pe = p[(int64_t)sel[m * K + k]];
            gates[m * K + k] = (float)(norm ? pe / chosen : pe);
        }
    }
    double a = 0;
    for (int64_t e = 0; e < E; e++) {
        double f = (double)routed[e] / ((double)rows * K), P = psum[e] / (double)rows;
        aux[1 + e] = (float)f; aux[1 + E + e] = (float)P;
        a += f * P;
    }
    aux[0] = (float)(coef * (double)E * a);
    if (zcoef > 0) {
        double z = zcoef * zsum / (double)rows;
        aux[1 + 2 * E] = (float)z;
        aux[0] = (float)(coef * (double)E * a + z);
    }
    free(count); free(routed); free(psum); free(taken);
    return 0;
}

/* Router backward: gates (renormalised or not) and the load-balance loss back to the logits. */
static int k_moe_router_bwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), E = ci(c, "experts", 0), K = ci(c, "top_k", 1), norm = ci(c, "norm", 1);
    int64_t lddl = ci(c, "lddl", E), acc = ci(c, "acc", 0);
    double coef = cf(c, "coef", 0), scale = cf(c, "scale", 1), zcoef = cf(c, "zcoef", 0);
    const float *probs = opf(c, "probs"), *sel = opf(c, "sel"), *gates = opf(c, "gates"), *aux = opf(c, "aux");
    const float *dgates = opf(c, "dgates");
    float *dl = opf(c, "dlogits");
    double *dp = malloc((size_t)E * sizeof *dp);
    if (!dp) return kfail(c, "out of memory");
    for (int64_t m = 0; m < rows; m++) {
        const float *p = probs + m * E;
        for (int64_t e = 0; e < E; e++) dp[e] = scale * coef * (double)E * aux[1 + e] / (double)rows;
        double S = 0, gd = 0;
        for (int64_t k = 0; k < K; k++) {
            S += p[(int64_t)sel[m * K + k]];
            gd += (double)dgates[m * K + k] * gates[m * K + k];
        }
        for (int64_t k = 0; k < K; k++) {
            int64_t e = (int64_t)sel[m * K + k];
            dp[e] += norm ? ((double)dgates[m * K + k] - gd) / S : (double)dgates[m * K + k];
        }
        double dot = 0;
        for (int64_t e = 0; e < E; e++) dot += (double)p[e] * dp[e];
        float *o = dl + m * lddl;
        /* z-loss zcoef/rows * sum_m lse_m^2: d/dlogit_e = 2 zcoef lse_m p_e / rows */
        double zg = zcoef > 0 ? scale * 2 * zcoef * (double)aux[2 + 2 * E + m] / (double)rows : 0;
        for (int64_t e = 0; e < E; e++) {
            double v = p[e] * (dp[e] - dot) + zg * p[e];
            o[e] = (float)(acc ? o[e] + v : v);
        }
    }
    free(dp);
    return 0;
}

/* Dispatch: slot row r of the expert input is the row of the token that fills it, or zeros. */
static int k_moe_dispatch(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), K = ci(c, "top_k", 1);
    int64_t ldx = ci(c, "ldx", cols), ldo = ci(c, "ldo", cols);
    const float *x = opf(c, "x"), *src = opf(c, "src");
    float *out = opf(c, "out");
    for (int64_t r = 0; r < rows; r++) {
        float *o = out + r * ldo;
        if (src[r] < 0) { memset(o, 0, (size_t)cols * sizeof *o); continue; }
        memcpy(o, x + ((int64_t)src[r] / K) * ldx, (size_t)cols * sizeof *o);
    }
    return 0;
}

/* Dispatch backward: each token gathers the gradients of the slots it filled. */
static int k_moe_dispatch_bwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), K = ci(c, "top_k", 1), cap = ci(c, "capacity", 0);
    int64_t ldo = ci(c, "ldo", cols), lddx = ci(c, "lddx", cols), acc = ci(c, "acc", 0);
    const float *dout = opf(c, "dout"), *sel = opf(c, "sel"), *slot = opf(c, "slot");
    float *dx = opf(c, "dx");
    for (int64_t m = 0; m < rows; m++) {
        float *o = dx + m * lddx;
        for (int64_t j = 0; j < cols; j++) {
            double v = 0;
            for (int64_t k = 0; k < K; k++) {
                if (slot[m * K + k] < 0) continue;
                v += dout[((int64_t)sel[m * K + k] * cap + (int64_t)slot[m * K + k]) * ldo + j];
            }
            o[j] = (float)(acc ? o[j] + v : v);
        }
    }
    return 0;
}

/* Combine: each token sums its kept experts' outputs weighted by its gates. */
static int k_moe_combine(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), K = ci(c, "top_k", 1), cap = ci(c, "capacity", 0);
    int64_t lde = ci(c, "lde", cols), ldo = ci(c, "ldo", cols);
    const float *eo = opf(c, "eo"), *sel = opf(c, "sel"), *slot = opf(c, "slot"), *gates = opf(c, "gates");
    float *out = opf(c, "out");
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) {
            double v = 0;
            for (int64_t k = 0; k < K; k++) {
                if (slot[m * K + k] < 0) continue;
                v += (double)gates[m * K + k] * eo[((int64_t)sel[m * K + k] * cap + (int64_t)slot[m * K + k]) * lde + j];
            }
            out[m * ldo + j] = (float)v;
        }
    return 0;
}

/* Combine backward, expert side: slot row r gets its token's output gradient times its gate. */
static int k_moe_combine_bwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), K = ci(c, "top_k", 1);
    int64_t ldo = ci(c, "ldo", cols), ldde = ci(c, "ldde", cols);
    const float *dout = opf(c, "dout"), *src = opf(c, "src"), *gates = opf(c, "gates");
    float *de = opf(c, "deo");
    for (int64_t r = 0; r < rows; r++) {
        float *o = de + r * ldde;
        if (src[r] < 0) { memset(o, 0, (size_t)cols * sizeof *o); continue; }
        int64_t tc = (int64_t)src[r];
        const float *d = dout + (tc / K) * ldo;
        for (int64_t j = 0; j < cols; j++) o[j] = (float)((double)gates[tc] * d[j]);
    }
    return 0;
}

/* Combine backward, gate side: dgates[m, k] = <dout[m], expert output of that choice> (local
 * columns: a partial sum over the TP ranks). */
static int k_moe_gates_bwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), K = ci(c, "top_k", 1), cap = ci(c, "capacity", 0);
    int64_t ldo = ci(c, "ldo", cols), lde = ci(c, "lde", cols);
    const float *dout = opf(c, "dout"), *eo = opf(c, "eo"), *sel = opf(c, "sel"), *slot = opf(c, "slot");
    float *dg = opf(c, "dgates");
    for (int64_t m = 0; m < rows; m++)
        for (int64_t k = 0; k < K; k++) {
            double v = 0;
            if (slot[m * K + k] >= 0) {
                const float *e = eo + ((int64_t)sel[m * K + k] * cap + (int64_t)slot[m * K + k]) * lde;
                for (int64_t j = 0; j < cols; j++) v += (double)dout[m * ldo + j] * e[j];
            }
            dg[m * K + k] = (float)v;
        }
    return 0;
}

/* The load-balance loss joins the model's loss. */
static int k_moe_aux_add(const KCtx *c) {
    const float *aux = opf(c, "aux");
    float *loss = opf(c, "loss");
    loss[0] = (float)((double)loss[0] + aux[0]);
    return 0;
}

/* The body of k's catalog kind (common/kernel_catalog.h). */
int cpu_kernel_run(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen) {
    KCtx c = {k, ops, rank, err, errlen};
    switch (kcat_find(k->kind)) {
    case KK_EMBEDDING_FWD: return k_embedding(&c, 0);
    case KK_EMBEDDING_BWD: return k_embedding(&c, 1);
    case KK_RMSNORM_FWD: return k_rmsnorm_fwd(&c);
    case KK_RMSNORM_BWD: return k_rmsnorm_bwd(&c);
    case KK_SUMSQ: return k_sumsq(&c);
    case KK_ONLINE_NORM_FWD: return k_online_norm_fwd(&c);
    case KK_ONLINE_NORM_RESCALE: return k_online_norm_rescale(&c);
    case KK_BOTTLENECK_ACT: return k_bottleneck_act(&c);
    case KK_BOTTLENECK_ACT_BWD: return k_bottleneck_act_bwd(&c);
    case KK_ONLINE_NORM_BWD: return k_online_norm_bwd(&c);
    case KK_ROPE: return k_rope(&c);
    case KK_ATTENTION_FWD: return k_attention_fwd(&c);
    case KK_ATTENTION_BWD: return k_attention_bwd(&c);
    case KK_GLU_FWD: return k_glu(&c, 0);
    case KK_GLU_BWD: return k_glu(&c, 1);
    case KK_ADD: return k_add(&c);
    case KK_COPY: return k_copy(&c);
    case KK_XENT_FWD: return k_xent_fwd(&c);
    case KK_XENT_COMBINE: return k_xent_combine(&c);
    case KK_XENT_BWD: return k_xent_bwd(&c);
    case KK_MOE_ROUTER: return k_moe_router(&c);
    case KK_MOE_ROUTER_BWD: return k_moe_router_bwd(&c);
    case KK_MOE_DISPATCH: return k_moe_dispatch(&c);
    case KK_MOE_DISPATCH_BWD: return k_moe_dispatch_bwd(&c);
    case KK_MOE_COMBINE: return k_moe_combine(&c);
    case KK_MOE_COMBINE_BWD: return k_moe_combine_bwd(&c);
    case KK_MOE_GATES_BWD: return k_moe_gates_bwd(&c);
    case KK_MOE_AUX_ADD: return k_moe_aux_add(&c);
    case KK_ROPE_AT: case KK_KV_APPEND: case KK_ATTENTION_DECODE:   /* runtime/cpu_infer.c */
        return cpu_infer_kernel_run(k, ops, rank, err, errlen);
    default: return kfail(&c, "unknown kernel kind");
    }
}
