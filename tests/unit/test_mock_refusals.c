/* test_mock_refusals.c: the CUDA and cuBLAS stand-in (tests/gpu/mock_cuda.c, compiled into this
 * test) refuses what the real libraries refuse, so that a plan the stand-in runs is one the GPU
 * accepts: cuBLAS leading dimensions below the stored rows, unknown transposes, negative sizes and
 * batch counts; launches above 1024 threads, with a zero or oversized grid, or with more than 48 KiB
 * of dynamic shared memory unless cuFuncSetAttribute raised that function's limit (up to the arch's
 * opt-in maximum, per BOOST_MOCK_ARCH); 2D copies whose pitch is above the device's MAX_PITCH (or
 * whose rows are wider than their pitch), as the driver refuses them; cuBLAS type mixes outside
 * its documented tables (fp32 inputs with a bf16 output, bf16 with fp32, the grouped call's bf16 ->
 * fp32). Each refusal has its own check; valid calls next to them must pass. */
#include "tests/gpu/mock_cuda.c"
#include "tests/unit/testlib.h"

static int dummy_launch(unsigned g, unsigned b, void **p) { (void)g; (void)b; (void)p; return 0; }
static int dummy_sizes(unsigned *s) { (void)s; return 0; }

/* C[4, 4] = A[4, 4] B[4, 4] (column-major, ld 4) with the given types (fp32 = 0, bf16 = 14) and
 * compute type (32F = 68, 32F_PEDANTIC = 69): one cublasGemmEx, a strided batch of 2 (stride 16),
 * a grouped call of one group of one. */
typedef struct { const void *a, *b; void *c; int at, bt, ct, compute; } Mix;
static const float ONE = 1.f, ZERO = 0.f;
static int mix_gemm(void *h, Mix x) {
    return cublasGemmEx(h, 0, 0, 4, 4, 4, &ONE, x.a, x.at, 4, x.b, x.bt, 4, &ZERO, x.c, x.ct, 4,
                        x.compute, -1);
}
static int mix_strided(void *h, Mix x) {
    return cublasGemmStridedBatchedEx(h, 0, 0, 4, 4, 4, &ONE, x.a, x.at, 4, 16, x.b, x.bt, 4, 16,
                                      &ZERO, x.c, x.ct, 4, 16, 2, x.compute, -1);
}
static int mix_grouped(void *h, Mix x) {
    static const void *pa[8], *pb[8];   /* read when the GEMM runs: one slot a call */
    static void *pc[8];
    static int calls;
    int i = calls++ % 8;
    pa[i] = x.a; pb[i] = x.b; pc[i] = x.c;
    int op[1] = {0}, four[1] = {4}, one[1] = {1};
    float al[1] = {1.f}, be[1] = {0.f};
    return cublasGemmGroupedBatchedEx(h, op, op, four, four, four, al, pa + i, x.at, four, pb + i,
                                      x.bt, four, be, pc + i, x.ct, four, 1, one, x.compute);
}

