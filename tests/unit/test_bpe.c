/* test_bpe.c: pieces of the tokenizers that need no library to check (runtime/bpe.h): the GPT-2,
 * LLaMA-3 and Qwen2 pre-tokenizers' splits, worked out by hand from their regexes; GPT-2's
 * byte-to-character alphabet at bytes whose characters are known; and the JSON parser joining a
 * \u surrogate pair into one 4-byte character (Python escapes emoji that way in tokenizer.json). */
#include <string.h>
#include "runtime/bpe.h"
#include "common/json.h"
#include "tests/unit/testlib.h"

/* The pieces of text joined by '|' (text must not contain '|'); digits 0: GPT-2, else LLaMA-3's
 * pre-tokenizer with at most that many digits a piece. */
static void splits(const char *text, int digits, char *out, size_t cap) {
    size_t n = strlen(text), o = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char *s = (const unsigned char *)text;
        size_t j = digits ? bpe_pretok_llama3(s, i, n, digits) : bpe_pretok_gpt2(s, i, n);
        if (j <= i) { snprintf(out, cap, "no progress at %zu", i); return; }
        if (o && o + 1 < cap) out[o++] = '|';
        for (; i < j && o + 1 < cap; i++) out[o++] = text[i];
    }
    out[o] = 0;
}

int main(void) {
    static const struct { const char *name, *text, *want; int digits; } cases[] = {
        {"gpt2_split_contraction_and_spaces", "I'm  here\n\nnow 123abc!!",
         "I|'m| | here|\n|\n|now| 123|abc|!!", 0},
        {"gpt2_split_tabs_only_space_joins", "a\t\tb", "a|\t|\t|b", 0},
        {"gpt2_split_contractions_case_sensitive", "it's'S", "it|'s|'|S", 0},
        {"gpt2_split_non_ascii_letters", "na\xc3\xafve caf\xc3\xa9 \xc2\xbfQu\xc3\xa9?",
         "na\xc3\xafve| caf\xc3\xa9| \xc2\xbf|Qu\xc3\xa9|?", 0},
        {"gpt2_split_trailing_spaces", "end   ", "end|   ", 0},
        {"gpt2_split_digits_then_letters", "x 12ab", "x| 12|ab", 0},
        {"llama3_split_contraction_any_case", "I'M  here", "I|'M| | here", 3},
        {"llama3_split_digits_by_three", "\tx 1234567", "\tx| |123|456|7", 3},
        {"qwen2_split_digits_one_by_one", "x 123", "x| |1|2|3", 1},
        {"llama3_split_punctuation_takes_line_breaks", "a.\n\nb", "a|.\n\n|b", 3},
        {"llama3_split_spaces_to_last_line_break", " \n  \n y", " \n  \n| y", 3},
        {"llama3_split_one_symbol_joins_a_word", "(x) ...\r\nz", "(x|)| ...\r\n|z", 3},
    };
    char got[256];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        splits(cases[k].text, cases[k].digits, got, sizeof got);
        CHECK(!strcmp(got, cases[k].want), cases[k].name, "got [%s], expected [%s]", got,
              cases[k].want);
    }
    /* the printable Latin-1 bytes stand for themselves; the others take 256.. in byte order:
     * 0..32 -> 256..288, 127..160 -> 289..322, 173 -> 323 */
    CHECK(bpe_byte_char(' ') == 0x120 && bpe_byte_char('\n') == 0x10A &&
          bpe_byte_char('A') == 'A' && bpe_byte_char(0) == 0x100 && bpe_byte_char(127) == 0x121 &&
          bpe_byte_char(0xAD) == 0x143 && bpe_byte_char(0xFF) == 0xFF,
          "byte_level_alphabet", "space U+%04X, newline U+%04X, 0xAD U+%04X", bpe_byte_char(' '),
          bpe_byte_char('\n'), bpe_byte_char(0xAD));
    char err[128];
    const char *esc = "{\"t\": \"\\ud83d\\ude00\"}";
    Json *j = json_parse(esc, strlen(esc), err, sizeof err);
    const Json *t = j ? json_get(j, "t") : NULL;
    CHECK(t && t->type == JSON_STRING && !strcmp(t->str, "\xF0\x9F\x98\x80"), "json_surrogate_pair",
          "U+1F600 is F0 9F 98 80 in UTF-8; got %s", t ? "other bytes" : err);
    json_free(j);
    TEST_EXIT();
}
