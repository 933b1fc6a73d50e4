#!/usr/bin/env bash
# run.sh: every check that needs a GPU, in one call on the device machine (results under $OUT):
#   1. the machine, and that the carried bin/boost and build/gpu/check start there;
#   2. check steps: every step of the tiny plans (all kernel kinds, GEMMs) on CUDA vs the CPU
#      backend, one isolated step at a time (steps.md);
#   3. check model: 3 training steps CUDA vs CPU (loss, every gradient), repeated for determinism,
#      and tp=2 / tp=4 local mode vs tp=1 on CUDA (model.md);
#   4. the kernels' registers and spills on this GPU's arch (kernels.md);
#   5. tokens/s of short training runs (bench.md).
# Build first on the build machine: bash tests/gpu/build.sh, then carry bin/, build/gpu/ and
# build/corpus.txt (without it the benchmark trains on generated text).
# Usage (device machine): bash tests/gpu/run.sh   [GPU_STEPS_ONLY=1: only parts 1-3]
# Dry run without a GPU (checks this script): DUT=cpu BENCH_QUICK=1 bash tests/gpu/run.sh (CPU
# against CPU; the benchmark only trains tiny-cola).
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
export BOOST_CACHE=${BOOST_CACHE:-/tmp/boost-cache}
TMP=$(mktemp -d /tmp/boost-gpu.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
BOOST=./bin/boost
CHECK=./build/gpu/check
DUT=${DUT:-cuda}
fails=0
say() { echo "$*" | tee -a "$OUT/run.log"; }
section() { say ""; say "== $* ($(date -u +%H:%M:%S))"; }

section "machine"
{
  echo "# GPU checks: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>&1 | head -3
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo '```'
} >"$OUT/summary.md"
cat "$OUT/summary.md" | tee -a "$OUT/run.log"
if [ ! -x "$BOOST" ] || [ ! -x "$CHECK" ]; then
  say "bin/boost or build/gpu/check missing: trying to build here"
  bash tests/gpu/build.sh >>"$OUT/run.log" 2>&1 || { say "FAIL - build (see run.log): carry bin/ and build/gpu/"; exit 1; }
fi
if ! "$BOOST" --help >/dev/null 2>&1; then say "FAIL - bin/boost does not start here: $(ldd "$BOOST" 2>&1 | grep 'not found')"; exit 1; fi

section "plans"
gen() {   # gen NAME RUN [-D ...]
  local name=$1; shift
  if ! timeout 60 "$BOOST" gen "$@" -o "$TMP/$name" >>"$OUT/run.log" 2>&1; then
    say "FAIL - generate $name ($*)"; fails=$((fails + 1)); return 1
  fi
}
gen cola1 tiny-cola -D tp=1
gen cola1-sync tiny-cola -D tp=1 -D online_rmsnorm=0 -D group_linears=0
gen llama1 tiny-llama -D tp=1
gen gqa1 tiny-cola-gqa -D tp=1
gen svd1 tiny-svd -D tp=1
gen lax1 tiny-lax -D tp=1
gen cola2 tiny-cola -D tp=2
gen cola4 tiny-cola -D tp=4
gen cola2-sync tiny-cola -D tp=2 -D online_rmsnorm=0
gen llama2 tiny-llama -D tp=2
gen llama1-meg tiny-llama -D tp=1 -D layout=megatron

section "check steps: every step on CUDA vs CPU"
: >"$OUT/steps.md"
for d in cola1 cola1-sync llama1 gqa1 svd1 lax1 llama1-meg; do
  [ -f "$TMP/$d/plan.txt" ] || continue
  timeout 300 "$CHECK" steps "$TMP/$d" --against "$DUT" >"$TMP/steps-$d.txt" 2>&1
  rc=$?
  grep -E '^(ok|FAIL) - ' "$TMP/steps-$d.txt" | tee -a "$OUT/run.log" >/dev/null
  { echo "## $d"; echo; timeout 300 "$CHECK" steps "$TMP/$d" --against "$DUT" --md 2>&1 | grep '^|' | sed "s#$TMP/##g"; echo; } >>"$OUT/steps.md"
  n=$(grep -c '^FAIL' "$TMP/steps-$d.txt")
  say "steps $d: exit $rc, $(grep -c '^ok' "$TMP/steps-$d.txt") ok, $n FAIL"
  [ "$rc" = 0 ] || fails=$((fails + 1))
  grep '^FAIL' "$TMP/steps-$d.txt" | head -5 | tee -a "$OUT/run.log"
done

section "check model: training steps, determinism, tp local mode"
: >"$OUT/model.md"
model() {   # model DIR [--tp-ref DIR]
  local d=$1; shift
  [ -f "$TMP/$d/plan.txt" ] || return
  local args=()
  [ $# -ge 1 ] && args=(--tp-ref "$TMP/$1")
  timeout 300 "$CHECK" model "$TMP/$d" --against "$DUT" "${args[@]}" >"$TMP/model-$d.txt" 2>&1
  local rc=$?
  sed "s#$TMP/##g" "$TMP/model-$d.txt" | tee -a "$OUT/run.log" >>"$OUT/model.md"
  [ "$rc" = 0 ] || { fails=$((fails + 1)); say "model $d: exit $rc"; }
}
model cola1
model cola1-sync
model llama1
model gqa1
model lax1
model cola2 cola1
model cola4 cola1
model cola2-sync cola1-sync
model llama2 llama1

if [ "${GPU_STEPS_ONLY:-0}" != 1 ]; then
  section "kernels on this arch"
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  arch=sm_${arch:-90}
  gen k-cola1b cola-1b-h200
  gen k-cola7b cola-7b-tp4
  : >"$OUT/kernels.md"
  for d in cola1 k-cola1b k-cola7b; do
    [ -f "$TMP/$d/kernels.cu" ] || continue
    { echo "## $d ($arch)"; echo; timeout 120 "$BOOST" kernels "$TMP/$d" --arch "$arch" --md 2>&1; echo; } >>"$OUT/kernels.md"
  done

  section "bench: tokens/s (boost train --backend $DUT)"
  {
    echo "| run | steps | tokens/step | tokens/s (median of the last half) | final loss |"
    echo "|---|---:|---:|---:|---:|"
  } >"$OUT/bench.md"
  data=()
  if [ ! -f build/corpus.txt ]; then
    python3 -c "import random; r=random.Random(1); w=[''.join(r.choice('etaoinshrdlu') for _ in range(r.randint(2,8))) for _ in range(5000)]; print(' '.join(r.choice(w) for _ in range(600000)))" >"$TMP/data.txt"
    data=(-D data="$TMP/data.txt")
  fi
  bench() {   # bench RUN STEPS [-D ...]
    local run=$1 steps=$2; shift 2
    local log="$TMP/bench-$run.jsonl"
    if ! timeout 240 "$BOOST" train "$run" -D steps="$steps" -D eval_every=0 "${data[@]}" "$@" --backend "$DUT" --quiet \
         --log "$log" >"$TMP/bench-$run.txt" 2>&1; then
      say "FAIL - bench $run: $(tail -3 "$TMP/bench-$run.txt")"
      fails=$((fails + 1))
      return
    fi
    local tokens
    tokens=$(grep -o '= [0-9.,kM]* tokens per step' "$TMP/bench-$run.txt" | head -1 | sed 's/= //; s/ tokens per step//')
    python3 - "$log" "$run" "$steps" "$tokens" >>"$OUT/bench.md" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "tokens_per_s" in r]
half = rows[len(rows) // 2:] or rows
tps = statistics.median(r["tokens_per_s"] for r in half)
tok = sys.argv[4]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {tok} | {tps:,.0f} | {rows[-1].get('loss', float('nan')):.4f} |")
PY
    say "bench $run: $(tail -1 "$OUT/bench.md")"
  }
  bench tiny-cola 30 -D tp=1
  if [ "${BENCH_QUICK:-0}" = 1 ]; then :; else
  bench cola-60m-h100 20
  bench llama-60m-h100 20
  bench cola-350m-h100 10
  bench llama-350m-h100 10
  bench cola-1b-h200 6
  bench llama-1b-h200 6
  fi
fi

section "summary"
{
  echo
  echo "checks passed: $(grep -c '^ok - ' "$OUT/run.log"), failed: $(grep -c '^FAIL - ' "$OUT/run.log"), failing parts: $fails"
  echo
  echo "Details: steps.md (per step kind, CUDA vs CPU), model.md (training steps, determinism, TP),"
  echo "kernels.md (registers/spills), bench.md (tokens/s), run.log (everything)."
} >>"$OUT/summary.md"
tail -4 "$OUT/summary.md"
[ "$fails" = 0 ]
