/* plan_write.h: the plan writer (gen/plan_write.c): a finished Graph as the text plan file that
 * runtime/ executes (docs/plan-format.md), whole or piece by piece. */
#ifndef BOOST_GEN_PLAN_WRITE_H
#define BOOST_GEN_PLAN_WRITE_H

#include <stdio.h>
#include "gen/ir.h"

int plan_write(const Graph *g, FILE *f);
/* The pieces plan_write is made of (gen/pp.c writes one body per pipeline stage): the header lines
 * (boost-plan .. data), then the arena line (with slots=K when K > 1), canons and params (only
 * those marked used, NULL: all), buffers, inputs and the sections; and one step line. */
void plan_write_header(const Graph *g, FILE *f);
int plan_write_body(const Graph *g, FILE *f, const unsigned char *canon_used,
                    const unsigned char *param_used, int slots);
void plan_write_step(FILE *f, const Graph *g, const Op *o);

#endif
