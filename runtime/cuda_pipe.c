/* cuda_pipe.c: pipeline stages on the CUDA backend with one process per GPU (runtime/cuda_pipe.h):
 * the pipeline's NCCL world and stage communicators, the boundary channels and their device-to-
 * device transfers, and sums and broadcasts over every process. */
#include "runtime/cuda_internal.h"

static int pipe_fail(CudaPipe *cp, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int pipe_fail(CudaPipe *cp, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cp->err, sizeof cp->err, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "pipeline rank %d (world rank %d of %d): %s", cp->me, cp->wrank, cp->wsize, cp->err);
    return -1;
}

/* NCCL failed or a wait ran past the timeout: abort every communicator of the pipeline (queued
 * transfers end instead of waiting for a process that is gone) and say what to do. */
static int pipe_abort(CudaPipe *cp, char *err, size_t errlen, const char *what) {
    if (!cp->dead) {
        for (int c = 0; c < cp->nchans; c++) if (cp->chan[c]) nccl.ncclCommAbort(cp->chan[c]);
        if (cp->stage) nccl.ncclCommAbort(cp->stage);
        if (cp->world) nccl.ncclCommAbort(cp->world);
    }
    cp->dead = 1;
    return pipe_fail(cp, err, errlen, "%s; NCCL was aborted and this process stops. Another process has probably died or "
                     "failed: look at its output (its own error comes first), then restart all %d processes (--resume from "
                     "the last checkpoint)", what, cp->wsize);
}

#define PIPE_CU(call, what) do { CUresult rc_ = (call); if (rc_ != 0) \
    return pipe_fail(cp, err, errlen, "%s: %s (CUDA error %d)", what, cu_str(rc_), (int)rc_); } while (0)
#define PIPE_NCCL(call) do { ncclResult_t nrc_ = (call); if (nrc_ != 0) { char w_[300]; \
    snprintf(w_, sizeof w_, "%s failed: %s (NCCL error %d)", #call, nccl.ncclGetErrorString(nrc_), (int)nrc_); \
    return pipe_abort(cp, err, errlen, w_); } } while (0)

CudaPipe *cuda_pipe_open(const Plan *plan, int wrank, int wsize, int me, int r0, int nlocal, char *err, size_t errlen) {
    CudaPipe *cp = calloc(1, sizeof *cp);
    if (!cp) { snprintf(err, errlen, "out of memory"); return NULL; }
    cp->plan = plan; cp->wrank = wrank; cp->wsize = wsize; cp->me = me; cp->r0 = r0; cp->nlocal = nlocal;
    cp->timeout = runtime_nccl_timeout(600);
    return cp;
}

/* At the first stage Engine's group set-up (the device context is current): the world and this
 * pipeline rank's stage communicator, the transfer stream, a reference on the shared module. */
int pipe_world(CudaPipe *cp, char *err, size_t errlen) {
    if (cp->world) return 0;
    pthread_once(&nccl_once, nccl_load);
    if (!nccl_ok) return pipe_fail(cp, err, errlen, "%s", nccl_why);
    if (!nccl.ncclCommSplit || !nccl.ncclSend || !nccl.ncclRecv || !nccl.ncclGroupStart || !nccl.ncclGroupEnd)
        return pipe_fail(cp, err, errlen, "pipeline stages need ncclCommSplit (NCCL 2.18 or newer) and ncclSend/ncclRecv; this "
                         "libnccl lacks them: install a newer NCCL (or point BOOST_LIBNCCL at one)");
    ncclUniqueId id;
    char path[1100];
    if (nccl_exchange_id(cp->plan, cp->wrank, &id, path, sizeof path, err, errlen)) return -1;
    if (ctx_set_err(err, errlen, "creating the pipeline's NCCL communicator")) return -1;
    ncclResult_t rc = nccl.ncclCommInitRank(&cp->world, cp->wsize, id, cp->wrank);
    if (cp->wrank == 0) unlink(path);
    if (rc != 0) { cp->world = NULL; return pipe_fail(cp, err, errlen, "ncclCommInitRank failed: %s", nccl.ncclGetErrorString(rc)); }
    rc = nccl.ncclCommSplit(cp->world, cp->me, cp->r0, &cp->stage, NULL);
    if (rc != 0 || !cp->stage)
        return pipe_fail(cp, err, errlen, "ncclCommSplit into the stage groups failed: %s", rc ? nccl.ncclGetErrorString(rc) : "no communicator");
    PIPE_CU(api.cuStreamCreate(&cp->stream, 0), "creating the sums' stream");
    pthread_mutex_lock(&shared_mu);
    shared.users++;
    pthread_mutex_unlock(&shared_mu);
    cp->held = 1;
    return 0;
}

