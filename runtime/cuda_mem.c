/* cuda_mem.c: the CUDA backend's memory per rank: opening and closing a rank (arena, io, params,
 * grads, master weights and AdamW state, ZeRO-1's shard layout and tables), device copies, and the
 * host copies of tensors and optimizer state. */
#include "runtime/cuda_internal.h"

void cuda_rank_close(BackendRank *r) {
    if (!r) return;
    if (api_ok && r->opened) {
        if (api.cuCtxSetCurrent(shared.ctx)) fprintf(stderr, "boost: cuCtxSetCurrent failed while closing a rank\n");
        if (!r->dead) {   /* after an abort the streams may hold work that never ends: do not wait */
            if (r->stream) api.cuStreamSynchronize(r->stream);
            if (r->comm) api.cuStreamSynchronize(r->comm);
        }
        if (r->blas) api.cublasDestroy_v2(r->blas);
        if (r->blas_ws) api.cuMemFree_v2(r->blas_ws);
        if (r->dp_comm) nccl.ncclCommDestroy(r->dp_comm);
        if (r->ep_comm) nccl.ncclCommDestroy(r->ep_comm);
        if (r->edp_comm) nccl.ncclCommDestroy(r->edp_comm);
        if (r->ep_buf) api.cuMemFree_v2(r->ep_buf);
        if (r->nccl_comm && r->nccl_comm != r->world_comm) nccl.ncclCommDestroy(r->nccl_comm);
        if (r->world_comm) nccl.ncclCommDestroy(r->world_comm);
        if (r->coll_buf) api.cuMemFree_v2(r->coll_buf);
        if (r->dp_buf) api.cuMemFree_v2(r->dp_buf);
        if (r->ev_dp_ready) api.cuEventDestroy_v2(r->ev_dp_ready);
        if (r->ev_dp_done) api.cuEventDestroy_v2(r->ev_dp_done);
        CUdeviceptr bufs[] = {r->arena, r->io, r->params, r->grads, r->master, r->adam_m, r->adam_v, r->scratch,
                              r->gemm_ptrs, r->adam_chunks, r->gshard, r->gshard_sum};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) if (bufs[i]) api.cuMemFree_v2(bufs[i]);
        for (int s = 0; r->ev_ready && s < r->p->nsteps; s++) {
            if (r->ev_ready[s]) api.cuEventDestroy_v2(r->ev_ready[s]);
            if (r->ev_done[s]) api.cuEventDestroy_v2(r->ev_done[s]);
        }
        for (int k = 0; k < 2; k++) if (r->graph_exec[k]) api.cuGraphExecDestroy(r->graph_exec[k]);
        if (r->stream) api.cuStreamDestroy_v2(r->stream);
        if (r->comm) api.cuStreamDestroy_v2(r->comm);
        shared_close();
    }
    free(r->ev_ready); free(r->ev_done);
    free(r->rep_off); free(r->rep_n);
    free(r->sq_off); free(r->sq_n); free(r->sq_sign);
    free(r->gemm_ptrs_host);
    free(r->param_off); free(r->master_off); free(r->state_off); free(r->gwork_off);
    free(r->tptr);
    free(r);
}

/* Where the executor's operand resolution puts an operand on rank r (runtime/exec.c: the tensor's
 * base plus the rank's element offset at the tensor's dtype). */
CUdeviceptr operand_ptr(const BackendRank *r, const Operand *op) {
    return r->tptr[op->tensor] + rank_int(op->off, r->rank) * (int64_t)plan_dtype_size(r->p->tensors[op->tensor].dtype);
}

/* Ranks > 0 leave the replicated blocks out of the gradient norm (rank 0 counts them once): their
 * element ranges in grads, one per block, or one per row of a block narrower than its param. More
 * than the scratch holds partial sums for: nrep = -1 and the host does it (many host waits). */
