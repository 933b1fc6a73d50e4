#!/usr/bin/env bash
# train_errors.sh: every bad input to `boost train` ends with a clear message naming what is wrong,
# a non-zero exit (2 bad input, 1 failure while running) and no crash: missing/truncated plan,
# missing/bad/short data, a missing corpus without fortunes, a checkpoint of another model, a
# truncated checkpoint, a diverging run (lr=10, weight_decay=10: NaN loss), a full disk while
# saving, bad flags. Checkpoints that existed before a failure are byte-identical after it.
. tests/sh/lib.sh

# expect NAME CODE PATTERN -- COMMAND...: exit status CODE (not a signal) and PATTERN in stderr
expect() {
  local name=$1 code=$2 pattern=$3; shift 4
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc = "$code" ] && grep -q -- "$pattern" "$TMP/err"; then ok "$name"; sed 's/^/#   /' "$TMP/err" | head -2
  else fail "$name" "exit $rc (expected $code), stderr: $(head -c 300 "$TMP/err")"; fi
}

# a good 1-step run: its plan and checkpoint are the material for the rest
$BOOST train tiny-cola --backend cpu -D tp=1 -D steps=1 --quiet -o "$TMP/g" >"$TMP/g.out" 2>&1 \
  && [ -f "$TMP/g/step-000001/model.safetensors" ] && ok setup_run || { fail setup_run "$(tail -3 "$TMP/g.out")"; exit 1; }
plan=$TMP/g/plan/plan.txt
cp -r "$TMP/g/step-000001" "$TMP/keep"

# plans
expect missing_plan 2 "$TMP/none: cannot open the plan" -- $BOOST train --plan "$TMP/none"
head -c 3000 "$plan" >"$TMP/trunc-plan.txt"
expect truncated_plan 2 "trunc-plan.txt:.*truncated" -- $BOOST train --plan "$TMP/trunc-plan.txt"
sed '1s/.*/boost-plan 99/' "$plan" >"$TMP/v99.txt"
expect plan_other_version 2 "version 99" -- $BOOST train --plan "$TMP/v99.txt"
expect plan_fixed_setting 2 "'tp' is fixed in the plan" -- $BOOST train --plan "$plan" -D tp=2

# data
expect missing_data 2 "nothing.bin: cannot open" -- $BOOST train --plan "$plan" -D data="$TMP/nothing.bin"
printf 'this is text, not tokens; it is long enough to have a header-sized piece of bytes in it.%.0s' $(seq 20) >"$TMP/text.bin"
expect data_wrong_magic 2 "text.bin: not a token file (magic [0-9-]*, expected 20240520)" -- $BOOST train --plan "$plan" -D data="$TMP/text.bin"
printf 'too short' >"$TMP/short.txt"
expect data_too_few_tokens 2 "short.txt: .*fewer than one batch of micro_batch\*seq+1 = 257" -- $BOOST train --plan "$plan" -D data="$TMP/short.txt"
# a token file for a 50257-token vocabulary: token 300 does not fit the byte model
python3 -c "
import struct, sys
toks = [300 + i % 1000 for i in range(5000)]
sys.stdout.buffer.write(struct.pack('<256i', 20240520, 1, len(toks), *([0] * 253)) + struct.pack('<%dH' % len(toks), *toks))
" >"$TMP/gpt2.bin" 2>/dev/null || printf '' >"$TMP/gpt2.bin"
if [ -s "$TMP/gpt2.bin" ]; then
  expect data_outside_vocab 2 "gpt2.bin: token 300 .*outside the model's vocabulary of 256" -- $BOOST train --plan "$plan" -D data="$TMP/gpt2.bin"
  head -c 5000 "$TMP/gpt2.bin" >"$TMP/cut.bin"
  expect data_truncated 2 "cut.bin: truncated" -- $BOOST train --plan "$plan" -D data="$TMP/cut.bin"
fi
# "corpus" with no build/corpus.txt and no fortunes: tools/corpus.sh fails, the message says what to install
mkdir -p "$TMP/root/tools" "$TMP/elsewhere"
cp tools/corpus.sh "$TMP/root/tools/"
boost_abs=$(cd "$(dirname "$BOOST")" && pwd)/$(basename "$BOOST")
(cd "$TMP/elsewhere" && BOOST_ROOT="$TMP/root" FORTUNES_DIR="$TMP/no-fortunes" "$boost_abs" train --plan "$plan") >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 1 ] && grep -q "install Debian's 'fortunes' package" "$TMP/err" && [ ! -e "$TMP/root/build/corpus.txt" ] \
  && ok corpus_without_fortunes || fail corpus_without_fortunes "exit $rc: $(head -c 300 "$TMP/err")"

