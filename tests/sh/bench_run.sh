# bench_run.sh: bench/run.sh as shipped (every model under specs/models, every GPU file) writes a
# complete results file (every model in the collective table with no figure off its closed form;
# the five paper configurations projected, with the paper's times beside them and the 20% verdict;
# the collective efficiency fitted to the paper and the sensitivity table; the GPU section skipped
# with a reason) and its three PNG plots, into the place asked for and nowhere else.
source "$(dirname "$0")/lib.sh"
out=$TMP/res/bench.md
unset BENCH_MODELS BENCH_OTHER_GPUS BENCH_RUN BENCH_GPU BENCH_GRAD_ACCUM
if ! bash bench/run.sh -o "$out" >"$TMP/log" 2>&1; then fail bench_run_exits_0 "$(tail -3 "$TMP/log")"; exit 1; fi
ok bench_run_exits_0
grep -q '^| cola-llama-7b | h200 | 4 | 1 | [0-9.]* |' "$out" && ok bench_other_gpu || fail bench_other_gpu "no h200 row for 7B"
# every model file has a row: megatron for a dense, low-rank or MoE one, except MoE with expert
# factors shared across experts (btp only); and a btp "(MoE layers)" row for each MoE model
nmodels=$(ls specs/models/*.lua | wc -l); nmoe=$(grep -l 'moe *{' specs/models/*.lua | wc -l)
nshared=$(grep -l 'moe *{' specs/models/*.lua | xargs grep -l 'shared *=' | wc -l)
rows=$(grep -c '^| [a-z0-9-]* | [0-9]* | [0-9]* | [0-9]* | megatron |' "$out")
moe_rows=$(grep -c '^| [a-z0-9-]* | [0-9]* | [0-9]* | [0-9]* | btp | .*(MoE layers)' "$out")
[ "$rows" = $((nmodels - nshared)) ] && [ "$moe_rows" = "$nmoe" ] && [ "$nmoe" -gt 0 ] && ok bench_every_model \
  || fail bench_every_model "$rows megatron rows and $moe_rows MoE rows for $nmodels models ($nmoe with MoE layers, $nshared with shared factors)"
grep -q 'differs\*\*\|not projected\|failed' "$out" && fail bench_closed_forms "$(grep -m3 'differs\*\*\|not projected\|failed' "$out")" \
  || ok bench_closed_forms
# the fitted collective efficiency is the one in use, and every constant has its sensitivity rows
grep -q '^uses the fit: coll_eff = 0\.[0-9]* in gen/project_model.c (the fit, rounded)' "$out" && ok bench_coll_fit \
  || fail bench_coll_fit "$(grep -A2 '^Fit:' "$out" | tr '\n' ' ')"
for c in coll_eff gemm_eff_max attn_fwd_eff hbm_eff launch_us; do
  n=$(grep -c "^| $c=[0-9.]*.* | [0-9]*% \(\*\*over 20%\*\* \)\{0,1\}|$" "$out")
  [ "$n" -ge 3 ] && ok "bench_sensitivity $c ($n values)" || fail "bench_sensitivity $c" "$n rows"
done
# no hard-coded figure in the prose: the 3B sentence quotes the table's own numbers
n3=$(grep '^| cola-llama-3b | 2 | 1 |' "$out" | awk -F'|' '{ split($7, a, " "); print a[1] }')
grep -q "3B naive run takes 1.41 s against\$" "$out" && grep -q "^  $n3 s projected" "$out" && ok bench_prose_from_table \
  || fail bench_prose_from_table "the 3B sentence does not quote the table's naive $n3 s: $(grep -A1 '3B naive run' "$out" | tr '\n' ' ')"
for m in 1b 3b 7b 13b 30b; do
  grep -q "^| cola-llama-$m | .* ([0-9.]*) | .*x ([0-9.]*x) | [-+][0-9]*% |" "$out" && ok "bench_paper_row_$m" \
    || fail "bench_paper_row_$m" "no projection row with the paper's numbers for $m"
done
# the pipelined rows say they are the emitted schedule's timeline and give the formula's figures beside
for m in 13B 30B; do
  grep -q "^Pipelined $m (pp=[24], 1 micro-batch(es)): seconds above from the emitted schedule's timeline; the formula .* gives megatron [0-9.]*, naive [0-9.]*, btp [0-9.]* s" "$out" \
    && ok "bench_pipelined_timeline_$m" || fail "bench_pipelined_timeline_$m" "no timeline/formula line for $m"
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
# the README quotes the committed results file's six speedups (3B, 7B, 13B): they must be its numbers
res=$(ls bench/results/*-cpu.md | tail -1)
want=$(awk -F'|' '$2 ~ /cola-llama-(3b|7b|13b) / && $6 ~ /[(]/ { split($9, a, "x"); split($11, b, "x"); gsub(/ /, "", a[1]); gsub(/ /, "", b[1]); n[++k] = a[1]; f[k] = b[1] }
  END { printf "btp/naive %s, %s, %s against 1.81, 2.28, 1.86; btp/full rank %s, %s, %s against", n[1], n[2], n[3], f[1], f[2], f[3] }' "$res")
tr '\n' ' ' <README.md | sed 's/  */ /g' | grep -qF "$want" && ok "bench_readme_quotes_results ($res)" \
  || fail bench_readme_quotes_results "README.md does not say '$want' (from $res): update the sentence"
