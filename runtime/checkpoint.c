/* checkpoint.c: atomic checkpoint folders (safetensors + state.json), their reading and checking.
 * A save writes OUTDIR/.step-NNNNNN.tmp-PID/, fsyncs every file and the folder, renames it to
 * OUTDIR/step-NNNNNN and fsyncs OUTDIR; a failure removes the temporary folder and nothing else.
 * Each file's CRC-32C is computed from the bytes as they are written and recorded in state.json;
 * verification reads the files back and compares. Retention removes old folders by renaming them
 * to OUTDIR/.step-NNNNNN.del-PID first. Sharded saves (rank files + index.json) follow the same
 * steps over all processes, with barriers (ckpt_save_sharded); ckpt_reader reads both storages with
 * pread, only the bytes asked for. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "common/crc32c.h"       // defines: crc32c_update
#include "common/files.h"        // defines: file_read_stream
#include "common/test_hooks.h"   // defines: test_hook_ckpt_sleep_ms
#include "common/checked.h"       // defines: ck_whole, ck_numel, ck_span, ck_add
#include "runtime/data.h"         // defines: data_open_regular, data_open_regular_stream
#include "runtime/pipeline.h"     // defines: pipeline_plan_is

/* Every path buffer holds any path the system can open (PATH_MAX) plus a file name; a folder whose
 * longer names would not fit is refused with a message (path_ok), never truncated. */
#define CKPT_PATH (PATH_MAX + 512)
#define CKPT_DIR_MAX (PATH_MAX - 64)

static int path_ok(const char *dir, const char *what, char *err, size_t errlen) {
    if (strlen(dir) < CKPT_DIR_MAX) return 1;
    snprintf(
        err, errlen,
        "%.200s...: the %s path is %zu bytes long; this system's paths are at most %d (PATH_MAX) "
        "and a checkpoint adds its file names: use a shorter folder",
        dir, what, strlen(dir), PATH_MAX);
    return 0;
}

uint64_t ckpt_fingerprint(const StEntry *canons, int n) {
    int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    if (!order) return 0;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) {   // insertion sort by name: a few hundred canons at most
        int v = order[i], j = i - 1;
        while (j >= 0 && strcmp(canons[order[j]].name, canons[v].name) > 0) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    char line[256];
    for (int i = 0; i < n; i++) {
        const StEntry *c = &canons[order[i]];
        int len = snprintf(line, sizeof line, "%s %lld %lld\n", c->name, (long long)c->rows,
                           (long long)c->cols);
        for (int k = 0; k < len && k < (int)sizeof line; k++) {
            h ^= (unsigned char)line[k];
            h *= 0x100000001b3ULL;
        }
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
    char buf[CKPT_PATH];
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

/* state.json guards itself: its last field, "state_crc32c", is the CRC-32C of every byte of the
 * file before the line that holds it (STATE_CRC_KEY starts that line), so a flipped bit anywhere in
 * the step, the seed or the "files" record is found by every reader. */
#define STATE_CRC_KEY ",\n  \"state_crc32c\": \""

static void write_state_text(FILE *f, const CkptState *st, const CkptFile *files, int nfiles);

static int write_state(const char *path, const CkptState *st, const CkptFile *files, int nfiles,
                       char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) {
        snprintf(err, errlen, "%s: out of memory", path);
        return 1;
    }
    write_state_text(m, st, files, nfiles);
    if (fclose(m) != 0 || !text) {
        free(text);
        snprintf(err, errlen, "%s: out of memory", path);
        return 1;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        free(text);
        return 1;
    }
    fwrite(text, 1, len, f);
    fprintf(f, "%s0x%08x\"\n}\n", STATE_CRC_KEY, (unsigned)crc32c_update(0, text, len));
    free(text);
    int ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (fclose(f) != 0) {
        ok = 0;
        saved = errno;
    }
    if (!ok) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(saved));
        return 1;
    }
    return 0;
}

/* The fields of state.json up to (not including) its checksum line and closing brace. */
static void write_state_text(FILE *f, const CkptState *st, const CkptFile *files, int nfiles) {
    fprintf(f, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"model\": ", CKPT_FORMAT,
            CKPT_VERSION);
    json_write_string(f, st->model);
    fprintf(f, ",\n  \"run\": ");
    json_write_string(f, st->run);
    fprintf(f, ",\n  \"fingerprint\": \"0x%016llx\",\n  \"canons\": %d,\n",
            (unsigned long long)st->fingerprint, st->ncanons);
    fprintf(f,
            "  \"step\": %lld,\n  \"data_position\": %lld,\n  \"data_sequences\": %lld,\n  "
            "\"seed\": \"0x%llx\",\n",
            (long long)st->step, (long long)st->data_position, (long long)st->data_sequences,
            (unsigned long long)st->seed);
    fprintf(f,
            "  \"rng\": \"data order is a function of (seed, data_sequences); no other random "
            "state\",\n");
    if (st->nsources > 0) {   /* a data mixture: where each source's order stands */
        fputs("  \"data_taken\": [", f);
        for (int i = 0; i < st->nsources; i++)
            fprintf(f, "%s%lld", i ? ", " : "", (long long)st->data_taken[i]);
        fputs("],\n", f);
    }
    fprintf(f, "  \"tp\": %d,\n  \"layout\": ", st->tp);
    json_write_string(f, st->layout);
    fprintf(f, ",\n  \"backend\": ");
    json_write_string(f, st->backend);
    fprintf(f, ",\n  \"storage\": \"%s\"", st->sharded ? "sharded" : "full");
    fprintf(f, ",\n  \"losses\": [");
    for (int i = 0; i < st->nlosses; i++) { if (i) fputs(", ", f); json_float(f, st->losses[i]); }
    fprintf(f, "],\n  \"val_losses\": [");
    for (int i = 0; i < st->nval; i++) {
        fprintf(f, "%s[%lld, ", i ? ", " : "", (long long)st->val_steps[i]);
        json_float(f, st->val_losses[i]);
        fputc(']', f);
    }
    fprintf(f, "],\n  \"skipped_updates\": %lld,\n", (long long)st->skipped);
    if (st->has_tokenizer)
        fprintf(f, "  \"tokenizer_crc32c\": \"0x%08x\",\n", (unsigned)st->tokenizer_crc);
    fprintf(f, "  \"files\": {");
    for (int i = 0; i < nfiles; i++) {
        fprintf(f, "%s\n    ", i ? "," : "");
        json_write_string(f, files[i].name);
        fprintf(f, ": {\"bytes\": %lld, \"crc32c\": \"0x%08x\"}", (long long)files[i].bytes,
                (unsigned)files[i].crc32c);
    }
    fprintf(f, "\n  }");
}

/* Leftovers of a save that was killed part way (by another process id that is gone): a temporary
 * folder is removed; a previous checkpoint moved aside is put back when its step has no folder. */
