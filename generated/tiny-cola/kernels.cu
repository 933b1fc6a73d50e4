// kernels.cu: the fused kernels of run tiny-cola (model tiny-cola) for h100 (sm_90), specialised from
// BOOST's templates/ by 'boost gen'; 27 kernels plus the runtime's own. Do not edit:
// regenerate. Compiled at run time with NVRTC; every kernel is extern "C".
#include <cuda_bf16.h>

// prelude.cuh: helpers shared by every kernel of a kernels.cu (emitted once, before the kernels):
// fp32 loads/stores of bf16 or fp32 storage, 8-wide vector loads when the address allows,
// activations, and deterministic block reductions (fixed shuffle tree, fixed warp order).
typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ float ld(const float *p) { return *p; }
static __device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16(v); }
static __device__ __forceinline__ void st(float *p, float v) { *p = v; }
static __device__ __forceinline__ bool aligned16(const void *p) {
    return ((unsigned long long)p & 15ull) == 0;
}

// ldv/stv: VEC consecutive elements as fp32; one 16-byte access (bf16) or two (fp32) when VEC == 8
// and the address is 16-byte aligned, else element by element.
template <int VEC> static __device__ __forceinline__ void ldv(const bf16 *p, float *o) {
    if (VEC == 8 && aligned16(p)) {
        uint4 u = *(const uint4 *)p;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
        for (int e = 0; e < 4; e++) { float2 f = __bfloat1622float2(h[e]); o[2 * e] = f.x; o[2 * e + 1] = f.y; }
    } else {
        for (int e = 0; e < VEC; e++) o[e] = __bfloat162float(p[e]);
    }
}
template <int VEC> static __device__ __forceinline__ void ldv(const float *p, float *o) {
    if (VEC == 8 && aligned16(p)) {
        float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
        o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w; o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
    } else {
        for (int e = 0; e < VEC; e++) o[e] = p[e];
    }
}
template <int VEC> static __device__ __forceinline__ void stv(bf16 *p, const float *v) {
    if (VEC == 8 && aligned16(p)) {
        uint4 u;
        __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
        for (int e = 0; e < 4; e++) h[e] = __floats2bfloat162_rn(v[2 * e], v[2 * e + 1]);
        *(uint4 *)p = u;
    } else {
        for (int e = 0; e < VEC; e++) p[e] = __float2bfloat16(v[e]);
    }
}
template <int VEC> static __device__ __forceinline__ void stv(float *p, const float *v) {
    if (VEC == 8 && aligned16(p)) {
        ((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
        ((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        for (int e = 0; e < VEC; e++) p[e] = v[e];
    }
}

// act: 0 identity, 1 silu. act_grad: d act / d y.
static __device__ __forceinline__ float logistic(float y) { return 1.f / (1.f + expf(-y)); }
static __device__ __forceinline__ float act_apply(int act, float y) { return act ? y * logistic(y) : y; }
static __device__ __forceinline__ float act_grad(int act, float y) {
    if (!act) return 1.f;
    const float s = logistic(y);
    return s * (1.f + y * (1.f - s));
}

// Sum / max over the block (BLOCK a multiple of 32, at most 1024); every thread gets the result.
template <int BLOCK> static __device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();                       // the previous reduction's readers are done
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < BLOCK / 32 ? part[threadIdx.x & 31] : 0.f;
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <int BLOCK> static __device__ __forceinline__ float block_max(float v) {
    __shared__ float part[32];
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < BLOCK / 32 ? part[threadIdx.x & 31] : __int_as_float(0xff800000);
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the G consecutive lanes of a thread group (G a power of two <= 32, groups aligned).
template <int G> static __device__ __forceinline__ float group_sum(float v) {
    const unsigned lane = threadIdx.x & 31;
    const unsigned mask = (G == 32) ? 0xffffffffu : (((1u << G) - 1u) << (lane & ~(unsigned)(G - 1)));
    for (int o = G / 2; o; o >>= 1) v += __shfl_xor_sync(mask, v, o);
    return v;
}


// embedding_fwd: out[m, j] = table[tokens[m], j]; table is the rank's vocab x cols block.
// One thread per VEC columns of a row. Tokens outside 0..vocab-1 give a zero row.
extern "C" __global__ void __launch_bounds__(256)
embedding_fwd_r256_c64_v256_bf16_b256(const int *tokens, const bf16 *table, bf16 *out) {
    constexpr long long CHUNKS = 64 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    const int t = tokens[m];
    float v[8];
    if (t >= 0 && t < 256) ldv<8>(table + (long long)t * 64 + j, v);
    else for (int e = 0; e < 8; e++) v[e] = 0.f;
    stv<8>(out + m * 64 + j, v);
}

// online_norm_fwd: local statistics of the rank's shard: s = sum_j x^2, rho = sqrt(s/cols + eps),
// xhat = x/rho*gamma, stat[m*ldstat] = s/divisor (the rank's share of the global mean square,
// written into the extra column of the all-reduce buffer). One block per row.
extern "C" __global__ void __launch_bounds__(256)
online_norm_fwd_r256_c64_ldx64_ldstat97_dv128_e1em05_bf16_b256(const bf16 *x, const bf16 *gamma, bf16 *xhat, float *rho,
         bf16 *stat) {
    const long long m = blockIdx.x;
    const bf16 *xr = x + m * 64;
    float part = 0.f;
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float a[8];
        ldv<8>(xr + j, a);
        for (int e = 0; e < 8; e++) part += a[e] * a[e];
    }
    const float s = block_sum<256>(part);
    const float p = sqrtf(s / (float)64 + 1e-05f);
    if (threadIdx.x == 0) {
        st(rho + m, p);
        if (stat) st(stat + m * 97, s / (float)128);
    }
    const float inv = 1.f / p;
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float a[8], g[8];
        ldv<8>(xr + j, a);
        ldv<8>(gamma + j, g);
        for (int e = 0; e < 8; e++) a[e] = a[e] * inv * g[e];
        stv<8>(xhat + m * 64 + j, a);
    }
}

// online_norm_rescale: h[m,j] *= rho[m] (undo the local scale before the all-reduce).
// One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
online_norm_rescale_r256_c96_ldh97_bf16_b256(bf16 *h, const float *rho) {
    constexpr long long CHUNKS = 96 / 1;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 1;
    const float p = ld(rho + m);
    float v[1];
    ldv<1>(h + m * 97 + j, v);
    for (int e = 0; e < 1; e++) v[e] *= p;
    stv<1>(h + m * 97 + j, v);
}

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(h[m, cols] + eps) (the summed statistics column), y = h*rstd; norm=0: y = h.
// Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r256_c96_ldh97_ldy96_ldz96_silu_n1_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd) {
    const long long m = blockIdx.x;
    const bf16 *hr = h + m * 97;
    float r = 1.f;
    if (1) {
        r = rsqrtf(ld(hr + 96) + 1e-05f);
        if (rstd && threadIdx.x == 0) st(rstd + m, r);
    }
    for (int j = threadIdx.x * 1; j < 96; j += 256 * 1) {
        float a[1];
        ldv<1>(hr + j, a);
        for (int e = 0; e < 1; e++) a[e] *= r;
        if (y) stv<1>(y + m * 96 + j, a);
        for (int e = 0; e < 1; e++) a[e] = act_apply(1, a[e]);
        stv<1>(z + m * 96 + j, a);
    }
}

// rope: in place on heads consecutive blocks of head_dim columns; position p = m % seq, pair
// (a, b) = (x[i], x[i + head_dim/2]), f = p * theta^(-2i/head_dim): a' = a cos f - b sin f,
// b' = b cos f + a sin f; inverse=1 rotates by -f. The angle is computed in double (positions
// reach tens of thousands of radians). One thread per pair.
extern "C" __global__ void __launch_bounds__(256)
rope_r256_h2_d32_ldx192_s64_th10000_inv0_bf16_b256(bf16 *x) {
    constexpr int HALF = 32 / 2;
    const long long t = (long long)blockIdx.x * 256 + threadIdx.x;
    if (t >= (long long)256 * 2 * HALF) return;
    const int i = (int)(t % HALF);
    const long long mh = t / HALF;
    const int head = (int)(mh % 2);
    const long long m = mh / 2;
    const long long p = m % 64;
    const double f = (double)p * pow((double)10000.f, -2.0 * i / (double)32);
    double sn, cs;
    sincos(f, &sn, &cs);
    const float c = (float)cs, s = 0 ? -(float)sn : (float)sn;
    bf16 *row = x + m * 192 + (long long)head * 32;
    const float a = ld(row + i), b = ld(row + i + HALF);
    st(row + i, a * c - b * s);
    st(row + i + HALF, b * c + a * s);
}

// attention_fwd: causal attention, flash style: per (batch, head) and tile of BQ queries, the keys
// and values stream through shared memory in tiles of BK with an online softmax; no seq x seq
// matrix exists. A group of G = head_dim/16 threads owns one query (16 dims each) and reduces its
// dot products with shuffles. out = softmax(scale q k^T + mask) v; lse[(b*heads+h)*seq + i] is the
// log-sum-exp of query i's scaled scores. GQA: head h reads kv head h / (heads/kv_heads).
extern "C" __global__ void __launch_bounds__(64 * (32 / 16), 1)
attention_fwd_b4_s64_h2_kv2_d32_ldq192_ldk192_ldv192_ldo64_sc0p1767767_bf16_q64k64(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *out, float *lse) {
    constexpr int D = 32, DT = 16, G = D / DT, BQ = 64, BK = 64;
    constexpr int NT = BQ * G, NQB = (64 + BQ - 1) / BQ, GROUP = 2 / 2;
    __shared__ bf16 ks[BK * D], vs[BK * D];       // [BK, D] each
    const int qb = blockIdx.x % NQB, bh = blockIdx.x / NQB;
    const int h = bh % 2, b = bh / 2, kvh = h / GROUP;
    const int g = threadIdx.x % G, i = qb * BQ + threadIdx.x / G;
    const bool valid = i < 64;
    const long long qrow = (long long)b * 64 + i;
    float qr[DT], o[DT];
    for (int t = 0; t < DT; t++) {
        qr[t] = valid ? ld(q + qrow * 192 + h * D + g * DT + t) * 0.176776695f : 0.f;
        o[t] = 0.f;
    }
    float mx = __int_as_float(0xff800000), l = 0.f;
    const int last = min(qb * BQ + BQ, 64) - 1;       // the block's last query
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < BK * D; idx += NT) {
            const int kk = idx / D, d = idx % D, kp = k0 + kk;
            const long long krow = (long long)b * 64 + kp;
            ks[idx] = __float2bfloat16(kp < 64 ? ld(k + krow * 192 + kvh * D + d) : 0.f);
            vs[idx] = __float2bfloat16(kp < 64 ? ld(v + krow * 192 + kvh * D + d) : 0.f);
        }
        __syncthreads();
        if (!valid) continue;
        const int kn = min(BK, i - k0 + 1);                // causal: keys k0 .. i
        for (int kk = 0; kk < kn; kk++) {
            const bf16 *kr = ks + kk * D + g * DT, *vr = vs + kk * D + g * DT;
            float s = 0.f;
            for (int t = 0; t < DT; t++) s += qr[t] * __bfloat162float(kr[t]);
            s = group_sum<G>(s);
            const float mn = fmaxf(mx, s), corr = expf(mx - mn), p = expf(s - mn);
            l = l * corr + p;
            for (int t = 0; t < DT; t++) o[t] = o[t] * corr + p * __bfloat162float(vr[t]);
            mx = mn;
        }
    }
    if (!valid) return;
    const float inv = 1.f / l;
    for (int t = 0; t < DT; t++) st(out + qrow * 64 + h * D + g * DT + t, o[t] * inv);
    if (g == 0) st(lse + ((long long)b * 2 + h) * 64 + i, mx + logf(l));
}

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(h[m, cols] + eps) (the summed statistics column), y = h*rstd; norm=0: y = h.
// Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r256_c32_ldh32_ldy32_ldz32_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd) {
    const long long m = blockIdx.x;
    const bf16 *hr = h + m * 32;
    float r = 1.f;
    if (0) {
        r = rsqrtf(ld(hr + 32) + 1e-05f);
        if (rstd && threadIdx.x == 0) st(rstd + m, r);
    }
    for (int j = threadIdx.x * 8; j < 32; j += 256 * 8) {
        float a[8];
        ldv<8>(hr + j, a);
        for (int e = 0; e < 8; e++) a[e] *= r;
        if (y) stv<8>(y + m * 32 + j, a);
        for (int e = 0; e < 8; e++) a[e] = act_apply(1, a[e]);
        stv<8>(z + m * 32 + j, a);
    }
}

