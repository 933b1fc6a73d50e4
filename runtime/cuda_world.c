/* cuda_world.c: the CUDA backend's rank groups: multi-process mode's NCCL world (the id exchange,
 * the split into the grid's tp/dp/ep/edp groups, host waits that watch NCCL's errors and abort on
 * a dead peer, sums of host values over the processes), local mode's group of tp ranks in one
 * process, and a pipeline stage's Engine. */
#include "runtime/cuda_internal.h"

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Where the ranks of one launch exchange the NCCL id: $BOOST_NCCL_ID_FILE, else a file in /tmp keyed
 * by the plan's folder name and the job id (boost train sets BOOST_NCCL_ID_FILE under -o). */
static void nccl_id_path(const Plan *p, char *out, size_t n) {
    const char *env = getenv("BOOST_NCCL_ID_FILE");
    if (env && *env) { snprintf(out, n, "%s", env); return; }
    char dir[1024], job[128];
    snprintf(dir, sizeof dir, "%s", p->path);
    char *sl = strrchr(dir, '/');
    if (sl) *sl = 0; else snprintf(dir, sizeof dir, ".");
    sl = strrchr(dir, '/');
    const char *name = sl ? sl + 1 : dir;
    world_job_id(job, sizeof job);
    snprintf(out, n, "/tmp/boost-nccl-%.200s-%.100s.id", name, job);
}

/* Rank 0 writes the id atomically (temp file + rename); the others poll for a fresh file. */
int nccl_exchange_id(const Plan *p, int rank, ncclUniqueId *id, char *path, size_t pathlen, char *err, size_t errlen) {
    nccl_id_path(p, path, pathlen);
    if (rank == 0) {
        ncclResult_t rc = nccl.ncclGetUniqueId(id);
        if (rc != 0) { snprintf(err, errlen, "ncclGetUniqueId failed: %s", nccl.ncclGetErrorString(rc)); return -1; }
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        FILE *f = fopen(tmp, "wb");
        int ok = f && fwrite(id, sizeof *id, 1, f) == 1;
        if (f && fclose(f) != 0) ok = 0;
        if (!ok || rename(tmp, path) != 0) {
            snprintf(err, errlen, "%s: cannot write the NCCL id for the other ranks (%s): set BOOST_NCCL_ID_FILE to a "
                     "writable file all ranks see", path, strerror(errno));
            unlink(tmp);
            return -1;
        }
        return 0;
    }
    double timeout = runtime_nccl_timeout(300);
    double start = wall_s();
    for (;;) {
        struct stat st;
        /* a file older than this wait (minus a minute of launch skew) is left over from an earlier run */
        if (stat(path, &st) == 0 && st.st_size == (off_t)sizeof *id && (double)st.st_mtime >= start - 60) {
            FILE *f = fopen(path, "rb");
            int ok = f && fread(id, sizeof *id, 1, f) == 1;
            if (f) fclose(f);
            if (ok) return 0;
        }
        if (wall_s() - start > timeout) {
            snprintf(err, errlen, "%s: rank %d waited %.0f s for rank 0's NCCL id and none appeared: start rank 0 "
                     "with the same run and job id, or point every rank at one file all of them see with "
                     "BOOST_NCCL_ID_FILE (BOOST_NCCL_TIMEOUT sets the wait)", path, rank, timeout);
            return -1;
        }
        usleep(20000);
    }
}

/* The staging collective step st needs in multi-process mode, raised into the maxima: *gather
 * (coll_buf: an all-gather over a group of n packs its [rows, cols] block and receives n of them),
 * *shards (dp_buf, on `comm`: a bf16 copy of a dp all-reduce's buffer, a reduce-scatter's input
 * padded to n*s elements and its shard s = ceil(elems/n), 4 bytes an element; a gather of updated
 * ZeRO shards, n*s), *ep (ep_buf: an out all-to-all's slots). n is the size of the step's group. */
static void step_staging(const BackendRank *r, const PlanStep *st, size_t *gather, size_t *shards,
                         size_t *ep) {
    const CollArgs *c = &st->coll;
    if (step_coll_kind(st->kind) < 0 || c->group < 0 || c->group >= GROUP_COUNT) return;
    size_t n = (size_t)r->gsize[c->group];
    size_t block = (size_t)(c->rows * c->cols) * plan_dtype_size(c->dtype);
    size_t sh = (size_t)((c->elems + (int64_t)n - 1) / (int64_t)n), b = 0, d = 0;
    switch (st->kind) {
    case ST_ALLTOALL: if (block > *ep) *ep = block; break;
    case ST_ALLGATHER: b = block * (n + 1); break;
    case ST_ALLREDUCE:
        if (c->group == GROUP_DP && c->dtype == PDT_BF16) d = (size_t)c->elems * 2;
        break;
    case ST_REDUCE_SCATTER: d = (sh * n + sh) * 4; break;
    case ST_GATHER_SHARDS: d = sh * n * 4; break;
    default: break;
    }
    if (b > *gather) *gather = b;
    if (d > *shards) *shards = d;
}