int cuda_pipe_links(CudaPipe *cp, int nv, int pp, char *err, size_t errlen) {
    if (!cp->world) return pipe_fail(cp, err, errlen, "no stage Engine opened on the cuda backend before the links");
    if (2 * (nv - 1) > CUDA_PIPE_MAX_CHANS) return pipe_fail(cp, err, errlen, "%d stage boundaries: at most %d", nv - 1, CUDA_PIPE_MAX_CHANS / 2);
    if (ctx_set_err(err, errlen, "making the stage boundaries' communicators")) return -1;
    for (int c = 0; c < 2 * (nv - 1); c++) {
        int b = c / 2, lo = b % pp, hi = (b + 1) % pp, in = cp->me == lo || cp->me == hi;
        ncclComm_t comm = NULL;
        /* colour: the (dp, tp) rank, so each pair is that rank's two processes; key 0: stage b's side */
        ncclResult_t rc = nccl.ncclCommSplit(cp->world, in ? cp->r0 : -1 /* NCCL_SPLIT_NOCOLOR */, cp->me == lo ? 0 : 1, &comm, NULL);
        if (rc != 0 || (in && !comm))
            return pipe_fail(cp, err, errlen, "ncclCommSplit for the %s channel between stages %d and %d failed: %s",
                             c % 2 ? "backward" : "forward", b, b + 1, rc ? nccl.ncclGetErrorString(rc) : "no communicator");
        cp->chan[c] = comm;
        cp->nchans = c + 1;
        if (in) PIPE_CU(api.cuStreamCreate(&cp->chan_stream[c], 0), "creating a transfer stream");
    }
    return 0;
}

static int pipe_event(CudaPipe *cp, CUevent *ev, char *err, size_t errlen) {
    if (cp->nevs == cp->cap_evs) {
        int cap = cp->cap_evs ? 2 * cp->cap_evs : 32;
        CUevent *e = realloc(cp->evs, sizeof *e * (size_t)cap);
        if (!e) return pipe_fail(cp, err, errlen, "out of memory");
        memset(e + cp->cap_evs, 0, sizeof *e * (size_t)(cap - cp->cap_evs));
        cp->evs = e; cp->cap_evs = cap;
    }
    if (!cp->evs[cp->nevs]) PIPE_CU(api.cuEventCreate(&cp->evs[cp->nevs], CU_EVENT_DISABLE_TIMING_), "creating an event");
    *ev = cp->evs[cp->nevs++];
    return 0;
}

static int pipe_check(CudaPipe *cp, const CudaPipeOp *op, char *err, size_t errlen) {
    if (cp->dead) return pipe_fail(cp, err, errlen, "NCCL was aborted after an earlier failure");
    if (op->chan < 0 || op->chan >= cp->nchans || !cp->chan[op->chan] || (op->peer != 0 && op->peer != 1) || op->elems < 0)
        return pipe_fail(cp, err, errlen, "a transfer on channel %d to side %d: this process is not on that channel", op->chan, op->peer);
    return ctx_set_err(err, errlen, "a pipeline transfer");
}

static int pipe_out(CudaPipe *cp, BackendRank *r, int slot, CUevent done, char *err, size_t errlen) {
    if (cp->nout == cp->cap_out) {
        int cap = cp->cap_out ? 2 * cp->cap_out : 32;
        void *o = realloc(cp->out, sizeof *cp->out * (size_t)cap);
        if (!o) return pipe_fail(cp, err, errlen, "out of memory");
        cp->out = o; cp->cap_out = cap;
    }
    cp->out[cp->nout].r = r; cp->out[cp->nout].slot = slot; cp->out[cp->nout++].done = done;
    return 0;
}

