/* test_moe.c: the MoE block (gen/moe.c, the moe_* kernels): finite differences of each new CPU
 * kernel (router backward with the load-balance loss, dispatch, combine), the whole tiny MoE
 * model's loss against an independent float64 forward written here from the catalog's math,
 * finite differences of the model loss, and tp=1 vs tp=2 vs tp=4 (btp) loss and every canonical
 * gradient within 1e-5, on the CPU backend with plans written by `boost gen`. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "tests/unit/testlib.h"
#include "runtime/runtime.h"
#include "runtime/cpu_kernels.h"   // defines: cpu_kernel_run
#include "gen/kernels.h"
#include <dlfcn.h>
#include "common/nvrtc.h"
#include <unistd.h>

/* ---------------------------------------------------------------- kernels, one at a time */

static uint64_t rng = 12345;
static double urand(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void) { return (float)(2 * urand() - 1); }

/* A KernelArgs with operands ops (keys) and integer/float constants "key=value ...". */
static void kargs(KernelArgs *k, const char *kind, const char *opkeys, const char *consts) {
    memset(k, 0, sizeof *k);
    snprintf(k->kind, sizeof k->kind, "%s", kind);
    snprintf(k->name, sizeof k->name, "%s_test", kind);
    char buf[400];
    snprintf(buf, sizeof buf, "%s", opkeys);
    for (char *s = strtok(buf, " "); s; s = strtok(NULL, " ")) snprintf(k->op_key[k->nops++], sizeof k->op_key[0], "%s", s);
    snprintf(buf, sizeof buf, "%s", consts);
    for (char *s = strtok(buf, " "); s; s = strtok(NULL, " ")) {
        char *eq = strchr(s, '=');
        *eq = 0;
        snprintf(k->const_key[k->nconst], sizeof k->const_key[0], "%s", s);
        k->const_val[k->nconst] = atof(eq + 1);
        k->const_int[k->nconst].base = (int64_t)atof(eq + 1);
        k->nconst++;
    }
}

static int run_k(const KernelArgs *k, void **ops) {
    char err[300];
    if (cpu_kernel_run(k, ops, 0, err, sizeof err)) { printf("# %s\n", err); return -1; }
    return 0;
}

enum { TM = 12, TE = 5, TK = 2, TCAP = 4, TCOLS = 6 };

/* Router forward at given logits; the scalar objective L = sum w_g*gates + aux[0] (the gates'
 * weights w_g stand for an upstream gradient). Routing is held fixed by the caller's check. */
static double router_obj(const float *logits, const float *wg, double coef, double zcoef, int norm, float *sel_out) {
    static float probs[TM * TE], sel[TM * TK], gates[TM * TK], slot[TM * TK], src[TE * TCAP], aux[2 + 2 * TE + TM];
    KernelArgs k;
    char consts[200];
    snprintf(consts, sizeof consts, "rows=%d experts=%d top_k=%d capacity=%d norm=%d coef=%.17g zcoef=%.17g", TM, TE, TK, TCAP, norm, coef, zcoef);
    kargs(&k, "moe_router", "logits probs sel gates slot src aux", consts);
    void *ops[] = {(void *)logits, probs, sel, gates, slot, src, aux};
    if (run_k(&k, ops)) return NAN;
    if (sel_out) memcpy(sel_out, sel, sizeof sel);
    double L = aux[0];
    for (int i = 0; i < TM * TK; i++) L += (double)wg[i] * gates[i];
    return L;
}