/* The world's communicator, and at dp > 1 its split into the rank grid's groups (runtime/grid.h: tp
 * fastest, then dp): one ncclCommSplit per group kind, colour = the group's first member, key = the
 * rank's index in it, so NCCL's rank in each group is the grid's. nccl_comm is then the tp group's. */
static int world_group_init(BackendRank *r, int rank, int size, char *err, size_t errlen) {
    pthread_once(&nccl_once, nccl_load);
    if (!nccl_ok) { snprintf(err, errlen, "rank %d of %d: %s", rank, size, nccl_why); return -1; }
    const Plan *p = r ? r->p : NULL;
    if (!r || r->tp != p->tp || size != p->dp * p->tp || r->rank != rank % p->tp) {
        snprintf(err, errlen, "multi-process mode: rank %d of %d is not open in this process", rank, size);
        return -1;
    }
    r->wrank = rank; r->wsize = size; r->dp = p->dp;
    if (p->dp > 1 && !nccl.ncclCommSplit) {
        snprintf(err, errlen, "rank %d of %d: dp=%d needs ncclCommSplit (NCCL 2.18 or newer) to make the tp and dp groups; "
                 "this libnccl lacks it: install a newer NCCL (or point BOOST_LIBNCCL at one)", rank, size, p->dp);
        return -1;
    }
    ncclResult_t rc;
    if (r->pipe) {   /* a pipeline stage: its world is a copy of the stage's communicator */
        if (pipe_world(r->pipe, err, errlen)) return -1;
        rc = nccl.ncclCommSplit(r->pipe->stage, 0, rank, &r->world_comm, NULL);
        if (rc != 0 || !r->world_comm) {
            r->world_comm = NULL;
            snprintf(err, errlen, "rank %d of the stage's %d: ncclCommSplit of the stage communicator failed: %s", rank, size,
                     rc ? nccl.ncclGetErrorString(rc) : "no communicator returned");
            return -1;
        }
    } else {
        ncclUniqueId id;
        char path[1100];
        if (nccl_exchange_id(r->p, rank, &id, path, sizeof path, err, errlen)) return -1;
        if (ctx_set_err(err, errlen, "creating the NCCL communicator")) return -1;
        rc = nccl.ncclCommInitRank(&r->world_comm, size, id, rank);
        if (rank == 0) unlink(path);   /* every rank has joined: the id is used up */
        if (rc != 0) {
            r->world_comm = NULL;
            snprintf(err, errlen, "rank %d of %d: ncclCommInitRank failed: %s", rank, size, nccl.ncclGetErrorString(rc));
            return -1;
        }
    }
    r->nccl_comm = r->world_comm;
    r->world = 1;
    Grid g;
    if (grid_make(&g, p->dp, 1, p->tp, err, errlen) ||
        (p->ep > 1 && grid_set_ep(&g, p->ep, err, errlen)))
        return -1;
    GridCoord gc = grid_coord(&g, rank);
    for (int k = 0; k < GROUP_COUNT; k++) { r->gsize[k] = gc.size[k]; r->gidx[k] = gc.index[k]; }
    if (p->dp > 1) {
        r->dp_rank = gc.dp_rank;
        ncclComm_t tpc = NULL, dpc = NULL;
        rc = nccl.ncclCommSplit(r->world_comm, gc.first[GROUP_TP], gc.index[GROUP_TP], &tpc, NULL);
        if (rc == 0) r->nccl_comm = tpc;
        if (rc == 0) rc = nccl.ncclCommSplit(r->world_comm, gc.first[GROUP_DP], gc.index[GROUP_DP], &dpc, NULL);
        if (rc == 0) r->dp_comm = dpc;
        if (rc != 0 || !tpc || !dpc) {
            snprintf(err, errlen, "rank %d of %d: ncclCommSplit into the tp group {%d..%d} and dp group (from %d, stride %d) "
                     "failed: %s", rank, size, gc.first[GROUP_TP], gc.first[GROUP_TP] + p->tp - 1, gc.first[GROUP_DP],
                     gc.stride[GROUP_DP], rc ? nccl.ncclGetErrorString(rc) : "no communicator returned");
            return -1;
        }
        if (p->ep > 1) {   /* expert parallelism: the ep group (all-to-all) and the edp group (expert gradients) */
            if (!nccl.ncclSend || !nccl.ncclRecv || !nccl.ncclGroupStart || !nccl.ncclGroupEnd) {
                snprintf(err, errlen, "rank %d of %d: ep=%d needs ncclSend/ncclRecv and ncclGroupStart/End (NCCL 2.7 or newer) "
                         "for the all-to-all; this libnccl lacks them: install a newer NCCL (or point BOOST_LIBNCCL at one)",
                         rank, size, p->ep);
                return -1;
            }
            r->ep = p->ep; r->ep_rank = gc.ep_rank;
            ncclComm_t epc = NULL, edpc = NULL;
            rc = nccl.ncclCommSplit(r->world_comm, gc.first[GROUP_EP], gc.index[GROUP_EP], &epc, NULL);
            if (rc == 0) r->ep_comm = epc;
            if (rc == 0) rc = nccl.ncclCommSplit(r->world_comm, gc.first[GROUP_EDP], gc.index[GROUP_EDP], &edpc, NULL);
            if (rc == 0) r->edp_comm = edpc;
            if (rc != 0 || !epc || !edpc) {
                snprintf(err, errlen, "rank %d of %d: ncclCommSplit into the ep group (from %d, stride %d) and edp group (from %d, "
                         "stride %d) failed: %s", rank, size, gc.first[GROUP_EP], gc.stride[GROUP_EP], gc.first[GROUP_EDP],
                         gc.stride[GROUP_EDP], rc ? nccl.ncclGetErrorString(rc) : "no communicator returned");
                return -1;
            }
        }
        CUresult cu = 0;   /* r->zero (the state's layout) was set at open: the tables for this dp rank's shards */
        if (r->zero && (adam_table(r, &cu) || sq_ranges(r))) {
            snprintf(err, errlen, "rank %d of %d: the zero=1 shard tables: %s", rank, size, cu ? cu_str(cu) : "out of memory");
            return -1;
        }
    }
    /* the staging, for the largest step (freeing device memory later would wait for the device) */
    size_t need = 256, dp_need = 0, ep_need = 0;
    for (int s = 0; s < p->nsteps; s++) step_staging(r, &p->steps_[s], &need, &dp_need, &ep_need);
    if (api.cuMemAlloc_v2(&r->coll_buf, need) != 0) {
        snprintf(err, errlen, "rank %d of %d: allocating %zu bytes for the all-gathers failed", rank, size, need);
        return -1;
    }
    r->coll_bytes = need;
    if (dp_need && api.cuMemAlloc_v2(&r->dp_buf, dp_need) != 0) {
        snprintf(err, errlen, "rank %d of %d: allocating %zu bytes for the dp collectives' staging failed", rank, size, dp_need);
        return -1;
    }
    r->dp_bytes = dp_need;
    if (grad_shard_sum_table(r)) {
        snprintf(err, errlen, "rank %d of %d: uploading the zero=2 gradient shard table failed",
                 rank, size);
        return -1;
    }
    if (ep_need && r->ep > 1 && api.cuMemAlloc_v2(&r->ep_buf, ep_need) != 0) {
        snprintf(err, errlen, "rank %d of %d: allocating %zu bytes for the all-to-all's staging failed", rank, size, ep_need);
        return -1;
    }
    r->ep_bytes = r->ep > 1 ? ep_need : 0;
    return 0;
}

