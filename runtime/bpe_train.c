/* bpe_train.c: `boost tokenizer train`: a byte-level BPE trained on text (runtime/bpe.h). The text
 * is cut into words by the GPT-2 pre-tokenizer and the words counted; starting from the 256 bytes,
 * the most frequent adjacent pair of symbols (over all words, weighted by their counts; the smaller
 * pair of ids on ties) becomes a new token until the vocabulary has its size. Pair counts are kept
 * up to date through the words each pair occurs in, with a max-heap read lazily. The result is a
 * tokenizer.json that the `tokenizers` library loads (GPT-2's byte-to-character alphabet). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/bpe.h"
#include "common/json.h"   // defines: json_write_string
#include "common/files.h"  // defines: file_commit

typedef struct { int32_t *sym; int32_t n; int64_t count; uint32_t stamp; } Word;
typedef struct { uint64_t key; int64_t count; int32_t *where; int32_t nwhere, capwhere; } Pair;
typedef struct { int64_t count; uint64_t key; } Cand;

typedef struct {
    Word *words; int32_t nwords, capwords;
    int32_t *wslot; uint32_t wcap;                 /* word text -> index (during counting) */
    unsigned char **wtext; int32_t *wlen;
    Pair *pairs; uint32_t pcap, npairs;            /* open addressing, key 0 = empty */
    Cand *heap; size_t hn, hcap;
    unsigned char **tok; int32_t *toklen; int32_t ntok;   /* token bytes (specials first) */
    int32_t *tslot; uint32_t tcap;                 /* token bytes -> id */
} Trainer;

static uint64_t hash64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}
static uint64_t hash_text(const unsigned char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
    return h;
}
static uint64_t pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

/* ---- counting words ---- */
static int add_word(Trainer *t, const unsigned char *s, size_t n) {
    if (2 * (uint64_t)(t->nwords + 1) > t->wcap) {   /* grow and rehash */
        uint32_t cap = t->wcap ? 2 * t->wcap : 1 << 16;
        int32_t *slot = malloc(sizeof *slot * cap);
        if (!slot) return -1;
        memset(slot, 0xFF, sizeof *slot * cap);
        for (int32_t w = 0; w < t->nwords; w++) {
            uint32_t i = (uint32_t)hash_text(t->wtext[w], (size_t)t->wlen[w]) & (cap - 1);
            while (slot[i] >= 0) i = (i + 1) & (cap - 1);
            slot[i] = w;
        }
        free(t->wslot); t->wslot = slot; t->wcap = cap;
    }
    uint32_t i = (uint32_t)hash_text(s, n) & (t->wcap - 1);
    for (; t->wslot[i] >= 0; i = (i + 1) & (t->wcap - 1)) {
        int32_t w = t->wslot[i];
        if ((size_t)t->wlen[w] == n && !memcmp(t->wtext[w], s, n)) {
            t->words[w].count++;
            return 0;
        }
    }
    if (t->nwords == t->capwords) {
        int32_t cap = t->capwords ? 2 * t->capwords : 1 << 14;
        Word *w = realloc(t->words, sizeof *w * (size_t)cap);
        unsigned char **tx = realloc(t->wtext, sizeof *tx * (size_t)cap);
        int32_t *ln = realloc(t->wlen, sizeof *ln * (size_t)cap);
        if (w) t->words = w;
        if (tx) t->wtext = tx;
        if (ln) t->wlen = ln;
        if (!w || !tx || !ln) return -1;
        t->capwords = cap;
    }
    int32_t w = t->nwords++;
    t->wtext[w] = malloc(n);
    t->words[w] = (Word){malloc(sizeof(int32_t) * n), (int32_t)n, 1, 0};
    if (!t->wtext[w] || !t->words[w].sym) return -1;
    memcpy(t->wtext[w], s, n);
    t->wlen[w] = (int32_t)n;
    t->wslot[i] = w;
    return 0;
}

