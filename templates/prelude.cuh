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
