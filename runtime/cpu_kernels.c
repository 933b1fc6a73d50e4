/* cpu_kernels.c: the fp32 reference of every kernel kind of the catalog (docs/plan-format.md),
 * written as directly as the math allows, with double accumulation in reductions and a fixed
 * loop order so results are deterministic. The CUDA kernels are checked against these. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>          // defines: cblas_sgemm
#include "runtime/cpu.h"

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

static double logistic(double y) { return 1.0 / (1.0 + exp(-y)); }
static double act_f(int act, double y) { return act ? y * logistic(y) : y; }
static double act_df(int act, double y) {
    if (!act) return 1.0;
    double s = logistic(y);
    return s * (1.0 + y * (1.0 - s));
}

static int k_embedding(const KCtx *c, int bwd) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), vocab = ci(c, "vocab", 0), ldo = ci(c, "ldo", cols);
    const int32_t *tok = opi(c, "tokens");
    float *table = opf(c, bwd ? "dtable" : "table"), *out = opf(c, bwd ? "dout" : "out");
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
    for (int64_t m = 0; m < rows; m++) {
        const float *xr = x + m * ldx;
        double S = 0;
        if (sumsq) S = sumsq[m];
        else for (int64_t j = 0; j < cols; j++) S += (double)xr[j] * xr[j];
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
            if (dg) dg[j] += (double)dr[j] * xr[j] * r;
            o[j] = (float)(acc ? o[j] + g : g);
        }
    }
    if (dg) for (int64_t j = 0; j < cols; j++) dgamma[j] += (float)dg[j];
    free(dg);
    return 0;
}

static int k_sumsq(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldx = ci(c, "ldx", cols);
    const float *x = opf(c, "x");
    float *out = opf(c, "out");
    for (int64_t m = 0; m < rows; m++) {
        double s = 0;
        for (int64_t j = 0; j < cols; j++) s += (double)x[m * ldx + j] * x[m * ldx + j];
        out[m] = (float)s;
    }
    return 0;
}

static int k_online_norm_fwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldx = ci(c, "ldx", cols), ldxh = ci(c, "ldxhat", cols);
    int64_t ldstat = ci(c, "ldstat", 1);
    double divisor = cf(c, "divisor", (double)cols), eps = cf(c, "eps", 1e-5);
    const float *x = opf(c, "x"), *gamma = opf(c, "gamma");
    float *xhat = opf(c, "xhat"), *rho = opf(c, "rho"), *stat = opf(c, "stat");
    for (int64_t m = 0; m < rows; m++) {
        const float *xr = x + m * ldx;
        double s = 0;
        for (int64_t j = 0; j < cols; j++) s += (double)xr[j] * xr[j];
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
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) h[m * ldh + j] *= rho[m];
    return 0;
}

static int k_bottleneck_act(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), norm = ci(c, "norm", 0), act = ci(c, "act", 0);
    int64_t ldh = ci(c, "ldh", cols + (norm ? 1 : 0)), ldy = ci(c, "ldy", cols), ldz = ci(c, "ldz", cols);
    double eps = cf(c, "eps", 1e-5);
    const float *h = opf(c, "h");
    float *y = opf(c, "y"), *z = opf(c, "z"), *rstd = opf(c, "rstd");
    for (int64_t m = 0; m < rows; m++) {
        double r = 1;
        if (norm) { r = 1.0 / sqrt((double)h[m * ldh + cols] + eps); rstd[m] = (float)r; }
        for (int64_t j = 0; j < cols; j++) {
            float yv = norm ? (float)(h[m * ldh + j] * r) : h[m * ldh + j];
            if (y) y[m * ldy + j] = yv;
            z[m * ldz + j] = (float)act_f((int)act, yv);
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
    for (int64_t m = 0; m < rows; m++) {
        double inv = 1.0 / rho[m], ds = dstat[m];
        for (int64_t j = 0; j < cols; j++) {
            double xv = x[m * ldx + j], dxh = dxhat[m * lddxh + j];
            double g = gamma[j] * dxh * inv + 2.0 * xv * ds;
            if (dg) dg[j] += xv * dxh * inv;
            float *o = &dx[m * lddx + j];
            *o = (float)(acc ? *o + g : g);
        }
    }
    if (dg) for (int64_t j = 0; j < cols; j++) dgamma[j] += (float)dg[j];
    free(dg);
    return 0;
}

static int k_rope(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), heads = ci(c, "heads", 0), hd = ci(c, "head_dim", 0), seq = ci(c, "seq", 1);
    int64_t ldx = ci(c, "ldx", heads * hd), inverse = ci(c, "inverse", 0);
    double theta = cf(c, "theta", 10000);
    float *x = opf(c, "x");
    int64_t half = hd / 2;
    double *inv_freq = malloc((size_t)(half > 0 ? half : 1) * sizeof *inv_freq);
    if (!inv_freq) return kfail(c, "out of memory");
    for (int64_t i = 0; i < half; i++) inv_freq[i] = pow(theta, -2.0 * (double)i / (double)hd);
    for (int64_t m = 0; m < rows; m++) {
        double pos = (double)(m % seq);
        for (int64_t i = 0; i < half; i++) {
            double f = pos * inv_freq[i];
            double cs = cos(f), sn = inverse ? -sin(f) : sin(f);
            for (int64_t h = 0; h < heads; h++) {
                float *base = x + m * ldx + h * hd;
                double a = base[i], b = base[i + half];
                base[i] = (float)(a * cs - b * sn);
                base[i + half] = (float)(b * cs + a * sn);
            }
        }
    }
    free(inv_freq);
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

/* Causal attention per (batch, head) as GEMMs: S = scale Q K^T, P = softmax over j <= i (fp32
 * GEMMs, row statistics in double), out = P V. */