/* ---- pairs ---- */
static Pair *pair_get(Trainer *t, uint64_t key, int create) {
    if (create && 2 * (t->npairs + 1) > t->pcap) {
        uint32_t cap = t->pcap ? 2 * t->pcap : 1 << 16;
        Pair *np = calloc(cap, sizeof *np);
        if (!np) return NULL;
        for (uint32_t k = 0; k < t->pcap; k++) {
            if (!t->pairs[k].key) continue;
            uint32_t i = (uint32_t)hash64(t->pairs[k].key) & (cap - 1);
            while (np[i].key) i = (i + 1) & (cap - 1);
            np[i] = t->pairs[k];
        }
        free(t->pairs); t->pairs = np; t->pcap = cap;
    }
    if (!t->pcap) return NULL;
    for (uint32_t i = (uint32_t)hash64(key) & (t->pcap - 1);; i = (i + 1) & (t->pcap - 1)) {
        if (t->pairs[i].key == key) return &t->pairs[i];
        if (!t->pairs[i].key) {
            if (!create) return NULL;
            t->pairs[i].key = key;
            t->npairs++;
            return &t->pairs[i];
        }
    }
}

static int pair_add(Trainer *t, int32_t a, int32_t b, int64_t count, int32_t word) {
    Pair *p = pair_get(t, pair_key(a, b), 1);
    if (!p) return -1;
    p->count += count;
    if (word >= 0) {
        if (p->nwhere == p->capwhere) {
            int32_t cap = p->capwhere ? 2 * p->capwhere : 4;
            int32_t *w = realloc(p->where, sizeof *w * (size_t)cap);
            if (!w) return -1;
            p->where = w; p->capwhere = cap;
        }
        p->where[p->nwhere++] = word;
    }
    return 0;
}

/* ---- the max-heap of candidate merges (count, then the smaller pair) ---- */
static int cand_before(Cand a, Cand b) {
    return a.count > b.count || (a.count == b.count && a.key < b.key);
}

static int heap_push(Trainer *t, Cand c) {
    if (t->hn == t->hcap) {
        size_t cap = t->hcap ? 2 * t->hcap : 1 << 16;
        Cand *h = realloc(t->heap, sizeof *h * cap);
        if (!h) return -1;
        t->heap = h; t->hcap = cap;
    }
    size_t k = t->hn++;
    while (k > 0 && cand_before(c, t->heap[(k - 1) / 2])) {
        t->heap[k] = t->heap[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    t->heap[k] = c;
    return 0;
}

static Cand heap_pop(Trainer *t) {
    Cand top = t->heap[0], last = t->heap[--t->hn];
    size_t k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= t->hn) break;
        if (c + 1 < t->hn && cand_before(t->heap[c + 1], t->heap[c])) c++;
        if (!cand_before(t->heap[c], last)) break;
        t->heap[k] = t->heap[c]; k = c;
    }
    if (t->hn) t->heap[k] = last;
    return top;
}

/* Replace (a, b) by id in every word it occurs in, keeping the pair counts right; the pairs made
 * with id become candidates. */
static int apply_merge(Trainer *t, int32_t a, int32_t b, int32_t id, uint32_t stamp) {
    Pair *p = pair_get(t, pair_key(a, b), 0);
    int32_t nwhere = p->nwhere, *where = p->where;
    p->where = NULL; p->nwhere = p->capwhere = 0;
    uint64_t *fresh = NULL;
    size_t nfresh = 0, capfresh = 0;
    int rc = 0;
    for (int32_t k = 0; k < nwhere && !rc; k++) {
        Word *w = &t->words[where[k]];
        if (w->stamp == stamp) continue;   /* listed twice */
        w->stamp = stamp;
        int found = 0;
        for (int32_t i = 0; i + 1 < w->n && !found; i++)
            found = w->sym[i] == a && w->sym[i + 1] == b;
        if (!found) continue;
        for (int32_t i = 0; i + 1 < w->n; i++) pair_add(t, w->sym[i], w->sym[i + 1], -w->count, -1);
        int32_t o = 0;
        for (int32_t i = 0; i < w->n; i++) {
            if (i + 1 < w->n && w->sym[i] == a && w->sym[i + 1] == b) { w->sym[o++] = id; i++; }
            else w->sym[o++] = w->sym[i];
        }
        w->n = o;
        for (int32_t i = 0; i + 1 < w->n && !rc; i++) {
            int made = w->sym[i] == id || w->sym[i + 1] == id;
            rc = pair_add(t, w->sym[i], w->sym[i + 1], w->count, made ? where[k] : -1);
            if (made && !rc) {
                if (nfresh == capfresh) {
                    capfresh = capfresh ? 2 * capfresh : 256;
                    uint64_t *f = realloc(fresh, sizeof *f * capfresh);
                    if (!f) { rc = -1; break; }
                    fresh = f;
                }
                fresh[nfresh++] = pair_key(w->sym[i], w->sym[i + 1]);
            }
        }
    }
    free(where);
    for (size_t i = 0; i < nfresh && !rc;
         i++) { /* a key listed twice: the second is stale, skipped later */
        Pair *q = pair_get(t, fresh[i], 0);
        if (q && q->count > 0) rc = heap_push(t, (Cand){q->count, fresh[i]});
    }
    free(fresh);
    return rc;
}

