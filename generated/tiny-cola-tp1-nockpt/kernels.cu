// kernels.cu: the fused kernels of run tiny-cola (model tiny-cola) for h100 (sm_90), specialised from
// BOOST's templates/ by 'boost gen'; 22 kernels plus the runtime's own. Do not edit:
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
embedding_fwd_r256_c128_v256_bf16_b256(const int *tokens, const bf16 *table, bf16 *out) {
    constexpr long long CHUNKS = 128 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
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

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(stat[m] + eps) (the summed online-norm statistics, which follow h's rows in the same
// all-reduce buffer), y = h*rstd; norm=0: y = h. Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r256_c96_ldh96_ldy96_ldz96_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd, const bf16 *stat) {
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

// rope: in place on heads consecutive blocks of head_dim columns; position p = m % seq, pair
// (a, b) = (x[i], x[i + head_dim/2]), f = p * theta^(-2i/head_dim): a' = a cos f - b sin f,
// b' = b cos f + a sin f; inverse=1 rotates by -f. The angle is computed in double (positions
// reach tens of thousands of radians). One thread per pair.
extern "C" __global__ void __launch_bounds__(256)
rope_r256_h4_d32_ldx384_s64_th10000_inv0_bf16_b256(bf16 *x) {
    constexpr int HALF = 32 / 2;
    const long long t = (long long)blockIdx.x * 256 + threadIdx.x;
    if (t >= (long long)256 * 4 * HALF) return;
    const int i = (int)(t % HALF);
    const long long mh = t / HALF;
    const int head = (int)(mh % 4);
    const long long m = mh / 4;
    const long long p = m % 64;
    const double f = (double)p * pow((double)10000.f, -2.0 * i / (double)32);
    double sn, cs;
    sincos(f, &sn, &cs);
    const float c = (float)cs, s = 0 ? -(float)sn : (float)sn;
    bf16 *row = x + m * 384 + (long long)head * 32;
    const float a = ld(row + i), b = ld(row + i + HALF);
    st(row + i, a * c - b * s);
    st(row + i + HALF, b * c + a * s);
}

// boost:dynamic_smem attention_fwd_b4_s64_h4_kv4_d32_ldq384_ldk384_ldv384_ldo128_sc0p1767767_bf16_tc_q64k64 10240
// attention_fwd: causal attention on the tensor cores, FlashAttention-2 style (mma.sync m16n8k16,
// bf16 operands, fp32 accumulators; prelude.cuh has the fragment layout). One block of BQ/16 warps
// per (batch, head, tile of BQ queries); warp w owns queries q0+16w .. q0+16w+15 and keeps their Q
// (A fragments), scores, output and row statistics in registers. Keys and values stream through
// shared memory in tiles of BK ([BK, D] each in dynamic shared memory sized at launch, rows padded
// by 8 so that ldmatrix hits 32 different banks; V's B fragments come from the transposing ldmatrix), copied with cp.async so that V's copy
// overlaps S and the next K's copy overlaps P V. Per tile and warp: S = Q K^T (mma), an online softmax on S's C
// fragments in base 2 (row max and sum over the 4 lanes that share a row), P rounded to bf16 A
// fragments without leaving registers, O += P V (mma). Tiles past a warp's last query are skipped;
// only tiles that reach the diagonal or the sequence end are masked. The longest query tiles are
// launched first. out = softmax(scale q k^T + causal mask) v; lse[(b*heads+h)*seq + i] = the
// log-sum-exp of query i's scaled scores. GQA: head h reads kv head h / (heads/kv_heads).
// gen/kernels.c uses this template for head_dim a multiple of 16 up to 128, attention_fwd_simt.cu
// (CUDA cores) otherwise.
extern "C" __global__ void __launch_bounds__(64 * 2, 1)
attention_fwd_b4_s64_h4_kv4_d32_ldq384_ldk384_ldv384_ldo128_sc0p1767767_bf16_tc_q64k64(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *out, float *lse) {
    constexpr int D = 32, BQ = 64, BK = 64, SEQ = 64;
    constexpr int NT = BQ * 2, GROUP = 4 / 4, BH = 4 * 4;
    constexpr int KD = D / 16, NS = BK / 8, NO = D / 8;   // k-steps over D; n-tiles of S and of O
    constexpr int LDS = D + 8;                             // padded shared rows
    constexpr int NQB = (SEQ + BQ - 1) / BQ;
    BOOST_DYNAMIC_SHARED(smem);                            // 10240 bytes
    bf16 *const ks = (bf16 *)smem, *const vs = ks + BK * LDS;   // [BK, D] each, 16-byte aligned rows
    const float sl2 = 0.176776695f * 1.4426950409f;           // scores in base 2: scale * log2(e)
    const float NEG_INF = __int_as_float(0xff800000);
    const int qb = NQB - 1 - (int)(blockIdx.x / BH), bh = blockIdx.x % BH;
    const int h = bh % 4, b = bh / 4, kvh = h / GROUP;
    const int lane = threadIdx.x & 31, q0 = qb * BQ, w0 = q0 + (int)(threadIdx.x >> 5) * 16;
    const int wlast = w0 < SEQ ? min(w0 + 15, SEQ - 1) : -1;   // the warp's last query (-1: none)
    const long long seq0 = (long long)b * SEQ;                  // row of token 0 of this sequence

    unsigned qf[KD][4];                                    // Q [16, D] as A fragments
    for (int kd = 0; kd < KD; kd++)
        for (int r = 0; r < 4; r++) {
            const int i = w0 + mma_a_row(lane, 2 * r), d = kd * 16 + mma_a_col(lane, 2 * r);
            const bf16 *p = q + (seq0 + i) * 384 + h * D + d;
            qf[kd][r] = i < SEQ ? pack_bf16x2(ld(p), ld(p + 1)) : 0u;
        }
    float o[NO][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};   // m, l: row halves g, g+8
    for (int n = 0; n < NO; n++) for (int e = 0; e < 4; e++) o[n][e] = 0.f;

    // K and V tiles alternate through cp.async, FA2's overlap with single buffers: V of tile t
    // lands while the warps compute S, K of tile t+1 while they compute O += P V.
    const int last = min(q0 + BQ, SEQ) - 1;               // the block's last query
    tile_to_shared_async<BK, D, LDS, NT>(ks, k + seq0 * 384 + kvh * D, 384, SEQ);
    cp_async_commit();
    for (int k0 = 0; k0 <= last; k0 += BK) {
        const bool active = k0 <= wlast;                   // causal: else the warp's queries precede the tile
        cp_async_wait<0>();
        __syncthreads();                                   // K tile in; every warp is done with the last V tile
        tile_to_shared_async<BK, D, LDS, NT>(vs, v + (seq0 + k0) * 384 + kvh * D, 384, SEQ - k0);
        cp_async_commit();
        float s[NS][4];                                    // S [16, BK], then P
        if (active) {
            for (int n = 0; n < NS; n++) for (int e = 0; e < 4; e++) s[n][e] = 0.f;
            for (int n = 0; n < NS; n += 2)                    // two n-tiles (16 keys) an ldmatrix
                for (int kd = 0; kd < KD; kd++) {
                    unsigned b0[2], b1[2];
                    mma_load_b_nk(b0, b1, ks + n * 8 * LDS + kd * 16, LDS);
                    mma_bf16_16816(s[n], qf[kd], b0);
                    mma_bf16_16816(s[n + 1], qf[kd], b1);
                }
            const bool masked = k0 + BK - 1 > w0 || k0 + BK > SEQ;   // the tile reaches the diagonal or the end
            float mx[2] = {m[0], m[1]};
            for (int n = 0; n < NS; n++)
                for (int e = 0; e < 4; e++) {
                    float x = s[n][e] * sl2;
                    if (masked) {
                        const int key = k0 + n * 8 + mma_c_col(lane, e), qi = w0 + mma_c_row(lane, e);
                        if (key > qi || key >= SEQ) x = NEG_INF;
                    }
                    s[n][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float corr[2], rs[2] = {0.f, 0.f};
            for (int hf = 0; hf < 2; hf++) {                   // the 4 lanes of a group share the row
                mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
                mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
                corr[hf] = exp2f(m[hf] - mx[hf]);              // key 0 is in every row's first tile: mx finite
                m[hf] = mx[hf];
            }
            for (int n = 0; n < NS; n++)
                for (int e = 0; e < 4; e++) {
                    const float p = exp2f(s[n][e] - mx[e >> 1]);
                    s[n][e] = p;
                    rs[e >> 1] += p;
                }
            for (int hf = 0; hf < 2; hf++) l[hf] = l[hf] * corr[hf] + rs[hf];   // this lane's part of the row sum
            for (int n = 0; n < NO; n++)
                for (int e = 0; e < 4; e++) o[n][e] *= corr[e >> 1];
        }
        cp_async_wait<0>();
        __syncthreads();                                   // V tile in; every warp is done with the K tile
        if (k0 + BK <= last)
            tile_to_shared_async<BK, D, LDS, NT>(ks, k + (seq0 + k0 + BK) * 384 + kvh * D, 384, SEQ - k0 - BK);
        cp_async_commit();
        if (!active) continue;
        for (int kk = 0; kk < BK / 16; kk++) {             // O += P V, 16 keys a step
            unsigned pa[4];
            mma_c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
            for (int n = 0; n < NO; n += 2) {
                unsigned b0[2], b1[2];
                mma_load_b_kn(b0, b1, vs + kk * 16 * LDS + n * 8, LDS);
                mma_bf16_16816(o[n], pa, b0);
                mma_bf16_16816(o[n + 1], pa, b1);
            }
        }
    }
    if (wlast < 0) return;
    for (int hf = 0; hf < 2; hf++) {
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
    }
    for (int n = 0; n < NO; n++)
        for (int e = 0; e < 4; e++) {
            const int i = w0 + mma_c_row(lane, e);
            if (i < SEQ) st(out + (seq0 + i) * 128 + h * D + n * 8 + mma_c_col(lane, e), o[n][e] / l[e >> 1]);
        }
    if ((lane & 3) == 0)
        for (int hf = 0; hf < 2; hf++) {
            const int i = w0 + mma_c_row(lane, 2 * hf);
            if (i < SEQ) st(lse + ((long long)b * 4 + h) * SEQ + i, m[hf] * 0.6931471806f + logf(l[hf]));
        }
}

// bottleneck_act: after the all-reduce of a bottleneck's A output. norm=1: rstd[m] =
// 1/sqrt(stat[m] + eps) (the summed online-norm statistics, which follow h's rows in the same
// all-reduce buffer), y = h*rstd; norm=0: y = h. Then z = act(y). y may be NULL. One block per row.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_r256_c32_ldh32_ldy32_ldz32_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd, const bf16 *stat) {
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
add_r256_c128_lda128_ldb128_ldo128_bf16_b256(const bf16 *a, const bf16 *b, bf16 *out) {
    constexpr long long CHUNKS = 128 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
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
bottleneck_act_r256_c64_ldh64_ldy64_ldz64_silu_n0_e1em05_bf16_b256(const bf16 *h, bf16 *y, bf16 *z, float *rstd, const bf16 *stat) {
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
glu_fwd_r256_c352_ldg704_ldu704_ldo352_id_bf16_b256(const bf16 *gate, const bf16 *up, bf16 *out) {
    constexpr long long CHUNKS = 352 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
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
xent_fwd_r256_c256_ldl256_voR_bf16_b256(const bf16 *logits, const int *targets, float *stats, long long vocab_offset_arg) {
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
xent_combine_r256_tp1_bf16_b256(const float *stats_all, float *lse, float *loss) {
    float total = 0.f;
    for (long long m = threadIdx.x; m < 256; m += 256) {
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
    if (threadIdx.x == 0) st(loss, total / (float)256);
}

// xent_bwd: dlogits[m,j] = (exp(logits[m,j] - lse[m]) - [vocab_offset + j == targets[m]]) * scale.
// One thread per VEC columns of a row.
extern "C" __global__ void __launch_bounds__(256)
xent_bwd_r256_c256_ldl256_voR_sc0p00390625_bf16_b256(const bf16 *logits, const int *targets, const float *lse, bf16 *dlogits, long long vocab_offset_arg) {
    constexpr long long CHUNKS = 256 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    const float l = ld(lse + m);
    const long long t = (long long)targets[m] - (long long)(vocab_offset_arg);
    float a[8];
    ldv<8>(logits + m * 256 + j, a);
    for (int e = 0; e < 8; e++)
        a[e] = (expf(a[e] - l) - (j + e == t ? 1.f : 0.f)) * 0.00390625f;
    stv<8>(dlogits + m * 256 + j, a);
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
copy_r256_c128_lds128_ldd128_acc0_bf16_b256(const bf16 *src, bf16 *dst) {
    constexpr long long CHUNKS = 128 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float u[8], v[8];
    ldv<8>(src + m * 128 + j, u);
    if (0) {
        ldv<8>(dst + m * 128 + j, v);
        for (int e = 0; e < 8; e++) u[e] += v[e];
    }
    stv<8>(dst + m * 128 + j, u);
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
glu_bwd_r256_c352_ldg704_ldu704_ldo352_lddg704_lddu704_id_bf16_b256(const bf16 *gate, const bf16 *up, const bf16 *dout, bf16 *dgate,
         bf16 *dup) {
    constexpr long long CHUNKS = 352 / 8;
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 256 * CHUNKS) return;
    const long long m = i / CHUNKS, j = (i % CHUNKS) * 8;
    float g[8], u[8], d[8], dg[8];
    ldv<8>(gate + m * 704 + j, g);
    ldv<8>(up + m * 704 + j, u);
    ldv<8>(dout + m * 352 + j, d);
    for (int e = 0; e < 8; e++) {
        dg[e] = d[e] * u[e] * act_grad(0, g[e]);
        u[e] = d[e] * act_apply(0, g[e]);
    }
    stv<8>(dgate + m * 704 + j, dg);
    stv<8>(dup + m * 704 + j, u);
}

// bottleneck_act_bwd: dy = dz * act'(y). norm=0: dh (+)= dy. norm=1 (online norm backward):
// dh (+)= dy*rstd*rho and dstat[m] = -(sum_j dy*h) * rstd^3 / (2*divisor). One block per row.
// y NULL: recomputed as h*rstd.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_bwd_r256_c64_ldh64_ldy64_ldz64_lddh64_silu_n0_dv128_acc0_bf16_b256(const bf16 *h, const bf16 *y, const float *rstd, const float *rho,
         const bf16 *dz, bf16 *dh, float *dstat) {
    const long long m = blockIdx.x;
    const float r = 0 ? ld(rstd + m) : 1.f;
    const float scale = 0 ? r * ld(rho + m) : 1.f;
    float part = 0.f;
    for (int j = threadIdx.x * 8; j < 64; j += 256 * 8) {
        float yv[8], d[8], hv[8], o[8];
        ldv<8>(dz + m * 64 + j, d);
        if (0 || !y) ldv<8>(h + m * 64 + j, hv);
        if (y) ldv<8>(y + m * 64 + j, yv);
        else for (int e = 0; e < 8; e++) yv[e] = hv[e] * r;
        if (0) ldv<8>(dh + m * 64 + j, o);
        else for (int e = 0; e < 8; e++) o[e] = 0.f;
        for (int e = 0; e < 8; e++) {
            const float dy = d[e] * act_grad(1, yv[e]);
            o[e] += dy * scale;
            if (0) part += dy * hv[e];
        }
        stv<8>(dh + m * 64 + j, o);
    }
    if (0) {
        const float s = block_sum<256>(part);
        if (threadIdx.x == 0) st(dstat + m, -s * r * r * r / (2.f * (float)128));
    }
}

// rmsnorm_bwd: D[m] = sum_j dout*gamma*x (phase 2: read from dot, summed over ranks);
// dx (+)= rstd*gamma*dout - x*rstd^3*D/divisor; dgamma[j] += sum_m dout*x*rstd.
// Phase 1 only writes dot[m] = D_local[m]. Blocks 0..rows-1: one row each; the blocks after
// them: one thread per column of dgamma, walking the rows in order (deterministic).
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_bwd_r256_c128_ldx128_ldo128_dv128_acc1_ph0_bf16_b256(const bf16 *x, const bf16 *gamma, const float *rstd, const bf16 *dout,
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
        if (1) ldv<8>(dx + m * 128 + j, o);
        else for (int e = 0; e < 8; e++) o[e] = 0.f;
        for (int e = 0; e < 8; e++) o[e] += r * g[e] * d[e] - a[e] * c;
        stv<8>(dx + m * 128 + j, o);
    }
}

// boost:dynamic_smem attention_bwd_b4_s64_h4_kv4_d32_ldq384_ldk384_ldv384_ldo128_sc0p1767767_bf16_tc_q64k64 20992
// attention_bwd: the gradient of attention_fwd on the tensor cores (mma.sync m16n8k16, bf16
// operands, fp32 accumulators), FlashAttention-2 style with P recomputed from lse. One launch, two
// kinds of blocks of BQ/16 warps, each warp owning 16 rows of the block's BQ; every output element
// is written by exactly one block and summed in a fixed order, so the result is bitwise
// deterministic (no atomics; the price is that S and dP are computed twice, 7 products per tile
// pair instead of FA2's 5):
//  - the first batch*kv_heads*ceil(seq/BQ) blocks own BQ keys (K, V rows in shared memory) and
//    stream the query tiles i >= their first key of every query head of their group (Q, dO tiles
//    of BK rows, with lse and delta_i = sum_d dout_i out_i): per warp, S^T = K Q^T and
//    dP^T = V dO^T (mma), P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - delta),
//    dV += P^T dO, dK += dS^T Q (mma, P^T and dS^T as A fragments from registers);
//    dk = scale dK, dv = dV. Key tiles with more queries after them are launched first.
//  - the next batch*heads*ceil(seq/BQ) blocks own BQ queries (Q, dO rows in shared memory, lse and
//    delta) and stream the key tiles j <= their last query: S = Q K^T, dP = dO V^T,
//    dS = P (dP - delta), dQ += dS K; dq = scale dQ.
// Shared memory (dynamic, sized at launch): own rows [2*BQ, D] + streamed tiles [2*BK, D] bf16, rows
// padded by 8 (ldmatrix without bank conflicts), copied with cp.async, and lse, delta [max(BQ, BK)]
// fp32; delta and lse are read while the copies land, and the next tile's rows are requested into
// L2 while the warps compute. gen/kernels.c picks the tiles within the arch's opt-in maximum (above
// 48 KiB the backend raises the function's limit with cuFuncSetAttribute before the first launch).
// gen/kernels.c uses this template for head_dim a multiple of 16 up to 128, attention_bwd_simt.cu
// otherwise.
extern "C" __global__ void __launch_bounds__(64 * 2, 1)
attention_bwd_b4_s64_h4_kv4_d32_ldq384_ldk384_ldv384_ldo128_sc0p1767767_bf16_tc_q64k64(const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out, const bf16 *dout,
         const float *lse, bf16 *dq, bf16 *dk, bf16 *dv) {
    constexpr int D = 32, BQ = 64, BK = 64, SEQ = 64;
    constexpr int NT = BQ * 2, NW = BQ / 16, GROUP = 4 / 4;
    constexpr int KD = D / 16, NS = BK / 8, NO = D / 8;   // k-steps over D; n-tiles of S and of D
    constexpr int LDS = D + 8, NB = (SEQ + BQ - 1) / BQ;
    constexpr int BKV = 4 * 4, BH = 4 * 4, KBLOCKS = BKV * NB;
    BOOST_DYNAMIC_SHARED(smem);   // 20992 bytes: the arrays below, each 16-byte aligned (LDS % 8 == 0)
    bf16 *const own1 = (bf16 *)smem, *const own2 = own1 + BQ * LDS;       // [BQ, D]: K, V or Q, dO
    bf16 *const str1 = own2 + BQ * LDS, *const str2 = str1 + BK * LDS;    // [BK, D]: Q, dO or K, V
    float *const s_lse = (float *)(str2 + BK * LDS);                      // [max(BQ, BK)] base-2 lse
    float *const s_delta = s_lse + (BQ > BK ? BQ : BK);                   // [max(BQ, BK)] delta
    const float sl2 = 0.176776695f * 1.4426950409f, LOG2E = 1.4426950409f;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    // delta_i = sum_d dout[i,d] out[i,d] and lse_i (base 2) of rows [r0, r0+n) of head h into
    // s_delta / s_lse, one warp a row
    auto row_stats = [&](int b, int h, int r0, int n) {
        for (int rr = warp; rr < n; rr += NW) {
            const int i = r0 + rr;
            float part = 0.f;
            if (i < SEQ) {
                const long long row = (long long)b * SEQ + i;
                for (int d = lane; d < D; d += 32)
                    part += ld(dout + row * 128 + h * D + d) * ld(out + row * 128 + h * D + d);
            }
            for (int o = 16; o; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
            if (lane == 0) {
                s_delta[rr] = part;
                s_lse[rr] = i < SEQ ? ld(lse + ((long long)b * 4 + h) * SEQ + i) * LOG2E : 0.f;
            }
        }
    };

    if ((int)blockIdx.x < KBLOCKS) {                       // ---- key blocks: dk, dv ----
        const int kb = (int)blockIdx.x / BKV, bk = (int)blockIdx.x % BKV;
        const int kvh = bk % 4, b = bk / 4;
        const long long seq0 = (long long)b * SEQ;
        const int j0 = kb * BQ, w0 = j0 + warp * 16;         // block's and warp's first key
        tile_to_shared_async<BQ, D, LDS, NT>(own1, k + (seq0 + j0) * 384 + kvh * D, 384, SEQ - j0);
        tile_to_shared_async<BQ, D, LDS, NT>(own2, v + (seq0 + j0) * 384 + kvh * D, 384, SEQ - j0);
        cp_async_commit();
        const bf16 *kw = own1 + warp * 16 * LDS, *vw = own2 + warp * 16 * LDS;
        float gk[NO][4], gv[NO][4];                        // dK, dV [16, D]
        for (int n = 0; n < NO; n++) for (int e = 0; e < 4; e++) { gk[n][e] = 0.f; gv[n][e] = 0.f; }
        for (int hg = 0; hg < GROUP; hg++) {
            const int h = kvh * GROUP + hg;
            for (int i0 = j0 / BK * BK; i0 < SEQ; i0 += BK) {   // query tiles that see a key of the block
                __syncthreads();                           // the previous tile's readers are done
                tile_to_shared_async<BK, D, LDS, NT>(str1, q + (seq0 + i0) * 384 + h * D, 384, SEQ - i0);
                tile_to_shared_async<BK, D, LDS, NT>(str2, dout + (seq0 + i0) * 128 + h * D, 128, SEQ - i0);
                cp_async_commit();
                row_stats(b, h, i0, BK);                   // while the copies land
                cp_async_wait<0>();
                __syncthreads();
                {                                          // the next tile's rows into L2 meanwhile
                    const int nh = i0 + BK < SEQ ? h : h + 1, ni = i0 + BK < SEQ ? i0 + BK : j0 / BK * BK;
                    if (nh < (kvh + 1) * GROUP) {
                        tile_prefetch_l2<BK, D, NT>(q + (seq0 + ni) * 384 + nh * D, 384, SEQ - ni);
                        tile_prefetch_l2<BK, D, NT>(dout + (seq0 + ni) * 128 + nh * D, 128, SEQ - ni);
                        tile_prefetch_l2<BK, D, NT>(out + (seq0 + ni) * 128 + nh * D, 128, SEQ - ni);
                    }
                }
                if (i0 + BK - 1 < w0 || w0 >= SEQ) continue;   // causal: every query precedes the warp's keys
                float s[NS][4], dp[NS][4];                 // S^T, dP^T [16 keys, BK queries]
                for (int n = 0; n < NS; n++) for (int e = 0; e < 4; e++) { s[n][e] = 0.f; dp[n][e] = 0.f; }
                for (int kd = 0; kd < KD; kd++) {
                    unsigned ka[4], va[4];
                    mma_load_a(ka, kw + kd * 16, LDS);
                    mma_load_a(va, vw + kd * 16, LDS);
                    for (int n = 0; n < NS; n += 2) {      // two n-tiles (16 queries) an ldmatrix
                        unsigned b0[2], b1[2];
                        mma_load_b_nk(b0, b1, str1 + n * 8 * LDS + kd * 16, LDS);
                        mma_bf16_16816(s[n], ka, b0);
                        mma_bf16_16816(s[n + 1], ka, b1);
                        mma_load_b_nk(b0, b1, str2 + n * 8 * LDS + kd * 16, LDS);
                        mma_bf16_16816(dp[n], va, b0);
                        mma_bf16_16816(dp[n + 1], va, b1);
                    }
                }
                const bool masked = i0 < w0 + 15 || i0 + BK > SEQ;
                for (int n = 0; n < NS; n++)
                    for (int e = 0; e < 4; e++) {
                        const int c = n * 8 + mma_c_col(lane, e), qi = i0 + c, key = w0 + mma_c_row(lane, e);
                        float p = exp2f(s[n][e] * sl2 - s_lse[c]);
                        if (masked && (qi < key || qi >= SEQ)) p = 0.f;
                        s[n][e] = p;                       // P^T
                        dp[n][e] = p * (dp[n][e] - s_delta[c]);   // dS^T
                    }
                for (int kk = 0; kk < BK / 16; kk++) {     // dV += P^T dO, dK += dS^T Q: 16 queries a step
                    unsigned pa[4], da[4];
                    mma_c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
                    mma_c_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
                    for (int n = 0; n < NO; n += 2) {
                        unsigned b0[2], b1[2];
                        mma_load_b_kn(b0, b1, str2 + kk * 16 * LDS + n * 8, LDS);
                        mma_bf16_16816(gv[n], pa, b0);
                        mma_bf16_16816(gv[n + 1], pa, b1);
                        mma_load_b_kn(b0, b1, str1 + kk * 16 * LDS + n * 8, LDS);
                        mma_bf16_16816(gk[n], da, b0);
                        mma_bf16_16816(gk[n + 1], da, b1);
                    }
                }
            }
        }
        for (int n = 0; n < NO; n++)
            for (int e = 0; e < 4; e++) {
                const int j = w0 + mma_c_row(lane, e), d = kvh * D + n * 8 + mma_c_col(lane, e);
                if (j >= SEQ) continue;
                st(dk + (seq0 + j) * 384 + d, gk[n][e] * 0.176776695f);
                st(dv + (seq0 + j) * 384 + d, gv[n][e]);
            }
        return;
    }
    // ---- query blocks: dq ----
    const int qid = (int)blockIdx.x - KBLOCKS;
    const int qb = NB - 1 - qid / BH, bh = qid % BH;       // the longest query tiles first
    const int h = bh % 4, b = bh / 4, kvh = h / GROUP;
    const long long seq0 = (long long)b * SEQ;
    const int q0 = qb * BQ, w0 = q0 + warp * 16;
    const int wlast = w0 < SEQ ? min(w0 + 15, SEQ - 1) : -1;
    tile_to_shared_async<BQ, D, LDS, NT>(own1, q + (seq0 + q0) * 384 + h * D, 384, SEQ - q0);
    tile_to_shared_async<BQ, D, LDS, NT>(own2, dout + (seq0 + q0) * 128 + h * D, 128, SEQ - q0);
    cp_async_commit();
    row_stats(b, h, q0, BQ);                               // while the copies land
    const bf16 *qw = own1 + warp * 16 * LDS, *dow = own2 + warp * 16 * LDS;
    float gq[NO][4];                                       // dQ [16, D]
    for (int n = 0; n < NO; n++) for (int e = 0; e < 4; e++) gq[n][e] = 0.f;
    const int last = min(q0 + BQ, SEQ) - 1;
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();                                   // own rows loaded; previous readers done
        tile_to_shared_async<BK, D, LDS, NT>(str1, k + (seq0 + k0) * 384 + kvh * D, 384, SEQ - k0);
        tile_to_shared_async<BK, D, LDS, NT>(str2, v + (seq0 + k0) * 384 + kvh * D, 384, SEQ - k0);
        cp_async_commit();
        cp_async_wait<0>();                                // (the first one also waits for the own rows)
        __syncthreads();
        if (k0 + BK <= last) {                             // the next tile's rows into L2 meanwhile
            tile_prefetch_l2<BK, D, NT>(k + (seq0 + k0 + BK) * 384 + kvh * D, 384, SEQ - k0 - BK);
            tile_prefetch_l2<BK, D, NT>(v + (seq0 + k0 + BK) * 384 + kvh * D, 384, SEQ - k0 - BK);
        }
        if (k0 > wlast) continue;
        float s[NS][4], dp[NS][4];                         // S, dP [16 queries, BK keys]
        for (int n = 0; n < NS; n++) for (int e = 0; e < 4; e++) { s[n][e] = 0.f; dp[n][e] = 0.f; }
        for (int kd = 0; kd < KD; kd++) {
            unsigned qa[4], da[4];
            mma_load_a(qa, qw + kd * 16, LDS);
            mma_load_a(da, dow + kd * 16, LDS);
            for (int n = 0; n < NS; n += 2) {              // two n-tiles (16 keys) an ldmatrix
                unsigned b0[2], b1[2];
                mma_load_b_nk(b0, b1, str1 + n * 8 * LDS + kd * 16, LDS);
                mma_bf16_16816(s[n], qa, b0);
                mma_bf16_16816(s[n + 1], qa, b1);
                mma_load_b_nk(b0, b1, str2 + n * 8 * LDS + kd * 16, LDS);
                mma_bf16_16816(dp[n], da, b0);
                mma_bf16_16816(dp[n + 1], da, b1);
            }
        }
        const bool masked = k0 + BK - 1 > w0 || k0 + BK > SEQ;
        for (int n = 0; n < NS; n++)
            for (int e = 0; e < 4; e++) {
                const int r = warp * 16 + mma_c_row(lane, e), key = k0 + n * 8 + mma_c_col(lane, e);
                float p = exp2f(s[n][e] * sl2 - s_lse[r]);
                if (masked && (key > q0 + r || key >= SEQ)) p = 0.f;
                dp[n][e] = p * (dp[n][e] - s_delta[r]);    // dS
            }
        for (int kk = 0; kk < BK / 16; kk++) {             // dQ += dS K, 16 keys a step
            unsigned da[4];
            mma_c_to_a(da, dp[2 * kk], dp[2 * kk + 1]);
            for (int n = 0; n < NO; n += 2) {
                unsigned b0[2], b1[2];
                mma_load_b_kn(b0, b1, str1 + kk * 16 * LDS + n * 8, LDS);
                mma_bf16_16816(gq[n], da, b0);
                mma_bf16_16816(gq[n + 1], da, b1);
            }
        }
    }
    if (wlast < 0) return;
    for (int n = 0; n < NO; n++)
        for (int e = 0; e < 4; e++) {
            const int i = w0 + mma_c_row(lane, e);
            if (i < SEQ) st(dq + (seq0 + i) * 384 + h * D + n * 8 + mma_c_col(lane, e), gq[n][e] * 0.176776695f);
        }
}

// rope: in place on heads consecutive blocks of head_dim columns; position p = m % seq, pair
// (a, b) = (x[i], x[i + head_dim/2]), f = p * theta^(-2i/head_dim): a' = a cos f - b sin f,
// b' = b cos f + a sin f; inverse=1 rotates by -f. The angle is computed in double (positions
// reach tens of thousands of radians). One thread per pair.
extern "C" __global__ void __launch_bounds__(256)
rope_r256_h4_d32_ldx384_s64_th10000_inv1_bf16_b256(bf16 *x) {
    constexpr int HALF = 32 / 2;
    const long long t = (long long)blockIdx.x * 256 + threadIdx.x;
    if (t >= (long long)256 * 4 * HALF) return;
    const int i = (int)(t % HALF);
    const long long mh = t / HALF;
    const int head = (int)(mh % 4);
    const long long m = mh / 4;
    const long long p = m % 64;
    const double f = (double)p * pow((double)10000.f, -2.0 * i / (double)32);
    double sn, cs;
    sincos(f, &sn, &cs);
    const float c = (float)cs, s = 1 ? -(float)sn : (float)sn;
    bf16 *row = x + m * 384 + (long long)head * 32;
    const float a = ld(row + i), b = ld(row + i + HALF);
    st(row + i, a * c - b * s);
    st(row + i + HALF, b * c + a * s);
}

// bottleneck_act_bwd: dy = dz * act'(y). norm=0: dh (+)= dy. norm=1 (online norm backward):
// dh (+)= dy*rstd*rho and dstat[m] = -(sum_j dy*h) * rstd^3 / (2*divisor). One block per row.
// y NULL: recomputed as h*rstd.
extern "C" __global__ void __launch_bounds__(256)
bottleneck_act_bwd_r256_c96_ldh96_ldy96_ldz96_lddh96_silu_n0_dv128_acc0_bf16_b256(const bf16 *h, const bf16 *y, const float *rstd, const float *rho,
         const bf16 *dz, bf16 *dh, float *dstat) {
    const long long m = blockIdx.x;
    const float r = 0 ? ld(rstd + m) : 1.f;
    const float scale = 0 ? r * ld(rho + m) : 1.f;
    float part = 0.f;
    for (int j = threadIdx.x * 8; j < 96; j += 256 * 8) {
        float yv[8], d[8], hv[8], o[8];
        ldv<8>(dz + m * 96 + j, d);
        if (0 || !y) ldv<8>(h + m * 96 + j, hv);
        if (y) ldv<8>(y + m * 96 + j, yv);
        else for (int e = 0; e < 8; e++) yv[e] = hv[e] * r;
        if (0) ldv<8>(dh + m * 96 + j, o);
        else for (int e = 0; e < 8; e++) o[e] = 0.f;
        for (int e = 0; e < 8; e++) {
            const float dy = d[e] * act_grad(1, yv[e]);
            o[e] += dy * scale;
            if (0) part += dy * hv[e];
        }
        stv<8>(dh + m * 96 + j, o);
    }
    if (0) {
        const float s = block_sum<256>(part);
        if (threadIdx.x == 0) st(dstat + m, -s * r * r * r / (2.f * (float)128));
    }
}

// embedding_bwd: dtable[tokens[m], j] += dout[m, j]. One thread per column walks the rows in
// order, so the sums are deterministic without atomics.
extern "C" __global__ void __launch_bounds__(256)
embedding_bwd_r256_c128_v256_bf16_b256(const int *tokens, const bf16 *dout, float *dtable) {
    const long long j = (long long)blockIdx.x * 256 + threadIdx.x;
    if (j >= 128) return;
    for (long long m = 0; m < 256; m++) {
        const int t = tokens[m];
        if (t < 0 || t >= 256) continue;
        float *p = dtable + (long long)t * 128 + j;
        st(p, ld(p) + ld(dout + m * 128 + j));
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
