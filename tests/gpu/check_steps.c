/* check_steps.c: every step of a plan (GEMMs, every fused kernel, collectives) on the CUDA backend
 * against the CPU backend (the fp32 reference), one step at a time. Params get random values and
 * the batch random tokens; before each step every tensor the step touches is copied from the CPU
 * rank to the CUDA rank, so each step starts from the same inputs and its error is its own. After
 * the step each tensor it writes (a kernel: the operands WRITES names for its kind; inputs are not
 * compared) is compared (relative L2 error, max abs error). Then AdamW and
 * the gradient norm. tp=1 plans only (collectives are identities there).
 *   usage: check_steps PLAN_DIR [--against cpu] [--tol 0.03] [--md]
 * --against cpu runs the CPU backend on both sides: every error must be 0 (checks this program).
 * Prints one "ok - ..." / "FAIL - ..." line per kernel kind and GEMM kind; exit 1 on a failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/backend.h"
#include "runtime/plan.h"

typedef struct {
    const Backend *be;
    BackendRank *r;
} Side;


/* Operands each kernel kind writes (docs/plan-format.md, "Kernel catalog"); the rest it only reads,
 * e.g. bottleneck_act reads `stat` (the summed online-norm statistics) that online_norm_fwd writes,
 * and bottleneck_act_bwd reads `y`, `rstd` and `rho`. rmsnorm_bwd with phase=1 writes only `dot`,
 * otherwise `dx` and `dgamma` (phase=2 reads `dot`). moe_router's routing decisions (sel, slot, src)
 * and the load-balance terms they give (aux) are not compared: bf16 logits on the device may
 * break a near-tie the other way than the fp32 CPU and shift every later slot of that expert
 * (test_moe checks the decisions themselves on the CPU). Every catalog kind has a line here; main()
 * checks that against runtime/plan.c's catalog, so a new kind cannot go uncompared. */
static const struct { const char *kind, *writes; } WRITES[] = {
    {"embedding_fwd", "out"}, {"embedding_bwd", "dtable"}, {"rmsnorm_fwd", "out rstd"},
    {"rmsnorm_bwd", "dx dgamma"}, {"sumsq", "out"}, {"online_norm_fwd", "xhat rho stat"},
    {"online_norm_rescale", "h"}, {"bottleneck_act", "y z rstd"},
    {"bottleneck_act_bwd", "dh dstat"},
    {"online_norm_bwd", "dx dgamma"}, {"rope", "x"}, {"attention_fwd", "out lse"},
    {"attention_bwd", "dq dk dv"}, {"glu_fwd", "out"}, {"glu_bwd", "dgate dup"}, {"add", "out"},
    {"copy", "dst"}, {"xent_fwd", "stats"}, {"xent_combine", "lse loss"}, {"xent_bwd", "dlogits"},
    {"moe_router", "probs gates"}, {"moe_router_bwd", "dlogits"},
    {"moe_dispatch", "out"}, {"moe_dispatch_bwd", "dx"}, {"moe_combine", "out"},
    {"moe_combine_bwd", "deo"}, {"moe_gates_bwd", "dgates"}, {"moe_aux_add", "loss"},
    {"rope_at", "x"}, {"kv_append", "kcache vcache"}, {"attention_decode", "out"},
};
#define NWRITES ((int)(sizeof WRITES / sizeof WRITES[0]))

static const char *writes_of(const char *kind) {
    for (int i = 0; i < NWRITES; i++) if (!strcmp(WRITES[i].kind, kind)) return WRITES[i].writes;
    return NULL;
}

/* Is `word` one of the space-separated words of `list`? */
static int in_list(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *s = list; *s; s += strcspn(s, " "), s += *s == ' ')
        if (strcspn(s, " ") == n && !strncmp(s, word, n)) return 1;
    return 0;
}

/* Does kernel `k` write its operand `key`? */
static int is_output(const KernelArgs *k, const char *key) {
    if (!strcmp(k->kind, "rmsnorm_bwd")) {
        int phase = 0;
        for (int i = 0; i < k->nconst; i++)
            if (!strcmp(k->const_key[i], "phase")) phase = (int)k->const_val[i];
        return phase == 1 ? !strcmp(key, "dot") : in_list("dx dgamma", key);
    }
    const char *w = writes_of(k->kind);
    return w && in_list(w, key);
}

/* The table above against the runtime's catalog: every kind listed, every written key an operand
 * of its kind. Returns 0, or prints the mismatch and returns 1. */