/* ---- tokenizer.json ---- */
static void write_token(FILE *f, const unsigned char *s, int32_t n) {
    char buf[1024], *o = buf;
    for (int32_t i = 0; i < n && o - buf < (int)sizeof buf - 8; i++)
        o += bpe_utf8_put(bpe_byte_char(s[i]), o);
    *o = 0;
    json_write_string(f, buf);
}

static int write_json(const Trainer *t, int nspecial, const int32_t (*merges)[2], int nmerges,
                      const char *path, char *err, size_t errlen) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) { snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno)); return 1; }
    fprintf(f, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  "
               "\"added_tokens\": [");
    for (int i = 0; i < nspecial; i++) {
        fprintf(f, "%s\n    {\"id\": %d, \"content\": ", i ? "," : "", i);
        json_write_string(f, (const char *)t->tok[i]);
        fprintf(f, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                   "\"normalized\": false, "
                   "\"special\": true}");
    }
    const char *bl =
            "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
            "\"use_regex\": true}";
    fprintf(f,
            "\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": %s,\n  \"post_processor\": %s,\n"
            "  \"decoder\": %s,\n  \"model\": {\"type\": \"BPE\", \"dropout\": null, "
            "\"unk_token\": null, "
            "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": "
            "false, "
            "\"byte_fallback\": false, \"ignore_merges\": false,\n    \"vocab\": {",
            bl, bl, bl);
    for (int32_t id = 0; id < t->ntok; id++) { /* the special tokens too, as the library has them */
        fprintf(f, "%s\n      ", id ? "," : "");
        if (id < nspecial) json_write_string(f, (const char *)t->tok[id]);
        else write_token(f, t->tok[id], t->toklen[id]);
        fprintf(f, ": %d", id);
    }
    fprintf(f, "\n    },\n    \"merges\": [");
    for (int m = 0; m < nmerges; m++) {
        fprintf(f, "%s\n      [", m ? "," : "");
        write_token(f, t->tok[merges[m][0]], t->toklen[merges[m][0]]);
        fprintf(f, ", ");
        write_token(f, t->tok[merges[m][1]], t->toklen[merges[m][1]]);
        fprintf(f, "]");
    }
    fprintf(f, "\n    ]\n  }\n}\n");
    if (file_commit(f, tmp, path) != 0) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        return 1;
    }
    return 0;
}

static void trainer_free(Trainer *t) {
    for (int32_t w = 0; w < t->nwords; w++) { free(t->words[w].sym); free(t->wtext[w]); }
    for (uint32_t i = 0; i < t->pcap; i++) free(t->pairs[i].where);
    for (int32_t i = 0; i < t->ntok; i++) free(t->tok[i]);
    free(t->words); free(t->wtext); free(t->wlen); free(t->wslot); free(t->pairs); free(t->heap);
    free(t->tok); free(t->toklen); free(t->tslot);
}

/* The id of a token with these bytes, or -1; *slot: where a new one goes. */
static int32_t token_find(const Trainer *t, const unsigned char *s, int32_t n, uint32_t *slot) {
    uint32_t i = (uint32_t)hash_text(s, (size_t)n) & (t->tcap - 1);
    for (; t->tslot[i] >= 0; i = (i + 1) & (t->tcap - 1)) {
        int32_t k = t->tslot[i];
        if (t->toklen[k] == n && !memcmp(t->tok[k], s, (size_t)n)) return k;
    }
    *slot = i;
    return -1;
}

static int new_token(Trainer *t, const unsigned char *s, int32_t n) {
    uint32_t slot;
    if (token_find(t, s, n, &slot) < 0) t->tslot[slot] = t->ntok;   /* a repeated special: first */
    t->tok[t->ntok] = malloc((size_t)n + 1);
    if (!t->tok[t->ntok]) return -1;
    memcpy(t->tok[t->ntok], s, (size_t)n);
    t->tok[t->ntok][n] = 0;
    t->toklen[t->ntok++] = n;
    return 0;
}

