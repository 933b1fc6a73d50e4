/* test_coll_groups.c: reduce_scatter and allgather on the tp and the dp group of a dp=2 x tp=2
 * grid, and on the ep and the edp group of a dp=4 x ep=2 grid (edp = dp/ep = 2), CPU backend,
 * from small hand-written plans of collectives only. Each rank's buffers are filled with distinct
 * known values; the results are compared with sums and gathers this test computes from the grid's
 * placement (runtime/grid.c). As threads in one process, or one rank per process under
 * `mpirun -np 4` (tests/sh/mpi_coll_groups.sh): then each process checks its own rank and prints
 * "rank R: N checks failed". */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tests/unit/testlib.h"
#include "runtime/runtime.h"
#include "runtime/comm_mpi.h" // defines: comm_mpi_finish

#define WORLD 4 /* both grids: 4 ranks */
#define ELEMS 10 /* reduce_scatter buffers: shards of 5 over 2 members */
#define ROWS 2
#define COLS 3 /* allgather src [ROWS, COLS] -> dst [ROWS, 2*COLS] */

/* One grid (dp x tp, ep of the dp ranks) and the two groups its collectives run on: four
 * reduce_scatters (first group sum, avg, second group sum, avg), then the allgathers (first,
 * second). Every group has 2 members. */
typedef struct {
    int dp, tp, ep;
    const char *group[2];
} Grid;
static const Grid GRIDS[2] = {{2, 2, 1, {"tp", "dp"}}, {4, 1, 2, {"ep", "edp"}}};
static const char *const RS_NAMES[4] = {"rs_a_sum", "rs_a_avg", "rs_b_sum", "rs_b_avg"};
static const int RS_GROUP[4] = {0, 0, 1, 1}, RS_AVG[4] = {0, 1, 0, 1};
static const char *const AG_SRC[2] = {"ag_a_src", "ag_b_src"}, *const AG_DST[2] = {"ag_a_dst",
                                                                                   "ag_b_dst"};

static int write_plan(const char *path, const Grid *G) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "boost-plan 1\n# collectives on the %s and %s groups, for test_coll_groups\n",
            G->group[0], G->group[1]);
    fprintf(f, "model name=coll family=full hidden=8 layers=0 heads=1 kv_heads=1 head_dim=8 ffn=0 "
               "vocab=16 "
               "eps=1e-05 rope_theta=10000\n");
    fprintf(f,
            "run name=coll tp=%d pp=1 dp=%d ep=%d layout=btp micro_batch=1 seq=4 grad_accum=1 "
            "dtype=fp32 online_rmsnorm=0 group_linears=0 checkpoint=none gpu=h100 arch=sm_90\n",
            G->tp, G->dp, G->ep);
    fprintf(f, "train steps=1 lr=0.01 min_lr=0.001 warmup=1 beta1=0.9 beta2=0.95 adam_eps=1e-08 "
               "weight_decay=0 clip=1 seed=7 eval_every=5\n");
    fprintf(f, "data path= val_fraction=0.1\narena act bytes=4096\n");
    fprintf(f,
            "canon w shape=1x8 init=ones std=0 seed=0x1 decay=0\nparam w shape=1x8 dtype=fp32\n");
    fprintf(f, "part w canon=w src=0:1,0:8 dst=0,0 rep=1\n");
    fprintf(f, "input tokens dtype=i32 shape=4\ninput targets dtype=i32 shape=4\n");
    fprintf(f, "output loss dtype=fp32 shape=1\n");
    int off = 0;
    for (int i = 0; i < 4; i++, off += 64)
        fprintf(f, "buffer %s dtype=fp32 shape=%d offset=%d live=0:6\n", RS_NAMES[i], ELEMS, off);
    for (int i = 0; i < 2; i++, off += 128)
        fprintf(
            f,
            "buffer %s dtype=fp32 shape=%dx%d offset=%d live=0:6\nbuffer %s dtype=fp32 shape=%dx%d "
            "offset=%d live=0:6\n",
            AG_SRC[i], ROWS, COLS, off, AG_DST[i], ROWS, 2 * COLS, off + 32);
    fprintf(f, "section forward\n");
    for (int i = 0; i < 4; i++)
        fprintf(f, "reduce_scatter buf=%s elems=%d dtype=fp32 op=%s group=%s dir=fwd tag=%s\n",
                RS_NAMES[i], ELEMS, RS_AVG[i] ? "avg" : "sum", G->group[RS_GROUP[i]],
                RS_NAMES[i]);
    for (int i = 0; i < 2; i++)
        fprintf(f, "allgather src=%s dst=%s rows=%d cols=%d dtype=fp32 group=%s dir=fwd tag=%s\n",
                AG_SRC[i], AG_DST[i], ROWS, COLS, G->group[i], AG_SRC[i]);
    fprintf(f, "section backward\nsection optimizer\noptimizer adamw\n");
    return fclose(f) ? -1 : 0;
}

