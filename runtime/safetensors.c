/* safetensors.c: writes F32 safetensors files (the format PyTorch's safetensors loader reads) and
 * reads them back with checks on every length and offset; the header's JSON is read by
 * common/json.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/safetensors.h"   // defines: StEntry, StFile, st_*
#include "common/crc32c.h"        // defines: crc32c_update
#include "common/checked.h"        // defines: ck_numel, ck_whole, ck_span

/* ------------------------------------------------------------------ writing */

int st_write_f32(const char *path, const StEntry *entries, int n, const char *const *meta,
                 int nmeta, StFillFn fill, void *ctx, char *err, size_t errlen) {
    return st_write_f32_sum(path, entries, n, meta, nmeta, fill, ctx, NULL, NULL, err, errlen);
}

int st_write_f32_sum(const char *path, const StEntry *entries, int n, const char *const *meta,
                     int nmeta, StFillFn fill, void *ctx, uint32_t *crc, int64_t *bytes, char *err,
                     size_t errlen) {
    // the header: built in memory first (its length goes before it)
    char *header = NULL;
    size_t header_len = 0;
    FILE *h = open_memstream(&header, &header_len);
    if (!h) { snprintf(err, errlen, "%s: out of memory", path); return 1; }
    fputc('{', h);
    if (nmeta > 0) {
        fputs("\"__metadata__\":{", h);
        for (int i = 0; i < nmeta; i++) {
            if (i) fputc(',', h);
            json_write_string(h, meta[2 * i]);
            fputc(':', h);
            json_write_string(h, meta[2 * i + 1]);
        }
        fputc('}', h);
    }
    int64_t offset = 0, largest = 0;
    for (int i = 0; i < n; i++) {
        int64_t bytes = entries[i].rows * entries[i].cols * 4;
        if (nmeta > 0 || i) fputc(',', h);
        json_write_string(h, entries[i].name);
        fprintf(h, ":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[%lld,%lld]}",
                (long long)entries[i].rows, (long long)entries[i].cols, (long long)offset,
                (long long)(offset + bytes));
        offset += bytes;
        if (bytes > largest) largest = bytes;
    }
    fputc('}', h);
    while ((ftell(h) % 8) != 0) fputc(' ', h);   // pad so the data section starts 8-byte aligned
    fclose(h);

    float *buf = malloc(largest > 0 ? (size_t)largest : 4);
    FILE *f = buf ? fopen(path, "wb") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path,
                 buf ? strerror(errno) : "out of memory");
        free(header); free(buf); return 1;
    }
    unsigned char len_le[8];
    for (int i = 0; i < 8; i++) len_le[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    int ok = fwrite(len_le, 8, 1, f) == 1 && fwrite(header, header_len, 1, f) == 1;
    int saved_errno = errno;
    uint32_t sum = crc32c_update(crc32c_update(0, len_le, 8), header, header_len);
    int64_t written = 8 + (int64_t)header_len;
    const char *why = NULL;
    for (int i = 0; ok && i < n; i++) {
        size_t count = (size_t)(entries[i].rows * entries[i].cols);
        if (fill(ctx, i, buf) != 0) { ok = 0; why = "could not read the tensor"; break; }
        // x86-64 floats are little-endian already
        ok = count == 0 || fwrite(buf, 4 * count, 1, f) == 1;
        if (!ok) saved_errno = errno;
        sum = crc32c_update(sum, buf, 4 * count);
        written += 4 * (int64_t)count;
    }
    if (ok && fflush(f) != 0) { ok = 0; saved_errno = errno; }
    if (ok && fsync(fileno(f)) != 0) { ok = 0; saved_errno = errno; }
    if (fclose(f) != 0 && ok) { ok = 0; saved_errno = errno; }
    free(header);
    free(buf);
    if (!ok) {
        if (why) snprintf(err, errlen, "%s: %s", path, why);
        else
            snprintf(err, errlen, "%s: write failed: %s", path,
                     strerror(saved_errno ? saved_errno : EIO));
        remove(path);
        return 1;
    }
    if (crc) *crc = sum;
    if (bytes) *bytes = written;
    return 0;
}

