/* test_moe_log.c: the MoE figures of the training log (runtime/moe_stats.c): expert load, the
 * fraction dropped by the capacity and the load-balance loss, against counts made here from the
 * router's own outputs (its choices, slots and probabilities) after a forward+backward; and the
 * fields of a `boost train --log` line (loads sum to the step's choices over micro-batches and dp). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "tests/unit/testlib.h"
#include "runtime/runtime.h"
#include "runtime/moe_stats.h"

#define CASE_DIR "build/tmp/moe_log"
#include "tests/unit/moe_cases.h"
__attribute__((unused)) static void (*const unused_cases[])(void) = {(void (*)(void))compare_steps, (void (*)(void))again};

/* Numbers of a JSON array field "key":[a,b,...] (flattening nested arrays) into v; count or -1. */
static int json_array(const char *line, const char *key, double *v, int max) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":[", key);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    p += strlen(pat);
    int n = 0, depth = 1;
    while (*p && depth > 0) {
        if (*p == '[') { depth++; p++; continue; }
        if (*p == ']') { depth--; p++; continue; }
        if (*p == ',' || *p == ' ') { p++; continue; }
        char *end;
        double x = strtod(p, &end);
        if (end == p) return -1;
        if (n < max) v[n] = x;
        n++;
        p = end;
    }
    return n;
}

/* The stats of one forward+backward against the router's sel/slot/probs of the same pass. */
static void stats_vs_router(const char *spec, const char *defs, double zcoef) {
    Case c;
    if (open_case(&c, spec, defs)) return;
    MoeStats s;
    char name[300], err[300];
    if (moe_stats_init(&s, c.p, 1, c.p->tp) || s.n != 2 || s.E != 4 || s.K != 2) {
        CHECK(0, "moe_stats_init finds the MoE layers", "n %d E %d K %d", s.n, s.E, s.K);
        close_case(&c);
        return;
    }
    float loss;
    if (engine_forward_backward(c.e, case_tokens, case_targets, &loss, err, sizeof err)) { CHECK(0, "forward_backward", "%s", err); return; }
    moe_stats_add(&s, c.e);
    static char js[1 << 14];
    moe_stats_json(&s, js, sizeof js);
    int64_t M = c.p->micro_batch * c.p->seq, E = 4, K = 2;
    double load[8], drop[2], aux[2], z[2];
    int nl = json_array(js, "moe_load", load, 8), nd = json_array(js, "moe_dropped", drop, 2);
    int na = json_array(js, "moe_aux_loss", aux, 2), nz = json_array(js, "moe_z_loss", z, 2);
    double worst_load = 0, worst_drop = 0, worst_aux = 0, worst_z = 0;
    for (int l = 0; l < 2; l++) {
        char nm[64];
        float *sel = malloc((size_t)(M * K) * sizeof *sel), *slot = malloc((size_t)(M * K) * sizeof *slot);
        float *probs = malloc((size_t)(M * E) * sizeof *probs), *logits = malloc((size_t)(M * E) * sizeof *logits);
        snprintf(nm, sizeof nm, "L%d.moe_sel", l); engine_read_tensor(c.e, 0, nm, sel, err, sizeof err);
        snprintf(nm, sizeof nm, "L%d.moe_slot", l); engine_read_tensor(c.e, 0, nm, slot, err, sizeof err);
        snprintf(nm, sizeof nm, "L%d.router_probs", l); engine_read_tensor(c.e, 0, nm, probs, err, sizeof err);
        double cnt[4] = {0}, P[4] = {0}, dropped = 0, zsum = 0;
        for (int64_t m = 0; m < M * K; m++) { cnt[(int)sel[m]]++; dropped += slot[m] < 0; }
        for (int64_t m = 0; m < M; m++) {
            double mx = -1e300;
            for (int e = 0; e < E; e++) { P[e] += probs[m * E + e] / M; mx = fmax(mx, probs[m * E + e]); }
            (void)mx;
        }
        double a = 0;
        for (int e = 0; e < E; e++) {
            a += 0.01 * E * (cnt[e] / (M * K)) * P[e];
            if (nl == 8) worst_load = fmax(worst_load, fabs(load[l * 4 + e] - cnt[e]));
        }
        if (nd == 2) worst_drop = fmax(worst_drop, fabs(drop[l] - dropped / (M * K)));
        if (na == 2) worst_aux = fmax(worst_aux, fabs(aux[l] - a) / a);
        (void)zsum; (void)zcoef;
        if (nz == 2) worst_z = fmax(worst_z, fabs(z[l]));
        free(sel); free(slot); free(probs); free(logits);
    }
    snprintf(name, sizeof name, "%s %s: moe_load = tokens routed per expert, counted from the router's choices", spec, defs);
    CHECK(nl == 8 && worst_load == 0, name, "n %d, worst |diff| %g: %.200s", nl, worst_load, js);
    snprintf(name, sizeof name, "%s %s: moe_dropped = the fraction of choices without a slot", spec, defs);
    CHECK(nd == 2 && worst_drop <= 1e-6 && drop[0] > 0, name, "n %d, worst |diff| %g, L0 %g", nd, worst_drop, nd == 2 ? drop[0] : -1);
    snprintf(name, sizeof name, "%s %s: moe_aux_loss = 0.01*E*sum f_e P_e from the router's choices and probabilities", spec, defs);
    CHECK(na == 2 && worst_aux <= 1e-5, name, "n %d, worst rel %g", na, worst_aux);
    snprintf(name, sizeof name, "%s %s: moe_z_loss is 0 without z_loss", spec, defs);
    CHECK(nz == 2 && worst_z == 0, name, "n %d, worst %g", nz, worst_z);
    moe_stats_free(&s);
    close_case(&c);
}

