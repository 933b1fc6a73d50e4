/* pipeline.c: pipeline-parallel execution of a pp > 1 plan (runtime/pipeline.h). plan.c reads the
 * file once (plan_stages_load: one Plan per stage section, each pipeline rank's `schedule` as
 * steps); each stage runs on its own Engine, the schedules are checked to pair up here, and walked
 * by a driver per pipeline rank: forward/backward run the stage's sections on a micro-batch's activation slot,
 * send/recv move the boundary tensor of the (dp, tp) ranks it holds to the neighbouring stage through
 * a transport (PipeTransport): FIFOs between driver threads when every rank is a thread of this
 * process, MPI point-to-point to the same (dp, tp) rank of the neighbouring stage when mpirun started
 * one process per grid rank (this process then holds one rank of its pipeline rank's stages only),
 * or NCCL device to device with one process per GPU on the cuda backend (runtime/cuda_pipe.h).
 * MoE plans (`loss_terms=moe_aux`): each MoE layer's aux row is read after its stage's forward and
 * its loss term added to the micro-batch's loss here (docs/moe.md, "Over pipeline stages"). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/pipeline.h"
#include "runtime/world.h"
#include "runtime/comm_mpi.h"   // defines: CommMpi, CommReq, comm_mpi_*
#include "runtime/cpu_gemm.h"   // defines: cpu_threads_set
#include "runtime/backend.h"    // defines: StageLink
#include "runtime/cuda_pipe.h"  // defines: CudaPipe, CudaPipeOp, cuda_pipe_*
#include "runtime/cuda.h"       // defines: cuda_device_present
#include "common/files.h"       // defines: file_read_all

#define PL_MAX_STAGES PLAN_MAX_STAGES

typedef PlanSchedStep PipeStep;   /* a schedule line (runtime/plan.h) */

typedef struct { int micro; float *data; } Msg;

/* A FIFO of messages from one stage to its neighbour (unbounded: a send never blocks). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Msg *q; int head, tail, cap;
} Chan;

/* How send/recv steps reach the neighbouring stage. data: the boundary tensor of each (dp, tp) rank
 * this process holds, [nheld][n] floats (malloc'd; send takes it). ch: the channel (2b: forward from
 * stage b to b+1; 2b+1: backward from b+1 to b), to: the receiving stage, from: the sending one. */
typedef struct {
    const char *name;
    int (*send)(Pipeline *pl, int ch, int to, int micro, float *data, int64_t n, char *err, size_t errlen);
    float *(*recv)(Pipeline *pl, int ch, int from, int micro, int64_t n, int *got_micro, char *err, size_t errlen);
    int (*flush)(Pipeline *pl, char *err, size_t errlen);   /* every send delivered, its buffer freed */
} PipeTransport;

static const PipeTransport queue_transport, mpi_transport, nccl_transport;   /* below, with their functions */

struct Pipeline {
    int pp, v, nv, m, dp, tp, nlocal;   /* pp ranks, v chunks each, nv = pp*v stages; nlocal: dp*tp ranks per stage */
    int r0, nheld;                 /* the stage ranks (grid ranks of a stage's dp x tp grid) this process holds */
    int procs, me;                 /* procs: one process per grid rank (mpirun, or one per GPU); me: this process's pipeline rank */
    int mpi;                       /* procs under mpirun: send/recv and sums over MPI */
    CudaPipe *cuda;                /* procs on the cuda backend: send/recv and sums over NCCL, device to device */
    CommMpi *stage_comm;           /* mpi: the dp*tp processes of pipeline rank me */
    CommReq *sreq; float **sbuf; int nsend, send_cap;   /* mpi: sends not yet waited for */
    const PipeTransport *tx;
    char path[512];
    Plan *plans[PL_MAX_STAGES];    /* by stage (virtual stage k runs on pipeline rank k % pp) */
    Engine *eng[PL_MAX_STAGES];
    PipeStep *sched[PL_MAX_STAGES]; int nsched[PL_MAX_STAGES];   /* by pipeline rank */
    Chan chan[2 * PL_MAX_STAGES];  /* 2b: forward from stage b to b+1; 2b+1: backward from b+1 to b */
    int aborted;                   /* a driver failed: the others stop waiting */
    int ncanons;
    int *canon_stage, *canon_idx;
    /* MoE (`loss_terms=moe_aux`): each MoE layer's L{i}.moe_aux ([loss, f_e, P_e, ...], docs/moe.md)
     * read after its stage's forward; its element 0 joins the micro-batch's loss here (no stage holds
     * both), the rows feed the training log's routing statistics */
    int moe_aux;                   /* the plan asks for it */
    int nmoe, moe_full, moe_auxn;  /* MoE layers over all stages; elements of the largest aux tensor, and
                                    * of its head kept per row: [loss, f_e, P_e, z-loss] (not the z-loss's
                                    * per-token lse, M of them: the log does not need them) */
    int *moe_layer, *moe_stage;    /* [nmoe] decoder layer and its stage, layers ascending */
    double *moe_rows;              /* [m][nmoe][dp][moe_auxn]: the last pass's rows (summed over the job under MPI) */
    float *moe_buf;                /* [nv][moe_full]: a read buffer per stage (drivers run in parallel) */
};

/* ---------------- loading ---------------- */

/* Is the schedule of every stage executable: sends and receives pair up in micro-batch order and
 * walking all stages (sends never block) ends without a stage waiting forever. */