/* One transfer on its channel's stream: after the work issued so far on op->r (a send: the tensor
 * is written; a receive: the slot's earlier readers are done), then ncclSend or ncclRecv. The
 * channel carries one direction between two processes, so its stream holds only sends on one side
 * and only receives on the other, matched in order: a send waits for its receive only. */
static int pipe_transfer(CudaPipe *cp, const CudaPipeOp *op, int send, char *err, size_t errlen) {
    if (pipe_check(cp, op, err, errlen)) return -1;
    CUstream st = cp->chan_stream[op->chan];
    CUevent after, done;
    if (pipe_event(cp, &after, err, errlen) || pipe_event(cp, &done, err, errlen)) return -1;
    PIPE_CU(api.cuEventRecord(after, op->r->stream), "ordering a transfer after the stage's work");
    PIPE_CU(api.cuStreamWaitEvent(st, after, 0), "ordering a transfer after the stage's work");
    if (send) PIPE_NCCL(nccl.ncclSend(op->ptr, (size_t)op->elems, nccl_dtype(op->dtype), op->peer, cp->chan[op->chan], st));
    else PIPE_NCCL(nccl.ncclRecv(op->ptr, (size_t)op->elems, nccl_dtype(op->dtype), op->peer, cp->chan[op->chan], st));
    PIPE_CU(api.cuEventRecord(done, st), "recording a transfer");
    return pipe_out(cp, op->r, op->slot, done, err, errlen);
}

int cuda_pipe_send(CudaPipe *cp, const CudaPipeOp *op, char *err, size_t errlen) { return pipe_transfer(cp, op, 1, err, errlen); }
int cuda_pipe_recv(CudaPipe *cp, const CudaPipeOp *op, char *err, size_t errlen) { return pipe_transfer(cp, op, 0, err, errlen); }

int cuda_pipe_settle(CudaPipe *cp, BackendRank *r, int slot, char *err, size_t errlen) {
    if (ctx_set_err(err, errlen, "waiting for a pipeline transfer")) return -1;
    for (int i = 0; i < cp->nout;) {
        if (cp->out[i].r == r && cp->out[i].slot == slot) {
            PIPE_CU(api.cuStreamWaitEvent(r->stream, cp->out[i].done, 0), "waiting for a pipeline transfer");
            cp->out[i] = cp->out[--cp->nout];
        } else i++;
    }
    return 0;
}

/* The host waits for stream st (a channel's, or the sums'), watching the pipeline's NCCL errors and
 * the timeout. */
static int pipe_host_wait(CudaPipe *cp, CUstream st, const char *what, char *err, size_t errlen) {
    ncclComm_t cs[CUDA_PIPE_MAX_CHANS + 1];
    int nc = 0;
    cs[nc++] = cp->world;
    for (int c = 0; c < cp->nchans; c++) if (cp->chan[c]) cs[nc++] = cp->chan[c];
    CUresult q = 0;
    char why[512];
    if (!poll_stream(st, cs, nc, cp->timeout, what, &q, why, sizeof why)) return 0;
    if (q) return pipe_fail(cp, err, errlen, "%s: %s (CUDA error %d)", what, cu_str(q), (int)q);
    return pipe_abort(cp, err, errlen, why);
}

int cuda_pipe_flush(CudaPipe *cp, BackendRank *const *ranks, int n, char *err, size_t errlen) {
    if (cp->dead) return pipe_fail(cp, err, errlen, "NCCL was aborted after an earlier failure");
    if (ctx_set_err(err, errlen, "finishing the pipeline's transfers")) return -1;
    for (int c = 0; c < cp->nchans; c++)
        if (cp->chan_stream[c] && pipe_host_wait(cp, cp->chan_stream[c], "the pipeline's transfers", err, errlen)) return -1;
    for (int i = 0; i < n; i++)
        if (rank_idle(ranks[i], "the stage's work at the end of the schedule")) {
            snprintf(err, errlen, "%s", ranks[i]->err);
            return -1;
        }
    cp->nout = 0;   /* all done on the device: later work comes after them */
    cp->nevs = 0;
    return 0;
}