static void clean_stale(const char *outdir) {
    DIR *d = opendir(outdir);
    if (!d) return;
    struct dirent *e;
    char path[CKPT_PATH], final[CKPT_PATH];
    while ((e = readdir(d))) {
        long long step;
        int pid;
        char kind[8];
        if (sscanf(e->d_name, ".step-%lld.%3[a-z]-%d", &step, kind, &pid) != 3) continue;
        if (pid == (int)getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
        snprintf(path, sizeof path, "%s/%s", outdir, e->d_name);
        ckpt_step_dir(outdir, step, final, sizeof final);
        struct stat sb;
        if (!strcmp(kind, "old") && stat(final, &sb) != 0) {
            if (rename(path, final) !=
                0) // left where it is: still a whole checkpoint under a hidden name
                fprintf(stderr, "boost: warning: cannot move %s back to %s: %s\n", path, final,
                        strerror(errno));
        } else
            ckpt_remove_tree(path);
    }
    closedir(d);
}

/* The last part of a save: fsync the temporary folder, rename it to final (an existing folder of
 * that step moved aside to old first, removed after), fsync outdir. 0, or 1 with why. */
static int publish(const char *outdir, const char *tmp, const char *final, const char *old,
                   char *why, size_t whylen) {
    if (fsync_path(tmp) != 0) {
        snprintf(why, whylen, "%s: fsync: %s", tmp, strerror(errno));
        return 1;
    }
    struct stat sb;
    int replacing = stat(final, &sb) == 0;
    if (replacing && rename(final, old) != 0) {
        snprintf(why, whylen, "cannot move the existing %s aside: %s", final, strerror(errno));
        return 1;
    }
    if (rename(tmp, final) != 0) {
        snprintf(why, whylen, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        size_t used = strlen(why);
        if (replacing &&
            rename(old, final) != 0) // put the previous one back; say where it is when that fails
            snprintf(why + used, whylen > used ? whylen - used : 0,
                     "; the previous checkpoint of this step could not be "
                     "moved back and is at %s (%s)",
                     old, strerror(errno));
        return 1;
    }
    if (replacing) ckpt_remove_tree(old);
    if (fsync_path(outdir) != 0) {
        snprintf(why, whylen, "%s: fsync: %s", outdir, strerror(errno));
        return 1;
    }
    return 0;
}

/* BOOST_TEST_CKPT_SLEEP_MS=N (tests): sleep N ms after each tensor file of a save, so that a test
 * can kill a save part way. */
static void test_sleep(void) {
    long ms = test_hook_ckpt_sleep_ms();
    if (ms > 0) usleep((useconds_t)(ms * 1000));
}

int ckpt_save(const char *outdir, const CkptState *st, const StEntry *canons, int n,
              CkptFillFn fill, void *ctx, char *saved_dir, size_t saved_len, char *err,
              size_t errlen) {
    char final[PATH_MAX], tmp[PATH_MAX], old[PATH_MAX], path[CKPT_PATH], why[2 * CKPT_PATH] = "";
    if (!path_ok(outdir, "checkpoint folder", err, errlen)) return 1;
    ckpt_step_dir(outdir, st->step, final, sizeof final);
    snprintf(tmp, sizeof tmp, "%s/.step-%06lld.tmp-%d", outdir, (long long)st->step, (int)getpid());
    snprintf(old, sizeof old, "%s/.step-%06lld.old-%d", outdir, (long long)st->step, (int)getpid());
    if (saved_dir) snprintf(saved_dir, saved_len, "%s", final);

    if (mkdir_p(outdir) != 0) {
        snprintf(err, errlen, "%s: cannot create the checkpoint folder: %s", outdir,
                 strerror(errno));
        return 1;
    }
    clean_stale(outdir);
    ckpt_remove_tree(tmp);
    if (mkdir(tmp, 0777) != 0) {
        snprintf(err, errlen, "%s: cannot create %s: %s; earlier checkpoints are untouched", final,
                 tmp, strerror(errno));
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
    const char *meta[] = {"format",      "pt",
                          "model",       st->model,
                          "run",         st->run,
                          "step",        step_text,
                          "fingerprint", fp_text,
                          "saved_at_tp", tp_text,
                          "writer",      "boost " CKPT_FORMAT " 1"};
    const int nmeta = (int)(sizeof meta / sizeof meta[0]) / 2;
    FillAdapter adapter = {fill, ctx, n, 0};
    CkptFile files[2] = {{"model.safetensors", 0, 0}, {"optimizer.safetensors", 0, 0}};
    if (!rc) {
        snprintf(path, sizeof path, "%s/%s", tmp, files[0].name);
        rc = st_write_f32_sum(path, canons, n, meta, nmeta, fill_model, &adapter, &files[0].crc32c,
                              &files[0].bytes, why, sizeof why);
        test_sleep();
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/%s", tmp, files[1].name);
        rc = st_write_f32_sum(path, opt, 2 * n, meta, nmeta, fill_optimizer, &adapter,
                              &files[1].crc32c, &files[1].bytes, why, sizeof why);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/state.json", tmp);
        rc = write_state(path, st, files, 2, why, sizeof why);
    }
    free(opt);
    free(names);
    if (!rc) rc = publish(outdir, tmp, final, old, why, sizeof why);
    if (!rc) data_note_checkpoint(final);
    if (rc) {
        ckpt_remove_tree(tmp);
        snprintf(err, errlen,
                 "%s: checkpoint not written (%s); the temporary folder was removed and earlier "
                 "checkpoints are untouched",
                 final, why);
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
    return v && v->type == JSON_NUMBER && ck_whole(v->num, out) == 0;
}

static int str_field(const Json *root, const char *key, char *out, size_t outlen) {
    const Json *v = json_get(root, key);
    if (!v || v->type != JSON_STRING) return 0;
    snprintf(out, outlen, "%s", v->str);
    return 1;
}

/* Is state.json's own checksum right? 1 yes, 0 absent (saved before it existed), -1 wrong. */
static int state_crc_ok(const char *text, size_t len) {
    size_t klen = strlen(STATE_CRC_KEY);
    const char *at = NULL;
    for (const char *p = text; (p = memmem(p, len - (size_t)(p - text), STATE_CRC_KEY, klen)); p++)
        at = p;
    if (!at) return 0;
    char *end;
    errno = 0;
    unsigned long long want = strtoull(at + klen, &end, 16);
    if (errno || end == at + klen || *end != '"' || want > 0xffffffffULL) return -1;
    return crc32c_update(0, text, (size_t)(at - text)) == (uint32_t)want ? 1 : -1;
}

/* state.json's "files" record (files: NAME -> {bytes, crc32c}) into st->files[0..nfiles).
 * 0, or 1: the record is damaged (or out of memory). */
static int read_files_record(const Json *files, CkptState *st) {
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
            !int_field(e, "bytes", &bytes) || !hex_field(e, "crc32c", &crc) ||
            crc > 0xffffffffULL) {
            bad = 1;
            break;
        }
        snprintf(cf->name, sizeof cf->name, "%s", name);
        cf->bytes = bytes;
        cf->crc32c = (uint32_t)crc;
        st->nfiles = i + 1;
    }
    return bad || !st->files;
}

/* state.json's "val_losses" ([[step, loss], ...]; NULL: none) into st->val_steps, st->val_losses
 * [0..nval); a pair without a whole step is left out, a loss that is not a number reads NaN. */
static void read_val_losses(const Json *vl, CkptState *st) {
    if (!vl || vl->type != JSON_ARRAY || vl->n <= 0) return;
    st->val_losses = malloc((size_t)vl->n * sizeof(float));
    st->val_steps = malloc((size_t)vl->n * sizeof(int64_t));
    for (int i = 0; st->val_losses && st->val_steps && i < vl->n; i++) {
        const Json *pair = &vl->items[i];
        if (pair->type != JSON_ARRAY || pair->n != 2 || pair->items[0].type != JSON_NUMBER ||
            ck_whole(pair->items[0].num, &st->val_steps[st->nval]))
            continue;
        st->val_losses[st->nval++] =
            pair->items[1].type == JSON_NUMBER ? (float)pair->items[1].num : NAN;
    }
}

int ckpt_read_state(const char *dir, CkptState *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    if (!path_ok(dir, "checkpoint folder", err, errlen)) return 2;
    char path[CKPT_PATH];
    snprintf(path, sizeof path, "%s/state.json", dir);
    char why[CKPT_PATH + 128];
    FILE *f = data_open_regular_stream(path, why, sizeof why);
    if (!f) {
        snprintf(err, errlen, "%s (not a checkpoint folder?)", why);
        return 2;
    }
    size_t len = 0;
    char *text = file_read_stream(f, path, (size_t)1 << 30, &len, err, errlen);
    fclose(f);
    if (!text) return 2;
    int self = text ? state_crc_ok(text, len) : 0;
    if (self < 0) {
        free(text);
        snprintf(err, errlen,
                 "%s: checksum mismatch (its \"state_crc32c\" does not match its text): state.json "
                 "is damaged",
                 path);
        return 2;
    }
    st->state_checked = self;
    char jerr[200];
    Json *root = json_parse(text ? text : "", len, jerr, sizeof jerr);
    free(text);
    if (!root) { snprintf(err, errlen, "%s: damaged or truncated (%s)", path, jerr); return 2; }
    const Json *format = json_get(root, "format");
    int64_t version = 0, step, pos, ncanons, tp;
    if (!format || format->type != JSON_STRING || strcmp(format->str, CKPT_FORMAT)) {
        snprintf(err, errlen, "%s: not a boost checkpoint (format is not \"%s\")", path,
                 CKPT_FORMAT);
        json_free(root); return 2;
    }
    if (!int_field(root, "version", &version) || version != CKPT_VERSION) {
        snprintf(err, errlen, "%s: checkpoint version %lld, this runtime reads version %d", path,
                 (long long)version, CKPT_VERSION);
        json_free(root); return 2;
    }
    if (!int_field(root, "step", &step) || !int_field(root, "data_position", &pos) ||
        !int_field(root, "canons", &ncanons) || !int_field(root, "tp", &tp) ||
        !hex_field(root, "seed", &st->seed) || !hex_field(root, "fingerprint", &st->fingerprint) ||
        !str_field(root, "model", st->model, sizeof st->model)) {
        snprintf(err, errlen,
                 "%s: missing or bad field (needs step, data_position, canons, tp, seed, "
                 "fingerprint, model)",
                 path);
        json_free(root); return 2;
    }
    st->step = step;
    st->data_position = pos;
    if (!int_field(root, "data_sequences", &st->data_sequences)) st->data_sequences = -1;
    const Json *taken = json_get(root, "data_taken");
    int ntaken = taken && taken->type == JSON_ARRAY ? taken->n : 0;
    for (int i = 0; i < ntaken && i < DATA_MAX_SOURCES; i++) {
        const Json *v = &taken->items[i];
        if (v->type != JSON_NUMBER || v->num < 0 || v->num > 9007199254740992.0) {
            snprintf(err, errlen, "%s: data_taken[%d] is not a count of sequences", path, i);
            json_free(root); return 2;
        }
        st->data_taken[st->nsources++] = (int64_t)v->num;
    }
    if (ncanons > INT32_MAX || tp < 1 || tp > 4096) {
        snprintf(err, errlen, "%s: canons=%lld or tp=%lld is out of range", path,
                 (long long)ncanons, (long long)tp);
        json_free(root);
        return 2;
    }
    st->ncanons = (int)ncanons;
    st->tp = (int)tp;
    str_field(root, "run", st->run, sizeof st->run);
    str_field(root, "layout", st->layout, sizeof st->layout);
    str_field(root, "backend", st->backend, sizeof st->backend);
    char storage[16] = "full";
    str_field(root, "storage", storage, sizeof storage);
    if (strcmp(storage, "full") && strcmp(storage, "sharded")) {
        snprintf(err, errlen,
                 "%s: \"storage\" is \"%s\"; this runtime reads \"full\" and \"sharded\"", path,
                 storage);
        json_free(root); return 2;
    }
    st->sharded = !strcmp(storage, "sharded");
    int64_t skipped = 0;
    if (int_field(root, "skipped_updates", &skipped)) st->skipped = skipped;
    char tokcrc[16] = "";
    if (str_field(root, "tokenizer_crc32c", tokcrc, sizeof tokcrc)) {
        char *end = NULL;
        st->tokenizer_crc = (uint32_t)strtoul(tokcrc, &end, 16);
        st->has_tokenizer = end && !*end && end != tokcrc;
    }
    const Json *losses = json_get(root, "losses");
    if (losses && losses->type == JSON_ARRAY && losses->n > 0) {
        st->losses = malloc((size_t)losses->n * sizeof(float));
        for (int i = 0; st->losses && i < losses->n; i++)
            st->losses[i] =
                    losses->items[i].type == JSON_NUMBER ? (float)losses->items[i].num : NAN;
        st->nlosses = st->losses ? losses->n : 0;
    }
    const Json *files = json_get(root, "files");
    if (files) {
        if (read_files_record(files, st)) {
            snprintf(err, errlen,
                     "%s: the \"files\" record is damaged (expected {\"NAME\": {\"bytes\": N, "
                     "\"crc32c\": \"0x...\"}, ...})",
                     path);
            json_free(root); ckpt_state_free(st); return 2;
        }
    }
    read_val_losses(json_get(root, "val_losses"), st);
    json_free(root);
    return 0;
}

static int check_file(const StFile *f, const StEntry *canons, int n, const char *prefix, char *err,
                      size_t errlen) {
    char name[160];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, canons[i].name);
        const StTensor *t = st_find(f, name);
        if (!t) {
            snprintf(err, errlen, "%s: tensor '%s' is missing: a checkpoint of another model?",
                     f->path, name);
            return 2;
        }
        if (strcmp(t->dtype, "F32")) {
            snprintf(err, errlen, "%s: tensor '%s' is %s, expected F32", f->path, name, t->dtype);
            return 2;
        }
        int shape_ok =
                (t->ndim == 2 && t->shape[0] == canons[i].rows && t->shape[1] == canons[i].cols) ||
                (t->ndim == 1 && canons[i].rows == 1 && t->shape[0] == canons[i].cols);
        if (!shape_ok) {
            snprintf(err, errlen,
                     "%s: tensor '%s' has another shape than the model's %lldx%lld: a checkpoint "
                     "of another model?",
                     f->path, name, (long long)canons[i].rows, (long long)canons[i].cols);
            return 2;
        }
    }
    return 0;
}

