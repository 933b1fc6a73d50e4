#!/usr/bin/env bash
# infer_errors.sh: bad input to `boost sample`, `boost eval` and `boost export` exits 2 with a message
# that names the problem: a checkpoint of another model than the plan, a prompt longer than the
# sequence, tokens outside the vocabulary, a tokenizer file of the wrong format (or one given for a
# byte-level model), temperature < 0, top-p outside (0, 1], unknown export formats, missing files.
. tests/sh/lib.sh

$BOOST train tiny-cola --backend cpu -D steps=2 -D eval_every=0 --quiet -o "$TMP/run" >"$TMP/train.out" 2>&1 \
  || { fail errors_train "$(tail -3 "$TMP/train.out")"; exit 1; }
C="$TMP/run/step-000002"
# expect NAME PATTERN CMD...: exit status 2 and PATTERN in stderr
expect() {
  local name=$1 pat=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  [ $rc = 2 ] && grep -q -- "$pat" "$TMP/err" && ok "$name" || fail "$name" "exit $rc: $(head -c 300 "$TMP/err")"
}
expect bad_other_model "holds model 'tiny-cola'.*model 'tiny-llama'" $BOOST sample "$C" --run tiny-llama --backend cpu
expect bad_other_model_by_D "holds model 'tiny-cola'.*model 'tiny-svd'" $BOOST eval "$C" -D model=tiny-svd --backend cpu
expect bad_prompt_too_long "longer than model tiny-cola's sequence length 64" $BOOST sample "$C" --backend cpu \
  --prompt "$(printf 'x%.0s' $(seq 100))"
expect bad_token_outside_vocab "token 300 is outside the vocabulary" $BOOST sample "$C" --backend cpu --prompt-ids "1 2 300"
expect bad_token_not_a_number "'abc' is not a token id" $BOOST sample "$C" --backend cpu --prompt-ids "1 abc"
head -c 2000 /dev/urandom >"$TMP/junk.bin"
expect bad_tokenizer_format "not an llm.c tokenizer file" $BOOST sample "$C" --backend cpu --tokenizer "$TMP/junk.bin"
python3 - "$TMP/tok.bin" <<'PY'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256I", 20240328, 2, 3, 2, *([0] * 252)))
    for t in (b"a", b"bc", b"<|end|>"):
        f.write(bytes([len(t)]) + t)
PY
expect bad_tokenizer_byte_model "is byte-level" $BOOST sample "$C" --backend cpu --tokenizer "$TMP/tok.bin"
head -c 1030 "$TMP/tok.bin" >"$TMP/tok_cut.bin"
expect bad_tokenizer_cut_short "cut short" $BOOST sample "$C" --backend cpu --tokenizer "$TMP/tok_cut.bin"
expect bad_temperature "must be >= 0" $BOOST sample "$C" --temperature -0.5
expect bad_top_p_zero "must be in (0, 1]" $BOOST sample "$C" --top-p 0
expect bad_top_p_above_one "must be in (0, 1]" $BOOST sample "$C" --top-p 1.5
expect bad_tokens_count "needs a whole number" $BOOST sample "$C" --tokens -3
expect bad_export_format "the one format is 'hf'" $BOOST export "$C" --format onnx -o "$TMP/x"
expect bad_not_a_checkpoint "not a checkpoint" $BOOST eval "$TMP" --backend cpu
expect bad_eval_data_missing "missing.txt" $BOOST eval "$C" --data "$TMP/missing.txt" --backend cpu
expect bad_eval_data_glob "no file matches" $BOOST eval "$C" --data "$TMP/none/*.txt" --backend cpu

# a token model (tiny-cola trained on an llm.c token file): ids in, text out through a tokenizer
python3 - "$TMP" <<'PY'
import struct, sys
d = sys.argv[1]
text = open("build/corpus.txt", "rb").read()[:200000]
with open(f"{d}/tokens.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(text), *([0] * 253)) + struct.pack(f"<{len(text)}H", *text))
with open(f"{d}/names.bin", "wb") as f:
    f.write(struct.pack("<256I", 20240328, 2, 256, 0, *([0] * 252)))
    for i in range(256):
        t = f"<{i}>".encode()
        f.write(bytes([len(t)]) + t)
PY
$BOOST train tiny-cola --backend cpu -D steps=2 -D eval_every=0 -D data="$TMP/tokens.bin" --quiet -o "$TMP/tok" >"$TMP/tok.out" 2>&1 \
  || fail token_model_train "$(tail -2 "$TMP/tok.out")"
expect token_model_wants_ids "reads token ids" $BOOST sample "$TMP/tok" --backend cpu --prompt "The"
$BOOST sample "$TMP/tok" --backend cpu --prompt-ids "84 104" --tokens 5 --tokenizer "$TMP/names.bin" >"$TMP/t.out" 2>"$TMP/t.err"
grep -Eq '^<84><104>(<[0-9]+>){5}$' "$TMP/t.out" && ok token_model_tokenizer_text || fail token_model_tokenizer_text "$(cat "$TMP/t.out" "$TMP/t.err")"
$BOOST sample "$TMP/tok" --backend cpu --prompt-ids "84,104" --tokens 5 >"$TMP/i.out" 2>"$TMP/i.err"
grep -Eq '^( [0-9]+){7}$' "$TMP/i.out" && ok token_model_prints_ids || fail token_model_prints_ids "$(cat "$TMP/i.out" "$TMP/i.err")"
