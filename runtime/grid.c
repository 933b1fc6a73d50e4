/* grid.c: ranks to coordinates and groups for world = dp x pp x tp, tp fastest, then dp, then pp
 * (runtime/grid.h): rank = pp_rank*(dp*tp) + dp_rank*tp + tp_rank. */
#include <stdio.h>
#include <string.h>
#include "runtime/grid.h"

int grid_make(Grid *g, int dp, int pp, int tp, char *err, size_t errlen) {
    if (dp < 1 || pp < 1 || tp < 1) {
        snprintf(err, errlen, "rank grid dp=%d pp=%d tp=%d: every degree must be at least 1", dp, pp, tp);
        return -1;
    }
    if ((long long)dp * pp * tp > 4096) {
        snprintf(err, errlen, "rank grid dp=%d pp=%d tp=%d: a world of %lld ranks is more than 4096", dp, pp, tp,
                 (long long)dp * pp * tp);
        return -1;
    }
    g->dp = dp; g->pp = pp; g->tp = tp; g->world = dp * pp * tp; g->ep = 1;
    return 0;
}

int grid_set_ep(Grid *g, int ep, char *err, size_t errlen) {
    if (ep < 1 || g->dp % ep) {
        snprintf(err, errlen, "rank grid: ep=%d must be at least 1 and divide dp=%d (an ep group is ep of the dp ranks)", ep, g->dp);
        return -1;
    }
    g->ep = ep;
    return 0;
}

GridCoord grid_coord(const Grid *g, int rank) {
    GridCoord c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.tp_rank = rank % g->tp;
    c.dp_rank = (rank / g->tp) % g->dp;
    c.pp_rank = rank / (g->tp * g->dp);
    int base = c.pp_rank * g->dp * g->tp;
    c.index[GROUP_TP] = c.tp_rank; c.first[GROUP_TP] = base + c.dp_rank * g->tp; c.stride[GROUP_TP] = 1; c.size[GROUP_TP] = g->tp;
    c.index[GROUP_DP] = c.dp_rank; c.first[GROUP_DP] = base + c.tp_rank; c.stride[GROUP_DP] = g->tp; c.size[GROUP_DP] = g->dp;
    c.index[GROUP_PP] = c.pp_rank; c.first[GROUP_PP] = c.dp_rank * g->tp + c.tp_rank; c.stride[GROUP_PP] = g->dp * g->tp;
    c.size[GROUP_PP] = g->pp;
    int ep = g->ep > 1 ? g->ep : 1;
    c.ep_rank = c.dp_rank % ep;
    c.index[GROUP_EP] = c.ep_rank; c.first[GROUP_EP] = base + (c.dp_rank - c.ep_rank) * g->tp + c.tp_rank;
    c.stride[GROUP_EP] = g->tp; c.size[GROUP_EP] = ep;
    c.index[GROUP_EDP] = c.dp_rank / ep; c.first[GROUP_EDP] = base + c.ep_rank * g->tp + c.tp_rank;
    c.stride[GROUP_EDP] = ep * g->tp; c.size[GROUP_EDP] = g->dp / ep;
    return c;
}

int grid_member(const Grid *g, int rank, int kind, int index) {
    GridCoord c = grid_coord(g, rank);
    return c.first[kind] + index * c.stride[kind];
}

const char *grid_group_name(int kind) {
    return kind == GROUP_TP ? "tp" : kind == GROUP_DP ? "dp" : kind == GROUP_PP ? "pp" : kind == GROUP_EP ? "ep"
         : kind == GROUP_EDP ? "edp" : "?";
}

int grid_group_parse(const char *s) {
    for (int k = 0; k < GROUP_COUNT; k++)
        if (!strcmp(s, grid_group_name(k))) return k;
    return -1;
}

void grid_describe(const Grid *g, char *out, size_t n) {
    size_t used = 0;
    if (!n) return;
    out[0] = 0;
#define OUT(...) do { if (used < n) used += (size_t)snprintf(out + used, n - used, __VA_ARGS__); } while (0)
    OUT("rank grid: world=%d = dp %d x pp %d x tp %d (tp fastest, then dp, then pp)\n", g->world, g->dp, g->pp, g->tp);
    for (int r = 0; r < g->world && r < 64; r++) {
        GridCoord c = grid_coord(g, r);
        OUT("  rank %d: tp=%d dp=%d pp=%d;", r, c.tp_rank, c.dp_rank, c.pp_rank);
        for (int k = 0; k < GROUP_COUNT; k++) {
            if ((k == GROUP_EP || k == GROUP_EDP) && g->ep <= 1) continue;   /* shown with expert parallelism only */
            OUT(" %s group {", grid_group_name(k));
            for (int i = 0; i < c.size[k]; i++) OUT("%s%d", i ? "," : "", c.first[k] + i * c.stride[k]);
            OUT("}");
        }
        OUT("\n");
    }
    if (g->world > 64) OUT("  (%d more ranks)\n", g->world - 64);
#undef OUT
}