static int check_schedule(Pipeline *pl, char *err, size_t errlen) {
    int pp = pl->pp, pc[PL_MAX_STAGES] = {0};
    int *q = calloc((size_t)(2 * pl->nv) * (size_t)(pl->m + 1), sizeof *q), head[2 * PL_MAX_STAGES] = {0}, tail[2 * PL_MAX_STAGES] = {0};
    if (!q) { snprintf(err, errlen, "out of memory"); return -1; }
    int rc = 0;
    for (;;) {
        int moved = 0, done = 1;
        for (int s = 0; s < pp && !rc; s++) {
            while (pc[s] < pl->nsched[s]) {
                const PipeStep *x = &pl->sched[s][pc[s]];
                if (x->kind == PS_SEND) {
                    int ch = x->bwd ? 2 * (x->vs - 1) + 1 : 2 * x->vs;
                    if (tail[ch] > pl->m) { snprintf(err, errlen, "%.300s:%d: more sends than micro-batches", pl->path, x->line); rc = -1; break; }
                    q[ch * (pl->m + 1) + tail[ch]++] = x->micro;
                } else if (x->kind == PS_RECV) {
                    int ch = x->bwd ? 2 * x->vs + 1 : 2 * (x->vs - 1);
                    if (head[ch] == tail[ch]) break;
                    if (q[ch * (pl->m + 1) + head[ch]] != x->micro) {
                        snprintf(err, errlen, "%.300s:%d: receives micro-batch %d, but micro-batch %d is sent first: the schedules "
                                 "do not pair up (regenerate the plan)", pl->path, x->line, x->micro, q[ch * (pl->m + 1) + head[ch]]);
                        rc = -1; break;
                    }
                    head[ch]++;
                }
                pc[s]++; moved = 1;
            }
            if (pc[s] < pl->nsched[s]) done = 0;
        }
        if (rc || done) break;
        if (!moved) {
            int s = 0;
            while (pc[s] >= pl->nsched[s]) s++;
            snprintf(err, errlen, "%.300s:%d: stage %d would wait here forever (no stage sends what it receives): the schedule "
                     "deadlocks (regenerate the plan)", pl->path, pl->sched[s][pc[s]].line, s);
            rc = -1;
        }
    }
    for (int ch = 0; ch < 2 * (pl->nv - 1) && !rc; ch++)
        if (head[ch] != tail[ch]) {
            snprintf(err, errlen, "%.300s: stage %d sends %d message(s) nobody receives (regenerate the plan)", pl->path,
                     ch % 2 ? ch / 2 + 1 : ch / 2, tail[ch] - head[ch]);
            rc = -1;
        }
    free(q);
    return rc;
}

/* mpirun started one process per grid rank (world = dp x pp x tp, tp fastest, then dp, then pp;
 * runtime/grid.h): this process is rank r0 of the dp x tp grid of pipeline rank me and opens the
 * Engines of me's stages only, each spanning the stage communicator (the processes of pipeline rank
 * me), so its tp and dp collectives stay inside the stage. */
/* One process per grid rank (mpirun, or one per GPU): the world must be the plan's grid; this process
 * is world rank wrank, stage rank r0 of pipeline rank me. gpus: say to launch one process per GPU,
 * else mpirun. */
static int take_grid_rank(Pipeline *pl, int wrank, int wsize, int gpus, char *err, size_t errlen) {
    int grid = pl->dp * pl->pp * pl->tp;
    if (wsize != grid) {
        char launch[64];
        snprintf(launch, sizeof launch, gpus ? "%d processes (one per GPU)" : "mpirun -np %d", grid);
        snprintf(err, errlen, "%s: the launcher gives a world of %d processes but the plan's grid is dp %d x pp %d x tp %d = %d "
                 "ranks: launch %s, or regenerate with -D dp= -D pp= -D tp= that multiply to %d", pl->path, wsize,
                 pl->dp, pl->pp, pl->tp, grid, launch, wsize);
        return -1;
    }
    pl->procs = 1;
    pl->me = wrank / pl->nlocal;
    pl->r0 = wrank % pl->nlocal; pl->nheld = 1;
    return 0;
}

/* The Engines of this process's pipeline rank (its stages me, me + pp, ..., in order), each as
 * stage rank r0 of the stage's dp x tp grid. */
static int open_own_stages(Pipeline *pl, const char *backend, char *err, size_t errlen) {
    StageLink link = {.mpi = pl->stage_comm, .cuda = pl->cuda};
    for (int s = pl->me; s < pl->nv; s += pl->pp)
        if (!(pl->eng[s] = engine_create_stage(pl->plans[s], backend, pl->r0, pl->nlocal, &link, err, errlen)))
            return -1;
    return 0;
}

static int open_mpi_stages(Pipeline *pl, int wrank, int wsize, char *err, size_t errlen) {
    int grid = pl->dp * pl->pp * pl->tp;
    if (take_grid_rank(pl, wrank, wsize, 0, err, errlen)) return -1;
    if (!comm_mpi_launched()) {
        snprintf(err, errlen, "%s: pp=%d with a world of %d processes (rank %d) from the environment: pipeline stages run one "
                 "process per rank only under Open MPI's mpirun; launch with mpirun -np %d, or one process (ranks as threads)",
                 pl->path, pl->pp, wsize, wrank, grid);
        return -1;
    }
    CommMpi *world = comm_mpi_init(err, errlen);
    if (!world) return -1;
    if (comm_mpi_size(world) != wsize || comm_mpi_rank(world) != wrank) {
        snprintf(err, errlen, "MPI gives rank %d of %d, the environment %d of %d: a launcher other than mpirun?",
                 comm_mpi_rank(world), comm_mpi_size(world), wrank, wsize);
        return -1;
    }
    pl->mpi = 1; pl->tx = &mpi_transport;
    /* every process splits once (color: its pipeline rank; key: its rank in the stage) */
    if (!(pl->stage_comm = comm_mpi_split(world, pl->me, pl->r0))) {
        snprintf(err, errlen, "making the pipeline stage groups: %s", comm_mpi_error());
        return -1;
    }
    int rc = open_own_stages(pl, "cpu", err, errlen);   /* their grids over stage_comm (StageLink.mpi) */
    /* the node's cores shared by its processes (a stage of one rank opened its Engine as threads,
     * which takes them all); the bits do not depend on it */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!rc) cpu_threads_set(local && atoi(local) > 0 ? atoi(local) : wsize);
    return rc;
}

/* One process per GPU (a world from the launcher's environment, --backend cuda): as under mpirun,
 * this process is stage rank r0 of pipeline rank me and opens me's stages only; their Engines split
 * their communicators from the pipeline's stage communicator (runtime/cuda_pipe.h), and send/recv go
 * device to device over NCCL, one communicator per stage boundary. */
static int open_cuda_stages(Pipeline *pl, int wrank, int wsize, char *err, size_t errlen) {
    if (take_grid_rank(pl, wrank, wsize, 1, err, errlen)) return -1;
    pl->tx = &nccl_transport;
    if (!(pl->cuda = cuda_pipe_open(pl->plans[0], wrank, wsize, pl->me, pl->r0, pl->nlocal, err, errlen))) return -1;
    int rc = open_own_stages(pl, "cuda", err, errlen);
    if (!rc) rc = cuda_pipe_links(pl->cuda, pl->nv, pl->pp, err, errlen);
    return rc;
}

