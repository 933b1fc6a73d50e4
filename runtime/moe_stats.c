/* moe_stats.c: per-step MoE routing figures for the training log (moe_stats.h). The router writes
 * f_e (the fraction of the M*k choices routed to expert e, before capacity), so an expert's load
 * is f_e*M*k choices and its drops max(0, f_e*M*k - C); the losses are the aux tensor's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/moe_stats.h"

int moe_stats_init(MoeStats *s, const Plan *p, int dp, int tp) { return moe_stats_init_stages(s, &p, 1, dp, tp); }

int moe_stats_init_stages(MoeStats *s, const Plan *const *plans, int nplans, int dp, int tp) {
    memset(s, 0, sizeof *s);
    char nm[64];
    const Plan *p = plans[0];
    for (int pass = 0; pass < 2; pass++) {
        int n = 0;
        for (int l = 0; l < plans[0]->layers; l++) {
            int ta = -1, ts = -1, tc = -1;
            for (int k = 0; k < nplans && ta < 0; k++) {   /* the plan (pipeline stage) holding layer l */
                p = plans[k];
                snprintf(nm, sizeof nm, "L%d.moe_aux", l);
                ta = plan_find_tensor(p, nm);
            }
            snprintf(nm, sizeof nm, "L%d.moe_sel", l);
            ts = plan_find_tensor(p, nm);
            snprintf(nm, sizeof nm, "L%d.moe_src", l);
            tc = plan_find_tensor(p, nm);
            if (ta < 0 || ts < 0 || tc < 0) continue;
            if (pass) {
                s->layer[n] = l;
                int auxn = (int)(p->tensors[ta].rows * p->tensors[ta].cols);
                s->auxn = auxn > s->auxn ? auxn : s->auxn;
                snprintf(nm, sizeof nm, "L%d.router_probs", l);
                int tp_ = plan_find_tensor(p, nm);
                s->E = tp_ >= 0 ? (int)p->tensors[tp_].cols : (auxn - 1) / 2;
                s->K = (int)p->tensors[ts].cols;
                s->M = p->tensors[ts].rows;
                s->C = p->tensors[tc].rows * p->tensors[tc].cols / (s->E > 0 ? s->E : 1);
            }
            n++;
        }
        if (!n) return 0;
        if (!pass) {
            s->n = n;
            s->layer = calloc((size_t)n, sizeof *s->layer);
        }
    }
    s->ranks = dp > 0 ? dp : 1; s->tp = tp > 0 ? tp : 1;
    s->load = calloc((size_t)s->n * (size_t)s->E, sizeof *s->load);
    s->dropped = calloc((size_t)s->n, sizeof *s->dropped); s->aux = calloc((size_t)s->n, sizeof *s->aux);
    s->z = calloc((size_t)s->n, sizeof *s->z); s->choices = calloc((size_t)s->n, sizeof *s->choices);
    s->buf = calloc((size_t)s->auxn + 1, sizeof *s->buf);
    if (!s->layer || !s->load || !s->dropped || !s->aux || !s->z || !s->choices || !s->buf) { moe_stats_free(s); return -1; }
    return 0;
}

/* Each dp rank's rows from the process holding its tp rank 0; with one process per rank the rows
 * are summed over the processes (each row has one contributor, zeros elsewhere: exact), so every
 * process counts the whole batch, as one process of threads does. */