static int writes_match_catalog(void) {
    char key[32];
    for (int c = 0; plan_catalog_kind(c); c++)
        if (!writes_of(plan_catalog_kind(c))) {
            printf("FAIL - check_steps.c: kernel kind %s has no WRITES line (add the operands it "
                   "writes)\n", plan_catalog_kind(c));
            return 1;
        }
    for (int i = 0; i < NWRITES; i++)
        for (const char *s = WRITES[i].writes; *s; s += strcspn(s, " "), s += *s == ' ') {
            int len = (int)strcspn(s, " "), found = 0;
            const char *kind = WRITES[i].kind;
            for (int o = 0; !plan_catalog_operand(kind, o, key, sizeof key, NULL, NULL); o++)
                found |= (int)strlen(key) == len && !strncmp(key, s, len);
            if (!found) {
                printf("FAIL - check_steps.c: WRITES says %s writes %.*s, which is not an operand "
                       "of that kind in runtime/plan.c's catalog\n", kind, len, s);
                return 1;
            }
        }
    return 0;
}

static void *resolve(Side *s, const Plan *p, const Operand *op) {
    const PlanTensor *t = &p->tensors[op->tensor];
    size_t es = s->be->elem_bytes_fp32_only ? 4 : plan_dtype_size(t->dtype);
    return (char *)s->be->tensor_ptr(s->r, op->tensor) + rank_int(op->off, 0) * (int64_t)es;
}

static int run_step(Side *s, const Plan *p, const PlanStep *st) {
    switch (st->kind) {
    case ST_GEMM: case ST_BATCHED_GEMM:
        return s->be->gemm(s->r, &st->gemm, resolve(s, p, &st->gemm.A), resolve(s, p, &st->gemm.B),
                           resolve(s, p, &st->gemm.C));
    case ST_GROUPED_GEMM: {
        int n = st->nmembers;
        void **ptr = malloc(3 * n * sizeof *ptr);
        const GemmArgs *m = &p->members[st->first_member];
        for (int i = 0; i < n; i++) {
            ptr[i] = resolve(s, p, &m[i].A); ptr[n + i] = resolve(s, p, &m[i].B); ptr[2 * n + i] = resolve(s, p, &m[i].C);
        }
        int rc = s->be->grouped_gemm(s->r, n, m, ptr, ptr + n, ptr + 2 * n);
        free(ptr);
        return rc;
    }
    case ST_KERNEL: {
        void *ops[PLAN_MAX_KEYS];
        for (int i = 0; i < st->kernel->nops; i++) ops[i] = resolve(s, p, &st->kernel->op[i]);
        return s->be->kernel(s->r, st->kernel, ops);
    }
    case ST_ALLREDUCE: {
        CollPtrs ptr = {.buf = resolve(s, p, &st->coll.buf)};
        return s->be->collective(s->r, &st->coll, &ptr);
    }
    case ST_ALLGATHER: {
        CollPtrs ptr = {.src = resolve(s, p, &st->coll.src), .dst = resolve(s, p, &st->coll.dst)};
        return s->be->collective(s->r, &st->coll, &ptr);
    }
    default: return 0;
    }
}

/* The tensors a step touches (ins and outs) and which of them it writes. */
static int step_tensors(const Plan *p, const PlanStep *st, int *t, int *out, int max) {
    int n = 0;
#define ADD(tensor, w) do { int tt_ = (tensor), dup_ = 0; \
    for (int j_ = 0; j_ < n; j_++) if (t[j_] == tt_) { dup_ = 1; out[j_] |= (w); } \
    if (!dup_ && n < max) { t[n] = tt_; out[n++] = (w); } } while (0)
    switch (st->kind) {
    case ST_GEMM: case ST_BATCHED_GEMM:
        ADD(st->gemm.A.tensor, 0); ADD(st->gemm.B.tensor, 0); ADD(st->gemm.C.tensor, 1);
        break;
    case ST_GROUPED_GEMM:
        for (int i = 0; i < st->nmembers; i++) {
            const GemmArgs *m = &p->members[st->first_member + i];
            ADD(m->A.tensor, 0); ADD(m->B.tensor, 0); ADD(m->C.tensor, 1);
        }
        break;
    case ST_KERNEL:
        for (int i = 0; i < st->kernel->nops; i++)
            ADD(st->kernel->op[i].tensor, is_output(st->kernel, st->kernel->op_key[i]));
        break;
    case ST_ALLREDUCE: ADD(st->coll.buf.tensor, 1); break;
    case ST_ALLGATHER: ADD(st->coll.src.tensor, 0); ADD(st->coll.dst.tensor, 1); break;
    default: break;
    }
#undef ADD
    return n;
}

static int64_t numel(const Plan *p, int t) { return p->tensors[t].rows * p->tensors[t].cols; }

