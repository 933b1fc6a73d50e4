/* cpu_infer.c: the CPU backend's inference kernels (docs/plan-format.md, "Inference kinds"): RoPE at
 * a position read from the plan's pos buffer, appending K/V rows to the KV cache, and attention of
 * new query rows over the cache. Cache layout [kv_heads][max_seq][head_dim] (one rank's heads).
 * pos[0] must lie in the cache; rows whose position falls past it are skipped (padding). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cpu_infer.h"
#include "common/kernel_catalog.h"   // defines: kcat_find, KK_*

static float *op(const KernelArgs *k, void **ops, const char *key) {
    int i = kernel_op(k, key);
    return i < 0 ? NULL : (float *)ops[i];
}

static int fail(const KernelArgs *k, char *err, size_t errlen, const char *msg, long long a, long long b) {
    snprintf(err, errlen, "kernel %s (%s): ", k->kind, k->name);
    size_t n = strlen(err);
    snprintf(err + n, errlen > n ? errlen - n : 0, msg, a, b);
    return -1;
}

/* The first position of this call's rows: pos[0], an exact integer in fp32. */
static int64_t start_pos(const float *pos) { return pos ? (int64_t)pos[0] : -1; }

/* x[m, h*hd + i] rotated by angle (pos+m) * theta^(-2i/hd), pairs (i, i+hd/2): the same double
 * arithmetic as the training rope's tables, so a position gives the same bits either way. */
static int k_rope_at(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen) {
    int64_t rows = kernel_int(k, "rows", rank, 0), heads = kernel_int(k, "heads", rank, 0), hd = kernel_int(k, "head_dim", rank, 0);
    int64_t ldx = kernel_int(k, "ldx", rank, heads * hd), half = hd / 2;
    double theta = kernel_num(k, "theta", 10000);
    float *x = op(k, ops, "x");
    int64_t p0 = start_pos(op(k, ops, "pos"));
    if (p0 < 0) return fail(k, err, errlen, "position %lld is negative%.0lld", p0, 0);
    for (int64_t m = 0; m < rows; m++)
        for (int64_t i = 0; i < half; i++) {
            double f = (double)(p0 + m) * pow(theta, -2.0 * (double)i / (double)hd), cs = cos(f), sn = sin(f);
            for (int64_t h = 0; h < heads; h++) {
                float *b = x + m * ldx + h * hd;
                double a = b[i], c = b[i + half];
                b[i] = (float)(a * cs - c * sn);
                b[i + half] = (float)(c * cs + a * sn);
            }
        }
    return 0;
}

static int k_kv_append(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen) {
    int64_t rows = kernel_int(k, "rows", rank, 0), kvh = kernel_int(k, "kv_heads", rank, 0), hd = kernel_int(k, "head_dim", rank, 0);
    int64_t ms = kernel_int(k, "max_seq", rank, 0), ldk = kernel_int(k, "ldk", rank, kvh * hd), ldv = kernel_int(k, "ldv", rank, kvh * hd);
    const float *kk = op(k, ops, "k"), *vv = op(k, ops, "v");
    float *kc = op(k, ops, "kcache"), *vc = op(k, ops, "vcache");
    int64_t p0 = start_pos(op(k, ops, "pos"));
    if (p0 < 0 || p0 >= ms) return fail(k, err, errlen, "position %lld is outside the KV cache of %lld positions", p0, ms);
    for (int64_t m = 0; m < rows && p0 + m < ms; m++)   /* rows past the cache: a prefill chunk's padding */
        for (int64_t h = 0; h < kvh; h++) {
            memcpy(kc + (h * ms + p0 + m) * hd, kk + m * ldk + h * hd, sizeof(float) * (size_t)hd);
            memcpy(vc + (h * ms + p0 + m) * hd, vv + m * ldv + h * hd, sizeof(float) * (size_t)hd);
        }
    return 0;
}

/* Query row m (position pos+m) of head h against cache rows 0..pos+m of kv head h/(heads/kv_heads):
 * out = softmax(scale q k^T) v, dot products, exps and sums in double. */
static int k_attention_decode(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen) {
    int64_t rows = kernel_int(k, "rows", rank, 0), heads = kernel_int(k, "heads", rank, 0), kvh = kernel_int(k, "kv_heads", rank, heads);
    int64_t hd = kernel_int(k, "head_dim", rank, 0), ms = kernel_int(k, "max_seq", rank, 0);
    int64_t ldq = kernel_int(k, "ldq", rank, heads * hd), ldo = kernel_int(k, "ldo", rank, heads * hd);
    double scale = kernel_num(k, "scale", 1.0 / sqrt((double)hd));
    const float *q = op(k, ops, "q"), *kc = op(k, ops, "kcache"), *vc = op(k, ops, "vcache");
    float *out = op(k, ops, "out");
    int64_t p0 = start_pos(op(k, ops, "pos"));
    if (p0 < 0 || p0 >= ms) return fail(k, err, errlen, "position %lld is outside the KV cache of %lld positions", p0, ms);
    if (p0 + rows > ms) rows = ms - p0;   /* rows past the cache: a prefill chunk's padding, left as they are */
    double *s = malloc(sizeof(double) * (size_t)(ms + hd));
    if (!s) return fail(k, err, errlen, "out of memory (%lld scores)%.0lld", ms, 0);
    double *acc = s + ms;
    for (int64_t m = 0; m < rows; m++)
        for (int64_t h = 0; h < heads; h++) {
            const float *qr = q + m * ldq + h * hd;
            const float *K = kc + (h / (heads / kvh)) * ms * hd, *V = vc + (h / (heads / kvh)) * ms * hd;
            int64_t n = p0 + m + 1;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n; j++) {
                double d = 0;
                for (int64_t t = 0; t < hd; t++) d += (double)qr[t] * K[j * hd + t];
                s[j] = d * scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int64_t t = 0; t < hd; t++) acc[t] = 0;
            for (int64_t j = 0; j < n; j++) {
                double w = exp(s[j] - mx);
                sum += w;
                for (int64_t t = 0; t < hd; t++) acc[t] += w * V[j * hd + t];
            }
            for (int64_t t = 0; t < hd; t++) out[m * ldo + h * hd + t] = (float)(acc[t] / sum);
        }
    free(s);
    return 0;
}

int cpu_infer_kernel_run(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen) {
    switch (kcat_find(k->kind)) {
    case KK_ROPE_AT: return k_rope_at(k, ops, rank, err, errlen);
    case KK_KV_APPEND: return k_kv_append(k, ops, rank, err, errlen);
    case KK_ATTENTION_DECODE: return k_attention_decode(k, ops, rank, err, errlen);
    default: return 1;
    }
}
