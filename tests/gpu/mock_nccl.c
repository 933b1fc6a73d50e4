/* mock_nccl.c: a stand-in for libnccl.so.2 on a machine without GPUs, next to tests/gpu/mock_cuda.c
 * (whose device memory is host memory), so the CUDA backend's multi-process mode runs in tests. The
 * processes of one communicator meet in a POSIX shared-memory segment named from the unique id.
 * A collective is queued on its stream through mock_cuda_enqueue_hook (as NCCL queues a kernel) and
 * runs when that stream is advanced: it copies this rank's data into its slot, arrives at a barrier,
 * and, once every rank has arrived, sums (in rank order, bf16 through fp32 like the local-mode
 * kernel) or gathers all slots; a second barrier frees the slots. Until its peers arrive it reports
 * "not ready", so the stream stays there like a GPU waiting in an NCCL kernel, forever if a peer is
 * gone. ncclCommGetAsyncError reports ncclRemoteError once a peer process has exited (unless
 * MOCK_NCCL_SILENT_DEATH=1, to test a timeout), and ncclCommAbort releases the queued collectives.
 * MOCK_NCCL_KILL_AT=N kills this process (SIGKILL) as its N-th collective starts, to test that the
 * others end instead of hanging. MOCK_NCCL_LATE_ERROR_MS=N: an asynchronous-error check sleeps N ms
 * while a sum of doubles (the host's sums) has arrived at its last barrier, so peers that finished it
 * can exit before the check looks at them (a waiter must not call that a failure). Without the CUDA stand-in loaded, collectives run at the call and
 * give up after $MOCK_NCCL_TIMEOUT s (default 120). ncclCommSplit (the rank grid's tp and dp groups)
 * meets on the parent's segment, then each colour opens its own segment; ncclReduceScatter and
 * ncclAvg (each value times 1/nranks, then summed, as NCCL does for floating types) are there for
 * the data-parallel path. ncclSend/ncclRecv (pipeline stages): each rank has one outbox in the
 * segment (a message at a time: peer, count, datatype, data); a send waits for its outbox, posts,
 * and waits until the peer took it; a receive waits for its peer's outbox to hold a message for it
 * and refuses (ncclInvalidUsage, with a message) one of another count or datatype. Between
 * ncclGroupStart and ncclGroupEnd the sends and receives of one stream are queued as one unit
 * advanced together, whatever their communicators (so a send and a receive in opposite directions
 * cannot block each other), as NCCL groups them. */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
enum { OK = 0, ERR_SYSTEM = 2, ERR_INTERNAL = 3, ERR_INVALID = 4, ERR_USAGE = 5, ERR_REMOTE = 6 };
enum { SUM = 0, AVG = 4, F32 = 7, F64 = 8, BF16 = 9 };
enum { K_REDUCE = 0, K_GATHER = 1, K_SCATTER = 2 };   /* a collective's kind */
#define MAX_RANKS 16
#define SLOT_BYTES ((size_t)32 << 20)

typedef struct {
    int count, gen;                   /* barrier: arrivals, generation */
    int pid[MAX_RANKS];               /* each rank's process, to notice one that is gone */
    long long desc[MAX_RANKS][4];     /* each rank's current collective: kind, datatype, count, op */
    int split_color[MAX_RANKS], split_key[MAX_RANKS];   /* ncclCommSplit: each rank's colour and key */
} Header;

typedef struct ncclComm {
    int rank, nranks;
    char name[128];
    Header *hdr;
    unsigned char *slots;             /* [nranks][SLOT_BYTES] */
    size_t map_bytes;
    int aborted;
    int pending;                      /* queued collectives not yet finished */
    int mismatch;                     /* a collective did not match the other ranks' (ncclInvalidUsage) */
    int nsplits;                      /* ncclCommSplit calls on this communicator, to name the children */
    int f64_at_last_barrier;          /* queued sums of doubles waiting at their last barrier */
} Comm;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A waiting rank sleeps 20 us, doubling to 0.5 ms while it keeps waiting: on an oversubscribed
 * machine the ranks still computing get the cores, instead of sleepers' system calls. */
