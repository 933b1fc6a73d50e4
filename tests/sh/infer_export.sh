#!/usr/bin/env bash
# infer_export.sh: `boost export --format hf`. tiny-cola (btp, tp=2), tiny-llama (megatron, tp=2),
# tiny-svd, tiny-lax, tiny-usv, tiny-cola-gqa and tiny-cola-moe train 3 steps (tiny-cola also at
# dp=2); their exports load in tools/boost_hf.py, whose logits (float64) match the logits BOOST's
# CPU backend computes on the same tokens (`boost eval --logits`) within 1e-5. The llama export uses
# the Hugging Face LLaMA names and [out, in] shapes and loads in transformers' LlamaForCausalLM; the
# others load through their modeling_boost.py (AutoModelForCausalLM, trust_remote_code) with the
# same logits (MoE with the training forward's expert capacity); generate() with the KV cache equals
# it without, a left-padded batch equals one prompt alone; the byte tokenizer encodes text to its
# UTF-8 bytes and generation_config.json has no bos/eos (transformers' 1 and 2 not filled in).
# Counted skips where torch or transformers is not installed.
. tests/sh/lib.sh

for run in tiny-cola tiny-llama tiny-svd tiny-lax tiny-usv tiny-cola-gqa tiny-cola-moe; do
  $BOOST train $run --backend cpu -D steps=3 -D eval_every=0 --quiet -o "$TMP/$run" >"$TMP/$run.out" 2>&1 \
    || { fail export_train_$run "$(tail -3 "$TMP/$run.out")"; continue; }
  $BOOST export "$TMP/$run" --format hf -o "$TMP/$run-hf" >"$TMP/$run-x.out" 2>&1 && [ -s "$TMP/$run-hf/config.json" ] \
    && [ -s "$TMP/$run-hf/model.safetensors" ] && ok export_writes_$run || fail export_writes_$run "$(cat "$TMP/$run-x.out")"
  $BOOST eval "$TMP/$run" --batches 1 --logits "$TMP/$run-logits.st" --backend cpu >/dev/null 2>"$TMP/$run-e.err" \
    || fail export_boost_logits_$run "$(cat "$TMP/$run-e.err")"
done
# a dp=2 run's checkpoint exports as it is, and with the -D dp=1 the refusal used to suggest
$BOOST train tiny-cola --backend cpu -D dp=2 -D tp=1 -D steps=2 -D eval_every=0 --quiet -o "$TMP/dp2" >"$TMP/dp2.out" 2>&1 \
  && $BOOST export "$TMP/dp2" --format hf -o "$TMP/dp2-hf" >>"$TMP/dp2.out" 2>&1 \
  && $BOOST export "$TMP/dp2" --format hf -o "$TMP/dp2-hf-D" -D dp=1 -D pp=1 >>"$TMP/dp2.out" 2>&1 \
  && cmp -s "$TMP/dp2-hf/model.safetensors" "$TMP/dp2-hf-D/model.safetensors" && ok export_dp2_checkpoint \
  || fail export_dp2_checkpoint "$(tail -3 "$TMP/dp2.out")"
grep -q '"model.layers.1.self_attn.q_proj.weight":{"dtype":"F32","shape":\[128,128\]' "$TMP/tiny-llama-hf/model.safetensors" \
  && grep -q '"lm_head.weight":{"dtype":"F32","shape":\[256,128\]' "$TMP/tiny-llama-hf/model.safetensors" \
  && grep -q '"model.norm.weight":{"dtype":"F32","shape":\[128\]' "$TMP/tiny-llama-hf/model.safetensors" \
  && grep -q '"model_type": "llama"' "$TMP/tiny-llama-hf/config.json" && ok export_llama_hf_names \
  || fail export_llama_hf_names "$(head -c 600 "$TMP/tiny-llama-hf/model.safetensors" | tail -c 560)"

if ! python3 -c "import torch" 2>/dev/null; then
  for n in export_cola_module_logits export_llama_module_logits export_svd_module_logits export_lax_module_logits \
           export_usv_module_logits \
           export_gqa_module_logits export_module_kv_cache export_llama_transformers export_moe_module_logits \
           export_auto_model_logits export_generate_kv_cache export_generate_left_padding export_byte_tokenizer \
           export_generation_config; do ok "$n # SKIP torch is not installed"; done
  exit 0
fi
# one Python process for both (importing torch takes seconds): a verdict line per model
python3 - "$TMP" <<'PY' 2>&1 | sed 's/^/# /; s/^# \(ok\|FAIL\) - /\1 - /'
import sys, torch
sys.path.insert(0, "tools")
import boost_hf
for run, name in (("tiny-cola", "export_cola_module_logits"), ("tiny-llama", "export_llama_module_logits"),
                  ("tiny-svd", "export_svd_module_logits"), ("tiny-lax", "export_lax_module_logits"),
                  ("tiny-usv", "export_usv_module_logits"),
                  ("tiny-cola-gqa", "export_gqa_module_logits"), ("tiny-cola-moe", "export_moe_module_logits")):
    try:
        model = boost_hf.load(f"{sys.argv[1]}/{run}-hf").double()
        model.moe_capacity = True
        ref = boost_hf.read_safetensors(f"{sys.argv[1]}/{run}-logits.st")
        V = model.cfg["vocab_size"]
        tokens = ref["tokens"].reshape(-1).long().reshape(-1, model.cfg["max_position_embeddings"])
        with torch.no_grad():
            got = model(tokens).reshape(-1, V)
        err = (got - ref["logits"].double()).abs().max().item()
        ok = err <= 1e-5
        print(f"{'ok' if ok else 'FAIL'} - {name}{'' if ok else ': '}{'' if ok else f'max |logit difference| {err:.3g}'}")
    except Exception as e:
        print(f"FAIL - {name}: {type(e).__name__}: {e}")
