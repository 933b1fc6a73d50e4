#!/usr/bin/env bash
# nvrtc_mock_pipeline.sh: pipeline parallelism on the CUDA backend without a GPU (the libcuda/cuBLAS
# stand-in tests/gpu/mock_cuda.c, kernels on the CPU emulator). tiny-cola-pp2 with the 2-layer GQA
# model (grouped GEMMs: q, k, v of unequal widths) at pp=2 x tp=2, 1F1B over 4 micro-batches (stage
# 0 keeps 2 in flight: 2 activation slots, each with its own grouped-GEMM and all-reduce pointer
# tables), trained in one process with `--backend cuda`: every stage's tp ranks in local mode, the
# boundaries through host queues. Its
# losses and gradient norms match the CPU backend's pipelined run and the cuda run at pp=1 (same
# batches) within bf16 tolerance. One process per GPU at pp > 1 and dp > 1 with pp > 1 on cuda (not
# built) exit 2 saying what to use instead.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! bash tests/gpu/build.sh >"$TMP/build.log" 2>&1; then fail "tests/gpu/build.sh" "$(tail -3 "$TMP/build.log")"; exit 0; fi
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
small=(-D model=tiny-cola-gqa -D tp=2 -D micro_batch=1 -D seq=16 -D grad_accum=4)
for pp in 1 2; do
  "$BOOST" gen tiny-cola-pp2 "${small[@]}" -D pp=$pp -o "$TMP/pp$pp" >"$TMP/gen.log" 2>&1 \
    || { fail "generate tiny-cola-pp2 at pp=$pp" "$(tail -2 "$TMP/gen.log")"; exit 0; }
done
grep -q "slots=2" "$TMP/pp2/plan.txt" && grep -q "^grouped_gemm" "$TMP/pp2/plan.txt" \
  || fail "the pp=2 plan has 2 activation slots on stage 0 and grouped GEMMs" "$(grep -m2 '^arena' "$TMP/pp2/plan.txt")"
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp"
train() {   # train NAME PLAN BACKEND
  BOOST_EMU_SOURCE="$TMP/$2/kernels.cu" timeout 600 "$BOOST" train --plan "$TMP/$2" --backend "$3" -D steps=2 \
    --val-batches 1 --quiet --log "$TMP/$1.jsonl" >"$TMP/$1.out" 2>&1
}
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
# close A_LOG B_LOG FIELD RTOL ATOL: |a-b| <= RTOL*|b| + ATOL at steps 1 and 2 (a missing value fails)
close() {
  for s in 1 2; do
    local a b; a=$(field "$1" $s "$3"); b=$(field "$2" $s "$3")
    awk -v a="$a" -v b="$b" -v r="$4" -v t="$5" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
      exit !(a != "" && b != "" && d <= r * m + t) }' || { echo "# step $s $3: $a vs $b"; return 1; }
  done
}
train cuda2 pp2 cuda; rc=$?
if [ $rc = 0 ] && grep -q "backend cuda" "$TMP/cuda2.out" && grep -q "pipeline: pp=2" "$TMP/cuda2.out"; then
  ok "cuda pp=2 x tp=2 in one process on the stand-in trains 2 steps"
else fail "cuda pp=2 x tp=2 on the stand-in" "exit $rc: $(tail -3 "$TMP/cuda2.out")"; exit 0; fi
train cpu2 pp2 cpu || fail "cpu pp=2 run" "$(tail -3 "$TMP/cpu2.out")"
close "$TMP/cuda2.jsonl" "$TMP/cpu2.jsonl" loss 0.01 1e-3 && close "$TMP/cuda2.jsonl" "$TMP/cpu2.jsonl" grad_norm 0.03 1e-3 \
  && ok "cuda pp=2 losses and gradient norms match the cpu backend's pp=2 run" \
  || fail "cuda pp=2 vs cpu pp=2" "losses or gradient norms differ beyond bf16 tolerance"
train cuda1 pp1 cuda || fail "cuda pp=1 run" "$(tail -3 "$TMP/cuda1.out")"
close "$TMP/cuda2.jsonl" "$TMP/cuda1.jsonl" loss 0.01 1e-3 && close "$TMP/cuda2.jsonl" "$TMP/cuda1.jsonl" grad_norm 0.03 1e-3 \
  && ok "cuda pp=2 losses and gradient norms match cuda pp=1" \
  || fail "cuda pp=2 vs cuda pp=1" "losses or gradient norms differ beyond bf16 tolerance"

# one process per GPU (a world from the environment) is not built for pp > 1: a clear refusal
BOOST_WORLD_SIZE=4 BOOST_RANK=0 timeout 120 "$BOOST" train --plan "$TMP/pp2" --backend cuda -D steps=1 >"$TMP/world.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "one process per GPU (NCCL send/recv between stages) is not built" "$TMP/world.out" \
  && grep -q "launch one process with --backend cuda" "$TMP/world.out" \
  && ok "cuda pp=2 with one process per GPU exits 2 naming what to use instead" \
  || fail "cuda pp=2 world refusal" "exit $rc: $(tail -2 "$TMP/world.out")"

"$BOOST" gen tiny-cola-pp2 "${small[@]}" -D pp=2 -D dp=2 -o "$TMP/dp2" >"$TMP/gen.log" 2>&1 || fail "generate dp=2 pp=2" "$(tail -2 "$TMP/gen.log")"
timeout 120 "$BOOST" train --plan "$TMP/dp2" --backend cuda -D steps=1 >"$TMP/dp2.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "pp=2 with dp=2 on the cuda backend is not built" "$TMP/dp2.out" && grep -q "use --backend cpu, or regenerate with -D dp=1" "$TMP/dp2.out" \
  && ok "cuda pp=2 x dp=2 exits 2 naming what to use instead" || fail "cuda pp=2 x dp=2 refusal" "exit $rc: $(tail -2 "$TMP/dp2.out")"
