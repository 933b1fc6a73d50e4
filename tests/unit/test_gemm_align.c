/* test_gemm_align.c: the GEMM alignment figure of `boost report` (gen/align.c). A hand-made
 * schedule with one GEMM breaking each rule (ld 97 beside 96 columns, a batch stride of 100, an
 * operand starting 8 bytes into its buffer; a grouped member 12 wide, a shape no layout can fix)
 * gives the closed-form FLOP shares; then every shipped run (specs/generate.txt) has no GEMM FLOPs
 * off cuBLAS's fast paths because of its buffer layout, and the report's JSON says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/gen.h"
#include "gen/ir.h"
#include "gen/align.h"
#include "gen/build_fixture.h"
#include "gen/pipeline.h"
#include "gen/report.h"
#include "tests/unit/testlib.h"

static Gemm mk(Opnd A, Opnd B, Opnd C, int64_t m, int64_t n, int64_t k) {
    Gemm x;
    memset(&x, 0, sizeof x);
    x.A = A; x.B = B; x.C = C; x.m = m; x.n = n; x.k = k; x.batch = 1; x.alpha = 1;
    return x;
}

static Op *step(Graph *g, int kind, Gemm x) {
    Op *o = ir_push(g, &g->steps, &g->nsteps, &g->caps);
    o->kind = kind;
    o->g = x;
    return o;
}

static void test_rules(void) {
    Run run;
    run_tiny_cola(&run);
    Graph *g = graph_new(&run, LAYOUT_BTP);
    int a = ir_tensor(g, "a", 16, 64, IR_BF16, TR_ACT, PS_REPLICATED);
    int w = ir_tensor(g, "w", 64, 96, IR_BF16, TR_PARAM, PS_REPLICATED);
    int c = ir_tensor(g, "c", 16, 97, IR_BF16, TR_ACT, PS_PARTIAL);
    int f = ir_tensor(g, "f", 16, 64, IR_FP32, TR_ACT, PS_REPLICATED);
    /* aligned: 2*16*32*64 = 65536 */
    step(g, OP_GEMM, mk(opnd(a, 0, 64), opnd(w, 0, 96), opnd(f, 0, 64), 16, 32, 64));
    /* ld 97 (the old layout of a stat column beside [16, 96]): 2*16*96*64 = 196608 */
    step(g, OP_GEMM, mk(opnd(a, 0, 64), opnd(w, 0, 96), opnd(c, 0, 97), 16, 96, 64));
    /* batch stride 100 elements: 2*8*8*8*3 = 3072 */
    Gemm b = mk(opnd(a, 0, 64), opnd(w, 0, 96), opnd(f, 0, 64), 8, 8, 8);
    b.batch = 3; b.sA = 100; b.sB = 8; b.sC = 8;
    step(g, OP_BATCHED_GEMM, b);
    /* A starts 4 bf16 elements (8 bytes) in: 2*8*8*8 = 1024 */
    step(g, OP_GEMM, mk(opnd(a, 4, 64), opnd(w, 0, 96), opnd(f, 0, 64), 8, 8, 8));
    /* C starts 4 fp32 elements (16 bytes) further on each rank: aligned, 1024 */
    step(g, OP_GEMM, mk(opnd(a, 0, 64), opnd(w, 0, 96), opnd_r(f, rint_r(0, 4), 64), 8, 8, 8));
    /* grouped: a member whose B is a dense 12-wide parameter (the shape's: 2*8*12*8 = 1536) and an
       aligned one (1024) */
    Op *o = step(g, OP_GROUPED_GEMM, mk(opnd(a, 0, 64), opnd(w, 0, 96), opnd(f, 0, 64), 0, 0, 0));
    o->members = ir_alloc(g, 2 * sizeof *o->members);
    o->nmembers = 2;
    o->members[0] = mk(opnd(a, 0, 64), opnd(w, 0, 12), opnd(f, 0, 64), 8, 12, 8);
    o->members[1] = mk(opnd(a, 0, 64), opnd(w, 0, 96), opnd(f, 0, 64), 8, 8, 8);
    GemmAlign al;
    gemm_alignment(g, &al);
    double total = 65536 + 196608 + 3072 + 1024 + 1024 + 1536 + 1024;
    CHECK(al.total == total, "alignment: total GEMM FLOPs (closed form)", "%.0f, expected %.0f",
          al.total, total);
    CHECK(al.ld == 196608, "alignment: ld rule (ld 97 beside 96 columns)", "%.0f", al.ld);
    CHECK(al.shape == 1536, "alignment: shape rule (a dense 12-wide operand)", "%.0f", al.shape);
    CHECK(al.stride == 3072, "alignment: batch stride rule (stride 100)", "%.0f", al.stride);
    CHECK(al.start == 1024, "alignment: start rule (8 bytes in; 16 bytes per rank is aligned)", "%.0f",
          al.start);
    CHECK(al.layout == 196608 + 3072 + 1024, "alignment: layout FLOPs (start, ld, stride)", "%.0f",
          al.layout);
    CHECK(al.misaligned == 196608 + 1536 + 3072 + 1024 && al.ngemms_misaligned == 4,
          "alignment: misaligned FLOPs and GEMMs", "%.0f in %d GEMMs", al.misaligned, al.ngemms_misaligned);
    graph_free(g);
}

