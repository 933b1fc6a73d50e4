/* checkpoint.c: atomic checkpoint folders (safetensors + state.json), their reading and checking.
 * A save writes OUTDIR/.step-NNNNNN.tmp-PID/, fsyncs every file and the folder, renames it to
 * OUTDIR/step-NNNNNN and fsyncs OUTDIR; a failure removes the temporary folder and nothing else. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/checkpoint.h"   // defines: CkptState, ckpt_*

uint64_t ckpt_fingerprint(const StEntry *canons, int n) {
    int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    if (!order) return 0;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) {   // insertion sort by name: a few hundred canons at most
        int v = order[i], j = i - 1;
        while (j >= 0 && strcmp(canons[order[j]].name, canons[v].name) > 0) { order[j + 1] = order[j]; j--; }
        order[j + 1] = v;
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    char line[256];
    for (int i = 0; i < n; i++) {
        const StEntry *c = &canons[order[i]];
        int len = snprintf(line, sizeof line, "%s %lld %lld\n", c->name, (long long)c->rows, (long long)c->cols);
        for (int k = 0; k < len && k < (int)sizeof line; k++) { h ^= (unsigned char)line[k]; h *= 0x100000001b3ULL; }
    }
    free(order);
    return h;
}

void ckpt_step_dir(const char *outdir, int64_t step, char *out, size_t outlen) {
    snprintf(out, outlen, "%s/step-%06lld", outdir, (long long)step);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

int ckpt_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int mkdir_p(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* Adapters from the checkpoint's fill callback to the safetensors writer's. */
typedef struct { CkptFillFn fill; void *ctx; int n; int optimizer; } FillAdapter;

static int fill_model(void *ctx, int i, float *out) {
    FillAdapter *a = ctx;
    return a->fill(a->ctx, 0, i, out);
}

static int fill_optimizer(void *ctx, int i, float *out) {
    FillAdapter *a = ctx;
    return i < a->n ? a->fill(a->ctx, 1, i, out) : a->fill(a->ctx, 2, i - a->n, out);
}

static int write_state(const char *path, const CkptState *st, char *err, size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) { snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno)); return 1; }
    fprintf(f, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"model\": ", CKPT_FORMAT, CKPT_VERSION);
    json_write_string(f, st->model);
    fprintf(f, ",\n  \"run\": ");
    json_write_string(f, st->run);
    fprintf(f, ",\n  \"fingerprint\": \"0x%016llx\",\n  \"canons\": %d,\n", (unsigned long long)st->fingerprint, st->ncanons);
    fprintf(f, "  \"step\": %lld,\n  \"data_position\": %lld,\n  \"data_sequences\": %lld,\n  \"seed\": \"0x%llx\",\n",
            (long long)st->step, (long long)st->data_position, (long long)st->data_sequences, (unsigned long long)st->seed);
    fprintf(f, "  \"rng\": \"data order is a function of (seed, data_sequences); no other random state\",\n");
    fprintf(f, "  \"tp\": %d,\n  \"layout\": ", st->tp);
    json_write_string(f, st->layout);
    fprintf(f, ",\n  \"backend\": ");
    json_write_string(f, st->backend);
    fprintf(f, ",\n  \"losses\": [");
    for (int i = 0; i < st->nlosses; i++) fprintf(f, "%s%.9g", i ? ", " : "", st->losses[i]);
    fprintf(f, "],\n  \"val_losses\": [");
    for (int i = 0; i < st->nval; i++) fprintf(f, "%s[%lld, %.9g]", i ? ", " : "", (long long)st->val_steps[i], st->val_losses[i]);
    fprintf(f, "]\n}\n");
    int ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (fclose(f) != 0) { ok = 0; saved = errno; }
    if (!ok) { snprintf(err, errlen, "%s: write failed: %s", path, strerror(saved)); return 1; }
    return 0;
}

/* Leftovers of a save that was killed part way (by another process id that is gone): a temporary
 * folder is removed; a previous checkpoint moved aside is put back when its step has no folder. */
