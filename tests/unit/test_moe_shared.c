/* test_moe_shared.c: MoE experts that share their token-side factors (moe{shared = {...}}, docs/moe.md):
 * the spec's refusals at their line, the model against an independent float64 forward and finite
 * differences, tp=1 vs 2 vs 4 (btp) for every subset, the report's collectives and dispatch bytes
 * against the closed forms, and a short training run on the corpus, on the CPU backend. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "tests/unit/testlib.h"
#include "runtime/runtime.h"

#define CASE_DIR "build/tmp/moe_shared"
#include "tests/unit/moe_cases.h"

#define DIR CASE_DIR
static const char *spec_path = "specs/runs/tiny-cola-moe-shared.lua";

static const char *boost_bin(void) { return getenv("BOOST") ? getenv("BOOST") : "./bin/boost"; }

/* A run spec at DIR/NAME.lua: tiny-cola-moe's shapes, `family` factors, the moe line `moe`
 * (line 5 of the file), tp=1 btp. */
static void write_spec(const char *name, const char *family, const char *moe) {
    char path[300];
    snprintf(path, sizeof path, DIR "/%s.lua", name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "-- a test run of test_moe_shared.c\n"
               "return run {\n"
               "  model = model \"%s\" {\n"
               "    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = %s,\n"
               "    moe = moe { %s },\n"
               "  },\n"
               "  gpu = \"h100\",\n"
               "  parallel = { tp = 1, layout = \"btp\" },\n"
               "  features = { online_rmsnorm = true, group_linears = true, checkpoint = \"lowrank\" },\n"
               "  train = { micro_batch = 4, seq = 64, lr = 3e-3 },\n"
               "}\n", name, family, moe);
    fclose(f);
}

static void refused(const char *name, const char *family, const char *moe, const char *want, const char *what) {
    static char out[1 << 14];
    char cmd[600];
    write_spec(name, family, moe);
    snprintf(cmd, sizeof cmd, "%s gen " DIR "/%s.lua -o " DIR "/out-%s 2>&1", boost_bin(), name, name);
    int rc = tl_run_cmd(cmd, out, sizeof out);
    char at[320];
    snprintf(at, sizeof at, DIR "/%s.lua:5:", name);
    CHECK(rc == 2 && strstr(out, at) && strstr(out, want), what, "rc %d (want 2, at %s, saying '%s'): %.400s", rc, at, want, out);
}

static void test_refusals(void) {
    const char *base = "experts = 4, top_k = 2, expert_ffn = 192, ";
    char moe[300];
    snprintf(moe, sizeof moe, "%sshared = {\"gate.A\", \"gate.C\"}", base);
    refused("bad-name", "cola { rank = 32 }", moe, "gate.C", "spec: a shared factor that no expert has is refused at its line");
    snprintf(moe, sizeof moe, "%sshared = {\"down.A\"}", base);
    refused("inner", "cola { rank = 32 }", moe, "cannot be shared", "spec: sharing an inner factor (down.A) is refused at its line");
    snprintf(moe, sizeof moe, "%sshared = {\"up.A\"}", base);
    refused("fullrank", "full {}", moe, "full-rank", "spec: shared factors on full-rank experts are refused at the line");
    snprintf(moe, sizeof moe, "%sshared = {\"up.A\", \"up.A\"}", base);
    refused("twice", "cola { rank = 32 }", moe, "twice", "spec: a factor listed twice is refused");
    snprintf(moe, sizeof moe, "%sshared = \"gate.A\"", base);
    refused("notlist", "cola { rank = 32 }", moe, "list", "spec: shared that is not a list is refused");
    refused("topk", "cola { rank = 32 }", "experts = 4, top_k = 5, shared = {\"gate.A\"}", "top_k (5) must not exceed experts (4)",
            "spec: top_k > experts is refused at its line");
    refused("cap0", "cola { rank = 32 }", "experts = 4, capacity_factor = 0, shared = {\"gate.A\"}", "capacity_factor",
            "spec: capacity factor 0 is refused at its line");
    refused("capneg", "cola { rank = 32 }", "experts = 4, capacity_factor = -1, shared = {\"gate.A\"}", "capacity_factor",
            "spec: a negative capacity factor is refused at its line");
}

