/* kernel_catalog.h: the one table of kernel kinds (docs/plan-format.md, "Kernel catalog"): each
 * kind's name as the plan writes it, its operands with their storage dtypes and extents, its
 * constants with their defaults, how the generator launches it and how gradients cross it. The
 * generator (gen/kernels.c, gen/backward.c), the plan loader (runtime/plan.c) and the CPU backend
 * (runtime/cpu_kernels.c) all read it; a new kind is one row here, a template, a CPU body. */
#ifndef BOOST_KERNEL_CATALOG_H
#define BOOST_KERNEL_CATALOG_H

#include <stddef.h>

/* How gen/kernels.c launches a kind (1-D grids). */
enum KernelLaunch {
    KL_ROW,        /* one block per row */
    KL_ROW_COLS,   /* one block per row, then column blocks for a parameter gradient */
    KL_ELEM,       /* one thread per VEC columns of every row */
    KL_ROPE,       /* one thread per rotated pair */
    KL_COLS,       /* one thread per column */
    KL_ATTN_FWD, KL_ATTN_BWD,
    KL_SINGLE,     /* one block */
    KL_ROW_THREAD, /* one thread per row (MoE router backward) */
    KL_KV,         /* one thread per element of the rows' K (and V) heads: rows*kv_heads*head_dim */
    KL_DECODE,     /* one block per (row, head) */
};

/* How gradients cross a kind on the forward tape (gen/backward.c). */
enum KernelGrad {
    KG_RULE,   /* its rule in gen/backward.c emits the kinds named in the row's `backward` */
    KG_STOP,   /* no gradient flows back through it (its outputs feed statistics only) */
    KG_NONE,   /* never differentiated: a backward or inference kind, or one marked no_grad */
};

/* X(ID, name, launch, grad, backward, operands, constants), one row a kind, in catalog order.
 * operands: in launch order, each `key[:dtype][?][=ROWS,COLS[,LD]]`: dtype the default storage
 *   type (bf16 when absent; i32 operands must be i32 tensors), `?` when the operand is optional,
 *   then the view the plan loader checks inside its tensor (LD defaults to COLS; none: a rule in
 *   runtime/plan.c checks it). ROWS, COLS and LD are expressions over the constants.
 * constants: each `key` (required), `key=DEFAULT` (the plan carries it; the generator fills the
 *   default when its schedule leaves it out) or `?key=DEFAULT` (optional everywhere).
 * Expressions: sums of products of numbers and constants (`batch*seq`, `2+experts`), a constant
 *   (its value or, when absent, its default), or rsqrt(KEY). */
/* attention's q, k, v, out ([batch*seq, heads*head_dim], k and v kv_heads wide) and constants,
 * the same in its forward and backward */
#define KCAT_ATTN_QKVO \
    "q=batch*seq,heads*head_dim,ldq k=batch*seq,kv_heads*head_dim,ldk " \
    "v=batch*seq,kv_heads*head_dim,ldv out=batch*seq,heads*head_dim,ldo"
#define KCAT_ATTN_CONSTS \
    "batch seq heads kv_heads=heads head_dim ?ldq=heads*head_dim ?ldk=kv_heads*head_dim " \
    "?ldv=kv_heads*head_dim ?ldo=heads*head_dim scale=rsqrt(head_dim)"
