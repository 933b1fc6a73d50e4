# modeling_boost.py: the PyTorch model of a BOOST export (`boost export CKPT --format hf -o DIR`
# copies this file into DIR): CoLA, SVD, LaX and U S V^T low-rank decoders and MoE layers with
# low-rank experts, under their canonical names ("model." + L0.q.A, ...; x @ W weights). With
# transformers installed it is also a Hugging Face model: AutoModelForCausalLM.from_pretrained(DIR,
# trust_remote_code=True), generate() with a KV cache (DynamicCache). Without transformers,
# BoostCore alone runs on torch (tools/boost_hf.py).
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

try:
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
    from transformers.cache_utils import DynamicCache
    from transformers.modeling_outputs import CausalLMOutputWithPast
    HAVE_TRANSFORMERS = True
except ImportError:                       # torch only: BoostCore and read_safetensors still work
    HAVE_TRANSFORMERS = False


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
        raw = bytearray(data[b:e])
        out[name] = torch.frombuffer(raw, dtype=torch.float32).reshape(info["shape"])
    return out


class _Node(torch.nn.Module):
    """A container, so that canonical names (L0.q.A) are module paths and state-dict keys."""


class BoostCore(torch.nn.Module):
    """The decoder BOOST trains: pre-norm blocks, RoPE on the halves of each head (pairs j,
    j + hd/2), causal attention (GQA), gated MLP; each projection dense (x @ W) or low rank
    (sigma(x @ A) @ B; LaX adds the previous projection's latent before B); an MoE layer routes
    each token to top_k low-rank experts. cfg: the config.json dict (its "boost" section lists
    every tensor's shape)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        b = cfg.get("boost", {})
        self.sigma = b.get("lowrank_sigma", "silu") == "silu"
        self.gate_silu = b.get("gate_act", "silu") == "silu"
        self.lax = bool(b.get("lax", False))
        self.moe = b.get("moe") or {}
        self.moe_capacity = False         # True: drop choices past an expert's C slots, as training
        self.names = []
        for name, shape in b["tensors"].items():
            node = self
            for part in name.split(".")[:-1]:
                if not hasattr(node, part):
                    node.add_module(part, _Node())
                node = getattr(node, part)
            param = torch.nn.Parameter(torch.zeros(shape), requires_grad=False)
            node.register_parameter(name.split(".")[-1], param)
            self.names.append(name)

    def has(self, name):
        return name in self.names

    def p(self, name):
        node = self
        for part in name.split("."):
            node = getattr(node, part)
        return node

    def rmsnorm(self, x, g):
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"])
        return x * rms * g.reshape(-1)

    def latent(self, pre, x):             # pre: "L0.q" or "L0.e1.gate"
        if self.has(pre + ".W"):
            return x
        h = x @ self.p(pre + ".A")
        h = F.silu(h) if self.sigma else h
        return h @ self.p(pre + ".S") if self.has(pre + ".S") else h   # usv: the r x r core

    def up(self, pre, z, z_prev=None):
        if self.has(pre + ".W"):
            return z @ self.p(pre + ".W")
        if self.lax and z_prev is not None:
            z = z + z_prev
        return z @ self.p(pre + ".B")

    def rope(self, x, cos, sin):          # x [B, S, heads, hd]
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def expert(self, i, e, x):            # one expert's gated MLP of x [n, d]
        def pre(proj, part):              # a shared factor, or the expert's own
            own = f"L{i}.e{e}.{proj}"
            shared = f"L{i}.shared.{proj}"
            return shared if not self.has(f"{own}.{part}") and self.has(f"{shared}.{part}") else own

        def lat(proj, z):
            if self.has(f"L{i}.e{e}.{proj}.W"):
                return z
            h = z @ self.p(pre(proj, "A") + ".A")
            return F.silu(h) if self.sigma else h

        def out(proj, z):
            if self.has(f"L{i}.e{e}.{proj}.W"):
                return z @ self.p(f"L{i}.e{e}.{proj}.W")
            return z @ self.p(pre(proj, "B") + ".B")
        gate = out("gate", lat("gate", x))
        full = self.has(f"L{i}.e{e}.gate.W")
        if self.gate_silu or full:
            gate = F.silu(gate)
        return out("down", lat("down", gate * out("up", lat("up", x))))

    def moe_mlp(self, i, xn):             # xn [B, S, d] -> the MoE output [B, S, d]
        shape = xn.shape
        x = xn.reshape(-1, shape[-1])
        E, k = self.moe["experts"], self.moe.get("top_k", 1)
        prob = torch.softmax(x @ self.p(f"L{i}.router.W"), dim=-1)
        gate, chosen = torch.topk(prob, k, dim=-1)                  # [M, k]
        if self.moe.get("norm", int(k > 1)):
            gate = gate / gate.sum(-1, keepdim=True)
        keep = torch.ones_like(gate, dtype=torch.bool)
        if self.moe_capacity:             # slots in token order, then choice order (C: M tokens)
            C, M = self.moe["capacity"], self.moe["capacity_tokens"]
            slots = C if x.shape[0] == M else math.ceil(C * x.shape[0] / M)
            onehot = F.one_hot(chosen.reshape(-1), E)
            keep = ((onehot.cumsum(0) * onehot).sum(-1) <= slots).reshape(gate.shape)
        y = torch.zeros_like(x)
        for e in range(E):
            rows, col = torch.nonzero((chosen == e) & keep, as_tuple=True)
            if rows.numel():
                y.index_add_(0, rows, gate[rows, col, None] * self.expert(i, e, x[rows]))
        return y.reshape(shape)

    def forward(self, tokens, cache=None, positions=None, key_mask=None):
        """tokens [B, S] -> logits [B, S, vocab]. cache: None; a list that holds each layer's keys
        and values [B, KV, T, HD] (empty at first, grows); or a transformers Cache. positions
        [B, S] (default T..T+S-1); key_mask [B, T+S] (1: a real token, 0: padding)."""
        c = self.cfg
        B, S = tokens.shape
        H, KV, HD = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        is_list = isinstance(cache, list)
        if is_list:
            t0 = cache[0][0].shape[2] if cache else 0
        else:
            t0 = cache.get_seq_length() if cache is not None else 0
        if positions is None:
            positions = torch.arange(t0, t0 + S, device=tokens.device)[None, :].expand(B, S)
        # computed here, not kept as a buffer (transformers builds the module on the meta device)
        half = torch.arange(HD // 2, dtype=torch.float64, device=tokens.device)
        inv_freq = c["rope_theta"] ** (-2.0 * half / HD)
        ang = positions.to(torch.float64)[..., None] * inv_freq
        dt = self.p("embed").dtype
        cos, sin = ang.cos().to(dt)[:, :, None, :], ang.sin().to(dt)[:, :, None, :]
        mask = torch.ones(S, t0 + S, dtype=torch.bool, device=tokens.device).tril(t0)[None, None]
        if key_mask is not None:          # padding keys hidden; each query still sees itself
            mask = mask & key_mask[:, None, None, -(t0 + S):].bool()
            own = torch.zeros(S, t0 + S, dtype=torch.bool, device=tokens.device)
            own[torch.arange(S), t0 + torch.arange(S)] = True
            mask = mask | own[None, None]
        x = F.embedding(tokens, self.p("embed"))
        for i in range(c["num_hidden_layers"]):
            n1 = self.rmsnorm(x, self.p(f"L{i}.attn_norm"))
            zv = self.latent(f"L{i}.v", n1)
            q = self.up(f"L{i}.q", self.latent(f"L{i}.q", n1)).view(B, S, H, HD)
            k = self.up(f"L{i}.k", self.latent(f"L{i}.k", n1)).view(B, S, KV, HD)
            q, k = self.rope(q, cos, sin).transpose(1, 2), self.rope(k, cos, sin).transpose(1, 2)
            v = self.up(f"L{i}.v", zv).view(B, S, KV, HD).transpose(1, 2)
            if is_list:
                if len(cache) > i:
                    k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
            elif cache is not None:
                k, v = cache.update(k, v, i)
            if KV != H:
                k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            if t0 == 0 and key_mask is None:
                att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            att = att.transpose(1, 2).reshape(B, S, H * HD)
            zo = self.latent(f"L{i}.o", att)
            x = x + self.up(f"L{i}.o", zo, zv)
            n2 = self.rmsnorm(x, self.p(f"L{i}.mlp_norm"))
            if self.has(f"L{i}.router.W"):
                x = x + self.moe_mlp(i, n2)
                continue
            gate = self.up(f"L{i}.gate", self.latent(f"L{i}.gate", n2), zo)
            if self.gate_silu:
                gate = F.silu(gate)
            zu = self.latent(f"L{i}.up", n2)
            h = gate * self.up(f"L{i}.up", zu, zo)
            x = x + self.up(f"L{i}.down", self.latent(f"L{i}.down", h), zu)
        return self.rmsnorm(x, self.p("final_norm")) @ self.p("head")


@torch.no_grad()
def generate(model, prompt, n, temperature=0.0, seed=1):
    """prompt: a list of token ids; n new tokens with a KV cache (greedy at temperature 0). Returns
    the new ids. Past max_position_embeddings the positions go on (no sliding window)."""
    g = torch.Generator().manual_seed(seed)
    cache, out = [], []
    logits = model(torch.tensor([prompt]), cache)[0, -1]
    for _ in range(n):
        if temperature == 0:
            nxt = int(torch.argmax(logits))
        else:
            prob = torch.softmax(logits.double() / temperature, -1)
            nxt = int(torch.multinomial(prob, 1, generator=g))
        out.append(nxt)
        logits = model(torch.tensor([[nxt]]), cache)[0, -1]
    return out


def load(path, device="cpu"):
    """The exported model in DIR as a BoostCore in eval mode (torch only)."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    model = BoostCore(cfg)
    w = read_safetensors(os.path.join(path, "model.safetensors"))
    model.load_state_dict({k[len("model."):]: v for k, v in w.items()}, strict=True)
    return model.to(device).eval()


