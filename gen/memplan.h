/* memplan.h: the memory planner (gen/memplan.c): live ranges of a Graph's buffers, their offsets
 * in the arena, and the check that no two live buffers overlap. */
#ifndef BOOST_GEN_MEMPLAN_H
#define BOOST_GEN_MEMPLAN_H

#include "gen/ir.h"

int memplan(Graph *g);                         /* liveness, offsets, overlap check */

#endif
