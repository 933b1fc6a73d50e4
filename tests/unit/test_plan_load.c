/* test_plan_load.c: the plan loader. A valid hand-made plan loads with the right tables; each kind
 * of damage (other version, truncation, unknown kernel, operand out of range, overlapping arena,
 * ...) gives its "PATH:LINE: message"; random truncations and byte flips never crash it; a plan
 * written by `boost gen` loads (when the generator is built). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tests/unit/testlib.h"
#include "tests/unit/test_plan_tiny.h"
#include "runtime/runtime.h"
#include "runtime/grid.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) { fclose(f); free(s); return NULL; }
    fclose(f);
    s[n] = 0;
    if (len) *len = (size_t)n;
    return s;
}

static void spit(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(s, 1, n, f);
    fclose(f);
}

/* Replace the first occurrence of `from` in text by `to`, write it, load it, expect `want` in the
 * error and (if line > 0) the "PATH:LINE:" prefix. */
static void expect_bad(const char *text, const char *from, const char *to, const char *want, int line, const char *name) {
    const char *at = strstr(text, from);
    if (!at) { CHECK(0, name, "test setup: '%s' not found in the base plan", from); return; }
    size_t n = strlen(text), fl = strlen(from), tl = strlen(to);
    char *s = malloc(n - fl + tl + 1);
    size_t pre = (size_t)(at - text);
    memcpy(s, text, pre);
    memcpy(s + pre, to, tl);
    memcpy(s + pre + tl, at + fl, n - pre - fl + 1);
    const char *path = "build/tmp/plan_bad.txt";
    spit(path, s, strlen(s));
    free(s);
    char err[1024] = "";
    Plan *p = plan_load(path, err, sizeof err);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    int ok = !p && strstr(err, want) && (line <= 0 || !strncmp(err, prefix, strlen(prefix)));
    CHECK(ok, name, "want '%s' at line %d, got %s: '%s'", want, line, p ? "a loaded plan" : "error", err);
    plan_free(p);
}

static int line_of(const char *text, const char *needle) {
    const char *at = strstr(text, needle);
    if (!at) return -1;
    int line = 1;
    for (const char *s = text; s < at; s++) line += *s == '\n';
    return line;
}

/* The text with `from` replaced by `to` (both edits, when from2 is set), loaded; NULL with err. */
static Plan *load_edited(const char *text, const char *from, const char *to, const char *from2,
                         const char *to2, char *err, size_t errlen) {
    const char *edits[2][2] = {{from, to}, {from2, to2}};
    char *s = strdup(text);
    for (int e = 0; e < 2 && edits[e][0]; e++) {
        char *at = strstr(s, edits[e][0]);
        if (!at) {
            snprintf(err, errlen, "test setup: '%s' not in the plan", edits[e][0]);
            free(s);
            return NULL;
        }
        size_t n = strlen(s), fl = strlen(edits[e][0]), tl = strlen(edits[e][1]);
        char *t = malloc(n - fl + tl + 1);
        memcpy(t, s, (size_t)(at - s));
        memcpy(t + (at - s), edits[e][1], tl);
        memcpy(t + (at - s) + tl, at + fl, n - (size_t)(at - s) - fl + 1);
        free(s);
        s = t;
    }
    return plan_parse_text("build/tmp/plan_edited.txt", s, err, errlen); /* takes s */
}

/* Collective lines read by the catalog: reduce_scatter and allgather on any group (allgather's dst
 * as wide as cols times the group's size), and the refusals (a group that is no collective group,
 * a kind off its sections or groups), each naming the line. */
