/* bpe.c: Hugging Face tokenizer.json BPE tokenizers (bpe.h): loading (the JSON parser of
 * runtime/safetensors.h), the pre-tokenizers (GPT-2, LLaMA-3 and Qwen2 regexes written by hand over
 * UTF-8 with runtime/unicode_tables.h; Metaspace), normalizers (Prepend, Replace, NFC), the
 * BPE merge loop (lowest merge rank first, leftmost on ties, as the `tokenizers` library does),
 * byte fallback, added tokens, decoding. */
#define _GNU_SOURCE   /* memmem */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/bpe.h"
#include "runtime/nfc.h"
#include "runtime/safetensors.h"
#include "runtime/utf8.h"
#include "common/json.h"
#include "common/files.h"   // defines: file_read_stream
#include "runtime/unicode_tables.h"

/* PRE_META_WHOLE: Metaspace without split (spaces replaced, prefix, one word) */
enum { PRE_NONE, PRE_GPT2, PRE_LLAMA3, PRE_QWEN2, PRE_METASPACE, PRE_META_WHOLE };
enum { NORM_PREPEND, NORM_REPLACE, NORM_NFC };
#define MAX_NORMS 8

/* an added token: its text as matched (normalized: the normalizers applied, in memory of its own),
 * its id, and the flags of tokenizer.json */
typedef struct {
    char *s; int len; int32_t id;
    int special, lstrip, rstrip, single_word, normalized;
} Added;
enum { ADDED_RAW = 1, ADDED_NORMALIZED = 2 };   /* matched in the text as given / normalized */
/* a normalizer step: Prepend a, Replace a -> b, or NFC */
typedef struct { int kind; char *a; int alen; char *b; int blen; } Norm;

struct Bpe {
    int kind, pre;
    int add_prefix_space;            /* byte-level: a space before each section */
    int meta_prepend;                /* Metaspace: 0 never, 1 always, 2 first section only */
    Norm norms[MAX_NORMS]; int nnorms;
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id, sep_id;
    int32_t nvocab;                  /* largest id + 1 */
    char **tok; int *toklen;         /* [nvocab] the text of each id (NULL: unused id) */
    unsigned char *added_flag;       /* [nvocab] 1 added token, 2 special added token */
    int32_t *vslot; uint32_t vcap;   /* string -> id, open addressing */
    uint64_t *mkey; int32_t *mrank, *mnew; uint32_t mcap;   /* (left, right) -> rank, merged id */
    int32_t byte_id[256];            /* byte-level: the id of each byte's character; else <0xXX> */
    int32_t ascii_id[128];           /* SentencePiece-style: the id of each ASCII character */
    Added *added; int nadded;
    unsigned char added_first[256];  /* ADDED_RAW | ADDED_NORMALIZED: a token starts with it */
    int any_normalized;              /* some added token is matched in normalized text */
    char desc[96];
};

/* ---------------- hashing ---------------- */
static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
    return h ^ (h >> 29);
}
static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int32_t vocab_find(const Bpe *b, const char *s, size_t n) {
    uint32_t m = b->vcap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(s, n) & m;; i = (i + 1) & m) {
        int32_t id = b->vslot[i];
        if (id < 0) return -1;
        if ((size_t)b->toklen[id] == n && !memcmp(b->tok[id], s, n)) return id;
    }
}

static int merge_find(const Bpe *b, int32_t l, int32_t r, int32_t *rank, int32_t *nid) {
    if (!b->mcap) return 0;
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    uint32_t m = b->mcap - 1;
    for (uint32_t i = (uint32_t)hash_u64(key) & m;; i = (i + 1) & m) {
        if (b->mrank[i] < 0) return 0;
        if (b->mkey[i] == key) { *rank = b->mrank[i]; *nid = b->mnew[i]; return 1; }
    }
}

/* ---------------- UTF-8 and character classes ---------------- */

int bpe_utf8_put(uint32_t cp, char *o) { return utf8_encode(cp, (unsigned char *)o); }

static int in_ranges(const uint32_t (*r)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}
#define NRANGES(t) (int)(sizeof t / sizeof t[0])

enum { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };

