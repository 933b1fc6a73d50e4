#!/usr/bin/env bash
# nvrtc_mock_attn_smem.sh: attention tiles above 48 KiB of dynamic shared memory, end to end on the
# CUDA stand-in (tests/gpu/mock_cuda.c, kernels on the emulator). A one-layer model of head dim 128
# (GQA, seq 128) for the H100 (sm_90) gets the backward's q64k32 tiles: 52,736 B of dynamic shared
# memory, more than a function gets without cuFuncSetAttribute. Then: every step matches the CPU
# backend on the stand-in as sm_90 and sm_86 (check steps, as nvrtc_mock_cuda.sh); a runtime
# built without the cuFuncSetAttribute call is refused by the stand-in at that kernel; and a plan
# asking more than the device's opt-in maximum stops before the launch, naming the arch.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! bash tests/gpu/build.sh >"$TMP/build.log" 2>&1; then fail "tests/gpu/build.sh" "$(tail -3 "$TMP/build.log")"; exit 0; fi
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
cat >"$TMP/hd128.lua" <<'EOF'
-- hd128: a one-layer model of head dim 128 with grouped queries (nvrtc_mock_attn_smem.sh)
return model "hd128" { hidden = 256, layers = 1, heads = 2, kv_heads = 1, ffn = 352, vocab = 256, lowrank = full {} }
EOF
cat >"$TMP/run.lua" <<'EOF'
-- run-hd128: the hd128 model on the H100 spec (sm_90), one rank, 128 tokens a sequence
return run {
  model = "hd128.lua", gpu = "h100",
  parallel = { tp = 1, pp = 1, dp = 1, layout = "megatron" },
  features = { online_rmsnorm = false, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 1, seq = 128, grad_accum = 1, dtype = "bf16", lr = 3e-3, min_lr = 3e-4, warmup = 1,
            steps = 2, seed = 7, eval_every = 50 },
  data = { path = "corpus", val_fraction = 0.1 },
}
EOF
BOOST_SPECS="$PWD/specs" "$BOOST" gen "$TMP/run.lua" -o "$TMP/p" >"$TMP/gen.log" 2>&1 || { fail "generate hd128" "$(tail -2 "$TMP/gen.log")"; exit 0; }
bwd=$(grep -m1 '^kernel attention_bwd ' "$TMP/p/plan.txt")
smem=$(echo "$bwd" | grep -o ' smem=[0-9]*' | cut -d= -f2)
name=$(echo "$bwd" | grep -o ' name=[^ ]*' | cut -d= -f2)
# (2*64 + 2*32) rows of 128+8 bf16 + lse and delta [64] fp32
if [ "$smem" = 52736 ] && [[ "$name" == *_tc_q64k32 ]] && grep -q "^// boost:dynamic_smem $name 52736$" "$TMP/p/kernels.cu"; then
  ok "hd128 on sm_90: attention backward q64k32 with 52736 B of dynamic shared memory (plan and kernels.cu)"
else fail "hd128 attention backward tiles" "name $name smem $smem"; fi
# boost kernels on sm_86 (99 KiB opt-in, 100 KiB an SM): the row's shared memory includes the 52736
# dynamic bytes, and its blocks/SM is the least of threads (1536), blocks (16), registers and shared
# memory (+1 KiB a block), worked out here: shared memory allows one
"$BOOST" kernels "$TMP/p" --arch sm_86 >"$TMP/k86.txt" 2>&1
rc=$?
row=$(grep "^$name " "$TMP/k86.txt")
set -- $row
want=$(awk -v r="$3" -v s="$4" 'BEGIN { n = 16; if (1536 / 128 < n) n = 1536 / 128; pw = int((r * 32 + 255) / 256) * 256
  w = int(65536 / pw / 4); if (w < n) n = w; m = int(102400 / (s + 1024)); if (m < n) n = m; print n }')
if [ "$rc" = 0 ] && [ "$4" = 52736 ] && [ "$8" = 52736 ] && [ "$7" = "$want" ] && [ "$want" = 1 ]; then
  ok "boost kernels, sm_86: attention backward with 52736 B (all dynamic), 1 block/SM"
