/* train_settings.c: the training settings' table and its checks (common/train_settings.h), shared
 * by the spec loader and the runtime. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/train_settings.h"

#define TRAIN_ROW(name, integer, lo, hi, open_lo, dflt, help)                                      \
    {#name, integer, lo, hi, open_lo, dflt, help, 0},
#define DATA_ROW(name, integer, lo, hi, open_lo, dflt, help)                                       \
    {#name, integer, lo, hi, open_lo, dflt, help, 1},
const TrainSetting TRAIN_SETTINGS[] = {
    TRAIN_SETTING_ROWS(TRAIN_ROW)
    DATA_SETTING_ROWS(DATA_ROW)
    {NULL, 0, 0, 0, 0, NULL, NULL, 0},
};

const TrainSetting *train_setting(const char *name) {
    for (const TrainSetting *s = TRAIN_SETTINGS; s->name; s++)
        if (!strcmp(s->name, name)) return s;
    return NULL;
}

void train_setting_bounds(int integer, double lo, double hi, int open_lo, char *buf, size_t n) {
    if (integer) snprintf(buf, n, "an integer from %.17g to %.17g", lo, hi);
    else snprintf(buf, n, "a number %s %g and <= %g", open_lo ? ">" : ">=", lo, hi);
}

int train_setting_ok(const TrainSetting *s, double v) {
    if (!isfinite(v) || (s->integer && v != floor(v))) return 0;
    return !(v > s->hi || v < s->lo || (s->open_lo && v <= s->lo));
}

int train_setting_parse(const TrainSetting *s, const char *text, double *out, char *msg, size_t n) {
    char want[96], *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno == ERANGE || !train_setting_ok(s, v)) {
        train_setting_bounds(s->integer, s->lo, s->hi, s->open_lo, want, sizeof want);
        snprintf(msg, n, "%s must be %s, got %s", s->name, want, *text ? text : "nothing");
        return 2;
    }
    *out = v;
    return 0;
}

double train_setting_default(const TrainSetting *s, double lr) {
    return s->dflt ? strtod(s->dflt, NULL) : lr / 10;
}

void train_setting_names(char *buf, size_t n) {
    size_t k = 0;
    if (n) buf[0] = 0;
    for (const TrainSetting *s = TRAIN_SETTINGS; s->name && k + 1 < n; s++) {
        int w = snprintf(buf + k, n - k, "%s%s", k ? ", " : "", s->name);
        if (w < 0) break;
        k += (size_t)w;
    }
}