/* loss_terms=moe_aux: the MoE layers (those with an L{i}.moe_aux tensor) and the stage holding each. */
static int find_moe_layers(Pipeline *pl, char *err, size_t errlen) {
    int L = pl->plans[0]->layers;
    char nm[64];
    pl->moe_layer = malloc(sizeof(int) * (size_t)(L + 1));
    pl->moe_stage = malloc(sizeof(int) * (size_t)(L + 1));
    if (!pl->moe_layer || !pl->moe_stage) { snprintf(err, errlen, "out of memory"); return -1; }
    for (int l = 0; l < L; l++) {
        snprintf(nm, sizeof nm, "L%d.moe_aux", l);
        for (int s = 0; s < pl->nv; s++) {
            int t = plan_find_tensor(pl->plans[s], nm);
            if (t < 0) continue;
            const PlanTensor *pt = &pl->plans[s]->tensors[t];
            if (pt->kind != TK_ACT || pt->rows * pt->cols < 1) {
                snprintf(err, errlen, "%s: stage %d: %s is not an activation buffer (regenerate the plan)", pl->path, s, nm);
                return -1;
            }
            int64_t n = pt->rows * pt->cols, keep = n;
            snprintf(nm, sizeof nm, "L%d.router_probs", l);
            int tpr = plan_find_tensor(pl->plans[s], nm);
            if (tpr >= 0 && 2 + 2 * pl->plans[s]->tensors[tpr].cols < keep) keep = 2 + 2 * pl->plans[s]->tensors[tpr].cols;
            if (n > pl->moe_full) pl->moe_full = (int)n;
            if (keep > pl->moe_auxn) pl->moe_auxn = (int)keep;
            pl->moe_layer[pl->nmoe] = l; pl->moe_stage[pl->nmoe++] = s;
            break;
        }
    }
    if (!pl->nmoe) {
        snprintf(err, errlen, "%s: the pipeline line says loss_terms=moe_aux but no stage has an MoE layer's L{i}.moe_aux "
                 "(regenerate the plan)", pl->path);
        return -1;
    }
    pl->moe_rows = calloc((size_t)pl->m * (size_t)pl->nmoe * (size_t)pl->dp * (size_t)pl->moe_auxn, sizeof *pl->moe_rows);
    pl->moe_buf = calloc((size_t)pl->nv * (size_t)pl->moe_full, sizeof *pl->moe_buf);
    if (!pl->moe_rows || !pl->moe_buf) { snprintf(err, errlen, "out of memory"); return -1; }
    return 0;
}

static int load_stages(Pipeline *pl, const char *path, const char *backend, char *err, size_t errlen) {
    PlanStages *ps = plan_stages_load(path, err, errlen);
    if (!ps) return -1;
    int pp = ps->pp;
    pl->pp = pp; pl->v = ps->v; pl->nv = ps->nv; pl->m = ps->m; pl->moe_aux = ps->moe_aux;
    for (int k = 0; k < ps->nv; k++) { pl->plans[k] = ps->stage[k]; ps->stage[k] = NULL; }
    for (int r = 0; r < pp; r++) { pl->sched[r] = ps->sched[r]; pl->nsched[r] = ps->nsched[r]; ps->sched[r] = NULL; }
    plan_stages_free(ps);
    if (check_schedule(pl, err, errlen)) return -1;
    pl->dp = pl->plans[0]->dp; pl->tp = pl->plans[0]->tp; pl->nlocal = pl->dp * pl->tp;
    if (pl->moe_aux && find_moe_layers(pl, err, errlen)) return -1;
    pl->r0 = 0; pl->nheld = pl->nlocal;
    if (!backend) return 0;   /* the stage plans only (a reader of the run's settings and canons) */
    /* cpu: threads, or one process per rank under mpirun; cuda: one process (every stage's ranks on
     * the device, the boundaries through host queues) or one process per GPU; auto: cuda when a
     * device is there (and, in one process, dp = 1), as for a pp = 1 plan, else cpu */
    int cuda = backend && !strcmp(backend, "cuda");
    int wrank = 0, wsize = 1, world = world_from_env(&wrank, &wsize, err, errlen);
    if (world < 0) return -1;
    if (backend && !strcmp(backend, "auto")) cuda = (world == 1 || pl->dp == 1) && cuda_device_present();
    if (backend && strcmp(backend, "cpu") && strcmp(backend, "auto") && !cuda) {
        snprintf(err, errlen, "%s: pp=%d: unknown backend '%s' for pipeline stages: use cpu or cuda", path, pp, backend);
        return -1;
    }
    if (world == 1 && cuda) return open_cuda_stages(pl, wrank, wsize, err, errlen);
    if (cuda && pl->dp > 1) {
        snprintf(err, errlen, "%s: pp=%d with dp=%d on the cuda backend runs one process per GPU: launch dp x pp x tp = %d "
                 "processes (mpirun, srun, or BOOST_WORLD_SIZE/BOOST_RANK), or use --backend cpu (ranks as threads)", path, pp,
                 pl->dp, pl->dp * pp * pl->tp);
        return -1;
    }
    if (world == 1) return open_mpi_stages(pl, wrank, wsize, err, errlen);
    for (int s = 0; s < pl->nv; s++) {
        pl->eng[s] = engine_create(pl->plans[s], cuda ? "cuda" : "cpu", err, errlen);
        if (!pl->eng[s]) return -1;
    }
    return 0;
}

static int build_canon_map(Pipeline *pl, char *err, size_t errlen) {
    int n = 0;
    for (int s = 0; s < pl->nv; s++) n += pl->plans[s]->ncanons;
    pl->canon_stage = malloc(sizeof(int) * (size_t)(n + 1));
    pl->canon_idx = malloc(sizeof(int) * (size_t)(n + 1));
    if (!pl->canon_stage || !pl->canon_idx) { snprintf(err, errlen, "out of memory"); return -1; }
    for (int s = 0; s < pl->nv; s++)
        for (int i = 0; i < pl->plans[s]->ncanons; i++) {
            const char *name = pl->plans[s]->canons[i].name;
            for (int k = 0; k < pl->ncanons; k++)
                if (!strcmp(pl->plans[pl->canon_stage[k]]->canons[pl->canon_idx[k]].name, name)) {
                    snprintf(err, errlen, "%s: canon %s is on stages %d and %d: each canonical tensor belongs to one stage "
                             "(regenerate the plan)", pl->path, name, pl->canon_stage[k], s);
                    return -1;
                }
            pl->canon_stage[pl->ncanons] = s;
            pl->canon_idx[pl->ncanons++] = i;
        }
    return 0;
}

