/* factor.c: the table of factorizations (gen/factor.h). A new factorization whose factors run
 * as "input factor, activation, output factor" is one more row here plus its spec constructor
 * (gen/spec.c): the layouts read the shapes, the splits and the inits from the row. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "gen/factor.h"

/* Splits per layout (megatron, naive, btp) and role (reads, writes the residual stream). */
#define NO_LAYOUT {SIDE_NONE, SIDE_NONE}
/* A of a product: naive splits the rank (column-parallel A), btp the input (row-parallel A) */
#define A_OF_PRODUCT {"A", SIDE_IN, SIDE_RANK, INIT_PRODUCT, \
                      {NO_LAYOUT, {SIDE_RANK, SIDE_RANK}, {SIDE_IN, SIDE_IN}}, NULL}
/* B of a product: naive splits the rank (row-parallel B), btp the output (column-parallel B) */
#define B_OF_PRODUCT {"B", SIDE_RANK, SIDE_OUT, INIT_PRODUCT, \
                      {NO_LAYOUT, {SIDE_RANK, SIDE_RANK}, {SIDE_OUT, SIDE_OUT}}, NULL}
/* A and B of a product with a core: btp only (naive would need the core on a rank-split latent) */
#define A_AROUND_CORE {"A", SIDE_IN, SIDE_RANK, INIT_PRODUCT, \
                       {NO_LAYOUT, NO_LAYOUT, {SIDE_IN, SIDE_IN}}, NULL}
#define B_AROUND_CORE {"B", SIDE_RANK, SIDE_OUT, INIT_PRODUCT, \
                       {NO_LAYOUT, NO_LAYOUT, {SIDE_OUT, SIDE_OUT}}, NULL}
/* The r x r core S: btp applies it after the all-reduce, where the latent is replicated, so every
 * rank holds it whole and it needs no collective */
#define S_CORE {"S", SIDE_RANK, SIDE_RANK, INIT_CORE, \
                {NO_LAYOUT, NO_LAYOUT, {SIDE_WHOLE, SIDE_WHOLE}}, NULL}

static const Factorization TABLE[] = {
    /* CoLA: A, SiLU, B */
    {"cola", FACTOR_COLA, ACT_SILU, ACT_NONE, 0, 1, 1, 2, {A_OF_PRODUCT, B_OF_PRODUCT}},
    /* SVD / LORO-style: A, identity, B */
    {"svd", FACTOR_SVD, ACT_NONE, ACT_NONE, 0, 1, 1, 2, {A_OF_PRODUCT, B_OF_PRODUCT}},
    /* LaX: CoLA (or SVD with base = "svd") plus the latent crossings */
    {"lax", FACTOR_COLA, ACT_SILU, ACT_NONE, 1, 0, 0, 2, {A_OF_PRODUCT, B_OF_PRODUCT}},
    /* U S V^T with a dense r x r core (dynamical low-rank training, DLRT): A, sigma (identity by
       default), S, B */
    {"usv", FACTOR_SVD, ACT_NONE, ACT_NONE, 0, 0, 0, 3, {A_AROUND_CORE, S_CORE, B_AROUND_CORE}},
    /* dense W: megatron's column-parallel (reads) and row-parallel (writes) projections; exported
       as the Hugging Face LLaMA layout's <proj>_proj.weight */
    {"full", FACTOR_FULL, ACT_NONE, ACT_SILU, 0, 1, 0, 1,
     {{"W", SIDE_IN, SIDE_OUT, INIT_DENSE, {{SIDE_OUT, SIDE_IN}, NO_LAYOUT, NO_LAYOUT},
       "weight"}}},
};
enum { NTABLE = sizeof TABLE / sizeof TABLE[0] };

const Factorization *factorization_find(const char *family) {
    for (int i = 0; i < NTABLE; i++)
        if (family && !strcmp(TABLE[i].family, family)) return &TABLE[i];
    return NULL;
}

static const Factorization *dense(void) { return factorization_find("full"); }

const Factorization *model_factorization(const Model *m) {
    const Factorization *fz = factorization_find(m->family);
    return fz ? fz : dense();
}

const Factorization *layout_factorization(const Model *m, int layout) {
    return layout == LAYOUT_MEGATRON ? dense() : model_factorization(m);
}

int factorization_hf_llama(const Factorization *fz) {
    for (int k = 0; k < fz->nfactors; k++)
        if (!fz->factors[k].hf_tensor) return 0;
    return 1;
}

const FactorDef *factorization_factor(const Factorization *fz, const char *name) {
    for (int k = 0; k < fz->nfactors; k++)
        if (!strcmp(fz->factors[k].name, name)) return &fz->factors[k];
    return NULL;
}

void factorization_apply(const Factorization *fz, Model *m, int rank) {
    snprintf(m->family, sizeof m->family, "%s", fz->family);
    for (int l = 0; l < m->layers; l++)
        for (int p = 0; p < NPROJ; p++) m->proj[l][p] = (ProjSpec){fz->factor, rank, fz->act};
    m->mlp_gate_act = fz->gate_act;
    m->lax = fz->lax;
}

int factorization_experts(const Factorization *fz) { return fz->moe_experts && fz->nfactors <= 2; }

int factorization_lowrank(const Factorization *fz) { return fz->nfactors > 1; }

int factorization_unsplit(const Factorization *fz, int layout) {
    for (int k = 0; k < fz->nfactors; k++)
        for (int role = 0; role < NROLE; role++)
            if (fz->factors[k].split[layout][role] == SIDE_NONE) return k;
    return -1;
}

const Factorization *factorization_at(int i) { return i >= 0 && i < NTABLE ? &TABLE[i] : NULL; }

int64_t factor_side(const Model *m, int layer, int p, int side) {
    if (side == SIDE_IN) return proj_in(m, p);
    if (side == SIDE_OUT) return proj_out(m, p);
    return m->proj[layer][p].rank;
}

double factor_init_std(const Model *m, int init, int64_t r, int64_t din, int64_t dout) {
    if (init == INIT_DENSE) return m->init_std;
    if (init == INIT_CORE) return pow((double)r, -0.5);
    return pow((double)r, -0.25) * pow((double)(din + dout), -0.25);
}

int proj_role(int p) { return p == PROJ_O || p == PROJ_DOWN ? ROLE_WRITE : ROLE_READ; }
