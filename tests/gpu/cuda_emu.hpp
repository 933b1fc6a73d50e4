// cuda_emu.hpp: a CPU stand-in for the CUDA device, just enough to run BOOST's generated kernels
// (templates/) with g++ on a machine without a GPU: a block's CUDA threads run as fibers of one OS
// thread, blocks one after another (so __shared__ is a static), __syncthreads is a barrier over
// the block, and warp shuffles meet at a barrier per lane mask. bf16 is emulated bit-exactly
// (round to nearest even). Slow; meant for small shapes in tests (tests/unit/test_kernels_emu.c).
// Include it before a kernels.cu (g++ -include), with an empty cuda_bf16.h on the include path.
// Dynamic shared memory (BOOST_DYNAMIC_SHARED in templates/prelude.cuh) is a buffer of exactly the
// size emu_set_dynamic_shared() gave the next launches, followed by an inaccessible page: a kernel
// that reaches past the launch's size stops the process with a message.
// Compiled with EMU_RACE_FLAGS (below), it also finds shared-memory races between warps, reads of
// cp.async destinations still in flight, and lanes of a .sync.aligned instruction at different call
// sites (section "race and divergence detection").
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
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

// ---- threads as fibers: one OS thread runs a block's CUDA threads as coroutines; a fiber yields
// at __syncthreads and at each shuffle, and a round-robin scheduler releases a barrier when every
// fiber it waits for has arrived. Deterministic and far cheaper than OS threads. On x86-64 a switch
// saves the callee-saved registers and the stack pointer (emu_ctx_switch: no signal mask, so no
// system call per switch, unlike swapcontext); elsewhere ucontext.
enum { EMU_RUN, EMU_WAIT_BLOCK, EMU_WAIT_SHFL, EMU_DONE };
#if defined(__x86_64__)
#define EMU_OWN_SWITCH 1
// emu_ctx_switch(save, load): pushes the callee-saved registers, stores the stack pointer in *save,
// loads `load` as the stack pointer, pops that context's registers and returns into it.
__attribute__((naked, noinline)) static void emu_ctx_switch(void **save, void *load) {
    __asm__ volatile("pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
                     "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
                     "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret\n");
}
// A new fiber's first return lands here: r12 holds its argument, r13 the function (never returns).
__attribute__((naked, noinline)) static void emu_ctx_entry() {
    __asm__ volatile("movq %r12, %rdi\n\tcallq *%r13\n\tud2\n");
}
#endif
struct EmuFiber {
#if EMU_OWN_SWITCH
    void *sp;            // saved stack pointer while switched out
#else
    ucontext_t ctx;
#endif
    char *stack;
    int state;
    unsigned tid, mask;
    const void *site;   // the call site of the warp collective it waits at
};
#if EMU_OWN_SWITCH
inline void *emu_sched_sp;
#else
inline ucontext_t emu_sched_ctx;
#endif
inline EmuFiber *emu_fibers;
inline EmuFiber *emu_cur;
inline unsigned emu_nthreads;
inline float emu_vals[1024];
inline void (*emu_body)(void *);
inline void *emu_body_arg;

// The emulator's own functions are not instrumented (EMU_FN): only the kernels' accesses are logged.
#define EMU_FN __attribute__((no_sanitize_address))
// A warp collective's call site is its return address, so its emulation is never inlined.
#define EMU_SITE_FN __attribute__((no_sanitize_address, noinline))

EMU_FN inline void emu_yield(int state) {
    emu_cur->state = state;
#if EMU_OWN_SWITCH
    emu_ctx_switch(&emu_cur->sp, emu_sched_sp);
#else
    swapcontext(&emu_cur->ctx, &emu_sched_ctx);
#endif
}

