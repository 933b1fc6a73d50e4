/* checkpoint.c: atomic checkpoint folders (safetensors + state.json), their reading and checking.
 * A save writes OUTDIR/.step-NNNNNN.tmp-PID/, fsyncs every file and the folder, renames it to
 * OUTDIR/step-NNNNNN and fsyncs OUTDIR; a failure removes the temporary folder and nothing else.
 * Each file's CRC-32C is computed from the bytes as they are written and recorded in state.json;
 * verification reads the files back and compares. Retention removes old folders by renaming them
 * to OUTDIR/.step-NNNNNN.del-PID first. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdint.h>
#include <unistd.h>
#include "runtime/checkpoint.h"   // defines: CkptState, ckpt_*
#include "runtime/crc32c.h"       // defines: crc32c_update

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

/* A float for state.json: JSON has no NaN or Infinity (a skipped step's loss), those are null. */
static void json_float(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

static int write_state(const char *path, const CkptState *st, const CkptFile *files, int nfiles, char *err, size_t errlen) {
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
    for (int i = 0; i < st->nlosses; i++) { if (i) fputs(", ", f); json_float(f, st->losses[i]); }
    fprintf(f, "],\n  \"val_losses\": [");
    for (int i = 0; i < st->nval; i++) {
        fprintf(f, "%s[%lld, ", i ? ", " : "", (long long)st->val_steps[i]);
        json_float(f, st->val_losses[i]);
        fputc(']', f);
    }
    fprintf(f, "],\n  \"skipped_updates\": %lld,\n  \"files\": {", (long long)st->skipped);
    for (int i = 0; i < nfiles; i++) {
        fprintf(f, "%s\n    ", i ? "," : "");
        json_write_string(f, files[i].name);
        fprintf(f, ": {\"bytes\": %lld, \"crc32c\": \"0x%08x\"}", (long long)files[i].bytes, (unsigned)files[i].crc32c);
    }
    fprintf(f, "\n  }\n}\n");
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
    char final[1024], tmp[1100], old[1100], path[1300], why[4096] = "";
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
    CkptFile files[2] = {{"model.safetensors", 0, 0}, {"optimizer.safetensors", 0, 0}};
    if (!rc) {
        snprintf(path, sizeof path, "%s/%s", tmp, files[0].name);
        rc = st_write_f32_sum(path, canons, n, meta, nmeta, fill_model, &adapter, &files[0].crc32c, &files[0].bytes,
                              why, sizeof why);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/%s", tmp, files[1].name);
        rc = st_write_f32_sum(path, opt, 2 * n, meta, nmeta, fill_optimizer, &adapter, &files[1].crc32c, &files[1].bytes,
                              why, sizeof why);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/state.json", tmp);
        rc = write_state(path, st, files, 2, why, sizeof why);
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

void ckpt_state_free(CkptState *st) {
    free(st->files);
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
    int64_t skipped = 0;
    if (int_field(root, "skipped_updates", &skipped)) st->skipped = skipped;
    const Json *losses = json_get(root, "losses");
    if (losses && losses->type == JSON_ARRAY && losses->n > 0) {
        st->losses = malloc((size_t)losses->n * sizeof(float));
        for (int i = 0; st->losses && i < losses->n; i++)
            st->losses[i] = losses->items[i].type == JSON_NUMBER ? (float)losses->items[i].num : NAN;
        st->nlosses = st->losses ? losses->n : 0;
    }
    const Json *files = json_get(root, "files");
    if (files) {
        int bad = files->type != JSON_OBJECT || files->n < 1;
        st->files = bad ? NULL : calloc((size_t)files->n, sizeof(CkptFile));
        for (int i = 0; !bad && st->files && i < files->n; i++) {
            const Json *e = &files->items[i];
            CkptFile *cf = &st->files[i];
            int64_t bytes;
            uint64_t crc;
            const char *name = files->keys[i];
            // a plain file name of the folder: no path separators, no "..", not hidden
            if (!name[0] || name[0] == '.' || strchr(name, '/') || strlen(name) >= sizeof cf->name ||
                !int_field(e, "bytes", &bytes) || !hex_field(e, "crc32c", &crc) || crc > 0xffffffffULL) { bad = 1; break; }
            snprintf(cf->name, sizeof cf->name, "%s", name);
            cf->bytes = bytes;
            cf->crc32c = (uint32_t)crc;
            st->nfiles = i + 1;
        }
        if (bad || !st->files) {
            snprintf(err, errlen, "%s: the \"files\" record is damaged (expected {\"NAME\": {\"bytes\": N, \"crc32c\": \"0x...\"}, ...})", path);
            json_free(root); ckpt_state_free(st); return 2;
        }
    }
    const Json *vl = json_get(root, "val_losses");
    if (vl && vl->type == JSON_ARRAY && vl->n > 0) {
        st->val_losses = malloc((size_t)vl->n * sizeof(float));
        st->val_steps = malloc((size_t)vl->n * sizeof(int64_t));
        for (int i = 0; st->val_losses && st->val_steps && i < vl->n; i++) {
            const Json *pair = &vl->items[i];
            if (pair->type != JSON_ARRAY || pair->n != 2) continue;
            st->val_steps[st->nval] = (int64_t)pair->items[0].num;
            st->val_losses[st->nval++] = pair->items[1].type == JSON_NUMBER ? (float)pair->items[1].num : NAN;
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

/* ---- listing, verification, resolution, retention ---- */

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ckpt_list(const char *outdir, int64_t **steps) {
    *steps = NULL;
    DIR *d = opendir(outdir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &step, &tail) != 1 || step < 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *t = realloc(*steps, (size_t)cap * sizeof(int64_t));
            if (!t) break;
            *steps = t;
        }
        (*steps)[n++] = step;
    }
    closedir(d);
    if (n > 1) qsort(*steps, (size_t)n, sizeof(int64_t), cmp_desc);
    return n;
}

/* Size and CRC-32C of a whole file. 0, or -1 with errno set. */
static int file_crc(const char *path, int64_t *bytes, uint32_t *crc) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static const size_t chunk = 1 << 20;
    unsigned char *buf = malloc(chunk);
    if (!buf) { fclose(f); errno = ENOMEM; return -1; }
    uint32_t c = 0;
    int64_t n = 0;
    size_t got;
    while ((got = fread(buf, 1, chunk, f)) > 0) { c = crc32c_update(c, buf, got); n += (int64_t)got; }
    int bad = ferror(f);
    int saved = errno;
    free(buf);
    fclose(f);
    if (bad) { errno = saved ? saved : EIO; return -1; }
    *bytes = n;
    *crc = c;
    return 0;
}

/* Every recorded file present with its size (cheap); with full = 1 also its CRC-32C. */
static int check_files(const char *dir, const CkptState *st, int full, char *err, size_t errlen) {
    char path[1400];
    if (st->nfiles == 0) {   // saved before the record existed: the two tensor files must be there
        const char *names[2] = {"model.safetensors", "optimizer.safetensors"};
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (access(path, R_OK) != 0) { snprintf(err, errlen, "%s: missing: %s", path, strerror(errno)); return CKPT_DAMAGED; }
        }
        snprintf(err, errlen, "%s/state.json: no \"files\" record (saved before checksums were recorded): the files "
                 "cannot be verified", dir);
        return CKPT_UNCHECKED;
    }
    for (int i = 0; i < st->nfiles; i++) {
        const CkptFile *cf = &st->files[i];
        snprintf(path, sizeof path, "%s/%s", dir, cf->name);
        struct stat sb;
        if (stat(path, &sb) != 0) { snprintf(err, errlen, "%s: missing: %s", path, strerror(errno)); return CKPT_DAMAGED; }
        if ((int64_t)sb.st_size != cf->bytes) {
            snprintf(err, errlen, "%s: truncated or damaged: %lld bytes, state.json records %lld", path,
                     (long long)sb.st_size, (long long)cf->bytes);
            return CKPT_DAMAGED;
        }
        if (!full) continue;
        int64_t bytes;
        uint32_t crc;
        if (file_crc(path, &bytes, &crc) != 0) { snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno)); return CKPT_DAMAGED; }
        if (bytes != cf->bytes || crc != cf->crc32c) {
            snprintf(err, errlen, "%s: checksum mismatch (CRC-32C 0x%08x, state.json records 0x%08x): the file is damaged",
                     path, (unsigned)crc, (unsigned)cf->crc32c);
            return CKPT_DAMAGED;
        }
    }
    return CKPT_VERIFIED;
}

