/* pipeline.h: the generator's pipeline (gen/pipeline.c): the passes run in order, from a run and
 * layout to a finished Graph. */
#ifndef BOOST_GEN_PIPELINE_H
#define BOOST_GEN_PIPELINE_H

#include <stddef.h>
#include "gen/ir.h"

/* A finished Graph for a run and layout, or NULL with err and *status (2: bad input, 1: an
 * internal failure). */
Graph *graph_build(const Run *run, int layout, int checkpoint, char *err, size_t errlen,
                   int *status);

#endif