int ckpt_open_tensors(const char *dir, const StEntry *canons, int n, StFile *model, StFile *optim,
                      char *err, size_t errlen) {
    char path[CKPT_PATH];
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
    while ((got = fread(buf, 1, chunk, f)) > 0) {
        c = crc32c_update(c, buf, got);
        n += (int64_t)got;
    }
    int bad = ferror(f);
    int saved = errno;
    free(buf);
    fclose(f);
    if (bad) { errno = saved ? saved : EIO; return -1; }
    *bytes = n;
    *crc = c;
    return 0;
}

/* Is `name` a file that `need` (CKPT_NEED_*) leaves unread: the AdamW moments of a full checkpoint
 * when only the weights are needed? */
static int unneeded(const char *name, int need) {
    return need == CKPT_NEED_WEIGHTS && !strcmp(name, "optimizer.safetensors");
}

/* Every recorded file that `need` reads present with its size (cheap); with full = 1 also its
 * CRC-32C. */
static int check_files(const char *dir, const CkptState *st, int full, int need, char *err,
                       size_t errlen) {
    char path[CKPT_PATH];
    if (st->nfiles == 0) {   // saved before the record existed: the two tensor files must be there
        const char *names[2] = {"model.safetensors", "optimizer.safetensors"};
        for (int i = 0; i < 2; i++) {
            if (unneeded(names[i], need)) continue;
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (access(path, R_OK) != 0) {
                snprintf(err, errlen, "%s: missing: %s", path, strerror(errno));
                return CKPT_DAMAGED;
            }
        }
        snprintf(err, errlen, "%s/state.json: no \"files\" record (saved before checksums were "
                 "recorded): the files cannot be verified", dir);
        return CKPT_UNCHECKED;
    }
    for (int i = 0; i < st->nfiles; i++) {
        const CkptFile *cf = &st->files[i];
        if (unneeded(cf->name, need)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, cf->name);
        struct stat sb;
        if (stat(path, &sb) != 0) {
            snprintf(err, errlen, "%s: missing: %s", path, strerror(errno));
            return CKPT_DAMAGED;
        }
        if ((int64_t)sb.st_size != cf->bytes) {
            snprintf(err, errlen, "%s: truncated or damaged: %lld bytes, state.json records %lld",
                     path, (long long)sb.st_size, (long long)cf->bytes);
            return CKPT_DAMAGED;
        }
        if (!full) continue;
        int64_t bytes;
        uint32_t crc;
        if (file_crc(path, &bytes, &crc) != 0) {
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
            return CKPT_DAMAGED;
        }
        if (bytes != cf->bytes || crc != cf->crc32c) {
            snprintf(err, errlen,
                     "%s: checksum mismatch (CRC-32C 0x%08x, state.json records 0x%08x): the file "
                     "is damaged",
                     path, (unsigned)crc, (unsigned)cf->crc32c);
            return CKPT_DAMAGED;
        }
    }
    return CKPT_VERIFIED;
}

static int verify_index(const char *dir, const CkptState *st, char *err, size_t errlen);
static int verify_model(const char *dir, const CkptState *st, int need, char *err, size_t errlen);
static int reader_open(const char *dir, const StEntry *canons, int n, int need, CkptReader **out,
                       char *err, size_t errlen);

/* Every entry of the folder but state.json is a file the "files" record names: a file left out
 * (index.json dropped from the record, say) would be read unchecked. */
static int check_listed(const char *dir, const CkptState *st, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: cannot list: %s", dir, strerror(errno));
        return CKPT_DAMAGED;
    }
    struct dirent *e;
    int rc = CKPT_VERIFIED;
    while (rc == CKPT_VERIFIED && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "state.json"))
            continue;
        int listed = 0;
        for (int i = 0; i < st->nfiles && !listed; i++)
            listed = !strcmp(st->files[i].name, e->d_name);
        if (!listed) {
            snprintf(err, errlen,
                     "%s/%s: not in state.json's \"files\" record, so nothing checks it: the "
                     "folder or its "
                     "state.json is damaged",
                     dir, e->d_name);
            rc = CKPT_DAMAGED;
        }
    }
    closedir(d);
    return rc;
}

/* The run's plan beside the step folders (DIR/../plan/plan.txt, written by train -o): eval, sample
 * and export run it, so it must pass every check of the plan loader. Absent: nothing to check. */
static int verify_run_plan(const char *dir, char *err, size_t errlen) {
    char path[CKPT_PATH];
    snprintf(path, sizeof path, "%s/../plan/plan.txt", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) return CKPT_VERIFIED;
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return CKPT_DAMAGED;
    }
    if (pipeline_plan_is(path))
        return CKPT_VERIFIED; // its stages load when boost train opens them (not checked here)
    char perr[1024];
    Plan *p = plan_load(path, perr, sizeof perr);
    if (!p) {
        snprintf(err, errlen, "the run's plan does not load: %s", perr);
        return CKPT_DAMAGED;
    }
    plan_free(p);
    return CKPT_VERIFIED;
}

int ckpt_verify_for(const char *dir, int need, char *err, size_t errlen) {
    CkptState st;
    if (ckpt_read_state(dir, &st, err, errlen)) return CKPT_DAMAGED;
    int rc = check_files(dir, &st, 1, need, err, errlen);
    if (rc == CKPT_VERIFIED) rc = check_listed(dir, &st, err, errlen);
    if (rc == CKPT_VERIFIED && st.sharded) rc = verify_index(dir, &st, err, errlen);
    if (rc == CKPT_VERIFIED) rc = verify_model(dir, &st, need, err, errlen);
    if (rc == CKPT_VERIFIED) rc = verify_run_plan(dir, err, errlen);
    if (rc == CKPT_VERIFIED && !st.state_checked) {
        snprintf(err, errlen,
                 "%s/state.json: no \"state_crc32c\" (saved before state.json carried its own "
                 "checksum): its "
                 "fields cannot be verified",
                 dir);
        rc = CKPT_UNCHECKED;
    }
    ckpt_state_free(&st);
    return rc;
}

int ckpt_verify(const char *dir, char *err, size_t errlen) {
    return ckpt_verify_for(dir, CKPT_NEED_ALL, err, errlen);
}

int ckpt_complete(const char *dir) {
    CkptState st;
    char err[1600];
    if (ckpt_read_state(dir, &st, err, sizeof err)) return 0;
    int rc = check_files(dir, &st, 0, CKPT_NEED_ALL, err, sizeof err);
    ckpt_state_free(&st);
    return rc != CKPT_DAMAGED;
}

/* ckpt_newest_verified for what `need` reads. */
static int newest_verified(const char *outdir, int64_t below, int need, char *dir, size_t dirlen) {
    int64_t *steps;
    int n = ckpt_list(outdir, &steps);
    char path[CKPT_PATH], err[1600];
    int found = 0;
    for (int i = 0; i < n && !found; i++) {
        if (steps[i] >= below) continue;
        ckpt_step_dir(outdir, steps[i], path, sizeof path);
        if (ckpt_verify_for(path, need, err, sizeof err) != CKPT_DAMAGED) {
            snprintf(dir, dirlen, "%s", path);
            found = 1;
        }
    }
    free(steps);
    return found ? 0 : 1;
}