static int rep_ranges(BackendRank *r) {
    const Plan *p = r->p;
    int cap = 0, max = (int)(r->scratch_bytes / (SUMSQ_BLOCKS * sizeof(float))) - 1;
    r->nrep = 0;
    if (r->rank == 0) return 0;
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        for (int q = 0; q < pp->nparts; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (!pt->rep) continue;
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            int whole = w == pp->cols;   /* full rows: one contiguous range */
            for (int64_t a = 0; a < (whole ? 1 : h); a++) {
                if (r->nrep == max) { r->nrep = -1; return 0; }
                if (r->nrep == cap) {
                    cap = cap ? 2 * cap : 16;
                    int64_t *o = realloc(r->rep_off, cap * sizeof *o);
                    if (o) r->rep_off = o;
                    int64_t *n = realloc(r->rep_n, cap * sizeof *n);
                    if (n) r->rep_n = n;
                    if (!o || !n) return -1;
                }
                r->rep_off[r->nrep] = r->param_off[i] + (lr + a) * pp->cols + lc;
                r->rep_n[r->nrep++] = whole ? h * w : w;
            }
        }
    }
    return 0;
}

/* The activation buffers' pointers in arena slot k (pipeline stages; k = 0 otherwise). */
void point_acts(BackendRank *r, int k) {
    for (int t = 0; t < r->p->ntensors; t++)
        if (r->p->tensors[t].kind == TK_ACT) r->tptr[t] = r->arena + (size_t)k * r->slot_bytes + r->p->tensors[t].offset;
}

/* Grouped GEMMs read device arrays of pointers. The plan is static, so each grouped step's arrays
 * ([B], [A], [C] per member, in the order of cuBLAS's swapped operands) are uploaded once here, one
 * table of 3 * nmembers pointers per arena slot (the activations move with the slot). */
static int upload_grouped_ptrs(BackendRank *r) {
    const Plan *p = r->p;
    int any = 0;
    for (int s = 0; s < p->nsteps; s++) any |= p->steps_[s].kind == ST_GROUPED_GEMM;
    if (!any || p->nmembers == 0) return 0;
    size_t n = 3 * (size_t)p->nmembers;
    r->gemm_ptrs_host = calloc(n * (size_t)r->nslots, sizeof *r->gemm_ptrs_host);
    if (!r->gemm_ptrs_host) return rfail(r, "out of memory");
    for (int k = 0; k < r->nslots; k++) {
        point_acts(r, k);
        for (int s = 0; s < p->nsteps; s++) {
            const PlanStep *st = &p->steps_[s];
            if (st->kind != ST_GROUPED_GEMM) continue;
            CUdeviceptr *h = r->gemm_ptrs_host + (size_t)k * n + 3 * (size_t)st->first_member;
            int m = st->nmembers;
            for (int i = 0; i < m; i++) {
                const GemmArgs *g = &p->members[st->first_member + i];
                h[i] = operand_ptr(r, &g->B);
                h[m + i] = operand_ptr(r, &g->A);
                h[2 * m + i] = operand_ptr(r, &g->C);
            }
        }
    }
    point_acts(r, r->slot);
    CU(r, api.cuMemAlloc_v2(&r->gemm_ptrs, n * (size_t)r->nslots * sizeof(CUdeviceptr)));
    CU(r, api.cuMemcpyHtoD_v2(r->gemm_ptrs, r->gemm_ptrs_host, n * (size_t)r->nslots * sizeof(CUdeviceptr)));
    return 0;
}

/* The elements [lo, hi) of an n-element param this rank updates: all, or its zero=1 shard. */
void own_range(const BackendRank *r, int64_t n, int64_t *lo, int64_t *hi) {
    if (!r->zero) { *lo = 0; *hi = n; return; }
    zero_shard(n, r->dp_rank, r->p->dp, lo, hi);
}

/* Where element j (in own_range) of param i lives: *mi in master, *si in adam_m/adam_v (zero=1: the
 * shard's first element at the param's offset; an fp32 param's master is whole). */
