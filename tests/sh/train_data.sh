#!/usr/bin/env bash
# train_data.sh: the three data sources give the same training. The corpus ("corpus"), the same
# bytes as a text file, and the same bytes as an llm.c token file (.bin, uint16 tokens) are one
# token stream, so a short run on each logs the same losses, bit for bit. A missing corpus is
# built on demand, identical to the one in the tree.
. tests/sh/lib.sh
common=(tiny-cola --backend cpu -D tp=1 -D steps=4 -D eval_every=0 --quiet)
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }

$BOOST train "${common[@]}" -D data=corpus --log "$TMP/corpus.jsonl" >"$TMP/out" 2>&1 \
  || { fail data_corpus_run "$(tail -2 "$TMP/out")"; exit 1; }
corpus=$(grep -o 'data [^:]*corpus.txt' "$TMP/out" | head -1 | cut -c6-)
[ -f "$corpus" ] && ok data_corpus_run || { fail data_corpus_run "no corpus path in: $(grep data "$TMP/out")"; exit 1; }
cp "$corpus" "$TMP/copy.txt"
$BOOST train "${common[@]}" -D data="$TMP/copy.txt" --log "$TMP/text.jsonl" >"$TMP/out" 2>&1
rc=$?
same=1
for s in 1 2 3 4; do [ "$(field "$TMP/corpus.jsonl" $s loss)" = "$(field "$TMP/text.jsonl" $s loss)" ] || same=0; done
[ $rc = 0 ] && [ $same = 1 ] && ok data_text_file_same_as_corpus || fail data_text_file_same_as_corpus "exit $rc"

if command -v python3 >/dev/null; then
  python3 -c "
import struct, sys
data = open(sys.argv[1], 'rb').read()
with open(sys.argv[2], 'wb') as f:
    f.write(struct.pack('<256i', 20240520, 1, len(data), *([0] * 253)))
    f.write(struct.pack('<%dH' % len(data), *data))
" "$TMP/copy.txt" "$TMP/tokens.bin"
  $BOOST train "${common[@]}" -D data="$TMP/tokens.bin" --log "$TMP/bin.jsonl" >"$TMP/out" 2>&1
  rc=$?
  same=1
  for s in 1 2 3 4; do [ "$(field "$TMP/corpus.jsonl" $s loss)" = "$(field "$TMP/bin.jsonl" $s loss)" ] || same=0; done
  [ $rc = 0 ] && [ $same = 1 ] && ok data_token_file_same_as_text || fail data_token_file_same_as_text "exit $rc: $(tail -2 "$TMP/out")"
else
  ok "data_token_file_same_as_text # SKIP no python3 to write the token file"
fi


# "corpus" where build/corpus.txt is missing: tools/corpus.sh builds it on demand, byte for byte the
# same file as the one in this tree (sorted input files: the same corpus on every machine)
if [ -d /usr/share/games/fortunes ]; then
  mkdir -p "$TMP/root/tools" "$TMP/elsewhere"
  cp tools/corpus.sh "$TMP/root/tools/"
  $BOOST train tiny-cola --backend cpu -D tp=1 -D steps=1 --quiet -o "$TMP/p" >/dev/null 2>&1
  boost_abs=$(cd "$(dirname "$BOOST")" && pwd)/$(basename "$BOOST")
  (cd "$TMP/elsewhere" && BOOST_ROOT="$TMP/root" "$boost_abs" train --plan "$TMP/p/plan" -D steps=1 --quiet) >"$TMP/out" 2>&1
  rc=$?
  [ $rc = 0 ] && grep -q "building the corpus" "$TMP/out" && cmp -s "$TMP/root/build/corpus.txt" "$corpus" \
    && ok corpus_built_on_demand || fail corpus_built_on_demand "exit $rc: $(tail -2 "$TMP/out")"
else
  ok "corpus_built_on_demand # SKIP Debian's fortunes is not installed"
fi