static void causal_probs(float *S, int64_t seq, const float *lse_row, float *lse_out) {
    for (int64_t i = 0; i < seq; i++) {
        float *row = S + i * seq;
        if (lse_row) {   /* backward: P from the saved log-sum-exp */
            double l = lse_row[i];
            for (int64_t j = 0; j <= i; j++) row[j] = (float)exp((double)row[j] - l);
        } else {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= i; j++) if (row[j] > mx) mx = row[j];
            for (int64_t j = 0; j <= i; j++) sum += exp((double)row[j] - mx);
            for (int64_t j = 0; j <= i; j++) row[j] = (float)(exp((double)row[j] - mx) / sum);
            lse_out[i] = (float)(mx + log(sum));
        }
        for (int64_t j = i + 1; j < seq; j++) row[j] = 0;
    }
}

static int k_attention_fwd(const KCtx *c) {
    AttnDims d = attn_dims(c);
    const float *q = opf(c, "q"), *k = opf(c, "k"), *v = opf(c, "v");
    float *out = opf(c, "out"), *lse = opf(c, "lse");
    float *S = malloc((size_t)(d.seq * d.seq) * sizeof *S);
    if (!S) return kfail(c, "out of memory (seq x seq scores)");
    int64_t group = d.heads / d.kvh;
    for (int64_t b = 0; b < d.batch; b++)
        for (int64_t h = 0; h < d.heads; h++) {
            int64_t kh = h / group;
            const float *Q = q + b * d.seq * d.ldq + h * d.hd, *K = k + b * d.seq * d.ldk + kh * d.hd;
            const float *V = v + b * d.seq * d.ldv + kh * d.hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)d.seq, (int)d.seq, (int)d.hd, (float)d.scale, Q, (int)d.ldq,
                        K, (int)d.ldk, 0.0f, S, (int)d.seq);
            causal_probs(S, d.seq, NULL, lse + (b * d.heads + h) * d.seq);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)d.seq, (int)d.hd, (int)d.seq, 1.0f, S, (int)d.seq, V,
                        (int)d.ldv, 0.0f, out + b * d.seq * d.ldo + h * d.hd, (int)d.ldo);
        }
    free(S);
    return 0;
}