/* zcoef > 0: with the router z-loss zcoef * mean_m lse_m^2, checked against a float64 sum too. */
static void test_router(int norm, double zcoef) {
    float logits[TM * TE], wg[TM * TK];
    for (int i = 0; i < TM * TE; i++) logits[i] = 2 * nrand();
    for (int i = 0; i < TM * TK; i++) wg[i] = nrand();
    double coef = 0.3;
    static float probs[TM * TE], sel[TM * TK], gates[TM * TK], slot[TM * TK], src[TE * TCAP], aux[2 + 2 * TE + TM], dl[TM * TE];
    KernelArgs k;
    char consts[200];
    snprintf(consts, sizeof consts, "rows=%d experts=%d top_k=%d capacity=%d norm=%d coef=%.17g zcoef=%.17g", TM, TE, TK, TCAP, norm, coef, zcoef);
    kargs(&k, "moe_router", "logits probs sel gates slot src aux", consts);
    void *ops[] = {logits, probs, sel, gates, slot, src, aux};
    run_k(&k, ops);
    /* invariants: probs sum to 1, top-k are the largest, slots in token order, src inverts slot */
    int okp = 1, oks = 1, okc = 1;
    int count[TE] = {0};
    for (int m = 0; m < TM; m++) {
        double s = 0;
        for (int e = 0; e < TE; e++) s += probs[m * TE + e];
        okp &= fabs(s - 1) < 1e-6;
        float kth = probs[m * TE + (int)sel[m * TK + TK - 1]];
        int above = 0;
        for (int e = 0; e < TE; e++) above += probs[m * TE + e] > kth;
        oks &= above == TK - 1 && (int)sel[m * TK] != (int)sel[m * TK + 1];
        for (int c = 0; c < TK; c++) {
            int e = (int)sel[m * TK + c];
            int want = count[e] < TCAP ? count[e] : -1;
            if (count[e] < TCAP) count[e]++;
            okc &= (int)slot[m * TK + c] == want && (want < 0 || (int)src[e * TCAP + want] == m * TK + c);
        }
    }
    char name[160];
    if (zcoef > 0) {   /* z-loss = zcoef * mean of logsumexp^2, in float64 from the logits */
        double z = 0, lb = 0;
        for (int m = 0; m < TM; m++) {
            double mx = -1e300, se = 0;
            for (int e = 0; e < TE; e++) mx = fmax(mx, logits[m * TE + e]);
            for (int e = 0; e < TE; e++) se += exp(logits[m * TE + e] - mx);
            z += (mx + log(se)) * (mx + log(se)) / TM;
        }
        z *= zcoef;
        for (int e = 0; e < TE; e++) lb += coef * TE * aux[1 + e] * aux[1 + TE + e];
        CHECK(fabs(aux[1 + 2 * TE] - z) <= 1e-5 * z && fabs(aux[0] - (lb + z)) <= 1e-5 * (lb + z),
              "moe_router zcoef: aux holds z-loss = zcoef * mean lse^2 (float64) and loss = load-balance + z",
              "z %.9g want %.9g, loss %.9g want %.9g", aux[1 + 2 * TE], z, aux[0], lb + z);
    }
    snprintf(name, sizeof name, "moe_router norm=%d zcoef=%g: softmax rows sum to 1, top-%d are the largest", norm, zcoef, TK);
    CHECK(okp && oks, name, "probs %d, top-k %d", okp, oks);
    snprintf(name, sizeof name, "moe_router norm=%d zcoef=%g: capacity slots in token order then choice order, src inverts them", norm, zcoef);
    CHECK(okc, name, "slot map differs");
    /* backward against central differences of the objective */
    kargs(&k, "moe_router_bwd", "probs sel gates aux dgates dlogits", consts);
    void *bops[] = {probs, sel, gates, aux, wg, dl};
    run_k(&k, bops);
    double num = 0, den = 0;
    float sel0[TM * TK], sel1[TM * TK];
    memcpy(sel0, sel, sizeof sel0);
    int flips = 0;
    for (int i = 0; i < TM * TE; i++) {
        double keep = logits[i], h = 1e-3;
        logits[i] = (float)(keep + h); double lp = router_obj(logits, wg, coef, zcoef, norm, sel1);
        flips += memcmp(sel0, sel1, sizeof sel0) != 0;
        logits[i] = (float)(keep - h); double lm = router_obj(logits, wg, coef, zcoef, norm, sel1);
        flips += memcmp(sel0, sel1, sizeof sel0) != 0;
        logits[i] = (float)keep;
        double fd = (lp - lm) / (2 * h);
        num += (fd - dl[i]) * (fd - dl[i]); den += fd * fd;
    }
    snprintf(name, sizeof name, "moe_router_bwd norm=%d zcoef=%g: finite differences of gates, load-balance (and z-) loss", norm, zcoef);
    CHECK(flips == 0 && sqrt(num / den) < 2e-3, name, "rel err %.3g, %d routing flips", sqrt(num / den), flips);
}

/* dispatch / combine: linear in x / eo and gates; their backward is checked against the adjoint
 * identity <dout, f(x)> = <f^T(dout), x> and against finite differences in the gates. */
