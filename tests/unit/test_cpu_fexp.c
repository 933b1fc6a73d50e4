/* test_cpu_fexp.c: the CPU backend's vectorising exp (fexp in runtime/cpu_kernels.c, included here
 * to reach the static function) on the inputs of a diverging run: NaN and the infinities, built
 * with UBSan's shift and float-cast checks (Makefile), which stop the test on an undefined shift
 * or conversion; on finite inputs against libm's exp in double (within 4 ulp); and at the top of
 * the range, where it must overflow where libm's expf does: finite up to the largest x whose expf
 * is finite (found by stepping float by float), +inf from the next float up, within 4 ulp below. */
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
    for (int i = 0; i <= 20000; i++) {   /* [-87, 88]: the normal range */
        volatile float x = -87.0f + 175.0f * (float)i / 20000.0f;
        float y = fexp(x);
        double ref = exp((double)x), ulp = nextafterf((float)ref, INFINITY) - (float)ref;
        worst = tl_worst(worst, fabs((double)y - ref) / ulp);
        sink = y;
    }
    CHECK(worst <= 4, "fexp_finite_within_4_ulp", "worst error %.2f ulp", worst);

    /* the overflow threshold: libm's expf is the reference (not fexp's own constant) */
    volatile float top = 88.0f;
    while (isfinite(expf(nextafterf(top, INFINITY)))) top = nextafterf(top, INFINITY);
    volatile float above = nextafterf(top, INFINITY);
    CHECK(isfinite(expf(top)) && isinf(expf(above)) && top > 88.7f && top < 88.75f,
          "libm_expf_threshold_found", "expf finite up to %.9g", top);
    CHECK(isfinite(fexp(top)) && isinf(fexp(above)) && fexp(above) > 0,
          "fexp_overflows_where_expf_does", "fexp(%.9g) = %g, fexp(%.9g) = %g (expf: %g, %g)", top,
          fexp(top), above, fexp(above), expf(top), expf(above));
    double worst_top = 0;
    int non_finite = 0;
    for (volatile float x = 88.0f; x <= top; x = nextafterf(x, INFINITY)) {   /* every float */
        float y = fexp(x);
        double ref = exp((double)x), ulp = nextafterf((float)ref, INFINITY) - (float)ref;
        non_finite += !isfinite(y);
        worst_top = tl_worst(worst_top, fabs((double)y - ref) / ulp);
    }
    CHECK(non_finite == 0 && worst_top <= 4, "fexp_finite_up_to_the_threshold_within_4_ulp",
          "%d inputs in [88, %.9g] gave inf; worst error %.2f ulp", non_finite, top, worst_top);
    TEST_EXIT();
}