int ckpt_verify(const char *dir, char *err, size_t errlen) {
    CkptState st;
    if (ckpt_read_state(dir, &st, err, errlen)) return CKPT_DAMAGED;
    int rc = check_files(dir, &st, 1, err, errlen);
    ckpt_state_free(&st);
    return rc;
}

int ckpt_complete(const char *dir) {
    CkptState st;
    char err[1600];
    if (ckpt_read_state(dir, &st, err, sizeof err)) return 0;
    int rc = check_files(dir, &st, 0, err, sizeof err);
    ckpt_state_free(&st);
    return rc != CKPT_DAMAGED;
}

int ckpt_newest_verified(const char *outdir, int64_t below, char *dir, size_t dirlen) {
    int64_t *steps;
    int n = ckpt_list(outdir, &steps);
    char path[1200], err[1600];
    int found = 0;
    for (int i = 0; i < n && !found; i++) {
        if (steps[i] >= below) continue;
        ckpt_step_dir(outdir, steps[i], path, sizeof path);
        if (ckpt_verify(path, err, sizeof err) != CKPT_DAMAGED) { snprintf(dir, dirlen, "%s", path); found = 1; }
    }
    free(steps);
    return found ? 0 : 1;
}

int ckpt_verify_advise(const char *dir, char *err, size_t errlen) {
    int rc = ckpt_verify(dir, err, errlen);
    if (rc != CKPT_DAMAGED) return rc;
    // the run folder and this folder's step: from the name (state.json may be what is damaged)
    char parent[1200];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t len = strlen(parent);
    while (len > 1 && parent[len - 1] == '/') parent[--len] = 0;
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : parent;
    long long step;
    char tail;
    if (sscanf(base, "step-%lld%c", &step, &tail) != 1) return rc;   // not in a run folder: nothing to suggest
    if (slash == parent) parent[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    char good[1200];
    size_t used = strlen(err);
    if (ckpt_newest_verified(parent, step, good, sizeof good) == 0)
        snprintf(err + used, errlen > used ? errlen - used : 0, "; the newest earlier checkpoint that verifies is %s "
                 "(resume with --resume %s)", good, good);
    else
        snprintf(err + used, errlen > used ? errlen - used : 0, "; no earlier checkpoint in %s verifies", parent);
    return rc;
}

int ckpt_resolve(const char *arg, char *dir, size_t dirlen, char *notes, size_t noteslen, char *err, size_t errlen) {
    char probe[1200];
    if (notes && noteslen) notes[0] = 0;
    snprintf(probe, sizeof probe, "%s/state.json", arg);
    if (access(probe, F_OK) == 0) { snprintf(dir, dirlen, "%s", arg); return 0; }
    DIR *d = opendir(arg);
    if (!d) {
        snprintf(err, errlen, "%s: cannot open the checkpoint: %s (give a step folder such as OUT/step-000100)",
                 arg, strerror(errno));
        return 2;
    }
    closedir(d);
    int64_t *steps;
    int n = ckpt_list(arg, &steps);
    if (n == 0) {
        snprintf(err, errlen, "%s: not a checkpoint: no state.json and no step-NNNNNN folders in it", arg);
        return 2;
    }
    char path[1200], why[1600];
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        ckpt_step_dir(arg, steps[i], path, sizeof path);
        if (ckpt_verify(path, why, sizeof why) != CKPT_DAMAGED) {
            snprintf(dir, dirlen, "%s", path);
            free(steps);
            return 0;
        }
        if (notes && used < noteslen) {
            int w = snprintf(notes + used, noteslen - used, "%s%s: passed over: %s", used ? "\n" : "", path, why);
            if (w > 0) used += (size_t)w;
        }
    }
    free(steps);
    snprintf(err, errlen, "%s: none of its %d checkpoint folder%s verifies%s%s", arg, n, n == 1 ? "" : "s",
             notes && notes[0] ? ":\n" : " (boost ckpt verify says why)", notes ? notes : "");
    return 2;
}

