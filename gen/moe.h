/* moe.h: Mixture-of-Experts blocks of the btp layout (gen/moe.c): the router and expert canons,
 * the MoE MLP of a layer, the load-balance loss, and the sizes the report and spec checks use. */
#ifndef BOOST_GEN_MOE_H
#define BOOST_GEN_MOE_H

#include <stdint.h>
#include "gen/ir.h"

int moe_check(Graph *g);                       /* 0, or 2 with g->err set */
void moe_canons(Graph *g, int layer);          /* router and expert canons of an MoE layer */
int moe_block(Graph *g, int layer, int h);     /* the MoE MLP on the residual shard h; returns
                                                  x_{i+1} */
void moe_tail(Graph *g);                       /* after the loss: add every layer's load-balance
                                                  loss */
int64_t moe_capacity(const Run *run);          /* C, token slots per expert per micro-batch */
/* elements of the ep all-to-all of a layer, forward, per micro-batch */
int64_t moe_dispatch_elems(const Run *run, int layer, unsigned shared);
/* the experts' canonical params of a layer */
int64_t moe_expert_params(const Model *m, int layer, unsigned shared);

#endif
