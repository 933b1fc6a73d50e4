/* moe_cases.h: the whole-model MoE checks shared by test_moe.c and test_moe_shared.c: finite
 * differences of the model loss (routing held fixed) and an independent float64 forward of the
 * tiny MoE blocks (E=4, top-2, CoLA rank 32, expert ffn 192) with or without shared factors.
 * Define CASE_DIR before including it. */
#ifndef BOOST_MOE_CASES_H
#define BOOST_MOE_CASES_H
#include "tests/unit/engine_cases.h"

/* The routing of every MoE layer (its sel and slot) after the last pass, as one vector. */
static int routing(Case *c, float *out) {
    char err[300], nm[64];
    int n = 0;
    for (int l = 0; l < c->p->layers; l++)
        for (int q = 0; q < 2; q++) {
            snprintf(nm, sizeof nm, "L%d.moe_%s", l, q ? "slot" : "sel");
            int t = plan_find_tensor(c->p, nm);
            if (t < 0) continue;
            int64_t k = c->p->tensors[t].rows * c->p->tensors[t].cols;
            if (n + k > (1 << 14) || engine_read_tensor(c->e, 0, nm, out + n, err, sizeof err)) return -1;
            n += (int)k;
        }
    return n;
}

/* Central differences of the loss wrt the largest-gradient entry of MoE canons and a few others;
 * a step that changes the routing (top-k or capacity, where the loss jumps) is halved. */
static void finite_differences(Case *c, const char *what, const char *const *names, int nnames) {
    if (!c->p) return;
    char err[1024];
    double num = 0, den = 0;
    int used = 0;
    for (int q = 0; q < nnames; q++) {
        int i = plan_find_canon(c->p, names[q]);
        if (i < 0) { CHECK(0, what, "no canon %s", names[q]); return; }
        const PlanCanon *pc = &c->p->canons[i];
        int64_t n = pc->rows * pc->cols, best = 0;
        float *p = malloc((size_t)n * sizeof *p);
        engine_get_canon(c->e, i, SLOT_PARAM, p);
        float lp = 0, lm = 0, l0, keep = 0;
        double eps = 0;
        static float r0[1 << 14], r1[1 << 14];
        engine_forward(c->e, case_tokens, case_targets, &l0, err, sizeof err);
        int nr = routing(c, r0), same = 0;
        /* the largest gradients first; the first entry whose steps keep the routing is used */
        for (int tries = 0; tries < 8 && !same; tries++) {
            best = -1;
            for (int64_t k = 0; k < n; k++) {
                if (c->grad[i][k] != c->grad[i][k]) continue;
                if (best < 0 || fabsf(c->grad[i][k]) > fabsf(c->grad[i][best])) best = k;
            }
            keep = p[best];
            eps = 1e-2 * fmax(fabs(keep), 0.05);
            p[best] = (float)(keep + eps); engine_set_canon(c->e, i, SLOT_PARAM, p);
            engine_forward(c->e, case_tokens, case_targets, &lp, err, sizeof err);
            same = routing(c, r1) == nr && !memcmp(r0, r1, (size_t)nr * sizeof *r0);
            p[best] = (float)(keep - eps); engine_set_canon(c->e, i, SLOT_PARAM, p);
            engine_forward(c->e, case_tokens, case_targets, &lm, err, sizeof err);
            same = same && routing(c, r1) == nr && !memcmp(r0, r1, (size_t)nr * sizeof *r0);
            p[best] = keep; engine_set_canon(c->e, i, SLOT_PARAM, p);
            if (!same) {
                int diff = 0;
                for (int q = 0; q < nr; q++) diff += r0[q] != r1[q];
                printf("# %s %s[%lld]: the routing changes in %d of %d entries at step %.3g\n", what, names[q], (long long)best, diff, nr, eps);
                c->grad[i][best] = NAN;   /* skip it next time (the gradient is re-read below) */
            }
        }
        engine_get_canon(c->e, i, SLOT_GRAD, c->grad[i]);
        if (!same) { CHECK(0, what, "%s: every probed entry changes the routing", names[q]); free(p); return; }
        p[best] = keep; engine_set_canon(c->e, i, SLOT_PARAM, p);
        free(p);
        double fd = ((double)lp - lm) / (2 * eps), g = c->grad[i][best];
        printf("# %s %s[%lld]: fd %.6g grad %.6g\n", what, names[q], (long long)best, fd, g);
        num += (fd - g) * (fd - g);
        den += fd * fd;
        used++;
    }
    char name[200];
    snprintf(name, sizeof name, "%s: finite differences of the model loss match the gradients (%d entries, MoE canons first)", what, used);
    CHECK(den > 0 && sqrt(num / den) < 3e-2, name, "norm-wise rel err %.3g", den > 0 ? sqrt(num / den) : -1.0);
}