static int64_t json_after(const char *s, const char *key1, const char *key2) {
    const char *p = s ? strstr(s, key1) : NULL;
    if (p) p = strstr(p, key2);
    return p ? strtoll(p + strlen(key2), NULL, 10) : -1;
}

/* The report at tp=2: the MoE layer's tp collectives (counted from the emitted steps) and the
 * dispatch table's figures against the closed forms of docs/moe.md. M = 256, E = 4, k = 2,
 * C = ceil(1.25*256*2/4) = 160, r = 32 (gate, up, down), d = 128, bf16 (2 B). */
static void test_report(void) {
    static char out[1 << 16];
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s report %s --json 2>&1", boost_bin(), spec_path);
    int rc = tl_run_cmd(cmd, out, sizeof out);
    int64_t M = 256, E = 4, C = 160, r = 32, d = 128, S = E * C;
    int64_t fwd = json_after(strstr(out, "\"moe\""), "\"forward\"", "\"allreduce_elems\": ");
    int64_t bwd = json_after(strstr(out, "\"moe\""), "\"backward\"", "\"allreduce_elems\": ");
    /* forward: norm M, logits M*E, the shared gate/up latents M*2r, the experts' down A E*C*r;
       backward: the latents' duals M*2r and M*r (rank-space combine), the norm's dot M; the gates'
       gradient is whole on every rank (no all-reduce) */
    CHECK(rc == 0 && fwd == M + M * E + M * 2 * r + S * r, "report, shared gate/up A + down B, tp=2: MoE forward collectives = M + M*E + M*(r_g+r_u) + E*C*r_d",
          "rc %d, got %lld want %lld: %.200s", rc, (long long)fwd, (long long)(M + M * E + M * 2 * r + S * r), out);
    CHECK(bwd == M * 2 * r + M * r + M, "report, shared gate/up A + down B, tp=2: MoE backward collectives = M*(r_g+r_u) + M*r_d + M",
          "got %lld want %lld", (long long)bwd, (long long)(M * 3 * r + M));
    /* dispatch table (per layer, micro-batch and rank, both ways): tp-experts = the MoE block's tp
       collective bytes from the steps; ep (the all-to-all steps of the run built with ep) full tokens =
       E*C*(d/tp + d/tp) * 2 B (each tp rank sends its shard); shared = E*C*(2r + r) * 2 B (the
       latents are whole on every tp rank) */
    const char *dp = strstr(out, "\"dispatch\"");
    int64_t tpx = json_after(dp, "\"tp_experts\"", "\"bytes\": ");
    int64_t epf = json_after(dp, "\"ep_full\"", "\"bytes\": ");
    int64_t eps = json_after(dp, "\"ep_shared\"", "\"bytes\": ");
    int64_t want_epf = 2 * S * 2 * (d / 2) * 2, want_eps = 2 * S * 3 * r * 2;
    CHECK(dp && epf == want_epf && eps == want_eps, "report: ep dispatch bytes per layer and rank from the all-to-all steps, fwd+bwd = 2*E*C*2(d/tp)*2 B (full tokens) and 2*E*C*(r_g+r_u+r_d)*2 B (shared factors)",
          "ep_full %lld want %lld, ep_shared %lld want %lld", (long long)epf, (long long)want_epf, (long long)eps, (long long)want_eps);
    int64_t sumb = json_after(strstr(out, "\"moe\""), "\"forward\"", "\"allreduce_bytes\": ") + json_after(strstr(out, "\"moe\""), "\"backward\"", "\"allreduce_bytes\": ");
    CHECK(tpx > 0 && tpx == sumb, "report: tp-experts dispatch bytes = the MoE block's tp collective bytes counted from the steps",
          "tp_experts %lld, steps %lld", (long long)tpx, (long long)sumb);
    /* parameters of one MoE layer's experts: shared 2*d*r + r*d, per expert gate/up B 2*r*ff, down A ff*r */
    int64_t ff = 192, want_sh = 3 * d * r + E * (2 * r * ff + ff * r), want_full = E * 3 * (d * r + r * ff);
    int64_t psh = json_after(dp, "\"params_shared\"", ": "), pfull = json_after(dp, "\"params_unshared\"", ": ");
    CHECK(psh == want_sh && pfull == want_full, "report: expert parameters per layer, shared and unshared, = the closed forms",
          "shared %lld want %lld, unshared %lld want %lld", (long long)psh, (long long)want_sh, (long long)pfull, (long long)want_full);
}

