#!/usr/bin/env python3
# boost_hf.py: load what `boost export CKPT --format hf -o DIR` writes (config.json + model.safetensors)
# as a PyTorch module: CoLA, SVD and LaX low-rank models (canonical names, x @ W weights) and full-rank
# LLaMA (the Hugging Face LLaMA layout, which `transformers` also loads as LlamaForCausalLM).
#
#   import sys; sys.path.insert(0, "tools"); import boost_hf
#   model = boost_hf.load("out/hf")                    # a torch.nn.Module, eval mode, float32
#   logits = model(torch.tensor([[72, 101, 108]]))     # tokens [B, S] -> logits [B, S, vocab]
#   ids = boost_hf.generate(model, [72, 101], 50)      # 50 more tokens, greedy, with a KV cache
#
# `python3 tools/boost_hf.py DIR --tokens 1,2,3` prints the logits of the last position.
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

PROJS = ("q", "k", "v", "o", "gate", "up", "down")
HF_NAMES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
            "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def read_safetensors(path):
    """{name: float32 tensor} of an F32 safetensors file (no safetensors package needed)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {info['dtype']}, expected F32")
        b, e = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(info["shape"])
    return out


def canonical(cfg, w):
    """The weights under BOOST's canonical names, x @ W orientation (an HF LLaMA export converted back)."""
    if cfg.get("model_type") != "llama":
        return w
    out = {"embed": w["model.embed_tokens.weight"], "final_norm": w["model.norm.weight"],
           "head": w["lm_head.weight"].t()}
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        out[f"L{i}.attn_norm"] = w[pre + "input_layernorm.weight"]
        out[f"L{i}.mlp_norm"] = w[pre + "post_attention_layernorm.weight"]
        for p in PROJS:
            out[f"L{i}.{p}.W"] = w[pre + HF_NAMES[p] + ".weight"].t()
    return out


class BoostLM(torch.nn.Module):
    """The decoder BOOST trains: pre-norm blocks, RoPE on the halves of each head, causal attention,
    gated MLP; each projection dense (x @ W) or low rank (sigma(x @ A) @ B, LaX adds the previous
    projection's latent before B)."""

    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        b = cfg.get("boost", {})
        self.sigma = b.get("lowrank_sigma", "silu") == "silu"
        self.gate_silu = b.get("gate_act", "silu") == "silu"
        self.lax = bool(b.get("lax", False))
        self.w = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(v.clone(), requires_grad=False)
                                         for k, v in weights.items()})
        hd = cfg["head_dim"]
        inv = cfg["rope_theta"] ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64) / hd)
        self.register_buffer("inv_freq", inv, persistent=False)

    def p(self, name):
        return self.w[name.replace(".", "_")]

    def rmsnorm(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"]) * g

    def latent(self, i, p, x):
        if f"L{i}_{p}_W" in self.w:
            return x
        h = x @ self.p(f"L{i}.{p}.A")
        return F.silu(h) if self.sigma else h

    def up(self, i, p, z, z_prev=None):
        if f"L{i}_{p}_W" in self.w:
            return z @ self.p(f"L{i}.{p}.W")
        if self.lax and z_prev is not None:
            z = z + z_prev
        return z @ self.p(f"L{i}.{p}.B")

    def rope(self, x, cos, sin):              # x [B, S, heads, hd]: pairs (j, j + hd/2)
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def forward(self, tokens, cache=None):    # tokens [B, S] -> logits [B, S, vocab]
        """cache: None, or a list that holds each layer's keys and values [B, KV, T, HD] (empty at
        first): the tokens then continue the cached ones at positions T.. and the cache grows."""
        c = self.cfg
        B, S = tokens.shape
        H, KV, HD = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        t0 = cache[0][0].shape[2] if cache else 0
        ang = torch.arange(t0, t0 + S, dtype=torch.float64, device=tokens.device)[:, None] * self.inv_freq[None, :]
        dt = self.p("embed").dtype
        cos, sin = ang.cos().to(dt)[:, None, :], ang.sin().to(dt)[:, None, :]
        x = F.embedding(tokens, self.p("embed"))
        for i in range(c["num_hidden_layers"]):
            n1 = self.rmsnorm(x, self.p(f"L{i}.attn_norm").reshape(-1))
            zv = self.latent(i, "v", n1)
            q = self.rope(self.up(i, "q", self.latent(i, "q", n1)).view(B, S, H, HD), cos, sin).transpose(1, 2)
            k = self.rope(self.up(i, "k", self.latent(i, "k", n1)).view(B, S, KV, HD), cos, sin).transpose(1, 2)
            v = self.up(i, "v", zv).view(B, S, KV, HD).transpose(1, 2)
            if cache is not None:
                if len(cache) > i:
                    k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
            if KV != H:
                k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            if t0 == 0:
                att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:                             # new queries see every cached position and the causal part of their own
                mask = torch.ones(S, t0 + S, dtype=torch.bool, device=tokens.device).tril(t0)
                att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            att = att.transpose(1, 2).reshape(B, S, H * HD)
            zo = self.latent(i, "o", att)
            x = x + self.up(i, "o", zo, zv)
            n2 = self.rmsnorm(x, self.p(f"L{i}.mlp_norm").reshape(-1))
            gate = self.up(i, "gate", self.latent(i, "gate", n2), zo)
            if self.gate_silu:
                gate = F.silu(gate)
            zu = self.latent(i, "up", n2)
            x = x + self.up(i, "down", self.latent(i, "down", gate * self.up(i, "up", zu, zo)), zu)
        return self.rmsnorm(x, self.p("final_norm").reshape(-1)) @ self.p("head")


@torch.no_grad()
def generate(model, prompt, n, temperature=0.0, seed=1):
    """prompt: a list of token ids; n new tokens with a KV cache (greedy at temperature 0).
    Returns the new ids. Past max_position_embeddings the positions go on (no sliding window)."""
    g = torch.Generator().manual_seed(seed)
    cache, out = [], []
    logits = model(torch.tensor([prompt]), cache)[0, -1]
    for _ in range(n):
        if temperature == 0:
            nxt = int(torch.argmax(logits))
        else:
            nxt = int(torch.multinomial(torch.softmax(logits.double() / temperature, -1), 1, generator=g))
        out.append(nxt)
        logits = model(torch.tensor([[nxt]]), cache)[0, -1]
    return out


def load(path, device="cpu"):
    """The exported model in DIR as a BoostLM in eval mode."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    weights = canonical(cfg, read_safetensors(os.path.join(path, "model.safetensors")))
    return BoostLM(cfg, weights).to(device).eval()


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="print the last position's logits of an exported BOOST model")
    ap.add_argument("dir")
    ap.add_argument("--tokens", default="10", help="token ids, comma separated")
    a = ap.parse_args()
    m = load(a.dir)
    with torch.no_grad():
        print(m(torch.tensor([[int(t) for t in a.tokens.split(",")]]))[0, -1].tolist())
