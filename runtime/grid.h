/* grid.h: the rank grid (docs/plan-format.md, DESIGN.md "Scaling out"): world = dp x pp x tp with tp
 * fastest, then dp, then pp. The one place that turns a rank into its coordinates and its groups;
 * the Engine, the backends' collectives and the training loop all ask here. */
#ifndef BOOST_GRID_H
#define BOOST_GRID_H

#include <stddef.h>

/* Expert parallelism (ep > 1, a divisor of dp): the ep group of a rank is the ep neighbouring dp ranks
 * (dp ranks k*ep .. k*ep+ep-1, same tp and pp rank) that share out an MoE layer's experts, ep rank =
 * dp_rank % ep; its edp group is the dp/ep ranks with the same ep rank (stride ep*tp), which hold the
 * same experts and reduce their gradients. With ep = 1 the ep group is the rank alone, edp = dp. */
enum GridGroup { GROUP_TP, GROUP_DP, GROUP_PP, GROUP_EP, GROUP_EDP, GROUP_COUNT };

typedef struct { int dp, pp, tp, world, ep; } Grid;

/* A rank's place: its coordinates and, per group kind, its index in the group and the group's
 * first member and stride (member i of the group is first + i*stride; size = the degree). */
typedef struct {
    int rank, tp_rank, dp_rank, pp_rank, ep_rank;
    int index[GROUP_COUNT], first[GROUP_COUNT], stride[GROUP_COUNT], size[GROUP_COUNT];
} GridCoord;

/* 0, or -1 with a message when a degree is below 1 or the world is too large. */
int grid_make(Grid *g, int dp, int pp, int tp, char *err, size_t errlen);
/* Set the expert-parallel degree (grid_make sets 1): 0, or -1 with a message when ep does not divide dp. */
int grid_set_ep(Grid *g, int ep, char *err, size_t errlen);
GridCoord grid_coord(const Grid *g, int rank);
/* Rank of member `index` of the `kind` group that holds `rank`. */
int grid_member(const Grid *g, int rank, int kind, int index);
const char *grid_group_name(int kind);   /* "tp", "dp", "pp", "ep", "edp" */
/* The group kind named by s ("tp", "dp", "pp", "ep", "edp"), -1 for anything else. */
int grid_group_parse(const char *s);
/* One line per rank: "rank R: tp=i dp=j pp=k, tp group [a..b], dp group {..}" (ends in \n). */
void grid_describe(const Grid *g, char *out, size_t n);

#endif
