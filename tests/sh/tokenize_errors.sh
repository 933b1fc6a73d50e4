#!/usr/bin/env bash
# tokenize_errors.sh: `boost tokenize` on small hand-written tokenizer.json files (no library
# needed): merges by rank, leftmost first, with ids worked out by hand; added tokens inside text;
# an NFC normalizer composing text; and the refusals, each exit 2 with its reason: a WordPiece or
# Unigram model (named), a regex it does not implement, an id outside the vocabulary.
. tests/sh/lib.sh
bpe() {   # bpe FILE NORMALIZER PRE_TOKENIZER: a SentencePiece-style BPE over a, b, c
  cat >"$1" <<JSON
{"version": "1.0", "added_tokens": [{"id": 9, "content": "<x>", "special": true}],
 "normalizer": $2, "pre_tokenizer": $3,
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "aa": 5},
           "merges": ["a b", "ab c", "a a"]}}
JSON
}
bpe "$TMP/t.json" null null
# "abcab": a b c a b -> (a b, rank 0, leftmost) ab c a b -> (a b at 3, rank 0) ab c ab -> abc ab
[ "$($BOOST tokenize "$TMP/t.json" --text abcab 2>&1)" = "4 3" ] && ok tokenize_merge_rank_order ||
  fail tokenize_merge_rank_order "got $($BOOST tokenize "$TMP/t.json" --text abcab 2>&1), expected 4 3"
# "aaa": a a a -> the leftmost pair of equal rank first: aa a
[ "$($BOOST tokenize "$TMP/t.json" --text aaa 2>&1)" = "5 0" ] && ok tokenize_merge_leftmost_on_ties ||
  fail tokenize_merge_leftmost_on_ties "got $($BOOST tokenize "$TMP/t.json" --text aaa 2>&1), expected 5 0"
[ "$($BOOST tokenize "$TMP/t.json" --text 'ab<x>c' 2>&1)" = "3 9 2" ] && ok tokenize_added_token_in_text ||
  fail tokenize_added_token_in_text "got $($BOOST tokenize "$TMP/t.json" --text 'ab<x>c' 2>&1), expected 3 9 2"

refused() {   # refused NAME PATTERN ARGS...: exit 2 and a message matching PATTERN
  local name=$1 pat=$2; shift 2
  $BOOST tokenize "$@" >"$TMP/out" 2>&1
  local rc=$?
  [ $rc = 2 ] && grep -q "$pat" "$TMP/out" && ok "$name" || fail "$name" "exit $rc: $(head -2 "$TMP/out")"
}
echo '{"model": {"type": "WordPiece", "vocab": {"a": 0}, "unk_token": "[UNK]"}}' >"$TMP/wp.json"
refused tokenize_wordpiece_refused "model type WordPiece: boost tokenize reads BPE" "$TMP/wp.json" --text a
echo '{"model": {"type": "Unigram", "vocab": [["a", -1.0]]}}' >"$TMP/uni.json"
refused tokenize_unigram_refused "model type Unigram" "$TMP/uni.json" --text a
bpe "$TMP/re.json" null '{"type": "Split", "pattern": {"Regex": "\\\\w+"}, "behavior": "Isolated", "invert": false}'
refused tokenize_unknown_regex_refused "regex .* is not one of the pre-tokenizers" "$TMP/re.json" --text a
bpe "$TMP/nfc.json" '{"type": "NFC"}' null
[ "$($BOOST tokenize "$TMP/nfc.json" --text abc 2>&1)" = "4" ] && ok tokenize_nfc_stable_text_accepted ||
  fail tokenize_nfc_stable_text_accepted "$($BOOST tokenize "$TMP/nfc.json" --text abc 2>&1)"
# e + U+0301 becomes U+00E9 under NFC (id 1), before and after an added token; without the
# normalizer the same text is e and U+0301 (ids 2 3)
cat >"$TMP/nfc2.json" <<'JSON'
{"added_tokens": [{"id": 9, "content": "<x>", "special": true, "normalized": false}],
 "normalizer": {"type": "NFC"},
 "model": {"type": "BPE", "vocab": {"a": 0, "\u00e9": 1, "e": 2, "\u0301": 3}, "merges": []}}
JSON
got=$($BOOST tokenize "$TMP/nfc2.json" --text "$(printf 'ae\xcc\x81<x>e\xcc\x81a')" 2>&1)
[ "$got" = "0 1 9 1 0" ] && ok tokenize_nfc_changing_text_normalized ||
  fail tokenize_nfc_changing_text_normalized "got $got, expected 0 1 9 1 0"
sed 's/"normalizer": {"type": "NFC"}/"normalizer": null/' "$TMP/nfc2.json" >"$TMP/nonfc.json"
got=$($BOOST tokenize "$TMP/nonfc.json" --text "$(printf 'ae\xcc\x81')" 2>&1)
[ "$got" = "0 2 3" ] && ok tokenize_without_nfc_text_kept || fail tokenize_without_nfc_text_kept "got $got"
bpe "$TMP/lc.json" '{"type": "Lowercase"}' null
refused tokenize_unknown_normalizer_refused "normalizer Lowercase is not supported" "$TMP/lc.json" --text a
python3 -c "
import struct; open('$TMP/ids.bin','wb').write(struct.pack('<256i',20240520,1,2,*([0]*253))+struct.pack('<2H',3,77))" 2>/dev/null &&
  refused tokenize_decode_unknown_id_refused "token 1: id 77 is not in the vocabulary" "$TMP/t.json" --decode "$TMP/ids.bin" ||
  ok "tokenize_decode_unknown_id_refused # SKIP no python3 to write the token file"
refused tokenize_missing_tokenizer "nothere.json: cannot open" "$TMP/nothere.json" --text a
: >"$TMP/empty.json"
refused tokenize_empty_tokenizer "empty.json: empty, or not a file" "$TMP/empty.json" --text a
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}' >"$TMP/badmerge.json"
refused tokenize_merge_outside_vocab "merge 0 (a + b): a part or the result is not in the vocabulary" \
  "$TMP/badmerge.json" --text a
refused tokenize_missing_input "nothere.txt: no such file" "$TMP/t.json" "$TMP/nothere.txt" -o "$TMP/o.bin"