/* boost train --log: every step line carries the MoE fields; the loads of a step sum to
 * micro_batch*seq*top_k*grad_accum*dp (all the step's choices). */
static void train_log(const char *defs, int64_t want_sum) {
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";
    char cmd[600], name[300];
    static char out[1 << 16];
    remove(CASE_DIR "/train.jsonl");
    snprintf(cmd, sizeof cmd, "%s train tiny-cola-moe --backend cpu -D steps=4 -D eval_every=0 %s --log " CASE_DIR "/train.jsonl --quiet 2>&1", boost, defs);
    int rc = tl_run_cmd(cmd, out, sizeof out);
    FILE *f = fopen(CASE_DIR "/train.jsonl", "r");
    char line[1 << 14];
    int steps = 0, good = 0;
    double first_drop = -1;
    while (f && fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"loss\"")) continue;
        steps++;
        double load[8], drop[2], aux[2];
        int nl = json_array(line, "moe_load", load, 8), nd = json_array(line, "moe_dropped", drop, 2), na = json_array(line, "moe_aux_loss", aux, 2);
        double s0 = 0, s1 = 0;
        for (int e = 0; e < 4 && nl == 8; e++) { s0 += load[e]; s1 += load[4 + e]; }
        if (first_drop < 0 && nd == 2) first_drop = drop[0];
        good += nl == 8 && nd == 2 && na == 2 && s0 == (double)want_sum && s1 == (double)want_sum && drop[0] >= 0 && drop[0] < 1 &&
                aux[0] > 0.005 && aux[0] < 0.05;
    }
    if (f) fclose(f);
    snprintf(name, sizeof name, "train tiny-cola-moe %s --log: each step logs moe_load (summing to %lld), moe_dropped and moe_aux_loss",
             defs, (long long)want_sum);
    CHECK(rc == 0 && steps == 4 && good == 4, name, "rc %d, %d steps, %d good: %.300s", rc, steps, good, out);
}

/* moe{z_loss = 0.001}: the engine's loss = a float64 forward's cross-entropy + load-balance + z-loss
 * (zcoef * mean over tokens of logsumexp(logits)^2), the log's moe_z_loss equals the float64 term,
 * finite differences of the model with it, and tp=2 = tp=1. */
