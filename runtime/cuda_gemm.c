/* cuda_gemm.c: the CUDA backend's GEMMs through cuBLAS: one GEMM, strided-batched, and grouped
 * GEMMs (cublasGemmGroupedBatchedEx, or a loop of GEMMs where cuBLAS refuses the types). */
#include "runtime/cuda_internal.h"

static int dtype_of(const BackendRank *r, const Operand *op) { return r->p->tensors[op->tensor].dtype; }
static int cublas_type(int dt) { return dt == PDT_FP32 ? CUDA_R_32F_ : CUDA_R_16BF_; }

/* Row-major C = alpha op(A) op(B) + beta C as column-major C^T = op(B)^T op(A)^T. */
static int gemm_one(BackendRank *r, const GemmArgs *g, void *A, void *B, void *C, int batched) {
    int ta = g->tb ? 1 : 0, tb = g->ta ? 1 : 0;       /* swapped */
    int at = dtype_of(r, &g->A), bt = dtype_of(r, &g->B), ct = dtype_of(r, &g->C);
    if (at != bt) return rfail(r, "gemm with A and B of different dtypes (%s, %s): the CUDA backend needs one "
                               "dtype for both", r->p->tensors[g->A.tensor].name, r->p->tensors[g->B.tensor].name);
    float alpha = (float)g->alpha, beta = (float)g->beta;
    int st;
    if (batched && g->batch > 1)
        st = api.cublasGemmStridedBatchedEx(r->blas, ta, tb, (int)g->n, (int)g->m, (int)g->k, &alpha,
                                            B, cublas_type(bt), (int)g->ldb, g->sB,
                                            A, cublas_type(at), (int)g->lda, g->sA, &beta,
                                            C, cublas_type(ct), (int)g->ldc, g->sC, (int)g->batch,
                                            CUBLAS_COMPUTE_32F_, CUBLAS_GEMM_DEFAULT_);
    else
        st = api.cublasGemmEx(r->blas, ta, tb, (int)g->n, (int)g->m, (int)g->k, &alpha,
                              B, cublas_type(bt), (int)g->ldb, A, cublas_type(at), (int)g->lda, &beta,
                              C, cublas_type(ct), (int)g->ldc, CUBLAS_COMPUTE_32F_, CUBLAS_GEMM_DEFAULT_);
    if (st != 0) {
        char m[400];
        snprintf(m, sizeof m, "row-major m=%lld n=%lld k=%lld ta=%d tb=%d lda=%lld ldb=%lld ldc=%lld batch=%lld; "
                 "A=%.60s B=%.60s C=%.60s", (long long)g->m, (long long)g->n, (long long)g->k, g->ta, g->tb,
                 (long long)g->lda, (long long)g->ldb, (long long)g->ldc, (long long)g->batch,
                 r->p->tensors[g->A.tensor].name, r->p->tensors[g->B.tensor].name, r->p->tensors[g->C.tensor].name);
        return rfail(r, "%s failed with cuBLAS status %d%s (%s)", batched && g->batch > 1 ? "cublasGemmStridedBatchedEx" : "cublasGemmEx",
                     st, st == 7 ? " (INVALID_VALUE: a leading dimension, size or transpose cuBLAS refuses)" : "", m);
    }
    return 0;
}

int cuda_gemm(BackendRank *r, const GemmArgs *g, void *A, void *B, void *C) {
    if (ctx_set(r, "a GEMM")) return -1;
    if (gemm_one(r, g, A, B, C, 1)) return -1;
    return after_step(r, "gemm");
}

/* The first refusal of cublasGemmGroupedBatchedEx per (A/B type, C type) is printed once: those
 * grouped GEMMs then run as a loop of cublasGemmEx, which is correct but slower. */
static void grouped_refusal_note(int ab_type, int c_type, int status) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int seen[16][2], nseen;
    int fresh = 1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nseen; i++) fresh &= !(seen[i][0] == ab_type && seen[i][1] == c_type);
    if (fresh && nseen < 16) { seen[nseen][0] = ab_type; seen[nseen][1] = c_type; nseen++; }
    pthread_mutex_unlock(&mu);
    if (fresh)
        fprintf(stderr, "boost: cublasGemmGroupedBatchedEx refused A/B %s, C %s (cuBLAS status %d): those grouped GEMMs "
                "run as a loop of cublasGemmEx (printed once per type combination; BOOST_NO_GROUPED=1 skips the try)\n",
                ab_type == CUDA_R_16BF_ ? "bf16" : "fp32", c_type == CUDA_R_16BF_ ? "bf16" : "fp32", status);
}

