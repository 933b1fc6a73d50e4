// cuda_emu.hpp: a CPU stand-in for the CUDA device, just enough to run BOOST's generated kernels
// (templates/) with g++ on a machine without a GPU: a block's CUDA threads run as fibers of one OS
// thread, blocks one after another (so __shared__ is a static), __syncthreads is a barrier over
// the block, and warp shuffles meet at a barrier per lane mask. bf16 is emulated bit-exactly
// (round to nearest even). Slow; meant for small shapes in tests (tests/unit/test_kernels_emu.c).
// Include it before a kernels.cu (g++ -include), with an empty cuda_bf16.h on the include path.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <algorithm>
#include <vector>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define BOOST_CUDA_EMU 1          // templates/prelude.cuh: the emulator's mma instead of inline PTX

using std::max;
using std::min;

struct dim3 { unsigned x, y, z; };
inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 blockDim, gridDim;

struct __nv_bfloat16 { uint16_t bits; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(uint16_t)((u >> 16) | 0x40)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__float2bfloat16(a), __float2bfloat16(b)}; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }

// ---- threads as fibers: one OS thread runs a block's CUDA threads as coroutines (ucontext);
// a fiber yields at __syncthreads and at each shuffle, and a round-robin scheduler releases a
// barrier when every fiber it waits for has arrived. Deterministic and far cheaper than OS threads.
enum { EMU_RUN, EMU_WAIT_BLOCK, EMU_WAIT_SHFL, EMU_DONE };
struct EmuFiber {
    ucontext_t ctx;
    char *stack;
    int state;
    unsigned tid, mask;
};
inline ucontext_t emu_sched_ctx;
inline EmuFiber *emu_fibers;
inline EmuFiber *emu_cur;
inline unsigned emu_nthreads;
inline float emu_vals[1024];
inline void (*emu_body)(void *);
inline void *emu_body_arg;

inline void emu_yield(int state) {
    emu_cur->state = state;
    swapcontext(&emu_cur->ctx, &emu_sched_ctx);
}
inline void __syncthreads() { emu_yield(EMU_WAIT_BLOCK); }

inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    emu_vals[threadIdx.x] = v;
    emu_cur->mask = mask;
    emu_yield(EMU_WAIT_SHFL);        // every lane of the mask has written
    float r = emu_vals[(threadIdx.x & ~31u) | ((threadIdx.x & 31u) ^ (unsigned)lane_mask)];
    emu_yield(EMU_WAIT_SHFL);        // every lane has read before anyone writes again
    return r;
}

// ---- tensor cores: mma.sync m16n8k16 bf16 -> fp32 as a warp collective. Every lane deposits its
// fragments, the warp meets at a barrier (as for a shuffle), each lane assembles A and B from all
// 32 deposits and computes its own C elements in fp32 from the bf16 inputs. The fragment layout is
// the prelude's (mma_a_row .. mma_c_col, declared here, defined in templates/prelude.cuh), so the
// emulator and the device share one definition of which lane holds which element.
static inline int mma_a_row(int lane, int e);
static inline int mma_a_col(int lane, int e);
static inline int mma_b_row(int lane, int e);
static inline int mma_b_col(int lane, int e);
static inline int mma_c_row(int lane, int e);
static inline int mma_c_col(int lane, int e);
inline unsigned emu_mma_a[1024][4], emu_mma_b[1024][2];
inline float emu_bf16_half(unsigned reg, int hi) { return __bfloat162float(__nv_bfloat16{(uint16_t)(hi ? reg >> 16 : reg & 0xffffu)}); }

