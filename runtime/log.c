/* log.c: what `boost train` shows while it runs: on a terminal one updating progress line
 * (`step 12/200 loss 4.512 val 4.601 lr 2.9e-03 3.1k tok/s ETA 1m02s`), otherwise plain lines every
 * few steps; and the JSON-lines log ({"step":..,"loss":..,"val_loss":..,"tokens_per_s":..,"lr":..,
 * "grad_norm":..} a line, plus "skipped":true,"skipped_total":N on a step whose update was skipped
 * and "spike":true when it was skipped as a loss spike),
 * flushed each step so a killed run leaves a complete log; with --tensorboard the same numbers as
 * TensorBoard scalars (runtime/tbevents.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/tbevents.h"  // defines: tb_open, tb_scalar, tb_json_scalars
#include "runtime/log.h"     // defines: TrainLog, StepReport, trainlog_*, format_*
#include "common/files.h"     // defines: file_commit

void format_count(double v, char *out, size_t outlen) {
    if (v >= 1e9) snprintf(out, outlen, "%.1fG", v / 1e9);
    else if (v >= 1e6) snprintf(out, outlen, "%.1fM", v / 1e6);
    else if (v >= 1e3) snprintf(out, outlen, "%.1fk", v / 1e3);
    else snprintf(out, outlen, "%.0f", v);
}

void format_duration(double s, char *out, size_t outlen) {
    if (!(s >= 0) || s > 1e8) { snprintf(out, outlen, "?"); return; }
    long t = (long)(s + 0.5);
    if (t < 60) snprintf(out, outlen, "%lds", t);
    else if (t < 3600) snprintf(out, outlen, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, outlen, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

void format_bytes(double b, char *out, size_t outlen) {
    if (b >= 1024.0 * 1024 * 1024) snprintf(out, outlen, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(out, outlen, "%.1f MiB", b / (1024.0 * 1024));
    else if (b >= 1024.0) snprintf(out, outlen, "%.1f KiB", b / 1024.0);
    else snprintf(out, outlen, "%.0f B", b);
}

/* Keep the lines of an existing log up to step `last` (lines without a step are kept), written
 * beside it and renamed into place. A missing log is fine. Returns 0, or 1 with a message. */
static int trim_log(const char *path, int last, char *err, size_t errlen) {
    FILE *in = fopen(path, "r");
    if (!in) return 0;
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) { snprintf(err, errlen, "%s: cannot write: %s", tmp, strerror(errno)); fclose(in); return 1; }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
        const char *at = strstr(line, "\"step\":");
        if (at && atol(at + 7) > last) continue;
        fputs(line, out);
    }
    free(line);
    fclose(in);
    if (file_commit(out, tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot rewrite the log: %s", path, strerror(errno));
        return 1;
    }
    return 0;
}

int trainlog_open(TrainLog *lg, const char *json_path, int resume_step, int steps, int print_every, int quiet,
                  char *err, size_t errlen) {
    memset(lg, 0, sizeof *lg);
    lg->tty = isatty(fileno(stdout));
    lg->steps = steps;
    lg->quiet = quiet;
    lg->last_val = -1;
    lg->print_every = print_every > 0 ? print_every : (steps >= 20 ? steps / 20 : 1);
    if (json_path) {
        if (resume_step >= 0 && trim_log(json_path, resume_step, err, errlen)) return 1;
        lg->json = fopen(json_path, resume_step >= 0 ? "a" : "w");
        lg->json_path = json_path;
        if (!lg->json) { snprintf(err, errlen, "%s: cannot open the log: %s", json_path, strerror(errno)); return 1; }
    }
    return 0;
}

static void end_line(TrainLog *lg) {
    if (lg->line_open) { fputc('\n', stdout); lg->line_open = 0; }
}

