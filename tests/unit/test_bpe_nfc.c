/* test_bpe_nfc.c: the NFC normalizer (runtime/nfc.h) on cases worked out from the Unicode standard
 * (composition, canonical ordering, exclusions, singletons, Hangul), and with `--lines` a filter:
 * each line of stdin normalized to stdout, which tests/sh/tokenize_nfc.sh compares with Python's
 * unicodedata.normalize('NFC', ...) on many strings. */
#include <string.h>
#include "runtime/nfc.h"
#include "tests/unit/testlib.h"

static int nfc_lines(void) {
    NfcScratch w = {0};
    unsigned char *out = NULL;
    size_t cap = 0, on, lcap = 0;
    char *line = NULL;
    ssize_t n;
    while ((n = getline(&line, &lcap, stdin)) > 0) {
        if (line[n - 1] == '\n') n--;
        if (nfc_normalize((const unsigned char *)line, (size_t)n, &w, &out, &cap, &on)) return 1;
        fwrite(out, 1, on, stdout);
        putchar('\n');
    }
    free(line); free(out); nfc_scratch_free(&w);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--lines")) return nfc_lines();
    static const struct { const char *name, *in, *want; } cases[] = {
        {"nfc_e_acute_composes", "e\xCC\x81", "\xC3\xA9"},
        {"nfc_precomposed_unchanged", "caf\xC3\xA9", "caf\xC3\xA9"},
        /* a + acute (230) + dot below (220): the dot below sorts first and composes (U+1EA1) */
        {"nfc_marks_reordered_then_composed", "a\xCC\x81\xCC\xA3", "\xE1\xBA\xA1\xCC\x81"},
        {"nfc_singleton_angstrom_to_a_ring", "\xE2\x84\xAB", "\xC3\x85"},
        {"nfc_exclusion_devanagari_qa_stays_decomposed", "\xE0\xA5\x98",
         "\xE0\xA4\x95\xE0\xA4\xBC"},
        {"nfc_hangul_lv_jamo_compose", "\xE1\x84\x80\xE1\x85\xA1", "\xEA\xB0\x80"},
        {"nfc_hangul_lvt_jamo_compose", "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"},
        {"nfc_hangul_lv_plus_t_composes", "\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81"},
        {"nfc_blocked_mark_stays", "e\xCC\x81\xCC\x81", "\xC3\xA9\xCC\x81"},
        {"nfc_leading_mark_stays", "\xCC\x81" "e", "\xCC\x81" "e"},
        {"nfc_invalid_bytes_kept", "e\xFF\xCC\x81", "e\xFF\xCC\x81"},
    };
    NfcScratch w = {0};
    unsigned char *out = NULL;
    size_t cap = 0, on;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *in = cases[i].in;
        int rc = nfc_normalize((const unsigned char *)in, strlen(in), &w, &out, &cap, &on);
        CHECK(!rc && on == strlen(cases[i].want) && !memcmp(out, cases[i].want, on), cases[i].name,
              "got %d bytes %.*s", (int)on, (int)on, out);
    }
    CHECK(nfc_quick_stable((const unsigned char *)"plain caf\xC3\xA9", 11) &&
              !nfc_quick_stable((const unsigned char *)"e\xCC\x81", 3),
          "nfc_quick_check_ascii_and_precomposed_stable_marks_not", "wrong verdict");
    free(out); nfc_scratch_free(&w);
    TEST_EXIT();
}