static void test_dispatch_combine(void) {
    float logits[TM * TE];
    for (int i = 0; i < TM * TE; i++) logits[i] = 2 * nrand();
    static float probs[TM * TE], sel[TM * TK], gates[TM * TK], slot[TM * TK], src[TE * TCAP], aux[1 + 2 * TE];
    KernelArgs k;
    char consts[300];
    snprintf(consts, sizeof consts, "rows=%d experts=%d top_k=%d capacity=%d norm=1 coef=0", TM, TE, TK, TCAP);
    kargs(&k, "moe_router", "logits probs sel gates slot src aux", consts);
    void *rops[] = {logits, probs, sel, gates, slot, src, aux};
    run_k(&k, rops);
    int dropped = 0;
    for (int i = 0; i < TM * TK; i++) dropped += slot[i] < 0;
    CHECK(dropped > 0, "moe kernels: the test routing drops some tokens (capacity exercised)", "none dropped");

    enum { S = TE * TCAP };
    static float x[TM * TCOLS], xe[S * TCOLS], dxe[S * TCOLS], dx[TM * TCOLS];
    for (int i = 0; i < TM * TCOLS; i++) x[i] = nrand();
    for (int i = 0; i < S * TCOLS; i++) dxe[i] = nrand();
    snprintf(consts, sizeof consts, "rows=%d cols=%d top_k=%d tokens=%d", S, TCOLS, TK, TM);
    kargs(&k, "moe_dispatch", "x src out", consts);
    void *d1[] = {x, src, xe};
    run_k(&k, d1);
    snprintf(consts, sizeof consts, "rows=%d cols=%d top_k=%d experts=%d capacity=%d", TM, TCOLS, TK, TE, TCAP);
    kargs(&k, "moe_dispatch_bwd", "dout sel slot dx", consts);
    void *d2[] = {dxe, sel, slot, dx};
    run_k(&k, d2);
    double lhs = 0, rhs = 0, xsum = 0;
    for (int i = 0; i < S * TCOLS; i++) lhs += (double)dxe[i] * xe[i];
    for (int i = 0; i < TM * TCOLS; i++) { rhs += (double)dx[i] * x[i]; xsum += fabs(dx[i]); }
    CHECK(fabs(lhs - rhs) < 1e-5 * (1 + fabs(lhs)) && xsum > 0, "moe_dispatch_bwd is the adjoint of moe_dispatch (<dy, Dx> = <D^T dy, x>)",
          "%.9g vs %.9g", lhs, rhs);
    /* combine: out = sum_k g * eo[slot]; adjoint in eo, finite differences in gates */
    static float eo[S * TCOLS], out[TM * TCOLS], dout[TM * TCOLS], deo[S * TCOLS], dg[TM * TK];
    for (int i = 0; i < S * TCOLS; i++) eo[i] = nrand();
    for (int i = 0; i < TM * TCOLS; i++) dout[i] = nrand();
    kargs(&k, "moe_combine", "eo sel slot gates out", consts);
    void *c1[] = {eo, sel, slot, gates, out};
    run_k(&k, c1);
    snprintf(consts, sizeof consts, "rows=%d cols=%d top_k=%d tokens=%d", S, TCOLS, TK, TM);
    kargs(&k, "moe_combine_bwd", "dout src gates deo", consts);
    void *c2[] = {dout, src, gates, deo};
    run_k(&k, c2);
    snprintf(consts, sizeof consts, "rows=%d cols=%d top_k=%d experts=%d capacity=%d", TM, TCOLS, TK, TE, TCAP);
    kargs(&k, "moe_gates_bwd", "dout eo sel slot dgates", consts);
    void *c3[] = {dout, eo, sel, slot, dg};
    run_k(&k, c3);
    lhs = rhs = 0;
    for (int i = 0; i < TM * TCOLS; i++) lhs += (double)dout[i] * out[i];
    for (int i = 0; i < S * TCOLS; i++) rhs += (double)deo[i] * eo[i];
    CHECK(fabs(lhs - rhs) < 1e-5 * (1 + fabs(lhs)), "moe_combine_bwd is the adjoint of moe_combine in the expert outputs",
          "%.9g vs %.9g", lhs, rhs);
    /* out is linear in the gates: <dout, out> = sum dgates*gates exactly */
    double gsum = 0;
    for (int i = 0; i < TM * TK; i++) gsum += (double)dg[i] * gates[i];
    int zero_dropped = 1;
    for (int i = 0; i < TM * TK; i++) if (slot[i] < 0 && dg[i] != 0) zero_dropped = 0;
    CHECK(fabs(lhs - gsum) < 1e-5 * (1 + fabs(lhs)) && zero_dropped, "moe_gates_bwd: d<dout, out>/d gates, 0 for dropped choices",
          "%.9g vs %.9g, dropped zero %d", lhs, gsum, zero_dropped);
    /* finite differences of a gate */
    int gi = 0;
    while (slot[gi] < 0) gi++;
    float keep = gates[gi];
    double h = 1e-2, lp = 0, lm = 0;
    gates[gi] = keep + (float)h; run_k(&k, c3); kargs(&k, "moe_combine", "eo sel slot gates out", consts); run_k(&k, c1);
    for (int i = 0; i < TM * TCOLS; i++) lp += (double)dout[i] * out[i];
    gates[gi] = keep - (float)h; run_k(&k, c1);
    for (int i = 0; i < TM * TCOLS; i++) lm += (double)dout[i] * out[i];
    gates[gi] = keep;
    CHECK(fabs((lp - lm) / (2 * h) - dg[gi]) < 1e-3 * (1 + fabs(dg[gi])), "moe_gates_bwd: finite difference of one gate",
          "fd %.7g vs %.7g", (lp - lm) / (2 * h), dg[gi]);
}

/* ---------------------------------------------------------------- the CUDA templates, emulated */

/* The moe_* templates are specialised, emitted into one kernels.cu, compiled with g++ against
 * tests/gpu/cuda_emu.hpp (the CPU stand-in for the device that test_kernels_emu uses) and run on
 * routing the CPU router produced, against the CPU reference: index outputs exactly, values within
 * bf16 accuracy. Shapes: 24 tokens, 5 experts, top-2, capacity 8 (some choices dropped); 16
 * columns (8-wide vectors) and 12 (scalar path). */
enum { EM = 24, EE = 5, EK = 2, EC = 8, ES = EE * EC, EBUF = 4096 };

typedef struct { const char *key; int bf16, out; float *host; } EOp;
typedef struct { KernelInst k; EOp ops[8]; int nops; } ECase;

static float bf16r(float f) {
    uint32_t u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); u &= 0xffff0000u; memcpy(&f, &u, 4); return f;
}