static void test_collective_groups(const char *text) {
    const char *ag = "dir=fwd tag=loss", *ar = "allreduce buf=dxn elems=64 dtype=fp32 op=sum";
    char err[1024] = "";
    Plan *p =
        load_edited(text, ag, "dir=fwd group=dp tag=loss", " dp=1 ", " dp=2 ", err, sizeof err);
    int s = p ? 4 : -1;
    CHECK(p && p->steps_[s].kind == ST_ALLGATHER && p->steps_[s].coll.group == GROUP_DP &&
              p->steps_[s].coll.ld_dst == 6,
          "allgather group=dp at dp=2 (dst 3 x 2 columns) loads", "%s", p ? "wrong step" : err);
    plan_free(p);
    char at_line[32];
    snprintf(at_line, sizeof at_line, ":%d: ", line_of(text, "allgather"));
    p = load_edited(text, ag, "dir=fwd group=dp tag=loss", " dp=1 ", " dp=4 ", err, sizeof err);
    CHECK(!p && strstr(err, "allgather dst") && strstr(err, at_line),
          "allgather group=dp at dp=4 wants dst 3 x 4 columns: the 6-wide stats_all is refused",
          "%s", p ? "loaded" : err);
    plan_free(p);
    static const char *const groups[] = {"tp", "dp", "edp", "ep"};
    for (int g = 0; g < 4; g++) {
        char to[128], name[128];
        snprintf(to, sizeof to, "reduce_scatter buf=dxn elems=64 dtype=fp32 op=avg group=%s",
                 groups[g]);
        p = load_edited(text, ar, to, NULL, NULL, err, sizeof err);
        int i = p ? 8 : -1;
        snprintf(name, sizeof name, "reduce_scatter group=%s (an activation, no zero) loads",
                 groups[g]);
        CHECK(p && p->steps_[i].kind == ST_REDUCE_SCATTER && p->steps_[i].coll.avg &&
                  p->steps_[i].coll.group == grid_group_parse(groups[g]) &&
                  !p->steps_[i].coll.zero_grad,
              name, "%s", p ? "wrong step" : err);
        plan_free(p);
    }
    int ln = line_of(text, "allreduce");
    expect_bad(text, ar, "reduce_scatter buf=dxn elems=64 dtype=fp32 group=pp",
               "group=pp is not tp or dp", ln,
               "reduce_scatter group=pp is refused (pp is no collective group)");
    expect_bad(text, ag, "dir=fwd group=rows tag=loss", "group=rows is not tp or dp",
               line_of(text, "allgather"), "allgather with an unknown group is refused");
    expect_bad(text, ar, "gather_shards buf=head elems=64 dtype=fp32",
               "gather_shards belongs in the optimizer section", ln,
               "gather_shards outside the optimizer section is refused");
    expect_bad(text, "optimizer adamw\n",
               "optimizer adamw\ngather_shards buf=head elems=64 group=tp\n",
               "runs on group=dp only", line_of(text, "optimizer adamw") + 1,
               "gather_shards off group=dp is refused");
    expect_bad(text, ar, "allreduce buf=dxn elems=64 dtype=fp32 group=dp",
               "is not a parameter gradient", ln, "allreduce group=dp of an activation is refused");
    expect_bad(text, "optimizer adamw\n",
               "optimizer adamw\nallgather src=stats dst=stats_all rows=8 cols=3 dtype=fp32\n",
               "allgather belongs in the forward or backward section",
               line_of(text, "optimizer adamw") + 1,
               "a collective in the optimizer section (other than gather_shards) is refused");
    expect_bad(text, ar, "reduce_scatter buf=dxn elems=64 dtype=fp32 op=max",
               "op=max is not supported", ln, "reduce_scatter op=max is refused");
}

