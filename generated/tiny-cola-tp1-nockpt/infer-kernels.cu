// kernels.cu: the fused kernels of run tiny-cola (model tiny-cola) for h100 (sm_90), specialised from
// BOOST's templates/ by 'boost gen'; 24 kernels plus the runtime's own. Do not edit:
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

// ---- tensor cores: warp-level mma.sync m16n8k16, bf16 inputs, fp32 accumulators (sm_80+) ----
// One warp computes C[16x8] += A[16x16] B[16x8]; each lane holds fixed elements of every operand
// (the PTX ISA's fragment layout of mma.m16n8k16 for .bf16). With g = lane / 4 and t = lane % 4:
//   A: unsigned a[4], 2 bf16 each (element e = 0..7 is register e/2, low half first):
//      row g + 8*((e/2)%2), column 2t + 8*(e/4) + e%2
//   B: unsigned b[2] (element e = 0..3): row (the k index) 2t + 8*(e/2) + e%2, column (n) g
//   C: float c[4] (element e = 0..3): row g + 8*(e/2), column 2t + e%2
// So the 4 lanes of a group share rows (row statistics reduce with shuffles over lane bits 0-1),
// and C element e lies in row half e/2. The six functions below are the one definition of the
// layout: kernels place C elements with them (masks, stores), and the CPU emulator's mma
// (tests/gpu/cuda_emu.hpp) assembles A, B and C with them, so a kernel that indexes fragments
// wrongly fails there; test_kernels_emu checks them against the PTX ISA's table, and the ldmatrix
// loads below (which follow the ISA's rule for ldmatrix) against a plain product.
static __device__ __forceinline__ int mma_a_row(int lane, int e) { return (lane >> 2) + 8 * ((e >> 1) & 1); }
static __device__ __forceinline__ int mma_a_col(int lane, int e) { return 2 * (lane & 3) + 8 * (e >> 2) + (e & 1); }
static __device__ __forceinline__ int mma_b_row(int lane, int e) { return 2 * (lane & 3) + 8 * (e >> 1) + (e & 1); }
static __device__ __forceinline__ int mma_b_col(int lane, int e) { (void)e; return lane >> 2; }
static __device__ __forceinline__ int mma_c_row(int lane, int e) { return (lane >> 2) + 8 * (e >> 1); }
static __device__ __forceinline__ int mma_c_col(int lane, int e) { return 2 * (lane & 3) + (e & 1); }

// BOOST_DYNAMIC_SHARED(p): p points at the block's dynamic shared memory (16-byte aligned), sized at
// launch (the plan's smem=; above 48 KiB the backend raises the function's limit first). On the
// emulator it is the launch's buffer, which ends where the launch's size ends.
#ifdef BOOST_CUDA_EMU
#define BOOST_DYNAMIC_SHARED(p) unsigned char *const p = emu_dynamic_shared()
#else
#define BOOST_DYNAMIC_SHARED(p) extern __shared__ __align__(16) unsigned char boost_dynamic_smem[]; \
    unsigned char *const p = boost_dynamic_smem
#endif

// Two floats as a bf16 pair (lo in the low half: the lower column or row index), rounded to nearest.
static __device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(unsigned *)&h;
}