Pipeline *pipeline_open(const char *path, const char *backend, char *err, size_t errlen) {
    Pipeline *pl = calloc(1, sizeof *pl);
    if (!pl) { snprintf(err, errlen, "out of memory"); return NULL; }
    snprintf(pl->path, sizeof pl->path, "%s", path);
    pl->tx = &queue_transport;
    for (int c = 0; c < 2 * PL_MAX_STAGES; c++) { pthread_mutex_init(&pl->chan[c].mu, NULL); pthread_cond_init(&pl->chan[c].cv, NULL); }
    if (load_stages(pl, path, backend, err, errlen) || build_canon_map(pl, err, errlen)) { pipeline_free(pl); return NULL; }
    for (int s = 0; s < pl->nv; s++) {   /* BOOST_PROFILE: one table per stage, named */
        char label[32];
        snprintf(label, sizeof label, "stage %d", s);
        if (pl->eng[s]) engine_profile_label(pl->eng[s], label);
    }
    return pl;
}

static void chan_drain(Chan *c) {
    for (int i = c->head; i < c->tail; i++) free(c->q[i].data);
    c->head = c->tail = 0;
}

void pipeline_free(Pipeline *pl) {
    if (!pl) return;
    for (int s = 0; s < PL_MAX_STAGES; s++) {
        if (pl->eng[s]) engine_free(pl->eng[s]);
        plan_free(pl->plans[s]);
        free(pl->sched[s]);
    }
    for (int c = 0; c < 2 * PL_MAX_STAGES; c++) {
        chan_drain(&pl->chan[c]);
        free(pl->chan[c].q);
        pthread_mutex_destroy(&pl->chan[c].mu); pthread_cond_destroy(&pl->chan[c].cv);
    }
    /* sends still outstanding (only after a failure): not waited for, as their receivers may be gone
     * (the job is about to stop, comm_mpi_finish); their buffers stay allocated, MPI may still read them */
    if (!pl->nsend) { free(pl->sreq); free(pl->sbuf); }
    cuda_pipe_close(pl->cuda);   /* after the stages' Engines, whose communicators split from it */
    comm_mpi_free(pl->stage_comm);
    free(pl->canon_stage); free(pl->canon_idx);
    free(pl->moe_layer); free(pl->moe_stage); free(pl->moe_rows); free(pl->moe_buf);
    free(pl);
}

int pipeline_plan_is(const char *path) { return plan_is_pipeline(path); }
int pipeline_stages(const Pipeline *pl) { return pl->nv; }
int pipeline_ranks(const Pipeline *pl) { return pl->pp; }
int pipeline_micro_batches(const Pipeline *pl) { return pl->m; }
Plan *pipeline_stage_plan(Pipeline *pl, int s) { return pl->plans[s]; }
Engine *pipeline_stage_engine(Pipeline *pl, int s) { return pl->eng[s]; }

int pipeline_init_params(Pipeline *pl, char *err, size_t errlen) {
    for (int s = 0; s < pl->nv; s++) if (pl->eng[s] && engine_init_params(pl->eng[s], err, errlen)) return -1;
    return 0;
}

const char *pipeline_transport(const Pipeline *pl) { return pl->tx->name; }

/* ---------------- transports ---------------- */

