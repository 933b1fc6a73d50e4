/* test_catalog.c: the kernel catalog exists twice, on each side of the plan file (gen/kernels.c emits
 * kernels, runtime/plan.c checks plans and orders the CUDA launch arguments); both must name the
 * same kinds with the same operands, in the same order, with the same default storage dtypes. */
#include <string.h>
#include "gen/kernels.h"
#include "runtime/plan.h"
#include "tests/unit/testlib.h"

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
            const char *gname, *gdtype;
            char rname[32];
            int rdt, opt, g = kernel_kind_operand(i, o, &gname, &gdtype);
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
    char name[32];
    CHECK(plan_catalog_operand("no_such_kind", 0, name, sizeof name, NULL, NULL) == -1 &&
          plan_catalog_operand("rope", 1, name, sizeof name, NULL, NULL) == 1,
          "catalog: unknown kinds and operands past the last are reported", "wrong return codes");
    TEST_EXIT();
}