if HAVE_TRANSFORMERS:
    class BoostConfig(PretrainedConfig):
        """config.json of a BOOST export: LLaMA's shape fields plus "boost" (family, tensors)."""
        model_type = "boost"

        def __init__(self, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, head_dim=32, vocab_size=256,
                     max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0, boost=None,
                     use_cache=True, **kwargs):
            self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
            self.num_hidden_layers = num_hidden_layers
            self.num_attention_heads = num_attention_heads
            self.num_key_value_heads, self.head_dim = num_key_value_heads, head_dim
            self.vocab_size, self.max_position_embeddings = vocab_size, max_position_embeddings
            self.rms_norm_eps, self.rope_theta = rms_norm_eps, rope_theta
            self.boost, self.use_cache = boost or {"tensors": {}}, use_cache
            kwargs.setdefault("tie_word_embeddings", False)
            super().__init__(**kwargs)

    class BoostForCausalLM(PreTrainedModel, GenerationMixin):
        """BoostCore as a Hugging Face causal LM: logits, loss with labels, a DynamicCache."""
        config_class = BoostConfig
        base_model_prefix = "model"
        _no_split_modules = []

        def __init__(self, config):
            super().__init__(config)
            self.model = BoostCore(config.to_dict())
            self.post_init()

        def _init_weights(self, module):  # every weight comes from the checkpoint
            pass

        def get_input_embeddings(self):
            return None

        def forward(self, input_ids=None, attention_mask=None, position_ids=None,
                    past_key_values=None, use_cache=None, labels=None, logits_to_keep=0,
                    return_dict=None, **kwargs):
            use_cache = getattr(self.config, "use_cache", True) if use_cache is None else use_cache
            if past_key_values is None:       # newer generate() hands the cache over as `cache`
                past_key_values = kwargs.get("cache")
            if use_cache and past_key_values is None:
                past_key_values = DynamicCache()
            if not use_cache:
                past_key_values = None
            key_mask = None
            if attention_mask is not None and not bool(attention_mask.all()):
                key_mask = attention_mask
                if position_ids is None:  # positions count the real tokens (left padding)
                    counted = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
                    position_ids = counted[:, -input_ids.shape[1]:]
            logits = self.model(input_ids, past_key_values, position_ids, key_mask)
            loss = None
            if labels is not None:
                flat = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
                loss = F.cross_entropy(flat, labels[:, 1:].reshape(-1), ignore_index=-100)
            if logits_to_keep:
                logits = logits[:, -logits_to_keep:]
            return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=past_key_values)
