// cuda_emu.hpp: a CPU stand-in for the CUDA device, just enough to run BOOST's generated kernels
// (templates/) with g++ on a machine without a GPU: each block runs with one OS thread per CUDA
// thread, blocks one after another (so __shared__ is a static), __syncthreads is a barrier over
// the block, and warp shuffles meet at a barrier per (warp, lane mask). bf16 is emulated bit-exactly
// (round to nearest even). Slow; meant for small shapes in tests (tests/unit/test_kernels_emu.c).
// Include it before a kernels.cu (g++ -include), with an empty cuda_bf16.h on the include path.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

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

// ---- block barrier and warp shuffles ----
inline pthread_barrier_t *emu_block_barrier;
inline void __syncthreads() { pthread_barrier_wait(emu_block_barrier); }

struct EmuGroup {
    std::mutex mu;
    std::condition_variable cv;
    int count = 0;
    long gen = 0;
    float vals[32];
};
inline std::mutex emu_groups_mu;
inline std::map<std::pair<unsigned, unsigned>, EmuGroup *> emu_groups;

inline void emu_group_wait(EmuGroup *g, int n) {
    std::unique_lock<std::mutex> lk(g->mu);
    long gen = g->gen;
    if (++g->count == n) { g->count = 0; g->gen++; g->cv.notify_all(); }
    else g->cv.wait(lk, [&] { return g->gen != gen; });
}

inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    EmuGroup *g;
    {
        std::lock_guard<std::mutex> lk(emu_groups_mu);
        EmuGroup *&slot = emu_groups[std::make_pair(warp, mask)];
        if (!slot) slot = new EmuGroup();
        g = slot;
    }
    int n = __builtin_popcount(mask);
    g->vals[lane] = v;
    emu_group_wait(g, n);          // every lane of the mask has written
    float r = g->vals[lane ^ (unsigned)lane_mask];
    emu_group_wait(g, n);          // every lane has read before anyone writes again
    return r;
}

// ---- launches: cuLaunchKernel's (grid, block, params) for a kernel of any signature ----
template <class... P, size_t... I>
inline void emu_call(void (*f)(P...), void **params, std::index_sequence<I...>) { f(*(P *)params[I]...); }

template <class... P>
struct EmuLaunch {
    void (*f)(P...);
    void **params;
    unsigned grid;
    unsigned tid;
};

template <class... P>
inline void *emu_worker(void *arg) {
    EmuLaunch<P...> *l = (EmuLaunch<P...> *)arg;
    threadIdx = dim3{l->tid, 0, 0};
    for (unsigned b = 0; b < l->grid; b++) {
        blockIdx = dim3{b, 0, 0};
        emu_call(l->f, l->params, std::index_sequence_for<P...>{});
        pthread_barrier_wait(emu_block_barrier);   // the block is done before the next one starts
    }
    return nullptr;
}

template <class... P>
inline int emu_launch(void (*f)(P...), unsigned grid, unsigned block, void **params) {
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, nullptr, block);
    emu_block_barrier = &bar;
    blockDim = dim3{block, 1, 1};
    gridDim = dim3{grid, 1, 1};
    EmuLaunch<P...> *ls = new EmuLaunch<P...>[block];
    pthread_t *th = new pthread_t[block];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int rc = 0;
    unsigned started = 0;
    for (unsigned t = 0; t < block; t++) {
        ls[t] = EmuLaunch<P...>{f, params, grid, t};
        if (pthread_create(&th[t], &attr, emu_worker<P...>, &ls[t])) { rc = -1; break; }
        started++;
    }
    for (unsigned t = 0; t < started; t++) pthread_join(th[t], nullptr);
    pthread_attr_destroy(&attr);
    pthread_barrier_destroy(&bar);
    for (auto &kv : emu_groups) delete kv.second;
    emu_groups.clear();
    delete[] ls;
    delete[] th;
    return rc;
}

// EMU_ENTRY(name): extern "C" int emu_<name>(grid, block, params) launches kernel <name>.
#define EMU_ENTRY(name) \
    extern "C" int emu_##name(unsigned grid, unsigned block, void **params) { return emu_launch(name, grid, block, params); }