void state_index(const BackendRank *r, int i, int64_t j, int64_t lo, int64_t *mi, int64_t *si) {
    int whole = !r->zero || r->p->tensors[r->p->params[i].tensor].dtype != PDT_BF16;
    *mi = r->master_off[i] + (whole ? j : j - lo);
    *si = r->state_off[i] + (r->zero ? j - lo : j);
}

/* The multi-tensor AdamW's table: every parameter (zero=1: its shard on this dp rank) cut into
 * chunks of ADAMW_CHUNK elements (zero=1: with the chunk's master and m/v offsets). 0, or -1 (*cu set when the upload failed, else out of memory). */
int adam_table(BackendRank *r, CUresult *cu) {
    const Plan *p = r->p;
    int64_t nc = 0, lo, hi;
    *cu = 0;
    for (int i = 0; i < p->nparams; i++) {
        own_range(r, p->params[i].rows * p->params[i].cols, &lo, &hi);
        nc += (hi - lo + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
    }
    const int w = r->zero ? 5 : 3;   /* fields per chunk */
    long long *tab = malloc((size_t)(nc ? nc : 1) * w * sizeof *tab);
    if (!tab) return -1;
    int64_t c = 0;
    for (int i = 0; i < p->nparams; i++) {
        own_range(r, p->params[i].rows * p->params[i].cols, &lo, &hi);
        const long long flags = (p->params[i].decay ? 1 : 0) | (p->tensors[p->params[i].tensor].dtype == PDT_BF16 ? 2 : 0);
        for (int64_t o = lo; o < hi; o += ADAMW_CHUNK, c++) {
            long long *t = tab + w * c, count = hi - o < ADAMW_CHUNK ? hi - o : ADAMW_CHUNK;
            t[0] = r->param_off[i] + o;
            if (w == 3) { t[1] = count; t[2] = flags; continue; }
            int64_t mi, si;
            state_index(r, i, o, lo, &mi, &si);
            t[1] = mi; t[2] = si; t[3] = count; t[4] = flags;
        }
    }
    if (r->adam_chunks) { api.cuMemFree_v2(r->adam_chunks); r->adam_chunks = 0; }
    r->adam_nchunks = nc;
    if (nc && ((*cu = api.cuMemAlloc_v2(&r->adam_chunks, (size_t)nc * w * sizeof *tab)) ||
               (*cu = api.cuMemcpyHtoD_v2(r->adam_chunks, tab, (size_t)nc * w * sizeof *tab)))) {
        free(tab);
        return -1;
    }
    free(tab);
    return 0;
}

/* zero=1: the gradient norm's ranges on this rank: each param's shard, less (tp ranks > 0) the
 * replicated blocks in it, which tp rank 0 counts (offsets in grads; zero=2: in gshard). 0, or -1
 * out of memory. */
int sq_ranges(BackendRank *r) {
    const Plan *p = r->p;
    int cap = 0;
    r->nsq = 0;
#define SQ_ADD(o, n, sg) do { \
        if (r->nsq > 0 && r->sq_sign[r->nsq - 1] == (sg) && r->sq_off[r->nsq - 1] + r->sq_n[r->nsq - 1] == (o)) { \
            r->sq_n[r->nsq - 1] += (n); break; }   /* contiguous with the last one: merged */ \
        if (r->nsq == cap) { \
            cap = cap ? 2 * cap : 64; \
            int64_t *o_ = realloc(r->sq_off, cap * sizeof *o_); if (o_) r->sq_off = o_; \
            int64_t *n_ = realloc(r->sq_n, cap * sizeof *n_); if (n_) r->sq_n = n_; \
            int *s_ = realloc(r->sq_sign, cap * sizeof *s_); if (s_) r->sq_sign = s_; \
            if (!o_ || !n_ || !s_) return -1; \
        } \
        r->sq_off[r->nsq] = (o); r->sq_n[r->nsq] = (n); r->sq_sign[r->nsq++] = (sg); } while (0)
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        int64_t lo, hi;
        own_range(r, pp->rows * pp->cols, &lo, &hi);
        if (hi <= lo) continue;
        int64_t base = r->gshard ? r->state_off[i] - lo : r->param_off[i];   /* zero=2: in gshard */
        SQ_ADD(base + lo, hi - lo, 1);
        for (int q = 0; q < pp->nparts && r->rank > 0; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (!pt->rep) continue;
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            for (int64_t a = 0; a < h; a++) {
                int64_t b0 = (lr + a) * pp->cols + lc, b1 = b0 + w;
                if (b0 < lo) b0 = lo;
                if (b1 > hi) b1 = hi;
                if (b1 > b0) SQ_ADD(base + b0, b1 - b0, -1);
            }
        }
    }
