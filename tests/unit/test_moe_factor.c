/* test_moe_factor.c: the MoE experts take their factors from the layout's factorization row
 * (gen/factor.c): tiny-cola-moe's expert canons under btp, naive (with ep = 2 too) and megatron
 * are named L<i>.e<e>.<proj>.<factor> for the row's input and output factors (A, B; W under
 * megatron) with the shapes derived here by hand (A [d_in, r], B [r, d_out], W [d_in, d_out]),
 * no other expert canon; a row the experts cannot use (usv, with an r x r core; lax) is refused by
 * the generator naming the family, and a model spec with usv and moe by the spec loader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "gen/gen.h"
#include "gen/factor.h"
#include "gen/ir.h"
#include "gen/pipeline.h"

/* The canon named `name` in g, or NULL. */
static const Canon *canon(const Graph *g, const char *name) {
    for (int c = 0; c < g->ncanons; c++)
        if (!strcmp(g->canons[c].name, name)) return &g->canons[c];
    return NULL;
}

/* Count g's expert canons (L<i>.e<e>.*) and check each expected one's shape; 0 when all match. */
static int check_experts(const Graph *g, const Run *r, const char *label) {
    const Model *m = &r->model;
    int dense = g->layout == LAYOUT_MEGATRON;
    const Factorization *fz = factorization_find(dense ? "full" : m->family);
    static const char *projs[3] = {"gate", "up", "down"};
    static const int pidx[3] = {PROJ_GATE, PROJ_UP, PROJ_DOWN};
    int bad = 0, want = 0, have = 0;
    char nm[96];
    for (int c = 0; c < g->ncanons; c++) {
        int l, e;
        char rest[64];
        if (sscanf(g->canons[c].name, "L%d.e%d.%63s", &l, &e, rest) == 3) have++;
    }
    for (int l = 0; l < m->layers; l++)
        for (int e = 0; e < m->moe_experts && m->moe_layer[l]; e++)
            for (int j = 0; j < 3; j++) {
                int64_t din = j == 2 ? m->moe_ffn : m->hidden;
                int64_t dout = j == 2 ? m->hidden : m->moe_ffn;
                int64_t rk = m->proj[l][pidx[j]].rank;
                /* by hand: W [d_in, d_out]; A [d_in, r] and B [r, d_out] */
                int64_t rows[2] = {din, dense ? 0 : rk}, cols[2] = {dense ? dout : rk, dout};
                for (int k = 0; k < (dense ? 1 : 2); k++) {
                    const char *fname = fz->factors[k == 0 ? 0 : fz->nfactors - 1].name;
                    snprintf(nm, sizeof nm, "L%d.e%d.%s.%s", l, e, projs[j], fname);
                    const Canon *cn = canon(g, nm);
                    want++;
                    if (!cn || cn->rows != rows[k] || cn->cols != cols[k]) {
                        if (!bad)
                            printf("# %s: %s %s (want %lldx%lld)\n", label, nm,
                                   cn ? "has another shape" : "is missing", (long long)rows[k],
                                   (long long)cols[k]);
                        bad = 1;
                    }
                }
            }
    if (have != want) printf("# %s: %d expert canons, want %d\n", label, have, want);
    return bad || have != want;
}

static void layouts(void) {
    static const struct { int layout; const char *defs; const char *label; } cases[] = {
        {LAYOUT_BTP, "", "btp tp=2"},
        {LAYOUT_BTP, "ep", "btp tp=2 ep=2 dp=2"},
        {LAYOUT_NAIVE, "", "naive tp=2"},
        {LAYOUT_MEGATRON, "", "megatron tp=2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Run *r = malloc(sizeof *r);
        char err[2048], name[160];
        int status = 0;
        snprintf(name, sizeof name, "expert canons named and shaped by the row: %s",
                 cases[i].label);
        if (!r || spec_load_run("specs/runs/tiny-cola-moe.lua", NULL, 0, r, err, sizeof err)) {
            CHECK(0, name, "spec: %s", r ? err : "out of memory");
            free(r);
            continue;
        }
        r->layout = cases[i].layout;
        if (cases[i].defs[0]) { r->ep = 2; r->dp = 2; }
        int ckpt = cases[i].layout == LAYOUT_BTP ? r->checkpoint : CKPT_NONE;
        Graph *g = graph_build(r, r->layout, ckpt, err, sizeof err, &status);
        CHECK(g && !check_experts(g, r, cases[i].label), name, "%s", g ? "see above" : err);
        graph_free(g);
        free(r);
    }
}

/* tiny-cola-moe with every projection of the row `family` at rank 32: refused by the generator. */
static void refused(const char *family, const char *why) {
    Run *r = malloc(sizeof *r);
    char err[2048] = "", name[160];
    int status = 0;
    snprintf(name, sizeof name, "MoE experts refuse factorization %s (%s)", family, why);
    if (!r || spec_load_run("specs/runs/tiny-cola-moe.lua", NULL, 0, r, err, sizeof err)) {
        CHECK(0, name, "spec: %s", r ? err : "out of memory");
        free(r);
        return;
    }
    factorization_apply(factorization_find(family), &r->model, 32);
    r->model.lax = 0;   /* the LaX refusal comes first; this checks the row's */
    Graph *g = graph_build(r, LAYOUT_BTP, r->checkpoint, err, sizeof err, &status);
    char quoted[40];
    snprintf(quoted, sizeof quoted, "'%s'", family);
    CHECK(!g && strstr(err, quoted) && strstr(err, "cannot make experts"), name,
          "built: %d, message: %s", g != NULL, err);
    graph_free(g);
    free(r);
}

/* A model spec with usv{} and moe{}: the spec loader refuses it, naming the family. */
static void spec_refuses_usv(void) {
    const char *dir = "build/tmp/moe_factor";
    char path[200], err[2048] = "";
    (void)!system("mkdir -p build/tmp/moe_factor/models build/tmp/moe_factor/runs");
    snprintf(path, sizeof path, "%s/models/usv-moe.lua", dir);
    const char *model =
        "return model \"usv-moe\" {\n  hidden = 128, layers = 2, heads = 4, kv_heads = 4, "
        "ffn = 352, vocab = 256,\n  lowrank = usv { rank = 32 },\n"
        "  moe = moe { experts = 4, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01,\n"
        "              every = 1, expert_ffn = 192 },\n}\n";
    tl_write_file(path, model, strlen(model));
    size_t n = 0;
    char *run = tl_read_file("specs/runs/tiny-cola-moe.lua", &n);
    char *at = run ? strstr(run, "\"tiny-cola-moe\"") : NULL;
    snprintf(path, sizeof path, "%s/runs/usv-moe.lua", dir);
    FILE *f = at ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%.*s\"%s/models/usv-moe.lua\"%s", (int)(at - run), run, dir,
                at + strlen("\"tiny-cola-moe\""));
        fclose(f);
    }
    Run *r = malloc(sizeof *r);
    int rc = r && f ? spec_load_run(path, NULL, 0, r, err, sizeof err) : -1;
    CHECK(rc != 0 && strstr(err, "usv") && strstr(err, "moe"),
          "a model spec with usv{} and moe{} is refused naming the family", "rc %d: %s", rc, err);
    free(r);
    free(run);
}

int main(void) {
    layouts();
    refused("usv", "an r x r core");
    refused("lax", "no experts in its row");
    spec_refuses_usv();
    TEST_EXIT();
}