// add: out = a + b (out may alias a). One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
add_r256_c64_lda64_ldb64_ldo64_bf16_b256(const bf16 *a, const bf16 *b, bf16 *out) {
    constexpr long long CHUNKS = 64 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float u[8], v[8];
    ldv<8>(a + m * 64 + j, u);
    ldv<8>(b + m * 64 + j, v);
    for (int e = 0; e < 8; e++) u[e] += v[e];
    stv<8>(out + m * 64 + j, u);
}

// online_norm_fwd: local statistics of the rank's shard: s = sum_j x^2, rho = sqrt(s/cols + eps),
// xhat = x/rho*gamma, stat[m*ldstat] = s/divisor (the rank's share of the global mean square,
// written into the extra column of the all-reduce buffer). One block per row.
extern "C" __global__ void __launch_bounds__(256)
online_norm_fwd_r256_c64_ldx64_ldstat65_dv128_e1em05_bf16_b256(const bf16 *x, const bf16 *gamma, bf16 *xhat, float *rho,
         bf16 *stat) {
    const long long m = blockIdx.x;
    const bf16 *xr = x + m * 64;
    float part = 0.f;
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float a[8];
        ldv<8>(xr + j, a);
        for (int e = 0; e < 8; e++) part += a[e] * a[e];
    }
    const float s = block_sum<256>(part);
    const float p = sqrtf(s / (float)64 + 1e-05f);
    if (threadIdx.x == 0) {
        st(rho + m, p);
        if (stat) st(stat + m * 65, s / (float)128);
    }
    const float inv = 1.f / p;
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float a[8], g[8];
        ldv<8>(xr + j, a);
        ldv<8>(gamma + j, g);
        for (int e = 0; e < 8; e++) a[e] = a[e] * inv * g[e];
        stv<8>(xhat + m * 64 + j, a);
    }
}