/* ---------------------------------------------------------------- an independent forward */

static double *canon64(Case *c, const char *name, int64_t *rows, int64_t *cols) {
    int i = plan_find_canon(c->p, name);
    if (i < 0) return NULL;
    int64_t n = c->p->canons[i].rows * c->p->canons[i].cols;
    float *f = malloc((size_t)n * sizeof *f);
    double *d = malloc((size_t)n * sizeof *d);
    engine_get_canon(c->e, i, SLOT_PARAM, f);
    for (int64_t k = 0; k < n; k++) d[k] = f[k];
    free(f);
    if (rows) *rows = c->p->canons[i].rows;
    if (cols) *cols = c->p->canons[i].cols;
    return d;
}

static double *tensor64(Case *c, const char *name, int64_t n) {
    char err[300];
    float *f = malloc((size_t)n * sizeof *f);
    double *d = malloc((size_t)n * sizeof *d);
    if (engine_read_tensor(c->e, 0, name, f, err, sizeof err)) { printf("# %s\n", err); free(f); free(d); return NULL; }
    for (int64_t k = 0; k < n; k++) d[k] = f[k];
    free(f);
    return d;
}

/* Does the plan hold L{i}.shared.{factor}? */
static int canon64_exists(Case *c, int i, const char *factor) {
    char nm[96];
    snprintf(nm, sizeof nm, "L%d.shared.%s", i, factor);
    return plan_find_canon(c->p, nm) >= 0;
}

/* The router z-loss weight of the model under test (moe{z_loss=}); moe_block64 adds its term. */
static double case_zcoef;
static double case_zloss[2];   /* the float64 z-loss of layers 0 and 1 from the last independent_forward */

static double silu(double y) { return y / (1 + exp(-y)); }

/* out[n] = sigma(in[k] @ A[k, r]) @ B[r, n] (one low-rank CoLA projection of one row). */
static void cola_row(const double *in, int64_t k, const double *A, const double *B, int64_t r, int64_t n, double *out) {
    double *z = calloc((size_t)r, sizeof *z);
    for (int64_t a = 0; a < r; a++) {
        for (int64_t j = 0; j < k; j++) z[a] += in[j] * A[j * r + a];
        z[a] = silu(z[a]);
    }
    for (int64_t j = 0; j < n; j++) { out[j] = 0; for (int64_t a = 0; a < r; a++) out[j] += z[a] * B[a * n + j]; }
    free(z);
}

/* The MoE block of layer i from its input L{i}.h, in float64 from the catalog's math and the spec
 * (E=4, top-2 renormalised, capacity ceil(1.25*M*2/4), CoLA experts, gate*up, load-balance loss
 * 0.01): returns the relative error against the engine's L{i+1}.x; *aux gets the layer's
 * load-balance loss. `shared` (MOE_SHARE_* bits): every expert uses L{i}.shared.{gate.A, up.A,
 * down.B} for those factors (docs/moe.md: the same math, computed per expert here). */
