#!/usr/bin/env bash
# nvrtc_kernels.sh: every kernels.cu the generator writes (all of specs/generate.txt, plus the tiny
# variants and the 7B runs of every family) compiles with NVRTC for sm_80 and sm_90 with no errors
# and no spills, and matches its plan.txt (kernel names, operand dtypes). Registers are logged as
# '#' lines. Also: a broken kernels.cu and a plan whose dtypes disagree are rejected (exit 1).
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
gen="$TMP/gen"
if ! bash tools/generate.sh "$gen" >"$TMP/generate.log" 2>&1; then
  fail "generate specs/generate.txt" "$(tail -3 "$TMP/generate.log")"
fi
# runs specs/generate.txt does not cover (skipped when it does)
for run in tiny-llama tiny-cola-gqa tiny-svd tiny-lax svd-7b-tp4 lax-7b-tp4; do
  grep -qE "^[^#]*[[:space:]]$run([[:space:]]|$)" specs/generate.txt && continue
  "$BOOST" gen "specs/runs/$run.lua" -o "$gen/x-$run" >"$TMP/gen-$run.log" 2>&1 ||
    fail "generate $run" "$(tail -3 "$TMP/gen-$run.log")"
done
dirs=$(find "$gen" -name kernels.cu -printf '%h\n' | sort)
[ -n "$dirs" ] || fail "kernels generated" "no kernels.cu under $gen"
# two compiles at a time (one per core)
printf '%s\n' $dirs | xargs -P 2 -I{} sh -c '"$0" kernels "$1" --arch sm_80,sm_90 >"$1/nvrtc.txt" 2>&1; echo $? >"$1/nvrtc.rc"' "$BOOST" {}
for d in $dirs; do
  name=${d#"$gen"/}
  rc=$(cat "$d/nvrtc.rc")
  sed 's/^/#   /' "$d/nvrtc.txt"
  if [ "$rc" = 0 ] && grep -q 'no spills; plan.txt matches' "$d/nvrtc.txt"; then
    ok "nvrtc $name: sm_80 + sm_90, no spills, plan matches"
  else
    fail "nvrtc $name" "boost kernels exited $rc: $(grep -v '^[a-z_]* *sm_' "$d/nvrtc.txt" | head -5)"
  fi
done
# occupancy: every kernel row names its block size, and its blocks/SM is the least of the arch's
# limits (threads, blocks, registers by 256 a warp, shared memory + 1 KiB a block), worked out here
bad=$(for d in $dirs; do grep -E '^[a-z_][A-Za-z0-9_]* +sm_(80|90) ' "$d/nvrtc.txt"; done | awk '
  { blk = $6; occ = $7; if (blk == "-" || occ == "-") { print $1 " " $2 ": no block size"; next }
    th = 2048; nb = 32; sm = ($2 == "sm_80") ? 164 * 1024 : 228 * 1024
    w = int((blk + 31) / 32); n = nb; if (int(th / (w * 32)) < n) n = int(th / (w * 32))
    if ($3 > 0) { pw = int(($3 * 32 + 255) / 256) * 256; ws = int(65536 / pw); if (int(ws / w) < n) n = int(ws / w) }
    if ($4 > 0 && int(sm / ($4 + 1024)) < n) n = int(sm / ($4 + 1024))
    if (n != occ) print $1 " " $2 ": blocks/SM " occ ", expected " n }' | head -3)
rows=$(for d in $dirs; do grep -cE '^[a-z_][A-Za-z0-9_]* +sm_(80|90) ' "$d/nvrtc.txt"; done | awk '{ s += $1 } END { print s + 0 }')
if [ -z "$bad" ] && [ "$rows" -gt 0 ]; then ok "boost kernels: block size and blocks/SM on all $rows kernel rows"
else fail "boost kernels occupancy" "${bad:-no kernel rows}"; fi
# shared memory: each row's last number is the dynamic bytes the plan launches the kernel with
# (smem=, 0 for a kernel the plan does not launch), and its smem column (used above) includes them
dyn=$(for d in $dirs; do awk '
  FNR == NR { if ($1 == "kernel") { n = ""; s = 0; for (i = 2; i <= NF; i++) { if ($i ~ /^name=/) n = substr($i, 6)
              if ($i ~ /^smem=/) s = substr($i, 6) }; plan[n] = s }; next }
  /^[a-z_][A-Za-z0-9_]* +sm_(80|90) / { want = ($1 in plan) ? plan[$1] : 0; if ($8 > 0) big++
    if ($8 != want || $4 < $8) print $1 " " $2 ": dynamic " $8 ", plan smem=" want ", smem column " $4 }
  END { if (big) print "DYN " big }' "$d/plan.txt" "$d/nvrtc.txt"; done)
bad=$(echo "$dyn" | grep -v '^DYN ' | head -3)
ndyn=$(echo "$dyn" | awk '/^DYN / { s += $2 } END { print s + 0 }')
if [ -z "$bad" ] && [ "$ndyn" -gt 0 ]; then ok "boost kernels: the plan's dynamic shared memory in the smem column ($ndyn rows with some)"
else fail "boost kernels dynamic shared memory" "${bad:-no row with dynamic shared memory}"; fi
# the check can fail: a syntax error, and a plan that disagrees with its kernels
first=$(printf '%s\n' $dirs | head -1)
cp -r "$first" "$TMP/broken"
printf '\nextern "C" __global__ void broken( { }\n' >>"$TMP/broken/kernels.cu"
"$BOOST" kernels "$TMP/broken" --arch sm_90 >"$TMP/broken.log" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q 'error' "$TMP/broken.log"; then ok "broken kernels.cu: exit 1 with the compile log"
else fail "broken kernels.cu" "exit $rc, log: $(head -3 "$TMP/broken.log")"; fi
cp -r "$first" "$TMP/mismatch"
sed -i -E '0,/^buffer ([^ ]*) dtype=fp32/s//buffer \1 dtype=bf16/' "$TMP/mismatch/plan.txt"
"$BOOST" kernels "$TMP/mismatch" --arch sm_90 >"$TMP/mismatch.log" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q 'is bf16 in the plan but the kernel reads fp32' "$TMP/mismatch.log"; then
  ok "plan/kernel dtype mismatch: exit 1 naming the line"
else fail "plan/kernel dtype mismatch" "exit $rc, log: $(head -3 "$TMP/mismatch.log")"; fi
"$BOOST" kernels "$TMP/nonexistent" >/dev/null 2>&1
[ $? = 2 ] && ok "missing kernels.cu: exit 2" || fail "missing kernels.cu" "expected exit 2"
