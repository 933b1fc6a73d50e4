/* test_numerics_engine.c: the Engine on the CPU backend, on the hand-made plan of test_plan_tiny.h
 * (embedding -> RMSNorm -> vocab-parallel head -> cross-entropy): TP-invariant init against the
 * documented counter-based normal, loss against a direct computation, tp=1/2/4 equality of loss and
 * canonical gradients, finite differences of the whole loss, AdamW + clipping + schedule against
 * their formulas, gradient accumulation, canon round trips, collective bytes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tests/unit/testlib.h"
#include "tests/unit/test_plan_tiny.h"
#include "runtime/runtime.h"

static int32_t tokens[TINY_M], targets[TINY_M], tokens2[TINY_M], targets2[TINY_M];

typedef struct { Plan *p; Engine *e; } Run;

static Run open_run(int tp, int accum) {
    char path[128], err[1024];
    snprintf(path, sizeof path, "build/tmp/engine_tiny_tp%d_acc%d.txt", tp, accum);
    write_tiny_plan(path, tp, accum);
    Run r = {plan_load(path, err, sizeof err), NULL};
    if (!r.p) { printf("FAIL - load %s: %s\n", path, err); exit(1); }
    r.e = engine_create(r.p, "cpu", err, sizeof err);
    if (!r.e || engine_init_params(r.e, err, sizeof err)) { printf("FAIL - engine tp=%d: %s\n", tp, err); exit(1); }
    return r;
}
static void close_run(Run r) { engine_free(r.e); plan_free(r.p); }

static float *canon(Run r, const char *name, int slot) {
    int c = plan_find_canon(r.p, name);
    float *f = malloc((size_t)(r.p->canons[c].rows * r.p->canons[c].cols) * sizeof *f);
    engine_get_canon(r.e, c, slot, f);
    return f;
}
static int64_t canon_n(Run r, const char *name) {
    int c = plan_find_canon(r.p, name);
    return r.p->canons[c].rows * r.p->canons[c].cols;
}

static double rel(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); den += (double)b[i] * b[i]; }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

static float fb(Run r, const int32_t *tk, const int32_t *tg) {
    char err[1024];
    float loss = NAN;
    if (engine_forward_backward(r.e, tk, tg, &loss, err, sizeof err)) printf("FAIL - forward_backward: %s\n", err);
    return loss;
}
static float fwd(Run r) {
    char err[1024];
    float loss = NAN;
    if (engine_forward(r.e, tokens, targets, &loss, err, sizeof err)) printf("FAIL - forward: %s\n", err);
    return loss;
}

/* The documented N(seed, idx), written here from docs/plan-format.md. */
static uint64_t sm64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double doc_normal(uint64_t seed, uint64_t idx) {
    double u1 = (double)(sm64(seed ^ (2 * idx)) >> 11) / 9007199254740992.0;
    double u2 = (double)(sm64(seed ^ (2 * idx + 1)) >> 11) / 9007199254740992.0;
    return sqrt(-2 * log(1 - u1)) * cos(2 * 3.14159265358979323846 * u2);
}

/* The model's loss computed directly from canonical tensors, in double. */
static double direct_loss(const float *embed, const float *gamma, const float *head) {
    double total = 0;
    for (int m = 0; m < TINY_M; m++) {
        const float *x = embed + tokens[m] * TINY_D;
        double s = 0, xn[TINY_D], logit[TINY_V], mx = -1e300, se = 0;
        for (int j = 0; j < TINY_D; j++) s += (double)x[j] * x[j];
        double r = 1 / sqrt(s / TINY_D + 1e-5);
        for (int j = 0; j < TINY_D; j++) xn[j] = x[j] * r * gamma[j];
        for (int v = 0; v < TINY_V; v++) {
            logit[v] = 0;
            for (int j = 0; j < TINY_D; j++) logit[v] += xn[j] * head[j * TINY_V + v];
            if (logit[v] > mx) mx = logit[v];
        }
        for (int v = 0; v < TINY_V; v++) se += exp(logit[v] - mx);
        total += mx + log(se) - logit[targets[m]];
    }
    return total / TINY_M;
}