/* Every distinct communicator of this rank (world, tp, dp, ep, edp; at pp > 1 the pipeline's world), n of them. */
static int rank_comms(BackendRank *r, ncclComm_t out[6]) {
    int n = 0;
    if (r->pipe && r->pipe->world && !r->pipe->dead) out[n++] = r->pipe->world;   /* a pipeline stage: the other stages */
    if (r->world_comm) out[n++] = r->world_comm;
    if (r->nccl_comm && r->nccl_comm != r->world_comm) out[n++] = r->nccl_comm;
    if (r->dp_comm) out[n++] = r->dp_comm;
    if (r->ep_comm) out[n++] = r->ep_comm;
    if (r->edp_comm) out[n++] = r->edp_comm;
    return n;
}

/* Multi-process mode: NCCL failed or a wait ran past the timeout. Abort the communicator (its
 * queued work ends instead of waiting for a peer that is gone), refuse further collectives, and
 * say which rank stopped and what to do. */
int world_abort(BackendRank *r, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ncclComm_t cs[6];
    int nc = rank_comms(r, cs);
    for (int i = 0; i < nc && !r->dead; i++) nccl.ncclCommAbort(cs[i]);
    if (r->pipe && nc && cs[0] == r->pipe->world) r->pipe->dead = 1;   /* aborted with the rest */
    r->nccl_comm = r->world_comm = r->dp_comm = r->ep_comm = r->edp_comm = NULL;
    r->dead = 1;
    return rfail(r, "rank %d of %d: %s; NCCL was aborted and this rank stops. Another rank has probably died or "
                 "failed: look at its output (its own error comes first), then restart all %d ranks "
                 "(--resume from the last checkpoint)", r->wrank, r->wsize, what, r->wsize);
}

