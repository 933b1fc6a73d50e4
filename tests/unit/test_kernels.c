/* test_kernels.c: the kernel specialiser and emitter without a GPU: every catalog kind at the tiny
 * model's and a 7B model's shapes (head dims 32, 64, 128) is specialised, emitted into a kernels.cu
 * and compiled with NVRTC for sm_80 and sm_90: no errors, no spills, every kernel present
 * (registers are printed). Also the emitter's contract: deterministic names, one definition per
 * name, per-rank constants as arguments, clear errors for bad kernels and missing templates. */
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "gen/kernels.h"
#include "common/nvrtc.h"

#define MAXK 128
static KernelInst ks[MAXK];
static int nks;

/* add(kind, "key=value ..."): a value "a%rb" is per rank (a + rank*b). */
static KernelInst *add(const char *kind, const char *kv) {
    KernelInst *k = &ks[nks++];
    memset(k, 0, sizeof *k);
    snprintf(k->kind, sizeof k->kind, "%s", kind);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", kv);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        *eq = 0;
        snprintf(k->key[k->nconst], sizeof k->key[0], "%s", tok);
        char *pr = strstr(eq + 1, "%r");
        k->val[k->nconst] = atof(eq + 1);
        if (pr) k->per_rank[k->nconst] = atof(pr + 2);
        k->nconst++;
    }
    return k;
}