static int chan_send(Pipeline *pl, Chan *c, int micro, float *data) {
    pthread_mutex_lock(&c->mu);
    if (c->tail == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        Msg *q = realloc(c->q, sizeof *q * (size_t)cap);
        if (!q) { pthread_mutex_unlock(&c->mu); return -1; }
        c->q = q; c->cap = cap;
    }
    c->q[c->tail].micro = micro; c->q[c->tail++].data = data;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* The next message (NULL when another driver failed and the pipeline is stopping). */
static float *chan_recv(Pipeline *pl, Chan *c, int *micro) {
    pthread_mutex_lock(&c->mu);
    while (c->head == c->tail && !__atomic_load_n(&pl->aborted, __ATOMIC_ACQUIRE)) pthread_cond_wait(&c->cv, &c->mu);
    float *d = NULL;
    if (c->head < c->tail) { d = c->q[c->head].data; *micro = c->q[c->head].micro; c->head++; }
    if (c->head == c->tail) c->head = c->tail = 0;
    pthread_mutex_unlock(&c->mu);
    return d;
}

static int queue_send(Pipeline *pl, int ch, int to, int micro, float *data, int64_t n, char *err, size_t errlen) {
    if (chan_send(pl, &pl->chan[ch], micro, data)) { free(data); snprintf(err, errlen, "out of memory"); return -1; }
    return 0;
}

static float *queue_recv(Pipeline *pl, int ch, int from, int micro, int64_t n, int *got, char *err, size_t errlen) {
    float *d = chan_recv(pl, &pl->chan[ch], got);
    if (!d) snprintf(err, errlen, "stopped: another stage failed");
    return d;
}

static int queue_flush(Pipeline *pl, char *err, size_t errlen) { return 0; }

static const PipeTransport queue_transport = {"threads of one process, send/recv as queues", queue_send, queue_recv, queue_flush};

/* MPI: to the process of the same stage rank (dp, tp) on the pipeline rank that runs the other
 * stage. The tag is the channel and the micro-batch (mod 256): channels < 126 keep it below 32767,
 * the least MPI_TAG_UB MPI allows; between two processes messages of one tag arrive in the order
 * sent, and the schedules were checked to pair up in micro-batch order (check_schedule). Sends are
 * not waited for until flush (at the end of the schedule), so no send waits on its receive. */
static int mpi_peer(const Pipeline *pl, int stage) { return (stage % pl->pp) * pl->nlocal + pl->r0; }
static int mpi_tag(int ch, int micro) { return ch * 256 + micro % 256; }

static int mpi_send(Pipeline *pl, int ch, int to, int micro, float *data, int64_t n, char *err, size_t errlen) {
    if (pl->nsend == pl->send_cap) {
        int cap = pl->send_cap ? 2 * pl->send_cap : 16;
        CommReq *r = realloc(pl->sreq, sizeof *r * (size_t)cap);
        if (r) pl->sreq = r;
        float **b = r ? realloc(pl->sbuf, sizeof *b * (size_t)cap) : NULL;
        if (b) pl->sbuf = b;
        if (!r || !b) { free(data); snprintf(err, errlen, "out of memory"); return -1; }
        pl->send_cap = cap;
    }
    if (comm_mpi_isend(comm_mpi_world(), data, n * (int64_t)sizeof(float), mpi_peer(pl, to), mpi_tag(ch, micro), &pl->sreq[pl->nsend])) {
        free(data);
        snprintf(err, errlen, "sending micro-batch %d to stage %d: %s", micro, to, comm_mpi_error());
        return -1;
    }
    pl->sbuf[pl->nsend++] = data;
    return 0;
}

static float *mpi_recv(Pipeline *pl, int ch, int from, int micro, int64_t n, int *got, char *err, size_t errlen) {
    float *data = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    CommReq rq;
    if (!data) { snprintf(err, errlen, "out of memory for a receive"); return NULL; }
    if (comm_mpi_irecv(comm_mpi_world(), data, n * (int64_t)sizeof(float), mpi_peer(pl, from), mpi_tag(ch, micro), &rq)
        || comm_mpi_wait(&rq)) {
        free(data);
        snprintf(err, errlen, "receiving micro-batch %d from stage %d: %s", micro, from, comm_mpi_error());
        return NULL;
    }
    *got = micro;
    return data;
}

static int mpi_flush(Pipeline *pl, char *err, size_t errlen) {
    int rc = 0;
    for (int i = 0; i < pl->nsend; i++) {
        if (comm_mpi_wait(&pl->sreq[i]) && !rc) { snprintf(err, errlen, "a send to the next stage: %s", comm_mpi_error()); rc = -1; }
        free(pl->sbuf[i]);
    }
    pl->nsend = 0;
    return rc;
}

static const PipeTransport mpi_transport = {"one process per rank under mpirun, send/recv over MPI", mpi_send, mpi_recv, mpi_flush};

/* NCCL (one process per GPU): send_boundary and recv_boundary move the tensors on the device
 * (nccl_boundary), so the host-side send/recv are not used; flush waits until every transfer of
 * the schedule, and the stages' work, is done (the gradient norm that follows reads the device
 * anyway). */
static int nccl_flush(Pipeline *pl, char *err, size_t errlen) {
    struct BackendRank *held[PL_MAX_STAGES];
    int n = 0;
    for (int s = pl->me; s < pl->nv; s += pl->pp)
        if (pl->eng[s]) held[n++] = engine_backend_rank(pl->eng[s], pl->r0);
    return cuda_pipe_flush(pl->cuda, held, n, err, errlen);
}

static const PipeTransport nccl_transport = {"one process per GPU, send/recv over NCCL device to device", NULL, NULL, nccl_flush};

/* Under MPI: vals[n] summed over every process of the job in rank order (the callers give each
 * value one contributing process, so the sum is that value, bit for bit). */
static int world_sum(Pipeline *pl, double *vals, int64_t n, char *err, size_t errlen) {
    if (pl->cuda) return cuda_pipe_world_sum(pl->cuda, vals, n, err, errlen);
    if (!pl->mpi) return 0;
    CommMpi *w = comm_mpi_world();
    double *all = malloc(sizeof(double) * (size_t)(n * comm_mpi_size(w) + 1));
    if (!all) { snprintf(err, errlen, "out of memory"); return -1; }
    int rc = comm_mpi_allreduce_ordered(w, vals, n, COMM_F64, all);
    free(all);
    if (rc) snprintf(err, errlen, "summing over the pipeline's processes: %s", comm_mpi_error());
    return rc;
}

/* ---------------- the drivers ---------------- */

static void abort_all(Pipeline *pl) {
    __atomic_store_n(&pl->aborted, 1, __ATOMIC_RELEASE);
    for (int c = 0; c < 2 * pl->nv; c++) {
        pthread_mutex_lock(&pl->chan[c].mu);
        pthread_cond_broadcast(&pl->chan[c].cv);
        pthread_mutex_unlock(&pl->chan[c].mu);
    }
}

typedef struct {
    Pipeline *pl;
    int stage, rc;
    const int32_t *tokens, *targets;   /* m blocks of dp*micro_batch*seq */
    double *loss_dp;                   /* [m][dp]: each micro-batch's loss per dp rank (the last stage's tp rank 0 writes) */
    char err[1024];
} Driver;

static int64_t buf_elems(const Plan *p, const char *name) {
    int t = plan_find_tensor(p, name);
    return t < 0 ? 0 : p->tensors[t].rows * p->tensors[t].cols;
}

/* The losses of the held ranks that read one (tp rank 0 of each dp rank) into out[dp]. */
static void keep_losses(const Pipeline *pl, const float *lossv, double *out) {
    for (int r = pl->r0; r < pl->r0 + pl->nheld; r++)
        if (r % pl->tp == 0) out[(r / pl->tp) % pl->dp] = lossv[(r / pl->tp) % pl->dp];
}

/* NCCL: buffer `buf` in activation slot `slot` of this process's rank of Engine e, to or from stage
 * `other` on channel ch (boundary ch / 2, one direction), device to device. The schedules pair up
 * per channel in micro-batch order (check_schedule) and each channel has its own communicator, so
 * NCCL's in-order matching is the schedule's. */
static int nccl_boundary(Pipeline *pl, Engine *e, const char *buf, int slot, int ch, int other, int send, char *err, size_t errlen) {
    CudaPipeOp op = {0};
    op.slot = slot; op.chan = ch; op.peer = other == ch / 2 ? 0 : 1;
    if (engine_set_slot(e, slot, err, errlen) ||
        engine_tensor_span(e, pl->r0, buf, &op.r, &op.ptr, &op.elems, &op.dtype, err, errlen)) return -1;
    return send ? cuda_pipe_send(pl->cuda, &op, err, errlen) : cuda_pipe_recv(pl->cuda, &op, err, errlen);
}

/* Before a forward or backward of Engine e on slot `slot`: NCCL transfers into or out of that slot
 * are waited for on the device (host transports finished them already). */
static int settle(Pipeline *pl, Engine *e, int slot, char *err, size_t errlen) {
    return pl->cuda ? cuda_pipe_settle(pl->cuda, engine_backend_rank(e, pl->r0), slot, err, errlen) : 0;
}

/* Stage s's boundary tensor of every held rank to stage `to` over channel ch. */
static int send_boundary(Pipeline *pl, Engine *e, const Plan *p, const char *buf, int slot, int ch, int to, int micro,
                         char *err, size_t errlen) {
    if (pl->cuda) return nccl_boundary(pl, e, buf, slot, ch, to, 1, err, errlen);
    int64_t n = buf_elems(p, buf);
    if (engine_set_slot(e, slot, err, errlen)) return -1;
    float *data = malloc(sizeof(float) * (size_t)(n * pl->nheld + 1));
    if (!data) { snprintf(err, errlen, "out of memory for a send"); return -1; }
    for (int r = 0; r < pl->nheld; r++)
        if (engine_read_tensor(e, pl->r0 + r, buf, data + r * n, err, errlen)) { free(data); return -1; }
    return pl->tx->send(pl, ch, to, micro, data, n * pl->nheld, err, errlen);
}

static int recv_boundary(Pipeline *pl, Engine *e, const Plan *p, const char *buf, int slot, int ch, int from, int micro,
                         int line, char *err, size_t errlen) {
    if (pl->cuda) return nccl_boundary(pl, e, buf, slot, ch, from, 0, err, errlen);
    int64_t n = buf_elems(p, buf);
    if (engine_set_slot(e, slot, err, errlen)) return -1;
    int got = -1;
    float *data = pl->tx->recv(pl, ch, from, micro, n * pl->nheld, &got, err, errlen);
    if (!data) return -1;
    if (got != micro) {
        free(data);
        snprintf(err, errlen, "%.300s:%d: received micro-batch %d, expected %d", pl->path, line, got, micro);
        return -1;
    }
    for (int r = 0; r < pl->nheld; r++)
        if (engine_write_tensor(e, pl->r0 + r, buf, data + r * n, err, errlen)) { free(data); return -1; }
    free(data);
    return 0;
}

/* loss_terms=moe_aux: after stage vs's forward of micro-batch `micro` (activations in `slot`), the
 * aux rows of its MoE layers, from tp rank 0 of each dp rank this process holds (the router's
 * output is the same on every tp rank). Each driver writes its own stages' rows only. */
static int keep_moe_aux(Pipeline *pl, Engine *e, int vs, int slot, int micro, char *err, size_t errlen) {
    if (!pl->moe_aux) return 0;
    char nm[64];
    float *buf = pl->moe_buf + (size_t)vs * (size_t)pl->moe_full;
    int set = 0;
    for (int q = 0; q < pl->nmoe; q++) {
        if (pl->moe_stage[q] != vs) continue;
        if (!set && engine_set_slot(e, slot, err, errlen)) return -1;
        set = 1;
        snprintf(nm, sizeof nm, "L%d.moe_aux", pl->moe_layer[q]);
        int64_t n = buf_elems(pl->plans[vs], nm);
        for (int r = pl->r0; r < pl->r0 + pl->nheld; r++) {
            if (r % pl->tp) continue;
            int d = (r / pl->tp) % pl->dp;
            if (engine_read_tensor(e, r, nm, buf, err, errlen)) return -1;
            double *row = pl->moe_rows + (((size_t)micro * (size_t)pl->nmoe + (size_t)q) * (size_t)pl->dp + (size_t)d) * (size_t)pl->moe_auxn;
            for (int64_t k = 0; k < n && k < pl->moe_auxn; k++) row[k] = buf[k];
        }
    }
    return 0;
}

/* Pipeline rank s's schedule, whatever the transport. */
static int run_driver(Driver *d) {
    Pipeline *pl = d->pl;
    int s = d->stage;   /* the pipeline rank */
    int64_t block = (int64_t)pl->dp * pl->plans[0]->micro_batch * pl->plans[0]->seq;
    float lossv[256];
    for (int i = 0; i < pl->nsched[s]; i++) {
        const PipeStep *x = &pl->sched[s][i];
        Engine *e = pl->eng[x->vs];
        const Plan *p = pl->plans[x->vs];
        const int32_t *tok = d->tokens + (int64_t)x->micro * block, *tgt = d->targets + (int64_t)x->micro * block;
        if (x->kind == PS_FORWARD || x->kind == PS_BACKWARD) {
            int fwd = x->kind == PS_FORWARD, want_loss = fwd && x->vs == pl->nv - 1 && pl->dp <= 256;
            if (settle(pl, e, x->slot, d->err, sizeof d->err)) return -1;
            int flags = STAGE_TRAIN | (x->micro == pl->m - 1 ? STAGE_LAST : 0);
            if (engine_stage_pass(e, !fwd, x->slot, tok, tgt, flags, want_loss ? lossv : NULL, d->err, sizeof d->err))
                return -1;
            if (want_loss && d->loss_dp) keep_losses(pl, lossv, d->loss_dp + (int64_t)x->micro * pl->dp);
            if (fwd && keep_moe_aux(pl, e, x->vs, x->slot, x->micro, d->err, sizeof d->err)) return -1;
        } else if (x->kind == PS_SEND) {
            int ch = x->bwd ? 2 * (x->vs - 1) + 1 : 2 * x->vs;
            if (send_boundary(pl, e, p, x->buf, x->slot, ch, x->bwd ? x->vs - 1 : x->vs + 1, x->micro, d->err, sizeof d->err)) return -1;
        } else {
            int ch = x->bwd ? 2 * x->vs + 1 : 2 * (x->vs - 1);
            if (recv_boundary(pl, e, p, x->buf, x->slot, ch, x->bwd ? x->vs + 1 : x->vs - 1, x->micro, x->line, d->err, sizeof d->err))
                return -1;
        }
    }
    return pl->tx->flush(pl, d->err, sizeof d->err);
}

static void *driver_main(void *arg) {
    Driver *d = arg;
    d->rc = run_driver(d);
    if (d->rc) abort_all(d->pl);
    return NULL;
}

/* losses[j] from loss_dp[j][dp] (summed over the processes first under MPI): the mean over dp. With
 * loss_terms=moe_aux each dp rank's loss first gets every MoE layer's aux[0] added in layer order, in
 * fp32, as the pp=1 plan's moe_aux_add steps add them to its loss tensor. */
static int mean_losses(Pipeline *pl, double *loss_dp, int nm, float *losses, char *err, size_t errlen) {
    if (world_sum(pl, loss_dp, (int64_t)nm * pl->dp, err, errlen)) return -1;
    if (pl->moe_aux && world_sum(pl, pl->moe_rows, (int64_t)nm * pl->nmoe * pl->dp * pl->moe_auxn, err, errlen)) return -1;
    for (int j = 0; j < nm && losses; j++) {
        double sum = 0;
        for (int r = 0; r < pl->dp; r++) {
            float l = (float)loss_dp[(int64_t)j * pl->dp + r];
            for (int q = 0; pl->moe_aux && q < pl->nmoe; q++)
                l += (float)pl->moe_rows[(((size_t)j * (size_t)pl->nmoe + (size_t)q) * (size_t)pl->dp + (size_t)r) * (size_t)pl->moe_auxn];
            loss_dp[(int64_t)j * pl->dp + r] = l;
            sum += (double)l;
        }
        losses[j] = pl->dp == 1 ? (float)loss_dp[j] : (float)(sum / pl->dp);
    }
    return 0;
}

int pipeline_forward_backward(Pipeline *pl, const int32_t *tokens, const int32_t *targets, float *losses, char *err, size_t errlen) {
    if (pl->aborted) { snprintf(err, errlen, "the pipeline stopped after an earlier error; open a new one"); return -1; }
    if (pl->dp > 256) { snprintf(err, errlen, "dp=%d: more than 256 dp ranks", pl->dp); return -1; }
    int64_t n = (int64_t)pl->m * pl->dp * pl->plans[0]->micro_batch * pl->plans[0]->seq;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= pl->plans[0]->vocab || targets[i] < 0 || targets[i] >= pl->plans[0]->vocab) {
            snprintf(err, errlen, "batch: token %lld (%d -> %d) is outside the vocabulary 0..%d; the data does not match the model",
                     (long long)i, tokens[i], targets[i], pl->plans[0]->vocab - 1);
            return -1;
        }
    double *loss_dp = calloc((size_t)(pl->m * pl->dp), sizeof *loss_dp);
    Driver *d = calloc((size_t)pl->pp, sizeof *d);
    if (pl->moe_aux) memset(pl->moe_rows, 0, sizeof *pl->moe_rows * (size_t)pl->m * (size_t)pl->nmoe * (size_t)pl->dp * (size_t)pl->moe_auxn);
    if (!d || !loss_dp) { free(d); free(loss_dp); snprintf(err, errlen, "out of memory"); return -1; }
    int rc = 0;
    if (pl->procs) {   /* this process drives its own pipeline rank, in this thread */
        Driver *me = &d[pl->me];
        me->pl = pl; me->stage = pl->me; me->tokens = tokens; me->targets = targets; me->loss_dp = loss_dp;
        if ((me->rc = run_driver(me))) { snprintf(err, errlen, "stage %d: %s", pl->me, me->err); pl->aborted = 1; rc = -1; }
    } else {
        pthread_t th[PL_MAX_STAGES];
        int started = 0;
        for (int s = 0; s < pl->pp; s++) {
            d[s].pl = pl; d[s].stage = s; d[s].tokens = tokens; d[s].targets = targets; d[s].loss_dp = loss_dp;
            if (pthread_create(&th[s], NULL, driver_main, &d[s])) { d[s].rc = -1; snprintf(d[s].err, sizeof d[s].err, "cannot start a driver thread"); abort_all(pl); break; }
            started++;
        }
        for (int s = 0; s < started; s++) pthread_join(th[s], NULL);
        for (int s = 0; s < pl->pp && !rc; s++)
            if (d[s].rc && !strstr(d[s].err, "another stage failed")) { snprintf(err, errlen, "stage %d: %s", s, d[s].err); rc = -1; }
        for (int s = 0; s < pl->pp && !rc; s++) if (d[s].rc) { snprintf(err, errlen, "stage %d: %s", s, d[s].err); rc = -1; }
    }
    if (!rc) rc = mean_losses(pl, loss_dp, pl->m, losses, err, errlen);
    free(d); free(loss_dp);
    return rc;
}