// online_norm_rescale: h[m,j] *= rho[m] (undo the local scale before the all-reduce).
// One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
online_norm_rescale_r256_c64_ldh65_bf16_b256(bf16 *h, const float *rho) {
    constexpr long long CHUNKS = 64 / 1;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 1;
    const float p = ld(rho + m);
    float v[1];
    ldv<1>(h + m * 65 + j, v);
    for (int e = 0; e < 1; e++) v[e] *= p;
    stv<1>(h + m * 65 + j, v);
}

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(h[m, cols] + eps) (the summed statistics column), y = h*rstd; norm=0: y = h.
// Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r256_c64_ldh65_ldy64_ldz64_silu_n1_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd) {
    const long long m = blockIdx.x;
    const bf16 *hr = h + m * 65;
    float r = 1.f;
    if (1) {
        r = rsqrtf(ld(hr + 64) + 1e-05f);
        if (rstd && threadIdx.x == 0) st(rstd + m, r);
    }
    for (int j = threadIdx.x * 1; j < 64; j += 256 * 1) {
        float a[1];
        ldv<1>(hr + j, a);
        for (int e = 0; e < 1; e++) a[e] *= r;
        if (y) stv<1>(y + m * 64 + j, a);
        for (int e = 0; e < 1; e++) a[e] = act_apply(1, a[e]);
        stv<1>(z + m * 64 + j, a);
    }
}

// glu_fwd: out = act(gate) * up. One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
glu_fwd_r256_c176_ldg352_ldu352_ldo176_id_bf16_b256(const bf16 *gate, const bf16 *up, bf16 *out) {
    constexpr long long CHUNKS = 176 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float g[8], u[8];
    ldv<8>(gate + m * 352 + j, g);
    ldv<8>(up + m * 352 + j, u);
    for (int e = 0; e < 8; e++) g[e] = act_apply(0, g[e]) * u[e];
    stv<8>(out + m * 176 + j, g);
}

