#!/usr/bin/env bash
# nvrtc_mock_traps.sh: first-run traps of the CUDA backend, on the CUDA stand-in
# (tests/gpu/mock_cuda.c). Copies: with the device's cuMemcpy2D pitch cap lowered to 64 bytes
# (MOCK_CUDA_MAX_PITCH), tiny-cola at tp=2 in local mode (all-gathers of strided blocks, one-row
# copies) still trains to the same losses as under the real cap: one-row and back-to-back copies
# are plain copies, strided rows above the cap one copy a row. Grouped GEMMs: when cuBLAS refuses
# cublasGemmGroupedBatchedEx (MOCK_CUBLAS_GROUPED_REFUSE=1), GQA tiny-cola (q and k/v B factors of
# unequal widths: grouped GEMMs) falls back to a loop
# with the same losses and prints one note per type combination, not one per call.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS BOOST_RANK BOOST_WORLD_SIZE MOCK_CUDA_DEVICES
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp"
losses() { grep -o '"loss":[-0-9.e]*' "$1" | cut -d: -f2 | tr '\n' ' '; }

"$BOOST" gen tiny-cola -D tp=2 -D micro_batch=1 -D seq=16 -o "$TMP/cola2" >"$TMP/gen.log" 2>&1 \
  || { fail "generate tiny-cola tp=2" "$(tail -2 "$TMP/gen.log")"; exit 0; }
run=(train --plan "$TMP/cola2" --backend cuda --val-batches 1 -D steps=2 -D eval_every=0 --quiet)
BOOST_EMU_SOURCE="$TMP/cola2/kernels.cu" timeout 300 "$BOOST" "${run[@]}" --log "$TMP/a.jsonl" >"$TMP/a.out" 2>&1; rc1=$?
BOOST_EMU_SOURCE="$TMP/cola2/kernels.cu" MOCK_CUDA_MAX_PITCH=64 timeout 300 "$BOOST" "${run[@]}" --log "$TMP/b.jsonl" \
  >"$TMP/b.out" 2>&1; rc2=$?
la=$(losses "$TMP/a.jsonl"); lb=$(losses "$TMP/b.jsonl")
if [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ -n "$la" ] && [ "$la" = "$lb" ] && ! grep -q 'cuMemcpy2DAsync refused' "$TMP/b.out"; then
  ok "tp=2 local mode under a 64-byte cuMemcpy2D pitch cap: no copy refused, losses $la"
else
  fail "copies under a 64-byte pitch cap" "exit $rc1/$rc2, losses '$la' vs '$lb': $(grep -m2 'refused\|error' "$TMP/b.out")"
fi

"$BOOST" gen tiny-cola -D model=tiny-cola-gqa -D tp=1 -D micro_batch=1 -D seq=16 -o "$TMP/moe" >"$TMP/genm.log" 2>&1 \
  || { fail "generate tiny-cola-gqa" "$(tail -2 "$TMP/genm.log")"; exit 0; }
if ! grep -q '^grouped_gemm' "$TMP/moe/plan.txt"; then
  fail "tiny-cola-gqa has grouped GEMMs" "no grouped_gemm step in its plan"; exit 0
fi
run=(train --plan "$TMP/moe" --backend cuda --val-batches 1 -D steps=2 -D eval_every=0 --quiet)
BOOST_EMU_SOURCE="$TMP/moe/kernels.cu" timeout 300 "$BOOST" "${run[@]}" --log "$TMP/g.jsonl" >"$TMP/g.out" 2>&1; rc1=$?
BOOST_EMU_SOURCE="$TMP/moe/kernels.cu" MOCK_CUBLAS_GROUPED_REFUSE=1 timeout 300 "$BOOST" "${run[@]}" --log "$TMP/r.jsonl" \
  >"$TMP/r.out" 2>&1; rc2=$?
lg=$(losses "$TMP/g.jsonl"); lr=$(losses "$TMP/r.jsonl")
notes=$(grep -c 'cublasGemmGroupedBatchedEx refused' "$TMP/r.out")
unique=$(grep 'cublasGemmGroupedBatchedEx refused' "$TMP/r.out" | sort -u | wc -l)
if [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ -n "$lg" ] && [ "$lg" = "$lr" ] && [ "$notes" -ge 1 ] && [ "$notes" = "$unique" ] \
   && ! grep -q 'cublasGemmGroupedBatchedEx refused' "$TMP/g.out"; then
  ok "grouped GEMMs refused: the loop gives the same losses ($lg), $notes note(s), one per type combination"
else
  fail "grouped GEMM refusal" "exit $rc1/$rc2, losses '$lg' vs '$lr', $notes notes ($unique distinct): $(tail -2 "$TMP/r.out")"
fi