static void z_loss_model(void) {
    const char *path = CASE_DIR "/zloss.lua";
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("-- a test run of test_moe_log.c: tiny-cola-moe with a router z-loss\n"
          "return run {\n"
          "  model = model \"zloss-moe\" {\n"
          "    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },\n"
          "    moe = moe { experts = 4, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01, expert_ffn = 192, z_loss = 0.001 },\n"
          "  },\n"
          "  gpu = \"h100\",\n"
          "  parallel = { tp = 1, layout = \"btp\" },\n"
          "  features = { online_rmsnorm = true, group_linears = true, checkpoint = \"lowrank\" },\n"
          "  train = { micro_batch = 4, seq = 64 },\n"
          "}\n", f);
    fclose(f);
    Case ref, c;
    case_zcoef = 0.001;
    if (open_case(&ref, path, "-D tp=1 -D checkpoint=none") == 0) {
        MoeStats s;
        moe_stats_init(&s, ref.p, 1, 1);
        independent_forward(&ref, 0, "z_loss=0.001 tp=1");
        moe_stats_add(&s, ref.e);   /* the forward above left the routing of that pass */
        static char js[1 << 14];
        moe_stats_json(&s, js, sizeof js);
        double z[2] = {-1, -1};
        int nz = json_array(js, "moe_z_loss", z, 2);
        double e0 = fabs(z[0] - case_zloss[0]) / case_zloss[0], e1 = fabs(z[1] - case_zloss[1]) / case_zloss[1];
        printf("# z-loss L0 %.6g (float64 %.6g), L1 %.6g (float64 %.6g)\n", z[0], case_zloss[0], z[1], case_zloss[1]);
        CHECK(nz == 2 && case_zloss[0] > 0 && e0 <= 1e-5 && e1 <= 1e-5, "z_loss=0.001: moe_z_loss of the log = zcoef * mean lse^2 from a float64 forward",
              "n %d, rel err %.3g %.3g", nz, e0, e1);
        moe_stats_free(&s);
        if (!open_case(&c, path, "-D tp=2")) compare(&c, &ref, "z_loss=0.001 btp tp=2 vs tp=1");
        close_case(&c);
    }
    close_case(&ref);
    static const char *names[] = {"L0.router.W", "L1.router.W", "L0.e1.gate.A", "L1.mlp_norm"};
    if (open_case(&ref, path, "-D tp=1 -D micro_batch=1 -D seq=32") == 0) finite_differences(&ref, "z_loss=0.001 tp=1, 32 tokens", names, 4);
    close_case(&ref);
    case_zcoef = 0;
}

/* The log's moe_aux_loss and moe_z_loss are the mean over the step's micro-batches of every dp rank
 * (each rank adds its own load-balance loss to its loss; dp averages the gradients), not their sum
 * over the ranks: two dp ranks x two micro-batches of rows [aux+z, f_e (2), P_e (2), z] built here. */
static void dp_mean_of_losses(void) {
    MoeStats s;
    memset(&s, 0, sizeof s);
    int layer = 0;
    double load[2] = {0}, dropped = 0, aux = 0, z = 0, choices = 0;
    float buf[8];
    s.n = 1; s.layer = &layer; s.E = 2; s.K = 1; s.M = 4; s.C = 4; s.auxn = 6; s.ranks = 2; s.tp = 1;
    s.load = load; s.dropped = &dropped; s.aux = &aux; s.z = &z; s.choices = &choices; s.buf = buf;
    const float rows[2][2][6] = {   /* [micro-batch][dp rank]: loss (= balance + z), f_e, P_e, z */
        {{0.30f + 0.01f, 0.5f, 0.5f, 0.5f, 0.5f, 0.01f}, {0.50f + 0.03f, 0.75f, 0.25f, 0.6f, 0.4f, 0.03f}},
        {{0.20f + 0.02f, 0.25f, 0.75f, 0.4f, 0.6f, 0.02f}, {0.40f + 0.04f, 0.5f, 0.5f, 0.5f, 0.5f, 0.04f}}};
    double want_aux = 0, want_z = 0;
    for (int m = 0; m < 2; m++)
        for (int d = 0; d < 2; d++) { want_aux += (rows[m][d][0] - rows[m][d][5]) / 4.0; want_z += rows[m][d][5] / 4.0; }
    for (int m = 0; m < 2; m++) {
        const float *r[2] = {rows[m][0], rows[m][1]};
        moe_stats_add_rows(&s, r);
    }
    char js[1024];
    double a = -1, zz = -1;
    moe_stats_json(&s, js, sizeof js);
    int na = json_array(js, "moe_aux_loss", &a, 1), nz = json_array(js, "moe_z_loss", &zz, 1);
    CHECK(na == 1 && nz == 1 && fabs(a - want_aux) <= 1e-6 && fabs(zz - want_z) <= 1e-6,
          "dp=2: moe_aux_loss and moe_z_loss are the mean over ranks and micro-batches",
          "aux %g (want %g), z %g (want %g): %s", a, want_aux, zz, want_z, js);
}

int main(void) {
    mkdir("build", 0755); mkdir("build/tmp", 0755); mkdir(CASE_DIR, 0755);
    dp_mean_of_losses();
    z_loss_model();
    stats_vs_router("specs/runs/tiny-cola-moe.lua", "-D tp=1", 0);
    stats_vs_router("specs/runs/tiny-cola-moe.lua", "-D tp=2", 0);
    train_log("", 4 * 64 * 2);
    train_log("-D grad_accum=2", 2 * 4 * 64 * 2);
    train_log("-D dp=2", 2 * 4 * 64 * 2);
    TEST_EXIT();
}
