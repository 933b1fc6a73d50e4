/* collective_catalog.h: the one table of collective kinds (docs/plan-format.md, "Collectives"):
 * each kind's word in plan.txt, its operands, the groups and sections it may run in and how many
 * ring phases it costs. The generator (IR ops, the plan writer, the cost model), the plan loader
 * and the backends all read it; a new collective is a row here plus its bodies in the backends. */
#ifndef BOOST_COLLECTIVE_CATALOG_H
#define BOOST_COLLECTIVE_CATALOG_H

#include <stdint.h>

/* The groups a collective runs on, in the order the IR numbers them (Op.group) and plan.txt names
 * them (group=tp|dp|ep|edp). tp: the tensor-parallel ranks of one dp rank; dp: the ranks with the
 * same tp rank; ep: the dp ranks exchanging routed tokens; edp: the dp ranks holding the same
 * experts. A group of size 1 makes every collective a no-op (alltoall and gathers: a copy). */
enum CollGroup { CG_TP, CG_DP, CG_EP, CG_EDP, CG_COUNT };

/* Operands, as bits of a row's `operands`: buf is read and written in place; src is read, dst
 * written; map is a read-only table (alltoall: the token side's slot -> token map). */
enum CollOperand { CO_BUF = 1, CO_SRC = 2, CO_DST = 4, CO_MAP = 8 };

/* Sections a kind may sit in, as bits: forward, backward, optimizer. */
enum CollSection { CS_FWD = 1, CS_BWD = 2, CS_OPT = 4 };

#define CG_ANY ((1 << CG_TP) | (1 << CG_DP) | (1 << CG_EP) | (1 << CG_EDP))

/* X(ID, word, operands, groups, sections, ring_phases, what), one row a kind, in catalog order.
 * ring_phases: passes of (n-1)/n of the payload over a ring of n ranks (an all-reduce is a
 *   reduce-scatter then an all-gather: 2); the cost model's time is phases * ((n-1)/n * bytes /
 *   bandwidth + (n-1) * latency), bytes the payload of the whole buffer (coll_seconds below).
 * Shapes (per rank, n the group's size, s = ceil(elems/n), member i's shard [i*s, min((i+1)*s,
 *   elems)), zero_shard in runtime/plan.h):
 *   allreduce       buf [elems]: every member gets the sum (op=avg: the mean; scale=S: times S).
 *   allgather       src [rows, cols] (ld_src) -> dst [rows, cols*n] (ld_dst): member i's src is
 *                   dst's column block i on every member.
 *   reduce_scatter  buf [elems]: member i's shard of buf becomes the shard of the sum (op=avg:
 *                   the mean); the rest of buf is unspecified afterwards.
 *   gather_shards   buf [elems]: member i's shard goes to every member (the inverse of
 *                   reduce_scatter's placement: ZeRO's updated parameters).
 *   alltoall        src, dst, map: routed slots to their experts' ep ranks and back
 *                   (docs/plan-format.md "alltoall"). */
#define COLLECTIVE_CATALOG(X) \
    X(ALLREDUCE, "allreduce", CO_BUF, CG_ANY, CS_FWD | CS_BWD, 2, \
      "sum (or mean) of buf over the group, in place on every member") \
    X(ALLGATHER, "allgather", CO_SRC | CO_DST, CG_ANY, CS_FWD | CS_BWD, 1, \
      "every member's src as a column block of dst on every member") \
    X(REDUCE_SCATTER, "reduce_scatter", CO_BUF, CG_ANY, CS_FWD | CS_BWD, 1, \
      "member i keeps shard i of the sum (or mean) of buf, in place") \
    X(GATHER_SHARDS, "gather_shards", CO_BUF, 1 << CG_DP, CS_OPT, 1, \
      "member i's shard of buf to every member, in place (ZeRO parameters)") \
    X(ALLTOALL, "alltoall", CO_SRC | CO_DST | CO_MAP, 1 << CG_EP, CS_FWD | CS_BWD, 1, \
      "routed token slots to their experts' ep ranks (way=out) and back (way=back)")

enum CollKind {
#define CCAT_ENUM(id, word, operands, groups, sections, phases, what) CK_##id,
    COLLECTIVE_CATALOG(CCAT_ENUM)
#undef CCAT_ENUM
    CK_COUNT
};

typedef struct {
    const char *word;       /* as plan.txt spells it */
    unsigned operands;      /* CO_* bits */
    unsigned groups;        /* bit 1 << CG_*: the groups it may run on */
    unsigned sections;      /* CS_* bits */
    int ring_phases;
    const char *what;       /* one line for messages and docs */
} CollKindRow;

const CollKindRow *ccat_kind(int kind);          /* NULL when out of range */
int ccat_find(const char *word);                 /* CK_*, -1 when not a collective */
const char *ccat_word(int kind);                 /* "?" when out of range */
const char *ccat_group_name(int group);          /* "tp", "dp", "ep", "edp"; "?" out of range */
int ccat_group_find(const char *name);           /* CG_*, -1 when unknown */
int ccat_allows_group(int kind, int group);      /* 1 when the row lists the group */
/* The time of one collective of `bytes` payload (the whole buffer) on a ring of n ranks, with
 * bandwidth bw_gbs GB/s per rank and latency alpha_us per hop: 0 when n <= 1 or bytes <= 0. */
double ccat_seconds(int kind, double bytes, int n, double bw_gbs, double alpha_us);
/* Bytes one rank sends for it: ring_phases * (n-1)/n * bytes (0 when n <= 1). */
double ccat_wire_bytes(int kind, double bytes, int n);

#endif