static const char *NAMES[3] = {"embed", "final_norm", "head"};

int main(void) {
    mkdir("build", 0755);
    mkdir("build/tmp", 0755);
    for (int i = 0; i < TINY_M; i++) {
        tokens[i] = (i * 7 + 3) % TINY_V; targets[i] = (i * 5 + 1) % TINY_V;
        tokens2[i] = (i * 3 + 11) % TINY_V; targets2[i] = (i * 11 + 2) % TINY_V;
    }
    tokens[5] = tokens[1];   /* a repeated token: embedding_bwd must accumulate */

    Run r1 = open_run(1, 1), r2 = open_run(2, 1), r4 = open_run(4, 1);
    CHECK(!strcmp(engine_backend_name(r1.e), "cpu"), "the cpu backend is used", "%s", engine_backend_name(r1.e));

    /* init: the documented N(seed, idx) and ones; identical at every TP degree */
    float *e1 = canon(r1, "embed", SLOT_PARAM), *h1 = canon(r1, "head", SLOT_PARAM), *g1 = canon(r1, "final_norm", SLOT_PARAM);
    double d = 0;
    for (int i = 0; i < 16 * 8; i++) d = tl_worst(d, fabs(e1[i] - 0.5 * doc_normal(0x1234567, (uint64_t)i)));
    for (int i = 0; i < 8 * 16; i++) d = tl_worst(d, fabs(h1[i] - 0.5 * doc_normal(0xabcdef, (uint64_t)i)));
    for (int i = 0; i < 8; i++) d = tl_worst(d, fabs(g1[i] - 1.0));
    CHECK(d < 1e-6, "init: element (i,j) = std * N(seed, i*K+j) from the documented formula; norms ones", "max diff %g", d);
    float *h2 = canon(r2, "head", SLOT_PARAM), *h4 = canon(r4, "head", SLOT_PARAM);
    CHECK(!memcmp(h1, h2, 128 * sizeof(float)) && !memcmp(h1, h4, 128 * sizeof(float)), "init is TP-invariant (tp=1, 2, 4 gather the same head)", "differs");

    /* losses */
    float l1 = fb(r1, tokens, targets), l2 = fb(r2, tokens, targets), l4 = fb(r4, tokens, targets);
    double ref = direct_loss(e1, g1, h1);
    CHECK(fabs(l1 - ref) < 1e-5 * fabs(ref), "tp=1 loss == the model's loss computed directly", "%.9g vs %.9g", l1, ref);
    CHECK(fabs(l2 - l1) < 1e-6 * fabs(l1) && fabs(l4 - l1) < 1e-6 * fabs(l1), "loss at tp=2 and tp=4 == tp=1", "%.9g %.9g %.9g", l1, l2, l4);
    float lf = fwd(r2);
    CHECK(lf == l2, "forward-only gives the same loss", "%.9g vs %.9g", lf, l2);

    /* canonical gradients equal across TP */
    for (int k = 0; k < 3; k++) {
        float *a = canon(r1, NAMES[k], SLOT_GRAD), *b = canon(r2, NAMES[k], SLOT_GRAD), *c = canon(r4, NAMES[k], SLOT_GRAD);
        int64_t n = canon_n(r1, NAMES[k]);
        double nn = 0;
        for (int64_t i = 0; i < n; i++) nn += a[i] * a[i];
        char name[128];
        snprintf(name, sizeof name, "canonical gradient of %s: tp=2 and tp=4 == tp=1 (norm-wise < 1e-5)", NAMES[k]);
        CHECK(nn > 0 && rel(b, a, n) < 1e-5 && rel(c, a, n) < 1e-5, name, "|g|^2=%g rel %g %g", nn, rel(b, a, n), rel(c, a, n));
        free(a); free(b); free(c);
    }

    /* finite differences of the whole loss wrt a few canonical entries, at tp=1 and tp=2 */
    for (int which = 0; which < 2; which++) {
        Run r = which ? r2 : r1;
        double num = 0, den = 0;
        for (int k = 0; k < 3; k++) {
            int c = plan_find_canon(r.p, NAMES[k]);
            int64_t n = canon_n(r, NAMES[k]);
            float *p = canon(r, NAMES[k], SLOT_PARAM), *g = canon(r, NAMES[k], SLOT_GRAD);
            int64_t picks[4] = {1 % n, (n / 3) % n, (n / 2 + 1) % n, n - 1};
            if (k == 0) { picks[0] = tokens[1] * TINY_D + 2; picks[1] = tokens[0] * TINY_D; }  /* rows that are used */
            for (int s = 0; s < 4; s++) {
                int64_t i = picks[s];
                float keep = p[i];
                double eps = 1e-2;
                p[i] = (float)(keep + eps); engine_set_canon(r.e, c, SLOT_PARAM, p);
                double lp = fwd(r);
                p[i] = (float)(keep - eps); engine_set_canon(r.e, c, SLOT_PARAM, p);
                double lm = fwd(r);
                p[i] = keep; engine_set_canon(r.e, c, SLOT_PARAM, p);
                double fd = (lp - lm) / (2 * eps);
                num += (fd - g[i]) * (fd - g[i]);
                den += fd * fd;
            }
            free(p); free(g);
        }
        char name[96];
        snprintf(name, sizeof name, "finite differences of the model loss == engine gradients (tp=%d)", which ? 2 : 1);
        CHECK(sqrt(num / den) < 1e-2, name, "rel err %g", sqrt(num / den));
    }

    /* gradient accumulation: two micro-batches with grad_accum=2 == mean of the two single gradients */
    {
        Run a = open_run(2, 2), b = open_run(2, 1);
        fb(a, tokens, targets); fb(a, tokens2, targets2);
        float *ga = canon(a, "head", SLOT_GRAD);
        fb(b, tokens, targets);
        float *gb1 = canon(b, "head", SLOT_GRAD);
        char err[512];
        float gn, lr;
        engine_optimizer_step(b.e, 0, &gn, &lr, err, sizeof err);   /* zeroes the grads */
        engine_set_canon(b.e, plan_find_canon(b.p, "head"), SLOT_PARAM, h1);
        engine_set_canon(b.e, plan_find_canon(b.p, "embed"), SLOT_PARAM, e1);
        engine_set_canon(b.e, plan_find_canon(b.p, "final_norm"), SLOT_PARAM, g1);
        fb(b, tokens2, targets2);
        float *gb2 = canon(b, "head", SLOT_GRAD);
        float mean[128];
        for (int i = 0; i < 128; i++) mean[i] = 0.5f * (gb1[i] + gb2[i]);
        CHECK(rel(ga, mean, 128) < 1e-6, "grad_accum=2: accumulated gradient == mean of the micro-batch gradients", "rel %g", rel(ga, mean, 128));
        free(ga); free(gb1); free(gb2);
        close_run(a); close_run(b);
    }

    /* optimizer: norm over canonical grads, clipping, AdamW at t=1, schedule */
    {
        double sq = 0;
        float *g[3], *p[3];
        for (int k = 0; k < 3; k++) {
            g[k] = canon(r2, NAMES[k], SLOT_GRAD); p[k] = canon(r2, NAMES[k], SLOT_PARAM);
            for (int64_t i = 0; i < canon_n(r2, NAMES[k]); i++) sq += (double)g[k][i] * g[k][i];
        }
        char err[512];
        float gn = 0, lr = 0;
        int rc = engine_optimizer_step(r2.e, 0, &gn, &lr, err, sizeof err);
        CHECK(rc == 0 && fabs(gn - sqrt(sq)) < 1e-5 * sqrt(sq), "global grad norm == norm of the canonical gradients (replicated counted once)",
              "%g vs %g (%s)", gn, sqrt(sq), rc ? err : "");
        CHECK(fabs(lr - 0.01f * 1 / 2) < 1e-9, "lr at step 0 = lr*(step+1)/warmup", "%g", lr);
        double scale = sqrt(sq) > 1 ? 1 / sqrt(sq) : 1, worst = 0;
        for (int k = 0; k < 3; k++) {
            float *np = canon(r2, NAMES[k], SLOT_PARAM), *m = canon(r2, NAMES[k], SLOT_ADAM_M), *gz = canon(r2, NAMES[k], SLOT_GRAD);
            int decay = k == 2;
            for (int64_t i = 0; i < canon_n(r2, NAMES[k]); i++) {
                double gg = g[k][i] * scale;
                double mh = (0.1 * gg) / (1 - 0.9), vh = (0.05 * gg * gg) / (1 - 0.95);
                double want = p[k][i] - lr * (mh / (sqrt(vh) + 1e-8) + 0.1 * decay * p[k][i]);
                worst = tl_worst(worst, fabs(np[i] - want));
                worst = tl_worst(worst, fabs(m[i] - 0.1 * gg));
                worst = tl_worst(worst, fabs(gz[i]));
            }
            free(np); free(m); free(gz); free(g[k]); free(p[k]);
        }
        CHECK(worst < 1e-6, "AdamW step (clipped, decay on head only) matches the formula; grads zeroed", "max diff %g", worst);
        /* schedule */
        double w1 = engine_lr_at(r2.p, 1), w2 = engine_lr_at(r2.p, 2), w6 = engine_lr_at(r2.p, 6), w10 = engine_lr_at(r2.p, 10);
        double c6 = 0.001 + 0.5 * (0.01 - 0.001) * (1 + cos(3.14159265358979 * 4 / 8));
        CHECK(fabs(w1 - 0.01) < 1e-9 && fabs(w2 - 0.01) < 1e-9 && fabs(w6 - c6) < 1e-8 && fabs(w10 - 0.001) < 1e-9,
              "lr schedule: warmup then cosine to min_lr", "%g %g %g %g", w1, w2, w6, w10);
    }

    /* determinism, canon round trip, read_tensor, collective bytes */
    {
        Run a = open_run(4, 1), b = open_run(4, 1);
        float la = fb(a, tokens, targets), lb = fb(b, tokens, targets);
        float *ga = canon(a, "embed", SLOT_GRAD), *gb = canon(b, "embed", SLOT_GRAD);
        CHECK(la == lb && !memcmp(ga, gb, 128 * sizeof(float)), "two tp=4 runs are bit-identical", "%.9g %.9g", la, lb);
        float m[128];
        for (int i = 0; i < 128; i++) m[i] = (float)i * 0.25f;
        int c = plan_find_canon(a.p, "head");
        engine_set_canon(a.e, c, SLOT_ADAM_V, m);
        float *back = canon(a, "head", SLOT_ADAM_V);
        CHECK(!memcmp(back, m, sizeof m), "set_canon then get_canon round-trips (AdamW v, tp=4)", "differs");
        float logits1[TINY_M * 16], logits4[TINY_M * 4];
        char err[512];
        fb(r1, tokens, targets);
        float *head1 = canon(r1, "head", SLOT_PARAM);
        engine_set_canon(a.e, c, SLOT_PARAM, head1);
        free(head1);
        fb(a, tokens, targets);
        int rc = engine_read_tensor(r1.e, 0, "logits", logits1, err, sizeof err) || engine_read_tensor(a.e, 3, "logits", logits4, err, sizeof err);
        d = 0;
        for (int mm = 0; mm < TINY_M; mm++)
            for (int j = 0; j < 4; j++) d = tl_worst(d, fabs(logits4[mm * 4 + j] - logits1[mm * 16 + 12 + j]));
        CHECK(rc == 0 && d < 1e-5, "read_tensor: rank 3's logits are columns 12..15 of tp=1's", "rc %d diff %g", rc, d);
        CHECK(engine_read_tensor(a.e, 4, "logits", logits4, err, sizeof err) != 0 && engine_read_tensor(a.e, 0, "nope", logits4, err, sizeof err) != 0,
              "read_tensor refuses a bad rank or name", "accepted");
        free(ga); free(gb); free(back);
        CHECK(engine_collective_bytes(r2.e) == 8 * 3 * 2 * 4 + 64 * 4, "collective bytes = allgather output + allreduce payload",
              "%lld", (long long)engine_collective_bytes(r2.e));
        close_run(a); close_run(b);
    }

    /* bad input */
    {
        char err[512] = "";
        Engine *x = engine_create(r1.p, "tpu", err, sizeof err);
        CHECK(!x && strstr(err, "unknown backend 'tpu'"), "an unknown backend name is refused", "%s", err);
        r1.p->pp = 2;
        x = engine_create(r1.p, "cpu", err, sizeof err);
        r1.p->pp = 1;
        CHECK(!x && strstr(err, "pp=2") && strstr(err, "regenerate with -D pp=1"), "a pp=2 plan is refused with the reason", "%s", err);
        engine_free(x);
        err[0] = 0;
        x = engine_create(r1.p, "cuda", err, sizeof err);
        /* without a usable GPU the message says so and what to do: "no CUDA device found (why): use
           --backend cpu" (runtime/cuda.c), or that NVRTC is missing where a device exists */
        int why_ok = strstr(err, "CUDA") && (strstr(err, "use --backend cpu") || strstr(err, "NVRTC"));
        CHECK(x ? !strcmp(engine_backend_name(x), "cuda") : why_ok, "backend cuda: a cuda engine, or (no GPU) the reason why not",
              "engine %p, message '%s' (want the reason naming CUDA and what to use instead)", (void *)x, err);
        engine_free(x);
        x = engine_create(r1.p, "auto", err, sizeof err);
        CHECK(x != NULL, "backend auto opens (cuda when there is a GPU, else cpu)", "%s", err);
        engine_free(x);
        int32_t bad[TINY_M];
        memcpy(bad, tokens, sizeof bad);
        bad[3] = TINY_V;
        float loss;
        int rc = engine_forward_backward(r1.e, bad, targets, &loss, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "outside the vocabulary"), "a token outside the vocabulary is refused", "%s", err);
    }
    /* a non-finite gradient norm: no update, grads cleared, a message */
    {
        Run a = open_run(2, 1);
        float bad_head[128];
        memcpy(bad_head, h1, sizeof bad_head);
        bad_head[5] = NAN;
        engine_set_canon(a.e, plan_find_canon(a.p, "head"), SLOT_PARAM, bad_head);
        fb(a, tokens, targets);
        char err[512] = "";
        float gn, lr;
        float *before = canon(a, "embed", SLOT_PARAM);
        int rc = engine_optimizer_step(a.e, 0, &gn, &lr, err, sizeof err);
        float *after = canon(a, "embed", SLOT_PARAM), *g = canon(a, "embed", SLOT_GRAD);
        int zero = 1;
        for (int i = 0; i < 128; i++) zero &= g[i] == 0;
        CHECK(rc != 0 && strstr(err, "not finite") && !memcmp(before, after, 128 * sizeof(float)) && zero,
              "a NaN gradient norm skips the update, clears the grads and says so", "rc %d: %s", rc, err);
        free(before); free(after); free(g);
        close_run(a);
    }
    free(e1); free(h1); free(g1); free(h2); free(h4);
    close_run(r1); close_run(r2); close_run(r4);
    TEST_EXIT();
}