void moe_stats_add(MoeStats *s, Engine *e) {
    if (!s->n) return;
    char nm[64], err[256];
    size_t per = (size_t)s->n * (size_t)s->auxn, nv = (size_t)s->ranks * (per + 1);   /* rows, then a held flag per dp rank */
    double *v = calloc(nv, sizeof *v);
    float *f = calloc((size_t)s->ranks * per + 1, sizeof *f);
    const float **rows = calloc((size_t)s->ranks * (size_t)s->n + 1, sizeof *rows);
    if (!v || !f || !rows) { free(v); free(f); free(rows); return; }   /* statistics only: skip the micro-batch */
    for (int d = 0; d < s->ranks; d++) {
        int ok = 1;
        for (int q = 0; q < s->n && ok; q++) {
            snprintf(nm, sizeof nm, "L%d.moe_aux", s->layer[q]);
            if (engine_read_tensor(e, d * s->tp, nm, s->buf, err, sizeof err)) ok = 0;   /* another process's rank */
            for (int k = 0; ok && k < s->auxn; k++) v[(size_t)d * per + (size_t)q * s->auxn + k] = s->buf[k];
        }
        if (ok) v[(size_t)s->ranks * per + d] = 1;
        else memset(v + (size_t)d * per, 0, per * sizeof *v);
    }
    if (engine_world_sum(e, v, (int64_t)nv) == 0)
        for (int d = 0; d < s->ranks; d++) {
            if (v[(size_t)s->ranks * per + d] < 0.5) continue;
            for (size_t k = 0; k < per; k++) f[(size_t)d * per + k] = (float)v[(size_t)d * per + k];
            for (int q = 0; q < s->n; q++) rows[d * s->n + q] = f + (size_t)d * per + (size_t)q * s->auxn;
        }
    moe_stats_add_rows(s, rows);
    free(v); free(f); free(rows);
}

void moe_stats_json(MoeStats *s, char *buf, size_t n) {
    buf[0] = 0;
    if (!s->n || !s->mb || !s->rows || n < 64) return;
    size_t k = 0;
#define PUT(...) do { int w_ = snprintf(buf + k, n - k, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= n - k) { buf[0] = 0; goto out; } k += (size_t)w_; } while (0)
    PUT(",\"moe_layers\":[");
    for (int q = 0; q < s->n; q++) PUT("%s%d", q ? "," : "", s->layer[q]);
    PUT("],\"moe_load\":[");
    for (int q = 0; q < s->n; q++) {
        PUT("%s[", q ? "," : "");
        for (int x = 0; x < s->E; x++) PUT("%s%.0f", x ? "," : "", s->load[q * s->E + x]);
        PUT("]");
    }
    PUT("],\"moe_dropped\":[");
    for (int q = 0; q < s->n; q++) PUT("%s%.6g", q ? "," : "", s->choices[q] > 0 ? s->dropped[q] / s->choices[q] : 0.0);
    PUT("],\"moe_aux_loss\":[");
    for (int q = 0; q < s->n; q++) PUT("%s%.6g", q ? "," : "", s->aux[q] / s->rows);   /* the mean over */
    PUT("],\"moe_z_loss\":[");                                                  /* ranks and micro-batches */
    for (int q = 0; q < s->n; q++) PUT("%s%.6g", q ? "," : "", s->z[q] / s->rows);
    PUT("]");
#undef PUT
out:
    memset(s->load, 0, (size_t)s->n * (size_t)s->E * sizeof *s->load);
    for (int q = 0; q < s->n; q++) s->dropped[q] = s->aux[q] = s->z[q] = s->choices[q] = 0;
    s->mb = s->rows = 0;
}

void moe_stats_free(MoeStats *s) {
    free(s->layer); free(s->load); free(s->dropped); free(s->aux); free(s->z); free(s->choices); free(s->buf);
    memset(s, 0, sizeof *s);
}

void moe_stats_add_rows(MoeStats *s, const float *const *rows) {
    if (!s->n) return;
    int any = 0;
    for (int d = 0; d < s->ranks; d++) {
        int ok = 1;
        for (int q = 0; q < s->n && ok; q++) if (!rows[d * s->n + q]) ok = 0;
        for (int q = 0; q < s->n && ok; q++) {
            const float *a = rows[d * s->n + q];
            double choices = (double)s->M * s->K, zl = s->auxn > 1 + 2 * s->E ? a[1 + 2 * s->E] : 0;
            for (int x = 0; x < s->E; x++) {
                double routed = nearbyint(a[1 + x] * choices);
                s->load[q * s->E + x] += routed;
                if (routed > (double)s->C) s->dropped[q] += routed - (double)s->C;
            }
            s->choices[q] += choices;
            s->aux[q] += a[0] - zl;
            s->z[q] += zl;
        }
        any |= ok;
        s->rows += ok;
    }
    s->mb += any;
}