int ckpt_newest_verified(const char *outdir, int64_t below, char *dir, size_t dirlen) {
    return newest_verified(outdir, below, CKPT_NEED_ALL, dir, dirlen);
}

int ckpt_verify_advise(const char *dir, char *err, size_t errlen) {
    return ckpt_verify_advise_for(dir, CKPT_NEED_ALL, err, errlen);
}

int ckpt_verify_advise_for(const char *dir, int need, char *err, size_t errlen) {
    int rc = ckpt_verify_for(dir, need, err, errlen);
    if (rc != CKPT_DAMAGED) return rc;
    // the run folder and this folder's step: from the name (state.json may be what is damaged)
    char parent[CKPT_PATH];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t len = strlen(parent);
    while (len > 1 && parent[len - 1] == '/') parent[--len] = 0;
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : parent;
    long long step;
    char tail;
    // not in a run folder: nothing to suggest
    if (sscanf(base, "step-%lld%c", &step, &tail) != 1) return rc;
    if (slash == parent) parent[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    char good[CKPT_PATH];
    size_t used = strlen(err);
    if (newest_verified(parent, step, need, good, sizeof good) == 0)
        snprintf(err + used, errlen > used ? errlen - used : 0,
                 "; the newest earlier checkpoint that verifies is %s (resume with --resume %s)",
                 good, good);
    else
        snprintf(err + used, errlen > used ? errlen - used : 0,
                 "; no earlier checkpoint in %s verifies", parent);
    return rc;
}

int ckpt_resolve(const char *arg, char *dir, size_t dirlen, char *notes, size_t noteslen, char *err,
                 size_t errlen) {
    return ckpt_resolve_for(arg, CKPT_NEED_ALL, dir, dirlen, notes, noteslen, err, errlen);
}

int ckpt_resolve_for(const char *arg, int need, char *dir, size_t dirlen, char *notes,
                     size_t noteslen, char *err, size_t errlen) {
    char probe[CKPT_PATH];
    if (notes && noteslen) notes[0] = 0;
    snprintf(probe, sizeof probe, "%s/state.json", arg);
    if (access(probe, F_OK) == 0) { snprintf(dir, dirlen, "%s", arg); return 0; }
    DIR *d = opendir(arg);
    if (!d) {
        snprintf(err, errlen,
                 "%s: cannot open the checkpoint: %s (give a step folder such as OUT/step-000100)",
                 arg, strerror(errno));
        return 2;
    }
    closedir(d);
    int64_t *steps;
    int n = ckpt_list(arg, &steps);
    if (n == 0) {
        snprintf(err, errlen,
                 "%s: not a checkpoint: no state.json and no step-NNNNNN folders in it", arg);
        return 2;
    }
    char path[CKPT_PATH], why[1600];
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        ckpt_step_dir(arg, steps[i], path, sizeof path);
        if (ckpt_verify_for(path, need, why, sizeof why) != CKPT_DAMAGED) {
            snprintf(dir, dirlen, "%s", path);
            free(steps);
            return 0;
        }
        if (notes && used < noteslen) {
            int w = snprintf(notes + used, noteslen - used, "%s%s: passed over: %s",
                             used ? "\n" : "", path, why);
            if (w > 0) used += (size_t)w;
        }
    }
    free(steps);
    snprintf(err, errlen, "%s: none of its %d checkpoint folder%s verifies%s%s", arg, n,
             n == 1 ? "" : "s", notes && notes[0] ? ":\n" : " (boost ckpt verify says why)",
             notes ? notes : "");
    return 2;
}

int ckpt_prune(const char *outdir, int keep, int64_t saved, int64_t protect, char *removed,
               size_t removedlen) {
    if (removed && removedlen) removed[0] = 0;
    if (keep < 1) return 0;
    int64_t *steps;
    int n = ckpt_list(outdir, &steps);
    int kept = 1, count = 0;   // the saved one counts as kept
    size_t used = 0;
    char path[CKPT_PATH], hidden[CKPT_PATH];
    for (int i = 0; i < n; i++)
        if (steps[i] == protect && protect != saved) kept++;
    for (int i = 0; i < n; i++) {
        if (steps[i] == saved || steps[i] == protect) continue;
        ckpt_step_dir(outdir, steps[i], path, sizeof path);
        if (!ckpt_complete(path)) continue;   // not ours to judge: left alone, not counted
        if (kept < keep) { kept++; continue; }
        snprintf(hidden, sizeof hidden, "%s/.step-%06lld.del-%d", outdir, (long long)steps[i],
                 (int)getpid());
        if (rename(path, hidden) != 0) continue;
        ckpt_remove_tree(hidden);
        count++;
        if (removed && used < removedlen) {
            const char *base = strrchr(path, '/');
            int w = snprintf(removed + used, removedlen - used, "%s%s", used ? " " : "",
                             base ? base + 1 : path);
            if (w > 0) used += (size_t)w;
        }
    }
    free(steps);
    if (count) fsync_path(outdir);
    return count;
}

/* ---- sharded checkpoints: who owns what ---- */

typedef struct { CkptSlice *v; int n, cap; } SliceList;

static int slice_add(SliceList *l, CkptSlice s) {
    if (s.r1 <= s.r0 || s.c1 <= s.c0) return 0;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        CkptSlice *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        l->v = v; l->cap = cap;
    }
    l->v[l->n++] = s;
    return 0;
}

/* The part of block s (in local param rows x cols) inside the local param's flat element range
 * [lo, hi): up to three rectangles (a partial first row, whole rows, a partial last row). */
static int slice_add_range(SliceList *l, CkptSlice s, int64_t cols, int64_t lo, int64_t hi) {
    int64_t nr = s.r1 - s.r0, nc = s.c1 - s.c0;
    CkptSlice run = s;
    int open = 0;
    for (int64_t i = 0; i < nr; i++) {
        int64_t a = (s.lr + i) * cols + s.lc, b = a + nc;   // the row's flat range
        int64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        if (x >= y) { if (open && slice_add(l, run)) return -1; open = 0; continue; }
        int64_t c0 = s.c0 + (x - a), c1 = s.c0 + (y - a);
        if (open && run.c0 == c0 && run.c1 == c1) { run.r1++; continue; }
        if (open && slice_add(l, run)) return -1;
        run = s;
        run.r0 = s.r0 + i; run.r1 = run.r0 + 1; run.c0 = c0; run.c1 = c1;
        run.lr = s.lr + i; run.lc = s.lc + (x - a);
        open = 1;
    }
    return open ? slice_add(l, run) : 0;
}

/* The slices of one plan's ranks: its canon c is canon canon0 + c of the checkpoint, its grid rank
 * g (tp fastest, then dp) is grid rank rank0 + g, and its params are those of pipeline stage
 * `stage`. */
static int plan_slices(SliceList *l, const Plan *p, int canon0, int rank0, int stage) {
    int world = p->dp * p->tp, zero = p->zero && p->dp > 1, ep = p->ep > 1 ? p->ep : 1;
    for (int g = 0; g < world; g++) {
        int t = g % p->tp, d = (g / p->tp) % p->dp;
        for (int q = 0; q < p->nparams; q++) {
            const PlanParam *pp = &p->params[q];
            int64_t lo = 0, hi = pp->rows * pp->cols;
            if (zero) zero_shard(pp->rows * pp->cols, d, p->dp, &lo, &hi);
            for (int k = 0; k < pp->nparts; k++) {
                const PlanPart *pt = &p->parts[pp->first_part + k];
                if (pt->rep && t != 0) continue;   // every tp rank holds it: tp rank 0 writes it
                // expert parallelism: its ep rank's ranks hold it
                if (pt->ep >= 0 && d % ep != pt->ep) continue;
                CkptSlice s = {canon0 + pt->canon, 0,
                               rank_int(pt->r0, t), rank_int(pt->r1, t),
                               rank_int(pt->c0, t), rank_int(pt->c1, t),
                               rank0 + g, q, rank_int(pt->lr, t), rank_int(pt->lc, t), stage};
                for (int slot = 0; slot < 3; slot++) {
                    s.slot = slot;
                    int rc = 0;
                    // zero=1: every slot by the dp rank whose shard holds it (the fp32 masters may
                    // exist only there: the CUDA backend shards them); else the dp ranks (of one ep
                    // rank) hold the same values and the first of them writes them
                    if (zero) rc = slice_add_range(l, s, pp->cols, lo, hi);
                    else if (pt->ep >= 0 ? d < ep : d == 0) rc = slice_add(l, s);
                    if (rc) return -1;
                }
            }
        }
    }
    return 0;
}

int ckpt_plan_slices(const Plan *p, CkptSlice **out) {
    SliceList l = {0};
    if (plan_slices(&l, p, 0, 0, 0)) { free(l.v); *out = NULL; return -1; }
    *out = l.v;
    return l.n;
}

int ckpt_pipeline_slices(Plan *const *stages, int nstages, int pp, CkptSlice **out) {
    SliceList l = {0};
    int canon0 = 0;
    for (int s = 0; s < nstages; s++) {
        const Plan *p = stages[s];
        if (plan_slices(&l, p, canon0, (s % pp) * p->dp * p->tp, s)) {
            free(l.v);
            *out = NULL;
            return -1;
        }
        canon0 += p->ncanons;
    }
    *out = l.v;
    return l.n;
}

