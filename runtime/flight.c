/* flight.c: the per-rank flight record of collectives and step boundaries (runtime/flight.h):
 * a fixed ring of entries per rank, overwritten oldest first, and the rank's time outside
 * collective waits for the straggler check. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/flight.h"
#include "runtime/plan.h"   // defines: Plan, PlanStep, plan_step_kind_name
#include "runtime/grid.h"   // defines: grid_group_name

typedef struct {
    int64_t id;               /* entry number on this rank (0, 1, ...) */
    int step;                 /* plan step index; -1: a training step boundary */
    int line;                 /* plan line, or the training step number of a boundary */
    char kind[24], group[8];
    int64_t bytes;
    double start, end;        /* end 0: not done */
} FlightEntry;

typedef struct {
    FlightEntry *ring;
    int64_t next;             /* entries recorded so far */
    double wait_s;            /* in waits since the last flight_job */
    double busy_s;            /* outside waits since the last flight_take_busy */
} FlightRing;

struct Flight {
    int nranks, cap;
    double t0;                /* when the rings were made: times print relative to it */
    FlightRing *r;
};

double flight_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Flight *flight_new(int nranks, int cap) {
    const char *s = getenv("BOOST_FLIGHT_RECORDS");
    if (s && atoi(s) > 0) cap = atoi(s);
    if (cap < 4) cap = 4;
    Flight *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->nranks = nranks;
    f->cap = cap;
    f->t0 = flight_now();
    f->r = calloc((size_t)nranks, sizeof *f->r);
    for (int i = 0; f->r && i < nranks; i++)
        if (!(f->r[i].ring = calloc((size_t)cap, sizeof(FlightEntry)))) {
            flight_free(f);
            return NULL;
        }
    if (!f->r) { free(f); return NULL; }
    return f;
}

void flight_free(Flight *f) {
    if (!f) return;
    for (int i = 0; f->r && i < f->nranks; i++) free(f->r[i].ring);
    free(f->r);
    free(f);
}

static FlightEntry *entry(const Flight *f, int rank, int64_t id) {
    const FlightRing *r = &f->r[rank];
    if (id < 0 || id >= r->next || id < r->next - f->cap) return NULL;   /* overwritten / not yet */
    return &r->ring[id % f->cap];
}

static int64_t add(Flight *f, int rank, int step, int line, const char *kind, const char *group,
                   int64_t bytes) {
    FlightRing *r = &f->r[rank];
    FlightEntry *e = &r->ring[r->next % f->cap];
    memset(e, 0, sizeof *e);
    e->id = r->next;
    e->step = step;
    e->line = line;
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->group, sizeof e->group, "%s", group ? group : "");
    e->bytes = bytes;
    e->start = flight_now();
    return r->next++;
}

int64_t flight_begin(Flight *f, int rank, int step, int line, const char *kind, const char *group,
                     int64_t bytes) {
    if (!f || rank < 0 || rank >= f->nranks) return -1;
    return add(f, rank, step, line, kind, group, bytes);
}

void flight_done(Flight *f, int rank, int64_t id, int waited) {
    if (!f || rank < 0 || rank >= f->nranks) return;
    FlightEntry *e = entry(f, rank, id);
    if (!e || e->end > 0) return;
    e->end = flight_now();
    if (waited) f->r[rank].wait_s += e->end - e->start;
}

void flight_done_step(Flight *f, int rank, int step) {
    if (!f || rank < 0 || rank >= f->nranks) return;
    for (int64_t id = f->r[rank].next - 1; id >= 0 && id >= f->r[rank].next - f->cap; id--) {
        FlightEntry *e = entry(f, rank, id);
        if (e->step == step && e->end == 0) { e->end = flight_now(); return; }
    }
}

void flight_settle(Flight *f, int rank) {
    if (!f || rank < 0 || rank >= f->nranks) return;
    double now = flight_now();
    for (int64_t id = f->r[rank].next - 1; id >= 0 && id >= f->r[rank].next - f->cap; id--) {
        FlightEntry *e = entry(f, rank, id);
        if (e->end == 0) e->end = now;
    }
}

void flight_add_wait(Flight *f, int rank, double seconds) {
    if (f && rank >= 0 && rank < f->nranks) f->r[rank].wait_s += seconds;
}

