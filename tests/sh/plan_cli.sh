# plan_cli.sh: `boost plan` as a command on a toy model: a plan prints its table and writes a run
# spec that `boost gen` accepts and `boost project` prices to the printed time (also a cuda zero=2
# candidate, its dp reduction unhidden as in plan, hidden in part with --backend cpu); the PNG is
# drawn (or skipped with a message when gnuplot is missing); bad input exits 2 with a message: no
# --gpus, an unknown model, a GPU count with no grid (the counts that work), nothing fitting (the
# smallest memory and the nearest feasible GPU count), a cluster of another GPU than --gpu.
source "$(dirname "$0")/lib.sh"
for i in $(seq 60); do cp "$BOOST" "$TMP/boost" 2>/dev/null && "$TMP/boost" --help >/dev/null 2>&1 && break; sleep 1; done
BOOST=$TMP/boost
PLAN=(plan tiny-cola-4l --seq 64 --global-batch 1024 --cluster perlmutter)

if $BOOST "${PLAN[@]}" --gpus 8 -o "$TMP/win.lua" >"$TMP/out" 2>"$TMP/err"; then
  if grep -q '^  1  ' "$TMP/out" && grep -q "winner written to $TMP/win.lua" "$TMP/out"; then ok plan_prints_and_writes
  else fail plan_prints_and_writes "$(cat "$TMP/out")"; fi
else fail plan_prints_and_writes "exit $?: $(cat "$TMP/err")"; fi

if [ -f "$TMP/win.lua" ] && BOOST_HOME=$PWD $BOOST gen "$TMP/win.lua" -o "$TMP/gen" >/dev/null 2>"$TMP/err" && [ -s "$TMP/gen/plan.txt" ]; then
  ok plan_winner_generates
else fail plan_winner_generates "$(cat "$TMP/err")"; fi

# the printed time == boost project of the written spec (perlmutter's figures are the a100 file's)
s=$(awk '$1 == "best.1" { for (i = 2; i <= NF; i++) if ($i ~ /^seconds=/) { sub("seconds=", "", $i); print $i } }' \
    <($BOOST "${PLAN[@]}" --gpus 8 --kv))
lay=$(sed -n 's/.*layout = "\([a-z]*\)".*/\1/p' "$TMP/win.lua")
p=$($BOOST project "$TMP/win.lua" --kv 2>/dev/null | awk -v k="seconds_per_iter.$lay" '$1 == k { print $2 }')
python3 -c "import sys; sys.exit(0 if abs($s - $p) <= 1e-5 * $p else 1)" 2>/dev/null && ok plan_time_is_projects \
  || fail plan_time_is_projects "plan $s s, project $p s"

# a cuda zero=2 candidate: plan's time == boost project of the spec set to its grid, where none
# of the dp reduction is hidden (compute waits for each reduce-scatter); --backend cpu hides some
# of it, so project's cuda time is its cpu time plus the cpu's hidden part (small dp buckets, so
# that the backward has some of the reduction to hide)
sed 's/zero = /dp_bucket_mb = 0.01, zero = /' "$TMP/win.lua" >"$TMP/z2.lua"
z2=$($BOOST plan "$TMP/z2.lua" "${PLAN[@]:2}" --gpus 8 --kv --top 64 --brute 2>/dev/null \
     | grep -m1 ' zero=2 ')
field() { tr ' ' '\n' <<<"$z2" | sed -n "s/^$1=//p"; }
defs=()
for k in layout tp pp dp zero checkpoint micro_batch grad_accum; do
  defs+=(-D "$k=$(field $k)")
done
s=$(field seconds); lay=$(field layout)
z2kv() {   # KEY [--backend B]: the key's value for the candidate's layout
  local key=$1; shift
  $BOOST project "$TMP/z2.lua" "${defs[@]}" --kv "$@" 2>/dev/null \
    | awk -v k="$key.$lay" '$1 == k { print $2 }'
}
pc=$(z2kv seconds_per_iter); hc=$(z2kv dp_hidden_s)
pu=$(z2kv seconds_per_iter --backend cpu); hu=$(z2kv dp_hidden_s --backend cpu)
python3 -c "import sys; sys.exit(0 if abs($s - $pc) <= 1e-5 * $pc and $hc == 0 and $hu > 0
  and abs($pc - $pu - $hu) <= 1e-9 * $pc else 1)" 2>/dev/null \
  && ok plan_time_is_projects_cuda_zero2 \
  || fail plan_time_is_projects_cuda_zero2 \
       "'$z2': plan $s s, project $pc s (hidden $hc), --backend cpu $pu s (hidden $hu)"