static double moe_block64(Case *c, int i, double *aux, unsigned shared) {
    int64_t M = (int64_t)c->p->micro_batch * c->p->seq, d = c->p->hidden, E = 4, K = 2, r = 32;
    int64_t C = (int64_t)ceil(1.25 * (double)M * K / E), ff = 192;
    char nm[96];
    snprintf(nm, sizeof nm, "L%d.h", i);
    double *h = tensor64(c, nm, M * d);
    /* the block's output L{i+1}.x; the last one is read as final_x, its all-gathered copy (L2.x
       itself is dead after the gather, and the arena reuses it) */
    snprintf(nm, sizeof nm, "L%d.x", i + 1);
    if (i + 1 == c->p->layers) snprintf(nm, sizeof nm, "final_x");
    double *xo = tensor64(c, nm, M * d);
    snprintf(nm, sizeof nm, "L%d.mlp_norm", i);
    double *gamma = canon64(c, nm, NULL, NULL);
    snprintf(nm, sizeof nm, "L%d.router.W", i);
    double *wr = canon64(c, nm, NULL, NULL);
    double *fa[4][6];
    static const char *fn[6] = {"gate.A", "gate.B", "up.A", "up.B", "down.A", "down.B"};
    for (int e = 0; e < E; e++)
        for (int q = 0; q < 6; q++) {
            int sh = (q == 0 && (shared & 1)) || (q == 2 && (shared & 2)) || (q == 5 && (shared & 4));
            if (sh) snprintf(nm, sizeof nm, "L%d.shared.%s", i, fn[q]);
            else snprintf(nm, sizeof nm, "L%d.e%d.%s", i, e, fn[q]);
            fa[e][q] = canon64(c, nm, NULL, NULL);
            if (!fa[e][q]) { printf("# no canon %s\n", nm); return 1e9; }
            if (!sh && (q == 0 || q == 2 || q == 5) && canon64_exists(c, i, fn[q])) { printf("# %s is shared in the plan\n", fn[q]); return 1e9; }
        }
    if (!h || !xo || !gamma || !wr) return 1e9;
    double *xn = malloc((size_t)(M * d) * sizeof *xn), *y = calloc((size_t)(M * d), sizeof *y);
    double f[4] = {0}, P[4] = {0}, zl = 0;
    int64_t count[4] = {0};
    double *g = malloc((size_t)ff * sizeof *g), *u = malloc((size_t)ff * sizeof *u), *o = malloc((size_t)d * sizeof *o);
    for (int64_t m = 0; m < M; m++) {
        double ss = 0;
        for (int64_t j = 0; j < d; j++) ss += h[m * d + j] * h[m * d + j];
        double rs = 1 / sqrt(ss / d + 1e-5);
        for (int64_t j = 0; j < d; j++) xn[m * d + j] = h[m * d + j] * rs * gamma[j];
        double lg[4], p[4], mx = -1e300, se = 0;
        for (int e = 0; e < E; e++) { lg[e] = 0; for (int64_t j = 0; j < d; j++) lg[e] += xn[m * d + j] * wr[j * E + e]; mx = fmax(mx, lg[e]); }
        for (int e = 0; e < E; e++) se += exp(lg[e] - mx);
        for (int e = 0; e < E; e++) { p[e] = exp(lg[e] - mx) / se; P[e] += p[e] / M; }
        zl += case_zcoef * (mx + log(se)) * (mx + log(se)) / M;
        int s0 = 0, s1 = -1;
        for (int e = 1; e < E; e++) if (p[e] > p[s0]) s0 = e;
        for (int e = 0; e < E; e++) if (e != s0 && (s1 < 0 || p[e] > p[s1])) s1 = e;
        int sel[2] = {s0, s1};
        for (int k = 0; k < K; k++) {
            int e = sel[k];
            f[e] += 1.0 / (M * K);
            if (count[e]++ >= C) continue;   /* over capacity: dropped */
            double gate = p[e] / (p[s0] + p[s1]);
            cola_row(xn + m * d, d, fa[e][0], fa[e][1], r, ff, g);
            cola_row(xn + m * d, d, fa[e][2], fa[e][3], r, ff, u);
            for (int64_t j = 0; j < ff; j++) g[j] *= u[j];
            cola_row(g, ff, fa[e][4], fa[e][5], r, d, o);
            for (int64_t j = 0; j < d; j++) y[m * d + j] += gate * o[j];
        }
    }
    *aux = 0;
    for (int e = 0; e < E; e++) *aux += 0.01 * E * f[e] * P[e];
    if (i < 2) case_zloss[i] = zl;
    *aux += zl;
    double num = 0, den = 0;
    for (int64_t k = 0; k < M * d; k++) {
        double want = h[k] + y[k];
        num += (xo[k] - want) * (xo[k] - want); den += want * want;
    }
    free(h); free(xo); free(gamma); free(wr); free(xn); free(y); free(g); free(u); free(o);
    for (int e = 0; e < E; e++) for (int q = 0; q < 6; q++) free(fa[e][q]);
    return sqrt(num / den);
}

/* The loss from the last residual (final norm, LM head, cross-entropy) plus the layers'
 * load-balance losses, in float64, against the engine's forward loss. */