static const char *slot_prefix(int slot) { return slot == 1 ? "m." : slot == 2 ? "v." : ""; }

static void slice_key(const StEntry *canons, const CkptSlice *s, char *out, size_t n) {
    snprintf(out, n, "%s%s[%lld:%lld,%lld:%lld]", slot_prefix(s->slot), canons[s->canon].name,
             (long long)s->r0, (long long)s->r1, (long long)s->c0, (long long)s->c1);
}

/* ---- sharded save ---- */

typedef struct { const CkptShards *sh; const CkptSlice **list; int nonfinite; } ShardFill;

static int fill_shard(void *ctx, int i, float *out) {
    ShardFill *f = ctx;
    int rc = f->sh->fill(f->sh->ctx, f->list[i], out);
    if (rc == 2) f->nonfinite = 1;
    return rc;
}

static int cmp_slice_order(const void *a, const void *b) {
    const CkptSlice *x = *(const CkptSlice *const *)a, *y = *(const CkptSlice *const *)b;
    if (x->slot != y->slot) return x->slot - y->slot;
    if (x->canon != y->canon) return x->canon - y->canon;
    if (x->r0 != y->r0) return x->r0 < y->r0 ? -1 : 1;
    if (x->c0 != y->c0) return x->c0 < y->c0 ? -1 : 1;
    return x->rank - y->rank;
}

/* index.json: every tensor (params, then m, then v, canons in plan order) and its slices. */
static int write_index(const char *path, const StEntry *canons, int n, const CkptShards *sh,
                       char *err, size_t errlen) {
    const CkptSlice **order = malloc((size_t)(sh->nslices + 1) * sizeof *order);
    FILE *f = order ? fopen(path, "w") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path,
                 order ? strerror(errno) : "out of memory");
        free(order);
        return 1;
    }
    for (int i = 0; i < sh->nslices; i++) order[i] = &sh->slices[i];
    qsort(order, (size_t)sh->nslices, sizeof *order, cmp_slice_order);
    fprintf(f, "{\n  \"format\": \"%s\",\n  \"version\": 1,\n  \"ranks\": %d,\n"
            "  \"grid\": {\"dp\": %d, ", CKPT_INDEX_FORMAT, sh->world, sh->dp);
    if (sh->pp > 1) fprintf(f, "\"pp\": %d, ", sh->pp);
    fprintf(f, "\"tp\": %d, \"zero\": %d},\n  \"tensors\": {", sh->tp, sh->zero);
    static const char *kinds[3] = {"param", "adam_m", "adam_v"};
    char name[200], key[300], file[64];
    int j = 0, first = 1;
    for (int slot = 0; slot < 3; slot++)
        for (int c = 0; c < n; c++) {
            snprintf(name, sizeof name, "%s%s", slot_prefix(slot), canons[c].name);
            fprintf(f, "%s\n    ", first ? "" : ",");
            first = 0;
            json_write_string(f, name);
            fprintf(f, ": {\"kind\": \"%s\", \"shape\": [%lld, %lld], ", kinds[slot],
                    (long long)canons[c].rows, (long long)canons[c].cols);
            // the stage whose files hold it
            if (sh->pp > 1 && j < sh->nslices && order[j]->slot == slot && order[j]->canon == c)
                fprintf(f, "\"stage\": %d, ", order[j]->stage);
            fprintf(f, "\"slices\": [");
            for (int k = 0; j < sh->nslices && order[j]->slot == slot && order[j]->canon == c;
                 j++, k++) {
                const CkptSlice *s = order[j];
                slice_key(canons, s, key, sizeof key);
                snprintf(file, sizeof file, "rank-%05d.safetensors", s->rank);
                fprintf(f, "%s\n      {\"file\": \"%s\", \"key\": ", k ? "," : "", file);
                json_write_string(f, key);
                fprintf(f, ", \"rows\": [%lld, %lld], \"cols\": [%lld, %lld]}", (long long)s->r0,
                        (long long)s->r1, (long long)s->c0, (long long)s->c1);
            }
            fprintf(f, "]}");
        }
    fprintf(f, "\n  }\n}\n");
    free(order);
    int ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (fclose(f) != 0) { ok = 0; saved = errno; }
    if (!ok) { snprintf(err, errlen, "%s: write failed: %s", path, strerror(saved)); return 1; }
    return 0;
}

/* ckpt_save_sharded's step 3, on process 0 once every rank file is written (vals: the written
 * flags, sizes and CRCs per rank, 3 a rank from vals[2]): index.json and state.json into tmp,
 * then tmp published as final (old: the name a replaced step folder takes meanwhile). 0, or 1
 * with why. */
static int publish_sharded(const char *outdir, const char *tmp, const char *final, const char *old,
                           const CkptState *st_in, const StEntry *canons, int n,
                           const CkptShards *sh, const double *vals, char *why, size_t whylen) {
    char path[CKPT_PATH];
    int rc = 0, nfiles = 0;
    CkptFile *files = calloc((size_t)sh->world + 1, sizeof *files);
    if (!files) { snprintf(why, whylen, "out of memory"); rc = 1; }
    for (int g = 0; !rc && g < sh->world; g++) {
        if (vals[2 + 3 * g] == 0) continue;
        CkptFile *cf = &files[nfiles++];
        snprintf(cf->name, sizeof cf->name, "rank-%05d.safetensors", g);
        cf->bytes = (int64_t)vals[3 + 3 * g];
        cf->crc32c = (uint32_t)vals[4 + 3 * g];
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/%s", tmp, CKPT_INDEX);
        rc = write_index(path, canons, n, sh, why, whylen);
    }
    if (!rc) {
        CkptFile *cf = &files[nfiles++];
        snprintf(cf->name, sizeof cf->name, "%s", CKPT_INDEX);
        if (file_crc(path, &cf->bytes, &cf->crc32c)) {
            snprintf(why, whylen, "%s: cannot read back: %s", path, strerror(errno));
            rc = 1;
        }
    }
    if (!rc) {
        CkptState st = *st_in;
        st.sharded = 1;
        snprintf(path, sizeof path, "%s/state.json", tmp);
        rc = write_state(path, &st, files, nfiles, why, whylen);
    }
    free(files);
    if (!rc) rc = publish(outdir, tmp, final, old, why, whylen);
    return rc;
}

/* ckpt_save_sharded's step 1: process 0 makes the temporary folder, and its pid names it for
 * every process: tmp and old (the name a replaced step folder takes meanwhile) under outdir.
 * 0, or 1 with the message in err (earlier checkpoints untouched). */
static int sharded_tmp_folder(const char *outdir, const CkptState *st_in, const CkptShards *sh,
                              const char *final, char *tmp, char *old, char *err, size_t errlen) {
    char why[2 * CKPT_PATH] = "";
    int rc = 0;
    double hello[2] = {0, 0};
    if (sh->proc == 0) {
        snprintf(tmp, PATH_MAX, "%s/.step-%06lld.tmp-%d", outdir, (long long)st_in->step,
                 (int)getpid());
        if (mkdir_p(outdir) != 0) {
            snprintf(why, sizeof why, "%s: cannot create the checkpoint folder: %s", outdir,
                     strerror(errno));
            rc = 1;
        } else {
            clean_stale(outdir);
            ckpt_remove_tree(tmp);
            if (mkdir(tmp, 0777) != 0) {
                snprintf(why, sizeof why, "cannot create %s: %s", tmp, strerror(errno));
                rc = 1;
            }
        }
        hello[0] = rc;
        hello[1] = (double)getpid();
    }
    if (sh->nprocs > 1 && sh->sum(sh->ctx, hello, 2)) {
        snprintf(err, errlen, "%s: checkpoint not written: the processes cannot agree on it",
                 final);
        return 1;
    }
    if (hello[0] != 0) {
        snprintf(err, errlen, "%s: checkpoint not written (%s); earlier checkpoints are untouched",
                 final, why[0] ? why : "process 0 could not create the temporary folder");
        return 1;
    }
    snprintf(tmp, PATH_MAX, "%s/.step-%06lld.tmp-%d", outdir, (long long)st_in->step,
             (int)hello[1]);
    snprintf(old, PATH_MAX, "%s/.step-%06lld.old-%d", outdir, (long long)st_in->step,
             (int)hello[1]);
    return 0;
}

/* ckpt_save_sharded's step 2: this process's rank files into tmp, each rank's written flag, size
 * and CRC into vals[2 + 3g ..] (vals[1]: whether a parameter held NaN or inf). 0, or 1 with
 * why. */
