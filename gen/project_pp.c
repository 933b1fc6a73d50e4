/* project_pp.c: prices the pipeline schedule that gen/pp.c emits by executing it as an event
 * timeline (per-stage forward/backward times, per-boundary transfer times; project_pp.h says the
 * rules), for `boost project` at pp > 1. The (m + pp - 1) formula stays beside it as a cross-check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/project_pp.h"

double pp_formula_seconds(double stage_s, double send_s, int m, int pp, int v) {
    if (m < 1) m = 1;
    if (v < 1) v = 1;
    if (pp <= 1) return m * stage_s;
    return ((double)v * m + pp - 1) * (stage_s + 2 * send_s);
}

static const char *kind_name(int kind) {
    static const char *names[] = {"forward", "backward", "send (forward)", "recv (forward)", "send (backward)", "recv (backward)"};
    return kind >= 0 && kind <= PS_RECV_BWD ? names[kind] : "unknown step";
}

int pp_timeline(const PpPlan *pl, const double *fwd_s, const double *bwd_s, const double *p2p_s,
                PpTimeline *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int pp = pl->pp, nv = pl->nv > 0 ? pl->nv : pl->pp, m = pl->m;
    out->pp = pp;
    if (pp < 1 || pp > PP_MAX_STAGES || nv < pp || nv > PP_MAX_STAGES || m < 1) {
        snprintf(err, errlen, "pipeline timeline: pp=%d, %d virtual stages, %d micro-batches cannot be simulated", pp, nv, m);
        return 1;
    }
    /* channels: boundary b forward 2b, backward 2b+1; FIFO of (micro, end of transfer) */
    int nch = 2 * (nv - 1), cap = m + 1;
    int *qm = calloc((size_t)(nch > 0 ? nch : 1) * cap, sizeof *qm);
    double *qt = calloc((size_t)(nch > 0 ? nch : 1) * cap, sizeof *qt);
    /* per (virtual stage, micro): when its received activation / gradient is there (-1: not received) */
    double *arr_f = malloc(sizeof(double) * (size_t)nv * m), *arr_b = malloc(sizeof(double) * (size_t)nv * m);
    if (!qm || !qt || !arr_f || !arr_b) {
        free(qm); free(qt); free(arr_f); free(arr_b);
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    for (int i = 0; i < nv * m; i++) arr_f[i] = arr_b[i] = -1;
    int head[2 * PP_MAX_STAGES] = {0}, tail[2 * PP_MAX_STAGES] = {0}, pc[PP_MAX_STAGES] = {0};
    double now[PP_MAX_STAGES] = {0}, link_free[2 * PP_MAX_STAGES] = {0};
    int rc = 0;
    for (;;) {
        int progressed = 0, done = 1;
        for (int r = 0; r < pp && !rc; r++) {
            const PpStage *rk = &pl->stages[r];
            while (pc[r] < rk->nsched && !rc) {
                const PpSched *x = &rk->sched[pc[r]];
                int kind = x->kind, vs = x->vs, j = x->micro;
                if (vs < 0 || vs >= nv || vs % pp != r || j < 0 || j >= m) {
                    snprintf(err, errlen, "pipeline timeline: rank %d step %d (%s) names virtual stage %d micro-batch %d, not "
                             "one of this rank's", r, pc[r], kind_name(kind), vs, j);
                    rc = 1; break;
                }
                if (kind == PS_RECV_FWD || kind == PS_RECV_BWD) {
                    int ch = kind == PS_RECV_FWD ? 2 * (vs - 1) : 2 * vs + 1;
                    if (ch < 0 || ch >= nch) {
                        snprintf(err, errlen, "pipeline timeline: rank %d step %d receives from outside the pipeline", r, pc[r]);
                        rc = 1; break;
                    }
                    if (head[ch] == tail[ch]) break;   /* not sent yet: this rank waits */
                    if (qm[ch * cap + head[ch]] != j) {
                        snprintf(err, errlen, "pipeline timeline: rank %d step %d receives micro-batch %d, but micro-batch %d was "
                                 "sent first on that boundary", r, pc[r], j, qm[ch * cap + head[ch]]);
                        rc = 1; break;
                    }
                    (kind == PS_RECV_FWD ? arr_f : arr_b)[vs * m + j] = qt[ch * cap + head[ch]];
                    head[ch]++;
                } else if (kind == PS_SEND_FWD || kind == PS_SEND_BWD) {
                    int b = kind == PS_SEND_FWD ? vs : vs - 1, ch = kind == PS_SEND_FWD ? 2 * b : 2 * b + 1;
                    if (ch < 0 || ch >= nch || tail[ch] >= cap) {
                        snprintf(err, errlen, "pipeline timeline: rank %d step %d sends outside the pipeline or more than %d "
                                 "times on one boundary", r, pc[r], m);
                        rc = 1; break;
                    }
                    double start = now[r] > link_free[ch] ? now[r] : link_free[ch];
                    link_free[ch] = start + p2p_s[b];
                    qm[ch * cap + tail[ch]] = j;
                    qt[ch * cap + tail[ch]++] = link_free[ch];
                } else if (kind == PS_FORWARD || kind == PS_BACKWARD) {
                    int needs = kind == PS_FORWARD ? vs > 0 : vs < nv - 1;
                    double ready = needs ? (kind == PS_FORWARD ? arr_f : arr_b)[vs * m + j] : 0;
                    if (needs && ready < 0) {
                        snprintf(err, errlen, "pipeline timeline: rank %d step %d runs the %s of micro-batch %d on stage %d "
                                 "before receiving its input", r, pc[r], kind_name(kind), j, vs);
                        rc = 1; break;
                    }
                    double t = kind == PS_FORWARD ? fwd_s[vs] : bwd_s[vs];
                    double start = now[r] > ready ? now[r] : ready;
                    out->wait_s[r] += start - now[r];
                    now[r] = start + t;
                    out->busy_s[r] += t;
                } else {
                    snprintf(err, errlen, "pipeline timeline: rank %d step %d has unknown kind %d", r, pc[r], kind);
                    rc = 1; break;
                }
                pc[r]++;
                progressed = 1;
            }
            if (pc[r] < rk->nsched) done = 0;
        }
        if (rc || done) break;
        if (!progressed) {
            int r = 0;
            while (pc[r] >= pl->stages[r].nsched) r++;
            const PpSched *x = &pl->stages[r].sched[pc[r]];
            snprintf(err, errlen, "pipeline timeline: deadlock: rank %d waits at step %d (%s of micro-batch %d) for a transfer "
                     "that no rank can send: the schedule cannot be priced (regenerate it)", r, pc[r], kind_name(x->kind), x->micro);
            rc = 1;
        }
    }
    for (int ch = 0; ch < nch && !rc; ch++)
        if (head[ch] != tail[ch]) {
            snprintf(err, errlen, "pipeline timeline: boundary %d has %d %s transfer(s) that no rank receives", ch / 2,
                     tail[ch] - head[ch], ch % 2 ? "backward" : "forward");
            rc = 1;
        }
    if (!rc) {
        double T = 0, idle = 0;
        for (int r = 0; r < pp; r++) if (now[r] > T) T = now[r];
        for (int r = 0; r < pp; r++) { out->idle_s[r] = T - out->busy_s[r]; idle += out->idle_s[r]; }
        out->seconds = T;
        out->bubble = T > 0 ? idle / (pp * T) : 0;
    }
    free(qm); free(qt); free(arr_f); free(arr_b);
    return rc;
}
