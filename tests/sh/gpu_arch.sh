#!/usr/bin/env bash
# gpu_arch.sh: a GPU is its spec file. A spec with arch = "sm_100a" generates, and its kernels
# compile with NVRTC for sm_100a (no spills, plan matches); the report's and `boost kernels`'s
# archs come from the GPU specs marked kernel_report; no C file of gen/ cli/ runtime/ names an arch
# of the shipped specs (sm_80, sm_90) outside the spec loader's validation in gen/spec.c (and the
# hand-made test run of gen/build_fixture.c, which mirrors specs/gpus/h100.lua without the loader).
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh

# the rule: the arch lives in specs/gpus, not in C
hits=$(grep -nE '"sm_(80|90)' gen/*.c gen/*.h cli/*.c cli/*.h runtime/*.c runtime/*.h 2>/dev/null |
       grep -v -e '^gen/spec\.c:' -e '^gen/build_fixture\.c:.*by hand')
if [ -z "$hits" ]; then ok "no sm_80/sm_90 string in gen/ cli/ runtime/ outside gen/spec.c (and the fixture)"
else fail "arch strings in C" "$(echo "$hits" | head -3)"; fi

# a GPU spec of its own with an arch-specific arch, in a copy of the specs folder
cp -r specs "$TMP/specs"
sed -e 's/gpu "b200"/gpu "x100a"/' -e 's/arch = "sm_100",/arch = "sm_100a",/' \
    -e 's/kernel_report = false/kernel_report = true/' specs/gpus/b200.lua >"$TMP/specs/gpus/x100a.lua"
sed 's/gpu = "h100"/gpu = "x100a"/' specs/runs/tiny-cola.lua >"$TMP/specs/runs/tiny-cola-x.lua"
export BOOST_SPECS="$TMP/specs"
if "$BOOST" gen tiny-cola-x -o "$TMP/x" >"$TMP/gen.log" 2>&1 && grep -q "arch=sm_100a" "$TMP/x/plan.txt" &&
   grep -q "for x100a (sm_100a)" "$TMP/x/kernels.cu"; then
  ok "gpu x100a (arch sm_100a): plan and kernels.cu name sm_100a"
else fail "generate for sm_100a" "$(tail -3 "$TMP/gen.log")"; fi

# its kernels compile for sm_100a; without --arch, the archs are those of the specs marked
# kernel_report: a100 (sm_80), h100/h200 (sm_90) and x100a here, each once
"$BOOST" kernels "$TMP/x" >"$TMP/k.txt" 2>"$TMP/k.err"
rc=$?
archs=$(awk '$2 ~ /^sm_/ { print $2 }' "$TMP/k.txt" | sort -u | tr '\n' ' ')
if [ "$rc" = 0 ] && grep -q 'no spills; plan.txt matches' "$TMP/k.txt" "$TMP/k.err" &&
   [ "$archs" = "sm_100a sm_80 sm_90 " ]; then
  ok "boost kernels: compiles for sm_80, sm_90 and sm_100a (the specs' archs), no spills, plan matches"
else fail "boost kernels for the specs' archs" "exit $rc, archs '$archs': $(head -3 "$TMP/k.err")"; fi
# sm_100a's rows take the limits of the x100a spec: 2048 threads, 65536 registers, 32 blocks an SM
row=$(awk '$2 == "sm_100a" && $6 == 256 && $3 > 0 && $3 <= 32 && $4 == 0 { print; exit }' "$TMP/k.txt")
if [ -n "$row" ] && [ "$(echo "$row" | awk '{ print $7 }')" = 8 ]; then
  ok "sm_100a: a 256-thread kernel of at most 32 registers holds 8 blocks an SM (2048 threads)"
else fail "sm_100a occupancy" "row: ${row:-none}"; fi
unset BOOST_SPECS

# a bad arch is an error at its line
printf 'return gpu "x9" {\n  sm_count = 1, bf16_tflops = 1, hbm_gbs = 1, nvlink_gbs = 1, net_gbs = 1,\n  memory_gb = 1,\n  arch = "sm_9x",\n  tune = {},\n}\n' >"$TMP/specs/gpus/x9.lua"
sed 's/gpu = "h100"/gpu = "x9"/' specs/runs/tiny-cola.lua >"$TMP/specs/runs/tiny-cola-x9.lua"
BOOST_SPECS="$TMP/specs" "$BOOST" gen tiny-cola-x9 -o "$TMP/x9" >"$TMP/x9.log" 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -q 'gpus/x9.lua:4: arch must look like.*got "sm_9x"' "$TMP/x9.log"; then
  ok "arch = \"sm_9x\": exit 2, error at gpus/x9.lua:4"
else fail "bad arch" "exit $rc: $(head -2 "$TMP/x9.log")"; fi