// ---- race and divergence detection ----
// Compiled with "-g -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0
// --param asan-stack=0 --param asan-globals=0", every load and store of the kernel code calls one of
// the __asan_{load,store}*_noabort functions below. An access to the module's static storage (the
// emulated __shared__ arrays: the emulator's own state is touched only by uninstrumented code;
// blockDim and gridDim are skipped) is logged per byte with its warp, barrier epoch (one per
// __syncthreads release and per block) and call site. Reported, each with both call sites:
//  - a read and a write, or two writes, of the same byte by different warps in one epoch;
//  - an access to the destination of a cp.async still in flight (its group not yet waited for);
//    a cp.async counts as a write where it is issued and again where its wait_group lands it;
//  - copies never waited for when the block ends;
//  - lanes of a warp released together at a .sync.aligned collective (mma, ldmatrix, shuffle) from
//    different call sites (divergence; without the site check they pass as long as the masks match).
// (GCC does not instrument a static array access whose constant index it proves in bounds; the
// templates index shared memory by thread, so none of theirs is skipped.)
// emu_set_seed(s): s = 0 runs the fibers round-robin, each until it blocks; s > 0 picks the next
// fiber at random (seeded) and switches at every shared-memory access and every barrier.
enum { EMU_R_RACE, EMU_R_INFLIGHT, EMU_R_UNWAITED, EMU_R_DIVERGE };
struct EmuReport { int kind, write, other_write; const void *site, *other; unsigned warp, other_warp, block; uintptr_t off; int dyn; };
struct EmuShadow { unsigned wepoch, repoch; int wwarp, rwarp1, rwarp2; const void *wsite, *rsite1, *rsite2, *inflight; };
inline EmuReport emu_reports[64];
inline unsigned emu_nreport, emu_nreport_total;
inline unsigned emu_seed;
inline uint64_t emu_rng = 1;
inline unsigned emu_epoch = 1;
inline EmuShadow *emu_shadow;
inline uintptr_t emu_sh_lo, emu_sh_hi;
inline int emu_sh_known;
inline uintptr_t emu_own_lo, emu_own_hi;
inline uintptr_t emu_dyn_lo, emu_dyn_hi;    // the current launch's dynamic shared memory
inline EmuShadow *emu_dyn_shadow;           // its shadow (race detection)

EMU_FN inline void emu_report(int kind, int write, const void *site, unsigned warp, int other_write, const void *other,
                              unsigned other_warp, uintptr_t addr) {
    emu_nreport_total++;
    for (unsigned i = 0; i < emu_nreport; i++)
        if (emu_reports[i].kind == kind && emu_reports[i].site == site && emu_reports[i].other == other) return;
    if (emu_nreport < 64)
        emu_reports[emu_nreport++] = EmuReport{kind, write, other_write, site, other, warp, other_warp, blockIdx.x,
                                               addr >= emu_dyn_lo && addr < emu_dyn_hi ? addr - emu_dyn_lo : addr - emu_sh_lo,
                                               addr >= emu_dyn_lo && addr < emu_dyn_hi};
}

EMU_FN inline int emu_phdr_cb(struct dl_phdr_info *info, size_t, void *) {
    const uintptr_t me = (uintptr_t)&emu_epoch;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W)) continue;
        const uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (me >= lo && me < hi) { emu_sh_lo = lo; emu_sh_hi = hi; return 1; }
    }
    return 0;
}

// The bytes [a, a+n) of a region [lo, hi) whose shadow is sh: the conflicts they complete, then the
// access logged.
EMU_FN inline void emu_access_bytes(uintptr_t a, size_t n, int write, const void *site, EmuShadow *sh, uintptr_t lo,
                                    uintptr_t hi) {
    const int w = (int)(emu_cur->tid >> 5);
    for (uintptr_t b = a; b < a + n && b < hi; b++) {
        EmuShadow &s = sh[b - lo];
        if (s.inflight) emu_report(EMU_R_INFLIGHT, write, site, (unsigned)w, 1, s.inflight, 0, b);
        if (s.wepoch == emu_epoch && s.wwarp != w) emu_report(EMU_R_RACE, write, site, (unsigned)w, 1, s.wsite, (unsigned)s.wwarp, b);
        if (write) {
            if (s.repoch == emu_epoch && s.rwarp1 != w) emu_report(EMU_R_RACE, 1, site, (unsigned)w, 0, s.rsite1, (unsigned)s.rwarp1, b);
            else if (s.repoch == emu_epoch && s.rwarp2 >= 0 && s.rwarp2 != w)
                emu_report(EMU_R_RACE, 1, site, (unsigned)w, 0, s.rsite2, (unsigned)s.rwarp2, b);
            s.wepoch = emu_epoch; s.wwarp = w; s.wsite = site;
        } else if (s.repoch != emu_epoch) {
            s.repoch = emu_epoch; s.rwarp1 = w; s.rsite1 = site; s.rwarp2 = -1;
        } else if (s.rwarp1 != w && s.rwarp2 < 0) {
            s.rwarp2 = w; s.rsite2 = site;
        }
    }
}