static void clean_stale(const char *outdir) {
    DIR *d = opendir(outdir);
    if (!d) return;
    struct dirent *e;
    char path[1200], final[1200];
    while ((e = readdir(d))) {
        long long step;
        int pid;
        char kind[8];
        if (sscanf(e->d_name, ".step-%lld.%3[a-z]-%d", &step, kind, &pid) != 3) continue;
        if (pid == (int)getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
        snprintf(path, sizeof path, "%s/%s", outdir, e->d_name);
        ckpt_step_dir(outdir, step, final, sizeof final);
        struct stat sb;
        if (!strcmp(kind, "old") && stat(final, &sb) != 0) rename(path, final);
        else ckpt_remove_tree(path);
    }
    closedir(d);
}

int ckpt_save(const char *outdir, const CkptState *st, const StEntry *canons, int n,
              CkptFillFn fill, void *ctx, char *saved_dir, size_t saved_len, char *err, size_t errlen) {
    char final[1024], tmp[1100], old[1100], path[1200], why[4096] = "";
    ckpt_step_dir(outdir, st->step, final, sizeof final);
    snprintf(tmp, sizeof tmp, "%s/.step-%06lld.tmp-%d", outdir, (long long)st->step, (int)getpid());
    snprintf(old, sizeof old, "%s/.step-%06lld.old-%d", outdir, (long long)st->step, (int)getpid());
    if (saved_dir) snprintf(saved_dir, saved_len, "%s", final);

    if (mkdir_p(outdir) != 0) {
        snprintf(err, errlen, "%s: cannot create the checkpoint folder: %s", outdir, strerror(errno));
        return 1;
    }
    clean_stale(outdir);
    ckpt_remove_tree(tmp);
    if (mkdir(tmp, 0777) != 0) {
        snprintf(err, errlen, "%s: cannot create %s: %s; earlier checkpoints are untouched", final, tmp, strerror(errno));
        return 1;
    }

    // names of the optimizer tensors: m.NAME for every canon, then v.NAME
    StEntry *opt = calloc((size_t)(2 * n + 1), sizeof(StEntry));
    char *names = calloc((size_t)(2 * n + 1), 112);
    int rc = 0;
    if (!opt || !names) { snprintf(why, sizeof why, "out of memory"); rc = 1; }
    for (int i = 0; !rc && i < 2 * n; i++) {
        const StEntry *c = &canons[i % n];
        snprintf(names + (size_t)i * 112, 112, "%s.%s", i < n ? "m" : "v", c->name);
        opt[i].name = names + (size_t)i * 112;
        opt[i].rows = c->rows;
        opt[i].cols = c->cols;
    }
    char step_text[32], fp_text[32], tp_text[16];
    snprintf(step_text, sizeof step_text, "%lld", (long long)st->step);
    snprintf(fp_text, sizeof fp_text, "0x%016llx", (unsigned long long)st->fingerprint);
    snprintf(tp_text, sizeof tp_text, "%d", st->tp);
    const char *meta[] = {"format", "pt", "model", st->model, "run", st->run, "step", step_text,
                          "fingerprint", fp_text, "saved_at_tp", tp_text, "writer", "boost " CKPT_FORMAT " 1"};
    const int nmeta = (int)(sizeof meta / sizeof meta[0]) / 2;
    FillAdapter adapter = {fill, ctx, n, 0};
    if (!rc) {
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        rc = st_write_f32(path, canons, n, meta, nmeta, fill_model, &adapter, why, sizeof why);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        rc = st_write_f32(path, opt, 2 * n, meta, nmeta, fill_optimizer, &adapter, why, sizeof why);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/state.json", tmp);
        rc = write_state(path, st, why, sizeof why);
    }
    free(opt);
    free(names);
    if (!rc && fsync_path(tmp) != 0) { snprintf(why, sizeof why, "%s: fsync: %s", tmp, strerror(errno)); rc = 1; }
    if (!rc) {
        struct stat sb;
        int replacing = stat(final, &sb) == 0;
        if (replacing && rename(final, old) != 0) {
            snprintf(why, sizeof why, "cannot move the existing %s aside: %s", final, strerror(errno)); rc = 1;
        } else if (rename(tmp, final) != 0) {
            snprintf(why, sizeof why, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
            if (replacing) rename(old, final);   // put the previous one back
            rc = 1;
        } else if (replacing) {
            ckpt_remove_tree(old);
        }
    }
    if (!rc && fsync_path(outdir) != 0) { snprintf(why, sizeof why, "%s: fsync: %s", outdir, strerror(errno)); rc = 1; }
    if (rc) {
        ckpt_remove_tree(tmp);
        snprintf(err, errlen, "%s: checkpoint not written (%s); the temporary folder was removed and earlier "
                 "checkpoints are untouched", final, why);
        return 1;
    }
    return 0;
}

int ckpt_resolve(const char *arg, char *dir, size_t dirlen, char *err, size_t errlen) {
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/state.json", arg);
    if (access(probe, F_OK) == 0) { snprintf(dir, dirlen, "%s", arg); return 0; }
    DIR *d = opendir(arg);
    if (!d) {
        snprintf(err, errlen, "%s: cannot open the checkpoint: %s (give a step folder such as OUT/step-000100)",
                 arg, strerror(errno));
        return 2;
    }
    long long best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &step, &tail) == 1 && step > best) best = step;
    }
    closedir(d);
    if (best < 0) {
        snprintf(err, errlen, "%s: not a checkpoint: no state.json and no step-NNNNNN folders in it", arg);
        return 2;
    }
    ckpt_step_dir(arg, best, dir, dirlen);
    return 0;
}

