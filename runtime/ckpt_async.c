/* ckpt_async.c: a checkpoint save on a background thread whose sums over the processes are run by
 * the training thread (runtime/ckpt_async.h). One mutex and one condition variable guard a mailbox
 * of one sum: the job posts it and sleeps; the training thread runs it and wakes the job. */
#include <pthread.h>
#include <stdlib.h>
#include "runtime/ckpt_async.h"

struct CkptAsync {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    CkptJobFn fn;
    void *job;
    double *vals; int n;      /* the posted sum's values (the job's own array) */
    int posted;               /* a sum waits to be run */
    int result;               /* the real sum's status, for the job */
    int finished, status;     /* the job returned, with this status */
};

/* The sum the job calls: post it, sleep until the training thread has run it. */
static int posting_sum(void *ctx, double *vals, int n) {
    CkptAsync *a = ctx;
    pthread_mutex_lock(&a->mu);
    a->vals = vals;
    a->n = n;
    a->posted = 1;
    pthread_cond_broadcast(&a->cv);
    while (a->posted) pthread_cond_wait(&a->cv, &a->mu);
    int rc = a->result;
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static void *job_main(void *arg) {
    CkptAsync *a = arg;
    int status = a->fn(a->job, posting_sum, a);
    pthread_mutex_lock(&a->mu);
    a->status = status;
    a->finished = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

CkptAsync *ckpt_async_start(CkptJobFn fn, void *job) {
    CkptAsync *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->fn = fn;
    a->job = job;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->thread, NULL, job_main, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a);
        return NULL;
    }
    return a;
}

int ckpt_async_posted(CkptAsync *a) {
    pthread_mutex_lock(&a->mu);
    int posted = a->posted;
    pthread_mutex_unlock(&a->mu);
    return posted;
}

int ckpt_async_finished(CkptAsync *a) {
    pthread_mutex_lock(&a->mu);
    int finished = a->finished;
    pthread_mutex_unlock(&a->mu);
    return finished;
}

int ckpt_async_serve(CkptAsync *a, CkptSumFn real_sum, void *ctx) {
    pthread_mutex_lock(&a->mu);
    while (!a->posted && !a->finished) pthread_cond_wait(&a->cv, &a->mu);
    if (!a->posted) { pthread_mutex_unlock(&a->mu); return 0; }
    double *vals = a->vals;
    int n = a->n;
    pthread_mutex_unlock(&a->mu);
    int rc = real_sum ? real_sum(ctx, vals, n) : -1;   // the job sleeps meanwhile: vals is ours
    pthread_mutex_lock(&a->mu);
    a->result = rc != 0 ? -1 : 0;
    a->posted = 0;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return rc != 0 ? -1 : 0;
}

int ckpt_async_wait(CkptAsync *a, CkptSumFn real_sum, void *ctx) {
    while (!ckpt_async_finished(a)) ckpt_async_serve(a, real_sum, ctx);
    pthread_join(a->thread, NULL);
    int status = a->status;
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
    return status;
}