static void nap(int *us) {
    usleep((useconds_t)*us);
    if (*us < 500) *us *= 2;
}

/* Arrive at the barrier; returns the generation to wait past. */
static int arrive(Comm *c) {
    int gen = __atomic_load_n(&c->hdr->gen, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&c->hdr->count, 1, __ATOMIC_ACQ_REL) == c->nranks) {
        __atomic_store_n(&c->hdr->count, 0, __ATOMIC_RELEASE);
        __atomic_add_fetch(&c->hdr->gen, 1, __ATOMIC_ACQ_REL);
    }
    return gen;
}
static int passed(Comm *c, int gen) { return __atomic_load_n(&c->hdr->gen, __ATOMIC_ACQUIRE) != gen; }

static int blocking_barrier(Comm *c) {
    int gen = arrive(c);
    const char *tv = getenv("MOCK_NCCL_TIMEOUT");
    double limit = tv && atof(tv) > 0 ? atof(tv) : 120, t0 = now_s();
    int us = 20;
    while (!passed(c, gen)) {
        if (now_s() - t0 > limit) {
            fprintf(stderr, "mock nccl: rank %d waited %.0f s at a barrier: another rank is gone\n", c->rank, limit);
            return -1;
        }
        nap(&us);
    }
    return 0;
}

/* A process that has exited (or is a zombie waiting to be reaped) is gone. */
static int process_gone(int pid) {
    if (pid <= 0) return 0;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close = strrchr(buf, ')');
    return close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case OK: return "no error";
    case ERR_SYSTEM: return "mock: shared memory failed";
    case ERR_INTERNAL: return "mock: a peer did not arrive";
    case ERR_INVALID: return "mock: invalid argument";
    case ERR_REMOTE: return "remote process exited or there was a network error (mock)";
    case ERR_USAGE: return "invalid usage: the ranks called different collectives, counts or datatypes (mock)";
    }
    return "mock: unknown error";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id->internal, sizeof id->internal, "/boost-mock-nccl-%d-%lld", (int)getpid(),
             (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    return OK;
}

static ncclResult_t comm_open(Comm **out, int nranks, const char *name, int rank) {
    Comm *c = calloc(1, sizeof *c);
    if (!c) return ERR_SYSTEM;
    c->rank = rank; c->nranks = nranks;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->map_bytes = 4096 + SLOT_BYTES * nranks;   /* the collective slots (also the point-to-point mailboxes) */
    int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->map_bytes) != 0) { if (fd >= 0) close(fd); free(c); return ERR_SYSTEM; }
    void *m = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) { free(c); return ERR_SYSTEM; }
    c->hdr = m;
    c->slots = (unsigned char *)m + 4096;
    c->hdr->pid[rank] = (int)getpid();
    if (blocking_barrier(c)) { munmap(m, c->map_bytes); free(c); return ERR_INTERNAL; }
    if (rank == 0) shm_unlink(c->name);   /* all ranks have it mapped */
    *out = c;
    return OK;
}

ncclResult_t ncclCommInitRank(Comm **out, int nranks, ncclUniqueId id, int rank) {
    if (!out || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks || id.internal[0] != '/') return ERR_INVALID;
    return comm_open(out, nranks, id.internal, rank);
}

/* Every rank of the parent calls it (in the same order); the ranks of one colour form a child,
 * ordered by key (ties: parent rank); colour -1 (NCCL_SPLIT_NOCOLOR) joins none (*out = NULL). */