// rmsnorm_fwd: rstd[m] = 1/sqrt(S/divisor + eps), S = sumsq[m] if given else sum_j x[m,j]^2;
// out[m,j] = x[m,j] * rstd[m] * gamma[j]. One block per row.
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd_r256_c128_ldx128_ldo128_dv128_e1em05_bf16_b256(const bf16 *x, const bf16 *gamma, bf16 *out, float *rstd,
         const float *sumsq) {
    const long long m = blockIdx.x;
    const bf16 *xr = x + m * 128;
    float S;
    if (sumsq) {
        S = ld(sumsq + m);
    } else {
        float part = 0.f;
        for (int j = threadIdx.x * 8; j < 128; j += 256 * 8) {
            float a[8];
            ldv<8>(xr + j, a);
            for (int e = 0; e < 8; e++) part += a[e] * a[e];
        }
        S = block_sum<256>(part);
    }
    const float r = rsqrtf(S / (float)128 + 1e-05f);
    if (rstd && threadIdx.x == 0) st(rstd + m, r);
    for (int j = threadIdx.x * 8; j < 128; j += 256 * 8) {
        float a[8], g[8];
        ldv<8>(xr + j, a);
        ldv<8>(gamma + j, g);
        for (int e = 0; e < 8; e++) a[e] = a[e] * r * g[e];
        stv<8>(out + m * 128 + j, a);
    }
}

// xent_fwd: vocabulary-parallel cross-entropy, the local part over cols = the rank's vocab slice
// starting at vocab_offset. stats[m*3+0] = local max, [1] = sum_j exp(l - local max), [2] = the
// target's logit when the target is in this slice, else 0. One block per row.
extern "C" __global__ void __launch_bounds__(256)
xent_fwd_r256_c128_ldl128_voR_bf16_b256(const bf16 *logits, const int *targets, float *stats, long long vocab_offset_arg) {
    const long long m = blockIdx.x;
    const bf16 *lr = logits + m * 128;
    float mx = __int_as_float(0xff800000);
    for (int j = threadIdx.x * 8; j < 128; j += 256 * 8) {
        float a[8];
        ldv<8>(lr + j, a);
        for (int e = 0; e < 8; e++) mx = fmaxf(mx, a[e]);
    }
    mx = block_max<256>(mx);
    float se = 0.f;
    for (int j = threadIdx.x * 8; j < 128; j += 256 * 8) {
        float a[8];
        ldv<8>(lr + j, a);
        for (int e = 0; e < 8; e++) se += expf(a[e] - mx);
    }
    se = block_sum<256>(se);
    if (threadIdx.x == 0) {
        const long long t = (long long)targets[m] - (long long)(vocab_offset_arg);
        st(stats + m * 3 + 0, mx);
        st(stats + m * 3 + 1, se);
        st(stats + m * 3 + 2, (t >= 0 && t < 128) ? ld(lr + t) : 0.f);
    }
}

// xent_combine: stats_all = the allgather of every rank's stats (rows x 3*tp). Global max g,
// sumexp = sum_r se_r*exp(max_r - g), lse[m] = g + log(sumexp), target logit = sum_r t_r,
// loss[0] = mean_m (lse[m] - target logit). One block; fixed summation order (deterministic).
extern "C" __global__ void __launch_bounds__(256)
xent_combine_r256_tp2_bf16_b256(const float *stats_all, float *lse, float *loss) {
    float total = 0.f;
    for (long long m = threadIdx.x; m < 256; m += 256) {
        const float *s = stats_all + m * 3 * 2;
        float g = __int_as_float(0xff800000), tl = 0.f, se = 0.f;
        for (int r = 0; r < 2; r++) g = fmaxf(g, ld(s + 3 * r));
        for (int r = 0; r < 2; r++) {
            se += ld(s + 3 * r + 1) * expf(ld(s + 3 * r) - g);
            tl += ld(s + 3 * r + 2);
        }
        const float l = g + logf(se);
        st(lse + m, l);
        total += l - tl;
    }
    total = block_sum<256>(total);
    if (threadIdx.x == 0) st(loss, total / (float)256);
}

// xent_bwd: dlogits[m,j] = (exp(logits[m,j] - lse[m]) - [vocab_offset + j == targets[m]]) * scale.
// One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
xent_bwd_r256_c128_ldl128_voR_sc0p00390625_bf16_b256(const bf16 *logits, const int *targets, const float *lse, bf16 *dlogits, long long vocab_offset_arg) {
    constexpr long long CHUNKS = 128 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    const float l = ld(lse + m);
    const long long t = (long long)targets[m] - (long long)(vocab_offset_arg);
    float a[8];
    ldv<8>(logits + m * 128 + j, a);
    for (int e = 0; e < 8; e++)
        a[e] = (expf(a[e] - l) - (j + e == t ? 1.f : 0.f)) * 0.00390625f;
    stv<8>(dlogits + m * 128 + j, a);
}

// rmsnorm_bwd: D[m] = sum_j dout*gamma*x (phase 2: read from dot, summed over ranks);
// dx (+)= rstd*gamma*dout - x*rstd^3*D/divisor; dgamma[j] += sum_m dout*x*rstd.
// Phase 1 only writes dot[m] = D_local[m]. Blocks 0..rows-1: one row each; the blocks after
// them: one thread per column of dgamma, walking the rows in order (deterministic).
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_bwd_r256_c128_ldx128_ldo128_dv128_acc0_ph0_bf16_b256(const bf16 *x, const bf16 *gamma, const float *rstd, const bf16 *dout,
         float *dot, bf16 *dx, float *dgamma) {
    if (blockIdx.x >= 256) {
        const long long j = (long long)(blockIdx.x - 256) * 256 + threadIdx.x;
        if (j >= 128 || !dgamma) return;
        float s = 0.f;
        for (long long m = 0; m < 256; m++)
            s += ld(dout + m * 128 + j) * ld(x + m * 128 + j) * ld(rstd + m);
        st(dgamma + j, ld(dgamma + j) + s);
        return;
    }
    const long long m = blockIdx.x;
    const bf16 *xr = x + m * 128;
    const bf16 *dr = dout + m * 128;
    float D;
    if (0 == 2) {
        D = ld(dot + m);
    } else {
        float part = 0.f;
        for (int j = threadIdx.x * 8; j < 128; j += 256 * 8) {
            float a[8], g[8], d[8];
            ldv<8>(xr + j, a); ldv<8>(gamma + j, g); ldv<8>(dr + j, d);
            for (int e = 0; e < 8; e++) part += d[e] * g[e] * a[e];
        }
        D = block_sum<256>(part);
        if (0 == 1) {
            if (threadIdx.x == 0) st(dot + m, D);
            return;
        }
    }
    const float r = ld(rstd + m);
    const float c = r * r * r * D / (float)128;
    for (int j = threadIdx.x * 8; j < 128; j += 256 * 8) {
        float a[8], g[8], d[8], o[8];
        ldv<8>(xr + j, a); ldv<8>(gamma + j, g); ldv<8>(dr + j, d);
        if (0) ldv<8>(dx + m * 128 + j, o);
        else for (int e = 0; e < 8; e++) o[e] = 0.f;
        for (int e = 0; e < 8; e++) o[e] += r * g[e] * d[e] - a[e] * c;
        stv<8>(dx + m * 128 + j, o);
    }
}

