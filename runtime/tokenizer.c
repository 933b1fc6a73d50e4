/* tokenizer.c: the byte-level tokenizer: each byte of the text is one token (vocab 256), so any
 * text, in any encoding, round-trips exactly. */
#include "runtime/tokenizer.h"   // defines: tokenize_bytes, detokenize_bytes, BYTE_VOCAB

int64_t tokenize_bytes(const unsigned char *text, size_t len, int32_t *out) {
    for (size_t i = 0; i < len; i++) out[i] = text[i];
    return (int64_t)len;
}

int64_t detokenize_bytes(const int32_t *tokens, int64_t n, unsigned char *out) {
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= BYTE_VOCAB) return -1;
        out[i] = (unsigned char)tokens[i];
    }
    return n;
}
