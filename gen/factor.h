/* factor.h: the factorizations as data. One row per family a model spec can name (full{}, svd{},
 * cola{}, lax{}): the factors a projection is made of, their shapes, the activation between them,
 * their initialisation, the side of each factor that every tensor-parallel layout splits, and the
 * names they are exported under. The layouts (gen/build.c), the spec loader and the reports read
 * the rows instead of comparing family names. The table itself is in gen/factor.c. */
#ifndef BOOST_FACTOR_H
#define BOOST_FACTOR_H

#include "gen/model.h"

/* A side of a factor: the projection's input width d_in, its rank r, or its output width d_out.
 * In FactorDef.split: SIDE_WHOLE, the layout keeps the factor whole on every rank; SIDE_NONE,
 * the factorization does not run in that layout. */
enum Side { SIDE_NONE = -1, SIDE_IN, SIDE_RANK, SIDE_OUT, SIDE_WHOLE };
/* How a factor is drawn: std init_std (dense weights), std (r (d_in + d_out))^(-1/4) for each
 * outer factor of a product (the product then has about the variance of a dense init), or std
 * r^(-1/2) for an r x r core (it keeps the latent's scale). */
enum Init { INIT_DENSE, INIT_PRODUCT, INIT_CORE };
/* The projections that read the residual stream (q, k, v, gate, up) and those that write back
 * to it (o, down): megatron splits the former's output, the latter's input. */
enum Role { ROLE_READ, ROLE_WRITE, NROLE };
enum { NLAYOUT = 3, FACTORS_MAX = 3 };

typedef struct {
    const char *name;         /* "W", "A", "B": canonical parameter L<i>.<proj>.<name>, the name it
                                 is checkpointed and exported under */
    int rows, cols;           /* enum Side: the factor is [rows, cols] */
    int init;                 /* enum Init */
    int split[NLAYOUT][NROLE];   /* enum Side tp splits, per enum Layout and enum Role;
                                    SIDE_NONE: the factorization does not run in that layout */
    const char *hf_tensor;    /* the Hugging Face LLaMA layout's name of the factor, transposed
                                 to nn.Linear's [out, in] (W: "weight", as in
                                 model.layers.<i>.self_attn.q_proj.weight); NULL: none, and a row
                                 with such a factor exports under its canonical names with
                                 modeling_boost.py (cli/export.c) */
} FactorDef;

typedef struct {
    const char *family;       /* the spec's constructor (cola{...}) and the plan's model family */
    int factor;               /* enum Factor of every projection */
    int act;                  /* default sigma between the factors (ACT_NONE: identity) */
    int gate_act;             /* default mlp_gate_act: the act on the gate before gate*up */
    int lax;                  /* 1: LaX latent crossings (B_p reads z_p + z_prev(p)) */
    int moe_experts;          /* 1: an MoE expert's gate/up/down may have this factorization */
    int moe_share;            /* 1: MoE experts may share a factor (docs/moe.md) */
    int nfactors;             /* 1: a dense W; 2: A, sigma, B; 3: A, sigma, an r x r core, B */
    FactorDef factors[FACTORS_MAX];   /* in execution order: factors[0] reads the input, the
                                         last writes the output */
} Factorization;

/* The row of a family name, or NULL when no row has that name. */
const Factorization *factorization_find(const char *family);
/* The row of a model (its family; the full row when the family is unknown). */
const Factorization *model_factorization(const Model *m);
/* The row a layout builds a model with: megatron builds every model dense (a low-rank model's
 * full-rank twin), the other layouts the model's own. */
const Factorization *layout_factorization(const Model *m, int layout);
/* 1 when every factor of the row has a name in the Hugging Face LLaMA layout (hf_tensor). */
int factorization_hf_llama(const Factorization *fz);
/* The factor of the row named `name` ("A", "W", ...), or NULL. */
const FactorDef *factorization_factor(const Factorization *fz, const char *name);
/* Make every projection of m's layers the row's factorization at rank `rank` (0 for a dense row)
 * with the row's defaults: the model's family, each projection's factor and sigma, the MLP gate
 * act and the LaX flag. */
void factorization_apply(const Factorization *fz, Model *m, int rank);
/* 1 when MoE experts may have the row's factorization: the row says so (moe_experts) and its
 * factors are one dense factor or "input factor, sigma, output factor" (gen/moe.c's data flow). */
int factorization_experts(const Factorization *fz);
/* 1 when the row has more than one factor (a bottleneck the low-rank layouts split). */
int factorization_lowrank(const Factorization *fz);
/* The first factor layout (enum Layout) has no split for, or -1 when the row runs in it. */
int factorization_unsplit(const Factorization *fz, int layout);
/* Row i of the table (0, 1, ...), or NULL past the last. */
const Factorization *factorization_at(int i);
/* Width of side s of projection p in layer i (SIDE_RANK: its rank). */
int64_t factor_side(const Model *m, int layer, int p, int side);
/* The std of a factor drawn with `init` (enum Init) in a product of rank r from d_in to d_out. */
double factor_init_std(const Model *m, int init, int64_t r, int64_t din, int64_t dout);
/* enum Role of projection p. */
int proj_role(int p);

#endif
