#!/usr/bin/env bash
# nvrtc_mock_pipeline.sh: pipeline parallelism on the CUDA backend without a GPU (the libcuda/cuBLAS
# stand-in tests/gpu/mock_cuda.c, kernels on the CPU emulator, the NCCL stand-in mock_nccl.c).
# tiny-cola-pp2 with the 2-layer GQA model (grouped GEMMs: q, k, v of unequal widths) at pp=2 x
# tp=2, 1F1B over 4 micro-batches (stage 0 keeps 2 in flight: 2 activation slots, each with its own
# grouped-GEMM and all-reduce pointer tables). In one process (`--backend cuda`: every stage's tp
# ranks in local mode, the boundaries through host queues) its losses and gradient norms match the
# CPU backend's pipelined run and the cuda run at pp=1 within bf16 tolerance. As one process per GPU
# (4 processes; NCCL send/recv device to device, one channel per boundary and direction) it logs
# exactly the one-process run's numbers and writes the same sharded checkpoint, byte for byte, and
# resumes from it; dp=2 x pp=2 (4 processes) matches the CPU, with zero=1 too; interleaved 1F1B
# (tiny-cola-4l, pp=2 x 2 virtual stages: 2 processes, 6 channels) matches its one-process run
# exactly; a process that dies stops the others with an error instead of a hang; a world of the
# wrong size, and dp > 1 with pp > 1 in one process, exit 2 saying what to launch; backend auto picks
# the device when there is one.
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

# one process per GPU: the NCCL stand-in's send/recv between the stages' processes
if ! cc -O1 -shared -fPIC tests/gpu/mock_nccl.c -o "$TMP/mock_nccl.so" -lrt 2>"$TMP/cc.log"; then
  fail "build the NCCL stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
export BOOST_LIBNCCL="$TMP/mock_nccl.so" BOOST_NCCL_TIMEOUT=120 MOCK_NCCL_TIMEOUT=120
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS BOOST_RANK BOOST_WORLD_SIZE BOOST_NCCL_ID_FILE
# numbers FILE: the logged figures that do not depend on timing
numbers() { sed 's/"tokens_per_s":[^,}]*,\{0,1\}//' "$1" | grep '"step"'; }
world() {   # world NAME PLAN N [train options]: N processes, one per GPU
  local name=$1 plan=$2 n=$3; shift 3
  BOOST_EMU_SOURCE="$TMP/$plan/kernels.cu" launch_world $n "$TMP/$name" train --plan "$TMP/$plan" --backend cuda --val-batches 1 "$@"
}
world w2 pp2 4 -D steps=2 --ckpt-format sharded
if [ "$rc" = 0 ] && grep -q "one process per GPU, send/recv over NCCL" "$TMP/w2.0.out"; then
  ok "cuda pp=2 x tp=2 as 4 processes (NCCL send/recv) trains 2 steps"
  cmp -s <(numbers "$TMP/w2.jsonl") <(numbers "$TMP/cuda2.jsonl") \
    && ok "4 processes log exactly the one-process run's losses, gradient norms and validation losses" \
    || fail "4 processes vs one process" "$(diff <(numbers "$TMP/w2.jsonl") <(numbers "$TMP/cuda2.jsonl") | head -4)"
else fail "cuda pp=2 x tp=2 as 4 processes" "exit $rc: $(tail -n 2 "$TMP/w2.0.out" "$TMP/w2.2.out")"; fi
# the same sharded checkpoint from one process (rank files by (stage, dp, tp), index, state)
BOOST_EMU_SOURCE="$TMP/pp2/kernels.cu" timeout 600 "$BOOST" train --plan "$TMP/pp2" --backend cuda -D steps=2 --val-batches 1 \
  --ckpt-format sharded --quiet -o "$TMP/one" >"$TMP/one.out" 2>&1 || fail "one-process sharded run" "$(tail -2 "$TMP/one.out")"
