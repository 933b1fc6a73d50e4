/* safetensors.c: writes F32 safetensors files (the format PyTorch's safetensors loader reads) and
 * reads them back with checks on every length and offset; includes the small JSON parser used for
 * the header and for checkpoints' state.json. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/safetensors.h"   // defines: Json, json_*, StEntry, StFile, st_*
#include "common/crc32c.h"        // defines: crc32c_update
#include "common/checked.h"        // defines: ck_numel, ck_whole, ck_span

/* ------------------------------------------------------------------ JSON */

typedef struct { const char *s; size_t len, pos; char *err; size_t errlen; int failed; } JsonParser;

static void jfail(JsonParser *p, const char *what) {
    if (!p->failed) snprintf(p->err, p->errlen, "byte %zu: %s", p->pos, what);
    p->failed = 1;
}

static void jspace(JsonParser *p) {
    while (p->pos < p->len && strchr(" \t\r\n", p->s[p->pos]) && p->s[p->pos]) p->pos++;
}

static int jliteral(JsonParser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos >= n && !memcmp(p->s + p->pos, word, n)) { p->pos += n; return 1; }
    return 0;
}

static void put_utf8(char *out, size_t *o, unsigned cp) {
    if (cp < 0x80) out[(*o)++] = (char)cp;
    else if (cp < 0x800) { out[(*o)++] = (char)(0xc0 | cp >> 6); out[(*o)++] = (char)(0x80 | (cp & 63)); }
    else if (cp < 0x10000) {
        out[(*o)++] = (char)(0xe0 | cp >> 12); out[(*o)++] = (char)(0x80 | ((cp >> 6) & 63));
        out[(*o)++] = (char)(0x80 | (cp & 63));
    } else {
        out[(*o)++] = (char)(0xf0 | cp >> 18); out[(*o)++] = (char)(0x80 | ((cp >> 12) & 63));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 63)); out[(*o)++] = (char)(0x80 | (cp & 63));
    }
}

static int hex4(const char *s, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 99;
        if (d > 15) return 0;
        *v = *v * 16 + d;
    }
    return 1;
}

static char *jstring(JsonParser *p) {
    if (p->pos >= p->len || p->s[p->pos] != '"') { jfail(p, "expected a string"); return NULL; }
    p->pos++;
    size_t start = p->pos;
    while (p->pos < p->len && p->s[p->pos] != '"') p->pos += p->s[p->pos] == '\\' ? 2 : 1;
    if (p->pos >= p->len) { jfail(p, "unterminated string"); return NULL; }
    size_t end = p->pos++;
    char *out = malloc(end - start + 1);
    if (!out) { jfail(p, "out of memory"); return NULL; }
    size_t o = 0;
    for (size_t i = start; i < end; i++) {
        unsigned char c = (unsigned char)p->s[i];
        if (c < 0x20) { p->pos = i; jfail(p, "control character in a string"); free(out); return NULL; }
        if (c != '\\') { out[o++] = (char)c; continue; }
        char e = p->s[++i];
        switch (e) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (end - i < 5 || !hex4(p->s + i + 1, &cp)) { p->pos = i; jfail(p, "bad \\u escape"); free(out); return NULL; }
            i += 4;
            unsigned lo;   // a surrogate pair (\ud83d\ude00) is one character: 4 bytes for 12
            if (cp >= 0xD800 && cp < 0xDC00 && end - i >= 7 && p->s[i + 1] == '\\' && p->s[i + 2] == 'u' &&
                hex4(p->s + i + 3, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            // a \u escape is at most 3 UTF-8 bytes for 6 source bytes, so the buffer is large enough
            put_utf8(out, &o, cp);
            break;
        }
        default: p->pos = i; jfail(p, "bad escape in a string"); free(out); return NULL;
        }
    }
    out[o] = 0;
    return out;
}

static void jvalue(JsonParser *p, Json *v, int depth);

static void jcontainer(JsonParser *p, Json *v, int depth, int object) {
    char close = object ? '}' : ']';
    p->pos++;
    int cap = 0;
    jspace(p);
    if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return; }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? 2 * cap : 8;
            // each block is owned by v as soon as realloc returns it: a failure of the second
            // realloc leaves both valid for json_free (freeing the new items here freed them twice)
            Json *items = realloc(v->items, (size_t)cap * sizeof(Json));
            if (!items) {
                jfail(p, "out of memory");
                return;
            }
            v->items = items;
            if (object) {
                char **keys = realloc(v->keys, (size_t)cap * sizeof(char *));
                if (!keys) {
                    jfail(p, "out of memory");
                    return;
                }
                v->keys = keys;
            }
        }
        jspace(p);
        if (object) {
            char *key = jstring(p);
            if (!key) return;
            v->keys[v->n] = key;
            jspace(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') { memset(&v->items[v->n], 0, sizeof(Json)); v->n++; jfail(p, "expected ':'"); return; }
            p->pos++;
        }
        memset(&v->items[v->n], 0, sizeof(Json));
        v->n++;
        jvalue(p, &v->items[v->n - 1], depth + 1);
        if (p->failed) return;
        jspace(p);
        if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return; }
        jfail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
        return;
    }
}

