/* cpu_kernels.c: the fp32 reference of every kernel kind of the catalog (docs/plan-format.md),
 * written as directly as the math allows, with double accumulation in reductions and a fixed
 * loop order so results are deterministic. The CUDA kernels are checked against these. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    for (int64_t m = 0; m < rows; m++) {
        double pos = (double)(m % seq);
        for (int64_t i = 0; i < half; i++) {
            double f = pos * pow(theta, -2.0 * (double)i / (double)hd);
            double cs = cos(f), sn = inverse ? -sin(f) : sin(f);
            for (int64_t h = 0; h < heads; h++) {
                float *base = x + m * ldx + h * hd;
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

static int k_attention_fwd(const KCtx *c) {
    AttnDims d = attn_dims(c);
    const float *q = opf(c, "q"), *k = opf(c, "k"), *v = opf(c, "v");
    float *out = opf(c, "out"), *lse = opf(c, "lse");
    double *sc = malloc((size_t)d.seq * sizeof *sc), *acc = malloc((size_t)d.hd * sizeof *acc);
    if (!sc || !acc) { free(sc); free(acc); return kfail(c, "out of memory"); }
    int64_t group = d.heads / d.kvh;
    for (int64_t b = 0; b < d.batch; b++)
        for (int64_t h = 0; h < d.heads; h++) {
            int64_t kh = h / group;
            for (int64_t i = 0; i < d.seq; i++) {
                const float *qi = q + (b * d.seq + i) * d.ldq + h * d.hd;
                double mx = -INFINITY;
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = k + (b * d.seq + j) * d.ldk + kh * d.hd;
                    double s = 0;
                    for (int64_t e = 0; e < d.hd; e++) s += (double)qi[e] * kj[e];
                    sc[j] = s * d.scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                double sum = 0;
                for (int64_t j = 0; j <= i; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
                for (int64_t e = 0; e < d.hd; e++) acc[e] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *vj = v + (b * d.seq + j) * d.ldv + kh * d.hd;
                    double p = sc[j] / sum;
                    for (int64_t e = 0; e < d.hd; e++) acc[e] += p * vj[e];
                }
                float *oi = out + (b * d.seq + i) * d.ldo + h * d.hd;
                for (int64_t e = 0; e < d.hd; e++) oi[e] = (float)acc[e];
                lse[(b * d.heads + h) * d.seq + i] = (float)(mx + log(sum));
            }
        }
    free(sc); free(acc);
    return 0;
}

static int k_attention_bwd(const KCtx *c) {
    AttnDims d = attn_dims(c);
    int64_t lddo = ci(c, "lddo", d.ldo), lddq = ci(c, "lddq", d.ldq), lddk = ci(c, "lddk", d.ldk), lddv = ci(c, "lddv", d.ldv);
    const float *q = opf(c, "q"), *k = opf(c, "k"), *v = opf(c, "v"), *dout = opf(c, "dout"), *lse = opf(c, "lse");
    float *dq = opf(c, "dq"), *dk = opf(c, "dk"), *dv = opf(c, "dv");
    size_t kvn = (size_t)(d.seq * d.hd);
    double *p = malloc((size_t)d.seq * sizeof *p), *dp = malloc((size_t)d.seq * sizeof *dp);
    double *dka = malloc(kvn * sizeof *dka), *dva = malloc(kvn * sizeof *dva), *dqa = malloc((size_t)d.hd * sizeof *dqa);
    if (!p || !dp || !dka || !dva || !dqa) { free(p); free(dp); free(dka); free(dva); free(dqa); return kfail(c, "out of memory"); }
    int64_t group = d.heads / d.kvh;
    for (int64_t b = 0; b < d.batch; b++)
        for (int64_t kh = 0; kh < d.kvh; kh++) {
            memset(dka, 0, kvn * sizeof *dka);
            memset(dva, 0, kvn * sizeof *dva);
            for (int64_t h = kh * group; h < (kh + 1) * group; h++)
                for (int64_t i = 0; i < d.seq; i++) {
                    const float *qi = q + (b * d.seq + i) * d.ldq + h * d.hd;
                    const float *doi = dout + (b * d.seq + i) * lddo + h * d.hd;
                    double l = lse[(b * d.heads + h) * d.seq + i], D = 0;
                    for (int64_t j = 0; j <= i; j++) {
                        const float *kj = k + (b * d.seq + j) * d.ldk + kh * d.hd;
                        const float *vj = v + (b * d.seq + j) * d.ldv + kh * d.hd;
                        double s = 0, t = 0;
                        for (int64_t e = 0; e < d.hd; e++) { s += (double)qi[e] * kj[e]; t += (double)doi[e] * vj[e]; }
                        p[j] = exp(s * d.scale - l);
                        dp[j] = t;
                        D += p[j] * t;
                    }
                    for (int64_t e = 0; e < d.hd; e++) dqa[e] = 0;
                    for (int64_t j = 0; j <= i; j++) {
                        const float *kj = k + (b * d.seq + j) * d.ldk + kh * d.hd;
                        double ds = p[j] * (dp[j] - D) * d.scale;
                        double *dkj = dka + j * d.hd, *dvj = dva + j * d.hd;
                        for (int64_t e = 0; e < d.hd; e++) {
                            dqa[e] += ds * kj[e];
                            dkj[e] += ds * qi[e];
                            dvj[e] += p[j] * doi[e];
                        }
                    }
                    float *dqi = dq + (b * d.seq + i) * lddq + h * d.hd;
                    for (int64_t e = 0; e < d.hd; e++) dqi[e] = (float)dqa[e];
                }
            for (int64_t j = 0; j < d.seq; j++) {
                float *dkj = dk + (b * d.seq + j) * lddk + kh * d.hd, *dvj = dv + (b * d.seq + j) * lddv + kh * d.hd;
                for (int64_t e = 0; e < d.hd; e++) { dkj[e] = (float)dka[j * d.hd + e]; dvj[e] = (float)dva[j * d.hd + e]; }
            }
        }
    free(p); free(dp); free(dka); free(dva); free(dqa);
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
    return kfail(&c, "unknown kernel kind");
}