/* One line of specs/generate.txt: DIR RUN [-D name=value ...]. Returns 0 with *run loaded. */
static int load_line(char *line, char *dir, size_t dn, Run *run, char *err, size_t errlen) {
    char *tok[24];
    int nt = 0;
    for (char *t = strtok(line, " \t\n"); t && nt < 24; t = strtok(NULL, " \t\n")) tok[nt++] = t;
    if (nt < 2 || tok[0][0] == '#') return 1;
    snprintf(dir, dn, "%s", tok[0]);
    Override ov[16];
    int nov = 0;
    for (int i = 2; i < nt; i++) {
        if (!strcmp(tok[i], "-D")) continue;
        int k = parse_override(tok[i], &ov[nov], err, errlen);
        if (k < 0) return 2;
        nov += k;
    }
    return spec_load_run(tok[1], ov, nov, run, err, errlen) ? 2 : 0;
}

static void test_shipped(void) {
    FILE *f = fopen("specs/generate.txt", "r");
    CHECK(f != NULL, "specs/generate.txt opens", "run from the repository root");
    if (!f) return;
    char line[512], dir[128], err[1024], name[256];
    int nruns = 0;
    Run *run = calloc(1, sizeof *run);
    while (run && fgets(line, sizeof line, f)) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", line);
        int rc = load_line(copy, dir, sizeof dir, run, err, sizeof err);
        if (rc == 1) continue;
        snprintf(name, sizeof name, "%s: no GEMM FLOPs off cuBLAS's fast paths by the buffer layout",
                 dir);
        if (rc) { CHECK(0, name, "spec: %s", err); continue; }
        int st;
        Graph *g = graph_build(run, run->layout, run->checkpoint, err, sizeof err, &st);
        if (!g) { CHECK(0, name, "graph_build: %s", err); continue; }
        GemmAlign al;
        gemm_alignment(g, &al);
        CHECK(al.total > 0 && al.layout == 0, name, "%.2f%% of %.4g FLOPs (start %.4g, ld %.4g, "
              "stride %.4g)", al.total > 0 ? 100 * al.layout / al.total : 0, al.total, al.start, al.ld,
              al.stride);
        if (al.shape > 0)
            printf("#   %s: %.2f%% of the GEMM FLOPs have a dense operand whose width is not a multiple "
                   "of 8 (the model's shape)\n", dir, 100 * al.shape / al.total);
        graph_free(g);
        if (nruns++ == 0) {   /* the report's JSON carries the same figure */
            char *buf = NULL;
            size_t n = 0;
            FILE *m = open_memstream(&buf, &n);
            int r = m ? report_write(run, m, 1, err, sizeof err) : 1;
            if (m) fclose(m);
            snprintf(name, sizeof name, "%s: report --json says misaligned_flops_share 0", dir);
            const char *want = "\"misaligned_flops_share\": 0.000000, \"layout_share\": 0.000000,";
            CHECK(r == 0 && buf && strstr(buf, want), name, "rc %d: %.200s",
                  r, buf && strstr(buf, "gemm_alignment") ? strstr(buf, "gemm_alignment") : err);
            free(buf);
        }
    }
    fclose(f);
    free(run);
    CHECK(nruns >= 9, "shipped runs checked", "%d runs in specs/generate.txt", nruns);
}

int main(void) {
    test_rules();
    test_shipped();
    TEST_EXIT();
}