static int write_rank_files(const char *tmp, const CkptState *st_in, const StEntry *canons,
                            const CkptShards *sh, double *vals, char *why, size_t whylen) {
    char path[CKPT_PATH];
    int rc = 0;
    const CkptSlice **list = malloc((size_t)(sh->nslices + 1) * sizeof *list);
    StEntry *ents = calloc((size_t)(sh->nslices + 1), sizeof *ents);
    char *names = calloc((size_t)(sh->nslices + 1), 256);
    if (!list || !ents || !names) { snprintf(why, whylen, "out of memory"); rc = 1; }
    ShardFill sf = {sh, list, 0};
    for (int g = sh->first; !rc && g < sh->first + sh->count; g++) {
        int m = 0;
        for (int i = 0; i < sh->nslices; i++)
            if (sh->slices[i].rank == g) {
                const CkptSlice *s = &sh->slices[i];
                list[m] = s;
                slice_key(canons, s, names + (size_t)m * 256, 256);
                ents[m].name = names + (size_t)m * 256;
                ents[m].rows = s->r1 - s->r0;
                ents[m].cols = s->c1 - s->c0;
                m++;
            }
        if (sh->rank_bytes) sh->rank_bytes[g] = 0;
        if (m == 0) continue;   // owns nothing (a dp rank > 0 without zero=1)
        char step_text[32], rank_text[16], world_text[16];
        snprintf(step_text, sizeof step_text, "%lld", (long long)st_in->step);
        snprintf(rank_text, sizeof rank_text, "%d", g);
        snprintf(world_text, sizeof world_text, "%d", sh->world);
        const char *meta[] = {"format", "pt", "model", st_in->model, "step", step_text,
                              "rank", rank_text, "ranks", world_text,
                              "writer", "boost " CKPT_FORMAT " 1 sharded"};
        snprintf(path, sizeof path, "%s/rank-%05d.safetensors", tmp, g);
        uint32_t crc = 0;
        int64_t bytes = 0;
        if (st_write_f32_sum(path, ents, m, meta, (int)(sizeof meta / sizeof meta[0]) / 2,
                             fill_shard, &sf, &crc, &bytes, why, whylen)) {
            rc = 1;
            break;
        }
        vals[2 + 3 * g] = 1;
        vals[3 + 3 * g] = (double)bytes;
        vals[4 + 3 * g] = (double)crc;
        if (sh->rank_bytes) sh->rank_bytes[g] = bytes;
        test_sleep();
    }
    free(list); free(ents); free(names);
    vals[1] = sf.nonfinite;
    return rc;
}

int ckpt_save_sharded(const char *outdir, const CkptState *st_in, const StEntry *canons, int n,
                      const CkptShards *sh, char *saved_dir, size_t saved_len, char *err,
                      size_t errlen) {
    char final[PATH_MAX], tmp[PATH_MAX], old[PATH_MAX], why[2 * CKPT_PATH] = "";
    int multi = sh->nprocs > 1, lead = sh->proc == 0, rc = 0;
    if (!path_ok(outdir, "checkpoint folder", err, errlen)) return 1;
    ckpt_step_dir(outdir, st_in->step, final, sizeof final);
    if (saved_dir) snprintf(saved_dir, saved_len, "%s", final);
    if (multi && !sh->sum) {
        snprintf(err, errlen, "%s: a sharded save over %d processes needs a way to sum over them",
                 final, sh->nprocs);
        return 1;
    }
    // 1. process 0 makes the temporary folder; its pid names it for every process
    if (sharded_tmp_folder(outdir, st_in, sh, final, tmp, old, err, errlen)) return 1;

    // 2. this process's rank files; sizes and CRCs go to process 0 with the barrier
    int nv = 2 + 3 * sh->world;
    double *vals = calloc((size_t)nv, sizeof *vals);
    if (!vals) { snprintf(why, sizeof why, "out of memory"); rc = 1; }
    else {
        rc = write_rank_files(tmp, st_in, canons, sh, vals, why, sizeof why);
        vals[0] = rc;
    }
    if (multi && vals && sh->sum(sh->ctx, vals, nv)) {
        snprintf(why, sizeof why, "the barrier after writing failed");
        rc = 1;
    }
    if (!rc && vals && vals[0] != 0) {
        rc = 1;
        if (!why[0])
            snprintf(why, sizeof why, "%s", vals[1] != 0
                     ? "a parameter holds NaN or inf values (the training diverged)"
                     : "another process failed writing its file (its message says why)");
    }

    // 3. process 0: index.json, state.json, publish
    if (!rc && lead)
        rc = publish_sharded(outdir, tmp, final, old, st_in, canons, n, sh, vals, why, sizeof why);
    if (!rc) data_note_checkpoint(final);
    if (rc && lead) ckpt_remove_tree(tmp);
    // 4. every process learns the outcome
    double done[1] = {rc};
    if (multi && sh->sum(sh->ctx, done, 1)) {
        done[0] = 1;
        if (!why[0])
            snprintf(why, sizeof why, "the sum that tells every process the outcome failed (the "
                     "message above says why)");
    }
    free(vals);
    if (rc || done[0] != 0) {
        snprintf(err, errlen, "%s: checkpoint not written (%s); the temporary folder was removed "
                 "and earlier checkpoints are untouched", final,
                 why[0] ? why : "process 0 could not publish it (its message says why)");
        return 1;
    }
    return 0;
}

/* ---- reading either storage ---- */

typedef struct { char name[128]; int fd; Json *hdr; int64_t data_start, size; } RFile;
typedef struct {
    int file;
    int64_t r0, r1, c0, c1, off;   /* off: byte offset in the file */
} RSlice;
typedef struct { char name[200]; int slot; int64_t rows, cols; int first, nslices; } RTensor;

struct CkptReader {
    char dir[PATH_MAX];
    int sharded;
    int need;   /* CKPT_NEED_*: CKPT_NEED_WEIGHTS leaves optimizer.safetensors unopened */
    RFile *files; int nfiles;
    RTensor *t; int nt, tcap;
    RSlice *s; int ns, scap;
    int64_t bytes_read, bytes_total;
};

void ckpt_reader_close(CkptReader *r) {
    if (!r) return;
    for (int i = 0; i < r->nfiles; i++) {
        if (r->files[i].fd >= 0) close(r->files[i].fd);
        if (r->files[i].hdr) json_free(r->files[i].hdr);
    }
    free(r->files); free(r->t); free(r->s); free(r);
}

int ckpt_reader_sharded(const CkptReader *r) { return r->sharded; }
int ckpt_reader_count(const CkptReader *r) { return r->nt; }
int64_t ckpt_reader_bytes_read(const CkptReader *r) { return r->bytes_read; }
int64_t ckpt_reader_bytes_total(const CkptReader *r) { return r->bytes_total; }

const char *ckpt_reader_tensor(const CkptReader *r, int i, int *slot, int64_t *rows,
                               int64_t *cols) {
    if (i < 0 || i >= r->nt) return NULL;
    if (slot) *slot = r->t[i].slot;
    if (rows) *rows = r->t[i].rows;
    if (cols) *cols = r->t[i].cols;
    return r->t[i].name;
}

int ckpt_reader_find(const CkptReader *r, const char *name, int slot) {
    char full[200];
    snprintf(full, sizeof full, "%s%s", slot_prefix(slot), name);
    for (int i = 0; i < r->nt; i++)
        if (r->t[i].slot == slot && !strcmp(r->t[i].name, full)) return i;
    return -1;
}

/* Open DIR/name and read its safetensors header (the data stays on disk). Index of the file, or -1
 * with "DIR/NAME: what is wrong". */
static int reader_file(CkptReader *r, const char *name, char *err, size_t errlen) {
    for (int i = 0; i < r->nfiles; i++) if (!strcmp(r->files[i].name, name)) return i;
    char path[CKPT_PATH];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    if (!name[0] || name[0] == '.' || strchr(name, '/') ||
        strlen(name) >= sizeof r->files[0].name) {
        snprintf(err, errlen, "%s: a checkpoint file must be a plain file name of its folder",
                 path);
        return -1;
    }
    RFile *nf = realloc(r->files, (size_t)(r->nfiles + 1) * sizeof *nf);
    if (!nf) { snprintf(err, errlen, "%s: out of memory", path); return -1; }
    r->files = nf;
    RFile *f = &r->files[r->nfiles];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->fd = data_open_regular(path, err, errlen);
    if (f->fd < 0) {
        snprintf(err, errlen, "%s: missing or unreadable: %s", path,
                 errno == EINVAL ? "not a regular file" : strerror(errno));
        return -1;
    }
    r->nfiles++;   // from here on closed by ckpt_reader_close
    struct stat sb;
    unsigned char len8[8];
    if (fstat(f->fd, &sb) != 0 || pread(f->fd, len8, 8, 0) != 8) {
        snprintf(err, errlen, "%s: truncated: no safetensors header", path);
        return -1;
    }
    f->size = (int64_t)sb.st_size;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen == 0 || hlen > 100000000ULL || (int64_t)hlen > f->size - 8) {
        snprintf(err, errlen,
                 "%s: not a safetensors file or truncated (header length %llu, file %lld bytes)",
                 path, (unsigned long long)hlen, (long long)f->size);
        return -1;
    }
    char *text = malloc((size_t)hlen);
    if (!text) { snprintf(err, errlen, "%s: out of memory", path); return -1; }
    if (pread(f->fd, text, (size_t)hlen, 8) != (ssize_t)hlen) {
        free(text);
        snprintf(err, errlen, "%s: truncated header", path);
        return -1;
    }
    char jerr[200];
    f->hdr = json_parse(text, (size_t)hlen, jerr, sizeof jerr);
    free(text);
    if (!f->hdr || f->hdr->type != JSON_OBJECT) {
        snprintf(err, errlen, "%s: damaged safetensors header (%s)", path,
                 f->hdr ? "not an object" : jerr);
        return -1;
    }
    f->data_start = 8 + (int64_t)hlen;
    return r->nfiles - 1;
}