// One access of n bytes at a by the running fiber (write: 1), from call site `site`.
EMU_FN inline void emu_access(uintptr_t a, size_t n, int write, const void *site) {
    if (!emu_sh_known) {
        emu_sh_known = 1;
        dl_iterate_phdr(emu_phdr_cb, NULL);
        if (emu_sh_hi > emu_sh_lo) emu_shadow = (EmuShadow *)calloc(emu_sh_hi - emu_sh_lo, sizeof(EmuShadow));
        if (!emu_shadow) emu_sh_hi = emu_sh_lo;
    }
    if (!emu_cur) return;
    if (a >= emu_dyn_lo && a < emu_dyn_hi && emu_dyn_shadow) {   // the launch's dynamic shared memory
        emu_access_bytes(a, n, write, site, emu_dyn_shadow, emu_dyn_lo, emu_dyn_hi);
        if (emu_seed) emu_yield(EMU_RUN);
        return;
    }
    if (a < emu_sh_lo || a >= emu_sh_hi) return;
    if (a < (uintptr_t)(&blockDim + 1) && a + n > (uintptr_t)&blockDim) return;
    if (a < (uintptr_t)(&gridDim + 1) && a + n > (uintptr_t)&gridDim) return;
    if (a < emu_own_hi && a + n > emu_own_lo) return;   // the emulator's pending-copy lists (std::vector code)
    emu_access_bytes(a, n, write, site, emu_shadow, emu_sh_lo, emu_sh_hi);
    if (emu_seed) emu_yield(EMU_RUN);   // let another fiber run before this access completes
}
EMU_FN inline void emu_set_inflight(uintptr_t a, size_t n, const void *site) {
    EmuShadow *sh = NULL;
    if (a >= emu_dyn_lo && a + n <= emu_dyn_hi && emu_dyn_shadow) sh = emu_dyn_shadow + (a - emu_dyn_lo);
    else if (a >= emu_sh_lo && a + n <= emu_sh_hi && emu_shadow) sh = emu_shadow + (a - emu_sh_lo);
    if (sh) for (size_t i = 0; i < n; i++) sh[i].inflight = site;
}
#ifdef __SANITIZE_ADDRESS__
#define EMU_HOOK(n) \
    extern "C" EMU_SITE_FN void __asan_load##n##_noabort(uintptr_t a) { emu_access(a, n, 0, __builtin_return_address(0)); } \
    extern "C" EMU_SITE_FN void __asan_store##n##_noabort(uintptr_t a) { emu_access(a, n, 1, __builtin_return_address(0)); }
EMU_HOOK(1) EMU_HOOK(2) EMU_HOOK(4) EMU_HOOK(8) EMU_HOOK(16)
extern "C" EMU_SITE_FN void __asan_loadN_noabort(uintptr_t a, size_t n) { emu_access(a, n, 0, __builtin_return_address(0)); }
extern "C" EMU_SITE_FN void __asan_storeN_noabort(uintptr_t a, size_t n) { emu_access(a, n, 1, __builtin_return_address(0)); }
extern "C" EMU_FN void __asan_handle_no_return(void) {}
extern "C" EMU_FN void __asan_before_dynamic_init(const char *) {}
extern "C" EMU_FN void __asan_after_dynamic_init(void) {}
#endif