else fail "boost kernels on sm_86" "exit $rc, row: ${row:-none}; want smem 52736, dynamic 52736, $want blocks/SM"; fi
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp" BOOST_EMU_SOURCE="$TMP/p/kernels.cu" BOOST_EMU_CACHE="$TMP/emu"
for arch in sm_90 sm_86; do   # the most and the least opt-in
  BOOST_MOCK_ARCH=$arch timeout 600 build/gpu/check steps "$TMP/p" >"$TMP/steps-$arch.log" 2>&1
  rc=$?
  sed 's/^ok - /#   /' "$TMP/steps-$arch.log" | grep -v '^FAIL'
  n=$(grep -c '^ok - ' "$TMP/steps-$arch.log")
  if [ "$rc" = 0 ] && [ "$n" -ge 10 ] && grep -q '^ok - .* attention_bwd x' "$TMP/steps-$arch.log"; then
    ok "stand-in as $arch: every step of the hd128 plan matches the CPU backend ($n kinds, attention_bwd among them)"
  else fail "stand-in as $arch, hd128 steps" "exit $rc, $n ok: $(grep -v '^ok' "$TMP/steps-$arch.log" | head -3)"; fi
done
# the mutation: the runtime without its cuFuncSetAttribute call (check linked with the mutant first)
sed 's/CUresult rc = api.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES_, (int)smem);/CUresult rc = 0;/' \
  runtime/cuda_jit.c >"$TMP/cuda_mutant.c"
if cmp -s runtime/cuda_jit.c "$TMP/cuda_mutant.c"; then fail "mutant without cuFuncSetAttribute" "the sed found no call to remove"
else
  BLAS=$(ls /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a /usr/lib/x86_64-linux-gnu/libopenblas.a 2>/dev/null | head -1)
  if cc -O1 -std=gnu11 -pthread -I. -Iruntime -c "$TMP/cuda_mutant.c" -o "$TMP/cuda_mutant.o" 2>"$TMP/mcc.log" &&
     cc -pthread tests/gpu/check.c build/gpu/check_steps.o build/gpu/check_model.o "$TMP/cuda_mutant.o" build/libruntime.a \
        build/libcommon.a $BLAS "$(cc -print-file-name=libgomp.a)" -I. -lm -ldl -o "$TMP/check_mutant" 2>>"$TMP/mcc.log"; then
    BOOST_MOCK_ARCH=sm_90 timeout 600 "$TMP/check_mutant" steps "$TMP/p" >"$TMP/mutant.log" 2>&1
    rc=$?
    if [ "$rc" != 0 ] && grep -q "cuLaunchKernel refused: dynamic shared memory above the function's limit of 49152 B" "$TMP/mutant.log" &&
       grep -q "cuLaunchKernel of kernel $name (grid [0-9]*, block 128, dynamic shared 52736 B) failed" "$TMP/mutant.log"; then
      ok "mutant without cuFuncSetAttribute: the stand-in refuses the 52736 B launch, the backend names the kernel"
    else fail "mutant without cuFuncSetAttribute" "exit $rc: $(grep -i 'refused\|failed' "$TMP/mutant.log" | head -2)"; fi
  else fail "build the mutant" "$(head -3 "$TMP/mcc.log")"; fi
fi
# more than the device allows: the plan's attention backward asks 120000 B on an sm_86 (99 KiB)
cp -r "$TMP/p" "$TMP/big"
sed -i "s/ smem=52736 / smem=120000 /" "$TMP/big/plan.txt"
"$BOOST" kernels "$TMP/big" --arch sm_86 >"$TMP/kbig.txt" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q "kernel $name needs 120000 B of shared memory a block (120000 dynamic), above the 101376 B sm_86 allows" "$TMP/kbig.txt"; then
  ok "boost kernels, sm_86: a plan asking 120000 B is refused (exit 1) with the arch's 101376 B"
else fail "boost kernels above the opt-in" "exit $rc: $(grep -v '^[a-z_]* *sm_' "$TMP/kbig.txt" | head -2)"; fi
BOOST_MOCK_ARCH=sm_86 timeout 600 build/gpu/check steps "$TMP/big" >"$TMP/big.log" 2>&1
rc=$?
if [ "$rc" != 0 ] && grep -q "kernel $name needs 120000 B of shared memory a block, but this device (sm_86) allows at most 101376 B: regenerate the plan with a GPU spec of arch \"sm_86\"" "$TMP/big.log" &&
   ! grep -q "cuLaunchKernel refused" "$TMP/big.log"; then
  ok "120000 B on sm_86: stopped before the launch with the device's 101376 B and the arch to generate for"
else fail "more than the opt-in maximum" "exit $rc: $(grep -i 'needs\|refused\|FAIL' "$TMP/big.log" | head -2)"; fi