static void ecase(ECase *c, const char *kind, const char *consts) {
    memset(c, 0, sizeof *c);
    snprintf(c->k.kind, sizeof c->k.kind, "%s", kind);
    char buf[300];
    snprintf(buf, sizeof buf, "%s", consts);
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
        char *eq = strchr(t, '=');
        *eq = 0;
        snprintf(c->k.key[c->k.nconst], sizeof c->k.key[0], "%s", t);
        c->k.val[c->k.nconst++] = atof(eq + 1);
    }
}
static void eop(ECase *c, const char *key, int bf16, int out, float *host) {
    EOp o = {key, bf16, out, host};
    c->ops[c->nops++] = o;
}

/* Run case c on the CPU reference and on the emulated kernel; compare the outputs. */
static void emu_run(void *so, ECase *c) {
    char err[300], name[200];
    snprintf(name, sizeof name, "emulated %.31s matches the CPU reference (%.95s)", c->k.kind, c->k.name);
    KernelArgs a;
    memset(&a, 0, sizeof a);
    snprintf(a.kind, sizeof a.kind, "%.31s", c->k.kind);
    for (int i = 0; i < c->k.nconst; i++) {
        snprintf(a.const_key[i], sizeof a.const_key[0], "%s", c->k.key[i]);
        a.const_val[i] = c->k.val[i]; a.const_int[i].base = (int64_t)c->k.val[i];
    }
    a.nconst = c->k.nconst;
    float *ref[8];
    void *dev[8], *rops[8], *ptrs[8], *params[8];
    for (int o = 0; o < c->nops; o++) {
        snprintf(a.op_key[a.nops++], sizeof a.op_key[0], "%s", c->ops[o].key);
        ref[o] = malloc(EBUF * sizeof(float));
        dev[o] = calloc(EBUF, sizeof(float));
        for (int i = 0; i < EBUF; i++) {
            float v = c->ops[o].host[i];
            if (c->ops[o].bf16) { v = bf16r(v); uint32_t u; memcpy(&u, &v, 4); ((uint16_t *)dev[o])[i] = (uint16_t)(u >> 16); }
            else ((float *)dev[o])[i] = v;
            ref[o][i] = v;
        }
        rops[o] = ref[o]; ptrs[o] = dev[o]; params[o] = &ptrs[o];
    }
    if (cpu_kernel_run(&a, rops, 0, err, sizeof err)) { CHECK(0, name, "cpu: %s", err); return; }
    char sym[140];
    snprintf(sym, sizeof sym, "emu_%s", c->k.name);
    int (*launch)(unsigned, unsigned, void **) = (int (*)(unsigned, unsigned, void **))dlsym(so, sym);
    if (!launch) { CHECK(0, name, "no %s", sym); return; }
    launch((unsigned)c->k.grid, (unsigned)c->k.block, params);
    double worst = 0;
    const char *where = "";
    int wrote = 0;
    for (int o = 0; o < c->nops; o++) {
        if (!c->ops[o].out) continue;
        double d2 = 0, r2 = 0;
        for (int i = 0; i < EBUF; i++) {
            float got;
            if (c->ops[o].bf16) { uint32_t u = (uint32_t)((uint16_t *)dev[o])[i] << 16; memcpy(&got, &u, 4); }
            else got = ((float *)dev[o])[i];
            d2 += ((double)got - ref[o][i]) * ((double)got - ref[o][i]);
            r2 += (double)ref[o][i] * ref[o][i];
            wrote |= ref[o][i] != 0;
        }
        double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
        /* routing indices must agree exactly */
        int exact = !strcmp(c->ops[o].key, "sel") || !strcmp(c->ops[o].key, "slot") || !strcmp(c->ops[o].key, "src");
        if (exact && d2 > 0) rel = INFINITY;
        if (rel > worst || rel != rel) { worst = rel; where = c->ops[o].key; }
        memcpy(c->ops[o].host, ref[o], EBUF * sizeof(float));   /* the reference result feeds later cases */
    }
    CHECK(wrote && worst < 1e-2, name, "operand %s: relative L2 error %.3g", where, worst);
    for (int o = 0; o < c->nops; o++) { free(ref[o]); free(dev[o]); }
}

