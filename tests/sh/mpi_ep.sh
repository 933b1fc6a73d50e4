#!/usr/bin/env bash
# mpi_ep.sh: expert parallelism as processes under Open MPI's mpirun (CPU backend): the MoE models at
# ep=4 x dp=4, ep=2 x dp=4 (ep groups and edp groups of two) and, with shared factors, ep=2 x dp=2 x
# tp=2 under -np 4 log the same losses, validation losses, gradient norms and expert loads (summed
# over every dp rank's routing, from whichever process holds it) as the threaded run, bit
# for bit (the all-to-all only moves rows: MPI_Alltoallv of the filled slots after an all-gather of the
# per-expert counts), and the sharded checkpoints hold the same bytes. Threads: a checkpoint saved at
# ep=2 x dp=2 resumes at ep=1 x dp=2 and continues the uninterrupted ep=2 run's losses within 1e-5; an ep=2
# x dp=4 checkpoint of the threads resumes under mpirun -np 4 with the same losses. Inside pipeline
# stages: ep=2 x dp=2 x pp=2 equals ep=1 within 1e-5 as threads, and under -np 4 equals the threads.
# Without mpirun the process part prints a skip line.
. tests/sh/lib.sh
export BOOST_THREADS=${BOOST_THREADS:-1}
opts=(--backend cpu -D dtype=fp32 -D micro_batch=1 -D seq=32 --quiet)
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
numbers() { grep -o '"\(val_\)\?loss":[^,}]*\|"grad_norm":[^,}]*\|"moe_load":[][0-9,]*' "$1"; }   # moe_load: every dp rank's routing

# ---- resume an ep checkpoint without ep (threads) ----
moe=specs/runs/tiny-cola-moe.lua
$BOOST train "$moe" "${opts[@]}" -D dp=2 -D ep=2 -D tp=1 -D steps=6 -D eval_every=0 --save-every 3 -o "$TMP/a" \
  --log "$TMP/a.jsonl" >"$TMP/a.out" 2>&1
rc=$?
if [ $rc != 0 ] || [ ! -f "$TMP/a/step-000003/state.json" ]; then
  fail ep2_dp2_saves "exit $rc: $(tail -3 "$TMP/a.out")"
else
  ok ep2_dp2_saves
  cp "$TMP/a.jsonl" "$TMP/r.jsonl"
  $BOOST train "$moe" "${opts[@]}" -D dp=2 -D ep=1 -D tp=1 -D steps=6 -D eval_every=0 --resume "$TMP/a/step-000003" \
    --log "$TMP/r.jsonl" >"$TMP/r.out" 2>&1
  rc=$?
  good=$([ $rc = 0 ] && echo 1 || echo 0)
  for s in 4 5 6; do
    a=$(field "$TMP/a.jsonl" "$s" loss); b=$(field "$TMP/r.jsonl" "$s" loss)
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (1e-5 * a) ^ 2) }' || { good=0; echo "# step $s: $a vs $b"; }
  done
  [ "$good" = 1 ] && ok resume_ep2_at_ep1 || fail resume_ep2_at_ep1 "exit $rc: $(tail -2 "$TMP/r.out")"
fi

# ---- ep inside pipeline stages (threads): ep=2 x dp=2 x pp=2 equals ep=1 within 1e-5 ----
pp_o=("$moe" "${opts[@]}" -D dp=2 -D tp=1 -D pp=2 -D grad_accum=4 -D steps=3 -D eval_every=0)
$BOOST train "${pp_o[@]}" -D ep=2 --log "$TMP/pe2.jsonl" >"$TMP/pe2.out" 2>&1; rc2=$?
$BOOST train "${pp_o[@]}" -D ep=1 --log "$TMP/pe1.jsonl" >"$TMP/pe1.out" 2>&1; rc1=$?
good=$([ $rc1 = 0 ] && [ $rc2 = 0 ] && echo 1 || echo 0)
for s in 1 2 3; do
  for k in loss grad_norm; do
    a=$(field "$TMP/pe2.jsonl" "$s" $k); b=$(field "$TMP/pe1.jsonl" "$s" $k)
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (1e-5 * a) ^ 2) }' || { good=0; echo "# step $s $k: $a vs $b"; }
  done