void flight_mark_step(Flight *f, int step) {
    for (int rank = 0; f && rank < f->nranks; rank++) {
        int64_t id = add(f, rank, -1, step, "step", "", 0);
        entry(f, rank, id)->end = entry(f, rank, id)->start;
    }
}

int flight_pending(const Flight *f, int rank) {
    if (!f || rank < 0 || rank >= f->nranks) return 0;
    int n = 0;
    for (int64_t id = f->r[rank].next - 1; id >= 0 && id >= f->r[rank].next - f->cap; id--)
        n += entry(f, rank, id)->end == 0;
    return n;
}

void flight_print(const Flight *f, int rank, const char *who, FILE *out) {
    if (!f || rank < 0 || rank >= f->nranks) return;
    const FlightRing *r = &f->r[rank];
    int64_t first = r->next > f->cap ? r->next - f->cap : 0, waited_on = -1;
    double now = flight_now();
    flockfile(out);   /* ranks as threads print whole records, not interleaved lines */
    for (int64_t id = first; id < r->next && waited_on < 0; id++)
        if (entry(f, rank, id)->end == 0) waited_on = id;
    fprintf(out, "boost: flight record of %s: its last %lld collectives and steps (of %lld), "
            "oldest first; times in seconds since the engine started:\n", who,
            (long long)(r->next - first), (long long)r->next);
    for (int64_t id = first; id < r->next; id++) {
        const FlightEntry *e = entry(f, rank, id);
        if (e->step == -1) {
            fprintf(out, "  #%-6lld %9.3f  step %d done\n", (long long)e->id, e->start - f->t0,
                    e->line);
            continue;
        }
        char where[32] = "host";
        if (e->step != FLIGHT_HOST_SUM) snprintf(where, sizeof where, "plan line %d", e->line);
        fprintf(out, "  #%-6lld %9.3f  %s: %s group %s, %lld bytes: ", (long long)e->id,
                e->start - f->t0, where, e->kind, e->group, (long long)e->bytes);
        if (e->end > 0) fprintf(out, "done in %.6f s\n", e->end - e->start);
        else fprintf(out, "NOT DONE after %.3f s%s\n", now - e->start,
                     id == waited_on ? "  <- waiting on this one" : "");
    }
    if (waited_on >= 0) {
        const FlightEntry *e = entry(f, rank, waited_on);
        char where[32] = "a host";
        if (e->step != FLIGHT_HOST_SUM) snprintf(where, sizeof where, "plan line %d", e->line);
        fprintf(out, "boost: %s waited on %s %s (group %s, %lld bytes), started %.3f s ago\n", who,
                where, e->kind, e->group, (long long)e->bytes, now - e->start);
    } else
        fprintf(out, "boost: %s has no unfinished collective in its record\n", who);
    fflush(out);
    funlockfile(out);
}

void flight_job(Flight *f, int rank, double wall_s) {
    if (!f || rank < 0 || rank >= f->nranks) return;
    FlightRing *r = &f->r[rank];
    double busy = wall_s - r->wait_s;
    r->busy_s += busy > 0 ? busy : 0;
    r->wait_s = 0;
}

double flight_take_busy(Flight *f, int rank) {
    if (!f || rank < 0 || rank >= f->nranks) return 0;
    double b = f->r[rank].busy_s;
    f->r[rank].busy_s = 0;
    return b;
}

/* Plan step s of p on rank, when it is a collective: its entry (see flight_begin); -1 otherwise. */
int64_t flight_plan_step(Flight *f, int rank, const Plan *p, int s) {
    const PlanStep *st = &p->steps_[s];
    const CollArgs *c = &st->coll;
    const CollKindRow *row = ccat_kind(step_coll_kind(st->kind));
    if (!row) return -1;
    /* the payload per rank: buf's elems, or src [rows, cols] (alltoall: rows = experts*capacity) */
    int64_t n = row->operands & CO_BUF ? c->elems : c->rows * c->cols;
    return flight_begin(f, rank, s, st->line, plan_step_kind_name(st->kind),
                        grid_group_name(c->group), n * (int64_t)plan_dtype_size(c->dtype));
}