#undef SQ_ADD
    return 0;
}

static CUresult alloc_zero(CUdeviceptr *p, size_t bytes) {
    if (bytes == 0) bytes = 256;
    CUresult rc = api.cuMemAlloc_v2(p, bytes);
    if (rc == 0) rc = api.cuMemsetD8_v2(*p, 0, bytes);
    return rc;
}

BackendRank *cuda_rank_open(const Plan *p, int rank, int tp, char *err, size_t errlen) {
    pthread_once(&api_once, api_load);
    if (!api_ok) { snprintf(err, errlen, "no CUDA device found (%s): use --backend cpu", api_why); return NULL; }
    if (tp > CUDA_MAX_TP) { snprintf(err, errlen, "tp=%d: the CUDA backend runs at most %d local ranks", tp, CUDA_MAX_TP); return NULL; }
    char nerr[512];
    if (!nvrtc_available(nerr, sizeof nerr)) {
        snprintf(err, errlen, "the CUDA backend needs NVRTC to compile kernels.cu: %s", nerr);
        return NULL;
    }
    if (shared_open(p, err, errlen) != 0) return NULL;
    if (cuda_plan_check(p, NULL, 0, err, errlen) != 0) { shared_close(); return NULL; }
    BackendRank *r = calloc(1, sizeof *r);
    if (!r) { shared_close(); snprintf(err, errlen, "out of memory"); return NULL; }
    r->opened = 1;
    r->p = p; r->rank = rank; r->tp = tp;
    r->sync_steps = runtime_env()->cuda_sync;
    r->tptr = calloc(p->ntensors, sizeof *r->tptr);
    r->param_off = calloc(p->nparams + 1, sizeof *r->param_off);
    r->master_off = calloc(p->nparams + 1, sizeof *r->master_off);
    r->state_off = calloc(p->nparams + 1, sizeof *r->state_off);
    CUresult rc = 0;
    const char *what = "";
    if (!r->tptr || !r->param_off || !r->master_off || !r->state_off) { snprintf(err, errlen, "out of memory"); goto fail_nostream; }
    if ((rc = api.cuStreamCreate(&r->stream, 0)) != 0) { what = "creating a stream"; goto fail_cu; }
    if ((rc = api.cuStreamCreate(&r->comm, 0)) != 0) { what = "creating the collectives' stream"; goto fail_cu; }
    r->ev_ready = calloc(p->nsteps + 1, sizeof *r->ev_ready);
    r->ev_done = calloc(p->nsteps + 1, sizeof *r->ev_done);
    if (!r->ev_ready || !r->ev_done) { snprintf(err, errlen, "out of memory"); goto fail; }
    r->nccl_timeout = runtime_nccl_timeout(600);
    if (runtime_env()->cuda_graph) {
        r->graphs = tp == 1 && p->dp == 1 && p->arena_slots <= 1 && !r->sync_steps && api.cuGraphLaunch != NULL;
        if (!r->graphs && rank == 0)
            fprintf(stderr, "boost: BOOST_CUDA_GRAPH=1 is for tp=1 and dp=1 without pipeline stages or BOOST_CUDA_SYNC, with "
                    "a driver that has CUDA graphs; running without graphs\n");
    }
    if (api.cublasCreate_v2(&r->blas) != 0) {
        snprintf(err, errlen, "cuBLAS could not be initialised on rank %d", rank);
        goto fail;
    }
    if (api.cublasSetStream_v2(r->blas, r->stream) != 0) {
        snprintf(err, errlen, "cublasSetStream failed on rank %d", rank);
        goto fail;
    }
    if (r->graphs && api.cublasSetWorkspace_v2) {   /* a graph capture must not allocate: cuBLAS's workspace first */
        size_t ws = (size_t)(atoi(shared.arch + 3) >= 90 ? 32 : 4) << 20;   /* Hopper on: 32 MiB */
        if (api.cuMemAlloc_v2(&r->blas_ws, ws) != 0 || api.cublasSetWorkspace_v2(r->blas, (void *)(uintptr_t)r->blas_ws, ws) != 0) {
            snprintf(err, errlen, "rank %d: cuBLAS's %zu MiB workspace for BOOST_CUDA_GRAPH=1 could not be set: run without "
                     "BOOST_CUDA_GRAPH", rank, ws >> 20);
            goto fail;
        }
    }
    /* params: element offsets, 256-byte aligned; zero=1: the master and AdamW state of a shard */
    r->zero = p->zero && p->dp > 1;
    for (int i = 0; i < p->nparams; i++) {
        int64_t n = p->params[i].rows * p->params[i].cols, s = r->zero ? (n + p->dp - 1) / p->dp : n;
        r->param_off[i] = r->nelems;
        r->nelems = align_up(r->nelems + n, ALIGN_ELEMS);
        r->master_off[i] = r->nmaster;
        r->nmaster = align_up(r->nmaster + (p->tensors[p->params[i].tensor].dtype == PDT_BF16 ? s : n), ALIGN_ELEMS);
        r->state_off[i] = r->nstate;
        r->nstate = align_up(r->nstate + s, ALIGN_ELEMS);
        if (p->tensors[p->params[i].grad].dtype != PDT_FP32) {
            snprintf(err, errlen, "%s: gradient d.%s is not fp32; the CUDA backend keeps gradients in fp32 "
                     "(docs/plan-format.md): regenerate the plan", p->path, p->params[i].name);
            goto fail;
        }
    }
    if (grad_work_layout(r)) { snprintf(err, errlen, "out of memory"); goto fail; }
    r->io_bytes = 0;
    for (int t = 0; t < p->ntensors; t++)
        if (p->tensors[t].kind == TK_INPUT || p->tensors[t].kind == TK_OUTPUT)
            r->io_bytes = align_up(r->io_bytes + numel(&p->tensors[t]) * plan_dtype_size(p->tensors[t].dtype), 256);
    r->scratch_bytes = 1 << 20;
    r->nslots = p->arena_slots > 1 ? p->arena_slots : 1;
    r->slot_bytes = (size_t)align_up(p->arena_bytes, 256);
    if ((rc = alloc_zero(&r->arena, r->slot_bytes * (size_t)r->nslots)) || (rc = alloc_zero(&r->io, r->io_bytes)) ||
        (rc = alloc_zero(&r->params, r->nelems * 2)) ||
        (rc = alloc_zero(&r->grads, (r->gwork_off ? r->nwork : r->nelems) * 4)) ||
        (rc = alloc_zero(&r->master, r->nmaster * 4)) || (rc = alloc_zero(&r->adam_m, r->nstate * 4)) ||
        (rc = alloc_zero(&r->adam_v, r->nstate * 4)) ||
        (rc = alloc_zero(&r->scratch, r->scratch_bytes)) ||
        (r->gwork_off && (rc = alloc_zero(&r->gshard, r->nstate * 4)))) {
        what = "allocating device memory (arena, params, grads, AdamW state)";
        goto fail_cu;
    }
    r->dp = 1;
    if (adam_table(r, &rc)) {
        if (rc) { what = "uploading the AdamW chunk table"; goto fail_cu; }
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    size_t io_off = 0;
    for (int t = 0; t < p->ntensors; t++) {
        const PlanTensor *T = &p->tensors[t];
        switch (T->kind) {
        case TK_ACT: r->tptr[t] = r->arena + T->offset; break;   /* slot 0 (point_acts) */
        case TK_INPUT: case TK_OUTPUT:
            r->tptr[t] = r->io + io_off;
            io_off = align_up(io_off + numel(T) * plan_dtype_size(T->dtype), 256);
            break;
        case TK_PARAM:   /* bf16 params: the bf16 copy; fp32 params: the master weights themselves */
            r->tptr[t] = T->dtype == PDT_BF16 ? r->params + r->param_off[T->param] * 2 : r->master + r->master_off[T->param] * 4;
            break;
        case TK_GRAD:   /* zero=2: the place grad_work_layout gave it */
            r->tptr[t] = r->grads + (r->gwork_off ? r->gwork_off : r->param_off)[T->param] * 4;
            break;
        }
    }
    if (upload_grouped_ptrs(r)) { snprintf(err, errlen, "rank %d: %s", rank, r->err); goto fail; }
    if (rep_ranges(r)) { snprintf(err, errlen, "out of memory"); goto fail; }
    return r;
fail_cu:
    snprintf(err, errlen, "rank %d: %s failed: %s", rank, what, cu_str(rc));
fail:
fail_nostream:
    cuda_rank_close(r);
    return NULL;
}

/* Copies of [rows, cols] blocks with row pitches, on stream s. */
int copy_2d(BackendRank *r, CUstream s, CUdeviceptr dst, size_t dpitch, CUdeviceptr src, size_t spitch,
                   size_t width, size_t rows) {
    /* one row, or rows back to back: a plain copy (cuMemcpy2D caps its pitches at the device's
     * MAX_PITCH, which one row of a large parameter exceeds); rows with a pitch above the cap: one
     * plain copy a row */
    if (rows == 1 || (dpitch == width && spitch == width)) {
        CU(r, api.cuMemcpyDtoDAsync_v2(dst, src, width * rows, s));
        return 0;
    }
    if (dpitch > (size_t)shared.max_pitch || spitch > (size_t)shared.max_pitch) {
        for (size_t i = 0; i < rows; i++) CU(r, api.cuMemcpyDtoDAsync_v2(dst + i * dpitch, src + i * spitch, width, s));
        return 0;
    }
    CUDA_MEMCPY2D_ m;
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE_;
    m.srcDevice = src;
    m.srcPitch = spitch;
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE_;
    m.dstDevice = dst;
    m.dstPitch = dpitch;
    m.WidthInBytes = width;
    m.Height = rows;
    CU(r, api.cuMemcpy2DAsync_v2(&m, s));
    return 0;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);   /* NaN stays NaN */
    u += 0x7fff + ((u >> 16) & 1);                                           /* round to nearest even */
    return (uint16_t)(u >> 16);
}
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Device -> host after the compute stream's work so far: the one host wait of a read-back (the
 * copy to pageable memory returns when it is done). Multi-process mode polls first (host_wait), so
 * a dead peer ends the wait instead of hanging in it. */