/* ||a-b|| / ||b|| and max |a-b| over n values; non-finite values count as an infinite error. */
static void compare(const float *a, const float *b, int64_t n, double *rel, double *maxabs) {
    double d2 = 0, b2 = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        if (!isfinite(a[i]) && isfinite(b[i])) d = INFINITY;
        d2 += d * d; b2 += (double)b[i] * b[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    *rel = b2 > 0 ? sqrt(d2 / b2) : sqrt(d2);
    *maxabs = mx;
}

/* Per kind: the worst error seen and where. */
typedef struct { char kind[40]; double rel, maxabs; int count, line; char tensor[PLAN_NAME_LEN]; } Worst;

static Worst worst[64];
static int nworst;

static void record(const char *kind, double rel, double maxabs, int line, const char *tensor) {
    int i;
    for (i = 0; i < nworst; i++) if (!strcmp(worst[i].kind, kind)) break;
    if (i == nworst) {
        if (nworst == 64) return;
        memset(&worst[nworst], 0, sizeof worst[0]);
        snprintf(worst[nworst++].kind, sizeof worst[0].kind, "%s", kind);
    }
    worst[i].count++;
    if (rel > worst[i].rel || !isfinite(rel)) {
        worst[i].rel = rel; worst[i].maxabs = maxabs; worst[i].line = line;
        snprintf(worst[i].tensor, sizeof worst[i].tensor, "%s", tensor);
    }
}

static uint64_t rng_state = 0x853c49e6748fea9bull;
static double uniform(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng_state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double normal(void) { return sqrt(-2 * log(uniform())) * cos(2 * M_PI * uniform()); }

int main(int argc, char **argv) {
    const char *dir = NULL, *against = "cuda";
    double tol = 0.03;
    int md = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--against") && i + 1 < argc) against = argv[++i];
        else if (!strcmp(argv[i], "--tol") && i + 1 < argc) tol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--md")) md = 1;
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else { fprintf(stderr, "usage: check_steps PLAN_DIR [--against cpu|cuda] [--tol X] [--md]\n"); return 2; }
    }
    if (!dir) { fprintf(stderr, "usage: check_steps PLAN_DIR [--against cpu|cuda] [--tol X] [--md]\n"); return 2; }
    if (writes_match_catalog()) return 1;
    char path[1024], err[4096];
    snprintf(path, sizeof path, "%s/plan.txt", dir);
    Plan *p = plan_load(path, err, sizeof err);
    if (!p) { fprintf(stderr, "%s\n", err); return 2; }
    if (p->tp != 1) { fprintf(stderr, "%s: tp=%d; check_steps runs tp=1 plans (generate with -D tp=1)\n", path, p->tp); return 2; }

    Side ref = {&backend_cpu, NULL}, dut = {strcmp(against, "cpu") ? &backend_cuda : &backend_cpu, NULL};
    ref.r = ref.be->rank_open(p, 0, 1, err, sizeof err);
    if (!ref.r) { fprintf(stderr, "cpu backend: %s\n", err); return 1; }
    dut.r = dut.be->rank_open(p, 0, 1, err, sizeof err);
    if (!dut.r) { printf("FAIL - open the %s backend: %s\n", dut.be->name, err); return 1; }
    if (ref.be->group_init && ref.be->group_init(&ref.r, 1, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (dut.be->group_init && dut.be->group_init(&dut.r, 1, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }

    /* random params (norm gains near 1, matrices ~ 1/sqrt(rows)), zero grads, random tokens */
    int64_t maxn = 1;
    for (int t = 0; t < p->ntensors; t++) if (numel(p, t) > maxn) maxn = numel(p, t);
    float *a = malloc(maxn * sizeof *a), *b = malloc(maxn * sizeof *b);
    int failed = 0;
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        int64_t n = pp->rows * pp->cols;
        for (int64_t j = 0; j < n; j++)
            a[j] = pp->rows == 1 ? (float)(1.0 + 0.1 * normal()) : (float)(normal() / sqrt((double)pp->rows));
        if (ref.be->from_host(ref.r, pp->tensor, a) || dut.be->from_host(dut.r, pp->tensor, a)) {
            printf("FAIL - upload %s\n", pp->name); return 1;
        }
    }
    ref.be->zero_grads(ref.r); dut.be->zero_grads(dut.r);
    int64_t M = (int64_t)p->micro_batch * p->seq;
    int32_t *tok = malloc(M * sizeof *tok), *tgt = malloc(M * sizeof *tgt);
    for (int64_t i = 0; i < M; i++) { tok[i] = (int32_t)(uniform() * p->vocab); tgt[i] = (int32_t)(uniform() * p->vocab); }
    ref.be->set_i32(ref.r, p->tokens, tok); ref.be->set_i32(ref.r, p->targets, tgt);
    dut.be->set_i32(dut.r, p->tokens, tok); dut.be->set_i32(dut.r, p->targets, tgt);

    int ts[64], outs[64];
    int nsteps_run = 0;
    for (int s = 0; s < p->nsteps; s++) {
        const PlanStep *st = &p->steps_[s];
        /* compute steps, all-reduces and all-gathers of the forward and backward */
        if (st->section > 1 || (st->kind > ST_KERNEL && st->kind != ST_ALLREDUCE && st->kind != ST_ALLGATHER))
            continue;
        int n = step_tensors(p, st, ts, outs, 64);
        for (int i = 0; i < n; i++) {            /* same inputs on both sides */
            if (ref.be->to_host(ref.r, ts[i], a) || dut.be->from_host(dut.r, ts[i], a)) {
                printf("FAIL - %s:%d: copying %s to the %s side: %s\n", path, st->line, p->tensors[ts[i]].name,
                       dut.be->name, dut.be->last_error(dut.r));
                return 1;
            }
        }
        if (run_step(&ref, p, st)) { printf("FAIL - %s:%d: cpu: %s\n", path, st->line, ref.be->last_error(ref.r)); return 1; }
        if (run_step(&dut, p, st)) {
            printf("FAIL - %s:%d: %s %s: %s\n", path, st->line, dut.be->name,
                   st->kind == ST_KERNEL ? st->kernel->name : plan_step_kind_name(st->kind), dut.be->last_error(dut.r));
            failed = 1;
            continue;
        }
        nsteps_run++;
        const char *kind = st->kind == ST_KERNEL ? st->kernel->kind : plan_step_kind_name(st->kind);
        for (int i = 0; i < n; i++) {
            if (!outs[i]) continue;
            int64_t cnt = numel(p, ts[i]);
            if (ref.be->to_host(ref.r, ts[i], b) || dut.be->to_host(dut.r, ts[i], a)) {
                printf("FAIL - %s:%d: reading %s back\n", path, st->line, p->tensors[ts[i]].name);
                return 1;
            }
            double rel, mx;
            compare(a, b, cnt, &rel, &mx);
            record(kind, rel, mx, st->line, p->tensors[ts[i]].name);
        }
    }
    /* AdamW and the gradient norm on the grads of the last step (copied to both sides) */
    for (int i = 0; i < p->nparams; i++) {
        int g = p->params[i].grad, t = p->params[i].tensor;
        ref.be->to_host(ref.r, g, a); dut.be->from_host(dut.r, g, a);
        ref.be->to_host(ref.r, t, a); dut.be->from_host(dut.r, t, a);
    }
    double n_ref = ref.be->grad_sq_norm(ref.r), n_dut = dut.be->grad_sq_norm(dut.r);
    record("grad_sq_norm", fabs(n_dut - n_ref) / (n_ref > 0 ? n_ref : 1), fabs(n_dut - n_ref), 0, "all grads");
    float lr = 1e-3f;
    if (ref.be->adamw(ref.r, lr, 0.5f, 1) || dut.be->adamw(dut.r, lr, 0.5f, 1)) {
        printf("FAIL - adamw: %s\n", dut.be->last_error(dut.r)); failed = 1;
    } else {
        for (int i = 0; i < p->nparams; i++) {
            int t = p->params[i].tensor;
            ref.be->to_host(ref.r, t, b); dut.be->to_host(dut.r, t, a);
            double rel, mx;
            compare(a, b, numel(p, t), &rel, &mx);
            record("adamw", rel, mx, 0, p->params[i].name);
        }
    }
    if (md) printf("| step kind | count | worst rel. L2 error | max abs error | where |\n|---|---:|---:|---:|---|\n");
    for (int i = 0; i < nworst; i++) {
        Worst *w = &worst[i];
        int ok = w->rel <= tol && isfinite(w->rel);
        if (!ok) failed = 1;
        if (md) printf("| %s | %d | %.3g | %.3g | %s:%d %s |\n", w->kind, w->count, w->rel, w->maxabs, path, w->line, w->tensor);
        else if (ok) printf("ok - %s %s x%d: worst rel %.3g (max abs %.3g) at line %d %s\n", dir, w->kind, w->count, w->rel,
                            w->maxabs, w->line, w->tensor);
        else printf("FAIL - %s %s x%d: rel error %.3g > %.3g (max abs %.3g) at %s:%d %s\n", dir, w->kind, w->count,
                    w->rel, tol, w->maxabs, path, w->line, w->tensor);
    }
    if (!md) printf("# %d steps compared (%s vs cpu)\n", nsteps_run, dut.be->name);
    dut.be->rank_close(dut.r);
    ref.be->rank_close(ref.r);
    free(a); free(b); free(tok); free(tgt);
    plan_free(p);
    return failed;
}
