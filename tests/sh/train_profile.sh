# train_profile.sh: BOOST_PROFILE=1 (runtime/profile.c): a short tiny-cola run prints one table of
# where rank 0's time went per training step. Checks: the shares add up to 100%; the rows' ms/step
# add up to the header's figure; calls per step follow the plan (the embedding forward once per
# micro-batch: 1 at grad_accum 1, 2 at grad_accum 2; AdamW once per step); the profiled time fits
# inside the wall time the log reports; evaluation passes are left out; no table without the variable;
# pipeline stages print one table each.
source "$(dirname "$0")/lib.sh"
run() {   # run NAME ACCUM [ENV...]
  local name=$1 accum=$2; shift 2
  env "$@" "$BOOST" train tiny-cola -D tp=1 -D steps=3 -D grad_accum=$accum -D eval_every=2 --backend cpu --quiet \
    -o "$TMP/ck-$name" --log "$TMP/$name.json" >"$TMP/$name.out" 2>&1
}
if ! run plain 1; then fail "profile_off_runs" "$(tail -2 "$TMP/plain.out")"
elif grep -q '^boost profile' "$TMP/plain.out"; then fail "profile_off_prints_nothing" "a table without BOOST_PROFILE=1"
else ok "profile_off_prints_nothing"
fi
for accum in 1 2; do
  if ! run "p$accum" $accum BOOST_PROFILE=1; then fail "profile_accum${accum}_runs" "$(tail -2 "$TMP/p$accum.out")"; continue; fi
  out=$TMP/p$accum.out
  if ! grep -q '^boost profile (cpu backend, one rank, '$((3 * accum))' training passes, 3 optimizer steps)' "$out"; then
    fail "profile_accum${accum}_header" "$(grep -m1 '^boost profile' "$out" || echo 'no table')"; continue
  fi
  ok "profile_accum${accum}_header: $((3 * accum)) training passes (the evaluation passes left out), 3 steps"
  rows=$(sed -n '/^boost profile/,$p' "$out" | grep -E '^ *[0-9.]+% ')
  sum=$(echo "$rows" | awk '{gsub("%","",$1); s += $1} END {printf "%.1f", s}')
  if awk -v s="$sum" 'BEGIN { exit !(s >= 99 && s <= 101) }'; then ok "profile_accum${accum}_shares_sum_100 ($sum%)"
  else fail "profile_accum${accum}_shares_sum_100" "the shares add up to $sum%"; fi
  ms_rows=$(echo "$rows" | awk '{s += $2} END {printf "%.3f", s}')
  ms_head=$(sed -n 's/^boost profile.*, \([0-9.]*\) ms per step$/\1/p' "$out")
  if [ -n "$ms_head" ] && awk -v a="$ms_rows" -v b="$ms_head" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01 + 1e-3 * b) }'
  then ok "profile_accum${accum}_rows_sum_to_total ($ms_rows ms)"
  else fail "profile_accum${accum}_rows_sum_to_total" "rows $ms_rows ms vs header '${ms_head}' ms"; fi
  emb=$(echo "$rows" | awk '$5 == "fwd" && $6 == "embedding_fwd" {print $3}')
  adam=$(echo "$rows" | awk '$5 == "opt" && $6 == "adamw" {print $3}')
  if [ "$emb" = "$accum.0" ] && [ "$adam" = "1.0" ]; then ok "profile_accum${accum}_calls_per_step (embedding $emb, adamw $adam)"
  else fail "profile_accum${accum}_calls_per_step" "embedding_fwd $emb (want $accum.0), adamw $adam (want 1.0)"; fi
  # the log's tokens/s gives each step's wall time: tokens per step / tokens_per_s
  wall=$(grep -o '"tokens_per_s":[0-9.e+]*' "$TMP/p$accum.json" | sed 's/.*://' |
         awk -v tok=$((4 * 64 * accum)) '{s += tok / $1} END {printf "%.6f", s}')
  total=$(sed -n 's/^boost profile.*: \([0-9.]*\) s in steps.*/\1/p' "$out")
  if [ -n "$total" ] && awk -v t="$total" -v w="$wall" 'BEGIN { exit !(t > 0 && t <= w * 1.02 + 0.001) }'
  then ok "profile_accum${accum}_within_wall_time (profiled $total s of $wall s)"
  else fail "profile_accum${accum}_within_wall_time" "profiled '$total' s, the steps took $wall s"; fi
done

# pipeline stages (tiny-cola-pp2 at tp=1: 2 stages, 4 micro-batches): one table per stage, named,
# counting each micro-batch's backward as a pass (4 per step, validation left out); the embedding
# runs on stage 0 only, once per micro-batch, and each stage runs its own AdamW once per step
if ! BOOST_PROFILE=1 "$BOOST" train tiny-cola-pp2 -D tp=1 -D steps=3 -D micro_batch=1 -D seq=32 -D eval_every=2 --backend cpu \
     --quiet -o "$TMP/ck-pp" >"$TMP/pp.out" 2>&1; then
  fail "profile_pp_runs" "$(tail -2 "$TMP/pp.out")"
else
  for st in 0 1; do
    table=$(sed -n "/^boost profile (cpu backend, one rank of stage $st, 12 training passes, 3 optimizer steps)/,/^boost profile\|^\$/p" "$TMP/pp.out" |
            grep -E '^ *[0-9.]+% ')
    if [ -z "$table" ]; then fail "profile_pp_stage${st}_table" "no 'one rank of stage $st, 12 training passes' table"; continue; fi
    sum=$(echo "$table" | awk '{gsub("%","",$1); s += $1} END {printf "%.1f", s}')
    emb=$(echo "$table" | awk '$5 == "fwd" && $6 == "embedding_fwd" {print $3}')
    adam=$(echo "$table" | awk '$5 == "opt" && $6 == "adamw" {print $3}')
    want_emb=$([ $st = 0 ] && echo 4.0 || echo "")
    if awk -v s="$sum" 'BEGIN { exit !(s >= 99 && s <= 101) }' && [ "$emb" = "$want_emb" ] && [ "$adam" = "1.0" ]; then
      ok "profile_pp_stage${st}_table (shares $sum%, embedding '${emb}', adamw $adam per step)"
    else fail "profile_pp_stage${st}_table" "shares $sum%, embedding_fwd '$emb' (want '$want_emb'), adamw '$adam'"; fi
  done
fi