int main(void) {
    void *h = NULL, *st = NULL;
    CHECK(cublasCreate_v2(&h) == 0 && cuStreamCreate(&st, 0) == OK, "stand-in handle and stream", "create failed");
    cublasSetStream_v2(h, st);
    static float A[64], B[64], C[64];
    for (int i = 0; i < 64; i++) { A[i] = 1.f; B[i] = 2.f; C[i] = 0.f; }
    const float one = 1.f, zero = 0.f;
    /* column-major C[m, n] = op(A) op(B), m = n = k = 4, fp32 (type 0), compute 68 */
    CHECK(cublasGemmEx(h, 0, 0, 4, 4, 4, &one, A, 0, 4, B, 0, 4, &zero, C, 0, 4, 68, -1) == 0, "gemm: valid NN accepted", "refused");
    CHECK(cublasGemmEx(h, 1, 1, 4, 4, 4, &one, A, 0, 4, B, 0, 4, &zero, C, 0, 4, 68, -1) == 0, "gemm: valid TT accepted", "refused");
    CHECK(cuStreamSynchronize(st) == OK && C[0] == 8.f, "gemm: the accepted GEMM runs", "C[0] = %g, want 8", C[0]);
    CHECK(cublasGemmEx(h, 0, 0, 8, 4, 4, &one, A, 0, 4, B, 0, 4, &zero, C, 0, 8, 68, -1) == 7, "gemm refused: lda < m (A not transposed)", "accepted");
    CHECK(cublasGemmEx(h, 1, 0, 4, 4, 8, &one, A, 0, 4, B, 0, 8, &zero, C, 0, 4, 68, -1) == 7, "gemm refused: lda < k (A transposed)", "accepted");
    CHECK(cublasGemmEx(h, 0, 0, 4, 4, 8, &one, A, 0, 4, B, 0, 4, &zero, C, 0, 4, 68, -1) == 7, "gemm refused: ldb < k", "accepted");
    CHECK(cublasGemmEx(h, 0, 1, 4, 8, 4, &one, A, 0, 4, B, 0, 4, &zero, C, 0, 4, 68, -1) == 7, "gemm refused: ldb < n (B transposed)", "accepted");
    CHECK(cublasGemmEx(h, 0, 0, 4, 4, 4, &one, A, 0, 4, B, 0, 4, &zero, C, 0, 2, 68, -1) == 7, "gemm refused: ldc < m", "accepted");
    CHECK(cublasGemmEx(h, 3, 0, 4, 4, 4, &one, A, 0, 4, B, 0, 4, &zero, C, 0, 4, 68, -1) == 7, "gemm refused: transa not N/T/C", "accepted");
    CHECK(cublasGemmEx(h, 0, 0, -1, 4, 4, &one, A, 0, 4, B, 0, 4, &zero, C, 0, 4, 68, -1) == 7, "gemm refused: negative m", "accepted");
    CHECK(cublasGemmStridedBatchedEx(h, 0, 0, 4, 4, 4, &one, A, 0, 4, 16, B, 0, 4, 16, &zero, C, 0, 4, 16, -2, 68, -1) == 7,
          "strided batched gemm refused: negative batch count", "accepted");
    CHECK(cublasGemmStridedBatchedEx(h, 0, 0, 4, 4, 4, &one, A, 0, 2, 16, B, 0, 4, 16, &zero, C, 0, 4, 16, 2, 68, -1) == 7,
          "strided batched gemm refused: lda < m", "accepted");
    int ta[1] = {0}, tb[1] = {0}, m[1] = {4}, n[1] = {4}, k[1] = {4}, lda[1] = {4}, ldb[1] = {4}, ldc[1] = {3}, size[1] = {1};
    float al[1] = {1.f}, be[1] = {0.f};
    CHECK(cublasGemmGroupedBatchedEx(h, ta, tb, m, n, k, al, NULL, 0, lda, NULL, 0, ldb, be, NULL, 0, ldc, 1, size, 68) == 7,
          "grouped gemm refused: ldc < m in a group", "accepted");
    /* bf16 (type 14) with a leading dimension of 3 elements: accepted, counted as off the tensor cores */
    long long mis0 = mock_cublas_misaligned();
    static uint16_t a16[64] __attribute__((aligned(16))), b16[64] __attribute__((aligned(16)));
    static float c32[64];
    CHECK(cublasGemmEx(h, 0, 0, 3, 3, 3, &one, a16, 14, 3, b16, 14, 8, &zero, c32, 0, 3, 68, -1) == 0 &&
          mock_cublas_misaligned() == mis0 + 1, "bf16 gemm with lda=3: accepted and counted as misaligned", "count %lld -> %lld",
          mis0, mock_cublas_misaligned());
    cuStreamSynchronize(st);
    /* type mixes (cuBLAS's tables of supported Atype/Btype, Ctype): NOT_SUPPORTED (15) outside
     * them, accepted inside */
    static uint16_t c16[64] __attribute__((aligned(16)));
    Mix f32_to_b16 = {A, B, c16, 0, 0, 14, 68}, b16_f32 = {a16, B, C, 14, 0, 0, 68};
    Mix f32_b16_to_b16 = {A, b16, c16, 0, 14, 14, 68}, b16_to_b16 = {a16, b16, c16, 14, 14, 14, 68};
    Mix b16_to_f32 = {a16, b16, C, 14, 14, 0, 68}, f32_to_f32_ped = {A, B, C, 0, 0, 0, 69};
    Mix b16_to_f32_ped = {a16, b16, C, 14, 14, 0, 69};
    Mix b16_to_b16_ped = {a16, b16, c16, 14, 14, 14, 69};
    CHECK(mix_gemm(h, f32_to_b16) == 15, "gemm refused: fp32 inputs, bf16 output", "accepted");
    CHECK(mix_gemm(h, b16_f32) == 15, "gemm refused: A bf16, B fp32", "accepted");
    CHECK(mix_gemm(h, f32_b16_to_b16) == 15, "gemm refused: A fp32, B bf16, C bf16", "accepted");
    CHECK(mix_strided(h, f32_to_b16) == 15, "strided batched gemm refused: fp32 in, bf16 out",
          "accepted");
    CHECK(mix_gemm(h, b16_to_b16) == 0 && mix_gemm(h, f32_to_f32_ped) == 0 &&
          mix_gemm(h, b16_to_f32_ped) == 0,
          "gemm accepts bf16 -> bf16, and fp32 -> fp32, bf16 -> fp32 with 32F_PEDANTIC", "refused");
    CHECK(mix_strided(h, b16_to_f32) == 0, "strided batched gemm accepts bf16 -> fp32", "refused");
    CHECK(mix_grouped(h, b16_to_f32) == 15, "grouped gemm refused: bf16 in, fp32 out", "accepted");
    CHECK(mix_grouped(h, f32_to_b16) == 15, "grouped gemm refused: fp32 in, bf16 out", "accepted");
    CHECK(mix_grouped(h, b16_to_b16_ped) == 15, "grouped gemm refused: bf16, 32F_PEDANTIC",
          "accepted");
    CHECK(mix_grouped(h, b16_to_b16) == 0 && mix_grouped(h, f32_to_f32_ped) == 0,
          "grouped gemm accepts bf16 -> bf16, and fp32 -> fp32 with 32F_PEDANTIC", "refused");
    CHECK(cuStreamSynchronize(st) == OK && C[0] == 8.f, "the accepted mixes run",
          "C[0] = %g, want 8", C[0]);

    MockFn fn = {dummy_launch, dummy_sizes, NULL, 48 * 1024};
    CHECK(cuLaunchKernel(&fn, 4, 1, 1, 256, 1, 1, 0, st, NULL, NULL) == OK, "launch: valid accepted", "refused");
    CHECK(cuLaunchKernel(&fn, 4, 1, 1, 256, 1, 1, 48 * 1024, st, NULL, NULL) == OK, "launch: 48 KiB dynamic shared accepted", "refused");
    CHECK(cuLaunchKernel(&fn, 4, 1, 1, 1025, 1, 1, 0, st, NULL, NULL) == ERR_INVALID_VALUE, "launch refused: 1025 threads", "accepted");
    CHECK(cuLaunchKernel(&fn, 4, 1, 1, 512, 4, 1, 0, st, NULL, NULL) == ERR_INVALID_VALUE, "launch refused: 512x4 threads", "accepted");
    CHECK(cuLaunchKernel(&fn, 0, 1, 1, 256, 1, 1, 0, st, NULL, NULL) == ERR_INVALID_VALUE, "launch refused: empty grid", "accepted");
    CHECK(cuLaunchKernel(&fn, 4, 70000, 1, 256, 1, 1, 0, st, NULL, NULL) == ERR_INVALID_VALUE, "launch refused: grid y > 65535", "accepted");
    CHECK(cuLaunchKernel(&fn, 4, 1, 1, 256, 1, 1, 48 * 1024 + 1, st, NULL, NULL) == ERR_INVALID_VALUE,
          "launch refused: dynamic shared memory above 48 KiB without the attribute", "accepted");
    /* the opt-in: cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES = 8) raises this function's limit up to
     * the arch's CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN (97), and only to what it was set to */
    static const struct { const char *arch; int kib; } OPTIN[] = {{"sm_80", 163}, {"sm_86", 99}, {"sm_89", 99}, {"sm_90", 227}};
    for (int i = 0; i < 4; i++) {
        setenv("BOOST_MOCK_ARCH", OPTIN[i].arch, 1);
        int optin = -1, major = -1;
        cuDeviceGetAttribute(&optin, 97, 0);
        cuDeviceGetAttribute(&major, 75, 0);
        CHECK(optin == OPTIN[i].kib * 1024 && major == OPTIN[i].arch[3] - '0', OPTIN[i].arch,
              "opt-in %d B (want %d), major %d", optin, OPTIN[i].kib * 1024, major);
        MockFn f2 = {dummy_launch, dummy_sizes, NULL, 48 * 1024};
        CHECK(cuFuncSetAttribute(&f2, 8, optin + 1) == ERR_INVALID_VALUE && f2.max_dyn == 48 * 1024,
              "attribute refused: one byte above the arch's opt-in", "accepted");
        CHECK(cuFuncSetAttribute(&f2, 8, 64 * 1024) == OK, "attribute: 64 KiB accepted", "refused");
        CHECK(cuLaunchKernel(&f2, 4, 1, 1, 256, 1, 1, 64 * 1024, st, NULL, NULL) == OK, "launch: 64 KiB after the attribute",
              "refused");
        CHECK(cuLaunchKernel(&f2, 4, 1, 1, 256, 1, 1, 64 * 1024 + 16, st, NULL, NULL) == ERR_INVALID_VALUE,
              "launch refused: 16 B above the attribute's 64 KiB", "accepted");
        CHECK(cuLaunchKernel(&fn, 4, 1, 1, 256, 1, 1, 64 * 1024, st, NULL, NULL) == ERR_INVALID_VALUE,
              "launch refused: the attribute raised another function's limit, not this one's", "accepted");
        CHECK(cuFuncSetAttribute(&f2, 8, optin) == OK && cuLaunchKernel(&f2, 4, 1, 1, 256, 1, 1, optin, st, NULL, NULL) == OK,
              "attribute and launch at exactly the arch's opt-in", "refused");
    }
    unsetenv("BOOST_MOCK_ARCH");
    CHECK(cuStreamSynchronize(st) == OK, "the accepted launches run", "synchronize failed");
    cublasDestroy_v2(h);
    /* cuMemcpy2D: pitches capped at CU_DEVICE_ATTRIBUTE_MAX_PITCH (11) */
    int cap = 0;
    cuDeviceGetAttribute(&cap, 11, 0);
    static char src2[64], dst2[64];
    Copy2D c2;
    memset(&c2, 0, sizeof c2);
    c2.srcMemoryType = c2.dstMemoryType = 2;
    c2.srcDevice = (CUdeviceptr)(uintptr_t)src2; c2.dstDevice = (CUdeviceptr)(uintptr_t)dst2;
    c2.srcPitch = c2.dstPitch = 16; c2.WidthInBytes = 8; c2.Height = 4;
    CHECK(cap == 2147483647 && cuMemcpy2DAsync_v2(&c2, st) == OK, "copy2d: pitch 16 accepted, MAX_PITCH 2^31-1",
          "cap %d", cap);
    c2.Height = 1; c2.srcPitch = c2.dstPitch = c2.WidthInBytes = (size_t)cap + 1;
    CHECK(cuMemcpy2DAsync_v2(&c2, st) == ERR_INVALID_VALUE, "copy2d refused: one row of 2^31 bytes (pitch above the cap)",
          "accepted");
    c2.srcPitch = c2.dstPitch = 16; c2.WidthInBytes = 32;
    CHECK(cuMemcpy2DAsync_v2(&c2, st) == ERR_INVALID_VALUE, "copy2d refused: a row wider than its pitch", "accepted");
    CHECK(cuStreamSynchronize(st) == OK, "copy2d: the accepted copy runs", "sync failed");
    TEST_EXIT();
}