int main(void) {
    mkdir("build", 0755);
    mkdir("build/tmp", 0755);
    const char *base = "build/tmp/plan_tiny_tp2.txt";
    write_tiny_plan(base, 2, 1);
    char err[1024] = "";
    Plan *p = plan_load(base, err, sizeof err);
    CHECK(p != NULL, "a valid hand-made plan (tp=2) loads", "%s", err);
    if (!p) TEST_EXIT();
    int head = plan_find_tensor(p, "head"), dhead = plan_find_tensor(p, "d.head");
    CHECK(p->nparams == 3 && p->nparts == 4 && p->ncanons == 3, "params, parts and canons are counted",
          "%d params %d parts %d canons", p->nparams, p->nparts, p->ncanons);
    CHECK(head >= 0 && dhead >= 0 && p->tensors[dhead].kind == TK_GRAD && p->tensors[head].cols == 8,
          "each param gets a gradient tensor d.NAME of its shape", "head %d d.head %d", head, dhead);
    CHECK(p->nsteps == 12 && p->steps_[11].kind == ST_OPTIMIZER && p->steps_[7].kind == ST_GROUPED_GEMM && p->steps_[7].nmembers == 2 && p->steps_[5].section == 0 && p->steps_[6].section == 1,
          "steps are read with their sections", "%d steps", p->nsteps);
    const PlanParam *hp = &p->params[p->tensors[head].param];
    const PlanPart *pt = &p->parts[hp->first_part + 1];
    CHECK(hp->nparts == 2 && pt->c0.base == 4 && pt->c0.per_rank == 8 && rank_int(pt->c1, 1) == 16 && pt->lc.base == 4,
          "a%rb numbers are kept as base + rank*per_rank", "c0 %lld+r*%lld", (long long)pt->c0.base, (long long)pt->c0.per_rank);
    const KernelArgs *xf = p->steps_[3].kernel;
    CHECK(xf && !strcmp(xf->kind, "xent_fwd") && kernel_int(xf, "vocab_offset", 1, -1) == 8 && kernel_op(xf, "stats") == 2,
          "kernel operands and %r constants are resolved per rank", "kind %s", xf ? xf->kind : "?");
    CHECK(p->tp == 2 && p->micro_batch == 2 && p->seq == 4 && p->lr == 0.01 && p->tokens >= 0 && p->loss >= 0,
          "header fields are read", "tp %d", p->tp);
    plan_free(p);

    size_t len;
    char *text = slurp(base, &len);

    expect_bad(text, "boost-plan 1", "boost-plan 2", "plan.txt: version 2, this runtime reads version 1: regenerate it with 'boost gen'", 0,
               "another version is refused with the regenerate message");
    int ln = line_of(text, "kernel xent_combine");
    expect_bad(text, "kernel xent_combine", "kernel xent_combo", "unknown kernel kind xent_combo", ln, "unknown kernel kind (with file:line)");
    ln = line_of(text, "member ta=0 tb=1");
    expect_bad(text, "C=dxn ldc=8", "C=dxn+8 ldc=8", "operand range outside tensor dxn", ln, "gemm operand outside its tensor");
    ln = line_of(text, "gemm ta=0 tb=0");
    expect_bad(text, "B=head ldb=8", "B=head ldb=9", "operand range outside tensor head", ln, "gemm leading dimension past the tensor");
    ln = line_of(text, "kernel rmsnorm_fwd");
    expect_bad(text, "out=xn rstd=rstd rows=8 cols=8 ldx=8", "out=xn+1 rstd=rstd rows=8 cols=8 ldx=8", "operand range outside tensor xn", ln,
               "kernel operand outside its tensor");
    ln = line_of(text, "allgather");
    expect_bad(text, "ld_dst=6", "ld_dst=5", "ld=5 is smaller", ln, "allgather destination narrower than t*cols");
    ln = line_of(text, "buffer dx ");
    expect_bad(text, "buffer dx dtype=fp32 shape=8x8 offset=2336", "buffer dx dtype=fp32 shape=8x8 offset=2100",
               "overlap in the arena", 0, "two live buffers overlapping in the arena");
    expect_bad(text, "buffer stats_all dtype=fp32 shape=8x6 offset=1152", "buffer stats_all dtype=fp32 shape=8x6 offset=2500",
               "past the arena", line_of(text, "buffer stats_all"), "a buffer past the end of the arena");
    expect_bad(text, "live=4:5", "live=5:5", "outside its live range", line_of(text, "allgather"), "a buffer used outside its live range");
    {
        const char *cut = strstr(text, "section optimizer");
        char *t2 = strndup(text, (size_t)(cut - text));
        expect_bad(t2, "boost-plan 1", "boost-plan 1", "truncated: no 'section optimizer'", 0, "a plan cut before section optimizer");
        free(t2);
        cut = strstr(text, "optimizer adamw");
        t2 = strndup(text, (size_t)(cut - text));
        expect_bad(t2, "boost-plan 1", "boost-plan 1", "truncated: no 'optimizer' line", 0, "a plan cut before the optimizer line");
        free(t2);
    }
    ln = line_of(text, "kernel embedding_bwd");
    expect_bad(text, "dtable=d.embed", "dtable=d.embedd", "unknown tensor d.embedd", ln, "unknown tensor");
    ln = line_of(text, "allreduce");
    expect_bad(text, "allreduce buf=dxn elems=64", "allreduce buf=dxn", "missing key elems=", ln, "missing key");
    expect_bad(text, "allreduce buf=dxn elems=64", "allreduce buf=dxn elems=6x4", "elems=6x4 is not an integer", ln, "bad number");
    ln = line_of(text, "part head");
    expect_bad(text, "src=0:8,0%r8:4%r8", "src=0:9,0%r8:4%r8", "outside canon head", ln, "part outside its canon");
    expect_bad(text, "src=0:8,0%r8:4%r8", "src=0:8,0%r16:4%r16", "outside canon head", ln, "part outside its canon on the last rank");
    ln = line_of(text, "part head canon=head src=0:8,4");
    expect_bad(text, "dst=0,4 rep=0", "dst=0,3 rep=0", "overlap", 0, "parts overlapping in the local param");
    ln = line_of(text, "allgather");
    expect_bad(text, "allgather src", "allscatter src", "unknown step kind 'allscatter'", ln, "unknown step kind");
    expect_bad(text, "data path=", "datum path=", "unknown line kind 'datum'", line_of(text, "data path="), "unknown line kind");
    ln = line_of(text, "kernel rmsnorm_bwd");
    expect_bad(text, "dgamma=d.final_norm rows=8", "dgamma=d.final_norm rows=8 phase=3", "duplicate key phase", ln, "duplicate key");

    ln = line_of(text, "allreduce");
    expect_bad(text, "dtype=fp32 op=sum", "dtype=bf16 op=sum", "dtype does not match buffer dxn", ln, "allreduce dtype differs from its buffer");
    ln = line_of(text, "kernel embedding_fwd");
    expect_bad(text, "tokens=tokens table=embed", "tokens=x table=embed", "operand tokens=x is a float tensor, it must be i32", ln,
               "kernel token operand that is not i32");

    expect_bad(text, "buffer dx dtype=fp32 shape=8x8 offset=2336", "buffer dx dtype=fp32 shape=8x8 offset=2338",
               "not a multiple of its element size", line_of(text, "buffer dx "), "a misaligned buffer offset");
    expect_bad(text, "grouped_gemm count=2", "grouped_gemm count=3", "1 member line(s) missing", line_of(text, "allreduce"),
               "grouped_gemm with a member missing");

    test_collective_groups(text);

    /* fuzz: truncations and byte flips give an error or a plan, never a crash */
    int loaded = 0, refused = 0, bad_msg = 0;
    unsigned seed = 1;
    char *buf = malloc(len + 1);
    for (int it = 0; it < 1500; it++) {
        memcpy(buf, text, len + 1);
        size_t n = len;
        seed = seed * 1103515245u + 12345u;
        if (it % 3 == 0) n = (seed >> 4) % len;
        else
            for (int k = 0; k < 1 + (int)((seed >> 8) % 4); k++) {
                seed = seed * 1103515245u + 12345u;
                buf[(seed >> 4) % len] = (char)(seed >> 20);
            }
        spit("build/tmp/plan_fuzz.txt", buf, n);
        char e2[1024] = "";
        Plan *q = plan_load("build/tmp/plan_fuzz.txt", e2, sizeof e2);
        if (q) {   /* a plan that loads must also run without crashing */
            loaded++;
            Engine *e = engine_create(q, "cpu", e2, sizeof e2);
            if (e && !engine_init_params(e, e2, sizeof e2)) {
                int32_t tk[TINY_M], tg[TINY_M];
                for (int i = 0; i < TINY_M; i++) { tk[i] = (i * 7) % TINY_V; tg[i] = (i * 3) % TINY_V; }
                float loss, gn, lr;
                if (q->micro_batch * q->seq == TINY_M && q->vocab >= TINY_V) {
                    engine_forward_backward(e, tk, tg, &loss, e2, sizeof e2);
                    engine_optimizer_step(e, 0, &gn, &lr, e2, sizeof e2);
                }
            }
            engine_free(e);
        } else { refused++; if (!strstr(e2, "plan")) bad_msg++; }
        plan_free(q);
    }
    free(buf);
    CHECK(refused > 1000 && bad_msg == 0, "1500 truncated or flipped plans: each refused with a message naming the plan, or loaded and run",
          "%d loaded, %d refused, %d messages without the path", loaded, refused, bad_msg);
    free(text);

    /* a plan written by the generator */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s gen specs/runs/tiny-cola.lua -D tp=2 -o build/tmp/gen_tiny_cola >build/tmp/gen.log 2>&1",
             getenv("BOOST") ? getenv("BOOST") : "./bin/boost");   /* as tests/sh/lib.sh */
    int rc = system(cmd);
    if (rc != 0) {
        char *log = slurp("build/tmp/gen.log", NULL);
        CHECK(0, "boost gen tiny-cola tp=2 writes a plan", "boost gen failed: %s", log ? log : "?");
        free(log);
    } else {
        Plan *g = plan_load("build/tmp/gen_tiny_cola/plan.txt", err, sizeof err);
        CHECK(g != NULL, "a plan written by boost gen (tiny-cola, tp=2) loads", "%s", err);
        plan_free(g);
    }
    TEST_EXIT();
}
