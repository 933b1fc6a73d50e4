/* cuda_graph.c: CUDA graphs for the CUDA backend (BOOST_CUDA_GRAPH=1, tp=1): a pass captured once
 * and replayed with one launch. */
#include "runtime/cuda_internal.h"

/* The plan is static, so a pass issues the same launches with the same arguments every time: the
 * second pass of a kind is captured (the first one looks the kernels up and fills what is cached),
 * the third and later ones replay the graph with one launch. The batch upload and the AdamW
 * step, whose scalars change, stay outside. */
int cuda_pass_begin(BackendRank *r, int key) {
    if (!r->graphs || key < 0 || key > 1) return 0;
    if (ctx_set(r, "a pass")) return -1;
    if (r->graph_exec[key]) {
        CU(r, api.cuGraphLaunch(r->graph_exec[key], r->stream));
        return 1;
    }
    if (r->graph_seen[key]++ == 0) return 0;
    CU(r, api.cuStreamBeginCapture_v2(r->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL_));
    r->capturing = 1;
    return 0;
}

int cuda_pass_end(BackendRank *r, int key) {
    if (!r->capturing) return 0;
    r->capturing = 0;
    CUgraph graph = NULL;
    CUresult rc = api.cuStreamEndCapture(r->stream, &graph);
    if (rc == 0) rc = api.cuGraphInstantiateWithFlags(&r->graph_exec[key], graph, 0);
    if (graph) api.cuGraphDestroy(graph);
    if (rc) {
        r->graphs = 0;
        r->graph_exec[key] = NULL;
        return rfail(r, "BOOST_CUDA_GRAPH=1: capturing the %s pass as a CUDA graph failed (%s): run without "
                     "BOOST_CUDA_GRAPH", key ? "training" : "forward", cu_str(rc));
    }
    CU(r, api.cuGraphLaunch(r->graph_exec[key], r->stream));   /* capturing ran nothing: run it now */
    return 0;
}