int read_back(BackendRank *r, void *host, CUdeviceptr src, size_t bytes, const char *what) {
    if (r->world) {
        char w[160];
        snprintf(w, sizeof w, "the steps before reading %.100s", what);
        if (host_wait(r, r->stream, w)) return -1;
    }
    CU(r, api.cuMemcpyDtoHAsync_v2(host, src, bytes, r->stream));
    return 0;
}

/* The fp32 view of tensor t: params read their master weights (zero=1, a bf16 param: the bf16
 * copy, then cuda_to_host puts the shard's masters over it). */
static CUdeviceptr fp32_source(BackendRank *r, int t, int *is_bf16) {
    const PlanTensor *T = &r->p->tensors[t];
    *is_bf16 = 0;
    if (T->kind == TK_PARAM && !(r->zero && T->dtype == PDT_BF16)) return r->master + r->master_off[T->param] * 4;
    *is_bf16 = T->dtype == PDT_BF16;
    return r->tptr[t];
}

/* zero=1, a bf16 param: the masters of this rank's shard into host[lo, hi). */
static int shard_masters_to_host(BackendRank *r, const PlanTensor *T, float *host) {
    int64_t lo, hi, mi, si;
    own_range(r, numel(T), &lo, &hi);
    state_index(r, T->param, lo, lo, &mi, &si);
    return hi > lo ? read_back(r, host + lo, r->master + mi * 4, (size_t)(hi - lo) * 4, T->name) : 0;
}

