#!/usr/bin/env bash
# mpi_mixture.sh: a data mixture (data.sources, runtime/mixture.c) trained with one process per
# rank under mpirun -np 2, at dp=2, tp=2 and pp=2: the tokens each source gave at every step, the
# losses and the checkpoint's data_taken are those of the same run with ranks as threads; a
# checkpoint resumed under mpirun continues the mixture's counts and losses as the unbroken run,
# and under other weights goes on from the saved counts as the threaded resume does (which
# train_mixture.sh checks against the rule).
# Without mpirun (or without the text corpus) it prints a skip line.
. tests/sh/lib.sh
if ! command -v mpirun >/dev/null; then
  ok "mpi_mixture # SKIP mpirun is not installed (Debian's openmpi-bin, tools/install-deps.sh)"; exit 0
fi
[ -f build/corpus.txt ] || bash tools/corpus.sh >/dev/null 2>&1
[ -f build/corpus.txt ] || { ok "mpi_mixture # SKIP no corpus (Debian's fortunes)"; exit 0; }
head -c 150000 build/corpus.txt >"$TMP/a.txt"
tail -c 120000 build/corpus.txt | tr 'a-z' 'A-Z' >"$TMP/b.txt"
mpi=(timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2)
cat >"$TMP/mix.lua" <<LUA
-- two text sources, weights 3 and 1
return run {
  model = "tiny-cola", gpu = "h100",
  parallel = { tp = 1, dp = 2 },
  train = { micro_batch = 2, seq = 32, steps = 4, eval_every = 2, lr = 3e-3, warmup = 1 },
  data = { val_fraction = 0.1, sources = {
    { path = "$TMP/a.txt", weight = 3 },
    { path = "$TMP/b.txt", weight = 1 },
  } },
}
LUA
# per LOG: each step's data_tokens and loss, and each eval's val_loss, one line each
steps() { grep -o '"\(step\|data_tokens\|loss\|val_loss\)":\(\[[0-9,]*\]\|[^,}]*\)' "$1"; }
taken() { tr -d ' \n' <"$1/state.json" | grep -o '"data_taken":\[[0-9,]*\]'; }

for grid in "dp=2" "tp=2" "pp=2"; do
  name=mpi_mixture_${grid/=/}
  d=(-D "${grid%=*}=${grid#*=}")
  [ "$grid" != dp=2 ] && d+=(-D dp=1 -D grad_accum=2)   # the same 4 sequences per step
  $BOOST train "$TMP/mix.lua" --backend cpu --quiet "${d[@]}" --save-every 2 -o "$TMP/t$grid" \
    --log "$TMP/t$grid.jsonl" >"$TMP/t$grid.out" 2>&1 ||
    { fail "${name}_threads_run" "$(tail -3 "$TMP/t$grid.out")"; continue; }
  "${mpi[@]}" "$BOOST" train "$TMP/mix.lua" --backend cpu --quiet "${d[@]}" --save-every 2 \
    -o "$TMP/m$grid" --log "$TMP/m$grid.jsonl" >"$TMP/m$grid.out" 2>&1
  rc=$?
  n=$(steps "$TMP/t$grid.jsonl" | grep -c data_tokens)
  [ $rc = 0 ] && [ "$n" = 4 ] && cmp -s <(steps "$TMP/t$grid.jsonl") <(steps "$TMP/m$grid.jsonl") &&
    ok "${name}_same_tokens_per_source_and_losses" ||
    fail "${name}_same_tokens_per_source_and_losses" "exit $rc, $n steps with data_tokens: \
$(diff <(steps "$TMP/t$grid.jsonl") <(steps "$TMP/m$grid.jsonl") | head -4 | tr '\n' ' ')\
$(grep -i 'error\|boost' "$TMP/m$grid.out" | head -3)"
  a=$(taken "$TMP/t$grid/step-000004"); b=$(taken "$TMP/m$grid/step-000004")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "${name}_same_data_taken" ||
    fail "${name}_same_data_taken" "threads '$a', mpirun '$b'"
done

# the mpirun dp=2 checkpoint of step 2 resumed under mpirun: steps 3, 4 as the unbroken run
"${mpi[@]}" "$BOOST" train "$TMP/mix.lua" --backend cpu --quiet --resume "$TMP/mdp=2/step-000002" \
  --save-every 2 -o "$TMP/r" --log "$TMP/r.jsonl" >"$TMP/r.out" 2>&1
rc=$?
after2() { steps "$1" | sed -n '/^"step":3$/,$p'; }
[ $rc = 0 ] && [ -n "$(after2 "$TMP/r.jsonl")" ] &&
  cmp -s <(after2 "$TMP/tdp=2.jsonl") <(after2 "$TMP/r.jsonl") &&
  [ "$(taken "$TMP/r/step-000004")" = "$(taken "$TMP/tdp=2/step-000004")" ] &&
  ok mpi_mixture_resume_continues_data_taken ||
  fail mpi_mixture_resume_continues_data_taken "exit $rc: $(diff <(after2 "$TMP/tdp=2.jsonl") \
<(after2 "$TMP/r.jsonl") | head -4 | tr '\n' ' ') $(taken "$TMP/r/step-000004")\
$(grep -i 'error\|boost' "$TMP/r.out" | head -3)"

# other weights (1, 3) from the same checkpoint: under mpirun as with threads; by the rule from the
# saved counts 6, 2 step 3's four sequences all go to b: 6, 6 sequences of 32 tokens (a recount
# from sequence 0 would give 3, 9)
sed 's/weight = 3 }/weight = 0.5 }/; s/weight = 1 }/weight = 3 }/; s/weight = 0.5 }/weight = 1 }/' \
  "$TMP/mix.lua" >"$TMP/swap.lua"
$BOOST train "$TMP/swap.lua" --backend cpu --quiet --resume "$TMP/tdp=2/step-000002" -D steps=3 \
  --log "$TMP/st.jsonl" >"$TMP/st.out" 2>&1
rt=$?
"${mpi[@]}" "$BOOST" train "$TMP/swap.lua" --backend cpu --quiet --resume "$TMP/mdp=2/step-000002" \
  -D steps=3 --log "$TMP/sm.jsonl" >"$TMP/sm.out" 2>&1
rc=$?
[ $rt = 0 ] && [ $rc = 0 ] && grep -q '"data_tokens":\[192,192\]' "$TMP/st.jsonl" &&
  cmp -s <(steps "$TMP/st.jsonl") <(steps "$TMP/sm.jsonl") &&
  ok mpi_mixture_resume_other_weights_from_saved_counts ||
  fail mpi_mixture_resume_other_weights_from_saved_counts "exit $rt/$rc: threads \
$(steps "$TMP/st.jsonl" | tr '\n' ' '), mpirun $(steps "$TMP/sm.jsonl" | tr '\n' ' ')"