// The report interface (dlsym'd by tests): seed, count, clear, and report i as text with both call
// sites as addr2line gives them (function at kernels.cu:line, innermost inlined call first).
extern "C" EMU_FN __attribute__((weak)) void emu_set_seed(unsigned s) { emu_seed = s; emu_rng = 0x9E3779B97F4A7C15ull * (s + 1); }
extern "C" EMU_FN __attribute__((weak)) unsigned emu_report_count(void) { return emu_nreport_total; }
extern "C" EMU_FN __attribute__((weak)) void emu_report_clear(void) { emu_nreport = emu_nreport_total = 0; }
EMU_FN inline void emu_site_text(const void *site, char *buf, size_t n) {
    Dl_info info;
    snprintf(buf, n, "%p", site);
    if (!site || !dladdr(site, &info) || !info.dli_fname) return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "addr2line -C -f -i -p -e '%s' 0x%lx 2>/dev/null", info.dli_fname,
             (unsigned long)((uintptr_t)site - (uintptr_t)info.dli_fbase - 1));
    FILE *p = popen(cmd, "r");
    if (!p) return;
    size_t used = 0;
    char line[512];
    buf[0] = 0;
    while (fgets(line, sizeof line, p) && used + 8 < n) {
        line[strcspn(line, "\n")] = 0;
        const char *l = line;
        if (!strncmp(l, " (inlined by) ", 14)) l += 14;
        char *at = (char *)strstr(l, " at ");   // "func(args) at /path/file:line": keep "func at file:line"
        char fn[160] = "", where[160] = "";
        if (at) {
            snprintf(fn, sizeof fn, "%.*s", (int)(at - l), l);
            char *paren = strchr(fn, '(');
            if (paren) *paren = 0;
            const char *slash = strrchr(at + 4, '/');
            snprintf(where, sizeof where, "%s", slash ? slash + 1 : at + 4);
        } else snprintf(fn, sizeof fn, "%s", l);
        used += (size_t)snprintf(buf + used, n - used, "%s%s@%s", used ? " <- " : "", fn, where);
    }
    pclose(p);
    if (!buf[0]) snprintf(buf, n, "%p", site);
}
extern "C" EMU_FN __attribute__((weak)) int emu_report_text(unsigned i, char *buf, size_t n) {
    if (i >= emu_nreport) return -1;
    const EmuReport &r = emu_reports[i];
    char a[1024], b[1024];
    emu_site_text(r.site, a, sizeof a);
    emu_site_text(r.other, b, sizeof b);
    const char *op = r.write ? "write" : "read", *oop = r.other_write ? "write" : "read";
    if (r.kind == EMU_R_RACE)
        snprintf(buf, n, "shared-memory race (block %u, %s offset %lu): %s by warp %u at [%s] and %s by warp %u at [%s] "
                 "with no __syncthreads between them", r.block, r.dyn ? "dynamic" : "static", (unsigned long)r.off, op, r.warp,
                 a, oop, r.other_warp, b);
    else if (r.kind == EMU_R_INFLIGHT)
        snprintf(buf, n, "%s by warp %u at [%s] of a cp.async destination still in flight, issued at [%s] (block %u): "
                 "the issuing thread has not committed and waited for its group yet, or no __syncthreads followed its wait",
                 op, r.warp, a, b, r.block);
    else if (r.kind == EMU_R_UNWAITED)
        snprintf(buf, n, "cp.async issued at [%s] never waited for before the block ended (block %u)", a, r.block);
    else
        snprintf(buf, n, "divergence: lanes of warp %u released together at a warp-synchronous instruction from two call "
                 "sites, [%s] and [%s] (block %u)", r.warp, a, b, r.block);
    return 0;
}

EMU_FN inline void __syncthreads() { emu_yield(EMU_WAIT_BLOCK); }

EMU_SITE_FN inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    emu_vals[threadIdx.x] = v;
    emu_cur->mask = mask;
    emu_cur->site = __builtin_return_address(0);
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
EMU_FN inline float emu_bf16_half(unsigned reg, int hi) { return __bfloat162float(__nv_bfloat16{(uint16_t)(hi ? reg >> 16 : reg & 0xffffu)}); }

