/* ckpt_async.h: one checkpoint save running on a background thread (boost train --ckpt-async).
 * The job writes from a host snapshot taken at the step boundary; the sums over the processes it
 * needs (ckpt_save_sharded's barriers) cannot run on its own thread beside the training's
 * collectives, so each is posted here and run by the training thread: at a step boundary once every
 * process has posted it (ckpt_async_posted, agreed by a sum the loop does anyway), or while waiting
 * for the job to end (ckpt_async_wait). Every process's job posts the same sums in the same
 * order. */
#ifndef BOOST_CKPT_ASYNC_H
#define BOOST_CKPT_ASYNC_H

#include "runtime/checkpoint.h"   // defines: CkptSumFn

typedef struct CkptAsync CkptAsync;

/* The job: runs on the background thread; `sum` (with sum_ctx) is the posting sum to hand to
 * ckpt_save_sharded. Returns its status (0: saved). */
typedef int (*CkptJobFn)(void *job, CkptSumFn sum, void *sum_ctx);

/* Start fn(job) on a new thread. NULL when the thread cannot be created (errno says why). */
CkptAsync *ckpt_async_start(CkptJobFn fn, void *job);
/* 1 when the job waits on a posted sum, 0 otherwise (running or finished). */
int ckpt_async_posted(CkptAsync *a);
/* 1 when the job has returned. */
int ckpt_async_finished(CkptAsync *a);
/* Run the posted sum with the real one (on the training thread) and let the job go on; a job that
 * posted nothing is waited for until it posts or returns. 0, or -1 when the real sum failed (the
 * job is told so and fails too). */
int ckpt_async_serve(CkptAsync *a, CkptSumFn real_sum, void *ctx);
/* Serve every sum the job posts until it returns; then join it and free a. Returns the job's
 * status. real_sum may be NULL when the job posts none (one process). */
int ckpt_async_wait(CkptAsync *a, CkptSumFn real_sum, void *ctx);

#endif