/* ------------------------------------------------------------------ reading */

static int dtype_size(const char *dtype) {
    static const struct { const char *name; int size;
    } sizes[] = {
        {"F64",     8},
        {"F32",     4},
        {"F16",     2},
        {"BF16",    2},
        {"I64",     8},
        {"I32",     4},
        {"I16",     2},
        {"I8",      1},
        {"U8",      1},
        {"BOOL",    1},
        {"U16",     2},
        {"U32",     4},
        {"U64",     8},
        {"F8_E4M3", 1},
        {"F8_E5M2", 1},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(dtype, sizes[i].name)) return sizes[i].size;
    return 0;
}

int64_t st_numel(const StTensor *t) {
    int64_t n = 0;
    return ck_numel(t->shape, t->ndim, &n) ? -1
                                           : n; // st_open refused shapes whose count does not fit
}

void st_close(StFile *f) {
    for (int i = 0; i < f->ntensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    json_free(f->header);
    free(f->data);
    memset(f, 0, sizeof *f);
}

static int st_fail(StFile *f, char *err, size_t errlen) {
    (void)err; (void)errlen;
    st_close(f);
    return 2;
}

/* Read path's header text (malloc'd into *text, hlen bytes) and its data section (into f->data,
 * f->data_len). 0, or 2 with "PATH: what is wrong" in err and f closed. */
static int st_read_file(const char *path, StFile *f, char **text, uint64_t *hlen, char *err,
                        size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 2; }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        fclose(fp);
        return 2;
    }
    int64_t size = st.st_size;
    unsigned char len_le[8];
    if (size < 8 || fread(len_le, 8, 1, fp) != 1) {
        snprintf(err, errlen, "%s: truncated: %lld bytes, not a safetensors file", path,
                 (long long)size);
        fclose(fp); return 2;
    }
    *hlen = 0;
    for (int i = 0; i < 8; i++) *hlen |= (uint64_t)len_le[i] << (8 * i);
    if (*hlen < 2 || *hlen > 100000000 || (int64_t)*hlen > size - 8) {
        snprintf(err, errlen, "%s: header length %llu does not fit the %lld-byte file: truncated "
                 "or not a safetensors file", path, (unsigned long long)*hlen, (long long)size);
        fclose(fp); return 2;
    }
    *text = malloc(*hlen);
    f->data_len = size - 8 - (int64_t)*hlen;
    f->data = malloc(f->data_len > 0 ? (size_t)f->data_len : 1);
    if (!*text || !f->data) {
        snprintf(err, errlen, "%s: out of memory", path);
        free(*text); fclose(fp); return st_fail(f, err, errlen);
    }
    if (fread(*text, *hlen, 1, fp) != 1 ||
        (f->data_len > 0 && fread(f->data, (size_t)f->data_len, 1, fp) != 1)) {
        snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
        free(*text); fclose(fp); return st_fail(f, err, errlen);
    }
    fclose(fp);
    return 0;
}

/* Tensor t (its name set) from its header entry v: dtype, shape and data_offsets, checked against
 * each other and against the data section's data_len bytes. 0, or 2 with the message in err. */