int cuda_grouped_gemm(BackendRank *r, int n, const GemmArgs *g, void **A, void **B, void **C) {
    if (ctx_set(r, "a grouped GEMM")) return -1;
    /* cuBLAS's grouped call takes C of the inputs' type only (its table of supported types:
     * bf16 -> bf16, fp32 -> fp32 under CUBLAS_COMPUTE_32F): bf16 GEMMs into fp32 grads loop */
    int same = api.cublasGemmGroupedBatchedEx != NULL && !runtime_env()->no_grouped &&
               n >= 1 && n <= 64 && dtype_of(r, &g[0].C) == dtype_of(r, &g[0].A);
    for (int i = 1; i < n && same; i++)
        same = dtype_of(r, &g[i].A) == dtype_of(r, &g[0].A) && dtype_of(r, &g[i].B) == dtype_of(r, &g[0].B) &&
               dtype_of(r, &g[i].C) == dtype_of(r, &g[0].C) && dtype_of(r, &g[i].A) == dtype_of(r, &g[i].B);
    if (!same) {   /* a loop of GEMMs on the same stream */
        for (int i = 0; i < n; i++) if (gemm_one(r, &g[i], A[i], B[i], C[i], 0)) return -1;
        return after_step(r, "grouped_gemm");
    }
    int transa[64], transb[64], m[64], nn[64], k[64], lda[64], ldb[64], ldc[64], size[64];
    float alpha[64], beta[64];
    CUdeviceptr hp[3 * 64];
    for (int i = 0; i < n; i++) {
        transa[i] = g[i].tb ? 1 : 0; transb[i] = g[i].ta ? 1 : 0;
        m[i] = (int)g[i].n; nn[i] = (int)g[i].m; k[i] = (int)g[i].k;
        lda[i] = (int)g[i].ldb; ldb[i] = (int)g[i].lda; ldc[i] = (int)g[i].ldc;
        alpha[i] = (float)g[i].alpha; beta[i] = (float)g[i].beta; size[i] = 1;
        hp[i] = (CUdeviceptr)(uintptr_t)B[i]; hp[n + i] = (CUdeviceptr)(uintptr_t)A[i]; hp[2 * n + i] = (CUdeviceptr)(uintptr_t)C[i];
    }
    /* the pointer arrays of a plan step were uploaded at open (g points into the plan's members);
     * other callers' arrays go through scratch, after the previous grouped call has read it */
    CUdeviceptr dp = 0;
    ptrdiff_t first = g - r->p->members, at0 = (ptrdiff_t)r->slot * 3 * r->p->nmembers + 3 * first;   /* this slot's table */
    if (r->gemm_ptrs && first >= 0 && first + n <= r->p->nmembers &&
        !memcmp(r->gemm_ptrs_host + at0, hp, 3 * n * sizeof *hp))
        dp = r->gemm_ptrs + at0 * sizeof(CUdeviceptr);
    else {
        CU(r, api.cuStreamSynchronize(r->stream));
        CU(r, api.cuMemcpyHtoD_v2(r->scratch, hp, 3 * n * sizeof *hp));
        dp = r->scratch;
    }
    int at = cublas_type(dtype_of(r, &g[0].A)), ct = cublas_type(dtype_of(r, &g[0].C));
    int st = api.cublasGemmGroupedBatchedEx(r->blas, transa, transb, m, nn, k, alpha,
                                            (const void *const *)(uintptr_t)dp, at, lda,
                                            (const void *const *)(uintptr_t)(dp + n * sizeof(CUdeviceptr)), at, ldb,
                                            beta, (void *const *)(uintptr_t)(dp + 2 * n * sizeof(CUdeviceptr)), ct, ldc,
                                            n, size, CUBLAS_COMPUTE_32F_);
    if (st != 0) {   /* e.g. a type combination the grouped call does not support: loop instead */
        grouped_refusal_note(at, ct, st);
        for (int i = 0; i < n; i++) if (gemm_one(r, &g[i], A[i], B[i], C[i], 0)) return -1;
    }
    return after_step(r, "grouped_gemm");
}
