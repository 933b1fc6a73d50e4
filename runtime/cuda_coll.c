/* cuda_coll.c: the CUDA backend's collectives: all-reduce, all-gather and reduce-scatter on any
 * group (local mode: a barrier and a summing kernel or copies; multi-process mode: NCCL on the
 * group's communicator), issued on the collectives' stream for the executor's overlap or completed
 * at once; expert parallelism's all-to-all; ZeRO's gather of updated shards. */
#include "runtime/cuda_internal.h"

static int dp_begin(BackendRank *r);
static int dp_end(BackendRank *r, const char *what);

/* The group a collective runs on (enum GridGroup) as this rank sees it: its size n, this rank's
 * index in it and, in multi-process mode, its NCCL communicator. In local mode (ranks as threads of
 * one process, dp = 1) only the tp group has more than one member. */
typedef struct { int n, me; ncclComm_t comm; } GroupView;
static GroupView group_view(const BackendRank *r, int group) {
    GroupView v = {1, 0, NULL};
    if (group < 0 || group >= GROUP_COUNT) return v;
    if (!r->world) {
        if (group == GROUP_TP && r->group) { v.n = r->group->tp; v.me = r->rank; }
        return v;
    }
    v.n = r->gsize[group] > 0 ? r->gsize[group] : 1;
    v.me = r->gidx[group];
    /* without expert parallelism the edp group is the dp group (no edp split is made) */
    v.comm = group == GROUP_TP ? r->nccl_comm : group == GROUP_DP ? r->dp_comm
           : group == GROUP_EP ? r->ep_comm
           : group == GROUP_EDP ? (r->edp_comm ? r->edp_comm : r->dp_comm) : NULL;
    return v;
}

static int64_t blocks_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return b < 1 ? 1 : b > 4096 ? 4096 : b;
}

/* Local mode's reduce-scatter is the tp group's all-reduce (every member then holds the whole sum;
 * the catalog leaves the rest of buf unspecified). op=avg (all-reduce and reduce-scatter): each
 * member's buffer (fp32, n elements) then times 1/members. */
static int scale_members(BackendRank *r, CUstream s, const CUdeviceptr *bufs, int members,
                         long long n) {
    float sc = 1.0f / (float)members;
    for (int q = 0; q < members; q++) {
        CUdeviceptr x = bufs[q];
        void *args[] = {&x, &sc, &n};
        if (launch_on(r, s, "boost_scale_fp32", blocks_for(n), 256, 0, args)) return -1;
    }
    return 0;
}
/* Local mode's all-reduce and reduce-scatter: the wire is the buffer's dtype, and op=avg scales an
 * fp32 buffer only (a bf16 sum scaled after its rounding would round twice). */
static int local_sum_check(BackendRank *r, const CollArgs *c) {
    const PlanTensor *B = &r->p->tensors[c->buf.tensor];
    if (c->dtype != B->dtype || (c->avg && B->dtype != PDT_FP32))
        return rfail(r, "%s of %s over group=tp in one process: its wire dtype must be the "
                     "buffer's, and op=avg needs an fp32 buffer (or launch one process per GPU: "
                     "BOOST_WORLD_SIZE, mpirun, srun)", ccat_word(c->kind), B->name);
    return 0;
}

static int no_comm(BackendRank *r, int group) {
    return rfail(r, "rank %d: no NCCL communicator for the %s group", r->wrank,
                 grid_group_name(group));
}

