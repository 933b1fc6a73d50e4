#!/usr/bin/env bash
# cpu_vs_torch.sh: BOOST's CPU backend against PyTorch on this machine, same model, same batch
# (micro-batch 4 x seq 256, fp32, AdamW), taken in turns per shape: `boost train` then PyTorch eager
# (and torch.compile when CPU_BENCH_COMPILE=1), tokens/s and the ratio written to a results file.
# Usage: bash bench/cpu_vs_torch.sh [-o FILE.md] [--quick] [--dry]
#   --quick  tiny-cola only, fewer steps (what a test may run); --dry  print the commands only
# Knobs: CPU_BENCH_SHAPES ("tiny-cola cola-60m cola-130m"), CPU_BENCH_TPS ("1 2"), CPU_BENCH_STEPS
# (6; the first 2 are left out), CPU_BENCH_COMPILE (0), CPU_BENCH_PROFILE (1: append BOOST_PROFILE=1's
# per-kind table of each shape at tp=1 to the file), BOOST_THREADS (default here: the cores, the
# thread count PyTorch gets, so that other load on the machine does not make the two sides differ).
set -u
cd "$(dirname "$0")/.." || exit 2
BOOST=${BOOST:-./bin/boost}
out=bench/results/$(date -u +%Y-%m-%d)-cpu-vs-torch.md
quick=0 dry=0
while [ $# -gt 0 ]; do
  case $1 in
    -o) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --dry) dry=1; shift ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/cpu_vs_torch.sh: unknown argument '$1' (usage: bash bench/cpu_vs_torch.sh [-o FILE.md] [--quick] [--dry])" >&2
       exit 2 ;;
  esac
done
shapes=${CPU_BENCH_SHAPES:-tiny-cola cola-60m cola-130m}
tps=${CPU_BENCH_TPS:-1 2}
steps=${CPU_BENCH_STEPS:-6}
warm=2
if [ $quick = 1 ]; then shapes=tiny-cola; steps=4; warm=1; fi
compile=${CPU_BENCH_COMPILE:-0}
cores=$(nproc 2>/dev/null || echo 1)
export BOOST_THREADS=${BOOST_THREADS:-$cores}

run_of() {   # shape -> run spec
  case $1 in
    tiny-cola) echo tiny-cola ;;
    cola-60m) echo cola-60m-h100 ;;
    cola-130m) echo cola-130m-h100 ;;
    *) echo "bench/cpu_vs_torch.sh: unknown shape '$1' (tiny-cola, cola-60m, cola-130m)" >&2; exit 2 ;;
  esac
}
# the same batch on both sides; no validation, no checkpointing of activations, fp32
defs() { echo "-D micro_batch=4 -D seq=256 -D dtype=fp32 -D checkpoint=none -D grad_accum=1 -D tp=$2 -D steps=$steps"; }

if [ $dry = 1 ]; then
  for s in $shapes; do r=$(run_of "$s") || exit 2; for t in $tps; do
    echo "$BOOST train $r $(defs "$s" "$t") -D eval_every=100000 --backend cpu --quiet --log LOG"
    echo "python3 tests/gpu/torch_model.py --bench $r $(defs "$s" "$t") --device cpu --threads $cores --mode eager --steps $steps --warmup-steps $warm"
  done; done
  exit 0
fi

if ! python3 -c "import torch" >/dev/null 2>&1; then
  echo "ok - cpu_vs_torch # SKIP PyTorch is not importable here (pip install torch)"
  exit 0