int bpe_train(const unsigned char *const *texts, const size_t *lens, int ntexts, int vocab_size,
              const char *const *specials, const char *out_path, char *err,
              size_t errlen) {
    int nspecial = 0;
    while (specials && specials[nspecial]) nspecial++;
    if (vocab_size < 256 + nspecial || vocab_size > (1 << 24)) {
        snprintf(err, errlen,
                 "a vocabulary of %d tokens: it needs at least the 256 bytes and %d special "
                 "token%s (%d), at most %d",
                 vocab_size, nspecial, nspecial == 1 ? "" : "s", 256 + nspecial, 1 << 24);
        return 2;
    }
    Trainer t = {0};
    int nmerges = 2 * vocab_size, done = 0, rc = 0;   /* (a merge may remake a token: a+bc, ab+c) */
    int32_t (*merges)[2] = malloc(sizeof *merges * (size_t)(nmerges + 1));
    t.tok = calloc((size_t)vocab_size, sizeof *t.tok);
    t.toklen = calloc((size_t)vocab_size, sizeof *t.toklen);
    for (t.tcap = 64; t.tcap < 2 * (uint32_t)vocab_size;) t.tcap *= 2;
    t.tslot = malloc(sizeof *t.tslot * t.tcap);
    if (t.tslot) memset(t.tslot, 0xFF, sizeof *t.tslot * t.tcap);
    if (!merges || !t.tok || !t.toklen || !t.tslot) rc = -1;
    for (int i = 0; i < nspecial && !rc; i++)
        rc = new_token(&t, (const unsigned char *)specials[i], (int32_t)strlen(specials[i]));
    for (int c = 0; c < 256 && !rc; c++) {
        unsigned char b = (unsigned char)c;
        rc = new_token(&t, &b, 1);
    }
    for (int k = 0; k < ntexts && !rc; k++)
        for (size_t i = 0; i < lens[k] && !rc;) {
            size_t j = bpe_pretok_gpt2(texts[k], i, lens[k]);
            rc = add_word(&t, texts[k] + i, j - i);
            i = j;
        }
    for (int32_t w = 0; w < t.nwords && !rc; w++) {   /* words as bytes; every pair counted */
        Word *wd = &t.words[w];
        for (int32_t i = 0; i < wd->n; i++) wd->sym[i] = nspecial + t.wtext[w][i];
        for (int32_t i = 0; i + 1 < wd->n && !rc; i++)
            rc = pair_add(&t, wd->sym[i], wd->sym[i + 1], wd->count, w);
    }
    for (uint32_t i = 0; i < t.pcap && !rc; i++)
        if (t.pairs[i].key && t.pairs[i].count > 0)
            rc = heap_push(&t, (Cand){t.pairs[i].count, t.pairs[i].key});
    while (!rc && t.ntok < vocab_size && done < nmerges && t.hn) {
        Cand c = heap_pop(&t);
        Pair *p = pair_get(&t, c.key, 0);
        if (!p || p->count != c.count) {   /* stale: again with its count now */
            if (p && p->count > 0) rc = heap_push(&t, (Cand){p->count, c.key});
            continue;
        }
        int32_t a = (int32_t)((c.key - 1) >> 32), b = (int32_t)(uint32_t)(c.key - 1), id = -1;
        int32_t n = t.toklen[a] + t.toklen[b];
        unsigned char *joined = malloc((size_t)n);
        if (!joined) { rc = -1; break; }
        memcpy(joined, t.tok[a], (size_t)t.toklen[a]);
        memcpy(joined + t.toklen[a], t.tok[b], (size_t)t.toklen[b]);
        uint32_t slot;
        id = token_find(&t, joined, n, &slot);   /* a token made before by another pair */
        if (id < 0) { id = t.ntok; rc = new_token(&t, joined, n); }
        free(joined);
        merges[done][0] = a; merges[done][1] = b; done++;
        if (!rc) rc = apply_merge(&t, a, b, id, (uint32_t)done);
    }
    if (rc) { snprintf(err, errlen, "out of memory"); trainer_free(&t); free(merges); return 1; }
    rc = write_json(&t, nspecial, (const int32_t (*)[2])merges, done, out_path, err, errlen);
    trainer_free(&t);
    free(merges);
    return rc;
}
