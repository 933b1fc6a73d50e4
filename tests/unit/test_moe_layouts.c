/* test_moe_layouts.c: MoE blocks under the megatron (full-rank experts) and naive (low-rank experts,
 * Megatron inside each factor) layouts: naive at tp=1, 2, 4 equals btp MoE on the same weights
 * (loss and every canonical gradient within 1e-5), megatron tp=2/4 equals tp=1 and matches finite
 * differences, the collectives of each layout's MoE block against their closed forms, and the
 * cost model (`boost project`) prices all three layouts for an MoE run. CPU backend. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "tests/unit/testlib.h"
#include "runtime/runtime.h"

#define CASE_DIR "build/tmp/moe_layouts"
#include "tests/unit/moe_cases.h"
__attribute__((unused)) static void (*const unused_cases[])(void) = {(void (*)(void))again, (void (*)(void))independent_forward};

static const char *spec = "specs/runs/tiny-cola-moe.lua";

/* Sum of the allreduce elems of plan `dir`/plan.txt whose tag is L0.<tag> in section dir=fwd|bwd. */
static int64_t plan_elems(const char *dir, const char *tag, const char *sect) {
    char path[300], line[4096], want[64], ds[16];
    snprintf(path, sizeof path, "%s/plan.txt", dir);
    snprintf(want, sizeof want, " tag=L0.%s", tag);
    snprintf(ds, sizeof ds, " dir=%s ", sect);
    FILE *f = fopen(path, "r");
    int64_t n = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "allreduce ", 10) || !strstr(line, ds)) continue;
        char *t = strstr(line, want);
        if (!t || (t[strlen(want)] != '\n' && t[strlen(want)] != ' ')) continue;
        char *e = strstr(line, "elems=");
        if (e) n += strtoll(e + 6, NULL, 10);
    }
    if (f) fclose(f);
    return n;
}

static void collectives(void) {
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";
    char cmd[600];
    static char out[1 << 16];
    /* naive tp=2, M = 256, E*C = 640, ffn 192, d 128: forward gate [S, ff] + up [S, ff] + experts'
       output [S, d]; backward the duals of the two tp_copies: dx̂ slots [S, d] and d glu [S, ff] */
    snprintf(cmd, sizeof cmd, "%s gen %s -D layout=naive -o " CASE_DIR "/naive2 2>&1", boost, spec);
    int rc = tl_run_cmd(cmd, out, sizeof out);
    int64_t S = 640, ff = 192, d = 128;
    int64_t f = plan_elems(CASE_DIR "/naive2", "moe_gate", "fwd") + plan_elems(CASE_DIR "/naive2", "moe_up", "fwd") +
                plan_elems(CASE_DIR "/naive2", "moe_down", "fwd");
    int64_t b = plan_elems(CASE_DIR "/naive2", "moe_gu", "bwd") + plan_elems(CASE_DIR "/naive2", "moe_down", "bwd");
    CHECK(rc == 0 && f == S * ff * 2 + S * d && b == S * d + S * ff,
          "naive MoE tp=2: forward all-reduces E*C*(2 ffn + d), backward E*C*(d + ffn) (from the plan's steps)",
          "rc %d, fwd %lld want %lld, bwd %lld want %lld: %.200s", rc, (long long)f, (long long)(S * ff * 2 + S * d), (long long)b,
          (long long)(S * d + S * ff), out);
    snprintf(cmd, sizeof cmd, "%s gen " CASE_DIR "/full.lua -D tp=2 -o " CASE_DIR "/mega2 2>&1", boost);
    rc = tl_run_cmd(cmd, out, sizeof out);
    f = plan_elems(CASE_DIR "/mega2", "moe_down", "fwd");
    b = plan_elems(CASE_DIR "/mega2", "moe_gu", "bwd");
    CHECK(rc == 0 && f == S * d && b == S * d, "megatron MoE tp=2: forward all-reduces the experts' output E*C*d, backward dx̂ E*C*d",
          "rc %d, fwd %lld, bwd %lld want %lld: %.200s", rc, (long long)f, (long long)b, (long long)(S * d), out);
    /* the cost model: all three layouts for the MoE run */
    snprintf(cmd, sizeof cmd, "%s project %s 2>&1", boost, spec);
    rc = tl_run_cmd(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "megatron") && strstr(out, "naive") && strstr(out, "btp") && !strstr(out, "btp only"),
          "boost project prices an MoE run under megatron, naive and btp", "rc %d: %.600s", rc, out);
}

static void write_full(void) {
    FILE *f = fopen(CASE_DIR "/full.lua", "w");
    if (!f) return;
    fputs("-- a test run of test_moe_layouts.c: full-rank experts under megatron\n"
          "return run {\n"
          "  model = model \"full-moe\" {\n"
          "    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = full {}, init_std = 0.1,\n"
          "    moe = moe { experts = 4, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01, expert_ffn = 192 },\n"
          "  },\n"
          "  gpu = \"h100\",\n"
          "  parallel = { tp = 1, layout = \"megatron\" },\n"
          "  features = { checkpoint = \"none\" },\n"
          "  train = { micro_batch = 4, seq = 64 },\n"
          "}\n", f);
    fclose(f);
}

int main(void) {
    mkdir("build", 0755); mkdir("build/tmp", 0755); mkdir(CASE_DIR, 0755);
    write_full();
    Case ref, c;
    if (open_case(&ref, spec, "-D tp=1 -D checkpoint=none") == 0) {
        if (!open_case(&c, spec, "-D layout=naive -D tp=1 -D checkpoint=none")) {
            compare(&c, &ref, "naive MoE tp=1 vs btp tp=1 (same canons)");
        }
        close_case(&c);
        if (!open_case(&c, spec, "-D layout=naive -D tp=2")) compare(&c, &ref, "naive MoE tp=2 vs btp tp=1");
        close_case(&c);
        if (!open_case(&c, spec, "-D layout=naive -D tp=4")) {
            compare(&c, &ref, "naive MoE tp=4 vs btp tp=1");
            compare_steps(&c, &ref, "naive MoE tp=4 vs btp tp=1");
        }
        close_case(&c);
    }
    close_case(&ref);
    if (open_case(&ref, spec, "-D tp=2") == 0) {
        if (!open_case(&c, spec, "-D layout=naive -D tp=2 -D checkpoint=none")) compare(&c, &ref, "naive MoE tp=2 no checkpointing vs btp tp=2");
        close_case(&c);
    }
    close_case(&ref);
    static const char *fd_names[] = {"L0.router.W", "L0.e1.gate.W", "L0.e2.up.W", "L1.e0.down.W", "L1.mlp_norm", "L0.q.W"};
    if (open_case(&ref, CASE_DIR "/full.lua", "-D tp=1 -D micro_batch=1 -D seq=32") == 0)
        finite_differences(&ref, "megatron MoE (full-rank experts) tp=1, 32 tokens", fd_names, 6);
    close_case(&ref);
    if (open_case(&ref, CASE_DIR "/full.lua", "-D tp=1") == 0) {
        if (!open_case(&c, CASE_DIR "/full.lua", "-D tp=2")) compare(&c, &ref, "megatron MoE tp=2 vs tp=1");
        close_case(&c);
        if (!open_case(&c, CASE_DIR "/full.lua", "-D tp=4")) {
            compare(&c, &ref, "megatron MoE tp=4 vs tp=1");
            compare_steps(&c, &ref, "megatron MoE tp=4 vs tp=1");
        }
        close_case(&c);
    }
    close_case(&ref);
    collectives();
    TEST_EXIT();
}
