/* test_attn_tiles.c: the attention tiles gen/kernels.c picks per arch, without a GPU or NVRTC: the
 * opt-in shared memory per block of each arch (CUDA C Programming Guide, compute capabilities), the
 * tensor-core kernels' dynamic shared memory (the plan's smem=) as the templates lay it out, within
 * that limit for every head dim, tuning and arch, and the head-dim-128 backward above 48 KiB. The
 * shipped archs' limits come from specs/gpus (read once per arch here: the run's GPU carries them). */
#include <stdio.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "gen/kernels.h"

/* attention_{fwd,bwd} at head dim hd, specialised for arch with tuned tiles bq x bk: 0 or -1. */
static int spec(KernelInst *k, const char *kind, int hd, const char *arch, int bq, int bk, char *err, size_t n) {
    memset(k, 0, sizeof *k);
    snprintf(k->kind, sizeof k->kind, "%s", kind);
    const char *keys[] = {"batch", "seq", "heads", "kv_heads", "head_dim"};
    double vals[] = {2, 256, 4, 2, hd};
    for (int i = 0; i < 5; i++) { snprintf(k->key[i], sizeof k->key[i], "%s", keys[i]); k->val[i] = vals[i]; }
    k->nconst = 5;
    static Run run;
    static char last_arch[16] = "?";
    static int optin_kib;
    if (strcmp(last_arch, arch)) {   /* as a GPU spec gives it: read the specs once per arch */
        snprintf(last_arch, sizeof last_arch, "%s", arch);
        optin_kib = (int)(kernel_smem_optin(arch) / 1024);
    }
    memset(&run, 0, sizeof run);
    snprintf(run.gpu.arch, sizeof run.gpu.arch, "%s", arch);
    run.gpu.smem_block_kib = optin_kib;
    run.gpu.tune_row_block = 256; run.gpu.tune_elem_block = 256;
    run.gpu.tune_attn_block_q = bq; run.gpu.tune_attn_block_k = bk;
    return kernel_specialise(k, &run, err, n);
}

/* The templates' layout: the forward holds K and V [bk, hd+8] bf16; the backward its own rows
 * [2 bq, hd+8] and the streamed ones [2 bk, hd+8] bf16, then lse and delta [max(bq, bk)] fp32. */
static long long layout_bytes(int bwd, int hd, int bq, int bk) {
    if (!bwd) return 2LL * bk * (hd + 8) * 2;
    return (2LL * bq + 2LL * bk) * (hd + 8) * 2 + 2LL * 4 * (bq > bk ? bq : bk);
}

int main(void) {
    static const struct { const char *arch; long long kib; } OPTIN[] = {
        {"sm_80", 163}, {"sm_86", 99}, {"sm_87", 163}, {"sm_89", 99}, {"sm_90", 227}, {"", 48}, {"sm_75", 48}, {"sm_100", 227},
        {"sm_90a", 227}, {"sm_100a", 227},
    };
    for (size_t i = 0; i < sizeof OPTIN / sizeof OPTIN[0]; i++)
        CHECK(kernel_smem_optin(OPTIN[i].arch) == OPTIN[i].kib * 1024, OPTIN[i].arch[0] ? OPTIN[i].arch : "no arch",
              "opt-in %lld B, want %lld", (long long)kernel_smem_optin(OPTIN[i].arch), OPTIN[i].kib * 1024);

    char err[512];
    KernelInst k;
    /* head dim 128, tuned 64 x 64: the backward streams 32-key tiles in 52736 B on every arch (above
     * the 48 KiB a kernel gets without opting in), 16-key ones within 48 KiB without an arch */
    const char *archs[] = {"sm_80", "sm_86", "sm_89", "sm_90"};
    for (int a = 0; a < 4; a++) {
        int rc = spec(&k, "attention_bwd", 128, archs[a], 64, 64, err, sizeof err);
        CHECK(rc == 0 && k.tune_bq == 64 && k.tune_bk == 32 && k.smem == 52736 && k.block == 128 &&
              strstr(k.name, "_tc_q64k32"), archs[a], "rc %d %s: %s smem %lld", rc, err, k.name, (long long)k.smem);
    }
    int rc = spec(&k, "attention_bwd", 128, "", 64, 64, err, sizeof err);
    CHECK(rc == 0 && k.tune_bq == 64 && k.tune_bk == 16 && k.smem == 44032, "no arch: q64k16 in 44032 B",
          "rc %d: %s smem %lld", rc, k.name, (long long)k.smem);
    /* 128 queries a block: 88064 B, within sm_86's 99 KiB; 48 KiB without an arch forces q64k16 */
    rc = spec(&k, "attention_bwd", 128, "sm_86", 128, 64, err, sizeof err);
    CHECK(rc == 0 && k.tune_bq == 128 && k.tune_bk == 32 && k.smem == 88064 && k.block == 256, "sm_86, tune 128x64: q128k32",
          "rc %d: %s smem %lld", rc, k.name, (long long)k.smem);
    rc = spec(&k, "attention_bwd", 128, "", 128, 64, err, sizeof err);
    CHECK(rc == 0 && k.tune_bq == 64 && k.tune_bk == 16, "no arch, tune 128x64: q64k16", "rc %d: %s", rc, k.name);
    /* head dim 256 runs on the CUDA cores with static shared memory only */
    rc = spec(&k, "attention_bwd", 256, "sm_90", 64, 64, err, sizeof err);
    CHECK(rc == 0 && k.smem == 0 && !strstr(k.name, "_tc_"), "head dim 256: CUDA-core template, no dynamic shared memory",
          "rc %d: %s smem %lld", rc, k.name, (long long)k.smem);

    /* every head dim, tuning and arch: the plan's smem is the templates' layout and fits the arch */
    const char *all[] = {"", "sm_80", "sm_86", "sm_89", "sm_90"};
    long long optin[5];
    for (int a = 0; a < 5; a++) optin[a] = kernel_smem_optin(all[a]);
    int bad = 0, n = 0, above48 = 0;
    char first[700] = "";
    for (int kind = 0; kind < 2; kind++)
        for (int hd = 32; hd <= 128; hd += 16)
            for (int a = 0; a < 5; a++)
                for (int bq = 8; bq <= 256; bq *= 2)
                    for (int bk = 8; bk <= 256; bk *= 2) {
                        n++;
                        if (spec(&k, kind ? "attention_bwd" : "attention_fwd", hd, all[a], bq, bk, err, sizeof err)) {
                            if (!bad++) snprintf(first, sizeof first, "%.300s", err);
                            continue;
                        }
                        long long want = layout_bytes(kind, hd, k.tune_bq, k.tune_bk);
                        above48 += k.smem > 48 * 1024;
                        if (k.smem != want || k.smem > optin[a] || k.block != 2 * k.tune_bq ||
                            k.tune_bq % 16 || k.tune_bk % 16) {
                            if (!bad++) snprintf(first, sizeof first, "%s on '%s': smem %lld, layout %lld, block %lld",
                                                 k.name, all[a], (long long)k.smem, want, (long long)k.block);
                        }
                    }
    CHECK(bad == 0 && above48 > 0, "every tiling fits its arch and the plan's smem is the templates' layout",
          "%d of %d bad (first: %s), %d above 48 KiB", bad, n, first, above48);
    TEST_EXIT();
}
