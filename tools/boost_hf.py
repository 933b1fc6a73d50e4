#!/usr/bin/env python3
# boost_hf.py: load what `boost export CKPT --format hf -o DIR` writes as a torch module without
# transformers: a low-rank or MoE export (canonical names, x @ W weights) and a full-rank LLaMA
# export (the Hugging Face LLaMA layout), both run by BoostCore of tools/hf/modeling_boost.py (the
# one copy of the model code; the export puts it beside the weights for AutoModelForCausalLM).
#
#   import sys; sys.path.insert(0, "tools"); import boost_hf
#   model = boost_hf.load("out/hf")                    # a torch.nn.Module, eval mode, float32
#   logits = model(torch.tensor([[72, 101, 108]]))     # tokens [B, S] -> logits [B, S, vocab]
#   ids = boost_hf.generate(model, [72, 101], 50)      # 50 more tokens, greedy, with a KV cache
#
# `python3 tools/boost_hf.py DIR --tokens 1,2,3` prints the logits of the last position.
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf"))
from modeling_boost import BoostCore, generate, read_safetensors  # noqa: E402  (re-exported)

BoostLM = BoostCore
PROJS = ("q", "k", "v", "o", "gate", "up", "down")
HF_NAMES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
            "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
            "down": "mlp.down_proj"}


def canonical(cfg, w):
    """The weights under BOOST's canonical names, x @ W orientation (an HF LLaMA export converted
    back)."""
    if cfg.get("model_type") != "llama":
        return {k[len("model."):]: v for k, v in w.items()}
    out = {"embed": w["model.embed_tokens.weight"], "final_norm": w["model.norm.weight"],
           "head": w["lm_head.weight"].t()}
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        out[f"L{i}.attn_norm"] = w[pre + "input_layernorm.weight"]
        out[f"L{i}.mlp_norm"] = w[pre + "post_attention_layernorm.weight"]
        for p in PROJS:
            out[f"L{i}.{p}.W"] = w[pre + HF_NAMES[p] + ".weight"].t()
    return out


def load(path, device="cpu"):
    """The exported model in DIR as a BoostCore in eval mode."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    weights = canonical(cfg, read_safetensors(os.path.join(path, "model.safetensors")))
    if cfg.get("model_type") == "llama":
        dense = dict(cfg.get("boost", {}), lowrank_sigma="identity", gate_act="silu", lax=False)
        cfg = dict(cfg, boost=dense)
    cfg["boost"]["tensors"] = {k: list(v.shape) for k, v in weights.items()}
    model = BoostCore(cfg)
    model.load_state_dict({k: v.contiguous() for k, v in weights.items()}, strict=True)
    return model.to(device).eval()


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="the last position's logits of an exported model")
    ap.add_argument("dir")
    ap.add_argument("--tokens", default="10", help="token ids, comma separated")
    a = ap.parse_args()
    m = load(a.dir)
    with torch.no_grad():
        print(m(torch.tensor([[int(t) for t in a.tokens.split(",")]]))[0, -1].tolist())