static void test_emulated(void) {
    Run run;
    memset(&run, 0, sizeof run);
    snprintf(run.name, sizeof run.name, "moe-emu");
    snprintf(run.model.name, sizeof run.model.name, "moe-emu");
    run.gpu.tune_row_block = 64; run.gpu.tune_elem_block = 64;
    static float logits[EBUF], probs[EBUF], sel[EBUF], gates[EBUF], slot[EBUF], src[EBUF], aux[EBUF], dgates[EBUF], dl[EBUF];
    static float x[2][EBUF], xe[2][EBUF], dxe[2][EBUF], dx[2][EBUF], eo[2][EBUF], out[2][EBUF], dout[2][EBUF], deo[2][EBUF], dg2[2][EBUF], loss[EBUF];
    for (int i = 0; i < EBUF; i++) {
        logits[i] = 3 * nrand(); dgates[i] = nrand(); loss[i] = 2.5f;
        for (int v = 0; v < 2; v++) { x[v][i] = nrand(); dxe[v][i] = nrand(); eo[v][i] = nrand(); dout[v][i] = nrand(); dx[v][i] = nrand(); }
    }
    ECase cs[16];
    int n = 0;
    char kv[300];
    snprintf(kv, sizeof kv, "rows=%d experts=%d top_k=%d capacity=%d ldl=%d norm=1 coef=0.05 zcoef=0.02", EM, EE, EK, EC, EE);
    ecase(&cs[n], "moe_router", kv);
    eop(&cs[n], "logits", 1, 0, logits); eop(&cs[n], "probs", 0, 1, probs); eop(&cs[n], "sel", 0, 1, sel);
    eop(&cs[n], "gates", 0, 1, gates); eop(&cs[n], "slot", 0, 1, slot); eop(&cs[n], "src", 0, 1, src); eop(&cs[n], "aux", 0, 1, aux);
    n++;
    snprintf(kv, sizeof kv, "rows=%d experts=%d top_k=%d norm=1 coef=0.05 scale=0.5 acc=0 lddl=%d zcoef=0.02", EM, EE, EK, EE);
    ecase(&cs[n], "moe_router_bwd", kv);
    eop(&cs[n], "probs", 0, 0, probs); eop(&cs[n], "sel", 0, 0, sel); eop(&cs[n], "gates", 0, 0, gates); eop(&cs[n], "aux", 0, 0, aux);
    eop(&cs[n], "dgates", 0, 0, dgates); eop(&cs[n], "dlogits", 1, 1, dl);
    n++;
    for (int v = 0; v < 2; v++) {
        int cols = v ? 12 : 16;
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d tokens=%d ldx=%d ldo=%d", ES, cols, EK, EM, cols, cols);
        ecase(&cs[n], "moe_dispatch", kv);
        eop(&cs[n], "x", 1, 0, x[v]); eop(&cs[n], "src", 0, 0, src); eop(&cs[n], "out", 1, 1, xe[v]); n++;
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d experts=%d capacity=%d ldo=%d lddx=%d acc=%d", EM, cols, EK, EE, EC, cols, cols, v);
        ecase(&cs[n], "moe_dispatch_bwd", kv);
        eop(&cs[n], "dout", 1, 0, dxe[v]); eop(&cs[n], "sel", 0, 0, sel); eop(&cs[n], "slot", 0, 0, slot); eop(&cs[n], "dx", 1, 1, dx[v]); n++;
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d experts=%d capacity=%d lde=%d ldo=%d", EM, cols, EK, EE, EC, cols, cols);
        ecase(&cs[n], "moe_combine", kv);
        eop(&cs[n], "eo", 1, 0, eo[v]); eop(&cs[n], "sel", 0, 0, sel); eop(&cs[n], "slot", 0, 0, slot); eop(&cs[n], "gates", 0, 0, gates);
        eop(&cs[n], "out", 1, 1, out[v]); n++;
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d tokens=%d ldo=%d ldde=%d", ES, cols, EK, EM, cols, cols);
        ecase(&cs[n], "moe_combine_bwd", kv);
        eop(&cs[n], "dout", 1, 0, dout[v]); eop(&cs[n], "src", 0, 0, src); eop(&cs[n], "gates", 0, 0, gates); eop(&cs[n], "deo", 1, 1, deo[v]); n++;
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d experts=%d capacity=%d ldo=%d lde=%d", EM, cols, EK, EE, EC, cols, cols);
        ecase(&cs[n], "moe_gates_bwd", kv);
        eop(&cs[n], "dout", 1, 0, dout[v]); eop(&cs[n], "eo", 1, 0, eo[v]); eop(&cs[n], "sel", 0, 0, sel); eop(&cs[n], "slot", 0, 0, slot);
        eop(&cs[n], "dgates", 0, 1, dg2[v]); n++;
    }
    ecase(&cs[n], "moe_aux_add", "rows=1");
    eop(&cs[n], "aux", 0, 0, aux); eop(&cs[n], "loss", 0, 1, loss); n++;
    /* the router over several chunks of the block (150 tokens, 64 threads), and with more experts
       than threads (one thread per expert, 66 > 64), top-3 */
    static float l2[2][EBUF], p2[2][EBUF], s2[2][EBUF], g2[2][EBUF], sl2[2][EBUF], src2[2][EBUF], a2[2][EBUF];
    static const int R2[2][4] = {{150, 5, 2, 40}, {60, 66, 3, 2}};
    for (int v = 0; v < 2; v++) {
        for (int i = 0; i < EBUF; i++) l2[v][i] = 3 * nrand();
        snprintf(kv, sizeof kv, "rows=%d experts=%d top_k=%d capacity=%d ldl=%d norm=1 coef=0.05", R2[v][0], R2[v][1], R2[v][2], R2[v][3], R2[v][1]);
        ecase(&cs[n], "moe_router", kv);
        eop(&cs[n], "logits", 1, 0, l2[v]); eop(&cs[n], "probs", 0, 1, p2[v]); eop(&cs[n], "sel", 0, 1, s2[v]);
        eop(&cs[n], "gates", 0, 1, g2[v]); eop(&cs[n], "slot", 0, 1, sl2[v]); eop(&cs[n], "src", 0, 1, src2[v]); eop(&cs[n], "aux", 0, 1, a2[v]);
        n++;
    }
    char err[160];
    KernelInst ks[16];
    for (int i = 0; i < n; i++) {
        if (kernel_specialise(&cs[i].k, &run, err, sizeof err)) { CHECK(0, "specialise the moe kernels", "%s: %s", cs[i].k.kind, err); return; }
        ks[i] = cs[i].k;
    }
    int vec8 = 0;
    for (int i = 0; i < n; i++) vec8 |= cs[i].k.vec == 8;
    CHECK(vec8, "moe kernels: the 16-column cases take the 8-wide vector path", "no case has vec 8");
    char dir[] = "/tmp/boost-moe-emu.XXXXXX", path[600], cmd[2000];
    if (!mkdtemp(dir)) { CHECK(0, "tmpdir", "mkdtemp failed"); return; }
    snprintf(path, sizeof path, "%s/cuda_bf16.h", dir);
    FILE *f = fopen(path, "w"); if (f) fclose(f);
    snprintf(path, sizeof path, "%s/kernels.cu", dir);
    f = fopen(path, "w");
    int rc = f ? kernels_emit(f, ks, n, &run, err, sizeof err) : -1;
    for (int i = 0; f && i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= !strcmp(ks[j].name, ks[i].name);
        if (!seen) fprintf(f, "EMU_ENTRY(%s)\n", ks[i].name);
    }
    if (f) fclose(f);
    CHECK(rc == 0, "emit the moe kernels' kernels.cu", "%s", err);
    snprintf(cmd, sizeof cmd, "g++ -std=c++17 -O1 -fno-strict-aliasing -fPIC -shared -w -I%s -include tests/gpu/cuda_emu.hpp "
             "-x c++ %s/kernels.cu -o %s/kernels.so -lpthread 2>%s/cc.log", dir, dir, dir, dir);
    if (system(cmd) != 0) { CHECK(0, "g++ compiles the moe kernels against the emulator", "see %s/cc.log", dir); return; }
    snprintf(path, sizeof path, "%s/kernels.so", dir);
    void *so = dlopen(path, RTLD_NOW);
    if (!so) { CHECK(0, "load the emulated moe kernels", "%s", dlerror()); return; }
    int dropped = 0;
    for (int i = 0; i < n; i++) {
        emu_run(so, &cs[i]);
        if (i == 0) for (int q = 0; q < EM * EK; q++) dropped += slot[q] < 0;
    }
    int dropped2 = 0;
    for (int v = 0; v < 2; v++) for (int q = 0; q < R2[v][0] * R2[v][2]; q++) dropped2 += sl2[v][q] < 0;
    CHECK(dropped > 0 && dropped2 > 0, "moe emulator cases drop some choices (capacity exercised)", "dropped %d, %d", dropped, dropped2);
    dlclose(so);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
}