/* Grid rank = dp_rank * tp + tp_rank (runtime/grid.h: tp fastest). Values exact in fp32. */
static float rs_value(int buf, int rank, int i) {
    return (float)(1000 * buf + 100 * rank + i) + 0.25f * (float)rank;
}
static float ag_value(int buf, int rank, int row, int col) {
    return (float)(500 * buf + 50 * rank + 10 * row + col);
}

/* The member index and the grid ranks of `rank`'s group `name` on grid G, as runtime/grid.c
 * places them: tp the ranks of one dp rank; dp the ranks of one tp rank; ep the dp ranks
 * d - d%ep .. d - d%ep + ep-1 (index d%ep); edp the dp ranks d%ep + k*ep (index d/ep). */
static void group_of(const Grid *G, int rank, const char *name, int *me, int members[2]) {
    int tp_rank = rank % G->tp, d = rank / G->tp, ep = G->ep;
    int is_tp = !strcmp(name, "tp"), is_dp = !strcmp(name, "dp"), is_ep = !strcmp(name, "ep");
    *me = is_tp ? tp_rank : is_dp ? d : is_ep ? d % ep : d / ep;
    for (int q = 0; q < 2; q++) {
        int dq = is_dp ? q : is_ep ? d - d % ep + q : d % ep + q * ep;
        members[q] = is_tp ? d * G->tp + q : dq * G->tp + tp_rank;
    }
}

/* Compares rank `rank`'s results with the expected ones; returns the number of failed checks. */
static int check_rank(Engine *e, const Grid *G, int rank) {
    char err[512], name[160];
    int failed = 0;
    for (int b = 0; b < 4; b++) {
        float got[ELEMS];
        int me, mem[2];
        const char *gname = G->group[RS_GROUP[b]];
        group_of(G, rank, gname, &me, mem);
        int lo = me * (ELEMS / 2), hi = lo + ELEMS / 2, bad = -1; /* zero_shard: ceil(10/2) = 5 */
        if (engine_read_tensor(e, rank, RS_NAMES[b], got, err, sizeof err)) { bad = 0; }
        for (int i = lo; i < hi && bad < 0; i++) {
            float want = rs_value(b, mem[0], i) + rs_value(b, mem[1], i);
            if (RS_AVG[b]) want /= 2.0f;
            if (got[i] != want) bad = i;
        }
        snprintf(name, sizeof name,
                 "rank %d: reduce_scatter %s group=%s leaves the %s of its group's "
                 "buffers in shard [%d, %d)",
                 rank, RS_AVG[b] ? "op=avg" : "op=sum", gname,
                 RS_AVG[b] ? "mean" : "sum", lo, hi);
        CHECK(bad < 0, name, "element %d: got %g", bad, bad >= 0 ? got[bad] : 0.0);
        failed += bad >= 0;
    }
    for (int b = 0; b < 2; b++) {
        float got[ROWS * 2 * COLS];
        int me, mem[2], bad = -1;
        group_of(G, rank, G->group[b], &me, mem);
        if (engine_read_tensor(e, rank, AG_DST[b], got, err, sizeof err)) bad = 0;
        for (int i = 0; i < ROWS && bad < 0; i++)
            for (int q = 0; q < 2; q++)
                for (int j = 0; j < COLS; j++)
                    if (got[i * 2 * COLS + q * COLS + j] != ag_value(b, mem[q], i, j))
                        bad = i * 2 * COLS + q * COLS + j;
        snprintf(name, sizeof name,
                 "rank %d: allgather group=%s puts member q's src at dst's column block q", rank,
                 G->group[b]);
        CHECK(bad < 0, name, "element %d: got %g", bad, bad >= 0 ? got[bad] : 0.0);
        failed += bad >= 0;
    }
    return failed;
}