static void jvalue(JsonParser *p, Json *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > 64) { jfail(p, "nested too deeply"); return; }
    jspace(p);
    if (p->pos >= p->len) { jfail(p, "unexpected end"); return; }
    char c = p->s[p->pos];
    if (c == '{') { v->type = JSON_OBJECT; jcontainer(p, v, depth, 1); }
    else if (c == '[') { v->type = JSON_ARRAY; jcontainer(p, v, depth, 0); }
    else if (c == '"') { v->type = JSON_STRING; v->str = jstring(p); }
    else if (jliteral(p, "true")) { v->type = JSON_BOOL; v->num = 1; }
    else if (jliteral(p, "false")) { v->type = JSON_BOOL; v->num = 0; }
    else if (jliteral(p, "null")) { v->type = JSON_NULL; }
    else if (c == '-' || (c >= '0' && c <= '9')) {
        char buf[64];
        size_t n = 0;
        while (p->pos + n < p->len && n < sizeof buf - 1 && strchr("+-.eE0123456789", p->s[p->pos + n]) && p->s[p->pos + n])
            n++;
        memcpy(buf, p->s + p->pos, n);
        buf[n] = 0;
        char *end;
        v->type = JSON_NUMBER;
        v->num = strtod(buf, &end);
        if (end != buf + n || n == 0) { jfail(p, "bad number"); return; }
        p->pos += n;
    } else jfail(p, "unexpected character");
}

static void json_free_inner(Json *j) {
    if (j->type == JSON_STRING) free(j->str);
    if (j->type == JSON_ARRAY || j->type == JSON_OBJECT) {
        for (int i = 0; i < j->n; i++) {
            json_free_inner(&j->items[i]);
            if (j->keys) free(j->keys[i]);
        }
        free(j->items);
        free(j->keys);
    }
}

void json_free(Json *j) {
    if (!j) return;
    json_free_inner(j);
    free(j);
}

Json *json_parse(const char *text, size_t len, char *err, size_t errlen) {
    JsonParser p = {text, len, 0, err, errlen, 0};
    Json *root = calloc(1, sizeof *root);
    if (!root) { snprintf(err, errlen, "out of memory"); return NULL; }
    jvalue(&p, root, 0);
    if (!p.failed) {
        jspace(&p);
        if (p.pos != len) jfail(&p, "text after the JSON value");
    }
    if (p.failed) { json_free(root); return NULL; }
    return root;
}

const Json *json_get(const Json *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) return &obj->items[i];
    return NULL;
}

void json_write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c == '\n') fputs("\\n", f);
        else if (*c == '\t') fputs("\\t", f);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

/* ------------------------------------------------------------------ writing */

int st_write_f32(const char *path, const StEntry *entries, int n, const char *const *meta, int nmeta,
                 StFillFn fill, void *ctx, char *err, size_t errlen) {
    return st_write_f32_sum(path, entries, n, meta, nmeta, fill, ctx, NULL, NULL, err, errlen);
}

int st_write_f32_sum(const char *path, const StEntry *entries, int n, const char *const *meta, int nmeta,
                     StFillFn fill, void *ctx, uint32_t *crc, int64_t *bytes, char *err, size_t errlen) {
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
                (long long)entries[i].rows, (long long)entries[i].cols, (long long)offset, (long long)(offset + bytes));
        offset += bytes;
        if (bytes > largest) largest = bytes;
    }
    fputc('}', h);
    while ((ftell(h) % 8) != 0) fputc(' ', h);   // pad so the data section starts 8-byte aligned
    fclose(h);

    float *buf = malloc(largest > 0 ? (size_t)largest : 4);
    FILE *f = buf ? fopen(path, "wb") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, buf ? strerror(errno) : "out of memory");
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
        ok = count == 0 || fwrite(buf, 4 * count, 1, f) == 1;   // x86-64 floats are little-endian already
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
        else snprintf(err, errlen, "%s: write failed: %s", path, strerror(saved_errno ? saved_errno : EIO));
        remove(path);
        return 1;
    }
    if (crc) *crc = sum;
    if (bytes) *bytes = written;
    return 0;
}

/* ------------------------------------------------------------------ reading */

