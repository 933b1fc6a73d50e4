#!/usr/bin/env bash
# train_loss.sh: the full 200-step tiny-cola run at tp=1 on the corpus (CPU backend). Its
# validation loss starts at the uniform guess over 256 bytes (ln 256 = 5.545; the init is small)
# and ends well below it; the JSON log has every step with its fields; the time is reported.
. tests/sh/lib.sh
t0=$(date +%s%N)
$BOOST train tiny-cola -D tp=1 --backend cpu --log "$TMP/log.jsonl" --quiet >"$TMP/out" 2>&1
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "# 200 steps of tiny-cola at tp=1: $((ms / 1000)).$(printf %03d $((ms % 1000)))s"
sed 's/^/# /' "$TMP/out"
[ $rc = 0 ] && ok train_200_steps_run || { fail train_200_steps_run "exit $rc"; exit 1; }

# field LOG STEP KEY: the value of KEY on the log line of STEP
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }

v0=$(field "$TMP/log.jsonl" 0 val_loss)
v200=$(field "$TMP/log.jsonl" 200 val_loss)
echo "# validation loss: step 0 $v0, step 200 $v200"
if awk -v v="$v0" 'BEGIN { exit !(v > 5.545 - 0.15 && v < 5.545 + 0.15) }'; then ok val_loss_starts_uniform
else fail val_loss_starts_uniform "step-0 validation loss $v0, expected ln 256 = 5.545 +- 0.15"; fi
if awk -v a="$v0" -v b="$v200" 'BEGIN { exit !(b != "" && b < a - 2.0) }'; then ok val_loss_falls
else fail val_loss_falls "validation loss $v0 -> $v200: expected a fall of more than 2 nats"; fi

steps=$(grep -c '"loss":' "$TMP/log.jsonl")
all_fields=$(grep '"loss":' "$TMP/log.jsonl" | grep '"tokens_per_s":' | grep '"lr":' | grep -c '"grad_norm":')
[ "$steps" = 200 ] && [ "$all_fields" = 200 ] && ok log_has_every_step \
  || fail log_has_every_step "$steps loss lines, $all_fields with every field"
vals=$(grep -c '"val_loss":' "$TMP/log.jsonl")
[ "$vals" = 5 ] && ok log_val_every_50 || fail log_val_every_50 "$vals validation points, expected 0, 50, 100, 150, 200"
# the schedule (docs/plan-format.md): step s (1-based) uses lr(s-1); warmup lr*s/20 to step 20, then
# cosine from lr = 3e-3 to min_lr = 3e-4 over steps 20..200
lr_ok=1
for s in 10 20 21 100 200; do
  got=$(field "$TMP/log.jsonl" $s lr)
  awk -v s=$s -v got="$got" 'BEGIN { i = s - 1; pi = atan2(0, -1)
      want = i < 20 ? 3e-3 * (i + 1) / 20 : 3e-4 + 0.5 * (3e-3 - 3e-4) * (1 + cos(pi * (i - 20) / 180))
      exit !(got != "" && (got - want) ^ 2 < (1e-6 * want) ^ 2) }' || { lr_ok=0; echo "# lr at step $s: $got"; }
done
[ $lr_ok = 1 ] && ok log_lr_schedule || fail log_lr_schedule "the logged lr differs from warmup + cosine"
grep -q "collective bytes per step: .* per rank" "$TMP/out" && ok prints_collective_bytes \
  || fail prints_collective_bytes "no collective bytes line in the output"