# checkpoints
$BOOST train tiny-llama --backend cpu -D tp=1 -D steps=1 --quiet -o "$TMP/llama" >"$TMP/llama.out" 2>&1
expect checkpoint_of_other_model 2 "a checkpoint of model 'tiny-llama'" -- $BOOST train --plan "$plan" --resume "$TMP/llama/step-000001"
cp -r "$TMP/keep" "$TMP/cut"
head -c 100000 "$TMP/keep/model.safetensors" >"$TMP/cut/model.safetensors"
expect truncated_checkpoint 2 "cut/model.safetensors: truncated" -- $BOOST train --plan "$plan" --resume "$TMP/cut"
cp -r "$TMP/keep" "$TMP/nostate"; rm "$TMP/nostate/state.json"
expect checkpoint_without_state 2 "nostate: not a checkpoint" -- $BOOST train --plan "$plan" --resume "$TMP/nostate"
cp -r "$TMP/keep" "$TMP/badstate"; printf '{"format": "boost-checkpoint", "step": ' >"$TMP/badstate/state.json"
expect damaged_state_json 2 "badstate/state.json: damaged or truncated" -- $BOOST train --plan "$plan" --resume "$TMP/badstate"
$BOOST train --plan "$plan" -D steps=2 --resume "$TMP/keep" -o "$TMP/two" --quiet >/dev/null 2>&1
expect checkpoint_past_the_run 2 "step-000002: the checkpoint is at step 2, past this run's 1 steps" -- $BOOST train --plan "$plan" -D steps=1 --resume "$TMP/two"
$BOOST train --plan "$plan" -D steps=1 --resume "$TMP/keep" >"$TMP/out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "nothing to do" "$TMP/out" && ok resume_at_the_end_is_a_no_op || fail resume_at_the_end_is_a_no_op "exit $rc"

# a diverging run: NaN loss, exit 1, earlier checkpoints untouched, nothing saved after the NaN
# (lr=10 with weight_decay=10, the largest the settings allow: the weights grow 99-fold an update)
expect nan_loss_stops 1 "training diverged" -- $BOOST train --plan "$plan" -D lr=10 -D min_lr=10 -D warmup=0 -D weight_decay=10 \
  -D steps=30 --resume "$TMP/g/step-000001" -o "$TMP/g" --save-every 1
cmp -s "$TMP/keep/model.safetensors" "$TMP/g/step-000001/model.safetensors" && cmp -s "$TMP/keep/state.json" "$TMP/g/step-000001/state.json" \
  && [ ! -e "$TMP/g/step-000030" ] && ok nan_keeps_earlier_checkpoint || fail nan_keeps_earlier_checkpoint "$(ls "$TMP/g")"
rm -rf "$TMP"/g/step-00000[2-9]

# a full disk while saving (file size limit of 200 KiB, SIGXFSZ ignored: write() fails with EFBIG)
(trap '' XFSZ; ulimit -f 200; exec $BOOST train --plan "$plan" -D steps=3 --resume "$TMP/g/step-000001" -o "$TMP/g" --quiet) >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 1 ] && grep -q "step-000003: checkpoint not written (.*File too large).*untouched" "$TMP/err" \
  && ok full_disk_save_fails_clearly || fail full_disk_save_fails_clearly "exit $rc: $(head -c 300 "$TMP/err")"
cmp -s "$TMP/keep/model.safetensors" "$TMP/g/step-000001/model.safetensors" && cmp -s "$TMP/keep/optimizer.safetensors" "$TMP/g/step-000001/optimizer.safetensors" \
  && [ ! -e "$TMP/g/step-000003" ] && [ -z "$(ls -A "$TMP/g" | grep '^\.')" ] \
  && ok full_disk_keeps_earlier_checkpoint || fail full_disk_keeps_earlier_checkpoint "$(ls -A "$TMP/g")"

# flags
expect no_arguments 2 "usage" -- $BOOST train
expect unknown_option 2 "unknown option --frobnicate" -- $BOOST train tiny-cola --frobnicate
expect bad_backend 2 "expected cpu, cuda or auto" -- $BOOST train tiny-cola --backend tpu
expect bad_save_every 2 "needs a whole number" -- $BOOST train tiny-cola --save-every 0
expect spec_and_plan 2 "not both" -- $BOOST train tiny-cola --plan "$plan"
expect bad_define 2 "expected name=value" -- $BOOST train --plan "$plan" -D lr
expect unknown_run 2 "nosuchrun" -- $BOOST train nosuchrun
expect log_in_missing_folder 1 "cannot open the log" -- $BOOST train --plan "$plan" -D steps=1 --log "$TMP/no/such/log.jsonl"
if ! nvidia-smi >/dev/null 2>&1; then
  expect cuda_without_gpu 1 "." -- $BOOST train --plan "$plan" -D steps=1 --backend cuda
fi
