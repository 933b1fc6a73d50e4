#!/usr/bin/env bash
# import_hf.sh: `boost import` and `boost export` + transformers loading at 1B scale on the CPU. Makes a
# random LLaMA checkpoint of TinyLlama-1.1B's shape (hidden 2048, 22 layers, 32 heads, 4 key/value
# heads, ffn 5632, vocab 32000: 1.10B parameters) in bf16, sharded in two files with an index as
# save_pretrained writes them; imports it at full rank and as CoLA at rank RANK (truncated SVD of
# its 154 projections); exports both and loads the exports in transformers (LlamaForCausalLM for
# the full-rank one, AutoModelForCausalLM with trust_remote_code for the CoLA one). Prints Markdown.
# Usage: bash bench/import_hf.sh [LAYERS] [RANK] > bench/results/DATE-import.md   (needs torch, transformers,
# safetensors and ~25 GB in TMPDIR). BENCH_SVD=0 leaves out the CoLA rows (the SVDs are the long part).
set -u
cd "$(dirname "$0")/.." || exit 2
BOOST=${BOOST:-./bin/boost}
LAYERS=${1:-22}; RANK=${2:-256}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/boost-import-bench.XXXXXX"); trap 'rm -rf "$TMP"' EXIT
export TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
timed() {   # timed NAME CMD...: wall seconds and peak RSS (MB) into $TMP/NAME.t; output in $TMP/NAME.out
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$TMP/$name.t" "$@" >"$TMP/$name.out" 2>&1 || { echo "**$name failed**: $(tail -3 "$TMP/$name.out")"; exit 1; }
}
row() { read -r s kb <"$TMP/$1.t"; echo "| $2 | $s | $((kb / 1024)) |"; }
echo "# Import and export at 1B scale ($(date -u +%F), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg) at the start)"
echo
echo "Command: \`bash bench/import_hf.sh $LAYERS $RANK\` at $(git rev-parse --short HEAD 2>/dev/null); wall seconds and peak"
echo "resident memory of each command (\`/usr/bin/time\`), files in $(df --output=source "$TMP" | tail -1) (page cache warm"
echo "from the step before). A shared machine: other jobs ran at the same time."
echo
timed make python3 - "$TMP/hf" "$LAYERS" <<'PY'
import json, os, sys, torch
from safetensors.torch import save_file
out, layers = sys.argv[1], int(sys.argv[2])
d, ff, H, KV, V = 2048, 5632, 32, 4, 32000
hd = d // H
os.makedirs(out)
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d, "intermediate_size": ff,
       "num_hidden_layers": layers, "num_attention_heads": H, "num_key_value_heads": KV, "vocab_size": V,
       "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
       "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
json.dump(cfg, open(f"{out}/config.json", "w"), indent=1)
g = torch.Generator().manual_seed(0)
def rnd(*shape):
    return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)
shapes = {"embed_tokens": (V, d)}
tensors = [("model.embed_tokens.weight", (V, d)), ("model.norm.weight", (d,)), ("lm_head.weight", (V, d))]
for i in range(layers):
    p = f"model.layers.{i}."
    tensors += [(p + "input_layernorm.weight", (d,)), (p + "post_attention_layernorm.weight", (d,)),
                (p + "self_attn.q_proj.weight", (H * hd, d)), (p + "self_attn.k_proj.weight", (KV * hd, d)),
                (p + "self_attn.v_proj.weight", (KV * hd, d)), (p + "self_attn.o_proj.weight", (d, H * hd)),
                (p + "mlp.gate_proj.weight", (ff, d)), (p + "mlp.up_proj.weight", (ff, d)), (p + "mlp.down_proj.weight", (d, ff))]
half = len(tensors) // 2
weight_map, total = {}, 0
for k, part in enumerate((tensors[:half], tensors[half:])):
    name = f"model-{k + 1:05d}-of-00002.safetensors"
    w = {n: (torch.ones(s, dtype=torch.bfloat16) if len(s) == 1 else rnd(*s)) for n, s in part}
    save_file(w, f"{out}/{name}", metadata={"format": "pt"})
    for n, s in part:
        weight_map[n] = name
        total += torch.Size(s).numel()
json.dump({"metadata": {"total_size": 2 * total}, "weight_map": weight_map}, open(f"{out}/model.safetensors.index.json", "w"))
print(total)
PY
params=$(tail -1 "$TMP/make.out")
echo "Checkpoint: $params parameters ($(awk "BEGIN{printf \"%.2f\", $params/1e9}")B), bf16, $(du -sh "$TMP/hf" | cut -f1) in two shards + index."
echo
echo "| step | seconds | peak RSS MB |"
echo "|---|---:|---:|"
row make "make the random checkpoint (torch, safetensors)"
timed full $BOOST import "$TMP/hf" -o "$TMP/full"
row full "\`boost import\` full rank (spec, plan, step-0 checkpoint: $(du -sh "$TMP/full/step-000000" | cut -f1) F32 with AdamW moments)"
SVD=${BENCH_SVD:-1}
[ "$SVD" != 0 ] && timed cola $BOOST import "$TMP/hf" -o "$TMP/cola" --family cola --rank "$RANK"
[ "$SVD" != 0 ] && row cola "\`boost import --family cola --rank $RANK\` ($(grep -o 'factorized.*parameters' "$TMP/cola.out"))"
timed xfull $BOOST export "$TMP/full" --format hf -o "$TMP/full-hf"
row xfull "\`boost export\` of the full-rank import (LLaMA layout, $(du -sh "$TMP/full-hf" | cut -f1))"
timed lfull python3 -c "import sys, torch, transformers as t; t.LlamaForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)" "$TMP/full-hf"
row lfull "transformers \`LlamaForCausalLM.from_pretrained\` of it (python start and imports included)"
if [ "$SVD" != 0 ]; then
timed xcola $BOOST export "$TMP/cola" --format hf -o "$TMP/cola-hf"
row xcola "\`boost export\` of the CoLA import (canonical names + modeling_boost.py, $(du -sh "$TMP/cola-hf" | cut -f1))"
timed lcola python3 -c "import sys, torch, transformers as t; m = t.AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32); print(m(torch.tensor([[1, 2, 3]])).logits.shape)" "$TMP/cola-hf"
row lcola "transformers \`AutoModelForCausalLM.from_pretrained(trust_remote_code=True)\` of it + one forward"
fi
echo
echo "The import's own split (read the shards / SVD / write the checkpoint): full rank $(grep -o 'read [0-9.]* s, SVD [0-9.]* s, write [0-9.]* s' "$TMP/full.out")\
$([ "$SVD" != 0 ] && echo "; CoLA $(grep -o 'read [0-9.]* s, SVD [0-9.]* s, write [0-9.]* s' "$TMP/cola.out")")."