/* n values of esize bytes through the world's all-reduce (sum), on the transfer stream. */
static int pipe_allreduce_host(CudaPipe *cp, void *vals, int64_t n, int f64, char *err, size_t errlen) {
    if (cp->dead) return pipe_fail(cp, err, errlen, "NCCL was aborted after an earlier failure");
    if (n <= 0) return 0;
    size_t bytes = (size_t)n * (f64 ? 8 : 4);
    if (ctx_set_err(err, errlen, "a sum over the pipeline's processes")) return -1;
    if (bytes > cp->buf_bytes) {
        if (cp->buf && pipe_host_wait(cp, cp->stream, "the sums before a larger one", err, errlen)) return -1;
        if (cp->buf) api.cuMemFree_v2(cp->buf);
        cp->buf = 0; cp->buf_bytes = 0;
        PIPE_CU(api.cuMemAlloc_v2(&cp->buf, bytes), "allocating the sums' staging");
        cp->buf_bytes = bytes;
    }
    PIPE_CU(api.cuMemcpyHtoDAsync_v2(cp->buf, vals, bytes, cp->stream), "staging a sum");
    PIPE_NCCL(nccl.ncclAllReduce((void *)(uintptr_t)cp->buf, (void *)(uintptr_t)cp->buf, (size_t)n, f64 ? NCCL_FLOAT64_ : NCCL_FLOAT32_,
                                 NCCL_SUM_, cp->world, cp->stream));
    if (pipe_host_wait(cp, cp->stream, "a sum over the pipeline's processes", err, errlen)) return -1;
    PIPE_CU(api.cuMemcpyDtoHAsync_v2(vals, cp->buf, bytes, cp->stream), "reading a sum");
    return pipe_host_wait(cp, cp->stream, "reading a sum", err, errlen);
}

int cuda_pipe_world_sum(CudaPipe *cp, double *vals, int64_t n, char *err, size_t errlen) {
    return pipe_allreduce_host(cp, vals, n, 1, err, errlen);
}

int cuda_pipe_bcast(CudaPipe *cp, float *vals, int64_t n, int root, char *err, size_t errlen) {
    if (cp->wrank != root) memset(vals, 0, sizeof *vals * (size_t)(n > 0 ? n : 0));
    return pipe_allreduce_host(cp, vals, n, 0, err, errlen);
}

void cuda_pipe_close(CudaPipe *cp) {
    if (!cp) return;
    if (cp->held) {
        if (api.cuCtxSetCurrent(shared.ctx)) fprintf(stderr, "boost: cuCtxSetCurrent failed while closing the pipeline\n");
        if (!cp->dead) {   /* after an abort the stream may hold transfers that never end: do not wait */
            if (cp->stream) api.cuStreamSynchronize(cp->stream);
            for (int c = 0; c < cp->nchans; c++) if (cp->chan_stream[c]) api.cuStreamSynchronize(cp->chan_stream[c]);
            for (int c = 0; c < cp->nchans; c++) if (cp->chan[c]) nccl.ncclCommDestroy(cp->chan[c]);
            if (cp->stage) nccl.ncclCommDestroy(cp->stage);
            if (cp->world) nccl.ncclCommDestroy(cp->world);
        }
        for (int i = 0; i < cp->cap_evs; i++) if (cp->evs[i]) api.cuEventDestroy_v2(cp->evs[i]);
        if (cp->buf) api.cuMemFree_v2(cp->buf);
        if (cp->stream) api.cuStreamDestroy_v2(cp->stream);
        for (int c = 0; c < cp->nchans; c++) if (cp->chan_stream[c]) api.cuStreamDestroy_v2(cp->chan_stream[c]);
        shared_close();
    }
    free(cp->out); free(cp->evs);
    free(cp);
}