/* The host polls stream s until it is done, watching NCCL's asynchronous error on cs[0..nc) and a
 * timeout (seconds), so a peer that died ends the wait instead of hanging in a collective forever.
 * 0 when done; else -1 with *cu_err (a CUDA error) or, *cu_err 0, why (NCCL's error or the timeout). */
int poll_stream(CUstream s, const ncclComm_t *cs, int nc, double timeout, const char *what, CUresult *cu_err,
                       char *why, size_t n) {
    double t0 = wall_s();
    unsigned nap = 1;
    *cu_err = 0;
    for (;;) {
        CUresult q = api.cuStreamQuery(s);
        if (q == 0) return 0;
        if (q != CUDA_ERROR_NOT_READY_) { *cu_err = q; return -1; }
        ncclResult_t async_err = NCCL_SUCCESS_;
        for (int i = 0; i < nc && (async_err == NCCL_SUCCESS_ || async_err == NCCL_IN_PROGRESS_); i++) {
            ncclResult_t qr = nccl.ncclCommGetAsyncError(cs[i], &async_err);
            if (qr != NCCL_SUCCESS_) async_err = qr;
        }
        if (async_err != NCCL_SUCCESS_ && async_err != NCCL_IN_PROGRESS_) {
            /* a peer that finished the same collective and exited in the meantime is no failure:
             * the work may have completed between the query above and the error check */
            if (api.cuStreamQuery(s) == 0) return 0;
            snprintf(why, n, "NCCL reports '%s' while waiting for %s", nccl.ncclGetErrorString(async_err), what);
            return -1;
        }
        if (wall_s() - t0 > timeout) {
            snprintf(why, n, "%s did not finish within %.0f s (BOOST_NCCL_TIMEOUT; raise it if steps are legitimately that "
                     "slow)", what, timeout);
            return -1;
        }
        usleep(nap);
        if (nap < 200) nap *= 2;   /* at most 0.2 ms late */
    }
}

/* The host waits for stream s. Local mode: a plain synchronize. Multi-process mode: poll the stream
 * and NCCL's asynchronous error, so a peer that died ends the wait (ncclCommAbort, an error naming
 * this rank) instead of hanging in the next collective forever; BOOST_NCCL_TIMEOUT (default 600 s)
 * bounds the wait when nothing reports an error. */
int host_wait(BackendRank *r, CUstream s, const char *what) {
    if (!r->world) {
        CU(r, api.cuStreamSynchronize(s));
        return 0;
    }
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
    ncclComm_t cs[6];
    int nc = rank_comms(r, cs);
    CUresult q = 0;
    char why[512];
    if (!poll_stream(s, cs, nc, r->nccl_timeout, what, &q, why, sizeof why)) return 0;
    if (q) CU(r, q);
    return world_abort(r, "%s", why);
}

/* Everything this rank queued is done (both streams). */
int rank_idle(BackendRank *r, const char *what) {
    if (host_wait(r, r->stream, what)) return -1;
    if (r->comm_used) {
        if (host_wait(r, r->comm, what)) return -1;
        r->comm_used = 0;
    }
    return 0;
}

