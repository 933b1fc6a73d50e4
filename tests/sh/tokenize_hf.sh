#!/usr/bin/env bash
# tokenize_hf.sh: `boost tokenize` gives the ids of the `tokenizers` library. Tokenizers trained by
# the library on part of the corpus (tests/tokenize_ref.py: byte-level with the GPT-2, LLaMA-3 (also
# with ignore_merges) and Qwen2 pre-tokenizers, SentencePiece-style with byte fallback) encode the
# same documents, and one long document cut into pieces, to the same token files at 1 and 3
# threads; decoding gives the text back; invalid UTF-8 round-trips through the byte alphabet or
# byte fallback, or is refused.
. tests/sh/lib.sh
PY=${PYTHON:-python3}
[ -f build/corpus.txt ] || bash tools/corpus.sh >/dev/null 2>&1
if [ ! -f build/corpus.txt ]; then ok "tokenize_hf # SKIP no corpus (Debian's fortunes package)"; exit 0; fi
$PY tests/tokenize_ref.py build/corpus.txt "$TMP" >"$TMP/ref.out" 2>&1
rc=$?
if [ $rc = 3 ]; then ok "tokenize_hf # SKIP the tokenizers library is not importable (pip install tokenizers)"; exit 0; fi
[ $rc = 0 ] || { fail tokenize_ref "the reference script failed: $(tail -3 "$TMP/ref.out")"; exit 1; }

for name in gpt2 llama3 llama3im qwen2 llama2 metaspace metafirst; do
  sep="<|endoftext|>"; case $name in llama2|meta*) sep="<s>";; esac
  $BOOST tokenize "$TMP/$name.json" "$TMP/docs.jsonl" -o "$TMP/$name.bin" --sep "$sep" --threads 3 --quiet \
    >"$TMP/out" 2>&1 && cmp -s "$TMP/$name.bin" "$TMP/$name.expected.bin" && ok "tokenize_same_ids_$name" \
    || fail "tokenize_same_ids_$name" "not the library's ids: $(tail -1 "$TMP/out"; cmp "$TMP/$name.bin" "$TMP/$name.expected.bin" 2>&1)"
done

# every document back from the shard, each after its separator's text (not Metaspace: it adds no
# prefix to a text that begins with a space, so decoding cannot tell and drops that space, as the
# library's Metaspace decoder does)
$PY -c '
import json, sys
docs = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
for sep, out in (("<|endoftext|>", sys.argv[2]), ("<s>", sys.argv[3])):
    open(out, "w", encoding="utf-8", newline="").write("".join(sep + d for d in docs))
' "$TMP/docs.jsonl" "$TMP/docs.bl.txt" "$TMP/docs.sp.txt"
for name in gpt2 llama2; do
  want="$TMP/docs.bl.txt"; [ $name = gpt2 ] || want="$TMP/docs.sp.txt"
  $BOOST tokenize "$TMP/$name.json" --decode "$TMP/$name.bin" -o "$TMP/$name.docs.txt" >"$TMP/out" 2>&1 &&
    cmp -s "$TMP/$name.docs.txt" "$want" && ok "tokenize_decode_documents_$name" ||
    fail "tokenize_decode_documents_$name" "$(cat "$TMP/out"; cmp "$TMP/$name.docs.txt" "$want" 2>&1)"
done

# one long document: cut into pieces for the threads (byte-level) or not (SentencePiece-style)
for name in gpt2 llama3 llama2; do
  for t in 1 3; do
    $BOOST tokenize "$TMP/$name.json" "$TMP/big.txt" -o "$TMP/big.$name.$t.bin" --sep none --threads $t --quiet >/dev/null 2>&1
  done
  cmp -s "$TMP/big.$name.1.bin" "$TMP/big.$name.big.expected.bin" 2>/dev/null ||
    cp "$TMP/big.$name.1.bin" "$TMP/big.$name.cmp"   # (kept for the message)
  if cmp -s "$TMP/big.$name.1.bin" "$TMP/$name.big.expected.bin" && cmp -s "$TMP/big.$name.1.bin" "$TMP/big.$name.3.bin"; then
    ok "tokenize_long_document_${name}_threads_1_3"
  else fail "tokenize_long_document_${name}_threads_1_3" "$(cmp "$TMP/big.$name.1.bin" "$TMP/$name.big.expected.bin" 2>&1; cmp "$TMP/big.$name.1.bin" "$TMP/big.$name.3.bin" 2>&1)"; fi
  $BOOST tokenize "$TMP/$name.json" --decode "$TMP/big.$name.1.bin" -o "$TMP/big.$name.txt" >"$TMP/out" 2>&1 &&
    cmp -s "$TMP/big.$name.txt" "$TMP/big.txt" && ok "tokenize_decode_round_trip_$name" ||
    fail "tokenize_decode_round_trip_$name" "$(cat "$TMP/out"; cmp "$TMP/big.$name.txt" "$TMP/big.txt" 2>&1)"
