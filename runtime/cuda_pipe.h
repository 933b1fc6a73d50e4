/* cuda_pipe.h: pipeline stages on the CUDA backend with one process per GPU (runtime/cuda.c). An NCCL
 * world over the dp x pp x tp processes; the stage communicator of each pipeline rank, from which the
 * stage Engines given it (engine_create_stage's StageLink) split their own; per stage boundary and direction a
 * channel (the pair of processes of one (dp, tp) rank on its two sides, a communicator and a stream
 * each); and the boundary tensors moved device to device by ncclSend/ncclRecv on those streams. */
#ifndef BOOST_CUDA_PIPE_H
#define BOOST_CUDA_PIPE_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/plan.h"

#define CUDA_PIPE_MAX_CHANS 128

struct BackendRank;
typedef struct CudaPipe CudaPipe;

/* One boundary transfer: the tensor in activation slot `slot` of stage Engine rank r (device address
 * ptr, elems of dtype PDT_*), on channel `chan` (2b: forward from stage b to b+1; 2b+1: backward
 * from b+1 to b) to or from its side `peer` (0: stage b's process, 1: stage b+1's). */
typedef struct {
    struct BackendRank *r;
    int slot;
    void *ptr;
    int64_t elems;
    int dtype, chan, peer;
} CudaPipeOp;

/* This process is world rank wrank of wsize, stage rank r0 of the nlocal (dp*tp) processes of
 * pipeline rank me. Nothing is connected yet: the CUDA Engines made with it (engine_create_stage
 * with a StageLink naming it) are that stage rank, and the first of them makes the world (the NCCL
 * id is exchanged as the Engines' is, keyed by the plan's folder) and the stage communicators. */
CudaPipe *cuda_pipe_open(const Plan *plan, int wrank, int wsize, int me, int r0, int nlocal, char *err, size_t errlen);
/* After the Engines: the channels of every boundary b < nv-1, between pipeline ranks b % pp and
 * (b+1) % pp (every process calls it alike). */
int cuda_pipe_links(CudaPipe *cp, int nv, int pp, char *err, size_t errlen);
/* On the channel's stream, after the work issued so far on op->r. A channel carries one direction,
 * so a send waits only for its own receive (and earlier sends of the channel), never for a receive
 * this process has queued behind it; the schedules pair each channel up in micro-batch order. */
int cuda_pipe_send(CudaPipe *cp, const CudaPipeOp *op, char *err, size_t errlen);
int cuda_pipe_recv(CudaPipe *cp, const CudaPipeOp *op, char *err, size_t errlen);
/* Before a compute step of rank r on activation slot `slot`: its stream waits for the transfers
 * into that slot (received tensors) and out of it (sent ones, before they are overwritten). */
int cuda_pipe_settle(CudaPipe *cp, struct BackendRank *r, int slot, char *err, size_t errlen);
/* The end of a schedule: the queued sends issued, every transfer finished, and the work issued on
 * ranks[0..n) (this process's stage ranks) done too. */
int cuda_pipe_flush(CudaPipe *cp, struct BackendRank *const *ranks, int n, char *err, size_t errlen);
/* Over every process of the job: n doubles summed, each process getting the sum; n floats of root's
 * given to every process (a sum with zeros elsewhere: -0.0 arrives as +0.0). */
int cuda_pipe_world_sum(CudaPipe *cp, double *vals, int64_t n, char *err, size_t errlen);
int cuda_pipe_bcast(CudaPipe *cp, float *vals, int64_t n, int root, char *err, size_t errlen);
/* After the stage Engines are freed. */
void cuda_pipe_close(CudaPipe *cp);

#endif