/* \s of the tokenizers' regex engine: White_Space */
static int is_space_cp(int32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

static int class_of(int32_t cp) {
    if (cp < 0) return C_OTHER;   /* a byte that is not UTF-8: punctuation-like, alone */
    if (cp < 128) {
        if ((cp | 32) >= 'a' && (cp | 32) <= 'z') return C_LETTER;
        if (cp >= '0' && cp <= '9') return C_NUMBER;
        return is_space_cp(cp) ? C_SPACE : C_OTHER;
    }
    if (is_space_cp(cp)) return C_SPACE;
    if (in_ranges(UNICODE_LETTERS, NRANGES(UNICODE_LETTERS), (uint32_t)cp)) return C_LETTER;
    if (in_ranges(UNICODE_NUMBERS, NRANGES(UNICODE_NUMBERS), (uint32_t)cp)) return C_NUMBER;
    return C_OTHER;
}

/* The class of the character at s[i] (and its length). */
static int cls_at(const unsigned char *s, size_t i, size_t n, int *len) {
    if (s[i] < 128) { *len = 1; return class_of(s[i]); }
    return class_of(utf8_decode(s + i, n - i, len));
}

/* End of the run of characters of class c starting at i (at most max characters). */
static size_t run_of(const unsigned char *s, size_t i, size_t n, int c, int max) {
    int len, k = 0;
    while (i < n && k < max && cls_at(s, i, n, &len) == c) { i += len; k++; }
    return i;
}

/* 's 't 're 've 'm 'll 'd at s[i] (s[i] is '): the length matched, or 0. */
static int contraction(const unsigned char *s, size_t i, size_t n, int nocase) {
    if (i + 1 >= n) return 0;
    int a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
    if (nocase) { a = a >= 'A' && a <= 'Z' ? a + 32 : a; b = b >= 'A' && b <= 'Z' ? b + 32 : b; }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* The whitespace alternatives shared by the patterns: \s+(?!\S) | \s+ at i (s[i] is a space). */
static size_t space_run(const unsigned char *s, size_t i, size_t n) {
    size_t j = i, last = i;
    int len;
    while (j < n && cls_at(s, j, n, &len) == C_SPACE) { last = j; j += len; }
    if (j == n || last == i) return j;   /* at the end, or one space before a non-space */
    return last;                          /* leave the last space to the word after it */
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
size_t bpe_pretok_gpt2(const unsigned char *s, size_t i, size_t n) {
    int len, k;
    if (s[i] == '\'' && (k = contraction(s, i, n, 0))) return i + k;
    size_t at = i;
    if (s[i] == ' ' && i + 1 < n) {
        int c1 = cls_at(s, i + 1, n, &len);
        if (c1 != C_SPACE) at = i + 1;
    }
    int c = cls_at(s, at, n, &len);
    if (c != C_SPACE) return run_of(s, at, n, c, 1 << 30);
    return space_run(s, i, n);
}

/* LLaMA-3 (maxdigits 3) and Qwen2 (1): (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
 * \p{N}{1,maxdigits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
size_t bpe_pretok_llama3(const unsigned char *s, size_t i, size_t n, int maxdigits) {
    int len0, len1, k;
    if (s[i] == '\'' && (k = contraction(s, i, n, 1))) return i + k;
    int c0 = cls_at(s, i, n, &len0);
    if (c0 == C_LETTER) return run_of(s, i, n, C_LETTER, 1 << 30);
    if (c0 != C_NUMBER && s[i] != '\r' && s[i] != '\n' && i + len0 < n &&
        cls_at(s, i + len0, n, &len1) == C_LETTER)
        return run_of(s, i + len0, n, C_LETTER, 1 << 30);
    if (c0 == C_NUMBER) return run_of(s, i, n, C_NUMBER, maxdigits);
    size_t at = i;
    if (s[i] == ' ' && i + 1 < n && cls_at(s, i + 1, n, &len1) == C_OTHER) at = i + 1;
    if (cls_at(s, at, n, &len1) == C_OTHER) {
        size_t j = run_of(s, at, n, C_OTHER, 1 << 30);
        while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    /* a space: \s*[\r\n]+ takes the run up to its last line break */
    size_t j = i, nl = 0;
    int len, found = 0;
    while (j < n && cls_at(s, j, n, &len) == C_SPACE) {
        if (s[j] == '\r' || s[j] == '\n') { nl = j; found = 1; }
        j += len;
    }
    if (found) return nl + 1;
    return space_run(s, i, n);
}

/* ---------------- loading ---------------- */
static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

static int set_token(Bpe *b, int32_t id, const char *s, size_t n) {
    if (id < 0 || id >= b->nvocab) return -1;
    if (b->tok[id]) return 0;   /* an added token that is also in the vocabulary: same id */
    b->tok[id] = malloc(n + 1);
    if (!b->tok[id]) return -1;
    memcpy(b->tok[id], s, n);
    b->tok[id][n] = 0;
    b->toklen[id] = (int)n;
    return 0;
}

static void vocab_insert(Bpe *b, int32_t id) {
    uint32_t m = b->vcap - 1;
    uint32_t i = (uint32_t)hash_bytes(b->tok[id], b->toklen[id]) & m;
    while (b->vslot[i] >= 0) {
        int32_t o = b->vslot[i];
        if (b->toklen[o] == b->toklen[id] && !memcmp(b->tok[o], b->tok[id], b->toklen[id])) return;
        i = (i + 1) & m;
    }
    b->vslot[i] = id;
}

static int merge_insert(Bpe *b, int32_t l, int32_t r, int32_t rank, int32_t nid) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    uint32_t m = b->mcap - 1;
    uint32_t i = (uint32_t)hash_u64(key) & m;
    while (b->mrank[i] >= 0) {
        if (b->mkey[i] == key) return 0;   /* a repeated merge keeps its first rank */
        i = (i + 1) & m;
    }
    b->mkey[i] = key; b->mrank[i] = rank; b->mnew[i] = nid;
    return 0;
}

static const char *type_of(const Json *j) {
    const Json *t = json_get(j, "type");
    return t && t->type == JSON_STRING ? t->str : NULL;
}

static const char *const REGEX_GPT2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char *const REGEX_LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
                                        "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const REGEX_QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                       "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                       "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* One pre-tokenizer (or an item of a Sequence). Returns 0 or 2 with err. */
static int load_pre(Bpe *b, const Json *p, int *bytelevel, char *err, size_t errlen) {
    const char *t = type_of(p);
    if (!t) { snprintf(err, errlen, "pre_tokenizer without a type"); return 2; }
    if (!strcmp(t, "Sequence")) {
        const Json *items = json_get(p, "pretokenizers");
        for (int i = 0; items && i < items->n; i++)
            if (load_pre(b, &items->items[i], bytelevel, err, errlen)) return 2;
        return 0;
    }
    if (!strcmp(t, "ByteLevel")) {
        *bytelevel = 1;
        const Json *aps = json_get(p, "add_prefix_space"), *re = json_get(p, "use_regex");
        b->add_prefix_space = aps && aps->num != 0;
        if ((!re || re->num != 0) && b->pre == PRE_NONE) b->pre = PRE_GPT2;
        return 0;
    }
    if (!strcmp(t, "Split")) {
        const Json *pat = json_get(p, "pattern"), *beh = json_get(p, "behavior"),
                   *inv = json_get(p, "invert");
        const Json *re = pat ? json_get(pat, "Regex") : NULL;
        const char *behavior = beh && beh->type == JSON_STRING ? beh->str : "";
        if (!re || re->type != JSON_STRING || strcmp(behavior, "Isolated") ||
            (inv && inv->num != 0)) {
            snprintf(err, errlen,
                     "a Split pre-tokenizer other than an isolated regex (behavior %s) is not "
                     "supported",
                     behavior);
            return 2;
        }
        if (!strcmp(re->str, REGEX_GPT2)) b->pre = PRE_GPT2;
        else if (!strcmp(re->str, REGEX_LLAMA3)) b->pre = PRE_LLAMA3;
        else if (!strcmp(re->str, REGEX_QWEN2)) b->pre = PRE_QWEN2;
        else {
            snprintf(err, errlen,
                     "the Split regex %.80s is not one of the pre-tokenizers written here "
                     "(GPT-2, LLaMA-3, Qwen2)",
                     re->str);
            return 2;
        }
        return 0;
    }
    if (!strcmp(t, "Metaspace")) {
        const Json *rep = json_get(p, "replacement"), *ps = json_get(p, "prepend_scheme"),
                   *aps = json_get(p, "add_prefix_space"), *split = json_get(p, "split");
        if (rep && rep->type == JSON_STRING && strcmp(rep->str, "\xE2\x96\x81")) {
            snprintf(err, errlen, "a Metaspace replacement other than U+2581 is not supported");
            return 2;
        }
        b->pre = split && split->num == 0 ? PRE_META_WHOLE : PRE_METASPACE;
        b->meta_prepend = 1;
        if (ps && ps->type == JSON_STRING)
            b->meta_prepend = !strcmp(ps->str, "never") ? 0 : !strcmp(ps->str, "first") ? 2 : 1;
        else if (aps) b->meta_prepend = aps->num != 0;
        return 0;
    }
    snprintf(err, errlen,
             "pre-tokenizer %s is not supported (ByteLevel, Split with the GPT-2/LLaMA-3/"
             "Qwen2 regex, Metaspace are)",
             t);
    return 2;
}

static int load_norm(Bpe *b, const Json *p, char *err, size_t errlen) {
    const char *t = type_of(p);
    if (!t) { snprintf(err, errlen, "normalizer without a type"); return 2; }
    if (!strcmp(t, "Sequence")) {
        const Json *items = json_get(p, "normalizers");
        for (int i = 0; items && i < items->n; i++)
            if (load_norm(b, &items->items[i], err, errlen)) return 2;
        return 0;
    }
    if (b->nnorms >= MAX_NORMS) {
        snprintf(err, errlen, "more than %d normalizers", MAX_NORMS);
        return 2;
    }
    if (!strcmp(t, "NFC")) {
        b->norms[b->nnorms++] = (Norm){NORM_NFC, NULL, 0, NULL, 0};
        return 0;
    }
    if (!strcmp(t, "Prepend")) {
        const Json *s = json_get(p, "prepend");
        if (!s || s->type != JSON_STRING) {
            snprintf(err, errlen, "Prepend without a string");
            return 2;
        }
        b->norms[b->nnorms++] = (Norm){NORM_PREPEND, strdup(s->str), (int)strlen(s->str), NULL, 0};
        return 0;
    }
    if (!strcmp(t, "Replace")) {
        const Json *pat = json_get(p, "pattern"), *c = json_get(p, "content");
        const Json *s = pat ? json_get(pat, "String") : NULL;
        if (!s || s->type != JSON_STRING || !*s->str || !c || c->type != JSON_STRING) {
            snprintf(err, errlen,
                     "a Replace normalizer other than string -> string is not supported");
            return 2;
        }
        b->norms[b->nnorms++] = (Norm){NORM_REPLACE, strdup(s->str), (int)strlen(s->str),
                                       strdup(c->str), (int)strlen(c->str)};
        return 0;
    }
    snprintf(err, errlen, "normalizer %s is not supported (Prepend, Replace, NFC are)", t);
    return 2;
}

/* The model section: vocab, merges, flags. */
static int load_model(Bpe *b, const Json *m, const Json *added, char *err, size_t errlen) {
    const char *t = type_of(m);
    if (!t) t = json_get(m, "merges") ? "BPE" : "(none)";
    if (strcmp(t, "BPE")) {
        snprintf(err, errlen,
                 "model type %s: boost tokenize reads BPE tokenizers only (byte-level as "
                 "GPT-2/LLaMA-3/Qwen, SentencePiece-style with byte fallback as LLaMA-2/Mistral)",
                 t);
        return 2;
    }
    const Json *vocab = json_get(m, "vocab"), *merges = json_get(m, "merges");
    if (!vocab || vocab->type != JSON_OBJECT || !merges || merges->type != JSON_ARRAY) {
        snprintf(err, errlen, "the BPE model has no vocab object or merges array");
        return 2;
    }
    const Json *f;
    if ((f = json_get(m, "byte_fallback"))) b->byte_fallback = f->num != 0;
    if ((f = json_get(m, "fuse_unk"))) b->fuse_unk = f->num != 0;
    if ((f = json_get(m, "ignore_merges"))) b->ignore_merges = f->num != 0;
    const Json *csp = json_get(m, "continuing_subword_prefix"),
               *eow = json_get(m, "end_of_word_suffix");
    if ((csp && csp->type == JSON_STRING && *csp->str) ||
        (eow && eow->type == JSON_STRING && *eow->str)) {
        snprintf(err, errlen,
                 "BPE with a continuing_subword_prefix or end_of_word_suffix is not supported");
        return 2;
    }
    int64_t maxid = -1;
    for (int i = 0; i < vocab->n; i++)
        if (vocab->items[i].num > maxid) maxid = (int64_t)vocab->items[i].num;
    for (int i = 0; added && i < added->n; i++) {
        const Json *id = json_get(&added->items[i], "id");
        if (id && id->num > maxid) maxid = (int64_t)id->num;
    }
    if (maxid < 0 || maxid >= (1 << 30)) {
        snprintf(err, errlen, "vocabulary ids out of range");
        return 2;
    }
    b->nvocab = (int32_t)maxid + 1;
    b->tok = calloc(b->nvocab, sizeof *b->tok);
    b->toklen = calloc(b->nvocab, sizeof *b->toklen);
    b->added_flag = calloc(b->nvocab, 1);
    b->vcap = pow2_at_least(2 * (uint64_t)b->nvocab);
    b->vslot = malloc(sizeof *b->vslot * b->vcap);
    if (!b->tok || !b->toklen || !b->added_flag || !b->vslot) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    memset(b->vslot, 0xFF, sizeof *b->vslot * b->vcap);
    for (int i = 0; i < vocab->n; i++) {
        int32_t id = (int32_t)vocab->items[i].num;
        if (vocab->items[i].type != JSON_NUMBER || id < 0 || b->tok[id]) {
            snprintf(err, errlen, "vocab entry \"%.40s\": bad or repeated id", vocab->keys[i]);
            return 2;
        }
        if (set_token(b, id, vocab->keys[i], strlen(vocab->keys[i]))) {
            snprintf(err, errlen, "out of memory");
            return 1;
        }
        vocab_insert(b, id);
    }
    b->mcap = pow2_at_least(2 * (uint64_t)merges->n + 2);
    b->mkey = malloc(sizeof *b->mkey * b->mcap);
    b->mrank = malloc(sizeof *b->mrank * b->mcap);
    b->mnew = malloc(sizeof *b->mnew * b->mcap);
    if (!b->mkey || !b->mrank || !b->mnew) { snprintf(err, errlen, "out of memory"); return 1; }
    memset(b->mrank, 0xFF, sizeof *b->mrank * b->mcap);
    char *joined = NULL;
    size_t jcap = 0;
    for (int r = 0; r < merges->n; r++) {
        const Json *mg = &merges->items[r];
        const char *l, *rt;
        size_t ll, rl;
        if (mg->type == JSON_STRING) {           /* "left right" */
            const char *sp = strchr(mg->str, ' ');
            if (!sp) {
                snprintf(err, errlen, "merge %d \"%.40s\" has no space", r, mg->str);
                free(joined);
                return 2;
            }
            l = mg->str; ll = (size_t)(sp - mg->str); rt = sp + 1; rl = strlen(rt);
        } else if (mg->type == JSON_ARRAY && mg->n == 2 && mg->items[0].type == JSON_STRING &&
                   mg->items[1].type == JSON_STRING) {   /* ["left", "right"] */
            l = mg->items[0].str; ll = strlen(l); rt = mg->items[1].str; rl = strlen(rt);
        } else {
            snprintf(err, errlen, "merge %d is neither \"a b\" nor [\"a\", \"b\"]", r);
            free(joined);
            return 2;
        }
        if (ll + rl + 1 > jcap) { jcap = 2 * (ll + rl + 1); joined = realloc(joined, jcap); }
        memcpy(joined, l, ll); memcpy(joined + ll, rt, rl);
        int32_t li = vocab_find(b, l, ll), ri = vocab_find(b, rt, rl),
                ni = vocab_find(b, joined, ll + rl);
        if (li < 0 || ri < 0 || ni < 0) {
            snprintf(err, errlen,
                     "merge %d (%.*s + %.*s): a part or the result is not in the vocabulary", r,
                     (int)(ll > 40 ? 40 : ll), l, (int)(rl > 40 ? 40 : rl), rt);
            free(joined);
            return 2;
        }
        merge_insert(b, li, ri, r, ni);
    }
    free(joined);
    const Json *unk = json_get(m, "unk_token");
    b->unk_id = unk && unk->type == JSON_STRING ? vocab_find(b, unk->str, strlen(unk->str)) : -1;
    return 0;
}

static int load_added(Bpe *b, const Json *added, char *err, size_t errlen) {
    if (!added || added->type != JSON_ARRAY) return 0;
    b->added = calloc(added->n + 1, sizeof *b->added);
    if (!b->added) { snprintf(err, errlen, "out of memory"); return 1; }
    for (int i = 0; i < added->n; i++) {
        const Json *a = &added->items[i], *id = json_get(a, "id"), *c = json_get(a, "content"),
                   *sp = json_get(a, "special"), *nz = json_get(a, "normalized");
        if (!id || !c || c->type != JSON_STRING || !*c->str) {
            snprintf(err, errlen, "added_tokens[%d] without an id or content", i);
            return 2;
        }
        int32_t tid = (int32_t)id->num;
        size_t n = strlen(c->str);
        if (set_token(b, tid, c->str, n)) { snprintf(err, errlen, "out of memory"); return 1; }
        vocab_insert(b, tid);
        int special = sp && sp->num != 0;
        const Json *ls = json_get(a, "lstrip"), *rs = json_get(a, "rstrip"),
                   *sw = json_get(a, "single_word");
        b->added_flag[tid] = special ? 2 : 1;
        b->added[b->nadded++] = (Added){b->tok[tid], b->toklen[tid], tid, special,
                                        ls && ls->num != 0, rs && rs->num != 0,
                                        sw && sw->num != 0, nz ? nz->num != 0 : !special};
    }
    return 0;
}

/* The separator between documents: the bos of the post-processor's template, else an eos. */
static void find_separator(Bpe *b, const Json *post) {
    b->sep_id = -1;
    const Json *single = post ? json_get(post, "single") : NULL;
    if (single && single->type == JSON_ARRAY && single->n > 0) {
        const Json *st = json_get(&single->items[0], "SpecialToken");
        const Json *id = st ? json_get(st, "id") : NULL;
        if (id && id->type == JSON_STRING && (b->sep_id = bpe_token_id(b, id->str)) >= 0) return;
    }
    static const char *const eos[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", NULL};
    for (int i = 0; eos[i]; i++) if ((b->sep_id = bpe_token_id(b, eos[i])) >= 0) return;
}

static int normalize(BpeEncoder *e, const unsigned char *s, size_t n, int continuation,
                     const unsigned char **res, size_t *rn);

/* The added tokens matched in normalized text get their text through the normalizers (as the
 * `tokenizers` library matches them); each token's first byte marks its set in added_first. */
static int normalize_added(Bpe *b, char *err, size_t errlen) {
    BpeEncoder *e = NULL;
    for (int k = 0; k < b->nadded; k++) {
        Added *a = &b->added[k];
        if (a->normalized) {
            const unsigned char *t;
            size_t tn;
            if (!e && !(e = bpe_encoder_new(b))) {
                snprintf(err, errlen, "out of memory");
                return 1;
            }
            int rc = normalize(e, (const unsigned char *)a->s, (size_t)a->len, 0, &t, &tn);
            char *own = !rc && tn ? malloc(tn) : NULL;
            if (!own) {
                bpe_encoder_free(e);
                a->normalized = 0;   /* its text stays the vocabulary's, not freed twice */
                if (rc || tn) snprintf(err, errlen, "out of memory");
                else snprintf(err, errlen, "added token %d is empty once normalized", a->id);
                return rc || tn ? 1 : 2;
            }
            a->s = own;
            memcpy(a->s, t, tn);
            a->len = (int)tn;
            b->any_normalized = 1;
        }
        b->added_first[(unsigned char)a->s[0]] |= a->normalized ? ADDED_NORMALIZED : ADDED_RAW;
    }
    bpe_encoder_free(e);
    return 0;
}

static int load_tree(Bpe *b, const Json *root, char *err, size_t errlen) {
    const Json *model = json_get(root, "model"), *added = json_get(root, "added_tokens");
    if (!model) { snprintf(err, errlen, "no \"model\": not a tokenizer.json"); return 2; }
    int rc = load_model(b, model, added, err, errlen);
    if (!rc) rc = load_added(b, added, err, errlen);
    if (rc) return rc;
    const Json *norm = json_get(root, "normalizer"), *pre = json_get(root, "pre_tokenizer"),
               *dec = json_get(root, "decoder");
    int bytelevel = 0;
    if (norm && norm->type == JSON_OBJECT && (rc = load_norm(b, norm, err, errlen))) return rc;
    if (pre && pre->type == JSON_OBJECT && (rc = load_pre(b, pre, &bytelevel, err, errlen)))
        return rc;
    if (dec && type_of(dec) && !strcmp(type_of(dec), "ByteLevel")) bytelevel = 1;
    if ((rc = normalize_added(b, err, errlen))) return rc;
    b->kind = bytelevel ? BPE_BYTE_LEVEL : BPE_SENTENCEPIECE;
    for (int c = 0; c < 256; c++) {
        char s[8];
        int n = bytelevel ? bpe_utf8_put(bpe_byte_char((unsigned char)c), s)
                          : snprintf(s, sizeof s, "<0x%02X>", c);
        b->byte_id[c] = vocab_find(b, s, (size_t)n);
    }
    for (int c = 0; c < 128; c++) { char s = (char)c; b->ascii_id[c] = vocab_find(b, &s, 1); }
    find_separator(b, json_get(root, "post_processor"));
    static const char *const pre_names[] = {"no", "GPT-2", "LLaMA-3", "Qwen2", "Metaspace",
                                            "Metaspace (no split)"};
    snprintf(b->desc, sizeof b->desc, "%s BPE, %s pre-tokenizer%s",
             bytelevel ? "byte-level" : "SentencePiece-style", pre_names[b->pre],
             b->byte_fallback ? ", byte fallback" : "");
    return 0;
}

Bpe *bpe_load(const char *path, int *status, char *err, size_t errlen) {
    char why[400] = "";
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        *status = 2;
        return NULL;
    }
    size_t len = 0;
    char *text = file_read_stream(f, path, (size_t)1 << 30, &len, err, errlen);
    int folder = !text && errno == EISDIR;
    fclose(f);
    if (!text || len == 0) {
        free(text);
        if (len == 0 && (text || folder))
            snprintf(err, errlen, "%s: empty, or not a file: not a tokenizer.json", path);
        *status = len == 0 && (text || folder) ? 2 : 1;
        return NULL;
    }
    Json *root = json_parse(text, (size_t)len, why, sizeof why);
    free(text);
    if (!root || root->type != JSON_OBJECT) {
        snprintf(err, errlen, "%s: not a tokenizer.json: %s", path,
                 root ? "not a JSON object" : why);
        json_free(root);
        *status = 2;
        return NULL;
    }
    Bpe *b = calloc(1, sizeof *b);
    int rc = b ? load_tree(b, root, why, sizeof why) : 1;
    json_free(root);
    if (rc) {
        snprintf(err, errlen, "%s: %s", path, b ? why : "out of memory");
        bpe_free(b);
        *status = rc;
        return NULL;
    }
    return b;
}

void bpe_free(Bpe *b) {
    if (!b) return;
    for (int32_t i = 0; b->tok && i < b->nvocab; i++) free(b->tok[i]);
    for (int i = 0; i < b->nnorms; i++) { free(b->norms[i].a); free(b->norms[i].b); }
    free(b->tok); free(b->toklen); free(b->added_flag); free(b->vslot);
    for (int k = 0; k < b->nadded; k++) if (b->added[k].normalized) free(b->added[k].s);
    free(b->mkey); free(b->mrank); free(b->mnew); free(b->added);
    free(b);
}

int bpe_kind(const Bpe *b) { return b->kind; }
const char *bpe_describe(const Bpe *b) { return b->desc; }
int32_t bpe_vocab_size(const Bpe *b) { return b->nvocab; }
int32_t bpe_separator(const Bpe *b) { return b->sep_id; }
int32_t bpe_token_id(const Bpe *b, const char *text) { return vocab_find(b, text, strlen(text)); }

uint32_t bpe_byte_char(unsigned char c) {
    /* printable Latin-1 bytes stand for themselves; the others map to 256.. in byte order */
    if ((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE)) return c;
    int k = 0;
    for (int x = 0; x < c; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) k++;
    return 256 + (uint32_t)k;
}

int bpe_ids_push(BpeIds *ids, int32_t id) {
    if (ids->n == ids->cap) {
        int64_t cap = ids->cap ? 2 * ids->cap : 1024;
        int32_t *v = realloc(ids->v, sizeof *v * (size_t)cap);
        if (!v) return -1;
        ids->v = v; ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

/* ---------------- encoding ---------------- */
#define CACHE_SLOTS (1u << 16)       /* words remembered per encoder (cleared when half full) */
#define CACHE_MAX_WORD 48            /* longer words are not cached */
#define SCAN_MAX 64 /* words up to this many symbols merge by scanning, longer by heap */

typedef struct { uint64_t h; uint32_t koff, klen, ioff, n; } CacheSlot;
typedef struct { int32_t rank, pos, nid; } HeapItem;

struct BpeEncoder {
    const Bpe *b;
    int32_t *id, *prev, *next, *prank, *pnew; size_t symcap;
    HeapItem *heap; size_t heapcap;
    unsigned char *buf[2]; size_t bufcap[2];   /* normalized section text */
    NfcScratch nfc;
    unsigned char *piece; size_t piececap;     /* a piece as the pre-tokenizer sees it */
    char *word; size_t wordcap;                /* a byte-level word as vocabulary characters */
    CacheSlot *slot; uint32_t used;
    unsigned char bad[4]; int badlen;          /* the bytes a refused word could not encode */
    unsigned char *keys; size_t klen, kcap;
    int32_t *cids; size_t cn, ccap;
};

BpeEncoder *bpe_encoder_new(const Bpe *b) {
    BpeEncoder *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->b = b;
    e->slot = calloc(CACHE_SLOTS, sizeof *e->slot);
    if (!e->slot) { free(e); return NULL; }
    return e;
}

void bpe_encoder_free(BpeEncoder *e) {
    if (!e) return;
    free(e->id); free(e->prev); free(e->next); free(e->prank); free(e->pnew); free(e->heap);
    nfc_scratch_free(&e->nfc); free(e->piece);
    free(e->buf[0]); free(e->buf[1]); free(e->word); free(e->slot); free(e->keys); free(e->cids);
    free(e);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q; *cap = c;
    return 0;
}

static int syms_reserve(BpeEncoder *e, size_t n) {
    if (n <= e->symcap) return 0;
    size_t c = e->symcap ? e->symcap : 64;
    while (c < n) c *= 2;
    int32_t **arrs[] = {&e->id, &e->prev, &e->next, &e->prank, &e->pnew};
    for (int i = 0; i < 5; i++) {
        int32_t *q = realloc(*arrs[i], c * sizeof **arrs[i]);
        if (!q) return -1;
        *arrs[i] = q;
    }
    e->symcap = c;
    return 0;
}

static void pair_rank(BpeEncoder *e, int32_t i) {
    int32_t j = e->next[i];
    if (j < 0 || !merge_find(e->b, e->id[i], e->id[j], &e->prank[i], &e->pnew[i]))
        e->prank[i] = INT32_MAX;
}

static void merge_at(BpeEncoder *e, int32_t i, int32_t nid) {
    int32_t j = e->next[i];
    e->id[i] = nid;
    e->next[i] = e->next[j];
    if (e->next[j] >= 0) e->prev[e->next[j]] = i;
    e->id[j] = -1;
}

/* Short words: the pair ranks kept per position, the lowest (leftmost on ties) merged each round.
 */
static void merge_scan(BpeEncoder *e, int32_t n) {
    for (int32_t i = 0; i < n; i++) pair_rank(e, i);
    for (;;) {
        int32_t best = -1, br = INT32_MAX;
        for (int32_t i = 0; i >= 0; i = e->next[i])
            if (e->prank[i] < br) {
                br = e->prank[i];
                best = i;
            }
        if (best < 0) return;
        merge_at(e, best, e->pnew[best]);
        pair_rank(e, best);
        if (e->prev[best] >= 0) pair_rank(e, e->prev[best]);
    }
}

static int heap_less(HeapItem a, HeapItem b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static int heap_push(BpeEncoder *e, size_t *hn, int32_t pos) {
    int32_t rank, nid, j = e->next[pos];
    if (j < 0 || !merge_find(e->b, e->id[pos], e->id[j], &rank, &nid)) return 0;
    if (grow((void **)&e->heap, &e->heapcap, *hn + 1, sizeof *e->heap)) return -1;
    size_t k = (*hn)++;
    HeapItem it = {rank, pos, nid};
    while (k > 0 && heap_less(it, e->heap[(k - 1) / 2])) {
        e->heap[k] = e->heap[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    e->heap[k] = it;
    return 0;
}

static HeapItem heap_pop(BpeEncoder *e, size_t *hn) {
    HeapItem top = e->heap[0], last = e->heap[--*hn];
    size_t k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= *hn) break;
        if (c + 1 < *hn && heap_less(e->heap[c + 1], e->heap[c])) c++;
        if (!heap_less(e->heap[c], last)) break;
        e->heap[k] = e->heap[c]; k = c;
    }
    if (*hn) e->heap[k] = last;
    return top;
}

/* Long words: a heap of (rank, position); a popped merge whose pair has changed is dropped. */
static int merge_heap(BpeEncoder *e, int32_t n) {
    size_t hn = 0;
    for (int32_t i = 0; i < n; i++) if (heap_push(e, &hn, i)) return -1;
    while (hn) {
        HeapItem t = heap_pop(e, &hn);
        int32_t j, rank, nid;
        if (e->id[t.pos] < 0 || (j = e->next[t.pos]) < 0) continue;
        if (!merge_find(e->b, e->id[t.pos], e->id[j], &rank, &nid) || nid != t.nid) continue;
        merge_at(e, t.pos, nid);
        if (e->prev[t.pos] >= 0 && heap_push(e, &hn, e->prev[t.pos])) return -1;
        if (heap_push(e, &hn, t.pos)) return -1;
    }
    return 0;
}

/* The initial symbols of a word: byte-level characters, or SentencePiece-style characters with
 * byte fallback and the unknown token. Returns the count, or -2 (refused: err) / -1 (memory). */
static int32_t initial_symbols(BpeEncoder *e, const unsigned char *w, size_t n, char *err,
                               size_t errlen) {
    const Bpe *b = e->b;
    if (syms_reserve(e, 4 * n + 1)) return -1;
    int32_t k = 0;
    for (size_t i = 0; i < n;) {
        if (b->kind == BPE_BYTE_LEVEL) {
            int32_t id = b->byte_id[w[i]];
            if (id < 0) id = b->unk_id;
            if (id < 0) {
                snprintf(err, errlen, "byte 0x%02X has no token in the byte-level alphabet", w[i]);
                e->bad[0] = w[i]; e->badlen = 1;
                return -2;
            }
            e->id[k++] = id; i++;
            continue;
        }
        int len;
        int32_t cp = w[i] < 128 ? w[i] : utf8_decode(w + i, n - i, &len), id;
        if (w[i] < 128) { len = 1; id = b->ascii_id[w[i]]; }
        else id = cp < 0 ? -1 : vocab_find(b, (const char *)w + i, (size_t)len);
        if (id >= 0) { e->id[k++] = id; i += len; continue; }
        int fell = b->byte_fallback;
        for (int q = 0; fell && q < len; q++) fell = b->byte_id[w[i + q]] >= 0;
        if (fell) {
            for (int q = 0; q < len; q++) e->id[k++] = b->byte_id[w[i + q]];
        } else if (cp >= 0 && b->unk_id >= 0) {
            if (!(b->fuse_unk && k > 0 && e->id[k - 1] == b->unk_id)) e->id[k++] = b->unk_id;
        } else {
            if (cp < 0)
                snprintf(err, errlen,
                         "byte 0x%02X is not UTF-8 and the tokenizer has no byte fallback", w[i]);
            else
                snprintf(err, errlen, "U+%04X has no token (no byte fallback, no unknown token)",
                         cp);
            memcpy(e->bad, w + i, (size_t)len); e->badlen = len;
            return -2;
        }
        i += len;
    }
    return k;
}

static CacheSlot *cache_find(BpeEncoder *e, const unsigned char *w, size_t n, uint64_t h) {
    for (uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        CacheSlot *s = &e->slot[i];
        if (!s->klen) return s;
        if (s->h == h && s->klen == n && !memcmp(e->keys + s->koff, w, n)) return s;
    }
}

static void cache_put(BpeEncoder *e, CacheSlot *s, const unsigned char *w, size_t n, uint64_t h,
                      const int32_t *ids, uint32_t nids) {
    if (e->used >= CACHE_SLOTS / 2) {   /* full: start over */
        memset(e->slot, 0, CACHE_SLOTS * sizeof *e->slot);
        e->used = 0; e->klen = 0; e->cn = 0;
        s = cache_find(e, w, n, h);
    }
    if (grow((void **)&e->keys, &e->kcap, e->klen + n, 1) ||
        grow((void **)&e->cids, &e->ccap, e->cn + nids, sizeof *e->cids)) return;
    memcpy(e->keys + e->klen, w, n);
    memcpy(e->cids + e->cn, ids, nids * sizeof *ids);
    *s = (CacheSlot){h, (uint32_t)e->klen, (uint32_t)n, (uint32_t)e->cn, nids};
    e->klen += n; e->cn += nids; e->used++;
}

/* One pre-tokenized word -> ids appended to out. 0, 1 (memory), 2 (refused). */
static int encode_word(BpeEncoder *e, const unsigned char *w, size_t n, BpeIds *out,
                       char *err, size_t errlen) {
    const Bpe *b = e->b;
    uint64_t h = 0;
    CacheSlot *s = NULL;
    if (n <= CACHE_MAX_WORD) {
        h = hash_bytes(w, n) | 1;
        s = cache_find(e, w, n, h);
        if (s->klen) {
            for (uint32_t i = 0; i < s->n; i++)
                if (bpe_ids_push(out, e->cids[s->ioff + i])) return 1;
            return 0;
        }
    }
    int32_t whole = -1;
    if (b->ignore_merges) {
        if (b->kind == BPE_BYTE_LEVEL) {
            if (grow((void **)&e->word, &e->wordcap, 2 * n + 1, 1)) return 1;
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                k += (size_t)bpe_utf8_put(bpe_byte_char(w[i]), e->word + k);
            whole = vocab_find(b, e->word, k);
        } else whole = vocab_find(b, (const char *)w, n);
    }
    int64_t start = out->n;
    if (whole >= 0) {
        if (bpe_ids_push(out, whole)) return 1;
    } else {
        int32_t k = initial_symbols(e, w, n, err, errlen);
        if (k < 0) return k == -2 ? 2 : 1;
        for (int32_t i = 0; i < k; i++) { e->prev[i] = i - 1; e->next[i] = i + 1 < k ? i + 1 : -1; }
        if (k <= SCAN_MAX) merge_scan(e, k);
        else if (merge_heap(e, k)) return 1;
        for (int32_t i = 0; i >= 0 && k > 0; i = e->next[i])
            if (bpe_ids_push(out, e->id[i])) return 1;
    }
    if (s) cache_put(e, s, w, n, h, out->v + start, (uint32_t)(out->n - start));
    return 0;
}

/* Apply the normalizers to one section (into e->buf); NFC only where the quick check finds a
 * character it may change. */
static int normalize(BpeEncoder *e, const unsigned char *s, size_t n, int continuation,
                     const unsigned char **res, size_t *rn) {
    const Bpe *b = e->b;
    const unsigned char *cur = s;
    size_t cn = n;
    int which = 0;
    for (int k = 0; k < b->nnorms; k++) {
        const Norm *nm = &b->norms[k];
        if (nm->kind == NORM_PREPEND && (continuation || !cn)) continue;
        if (nm->kind == NORM_NFC) {
            if (nfc_quick_stable(cur, cn)) continue;
            if (nfc_normalize(cur, cn, &e->nfc, &e->buf[which], &e->bufcap[which], &cn)) return 1;
            cur = e->buf[which]; which ^= 1;
            continue;
        }
        size_t cap = nm->kind == NORM_REPLACE ? cn / (size_t)nm->alen * (size_t)nm->blen + cn + 1
                                              : cn + 8;
        if (grow((void **)&e->buf[which], &e->bufcap[which], cap + (size_t)nm->alen, 1)) return 1;
        unsigned char *o = e->buf[which];
        size_t on = 0;
        if (nm->kind == NORM_PREPEND) {
            memcpy(o, nm->a, nm->alen);
            on = nm->alen;
            memcpy(o + on, cur, cn);
            on += cn;
        } else {
            for (size_t i = 0; i < cn;) {
                if (i + nm->alen <= cn && !memcmp(cur + i, nm->a, nm->alen)) {
                    memcpy(o + on, nm->b, nm->blen); on += nm->blen; i += nm->alen;
                } else o[on++] = cur[i++];
            }
        }
        cur = o; cn = on; which ^= 1;
    }
    *res = cur; *rn = cn;
    return 0;
}

/* The pre-tokenizer's own changes to one piece of normalized text (into e->piece): ByteLevel's
 * prefix space; Metaspace's spaces as U+2581 and its prefix. */
static int prepare_piece(BpeEncoder *e, const unsigned char *s, size_t n, int first,
                         int continuation, const unsigned char **res, size_t *rn) {
    const Bpe *b = e->b;
    *res = s; *rn = n;
    if (b->kind == BPE_BYTE_LEVEL && b->add_prefix_space && !continuation && n && s[0] != ' ') {
        if (grow((void **)&e->piece, &e->piececap, n + 1, 1)) return 1;
        e->piece[0] = ' ';
        memcpy(e->piece + 1, s, n);
        *res = e->piece; *rn = n + 1;
    }
    if (b->pre != PRE_METASPACE && b->pre != PRE_META_WHOLE) return 0;
    int pre = !continuation && (b->meta_prepend == 1 || (b->meta_prepend == 2 && first));
    if ((n >= 3 && !memcmp(s, "\xE2\x96\x81", 3)) || (n && s[0] == ' ')) pre = 0;
    if (grow((void **)&e->piece, &e->piececap, 3 * n + 4, 1)) return 1;
    unsigned char *o = e->piece;
    size_t on = 0;
    if (pre && n) { memcpy(o, "\xE2\x96\x81", 3); on = 3; }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(o + on, "\xE2\x96\x81", 3); on += 3; }
        else o[on++] = s[i];
    }
    *res = o; *rn = on;
    return 0;
}

/* One piece between added tokens, normalized: pre-tokenize, encode each word. */
static int encode_piece(BpeEncoder *e, const unsigned char *s, size_t n, int first,
                        int continuation, BpeIds *out, char *err, size_t errlen) {
    const Bpe *b = e->b;
    const unsigned char *t;
    size_t tn;
    int rc = prepare_piece(e, s, n, first, continuation, &t, &tn);
    if (rc) return rc;
    for (size_t i = 0; i < tn;) {
        size_t j;
        switch (b->pre) {
        case PRE_GPT2: j = bpe_pretok_gpt2(t, i, tn); break;
        case PRE_LLAMA3: j = bpe_pretok_llama3(t, i, tn, 3); break;
        case PRE_QWEN2: j = bpe_pretok_llama3(t, i, tn, 1); break;
        case PRE_METASPACE:   /* a word starts at each U+2581 */
            for (j = i + 1; j < tn && !(j + 3 <= tn && !memcmp(t + j, "\xE2\x96\x81", 3)); j++) {}
            break;
        default: j = tn;
        }
        if ((rc = encode_word(e, t + i, j - i, out, err, errlen))) return rc;
        i = j;
    }
    return 0;
}

/* The longest added token of set `which` at s[i], or -1. */
static int added_at(const Bpe *b, int which, const unsigned char *s, size_t i, size_t n) {
    int best = -1;
    for (int k = 0; k < b->nadded; k++) {
        const Added *a = &b->added[k];
        if ((a->normalized ? ADDED_NORMALIZED : ADDED_RAW) != which) continue;
        if ((size_t)a->len <= n - i && (best < 0 || a->len > b->added[best].len) &&
            !memcmp(s + i, a->s, a->len))
            best = k;
    }
    return best;
}

/* A word character (regex \\w: a letter, number, mark or connector such as '_', which decide a
 * single_word match) at s[i]. */
static int word_at(const unsigned char *s, size_t i, size_t n) {
    int len, c = cls_at(s, i, n, &len);
    if (c == C_LETTER || c == C_NUMBER) return 1;
    int32_t cp = utf8_decode(s + i, n - i, &len);
    return cp >= 0 && in_ranges(UNICODE_MARKS_CONNECTORS, NRANGES(UNICODE_MARKS_CONNECTORS),
                                (uint32_t)cp);
}
/* The character that ends at s[i) is a word character. */
static int word_before(const unsigned char *s, size_t i) {
    if (!i) return 0;
    size_t j = i - 1;
    while (j > 0 && (s[j] & 0xC0) == 0x80 && i - j < 4) j--;
    return word_at(s, j, i);
}
static int word_after(const unsigned char *s, size_t i, size_t n) {
    return i < n && word_at(s, i, n);
}

/* The first added token of set `which` accepted in s[from..n) (leftmost, longest; single_word
 * ones only between non-word characters): its index, and its span with the white space that
 * lstrip (back to from at most) and rstrip take. Returns 0 when there is none. */
static int next_added(const Bpe *b, int which, const unsigned char *s, size_t from, size_t n,
                      int *k, size_t *start, size_t *stop) {
    for (size_t i = from; i < n; i++) {
        if (!(b->added_first[s[i]] & which)) continue;
        int t = added_at(b, which, s, i, n);
        if (t < 0) continue;
        const Added *a = &b->added[t];
        size_t end = i + (size_t)a->len;
        if (a->single_word && (word_before(s, i) || word_after(s, end, n))) {
            i = end - 1;   /* the search goes on after the refused match */
            continue;
        }
        *k = t; *start = i; *stop = end;
        int len;
        while (a->lstrip && *start > from) {
            size_t j = *start - 1;
            while (j > from && (s[j] & 0xC0) == 0x80 && *start - j < 4) j--;
            if (cls_at(s, j, *start, &len) != C_SPACE) break;
            *start = j;
        }
        while (a->rstrip && *stop < n && cls_at(s, *stop, n, &len) == C_SPACE) *stop += (size_t)len;
        return 1;
    }
    return 0;
}

/* One section between added tokens matched in the text as given: normalize, split on the added
 * tokens matched in normalized text, encode each piece. */
static int encode_section(BpeEncoder *e, const unsigned char *s, size_t n, size_t at, int first,
                          int continuation, BpeIds *out, char *err, size_t errlen) {
    const Bpe *b = e->b;
    const unsigned char *t;
    size_t tn, pos = 0, start, stop;
    int rc = normalize(e, s, n, continuation, &t, &tn), k;
    while (!rc && b->any_normalized && next_added(b, ADDED_NORMALIZED, t, pos, tn, &k, &start,
                                                  &stop)) {
        if (start > pos)
            rc = encode_piece(e, t + pos, start - pos, first && pos == 0,
                              continuation && pos == 0, out, err, errlen);
        if (!rc && bpe_ids_push(out, b->added[k].id)) rc = 1;
        pos = stop;
    }
    if (!rc && tn > pos)
        rc = encode_piece(e, t + pos, tn - pos, first && pos == 0, continuation && pos == 0, out,
                          err, errlen);
    if (rc == 2) {   /* where the refused bytes are in the text as given */
        char why[200];
        snprintf(why, sizeof why, "%s", err);
        const unsigned char *hit = memmem(s, n, e->bad, (size_t)e->badlen);
        snprintf(err, errlen, "byte %zu: %s", at + (hit ? (size_t)(hit - s) : 0), why);
    }
    return rc;
}

int bpe_encode(BpeEncoder *e, const unsigned char *text, size_t len, int continuation, BpeIds *out,
               char *err, size_t errlen) {
    const Bpe *b = e->b;
    size_t pos = 0, start, stop;
    int rc, k;
    while (next_added(b, ADDED_RAW, text, pos, len, &k, &start, &stop)) {
        if (start > pos && (rc = encode_section(e, text + pos, start - pos, pos, pos == 0,
                                                continuation && pos == 0, out, err, errlen)))
            return rc;
        if (bpe_ids_push(out, b->added[k].id)) return 1;
        pos = stop;
    }
    if (len > pos) return encode_section(e, text + pos, len - pos, pos, pos == 0,
                                         continuation && pos == 0, out, err, errlen);
    return 0;
}

/* ---------------- decoding ---------------- */
int bpe_decode(const Bpe *b, const int32_t *ids, int64_t n, int skip_special, unsigned char **buf,
               size_t *len, size_t *cap, char *err, size_t errlen) {
    int strip = b->kind == BPE_SENTENCEPIECE;   /* the space of the first word's U+2581 */
    for (int64_t k = 0; k < n; k++) {
        int32_t id = ids[k];
        if (id < 0 || id >= b->nvocab || !b->tok[id]) {
            snprintf(err, errlen, "token %lld: id %d is not in the vocabulary (%d ids)",
                     (long long)k, id, b->nvocab);
            return 2;
        }
        const unsigned char *t = (const unsigned char *)b->tok[id];
        size_t tl = (size_t)b->toklen[id];
        if (grow((void **)buf, cap, *len + tl + 1, 1)) {
            snprintf(err, errlen, "out of memory");
            return 1;
        }
        unsigned char *o = *buf;
        if (b->byte_fallback && tl == 6 && !memcmp(t, "<0x", 3) &&
            t[5] == '>') { /* <0xXX>: the byte */
            o[(*len)++] = (unsigned char)strtol((const char *)t + 3, NULL, 16);
            strip = 0;
            continue;
        }
        if (b->added_flag[id]) {
            if (b->added_flag[id] == 2 && skip_special) continue;
            memcpy(o + *len, t, tl); *len += tl;
            strip = b->kind == BPE_SENTENCEPIECE;
            continue;
        }
        if (b->kind == BPE_BYTE_LEVEL) {
            for (size_t i = 0; i < tl;) {
                int l;
                int32_t cp = utf8_decode(t + i, tl - i, &l);
                i += l;
                int byte = -1;
                if (cp >= 0 && cp < 256 && bpe_byte_char((unsigned char)cp) == (uint32_t)cp)
                    byte = cp;
                else if (cp >= 256 && cp < 256 + 68)
                    for (int c = 0; c < 256 && byte < 0; c++)
                        if (bpe_byte_char((unsigned char)c) == (uint32_t)cp) byte = c;
                if (byte < 0) {
                    snprintf(err, errlen,
                             "token %lld: id %d has a character outside the byte-level alphabet",
                             (long long)k, id);
                    return 2;
                }
                o[(*len)++] = (unsigned char)byte;
            }
            continue;
        }
        for (size_t i = 0; i < tl;) {
            if (i + 3 <= tl && !memcmp(t + i, "\xE2\x96\x81", 3)) {
                if (!strip) o[(*len)++] = ' ';
                i += 3;
            } else o[(*len)++] = t[i++];
            strip = 0;
        }
    }
    return 0;
}
