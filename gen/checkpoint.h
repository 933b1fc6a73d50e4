/* checkpoint.h: activation checkpointing (gen/checkpoint.c): which forward activations are saved
 * for the backward and which are recomputed, and the forward tape turned into steps. */
#ifndef BOOST_GEN_CHECKPOINT_H
#define BOOST_GEN_CHECKPOINT_H

#include "gen/ir.h"

void checkpoint_classify(Graph *g);            /* sets Tensor.saved for every forward activation */
int emit_forward_steps(Graph *g);              /* tape -> steps with save markers */

#endif