/* The collectives of grid G's plan on its 4 ranks (under mpirun: rank `only`); the number of
 * failed checks. */
static int run_grid(const Grid *G, int only) {
    char path[128], what[160], err[1024] = "";
    snprintf(path, sizeof path, "build/tmp/coll_groups_%s_%d.txt", G->group[0], only);
    snprintf(what, sizeof what, "dp=%d x tp=%d (ep=%d) grid, on group=%s and group=%s", G->dp,
             G->tp, G->ep, G->group[0], G->group[1]);
    if (write_plan(path, G)) {
        CHECK(0, "write the collectives plan", "%s", path);
        return 1;
    }
    Plan *p = plan_load(path, err, sizeof err);
    char name[300];
    snprintf(name, sizeof name, "a plan of reduce_scatter and allgather loads: %s", what);
    CHECK(p != NULL, name, "%s", err);
    if (!p) return 1;
    Engine *e = engine_create(p, "cpu", err, sizeof err);
    snprintf(name, sizeof name, "the cpu engine opens the %s", what);
    CHECK(e != NULL, name, "%s", err);
    if (!e) {
        plan_free(p);
        return 1;
    }
    int wrote = 1;
    for (int r = 0; r < WORLD; r++) {
        if (only >= 0 && r != only) continue;
        float rs[ELEMS], ag[ROWS * COLS];
        for (int b = 0; b < 4; b++) {
            for (int i = 0; i < ELEMS; i++)
                rs[i] = rs_value(b, r, i);
            wrote &= !engine_write_tensor(e, r, RS_NAMES[b], rs, err, sizeof err);
        }
        for (int b = 0; b < 2; b++) {
            for (int i = 0; i < ROWS * COLS; i++)
                ag[i] = ag_value(b, r, i / COLS, i % COLS);
            wrote &= !engine_write_tensor(e, r, AG_SRC[b], ag, err, sizeof err);
        }
    }
    snprintf(name, sizeof name, "each rank's buffers are written: %s", what);
    CHECK(wrote, name, "%s", err);
    int32_t tokens[WORLD * 4] = {0}, targets[WORLD * 4] = {0};
    float loss;
    int rc = engine_forward(e, tokens, targets, &loss, err, sizeof err);
    snprintf(name, sizeof name, "the forward pass of collectives runs: %s", what);
    CHECK(rc == 0, name, "%s", err);
    int failed = 0;
    for (int r = 0; r < WORLD && rc == 0; r++)
        if (only < 0 || r == only) failed += check_rank(e, G, r);
    engine_free(e);
    plan_free(p);
    return failed + (rc != 0) + !wrote;
}

int main(void) {
    mkdir("build", 0755);
    mkdir("build/tmp", 0755);
    const char *world_rank = getenv("OMPI_COMM_WORLD_RANK");
    int only = world_rank ? atoi(world_rank) : -1; /* under mpirun: this process's grid rank */
    int failed = 0;
    for (int g = 0; g < 2; g++) failed += run_grid(&GRIDS[g], only);
    if (only >= 0) printf("rank %d: %d checks failed\n", only, failed);
    if (only >= 0) comm_mpi_finish(tl_failed ? 1 : 0); /* finalize (or stop the other ranks) */
    TEST_EXIT();
}