int ckpt_prune(const char *outdir, int keep, int64_t saved, int64_t protect, char *removed, size_t removedlen) {
    if (removed && removedlen) removed[0] = 0;
    if (keep < 1) return 0;
    int64_t *steps;
    int n = ckpt_list(outdir, &steps);
    int kept = 1, count = 0;   // the saved one counts as kept
    size_t used = 0;
    char path[1200], hidden[1300];
    for (int i = 0; i < n; i++)
        if (steps[i] == protect && protect != saved) kept++;
    for (int i = 0; i < n; i++) {
        if (steps[i] == saved || steps[i] == protect) continue;
        ckpt_step_dir(outdir, steps[i], path, sizeof path);
        if (!ckpt_complete(path)) continue;   // not ours to judge: left alone, not counted
        if (kept < keep) { kept++; continue; }
        snprintf(hidden, sizeof hidden, "%s/.step-%06lld.del-%d", outdir, (long long)steps[i], (int)getpid());
        if (rename(path, hidden) != 0) continue;
        ckpt_remove_tree(hidden);
        count++;
        if (removed && used < removedlen) {
            const char *base = strrchr(path, '/');
            int w = snprintf(removed + used, removedlen - used, "%s%s", used ? " " : "", base ? base + 1 : path);
            if (w > 0) used += (size_t)w;
        }
    }
    free(steps);
    if (count) fsync_path(outdir);
    return count;
}
