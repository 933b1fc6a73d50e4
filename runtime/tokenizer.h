/* tokenizer.h: the byte-level tokenizer (runtime/tokenizer.c): every byte of a text is one token
 * 0..255, so any text in any encoding round-trips exactly. */
#ifndef BOOST_TOKENIZER_H
#define BOOST_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define BYTE_VOCAB 256

int64_t tokenize_bytes(const unsigned char *text, size_t len, int32_t *out);   /* returns len */
/* Decodes tokens back to bytes; returns -1 (and stops) at a token outside 0..255. */
int64_t detokenize_bytes(const int32_t *tokens, int64_t n, unsigned char *out);

#endif