static int group_barrier(CudaGroup *g) {
    if (!g || g->tp <= 1) return 0;
    pthread_mutex_lock(&g->mu);
    if (g->aborted) { pthread_mutex_unlock(&g->mu); return -1; }
    int gen = g->gen;
    if (++g->count == g->tp) { g->count = 0; g->gen++; pthread_cond_broadcast(&g->cv); }
    else while (gen == g->gen && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
    int ab = g->aborted && gen == g->gen;
    pthread_mutex_unlock(&g->mu);
    return ab ? -1 : 0;
}

/* src [rows, cols] with row pitch ld_src -> dst [rows, n*cols] with pitch ld_dst over the step's
 * group of n, member q's block at column q*cols: packed into coll_buf's last slot, gathered into
 * slots 0..n-1 (NCCL's output is member-major), then placed; all on stream s, which must be the
 * only one using coll_buf. A group of one: a copy. */
static int world_allgather_on(BackendRank *r, CUstream s, const CollArgs *c, void *src, void *dst) {
    GroupView g = group_view(r, c->group);
    size_t es = plan_dtype_size(c->dtype), block = (size_t)(c->rows * c->cols) * es;
    if (g.n <= 1)
        return copy_2d(r, s, (CUdeviceptr)(uintptr_t)dst, c->ld_dst * es,
                       (CUdeviceptr)(uintptr_t)src, c->ld_src * es, c->cols * es, c->rows);
    if (!g.comm) return no_comm(r, c->group);
    if (block * (g.n + 1) > r->coll_bytes)
        return rfail(r, "all-gather of %zu bytes exceeds the staging", block);
    CUdeviceptr packed = r->coll_buf + block * g.n;
    if (copy_2d(r, s, packed, c->cols * es, (CUdeviceptr)(uintptr_t)src, c->ld_src * es, c->cols * es, c->rows)) return -1;
    NCCL(r, nccl.ncclAllGather((void *)(uintptr_t)packed, (void *)(uintptr_t)r->coll_buf, (size_t)(c->rows * c->cols),
                               nccl_dtype(c->dtype), g.comm, s));
    for (int q = 0; q < g.n; q++)
        if (copy_2d(r, s, (CUdeviceptr)(uintptr_t)dst + q * c->cols * es, c->ld_dst * es, r->coll_buf + block * q,
                    c->cols * es, c->cols * es, c->rows)) return -1;
    return 0;
}

static int step_event(BackendRank *r, CUevent *evs, int step, CUevent *out) {
    if (step < 0 || step >= r->p->nsteps) return rfail(r, "collective step %d is outside the plan", step);
    if (!evs[step]) CU(r, api.cuEventCreate(&evs[step], CU_EVENT_DISABLE_TIMING_));
    *out = evs[step];
    return 0;
}

/* Local mode, on rank 0's collective stream for the whole group: wait until every rank's compute
 * stream has reached the collective, run it, record the done event that the ranks' compute streams
 * wait on before the first step that touches the memory. The host threads meet twice (to see each
 * other's events); the device is not synchronised with the host. */
static int local_issue(BackendRank *r, int step, const CollArgs *c, int gather) {
    CudaGroup *g = r->group;
    CUevent ready, done;
    if (step_event(r, r->ev_ready, step, &ready)) return -1;
    CU(r, api.cuEventRecord(ready, r->stream));
    if (group_barrier(g)) return rfail(r, "collective abandoned: another rank failed");
    int rc = 0;
    if (r->rank == 0) {
        BackendRank *r0 = r;
        for (int q = 0; q < g->tp && !rc; q++) {
            CUresult e = api.cuStreamWaitEvent(r0->comm, g->ranks[q]->ev_ready[step], 0);
            if (e) rc = rfail(r, "collective: waiting for rank %d failed: %s", q, cu_str(e));
        }
        const PlanStep *st = &r->p->steps_[step];
        if (!rc && !gather) {
            CUdeviceptr table = g->step_ptrs + ((size_t)r->slot * r->p->nsteps + step) * g->tp * sizeof(CUdeviceptr);
            long long n = c->elems;
            int tpv = g->tp;
            void *args[] = {&table, &tpv, &n};
            int64_t blocks = (n + 255) / 256;
            if (blocks > 4096) blocks = 4096;
            rc = launch_on(r, r0->comm, c->dtype == PDT_FP32 ? "boost_allreduce_fp32" : "boost_allreduce_bf16", blocks,
                           256, 0, args);
            CUdeviceptr bufs[CUDA_MAX_TP];
            for (int q = 0; q < g->tp; q++) bufs[q] = operand_ptr(g->ranks[q], &st->coll.buf);
            if (!rc && c->avg) rc = scale_members(r, r0->comm, bufs, g->tp, n);
        }
        size_t es = plan_dtype_size(c->dtype);
        for (int dst = 0; !rc && gather && dst < g->tp; dst++)
            for (int q = 0; !rc && q < g->tp; q++)
                rc = copy_2d(r, r0->comm, operand_ptr(g->ranks[dst], &st->coll.dst) + q * c->cols * es, c->ld_dst * es,
                             operand_ptr(g->ranks[q], &st->coll.src), c->ld_src * es, c->cols * es, c->rows);
        if (!rc && step_event(r, r->ev_done, step, &done) == 0) {
            CUresult e = api.cuEventRecord(done, r0->comm);
            if (e) rc = rfail(r, "collective: recording its end failed: %s", cu_str(e));
        } else if (!rc) rc = -1;
        r0->comm_used = 1;
        if (!rc && r->sync_steps && api.cuStreamSynchronize(r0->comm) != 0)
            rc = rfail(r, "%s failed on the device (BOOST_CUDA_SYNC=1)",
                       gather ? "all-gather" : ccat_word(c->kind));
    }
    if (group_barrier(g)) return rc ? rc : rfail(r, "collective abandoned: another rank failed");
    return rc;
}

/* group=edp (expert parallelism): the expert gradient summed over the ranks that hold the same
 * experts, then times scale= (1/dp); a group of one applies the scale alone. */
static int world_edp_allreduce_on(BackendRank *r, CUstream s, const CollArgs *c, void *buf) {
    if (r->p->tensors[c->buf.tensor].dtype != PDT_FP32 || c->dtype != PDT_FP32)
        return rfail(r, "all-reduce of %s over group=edp: only fp32 gradients with an fp32 wire are supported on cuda",
                     r->p->tensors[c->buf.tensor].name);
    long long n = c->elems;
    if (r->dp / (r->ep > 1 ? r->ep : 1) > 1) {
        if (!r->edp_comm) return rfail(r, "rank %d: no NCCL communicator for the edp group", r->wrank);
        NCCL(r, nccl.ncclAllReduce(buf, buf, (size_t)n, NCCL_FLOAT32_, c->avg ? NCCL_AVG_ : NCCL_SUM_, r->edp_comm, s));
    }
    if (!(c->scale > 0)) return 0;
    CUdeviceptr x = (CUdeviceptr)(uintptr_t)buf;
    float sc = (float)c->scale;
    int64_t blocks = (n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256;
    void *args[] = {&x, &sc, &n};
    return launch_on(r, s, "boost_scale_fp32", blocks, 256, 0, args);
}

/* Multi-process mode: all-reduce buf on stream s over the group the step names (its communicator,
 * group_view; op=avg: ncclAvg). A bf16 wire on an fp32 buffer (parallel.dp_dtype = "bf16") goes
 * through dp_buf: rounded to bf16, reduced in bf16, widened back, as the CPU backend's rounding. */
static int world_allreduce_on(BackendRank *r, CUstream s, const CollArgs *c, void *buf) {
    if (c->group == GROUP_EDP) return world_edp_allreduce_on(r, s, c, buf);
    GroupView g = group_view(r, c->group);   /* group=ep too */
    if (c->group != GROUP_TP && g.n <= 1) return 0;
    ncclComm_t comm = g.comm;
    if (!comm) return no_comm(r, c->group);
    int op = c->avg ? NCCL_AVG_ : NCCL_SUM_, bufdt = r->p->tensors[c->buf.tensor].dtype;
    long long n = c->elems;
    if (c->dtype == bufdt) {
        NCCL(r, nccl.ncclAllReduce(buf, buf, (size_t)n, nccl_dtype(c->dtype), op, comm, s));
        return 0;
    }
    if (c->dtype != PDT_BF16 || bufdt != PDT_FP32 || (size_t)n * 2 > r->dp_bytes)
        return rfail(r, "all-reduce of %s: a %s wire on a %s buffer is not supported (only bf16 on fp32 dp gradients)",
                     r->p->tensors[c->buf.tensor].name, c->dtype == PDT_BF16 ? "bf16" : "fp32", bufdt == PDT_BF16 ? "bf16" : "fp32");
    CUdeviceptr x = (CUdeviceptr)(uintptr_t)buf, w = r->dp_buf;
    int64_t blocks = (n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256;
    void *narrow[] = {&x, &w, &n}, *widen[] = {&w, &x, &n};
    if (launch_on(r, s, "boost_fp32_to_bf16", blocks, 256, 0, narrow)) return -1;
    NCCL(r, nccl.ncclAllReduce((void *)(uintptr_t)w, (void *)(uintptr_t)w, (size_t)n, NCCL_BFLOAT16_, op, comm, s));
    return launch_on(r, s, "boost_bf16_to_fp32", blocks, 256, 0, widen);
}

/* Multi-process mode: the same on this rank's collective stream with NCCL. */
static int world_issue(BackendRank *r, int step, const CollArgs *c, void *buf, void *src, void *dst) {
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
    CUevent ready, done;
    if (step_event(r, r->ev_ready, step, &ready) || step_event(r, r->ev_done, step, &done)) return -1;
    CU(r, api.cuEventRecord(ready, r->stream));
    CU(r, api.cuStreamWaitEvent(r->comm, ready, 0));
    if (buf) { if (world_allreduce_on(r, r->comm, c, buf)) return -1; }
    else if (world_allgather_on(r, r->comm, c, src, dst)) return -1;
    CU(r, api.cuEventRecord(done, r->comm));
    r->comm_used = 1;
    if (r->sync_steps) return host_wait(r, r->comm, buf ? "an all-reduce (BOOST_CUDA_SYNC=1)" : "an all-gather (BOOST_CUDA_SYNC=1)");
    return 0;
}

static int cuda_allreduce_issue(BackendRank *r, int step, const CollArgs *c, void *buf) {
    if (ctx_set(r, "issuing an all-reduce")) return -1;
    if (r->world) return world_issue(r, step, c, buf, NULL, NULL);
    if (group_view(r, c->group).n <= 1) return 0;
    return local_sum_check(r, c) ? -1 : local_issue(r, step, c, 0);
}

static int cuda_allgather_issue(BackendRank *r, int step, const CollArgs *c, void *src, void *dst) {
    if (ctx_set(r, "issuing an all-gather")) return -1;
    if (r->world) return world_issue(r, step, c, NULL, src, dst);
    if (group_view(r, c->group).n <= 1) {   /* a group of one: a copy in stream order */
        size_t es = plan_dtype_size(c->dtype);
        return copy_2d(r, r->stream, (CUdeviceptr)(uintptr_t)dst, c->ld_dst * es, (CUdeviceptr)(uintptr_t)src,
                       c->ld_src * es, c->cols * es, c->rows);
    }
    return local_issue(r, step, c, 1);
}

/* The compute stream waits (on the device) for collective `step`: this rank's own done event in
 * multi-process mode, rank 0's in local mode. A collective that was not issued (one rank) has no
 * event and nothing to wait for. */
int cuda_coll_wait(BackendRank *r, int step) {
    if (step < 0 || step >= r->p->nsteps) return rfail(r, "collective step %d is outside the plan", step);
    CUevent done = r->world ? r->ev_done[step] : r->group && r->group->tp > 1 ? r->group->ranks[0]->ev_done[step] : NULL;
    if (!done) return 0;
    if (ctx_set(r, "waiting for a collective")) return -1;
    CU(r, api.cuStreamWaitEvent(r->stream, done, 0));
    return 0;
}

/* Expert parallelism (docs/plan-format.md "alltoall"): the routed slots between the ep ranks of a
 * group, one process per GPU. Fixed counts: each (member, local expert) block of C slots travels
 * whole, as grouped ncclSend/ncclRecv on the ep communicator (peer order q = 0..N-1, expert order
 * j = 0..El-1 on both sides, so the k-th send to a peer meets its k-th receive). Empty slots carry
 * zeros: the token side zeroes them with its own map, before sending (out: staged in ep_buf) or
 * after receiving (back). Token side: expert e at rows e*C; owner p: member q's slots of its local
 * expert j at rows (j*N + q)*C. Runs on the compute stream, in its order. */
static int cuda_alltoall(BackendRank *r, const CollArgs *c, void *src, void *dst, const void *map) {
    if (ctx_set(r, "an all-to-all")) return -1;
    int n = r->ep > 1 ? r->ep : 1;
    int64_t E = c->experts, C = c->capacity, w = c->cols;
    if (E % n) return rfail(r, "alltoall: experts=%lld do not divide over the ep group of %d", (long long)E, n);
    int64_t El = E / n;
    size_t es = plan_dtype_size(c->dtype), blk = (size_t)(C * w), row_bytes = (size_t)w * es, all = (size_t)(E * C) * row_bytes;
    CUdeviceptr s = (CUdeviceptr)(uintptr_t)src, d = (CUdeviceptr)(uintptr_t)dst, m = (CUdeviceptr)(uintptr_t)map;
    long long rows = (long long)(E * C), rb = (long long)row_bytes;
    int64_t blocks = ((int64_t)all + 255) / 256 > 4096 ? 4096 : ((int64_t)all + 255) / 256;
    if (n == 1) {   /* one member: both layouts are expert-major */
        if (copy_2d(r, r->stream, d, row_bytes, s, row_bytes, row_bytes, (size_t)rows)) return -1;
        void *args[] = {&d, &m, &rows, &rb};
        if (launch_on(r, r->stream, "boost_ep_mask_rows", blocks, 256, 0, args)) return -1;
        return r->sync_steps ? host_wait(r, r->stream, "an all-to-all (BOOST_CUDA_SYNC=1)") : 0;
    }
    if (!r->world) return rfail(r, "alltoall: ep=%d on the cuda backend runs one process per GPU (BOOST_WORLD_SIZE/BOOST_RANK, "
                                "mpirun or srun)", n);
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
    if (!r->ep_comm) return rfail(r, "rank %d: no NCCL communicator for the ep group", r->wrank);
    if (!c->way) {   /* out: my slots, empty ones zeroed, from the staging */
        if (all > r->ep_bytes) return rfail(r, "alltoall of %zu bytes exceeds the staging of %zu", all, r->ep_bytes);
        if (copy_2d(r, r->stream, r->ep_buf, row_bytes, s, row_bytes, row_bytes, (size_t)rows)) return -1;
        CUdeviceptr x = r->ep_buf;
        void *args[] = {&x, &m, &rows, &rb};
        if (launch_on(r, r->stream, "boost_ep_mask_rows", blocks, 256, 0, args)) return -1;
        s = r->ep_buf;
    }
    int dt = nccl_dtype(c->dtype);
    NCCL(r, nccl.ncclGroupStart());
    for (int q = 0; q < n; q++)
        for (int64_t j = 0; j < El; j++) {
            int64_t tok = (q * El + j) * C, own = (j * n + q) * C;   /* rows: on the token side, on the owner */
            int64_t from = c->way ? own : tok, to = c->way ? tok : own;
            ncclResult_t a = nccl.ncclSend((const void *)(uintptr_t)(s + (size_t)from * row_bytes), blk, dt, q, r->ep_comm, r->stream);
            ncclResult_t b = a ? a : nccl.ncclRecv((void *)(uintptr_t)(d + (size_t)to * row_bytes), blk, dt, q, r->ep_comm, r->stream);
            if (a || b) {
                nccl.ncclGroupEnd();
                return world_abort(r, "the ep all-to-all's ncclSend/ncclRecv with rank %d failed: %s", q,
                                   nccl.ncclGetErrorString(a ? a : b));
            }
        }
    NCCL(r, nccl.ncclGroupEnd());
    if (c->way) {   /* back: my own map says which of the returned slots are filled */
        void *args[] = {&d, &m, &rows, &rb};
        if (launch_on(r, r->stream, "boost_ep_mask_rows", blocks, 256, 0, args)) return -1;
    }
    if (r->sync_steps) return host_wait(r, r->stream, "an all-to-all (BOOST_CUDA_SYNC=1)");
    return 0;
}

static int local_sum(BackendRank *r, const CollArgs *c, void *buf);

static int cuda_allreduce(BackendRank *r, const CollArgs *c, void *buf) {
    if (r->world) {
        if (ctx_set(r, "an all-reduce")) return -1;
        if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
        if (c->group == GROUP_DP || c->group == GROUP_EDP) {   /* dp_buf belongs to the collectives' stream */
            if (dp_begin(r)) return -1;
            if (world_allreduce_on(r, r->comm, c, buf)) return -1;
            return dp_end(r, "a dp all-reduce");
        }
        return world_allreduce_on(r, r->stream, c, buf);
    }
    if (group_view(r, c->group).n <= 1) return 0;
    if (ctx_set(r, "an all-reduce") || local_sum_check(r, c)) return -1;
    return local_sum(r, c, buf);
}

/* Local mode: the tp group's sum of buf in place on every member (op=avg: then times 1/tp),
 * complete when it returns. */
static int local_sum(BackendRank *r, const CollArgs *c, void *buf) {
    CudaGroup *g = r->group;
    g->ptr[r->rank] = (CUdeviceptr)(uintptr_t)buf;
    CU(r, api.cuStreamSynchronize(r->stream));           /* this rank's buffer is complete */
    if (group_barrier(g)) return rfail(r, "all-reduce abandoned: another rank failed");
    int rc = 0;
    if (r->rank == 0) {
        CUresult e = api.cuMemcpyHtoD_v2(g->dptrs, g->ptr, g->tp * sizeof(CUdeviceptr));
        long long n = c->elems;
        int tpv = g->tp;
        CUdeviceptr d = g->dptrs;
        void *args[] = {&d, &tpv, &n};
        int64_t blocks = (n + 255) / 256;
        if (blocks > 4096) blocks = 4096;
        if (e == 0)
            rc = launch(r, c->dtype == PDT_FP32 ? "boost_allreduce_fp32" : "boost_allreduce_bf16", blocks, 256, 0, args);
        else rc = rfail(r, "all-reduce: pointer table upload failed: %s", cu_str(e));
        if (rc == 0 && c->avg) rc = scale_members(r, r->stream, g->ptr, g->tp, n);
        if (rc == 0 && api.cuStreamSynchronize(r->stream) != 0) rc = rfail(r, "all-reduce kernel failed");
    }
    if (group_barrier(g)) return rfail(r, "all-reduce abandoned: another rank failed");
    return rc;
}

static int cuda_allgather(BackendRank *r, const CollArgs *c, void *src, void *dst) {
    if (r->world) {
        if (ctx_set(r, "an all-gather")) return -1;
        if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
        if (rank_idle(r, "the collectives before an all-gather")) return -1;   /* coll_buf is free */
        return world_allgather_on(r, r->stream, c, src, dst);
    }
    CudaGroup *g = group_view(r, c->group).n > 1 ? r->group : NULL;   /* a group of one: a copy */
    int tp = g ? g->tp : 1;
    if (ctx_set(r, "an all-gather")) return -1;
    size_t es = plan_dtype_size(c->dtype);
    if (g) g->ptr[r->rank] = (CUdeviceptr)(uintptr_t)src;
    CU(r, api.cuStreamSynchronize(r->stream));
    if (group_barrier(g)) return rfail(r, "all-gather abandoned: another rank failed");
    for (int q = 0; q < tp; q++)
        if (copy_2d(r, r->stream, (CUdeviceptr)(uintptr_t)dst + q * c->cols * es, c->ld_dst * es,
                    g ? g->ptr[q] : (CUdeviceptr)(uintptr_t)src, c->ld_src * es, c->cols * es, c->rows)) return -1;
    CU(r, api.cuStreamSynchronize(r->stream));           /* done reading the others' src */
    if (group_barrier(g)) return rfail(r, "all-gather abandoned: another rank failed");
    return 0;
}

/* A dp step runs on the collectives' stream in the compute stream's order, and the compute stream
 * waits for it (on the device): dp_buf is touched by that stream only, and the step is ordered after
 * the tp collectives queued there before it. */
static int dp_begin(BackendRank *r) {
    if (!r->ev_dp_ready) CU(r, api.cuEventCreate(&r->ev_dp_ready, CU_EVENT_DISABLE_TIMING_));
    if (!r->ev_dp_done) CU(r, api.cuEventCreate(&r->ev_dp_done, CU_EVENT_DISABLE_TIMING_));
    CU(r, api.cuEventRecord(r->ev_dp_ready, r->stream));
    CU(r, api.cuStreamWaitEvent(r->comm, r->ev_dp_ready, 0));
    return 0;
}
static int dp_end(BackendRank *r, const char *what) {
    CU(r, api.cuEventRecord(r->ev_dp_done, r->comm));
    CU(r, api.cuStreamWaitEvent(r->stream, r->ev_dp_done, 0));
    r->comm_used = 1;
    if (r->sync_steps) {
        char w[128];
        snprintf(w, sizeof w, "%s (BOOST_CUDA_SYNC=1)", what);
        return host_wait(r, r->comm, w);
    }
    return 0;
}

/* Multi-process mode: buf (elems n) summed (op=avg: averaged) over the step's group of size m,
 * this member (index i) receiving its shard [lo, hi) (zero_shard) in place; the rest of buf keeps
 * its local values (ZeRO-2, the plan's zero_grad: the shard is added to gshard, buf zeroed). NCCL's
 * reduce-scatter needs equal blocks and gives member i the i-th: the input is staged in dp_buf
 * padded to m*s (s = ceil(n/m); the padding's results are not used), the shard comes back from
 * dp_buf[m*s ..]. The wire is the buffer's dtype, or bf16 on an fp32 buffer (staged as bf16). All
 * of it on the collectives' stream, after what that stream was made to wait for (the callers). */
static int reduce_scatter_on_comm(BackendRank *r, const CollArgs *c, void *buf) {
    GroupView g = group_view(r, c->group);
    const PlanTensor *B = &r->p->tensors[c->buf.tensor];
    int wire16 = c->dtype == PDT_BF16, narrow = wire16 && B->dtype == PDT_FP32;
    long long n = c->elems, s = (n + g.n - 1) / g.n, cnt;
    int64_t lo, hi;
    zero_shard(n, g.me, g.n, &lo, &hi);
    size_t es = wire16 ? 2 : 4, bes = plan_dtype_size(B->dtype);
    if ((c->dtype != B->dtype && !narrow) || (size_t)(s * g.n + s) * 4 > r->dp_bytes)
        return rfail(r, "reduce_scatter of %s: needs a wire of the buffer's dtype (or bf16 on "
                     "fp32) within the staging", B->name);
    if (!g.comm) return no_comm(r, c->group);
    CUdeviceptr x = (CUdeviceptr)(uintptr_t)buf, in = r->dp_buf;
    CUdeviceptr out = r->dp_buf + (size_t)(s * g.n) * es;
    if (narrow) {
        void *args[] = {&x, &in, &n};
        if (launch_on(r, r->comm, "boost_fp32_to_bf16", blocks_for(n), 256, 0, args)) return -1;
    } else if (copy_2d(r, r->comm, in, (size_t)n * bes, x, (size_t)n * bes, (size_t)n * bes, 1)) {
        return -1;
    }
    int op = c->avg ? NCCL_AVG_ : NCCL_SUM_;
    NCCL(r, nccl.ncclReduceScatter((void *)(uintptr_t)in, (void *)(uintptr_t)out, (size_t)s,
                                   nccl_dtype(c->dtype), op, g.comm, r->comm));
    cnt = hi - lo;
    int keep = r->gshard && c->zero_grad;   /* zero=2: the shard added to gshard, buf zeroed */
    if (cnt > 0) {
        /* zero=2: staged as fp32 at dp_buf (below out: 4 cnt <= s m es, m >= 2), then added */
        CUdeviceptr dst = keep ? r->dp_buf : x + (size_t)lo * bes;
        if (narrow) {
            void *widen[] = {&out, &dst, &cnt};
            if (launch_on(r, r->comm, "boost_bf16_to_fp32", blocks_for(cnt), 256, 0, widen)) return -1;
        } else if (copy_2d(r, r->comm, dst, (size_t)cnt * bes, out, (size_t)cnt * bes,
                           (size_t)cnt * bes, 1)) {
            return -1;
        }
        CUdeviceptr pair = r->gshard_sum + (size_t)B->param * 2 * sizeof(CUdeviceptr);
        int two = 2;
        void *add[] = {&pair, &two, &cnt};
        if (keep && launch_on(r, r->comm, "boost_allreduce_fp32", blocks_for(cnt), 256, 0, add))
            return -1;
    }
    if (keep) CU(r, api.cuMemsetD32Async(x, 0, (size_t)n, r->comm));
    return 0;
}

static int reduce_scatter_check(BackendRank *r) {
    if (ctx_set(r, "a reduce-scatter")) return -1;
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->wrank);
    return 0;
}

/* The reduce-scatter, and the compute stream waits for it at once (BOOST_NO_OVERLAP=1 and
 * backends' callers without the overlap). A group of one: nothing to do. Local mode: the tp
 * group's all-reduce (local_sum). */
static int cuda_reduce_scatter(BackendRank *r, const CollArgs *c, void *buf) {
    if (group_view(r, c->group).n <= 1) return 0;
    if (!r->world)
        return ctx_set(r, "a reduce-scatter") || local_sum_check(r, c) ? -1 : local_sum(r, c, buf);
    if (reduce_scatter_check(r) || dp_begin(r) || reduce_scatter_on_comm(r, c, buf)) return -1;
    return dp_end(r, "a reduce-scatter");
}

/* Overlapped: issued on the collectives' stream after the work issued so far (the buffer is
 * final), its end recorded in ev_done[step]; the compute stream goes on, and waits for it in
 * cuda_coll_wait before the buffer's next use (ZeRO's gradients: the executor puts that wait at the
 * end of the backward, where the gradient norm and AdamW read them). Local mode: local_issue. */
static int cuda_reduce_scatter_issue(BackendRank *r, int step, const CollArgs *c, void *buf) {
    if (group_view(r, c->group).n <= 1) return 0;
    if (!r->world)
        return ctx_set(r, "issuing a reduce-scatter") || local_sum_check(r, c) ? -1
               : local_issue(r, step, c, 0);
    if (reduce_scatter_check(r)) return -1;
    CUevent ready, done;
    if (step_event(r, r->ev_ready, step, &ready) || step_event(r, r->ev_done, step, &done)) return -1;
    CU(r, api.cuEventRecord(ready, r->stream));
    CU(r, api.cuStreamWaitEvent(r->comm, ready, 0));
    if (reduce_scatter_on_comm(r, c, buf)) return -1;
    CU(r, api.cuEventRecord(done, r->comm));
    r->comm_used = 1;
    /* zero=2: the gradient's memory goes to a later one (grad_work_layout): compute waits now */
    if (r->gshard && c->zero_grad) CU(r, api.cuStreamWaitEvent(r->stream, done, 0));
    if (r->sync_steps) return host_wait(r, r->comm, "a reduce-scatter (BOOST_CUDA_SYNC=1)");
    return 0;
}

/* ZeRO-1, after AdamW updated this rank's shard: every dp member's shard of param buf to all
 * members (an all-gather into dp_buf, padded to dp*s elements). A bf16 param's bf16 copy travels
 * (AdamW wrote the shard's copy from the shard's fp32 masters; the masters stay sharded: each rank
 * holds s of them), 2 bytes an element; an fp32 param is its own master, whole on every rank, and
 * travels as fp32. All of it on the collectives' stream, after what that stream was made to wait
 * for (the callers below). */
static int gather_shards_check(BackendRank *r, const CollArgs *c) {
    if (!r->world) return rfail(r, "zero=1 on the cuda backend runs one process per GPU (BOOST_WORLD_SIZE, mpirun, srun)");
    if (ctx_set(r, "gathering the updated shards")) return -1;
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->wrank);
    const PlanTensor *T = &r->p->tensors[c->buf.tensor];
    long long n = c->elems, s = (n + r->dp - 1) / r->dp;
    if (T->kind != TK_PARAM || n != numel(T) || (size_t)(s * r->dp) * 4 > r->dp_bytes)
        return rfail(r, "gather_shards of %s: needs a whole parameter (%lld elements) within the staging", T->name, n);
    return 0;
}

static int gather_shards_on_comm(BackendRank *r, const CollArgs *c, void *buf) {
    const PlanTensor *T = &r->p->tensors[c->buf.tensor];
    long long n = c->elems, s = (n + r->dp - 1) / r->dp, cnt;
    int64_t lo, hi;
    zero_shard(n, r->dp_rank, r->dp, &lo, &hi);
    /* the param as it is used: the bf16 copy, or the whole fp32 master of an fp32 param */
    size_t es = T->dtype == PDT_BF16 ? 2 : 4;
    CUdeviceptr whole = T->dtype == PDT_BF16 ? (CUdeviceptr)(uintptr_t)buf : r->master + r->master_off[T->param] * 4;
    CUdeviceptr mine = r->dp_buf + (size_t)(r->dp_rank * s) * es;
    cnt = hi - lo;
    if (cnt > 0 && copy_2d(r, r->comm, mine, (size_t)cnt * es, whole + (size_t)lo * es, (size_t)cnt * es, (size_t)cnt * es, 1)) return -1;
    NCCL(r, nccl.ncclAllGather((void *)(uintptr_t)mine, (void *)(uintptr_t)r->dp_buf, (size_t)s, es == 2 ? NCCL_BFLOAT16_ : NCCL_FLOAT32_,
                               r->dp_comm, r->comm));
    return copy_2d(r, r->comm, whole, (size_t)n * es, r->dp_buf, (size_t)n * es, (size_t)n * es, 1);
}

/* The gather, and the compute stream waits for it at once (BOOST_NO_OVERLAP=1, callers without
 * the overlap). */
static int cuda_gather_shards(BackendRank *r, const CollArgs *c, void *buf) {
    if (r->world && r->dp <= 1) return 0;
    if (gather_shards_check(r, c) || dp_begin(r) || gather_shards_on_comm(r, c, buf)) return -1;
    return dp_end(r, "gathering the updated shards");
}

/* Overlapped: issued on the collectives' stream after the AdamW update (the work issued so far),
 * its end recorded in ev_done[step]; the compute stream waits for it in cuda_coll_wait before the
 * next pass's first step that reads the param (the executor places that wait, runtime/exec.c). The
 * dp staging is used by the collectives' stream only, so the gathers and the next backward's
 * reduce-scatters reuse it in that stream's order. */
static int cuda_gather_shards_issue(BackendRank *r, int step, const CollArgs *c, void *buf) {
    if (r->world && r->dp <= 1) return 0;
    if (gather_shards_check(r, c)) return -1;
    CUevent ready, done;
    if (step_event(r, r->ev_ready, step, &ready) || step_event(r, r->ev_done, step, &done)) return -1;
    CU(r, api.cuEventRecord(ready, r->stream));
    CU(r, api.cuStreamWaitEvent(r->comm, ready, 0));
    if (gather_shards_on_comm(r, c, buf)) return -1;
    CU(r, api.cuEventRecord(done, r->comm));
    r->comm_used = 1;
    if (r->sync_steps) return host_wait(r, r->comm, "gathering the updated shards (BOOST_CUDA_SYNC=1)");
    return 0;
}

/* One collective step (common/collective_catalog.h), complete before the next step's work. */
int cuda_collective(BackendRank *r, const CollArgs *c, const CollPtrs *ptr) {
    switch (c->kind) {
    case CK_ALLREDUCE: return cuda_allreduce(r, c, ptr->buf);
    case CK_ALLGATHER: return cuda_allgather(r, c, ptr->src, ptr->dst);
    case CK_REDUCE_SCATTER: return cuda_reduce_scatter(r, c, ptr->buf);
    case CK_GATHER_SHARDS: return cuda_gather_shards(r, c, ptr->buf);
    case CK_ALLTOALL: return cuda_alltoall(r, c, ptr->src, ptr->dst, ptr->map);
    }
    return rfail(r, "a collective kind the CUDA backend does not know (plan loader bug)");
}

/* One collective step issued on the collectives' stream (coll_issue_kinds in cuda.c); the engine
 * waits for it with cuda_coll_wait(step). */
int cuda_collective_issue(BackendRank *r, int step, const CollArgs *c, const CollPtrs *ptr) {
    switch (c->kind) {
    case CK_ALLREDUCE: return cuda_allreduce_issue(r, step, c, ptr->buf);
    case CK_ALLGATHER: return cuda_allgather_issue(r, step, c, ptr->src, ptr->dst);
    case CK_REDUCE_SCATTER: return cuda_reduce_scatter_issue(r, step, c, ptr->buf);
    case CK_GATHER_SHARDS: return cuda_gather_shards_issue(r, step, c, ptr->buf);
    }
    return cuda_collective(r, c, ptr);
}
