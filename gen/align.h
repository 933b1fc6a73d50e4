/* align.h: GEMM alignment (gen/align.c): the FLOPs of a finished schedule's GEMMs that miss
 * cuBLAS's fast paths, by rule, for the report. */
#ifndef BOOST_GEN_ALIGN_H
#define BOOST_GEN_ALIGN_H

#include "gen/ir.h"

/* GEMM FLOPs (per rank, 2mnk*batch, forward + backward + recompute) that miss cuBLAS's fast paths,
 * by rule: an operand start off a 16-byte boundary, a leading dimension or (batched) a batch
 * stride that is not a multiple of 8 elements. A leading dimension that equals the operand's width
 * (a dense operand) counts as the shape's (a model dimension not a multiple of 8, which no buffer
 * layout can fix); any other as the layout's. A GEMM breaking several rules counts in each rule's
 * figure and once in misaligned (and once in layout). */
typedef struct {
    double total, misaligned;     /* FLOPs of all GEMMs, of those breaking any rule */
    double layout;                /* of those breaking a layout rule: start, ld or stride */
    double start, ld, stride;     /* FLOPs of the GEMMs breaking each layout rule */
    double shape;                 /* FLOPs of the GEMMs with a dense operand whose width is not
                                     a multiple of 8 */
    int ngemms_misaligned;        /* GEMM steps (grouped: members) breaking any rule */
} GemmAlign;
void gemm_alignment(const Graph *g, GemmAlign *a);

#endif
