#!/usr/bin/env bash
# emu_mutations.sh: proves that the emulator's race and divergence detection (tests/gpu/cuda_emu.hpp)
# sees what it must. Every __syncthreads(), cp_async_wait<N>() and cp_async_commit() of the templates
# that synchronise shared memory is removed, one at a time, and a divergent branch is put around an
# mma of each tensor-core attention kernel; each mutant runs through test_kernels_emu (BOOST_HOME at
# the mutated copy, only the kinds that use the file) and must fail it: a race, an in-flight read, a
# divergence, a deadlock or a wrong result. Mutants that change nothing on the device are listed
# below with the reason and reported as skipped. The suite runs the first non-equivalent mutant of
# each FILE:WHAT group (about half of them, to keep the suite short); BOOST_ALL_MUTANTS=1 runs every one.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
EMU=build/tests/test_kernels_emu
if [ ! -x "$EMU" ]; then fail "emu_mutations" "$EMU missing: run make tests-build"; exit 0; fi
if ! command -v python3 >/dev/null || ! command -v g++ >/dev/null; then ok "emu_mutations # SKIP python3 or g++ missing"; exit 0; fi
# file | kinds run (BOOST_EMU_KINDS)
FILES="attention_bwd.cu|attention_bwd
attention_fwd.cu|attention_fwd
attention_bwd_simt.cu|attention_bwd
attention_fwd_simt.cu|attention_fwd
prelude.cuh|rmsnorm,sumsq,xent_fwd,online_norm_fwd,bottleneck_act_bwd"
# mutants that are no bug (ID: why); IDs are FILE:WHAT#N as printed
EQUIV="$(cat <<'LIST'
attention_bwd.cu:cp_async_commit#1: the key block's own K, V copies then join the first query tile's group, which cp_async_wait<0> waits for before any read
attention_bwd.cu:cp_async_commit#3: the query block's own Q, dO copies then join the first key tile's group, which cp_async_wait<0> waits for before any read
prelude.cuh:__syncthreads#1: block_sum's first barrier guards a second reduction in the same block; no template reduces twice with block_sum
prelude.cuh:__syncthreads#3: block_max's first barrier guards a second reduction in the same block; no template reduces twice with block_max
LIST
)"
FILES="$FILES" EQUIV="$EQUIV" python3 - "$TMP" <<'PY' >"$TMP/list"
import re, sys, os
tmp = sys.argv[1]
files = [l.split('|') for l in os.environ['FILES'].splitlines()]
pats = [('__syncthreads', r'(?<![\w])__syncthreads\(\);'), ('cp_async_wait', r'(?<![\w])cp_async_wait<\d+>\(\);'),
        ('cp_async_commit', r'(?<![\w])cp_async_commit\(\);')]
n = 0
for f, kinds in files:
    src = open('templates/' + f).read()
    muts = []
    for what, pat in pats:
        for i, m in enumerate(re.finditer(pat, src)):
            muts.append(('%s:%s#%d' % (f, what, i + 1), src[:m.start()] + '/* removed */' + src[m.end():]))
    if f in ('attention_bwd.cu', 'attention_fwd.cu'):   # a divergent branch around the first mma
        m = re.search(r'(?<![\w])mma_bf16_16816\(', src)
        muts.append(('%s:divergent_mma#1' % f, src[:m.start()] + 'if (lane & 1) ' + src[m.start():]))
    seen = set()
    for mid, text in muts:
        group = mid.split('#')[0]                  # FILE:WHAT
        equivalent = any(l.startswith(mid + ':') for l in os.environ['EQUIV'].splitlines())
        if not os.environ.get('BOOST_ALL_MUTANTS') and (group in seen or equivalent):
            continue                               # the suite runs the first real mutant of each group
        seen.add(group)
        n += 1
        d = os.path.join(tmp, 'm%d' % n, 'templates')
        os.makedirs(d)
        for g in os.listdir('templates'):
            open(os.path.join(d, g), 'w').write(open('templates/' + g).read())
        open(os.path.join(d, f), 'w').write(text)
        print('%s|%s|%s' % (mid, kinds, os.path.dirname(d)))
PY
export FILES
total=0; caught=0
while IFS='|' read -r id kinds home; do
  [ -n "$id" ] || continue
  total=$((total + 1))
  why=$(printf '%s\n' "$EQUIV" | grep -F "$id:" | cut -d: -f3-)
  if [ -n "$why" ]; then ok "mutant $id # SKIP equivalent:$why"; continue; fi
  BOOST_HOME="$home" BOOST_EMU_KINDS="$kinds" BOOST_EMU_SEEDS=0 BOOST_EMU_STOP=1 "$EMU" >"$TMP/run.log" 2>&1
  rc=$?
  if grep -q '^FAIL - g++ compiles\|^FAIL - specialise\|^FAIL - emit' "$TMP/run.log"; then
    fail "mutant $id" "the mutant does not build: $(grep '^FAIL' "$TMP/run.log" | head -1)"
  elif [ $rc -ne 0 ] && grep -q '^FAIL - ' "$TMP/run.log"; then
    caught=$((caught + 1))
    what=$(grep -o -m1 'shared-memory race\|still in flight\|divergence\|deadlock\|never waited\|relative L2 error' "$TMP/run.log" | head -1)
    ok "mutant $id caught ($what)"
  else
    fail "mutant $id" "not caught: test_kernels_emu passes with it (BOOST_EMU_KINDS=$kinds)"
  fi
  rm -rf "$home"
done <"$TMP/list"
min=20; [ -z "${BOOST_ALL_MUTANTS:-}" ] && min=10
[ "$total" -ge "$min" ] && ok "$total mutants listed, $caught caught" || fail "mutant list" "only $total mutants found in templates/"