void ckpt_state_free(CkptState *st) {
    free(st->losses);
    free(st->val_losses);
    free(st->val_steps);
    memset(st, 0, sizeof *st);
}

static int hex_field(const Json *root, const char *key, uint64_t *out) {
    const Json *v = json_get(root, key);
    if (!v || v->type != JSON_STRING) return 0;
    char *end;
    errno = 0;
    *out = strtoull(v->str, &end, 16);
    return errno == 0 && *end == 0 && end != v->str;
}

static int int_field(const Json *root, const char *key, int64_t *out) {
    const Json *v = json_get(root, key);
    if (!v || v->type != JSON_NUMBER || v->num < 0 || v->num != (double)(int64_t)v->num) return 0;
    *out = (int64_t)v->num;
    return 1;
}

static int str_field(const Json *root, const char *key, char *out, size_t outlen) {
    const Json *v = json_get(root, key);
    if (!v || v->type != JSON_STRING) return 0;
    snprintf(out, outlen, "%s", v->str);
    return 1;
}

int ckpt_read_state(const char *dir, CkptState *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    char path[1200];
    snprintf(path, sizeof path, "%s/state.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open: %s (not a checkpoint folder?)", path, strerror(errno)); return 2; }
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    char chunk[65536];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + got > cap) {
            cap = 2 * (len + got);
            char *t = realloc(text, cap);
            if (!t) { free(text); fclose(f); snprintf(err, errlen, "%s: out of memory", path); return 2; }
            text = t;
        }
        memcpy(text + len, chunk, got);
        len += got;
    }
    fclose(f);
    char jerr[200];
    Json *root = json_parse(text ? text : "", len, jerr, sizeof jerr);
    free(text);
    if (!root) { snprintf(err, errlen, "%s: damaged or truncated (%s)", path, jerr); return 2; }
    const Json *format = json_get(root, "format");
    int64_t version = 0, step, pos, ncanons, tp;
    if (!format || format->type != JSON_STRING || strcmp(format->str, CKPT_FORMAT)) {
        snprintf(err, errlen, "%s: not a boost checkpoint (format is not \"%s\")", path, CKPT_FORMAT);
        json_free(root); return 2;
    }
    if (!int_field(root, "version", &version) || version != CKPT_VERSION) {
        snprintf(err, errlen, "%s: checkpoint version %lld, this runtime reads version %d", path, (long long)version, CKPT_VERSION);
        json_free(root); return 2;
    }
    if (!int_field(root, "step", &step) || !int_field(root, "data_position", &pos) || !int_field(root, "canons", &ncanons) ||
        !int_field(root, "tp", &tp) || !hex_field(root, "seed", &st->seed) || !hex_field(root, "fingerprint", &st->fingerprint) ||
        !str_field(root, "model", st->model, sizeof st->model)) {
        snprintf(err, errlen, "%s: missing or bad field (needs step, data_position, canons, tp, seed, fingerprint, model)", path);
        json_free(root); return 2;
    }
    st->step = step;
    st->data_position = pos;
    if (!int_field(root, "data_sequences", &st->data_sequences)) st->data_sequences = -1;
    st->ncanons = (int)ncanons;
    st->tp = (int)tp;
    str_field(root, "run", st->run, sizeof st->run);
    str_field(root, "layout", st->layout, sizeof st->layout);
    str_field(root, "backend", st->backend, sizeof st->backend);
    const Json *losses = json_get(root, "losses");
    if (losses && losses->type == JSON_ARRAY && losses->n > 0) {
        st->losses = malloc((size_t)losses->n * sizeof(float));
        for (int i = 0; st->losses && i < losses->n; i++) st->losses[i] = (float)losses->items[i].num;
        st->nlosses = st->losses ? losses->n : 0;
    }
    const Json *vl = json_get(root, "val_losses");
    if (vl && vl->type == JSON_ARRAY && vl->n > 0) {
        st->val_losses = malloc((size_t)vl->n * sizeof(float));
        st->val_steps = malloc((size_t)vl->n * sizeof(int64_t));
        for (int i = 0; st->val_losses && st->val_steps && i < vl->n; i++) {
            const Json *pair = &vl->items[i];
            if (pair->type != JSON_ARRAY || pair->n != 2) continue;
            st->val_steps[st->nval] = (int64_t)pair->items[0].num;
            st->val_losses[st->nval++] = (float)pair->items[1].num;
        }
    }
    json_free(root);
    return 0;
}

