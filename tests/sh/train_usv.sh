#!/usr/bin/env bash
# train_usv.sh: U S V^T (usv{}: A, sigma, a dense r x r core S, B), the factorization added as one
# row of gen/factor.c. tiny-usv generates with its cores as whole r x r parameters on every rank
# (rep=1), trains 200 steps on the CPU backend with the validation loss falling from the uniform
# guess (ln 256 = 5.545) by more than 2 nats, gives the same losses at tp=1 and tp=2, and the naive
# layout is refused with the reason. (tests/sh/torch_model.sh checks it against PyTorch.)
. tests/sh/lib.sh

$BOOST gen tiny-usv -o "$TMP/gen" >"$TMP/gen.out" 2>&1 && ok usv_generates \
  || { fail usv_generates "$(tail -2 "$TMP/gen.out")"; exit 1; }
plan="$TMP/gen/plan.txt"
cores=$(grep -c '^canon L[0-9]*\.[a-z]*\.S shape=32x32 ' "$plan")
core='L[0-9]*\.[a-z]*\.S'
whole=$(grep -c "^part $core canon=$core src=0:32,0:32 dst=0,0 rep=1" "$plan")
[ "$cores" = 14 ] && [ "$whole" = 14 ] && ok usv_cores_whole_on_every_rank \
  || fail usv_cores_whole_on_every_rank \
       "$cores 32x32 cores, $whole whole parts; expected 7 projections x 2 layers"

# field LOG STEP KEY: the value of KEY on the log line of STEP
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }

$BOOST train tiny-usv -D tp=1 --backend cpu --log "$TMP/log.jsonl" --quiet >"$TMP/out" 2>&1
rc=$?
sed 's/^/# /' "$TMP/out" | tail -3
[ $rc = 0 ] && ok usv_train_200_steps || { fail usv_train_200_steps "exit $rc"; exit 1; }
v0=$(field "$TMP/log.jsonl" 0 val_loss)
v200=$(field "$TMP/log.jsonl" 200 val_loss)
echo "# validation loss: step 0 $v0, step 200 $v200"
if awk -v v="$v0" 'BEGIN { exit !(v > 5.545 - 0.15 && v < 5.545 + 0.15) }'; then
  ok usv_val_loss_starts_uniform
else
  fail usv_val_loss_starts_uniform "step-0 validation loss $v0, expected ln 256 = 5.545 +- 0.15"
fi
if awk -v a="$v0" -v b="$v200" 'BEGIN { exit !(b != "" && b < a - 2.0) }'; then
  ok usv_val_loss_falls
else
  fail usv_val_loss_falls "validation loss $v0 -> $v200: expected a fall of more than 2 nats"
fi

# the same model at tp=2 (the cores replicated, A and B split): the same losses
$BOOST train tiny-usv -D tp=2 -D steps=10 --backend cpu --log "$TMP/tp2.jsonl" --quiet \
  >"$TMP/out2" 2>&1 || fail usv_tp2_runs "exit $?: $(tail -2 "$TMP/out2")"
same=1
for s in 1 5 10; do
  a=$(field "$TMP/log.jsonl" $s loss); b=$(field "$TMP/tp2.jsonl" $s loss)
  echo "# step $s loss: tp=1 $a, tp=2 $b"
  awk -v a="$a" -v b="$b" \
    'BEGIN { d = a - b; exit !(a != "" && b != "" && d * d < (1e-5 * a) ^ 2) }' || same=0
done
[ $same = 1 ] && ok usv_tp1_equals_tp2 \
  || fail usv_tp1_equals_tp2 "the losses differ beyond 1e-5 relative"

$BOOST gen tiny-usv -D layout=naive -o "$TMP/naive" >"$TMP/naive.out" 2>&1
rc=$?
want="model tiny-usv is usv, which layout naive cannot split.*btp"
[ $rc != 0 ] && grep -q "$want" "$TMP/naive.out" && ok usv_naive_refused \
  || fail usv_naive_refused "exit $rc: $(head -2 "$TMP/naive.out")"