# the module's KV-cache decoding: the logits of each decoded position equal the full forward's
try:
    model = boost_hf.load(f"{sys.argv[1]}/tiny-cola-hf").double()
    toks = list(b"The cat sat on")
    with torch.no_grad():
        full = model(torch.tensor([toks]))[0]
        cache = []
        parts = [model(torch.tensor([toks[:5]]), cache)[0]] + [model(torch.tensor([[t]]), cache)[0] for t in toks[5:]]
    err = (torch.cat(parts) - full).abs().max().item()
    print("ok - export_module_kv_cache" if err <= 1e-9 else f"FAIL - export_module_kv_cache: max difference {err:.3g}")
except Exception as e:
    print(f"FAIL - export_module_kv_cache: {type(e).__name__}: {e}")
PY
if ! python3 -c "import transformers" 2>/dev/null; then
  for n in export_llama_transformers export_auto_model_logits export_generate_kv_cache export_generate_left_padding \
           export_byte_tokenizer export_generation_config; do ok "$n # SKIP transformers is not installed"; done
  exit 0
fi
export TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
python3 - "$TMP" <<'PY' 2>&1 | sed 's/^/# /; s/^# \(ok\|FAIL\) - /\1 - /'
import json, sys, torch
sys.path.insert(0, "tools")
import boost_hf
from transformers import AutoModelForCausalLM, AutoTokenizer
t = sys.argv[1]
def verdict(name, good, why):
    print(f"ok - {name}" if good else f"FAIL - {name}: {why}")
worst, why = 0.0, ""
for run in ("tiny-cola", "tiny-svd", "tiny-lax", "tiny-cola-gqa", "tiny-cola-moe"):
    try:
        m = AutoModelForCausalLM.from_pretrained(f"{t}/{run}-hf", trust_remote_code=True, dtype=torch.float64).eval()
        m.model.moe_capacity = True
        ref = boost_hf.read_safetensors(f"{t}/{run}-logits.st")
        toks = ref["tokens"].reshape(-1).long().reshape(-1, m.config.max_position_embeddings)
        with torch.no_grad():
            err = (m(toks).logits.reshape(-1, m.config.vocab_size) - ref["logits"].double()).abs().max().item()
        if err > worst: worst, why = err, f"{run}: max |logit difference| {err:.3g}"
    except Exception as e:
        worst, why = 1e9, f"{run}: {type(e).__name__}: {e}"
verdict("export_auto_model_logits", worst <= 1e-5, why)
m = AutoModelForCausalLM.from_pretrained(f"{t}/tiny-cola-moe-hf", trust_remote_code=True, dtype=torch.float64).eval()
tok = AutoTokenizer.from_pretrained(f"{t}/tiny-cola-moe-hf", trust_remote_code=True)
text = "Héllo wörld, \"quoted\" \\ tab\t"
ids = tok(text).input_ids
verdict("export_byte_tokenizer", ids == list(text.encode()) and tok.decode(ids) == text, f"{ids} decodes to {tok.decode(ids)!r}")
prompt = torch.tensor([list(b"The cat sat")])
a = m.generate(prompt, max_new_tokens=24, do_sample=False)
b = m.generate(prompt, max_new_tokens=24, do_sample=False, use_cache=False)
verdict("export_generate_kv_cache", a.shape[1] == prompt.shape[1] + 24 and torch.equal(a, b), f"{a.tolist()} vs {b.tolist()}")
tok.padding_side = "left"
batch = tok(["The cat", "A much longer prompt here"], return_tensors="pt", padding=True)
both = m.generate(**batch, max_new_tokens=8, do_sample=False)
one = m.generate(torch.tensor([list(b"The cat")]), max_new_tokens=8, do_sample=False)
verdict("export_generate_left_padding", both[0, -8:].tolist() == one[0, -8:].tolist(), f"{both[0, -8:].tolist()} vs {one[0, -8:].tolist()}")
g = json.load(open(f"{t}/tiny-cola-moe-hf/generation_config.json"))
verdict("export_generation_config", g["bos_token_id"] is None and g["eos_token_id"] is None
        and m.generation_config.eos_token_id is None and m.config.max_position_embeddings == 64, f"{g} {m.generation_config}")
PY
out=$(python3 - "$TMP/tiny-llama-hf" "$TMP/tiny-llama-logits.st" <<'PY' 2>&1
import sys, torch
sys.path.insert(0, "tools")
import boost_hf
from transformers import LlamaForCausalLM
model = LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float64).eval()
ref = boost_hf.read_safetensors(sys.argv[2])
tokens = ref["tokens"].reshape(-1).long().reshape(-1, model.config.max_position_embeddings)
with torch.no_grad():
    got = model(tokens).logits.reshape(-1, model.config.vocab_size)
err = (got - ref["logits"].double()).abs().max().item()
print(f"max |logit difference| {err:.3g}")
sys.exit(0 if err <= 1e-5 else 1)
PY
)
[ $? = 0 ] && ok export_llama_transformers || fail export_llama_transformers "$out"
