# bench_run.sh: bench/run.sh writes a complete results file (the models asked for in the collective
# table with no figure off its closed form; the five paper configurations projected, with the
# paper's times beside them and the 20% verdict; the GPU section skipped with a reason) and its
# three PNG plots, into the place asked for and nowhere else.
source "$(dirname "$0")/lib.sh"
out=$TMP/res/bench.md
# three models stand for the full table here (bench_collectives checks every model's numbers);
# one other GPU file keeps that table exercised
export BENCH_MODELS="cola-llama-7b tiny-cola-gqa llama-7b" BENCH_OTHER_GPUS=h200
if ! bash bench/run.sh -o "$out" >"$TMP/log" 2>&1; then fail bench_run_exits_0 "$(tail -3 "$TMP/log")"; exit 1; fi
ok bench_run_exits_0
nmodels=3
grep -q '^| cola-llama-7b | h200 | 4 | 1 | [0-9.]* |' "$out" && ok bench_other_gpu || fail bench_other_gpu "no h200 row for 7B"
rows=$(grep -c '^| [a-z0-9-]* | [0-9]* | [0-9]* | [0-9]* | megatron |' "$out")
[ "$rows" = "$nmodels" ] && ok bench_every_model || fail bench_every_model "$rows megatron rows for $nmodels models"
grep -q 'differs\*\*\|not projected' "$out" && fail bench_closed_forms "$(grep -m3 'differs\*\*\|not projected' "$out")" \
  || ok bench_closed_forms
for m in 1b 3b 7b 13b 30b; do
  grep -q "^| cola-llama-$m | .* ([0-9.]*) | .*x ([0-9.]*x) | [-+][0-9]*% |" "$out" && ok "bench_paper_row_$m" \
    || fail "bench_paper_row_$m" "no projection row with the paper's numbers for $m"
done
# the paper's own numbers are printed as given (7B: 1.06, 1.64, 0.72)
grep -q '^| cola-llama-7b | 4 | 1 | 4 | [0-9.]* (1.06) | [0-9.]* (1.64) | [0-9.]* (0.72) |' "$out" && ok bench_paper_numbers \
  || fail bench_paper_numbers "7B row lacks the paper's 1.06/1.64/0.72"
grep -q '^Target \(met\|missed\)' "$out" && ok bench_verdict || fail bench_verdict "no 'Target met/missed' line"
grep -q "^Made by \`bash bench/run.sh -o $out\`" "$out" && ok bench_command_recorded || fail bench_command_recorded "no command line"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then ok "bench_gpu_section # SKIP a GPU is present"
else grep -q '^Skipped: no GPU' "$out" && ok bench_gpu_section || fail bench_gpu_section "no skip line for the GPU part"; fi
for p in collectives projection speedup; do
  f=$TMP/res/bench-$p.png
  sig=$(head -c 8 "$f" 2>/dev/null | od -An -tx1 | tr -d ' \n')
  [ "$sig" = 89504e470d0a1a0a ] && grep -q "(bench-$p.png)" "$out" && ok "bench_plot_$p" || fail "bench_plot_$p" "no PNG $f or no link to it"
done
[ "$(ls "$TMP/res" | wc -l)" = 4 ] && ok bench_no_stray_files || fail bench_no_stray_files "$(ls "$TMP/res")"