fi
make -s bin/boost >/dev/null 2>&1 || { echo "bench/cpu_vs_torch.sh: the build failed (run make bin/boost)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/boost-cpu-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cp "$BOOST" "$tmp/boost"
export BOOST_HOME=$PWD   # the private copy finds templates/ here
# OpenBLAS tuning variables set for another machine slow numpy and torch here: only for this command
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
boost_tps() {   # run tp -> median tokens/s of the steps after warm-up
  local log=$tmp/log.json
  rm -f "$log"
  # shellcheck disable=SC2046
  if ! "$tmp/boost" train "$1" $(defs x "$2") -D eval_every=100000 --backend cpu --quiet --log "$log" >"$tmp/boost.out" 2>&1; then
    echo "boost train $1 tp=$2 failed: $(tail -2 "$tmp/boost.out" | tr '\n' ' ')" >&2; echo nan; return
  fi
  grep '"tokens_per_s"' "$log" | tail -n +$((warm + 1)) | sed 's/.*"tokens_per_s":\([0-9.eE+-]*\).*/\1/' | median
}
torch_tps() {   # run tp mode -> tokens/s
  # shellcheck disable=SC2046
  OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} python3 tests/gpu/torch_model.py --bench "$1" $(defs x "$2") --boost "$tmp/boost" --device cpu --threads "$cores" \
    --mode "$3" --steps "$steps" --warmup-steps "$warm" 2>"$tmp/torch.err" \
    | sed -n 's/.*"tokens_per_s": \([0-9.eE+-]*\).*/\1/p' | head -1 | grep . || { echo "torch $1 $3 failed: $(tail -2 "$tmp/torch.err")" >&2; echo nan; }
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b <= 0) print "n/a"; else printf "%.2f", a / b }'; }

md=$tmp/res.md
{
  echo "# BOOST CPU backend vs PyTorch, $(date -u +%Y-%m-%d)"
  echo
  echo "Made by \`bash bench/cpu_vs_torch.sh$( [ $quick = 1 ] && echo ' --quick')\` at $(date -u '+%Y-%m-%d %H:%M UTC'),"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(python3 -c 'import torch; print("PyTorch", torch.__version__)'),"
  echo "$cores cores ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), BOOST_THREADS=$BOOST_THREADS (PyTorch: $cores threads)."
  echo "Micro-batch 4 x seq 256, fp32, one AdamW step per training step, $steps steps each, the median"
  echo "of the last $((steps - warm)). PyTorch uses $cores threads (it has no tensor parallelism: its tp=2 row is"
  echo "the same single-process model, so the ratio compares BOOST's two ranks against it). The two"
  echo "sides run in turns; other load on the machine moves both. Both sides' OpenMP threads wait"
  echo "passively (OMP_WAIT_POLICY=PASSIVE: BOOST's default, set for PyTorch here), as spinning threads"
  echo "on a shared machine slow a step down several times; both sides use the same thread count."
  echo
  echo "| shape | tp | BOOST tok/s | PyTorch eager tok/s | ratio | torch.compile tok/s | ratio |"
  echo "|---|---|---|---|---|---|---|"
} >"$md"
for s in $shapes; do
  r=$(run_of "$s") || exit 2
  for t in $tps; do
    b=$(boost_tps "$r" "$t")
    e=$(torch_tps "$r" "$t" eager)
    c=nan
    [ "$compile" = 1 ] && c=$(torch_tps "$r" "$t" compile)
    echo "| $s | $t | $b | $e | $(ratio "$b" "$e") | $( [ "$c" = nan ] && echo - || echo "$c") | $(ratio "$b" "$c") |" | tee -a "$md"
  done
done
if [ "${CPU_BENCH_PROFILE:-1}" = 1 ]; then   # where BOOST's time goes at tp=1 (runtime/profile.c)
  {
    echo
    echo "## Where BOOST's time goes (tp=1, BOOST_PROFILE=1, one rank, the same batch and steps)"
  } >>"$md"
  for s in $shapes; do
    r=$(run_of "$s") || exit 2
    # shellcheck disable=SC2046
    BOOST_PROFILE=1 "$tmp/boost" train "$r" $(defs x 1) -D eval_every=100000 --backend cpu --quiet --log "$tmp/prof.json" \
      >"$tmp/prof.out" 2>&1
    { echo; echo "$s:"; echo; echo '```'; sed -n '/^boost profile/,$p' "$tmp/prof.out" | head -24; echo '```'; } >>"$md"
  done
fi
mkdir -p "$(dirname "$out")"
if [ -f "$out" ] && grep -q '^## Notes' "$out"; then   # keep hand-written notes below the table
  { echo; sed -n '/^## Notes/,$p' "$out"; } >>"$md"
fi
cp "$md" "$out"
echo "wrote $out"
