#!/usr/bin/env bash
# gen_fresh.sh: generated/ is what the generator writes now: regenerate every entry of
# specs/generate.txt into a temporary folder and compare byte for byte; then regenerate once more
# and compare again (determinism).
cd "$(dirname "$0")/../.." || exit 2
. tests/sh/lib.sh
if ! bash tools/generate.sh "$TMP/a" >/dev/null 2>"$TMP/err"; then
  fail "generate into a temporary folder" "$(head -3 "$TMP/err")"
  exit 1
fi
ok "generate into a temporary folder"
if diff -r "$TMP/a" generated >"$TMP/diff" 2>&1; then ok "generated/ is fresh"
else fail "generated/ is fresh" "generated/ differs from the generator's output (run make generate): $(head -3 "$TMP/diff")"; fi
bash tools/generate.sh "$TMP/b" >/dev/null 2>&1
if diff -r "$TMP/a" "$TMP/b" >/dev/null 2>&1; then ok "generation is deterministic"
else fail "generation is deterministic" "two runs gave different bytes"; fi
# every shipped report carries the NVRTC kernel table (both archs) and no kernel spills
bad=""
for r in generated/*/report.md; do
  grep -q '^## Kernels (NVRTC' "$r" && grep -q '| sm_80 |' "$r" && grep -q '| sm_90 |' "$r" \
    && ! awk -F'|' '/\| sm_[0-9]+ \|/ { if ($(NF-1) !~ /^ *0\/0 *$/) found=1 } END { exit !found }' "$r" || bad="$bad $r"
done
[ -z "$bad" ] && ok "reports list every kernel's registers, no spills" \
  || fail "reports list every kernel's registers, no spills" "missing table or a spill in:$bad"