EMU_SITE_FN inline void emu_mma_bf16_16816(float c[4], const unsigned a[4], const unsigned b[2]) {
    const unsigned t = threadIdx.x, base = t & ~31u, lane = t & 31u;
    memcpy(emu_mma_a[t], a, sizeof emu_mma_a[t]);
    memcpy(emu_mma_b[t], b, sizeof emu_mma_b[t]);
    emu_cur->mask = 0xffffffffu;
    emu_cur->site = __builtin_return_address(0);
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
EMU_SITE_FN inline void emu_ldmatrix(unsigned *r, int nmat, bool trans, const void *row) {
    const unsigned t = threadIdx.x, base = t & ~31u, lane = t & 31u;
    const void *site = __builtin_return_address(0);
    if (lane < 8u * (unsigned)nmat) emu_access((uintptr_t)row, 16, 0, site);   // the row this lane addresses
    emu_ldsm_row[t] = (const uint16_t *)row;
    emu_cur->mask = 0xffffffffu;
    emu_cur->site = site;
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
struct EmuCopy { void *dst; unsigned char data[16]; unsigned group; const void *site; };
inline std::vector<EmuCopy> emu_cp_pending[1024];
inline unsigned emu_cp_groups[1024];
inline const int emu_own_init = (emu_own_lo = (uintptr_t)emu_cp_pending, emu_own_hi = (uintptr_t)(emu_cp_pending + 1024), 0);
EMU_SITE_FN inline void emu_cp_async16(void *dst, const void *src) {
    EmuCopy c;
    c.dst = dst;
    memcpy(c.data, src, 16);
    c.group = emu_cp_groups[threadIdx.x];
    c.site = __builtin_return_address(0);
    emu_access((uintptr_t)dst, 16, 1, c.site);     // the device may write it from here on
    emu_set_inflight((uintptr_t)dst, 16, c.site);
    emu_cp_pending[threadIdx.x].push_back(c);
}
EMU_FN inline void emu_cp_async_commit() { emu_cp_groups[threadIdx.x]++; }
EMU_SITE_FN inline void emu_cp_async_wait(int n) {
    std::vector<EmuCopy> &p = emu_cp_pending[threadIdx.x];
    const unsigned committed = emu_cp_groups[threadIdx.x];
    const void *site = __builtin_return_address(0);
    size_t keep = 0;
    for (size_t i = 0; i < p.size(); i++) {
        if (p[i].group + (unsigned)n < committed) {                                   // group done
            emu_set_inflight((uintptr_t)p[i].dst, 16, NULL);
            emu_access((uintptr_t)p[i].dst, 16, 1, site);                           // lands here
            memcpy(p[i].dst, p[i].data, 16);
        } else p[keep++] = p[i];
    }
    p.resize(keep);
}

EMU_FN inline void emu_fiber_main(unsigned lo, unsigned hi) {
    EmuFiber *f = (EmuFiber *)(((uintptr_t)hi << 32) | (uintptr_t)lo);
    threadIdx = dim3{f->tid, 0, 0};
    emu_body(emu_body_arg);
    f->state = EMU_DONE;
}
#if EMU_OWN_SWITCH
// A fiber's function under emu_ctx_switch: the body, then back to the scheduler for good.
EMU_FN inline void emu_fiber_start(EmuFiber *f) {
    uintptr_t p = (uintptr_t)f;
    emu_fiber_main((unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
    emu_ctx_switch(&f->sp, emu_sched_sp);
}
#endif

/* Runs one block: returns -1 on a deadlock (a barrier some fibers never reach). */
inline unsigned emu_ready[1024], emu_nready;   // seeded mode: the fibers that may run
EMU_FN inline uint64_t emu_rand() {
    emu_rng ^= emu_rng << 13; emu_rng ^= emu_rng >> 7; emu_rng ^= emu_rng << 17;
    return emu_rng;
}
EMU_FN inline void emu_make_ready(EmuFiber *f) {
    f->state = EMU_RUN;
    if (emu_seed) emu_ready[emu_nready++] = f->tid;
}
EMU_FN inline void emu_switch_to(EmuFiber *f) {
    emu_cur = f;
    threadIdx = dim3{f->tid, 0, 0};
#if EMU_OWN_SWITCH
    emu_ctx_switch(&emu_sched_sp, f->sp);
#else
    swapcontext(&emu_sched_ctx, &f->ctx);
#endif
    emu_cur = NULL;                  // the scheduler's own accesses are nobody's
}
EMU_FN inline int emu_run_block() {
    emu_epoch++;
    emu_nready = 0;
    for (unsigned t = 0; t < emu_nthreads; t++) {
        emu_cp_pending[t].clear();   // copies a previous block never waited for are lost
        emu_cp_groups[t] = 0;
        EmuFiber *f = &emu_fibers[t];
        f->tid = t;
        f->site = NULL;
        emu_make_ready(f);
        uintptr_t p = (uintptr_t)f;
#if EMU_OWN_SWITCH
        // the new stack, top down: emu_ctx_entry as the return address (16-byte aligned above it),
        // then rbp, rbx, r12 = the fiber, r13 = emu_fiber_start, r14, r15
        void **sp = (void **)(((uintptr_t)f->stack + 128 * 1024) & ~(uintptr_t)15);
        *--sp = (void *)emu_ctx_entry;
        *--sp = NULL; *--sp = NULL;
        *--sp = (void *)f;
        *--sp = (void *)emu_fiber_start;
        *--sp = NULL; *--sp = NULL;
        f->sp = sp;
        (void)p;
#else
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = 128 * 1024;
        f->ctx.uc_link = &emu_sched_ctx;
        makecontext(&f->ctx, (void (*)())emu_fiber_main, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
#endif
    }
    for (;;) {
        if (emu_seed) {                  // a random ready fiber, until its next switch point
            if (emu_nready) {
                const unsigned i = (unsigned)(emu_rand() % emu_nready);
                EmuFiber *f = &emu_fibers[emu_ready[i]];
                emu_ready[i] = emu_ready[--emu_nready];
                emu_switch_to(f);
                if (f->state == EMU_RUN) emu_ready[emu_nready++] = f->tid;
                continue;
            }
        } else {                         // round-robin, each until it blocks
            int ran = 0;
            for (unsigned t = 0; t < emu_nthreads; t++) {
                EmuFiber *f = &emu_fibers[t];
                if (f->state != EMU_RUN) continue;
                ran = 1;
                emu_switch_to(f);
            }
            if (ran) continue;
        }
        int released = 0, waiting_block = 0, alive = 0;
        for (unsigned t = 0; t < emu_nthreads; t++) {
            EmuFiber *f = &emu_fibers[t];
            if (f->state != EMU_DONE) alive++;
            if (f->state == EMU_WAIT_BLOCK) waiting_block++;
            if (f->state != EMU_WAIT_SHFL) continue;
            unsigned base = t & ~31u, arrived = 0;   // all lanes of its mask waiting on the same mask?
            for (unsigned l = 0; l < 32 && base + l < emu_nthreads; l++)
                if (emu_fibers[base + l].state == EMU_WAIT_SHFL && emu_fibers[base + l].mask == f->mask) arrived |= 1u << l;
            if ((arrived & f->mask) == f->mask) {
                const void *site = f->site;
                for (unsigned l = 0; l < 32; l++) {
                    if (!(f->mask >> l & 1u)) continue;
                    EmuFiber *g = &emu_fibers[base + l];
                    if (g->site != site)         // .sync.aligned: every lane at the same instruction
                        emu_report(EMU_R_DIVERGE, 0, site, t >> 5, 0, g->site, t >> 5, 0);
                    emu_make_ready(g);
                }
                released = 1;
            }
        }
        if (!alive) {
            for (unsigned t = 0; t < emu_nthreads; t++)
                if (!emu_cp_pending[t].empty())
                    emu_report(EMU_R_UNWAITED, 1, emu_cp_pending[t][0].site, t >> 5, 0, NULL, 0, 0);
            return 0;
        }
        if (released) continue;
        if (waiting_block == alive) {
            emu_epoch++;                 // a new barrier epoch: accesses before it are ordered
            for (unsigned t = 0; t < emu_nthreads; t++)
                if (emu_fibers[t].state == EMU_WAIT_BLOCK) emu_make_ready(&emu_fibers[t]);
            continue;
        }
        return -1;
    }
}

// ---- dynamic shared memory: per launch, a buffer of the launch's size that ends at a page the
// process may not touch (PROT_NONE); a kernel reaching past the size faults there, and the handler
// below says so before the process dies. The bytes start out as 0xff (bf16 NaN), like memory
// nobody wrote. With EMU_RACE_FLAGS the buffer has its own shadow, so races in it are reported.
inline unsigned emu_dyn_bytes;            // of the next launches (emu_set_dynamic_shared)
inline unsigned char *emu_dyn_map;
inline size_t emu_dyn_maplen;
EMU_FN inline unsigned char *emu_dynamic_shared() { return (unsigned char *)emu_dyn_lo; }
extern "C" EMU_FN __attribute__((weak)) void emu_set_dynamic_shared(unsigned bytes) { emu_dyn_bytes = bytes; }
EMU_FN inline void emu_guard_fault(int sig, siginfo_t *si, void *) {
    const uintptr_t a = (uintptr_t)si->si_addr;
    if (emu_dyn_map && a >= emu_dyn_hi && a < (uintptr_t)emu_dyn_map + emu_dyn_maplen) {
        char msg[256];
        int n = snprintf(msg, sizeof msg, "cuda_emu: block %u thread %u accessed dynamic shared memory at byte %lu, past the "
                         "%u bytes of the launch: the launch's size is too small for the kernel's tiles\n", blockIdx.x,
                         threadIdx.x, (unsigned long)(a - emu_dyn_lo), emu_dyn_bytes);
        if (write(2, msg, (size_t)n) < 0) {}
    }
    signal(sig, SIG_DFL);   // returning re-runs the access: the default action ends the process
}
EMU_FN inline int emu_dyn_map_launch() {
    static int handler;
    if (!handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = emu_guard_fault;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, NULL);
        handler = 1;
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = ((size_t)emu_dyn_bytes + 15) / 16 * 16;
    emu_dyn_maplen = (bytes + page - 1) / page * page + page;
    void *m = mmap(NULL, emu_dyn_maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { emu_dyn_map = NULL; return -1; }
    emu_dyn_map = (unsigned char *)m;
    unsigned char *guard = emu_dyn_map + emu_dyn_maplen - page;
    mprotect(guard, page, PROT_NONE);
    emu_dyn_lo = (uintptr_t)(guard - bytes);
    emu_dyn_hi = (uintptr_t)guard;
    memset((void *)emu_dyn_lo, 0xff, bytes);
#ifdef __SANITIZE_ADDRESS__
    emu_dyn_shadow = bytes ? (EmuShadow *)calloc(bytes, sizeof(EmuShadow)) : NULL;
#endif
    return 0;
}
EMU_FN inline void emu_dyn_unmap_launch() {
    if (emu_dyn_map) munmap(emu_dyn_map, emu_dyn_maplen);
    free(emu_dyn_shadow);
    emu_dyn_map = NULL; emu_dyn_shadow = NULL; emu_dyn_lo = emu_dyn_hi = 0;
}

// ---- launches: cuLaunchKernel's (grid, block, params) for a kernel of any signature ----
template <class... P, size_t... I>
EMU_FN inline void emu_call(void (*f)(P...), void **params, std::index_sequence<I...>) { f(*(P *)params[I]...); }

template <class... P>
struct EmuLaunch {
    void (*f)(P...);
    void **params;
};

template <class... P>
EMU_FN inline void emu_body_of(void *arg) {
    EmuLaunch<P...> *l = (EmuLaunch<P...> *)arg;
    emu_call(l->f, l->params, std::index_sequence_for<P...>{});
}

template <class... P>
EMU_FN inline int emu_launch(void (*f)(P...), unsigned grid, unsigned block, void **params) {
    if (block == 0 || block > 1024) return -1;
    blockDim = dim3{block, 1, 1};
    gridDim = dim3{grid, 1, 1};
    EmuLaunch<P...> l{f, params};
    emu_body = emu_body_of<P...>;
    emu_body_arg = &l;
    emu_nthreads = block;
    if (emu_dyn_map_launch()) return -1;
    emu_fibers = new EmuFiber[block];
    for (unsigned t = 0; t < block; t++) emu_fibers[t].stack = new char[128 * 1024];
    int rc = 0;
    for (unsigned b = 0; b < grid && rc == 0; b++) {
        blockIdx = dim3{b, 0, 0};
        rc = emu_run_block();
    }
    for (unsigned t = 0; t < block; t++) delete[] emu_fibers[t].stack;
    delete[] emu_fibers;
    emu_dyn_unmap_launch();
    return rc;
}

// EMU_ENTRY(name): extern "C" int emu_<name>(grid, block, params) launches kernel <name>.
#define EMU_ENTRY(name) \
    extern "C" int emu_##name(unsigned grid, unsigned block, void **params) { return emu_launch(name, grid, block, params); }