same=1
for f in "$TMP/one/step-000002"/*; do cmp -s "$f" "$TMP/w2/step-000002/$(basename "$f")" || { same=0; echo "# differs: $(basename "$f")"; }; done
[ $same = 1 ] && [ -e "$TMP/w2/step-000002/rank-00003.safetensors" ] \
  && ok "the 4 processes' sharded checkpoint is the one-process run's, file for file" \
  || fail "sharded checkpoint of 4 processes" "$(ls "$TMP/w2/step-000002" | tr '\n' ' ')"
# resume: 4 processes from their step-2 checkpoint to step 3 == one process trained 3 steps
BOOST_EMU_SOURCE="$TMP/pp2/kernels.cu" timeout 600 "$BOOST" train --plan "$TMP/pp2" --backend cuda -D steps=3 --val-batches 1 \
  --quiet --log "$TMP/one3.jsonl" >"$TMP/one3.out" 2>&1 || fail "one-process 3-step run" "$(tail -2 "$TMP/one3.out")"
cp -r "$TMP/w2/step-000002" "$TMP/w2-ckpt"
world w3 pp2 4 -D steps=3 --ckpt-format sharded --resume "$TMP/w2-ckpt"
[ "$rc" = 0 ] && cmp -s <(numbers "$TMP/w3.jsonl" | grep '"step":3') <(numbers "$TMP/one3.jsonl" | grep '"step":3') \
  && [ -n "$(numbers "$TMP/w3.jsonl" | grep '"step":3')" ] \
  && ok "4 processes resume their sharded checkpoint: step 3 is the 3-step one-process run's" \
  || fail "resume as 4 processes" "exit $rc: $(numbers "$TMP/w3.jsonl" | tail -1) vs $(numbers "$TMP/one3.jsonl" | tail -1) $(tail -n 1 "$TMP/w3.0.out")"

# dp=2 x pp=2 x tp=1 as 4 processes: each stage's dp gradient reduction over NCCL, against the CPU
"$BOOST" gen tiny-cola-pp2 -D model=tiny-cola-gqa -D tp=1 -D dp=2 -D micro_batch=1 -D seq=16 -D grad_accum=4 -D pp=2 \
  -o "$TMP/dp2" >"$TMP/gen.log" 2>&1 || fail "generate dp=2 pp=2" "$(tail -2 "$TMP/gen.log")"
world wdp dp2 4 -D steps=2
train cpudp dp2 cpu || fail "cpu dp=2 x pp=2 run" "$(tail -3 "$TMP/cpudp.out")"
[ "$rc" = 0 ] && close "$TMP/wdp.jsonl" "$TMP/cpudp.jsonl" loss 0.01 1e-3 && close "$TMP/wdp.jsonl" "$TMP/cpudp.jsonl" grad_norm 0.03 1e-3 \
  && ok "cuda dp=2 x pp=2 as 4 processes matches the cpu backend within bf16 tolerance" \
  || fail "cuda dp=2 x pp=2 as 4 processes" "exit $rc: $(tail -n 1 "$TMP/wdp.0.out")"

# ZeRO-1 per stage: dp=2 x pp=2 x zero=1 (each stage's masters and moments sharded over its dp pair)
"$BOOST" gen tiny-cola-pp2 -D model=tiny-cola-gqa -D tp=1 -D dp=2 -D zero=1 -D micro_batch=1 -D seq=16 -D grad_accum=4 -D pp=2 \
  -o "$TMP/dpz" >"$TMP/gen.log" 2>&1 || fail "generate dp=2 pp=2 zero=1" "$(tail -2 "$TMP/gen.log")"
world wdpz dpz 4 -D steps=2
[ "$rc" = 0 ] && close "$TMP/wdpz.jsonl" "$TMP/wdp.jsonl" loss 1e-5 0 && close "$TMP/wdpz.jsonl" "$TMP/wdp.jsonl" grad_norm 1e-5 0 \
  && ok "cuda dp=2 x pp=2 with zero=1 as 4 processes equals zero=0 within 1e-5" \
  || fail "cuda dp=2 x pp=2 zero=1 as 4 processes" "exit $rc: $(tail -n 1 "$TMP/wdpz.0.out")"

# interleaved 1F1B: tiny-cola-4l, pp=2 x 2 virtual stages, 2 processes holding 2 stage Engines each
"$BOOST" gen tiny-cola-pp2 -D model=tiny-cola-4l -D tp=1 -D micro_batch=1 -D seq=16 -D grad_accum=4 -D pp=2 -D virtual_stages=2 \
  -o "$TMP/v2" >"$TMP/gen.log" 2>&1 || fail "generate pp=2 x 2 virtual stages" "$(tail -2 "$TMP/gen.log")"
world wv2 v2 2 -D steps=2
train onev2 v2 cuda || fail "one-process interleaved run" "$(tail -3 "$TMP/onev2.out")"
[ "$rc" = 0 ] && [ -n "$(numbers "$TMP/wv2.jsonl" | grep '"step":2')" ] && cmp -s <(numbers "$TMP/wv2.jsonl") <(numbers "$TMP/onev2.jsonl") \
  && ok "interleaved pp=2 x 2 virtual stages as 2 processes logs exactly the one-process run's numbers" \
  || fail "interleaved as 2 processes" "exit $rc: $(tail -n 1 "$TMP/wv2.0.out")"

# a process that dies (the stand-in kills rank 2 at its third collective): the others stop with an
# error naming it instead of waiting forever
start=$(date +%s)
MOCK_NCCL_TIMEOUT=60 BOOST_NCCL_TIMEOUT=60 WORLD_RANK_ENV="2:MOCK_NCCL_KILL_AT=3" world wkill pp2 4 -D steps=2
took=$(( $(date +%s) - start ))
others=0
for r in 0 1 3; do grep -q "NCCL was aborted\|another stage failed\|has probably died" "$TMP/wkill.$r.out" && others=$((others + 1)); done
[ "$rc" != 0 ] && [ $others = 3 ] && [ $took -lt 100 ] \
  && ok "a dead stage process stops the other 3 with an error (in ${took}s)" \
  || fail "a dead stage process" "exit $rc after ${took}s, $others of 3 said why: $(tail -n 1 "$TMP/wkill.0.out")"

# backend auto: a device is there (the stand-in's), so the pipeline runs on cuda, as a pp=1 plan would
BOOST_EMU_SOURCE="$TMP/pp2/kernels.cu" timeout 300 "$BOOST" train --plan "$TMP/pp2" -D steps=1 --val-batches 1 >"$TMP/auto.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "backend cuda" "$TMP/auto.out" && ok "backend auto runs the pipeline on the device when there is one" \
  || fail "pipeline with backend auto" "exit $rc: $(grep -m1 'layout' "$TMP/auto.out") $(tail -n 1 "$TMP/auto.out")"

# a world of the wrong size: exit 2 naming the grid
BOOST_WORLD_SIZE=2 BOOST_RANK=0 timeout 120 "$BOOST" train --plan "$TMP/pp2" --backend cuda -D steps=1 >"$TMP/world.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "gives a world of 2 processes but the plan's grid is dp 1 x pp 2 x tp 2 = 4" "$TMP/world.out" \
  && ok "cuda pp=2 x tp=2 launched as 2 processes exits 2 naming the grid" \
  || fail "cuda pp=2 world size refusal" "exit $rc: $(tail -2 "$TMP/world.out")"

timeout 120 "$BOOST" train --plan "$TMP/dp2" --backend cuda -D steps=1 >"$TMP/dp2.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "pp=2 with dp=2 on the cuda backend runs one process per GPU: launch dp x pp x tp = 4 processes" "$TMP/dp2.out" \
  && ok "cuda pp=2 x dp=2 in one process exits 2 saying how to launch it" || fail "cuda pp=2 x dp=2 refusal" "exit $rc: $(tail -2 "$TMP/dp2.out")"
