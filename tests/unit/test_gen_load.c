/* test_gen_load.c: every plan under generated/ is accepted by the runtime's loader (the contract
 * docs/plan-format.md from the reader's side), names only kernels that its kernels.cu defines, and
 * its parts cover each local param exactly (no gaps, no overlaps) at every rank. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "runtime/plan.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    s[n] = 0;
    fclose(f);
    return s;
}

static void check_dir(const char *dir) {
    char path[1200], err[1024], nm[1400];
    snprintf(path, sizeof path, "generated/%.190s/plan.txt", dir);
    Plan *p = plan_load(path, err, sizeof err);
    snprintf(nm, sizeof nm, "%.190s: the runtime loads plan.txt", dir);
    CHECK(p != NULL, nm, "%s", err);
    if (!p) return;
    snprintf(path, sizeof path, "generated/%.190s/kernels.cu", dir);
    char *cu = slurp(path);
    int missing = 0;
    char first[PLAN_NAME_LEN] = "";
    for (int s = 0; s < p->nsteps && cu; s++) {
        const PlanStep *st = &p->steps_[s];
        if (st->kind != ST_KERNEL) continue;
        char pat[PLAN_NAME_LEN + 4];
        snprintf(pat, sizeof pat, "%s(", st->kernel->name);
        if (!strstr(cu, pat)) { if (!missing) snprintf(first, sizeof first, "%s", st->kernel->name); missing++; }
    }
    snprintf(nm, sizeof nm, "%.190s: every kernel step names a kernel in kernels.cu", dir);
    CHECK(cu && !missing, nm, "%d missing, first %s", missing, first);
    free(cu);
    int bad = 0;
    char why[300] = "";
    for (int rank = 0; rank < p->tp && !bad; rank++)
        for (int i = 0; i < p->nparams && !bad; i++) {
            const PlanParam *q = &p->params[i];
            /* blocks inside their canon and the param, pairwise disjoint, areas summing to the param */
            int64_t area = 0;
            for (int j = q->first_part; j < q->first_part + q->nparts && !bad; j++) {
                const PlanPart *a = &p->parts[j];
                int64_t r0 = rank_int(a->r0, rank), r1 = rank_int(a->r1, rank), c0 = rank_int(a->c0, rank), c1 = rank_int(a->c1, rank);
                int64_t lr = rank_int(a->lr, rank), lc = rank_int(a->lc, rank);
                const PlanCanon *c = &p->canons[a->canon];
                if (r0 < 0 || c0 < 0 || r1 > c->rows || c1 > c->cols || r1 <= r0 || c1 <= c0 ||
                    lr < 0 || lc < 0 || lr + (r1 - r0) > q->rows || lc + (c1 - c0) > q->cols) {
                    bad = 1; snprintf(why, sizeof why, "%s rank %d: block outside canon %s or the param", q->name, rank, c->name);
                }
                area += (r1 - r0) * (c1 - c0);
                for (int k = q->first_part; k < j && !bad; k++) {
                    const PlanPart *b = &p->parts[k];
                    int64_t blr = rank_int(b->lr, rank), blc = rank_int(b->lc, rank);
                    int64_t bh = rank_int(b->r1, rank) - rank_int(b->r0, rank), bw = rank_int(b->c1, rank) - rank_int(b->c0, rank);
                    if (lr < blr + bh && blr < lr + (r1 - r0) && lc < blc + bw && blc < lc + (c1 - c0)) {
                        bad = 1; snprintf(why, sizeof why, "%s rank %d: parts overlap", q->name, rank);
                    }
                }
            }
            if (!bad && area != q->rows * q->cols) { bad = 1; snprintf(why, sizeof why, "%s rank %d: parts cover %lld of %lld elements", q->name, rank, (long long)area, (long long)(q->rows * q->cols)); }
        }
    snprintf(nm, sizeof nm, "%.190s: parts cover every local param exactly", dir);
    CHECK(!bad, nm, "%s", why);
    plan_free(p);
}

int main(void) {
    DIR *d = opendir("generated");
    if (!d) { CHECK(0, "generated/ readable", "run from the repository root after make generate"); TEST_EXIT(); }
    char names[64][200];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) if (e->d_name[0] != '.') snprintf(names[n++], sizeof names[0], "%.190s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    CHECK(n >= 6, "generated/ holds the shipped outputs", "only %d folders", n);
    for (int i = 0; i < n; i++) check_dir(names[i]);
    TEST_EXIT();
}