/* 0, -1 out of memory, -2 a shape of more than 2^50 elements (or bytes) */
static int add_tensor(CkptReader *r, const char *name, int slot, int64_t rows, int64_t cols) {
    int64_t bytes;
    if (ck_bytes(rows, cols, 4, &bytes)) return -2;
    if (r->nt == r->tcap) {
        int cap = r->tcap ? 2 * r->tcap : 64;
        RTensor *t = realloc(r->t, (size_t)cap * sizeof *t);
        if (!t) return -1;
        r->t = t; r->tcap = cap;
    }
    RTensor *t = &r->t[r->nt++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->slot = slot; t->rows = rows; t->cols = cols; t->first = r->ns; t->nslices = 0;
    return 0;
}

/* Add a slice [r0,r1) x [c0,c1) of the newest tensor, found as `key` in file fi: checked to be F32
 * of the slice's shape, inside the file and inside the tensor. 0, or 2 with a message naming the
 * file. */
static int add_slice(CkptReader *r, int fi, const char *key, int64_t r0, int64_t r1, int64_t c0,
                     int64_t c1, char *err, size_t errlen) {
    RTensor *t = &r->t[r->nt - 1];
    const RFile *f = &r->files[fi];
    char path[CKPT_PATH];
    snprintf(path, sizeof path, "%s/%s", r->dir, f->name);
    if (r0 < 0 || c0 < 0 || r1 <= r0 || c1 <= c0 || r1 > t->rows || c1 > t->cols) {
        snprintf(err, errlen,
                 "%s/%s: tensor %s: the slice rows [%lld, %lld) cols [%lld, %lld) of %s does not "
                 "fit the tensor's %lldx%lld",
                 r->dir, CKPT_INDEX, t->name, (long long)r0, (long long)r1, (long long)c0,
                 (long long)c1, path, (long long)t->rows, (long long)t->cols);
        return 2;
    }
    const Json *e = json_get(f->hdr, key);
    const Json *dt = e ? json_get(e, "dtype") : NULL, *shape = e ? json_get(e, "shape") : NULL,
               *off = e ? json_get(e, "data_offsets") : NULL;
    if (!e) {
        snprintf(err, errlen, "%s: has no tensor '%s' (named by %s/%s): the checkpoint is damaged",
                 path, key, r->dir, CKPT_INDEX);
        return 2;
    }
    int64_t nr = r1 - r0, nc = c1 - c0;
    int shape_ok = shape && shape->type == JSON_ARRAY &&
            ((shape->n == 2 && shape->items[0].num == (double)nr &&
              shape->items[1].num == (double)nc) ||
             (shape->n == 1 && nr == 1 && shape->items[0].num == (double)nc));
    if (!dt || dt->type != JSON_STRING || strcmp(dt->str, "F32") || !shape_ok || !off ||
        off->type != JSON_ARRAY || off->n != 2) {
        snprintf(err, errlen,
                 "%s: tensor '%s' is not F32 of shape [%lld, %lld] as %s/%s says: the slice does "
                 "not fit",
                 path, key, (long long)nr, (long long)nc, r->dir, CKPT_INDEX);
        return 2;
    }
    int64_t b, en, need; /* nr, nc: inside the tensor, whose shape is at most 2^50 elements */
    if (off->items[0].type != JSON_NUMBER || off->items[1].type != JSON_NUMBER ||
        ck_whole(off->items[0].num, &b) || ck_whole(off->items[1].num, &en) ||
        ck_bytes(nr, nc, 4, &need) || en - b != need || ck_span(f->data_start, en, f->size)) {
        snprintf(err, errlen,
                 "%s: tensor '%s': its data_offsets [%.0f, %.0f] do not fit the file (%lld bytes "
                 "of data) or its "
                 "shape: truncated or damaged",
                 path, key, off->items[0].num, off->items[1].num,
                 (long long)(f->size - f->data_start));
        return 2;
    }
    if (r->ns == r->scap) {
        int cap = r->scap ? 2 * r->scap : 256;
        RSlice *s = realloc(r->s, (size_t)cap * sizeof *s);
        if (!s) { snprintf(err, errlen, "out of memory"); return 2; }
        r->s = s; r->scap = cap;
    }
    r->s[r->ns++] = (RSlice){fi, r0, r1, c0, c1, f->data_start + b};
    t->nslices++;
    r->bytes_total += nr * nc * 4;
    return 0;
}

/* The slices of tensor t cover it exactly once: their areas add up and no two overlap. */
static int check_cover(const CkptReader *r, const RTensor *t, char *err, size_t errlen) {
    int64_t area = 0, whole = t->rows * t->cols; /* add_tensor: at most 2^50 */
    for (int i = 0; i < t->nslices; i++) {
        const RSlice *a = &r->s[t->first + i];
        if (ck_add(area, (a->r1 - a->r0) * (a->c1 - a->c0), &area))
            area = INT64_MAX; /* each inside the tensor */
        for (int j = 0; j < i; j++) {
            const RSlice *b = &r->s[t->first + j];
            if (a->r0 < b->r1 && b->r0 < a->r1 && a->c0 < b->c1 && b->c0 < a->c1) {
                snprintf(err, errlen, "%s/%s: tensor %s: slices in %s and %s overlap", r->dir,
                         CKPT_INDEX, t->name, r->files[a->file].name, r->files[b->file].name);
                return 2;
            }
        }
    }
    if (area != whole) {
        snprintf(
            err, errlen,
            "%s/%s: tensor %s: its slices hold %lld of its %lld elements: the index is damaged",
            r->dir, CKPT_INDEX, t->name, (long long)area, (long long)whole);
        return 2;
    }
    return 0;
}

static int json_int(const Json *v, int64_t *out) {
    return v && v->type == JSON_NUMBER && ck_whole(v->num, out) == 0;
}

static int open_sharded(CkptReader *r, char *err, size_t errlen) {
    char path[CKPT_PATH];
    snprintf(path, sizeof path, "%s/%s", r->dir, CKPT_INDEX);
    char why[CKPT_PATH + 128];
    FILE *f = data_open_regular_stream(path, why, sizeof why);
    if (!f) {
        snprintf(err, errlen, "%s (state.json says the checkpoint is sharded)", why);
        return 2;
    }
    size_t len = 0;
    char *text = file_read_stream(f, path, (size_t)1 << 30, &len, err, errlen);
    fclose(f);
    if (!text) return 2;
    char jerr[200];
    Json *root = json_parse(text ? text : "", len, jerr, sizeof jerr);
    free(text);
    if (!root) { snprintf(err, errlen, "%s: damaged or truncated (%s)", path, jerr); return 2; }
    const Json *fmt = json_get(root, "format"), *tensors = json_get(root, "tensors");
    if (!fmt || fmt->type != JSON_STRING || strcmp(fmt->str, CKPT_INDEX_FORMAT) || !tensors ||
        tensors->type != JSON_OBJECT) {
        snprintf(err, errlen,
                 "%s: not a checkpoint index (needs \"format\": \"%s\" and \"tensors\")", path,
                 CKPT_INDEX_FORMAT);
        json_free(root); return 2;
    }
    int rc = 0;
    for (int i = 0; !rc && i < tensors->n; i++) {
        const char *name = tensors->keys[i];
        const Json *e = &tensors->items[i], *kind = json_get(e, "kind"),
                   *shape = json_get(e, "shape"), *sl = json_get(e, "slices");
        int64_t rows, cols;
        int slot = !kind || kind->type != JSON_STRING ? -1
                : !strcmp(kind->str, "param")         ? 0
                : !strcmp(kind->str, "adam_m")        ? 1
                : !strcmp(kind->str, "adam_v")        ? 2
                                                      : -1;
        if (slot < 0 || !shape || shape->type != JSON_ARRAY || shape->n != 2 ||
            !json_int(&shape->items[0], &rows) || !json_int(&shape->items[1], &cols) || !sl ||
            sl->type != JSON_ARRAY) {
            snprintf(err, errlen,
                     "%s: tensor %s: needs kind (param, adam_m, adam_v), shape [rows, cols] and "
                     "slices",
                     path, name);
            rc = 2; break;
        }
        int at = add_tensor(r, name, slot, rows, cols);
        if (at) {
            if (at == -1)
                snprintf(err, errlen, "out of memory");
            else
                snprintf(err, errlen,
                         "%s: tensor %s: shape [%lld, %lld] holds more than 2^50 bytes: the index "
                         "is damaged",
                         path, name, (long long)rows, (long long)cols);
            rc = 2;
            break;
        }
        for (int k = 0; !rc && k < sl->n; k++) {
            const Json *s = &sl->items[k], *file = json_get(s, "file"), *key = json_get(s, "key"),
                       *rr = json_get(s, "rows"), *cc = json_get(s, "cols");
            int64_t r0, r1, c0, c1;
            if (!file || file->type != JSON_STRING || !key || key->type != JSON_STRING || !rr ||
                rr->type != JSON_ARRAY || rr->n != 2 || !cc || cc->type != JSON_ARRAY ||
                cc->n != 2 || !json_int(&rr->items[0], &r0) || !json_int(&rr->items[1], &r1) ||
                !json_int(&cc->items[0], &c0) || !json_int(&cc->items[1], &c1)) {
                snprintf(err, errlen,
                         "%s: tensor %s: slice %d needs file, key, rows [a, b] and cols [a, b]",
                         path, name, k);
                rc = 2; break;
            }
            int fi = reader_file(r, file->str, err, errlen);
            if (fi < 0) { rc = 2; break; }
            rc = add_slice(r, fi, key->str, r0, r1, c0, c1, err, errlen);
        }
        if (!rc) rc = check_cover(r, &r->t[r->nt - 1], err, errlen);
    }
    json_free(root);
    return rc;
}

/* A full checkpoint: each tensor of model.safetensors and optimizer.safetensors is one slice. */
static int open_full(CkptReader *r, char *err, size_t errlen) {
    const char *names[2] = {"model.safetensors", "optimizer.safetensors"};
    for (int k = 0; k < 2; k++) {
        if (unneeded(names[k], r->need)) continue;
        int fi = reader_file(r, names[k], err, errlen);
        if (fi < 0) return 2;
        const Json *h = r->files[fi].hdr;
        for (int i = 0; i < h->n; i++) {
            const char *name = h->keys[i];
            if (!strcmp(name, "__metadata__")) continue;
            const Json *shape = json_get(&h->items[i], "shape");
            int64_t rows = 1, cols = 0;
            int ok = shape && shape->type == JSON_ARRAY &&
                    ((shape->n == 2 && json_int(&shape->items[0], &rows) &&
                      json_int(&shape->items[1], &cols)) ||
                     (shape->n == 1 && json_int(&shape->items[0], &cols)));
            int slot = k == 0 ? 0 : !strncmp(name, "m.", 2) ? 1 : !strncmp(name, "v.", 2) ? 2 : -1;
            if (!ok || slot < 0) {
                snprintf(err, errlen, "%s/%s: tensor '%s' is not a 1-D or 2-D %s", r->dir, names[k],
                         name, k ? "AdamW moment (m.NAME or v.NAME)" : "parameter");
                return 2;
            }
            int at = add_tensor(r, name, slot, rows, cols);
            if (at) {
                snprintf(err, errlen,
                         at == -1 ? "out of memory"
                                  : "%s/%s: tensor '%s': its shape holds more than 2^50 bytes",
                         r->dir, names[k], name);
                return 2;
            }
            int rc = add_slice(r, fi, name, 0, rows, 0, cols, err, errlen);
            if (rc) return rc;
        }
    }
    return 0;
}

int ckpt_reader_open(const char *dir, const StEntry *canons, int n, CkptReader **out, char *err,
                     size_t errlen) {
    return reader_open(dir, canons, n, CKPT_NEED_ALL, out, err, errlen);
}

int ckpt_reader_open_weights(const char *dir, CkptReader **out, char *err, size_t errlen) {
    return reader_open(dir, NULL, 0, CKPT_NEED_WEIGHTS, out, err, errlen);
}

static int reader_open(const char *dir, const StEntry *canons, int n, int need, CkptReader **out,
                       char *err, size_t errlen) {
    *out = NULL;
    if (!path_ok(dir, "checkpoint folder", err, errlen)) return 2;
    CkptReader *r = calloc(1, sizeof *r);
    if (!r) { snprintf(err, errlen, "out of memory"); return 2; }
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    r->need = need;
    char probe[CKPT_PATH];
    snprintf(probe, sizeof probe, "%s/%s", dir, CKPT_INDEX);
    r->sharded = access(probe, F_OK) == 0;
    int rc = r->sharded ? open_sharded(r, err, errlen) : open_full(r, err, errlen);
    for (int c = 0; !rc && c < n; c++)
        for (int slot = 0; slot < 3 && !rc; slot++) {
            int i = ckpt_reader_find(r, canons[c].name, slot);
            const char *file = r->sharded ? CKPT_INDEX
                    : slot                ? "optimizer.safetensors"
                                          : "model.safetensors";
            if (i < 0) {
                snprintf(err, errlen,
                         "%s/%s: tensor '%s%s' is missing: a checkpoint of another model?", dir,
                         file, slot_prefix(slot), canons[c].name);
                rc = 2;
            } else if (r->t[i].rows != canons[c].rows || r->t[i].cols != canons[c].cols) {
                snprintf(err, errlen,
                         "%s/%s: tensor '%s' has another shape (%lldx%lld) than the model's "
                         "%lldx%lld: a checkpoint of another model?",
                         dir, file, r->t[i].name, (long long)r->t[i].rows, (long long)r->t[i].cols,
                         (long long)canons[c].rows, (long long)canons[c].cols);
                rc = 2;
            }
        }
    if (rc) { ckpt_reader_close(r); return rc; }
    *out = r;
    return 0;
}

static int pread_all(int fd, void *buf, size_t n, int64_t off) {
    char *p = buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got <= 0) {
            if (got < 0 && errno == EINTR) continue;
            if (got == 0) errno = EIO;
            return -1;
        }
        p += got; n -= (size_t)got; off += got;
    }
    return 0;
}