#define KERNEL_CATALOG(X) \
    X(EMBEDDING_FWD, "embedding_fwd", KL_ELEM, KG_RULE, "embedding_bwd", \
      "tokens:i32=1,rows table=vocab,cols out=rows,cols,ldo", "rows cols vocab ?ldo=cols") \
    X(EMBEDDING_BWD, "embedding_bwd", KL_COLS, KG_NONE, "", \
      "tokens:i32=1,rows dout=rows,cols,ldo dtable:fp32=vocab,cols", "rows cols vocab ?ldo=cols") \
    X(RMSNORM_FWD, "rmsnorm_fwd", KL_ROW, KG_RULE, "rmsnorm_bwd", \
      "x=rows,cols,ldx gamma=1,cols out=rows,cols,ldo rstd:fp32=1,rows sumsq:fp32?=1,rows", \
      "rows cols ?ldx=cols ?ldo=cols divisor=cols eps=1e-5") \
    X(RMSNORM_BWD, "rmsnorm_bwd", KL_ROW_COLS, KG_NONE, "", \
      "x=rows,cols,ldx gamma=1,cols rstd:fp32=1,rows dout=rows,cols,ldo dot:fp32?=1,rows " \
      "dx?=rows,cols,lddx dgamma:fp32?=1,cols", \
      "rows cols ?ldx=cols ?ldo=cols divisor=cols ?acc=0 ?phase=0 ?lddx=ldx") \
    X(SUMSQ, "sumsq", KL_ROW, KG_STOP, "", "x=rows,cols,ldx out:fp32=1,rows", \
      "rows cols ?ldx=cols") \
    X(ONLINE_NORM_FWD, "online_norm_fwd", KL_ROW, KG_RULE, "online_norm_bwd", \
      "x=rows,cols,ldx gamma=1,cols xhat=rows,cols,ldxhat rho:fp32=1,rows stat=rows,1,ldstat", \
      "rows cols ?ldx=cols ?ldstat=1 divisor=cols eps=1e-5 ?ldxhat=cols") \
    X(ONLINE_NORM_RESCALE, "online_norm_rescale", KL_ELEM, KG_STOP, "", \
      "h=rows,cols,ldh rho:fp32=1,rows", "rows cols ?ldh=cols") \
    X(BOTTLENECK_ACT, "bottleneck_act", KL_ROW, KG_RULE, "bottleneck_act_bwd", \
      "h=rows,cols,ldh y?=rows,cols,ldy z=rows,cols,ldz rstd:fp32?=1,rows stat?=1,rows", \
      "rows cols ?ldh=cols ?ldy=cols ?ldz=cols act=0 ?norm=0 ?eps=1e-5") \
    X(BOTTLENECK_ACT_BWD, "bottleneck_act_bwd", KL_ROW, KG_NONE, "", \
      "h=rows,cols,ldh y=rows,cols,ldy rstd:fp32?=1,rows rho:fp32?=1,rows dz=rows,cols,ldz " \
      "dh=rows,cols,lddh dstat:fp32?=1,rows", \
      "rows cols ?ldh=cols ?ldy=cols ?ldz=cols ?lddh=cols act=0 ?norm=0 ?divisor=1 ?acc=0") \
    X(ONLINE_NORM_BWD, "online_norm_bwd", KL_ROW_COLS, KG_NONE, "", \
      "x=rows,cols,ldx gamma=1,cols rho:fp32=1,rows dxhat=rows,cols,lddxhat dstat:fp32=1,rows " \
      "dx=rows,cols,lddx dgamma:fp32?=1,cols", \
      "rows cols ?ldx=cols ?acc=0 ?lddxhat=cols ?lddx=ldx") \
    X(ROPE, "rope", KL_ROPE, KG_RULE, "rope", "x=rows,heads*head_dim,ldx", \
      "rows heads head_dim ?ldx=heads*head_dim seq=1 theta=10000 ?inverse=0") \
    X(ATTENTION_FWD, "attention_fwd", KL_ATTN_FWD, KG_RULE, "attention_bwd", \
      KCAT_ATTN_QKVO " lse:fp32=1,batch*seq*heads", KCAT_ATTN_CONSTS) \
    X(ATTENTION_BWD, "attention_bwd", KL_ATTN_BWD, KG_NONE, "", \
      KCAT_ATTN_QKVO " dout=batch*seq,heads*head_dim,lddo lse:fp32=1,batch*seq*heads " \
      "dq=batch*seq,heads*head_dim,lddq dk=batch*seq,kv_heads*head_dim,lddk " \
      "dv=batch*seq,kv_heads*head_dim,lddv", \
      KCAT_ATTN_CONSTS " ?lddo=ldo ?lddq=ldq ?lddk=ldk ?lddv=ldv") \
    X(GLU_FWD, "glu_fwd", KL_ELEM, KG_RULE, "glu_bwd", \
      "gate=rows,cols,ldg up=rows,cols,ldu out=rows,cols,ldo", \
      "rows cols ?ldg=cols ?ldu=cols ?ldo=cols act=0") \
    X(GLU_BWD, "glu_bwd", KL_ELEM, KG_NONE, "", \
      "gate=rows,cols,ldg up=rows,cols,ldu dout=rows,cols,ldo dgate=rows,cols,lddg " \
      "dup=rows,cols,lddu", "rows cols ?ldg=cols ?ldu=cols ?ldo=cols ?lddg=cols ?lddu=cols act=0") \
    X(ADD, "add", KL_ELEM, KG_RULE, "copy", "a=rows,cols,lda b=rows,cols,ldb out=rows,cols,ldo", \
      "rows cols ?lda=cols ?ldb=cols ?ldo=cols") \
    X(COPY, "copy", KL_ELEM, KG_RULE, "copy", "src=rows,cols,lds dst=rows,cols,ldd", \
      "rows cols ?lds=cols ?ldd=cols ?acc=0") \
    X(XENT_FWD, "xent_fwd", KL_ROW, KG_NONE, "", \
      "logits=rows,cols,ldl targets:i32=1,rows stats:fp32=rows,3", \
      "rows cols ?ldl=cols vocab_offset=0") \
    X(XENT_COMBINE, "xent_combine", KL_SINGLE, KG_RULE, "xent_bwd", \
      "stats_all:fp32=rows,3*tp lse:fp32=1,rows loss:fp32=1,1", "rows tp=1") \
    X(XENT_BWD, "xent_bwd", KL_ELEM, KG_NONE, "", \
      "logits=rows,cols,ldl targets:i32=1,rows lse:fp32=1,rows dlogits=rows,cols,lddl", \
      "rows cols ?ldl=cols vocab_offset=0 scale=1 ?lddl=ldl") \
    /* MoE (indices as exact integers in fp32): rows = tokens, or slots (experts*capacity) for \
     * moe_dispatch and moe_combine_bwd; aux's length depends on zcoef (runtime/plan.c) */ \
    X(MOE_ROUTER, "moe_router", KL_SINGLE, KG_RULE, "moe_router_bwd", \
      "logits=rows,experts,ldl probs:fp32=rows,experts sel:fp32=rows,top_k " \
      "gates:fp32=rows,top_k slot:fp32=rows,top_k src:fp32=1,experts*capacity aux:fp32", \
      "rows experts top_k capacity ?ldl=experts ?norm=1 ?coef=0 ?zcoef=0") \
    X(MOE_ROUTER_BWD, "moe_router_bwd", KL_ROW_THREAD, KG_NONE, "", \
      "probs:fp32=rows,experts sel:fp32=rows,top_k gates:fp32=rows,top_k aux:fp32 " \
      "dgates:fp32=rows,top_k dlogits=rows,experts,lddl", \
      "rows experts top_k ?norm=1 ?coef=0 ?scale=1 ?acc=0 ?lddl=experts ?zcoef=0") \
    X(MOE_DISPATCH, "moe_dispatch", KL_ELEM, KG_RULE, "moe_dispatch_bwd", \
      "x=tokens,cols,ldx src:fp32=1,rows out=rows,cols,ldo", \
      "rows cols top_k tokens ?ldx=cols ?ldo=cols") \
    X(MOE_DISPATCH_BWD, "moe_dispatch_bwd", KL_ELEM, KG_NONE, "", \
      "dout=experts*capacity,cols,ldo sel:fp32=rows,top_k slot:fp32=rows,top_k dx=rows,cols,lddx", \
      "rows cols top_k experts capacity ?ldo=cols ?lddx=cols ?acc=0") \
    X(MOE_COMBINE, "moe_combine", KL_ELEM, KG_RULE, "moe_combine_bwd moe_gates_bwd", \
      "eo=experts*capacity,cols,lde sel:fp32=rows,top_k slot:fp32=rows,top_k " \
      "gates:fp32=rows,top_k out=rows,cols,ldo", \
      "rows cols top_k experts capacity ?lde=cols ?ldo=cols") \
    X(MOE_COMBINE_BWD, "moe_combine_bwd", KL_ELEM, KG_NONE, "", \
      "dout=tokens,cols,ldo src:fp32=1,rows gates:fp32=tokens,top_k deo=rows,cols,ldde", \
      "rows cols top_k tokens ?ldo=cols ?ldde=cols") \
    X(MOE_GATES_BWD, "moe_gates_bwd", KL_ROW, KG_NONE, "", \
      "dout=rows,cols,ldo eo=experts*capacity,cols,lde sel:fp32=rows,top_k slot:fp32=rows,top_k " \
      "dgates:fp32=rows,top_k", "rows cols top_k experts capacity ?ldo=cols ?lde=cols") \
    X(MOE_AUX_ADD, "moe_aux_add", KL_SINGLE, KG_NONE, "", "aux:fp32=1,1 loss:fp32=1,1", "rows") \
    /* inference (gen/infer_plan.c): positions start at pos[0], an exact integer in fp32 */ \
    X(ROPE_AT, "rope_at", KL_ROPE, KG_NONE, "", "x=rows,heads*head_dim,ldx pos:fp32=1,1", \
      "rows heads head_dim ?ldx=heads*head_dim ?theta=10000") \
    X(KV_APPEND, "kv_append", KL_KV, KG_NONE, "", \
      "k=rows,kv_heads*head_dim,ldk v=rows,kv_heads*head_dim,ldv pos:fp32=1,1 " \
      "kcache=kv_heads*max_seq,head_dim vcache=kv_heads*max_seq,head_dim", \
      "rows kv_heads head_dim max_seq ?ldk=kv_heads*head_dim ?ldv=kv_heads*head_dim") \
    X(ATTENTION_DECODE, "attention_decode", KL_DECODE, KG_NONE, "", \
      "q=rows,heads*head_dim,ldq kcache=kv_heads*max_seq,head_dim " \
      "vcache=kv_heads*max_seq,head_dim pos:fp32=1,1 out=rows,heads*head_dim,ldo", \
      "rows heads kv_heads head_dim max_seq ?ldq=heads*head_dim ?ldo=heads*head_dim " \
      "?scale=rsqrt(head_dim)")

