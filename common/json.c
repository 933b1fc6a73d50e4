/* json.c: the small JSON reader and string writer (common/json.h) that safetensors headers,
 * checkpoints' state.json, tokenizer.json, Hugging Face index and config files and the training
 * log's tools share: a recursive-descent parser with a depth limit and checked growth. */
#include <stdlib.h>
#include <string.h>
#include "common/json.h"   // defines: Json, json_parse, json_free, json_get, json_write_string

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
    else if (cp < 0x800) {
        out[(*o)++] = (char)(0xc0 | cp >> 6);
        out[(*o)++] = (char)(0x80 | (cp & 63));
    }
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
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
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
        if (c < 0x20) {
            p->pos = i;
            jfail(p, "control character in a string");
            free(out);
            return NULL;
        }
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
            if (end - i < 5 || !hex4(p->s + i + 1, &cp)) {
                p->pos = i;
                jfail(p, "bad \\u escape");
                free(out);
                return NULL;
            }
            i += 4;
            unsigned lo;   // a surrogate pair (\ud83d\ude00) is one character: 4 bytes for 12
            if (cp >= 0xD800 && cp < 0xDC00 && end - i >= 7 && p->s[i + 1] == '\\' &&
                p->s[i + 2] == 'u' && hex4(p->s + i + 3, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            // a \u escape is at most 3 UTF-8 bytes for 6 source bytes: the buffer is large enough
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
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                memset(&v->items[v->n], 0, sizeof(Json));
                v->n++;
                jfail(p, "expected ':'");
                return;
            }
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
        while (p->pos + n < p->len && n < sizeof buf - 1 &&
               strchr("+-.eE0123456789", p->s[p->pos + n]) && p->s[p->pos + n])
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
