#!/usr/bin/env bash
# nccl_issue_order.sh: NCCL matches point-to-point operations on a communicator in issue order, so
# the plan's pipeline schedules must pair up per channel (one communicator per stage boundary and
# direction, docs/cuda.md): the sends of a boundary's sending stage, in its schedule's order, carry
# the same (buffer, micro-batch) sequence as the receiving stage's receives, and each names the
# pipeline rank that holds the stage across the boundary. Checked from plan.txt (an independent
# reading of the schedule lines, not the generator's own check) for 1F1B (pp=2), interleaved 1F1B
# (pp=2 x 2 virtual stages) and dp=2 x pp=2; a plan with two sends swapped must fail the check.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
# order_check PLAN: prints "ok N" (N operations paired) or the first mismatch
order_check() {
  awk '
    $1 == "stage" { split($0, a, /rank=/); split(a[2], b, / /); rank_of[$2] = b[1] }
    ($1 == "send" || $1 == "recv") {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      s = f["stage"] + 0; d = f["dir"]
      # the boundary (lo, hi) and direction this operation travels on
      if (($1 == "send" && d == "fwd") || ($1 == "recv" && d == "bwd")) { lo = s; hi = s + 1 } else { lo = s - 1; hi = s }
      across = ($1 == "send") == (d == "fwd") ? hi : lo
      key = lo ":" hi ":" d
      if (across in rank_of && f["peer"] != rank_of[across]) {
        printf "line %d: %s of stage %d names peer %s, but stage %d is on rank %s\n", NR, $1, s, f["peer"], across, rank_of[across]
        bad = 1; exit
      }
      seq[$1, key] = seq[$1, key] " " f["buf"] "@" f["micro"]; keys[key] = 1; n++
    }
    END {
      if (bad) exit 1
      for (k in keys) if (seq["send", k] != seq["recv", k]) {
        printf "boundary %s: sends%s | receives%s\n", k, seq["send", k], seq["recv", k]; exit 1
      }
      printf "ok %d\n", n
    }' "$1"
}
gen_and_check() {   # gen_and_check NAME ARGS...
  local name=$1; shift
  if ! "$BOOST" gen "$@" -o "$TMP/$name" >"$TMP/$name.log" 2>&1; then fail "generate $name" "$(tail -2 "$TMP/$name.log")"; return; fi
  local out; out=$(order_check "$TMP/$name/plan.txt")
  case "$out" in
    "ok 0") fail "$name: issue order" "no send/recv in the plan";;
    ok*) ok "$name: every channel's sends and receives pair up in issue order (${out#ok } operations)";;
    *) fail "$name: issue order" "$out";;
  esac
}
gen_and_check pp2 tiny-cola-pp2
gen_and_check pp2v2 tiny-cola-pp2 -D model=tiny-cola-4l -D tp=1 -D micro_batch=1 -D seq=16 -D grad_accum=4 -D pp=2 -D virtual_stages=2
gen_and_check dp2pp2 tiny-cola-pp2 -D tp=1 -D dp=2 -D micro_batch=1 -D seq=16 -D grad_accum=4 -D pp=2
# the check can fail: swap the first two sends of rank 0's schedule (micro-batches 0 and 1)
if [ -f "$TMP/pp2/plan.txt" ]; then
  awk '/^send / && n < 2 { held[++n] = $0; if (n == 2) { print held[2]; print held[1] }; next } { print }' \
    "$TMP/pp2/plan.txt" >"$TMP/swapped.txt"
  out=$(order_check "$TMP/swapped.txt")
  case "$out" in
    boundary*) ok "two sends swapped: the mismatch is reported ($out)";;
    *) fail "two sends swapped" "not reported: '$out'";;
  esac
fi