/* ---------------------------------------------------------------- NVRTC */

/* The moe_* kernels at the tiny run's shapes (tp=2) and at cola-moe-1b's (tp=2: 16384 tokens, 8
 * experts, top-2, capacity 5120, d/t = 1024), 8-wide and scalar, compile with NVRTC for sm_80 and
 * sm_90 with no spills, every kernel present in ptxas's report. */
static void test_nvrtc(void) {
    char err[4096];
    if (!nvrtc_available(err, sizeof err)) { CHECK(0, "nvrtc available", "%s", err); return; }
    Run run;
    memset(&run, 0, sizeof run);
    snprintf(run.name, sizeof run.name, "moe-nvrtc");
    snprintf(run.model.name, sizeof run.model.name, "moe-nvrtc");
    snprintf(run.gpu.arch, sizeof run.gpu.arch, "sm_90");
    static const struct { int M, E, K, C, cols; } SH[] = {{256, 4, 2, 160, 64}, {16384, 8, 2, 5120, 1024}, {100, 6, 1, 20, 12}};
    ECase cs[32];
    int n = 0;
    for (size_t i = 0; i < sizeof SH / sizeof SH[0]; i++) {
        int M = SH[i].M, E = SH[i].E, K = SH[i].K, C = SH[i].C, c = SH[i].cols, S = E * C;
        char kv[300];
        snprintf(kv, sizeof kv, "rows=%d experts=%d top_k=%d capacity=%d ldl=%d norm=%d coef=0.01", M, E, K, C, E, K > 1); ecase(&cs[n++], "moe_router", kv);
        snprintf(kv, sizeof kv, "rows=%d experts=%d top_k=%d norm=%d coef=0.01 scale=1 acc=0 lddl=%d", M, E, K, K > 1, E); ecase(&cs[n++], "moe_router_bwd", kv);
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d tokens=%d ldx=%d ldo=%d", S, c, K, M, c, c); ecase(&cs[n++], "moe_dispatch", kv);
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d experts=%d capacity=%d ldo=%d lddx=%d acc=1", M, c, K, E, C, c, c); ecase(&cs[n++], "moe_dispatch_bwd", kv);
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d experts=%d capacity=%d lde=%d ldo=%d", M, c, K, E, C, c, c); ecase(&cs[n++], "moe_combine", kv);
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d tokens=%d ldo=%d ldde=%d", S, c, K, M, c, c); ecase(&cs[n++], "moe_combine_bwd", kv);
        snprintf(kv, sizeof kv, "rows=%d cols=%d top_k=%d experts=%d capacity=%d ldo=%d lde=%d", M, c, K, E, C, c, c); ecase(&cs[n++], "moe_gates_bwd", kv);
    }
    ecase(&cs[n++], "moe_aux_add", "rows=1");
    KernelInst ks[32];
    for (int i = 0; i < n; i++) {
        if (kernel_specialise(&cs[i].k, &run, err, sizeof err)) { CHECK(0, "specialise the moe kernels", "%s", err); return; }
        ks[i] = cs[i].k;
    }
    char *src = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&src, &len);
    int rc = kernels_emit(f, ks, n, &run, err, sizeof err);
    fclose(f);
    if (rc) { CHECK(0, "emit the moe kernels", "%s", err); free(src); return; }
    static const char *archs[] = {"sm_80", "sm_90"};
    for (int a = 0; a < 2; a++) {
        static KernelStat st[256];
        static char log[1 << 16];
        int got = nvrtc_compile(src, archs[a], NULL, NULL, st, 256, log, sizeof log);
        int spills = 0, missing = 0, maxreg = 0;
        for (int i = 0; i < got; i++) {
            if (strncmp(st[i].name, "moe_", 4)) continue;
            spills += st[i].spill_stores || st[i].spill_loads;
            if (st[i].registers > maxreg) maxreg = st[i].registers;
        }
        for (int i = 0; i < n; i++) {
            int found = 0;
            for (int j = 0; j < got; j++) found |= !strcmp(st[j].name, ks[i].name);
            missing += !found;
        }
        printf("# nvrtc %s: %d kernels, at most %d registers a thread\n", archs[a], got, maxreg);
        char name[160];
        snprintf(name, sizeof name, "nvrtc %s: the moe kernels (tiny, cola-moe-1b and top-1 shapes) compile, no spills, all present", archs[a]);
        CHECK(got > 0 && !spills && !missing, name, "%d stats, %d spill, %d missing: %.300s", got, spills, missing, got > 0 ? "" : log);
    }
    free(src);
}

