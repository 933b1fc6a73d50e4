#!/usr/bin/env bash
# tokenizer_train.sh: `boost tokenizer train` writes a byte-level BPE tokenizer.json of the asked
# size that the `tokenizers` library loads; text goes through it and back unchanged (the library's
# encode/decode and boost tokenize/--decode, bytes that are not UTF-8 included); on the same corpus
# and size it compresses within 2% of the library's own BpeTrainer; a size below the byte alphabet
# is refused.
. tests/sh/lib.sh
PY=${PYTHON:-python3}
[ -f build/corpus.txt ] || bash tools/corpus.sh >/dev/null 2>&1
if [ ! -f build/corpus.txt ]; then ok "tokenizer_train # SKIP no corpus (Debian's fortunes package)"; exit 0; fi
head -c 600000 build/corpus.txt >"$TMP/corpus.txt"
$BOOST tokenizer train "$TMP/corpus.txt" --vocab 2048 -o "$TMP/tok.json" >"$TMP/out" 2>&1 &&
  ok tokenizer_train_runs || { fail tokenizer_train_runs "$(tail -2 "$TMP/out")"; exit 1; }
printf 'caf\xc3\xa9 \xff\xfe broken \xc3( text\n' | cat - "$TMP/corpus.txt" >"$TMP/mixed.txt"
$BOOST tokenize "$TMP/tok.json" "$TMP/mixed.txt" -o "$TMP/mixed.bin" --sep none --quiet >/dev/null 2>&1 &&
  $BOOST tokenize "$TMP/tok.json" --decode "$TMP/mixed.bin" -o "$TMP/back.txt" >/dev/null 2>&1 &&
  cmp -s "$TMP/back.txt" "$TMP/mixed.txt" && ok tokenizer_train_round_trip_boost ||
  fail tokenizer_train_round_trip_boost "$(cmp "$TMP/back.txt" "$TMP/mixed.txt" 2>&1)"
$BOOST tokenizer train "$TMP/corpus.txt" --vocab 200 -o "$TMP/small.json" >"$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "at least the 256 bytes" "$TMP/out" && ok tokenizer_train_too_small_refused ||
  fail tokenizer_train_too_small_refused "exit $rc: $(cat "$TMP/out")"
if ! $PY -c 'import tokenizers' 2>/dev/null; then
  ok "tokenizer_train_library # SKIP the tokenizers library is not importable (pip install tokenizers)"; exit 0
fi
$BOOST tokenize "$TMP/tok.json" "$TMP/corpus.txt" -o "$TMP/ours.bin" --sep none --quiet >/dev/null 2>&1
$PY - "$TMP/tok.json" "$TMP/corpus.txt" "$TMP/ours.bin" >"$TMP/py.out" 2>&1 <<'PYEOF'
import struct, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
text = open(sys.argv[2], encoding="utf-8", errors="strict").read()
ours = Tokenizer.from_file(sys.argv[1])
lib = Tokenizer(models.BPE())
lib.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
lib.decoder = decoders.ByteLevel()
lib.train_from_iterator([text], trainers.BpeTrainer(vocab_size=2048, special_tokens=["<|endoftext|>"],
                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
a, b = ours.encode(text).ids, lib.encode(text).ids
d = open(sys.argv[3], "rb").read()
n = struct.unpack("<3i", d[:12])[2]
mine = list(struct.unpack("<%dH" % n, d[1024:]))
print("vocab %d; tokens: ours %d, library's trainer %d (ratio %.4f)" % (ours.get_vocab_size(), len(a), len(b), len(a) / len(b)))
print("checks", ours.get_vocab_size() == 2048, ours.decode(a) == text, len(a) <= 1.02 * len(b), mine == a)
PYEOF
checks=$(grep '^checks' "$TMP/py.out")
[ "$(echo $checks | cut -d' ' -f2)" = True ] && ok tokenizer_train_library_loads_size || fail tokenizer_train_library_loads_size "$(cat "$TMP/py.out")"
[ "$(echo $checks | cut -d' ' -f3)" = True ] && ok tokenizer_train_round_trip_library || fail tokenizer_train_round_trip_library "$(cat "$TMP/py.out")"
[ "$(echo $checks | cut -d' ' -f4)" = True ] && ok tokenizer_train_compression_within_2pct || fail tokenizer_train_compression_within_2pct "$(cat "$TMP/py.out")"
[ "$(echo $checks | cut -d' ' -f5)" = True ] && ok tokenizer_train_boost_ids_are_library_ids || fail tokenizer_train_boost_ids_are_library_ids "$(cat "$TMP/py.out")"
grep vocab "$TMP/py.out" | sed "s/^/# /"