static void independent_forward(Case *c, unsigned shared, const char *what) {
    if (!c->p) return;
    char err[300];
    float loss;
    engine_forward(c->e, case_tokens, case_targets, &loss, err, sizeof err);
    double aux[2], e0 = moe_block64(c, 0, &aux[0], shared), e1 = moe_block64(c, 1, &aux[1], shared);
    char name[300];
    snprintf(name, sizeof name, "%s: the MoE blocks' outputs match a float64 forward written from the catalog", what);
    CHECK(e0 <= 1e-5 && e1 <= 1e-5, name, "rel err L0 %.3g, L1 %.3g", e0, e1);
    int64_t M = (int64_t)c->p->micro_batch * c->p->seq, d = c->p->hidden, V = c->p->vocab;
    double *x = tensor64(c, "final_x", M * d), *gam = canon64(c, "final_norm", NULL, NULL), *head = canon64(c, "head", NULL, NULL);
    if (!x || !gam || !head) { CHECK(0, "independent forward", "missing tensors"); return; }
    double xent = 0, *xf = malloc((size_t)d * sizeof *xf), *lg = malloc((size_t)V * sizeof *lg);
    for (int64_t m = 0; m < M; m++) {
        double ss = 0;
        for (int64_t j = 0; j < d; j++) ss += x[m * d + j] * x[m * d + j];
        double rs = 1 / sqrt(ss / d + 1e-5), mx = -1e300, se = 0;
        for (int64_t j = 0; j < d; j++) xf[j] = x[m * d + j] * rs * gam[j];
        for (int64_t v = 0; v < V; v++) { lg[v] = 0; for (int64_t j = 0; j < d; j++) lg[v] += xf[j] * head[j * V + v]; mx = fmax(mx, lg[v]); }
        for (int64_t v = 0; v < V; v++) se += exp(lg[v] - mx);
        xent += (mx + log(se) - lg[case_targets[m]]) / M;
    }
    double want = xent + aux[0] + aux[1];
    snprintf(name, sizeof name, "%s: engine loss = float64 cross-entropy + both layers' load-balance losses", what);
    CHECK(fabs(loss - want) <= 2e-6 * want && aux[0] > 0.009 && aux[1] > 0.009, name,
          "engine %.9g, float64 %.9g (xent %.9g, aux %.6g + %.6g)", loss, want, xent, aux[0], aux[1]);
    free(x); free(gam); free(head); free(xf); free(lg);
}

/* The whole-model checks of one MoE run spec, `model` in the check names: finite differences of
 * fd_names on 32 tokens at tp=1 and 2; the float64 forward at tp=1 (shared: independent_forward's
 * shared-factor argument); checkpoint=lowrank, tp=2, tp=4 (and its steps), grad_accum=2 against
 * tp=1; with tp4_defs, one more tp=4 case (-D settings tp4_defs, named "tp=4 tp4_what"). */
__attribute__((unused)) static void whole_model_checks(const char *spec_path, const char *model,
                                                       const char *const *fd_names, int nfd,
                                                       unsigned shared, const char *tp4_defs,
                                                       const char *tp4_what) {
    Case ref, c;
    char what[200], defs[256];   /* what: short enough for the check names built on it */
    /* finite differences on 32 tokens (fewer near-ties in the routing) */
    if (open_case(&ref, spec_path, "-D tp=1 -D micro_batch=1 -D seq=32") == 0) {
        snprintf(what, sizeof what, "%s btp tp=1, 32 tokens", model);
        finite_differences(&ref, what, fd_names, nfd);
        snprintf(what, sizeof what, "%s btp tp=2, 32 tokens", model);
        if (!open_case(&c, spec_path, "-D tp=2 -D micro_batch=1 -D seq=32"))
            finite_differences(&c, what, fd_names, nfd);
        close_case(&c);
    }
    close_case(&ref);
    if (open_case(&ref, spec_path, "-D tp=1 -D checkpoint=none") != 0) {
        close_case(&ref);
        return;
    }
    snprintf(what, sizeof what, "%s tp=1", model);
    independent_forward(&ref, shared, what);
    snprintf(what, sizeof what, "%s tp=1 checkpoint=lowrank vs none", model);
    if (!open_case(&c, spec_path, "-D tp=1")) compare(&c, &ref, what);
    close_case(&c);
    snprintf(what, sizeof what, "%s btp tp=2 vs tp=1", model);
    if (!open_case(&c, spec_path, "-D tp=2")) compare(&c, &ref, what);
    close_case(&c);
    snprintf(what, sizeof what, "%s btp tp=4 vs tp=1", model);
    if (!open_case(&c, spec_path, "-D tp=4")) {
        compare(&c, &ref, what);
        compare_steps(&c, &ref, what);
    }
    close_case(&c);
    if (tp4_defs) {
        snprintf(defs, sizeof defs, "-D tp=4 %s", tp4_defs);
        snprintf(what, sizeof what, "%s btp tp=4 %s vs tp=1", model, tp4_what);
        if (!open_case(&c, spec_path, defs)) compare(&c, &ref, what);
        close_case(&c);
    }
    snprintf(what, sizeof what,
             "%s btp tp=2 grad_accum=2, the same micro-batch twice, vs tp=1 once", model);
    if (!open_case(&c, spec_path, "-D tp=2 -D grad_accum=2")) {
        again(&c);
        compare(&c, &ref, what);
    }
    close_case(&c);
    close_case(&ref);
}

#endif
