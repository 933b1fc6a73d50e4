#!/usr/bin/env bash
# nvrtc_gpu_dryrun.sh: the device script tests/gpu/run.sh, run here with the CPU backend on both
# sides (DUT=cpu BENCH_QUICK=1): it builds its check program, generates its plans, and every check
# passes with zero differences; its PyTorch parts run too (PyTorch on the CPU in fp32): the one-step
# comparison with tests/gpu/torch_model.py (torch.md) and the tokens/s table of BOOST against
# torch.compile and eager (bench.md). Keeps the script that only runs on a GPU machine from rotting.
# And the device call's limits (docs/cuda.md): what travels (the tracked tree plus build/gpu-carry)
# is under 56 MiB, the carry unpacks to a bin/boost that starts, and what comes back under $OUT is
# at most 8 files with names of letters, digits, '.', '_', '-', at most 2 folders down.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! bash tests/gpu/build.sh >"$TMP/build.log" 2>&1; then
  fail "tests/gpu/build.sh" "$(tail -3 "$TMP/build.log")"
  exit 0
fi
ok "tests/gpu/build.sh builds bin/boost and build/gpu/check"
# what the device call carries: files git tracks or would track, plus the one carried folder
tree=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
carry=$(du -sb build/gpu-carry | cut -f1)
total=$((tree + carry))
if [ "$carry" -gt 0 ] && [ "$total" -lt $((56 * 1024 * 1024)) ]; then
  ok "device call carries $((total / 1024)) KiB (tree $((tree / 1024)) + build/gpu-carry $((carry / 1024))) < 56 MiB"
else
  fail "device call size" "tree $tree + build/gpu-carry $carry bytes: not under 56 MiB"
fi
mkdir -p "$TMP/unpacked"
if tar -C "$TMP/unpacked" -xJf build/gpu-carry/carry.tar.xz && "$TMP/unpacked/bin/boost" --help >/dev/null 2>&1 \
   && [ -x "$TMP/unpacked/build/gpu/check" ]; then
  ok "build/gpu-carry unpacks to a bin/boost that starts and build/gpu/check"
else
  fail "build/gpu-carry" "$(tar -tJf build/gpu-carry/carry.tar.xz 2>&1 | head -5 | tr '\n' ' ')"
fi
have_torch=0
python3 -c "import torch" >/dev/null 2>&1 && have_torch=1
DUT=cpu BENCH_QUICK=1 PARTS=model,torch,bench,steps,variants,sanitize OUT="$TMP/ret" bash tests/gpu/run.sh >"$TMP/run.log" 2>&1
rc=$?
# what comes back: at most 8 files, allowed names, at most 2 folders down; the results file and
# the archive of everything else, which the checks below read
files=$(cd "$TMP/ret" && find . -type f | sed 's#^\./##')
nfiles=$(printf '%s\n' "$files" | grep -c .)
bad=$(printf '%s\n' "$files" | grep -v -E '^([A-Za-z0-9._-]+/){0,2}[A-Za-z0-9._-]+$')
if [ "$nfiles" -le 8 ] && [ -z "$bad" ] && ls "$TMP/ret"/results-*-dryrun.md >/dev/null 2>&1 && [ -s "$TMP/ret/gpu-out.tar.xz" ]; then
  ok "run.sh returns $nfiles files under \$OUT (at most 8, names allowed): $(echo $files)"
else
  fail "run.sh \$OUT" "$nfiles files, bad names '$bad': $(echo $files)"
fi
mkdir -p "$TMP/out"
tar -C "$TMP/out" -xJf "$TMP/ret/gpu-out.tar.xz" || fail "gpu-out.tar.xz" "does not unpack"
passed=$(grep -c '^ok - ' "$TMP/out/run.log")
failed=$(grep -c '^FAIL - ' "$TMP/out/run.log")
skipped=$(grep -c '^SKIP - ' "$TMP/out/run.log")
if [ "$rc" = 0 ] && [ "$failed" = 0 ] && [ "$passed" -gt 100 ] && [ "$skipped" -le $((1 - have_torch)) ]; then
  ok "tests/gpu/run.sh (cpu vs cpu): $passed checks pass"
else
  fail "tests/gpu/run.sh (cpu vs cpu)" "exit $rc, $passed ok, $failed FAIL, $skipped SKIP: $(grep -E '^(FAIL|SKIP)' "$TMP/out/run.log" | head -3)"
fi
# the compute-sanitizer part: in the dry run its command without the sanitizer, all three verdicts ok
n=$(grep -c '^ok - compute-sanitizer \(memcheck\|racecheck\|synccheck\): 0 errors' "$TMP/out/run.log")
[ "$n" = 3 ] && ok "run.sh sanitize part: memcheck, racecheck, synccheck commands run (dry)" \
  || fail "run.sh sanitize part" "$n of 3 verdicts ok: $(grep 'compute-sanitizer' "$TMP/out/run.log" | head -3)"
grep -q '^NVRTC ' "$TMP/out/doctor.txt" 2>/dev/null && grep -q '^verdict: ' "$TMP/out/doctor.txt" \
  && ok "results: doctor.txt (boost doctor) in the archive" || fail "results: doctor.txt" "$(head -3 "$TMP/out/doctor.txt" 2>&1)"
for f in summary.md steps.md model.md sanitize.md; do
  [ -s "$TMP/out/$f" ] && ok "results: $f written" || fail "results: $f" "missing or empty"
done
# cpu against cpu must agree exactly: any non-zero step error means the harness mixes inputs up
if grep -E '^\| [a-z_]+ \| [0-9]+ \| ([^0]|0[^ ])' "$TMP/out/steps.md" >/dev/null; then
  fail "steps.md: zero error cpu vs cpu" "$(grep -E '^\| [a-z_]+ \| [0-9]+ \| [^0]' "$TMP/out/steps.md" | head -2)"
else ok "steps.md: zero error cpu vs cpu"; fi

if [ "$have_torch" = 0 ]; then
  ok "tests/gpu/run.sh PyTorch parts # SKIP PyTorch is not importable here"
  exit 0
fi
# torch.md: a verdict row per model compared, each ok
rows=$(grep -c -E '^\| tiny-(cola|cola-gqa|llama) \| cpu \| cpu fp32 \|.*\| ok \|$' "$TMP/out/torch.md" 2>/dev/null)
if [ "$rows" = 3 ] && ! grep -q 'FAIL' "$TMP/out/torch.md"; then
  ok "torch.md: tiny-cola, tiny-cola-gqa and tiny-llama match PyTorch"
else
  fail "torch.md" "$rows of 3 ok rows: $(grep -E '^\| tiny' "$TMP/out/torch.md" | head -3)"
fi
# bench.md: the tiny-cola row has numbers in BOOST, compile and eager, and the ratios
row=$(grep -E '^\| tiny-cola \| 256 \|' "$TMP/out/bench.md")
if echo "$row" | grep -qE '^\| tiny-cola \| 256 \| [0-9,]+ \| - \| [0-9,]+ \| - \| [0-9,]+ \| - \| [0-9.]+x \| [0-9.]+x \|$'; then
  ok "bench.md: tiny-cola tokens/s of BOOST, torch.compile and eager, and the ratios"
else
  fail "bench.md" "row: '${row:-none}'"
fi
if grep -q 'torch_model.py.* --bench tiny-cola .*--mode compile' "$TMP/out/bench.md" && grep -q 'boost train tiny-cola' "$TMP/out/bench.md"; then
  ok "bench.md: the command lines of every measurement"
else
  fail "bench.md: command lines" "$(sed -n '/^Commands/,$p' "$TMP/out/bench.md" | head -5)"
fi
