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
