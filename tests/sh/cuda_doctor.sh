#!/usr/bin/env bash
# cuda_doctor.sh: `boost doctor` and the device of each process, without a GPU. Here (no driver)
# doctor exits 1 and names what is missing; bad arguments exit 2; with CUDA_HOME pointing at a
# wheel-style folder (lib/ and include/ only) made from the toolkit's files, doctor reports NVRTC
# and its builtins loaded from there and `boost gen --compile` compiles with it. On the CUDA
# stand-in (tests/gpu/mock_cuda.c, MOCK_CUDA_DEVICES GPUs): 2 hosts x 4 GPUs under Open MPI and
# Slurm numbering give every rank of a host its own device; 5 ranks on a 4-GPU host are refused
# with the numbers (doctor, and `boost train` before any NCCL set-up); CUDA_VISIBLE_DEVICES is
# honoured (one bound GPU per rank, or too few for the host's ranks).
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE SLURM_PROCID \
      SLURM_NTASKS SLURM_LOCALID LOCAL_RANK BOOST_RANK BOOST_WORLD_SIZE BOOST_DEVICE CUDA_VISIBLE_DEVICES BOOST_LIBCUDA
"$BOOST" doctor --no-such-flag >"$TMP/bad.txt" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q "unknown argument '--no-such-flag'" "$TMP/bad.txt" && ok "doctor: bad argument exits 2" \
  || fail "doctor: bad argument" "exit $rc: $(head -2 "$TMP/bad.txt")"
"$BOOST" doctor >"$TMP/here.txt" 2>&1
rc=$?
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  ok "doctor: no-driver verdict # SKIP this machine has a CUDA driver (doctor exit $rc)"
elif [ "$rc" = 1 ] && grep -q 'CUDA driver (libcuda.so.1) not found' "$TMP/here.txt" && grep -q 'BOOST_LIBCUDA=' "$TMP/here.txt" \
     && tail -1 "$TMP/here.txt" | grep -q 'cannot start'; then
  ok "doctor: without a driver exits 1, names the driver and how to point at one"
else
  fail "doctor without a driver" "exit $rc: $(grep -A2 missing "$TMP/here.txt" | head -3)"
fi

# a wheel-style toolkit: lib/ (no lib64/) and include/, symlinks to the toolkit's files
TK=/usr/local/cuda
if [ -f "$TK/include/cuda_bf16.h" ] && ls "$TK"/lib64/libnvrtc.so.* >/dev/null 2>&1; then
  mkdir -p "$TMP/wheel/lib" "$TMP/wheel/include"
  for f in "$TK"/lib64/libnvrtc* "$TK"/lib64/libcublas* "$TK"/lib64/libnccl*; do ln -s "$f" "$TMP/wheel/lib/"; done
  for f in "$TK"/include/*; do ln -s "$f" "$TMP/wheel/include/"; done
  CUDA_HOME="$TMP/wheel" "$BOOST" doctor >"$TMP/wheel.txt" 2>&1
  if grep -q "^NVRTC .*$TMP/wheel/lib/libnvrtc.so.* (CUDA_HOME lib/), version" "$TMP/wheel.txt" \
     && grep -q "builtins $TMP/wheel/lib/libnvrtc-builtins" "$TMP/wheel.txt" && grep -q "headers  $TMP/wheel/include" "$TMP/wheel.txt" \
     && grep -q "^cuBLAS .*$TMP/wheel/lib/libcublas.so" "$TMP/wheel.txt"; then
    ok "doctor: NVRTC, its builtins, its headers and cuBLAS from CUDA_HOME=wheel-style lib/"
  else
    fail "doctor with a wheel-style CUDA_HOME" "$(grep -E '^(NVRTC|cuBLAS) |builtins|headers' "$TMP/wheel.txt" | head -4)"
  fi
  CUDA_HOME="$TMP/wheel" BOOST_CACHE="$TMP/cache" "$BOOST" gen tiny-cola -o "$TMP/gen" --compile >"$TMP/gen.txt" 2>&1
  rc=$?
  if [ "$rc" = 0 ] && grep -q -i 'registers' "$TMP/gen/report.md" && ls "$TMP/cache"/*.ptxas.txt >/dev/null 2>&1; then
    ok "boost gen --compile compiles with the wheel-style CUDA_HOME's NVRTC"
  else
    fail "gen --compile with a wheel-style CUDA_HOME" "exit $rc: $(tail -3 "$TMP/gen.txt")"
  fi
else
  ok "doctor: wheel-style CUDA_HOME # SKIP no CUDA toolkit with NVRTC at $TK"
fi

# the CUDA stand-in with 4 GPUs per host
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
export BOOST_LIBCUDA="$TMP/mock_cuda.so" MOCK_CUDA_DEVICES=4
"$BOOST" doctor >"$TMP/mock.txt" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -q '^GPUs: *4 visible' "$TMP/mock.txt" && grep -q 'compute capability 9.0 -> kernels compiled for sm_90' "$TMP/mock.txt" \
  && grep -q 'this process: device 0' "$TMP/mock.txt" && ok "doctor on the stand-in: 4 GPUs, sm_90, exit 0" \
  || fail "doctor on the stand-in" "exit $rc: $(grep -E 'GPUs|this process|verdict|  - ' "$TMP/mock.txt" | head -4)"
# 2 hosts x 4 GPUs, ranks placed by host (Open MPI) and round robin (Slurm's cyclic): device = local rank
devs_ompi="" devs_slurm="" want=""
for r in 0 1 2 3 4 5 6 7; do
  d=$(OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=8 OMPI_COMM_WORLD_LOCAL_RANK=$((r % 4)) OMPI_COMM_WORLD_LOCAL_SIZE=4 \
      "$BOOST" doctor 2>&1 | sed -n 's/^this process: device \([0-9]*\).*/\1/p')
  devs_ompi="$devs_ompi${d:-?} "
  d=$(SLURM_PROCID=$r SLURM_NTASKS=8 SLURM_LOCALID=$((r / 2)) "$BOOST" doctor 2>&1 | sed -n 's/^this process: device \([0-9]*\).*/\1/p')
  devs_slurm="$devs_slurm${d:-?} "
  want="$want$((r % 4)) "