/* The kinds' ids: KK_<ID>, in catalog order; KK_COUNT of them. */
enum KernelKindId {
#define KCAT_ID(id, name, launch, grad, backward, operands, constants) KK_##id,
    KERNEL_CATALOG(KCAT_ID)
#undef KCAT_ID
    KK_COUNT
};

typedef struct {
    const char *name, *operands, *constants, *backward;
    enum KernelLaunch launch;
    enum KernelGrad grad;
} KernelKind;

/* Row `id` of the catalog, NULL out of range. */
const KernelKind *kcat_kind(int id);
/* The id of kind `name`, -1 when the catalog lacks it. */
int kcat_find(const char *name);
/* Kind `id`'s name as the plan writes it ("?" out of range). */
const char *kcat_name(int id);

/* One operand of a kind, parsed from its row. Extents empty when the row gives none. */
typedef struct {
    char key[24], dtype[8];   /* dtype "bf16" | "fp32" | "i32" */
    int optional;
    char rows[48], cols[48], ld[48];
} KcatOperand;
/* Operand o of kind id: 0 and *out filled, 1 past the last operand, -1 unknown kind. */
int kcat_operand(int id, int o, KcatOperand *out);

/* One constant of a kind: its key, default expression ("" when required) and whether the
 * generator (gen_optional: `key=D` or `?key=D`) or the plan (plan_optional: `?key=D`) may leave it
 * out. */
typedef struct {
    char key[24], dflt[48];
    int gen_optional, plan_optional;
} KcatConst;
/* Constant c of kind id: 0 and *out filled, 1 past the last, -1 unknown kind. */
int kcat_const(int id, int c, KcatConst *out);
/* Is key a constant of kind id? Fills *out when it is. */
int kcat_const_find(int id, const char *key, KcatConst *out);

/* The value of a constant the caller knows: 1 and *value when found, 0 when absent. */
typedef int (*KcatLookup)(const void *ctx, const char *key, double *value);
/* The value of constant `key` of kind id: looked up, else its default expression evaluated (over
 * the looked-up constants and their defaults); 0 when neither gives one. */
double kcat_value(int id, const char *key, KcatLookup lookup, const void *ctx);
/* An expression (the extents' or a default's) of kind id evaluated the same way. */
double kcat_eval(int id, const char *expr, KcatLookup lookup, const void *ctx);

/* Constants whose values are floats (eps, theta, scale, coef, zcoef); the others are integers. */
int kcat_const_is_float(const char *key);
/* A constant's short tag in a kernel's procedural name ("rows" -> "r"; the key itself when it has
 * none, as the ld keys). */
const char *kcat_const_tag(const char *key);

#endif
