#!/usr/bin/env bash
# train_tokenizer.sh: a run that names a tokenizer (data = { path = GLOB, tokenizer = FILE }):
# its text is tokenized once into the token cache (the same tokens as `boost tokenize` writes for
# the same files) and reused by the next run; the checkpoint records the tokenizer's CRC-32C and the
# run's folder holds its copy; `boost sample` and `boost eval` use it without flags; a model
# whose vocab is smaller than the tokenizer stops at start
# naming both sizes; a missing tokenizer file is an error at the spec's line (or at its -D).
. tests/sh/lib.sh
[ -f build/corpus.txt ] || bash tools/corpus.sh >/dev/null 2>&1
if [ ! -f build/corpus.txt ]; then ok "train_tokenizer # SKIP no corpus (Debian's fortunes package)"; exit 0; fi
head -c 120000 build/corpus.txt >"$TMP/a.txt"
tail -c 60000 build/corpus.txt >"$TMP/b.txt"
$BOOST tokenizer train "$TMP/a.txt" --vocab 300 -o "$TMP/tok.json" >/dev/null 2>&1 ||
  { fail train_tokenizer_setup "boost tokenizer train failed"; exit 1; }
mkdir -p "$TMP/specs/models" "$TMP/specs/gpus"
cp specs/gpus/h100.lua "$TMP/specs/gpus/"
cat >"$TMP/specs/models/tokm.lua" <<'LUA'
return model "tokm" {
  hidden = 64, layers = 1, heads = 2, kv_heads = 2, ffn = 128, vocab = 320,
  lowrank = cola { rank = 16 },
}
LUA
runspec() {   # runspec FILE MODEL TOKENIZER
  cat >"$1" <<LUA
return run {
  model = "$2", gpu = "h100", parallel = { tp = 1 },
  train = { micro_batch = 2, seq = 32, steps = 2, eval_every = 0, lr = 1e-3, warmup = 1 },
  data = { path = "$TMP/*.txt",
           tokenizer = "$3" },
}
LUA
}
runspec "$TMP/run.lua" tokm "$TMP/tok.json"
case "$BOOST" in /*) ;; *) BOOST="$PWD/$BOOST" ;; esac
cd "$TMP" || exit 1
export BOOST_ROOT="$TMP"   # the token cache goes to $TMP/build/tokens
$BOOST train run.lua --backend cpu --quiet -o run1 >out1 2>&1
rc=$?
cache=$(ls build/tokens/*-bpe.bin 2>/dev/null)
[ $rc = 0 ] && [ -n "$cache" ] && grep -q "tokenized with" out1 && ok train_tokenizer_runs ||
  { fail train_tokenizer_runs "exit $rc: $(tail -3 out1)"; exit 1; }
$BOOST tokenize tok.json a.txt b.txt -o ref.bin --quiet >/dev/null 2>&1
cmp -s "$cache" ref.bin && ok train_tokenizer_cache_is_boost_tokenize ||
  fail train_tokenizer_cache_is_boost_tokenize "$(cmp "$cache" ref.bin 2>&1)"
before=$(stat -c %i:%Y "$cache")
$BOOST train run.lua --backend cpu --quiet -o run2 >out2 2>&1
rc=$?
[ $rc = 0 ] && ! grep -q "tokenized with" out2 && [ "$(stat -c %i:%Y "$cache")" = "$before" ] &&
  [ "$(ls build/tokens | wc -l)" = 1 ] && ok train_tokenizer_cache_reused ||
  fail train_tokenizer_cache_reused "exit $rc: $(ls build/tokens) $(tail -2 out2)"
crc=$(python3 -c 'import sys
def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8): c = (c >> 1) ^ (0x82f63b78 & -(c & 1))
    return c ^ 0xffffffff
print("0x%08x" % crc32c(open(sys.argv[1], "rb").read()))' tok.json 2>/dev/null)
state=$(ls -d run1/step-*/ | tail -1)state.json
if [ -z "$crc" ]; then ok "train_tokenizer_recorded # SKIP no python3 for the CRC-32C"
else
  grep -q "\"tokenizer_crc32c\": \"$crc\"" "$state" && cmp -s run1/tokenizer.json tok.json &&
    ok train_tokenizer_recorded || fail train_tokenizer_recorded "$crc: $(grep tokenizer "$state")"
fi
# sample and eval find the run's tokenizer without flags: --prompt is text, the output is text
step=$(ls -d run1/step-* | tail -1)
$BOOST sample "$step" --run run.lua --backend cpu --prompt "The cat sat" --tokens 8 \
  >sample.out 2>sample.err
rc=$?
[ $rc = 0 ] && head -c 11 sample.out | grep -qx "The cat sat" && ok train_tokenizer_sample_text ||
  fail train_tokenizer_sample_text "exit $rc: $(head -c 200 sample.out) $(tail -2 sample.err)"
$BOOST eval "$step" --run run.lua --backend cpu --json >eval.out 2>eval.err
rc=$?
# the validation loss the run logged at its end is the eval of the same split (same micro-batches)
close=$(python3 -c 'import json, sys
e = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
print(int(abs(e["loss"] - s["val_losses"][-1][1]) < 1e-3))' eval.out "$step/state.json" 2>&1)
[ $rc = 0 ] && [ "$close" = 1 ] && ok train_tokenizer_eval_no_flags ||
  fail train_tokenizer_eval_no_flags "exit $rc: $close $(tail -2 eval.err)"
# a vocabulary smaller than the tokenizer's 300 tokens: stop at start with both sizes
sed 's/vocab = 320/vocab = 256/; s/"tokm"/"toks"/' specs/models/tokm.lua >specs/models/toks.lua
runspec small.lua toks "$TMP/tok.json"
$BOOST train small.lua --backend cpu --quiet >out3 2>&1
rc=$?
[ $rc = 2 ] && grep -q "300 tokens" out3 && grep -q "vocab is 256" out3 && ok train_tokenizer_vocab_refused ||
  fail train_tokenizer_vocab_refused "exit $rc: $(tail -2 out3)"
# a tokenizer file that is not there: an error at the spec's line (line 5 of runspec's text)
runspec missing.lua tokm "$TMP/nope.json"
$BOOST train missing.lua --backend cpu --quiet >out4 2>&1
rc=$?
[ $rc = 2 ] && grep -q "missing.lua:5: tokenizer .*nope.json" out4 && ok train_tokenizer_missing_at_line ||
  fail train_tokenizer_missing_at_line "exit $rc: $(tail -2 out4)"
$BOOST train missing.lua --backend cpu --quiet -D tokenizer=nope2.json >out5 2>&1
rc=$?
[ $rc = 2 ] && grep -q "^-D tokenizer=nope2.json: tokenizer nope2.json" out5 && ok train_tokenizer_D_missing ||
  fail train_tokenizer_D_missing "exit $rc: $(tail -2 out5)"