done
[ "$devs_ompi" = "$want" ] && ok "2 hosts x 4 GPUs (Open MPI local ranks): devices $devs_ompi" \
  || fail "2 hosts x 4 GPUs (Open MPI)" "devices '$devs_ompi', want '$want'"
[ "$devs_slurm" = "0 0 1 1 2 2 3 3 " ] && ok "2 hosts x 4 GPUs (Slurm cyclic, SLURM_LOCALID): devices $devs_slurm" \
  || fail "2 hosts x 4 GPUs (Slurm)" "devices '$devs_slurm', want '0 0 1 1 2 2 3 3 '"
# 5 ranks on a 4-GPU host: every rank refuses (the host's size is known), with the numbers
refused=0
for r in 0 4; do
  OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=5 OMPI_COMM_WORLD_LOCAL_RANK=$r OMPI_COMM_WORLD_LOCAL_SIZE=5 \
    "$BOOST" doctor >"$TMP/five$r.txt" 2>&1
  rc=$?
  [ "$rc" = 1 ] && grep -q "rank $r of 5 is local rank $r (OMPI_COMM_WORLD_LOCAL_RANK) and this host runs 5 ranks, but it shows this process 4 GPUs: start at most 4" \
    "$TMP/five$r.txt" && refused=$((refused + 1))
done
[ "$refused" = 2 ] && ok "5 ranks on a 4-GPU host: ranks 0 and 4 refused with the numbers" \
  || fail "5 ranks on a 4-GPU host" "$refused of 2 refused: $(grep -h 'refused' "$TMP"/five*.txt | head -2)"
# the backend refuses at open, before any NCCL set-up: tp=4 on a host showing 3 GPUs
if "$BOOST" gen tiny-cola -D tp=4 -D micro_batch=1 -D seq=16 -o "$TMP/cola4" >"$TMP/gen4.txt" 2>&1; then
  BOOST_LIBCUBLAS="$TMP/mock_cuda.so" MOCK_CUDA_DEVICES=3 OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=3 \
    BOOST_NCCL_TIMEOUT=20 timeout 60 "$BOOST" train --plan "$TMP/cola4" --backend cuda -D steps=1 -o "$TMP/t4" >"$TMP/t4.txt" 2>&1
  rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q 'rank 3 of 4 is local rank 3 .* this host runs at least 4 ranks, but it shows this process 3 GPUs' "$TMP/t4.txt"; then
    ok "boost train: local rank 3 on a 3-GPU host refused at open (exit $rc)"
  else
    fail "boost train with more ranks than GPUs" "exit $rc: $(tail -2 "$TMP/t4.txt")"
  fi
else
  fail "generate tiny-cola tp=4" "$(tail -2 "$TMP/gen4.txt")"
fi
# CUDA_VISIBLE_DEVICES: one GPU bound per rank is device 0 of that rank; two for four ranks is refused
out=$(CUDA_VISIBLE_DEVICES=2 OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=2 OMPI_COMM_WORLD_LOCAL_SIZE=4 \
      "$BOOST" doctor 2>&1 | grep '^this process')
echo "$out" | grep -q 'device 0: the one GPU CUDA_VISIBLE_DEVICES=2 gives local rank 2' && ok "CUDA_VISIBLE_DEVICES=2 bound to local rank 2: device 0" \
  || fail "CUDA_VISIBLE_DEVICES one per rank" "'$out'"
out=$(CUDA_VISIBLE_DEVICES=0,1 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=4 \
      "$BOOST" doctor 2>&1 | grep '^this process')
echo "$out" | grep -q 'this host runs 4 ranks, but it shows this process 2 GPUs (CUDA_VISIBLE_DEVICES=0,1)' \
  && ok "CUDA_VISIBLE_DEVICES=0,1 for 4 local ranks: refused with the numbers" || fail "CUDA_VISIBLE_DEVICES=0,1" "'$out'"