int ckpt_reader_read(CkptReader *r, int i, const CkptRegion *need, int nneed, float *out, char *err,
                     size_t errlen) {
    if (i < 0 || i >= r->nt) {
        snprintf(err, errlen, "ckpt_reader_read: no tensor %d", i);
        return 2;
    }
    const RTensor *t = &r->t[i];
    CkptRegion all = {0, t->rows, 0, t->cols};
    if (!need) { need = &all; nneed = 1; }
    for (int k = 0; k < t->nslices; k++) {
        const RSlice *s = &r->s[t->first + k];
        const RFile *f = &r->files[s->file];
        int64_t sc = s->c1 - s->c0;
        for (int j = 0; j < nneed; j++) {
            int64_t a = need[j].r0 > s->r0 ? need[j].r0 : s->r0,
                    b = need[j].r1 < s->r1 ? need[j].r1 : s->r1;
            int64_t c = need[j].c0 > s->c0 ? need[j].c0 : s->c0,
                    d = need[j].c1 < s->c1 ? need[j].c1 : s->c1;
            if (a >= b || c >= d) continue;
            int rc = 0;
            // whole rows on both sides: one read
            if (c == s->c0 && d == s->c1 && s->c0 == 0 && s->c1 == t->cols)
                rc = pread_all(f->fd, out + a * t->cols, (size_t)((b - a) * sc) * sizeof(float),
                               s->off + (a - s->r0) * sc * 4);
            else
                for (int64_t row = a; row < b && !rc; row++)
                    rc = pread_all(f->fd, out + row * t->cols + c, (size_t)(d - c) * sizeof(float),
                                   s->off + ((row - s->r0) * sc + (c - s->c0)) * 4);
            if (rc) {
                snprintf(err, errlen, "%s/%s: read failed: %s", r->dir, f->name, strerror(errno));
                return 2;
            }
            r->bytes_read += (b - a) * (d - c) * 4;
        }
    }
    return 0;
}

/* A sharded folder's index: it opens (files, keys, slices, cover) and names only files that
 * state.json records (so the checksums cover everything a resume reads). */
static int verify_index(const char *dir, const CkptState *st, char *err, size_t errlen) {
    CkptReader *r;
    if (ckpt_reader_open(dir, NULL, 0, &r, err, errlen)) return CKPT_DAMAGED;
    int rc = CKPT_VERIFIED;
    for (int i = 0; rc == CKPT_VERIFIED && i < r->nfiles; i++) {
        int recorded = 0;
        for (int k = 0; k < st->nfiles; k++)
            recorded |= !strcmp(st->files[k].name, r->files[i].name);
        if (!recorded) {
            snprintf(err, errlen,
                     "%s/%s: names %s, which state.json does not record: the index is damaged", dir,
                     CKPT_INDEX, r->files[i].name);
            rc = CKPT_DAMAGED;
        }
    }
    ckpt_reader_close(r);
    return rc;
}

/* The tensors against the model state.json describes: as many parameters as its "canons", their
 * names and whole shapes giving its fingerprint, and each AdamW moment of its parameter's shape. */
int ckpt_reader_check_model(const CkptReader *r, const CkptState *st, char *err, size_t errlen) {
    StEntry *ents = calloc((size_t)r->nt + 1, sizeof *ents);
    if (!ents) {
        snprintf(err, errlen, "out of memory");
        return 2;
    }
    int n = 0, rc = 0;
    for (int i = 0; i < r->nt; i++)
        if (r->t[i].slot == 0) ents[n++] = (StEntry){r->t[i].name, r->t[i].rows, r->t[i].cols};
    const char *file = r->sharded ? CKPT_INDEX : "model.safetensors";
    if (n != st->ncanons || ckpt_fingerprint(ents, n) != st->fingerprint) {
        snprintf(err, errlen,
                 "%s/%s: its %d parameters (names and shapes) are not the model state.json "
                 "describes (%d "
                 "parameters, fingerprint 0x%016llx): the checkpoint is damaged",
                 r->dir, file, n, st->ncanons, (unsigned long long)st->fingerprint);
        rc = 2;
    }
    for (int i = 0; !rc && i < r->nt; i++) {
        if (r->t[i].slot == 0) continue;
        int p = ckpt_reader_find(r, r->t[i].name + 2, 0);
        if (p < 0 || r->t[p].rows != r->t[i].rows || r->t[p].cols != r->t[i].cols) {
            snprintf(err, errlen,
                     "%s/%s: AdamW moment '%s' has no parameter of its shape (%lldx%lld): the "
                     "checkpoint is "
                     "damaged",
                     r->dir, r->sharded ? CKPT_INDEX : "optimizer.safetensors", r->t[i].name,
                     (long long)r->t[i].rows, (long long)r->t[i].cols);
            rc = 2;
        }
    }
    free(ents);
    return rc;
}

static int verify_model(const char *dir, const CkptState *st, int need, char *err, size_t errlen) {
    CkptReader *r;
    if (reader_open(dir, NULL, 0, need, &r, err, errlen)) return CKPT_DAMAGED;
    int rc = ckpt_reader_check_model(r, st, err, errlen) ? CKPT_DAMAGED : CKPT_VERIFIED;
    ckpt_reader_close(r);
    return rc;
}