// copy: dst (+)= src over 2-D slices. One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
copy_r256_c64_lds128_ldd64_acc0_bf16_b256(const bf16 *src, bf16 *dst) {
    constexpr long long CHUNKS = 64 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float u[8], v[8];
    ldv<8>(src + m * 128 + j, u);
    if (0) {
        ldv<8>(dst + m * 64 + j, v);
        for (int e = 0; e < 8; e++) u[e] += v[e];
    }
    stv<8>(dst + m * 64 + j, u);
}

// bottleneck_act_bwd: dy = dz * act'(y). norm=0: dh (+)= dy. norm=1 (online norm backward):
// dh (+)= dy*rstd*rho and dstat[m] = -(sum_j dy*h) * rstd^3 / (2*divisor). One block per row.
// y NULL: recomputed as h*rstd.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_bwd_r256_c32_ldh32_ldy32_ldz32_lddh32_silu_n0_dv128_acc0_bf16_b256(const bf16 *h, const bf16 *y, const float *rstd, const float *rho,
         const bf16 *dz, bf16 *dh, float *dstat) {
    const long long m = blockIdx.x;
    const float r = 0 ? ld(rstd + m) : 1.f;
    const float scale = 0 ? r * ld(rho + m) : 1.f;
    float part = 0.f;
    for (int j = threadIdx.x * 8; j < 32; j += 256 * 8) {
        float yv[8], d[8], hv[8], o[8];
        ldv<8>(dz + m * 32 + j, d);
        if (0 || !y) ldv<8>(h + m * 32 + j, hv);
        if (y) ldv<8>(y + m * 32 + j, yv);
        else for (int e = 0; e < 8; e++) yv[e] = hv[e] * r;
        if (0) ldv<8>(dh + m * 32 + j, o);
        else for (int e = 0; e < 8; e++) o[e] = 0.f;
        for (int e = 0; e < 8; e++) {
            const float dy = d[e] * act_grad(1, yv[e]);
            o[e] += dy * scale;
            if (0) part += dy * hv[e];
        }
        stv<8>(dh + m * 32 + j, o);
    }
    if (0) {
        const float s = block_sum<256>(part);
        if (threadIdx.x == 0) st(dstat + m, -s * r * r * r / (2.f * (float)128));
    }
}

// glu_bwd: dgate = dout*up*act'(gate), dup = dout*act(gate). One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
glu_bwd_r256_c176_ldg352_ldu352_ldo176_lddg352_lddu352_id_bf16_b256(const bf16 *gate, const bf16 *up, const bf16 *dout, bf16 *dgate,
         bf16 *dup) {
    constexpr long long CHUNKS = 176 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float g[8], u[8], d[8], dg[8];
    ldv<8>(gate + m * 352 + j, g);
    ldv<8>(up + m * 352 + j, u);
    ldv<8>(dout + m * 176 + j, d);
    for (int e = 0; e < 8; e++) {
        dg[e] = d[e] * u[e] * act_grad(0, g[e]);
        u[e] = d[e] * act_apply(0, g[e]);
    }
    stv<8>(dgate + m * 352 + j, dg);
    stv<8>(dup + m * 352 + j, u);
}

// bottleneck_act_bwd: dy = dz * act'(y). norm=0: dh (+)= dy. norm=1 (online norm backward):
// dh (+)= dy*rstd*rho and dstat[m] = -(sum_j dy*h) * rstd^3 / (2*divisor). One block per row.
// y NULL: recomputed as h*rstd.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_bwd_r256_c64_ldh65_ldy64_ldz64_lddh65_silu_n1_dv128_acc0_bf16_b256(const bf16 *h, const bf16 *y, const float *rstd, const float *rho,
         const bf16 *dz, bf16 *dh, float *dstat) {
    const long long m = blockIdx.x;
    const float r = 1 ? ld(rstd + m) : 1.f;
    const float scale = 1 ? r * ld(rho + m) : 1.f;
    float part = 0.f;
    for (int j = threadIdx.x * 1; j < 64; j += 256 * 1) {
        float yv[1], d[1], hv[1], o[1];
        ldv<1>(dz + m * 64 + j, d);
        if (1 || !y) ldv<1>(h + m * 65 + j, hv);
        if (y) ldv<1>(y + m * 64 + j, yv);
        else for (int e = 0; e < 1; e++) yv[e] = hv[e] * r;
        if (0) ldv<1>(dh + m * 65 + j, o);
        else for (int e = 0; e < 1; e++) o[e] = 0.f;
        for (int e = 0; e < 1; e++) {
            const float dy = d[e] * act_grad(1, yv[e]);
            o[e] += dy * scale;
            if (1) part += dy * hv[e];
        }
        stv<1>(dh + m * 65 + j, o);
    }
    if (1) {
        const float s = block_sum<256>(part);
        if (threadIdx.x == 0) st(dstat + m, -s * r * r * r / (2.f * (float)128));
    }
}