/* Every kind at one model's local shapes (M rows, d/t hidden shard, r rank, ...). */
static void add_model(int M, int b, int s, int dloc, int d, int r, int ffloc, int vloc, int heads,
                      int kvh, int hd, int tp) {
    char kv[512];
    int qkv = (heads + 2 * kvh) * hd;
    snprintf(kv, sizeof kv, "rows=%d cols=%d vocab=256", M, dloc); add("embedding_fwd", kv); add("embedding_bwd", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldx=%d ldo=%d divisor=%d eps=1e-05", M, dloc, dloc, dloc, d); add("rmsnorm_fwd", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldx=%d ldo=%d divisor=%d acc=1 phase=1", M, dloc, dloc, dloc, d); add("rmsnorm_bwd", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldx=%d ldo=%d divisor=%d acc=0 phase=2", M, dloc, dloc, dloc, d); add("rmsnorm_bwd", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldx=%d", M, dloc, dloc); add("sumsq", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldx=%d ldstat=1 divisor=%d eps=1e-05", M, dloc, dloc, d); add("online_norm_fwd", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldh=%d", M, 3 * r, 3 * r); add("online_norm_rescale", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldh=%d ldy=%d ldz=%d act=1 norm=1 eps=1e-05", M, 3 * r, 3 * r, 3 * r, 3 * r); add("bottleneck_act", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldh=%d ldy=%d ldz=%d act=0 norm=0 eps=0", M, r, r, r, r); add("bottleneck_act", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldh=%d ldy=%d ldz=%d lddh=%d act=1 norm=1 divisor=%d", M, 3 * r, 3 * r, 3 * r, 3 * r, 3 * r, d); add("bottleneck_act_bwd", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldh=%d ldy=%d ldz=%d lddh=%d act=1 norm=0 acc=1", M, r, r, r, r, r); add("bottleneck_act_bwd", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldx=%d acc=1", M, dloc, dloc); add("online_norm_bwd", kv);
    snprintf(kv, sizeof kv, "rows=%d heads=%d head_dim=%d ldx=%d seq=%d theta=10000 inverse=0", M, heads + kvh, hd, qkv, s); add("rope", kv);
    snprintf(kv, sizeof kv, "rows=%d heads=%d head_dim=%d ldx=%d seq=%d theta=10000 inverse=1", M, heads + kvh, hd, qkv, s); add("rope", kv);
    snprintf(kv, sizeof kv, "batch=%d seq=%d heads=%d kv_heads=%d head_dim=%d ldq=%d ldk=%d ldv=%d ldo=%d scale=%.9g",
             b, s, heads, kvh, hd, qkv, qkv, qkv, heads * hd, 1.0 / __builtin_sqrt(hd));
    add("attention_fwd", kv); add("attention_bwd", kv);
    /* inference (gen/infer_plan.c): one decode row against a cache of s positions */
    snprintf(kv, sizeof kv, "rows=1 heads=%d head_dim=%d ldx=%d theta=10000", heads + kvh, hd, qkv); add("rope_at", kv);
    snprintf(kv, sizeof kv, "rows=1 kv_heads=%d head_dim=%d max_seq=%d ldk=%d ldv=%d", kvh, hd, s, qkv, qkv); add("kv_append", kv);
    snprintf(kv, sizeof kv, "rows=1 heads=%d kv_heads=%d head_dim=%d max_seq=%d ldq=%d ldo=%d scale=%.9g", heads, kvh, hd, s, qkv,
             heads * hd, 1.0 / __builtin_sqrt(hd));
    add("attention_decode", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldg=%d ldu=%d ldo=%d act=1", M, ffloc, 2 * ffloc, 2 * ffloc, ffloc); add("glu_fwd", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldg=%d ldu=%d ldo=%d lddg=%d lddu=%d act=0", M, ffloc, 2 * ffloc, 2 * ffloc, ffloc, 2 * ffloc, 2 * ffloc); add("glu_bwd", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d lda=%d ldb=%d ldo=%d", M, dloc, dloc, dloc, dloc); add("add", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d lds=%d ldd=%d acc=1", M, dloc, d, dloc); add("copy", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldl=%d vocab_offset=0%%r%d", M, vloc, vloc, vloc); add("xent_fwd", kv);
    snprintf(kv, sizeof kv, "rows=%d tp=%d", M, tp); add("xent_combine", kv);
    snprintf(kv, sizeof kv, "rows=%d cols=%d ldl=%d vocab_offset=0%%r%d scale=%.9g", M, vloc, vloc, vloc, 1.0 / M); add("xent_bwd", kv);
}

static int compile_all(const char *label, const Run *run) {
    char err[4096];
    for (int i = 0; i < nks; i++)
        if (kernel_specialise(&ks[i], run, err, sizeof err) != 0) {
            CHECK(0, "specialise", "%s: %s", ks[i].kind, err);
            return -1;
        }
    char *src = NULL; size_t len = 0;
    FILE *f = open_memstream(&src, &len);
    int rc = kernels_emit(f, ks, nks, run, err, sizeof err);
    fclose(f);
    char name[128];
    snprintf(name, sizeof name, "emit %s", label);
    CHECK(rc == 0, name, "%s", err);
    if (rc) { free(src); return -1; }
    char path[256];   /* kept for reading: build/test-logs/kernels-LABEL.cu */
    snprintf(path, sizeof path, "build/test-logs/kernels-%s.cu", label);
    for (char *c = path + 16; *c; c++) if (*c == ' ' || *c == '+') *c = '_';
    FILE *keep = fopen(path, "w");
    if (keep) { fwrite(src, 1, len, keep); fclose(keep); }
    const char *archs[] = {"sm_80", "sm_90"};
    for (int a = 0; a < 2; a++) {
        static KernelStat st[256];
        static char log[1 << 16];
        int n = nvrtc_compile(src, archs[a], NULL, NULL, st, 256, log, sizeof log);
        snprintf(name, sizeof name, "nvrtc %s %s compiles", label, archs[a]);
        CHECK(n > 0, name, "%s", log);
        if (n <= 0) continue;
        int spills = 0, missing = 0;
        for (int i = 0; i < n; i++) {
            printf("#   %-90s %s regs=%3d smem=%5d spill=%d/%d\n", st[i].name, archs[a], st[i].registers,
                   st[i].smem_bytes, st[i].spill_stores, st[i].spill_loads);
            if (st[i].spill_stores || st[i].spill_loads) spills++;
        }
        for (int i = 0; i < nks; i++) {
            int found = 0;
            for (int j = 0; j < n; j++) found |= !strcmp(st[j].name, ks[i].name);
            if (!found) { missing++; printf("#   missing: %s\n", ks[i].name); }
        }
        snprintf(name, sizeof name, "nvrtc %s %s no spills", label, archs[a]);
        CHECK(spills == 0, name, "%d kernels spill (see the lines above)", spills);
        snprintf(name, sizeof name, "nvrtc %s %s every kernel present", label, archs[a]);
        CHECK(missing == 0, name, "%d kernels not in the ptxas report", missing);
    }
    free(src);
    return 0;
}

int main(void) {
    char err[4096];
    if (!nvrtc_available(err, sizeof err)) {
        CHECK(0, "nvrtc available", "%s", err);
        TEST_EXIT();
    }
    Run run;
    memset(&run, 0, sizeof run);
    snprintf(run.name, sizeof run.name, "test");
    snprintf(run.model.name, sizeof run.model.name, "test");
    snprintf(run.gpu.name, sizeof run.gpu.name, "h100");
    snprintf(run.gpu.arch, sizeof run.gpu.arch, "sm_90");

    /* catalog coverage: every kind named in the catalog appears among the test kernels */
    nks = 0;
    add_model(256, 4, 64, 64, 128, 32, 176, 128, 2, 2, 32, 2);        /* tiny-cola at tp=2 */
    int covered = 0, moe_kinds = 0;
    for (int i = 0; i < kernel_kind_count(); i++) {
        if (!strncmp(kernel_kind_name(i), "moe_", 4)) { moe_kinds++; continue; }   /* compiled and emulated by test_moe */
        int found = 0;
        for (int j = 0; j < nks; j++) found |= !strcmp(ks[j].kind, kernel_kind_name(i));
        covered += found;
    }
    CHECK(covered == 23 && kernel_kind_count() == 23 + moe_kinds && moe_kinds == 8, "catalog: 23 kinds, all covered (and 8 moe_* kinds, test_moe)",
          "%d of %d, %d moe", covered, kernel_kind_count(), moe_kinds);
    compile_all("tiny hd32", &run);

    /* emitter contract on the tiny set */
    KernelInst a = ks[0], b = ks[0];
    kernel_specialise(&a, &run, err, sizeof err);
    kernel_specialise(&b, &run, err, sizeof err);
    CHECK(!strcmp(a.name, b.name) && strstr(a.name, "embedding_fwd_r256_c64") == a.name, "name deterministic and procedural", "%s", a.name);
    {
        KernelInst two[3] = {ks[0], ks[0], ks[1]};
        char *src = NULL; size_t len = 0;
        FILE *f = open_memstream(&src, &len);
        kernels_emit(f, two, 3, &run, err, sizeof err);
        fclose(f);
        int defs = 0;
        for (char *p = src; (p = strstr(p, ks[0].name)); p++) defs++;
        char *first0 = strstr(src, ks[0].name), *first1 = strstr(src, ks[1].name);
        CHECK(defs == 1 && first0 && first1 && first0 < first1 && strstr(src, "#include <cuda_bf16.h>") &&
              !strstr(src, "{{"), "one definition per name, first-use order, no holes left", "defs=%d", defs);
        free(src);
    }
    {
        KernelInst *x = NULL;
        for (int i = 0; i < nks; i++) if (!strcmp(ks[i].kind, "xent_fwd")) x = &ks[i];
        char *src = NULL; size_t len = 0;
        FILE *f = open_memstream(&src, &len);
        kernels_emit(f, x, 1, &run, err, sizeof err);
        fclose(f);
        CHECK(strstr(src, "long long vocab_offset_arg)") != NULL && strstr(x->name, "_voR") != NULL,
              "per-rank constant becomes a long long argument", "%s", x->name);
        free(src);
    }
    {
        KernelInst bad;
        memset(&bad, 0, sizeof bad);
        snprintf(bad.kind, sizeof bad.kind, "softmax");
        int rc = kernel_specialise(&bad, &run, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "not in the catalog"), "unknown kind rejected", "rc=%d err=%s", rc, err);
        nks = 0;
        KernelInst *m = add("rmsnorm_fwd", "rows=4 divisor=8 eps=1e-5");
        rc = kernel_specialise(m, &run, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "'cols' missing"), "missing constant rejected", "rc=%d err=%s", rc, err);
        m = add("add", "rows=4 cols=8 alpha=2");
        rc = kernel_specialise(m, &run, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "'alpha'"), "unknown constant rejected", "rc=%d err=%s", rc, err);
        m = add("attention_fwd", "batch=1 seq=8 heads=3 kv_heads=2 head_dim=32 ldq=96 ldk=64 ldv=64 ldo=96 scale=0.1");
        rc = kernel_specialise(m, &run, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "kv_heads"), "bad GQA grouping rejected", "rc=%d err=%s", rc, err);
        m = add("add", "rows=4 cols=8");
        kernel_specialise(m, &run, err, sizeof err);
        setenv("BOOST_HOME", "/nonexistent-boost-home", 1);
        FILE *f = fopen("/dev/null", "w");
        rc = kernels_emit(f, m, 1, &run, err, sizeof err);
        fclose(f);
        unsetenv("BOOST_HOME");
        CHECK(rc != 0 && strstr(err, "BOOST_HOME"), "missing templates: clear error", "rc=%d err=%s", rc, err);
        KernelInst v8 = *m, v1 = *m;
        kernel_specialise(&v8, &run, err, sizeof err);
        nks = 0;
        KernelInst *o = add("add", "rows=4 cols=12");
        kernel_specialise(o, &run, err, sizeof err);
        v1 = *o;
        CHECK(v8.vec == 8 && v1.vec == 1 && v8.grid == 1, "vector width 8 only when cols and ld are multiples of 8",
              "vec %d/%d grid %lld", v8.vec, v1.vec, (long long)v8.grid);
    }

    /* 7B-class shapes: hidden 4096, 32 heads of 128 (GQA 8 kv heads), rank 1024, tp=4, seq 4096 */
    nks = 0;
    add_model(16384, 4, 4096, 1024, 4096, 1024 / 4 * 4, 11008 / 4, 32000 / 4, 8, 2, 128, 4);
    /* head_dim 64 (e.g. a 1B model at tp=2) */
    add_model(8192, 4, 2048, 1024, 2048, 512, 2816, 16000, 16, 16, 64, 2);
    compile_all("7B hd128 + hd64", &run);
    TEST_EXIT();
}