/* The boundary between stage s and s+1: the buffer stage s's forward send names and the one stage
 * s+1's forward receive fills. */
static int boundary(const Pipeline *pl, int s, const char **out, const char **in) {
    int r0 = s % pl->pp, r1 = (s + 1) % pl->pp;
    *out = *in = NULL;
    for (int i = 0; i < pl->nsched[r0] && !*out; i++)
        if (pl->sched[r0][i].kind == PS_SEND && !pl->sched[r0][i].bwd && pl->sched[r0][i].vs == s) *out = pl->sched[r0][i].buf;
    for (int i = 0; i < pl->nsched[r1] && !*in; i++)
        if (pl->sched[r1][i].kind == PS_RECV && !pl->sched[r1][i].bwd && pl->sched[r1][i].vs == s + 1) *in = pl->sched[r1][i].buf;
    return *out && *in ? 0 : -1;
}

/* Validation: the micro-batch through the stages one after the other, slot 0 of each (under MPI each
 * process runs its own stages, the boundaries going through the transport). */
int pipeline_forward(Pipeline *pl, const int32_t *tokens, const int32_t *targets, float *loss, char *err, size_t errlen) {
    if (pl->aborted) { snprintf(err, errlen, "the pipeline stopped after an earlier error; open a new one"); return -1; }
    float lossv[256];
    double loss_dp[256] = {0};
    if (pl->dp > 256) { snprintf(err, errlen, "dp=%d: more than 256 dp ranks", pl->dp); return -1; }
    if (pl->moe_aux) memset(pl->moe_rows, 0, sizeof *pl->moe_rows * (size_t)pl->nmoe * (size_t)pl->dp * (size_t)pl->moe_auxn);
    int rc = 0;
    for (int s = 0; s < pl->nv && !rc; s++) {
        const char *out = NULL, *in = NULL;
        if (s < pl->nv - 1 && boundary(pl, s, &out, &in)) { snprintf(err, errlen, "%s: stage %d has no forward send", pl->path, s); return -1; }
        if (!pl->eng[s]) continue;   /* another process's stage */
        if (s > 0) {
            const char *o0, *i0;
            boundary(pl, s - 1, &o0, &i0);
            if ((rc = recv_boundary(pl, pl->eng[s], pl->plans[s], i0, 0, 2 * (s - 1), s - 1, 0, 0, err, errlen))) break;
        }
        if ((rc = settle(pl, pl->eng[s], 0, err, errlen))) break;
        if ((rc = engine_stage_pass(pl->eng[s], 0, 0, tokens, targets, 0, s == pl->nv - 1 ? lossv : NULL, err, errlen))) break;
        if ((rc = keep_moe_aux(pl, pl->eng[s], s, 0, 0, err, errlen))) break;
        if (s == pl->nv - 1) keep_losses(pl, lossv, loss_dp);
        else rc = send_boundary(pl, pl->eng[s], pl->plans[s], out, 0, 2 * s, s + 1, 0, err, errlen);
    }
    if (!rc) rc = pl->tx->flush(pl, err, errlen);
    float l = 0;
    if (!rc) rc = mean_losses(pl, loss_dp, 1, &l, err, errlen);
    if (rc) { pl->aborted = pl->procs; return -1; }
    if (loss) *loss = l;
    return 0;
}

