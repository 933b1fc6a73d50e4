#!/usr/bin/env bash
# decode.sh: decode speed on the CPU backend. For tiny-cola and cola-llama-60m (seq 256, a 1-step
# checkpoint: speed does not depend on the weights), `boost sample` greedy tokens/s at tp=1 and tp=2
# (a full forward over the window per token, no KV cache) against the same exported model in PyTorch
# (tools/boost_hf.py, float32, with a KV cache) on this machine in the same run; and the per-token
# collective bytes of one decoder layer of CoLA-LLaMA-7B at tp=4 per layout (`boost report` at
# micro_batch 1, seq 1: a decode step's forward carries one token row). Prints Markdown.
# Usage: bash bench/decode.sh [TINY_TOKENS] [M60_TOKENS] > bench/results/DATE-decode.md
set -u
cd "$(dirname "$0")/.." || exit 2
BOOST=${BOOST:-./bin/boost}
NT=${1:-200}; NM=${2:-8}
TMP=$(mktemp -d /tmp/boost-decode.XXXXXX); trap 'rm -rf "$TMP"' EXIT
echo "# Decode speed on the CPU backend ($(date -u +%F), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg) at the start)"
echo
echo "Command: \`bash bench/decode.sh $NT $NM\`. BOOST samples greedily with \`boost sample --temperature 0\`: every"
echo "token runs the whole forward over its window (up to seq tokens), there is no KV cache yet."
echo "PyTorch runs the exported model (\`boost export\`, \`tools/boost_hf.py\`, float32, one thread) with a KV cache."
echo
echo "| model | seq | tokens | BOOST tp=1 tok/s | BOOST tp=2 tok/s | PyTorch KV cache tok/s |"
echo "|---|---:|---:|---:|---:|---:|"
for spec in "tiny-cola:tiny-cola:64:$NT" "cola-llama-60m:cola-60m-h100:256:$NM"; do
  IFS=: read -r model run seq n <<<"$spec"
  $BOOST train "$run" --backend cpu -D tp=1 -D steps=1 -D micro_batch=1 -D seq="$seq" -D eval_every=0 -D data=corpus \
    --quiet -o "$TMP/$model" >"$TMP/$model.train" 2>&1 || { echo "| $model | training failed: $(tail -1 "$TMP/$model.train") |"; continue; }
  rates=()
  for tp in 1 2; do
    $BOOST sample "$TMP/$model" --backend cpu -D tp=$tp --temperature 0 --tokens "$n" --prompt-ids "84 104 101 32" >/dev/null 2>"$TMP/s.err"
    rates+=("$(grep -o '([0-9.]* tokens/s)' "$TMP/s.err" | tr -d '(' | cut -d' ' -f1)")
  done
  $BOOST export "$TMP/$model" --format hf -o "$TMP/$model-hf" >/dev/null 2>&1
  pt=$(python3 - "$TMP/$model-hf" "$n" <<'PY' 2>/dev/null
import sys, time, torch
sys.path.insert(0, "tools")
import boost_hf
torch.set_num_threads(1)          # one thread: on a shared, loaded machine more threads only contend
m = boost_hf.load(sys.argv[1])
n = int(sys.argv[2])
boost_hf.generate(m, list(b"The "), 2)            # warm-up
t = time.perf_counter()
boost_hf.generate(m, list(b"The "), n)
print(f"{n / (time.perf_counter() - t):.1f}")
PY
)
  echo "| $model | $seq | $n | ${rates[0]:-?} | ${rates[1]:-?} | ${pt:-n/a (no torch)} |"
done
echo
echo "Per-token collective bytes of one decoder layer, CoLA-LLaMA-7B at tp=4 (bf16; \`boost report cola-7b-tp4 -D micro_batch=1 -D seq=1\`):"
echo
$BOOST report cola-7b-tp4 -D micro_batch=1 -D seq=1 2>/dev/null | sed -n '/^## Collectives per layer/,/^$/d; /^| layout | fwd count/,/^$/p' | awk -F'|' '/^\|/ { print "|" $2 "|" $3 "|" $4 "|" $5 "|" }'