// online_norm_fwd: local statistics of the rank's shard: s = sum_j x^2, rho = sqrt(s/cols + eps),
// xhat = x/rho*gamma, stat[m*ldstat] = s/divisor (the rank's share of the global mean square,
// written into the extra column of the all-reduce buffer). One block per row.
extern "C" __global__ void __launch_bounds__(256)
online_norm_fwd_r256_c64_ldx64_ldstat1_dv128_e1em05_bf16_b256(const bf16 *x, const bf16 *gamma, bf16 *xhat, float *rho,
         bf16 *stat) {
    const long long m = blockIdx.x;
    const bf16 *xr = x + m * 64;
    float part = 0.f;
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float a[8];
        ldv<8>(xr + j, a);
        for (int e = 0; e < 8; e++) part += a[e] * a[e];
    }
    const float s = block_sum<256>(part);
    const float p = sqrtf(s / (float)64 + 1e-05f);
    if (threadIdx.x == 0) {
        st(rho + m, p);
        if (stat) st(stat + m * 1, s / (float)128);
    }
    const float inv = 1.f / p;
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float a[8], g[8];
        ldv<8>(xr + j, a);
        ldv<8>(gamma + j, g);
        for (int e = 0; e < 8; e++) a[e] = a[e] * inv * g[e];
        stv<8>(xhat + m * 64 + j, a);
    }
}

// online_norm_bwd: dx (+)= gamma*dxhat/rho + 2*x*dstat; dgamma[j] += sum_m x*dxhat/rho.
// Blocks 0..rows-1: one row each; the blocks after them: one thread per column of dgamma,
// walking the rows in order (deterministic).
extern "C" __global__ void __launch_bounds__(256)
online_norm_bwd_r256_c64_ldx64_acc1_bf16_b256(const bf16 *x, const bf16 *gamma, const float *rho, const bf16 *dxhat,
         const float *dstat, bf16 *dx, float *dgamma) {
    if (blockIdx.x >= 256) {
        const long long j = (long long)(blockIdx.x - 256) * 256 + threadIdx.x;
        if (j >= 64 || !dgamma) return;
        float s = 0.f;
        for (long long m = 0; m < 256; m++)
            s += ld(x + m * 64 + j) * ld(dxhat + m * 64 + j) / ld(rho + m);
        st(dgamma + j, ld(dgamma + j) + s);
        return;
    }
    const long long m = blockIdx.x;
    const float inv = 1.f / ld(rho + m);
    const float ds2 = dstat ? 2.f * ld(dstat + m) : 0.f;
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float a[8], g[8], d[8], o[8];
        ldv<8>(x + m * 64 + j, a);
        ldv<8>(gamma + j, g);
        ldv<8>(dxhat + m * 64 + j, d);
        if (1) ldv<8>(dx + m * 64 + j, o);
        else for (int e = 0; e < 8; e++) o[e] = 0.f;
        for (int e = 0; e < 8; e++) o[e] += g[e] * d[e] * inv + a[e] * ds2;
        stv<8>(dx + m * 64 + j, o);
    }
}

