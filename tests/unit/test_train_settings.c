/* test_train_settings.c: one table of training settings (common/train_settings.h) for the spec
 * loader and the plan loader. A plan whose train and data lines give only steps, lr and the data
 * path gets every other setting as a spec that gives only those does (and the closed values: weight
 * decay 0.1, clip 1, min_lr = lr/10); out-of-range values in a plan's train line are refused with
 * the spec's wording; the table's bounds match what the spec loader accepts at each edge. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tests/unit/testlib.h"
#include "gen/gen.h"
#include "runtime/plan.h"
#include "common/train_settings.h"

#define DIR "build/tmp/train_settings"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
}

/* generated/tiny-cola/plan.txt with its train and data lines replaced; NULL when unreadable. */
static Plan *plan_with(const char *train_line, const char *data_line, char *err, size_t n) {
    FILE *in = fopen("generated/tiny-cola/plan.txt", "r"), *out = fopen(DIR "/plan.txt", "w");
    if (!in || !out) { if (in) fclose(in); if (out) fclose(out); snprintf(err, n, "cannot copy the plan"); return NULL; }
    char line[8192];
    while (fgets(line, sizeof line, in)) {
        if (!strncmp(line, "train ", 6)) fprintf(out, "%s\n", train_line);
        else if (!strncmp(line, "data ", 5)) fprintf(out, "%s\n", data_line);
        else fputs(line, out);
    }
    fclose(in); fclose(out);
    return plan_load(DIR "/plan.txt", err, n);
}

static void defaults_agree(void) {
    static Run run;
    char err[2048];
    write_file(DIR "/few.lua", "return run { model = 'tiny-cola', train = { steps = 200, lr = 3e-3 }, data = 'corpus' }\n");
    int rc = spec_load_run(DIR "/few.lua", NULL, 0, &run, err, sizeof err);
    Plan *p = plan_with("train steps=200 lr=0.003", "data path=corpus", err, sizeof err);
    if (rc || !p) { CHECK(0, "plan lacking keys: loads", "spec rc %d, plan %s: %s", rc, p ? "ok" : "refused", err); plan_free(p); return; }
    int same = p->min_lr == run.min_lr && p->warmup == run.warmup && p->beta1 == run.beta1 && p->beta2 == run.beta2 &&
               p->adam_eps == run.adam_eps && p->weight_decay == run.weight_decay && p->clip == run.clip &&
               p->eval_every == run.eval_every && p->max_bad_steps == run.max_bad_steps && p->val_fraction == run.val_fraction;
    same = same && p->spike_window == run.spike_window && p->spike_window == 0 &&
           p->spike_z == run.spike_z &&
               p->spike_rollback_after == run.spike_rollback_after &&
               p->spike_max_rollbacks == run.spike_max_rollbacks;
    CHECK(same, "plan lacking keys: every default is the spec's",
          "plan min_lr %g warmup %d wd %g clip %g eval_every %d val %g; spec %g %d %g %g %d %g", p->min_lr, p->warmup,
          p->weight_decay, p->clip, p->eval_every, p->val_fraction, run.min_lr, run.warmup, run.weight_decay, run.clip,
          run.eval_every, run.val_fraction);
    CHECK(p->weight_decay == 0.1 && p->clip == 1 && fabs(p->min_lr - 3e-4) < 1e-15 && p->max_bad_steps == 5,
          "plan lacking keys: weight decay 0.1, clip 1, min_lr lr/10", "wd %g clip %g min_lr %g", p->weight_decay, p->clip,
          p->min_lr);
    plan_free(p);
}

static void plan_refuses(const char *train_line, const char *want, const char *name) {
    char err[2048] = "";
    Plan *p = plan_with(train_line, "data path=corpus val_fraction=0.1", err, sizeof err);
    CHECK(!p && strstr(err, want) && strstr(err, "plan.txt:"), name, "%s: %s", p ? "loaded" : "refused", err);
    plan_free(p);
}

/* 0 when the spec loader takes tiny-cola with -D NAME=V, else its status. */
static int spec_takes(const char *name, double v, char *err, size_t n) {
    static Run run;
    static char def[64];
    Override ov;
    memset(&run, 0, sizeof run);
    snprintf(def, sizeof def, "%s=%.17g", name, v);
    if (parse_override(def, &ov, err, n) < 0) return 2;
    return spec_load_run("tiny-cola", &ov, 1, &run, err, n);
}

/* The spec loader accepts a setting's bounds and refuses just past them, as the table says. */
static void spec_edges(void) {
    char err[2048] = "", name[128];
    for (const TrainSetting *s = TRAIN_SETTINGS; s->name; s++) {
        if (!strcmp(s->name, "min_lr")) continue;   /* bounded by lr too */
        double hi_out = s->integer ? s->hi + 1 : s->hi * 1.01, lo_out = s->integer ? s->lo - 1 : s->lo - 0.01;
        const char *why = NULL;
        if (spec_takes(s->name, s->open_lo ? s->hi : s->lo, err, sizeof err)) why = "an edge refused";
        else if (!spec_takes(s->name, hi_out, err, sizeof err)) why = "past hi taken";
        else if (!spec_takes(s->name, s->open_lo ? s->lo : lo_out, err, sizeof err)) why = "past lo taken";
        snprintf(name, sizeof name, "spec loader takes %s's bounds from the table", s->name);
        CHECK(!why, name, "%s: %s", why, err);
    }
}

int main(void) {
    mkdir("build", 0755); mkdir("build/tmp", 0755); mkdir(DIR, 0755);
    defaults_agree();
    plan_refuses("train steps=200 lr=-1", "lr must be a number > 0 and <= 10, got -1", "plan train line: lr=-1 refused");
    plan_refuses("train steps=200 lr=0.003 beta1=2", "beta1 must be a number >= 0 and <= 0.999999, got 2",
                 "plan train line: beta1=2 refused");
    plan_refuses("train steps=200 lr=0.003 clip=-1", "clip must be a number >= 0 and <= 1e+09, got -1",
                 "plan train line: clip=-1 refused");
    plan_refuses("train steps=200 lr=0.003 min_lr=0.01", "min_lr=0.01 must not exceed lr=0.003", "plan train line: min_lr > lr refused");
    spec_edges();
    TEST_EXIT();
}
