/* mixture.h: the batcher the trainer and `boost eval` read through (runtime/mixture.c): one source
 * (runtime/data.h's batcher) or a weighted mixture of sources, the plan's `source` lines.
 * A mixture holds one batcher per source and reads through them; a one-source batcher is read as
 * runtime/data.h describes. */
#ifndef BOOST_MIXTURE_H
#define BOOST_MIXTURE_H

#include <stdint.h>
#include <stddef.h>
#include "runtime/data.h"   // defines: Batcher, TokenSet, batcher_init, batcher_init_set

/* ---- any batcher (one source or a mixture) ----
 * Fill rank's micro_batch*seq inputs and targets of the global micro-batch at position pos
 * (counted in windows; runtime/data.h). Returns 0, or 2 with b->err (a token outside the
 * vocabulary: it never reaches the model). */
int batcher_global(Batcher *b, int64_t pos, int rank, int nranks, int32_t *inputs,
                   int32_t *targets);
/* One rank alone: micro-batch `pos` (counted in micro-batches) = batcher_global(pos*micro_batch,
 * 0, 1). */
int batcher_train(Batcher *b, int64_t pos, int32_t *inputs, int32_t *targets);
/* Number of validation micro-batches used for one validation pass (at most max_batches). */
int64_t batcher_val_batches(const Batcher *b, int64_t max_batches);
/* Fill validation micro-batch i. Returns 0 or 2 with b->err. */
int batcher_val(Batcher *b, int64_t i, int32_t *inputs, int32_t *targets);
void batcher_free(Batcher *b);

/* ---- data mixtures ----
 * n sources, each its own token set with its own train/validation split and its own window order
 * (seed + i * 0x9e3779b97f4a7c15 for source i: source 0 keeps the run's seed). Global training
 * sequence s goes to the source i with the smallest (taken_i + 1) / w_i, w normalised, ties to
 * the lowest index, taken_i the sequences source i gave before s; it reads that source's window at
 * position taken_i. The assignment is a function of s alone (any dp). Validation micro-batch j
 * goes to a source by the same rule over j and reads that source's next validation micro-batch. */

/* The source the rule gives the next sequence: argmin (taken[i] + 1) / w[i], ties to the lowest. */
int mixture_pick(const double *w, const int64_t *taken, int n);
/* A mixture over n token sets (borrowed) with weights > 0 (normalised here). 0, 2 or 1 with err
 * naming the source. */
int batcher_init_mixture(Batcher *b, const TokenSet *sets, const double *weights, int n,
                         double val_fraction, int micro_batch, int seq, int vocab, uint64_t seed,
                         char *err, size_t errlen);
/* Resume at global sequence s with each source's count (taken, as saved; NULL: counted by the
 * rule from sequence 0). */
void mixture_seek(Batcher *b, int64_t s, const int64_t *taken);
/* The sequences each source gave before global sequence s, into taken[nsources]. */
void mixture_taken(Batcher *b, int64_t s, int64_t *taken);
int mixture_global(Batcher *b, int64_t pos, int rank, int32_t *inputs, int32_t *targets);
int64_t mixture_val_batches(const Batcher *b, int64_t max_batches);
int mixture_val(Batcher *b, int64_t i, int32_t *inputs, int32_t *targets);
void mixture_free(Batcher *b);

#endif
