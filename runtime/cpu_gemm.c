/* cpu_gemm.c: the CPU backend's base layer, below its kernels (runtime/cpu_kernels.c) and its
 * ranks (runtime/cpu.c): the threads a rank computes with and the row-major GEMM over OpenBLAS.
 * It calls neither of them. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <cblas.h>          // defines: cblas_sgemm, openblas_set_num_threads
#include "runtime/cpu_gemm.h"
#include "common/env.h"   // defines: runtime_env

/* Threads: each of the tp ranks of this process gets cpu_threads() = BOOST_THREADS (default: the
 * online cores less the machine's 1-minute load, which a busy shared machine needs) / tp, at least
 * 1, for the kernels' OpenMP loops and the GEMMs, so tp ranks x threads never oversubscribe the
 * cores. The split never changes a result's bits: a kernel row's arithmetic does not depend on it,
 * and a GEMM is cut into blocks fixed by its shape alone, each one single-threaded OpenBLAS call
 * (OpenBLAS's own threading would change the sums with the thread count). tests/sh/train_threads.sh
 * checks a run. */
static int g_threads = 0;

/* OpenMP threads that sleep when idle instead of spinning (unless OMP_WAIT_POLICY says otherwise):
 * on a shared machine a spinning thread takes the core that its team-mate waits for, and a step
 * runs ten times slower. Set before the OpenMP runtime reads its environment (a constructor of
 * higher priority than its own). */
__attribute__((constructor(101))) static void omp_wait_passive(void) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single(void) { openblas_set_num_threads(1); }

int cpu_threads_set(int tp) {
    pthread_once(&blas_once, blas_single);
    int total = runtime_env()->threads;
    if (total < 1) {   /* the online cores less those other processes keep busy (1-minute load) */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        double load = 0;
        total = n > 0 ? (int)n : 1;
        if (getloadavg(&load, 1) == 1 && load > 0.5) total -= (int)(load + 0.5);
        if (total < 1) total = 1;
    }
    int per = total / (tp > 0 ? tp : 1);
    g_threads = per < 1 ? 1 : per;
    return g_threads;
}

int cpu_threads(void) {
    if (g_threads < 1) cpu_threads_set(1);
    return g_threads;
}

/* C = alpha op(A) op(B) + beta C, batch times, split over the threads in blocks of C's rows (or of
 * its columns when it has more columns than rows): at most 16 blocks of at least GEMM_MIN_BLOCK,
 * fixed by the shape, so any thread count computes every element with the same calls. */
#define GEMM_MIN_BLOCK 64
void cpu_gemm(const GemmArgs *g, const float *A, const float *B, float *C) {
    pthread_once(&blas_once, blas_single);
    int by_rows = g->m >= g->n;
    int64_t len = by_rows ? g->m : g->n;
    int64_t nblk = len / GEMM_MIN_BLOCK;
    if (nblk < 1) nblk = 1;
    if (nblk > 16) nblk = 16;
    int64_t blk = (len + nblk - 1) / nblk;
    nblk = (len + blk - 1) / blk;
    int64_t items = g->batch * nblk;
    int nt = (double)g->m * g->n * g->k * g->batch < 4e6 || items < 2 ? 1 : cpu_threads();
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t i = it / nblk, b0 = (it % nblk) * blk, bl = len - b0 < blk ? len - b0 : blk;
        const float *a = A + i * g->sA, *bm = B + i * g->sB;
        float *c = C + i * g->sC;
        int64_t m = g->m, n = g->n;
        if (by_rows) {   /* rows b0.. of C and of op(A) */
            a += g->ta ? b0 : b0 * g->lda;
            c += b0 * g->ldc;
            m = bl;
        } else {         /* columns b0.. of C and of op(B) */
            bm += g->tb ? b0 * g->ldb : b0;
            c += b0;
            n = bl;
        }
        cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                    g->tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)g->k, (float)g->alpha,
                    a, (int)g->lda, bm, (int)g->ldb, (float)g->beta, c, (int)g->ldc);
    }
}