// c += a b on the tensor cores (every lane of the warp calls it with its fragments).
static __device__ __forceinline__ void mma_bf16_16816(float c[4], const unsigned a[4], const unsigned b[2]) {
#ifdef BOOST_CUDA_EMU
    emu_mma_bf16_16816(c, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// ldmatrix: the warp loads NMAT 8x8 bf16 matrices from shared memory; lane l gives the address of
// row l%8 of matrix l/8 (16 bytes, 16-byte aligned). Register i of lane l receives matrix i's
// elements (row l/4, columns 2(l%4), 2(l%4)+1), or with TRANS (rows 2(l%4), 2(l%4)+1 of column l/4):
// exactly an A or B fragment quarter of the layout above.
// Only x2 and x4 exist here: an x1 would need its own PTX (the branches below would issue x2).
template <int NMAT, bool TRANS>
static __device__ __forceinline__ void ldsm(unsigned *r, const bf16 *row) {
    static_assert(NMAT == 2 || NMAT == 4, "ldsm: NMAT must be 2 or 4 (ldmatrix .x2 / .x4)");
#ifdef BOOST_CUDA_EMU
    emu_ldmatrix(r, NMAT, TRANS, row);
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if (NMAT == 4 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else if (NMAT == 4)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else if (!TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
#endif
}

// Fragment loads from shared memory with ldmatrix (bf16, row stride ld elements a multiple of 8,
// s 16-byte aligned; every lane of the warp calls them with the same s):
// mma_load_a: A = s[row * ld + col], a [16, 16] row-major tile;
// mma_load_b_nk: two B fragments (n-tiles n0 = 0 and 8), B[k][n] = s[n * ld + k]: B stored
//   transposed, e.g. K [keys, d] for S = Q K^T;
// mma_load_b_kn: two B fragments (n-tiles 0 and 8), B[k][n] = s[k * ld + n]: B stored as is, e.g.
//   V [keys, d] for O = P V (the transposing load).
static __device__ __forceinline__ void mma_load_a(unsigned a[4], const bf16 *s, int ld) {
    const int lane = threadIdx.x & 31;   // matrices: rows 0-7 / 8-15 by lane bit 3, columns 0-7 / 8-15 by bit 4
    ldsm<4, false>(a, s + ((lane & 7) + 8 * ((lane >> 3) & 1)) * ld + 8 * (lane >> 4));
}
static __device__ __forceinline__ void mma_load_b_nk(unsigned b0[2], unsigned b1[2], const bf16 *s, int ld) {
    const int lane = threadIdx.x & 31;   // matrices: k 0-7 / 8-15 by lane bit 3, n-tile by bit 4
    unsigned r[4];
    ldsm<4, false>(r, s + ((lane & 7) + 8 * (lane >> 4)) * ld + 8 * ((lane >> 3) & 1));
    b0[0] = r[0]; b0[1] = r[1]; b1[0] = r[2]; b1[1] = r[3];
}
static __device__ __forceinline__ void mma_load_b_kn(unsigned b0[2], unsigned b1[2], const bf16 *s, int ld) {
    const int lane = threadIdx.x & 31;   // matrices: k 0-7 / 8-15 by lane bit 3, n-tile by bit 4
    unsigned r[4];
    ldsm<4, true>(r, s + ((lane & 7) + 8 * ((lane >> 3) & 1)) * ld + 8 * (lane >> 4));
    b0[0] = r[0]; b0[1] = r[1]; b1[0] = r[2]; b1[1] = r[3];
}

// Two C tiles (columns 0-7 and 8-15 of a [16, 16] result) as the A fragment of the next mma,
// rounded to bf16: A element e sits in C tile e/4 at C element 2*((e/2)%2) + e%2 (same row and
// column, from the layout above), so P = softmax(S) never leaves registers.
static __device__ __forceinline__ void mma_c_to_a(unsigned a[4], const float c0[4], const float c1[4]) {
    a[0] = pack_bf16x2(c0[0], c0[1]);
    a[1] = pack_bf16x2(c0[2], c0[3]);
    a[2] = pack_bf16x2(c1[0], c1[1]);
    a[3] = pack_bf16x2(c1[2], c1[3]);
}

// Copies a [ROWS, COLS] tile (row r at src + r * ld; rows >= nvalid read as 0) into shared memory
// as bf16 with row stride LDS, 8 columns a thread-step (16-byte loads where aligned); all NT
// threads of the block call it. COLS and LDS multiples of 8, dst 16-byte aligned.
template <int ROWS, int COLS, int LDS, int NT, class T>
static __device__ __forceinline__ void tile_to_shared(bf16 *dst, const T *src, long long ld, int nvalid) {
    for (int c = threadIdx.x; c < ROWS * COLS / 8; c += NT) {
        const int r = c / (COLS / 8), col = (c % (COLS / 8)) * 8;
        float x[8];
        if (r < nvalid) ldv<8>(src + r * ld + col, x);
        else for (int e = 0; e < 8; e++) x[e] = 0.f;
        uint4 u;
        u.x = pack_bf16x2(x[0], x[1]); u.y = pack_bf16x2(x[2], x[3]);
        u.z = pack_bf16x2(x[4], x[5]); u.w = pack_bf16x2(x[6], x[7]);
        *(uint4 *)(dst + r * LDS + col) = u;
    }
}

// cp.async: 16-byte copies from global to shared memory that run while the warp computes.
// cp_async_commit() closes the thread's current group of copies; cp_async_wait<N>() waits until at
// most N of its committed groups are still in flight (then a __syncthreads makes every thread's
// copies visible to the block).
static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
#ifdef BOOST_CUDA_EMU
    emu_cp_async16(dst, src);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
#endif
}
static __device__ __forceinline__ void cp_async_commit() {
#ifdef BOOST_CUDA_EMU
    emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> static __device__ __forceinline__ void cp_async_wait() {
#ifdef BOOST_CUDA_EMU
    emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
#endif
}

// tile_to_shared without waiting: cp.async when the source is bf16 with 16-byte aligned rows, else
// the plain copy (then done on return). Rows >= nvalid are zero-filled with plain stores. The
// caller commits, waits and synchronises.
template <int ROWS, int COLS, int LDS, int NT, class T>
static __device__ __forceinline__ void tile_to_shared_async(bf16 *dst, const T *src, long long ld, int nvalid) {
    if (sizeof(T) != 2 || ld % 8 || !aligned16(src)) {
        tile_to_shared<ROWS, COLS, LDS, NT>(dst, src, ld, nvalid);
        return;
    }
    for (int c = threadIdx.x; c < ROWS * COLS / 8; c += NT) {
        const int r = c / (COLS / 8), col = (c % (COLS / 8)) * 8;
        if (r < nvalid) cp_async16(dst + r * LDS + col, src + r * ld + col);
        else { uint4 z; z.x = z.y = z.z = z.w = 0u; *(uint4 *)(dst + r * LDS + col) = z; }
    }
}

// Asks L2 for the 128-byte lines of a [ROWS, COLS] tile (rows < nvalid) that a later copy will read,
// so that the copy waits on L2 rather than on memory. No effect on results.
template <int ROWS, int COLS, int NT, class T>
static __device__ __forceinline__ void tile_prefetch_l2(const T *src, long long ld, int nvalid) {
    constexpr int LINES = (COLS * (int)sizeof(T) + 127) / 128;   // lines a row (each starts inside it)
    for (int c = threadIdx.x; c < ROWS * LINES; c += NT) {
        const int r = c / LINES;
#ifndef BOOST_CUDA_EMU
        if (r < nvalid) asm volatile("prefetch.global.L2 [%0];\n" :: "l"((const char *)(src + r * ld) + (c % LINES) * 128));
#else
        (void)r; (void)src; (void)ld; (void)nvalid;
#endif
    }
}


// embedding_fwd: out[m, j] = table[tokens[m], j]; table is the rank's vocab x cols block.
// One thread per VEC columns of a row. Tokens outside 0..vocab-1 give a zero row.
extern "C" __global__ void __launch_bounds__(256)
embedding_fwd_r1_c128_v256_bf16_b256(const int *tokens, const bf16 *table, bf16 *out) {
    constexpr long long CHUNKS = 128 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 1 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    const int t = tokens[m];
    float v[8];
    if (t >= 0 && t < 256) ldv<8>(table + (long long)t * 128 + j, v);
    else for (int e = 0; e < 8; e++) v[e] = 0.f;
    stv<8>(out + m * 128 + j, v);
}

// rmsnorm_fwd: rstd[m] = 1/sqrt(S/divisor + eps), S = sumsq[m] if given else sum_j x[m,j]^2;
// out[m,j] = x[m,j] * rstd[m] * gamma[j]. One block per row.
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd_r1_c128_ldx128_ldo128_dv128_e1em05_bf16_b256(const bf16 *x, const bf16 *gamma, bf16 *out, float *rstd,
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

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(stat[m] + eps) (the summed online-norm statistics, which follow h's rows in the same
// all-reduce buffer), y = h*rstd; norm=0: y = h. Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r1_c96_ldh96_ldy96_ldz96_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd, const bf16 *stat) {
    const long long m = blockIdx.x;
    const bf16 *hr = h + m * 96;
    float r = 1.f;
    if (0) {
        r = rsqrtf(ld(stat + m) + 1e-05f);
        if (rstd && threadIdx.x == 0) st(rstd + m, r);
    }
    for (int j = threadIdx.x * 8; j < 96; j += 256 * 8) {
        float a[8];
        ldv<8>(hr + j, a);
        for (int e = 0; e < 8; e++) a[e] *= r;
        if (y) stv<8>(y + m * 96 + j, a);
        for (int e = 0; e < 8; e++) a[e] = act_apply(1, a[e]);
        stv<8>(z + m * 96 + j, a);
    }
}

// rope_at: RoPE for inference: row m sits at position pos[0] + m (pos: an exact integer in fp32,
// written by the runtime before each decode step); otherwise as rope.cu. One thread per pair.
extern "C" __global__ void __launch_bounds__(256)
rope_at_r1_h4_d32_ldx384_th10000_bf16_b256(bf16 *x, const float *pos) {
    constexpr int HALF = 32 / 2;
    const long long t = (long long)blockIdx.x * 256 + threadIdx.x;
    if (t >= (long long)1 * 4 * HALF) return;
    const int i = (int)(t % HALF);
    const long long mh = t / HALF;
    const int head = (int)(mh % 4);
    const long long m = mh / 4;
    const long long p = (long long)ld(pos) + m;
    const double f = (double)p * pow((double)10000.f, -2.0 * i / (double)32);
    double sn, cs;
    sincos(f, &sn, &cs);
    const float c = (float)cs, s = (float)sn;
    bf16 *row = x + m * 384 + (long long)head * 32;
    const float a = ld(row + i), b = ld(row + i + HALF);
    st(row + i, a * c - b * s);
    st(row + i + HALF, b * c + a * s);
}

// kv_append: the rows' K and V heads into the KV cache [kv_heads][max_seq][head_dim] at positions
// pos[0] + m. One thread per element of a K row (and the same of V).
extern "C" __global__ void __launch_bounds__(256)
kv_append_r1_kv4_d32_S64_ldk384_ldv384_bf16_b256(const bf16 *k, const bf16 *v, const float *pos, bf16 *kcache, bf16 *vcache) {
    const long long t = (long long)blockIdx.x * 256 + threadIdx.x;
    if (t >= (long long)1 * 4 * 32) return;
    const int d = (int)(t % 32);
    const int h = (int)((t / 32) % 4);
    const long long m = t / ((long long)32 * 4);
    const long long p = (long long)ld(pos) + m;
    if (p < 0 || p >= 64) return;
    const long long c = ((long long)h * 64 + p) * 32 + d;
    st(kcache + c, ld(k + m * 384 + (long long)h * 32 + d));
    st(vcache + c, ld(v + m * 384 + (long long)h * 32 + d));
}

// attention_decode: query row m (position p = pos[0] + m) of head h against the KV cache rows
// 0..p of kv head h / (heads/kv_heads): out = softmax(scale q k^T) v. One block per (row, head):
// the scores sit in shared memory (max_seq floats), then a block max and sum, then each thread
// owns head_dim/BLOCK output columns.
extern "C" __global__ void __launch_bounds__(128)
attention_decode_r1_h4_kv4_d32_S64_ldq384_ldo128_sc0p1767767_bf16_b128(const bf16 *q, const bf16 *kcache, const bf16 *vcache, const float *pos, bf16 *out) {
    __shared__ float s[64];
    const int h = blockIdx.x % 4;
    const long long m = blockIdx.x / 4;
    const long long p = (long long)ld(pos) + m;
    const int kvh = h / (4 / 4);
    const long long n = p < 64 ? p + 1 : 64;
    const bf16 *qr = q + m * 384 + (long long)h * 32;
    const bf16 *K = kcache + (long long)kvh * 64 * 32;
    const bf16 *V = vcache + (long long)kvh * 64 * 32;
    float mx = -3.0e38f;
    for (long long j = threadIdx.x; j < n; j += 128) {
        float d = 0.f;
        for (int t = 0; t < 32; t++) d += ld(qr + t) * ld(K + j * 32 + t);
        s[j] = d * 0.176776695f;
        mx = fmaxf(mx, s[j]);
    }
    mx = block_max<128>(mx);
    float sum = 0.f;
    for (long long j = threadIdx.x; j < n; j += 128) { s[j] = expf(s[j] - mx); sum += s[j]; }
    sum = block_sum<128>(sum);
    __syncthreads();
    for (int t = threadIdx.x; t < 32; t += 128) {
        float o = 0.f;
        for (long long j = 0; j < n; j++) o += s[j] * ld(V + j * 32 + t);
        st(out + m * 128 + (long long)h * 32 + t, o / sum);
    }
}

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(stat[m] + eps) (the summed online-norm statistics, which follow h's rows in the same
// all-reduce buffer), y = h*rstd; norm=0: y = h. Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r1_c32_ldh32_ldy32_ldz32_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd, const bf16 *stat) {
    const long long m = blockIdx.x;
    const bf16 *hr = h + m * 32;
    float r = 1.f;
    if (0) {
        r = rsqrtf(ld(stat + m) + 1e-05f);
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
add_r1_c128_lda128_ldb128_ldo128_bf16_b256(const bf16 *a, const bf16 *b, bf16 *out) {
    constexpr long long CHUNKS = 128 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 1 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float u[8], v[8];
    ldv<8>(a + m * 128 + j, u);
    ldv<8>(b + m * 128 + j, v);
    for (int e = 0; e < 8; e++) u[e] += v[e];
    stv<8>(out + m * 128 + j, u);
}

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(stat[m] + eps) (the summed online-norm statistics, which follow h's rows in the same
// all-reduce buffer), y = h*rstd; norm=0: y = h. Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r1_c64_ldh64_ldy64_ldz64_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd, const bf16 *stat) {
    const long long m = blockIdx.x;
    const bf16 *hr = h + m * 64;
    float r = 1.f;
    if (0) {
        r = rsqrtf(ld(stat + m) + 1e-05f);
        if (rstd && threadIdx.x == 0) st(rstd + m, r);
    }
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float a[8];
        ldv<8>(hr + j, a);
        for (int e = 0; e < 8; e++) a[e] *= r;
        if (y) stv<8>(y + m * 64 + j, a);
        for (int e = 0; e < 8; e++) a[e] = act_apply(1, a[e]);
        stv<8>(z + m * 64 + j, a);
    }
}

// glu_fwd: out = act(gate) * up. One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
glu_fwd_r1_c352_ldg704_ldu704_ldo352_id_bf16_b256(const bf16 *gate, const bf16 *up, bf16 *out) {
    constexpr long long CHUNKS = 352 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 1 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float g[8], u[8];
    ldv<8>(gate + m * 704 + j, g);
    ldv<8>(up + m * 704 + j, u);
    for (int e = 0; e < 8; e++) g[e] = act_apply(0, g[e]) * u[e];
    stv<8>(out + m * 352 + j, g);
}

// xent_fwd: vocabulary-parallel cross-entropy, the local part over cols = the rank's vocab slice
// starting at vocab_offset. stats[m*3+0] = local max, [1] = sum_j exp(l - local max), [2] = the
// target's logit when the target is in this slice, else 0. One block per row.
extern "C" __global__ void __launch_bounds__(256)
xent_fwd_r1_c256_ldl256_voR_bf16_b256(const bf16 *logits, const int *targets, float *stats, long long vocab_offset_arg) {
    const long long m = blockIdx.x;
    const bf16 *lr = logits + m * 256;
    float mx = __int_as_float(0xff800000);
    for (int j = threadIdx.x * 8; j < 256; j += 256 * 8) {
        float a[8];
        ldv<8>(lr + j, a);
        for (int e = 0; e < 8; e++) mx = fmaxf(mx, a[e]);
    }
    mx = block_max<256>(mx);
    float se = 0.f;
    for (int j = threadIdx.x * 8; j < 256; j += 256 * 8) {
        float a[8];
        ldv<8>(lr + j, a);
        for (int e = 0; e < 8; e++) se += expf(a[e] - mx);
    }
    se = block_sum<256>(se);
    if (threadIdx.x == 0) {
        const long long t = (long long)targets[m] - (long long)(vocab_offset_arg);
        st(stats + m * 3 + 0, mx);
        st(stats + m * 3 + 1, se);
        st(stats + m * 3 + 2, (t >= 0 && t < 256) ? ld(lr + t) : 0.f);
    }
}

// xent_combine: stats_all = the allgather of every rank's stats (rows x 3*tp). Global max g,
// sumexp = sum_r se_r*exp(max_r - g), lse[m] = g + log(sumexp), target logit = sum_r t_r,
// loss[0] = mean_m (lse[m] - target logit). One block; fixed summation order (deterministic).
extern "C" __global__ void __launch_bounds__(256)
xent_combine_r1_tp1_bf16_b256(const float *stats_all, float *lse, float *loss) {
    float total = 0.f;
    for (long long m = threadIdx.x; m < 1; m += 256) {
        const float *s = stats_all + m * 3 * 1;
        float g = __int_as_float(0xff800000), tl = 0.f, se = 0.f;
        for (int r = 0; r < 1; r++) g = fmaxf(g, ld(s + 3 * r));
        for (int r = 0; r < 1; r++) {
            se += ld(s + 3 * r + 1) * expf(ld(s + 3 * r) - g);
            tl += ld(s + 3 * r + 2);
        }
        const float l = g + logf(se);
        st(lse + m, l);
        total += l - tl;
    }
    total = block_sum<256>(total);
    if (threadIdx.x == 0) st(loss, total / (float)1);
}

// embedding_fwd: out[m, j] = table[tokens[m], j]; table is the rank's vocab x cols block.
// One thread per VEC columns of a row. Tokens outside 0..vocab-1 give a zero row.
extern "C" __global__ void __launch_bounds__(256)
embedding_fwd_r32_c128_v256_bf16_b256(const int *tokens, const bf16 *table, bf16 *out) {
    constexpr long long CHUNKS = 128 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 32 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    const int t = tokens[m];
    float v[8];
    if (t >= 0 && t < 256) ldv<8>(table + (long long)t * 128 + j, v);
    else for (int e = 0; e < 8; e++) v[e] = 0.f;
    stv<8>(out + m * 128 + j, v);
}

// rmsnorm_fwd: rstd[m] = 1/sqrt(S/divisor + eps), S = sumsq[m] if given else sum_j x[m,j]^2;
// out[m,j] = x[m,j] * rstd[m] * gamma[j]. One block per row.
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd_r32_c128_ldx128_ldo128_dv128_e1em05_bf16_b256(const bf16 *x, const bf16 *gamma, bf16 *out, float *rstd,
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

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(stat[m] + eps) (the summed online-norm statistics, which follow h's rows in the same
// all-reduce buffer), y = h*rstd; norm=0: y = h. Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r32_c96_ldh96_ldy96_ldz96_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd, const bf16 *stat) {
    const long long m = blockIdx.x;
    const bf16 *hr = h + m * 96;
    float r = 1.f;
    if (0) {
        r = rsqrtf(ld(stat + m) + 1e-05f);
        if (rstd && threadIdx.x == 0) st(rstd + m, r);
    }
    for (int j = threadIdx.x * 8; j < 96; j += 256 * 8) {
        float a[8];
        ldv<8>(hr + j, a);
        for (int e = 0; e < 8; e++) a[e] *= r;
        if (y) stv<8>(y + m * 96 + j, a);
        for (int e = 0; e < 8; e++) a[e] = act_apply(1, a[e]);
        stv<8>(z + m * 96 + j, a);
    }
}

// rope_at: RoPE for inference: row m sits at position pos[0] + m (pos: an exact integer in fp32,
// written by the runtime before each decode step); otherwise as rope.cu. One thread per pair.
extern "C" __global__ void __launch_bounds__(256)
rope_at_r32_h4_d32_ldx384_th10000_bf16_b256(bf16 *x, const float *pos) {
    constexpr int HALF = 32 / 2;
    const long long t = (long long)blockIdx.x * 256 + threadIdx.x;
    if (t >= (long long)32 * 4 * HALF) return;
    const int i = (int)(t % HALF);
    const long long mh = t / HALF;
    const int head = (int)(mh % 4);
    const long long m = mh / 4;
    const long long p = (long long)ld(pos) + m;
    const double f = (double)p * pow((double)10000.f, -2.0 * i / (double)32);
    double sn, cs;
    sincos(f, &sn, &cs);
    const float c = (float)cs, s = (float)sn;
    bf16 *row = x + m * 384 + (long long)head * 32;
    const float a = ld(row + i), b = ld(row + i + HALF);
    st(row + i, a * c - b * s);
    st(row + i + HALF, b * c + a * s);
}

// kv_append: the rows' K and V heads into the KV cache [kv_heads][max_seq][head_dim] at positions
// pos[0] + m. One thread per element of a K row (and the same of V).
extern "C" __global__ void __launch_bounds__(256)
kv_append_r32_kv4_d32_S64_ldk384_ldv384_bf16_b256(const bf16 *k, const bf16 *v, const float *pos, bf16 *kcache, bf16 *vcache) {
    const long long t = (long long)blockIdx.x * 256 + threadIdx.x;
    if (t >= (long long)32 * 4 * 32) return;
    const int d = (int)(t % 32);
    const int h = (int)((t / 32) % 4);
    const long long m = t / ((long long)32 * 4);
    const long long p = (long long)ld(pos) + m;
    if (p < 0 || p >= 64) return;
    const long long c = ((long long)h * 64 + p) * 32 + d;
    st(kcache + c, ld(k + m * 384 + (long long)h * 32 + d));
    st(vcache + c, ld(v + m * 384 + (long long)h * 32 + d));
}

// attention_decode: query row m (position p = pos[0] + m) of head h against the KV cache rows
// 0..p of kv head h / (heads/kv_heads): out = softmax(scale q k^T) v. One block per (row, head):
// the scores sit in shared memory (max_seq floats), then a block max and sum, then each thread
// owns head_dim/BLOCK output columns.
extern "C" __global__ void __launch_bounds__(128)
attention_decode_r32_h4_kv4_d32_S64_ldq384_ldo128_sc0p1767767_bf16_b128(const bf16 *q, const bf16 *kcache, const bf16 *vcache, const float *pos, bf16 *out) {
    __shared__ float s[64];
    const int h = blockIdx.x % 4;
    const long long m = blockIdx.x / 4;
    const long long p = (long long)ld(pos) + m;
    const int kvh = h / (4 / 4);
    const long long n = p < 64 ? p + 1 : 64;
    const bf16 *qr = q + m * 384 + (long long)h * 32;
    const bf16 *K = kcache + (long long)kvh * 64 * 32;
    const bf16 *V = vcache + (long long)kvh * 64 * 32;
    float mx = -3.0e38f;
    for (long long j = threadIdx.x; j < n; j += 128) {
        float d = 0.f;
        for (int t = 0; t < 32; t++) d += ld(qr + t) * ld(K + j * 32 + t);
        s[j] = d * 0.176776695f;
        mx = fmaxf(mx, s[j]);
    }
    mx = block_max<128>(mx);
    float sum = 0.f;
    for (long long j = threadIdx.x; j < n; j += 128) { s[j] = expf(s[j] - mx); sum += s[j]; }
    sum = block_sum<128>(sum);
    __syncthreads();
    for (int t = threadIdx.x; t < 32; t += 128) {
        float o = 0.f;
        for (long long j = 0; j < n; j++) o += s[j] * ld(V + j * 32 + t);
        st(out + m * 128 + (long long)h * 32 + t, o / sum);
    }
}

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(stat[m] + eps) (the summed online-norm statistics, which follow h's rows in the same
// all-reduce buffer), y = h*rstd; norm=0: y = h. Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r32_c32_ldh32_ldy32_ldz32_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd, const bf16 *stat) {
    const long long m = blockIdx.x;
    const bf16 *hr = h + m * 32;
    float r = 1.f;
    if (0) {
        r = rsqrtf(ld(stat + m) + 1e-05f);
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
add_r32_c128_lda128_ldb128_ldo128_bf16_b256(const bf16 *a, const bf16 *b, bf16 *out) {
    constexpr long long CHUNKS = 128 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 32 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float u[8], v[8];
    ldv<8>(a + m * 128 + j, u);
    ldv<8>(b + m * 128 + j, v);
    for (int e = 0; e < 8; e++) u[e] += v[e];
    stv<8>(out + m * 128 + j, u);
}

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(stat[m] + eps) (the summed online-norm statistics, which follow h's rows in the same
// all-reduce buffer), y = h*rstd; norm=0: y = h. Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r32_c64_ldh64_ldy64_ldz64_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd, const bf16 *stat) {
    const long long m = blockIdx.x;
    const bf16 *hr = h + m * 64;
    float r = 1.f;
    if (0) {
        r = rsqrtf(ld(stat + m) + 1e-05f);
        if (rstd && threadIdx.x == 0) st(rstd + m, r);
    }
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float a[8];
        ldv<8>(hr + j, a);
        for (int e = 0; e < 8; e++) a[e] *= r;
        if (y) stv<8>(y + m * 64 + j, a);
        for (int e = 0; e < 8; e++) a[e] = act_apply(1, a[e]);
        stv<8>(z + m * 64 + j, a);
    }
}

// glu_fwd: out = act(gate) * up. One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
glu_fwd_r32_c352_ldg704_ldu704_ldo352_id_bf16_b256(const bf16 *gate, const bf16 *up, bf16 *out) {
    constexpr long long CHUNKS = 352 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 32 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float g[8], u[8];
    ldv<8>(gate + m * 704 + j, g);
    ldv<8>(up + m * 704 + j, u);
    for (int e = 0; e < 8; e++) g[e] = act_apply(0, g[e]) * u[e];
    stv<8>(out + m * 352 + j, g);
}

// xent_fwd: vocabulary-parallel cross-entropy, the local part over cols = the rank's vocab slice
// starting at vocab_offset. stats[m*3+0] = local max, [1] = sum_j exp(l - local max), [2] = the
// target's logit when the target is in this slice, else 0. One block per row.
extern "C" __global__ void __launch_bounds__(256)
xent_fwd_r32_c256_ldl256_voR_bf16_b256(const bf16 *logits, const int *targets, float *stats, long long vocab_offset_arg) {
    const long long m = blockIdx.x;
    const bf16 *lr = logits + m * 256;
    float mx = __int_as_float(0xff800000);
    for (int j = threadIdx.x * 8; j < 256; j += 256 * 8) {
        float a[8];
        ldv<8>(lr + j, a);
        for (int e = 0; e < 8; e++) mx = fmaxf(mx, a[e]);
    }
    mx = block_max<256>(mx);
    float se = 0.f;
    for (int j = threadIdx.x * 8; j < 256; j += 256 * 8) {
        float a[8];
        ldv<8>(lr + j, a);
        for (int e = 0; e < 8; e++) se += expf(a[e] - mx);
    }
    se = block_sum<256>(se);
    if (threadIdx.x == 0) {
        const long long t = (long long)targets[m] - (long long)(vocab_offset_arg);
        st(stats + m * 3 + 0, mx);
        st(stats + m * 3 + 1, se);
        st(stats + m * 3 + 2, (t >= 0 && t < 256) ? ld(lr + t) : 0.f);
    }
}

// xent_combine: stats_all = the allgather of every rank's stats (rows x 3*tp). Global max g,
// sumexp = sum_r se_r*exp(max_r - g), lse[m] = g + log(sumexp), target logit = sum_r t_r,
// loss[0] = mean_m (lse[m] - target logit). One block; fixed summation order (deterministic).
extern "C" __global__ void __launch_bounds__(256)
xent_combine_r32_tp1_bf16_b256(const float *stats_all, float *lse, float *loss) {
    float total = 0.f;
    for (long long m = threadIdx.x; m < 32; m += 256) {
        const float *s = stats_all + m * 3 * 1;
        float g = __int_as_float(0xff800000), tl = 0.f, se = 0.f;
        for (int r = 0; r < 1; r++) g = fmaxf(g, ld(s + 3 * r));
        for (int r = 0; r < 1; r++) {
            se += ld(s + 3 * r + 1) * expf(ld(s + 3 * r) - g);
            tl += ld(s + 3 * r + 2);
        }
        const float l = g + logf(se);
        st(lse + m, l);
        total += l - tl;
    }
    total = block_sum<256>(total);
    if (threadIdx.x == 0) st(loss, total / (float)32);
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

// The same update for every parameter of a rank in one launch (multi-tensor apply): master, param,
// grad, m, v are the rank's whole buffers (element offsets as in runtime/cuda.c); block b updates
// chunk b of the table, chunks[3b..3b+2] = {first element, count (<= 65536), flags: 1 weight decay,
// 2 the parameter has a bf16 copy}. Elementwise the arithmetic of adamw_fp32_master_bf16.
extern "C" __global__ void __launch_bounds__(256)
adamw_multi_fp32_master_bf16(float *master, bf16 *param, const float *grad, float *m, float *v,
                             const long long *chunks, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float grad_scale, float bias1, float bias2) {
    const long long first = chunks[3 * (long long)blockIdx.x], count = chunks[3 * (long long)blockIdx.x + 1];
    const long long flags = chunks[3 * (long long)blockIdx.x + 2];
    const float wd = (flags & 1) ? weight_decay : 0.f;
    for (long long j = threadIdx.x; j < count; j += 256) {
        const long long i = first + j;
        const float g = grad[i] * grad_scale;
        const float mi = beta1 * m[i] + (1.f - beta1) * g;
        const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
        m[i] = mi; v[i] = vi;
        float p = master[i];
        p -= lr * ((mi / bias1) / (sqrtf(vi / bias2) + eps) + wd * p);
        master[i] = p;
        if (flags & 2) param[i] = __float2bfloat16(p);
    }
}

// ZeRO-1 (zero=1): the same update over this dp rank's shards, whose fp32 masters and moments are
// stored apart from the whole params and grads. chunks[5b..5b+4] = {param/grad element, master
// element, m/v element, count (<= 65536), flags as above}; an fp32 param's master is the param.
extern "C" __global__ void __launch_bounds__(256)
adamw_multi_sharded(float *master, bf16 *param, const float *grad, float *m, float *v,
                    const long long *chunks, float lr, float beta1, float beta2, float eps,
                    float weight_decay, float grad_scale, float bias1, float bias2) {
    const long long *c = chunks + 5 * (long long)blockIdx.x;
    const long long first = c[0], mfirst = c[1], sfirst = c[2], count = c[3], flags = c[4];
    const float wd = (flags & 1) ? weight_decay : 0.f;
    for (long long j = threadIdx.x; j < count; j += 256) {
        const long long i = first + j, k = sfirst + j;
        const float g = grad[i] * grad_scale;
        const float mi = beta1 * m[k] + (1.f - beta1) * g;
        const float vi = beta2 * v[k] + (1.f - beta2) * g * g;
        m[k] = mi; v[k] = vi;
        float p = master[mfirst + j];
        p -= lr * ((mi / bias1) / (sqrtf(vi / bias2) + eps) + wd * p);
        master[mfirst + j] = p;
        if (flags & 2) param[i] = __float2bfloat16(p);
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

// x[i] *= s (the scale= of a group=edp all-reduce: the expert gradients' 1/dp).
extern "C" __global__ void __launch_bounds__(256)
boost_scale_fp32(float *x, float s, long long n) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        x[i] *= s;
}

// Expert parallelism: row r of x [rows, row_bytes] is set to zero where the slot map says the slot
// is empty (map[r] < 0), so only filled slots carry values through the ep all-to-all.
extern "C" __global__ void __launch_bounds__(256)
boost_ep_mask_rows(unsigned char *x, const float *map, long long rows, long long row_bytes) {
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < rows * row_bytes; i += (long long)gridDim.x * 256)
        if (map[i / row_bytes] < 0.f) x[i] = 0;
}