/* zero=2: param i's gradient as this rank keeps it after the reduce-scatter: its shard [lo, hi)
 * from gshard, zeros elsewhere (the Engine sums over dp, as for the AdamW moments). */
static int grad_shard_to_host(BackendRank *r, const PlanTensor *T, float *host) {
    int64_t lo, hi, n = numel(T);
    own_range(r, n, &lo, &hi);
    for (int64_t i = 0; i < n; i++) if (i < lo || i >= hi) host[i] = 0;
    CUdeviceptr src = r->gshard + (size_t)r->state_off[T->param] * 4;
    return hi > lo ? read_back(r, host + lo, src, (size_t)(hi - lo) * 4, T->name) : 0;
}

int cuda_to_host(BackendRank *r, int t, float *host) {
    if (ctx_set(r, "a copy to the host")) return -1;
    const PlanTensor *T = &r->p->tensors[t];
    int64_t n = numel(T);
    if (r->gshard && T->kind == TK_GRAD) return grad_shard_to_host(r, T, host);
    int bf;
    CUdeviceptr src = fp32_source(r, t, &bf);
    if (T->dtype == PDT_I32 && T->kind != TK_PARAM) {
        int32_t *tmp = malloc(n * 4);
        if (!tmp) return rfail(r, "out of memory");
        int rc = read_back(r, tmp, src, n * 4, T->name);
        for (int64_t i = 0; i < n; i++) host[i] = (float)tmp[i];
        free(tmp);
        return rc;
    }
    if (!bf) return read_back(r, host, src, n * 4, T->name);
    uint16_t *tmp = malloc(n * 2);
    if (!tmp) return rfail(r, "out of memory");
    int rc = read_back(r, tmp, src, n * 2, T->name);
    for (int64_t i = 0; i < n; i++) host[i] = bf16_to_f32(tmp[i]);
    free(tmp);
    if (!rc && T->kind == TK_PARAM) rc = shard_masters_to_host(r, T, host);   /* zero=1: exact in the shard */
    return rc;
}