done
[ "$good" = 1 ] && ok ep2_dp2_pp2_equals_ep1 || fail ep2_dp2_pp2_equals_ep1 "exit $rc2/$rc1: $(tail -n 1 "$TMP/pe2.out")"

# ---- processes ----
if ! command -v mpirun >/dev/null; then
  ok "mpi_ep # SKIP mpirun is not installed (Debian's openmpi-bin, tools/install-deps.sh)"; exit 0
fi
mpi=(mpirun --oversubscribe --allow-run-as-root)
i=0
for g in "$moe:-D dp=4 -D ep=4 -D tp=1" "$moe:-D dp=4 -D ep=2 -D tp=1" \
         "specs/runs/tiny-cola-moe-shared.lua:-D dp=2 -D ep=2 -D tp=2" "$moe:-D dp=2 -D ep=2 -D tp=1 -D pp=2 -D grad_accum=4"; do
  run=${g%%:*}; read -r -a defs <<<"${g#*:}"; i=$((i + 1))
  name="mpi_$(basename "$run" .lua)_np4_$(echo "${g#*:}" | sed 's/-D //g; s/ /_/g; s/=//g')"
  $BOOST train "$run" "${opts[@]}" "${defs[@]}" -D steps=3 -D eval_every=2 --ckpt-format sharded --log "$TMP/t$i.jsonl" \
    -o "$TMP/t$i" >"$TMP/t$i.out" 2>&1 || { fail "${name}_same_as_threads" "threaded run failed: $(tail -2 "$TMP/t$i.out")"; continue; }
  timeout 300 "${mpi[@]}" -np 4 "$BOOST" train "$run" "${opts[@]}" "${defs[@]}" -D steps=3 -D eval_every=2 \
    --ckpt-format sharded --log "$TMP/m$i.jsonl" -o "$TMP/m$i" >"$TMP/m$i.out" 2>&1
  rc=$?
  if [ $rc = 0 ] && [ "$(numbers "$TMP/m$i.jsonl" | wc -l)" -ge 8 ] && cmp -s <(numbers "$TMP/t$i.jsonl") <(numbers "$TMP/m$i.jsonl"); then
    ok "${name}_same_as_threads"
  else
    fail "${name}_same_as_threads" "exit $rc: $(numbers "$TMP/m$i.jsonl" | head -3 | tr '\n' ' ') vs $(numbers "$TMP/t$i.jsonl" | head -3 | tr '\n' ' ') $(grep -i 'boost\|error' "$TMP/m$i.out" | head -3)"
  fi
  same=1; nf=0
  for f in "$TMP/t$i"/step-000003/rank-*.safetensors "$TMP/t$i/step-000003/index.json"; do
    [ -f "$f" ] || { same=0; break; }
    nf=$((nf + 1)); cmp -s "$f" "$TMP/m$i/step-000003/$(basename "$f")" || { same=0; break; }
  done
  [ "$same" = 1 ] && [ "$nf" -ge 2 ] && ok "${name}_same_checkpoint" \
    || fail "${name}_same_checkpoint" "step-3 sharded checkpoint ($nf files compared) differs from the threaded run's"
done

# the threads' ep=2 x dp=4 checkpoint resumed by 4 processes: the continued losses equal the
# uninterrupted threaded run's bit for bit (each process takes the expert blocks of its ep rank)
o=("$moe" "${opts[@]}" -D dp=4 -D ep=2 -D tp=1 -D steps=4 -D eval_every=0)
$BOOST train "${o[@]}" --save-every 2 -o "$TMP/ra" --log "$TMP/ra.jsonl" >"$TMP/ra.out" 2>&1
cp "$TMP/ra.jsonl" "$TMP/rb.jsonl"
timeout 300 "${mpi[@]}" -np 4 "$BOOST" train "${o[@]}" --resume "$TMP/ra/step-000002" --log "$TMP/rb.jsonl" >"$TMP/rb.out" 2>&1
rc=$?
a=$(field "$TMP/ra.jsonl" 4 loss); b=$(field "$TMP/rb.jsonl" 4 loss)
[ $rc = 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && ok mpi_resume_ep2_dp4_from_threads \
  || fail mpi_resume_ep2_dp4_from_threads "exit $rc: step 4 loss $b vs $a; $(tail -2 "$TMP/rb.out")"
