/* nfc.h: Unicode Normalization Form C over UTF-8 (runtime/nfc.c), the NFC normalizer of Hugging
 * Face tokenizers: canonical decomposition, canonical ordering, canonical composition, with
 * Hangul syllables worked out algorithmically. Bytes that are not UTF-8 pass through unchanged. */
#ifndef BOOST_NFC_H
#define BOOST_NFC_H
#include <stddef.h>
#include <stdint.h>

/* Work space reused between calls (zero it before the first; nfc_scratch_free at the end). */
typedef struct { int32_t *cp; unsigned char *cls; size_t cap; } NfcScratch;

/* 1 if NFC leaves s[0..n) unchanged for sure (no character of the NFC-unstable set), else 0. */
int nfc_quick_stable(const unsigned char *s, size_t n);

/* The NFC form of s[0..n) into *out (grown as needed, capacity *cap), its length in *outn.
 * Returns 0, or -1 when out of memory. */
int nfc_normalize(const unsigned char *s, size_t n, NfcScratch *w, unsigned char **out,
                  size_t *cap, size_t *outn);

void nfc_scratch_free(NfcScratch *w);

/* The canonical combining class of a code point (0 for starters). */
int nfc_combining_class(uint32_t cp);

#endif