ncclResult_t ncclCommSplit(Comm *c, int color, int key, Comm **out, void *config) {
    (void)config;
    if (!c || !out || color < -1 || c->aborted) return ERR_INVALID;
    if (c->pending) {
        fprintf(stderr, "mock nccl: ncclCommSplit on rank %d while %d collectives of the parent are queued: split "
                "before issuing work (NCCL would deadlock)\n", c->rank, c->pending);
        return ERR_USAGE;
    }
    *out = NULL;
    c->hdr->split_color[c->rank] = color;
    c->hdr->split_key[c->rank] = key;
    if (blocking_barrier(c)) return ERR_INTERNAL;
    int n = 0, me = 0;
    for (int q = 0; q < c->nranks; q++) {
        if (color < 0 || c->hdr->split_color[q] != color) continue;
        int kq = c->hdr->split_key[q];
        if (kq < key || (kq == key && q < c->rank)) me++;
        n++;
    }
    if (blocking_barrier(c)) return ERR_INTERNAL;   /* everyone has read the colours before the next split */
    int split = c->nsplits++;
    if (color < 0) return OK;
    char name[128];
    snprintf(name, sizeof name, "%.80s-s%d-c%d", c->name, split, color);
    return comm_open(out, n, name, me);
}

ncclResult_t ncclCommGetAsyncError(Comm *c, ncclResult_t *async_error) {
    if (!c || !async_error) return ERR_INVALID;
    *async_error = OK;
    const char *silent = getenv("MOCK_NCCL_SILENT_DEATH");
    if (c->mismatch) { *async_error = ERR_USAGE; return OK; }
    if (c->aborted || (silent && *silent == '1')) return OK;
    const char *late = getenv("MOCK_NCCL_LATE_ERROR_MS");
    if (late && atoi(late) > 0 && c->f64_at_last_barrier > 0) usleep((useconds_t)atoi(late) * 1000);
    for (int q = 0; q < c->nranks; q++)
        if (q != c->rank && process_gone(c->hdr->pid[q])) *async_error = ERR_REMOTE;
    return OK;
}

ncclResult_t ncclCommAbort(Comm *c) {
    if (!c) return OK;
    c->aborted = 1;   /* queued collectives finish at once; the comm is freed with the process */
    return OK;
}

ncclResult_t ncclCommDestroy(Comm *c) {
    if (!c) return OK;
    if (c->pending) return ERR_INVALID;   /* NCCL: destroy only after the work finished (else abort) */
    munmap(c->hdr, c->map_bytes);
    free(c);
    return OK;
}

static size_t dsize(int dt) { return dt == F64 ? 8 : dt == F32 ? 4 : dt == BF16 ? 2 : 0; }

