/* test_catalog.c: the kernel catalog (common/kernel_catalog.h) as each side of the plan file reads
 * it (gen/kernels.c emits kernels, runtime/plan.c checks plans and orders the CUDA launch
 * arguments): the same kinds with the same operands, in the same order, with the same default
 * storage dtypes; and its rows well formed: every extent and default over constants of its row,
 * every backward kind a kind of the catalog. */
#include <string.h>
#include "common/kernel_catalog.h"
#include "gen/kernels.h"
#include "runtime/plan.h"
#include "tests/unit/testlib.h"

/* Every constant of the row is 3; anything else is unknown (and makes a product 0). */
static int row_lookup(const void *ctx, const char *key, double *value) {
    KcatConst c;
    if (!kcat_const_find(*(const int *)ctx, key, &c)) return 0;
    *value = 3;
    return 1;
}

/* heads 2, head_dim 4; nothing else. */
static int few_lookup(const void *ctx, const char *key, double *value) {
    if (strcmp(key, "heads") && strcmp(key, "head_dim")) return 0;
    *value = !strcmp(key, "heads") ? 2 : 4;
    return 1;
}

/* Row id's extents and defaults name only its constants (or numbers); its operand dtypes are
 * known; a kind with a backward rule names kinds of the catalog. Empty `why` when all hold. */
static void row_well_formed(int id, char *why, size_t n) {
    KcatOperand op;
    for (int o = 0; kcat_operand(id, o, &op) == 0; o++) {
        if (strcmp(op.dtype, "bf16") && strcmp(op.dtype, "fp32") && strcmp(op.dtype, "i32")) {
            snprintf(why, n, "operand %s: dtype '%s'", op.key, op.dtype);
            return;
        }
        const char *ex[3] = {op.rows, op.cols, op.ld};
        for (int e = 0; e < 3 && op.rows[0]; e++)
            if (!(kcat_eval(id, ex[e], row_lookup, &id) > 0)) {
                snprintf(why, n, "operand %s: extent '%s' names no constant of the row", op.key,
                         ex[e]);
                return;
            }
    }
    KcatConst c;
    for (int i = 0; kcat_const(id, i, &c) == 0; i++)
        if (c.dflt[0] && kcat_eval(id, c.dflt, row_lookup, &id) == 0 && strcmp(c.dflt, "0")) {
            snprintf(why, n, "constant %s: default '%s' names no constant of the row", c.key,
                     c.dflt);
            return;
        }
    const KernelKind *kk = kcat_kind(id);
    if ((kk->grad == KG_RULE) != (kk->backward[0] != 0)) {
        snprintf(why, n, "a backward rule (KG_RULE) and backward kinds go together");
        return;
    }
    char bw[64];
    snprintf(bw, sizeof bw, "%s", kk->backward);
    for (char *save = NULL, *t = strtok_r(bw, " ", &save); t; t = strtok_r(NULL, " ", &save))
        if (kcat_find(t) < 0) {
            snprintf(why, n, "backward kind %s is not in the catalog", t);
            return;
        }
}

static const char *dtype_name(int dt) { return dt == PDT_BF16 ? "bf16" : dt == PDT_FP32 ? "fp32" : "i32"; }

int main(void) {
    int ngen = kernel_kind_count(), nrt = 0;
    while (plan_catalog_kind(nrt)) nrt++;
    CHECK(ngen == nrt && ngen > 20, "catalog: generator and runtime list the same number of kinds",
          "generator %d, runtime %d", ngen, nrt);
    for (int i = 0; i < ngen; i++) {
        const char *kind = kernel_kind_name(i);
        char what[96], why[256] = "";
        snprintf(what, sizeof what, "catalog %s: same operands and dtypes", kind);
        int o = 0;
        for (;; o++) {
            char gname[32], gdtype[8], rname[32];
            int rdt, opt, g = kernel_kind_operand(i, o, gname, sizeof gname, gdtype, sizeof gdtype);
            int r = plan_catalog_operand(kind, o, rname, sizeof rname, &rdt, &opt);
            if (r < 0) { snprintf(why, sizeof why, "the runtime's catalog lacks the kind"); break; }
            if (g != 0 && r != 0) break;
            if (g != 0 || r != 0) {
                snprintf(why, sizeof why, "operand %d: generator %s, runtime %s", o, g ? "(none)" : gname, r ? "(none)" : rname);
                break;
            }
            if (strcmp(gname, rname) || strcmp(gdtype, dtype_name(rdt))) {
                snprintf(why, sizeof why, "operand %d: generator %s:%s, runtime %s:%s", o, gname, gdtype, rname, dtype_name(rdt));
                break;
            }
        }
        CHECK(!why[0] && o > 0, what, "%s", why[0] ? why : "no operands");
    }
    for (int i = 0; i < nrt; i++) {
        const char *kind = plan_catalog_kind(i);
        int found = 0;
        for (int j = 0; j < ngen && !found; j++) found = !strcmp(kernel_kind_name(j), kind);
        if (!found) CHECK(0, "catalog: every runtime kind is known to the generator", "%s is not", kind);
    }
    for (int id = 0; id < KK_COUNT; id++) {
        char what[96], why[200] = "";
        snprintf(what, sizeof what, "catalog %s: extents, defaults and backward well formed",
                 kcat_name(id));
        row_well_formed(id, why, sizeof why);
        CHECK(!why[0], what, "%s", why);
    }
    /* the evaluator: sums of products, defaults through other defaults, rsqrt */
    int att = KK_ATTENTION_BWD;
    CHECK(kcat_eval(att, "2+batch*seq", row_lookup, &att) == 11 &&
              kcat_value(att, "lddq", few_lookup, NULL) == 8 &&
              kcat_value(att, "kv_heads", few_lookup, NULL) == 2 &&
              kcat_value(att, "scale", few_lookup, NULL) == 0.5 &&
              kcat_value(att, "batch", few_lookup, NULL) == 0,
          "catalog: expressions evaluate (2+3*3, lddq -> ldq -> heads*head_dim, scale -> rsqrt(4))",
          "wrong values");
    KcatOperand op;
    CHECK(kcat_operand(KK_RMSNORM_FWD, 4, &op) == 0 && !strcmp(op.key, "sumsq") && op.optional &&
          !strcmp(op.dtype, "fp32") && !strcmp(op.rows, "1") && !strcmp(op.ld, "rows"),
          "catalog: an optional fp32 operand with extents parses", "sumsq: %s:%s rows=%s ld=%s",
          op.key, op.dtype, op.rows, op.ld);
    KcatConst kc;
    CHECK(kcat_const_find(KK_RMSNORM_FWD, "eps", &kc) && kc.gen_optional && !kc.plan_optional &&
          kcat_const_find(KK_RMSNORM_FWD, "ldx", &kc) && kc.plan_optional &&
          kcat_const_find(KK_RMSNORM_FWD, "rows", &kc) && !kc.gen_optional,
          "catalog: required, plan-carried and optional constants", "eps, ldx or rows misread");
    char name[32];
    CHECK(plan_catalog_operand("no_such_kind", 0, name, sizeof name, NULL, NULL) == -1 &&
          plan_catalog_operand("rope", 1, name, sizeof name, NULL, NULL) == 1,
          "catalog: unknown kinds and operands past the last are reported", "wrong return codes");
    TEST_EXIT();
}