static int k_attention_bwd(const KCtx *c) {
    AttnDims d = attn_dims(c);
    int64_t lddo = ci(c, "lddo", d.ldo), lddq = ci(c, "lddq", d.ldq), lddk = ci(c, "lddk", d.ldk), lddv = ci(c, "lddv", d.ldv);
    const float *q = opf(c, "q"), *k = opf(c, "k"), *v = opf(c, "v"), *dout = opf(c, "dout"), *lse = opf(c, "lse");
    float *dq = opf(c, "dq"), *dk = opf(c, "dk"), *dv = opf(c, "dv");
    size_t ss = (size_t)(d.seq * d.seq);
    float *P = malloc(ss * sizeof *P), *dS = malloc(ss * sizeof *dS);
    if (!P || !dS) { free(P); free(dS); return kfail(c, "out of memory (seq x seq scores)"); }
    int64_t group = d.heads / d.kvh;
    int n = (int)d.seq, hd = (int)d.hd;
    for (int64_t b = 0; b < d.batch; b++)
        for (int64_t kh = 0; kh < d.kvh; kh++) {
            const float *K = k + b * d.seq * d.ldk + kh * d.hd, *V = v + b * d.seq * d.ldv + kh * d.hd;
            float *dK = dk + b * d.seq * lddk + kh * d.hd, *dV = dv + b * d.seq * lddv + kh * d.hd;
            for (int64_t j = 0; j < d.seq; j++) {
                memset(dK + j * lddk, 0, (size_t)d.hd * sizeof *dK);
                memset(dV + j * lddv, 0, (size_t)d.hd * sizeof *dV);
            }
            for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
                const float *Q = q + b * d.seq * d.ldq + h * d.hd, *dO = dout + b * d.seq * lddo + h * d.hd;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, (float)d.scale, Q, (int)d.ldq, K, (int)d.ldk, 0.0f, P, n);
                causal_probs(P, d.seq, lse + (b * d.heads + h) * d.seq, NULL);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, 1.0f, dO, (int)lddo, V, (int)d.ldv, 0.0f, dS, n);
                for (int64_t i = 0; i < d.seq; i++) {   /* dS = P (dP - D) scale, D_i = sum_j P_ij dP_ij */
                    float *pr = P + i * d.seq, *dr = dS + i * d.seq;
                    double D = 0;
                    for (int64_t j = 0; j <= i; j++) D += (double)pr[j] * dr[j];
                    for (int64_t j = 0; j < d.seq; j++) dr[j] = j <= i ? (float)(pr[j] * (dr[j] - D) * d.scale) : 0.0f;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, n, 1.0f, dS, n, K, (int)d.ldk, 0.0f,
                            dq + b * d.seq * lddq + h * d.hd, (int)lddq);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hd, n, 1.0f, dS, n, Q, (int)d.ldq, 1.0f, dK, (int)lddk);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hd, n, 1.0f, P, n, dO, (int)lddo, 1.0f, dV, (int)lddv);
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
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) {
            double g = gate[m * ldg + j], u = up[m * ldu + j];
            if (!bwd) { out[m * ldo + j] = (float)(act_f((int)act, g) * u); continue; }
            double d = out[m * ldo + j];
            dgate[m * lddg + j] = (float)(d * u * act_df((int)act, g));
            dup[m * lddu + j] = (float)(d * act_f((int)act, g));
        }
    return 0;
}

static int k_add(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0);
    int64_t lda = ci(c, "lda", cols), ldb = ci(c, "ldb", cols), ldo = ci(c, "ldo", cols);
    const float *a = opf(c, "a"), *b = opf(c, "b");
    float *out = opf(c, "out");
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) out[m * ldo + j] = a[m * lda + j] + b[m * ldb + j];
    return 0;
}

static int k_copy(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), lds = ci(c, "lds", cols), ldd = ci(c, "ldd", cols);
    int64_t acc = ci(c, "acc", 0);
    const float *src = opf(c, "src");
    float *dst = opf(c, "dst");
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) {
            float *o = &dst[m * ldd + j];
            *o = acc ? *o + src[m * lds + j] : src[m * lds + j];
        }
    return 0;
}

static int k_xent_fwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), cols = ci(c, "cols", 0), ldl = ci(c, "ldl", cols), voff = ci(c, "vocab_offset", 0);
    const float *logits = opf(c, "logits");
    const int32_t *targets = opi(c, "targets");
    float *stats = opf(c, "stats");
    for (int64_t m = 0; m < rows; m++) {
        const float *l = logits + m * ldl;
        double mx = -INFINITY, se = 0, tl = 0;
        for (int64_t j = 0; j < cols; j++) if (l[j] > mx) mx = l[j];
        for (int64_t j = 0; j < cols; j++) se += exp((double)l[j] - mx);
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
    for (int64_t m = 0; m < rows; m++)
        for (int64_t j = 0; j < cols; j++) {
            double p = exp((double)logits[m * ldl + j] - lse[m]);
            if (voff + j == targets[m]) p -= 1.0;
            dl[m * lddl + j] = (float)(p * scale);
        }
    return 0;
}