void trainlog_note(TrainLog *lg, const char *fmt, ...) {
    end_line(lg);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

/* JSON has no NaN or Infinity: write them as null (a skipped step's loss or gradient norm). */
static void json_num(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.9g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

/* After a line: a failed write (a full disk) is recorded once in lg->error, naming the log. */
static void json_flushed(TrainLog *lg) {
    if (fflush(lg->json) == 0 && !ferror(lg->json)) return;
    if (!lg->error[0])
        snprintf(lg->error, sizeof lg->error, "%s: writing the log failed: %s (free space there, or give --log another "
                 "file)", lg->json_path, strerror(errno ? errno : EIO));
}

void trainlog_initial_val(TrainLog *lg, double val_loss) {
    if (lg->json) {
        fprintf(lg->json, "{\"step\":0");
        json_num(lg->json, "val_loss", val_loss);
        fprintf(lg->json, "}\n");
        json_flushed(lg);
    }
    lg->last_val = val_loss;
    if (lg->tb && isfinite(val_loss)) { tb_scalar(lg->tb, 0, "val_loss", val_loss); tb_flush(lg->tb); }
    if (!lg->quiet) trainlog_note(lg, "step 0/%d val %.4g", lg->steps, val_loss);
}

int trainlog_tensorboard(TrainLog *lg, const char *dir, char *err, size_t errlen) {
    lg->tb = tb_open(dir, err, errlen);
    return lg->tb ? 0 : 1;
}

/* One step as scalars: loss, val_loss, lr, grad_norm, tokens/s, skipped updates, the extra fields
 * (MoE expert loads ...). Non-finite numbers (a skipped step's loss) are left out. A failed write
 * is said once and ends the event file. */
static void tensorboard_step(TrainLog *lg, const StepReport *r) {
    const char *tags[] = {"loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "skipped_total"};
    double vals[] = {r->loss, r->val_loss, r->lr, r->grad_norm, r->tokens_per_s, (double)r->skipped_total};
    int bad = 0;
    for (int i = 0; i < 6 && !bad; i++)
        if (isfinite(vals[i]) && (i != 1 || vals[i] >= 0)) bad = tb_scalar(lg->tb, r->step, tags[i], vals[i]);
    if (!bad && lg->extra && lg->extra[0] == ',') {   /* ",\"key\":value..." -> {"key":value...} */
        size_t n = strlen(lg->extra);
        char *obj = malloc(n + 2);
        if (obj) {
            obj[0] = '{'; memcpy(obj + 1, lg->extra + 1, n - 1); obj[n] = '}'; obj[n + 1] = 0;
            bad = tb_json_scalars(lg->tb, r->step, obj, n + 1);
            free(obj);
        }
    }
    tb_flush(lg->tb);
    if (bad) {
        trainlog_note(lg, "%s: write failed: no more TensorBoard events", tb_path(lg->tb));
        tb_close(lg->tb);
        lg->tb = NULL;
    }
}

void trainlog_step(TrainLog *lg, const StepReport *r) {
    if (lg->tb) tensorboard_step(lg, r);
    if (lg->json) {
        fprintf(lg->json, "{\"step\":%d", r->step);
        json_num(lg->json, "loss", r->loss);
        if (r->val_loss >= 0) json_num(lg->json, "val_loss", r->val_loss);
        json_num(lg->json, "tokens_per_s", r->tokens_per_s);
        json_num(lg->json, "lr", r->lr);
        json_num(lg->json, "grad_norm", r->grad_norm);
        if (r->skipped) fprintf(lg->json, ",\"skipped\":true,\"skipped_total\":%lld", (long long)r->skipped_total);
        if (r->spike) fputs(",\"spike\":true", lg->json);
        if (lg->extra) fputs(lg->extra, lg->json);
        fprintf(lg->json, "}\n");
        json_flushed(lg);
    }
    if (r->val_loss >= 0) lg->last_val = r->val_loss;
    if (lg->quiet) return;
    char line[256], val[32] = "", tok[32], eta[32];
    if (lg->last_val >= 0) snprintf(val, sizeof val, " val %.4g", lg->last_val);
    format_count(r->avg_tokens_per_s > 0 ? r->avg_tokens_per_s : r->tokens_per_s, tok, sizeof tok);
    format_duration(r->eta_s, eta, sizeof eta);
    snprintf(line, sizeof line, "step %d/%d loss %.4g%s lr %.2e %s tok/s ETA %s", r->step, lg->steps, r->loss, val,
             r->lr, tok, eta);
    if (lg->tty) {
        fprintf(stdout, "\r%s\033[K", line);
        lg->line_open = 1;
        if (r->val_loss >= 0 || r->step == lg->steps) end_line(lg);   // keep the validation points on screen
        fflush(stdout);
    } else if (r->step % lg->print_every == 0 || r->val_loss >= 0 || r->step == lg->steps || r->step == 1) {
        fprintf(stdout, "%s\n", line);
        fflush(stdout);
    }
}

int trainlog_close(TrainLog *lg) {
    end_line(lg);
    if (lg->json) {
        errno = 0;
        json_flushed(lg);
        if (fclose(lg->json) != 0 && !lg->error[0])
            snprintf(lg->error, sizeof lg->error, "%s: closing the log failed: %s", lg->json_path, strerror(errno));
    }
    lg->json = NULL;
    tb_close(lg->tb);
    lg->tb = NULL;
    return lg->error[0] ? -1 : 0;
}
