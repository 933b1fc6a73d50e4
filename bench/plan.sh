#!/bin/bash
# plan.sh: `boost plan` benchmarked and validated (docs/planner.md). Writes OUT (default
# bench/results/DATE-planner.md) and beside it STEM-scaling.png:
#  1. the paper's settings (3B, 7B, 13B, 30B on 4 x A100 nodes, one global batch of 4 x 4096
#     tokens): the planner's choice on the paper's GPU count against `boost project` of the paper's
#     configuration (tp, pp, micro-batch 4, one micro-batch, no recompute);
#  2. planning speed: CoLA-40B on 512 H100s (8 per node), seconds of CPU and wall;
#  3. projected weak scaling (4 sequences of 4096 tokens per GPU) and strong scaling (1,024 sequences)
#     to 1,024 GPUs for CoLA-7B/13B and their full-rank twins, plotted.
# A "## Notes" section already in OUT is kept (written by hand: why the choices differ).
# Usage: bash bench/plan.sh [OUT.md]   (from the repository root, after make)
set -u
BOOST=${BOOST:-./bin/boost}
out=${1:-bench/results/$(date -u +%Y-%m-%d)-planner.md}
stem=${out%.md}
tmp=$(mktemp -d /tmp/boost-plan-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
counts=${PLAN_COUNTS:-16 64 256 1024}
# a "## Notes" section already in OUT (the prose on the figures) is kept below the new tables
[ -f "$out" ] && sed -n '/^## Notes/,$p' "$out" >"$tmp/notes"
# kv FILE KEY: the value of KEY= in the best.1 line (or a top-level key) of a `boost plan --kv` output
best() { awk -v k="$2" '$1 == "best.1" { for (i = 2; i <= NF; i++) { split($i, a, "="); if (a[1] == k) print a[2] } }' "$1"; }
top() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

{
  echo "# boost plan: validation, speed and projected scaling ($(date -u +%Y-%m-%d))"
  echo
  echo "Written by \`bash bench/plan.sh\` on $(uname -m), $(nproc) cores (shared: wall times are noisy; CPU"
  echo "seconds are the figure to compare). Cost model: docs/cost-model.md; the planner: docs/planner.md."
  echo
  echo "## 1. The paper's settings (cluster perlmutter: 4 x A100-80GB per node)"
  echo
  echo "One global batch of 4 sequences of 4096 tokens on the paper's GPU count. \"paper\" is \`boost"
  echo "project\` of the paper's configuration (btp, micro-batch 4, one micro-batch, no recompute; with"
  echo "pp > 1 and one micro-batch it is a projection only: a plan needs grad_accum >= pp). \"plan\" is"
  echo "the planner's choice, feasible by its memory check (weights, grads, AdamW, the generated"
  echo "activation arena of the busiest pipeline rank, 1.5 GB workspace)."
  echo
  echo "| model | GPUs | paper's grid | paper s (model) | plan's choice | plan s | plan GB/rank | plan / paper | priced / candidates | CPU s |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$out"
paper="3B cola-llama-3b cola-3b-tp2 2 1 2
7B cola-llama-7b cola-7b-tp4 4 1 4
13B cola-llama-13b cola-13b-tp4-pp2 4 2 8
30B cola-llama-30b cola-30b-tp4-pp4 4 4 16"
echo "$paper" | while read -r size model run tp pp n; do
  ps=$($BOOST project "$run" -D gpu=a100 -D tp=$tp -D pp=$pp -D dp=1 -D micro_batch=4 -D seq=4096 -D grad_accum=1 \
       -D checkpoint=none --kv 2>/dev/null | awk '$1 == "seconds_per_iter.btp" { print $2 }')
  /usr/bin/time -f "%U %S %e" -o "$tmp/t" $BOOST plan "$model" --gpus $n --cluster perlmutter --global-batch 16384 \
    --seq 4096 --kv >"$tmp/p.kv" 2>"$tmp/p.err"
  cpu=$(awk '{ printf "%.1f", $1 + $2 }' "$tmp/t")
  if [ -z "$(best "$tmp/p.kv" seconds)" ]; then
    echo "| $size | $n | tp$tp x pp$pp | $ps | (nothing fits: $(head -c 200 "$tmp/p.err" | tr '\n|' '  ')) | | | | | $cpu |" >>"$out"
    continue
  fi
  s=$(best "$tmp/p.kv" seconds)
  grid="$(best "$tmp/p.kv" layout) tp$(best "$tmp/p.kv" tp) x pp$(best "$tmp/p.kv" pp) x dp$(best "$tmp/p.kv" dp)"
  grid="$grid, v$(best "$tmp/p.kv" v), zero$(best "$tmp/p.kv" zero), ckpt $(best "$tmp/p.kv" checkpoint)"
  grid="$grid, mb$(best "$tmp/p.kv" micro_batch) x ga$(best "$tmp/p.kv" grad_accum)"
  echo "| $size | $n | tp$tp x pp$pp | $(printf %.3f "$ps") | $grid | $(printf %.3f "$s") | $(printf %.1f "$(best "$tmp/p.kv" mem_gb)") |" \
       "$(awk -v a="$s" -v b="$ps" 'BEGIN { printf "%.3f", a / b }') | $(top "$tmp/p.kv" generated) / $(top "$tmp/p.kv" candidates) | $cpu |" >>"$out"
done

{
  echo
  echo "## 2. Planning speed: CoLA-40B on 512 H100s (cluster h100-8x, 4M-token global batch)"
  echo
} >>"$out"
/usr/bin/time -f "%U %S %e" -o "$tmp/t" $BOOST plan cola-llama-40b --gpus 512 --cluster h100-8x --kv >"$tmp/p.kv" 2>&1
awk -v gen="$(top "$tmp/p.kv" generated)" -v cand="$(top "$tmp/p.kv" candidates)" -v pm="$(top "$tmp/p.kv" pruned_mem)" \
    -v pt="$(top "$tmp/p.kv" pruned_time)" '{ printf "`boost plan cola-llama-40b --gpus 512 --cluster h100-8x`: %.1f s of CPU (%.1f s wall on the shared machine); %s candidates, %s ruled out by the memory bound and %s by the time bound, %s generated and priced.\n", $1 + $2, $3, cand, pm, pt, gen }' "$tmp/t" >>"$out"
echo >>"$out"
echo "Its choice: $(grep '^best.1' "$tmp/p.kv" | cut -d' ' -f2-)" >>"$out"

{
  echo
  echo "## 3. Projected scaling to 1,024 A100s (cluster perlmutter), the planner's best at each count"
  echo
  echo "Weak: 4 sequences of 4096 tokens per GPU per step; strong: 1,024 sequences (4M tokens) per step."
  echo "tokens/s per GPU and the grid the planner chose; the plot: ${stem##*/}-scaling.png."
  echo
  echo "| model | GPUs | weak: tok/s/GPU | weak: s/iter | weak grid | strong: tok/s/GPU | strong: s/iter | strong grid |"
  echo "|---|---|---|---|---|---|---|---|"
} >>"$out"
: >"$tmp/scale.dat"
for model in cola-llama-7b llama-7b cola-llama-13b llama-13b; do
  for n in $counts; do
    row="| $model | $n"
    line="$model $n"
    for mode in weak strong; do
      gb=$([ $mode = weak ] && echo $((n * 4 * 4096)) || echo $((1024 * 4096)))
      $BOOST plan $model --gpus $n --cluster perlmutter --global-batch $gb --seq 4096 --kv >"$tmp/p.kv" 2>/dev/null
      t=$(best "$tmp/p.kv" tok_s_gpu); s=$(best "$tmp/p.kv" seconds)
      g="$(best "$tmp/p.kv" layout) tp$(best "$tmp/p.kv" tp) pp$(best "$tmp/p.kv" pp) dp$(best "$tmp/p.kv" dp) mb$(best "$tmp/p.kv" micro_batch) ckpt $(best "$tmp/p.kv" checkpoint)"
      [ -z "$t" ] && { t=nan; s=nan; g="nothing fits"; }
      row="$row | $(printf %.0f "$t" 2>/dev/null || echo -) | $(printf %.3f "$s" 2>/dev/null || echo -) | $g"
      line="$line $t"
    done
    echo "$row |" >>"$out"
    echo "$line" >>"$tmp/scale.dat"
  done
done

if command -v gnuplot >/dev/null; then
  for model in cola-llama-7b llama-7b cola-llama-13b llama-13b; do awk -v m=$model '$1 == m' "$tmp/scale.dat" >"$tmp/$model.dat"; done
  gnuplot <<GP
set terminal pngcairo size 1100,460
set output '$stem-scaling.png'
set multiplot layout 1,2
set logscale x 2
set grid
set key bottom left
set xlabel 'GPUs (A100, 4 per node)'
set ylabel 'tokens/s per GPU (planner best)'
set title 'weak scaling: 4 x 4096 tokens per GPU'
plot for [m in "cola-llama-7b llama-7b cola-llama-13b llama-13b"] '$tmp/'.m.'.dat' using 2:3 with linespoints lw 2 title m
set title 'strong scaling: 1024 x 4096 tokens per step'
plot for [m in "cola-llama-7b llama-7b cola-llama-13b llama-13b"] '$tmp/'.m.'.dat' using 2:4 with linespoints lw 2 title m
unset multiplot
GP
else echo "(no plot: gnuplot not installed)" >>"$out"; fi
[ -s "$tmp/notes" ] && { echo; cat "$tmp/notes"; } >>"$out"
echo "wrote $out"
