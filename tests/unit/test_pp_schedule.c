/* test_pp_schedule.c: the generator's pipeline split and emitted 1F1B schedule (gen/pp.c): for
 * pp = 2 and 4 over several m, every stage runs each micro-batch's forward and backward once, the
 * sends and receives pair up and the static check finds no deadlock, stage s holds min(pp-s, m)
 * activation slots, and the bubble counted from the emitted steps equals (pp-1)/(m+pp-1) (interleaved
 * with v chunks per rank: (pp-1)/(v*m+pp-1)); an
 * explicit split is kept; a schedule with two steps swapped or a receive dropped is rejected. */
#include <math.h>
#include <string.h>
#include "gen/gen.h"
#include "gen/ir.h"
#include "gen/pipeline.h"
#include "gen/pp.h"
#include "tests/unit/testlib.h"

static PpPlan *build(const char *spec, const char *const *defs, int ndefs, Graph **gout) {
    static Run run;
    Override ov[16];
    char err[1024];
    int n = 0, status = 0;
    for (int i = 0; i < ndefs; i++) {
        int k = parse_override(defs[i], &ov[n], err, sizeof err);
        if (k < 0) { printf("FAIL - load: %s\n", err); return NULL; }
        n += k;
    }
    if (spec_load_run(spec, ov, n, &run, err, sizeof err)) { printf("FAIL - load %s: %s\n", spec, err); return NULL; }
    Graph *g = graph_build(&run, run.layout, run.checkpoint, err, sizeof err, &status);
    if (!g) { printf("FAIL - graph_build: %s\n", err); return NULL; }
    PpPlan *pl = pp_build(g, err, sizeof err);
    if (!pl) { printf("FAIL - pp_build: %s\n", err); graph_free(g); return NULL; }
    *gout = g;
    return pl;
}