int pipeline_discard_grads(Pipeline *pl, char *err, size_t errlen) {
    for (int s = 0; s < pl->nv; s++) if (pl->eng[s] && engine_discard_grads(pl->eng[s], err, errlen)) return -1;
    return 0;
}

int pipeline_optimizer_step(Pipeline *pl, int step, float *grad_norm, float *lr, char *err, size_t errlen) {
    /* sq[s][r]: the sum of squares of stage s's rank r, added below in stage order then rank order,
     * as every Engine's ranks in one process would be (under MPI each (s, r) has one process). */
    double *sq = calloc((size_t)(pl->nv * pl->nlocal), sizeof *sq);
    if (!sq) { snprintf(err, errlen, "out of memory"); return -1; }
    for (int s = 0; s < pl->nv; s++) {
        if (!pl->eng[s]) continue;
        double v = 0;
        if (engine_grad_sq(pl->eng[s], &v)) { free(sq); snprintf(err, errlen, "out of memory"); return -1; }
        sq[s * pl->nlocal + pl->r0] = v;   /* threads: the stage's total in its first rank's place */
    }
    if (world_sum(pl, sq, (int64_t)pl->nv * pl->nlocal, err, errlen)) { free(sq); pl->aborted = 1; return -1; }
    double total = 0;
    for (int s = 0; s < pl->nv; s++) {   /* stage order: deterministic */
        double st = 0;
        for (int r = 0; r < pl->nlocal; r++) st += sq[s * pl->nlocal + r];
        total += st;
    }
    free(sq);
    double norm = sqrt(total);
    if (grad_norm) *grad_norm = (float)norm;
    if (lr) *lr = engine_lr_at(pl->plans[0], step);
    if (!isfinite(norm)) {
        pipeline_discard_grads(pl, NULL, 0);
        snprintf(err, errlen, "optimizer step %d: the gradient norm is not finite (%g); the update was skipped "
                 "(lower the learning rate or check the data)", step, norm);
        return -1;
    }
    double skip_above = pl->plans[0]->norm_skip_above;
    if (skip_above > 0 && norm > skip_above) {   /* a spike: no update */
        pipeline_discard_grads(pl, NULL, 0);
        return 1;
    }
    for (int s = 0; s < pl->nv; s++) if (pl->eng[s] && engine_adamw_clipped(pl->eng[s], step, norm, err, errlen)) return -1;
    return 0;
}