/* ---------------------------------------------------------------- the whole model */

#define CASE_DIR "build/tmp/moe"
#include "tests/unit/moe_cases.h"

static const char *spec_path = "specs/runs/tiny-cola-moe.lua";

/* ---------------------------------------------------------------- generator: report and refusals */

static int64_t json_after(const char *s, const char *key1, const char *key2) {
    const char *p = strstr(s, key1);
    if (p) p = strstr(p, key2);
    return p ? strtoll(p + strlen(key2), NULL, 10) : -1;
}

static void test_generator(void) {
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";
    static char out[1 << 16];
    char cmd[600];
    /* per MoE layer forward at tp=2: M + M*E + E*C*(r_g+r_u) + E*C*r_d, M = 256, E = 4, C = 160, r = 32 */
    snprintf(cmd, sizeof cmd, "%s report specs/runs/tiny-cola-moe.lua --json 2>&1", boost);
    int rc = tl_run_cmd(cmd, out, sizeof out);
    int64_t M = 256, E = 4, C = (int64_t)ceil(1.25 * 256 * 2 / 4), want = M + M * E + E * C * 64 + E * C * 32;
    int64_t got = json_after(out, "\"moe\"", "\"allreduce_elems\": ");
    int64_t dense = json_after(out, "\"dense_mlp\"", "\"allreduce_elems\": ");
    CHECK(rc == 0 && got == want && dense == M * 65 + M * 32, "report: MoE layer forward collectives = M + M*E + E*C*(r_g+r_u) + E*C*r_d, dense MLP M*(2r+1) + M*r",
          "rc %d, moe %lld (want %lld), dense %lld (want %lld)", rc, (long long)got, (long long)want, (long long)dense, (long long)(M * 97));
    int64_t gbwd = json_after(strstr(out, "\"moe\"") ? strstr(out, "\"moe\"") : out, "\"backward\"", "\"allreduce_elems\": ");
    /* backward: the z duals (E*C*(2r) and E*C*r), the norm's dot (M) and the gates (M*k) */
    CHECK(gbwd == E * C * 64 + E * C * 32 + M + M * 2, "report: MoE layer backward collectives = E*C*(r_g+r_u) + E*C*r_d + M + M*k",
          "got %lld", (long long)gbwd);
    snprintf(cmd, sizeof cmd, "%s gen specs/runs/tiny-cola-moe-shared.lua -D layout=naive -o build/tmp/moe/naive 2>&1", boost);
    rc = tl_run_cmd(cmd, out, sizeof out);
    CHECK(rc == 2 && strstr(out, "shares expert factors") && strstr(out, "btp"), "gen: shared expert factors with layout naive are refused with a clear message", "rc %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s gen specs/runs/tiny-cola-moe.lua -D tp=8 -o build/tmp/moe/tp8 2>&1", boost);
    rc = tl_run_cmd(cmd, out, sizeof out);
    CHECK(rc == 2, "gen: tp=8 that does not divide the experts' ffn (192) or heads is refused", "rc %d: %s", rc, out);
}