inline void emu_mma_bf16_16816(float c[4], const unsigned a[4], const unsigned b[2]) {
    const unsigned t = threadIdx.x, base = t & ~31u, lane = t & 31u;
    memcpy(emu_mma_a[t], a, sizeof emu_mma_a[t]);
    memcpy(emu_mma_b[t], b, sizeof emu_mma_b[t]);
    emu_cur->mask = 0xffffffffu;
    emu_yield(EMU_WAIT_SHFL);        // every lane of the warp has deposited
    float A[16][16], B[16][8];
    for (int i = 0; i < 16; i++) for (int j = 0; j < 16; j++) A[i][j] = NAN;   // an element no lane holds shows
    for (int i = 0; i < 16; i++) for (int j = 0; j < 8; j++) B[i][j] = NAN;
    for (int l = 0; l < 32; l++) {
        for (int e = 0; e < 8; e++) A[mma_a_row(l, e)][mma_a_col(l, e)] = emu_bf16_half(emu_mma_a[base + l][e >> 1], e & 1);
        for (int e = 0; e < 4; e++) B[mma_b_row(l, e)][mma_b_col(l, e)] = emu_bf16_half(emu_mma_b[base + l][e >> 1], e & 1);
    }
    float r[4];
    for (int e = 0; e < 4; e++) {
        float acc = 0.f;
        for (int kk = 0; kk < 16; kk++) acc += A[mma_c_row((int)lane, e)][kk] * B[kk][mma_c_col((int)lane, e)];
        r[e] = c[e] + acc;
    }
    emu_yield(EMU_WAIT_SHFL);        // every lane has read before anyone deposits again
    memcpy(c, r, sizeof r);
}

// ldmatrix (m8n8, .x1/.x2/.x4, optionally .trans) as a warp collective: lane l deposits the address
// of row l%8 of matrix l/8; after the barrier each lane gathers its two elements of every matrix
// (row l/4, columns 2(l%4), 2(l%4)+1; transposed: rows 2(l%4), 2(l%4)+1 of column l/4), as the PTX
// ISA describes. A row address that is not 16-byte aligned (a fault on the device) yields NaNs.
inline const uint16_t *emu_ldsm_row[1024];
inline void emu_ldmatrix(unsigned *r, int nmat, bool trans, const void *row) {
    const unsigned t = threadIdx.x, base = t & ~31u, lane = t & 31u;
    emu_ldsm_row[t] = (const uint16_t *)row;
    emu_cur->mask = 0xffffffffu;
    emu_yield(EMU_WAIT_SHFL);        // every lane has deposited its row address
    unsigned out[4];
    const unsigned g = lane >> 2, c = 2 * (lane & 3);
    for (int i = 0; i < nmat; i++) {
        const uint16_t *const *rows = emu_ldsm_row + base + 8 * i;
        int aligned = 1;
        for (int j = 0; j < 8; j++) aligned &= ((uintptr_t)rows[j] & 15u) == 0;
        uint16_t lo = trans ? rows[c][g] : rows[g][c], hi = trans ? rows[c + 1][g] : rows[g][c + 1];
        out[i] = aligned ? (unsigned)lo | (unsigned)hi << 16 : 0xffffffffu;
    }
    emu_yield(EMU_WAIT_SHFL);        // every lane has read before anyone deposits again
    memcpy(r, out, (size_t)nmat * sizeof(unsigned));
}

// cp.async: a thread's copies are held back until its cp.async.wait_group lets their group land
// (the latest moment the device may complete them), so a kernel that reads a tile before waiting
// for it reads stale data here. The source is read at issue.
struct EmuCopy { void *dst; unsigned char data[16]; unsigned group; };
inline std::vector<EmuCopy> emu_cp_pending[1024];
inline unsigned emu_cp_groups[1024];
inline void emu_cp_async16(void *dst, const void *src) {
    EmuCopy c;
    c.dst = dst;
    memcpy(c.data, src, 16);
    c.group = emu_cp_groups[threadIdx.x];
    emu_cp_pending[threadIdx.x].push_back(c);
}
inline void emu_cp_async_commit() { emu_cp_groups[threadIdx.x]++; }
inline void emu_cp_async_wait(int n) {
    std::vector<EmuCopy> &p = emu_cp_pending[threadIdx.x];
    const unsigned committed = emu_cp_groups[threadIdx.x];
    size_t keep = 0;
    for (size_t i = 0; i < p.size(); i++) {
        if (p[i].group + (unsigned)n < committed) memcpy(p[i].dst, p[i].data, 16);   // group done
        else p[keep++] = p[i];
    }
    p.resize(keep);
}

inline void emu_fiber_main(unsigned lo, unsigned hi) {
    EmuFiber *f = (EmuFiber *)(((uintptr_t)hi << 32) | (uintptr_t)lo);
    threadIdx = dim3{f->tid, 0, 0};
    emu_body(emu_body_arg);
    f->state = EMU_DONE;
}