// attention_bwd: the gradient of attention_fwd, recomputing P tile by tile from lse. One launch,
// two kinds of blocks (both deterministic, no atomics):
//  - the first batch*heads*ceil(seq/BQ) blocks own BQ queries each: delta_i = sum dout_i*out_i,
//    then over key tiles in shared memory: p = exp(s - lse_i), dp = dout_i . v_j,
//    ds = p (dp - delta_i), dq_i = scale * sum_j ds k_j;
//  - the next batch*kv_heads*ceil(seq/BQ) blocks own BQ keys each and loop over every query head
//    of their group and over query tiles: dv_j = sum_i p v-grad, dk_j = scale * sum_i ds q_i.
// A group of G = head_dim/16 threads owns one query (or key), 16 dims per thread.
extern "C" __global__ void __launch_bounds__(64 * (32 / 16), 1)
attention_bwd_b4_s64_h2_kv2_d32_ldq192_ldk192_ldv192_ldo64_sc0p1767767_bf16_q64k64(const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out, const bf16 *dout,
         const float *lse, bf16 *dq, bf16 *dk, bf16 *dv) {
    constexpr int D = 32, DT = 16, G = D / DT, BQ = 64, BK = 64;
    constexpr int NT = BQ * G, NB = (64 + BQ - 1) / BQ, GROUP = 2 / 2;
    constexpr int QBLOCKS = 4 * 2 * NB;
    __shared__ bf16 s1[BK * D], s2[BK * D];       // [BK, D]: k, v tiles or q, dout tiles
    __shared__ float s_lse[BK], s_delta[BK];
    const int g = threadIdx.x % G, own = threadIdx.x / G;
    if (blockIdx.x < QBLOCKS) {
        const int qb = blockIdx.x % NB, bh = blockIdx.x / NB;
        const int h = bh % 2, b = bh / 2, kvh = h / GROUP;
        const int i = qb * BQ + own;
        const bool valid = i < 64;
        const long long row = (long long)b * 64 + i;
        float qr[DT], dor[DT], acc[DT], delta = 0.f;
        for (int t = 0; t < DT; t++) {
            const long long c = h * D + g * DT + t;
            qr[t] = valid ? ld(q + row * 192 + c) : 0.f;
            dor[t] = valid ? ld(dout + row * 64 + c) : 0.f;
            delta += valid ? dor[t] * ld(out + row * 64 + c) : 0.f;
            acc[t] = 0.f;
        }
        delta = group_sum<G>(delta);
        const float L = valid ? ld(lse + ((long long)b * 2 + h) * 64 + i) : 0.f;
        const int last = min(qb * BQ + BQ, 64) - 1;
        for (int k0 = 0; k0 <= last; k0 += BK) {
            __syncthreads();
            for (int idx = threadIdx.x; idx < BK * D; idx += NT) {
                const int kk = idx / D, d = idx % D, kp = k0 + kk;
                const long long krow = (long long)b * 64 + kp;
                s1[idx] = __float2bfloat16(kp < 64 ? ld(k + krow * 192 + kvh * D + d) : 0.f);
                s2[idx] = __float2bfloat16(kp < 64 ? ld(v + krow * 192 + kvh * D + d) : 0.f);
            }
            __syncthreads();
            if (!valid) continue;
            const int kn = min(BK, i - k0 + 1);
            for (int kk = 0; kk < kn; kk++) {
                const bf16 *kr = s1 + kk * D + g * DT, *vr = s2 + kk * D + g * DT;
                float s = 0.f, dp = 0.f;
                for (int t = 0; t < DT; t++) {
                    s += qr[t] * __bfloat162float(kr[t]);
                    dp += dor[t] * __bfloat162float(vr[t]);
                }
                s = group_sum<G>(s);
                dp = group_sum<G>(dp);
                const float p = expf(s * 0.176776695f - L), ds = p * (dp - delta);
                for (int t = 0; t < DT; t++) acc[t] += ds * __bfloat162float(kr[t]);
            }
        }
        if (!valid) return;
        for (int t = 0; t < DT; t++) st(dq + row * 192 + h * D + g * DT + t, acc[t] * 0.176776695f);
        return;
    }
    // key blocks
    const int kbid = blockIdx.x - QBLOCKS;
    const int kb = kbid % NB, bk = kbid / NB;
    const int kvh = bk % 2, b = bk / 2;
    const int j = kb * BQ + own;
    const bool valid = j < 64;
    const long long krow = (long long)b * 64 + j;
    float kr[DT], vr[DT], gk[DT], gv[DT];
    for (int t = 0; t < DT; t++) {
        const long long c = kvh * D + g * DT + t;
        kr[t] = valid ? ld(k + krow * 192 + c) : 0.f;
        vr[t] = valid ? ld(v + krow * 192 + c) : 0.f;
        gk[t] = 0.f; gv[t] = 0.f;
    }
    for (int hg = 0; hg < GROUP; hg++) {
        const int h = kvh * GROUP + hg;
        for (int q0 = kb * BQ; q0 < 64; q0 += BK) {     // queries i >= the block's first key
            __syncthreads();
            for (int idx = threadIdx.x; idx < BK * D; idx += NT) {
                const int qq = idx / D, d = idx % D, qp = q0 + qq;
                const long long qrow = (long long)b * 64 + qp;
                s1[idx] = __float2bfloat16(qp < 64 ? ld(q + qrow * 192 + h * D + d) : 0.f);
                s2[idx] = __float2bfloat16(qp < 64 ? ld(dout + qrow * 64 + h * D + d) : 0.f);
            }
            for (int qq = own; qq < BK; qq += BQ) {          // delta and lse of the tile's queries
                const int qp = q0 + qq;
                const long long qrow = (long long)b * 64 + qp;
                float part = 0.f;
                if (qp < 64)
                    for (int t = 0; t < DT; t++) {
                        const long long c = h * D + g * DT + t;
                        part += ld(dout + qrow * 64 + c) * ld(out + qrow * 64 + c);
                    }
                part = group_sum<G>(part);
                if (g == 0) {
                    s_delta[qq] = part;
                    s_lse[qq] = qp < 64 ? ld(lse + ((long long)b * 2 + h) * 64 + qp) : 0.f;
                }
            }
            __syncthreads();
            if (!valid) continue;
            const int q1 = min(BK, 64 - q0);
            for (int qq = max(0, j - q0); qq < q1; qq++) {   // causal: queries i >= j
                const bf16 *qv = s1 + qq * D + g * DT, *dov = s2 + qq * D + g * DT;
                float s = 0.f, dp = 0.f;
                for (int t = 0; t < DT; t++) {
                    s += __bfloat162float(qv[t]) * kr[t];
                    dp += __bfloat162float(dov[t]) * vr[t];
                }
                s = group_sum<G>(s);
                dp = group_sum<G>(dp);
                const float p = expf(s * 0.176776695f - s_lse[qq]), ds = p * (dp - s_delta[qq]);
                for (int t = 0; t < DT; t++) {
                    gv[t] += p * __bfloat162float(dov[t]);
                    gk[t] += ds * __bfloat162float(qv[t]);
                }
            }
        }
    }
    if (!valid) return;
    for (int t = 0; t < DT; t++) {
        const long long c = kvh * D + g * DT + t;
        st(dk + krow * 192 + c, gk[t] * 0.176776695f);
        st(dv + krow * 192 + c, gv[t]);
    }
}

