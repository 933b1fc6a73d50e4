#!/usr/bin/env bash
# tokenize_flags.sh: `boost tokenize` gives the `tokenizers` library's ids on text that NFC changes
# (a byte-level tokenizer with Qwen2's NFC normalizer; a SentencePiece-style one with NFC in
# LLaMA-2's normalizer sequence) and on text around added tokens with each flag (lstrip, rstrip,
# single_word, normalized, special), tokenizers written by the library in tests/tokenize_flags_ref.py.
. tests/sh/lib.sh
PY=${PYTHON:-python3}
[ -f build/corpus.txt ] || bash tools/corpus.sh >/dev/null 2>&1
if [ ! -f build/corpus.txt ]; then ok "tokenize_flags # SKIP no corpus (Debian's fortunes package)"; exit 0; fi
$PY tests/tokenize_flags_ref.py build/corpus.txt "$TMP" >"$TMP/ref.out" 2>&1
rc=$?
if [ $rc = 3 ]; then ok "tokenize_flags # SKIP the tokenizers library is not importable (pip install tokenizers)"; exit 0; fi
[ $rc = 0 ] || { fail tokenize_flags_ref "the reference script failed: $(tail -3 "$TMP/ref.out")"; exit 1; }
while read -r name sep; do
  $BOOST tokenize "$TMP/$name.json" "$TMP/docs.jsonl" -o "$TMP/$name.bin" --sep "$sep" --threads 2 --quiet \
    >"$TMP/out" 2>&1 && cmp -s "$TMP/$name.bin" "$TMP/$name.expected.bin" && ok "tokenize_same_ids_$name" ||
    fail "tokenize_same_ids_$name" "not the library's ids: $(tail -1 "$TMP/out"; cmp "$TMP/$name.bin" "$TMP/$name.expected.bin" 2>&1)"
done <"$TMP/ref.out"