/* 100 steps at tp=2 on the corpus: the validation loss starts near ln 256 + aux and falls by > 1.5 nats. */
static void test_training(void) {
    char cmd[600];
    static char out[1 << 16];
    remove(DIR "/train.jsonl");
    snprintf(cmd, sizeof cmd, "%s train tiny-cola-moe-shared --backend cpu -D steps=100 --log " DIR "/train.jsonl --quiet 2>&1", boost_bin());
    int rc = tl_run_cmd(cmd, out, sizeof out);
    CHECK(rc == 0, "train tiny-cola-moe-shared: 100 steps at tp=2 btp on the cpu backend", "exit %d: %s", rc, out);
    FILE *f = fopen(DIR "/train.jsonl", "r");
    double v0 = -1, v100 = -1;
    char line[1 << 14];
    while (f && fgets(line, sizeof line, f)) {
        const char *v = strstr(line, "\"val_loss\":");
        if (!v) continue;
        if (!strncmp(line, "{\"step\":0,", 10)) v0 = atof(v + 11);
        if (!strncmp(line, "{\"step\":100,", 12)) v100 = atof(v + 11);
    }
    if (f) fclose(f);
    printf("# validation loss: step 0 %.4f, step 100 %.4f\n", v0, v100);
    CHECK(fabs(v0 - (5.545 + 0.02)) <= 0.15 && v100 > 0 && v100 < v0 - 1.5, "train tiny-cola-moe-shared: validation loss starts at ln 256 + aux and falls by > 1.5 nats",
          "step 0 %.4f, step 100 %.4f", v0, v100);
}

/* Each subset of the shared factors: tp=2 and tp=4 equal tp=1 (loss and every canonical gradient). */
static void subsets(void) {
    static const char *sets[] = {"\"gate.A\"", "\"up.A\", \"down.B\"", "\"down.B\"", "\"gate.A\", \"up.A\""};
    static const unsigned masks[] = {1, 6, 4, 3};
    for (int q = 0; q < 4; q++) {
        char name[64], moe[300], path[300], what[300];
        snprintf(name, sizeof name, "subset%d", q);
        snprintf(moe, sizeof moe, "experts = 4, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01, expert_ffn = 192, shared = {%s}", sets[q]);
        write_spec(name, "cola { rank = 32 }", moe);
        snprintf(path, sizeof path, DIR "/%s.lua", name);
        Case ref, c;
        if (open_case(&ref, path, "-D tp=1 -D checkpoint=none") == 0) {
            snprintf(what, sizeof what, "shared {%s} tp=1", sets[q]);
            independent_forward(&ref, masks[q], what);
            snprintf(what, sizeof what, "shared {%s} btp tp=2 vs tp=1", sets[q]);
            if (!open_case(&c, path, "-D tp=2")) compare(&c, &ref, what);
            close_case(&c);
            snprintf(what, sizeof what, "shared {%s} btp tp=4 sync norm vs tp=1", sets[q]);
            if (!open_case(&c, path, "-D tp=4 -D online_rmsnorm=false")) compare(&c, &ref, what);
            close_case(&c);
        }
        close_case(&ref);
    }
}

int main(void) {
    mkdir("build", 0755); mkdir("build/tmp", 0755); mkdir(DIR, 0755);
    test_refusals();
    test_report();
    static const char *fd_names[] = {"L0.shared.gate.A", "L0.shared.up.A", "L1.shared.down.B",
                                     "L0.router.W", "L0.e1.gate.B", "L0.e2.up.B", "L1.e0.down.A",
                                     "L1.mlp_norm", "L0.q.A"};
    whole_model_checks(spec_path, "tiny-cola-moe-shared", fd_names,
                       (int)(sizeof fd_names / sizeof fd_names[0]), 7, NULL, NULL);
    subsets();
    test_training();
    TEST_EXIT();
}