/* Host -> device in the compute stream's order: the host data is staged at the call (pageable
 * memory), so the caller may reuse it at once, and nothing waits for the device. */
static int upload(BackendRank *r, CUdeviceptr dst, const float *host, int64_t n, int as_bf16) {
    if (!as_bf16) { CU(r, api.cuMemcpyHtoDAsync_v2(dst, host, n * 4, r->stream)); return 0; }
    uint16_t *tmp = malloc(n * 2);
    if (!tmp) return rfail(r, "out of memory");
    for (int64_t i = 0; i < n; i++) tmp[i] = f32_to_bf16(host[i]);
    CUresult rc = api.cuMemcpyHtoDAsync_v2(dst, tmp, n * 2, r->stream);
    free(tmp);
    CU(r, rc);
    return 0;
}

int cuda_from_host(BackendRank *r, int t, const float *host) {
    if (ctx_set(r, "a copy from the host")) return -1;
    const PlanTensor *T = &r->p->tensors[t];
    int64_t n = numel(T);
    if (T->kind == TK_PARAM) {   /* master weights (zero=1, bf16 params: the shard's) and, for bf16 params, the bf16 copy */
        int64_t lo = 0, hi = n, mi = r->master_off[T->param], si;
        if (r->zero && T->dtype == PDT_BF16) {
            own_range(r, n, &lo, &hi);
            state_index(r, T->param, lo, lo, &mi, &si);
        }
        if (hi > lo && upload(r, r->master + mi * 4, host + lo, hi - lo, 0)) return -1;
        if (T->dtype == PDT_BF16 && upload(r, r->tptr[t], host, n, 1)) return -1;
        return 0;
    }
    if (r->gshard && T->kind == TK_GRAD) {   /* zero=2: the shard this rank keeps */
        int64_t lo, hi;
        own_range(r, n, &lo, &hi);
        CUdeviceptr dst = r->gshard + (size_t)r->state_off[T->param] * 4;
        return hi > lo ? upload(r, dst, host + lo, hi - lo, 0) : 0;
    }
    if (T->dtype == PDT_I32) {
        int32_t *tmp = malloc(n * 4);
        if (!tmp) return rfail(r, "out of memory");
        for (int64_t i = 0; i < n; i++) tmp[i] = (int32_t)host[i];
        CUresult rc = api.cuMemcpyHtoDAsync_v2(r->tptr[t], tmp, n * 4, r->stream);
        free(tmp);
        CU(r, rc);
        return 0;
    }
    return upload(r, r->tptr[t], host, n, T->dtype == PDT_BF16);
}

