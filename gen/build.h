/* build.h: the layout builders' entry (gen/build.c): the forward tape of a run's layout, and the
 * static check of the parallel states along it. Both return 0, or 2 with g->err set on bad
 * input. */
#ifndef BOOST_GEN_BUILD_H
#define BOOST_GEN_BUILD_H

#include "gen/ir.h"

int build_forward(Graph *g);
/* The static parallel-state check over the forward tape: 0, or 2 with g->err set. */
int check_states(Graph *g);

#endif
