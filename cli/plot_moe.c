/* plot_moe.c: `boost plot LOG --experts`: the expert load of every MoE layer over training (the
 * tokens routed to each expert per step, the log's "moe_load" arrays written by boost train), one
 * panel per layer, drawn with gnuplot into a PNG; the capacity-dropped fraction is printed. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli/plot_moe.h"

#define MAXL 64      /* panels drawn (the first MAXL MoE layers) */
#define MAXE 1024

/* The step number of a log line, or -1. */
static double step_of(const char *line) {
    const char *p = strstr(line, "\"step\"");
    if (!p) return -1;
    p = strchr(p, ':');
    return p ? strtod(p + 1, NULL) : -1;
}

/* Parse "moe_load":[[a,b,..],[..],..] at line: per layer the counts (at most MAXE each); returns
 * the number of layers, 0 when the key is absent, -1 when malformed. */
static int parse_load(const char *line, double (*v)[MAXE], int *ne) {
    const char *p = strstr(line, "\"moe_load\"");
    if (!p) return 0;
    p = strchr(p, '[');
    if (!p) return -1;
    p++;
    int n = 0;
    for (;;) {
        while (isspace((unsigned char)*p) || *p == ',') p++;
        if (*p == ']') return n;
        if (*p != '[' || n >= MAXL) return n >= MAXL ? n : -1;
        p++;
        int e = 0;
        for (;;) {
            while (isspace((unsigned char)*p) || *p == ',') p++;
            if (*p == ']') { p++; break; }
            char *end;
            double x = strtod(p, &end);
            if (end == p) return -1;
            if (e < MAXE) v[n][e] = x;
            e++;
            p = end;
        }
        ne[n++] = e < MAXE ? e : MAXE;
    }
}

int plot_experts(const char *log, const char *png, const char *title, const char *gnuplot) {
    FILE *in = fopen(log, "r");
    if (!in) { fprintf(stderr, "%s: cannot open the log (%s)\n", log, strerror(errno)); return 2; }
    static double v[MAXL][MAXE];
    int ne[MAXL], nl = 0, E = 0, npts = 0;
    char data_path[] = "/tmp/boost-plot-moe.XXXXXX";
    int fd = mkstemp(data_path);
    FILE *data = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!data) {
        fprintf(stderr, "boost plot: cannot create a temporary file in /tmp (%s)\n",
                strerror(errno));
        fclose(in);
        return 1;
    }
    /* data: one gnuplot block per layer ("step load_0 .. load_{E-1}"), so each line is read once
     * per layer */
    char *line = NULL;
    size_t cap = 0;
    FILE *blk[MAXL] = {0};
    char *blkbuf[MAXL] = {0};
    size_t blklen[MAXL] = {0};
    int bad = 0, lay[MAXL];
    for (int q = 0; q < MAXL; q++) lay[q] = -1;
    while (getline(&line, &cap, in) > 0) {
        const char *ml = strstr(line, "\"moe_layers\":[");
        if (ml && lay[0] < 0) {   /* the decoder layer of each panel */
            ml += strlen("\"moe_layers\":[");
            for (int q = 0; q < MAXL && *ml && *ml != ']'; q++) {
                char *end;
                long x = strtol(ml, &end, 10);
                if (end == ml) break;
                lay[q] = (int)x;
                ml = *end == ',' ? end + 1 : end;
            }
        }
        double s = step_of(line);
        if (s < 0) continue;
        int n = parse_load(line, v, ne);
        if (n < 0) { bad++; continue; }
        if (!n) continue;
        if (!nl) { nl = n; E = ne[0]; }
        for (int q = 0; q < nl && q < n; q++) {
            if (!blk[q]) blk[q] = open_memstream(&blkbuf[q], &blklen[q]);
            if (!blk[q]) continue;
            fprintf(blk[q], "%.10g", s);
            for (int e = 0; e < E; e++) fprintf(blk[q], " %.10g", e < ne[q] ? v[q][e] : 0.0 / 0.0);
            fputc('\n', blk[q]);
        }
        npts++;
    }
    free(line);
    fclose(in);
    for (int q = 0; q < nl; q++) {
        if (blk[q]) fclose(blk[q]);
        fprintf(data, "%s%s", q ? "\n\n" : "", blkbuf[q] ? blkbuf[q] : "");
        free(blkbuf[q]);
    }
    fclose(data);
    if (bad)
        fprintf(stderr, "%s: warning: %d line(s) have a malformed moe_load and were skipped\n", log,
                bad);
    if (!npts) {
        fprintf(stderr,
                "%s: no line has \"moe_load\": train an MoE model with "
                "'boost train RUN --log %s' to record the expert load\n", log, log);
        unlink(data_path);
        return 2;
    }
    char tmp_png[4200], cmd[4400];
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp%ld", png, (long)getpid());
    snprintf(cmd, sizeof cmd, "'%s' 2>&1", gnuplot);
    FILE *gp = popen(cmd, "w");
    if (!gp) {
        fprintf(stderr, "boost plot: cannot start %s (%s)\n", gnuplot, strerror(errno));
        unlink(data_path);
        return 1;
    }
    int h = 260 * nl + 60;
    fprintf(gp,
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal "
            "pngcairo size 900,%d } else { set terminal png size 900,%d }\n", h, h);
    fprintf(gp, "set output '%s'\n", tmp_png);
    fprintf(gp, "set grid\nset key outside right\nset datafile missing NaN\nset xlabel 'step'\n"
                "set ylabel 'tokens'\n");
    fprintf(gp,
            "set multiplot layout %d,1 title '%s: expert load "
            "(tokens routed per step, before capacity)' noenhanced\n", nl, title ? title : log);
    char lp[64];
    for (int q = 0; q < nl; q++) {
        if (lay[q] >= 0) snprintf(lp, sizeof lp, "layer %d", lay[q]);
        else snprintf(lp, sizeof lp, "MoE layer #%d", q);
        fprintf(gp, "set title '%s'\nplot ", lp);
        for (int e = 0; e < E; e++)
            fprintf(gp, "%s'%s' index %d using 1:%d with lines title 'e%d'", e ? ", " : "",
                    data_path, q, e + 2, e);
        fputc('\n', gp);
    }
    fprintf(gp, "unset multiplot\nset output\n");
    int status = pclose(gp);
    unlink(data_path);
    struct stat st;
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || stat(tmp_png, &st) != 0 ||
        st.st_size == 0) {
        fprintf(stderr, "boost plot: gnuplot failed to draw %s (messages above); nothing written\n",
                png);
        unlink(tmp_png);
        return 1;
    }
    if (rename(tmp_png, png) != 0) {
        fprintf(stderr, "boost plot: cannot write %s (%s)\n", png, strerror(errno));
        unlink(tmp_png);
        return 1;
    }
    printf("%s: expert load of %d MoE layer(s) x %d experts at %d steps from %s\n", png, nl, E,
           npts, log);
    return 0;
}