int cuda_set_i32(BackendRank *r, int t, const int32_t *host) {
    if (ctx_set(r, "a copy of int32 data")) return -1;
    CU(r, api.cuMemcpyHtoDAsync_v2(r->tptr[t], host, numel(&r->p->tensors[t]) * 4, r->stream));
    return 0;
}

int cuda_zero_grads(BackendRank *r) {
    if (ctx_set(r, "zeroing the gradients")) return -1;
    CU(r, api.cuMemsetD32Async(r->grads, 0, r->gwork_off ? r->nwork : r->nelems, r->stream));
    if (r->gshard) CU(r, api.cuMemsetD32Async(r->gshard, 0, r->nstate, r->stream));   /* zero=2 */
    return 0;
}

int cuda_state_to_host(BackendRank *r, int param, int slot, float *host) {
    if (ctx_set(r, "reading optimizer state")) return -1;
    const PlanParam *pp = &r->p->params[param];
    int64_t n = pp->rows * pp->cols, lo, hi, mi, si;
    own_range(r, n, &lo, &hi);   /* zero=1: this dp rank's shard, zeros elsewhere (the Engine sums over dp) */
    state_index(r, param, lo, lo, &mi, &si);
    CUdeviceptr src = (slot == 1 ? r->adam_m : r->adam_v) + si * 4;
    if (hi > lo && read_back(r, host + lo, src, (size_t)(hi - lo) * 4, pp->name)) return -1;
    for (int64_t i = 0; i < n; i++) if (i < lo || i >= hi) host[i] = 0;
    return 0;
}

int cuda_state_from_host(BackendRank *r, int param, int slot, const float *host) {
    if (ctx_set(r, "writing optimizer state")) return -1;
    const PlanParam *pp = &r->p->params[param];
    int64_t lo, hi, mi, si;
    own_range(r, pp->rows * pp->cols, &lo, &hi);   /* zero=1: the shard's part of the full tensor in host */
    state_index(r, param, lo, lo, &mi, &si);
    CUdeviceptr dst = (slot == 1 ? r->adam_m : r->adam_v) + si * 4;
    if (hi > lo) CU(r, api.cuMemcpyHtoDAsync_v2(dst, host + lo, (size_t)(hi - lo) * 4, r->stream));
    return 0;
}

/* Pipeline stages: the activation buffers in arena slot `slot` from now on. Only host-side pointers
 * move (the grouped GEMMs' and the local all-reduce's tables have one copy per slot); work already
 * issued keeps its own slot's memory, in stream order. */
int cuda_arena_slot(BackendRank *r, int slot) {
    if (slot < 0 || slot >= r->nslots) return rfail(r, "arena slot %d is outside the plan's %d", slot, r->nslots);
    if (slot == r->slot) return 0;
    r->slot = slot;
    point_acts(r, slot);
    return 0;
}