static float bf16_in(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t bf16_out(float f) {   /* round to nearest even, as the kernels' __float2bfloat16 */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* One queued collective: a small state machine advanced each time its stream is. count: elements
 * per rank received (reduce-scatter), sent (all-gather) or reduced (all-reduce). */
typedef struct {
    Comm *c;
    int kind, dt, op, state, gen;
    const void *send;
    void *recv;
    size_t count;
} Coll;

static int ncoll;

static const char *kind_name(long long kind) {
    return kind == K_GATHER ? "ncclAllGather" : kind == K_SCATTER ? "ncclReduceScatter" : "ncclAllReduce";
}

static size_t send_elems(const Coll *k) { return k->kind == K_SCATTER ? k->count * (size_t)k->c->nranks : k->count; }

/* Sums in rank order; ncclAvg multiplies each value by 1/nranks first. A reduce-scatter reduces only
 * this rank's block [rank*count, (rank+1)*count) of the slots. */
static void finish(Coll *k) {
    Comm *c = k->c;
    size_t es = dsize(k->dt), count = k->count;
    if (k->kind == K_GATHER) {
        for (int q = 0; q < c->nranks; q++)
            memcpy((unsigned char *)k->recv + q * count * es, c->slots + SLOT_BYTES * q, count * es);
        return;
    }
    size_t base = k->kind == K_SCATTER ? (size_t)c->rank * count : 0;
    int avg = k->op == AVG;
    double sd = avg ? 1.0 / c->nranks : 1.0;
    float sf = (float)sd;
    for (size_t i = 0; i < count; i++) {
        size_t j = base + i;
        if (k->dt == F64) {
            double s = 0;
            for (int q = 0; q < c->nranks; q++) s += ((const double *)(c->slots + SLOT_BYTES * q))[j] * sd;
            ((double *)k->recv)[i] = s;
        } else if (k->dt == F32) {
            float s = 0;
            for (int q = 0; q < c->nranks; q++) s += ((const float *)(c->slots + SLOT_BYTES * q))[j] * sf;
            ((float *)k->recv)[i] = s;
        } else {
            float s = 0;
            for (int q = 0; q < c->nranks; q++) s += bf16_in(((const uint16_t *)(c->slots + SLOT_BYTES * q))[j]) * sf;
            ((uint16_t *)k->recv)[i] = bf16_out(s);
        }
    }
}

/* 0 done, 1 waiting for the peers. */
static int coll_step(void *arg) {
    Coll *k = arg;
    Comm *c = k->c;
    if (c->aborted) {
        if (k->state == 2 && k->dt == F64) c->f64_at_last_barrier--;
        k->state = 3;
        return 0;
    }
    if (k->state == 0) {
        const char *kill_at = getenv("MOCK_NCCL_KILL_AT");
        if (kill_at && atoi(kill_at) == ++ncoll) {
            fprintf(stderr, "mock nccl: rank %d dies at collective %d (MOCK_NCCL_KILL_AT)\n", c->rank, ncoll);
            fflush(stderr);
            kill(getpid(), SIGKILL);
        }
        memcpy(c->slots + SLOT_BYTES * c->rank, k->send, send_elems(k) * dsize(k->dt));
        c->hdr->desc[c->rank][0] = k->kind; c->hdr->desc[c->rank][1] = k->dt; c->hdr->desc[c->rank][2] = (long long)k->count;
        c->hdr->desc[c->rank][3] = k->op;
        k->gen = arrive(c);
        k->state = 1;
    }
    if (k->state == 1) {
        if (!passed(c, k->gen)) return 1;
        for (int q = 0; q < c->nranks; q++)   /* NCCL needs the same call on every rank */
            if (memcmp(c->hdr->desc[q], c->hdr->desc[c->rank], sizeof c->hdr->desc[q])) {
                if (!c->mismatch)
                    fprintf(stderr, "mock nccl: rank %d called %s of %lld elements (datatype %d, op %d) while rank %d called "
                            "%s of %lld (datatype %lld, op %lld): the ranks' collectives must match\n", c->rank,
                            kind_name(k->kind), (long long)k->count, k->dt, k->op, q, kind_name(c->hdr->desc[q][0]),
                            c->hdr->desc[q][2], c->hdr->desc[q][1], c->hdr->desc[q][3]);
                c->mismatch = 1;
            }
        if (!c->mismatch) finish(k);
        k->gen = arrive(c);
        k->state = 2;
        if (k->dt == F64) c->f64_at_last_barrier++;
    }
    if (k->state == 2) {
        if (!passed(c, k->gen)) return 1;
        k->state = 3;
        if (k->dt == F64) c->f64_at_last_barrier--;
    }
    return 0;
}

static void coll_free(void *arg) {
    Coll *k = arg;
    k->c->pending--;
    free(k);
}

static int (*enqueue_hook)(void *, int (*)(void *), void *, void (*)(void *));
static int hook_looked_up;

static ncclResult_t submit(Coll *k, void *stream) {
    if (!hook_looked_up) {   /* the CUDA stand-in, loaded by the backend from $BOOST_LIBCUDA */
        hook_looked_up = 1;
        const char *lib = getenv("BOOST_LIBCUDA");
        void *h = lib && *lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
        if (h) *(void **)&enqueue_hook = dlsym(h, "mock_cuda_enqueue_hook");
    }
    k->c->pending++;
    if (enqueue_hook && stream) return enqueue_hook(stream, coll_step, k, coll_free) ? ERR_SYSTEM : OK;
    const char *tv = getenv("MOCK_NCCL_TIMEOUT");
    double limit = tv && atof(tv) > 0 ? atof(tv) : 120, t0 = now_s();
    int us = 20;
    while (coll_step(k)) {
        if (now_s() - t0 > limit) {
            fprintf(stderr, "mock nccl: rank %d waited %.0f s at a barrier: another rank is gone\n", k->c->rank, limit);
            coll_free(k);
            return ERR_INTERNAL;
        }
        nap(&us);
    }
    Comm *c = k->c;
    coll_free(k);
    return c->mismatch ? ERR_USAGE : OK;
}

static ncclResult_t collective(int kind, const void *send, void *recv, size_t count, int dt, int op, Comm *c, void *stream) {
    size_t es = dsize(dt);
    if (!c || !es || c->aborted || !send || !recv) return ERR_INVALID;
    if (count * (kind == K_SCATTER ? (size_t)c->nranks : 1) * es > SLOT_BYTES) {
        fprintf(stderr, "mock nccl: %s of %zu elements on rank %d: more than the stand-in's %zu-byte slot\n",
                kind_name(kind), count, c->rank, SLOT_BYTES);
        return ERR_INVALID;
    }
    /* NCCL's in-place rules: an all-gather's send is recv's own block; a reduce-scatter's recv is send's own block */
    if (kind == K_GATHER && send != recv && (const unsigned char *)send > (unsigned char *)recv &&
        (const unsigned char *)send < (unsigned char *)recv + count * c->nranks * es &&
        send != (unsigned char *)recv + (size_t)c->rank * count * es) return ERR_INVALID;
    if (kind == K_SCATTER && send != recv && (const unsigned char *)recv > (const unsigned char *)send &&
        (const unsigned char *)recv < (const unsigned char *)send + count * c->nranks * es &&
        (const unsigned char *)recv != (const unsigned char *)send + (size_t)c->rank * count * es) return ERR_INVALID;
    Coll *k = calloc(1, sizeof *k);
    if (!k) return ERR_SYSTEM;
    k->c = c; k->kind = kind; k->dt = dt; k->op = op; k->send = send; k->recv = recv; k->count = count;
    return submit(k, stream);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int dt, int op, Comm *c, void *stream) {
    if (op != SUM && op != AVG) return ERR_INVALID;
    return collective(K_REDUCE, send, recv, count, dt, op, c, stream);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, int dt, int op, Comm *c, void *stream) {
    if (op != SUM && op != AVG) return ERR_INVALID;
    return collective(K_SCATTER, send, recv, recvcount, dt, op, c, stream);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, int dt, Comm *c, void *stream) {
    return collective(K_GATHER, send, recv, count, dt, SUM, c, stream);
}

/* ---- point-to-point (ncclSend/ncclRecv) ---- */
/* Each ordered pair (s, d) of a communicator has a one-message mailbox in s's collective slot (the
 * d-th of nranks equal parts: a 64-byte header, then the data), so a communicator's point-to-point
 * calls and collectives must run in one stream order (as the runtime issues them). A send waits
 * for its mailbox to be empty and posts; a receive waits for a message, checks that its count and
 * datatype match the send's (else it prints why, and ncclCommGetAsyncError reports
 * ncclInvalidUsage) and copies it out. Per (communicator, peer, direction) the calls complete in
 * issue order. ncclGroupStart/ncclGroupEnd collect the calls between them; at the outermost End,
 * each communicator's calls go to the stream as one batch that progresses all of them together,
 * so a rank's sends and receives cannot wait for each other. */
typedef struct {
    int posted, taken;                /* messages posted by the sender, taken by the receiver */
    long long count, dt;              /* the posted message's */
} Mailbox;
typedef struct {
    Comm *c;
    void *stream;
    int peer, is_send, done;
    int seq;                          /* a send: its message's number once posted (0: not yet) */
    const void *send;
    void *recv;
    size_t count;
    int dt;
} P2p;
typedef struct { P2p *ops; int n; } P2pBatch;   /* each op names its communicator */

static int group_depth;
static P2p *group_ops;
static int group_n, group_cap;

static size_t box_bytes(const Comm *c) { return SLOT_BYTES / (size_t)c->nranks; }
static Mailbox *box(const Comm *c, int from, int to) {
    return (Mailbox *)(c->slots + SLOT_BYTES * from + box_bytes(c) * to);
}

/* One try at op i; 1 when it completed. */
static int p2p_try(P2p *o) {
    Comm *c = o->c;
    size_t es = dsize(o->dt);
    if (o->is_send) {   /* done once the receiver took it: a send waits for its receive, as NCCL's do */
        Mailbox *m = box(c, c->rank, o->peer);
        if (o->seq) return __atomic_load_n(&m->taken, __ATOMIC_ACQUIRE) >= o->seq;
        if (__atomic_load_n(&m->posted, __ATOMIC_ACQUIRE) != __atomic_load_n(&m->taken, __ATOMIC_ACQUIRE)) return 0;
        memcpy((unsigned char *)m + 64, o->send, o->count * es);
        m->count = (long long)o->count; m->dt = o->dt;
        o->seq = __atomic_add_fetch(&m->posted, 1, __ATOMIC_ACQ_REL);
        return 0;
    }
    Mailbox *m = box(c, o->peer, c->rank);
    if (__atomic_load_n(&m->posted, __ATOMIC_ACQUIRE) == __atomic_load_n(&m->taken, __ATOMIC_ACQUIRE)) return 0;
    if (m->count != (long long)o->count || m->dt != o->dt) {
        if (!c->mismatch)
            fprintf(stderr, "mock nccl: rank %d: ncclRecv of %zu elements (datatype %d) from rank %d met its ncclSend of "
                    "%lld elements (datatype %lld): a send and its receive must have the same count and datatype\n",
                    c->rank, o->count, o->dt, o->peer, m->count, m->dt);
        c->mismatch = 1;
    } else {
        memcpy(o->recv, (unsigned char *)m + 64, o->count * es);
    }
    __atomic_add_fetch(&m->taken, 1, __ATOMIC_ACQ_REL);
    return 1;
}

/* 0 done, 1 waiting for peers. An op runs only after the earlier ops of its (peer, direction). */
static int p2p_step(void *arg) {
    P2pBatch *b = arg;
    int left = 0;
    for (int i = 0; i < b->n; i++) {
        P2p *o = &b->ops[i];
        if (o->done || o->c->aborted) { o->done = 1; continue; }
        int blocked = 0;
        for (int j = 0; j < i && !blocked; j++)
            blocked = !b->ops[j].done && b->ops[j].c == o->c && b->ops[j].peer == o->peer && b->ops[j].is_send == o->is_send;
        if (!blocked) o->done = p2p_try(o);
        left += !o->done;
    }
    return left > 0;
}

static void p2p_free(void *arg) {
    P2pBatch *b = arg;
    for (int i = 0; i < b->n; i++) b->ops[i].c->pending--;
    free(b->ops);
    free(b);
}

/* The ops of one stream (of one communicator or several) as one queued batch (or run now without
 * the CUDA stand-in). */
static ncclResult_t p2p_submit(void *stream, const P2p *ops, int n) {
    P2pBatch *b = calloc(1, sizeof *b);
    if (!b || !(b->ops = malloc((size_t)n * sizeof *ops))) { free(b); return ERR_SYSTEM; }
    memcpy(b->ops, ops, (size_t)n * sizeof *ops);
    b->n = n;
    Comm *c = ops[0].c;
    if (!hook_looked_up) {
        hook_looked_up = 1;
        const char *lib = getenv("BOOST_LIBCUDA");
        void *h = lib && *lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
        if (h) *(void **)&enqueue_hook = dlsym(h, "mock_cuda_enqueue_hook");
    }
    for (int i = 0; i < n; i++) ops[i].c->pending++;
    if (enqueue_hook && stream) return enqueue_hook(stream, p2p_step, b, p2p_free) ? ERR_SYSTEM : OK;
    const char *tv = getenv("MOCK_NCCL_TIMEOUT");
    double limit = tv && atof(tv) > 0 ? atof(tv) : 120, t0 = now_s();
    int us = 20;
    while (p2p_step(b)) {
        if (now_s() - t0 > limit) {
            fprintf(stderr, "mock nccl: rank %d waited %.0f s for a point-to-point peer: another rank is gone\n", c->rank, limit);
            p2p_free(b);
            return ERR_INTERNAL;
        }
        nap(&us);
    }
    int mismatch = 0;
    for (int i = 0; i < n; i++) mismatch |= ops[i].c->mismatch;
    p2p_free(b);
    return mismatch ? ERR_USAGE : OK;
}

static ncclResult_t p2p_call(int is_send, const void *send, void *recv, size_t count, int dt, int peer, Comm *c, void *stream) {
    size_t es = dsize(dt);
    if (!c || !es || c->aborted || (is_send ? !send : !recv) || peer < 0 || peer >= c->nranks) return ERR_INVALID;
    if (count * es + 64 > box_bytes(c)) {
        fprintf(stderr, "mock nccl: %s of %zu elements on rank %d: more than the stand-in's %zu-byte mailbox\n",
                is_send ? "ncclSend" : "ncclRecv", count, c->rank, box_bytes(c) - 64);
        return ERR_INVALID;
    }
    P2p o = {c, stream, peer, is_send, 0, 0, send, recv, count, dt};
    if (!group_depth) return p2p_submit(stream, &o, 1);
    if (group_n == group_cap) {
        int cap = group_cap ? 2 * group_cap : 64;
        P2p *g = realloc(group_ops, (size_t)cap * sizeof *g);
        if (!g) return ERR_SYSTEM;
        group_ops = g; group_cap = cap;
    }
    group_ops[group_n++] = o;
    return OK;
}

ncclResult_t ncclSend(const void *send, size_t count, int dt, int peer, Comm *c, void *stream) {
    return p2p_call(1, send, NULL, count, dt, peer, c, stream);
}

ncclResult_t ncclRecv(void *recv, size_t count, int dt, int peer, Comm *c, void *stream) {
    return p2p_call(0, NULL, recv, count, dt, peer, c, stream);
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return OK;
}

/* The outermost End: the collected calls, one batch per stream in issue order, so the calls of a
 * group on several communicators (pipeline stage boundaries) progress together, as in NCCL. */
ncclResult_t ncclGroupEnd(void) {
    if (group_depth <= 0) return ERR_USAGE;
    if (--group_depth) return OK;
    ncclResult_t rc = OK;
    P2p *batch = group_n ? malloc((size_t)group_n * sizeof *batch) : NULL;
    if (group_n && !batch) rc = ERR_SYSTEM;
    for (int i = 0; i < group_n && rc == OK; i++) {
        if (!group_ops[i].c) continue;   /* taken by an earlier batch */
        int n = 0;
        void *s = group_ops[i].stream;
        for (int j = i; j < group_n; j++)
            if (group_ops[j].c && group_ops[j].stream == s) { batch[n++] = group_ops[j]; group_ops[j].c = NULL; }
        rc = p2p_submit(s, batch, n);
    }
    free(batch);
    group_n = 0;
    return rc;
}