/* ---- MoE (docs/plan-format.md, kinds moe_*): routing indices travel as exact integers in fp32 ---- */

/* Router: softmax over experts, top-k (ties to the lower index), gates, capacity slots in token
 * order then choice order, the inverse slot map and the load-balance statistics. */
static int k_moe_router(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), E = ci(c, "experts", 0), K = ci(c, "top_k", 1), cap = ci(c, "capacity", 0);
    int64_t ldl = ci(c, "ldl", E), norm = ci(c, "norm", 1);
    double coef = cf(c, "coef", 0);
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
    free(count); free(routed); free(psum); free(taken);
    return 0;
}

/* Router backward: gates (renormalised or not) and the load-balance loss back to the logits. */
static int k_moe_router_bwd(const KCtx *c) {
    int64_t rows = ci(c, "rows", 0), E = ci(c, "experts", 0), K = ci(c, "top_k", 1), norm = ci(c, "norm", 1);
    int64_t lddl = ci(c, "lddl", E), acc = ci(c, "acc", 0);
    double coef = cf(c, "coef", 0), scale = cf(c, "scale", 1);
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
        for (int64_t e = 0; e < E; e++) {
            double v = p[e] * (dp[e] - dot);
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

int cpu_kernel_run(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen) {
    KCtx c = {k, ops, rank, err, errlen};
    const char *kind = k->kind;
    if (!strcmp(kind, "embedding_fwd")) return k_embedding(&c, 0);
    if (!strcmp(kind, "embedding_bwd")) return k_embedding(&c, 1);
    if (!strcmp(kind, "rmsnorm_fwd")) return k_rmsnorm_fwd(&c);
    if (!strcmp(kind, "rmsnorm_bwd")) return k_rmsnorm_bwd(&c);
    if (!strcmp(kind, "sumsq")) return k_sumsq(&c);
    if (!strcmp(kind, "online_norm_fwd")) return k_online_norm_fwd(&c);
    if (!strcmp(kind, "online_norm_rescale")) return k_online_norm_rescale(&c);
    if (!strcmp(kind, "bottleneck_act")) return k_bottleneck_act(&c);
    if (!strcmp(kind, "bottleneck_act_bwd")) return k_bottleneck_act_bwd(&c);
    if (!strcmp(kind, "online_norm_bwd")) return k_online_norm_bwd(&c);
    if (!strcmp(kind, "rope")) return k_rope(&c);
    if (!strcmp(kind, "attention_fwd")) return k_attention_fwd(&c);
    if (!strcmp(kind, "attention_bwd")) return k_attention_bwd(&c);
    if (!strcmp(kind, "glu_fwd")) return k_glu(&c, 0);
    if (!strcmp(kind, "glu_bwd")) return k_glu(&c, 1);
    if (!strcmp(kind, "add")) return k_add(&c);
    if (!strcmp(kind, "copy")) return k_copy(&c);
    if (!strcmp(kind, "xent_fwd")) return k_xent_fwd(&c);
    if (!strcmp(kind, "xent_combine")) return k_xent_combine(&c);
    if (!strcmp(kind, "xent_bwd")) return k_xent_bwd(&c);
    if (!strcmp(kind, "moe_router")) return k_moe_router(&c);
    if (!strcmp(kind, "moe_router_bwd")) return k_moe_router_bwd(&c);
    if (!strcmp(kind, "moe_dispatch")) return k_moe_dispatch(&c);
    if (!strcmp(kind, "moe_dispatch_bwd")) return k_moe_dispatch_bwd(&c);
    if (!strcmp(kind, "moe_combine")) return k_moe_combine(&c);
    if (!strcmp(kind, "moe_combine_bwd")) return k_moe_combine_bwd(&c);
    if (!strcmp(kind, "moe_gates_bwd")) return k_moe_gates_bwd(&c);
    if (!strcmp(kind, "moe_aux_add")) return k_moe_aux_add(&c);
    return kfail(&c, "unknown kernel kind");
}
