#!/usr/bin/env bash
# mock_nccl_p2p.sh: the NCCL stand-in's send/recv (tests/gpu/mock_nccl.c), the transport a pipeline
# stage on the CUDA backend would use between processes: tests/gpu/check_nccl_p2p.c forks 3 ranks
# that exchange grouped sends and receives both ways and checks a count mismatch is refused.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! cc -O1 -shared -fPIC tests/gpu/mock_nccl.c -o "$TMP/mock_nccl.so" -lrt 2>"$TMP/cc.log" ||
   ! cc -O1 -Wall tests/gpu/check_nccl_p2p.c -o "$TMP/check_nccl_p2p" -ldl 2>>"$TMP/cc.log"; then
  fail "build the NCCL stand-in and check_nccl_p2p" "$(head -3 "$TMP/cc.log")"; exit 0
fi
MOCK_NCCL_TIMEOUT=30 timeout 120 "$TMP/check_nccl_p2p" "$TMP/mock_nccl.so" >"$TMP/out.log" 2>"$TMP/err.log"
rc=$?
cat "$TMP/out.log"
[ $rc = 0 ] && grep -q "^ok - stand-in NCCL send/recv" "$TMP/out.log" || fail "stand-in NCCL send/recv" "exit $rc: $(tail -2 "$TMP/err.log")"
grep -q "ncclRecv of 500 elements (datatype 7) from rank 0 met its ncclSend of 1000 elements" "$TMP/err.log" \
  && ok "stand-in NCCL: the mismatched receive names both counts" \
  || fail "stand-in NCCL mismatch message" "$(tail -2 "$TMP/err.log")"
