/* backward.h: the backward pass (gen/backward.c): the backward section of a Graph, derived from
 * its forward steps, with the recompute of the activations the checkpointing did not save. */
#ifndef BOOST_GEN_BACKWARD_H
#define BOOST_GEN_BACKWARD_H

#include "gen/ir.h"

int build_backward(Graph *g);                  /* appends the backward section (with recompute) */

#endif