done

# bytes that are not UTF-8: the byte-level alphabet and byte fallback keep them; without either
# the text is refused (exit 2, its byte offset), never dropped
printf 'caf\xc3\xa9 \xff\xfe broken \xc3( and \xed\xa0\x80 end' >"$TMP/bad.txt"
for name in gpt2 llama2; do
  $BOOST tokenize "$TMP/$name.json" "$TMP/bad.txt" -o "$TMP/bad.$name.bin" --sep none --quiet >/dev/null 2>&1 &&
    $BOOST tokenize "$TMP/$name.json" --decode "$TMP/bad.$name.bin" -o "$TMP/bad.$name.txt" >/dev/null 2>&1 &&
    cmp -s "$TMP/bad.$name.txt" "$TMP/bad.txt" && ok "tokenize_invalid_utf8_round_trip_$name" ||
    fail "tokenize_invalid_utf8_round_trip_$name" "the bytes did not come back"
done
$PY - "$TMP/llama2.json" "$TMP/nofallback.json" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1])); t["model"]["byte_fallback"] = False; t["model"]["unk_token"] = None
json.dump(t, open(sys.argv[2], "w"))
PYEOF
printf 'plain text \xff and more' >"$TMP/bad2.txt"
$BOOST tokenize "$TMP/nofallback.json" "$TMP/bad2.txt" -o "$TMP/bad.nf.bin" --quiet >"$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "bad2.txt: byte 11: byte 0xFF is not UTF-8" "$TMP/out" && [ ! -e "$TMP/bad.nf.bin" ] &&
  ok tokenize_invalid_utf8_refused_without_fallback ||
  fail tokenize_invalid_utf8_refused_without_fallback "exit $rc: $(cat "$TMP/out")"

# more than 65536 ids: uint32 tokens (version 2), the same ids; --shard-tokens cuts the same stream
$PY - "$TMP/gpt2.json" "$TMP/wide.json" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
t["added_tokens"].append({"id": 70000, "content": "<|wide|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
json.dump(t, open(sys.argv[2], "w"))
PYEOF
$BOOST tokenize "$TMP/wide.json" "$TMP/docs.jsonl" -o "$TMP/wide.bin" --sep "<|endoftext|>" --quiet >/dev/null 2>&1
$PY - "$TMP/wide.bin" "$TMP/gpt2.expected.bin" >"$TMP/out" 2>&1 <<'PYEOF'
import struct, sys
def rd(p):
    d = open(p, "rb").read(); magic, ver, n = struct.unpack("<3i", d[:12])
    return ver, list(struct.unpack("<%d%s" % (n, "H" if ver == 1 else "I"), d[1024:]))
(v2, a), (v1, b) = rd(sys.argv[1]), rd(sys.argv[2])
sys.exit(0 if v2 == 2 and v1 == 1 and a == b else 1)
PYEOF
[ $? = 0 ] && ok tokenize_uint32_tokens_version_2 || fail tokenize_uint32_tokens_version_2 "$(cat "$TMP/out")"
$BOOST tokenize "$TMP/gpt2.json" "$TMP/docs.jsonl" -o "$TMP/shard.bin" --sep "<|endoftext|>" --shard-tokens 50000 \
  --quiet >/dev/null 2>&1
n=$(ls "$TMP"/shard_*.bin 2>/dev/null | wc -l)
for f in "$TMP"/shard_*.bin; do tail -c +1025 "$f"; done >"$TMP/shards.body"
tail -c +1025 "$TMP/gpt2.expected.bin" >"$TMP/one.body"
[ "$n" = 4 ] && cmp -s "$TMP/shards.body" "$TMP/one.body" && ok tokenize_shards_split_one_stream ||
  fail tokenize_shards_split_one_stream "$n shards; same tokens: $(cmp "$TMP/shards.body" "$TMP/one.body" 2>&1)"
