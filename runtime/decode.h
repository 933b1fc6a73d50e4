/* decode.h: generation with a KV cache on two engines of one model: the decode step (infer.txt,
 * one token) and the prefill step (prefill.txt, a chunk of prompt tokens), both from gen/infer_plan.c.
 * The prompt goes through the prefill engine in chunks, its caches are copied to the step engine
 * (per rank, through the host), then one decode step per token. */
#ifndef BOOST_DECODE_H
#define BOOST_DECODE_H

#include <stdint.h>
#include <stddef.h>
#include "runtime/plan.h"
#include "runtime/runtime.h"

typedef struct {
    Plan *step, *pre;         /* pre may be NULL: the prompt then goes through the step one token at a time */
    Engine *se, *pe;
    int max_seq, chunk, vocab;
    int pos;                  /* positions 0..pos-1 are in the step engine's cache */
    float *local, *cache;     /* host buffers: a rank's logits tensor, one cache tensor */
    int64_t cache_elems;
} Decoder;

/* Before engine_create: move each plan's logits past its arena's end so they outlive the pass. */
void decoder_keep_logits(Plan *p);
/* With both engines created (pre/pe may be NULL) and their parameters loaded. 0, or -1 with err. */
int decoder_init(Decoder *d, Plan *step, Engine *se, Plan *pre, Engine *pe, char *err, size_t errlen);
/* The cache restarts: tokens tok[0..n-1] at positions 0..n-1 (1 <= n <= max_seq); logits [vocab] of
 * the last one. 0, or -1 with err. */
int decoder_prefill(Decoder *d, const int32_t *tok, int n, float *logits, char *err, size_t errlen);
/* One token at the next position (< max_seq); logits [vocab]. 0, or -1 with err. */
int decoder_step(Decoder *d, int32_t tok, float *logits, char *err, size_t errlen);
void decoder_release(Decoder *d);   /* the host buffers; the engines and plans stay the caller's */

#endif