$BOOST project "$TMP/win.lua" --backend gpu >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 2 ] && grep -q "expected cuda or cpu" "$TMP/err" && ok project_bad_backend \
  || fail project_bad_backend "exit $rc: $(cat "$TMP/err")"

if command -v gnuplot >/dev/null; then
  $BOOST "${PLAN[@]}" --gpus 8 --png "$TMP/p.png" >/dev/null 2>"$TMP/err" && [ -s "$TMP/p.png" ] && ok plan_png \
    || fail plan_png "$(cat "$TMP/err")"
else echo "ok - plan_png # SKIP gnuplot not installed"; fi
GNUPLOT=/nonexistent/gnuplot $BOOST "${PLAN[@]}" --gpus 8 --png "$TMP/q.png" >"$TMP/out" 2>&1
[ $? -eq 0 ] && grep -q "no PNG: gnuplot not found" "$TMP/out" && [ ! -e "$TMP/q.png" ] && ok plan_png_skipped_without_gnuplot \
  || fail plan_png_skipped_without_gnuplot "$(cat "$TMP/out")"

expect2() {   # expect2 NAME PATTERN ARGS...: exit 2 and PATTERN in the output
  local name=$1 pat=$2; shift 2
  $BOOST "$@" >"$TMP/out" 2>&1; local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$pat" "$TMP/out"; then ok "$name"; else fail "$name" "exit $rc: $(head -c 400 "$TMP/out")"; fi
}
expect2 plan_needs_gpus "--gpus N is required" plan tiny-cola
expect2 plan_unknown_model "no such model" plan no-such-model --gpus 4
expect2 plan_no_grid_counts "GPU counts that work: 6, 8" "${PLAN[@]}" --gpus 7
expect2 plan_cluster_gpu_conflict "drop one of them" "${PLAN[@]}" --gpus 4 --gpu h100
cat >"$TMP/small.lua" <<'LUA'
-- a cluster whose GPUs hold 8 GB: CoLA-1B's weights, gradients and AdamW (about 12 GB) need two
return cluster "small" { gpu = "a100", gpus_per_node = 4, memory_gb = 8 }
LUA
expect2 plan_nothing_fits "smallest memory any candidate needs" plan cola-llama-1b --seq 128 --global-batch 1024 \
  --cluster "$TMP/small.lua" --gpus 1
grep -q "nearest feasible: --gpus 2 " "$TMP/out" && ok plan_nothing_fits_nearest || fail plan_nothing_fits_nearest "$(cat "$TMP/out")"

# ZeRO-2 per backend: cuda (the default) keeps only gradient shards at pp 1, so it
# is searched there only and the output says so; cpu searches it everywhere; another backend is
# refused
$BOOST "${PLAN[@]}" --gpus 8 >"$TMP/cuda.out" 2>&1
cuda_kv=$($BOOST "${PLAN[@]}" --gpus 8 --kv 2>&1 | grep '^zero' | tr '\n' ' ')
cpu_kv=$($BOOST "${PLAN[@]}" --gpus 8 --kv --backend cpu 2>&1 | grep '^zero' | tr '\n' ' ')
grep -q "ZeRO searched: 0, 1, and 2 at pp 1 only" "$TMP/cuda.out" \
  && [ "$cuda_kv" = "zero_searched 0,1,2 zero2_searched_at pp=1 " ] \
  && [ "$cpu_kv" = "zero_searched 0,1,2 zero2_searched_at any " ] && ok plan_zero2_per_backend \
  || fail plan_zero2_per_backend "cuda: '$cuda_kv', cpu: '$cpu_kv'; $(grep -i zero "$TMP/cuda.out" | head -2)"
expect2 plan_backend_unknown "expected cuda or cpu" "${PLAN[@]}" --gpus 8 --backend tpu