int cuda_world_allreduce_host(BackendRank *r, void *host, int64_t n, int is_f64) {
    if (!r->world) return rfail(r, "sums across processes need the multi-process mode");
    if (ctx_set(r, "a host all-reduce")) return -1;
    size_t bytes = (size_t)n * (is_f64 ? 8 : 4);
    if (n <= 0) return 0;
    if (rank_idle(r, "the work before a sum across the processes")) return -1;
    if (bytes > r->coll_bytes) {   /* not in a training step: canonical tensors for checkpoints */
        if (r->coll_buf) CU(r, api.cuMemFree_v2(r->coll_buf));
        r->coll_buf = 0; r->coll_bytes = 0;
        CU(r, api.cuMemAlloc_v2(&r->coll_buf, bytes));
        r->coll_bytes = bytes;
    }
    CU(r, api.cuMemcpyHtoDAsync_v2(r->coll_buf, host, bytes, r->stream));
    NCCL(r, nccl.ncclAllReduce((void *)(uintptr_t)r->coll_buf, (void *)(uintptr_t)r->coll_buf, (size_t)n,
                               is_f64 ? NCCL_FLOAT64_ : NCCL_FLOAT32_, NCCL_SUM_, r->world_comm, r->stream));
    if (host_wait(r, r->stream, "a sum across the processes")) return -1;
    CU(r, api.cuMemcpyDtoHAsync_v2(host, r->coll_buf, bytes, r->stream));
    return 0;
}

int cuda_group_init(BackendRank **ranks, int tp, char *err, size_t errlen) {
    int wrank = 0, wsize = 1;
    char werr[256];
    /* multi-process mode: ranks[] is indexed by world rank, only this process's rank set */
    if (world_from_env(&wrank, &wsize, werr, sizeof werr) == 1 && wrank >= 0 && wrank < wsize && ranks[wrank] &&
        wsize == ranks[wrank]->p->dp * tp)
        return world_group_init(ranks[wrank], wrank, wsize, err, errlen);
    CudaGroup *g = calloc(1, sizeof *g);
    if (!g) { snprintf(err, errlen, "out of memory"); return -1; }
    g->tp = tp;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (ctx_set_err(err, errlen, "setting up the rank group")) { free(g); return -1; }
    /* every rank's buffer of every all-reduce and reduce-scatter step in every arena slot, for the
     * summing kernel: the plan is static */
    const Plan *p = ranks[0]->p;
    int nslots = ranks[0]->nslots;
    size_t nptr = (size_t)p->nsteps * tp * nslots;
    CUdeviceptr *h = calloc(nptr ? nptr : 1, sizeof *h);
    if (!h || api.cuMemAlloc_v2(&g->dptrs, CUDA_MAX_TP * sizeof(CUdeviceptr)) != 0 ||
        api.cuMemAlloc_v2(&g->step_ptrs, (nptr ? nptr : 1) * sizeof(CUdeviceptr)) != 0) {
        snprintf(err, errlen, "allocating the all-reduce pointer tables failed");
        free(h); free(g);
        return -1;
    }
    for (int k = 0; k < nslots; k++) {
        for (int q = 0; q < tp; q++) point_acts(ranks[q], k);
        for (int s = 0; s < p->nsteps; s++)
            if (p->steps_[s].kind == ST_ALLREDUCE || p->steps_[s].kind == ST_REDUCE_SCATTER)
                for (int q = 0; q < tp; q++)
                    h[((size_t)k * p->nsteps + s) * tp + q] = operand_ptr(ranks[q], &p->steps_[s].coll.buf);
    }
    for (int q = 0; q < tp; q++) point_acts(ranks[q], ranks[q]->slot);
    CUresult rc = api.cuMemcpyHtoD_v2(g->step_ptrs, h, (nptr ? nptr : 1) * sizeof *h);
    free(h);
    if (rc != 0) { snprintf(err, errlen, "uploading the all-reduce pointer tables failed: %s", cu_str(rc)); free(g); return -1; }
    for (int i = 0; i < tp; i++) { g->ranks[i] = ranks[i]; ranks[i]->group = g; }
    /* the group is freed with the process: ranks close in their own threads in any order */
    return 0;
}

/* A pipeline stage's Engine (runtime/pipeline.c, engine_create_stage): this process holds stage
 * rank r0 of the stage's dp x tp, whose communicators split from the pipeline's stage communicator. */
int cuda_stage_init(BackendRank **ranks, const Grid *grid, const StageLink *stage, char *err,
                    size_t errlen) {
    CudaPipe *cp = stage->cuda;
    int tp = grid->tp;
    if (!cp) return cuda_group_init(ranks, tp, err, errlen);
    if (!ranks[cp->r0] || cp->nlocal != ranks[cp->r0]->p->dp * tp) {
        snprintf(err, errlen, "pipeline stage: rank %d of %d is not the one this process holds", cp->r0, cp->nlocal);
        return -1;
    }
    ranks[cp->r0]->pipe = cp;
    return world_group_init(ranks[cp->r0], cp->r0, cp->nlocal, err, errlen);
}