// rope: in place on heads consecutive blocks of head_dim columns; position p = m % seq, pair
// (a, b) = (x[i], x[i + head_dim/2]), f = p * theta^(-2i/head_dim): a' = a cos f - b sin f,
// b' = b cos f + a sin f; inverse=1 rotates by -f. The angle is computed in double (positions
// reach tens of thousands of radians). One thread per pair.
extern "C" __global__ void __launch_bounds__(256)
rope_r256_h2_d32_ldx192_s64_th10000_inv1_bf16_b256(bf16 *x) {
    constexpr int HALF = 32 / 2;
    const long long t = (long long)blockIdx.x * 256 + threadIdx.x;
    if (t >= (long long)256 * 2 * HALF) return;
    const int i = (int)(t % HALF);
    const long long mh = t / HALF;
    const int head = (int)(mh % 2);
    const long long m = mh / 2;
    const long long p = m % 64;
    const double f = (double)p * pow((double)10000.f, -2.0 * i / (double)32);
    double sn, cs;
    sincos(f, &sn, &cs);
    const float c = (float)cs, s = 1 ? -(float)sn : (float)sn;
    bf16 *row = x + m * 192 + (long long)head * 32;
    const float a = ld(row + i), b = ld(row + i + HALF);
    st(row + i, a * c - b * s);
    st(row + i + HALF, b * c + a * s);
}

// bottleneck_act_bwd: dy = dz * act'(y). norm=0: dh (+)= dy. norm=1 (online norm backward):
// dh (+)= dy*rstd*rho and dstat[m] = -(sum_j dy*h) * rstd^3 / (2*divisor). One block per row.
// y NULL: recomputed as h*rstd.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_bwd_r256_c96_ldh97_ldy96_ldz96_lddh97_silu_n1_dv128_acc0_bf16_b256(const bf16 *h, const bf16 *y, const float *rstd, const float *rho,
         const bf16 *dz, bf16 *dh, float *dstat) {
    const long long m = blockIdx.x;
    const float r = 1 ? ld(rstd + m) : 1.f;
    const float scale = 1 ? r * ld(rho + m) : 1.f;
    float part = 0.f;
    for (int j = threadIdx.x * 1; j < 96; j += 256 * 1) {
        float yv[1], d[1], hv[1], o[1];
        ldv<1>(dz + m * 96 + j, d);
        if (1 || !y) ldv<1>(h + m * 97 + j, hv);
        if (y) ldv<1>(y + m * 96 + j, yv);
        else for (int e = 0; e < 1; e++) yv[e] = hv[e] * r;
        if (0) ldv<1>(dh + m * 97 + j, o);
        else for (int e = 0; e < 1; e++) o[e] = 0.f;
        for (int e = 0; e < 1; e++) {
            const float dy = d[e] * act_grad(1, yv[e]);
            o[e] += dy * scale;
            if (1) part += dy * hv[e];
        }
        stv<1>(dh + m * 97 + j, o);
    }
    if (1) {
        const float s = block_sum<256>(part);
        if (threadIdx.x == 0) st(dstat + m, -s * r * r * r / (2.f * (float)128));
    }
}

// embedding_bwd: dtable[tokens[m], j] += dout[m, j]. One thread per column walks the rows in
// order, so the sums are deterministic without atomics.
extern "C" __global__ void __launch_bounds__(256)
embedding_bwd_r256_c64_v256_bf16_b256(const int *tokens, const bf16 *dout, float *dtable) {
    const long long j = (long long)blockIdx.x * 256 + threadIdx.x;
    if (j >= 64) return;
    for (long long m = 0; m < 256; m++) {
        const int t = tokens[m];
        if (t < 0 || t >= 256) continue;
        float *p = dtable + (long long)t * 64 + j;
        st(p, ld(p) + ld(dout + m * 64 + j));
    }
}

// runtime.cu: kernels the CUDA backend itself launches (not plan steps): AdamW with fp32 master
// weights and a bf16 copy, the gradient square sum for clipping, the local-mode all-reduce over
// the ranks' buffers, and fp32 <-> bf16 conversion for host copies. Fixed names (gen/kernels.h).
extern "C" __global__ void __launch_bounds__(256)
adamw_fp32_master_bf16(float *master, bf16 *param, const float *grad, float *m, float *v, long long n,
                       float lr, float beta1, float beta2, float eps, float weight_decay,
                       float grad_scale, float bias1, float bias2) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
        const float g = grad[i] * grad_scale;
        const float mi = beta1 * m[i] + (1.f - beta1) * g;
        const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
        m[i] = mi; v[i] = vi;
        float p = master[i];
        p -= lr * ((mi / bias1) / (sqrtf(vi / bias2) + eps) + weight_decay * p);
        master[i] = p;
        if (param) param[i] = __float2bfloat16(p);
    }
}

// partial[blockIdx.x] = sum of x[i]^2 over the block's grid-stride share (the host adds the
// partials in double, in order: deterministic).
extern "C" __global__ void __launch_bounds__(256)
boost_sumsq_fp32(const float *x, long long n, float *partial) {
    float s = 0.f;
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        s += x[i] * x[i];
    s = block_sum<256>(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Local-mode all-reduce: bufs[r][i] = sum over r' of bufs[r'][i], in rank order 0..n-1.
extern "C" __global__ void __launch_bounds__(256)
boost_allreduce_bf16(bf16 *const *bufs, int nranks, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
        float s = 0.f;
        for (int r = 0; r < nranks; r++) s += __bfloat162float(bufs[r][i]);
        for (int r = 0; r < nranks; r++) bufs[r][i] = __float2bfloat16(s);
    }
}
extern "C" __global__ void __launch_bounds__(256)
boost_allreduce_fp32(float *const *bufs, int nranks, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
        float s = 0.f;
        for (int r = 0; r < nranks; r++) s += bufs[r][i];
        for (int r = 0; r < nranks; r++) bufs[r][i] = s;
    }
}

extern "C" __global__ void __launch_bounds__(256)
boost_fp32_to_bf16(const float *src, bf16 *dst, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        dst[i] = __float2bfloat16(src[i]);
}
extern "C" __global__ void __launch_bounds__(256)
boost_bf16_to_fp32(const bf16 *src, float *dst, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        dst[i] = __bfloat162float(src[i]);
}
