/* kernel_catalog.c: the kernel catalog's rows (common/kernel_catalog.h) and their reading: the
 * operand and constant lists parsed one item at a time, constants' defaults and extents evaluated
 * over the values a caller looks up. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "common/kernel_catalog.h"

static const KernelKind KINDS[KK_COUNT] = {
#define KCAT_ROW(id, name, launch, grad, backward, operands, constants) \
    {name, operands, constants, backward, launch, grad},
    KERNEL_CATALOG(KCAT_ROW)
#undef KCAT_ROW
};

const KernelKind *kcat_kind(int id) { return id >= 0 && id < KK_COUNT ? &KINDS[id] : NULL; }

int kcat_find(const char *name) {
    for (int i = 0; name && i < KK_COUNT; i++)
        if (!strcmp(KINDS[i].name, name)) return i;
    return -1;
}

const char *kcat_name(int id) { return id >= 0 && id < KK_COUNT ? KINDS[id].name : "?"; }

/* Item i of a space-separated list into buf (cut to n); 0 found, 1 past the last. */
static int list_item(const char *list, int i, char *buf, size_t n) {
    const char *s = list;
    for (int k = 0;; k++) {
        while (*s == ' ') s++;
        if (!*s) return 1;
        size_t len = strcspn(s, " ");
        if (k == i) {
            if (len >= n) len = n - 1;
            memcpy(buf, s, len);
            buf[len] = 0;
            return 0;
        }
        s += len;
    }
}

static void copy_cut(char *dst, size_t n, const char *src, size_t len) {
    if (len >= n) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = 0;
}

int kcat_operand(int id, int o, KcatOperand *out) {
    const KernelKind *kk = kcat_kind(id);
    if (!kk) return -1;
    char item[200];
    if (list_item(kk->operands, o, item, sizeof item)) return 1;
    memset(out, 0, sizeof *out);
    char *eq = strchr(item, '=');
    if (eq) *eq = 0;
    size_t len = strlen(item);
    out->optional = len > 0 && item[len - 1] == '?';
    if (out->optional) item[--len] = 0;
    char *colon = strchr(item, ':');
    snprintf(out->dtype, sizeof out->dtype, "%s", colon ? colon + 1 : "bf16");
    copy_cut(out->key, sizeof out->key, item, colon ? (size_t)(colon - item) : len);
    if (eq) {   /* ROWS,COLS[,LD] */
        const char *r = eq + 1, *c = strchr(r, ',');
        const char *l = c ? strchr(c + 1, ',') : NULL;
        if (!c) return 0;
        copy_cut(out->rows, sizeof out->rows, r, (size_t)(c - r));
        copy_cut(out->cols, sizeof out->cols, c + 1, l ? (size_t)(l - c - 1) : strlen(c + 1));
        snprintf(out->ld, sizeof out->ld, "%s", l ? l + 1 : out->cols);
    }
    return 0;
}

int kcat_const(int id, int c, KcatConst *out) {
    const KernelKind *kk = kcat_kind(id);
    if (!kk) return -1;
    char item[100];
    if (list_item(kk->constants, c, item, sizeof item)) return 1;
    memset(out, 0, sizeof *out);
    const char *s = item;
    out->plan_optional = *s == '?';
    if (out->plan_optional) s++;
    const char *eq = strchr(s, '=');
    out->gen_optional = out->plan_optional || eq != NULL;
    copy_cut(out->key, sizeof out->key, s, eq ? (size_t)(eq - s) : strlen(s));
    snprintf(out->dflt, sizeof out->dflt, "%s", eq ? eq + 1 : "");
    return 0;
}

int kcat_const_find(int id, const char *key, KcatConst *out) {
    for (int c = 0; kcat_const(id, c, out) == 0; c++)
        if (!strcmp(out->key, key)) return 1;
    return 0;
}

static double eval_depth(int id, const char *expr, KcatLookup lookup, const void *ctx, int depth);

static double value_depth(int id, const char *key, KcatLookup lookup, const void *ctx, int depth) {
    double v;
    if (lookup(ctx, key, &v)) return v;
    KcatConst c;
    if (depth > 4 || !kcat_const_find(id, key, &c) || !c.dflt[0]) return 0;
    return eval_depth(id, c.dflt, lookup, ctx, depth + 1);
}

/* A factor: a number, rsqrt(KEY) or a constant. */
static double factor(int id, const char *f, KcatLookup lookup, const void *ctx, int depth) {
    if ((f[0] >= '0' && f[0] <= '9') || f[0] == '-' || f[0] == '.') return atof(f);
    if (!strncmp(f, "rsqrt(", 6)) {
        char key[48];
        copy_cut(key, sizeof key, f + 6, strcspn(f + 6, ")"));
        return 1.0 / sqrt(value_depth(id, key, lookup, ctx, depth));
    }
    return value_depth(id, f, lookup, ctx, depth);
}

static double eval_depth(int id, const char *expr, KcatLookup lookup, const void *ctx, int depth) {
    double sum = 0;
    const char *s = expr;
    while (*s) {   /* terms separated by '+', factors by '*' */
        size_t tlen = strcspn(s, "+");
        double prod = 1;
        for (const char *f = s; f < s + tlen;) {
            size_t flen = strcspn(f, "*+");
            char item[48];
            copy_cut(item, sizeof item, f, flen);
            prod *= factor(id, item, lookup, ctx, depth);
            f += flen + (f[flen] == '*');
        }
        sum += prod;
        s += tlen + (s[tlen] == '+');
    }
    return sum;
}

double kcat_eval(int id, const char *expr, KcatLookup lookup, const void *ctx) {
    return eval_depth(id, expr, lookup, ctx, 0);
}

double kcat_value(int id, const char *key, KcatLookup lookup, const void *ctx) {
    return value_depth(id, key, lookup, ctx, 0);
}

int kcat_const_is_float(const char *key) {
    static const char *const floats[] = {"eps", "theta", "scale", "coef", "zcoef"};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (!strcmp(floats[i], key)) return 1;
    return 0;
}

const char *kcat_const_tag(const char *key) {
    static const char *const tags[][2] = {
        {"rows", "r"}, {"cols", "c"}, {"vocab", "v"}, {"divisor", "dv"}, {"eps", "e"},
        {"act", "a"}, {"norm", "n"}, {"acc", "acc"}, {"phase", "ph"}, {"heads", "h"},
        {"kv_heads", "kv"}, {"head_dim", "d"}, {"seq", "s"}, {"batch", "b"}, {"theta", "th"},
        {"inverse", "inv"}, {"scale", "sc"}, {"tp", "tp"}, {"vocab_offset", "vo"},
        {"experts", "E"}, {"top_k", "k"}, {"capacity", "C"}, {"tokens", "M"}, {"coef", "cf"},
        {"max_seq", "S"}, {"zcoef", "zc"},
    };
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++)
        if (!strcmp(tags[i][0], key)) return tags[i][1];
    return key;   /* ld keys name themselves */
}