static int st_tensor_entry(const char *path, const Json *v, int64_t data_len, StTensor *t,
                           char *err, size_t errlen) {
    const char *name = t->name;
    const Json *dt = json_get(v, "dtype"), *shape = json_get(v, "shape");
    const Json *off = json_get(v, "data_offsets");
    if (!dt || dt->type != JSON_STRING || !shape || shape->type != JSON_ARRAY || shape->n > 8 ||
        !off || off->type != JSON_ARRAY || off->n != 2) {
        snprintf(err, errlen, "%s: tensor '%s': needs dtype, shape (at most 8 dims) and "
                 "data_offsets [begin, end]", path, name);
        return 2;
    }
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->str);
    int esize = dtype_size(t->dtype);
    if (!esize) {
        snprintf(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, name, dt->str);
        return 2;
    }
    t->ndim = shape->n;
    for (int d = 0; d < shape->n; d++) {
        if (shape->items[d].type != JSON_NUMBER ||
            ck_whole(shape->items[d].num, &t->shape[d])) {
            snprintf(err, errlen,
                     "%s: tensor '%s': shape item %d is not a whole number of at most 2^50",
                     path, name, d);
            return 2;
        }
    }
    int64_t numel, need;
    if (ck_numel(t->shape, t->ndim, &numel) || ck_mul(numel, esize, &need)) {
        snprintf(err, errlen, "%s: tensor '%s': its shape holds more than 2^50 elements", path,
                 name);
        return 2;
    }
    if (off->items[0].type != JSON_NUMBER || off->items[1].type != JSON_NUMBER ||
        ck_whole(off->items[0].num, &t->begin) || ck_whole(off->items[1].num, &t->end) ||
        t->end < t->begin) {
        snprintf(err, errlen,
                 "%s: tensor '%s': data_offsets must be two whole numbers [begin, end] with "
                 "begin <= end",
                 path, name);
        return 2;
    }
    if (t->end - t->begin != need) {
        snprintf(err, errlen,
                 "%s: tensor '%s': data_offsets span %lld bytes, its shape needs %lld", path,
                 name, (long long)(t->end - t->begin), (long long)need);
        return 2;
    }
    if (t->end > data_len) {
        snprintf(err, errlen, "%s: truncated: tensor '%s' ends at byte %lld of a %lld-byte data "
                 "section", path, name, (long long)t->end, (long long)data_len);
        return 2;
    }
    return 0;
}

int st_open(const char *path, StFile *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    char *text = NULL;
    uint64_t hlen;
    int rc = st_read_file(path, f, &text, &hlen, err, errlen);
    if (rc) return rc;
    char jerr[200];
    f->header = json_parse(text, hlen, jerr, sizeof jerr);
    free(text);
    if (!f->header || f->header->type != JSON_OBJECT) {
        snprintf(err, errlen, "%s: the header is not a JSON object (%s): not a safetensors file or "
                 "damaged", path, f->header ? "another JSON value" : jerr);
        return st_fail(f, err, errlen);
    }
    const Json *h = f->header;
    f->tensors = calloc((size_t)h->n + 1, sizeof(StTensor));
    if (!f->tensors) {
        snprintf(err, errlen, "%s: out of memory", path);
        return st_fail(f, err, errlen);
    }
    for (int i = 0; i < h->n; i++) {
        const char *name = h->keys[i];
        const Json *v = &h->items[i];
        if (!strcmp(name, "__metadata__")) {
            int good = v->type == JSON_OBJECT;
            for (int k = 0; good && k < v->n; k++) good = v->items[k].type == JSON_STRING;
            if (!good) {
                snprintf(err, errlen, "%s: __metadata__ must map strings to strings", path);
                return st_fail(f, err, errlen);
            }
            continue;
        }
        StTensor *t = &f->tensors[f->ntensors];
        t->name = strdup(name);
        if (!t->name) {
            snprintf(err, errlen, "%s: out of memory", path);
            return st_fail(f, err, errlen);
        }
        f->ntensors++;
        if (st_tensor_entry(path, v, f->data_len, t, err, errlen)) return st_fail(f, err, errlen);
    }
    return 0;
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->ntensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key) {
    const Json *m = json_get(json_get(f->header, "__metadata__"), key);
    return m && m->type == JSON_STRING ? m->str : NULL;
}

void st_read_f32(const StFile *f, const StTensor *t, float *out) {
    memcpy(out, f->data + t->begin, (size_t)(t->end - t->begin));
}