static void schedule_case(int pp, int m, const char *model, int v) {
    char dpp[32], dm[32], dmodel[64], dv[32], name[200];
    snprintf(dv, sizeof dv, "virtual_stages=%d", v);
    snprintf(dpp, sizeof dpp, "pp=%d", pp); snprintf(dm, sizeof dm, "grad_accum=%d", m);
    snprintf(dmodel, sizeof dmodel, "model=%s", model);
    int full = !strcmp(model, "tiny-llama");
    const char *defs[] = {dpp, dm, dmodel, "tp=2", "micro_batch=1", "seq=16", dv, "layout=megatron", "online_rmsnorm=false", "checkpoint=none"};
    Graph *g = NULL;
    PpPlan *pl = build("tiny-cola-pp2", defs, full ? 10 : 7, &g);
    char mname[80];
    snprintf(mname, sizeof mname, "%s%s", model, v > 1 ? (v == 2 ? " v=2" : " v=4") : "");
    model = mname;
    snprintf(name, sizeof name, "%s pp=%d m=%d", model, pp, m);
    if (!pl) { CHECK(0, name, "no plan"); return; }
    int ok = 1;
    char why[300] = "";
    int nv = pl->nv;
    for (int k = 0; k < nv && ok; k++) {   /* every stage k, on rank k % pp */
        const PpStage *st = &pl->stages[k % pp];
        int nf[64] = {0}, nb[64] = {0}, sends = 0, recvs = 0;
        for (int i = 0; i < st->nsched; i++) {
            const PpSched *x = &st->sched[i];
            if (x->vs != k) continue;
            if (x->kind == PS_FORWARD) nf[x->micro]++;
            if (x->kind == PS_BACKWARD) nb[x->micro]++;
            sends += x->kind == PS_SEND_FWD || x->kind == PS_SEND_BWD;
            recvs += x->kind == PS_RECV_FWD || x->kind == PS_RECV_BWD;
        }
        for (int j = 0; j < m; j++) if (nf[j] != 1 || nb[j] != 1) { ok = 0; snprintf(why, sizeof why, "stage %d micro %d: %d fwd %d bwd", k, j, nf[j], nb[j]); }
        int want_io = (k > 0) + (k < nv - 1);
        if (ok && (sends != want_io * m || recvs != want_io * m)) { ok = 0; snprintf(why, sizeof why, "stage %d: %d sends %d recvs", k, sends, recvs); }
        int want_slots = pp - k < m ? pp - k : m;
        if (ok && v == 1 && pl->stages[k].slots != want_slots) { ok = 0; snprintf(why, sizeof why, "stage %d: %d slots, want %d", k, pl->stages[k].slots, want_slots); }
    }
    double formula = (double)(pp - 1) / (v * m + pp - 1), b1 = 0, b2 = 0;
    char err[512] = "";
    int rc = pp_check_schedule(pl, 1.0, 1.0, &b1, err, sizeof err) || pp_check_schedule(pl, 1.0, 2.0, &b2, err, sizeof err);
    snprintf(name, sizeof name, "%s pp=%d m=%d: each micro-batch once per stage, sends pair with receives, slots pp-s", model, pp, m);
    CHECK(ok && !rc, name, "%s %s", why, err);
    snprintf(name, sizeof name, "%s pp=%d m=%d: bubble counted from the emitted steps = (pp-1)/(v*m+pp-1)", model, pp, m);
    CHECK(fabs(b1 - formula) < 1e-12 && fabs(b2 - formula) < 1e-12 && fabs(pl->bubble - formula) < 1e-12, name,
          "bubble %.6f (tb=tf), %.6f (tb=2tf), formula %.6f", b1, b2, formula);
    /* mutations: swap stage 0's first forward with its first receive of a gradient; drop a receive */
    PpStage *st0 = &pl->stages[0];
    int f = -1, r = -1;
    for (int i = 0; i < st0->nsched; i++) {
        if (f < 0 && st0->sched[i].kind == PS_FORWARD) f = i;
        if (r < 0 && st0->sched[i].kind == PS_RECV_BWD) r = i;
    }
    PpSched keep = st0->sched[f];
    st0->sched[f] = st0->sched[r]; st0->sched[r] = keep;
    rc = pp_check_schedule(pl, 1, 2, NULL, err, sizeof err);
    snprintf(name, sizeof name, "%s pp=%d m=%d: waiting for a gradient before the first forward is a deadlock", model, pp, m);
    CHECK(rc && strstr(err, "deadlock"), name, "rc %d: %s", rc, err);
    st0->sched[r] = st0->sched[f]; st0->sched[f] = keep;
    st0->nsched--;   /* the last step of stage 0 is its last backward; drop its receive instead */
    for (int i = st0->nsched; i >= 0; i--)
        if (st0->sched[i].kind == PS_RECV_BWD) { memmove(&st0->sched[i], &st0->sched[i + 1], sizeof *st0->sched * (size_t)(st0->nsched - i)); break; }
    st0->nsched++;
    st0->sched[st0->nsched - 1].kind = PS_BACKWARD;
    rc = pp_check_schedule(pl, 1, 2, NULL, err, sizeof err);
    snprintf(name, sizeof name, "%s pp=%d m=%d: a send nobody receives is found", model, pp, m);
    CHECK(rc && strstr(err, "no stage receives"), name, "rc %d: %s", rc, err);
    pp_free(pl);
    graph_free(g);
}

int main(void) {
    schedule_case(2, 4, "tiny-cola-4l", 1);
    schedule_case(2, 7, "tiny-cola-4l", 1);
    schedule_case(4, 4, "tiny-cola-4l", 1);
    schedule_case(4, 9, "tiny-cola-4l", 1);
    schedule_case(2, 2, "tiny-llama", 1);
    schedule_case(2, 4, "tiny-cola-4l", 2);   /* interleaved */
    schedule_case(2, 8, "tiny-cola-4l", 2);
    /* an explicit split is kept; the balanced one of 4 equal layers is 2+2 */
    const char *defs[] = {"pp=2", "grad_accum=4", "tp=1", "micro_batch=1", "seq=16"};
    Graph *g = NULL;
    PpPlan *pl = build("tiny-cola-pp2", defs, 5, &g);
    CHECK(pl && pl->stages[0].layer1 == 2 && pl->stages[1].layer0 == 2, "balanced split of 4 equal layers over 2 stages is 2+2",
          "stage 0 ends at %d", pl ? pl->stages[0].layer1 : -1);
    /* the boundary: btp sends the [b*s, d/tp] shard */
    CHECK(pl && pl->stages[0].boundary_bytes == 16 * 128 * 2, "btp tp=1 boundary: b*s*d bf16 bytes", "%lld",
          pl ? (long long)pl->stages[0].boundary_bytes : -1LL);
    if (pl) { pp_free(pl); graph_free(g); }
    TEST_EXIT();
}
