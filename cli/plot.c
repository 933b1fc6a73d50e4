/* plot.c: `boost plot LOG [-o FILE.png] [--title TEXT]`: the loss curve (and the validation loss
 * where the log has it) of a training log in JSON lines ({"step":..,"loss":..,"val_loss":..} a
 * line), drawn with gnuplot into a PNG. The PNG is written beside its final name and renamed into
 * place, so a failure never leaves a partial picture. Not a JSON parser: it reads numeric fields.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>       // defines: FILE, fopen, popen, snprintf, rename
#include <stdlib.h>      // defines: strtod, getenv, mkstemp
#include <string.h>
#include <sys/stat.h>    // defines: stat
#include <sys/wait.h>    // defines: WIFEXITED, WEXITSTATUS
#include <unistd.h>      // defines: access, unlink, close
#include "cli/commands.h"
#include "cli/plot_moe.h"   // defines: plot_experts, find_program, gp_quote

static void plot_usage(FILE *f) {
    fprintf(f,
            "usage: boost plot LOG [-o FILE.png] [--title TEXT] [--experts]\n"
            "  LOG: a training log in JSON lines ({\"step\":N,\"loss\":X,\"val_loss\":Y} a line),\n"
            "       as written by 'boost train ... --log LOG'\n"
            "  -o:  the PNG to write (default: LOG with its extension replaced by .png)\n"
            "  --experts: an MoE run's expert load over "
            "training (tokens per expert per step, one panel\n"
            "       per MoE layer) instead of the loss (default PNG: LOG-experts.png)\n");
}

/* Find "key" followed by ':' and a number in a JSON line: 1 and *out on success, 0 when the key
 * is absent, -1 when it holds something else (null: a non-finite value in the log). */
static int json_number(const char *line, const char *key, double *out) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    for (const char *p = strstr(line, pat); p; p = strstr(p + 1, pat)) {
        const char *q = p + strlen(pat);
        while (isspace((unsigned char)*q)) q++;
        if (*q != ':') continue;
        q++;
        while (isspace((unsigned char)*q)) q++;
        char *end;
        errno = 0;
        double v = strtod(q, &end);
        if (end == q || errno) return -1;
        *out = v;
        return 1;
    }
    return 0;
}

/* Search PATH for an executable; 1 when found. $GNUPLOT may name the program instead. */
int find_program(const char *name, char *path, size_t pathlen) {
    if (strchr(name, '/')) {
        snprintf(path, pathlen, "%s", name);
        return access(path, X_OK) == 0;
    }
    const char *env = getenv("PATH");
    if (!env) env = "/usr/bin:/bin";
    while (*env) {
        const char *colon = strchr(env, ':');
        size_t len = colon ? (size_t)(colon - env) : strlen(env);
        snprintf(path, pathlen, "%.*s/%s", (int)len, env, name);
        if (len && access(path, X_OK) == 0) return 1;
        env += len + (colon ? 1 : 0);
    }
    return 0;
}

/* gnuplot's string quoting: single quotes, a quote doubled. */
void gp_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) { if (*s == '\'') fputc('\'', f); fputc(*s, f); }
    fputc('\'', f);
}

/* The log's points, in to data as "step loss val_loss" lines (NaN for a missing value); *nloss,
 * *nval: how many losses and validation losses. Lines that are not JSON objects and losses that are
 * not numbers are left out, with a warning on stderr each kind. */
static void read_points(const char *log, FILE *in, FILE *data, int *nloss, int *nval) {
    char line[8192];
    int lineno = 0, nbad = 0, first_bad = 0, nnull = 0, first_null = 0;
    while (fgets(line, sizeof line, in)) {
        lineno++;
        const char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p) continue;
        if (*p != '{') { if (!nbad++) first_bad = lineno; continue; }
        double step, loss, val;
        /* lines of other kinds (config, events) */
        if (json_number(p, "step", &step) != 1) continue;
        int lr = json_number(p, "loss", &loss), vr = json_number(p, "val_loss", &val);
        if (lr < 0 || vr < 0) { if (!nnull++) first_null = lineno; }
        int has_loss = lr == 1, has_val = vr == 1;
        if (!has_loss && !has_val) continue;
        fprintf(data, "%.10g %.10g %.10g\n", step, has_loss ? loss : 0.0 / 0.0,
                has_val ? val : 0.0 / 0.0);
        *nloss += has_loss; *nval += has_val;
    }
    if (nbad)
        fprintf(stderr, "%s:%d: warning: %d line(s) are not JSON objects and were skipped\n", log,
                first_bad, nbad);
    if (nnull)
        fprintf(stderr, "%s:%d: warning: %d line(s) have a loss that is not a number (null: the "
                        "run diverged?); those points are left out\n", log, first_null, nnull);
}

/* The picture's path when -o is not given: the log's, its extension replaced by .png (or
 * -experts.png). 0, or -1 (said on stderr) when it does not fit out[n]. */
static int default_png_path(const char *log, int experts, char *out, size_t n) {
    snprintf(out, n, "%s", log);
    char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
    if (dot && (!slash || dot > slash)) *dot = 0;
    if (strlen(out) + 13 > n) { fprintf(stderr, "boost plot: log path too long\n"); return -1; }
    strcat(out, experts ? "-experts.png" : ".png");
    return 0;
}

/* The command line of `boost plot`: LOG, -o PNG, --title T, --experts. -1 to go on, or the exit
 * status (after --help, or with the message printed). */
