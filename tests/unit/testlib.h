/* testlib.h: the few macros every C test uses. A test prints "ok - NAME" or "FAIL - NAME: why"
 * per check (tests/run.sh counts them) and exits non-zero when any check failed. */
#ifndef BOOST_TESTLIB_H
#define BOOST_TESTLIB_H
#include <stdio.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include "common/files.h"   /* defines: file_read_all */

static int tl_failed;

/* CHECK(cond, name, fmt, ...): one verdict line; fmt explains a failure. */
static void tl_check(int ok, const char *name, const char *fmt, ...) {
    if (ok) { printf("ok - %s\n", name); fflush(stdout); return; }
    tl_failed = 1;
    printf("FAIL - %s: ", name);
    va_list ap; va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
    printf("\n"); fflush(stdout);
}
#define CHECK(cond, name, ...) tl_check((cond) ? 1 : 0, (name), __VA_ARGS__)
/* tl_worst(w, e): the larger of a running worst error and a new one, NaN as soon as either is NaN
 * (fmax drops a NaN, so a NaN error would pass a `worst < tol` check). Tolerance checks are written
 * `worst < tol` or `!(worst <= tol)`, which a NaN fails. */
static inline double tl_worst(double w, double e) { return (w != w || e != e) ? NAN : (e > w ? e : w); }
#define TEST_EXIT() return tl_failed ? 1 : 0

/* tl_read_file(path, &len): the whole file, NUL-terminated (caller frees; len may be NULL), or NULL
 * when it cannot be read. tl_write_file(path, bytes, n): writes it (a failure shows in the check). */
static inline char *tl_read_file(const char *path, size_t *len) {
    char why[600];
    return file_read_all(path, (size_t)1 << 34, len, why, sizeof why);
}
static inline void tl_write_file(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(bytes, 1, n, f); fclose(f); }
}

/* tl_run_cmd(cmd, out, n): the shell command's stdout (at most n-1 bytes, NUL-terminated) and its
 * exit status, or -1 when it could not run or did not exit. */
static inline int tl_run_cmd(const char *cmd, char *out, size_t n) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t len = fread(out, 1, n - 1, f);
    out[len] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