static int dtype_size(const char *dtype) {
    static const struct { const char *name; int size; } sizes[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U8", 1}, {"BOOL", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
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

int st_open(const char *path, StFile *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    FILE *fp = fopen(path, "rb");
    if (!fp) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 2; }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) { snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno)); fclose(fp); return 2; }
    int64_t size = st.st_size;
    unsigned char len_le[8];
    if (size < 8 || fread(len_le, 8, 1, fp) != 1) {
        snprintf(err, errlen, "%s: truncated: %lld bytes, not a safetensors file", path, (long long)size);
        fclose(fp); return 2;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)len_le[i] << (8 * i);
    if (hlen < 2 || hlen > 100000000 || (int64_t)hlen > size - 8) {
        snprintf(err, errlen, "%s: header length %llu does not fit the %lld-byte file: truncated or not a safetensors file",
                 path, (unsigned long long)hlen, (long long)size);
        fclose(fp); return 2;
    }
    char *text = malloc(hlen);
    f->data_len = size - 8 - (int64_t)hlen;
    f->data = malloc(f->data_len > 0 ? (size_t)f->data_len : 1);
    if (!text || !f->data) { snprintf(err, errlen, "%s: out of memory", path); free(text); fclose(fp); return st_fail(f, err, errlen); }
    if (fread(text, hlen, 1, fp) != 1 || (f->data_len > 0 && fread(f->data, (size_t)f->data_len, 1, fp) != 1)) {
        snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
        free(text); fclose(fp); return st_fail(f, err, errlen);
    }
    fclose(fp);
    char jerr[200];
    f->header = json_parse(text, hlen, jerr, sizeof jerr);
    free(text);
    if (!f->header || f->header->type != JSON_OBJECT) {
        snprintf(err, errlen, "%s: the header is not a JSON object (%s): not a safetensors file or damaged", path,
                 f->header ? "another JSON value" : jerr);
        return st_fail(f, err, errlen);
    }
    const Json *h = f->header;
    f->tensors = calloc((size_t)h->n + 1, sizeof(StTensor));
    if (!f->tensors) { snprintf(err, errlen, "%s: out of memory", path); return st_fail(f, err, errlen); }
    for (int i = 0; i < h->n; i++) {
        const char *name = h->keys[i];
        const Json *v = &h->items[i];
        if (!strcmp(name, "__metadata__")) {
            int good = v->type == JSON_OBJECT;
            for (int k = 0; good && k < v->n; k++) good = v->items[k].type == JSON_STRING;
            if (!good) { snprintf(err, errlen, "%s: __metadata__ must map strings to strings", path); return st_fail(f, err, errlen); }
            continue;
        }
        const Json *dt = json_get(v, "dtype"), *shape = json_get(v, "shape"), *off = json_get(v, "data_offsets");
        if (!dt || dt->type != JSON_STRING || !shape || shape->type != JSON_ARRAY || shape->n > 8 ||
            !off || off->type != JSON_ARRAY || off->n != 2) {
            snprintf(err, errlen, "%s: tensor '%s': needs dtype, shape (at most 8 dims) and data_offsets [begin, end]", path, name);
            return st_fail(f, err, errlen);
        }
        StTensor *t = &f->tensors[f->ntensors];
        t->name = strdup(name);
        if (!t->name) {
            snprintf(err, errlen, "%s: out of memory", path);
            return st_fail(f, err, errlen);
        }
        f->ntensors++;
        snprintf(t->dtype, sizeof t->dtype, "%s", dt->str);
        int esize = dtype_size(t->dtype);
        if (!esize) { snprintf(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, name, dt->str); return st_fail(f, err, errlen); }
        t->ndim = shape->n;
        for (int d = 0; d < shape->n; d++) {
            if (shape->items[d].type != JSON_NUMBER ||
                ck_whole(shape->items[d].num, &t->shape[d])) {
                snprintf(err, errlen,
                         "%s: tensor '%s': shape item %d is not a whole number of at most 2^50",
                         path, name, d);
                return st_fail(f, err, errlen);
            }
        }
        int64_t numel, need;
        if (ck_numel(t->shape, t->ndim, &numel) || ck_mul(numel, esize, &need)) {
            snprintf(err, errlen, "%s: tensor '%s': its shape holds more than 2^50 elements", path,
                     name);
            return st_fail(f, err, errlen);
        }
        if (off->items[0].type != JSON_NUMBER || off->items[1].type != JSON_NUMBER ||
            ck_whole(off->items[0].num, &t->begin) || ck_whole(off->items[1].num, &t->end) ||
            t->end < t->begin) {
            snprintf(err, errlen,
                     "%s: tensor '%s': data_offsets must be two whole numbers [begin, end] with "
                     "begin <= end",
                     path, name);
            return st_fail(f, err, errlen);
        }
        if (t->end - t->begin != need) {
            snprintf(err, errlen,
                     "%s: tensor '%s': data_offsets span %lld bytes, its shape needs %lld", path,
                     name, (long long)(t->end - t->begin), (long long)need);
            return st_fail(f, err, errlen);
        }
        if (t->end > f->data_len) {
            snprintf(err, errlen, "%s: truncated: tensor '%s' ends at byte %lld of a %lld-byte data section", path, name,
                     (long long)t->end, (long long)f->data_len);
            return st_fail(f, err, errlen);
        }
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
