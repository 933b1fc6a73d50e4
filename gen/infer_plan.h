/* infer_plan.h: the inference plan's graph (gen/infer_plan.c): one decode step or prefill chunk
 * of a run's model, with its KV-cache kernels. */
#ifndef BOOST_GEN_INFER_PLAN_H
#define BOOST_GEN_INFER_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "gen/ir.h"

/* The decode-step graph for `rows` token rows at positions pos.. (1: a decode step; more: a
 * prefill chunk): the forward, KV-cache kernels, live ranges over the step; the caches and pos sit
 * past the training arena. *cache_bytes: the KV cache per rank. */
Graph *infer_graph_build(const Run *run, int layout, int rows, int64_t *cache_bytes, char *err,
                         size_t errlen, int *status);

#endif
