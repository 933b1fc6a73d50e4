/* bpe.h: Hugging Face tokenizer.json BPE tokenizers in C: byte-level BPE (GPT-2, LLaMA-3, Qwen:
 * their pre-tokenization regexes written by hand over UTF-8) and SentencePiece-style BPE with byte
 * fallback (LLaMA-2, Mistral: Prepend/Replace normalizers or a Metaspace pre-tokenizer); the NFC
 * normalizer (runtime/nfc.h); added and special tokens with their lstrip, rstrip, single_word and
 * normalized flags; encoding (ids as the `tokenizers` library gives them) and decoding; and a
 * byte-level BPE trainer that writes tokenizer.json (runtime/bpe_train.c). */
#ifndef BOOST_BPE_H
#define BOOST_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct Bpe Bpe;

enum BpeKind { BPE_BYTE_LEVEL, BPE_SENTENCEPIECE };

/* Load a tokenizer.json. Returns NULL with "PATH: what is wrong" in err and *status 2 (bad input: a
 * model type other than BPE names it, an unsupported normalizer or pre-tokenizer names it) or 1
 * (I/O). */
Bpe *bpe_load(const char *path, int *status, char *err, size_t errlen);
void bpe_free(Bpe *b);

int bpe_kind(const Bpe *b);
const char *bpe_describe(const Bpe *b);        /* "byte-level BPE, GPT-2 pre-tokenizer", ... */
int32_t bpe_vocab_size(const Bpe *b);          /* largest id + 1 (vocabulary and added tokens) */
int32_t bpe_token_id(const Bpe *b, const char *text); /* a vocabulary or added token's id, or -1 */
/* The document separator of token shards: the token the post-processor puts first (bos), else an
 * end-of-text special token (<|endoftext|>, <|end_of_text|>, </s>, <eos>), else -1. */
int32_t bpe_separator(const Bpe *b);

/* A growable id array. */
typedef struct { int32_t *v; int64_t n, cap; } BpeIds;
int bpe_ids_push(BpeIds *ids, int32_t id);     /* 0, or -1 when out of memory */

/* Per-thread encoding state (a cache of words already encoded, scratch buffers). */
typedef struct BpeEncoder BpeEncoder;
BpeEncoder *bpe_encoder_new(const Bpe *b);
void bpe_encoder_free(BpeEncoder *e);

/* Encode text[0..len) (one document, or a later piece of one when continuation is 1: no prefix
 * space or prepended meta-space then) and append its ids to out; added tokens in the text become
 * their ids. Bytes that are not UTF-8 go to the byte-level alphabet or to the byte-fallback tokens;
 * with neither (nor an unknown token) the text is refused: 2 with "byte N: ..." in err. 1: out of
 * memory. 0: done. */
int bpe_encode(BpeEncoder *e, const unsigned char *text, size_t len, int continuation, BpeIds *out,
               char *err, size_t errlen);

/* Decode ids to bytes, appended to *buf (realloc'ed; *len, *cap updated). Special tokens are
 * written as their text unless skip_special. Returns 0, or 2 with "token N: id X is not in the
 * vocabulary". */
int bpe_decode(const Bpe *b, const int32_t *ids, int64_t n, int skip_special, unsigned char **buf,
               size_t *len, size_t *cap, char *err, size_t errlen);

/* ---- runtime/bpe_train.c ---- */
/* Train a byte-level BPE of vocab_size tokens (256 byte tokens, the special tokens, merges) on the
 * texts (GPT-2 pre-tokenization) and write it as tokenizer.json to out_path. specials: NULL-ended
 * list of special tokens (ids 0..). Returns 0, 1 (I/O) or 2 (bad size), with err. */
int bpe_train(const unsigned char *const *texts, const size_t *lens, int ntexts, int vocab_size,
              const char *const *specials, const char *out_path, char *err, size_t errlen);

/* ---- helpers shared with the trainer ---- */
/* The GPT-2 pre-tokenizer: end of the piece that starts at text[i]. */
size_t bpe_pretok_gpt2(const unsigned char *s, size_t i, size_t n);
/* The LLaMA-3 (maxdigits 3) and Qwen2 (maxdigits 1) pre-tokenizers, the same way. */
size_t bpe_pretok_llama3(const unsigned char *s, size_t i, size_t n, int maxdigits);
/* GPT-2's byte-to-character map: the code point standing for byte b in byte-level vocabularies. */
uint32_t bpe_byte_char(unsigned char b);
/* Append code point cp as UTF-8 to out; returns its length (1-4). */
int bpe_utf8_put(uint32_t cp, char *out);

#endif
