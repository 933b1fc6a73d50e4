/* test_shipped_launches.c: every shipped plan (generated/<run>/plan.txt) checked against what the real
 * libraries refuse, without running it: each GEMM as runtime/cuda.c hands it to cuBLAS (row-major
 * C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T) has leading dimensions at least the rows of
 * each operand as stored, sizes >= 0, a batch count >= 1 and, batched, outputs that do not overlap;
 * each kernel launch has 1..1024 threads, a grid of 1..2^31-1 blocks and at most the dynamic shared
 * memory the plan's arch lets a block opt in to (48 KiB without an arch; specs/gpus). Zero refusals expected. Also prints the launches of one training step per plan
 * (forward + backward steps x grad_accum, optimizer launches as runtime/cuda.c issues them). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "runtime/plan.h"
#include "gen/kernels.h"

static int gemm_refusal(const GemmArgs *g, char *why, size_t n) {
    const int64_t cm = g->n, cn = g->m, k = g->k;          /* the column-major call's m, n */
    const int64_t lda = g->ldb, ldb = g->lda;               /* its A is the plan's B */
    const int ta = g->tb, tb = g->ta;
    if (cm < 0 || cn < 0 || k < 0) { snprintf(why, n, "negative size"); return 1; }
    if (lda < (ta ? k : cm) || lda < 1) { snprintf(why, n, "ldb=%lld below %lld", (long long)g->ldb, (long long)(ta ? k : cm)); return 1; }
    if (ldb < (tb ? cn : k) || ldb < 1) { snprintf(why, n, "lda=%lld below %lld", (long long)g->lda, (long long)(tb ? cn : k)); return 1; }
    if (g->ldc < cm || g->ldc < 1) { snprintf(why, n, "ldc=%lld below n=%lld", (long long)g->ldc, (long long)cm); return 1; }
    if (g->batch < 1) { snprintf(why, n, "batch %lld", (long long)g->batch); return 1; }
    /* batch b's C is the [cm, cn] column-major block at C + b sC: disjoint blocks either lie side by side
     * within the columns' ldc rows (cm <= sC, (batch-1) sC + cm <= ldc) or one after another (sC >= ldc cn) */
    if (g->batch > 1 && !(g->sC >= g->ldc * cn || (g->sC >= cm && (g->batch - 1) * g->sC + cm <= g->ldc))) {
        snprintf(why, n, "batched outputs overlap (stride %lld < %lld)", (long long)g->sC, (long long)(g->ldc * cn));
        return 1;
    }
    return 0;
}

int main(void) {
    {   /* the checker itself refuses a bad GEMM: C [4, 8] = A [4, 8] B [8, 8] with lda 4 < 8 */
        GemmArgs g = {0};
        char why[200];
        g.m = 4; g.n = 8; g.k = 8; g.lda = 4; g.ldb = 8; g.ldc = 8; g.batch = 1;
        int r1 = gemm_refusal(&g, why, sizeof why);
        g.lda = 8;
        int r2 = gemm_refusal(&g, why, sizeof why);
        CHECK(r1 == 1 && r2 == 0, "the GEMM check refuses lda below the stored rows, accepts it fixed", "%d %d", r1, r2);
    }
    DIR *d = opendir("generated");
    if (!d) { printf("ok - shipped plans # SKIP no generated/ folder\n"); return 0; }
    struct dirent *e;
    int nplans = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[600], err[1024];
        snprintf(path, sizeof path, "generated/%s/plan.txt", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        fclose(f);
        Plan *p = plan_load(path, err, sizeof err);
        CHECK(p != NULL, path, "%s", err);
        if (!p) continue;
        nplans++;
        int bad = 0, gemms = 0, kernels = 0, colls = 0, misaligned = 0;
        char first[700] = "";
        const long long optin = kernel_smem_optin(p->arch);   /* from the GPU spec of that arch */
        for (int s = 0; s < p->nsteps; s++) {
            const PlanStep *st = &p->steps_[s];
            char why[200] = "";
            const GemmArgs *gs[256];
            int ng = 0;
            if (st->kind == ST_GEMM || st->kind == ST_BATCHED_GEMM) gs[ng++] = &st->gemm;
            if (st->kind == ST_GROUPED_GEMM) for (int i = 0; i < st->nmembers && ng < 256; i++) gs[ng++] = &p->members[st->first_member + i];
            for (int i = 0; i < ng; i++) {
                if (gemm_refusal(gs[i], why, sizeof why)) {
                    if (!bad++) snprintf(first, sizeof first, "line %d gemm: %s", st->line, why);
                }
                const int es = 2;   /* bf16 operands: 16-byte rows for the tensor-op kernels */
                if ((gs[i]->lda * es) % 16 || (gs[i]->ldb * es) % 16) misaligned++;
            }
            if (ng && st->section < 2) gemms += st->kind == ST_GROUPED_GEMM ? 1 : 1;
            if (st->kind == ST_KERNEL) {
                const KernelArgs *k = st->kernel;
                if (k->block < 1 || k->block > 1024 || k->grid < 1 || k->grid > 0x7fffffffLL || k->smem < 0 || k->smem > optin) {
                    if (!bad++) snprintf(first, sizeof first, "line %d kernel %.100s: grid %lld block %lld dynamic shared %lld B",
                                         st->line, k->name, (long long)k->grid, (long long)k->block, (long long)k->smem);
                }
                if (st->section < 2) kernels++;
            }
            if ((st->kind == ST_ALLREDUCE || st->kind == ST_ALLGATHER) && st->section < 2) colls++;
        }
        char name[700];
        snprintf(name, sizeof name, "%s: every GEMM and launch within the libraries' limits", e->d_name);
        CHECK(bad == 0, name, "%d refusals, first: %s", bad, first);
        int accum = p->grad_accum > 0 ? p->grad_accum : 1;
        /* optimizer on CUDA (runtime/cuda.c): AdamW was one launch per parameter, is one multi-tensor
         * launch; one sum-of-squares launch for the gradient norm (plus one per replicated range: not
         * counted here) */
        printf("#   %s: per micro-batch %d kernels + %d GEMM calls + %d collectives; per training step %d "
               "(x%d micro-batches) + AdamW + 1 norm = %d launches with one AdamW launch per parameter (%d), "
               "%d with the multi-tensor AdamW; %d GEMMs with rows not 16-byte multiples\n",
               e->d_name, kernels, gemms, colls, (kernels + gemms) * accum, accum,
               (kernels + gemms) * accum + p->nparams + 1, p->nparams, (kernels + gemms) * accum + 2, misaligned);
        plan_free(p);
    }
    closedir(d);
    CHECK(nplans >= 1, "shipped plans found", "none under generated/");
    TEST_EXIT();
}