/* ---------------------------------------------------------------- training */

/* The shipped run, 200 steps at tp=2 (btp) on the corpus: the validation loss starts near the
 * uniform guess over 256 bytes (ln 256 = 5.545, plus the two load-balance losses, about 0.01
 * each when balanced) and falls by more than 2 nats. */
static void test_training(void) {
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";
    char cmd[600];
    static char out[1 << 16];
    remove("build/tmp/moe/train.jsonl");
    snprintf(cmd, sizeof cmd, "%s train tiny-cola-moe --backend cpu --log build/tmp/moe/train.jsonl --quiet 2>&1", boost);
    int rc = tl_run_cmd(cmd, out, sizeof out);
    const char *done = strstr(out, "done:");
    if (done) printf("# %.*s\n", (int)strcspn(done, "\n"), done);
    CHECK(rc == 0, "train tiny-cola-moe: 200 steps at tp=2 btp on the cpu backend", "exit %d: %s", rc, out);
    FILE *f = fopen("build/tmp/moe/train.jsonl", "r");
    double v0 = -1, v200 = -1;
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        const char *v = strstr(line, "\"val_loss\":");
        if (!v) continue;
        if (!strncmp(line, "{\"step\":0,", 10)) v0 = atof(v + 11);
        if (!strncmp(line, "{\"step\":200,", 12)) v200 = atof(v + 11);
    }
    if (f) fclose(f);
    printf("# validation loss: step 0 %.4f, step 200 %.4f\n", v0, v200);
    CHECK(fabs(v0 - (5.545 + 0.02)) < 0.15 && v200 > 0 && v200 < v0 - 2.0, "train tiny-cola-moe: validation loss starts at ln 256 + aux and falls by > 2 nats",
          "step 0 %.4f, step 200 %.4f", v0, v200);
}

/* A 3-layer model whose only MoE layer is the middle one (every = a function), top-1 (Switch
 * gates, not renormalised), capacity factor 1 (more drops), SVD factors: tp=1 vs 2 vs 4 and
 * finite differences. */
static void mixed_model(void) {
    FILE *f = fopen("build/tmp/moe/mixed.lua", "w");
    if (!f) { CHECK(0, "write build/tmp/moe/mixed.lua", "cannot"); return; }
    fputs("-- a test run: one MoE layer (the middle one), top-1, SVD factors\n"
          "return run {\n"
          "  model = model \"mixed-moe\" {\n"
          "    hidden = 128, layers = 3, heads = 4, ffn = 160, vocab = 256, lowrank = svd { rank = 16 },\n"
          "    moe = moe { experts = 3, top_k = 1, capacity_factor = 1.0, aux_loss = 0.05, expert_ffn = 96,\n"
          "                every = function(layer) return layer == 1 end },\n"
          "  },\n"
          "  gpu = \"h100\",\n"
          "  parallel = { tp = 1, layout = \"btp\" },\n"
          "  features = { checkpoint = \"lowrank\" },\n"
          "  train = { micro_batch = 2, seq = 16 },\n"
          "}\n", f);
    fclose(f);
    spec_path = "build/tmp/moe/mixed.lua";
    Case ref, c;
    static const char *names[] = {"L1.router.W", "L1.e0.gate.A", "L1.e2.down.B", "L0.gate.B", "L2.up.A", "L1.mlp_norm"};
    if (open_case(&ref, spec_path, "-D tp=1") == 0) {
        CHECK(plan_find_canon(ref.p, "L0.router.W") < 0 && plan_find_canon(ref.p, "L1.router.W") >= 0 && plan_find_canon(ref.p, "L1.gate.A") < 0,
              "mixed model: only layer 1 is MoE (every = function)", "canons differ");
        finite_differences(&ref, "mixed-moe (top-1, one MoE layer of 3) tp=1", names, 6);
        if (!open_case(&c, spec_path, "-D tp=2")) compare(&c, &ref, "mixed-moe btp tp=2 vs tp=1");
        close_case(&c);
        if (!open_case(&c, spec_path, "-D tp=4 -D checkpoint=none")) compare(&c, &ref, "mixed-moe btp tp=4 checkpoint=none vs tp=1");
        close_case(&c);
    }
    close_case(&ref);
    spec_path = "specs/runs/tiny-cola-moe.lua";
}

int main(void) {
    test_router(1, 0);
    test_router(0, 0);
    test_router(1, 0.05);
    test_dispatch_combine();
    test_emulated();
    test_nvrtc();

    mkdir("build", 0755); mkdir("build/tmp", 0755); mkdir("build/tmp/moe", 0755);
    test_generator();
    static const char *fd_names[] = {"L0.router.W", "L0.e1.gate.A", "L0.e2.up.B", "L0.e0.down.A",
                                     "L1.e3.down.B", "L1.router.W", "L1.mlp_norm", "L0.q.A",
                                     "L1.k.B"};
    whole_model_checks(spec_path, "tiny-cola-moe", fd_names,
                       (int)(sizeof fd_names / sizeof fd_names[0]), 0,
                       "-D online_rmsnorm=false -D group_linears=false", "sync norm, ungrouped");
    mixed_model();
    test_training();
    TEST_EXIT();
}