static int check_file(const StFile *f, const StEntry *canons, int n, const char *prefix, char *err, size_t errlen) {
    char name[160];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, canons[i].name);
        const StTensor *t = st_find(f, name);
        if (!t) { snprintf(err, errlen, "%s: tensor '%s' is missing: a checkpoint of another model?", f->path, name); return 2; }
        if (strcmp(t->dtype, "F32")) { snprintf(err, errlen, "%s: tensor '%s' is %s, expected F32", f->path, name, t->dtype); return 2; }
        int shape_ok = (t->ndim == 2 && t->shape[0] == canons[i].rows && t->shape[1] == canons[i].cols) ||
                       (t->ndim == 1 && canons[i].rows == 1 && t->shape[0] == canons[i].cols);
        if (!shape_ok) {
            snprintf(err, errlen, "%s: tensor '%s' has another shape than the model's %lldx%lld: a checkpoint of another model?",
                     f->path, name, (long long)canons[i].rows, (long long)canons[i].cols);
            return 2;
        }
    }
    return 0;
}

int ckpt_open_tensors(const char *dir, const StEntry *canons, int n, StFile *model, StFile *optim,
                      char *err, size_t errlen) {
    char path[1200];
    memset(model, 0, sizeof *model);
    memset(optim, 0, sizeof *optim);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = st_open(path, model, err, errlen);
    if (!rc) rc = check_file(model, canons, n, "", err, errlen);
    if (!rc) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
        rc = st_open(path, optim, err, errlen);
    }
    if (!rc) rc = check_file(optim, canons, n, "m.", err, errlen);
    if (!rc) rc = check_file(optim, canons, n, "v.", err, errlen);
    if (rc) { st_close(model); st_close(optim); }
    return rc;
}
