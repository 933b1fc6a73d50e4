#!/usr/bin/env bash
# nvrtc_infer_kernels.sh: the decode step's kernels (infer-kernels.cu beside infer.txt, gen/infer_plan.c)
# compile with NVRTC for sm_80 and sm_90 with no spills and match infer.txt (names, operand dtypes),
# for the tiny models (MHA, GQA, full rank; btp, naive, megatron) and the 7B runs (head_dim 128,
# max_seq 4096); an MoE model gets no inference plan and the report says why.
cd "$(dirname "$0")/../.." || exit 2
. tests/sh/lib.sh
for spec in "tiny-cola" "tiny-cola -D layout=naive -D tp=4" "tiny-cola-gqa" "tiny-llama" "cola-7b-tp4" "llama-7b-tp4"; do
  d="$TMP/$(echo "$spec" | tr ' =' '__')"
  if ! $BOOST gen $spec -o "$d/out" >"$TMP/gen.log" 2>&1; then fail "infer kernels $spec: generate" "$(tail -3 "$TMP/gen.log")"; continue; fi
  mkdir -p "$d/k" && cp "$d/out/infer.txt" "$d/k/plan.txt" && cp "$d/out/infer-kernels.cu" "$d/k/kernels.cu" \
    || { fail "infer kernels $spec: infer.txt and infer-kernels.cu written" "missing in $d/out"; continue; }
  $BOOST kernels "$d/k" --arch sm_80,sm_90 >"$d/nvrtc.txt" 2>&1
  rc=$?
  if [ $rc = 0 ] && grep -q 'no spills; plan.txt matches' "$d/nvrtc.txt" && grep -q attention_decode "$d/nvrtc.txt" \
     && grep -q kv_append "$d/nvrtc.txt" && grep -q rope_at "$d/nvrtc.txt"; then
    ok "infer kernels $spec: sm_80 + sm_90, no spills, infer.txt matches"
  else
    fail "infer kernels $spec" "boost kernels exited $rc: $(grep -v '^[a-z_]* *sm_' "$d/nvrtc.txt" | head -5)"
  fi
done
$BOOST gen tiny-cola-moe -o "$TMP/moe" >"$TMP/moe.log" 2>&1 && [ ! -e "$TMP/moe/infer.txt" ] \
  && grep -q "No inference plan: model tiny-cola-moe has MoE layers" "$TMP/moe/report.md" \
  && ok "MoE: no inference plan, the report says why" || fail "MoE: no inference plan, the report says why" "$(tail -3 "$TMP/moe.log")"