static int plot_args(int argc, char **argv, const char **log, const char **png, const char **title,
                     int *experts) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { plot_usage(stdout); return 0; }
        if (!strcmp(argv[i], "--experts")) { *experts = 1; continue; }
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--title")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "boost plot: %s needs a value\n", argv[i]);
                return 2;
            }
            if (argv[i][1] == 'o') *png = argv[++i]; else *title = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "boost plot: unknown option '%s'\n", argv[i]);
            plot_usage(stderr);
            return 2;
        } else if (!*log) {
            *log = argv[i];
        } else {
            fprintf(stderr, "boost plot: one log at a time ('%s' and '%s')\n", *log, argv[i]);
            return 2;
        }
    }
    if (!*log) { plot_usage(stderr); return 2; }
    return -1;
}

/* gnuplot's path (GNUPLOT, else gnuplot on PATH) into out[n]: 0, or 1 with the message printed. */
static int find_gnuplot(char *out, size_t n) {
    const char *prog = getenv("GNUPLOT") ? getenv("GNUPLOT") : "gnuplot";
    if (find_program(prog, out, n)) return 0;
    fprintf(stderr, "boost plot: gnuplot not found (looked for '%s' on PATH): install it "
                    "(Debian: apt-get install gnuplot-nox) or set GNUPLOT=/path/to/gnuplot\n",
            prog);
    return 1;
}

/* The log's points into a new temporary data file data_path (a mkstemp template): "step loss
 * val_loss" with NaN for a missing value; their counts in *nloss, *nval. 0, or 1 or 2 with the
 * message printed and no file left. */
static int write_points(const char *log, char *data_path, int *nloss, int *nval) {
    FILE *in = fopen(log, "r");
    if (!in) {
        fprintf(stderr, "%s: cannot open the log (%s): write one with 'boost train RUN --log %s'\n",
                log, strerror(errno), log);
        return 2;
    }
    int fd = mkstemp(data_path);
    FILE *data = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!data) {
        fprintf(stderr, "boost plot: cannot create a temporary file in /tmp (%s)\n",
                strerror(errno));
        if (fd >= 0) { close(fd); unlink(data_path); }
        fclose(in);
        return 1;
    }
    read_points(log, in, data, nloss, nval);
    fclose(in);
    if (fclose(data) != 0) {
        fprintf(stderr, "boost plot: cannot write %s (%s)\n", data_path, strerror(errno));
        unlink(data_path);
        return 1;
    }
    if (*nloss + *nval == 0) {
        fprintf(stderr, "%s: no line has \"step\" with \"loss\" or \"val_loss\": is this a "
                        "training log from 'boost train --log'?\n", log);
        unlink(data_path);
        return 2;
    }
    return 0;
}

/* gnuplot draws the points of data_path into tmp_png, pclose's status in *status. 0, or 1 when
 * gnuplot did not start (said on stderr). */
static int draw_points(const char *gnuplot, const char *data_path, const char *tmp_png,
                       const char *title, int nloss, int nval, int *status) {
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s' 2>&1", gnuplot);
    FILE *gp = popen(cmd, "w");
    if (!gp) {
        fprintf(stderr, "boost plot: cannot start %s (%s)\n", gnuplot, strerror(errno));
        return 1;
    }
    /* pngcairo draws smoother lines; the libgd png terminal is the fallback. */
    fprintf(gp, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
                "{ set terminal pngcairo size 900,560 } else { set terminal png size 900,560 }\n");
    fprintf(gp, "set output "); gp_quote(gp, tmp_png); fputc('\n', gp);
    fprintf(gp, "set title "); gp_quote(gp, title); fprintf(gp, " noenhanced\n");
    fprintf(gp, "set xlabel 'step'\nset ylabel 'loss'\nset grid\nset key top right\n"
                "set datafile missing NaN\n");
    fprintf(gp, "plot ");
    if (nloss) {
        gp_quote(gp, data_path);
        fprintf(gp, " using 1:2 with lines lw 2 title 'loss'");
    }
    if (nloss && nval) fprintf(gp, ", ");
    if (nval) {
        gp_quote(gp, data_path);
        fprintf(gp, " using 1:3 with linespoints pt 7 lw 2 title 'val loss'");
    }
    fprintf(gp, "\nset output\n");
    *status = pclose(gp);
    return 0;
}

int cmd_plot(int argc, char **argv) {
    const char *log = NULL, *png = NULL, *title = NULL;
    int experts = 0;
    int rc = plot_args(argc, argv, &log, &png, &title, &experts);
    if (rc >= 0) return rc;

    char default_png[4096];
    if (!png) {
        if (default_png_path(log, experts, default_png, sizeof default_png)) return 2;
        png = default_png;
    }
    if (experts) {
        char gp[4096];
        if (access(log, R_OK) != 0) {
            fprintf(stderr, "%s: cannot open the log (%s): write one with 'boost train RUN --log "
                    "%s'\n", log, strerror(errno), log);
            return 2;
        }
        if (find_gnuplot(gp, sizeof gp)) return 1;
        return plot_experts(log, png, title, gp);
    }

    char data_path[] = "/tmp/boost-plot.XXXXXX";
    int nloss = 0, nval = 0;
    rc = write_points(log, data_path, &nloss, &nval);
    if (rc) return rc;
    char gnuplot[4096];
    if (find_gnuplot(gnuplot, sizeof gnuplot)) { unlink(data_path); return 1; }

    char tmp_png[4200];
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp%ld", png, (long)getpid());
    int status;
    rc = draw_points(gnuplot, data_path, tmp_png, title ? title : log, nloss, nval, &status);
    unlink(data_path);
    if (rc) return rc;
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
    printf("%s: %d loss and %d val_loss points from %s\n", png, nloss, nval, log);
    return 0;
}