/* Runs one block: returns -1 on a deadlock (a barrier some fibers never reach). */
inline int emu_run_block() {
    for (unsigned t = 0; t < emu_nthreads; t++) {
        emu_cp_pending[t].clear();   // copies a previous block never waited for are lost
        emu_cp_groups[t] = 0;
        EmuFiber *f = &emu_fibers[t];
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = 128 * 1024;
        f->ctx.uc_link = &emu_sched_ctx;
        f->state = EMU_RUN;
        f->tid = t;
        uintptr_t p = (uintptr_t)f;
        makecontext(&f->ctx, (void (*)())emu_fiber_main, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
    }
    for (;;) {
        int ran = 0, alive = 0;
        for (unsigned t = 0; t < emu_nthreads; t++) {
            EmuFiber *f = &emu_fibers[t];
            if (f->state != EMU_RUN) continue;
            ran = 1;
            emu_cur = f;
            threadIdx = dim3{f->tid, 0, 0};
            swapcontext(&emu_sched_ctx, &f->ctx);
        }
        if (ran) continue;
        int released = 0, waiting_block = 0;
        for (unsigned t = 0; t < emu_nthreads; t++) {
            EmuFiber *f = &emu_fibers[t];
            if (f->state != EMU_DONE) alive++;
            if (f->state == EMU_WAIT_BLOCK) waiting_block++;
            if (f->state != EMU_WAIT_SHFL) continue;
            unsigned base = t & ~31u, arrived = 0;   // all lanes of its mask waiting on the same mask?
            for (unsigned l = 0; l < 32 && base + l < emu_nthreads; l++)
                if (emu_fibers[base + l].state == EMU_WAIT_SHFL && emu_fibers[base + l].mask == f->mask) arrived |= 1u << l;
            if ((arrived & f->mask) == f->mask) {
                for (unsigned l = 0; l < 32; l++)
                    if (f->mask >> l & 1u) emu_fibers[base + l].state = EMU_RUN;
                released = 1;
            }
        }
        if (!alive) return 0;
        if (released) continue;
        if (waiting_block == alive) {
            for (unsigned t = 0; t < emu_nthreads; t++)
                if (emu_fibers[t].state == EMU_WAIT_BLOCK) emu_fibers[t].state = EMU_RUN;
            continue;
        }
        return -1;
    }
}

// ---- launches: cuLaunchKernel's (grid, block, params) for a kernel of any signature ----
template <class... P, size_t... I>
inline void emu_call(void (*f)(P...), void **params, std::index_sequence<I...>) { f(*(P *)params[I]...); }

template <class... P>
struct EmuLaunch {
    void (*f)(P...);
    void **params;
};

template <class... P>
inline void emu_body_of(void *arg) {
    EmuLaunch<P...> *l = (EmuLaunch<P...> *)arg;
    emu_call(l->f, l->params, std::index_sequence_for<P...>{});
}

template <class... P>
inline int emu_launch(void (*f)(P...), unsigned grid, unsigned block, void **params) {
    if (block == 0 || block > 1024) return -1;
    blockDim = dim3{block, 1, 1};
    gridDim = dim3{grid, 1, 1};
    EmuLaunch<P...> l{f, params};
    emu_body = emu_body_of<P...>;
    emu_body_arg = &l;
    emu_nthreads = block;
    emu_fibers = new EmuFiber[block];
    for (unsigned t = 0; t < block; t++) emu_fibers[t].stack = new char[128 * 1024];
    int rc = 0;
    for (unsigned b = 0; b < grid && rc == 0; b++) {
        blockIdx = dim3{b, 0, 0};
        rc = emu_run_block();
    }
    for (unsigned t = 0; t < block; t++) delete[] emu_fibers[t].stack;
    delete[] emu_fibers;
    return rc;
}

// EMU_ENTRY(name): extern "C" int emu_<name>(grid, block, params) launches kernel <name>.
#define EMU_ENTRY(name) \
    extern "C" int emu_##name(unsigned grid, unsigned block, void **params) { return emu_launch(name, grid, block, params); }
