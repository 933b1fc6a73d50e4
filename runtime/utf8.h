/* utf8.h: one UTF-8 character decoded or encoded, shared by the tokenizers (runtime/bpe.c) and
 * NFC (runtime/nfc.c). Decoding is strict: overlong forms, surrogates and code points past
 * U+10FFFF are not UTF-8. */
#ifndef BOOST_UTF8_H
#define BOOST_UTF8_H
#include <stddef.h>
#include <stdint.h>

/* The character at s[0..n): its code point, or -1 (and *len 1) for a byte that does not start
 * valid UTF-8. */
static inline int32_t utf8_decode(const unsigned char *s, size_t n, int *len) {
    unsigned c = s[0];
    *len = 1;
    if (c < 0x80) return (int32_t)c;
    int k;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) { k = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { k = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { k = 4; cp = c & 0x07; min = 0x10000; }
    else return -1;
    if ((size_t)k > n) return -1;
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *len = k;
    return (int32_t)cp;
}

/* cp as UTF-8 at o (1 to 4 bytes): the length. */
static inline int utf8_encode(uint32_t cp, unsigned char *o) {
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6); o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12); o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18); o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
#endif
