/* test_hooks.h: the variables the tests set to reach a path a real run meets rarely (BOOST_TEST_*),
 * each behind one named accessor so a reader finds every hook here. Unset, each does nothing. */
#ifndef BOOST_TEST_HOOKS_H
#define BOOST_TEST_HOOKS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* BOOST_TEST_SKIP_COLL_WAIT: 1 ("1") leaves out every collective's wait, 2 ("gather") only the
 * ZeRO-1 gathers' (the overlap tests show that a check then fails); 0 unset. */
static inline int test_hook_skip_coll_wait(void) {
    const char *s = getenv("BOOST_TEST_SKIP_COLL_WAIT");
    return s && *s == '1' ? 1 : s && !strcmp(s, "gather") ? 2 : 0;
}

/* BOOST_TEST_CKPT_SLEEP_MS: milliseconds each checkpoint save sleeps after each rank file (a test
 * stops a run mid-save); 0 unset. */
static inline long test_hook_ckpt_sleep_ms(void) {
    const char *s = getenv("BOOST_TEST_CKPT_SLEEP_MS");
    long ms = s ? atol(s) : 0;
    return ms > 0 ? ms : 0;
}

/* BOOST_TEST_SPIKE_BATCHES: "12,13": the global batches (1-based) whose loss is raised as a bad
 * batch would (runtime/train.c); NULL unset. */
static inline const char *test_hook_spike_batches(void) {
    return getenv("BOOST_TEST_SPIKE_BATCHES");
}

/* BOOST_TEST_SLOW_RANK=R:MS: grid rank R sleeps MS ms at the start of each training pass
 * (runtime/exec.c; the straggler check names it). 0 and *rank -1 unset. */
static inline int test_hook_slow_rank(int *rank) {
    const char *s = getenv("BOOST_TEST_SLOW_RANK");
    int r, ms;
    *rank = -1;
    if (!s || sscanf(s, "%d:%d", &r, &ms) != 2 || ms <= 0) return 0;
    *rank = r;
    return ms;
}

#endif
