/* test_cpu_fexp.c: the CPU backend's vectorising exp (fexp in runtime/cpu_kernels.c, included here
 * to reach the static function) on the inputs of a diverging run: NaN and the infinities, built
 * with UBSan's shift and float-cast checks (Makefile), which stop the test on an undefined shift
 * or conversion; and on finite inputs against libm's exp in double (within 4 ulp). */
#include "runtime/cpu_kernels.c"
#include "tests/unit/testlib.h"

static volatile float sink;   /* the inputs come from memory: nothing is folded at compile time */

int main(void) {
    volatile float nan_in = NAN, pinf = INFINITY, ninf = -INFINITY, big = 1e30f, small = -1e30f;
    float r = fexp(nan_in);
    CHECK(r != r, "fexp_nan_is_nan", "fexp(NaN) = %g", r);
    r = fexp(-nan_in);
    CHECK(r != r, "fexp_negative_nan_is_nan", "fexp(-NaN) = %g", r);
    CHECK(isinf(fexp(pinf)) && fexp(pinf) > 0, "fexp_inf_is_inf", "fexp(inf) = %g", fexp(pinf));
    CHECK(fexp(ninf) == 0, "fexp_minus_inf_is_0", "fexp(-inf) = %g", fexp(ninf));
    CHECK(isinf(fexp(big)) && fexp(small) == 0, "fexp_far_out_of_range", "fexp(1e30) = %g, fexp(-1e30) = %g",
          fexp(big), fexp(small));
    double worst = 0;
    for (int i = 0; i <= 20000; i++) {   /* [-87, 88]: the normal range (2^n overflows past 88.03) */
        volatile float x = -87.0f + 175.0f * (float)i / 20000.0f;
        float y = fexp(x);
        double ref = exp((double)x), ulp = nextafterf((float)ref, INFINITY) - (float)ref;
        worst = tl_worst(worst, fabs((double)y - ref) / ulp);
        sink = y;
    }
    CHECK(worst <= 4, "fexp_finite_within_4_ulp", "worst error %.2f ulp", worst);
    TEST_EXIT();
}