/* ---------------- canonical tensors ---------------- */
int pipeline_canon_count(const Pipeline *pl) { return pl->ncanons; }

const PlanCanon *pipeline_canon(const Pipeline *pl, int i) {
    return i < 0 || i >= pl->ncanons ? NULL : &pl->plans[pl->canon_stage[i]]->canons[pl->canon_idx[i]];
}

int pipeline_find_canon(const Pipeline *pl, const char *name) {
    for (int i = 0; i < pl->ncanons; i++) if (!strcmp(pipeline_canon(pl, i)->name, name)) return i;
    return -1;
}

/* Under MPI every process of the job calls it: the stage's processes gather the tensor, and its
 * stage rank 0 broadcasts it to all. */
int pipeline_get_canon(Pipeline *pl, int i, int slot, float *full) {
    if (i < 0 || i >= pl->ncanons) return -1;
    int s = pl->canon_stage[i];
    int rc = pl->eng[s] ? engine_get_canon(pl->eng[s], pl->canon_idx[i], slot, full) : 0;
    if (pl->procs) {
        const PlanCanon *c = pipeline_canon(pl, i);
        int root = (s % pl->pp) * pl->nlocal;
        char err[1024];
        if (pl->cuda ? cuda_pipe_bcast(pl->cuda, full, c->rows * c->cols, root, err, sizeof err)
                     : comm_mpi_bcast(comm_mpi_world(), full, c->rows * c->cols * (int64_t)sizeof(float), root)) rc = -1;
    }
    return rc;
}

int pipeline_moe_aux(const Pipeline *pl, int micro, int layer, int d, float *out, int n) {
    for (int q = 0; pl->moe_aux && q < pl->nmoe; q++) {
        if (pl->moe_layer[q] != layer) continue;
        if (micro < 0 || micro >= pl->m || d < 0 || d >= pl->dp) return -1;
        const double *row = pl->moe_rows + (((size_t)micro * (size_t)pl->nmoe + (size_t)q) * (size_t)pl->dp + (size_t)d) * (size_t)pl->moe_auxn;
        for (int k = 0; k < n && k < pl->moe_auxn; k++) out[k] = (float)row[k];
        return 0;
    }
    return -1;
}

int pipeline_canon_stage(const Pipeline *pl, int i, int *local) {
    if (i < 0 || i >= pl->ncanons) return -1;
    if (local) *local = pl->canon_idx[i];
    return pl->canon_stage[i];
}

int pipeline_world_sum(Pipeline *pl, double *vals, int n) {
    char err[512];
    if (world_sum(pl, vals, n, err, sizeof err) == 0) return 0;
    fprintf(stderr, "boost: a sum across the pipeline's processes failed: %s\n", err);
    return -1;
}

/* Under MPI only the processes of the canon's stage take it (each its own blocks). */
int pipeline_set_canon(Pipeline *pl, int i, int slot, const float *full) {
    if (i < 0 || i >= pl->ncanons) return -1;
    Engine *e = pl->eng[pl->canon_stage[i]];
    return e ? engine_set_canon(e, pl->canon_idx[i], slot, full) : 0;
}
