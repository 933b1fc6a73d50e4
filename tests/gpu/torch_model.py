#!/usr/bin/env python3
# torch_model.py: BOOST's models in PyTorch (CoLA, SVD and LaX low-rank LLaMA and full-rank LLaMA,
# MHA and GQA), built from what `boost gen` writes for a run: the plan's model, run and train lines,
# its canonical tensors and the activations its forward steps apply. Written for speed (bf16
# autocast over fp32 master weights, scaled_dot_product_attention, fused AdamW on CUDA). Two jobs:
#
#   --check RUN [RUN ...]   one training step against BOOST: BOOST trains one step twice (lr 0, which
#       saves its initial weights and, in AdamW's first moment, its gradients; and the real first
#       step), this model loads those weights, takes the same first batch (the data loader's order,
#       runtime/data.c, rebuilt here), and compares the loss, every gradient, and the weights after
#       one AdamW step (both from BOOST's gradients: the optimizer alone; and from its own: the whole
#       step). Prints `ok - ` / `FAIL - ` lines and one JSON line per run; exit 1 when a check fails.
#   --bench RUN             trains --steps steps at the run's micro_batch x seq on random tokens,
#       eager and/or torch.compile, and prints one JSON line per mode: tokens/s (median of the
#       steps after --warmup-steps, each step timed to a CUDA sync) and MFU (FLOPs per token from
#       `boost report RUN --json`, the same figure the BOOST side uses, over the bf16 peak of
#       specs/gpus/GPU.lua).
#
# Examples:
#   python3 tests/gpu/torch_model.py --check tiny-cola tiny-llama -D tp=1             # CPU, fp32
#   python3 tests/gpu/torch_model.py --check cola-60m-h100 --backend cuda --device cuda --dtype bf16
#   python3 tests/gpu/torch_model.py --bench cola-1b-h200 --device cuda --mode compile --gpu h200
#   python3 tests/gpu/torch_model.py --check tiny-cola --mutant rope_interleaved   # must FAIL
import argparse
import json
import math
import os
import random
import re
import shlex
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROJS = ("q", "k", "v", "o", "gate", "up", "down")
MASK64 = (1 << 64) - 1
# Deliberate mistakes (tests/sh/torch_model.sh checks that --check catches each one)
MUTANTS = {
    "rope_interleaved": "RoPE pairs (2i, 2i+1) instead of LLaMA's (i, i + head_dim/2)",
    "no_final_norm": "the final RMSNorm left out",
    "gate_silu": "an extra SiLU on the MLP gate of a low-rank model",
    "decay_all": "AdamW weight decay on embed, head and the norms too",
}


class BadInput(Exception):
    """Bad input (exit 2): an unknown run, a plan this script cannot read, a wrong flag."""


class Failure(Exception):
    """A failure while running (exit 1): BOOST or PyTorch stopped with an error."""


# ---------------------------------------------------------------- the plan (docs/plan-format.md)
def _keyvals(fields):
    out = {}
    for f in fields:
        if "=" in f:
            k, v = f.split("=", 1)
            out[k] = v
    return out


def _base(operand):
    """Buffer or param name of an operand `NAME` or `NAME+OFF`."""
    return operand.split("+", 1)[0]


class Config:
    """What a plan says about the model and its training, canonical (independent of tp/layout)."""

    def __init__(self, path):
        self.path = path
        self.canons = {}          # name -> dict(rows, cols, init, std, decay), in plan order
        parts = {}                # local param -> [canon names]
        gemms, acts, glus = [], [], []
        section = None
        with open(path) as f:
            lines = f.read().splitlines()
        if not lines or lines[0].strip() != "boost-plan 1":
            raise BadInput(f"{path}:1: not a version-1 BOOST plan (first line {lines[0] if lines else ''!r}): "
                           "regenerate it with 'boost gen'")
        for no, line in enumerate(lines, 1):
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            kind, kv = fields[0], _keyvals(fields[1:])
            try:
                if kind == "model":
                    self.model = kv
                elif kind == "run":
                    self.run = kv
                elif kind == "train":
                    self.train = kv
                elif kind == "data":
                    self.data = kv
                elif kind == "canon":
                    rows, cols = (int(x) for x in kv["shape"].split("x"))
                    self.canons[fields[1]] = {"rows": rows, "cols": cols, "init": kv["init"],
                                              "std": float(kv["std"]), "decay": int(kv["decay"])}
                elif kind == "part":
                    parts.setdefault(fields[1], []).append(kv["canon"])
                elif kind == "section":
                    section = fields[1]
                elif section == "forward" and kind in ("gemm", "batched_gemm", "member"):
                    gemms.append(kv)
                elif section == "forward" and kind == "kernel" and fields[1] == "bottleneck_act":
                    acts.append(kv)
                elif section == "forward" and kind == "kernel" and fields[1] == "glu_fwd":
                    glus.append(kv)
            except (KeyError, ValueError) as e:
                raise BadInput(f"{path}:{no}: cannot read this {kind} line ({e})")
        for need in ("model", "run", "train"):
            if not hasattr(self, need):
                raise BadInput(f"{path}: no '{need}' line")
        if not hasattr(self, "data"):
            self.data = {}
        m, r, t = self.model, self.run, self.train
        try:
            self.name, self.family = m["name"], m.get("family", "")
            self.hidden, self.layers = int(m["hidden"]), int(m["layers"])
            self.heads, self.kv_heads = int(m["heads"]), int(m.get("kv_heads", m["heads"]))
            self.head_dim, self.ffn, self.vocab = int(m["head_dim"]), int(m["ffn"]), int(m["vocab"])
            self.eps, self.rope_theta = float(m["eps"]), float(m["rope_theta"])
            self.lax = int(m.get("lax", 0))
            self.run_name, self.gpu = r["name"], r.get("gpu", "")
            self.micro_batch, self.seq = int(r["micro_batch"]), int(r["seq"])
            self.grad_accum = int(r.get("grad_accum", 1))
            self.steps, self.warmup = int(t["steps"]), int(t["warmup"])
            self.lr, self.min_lr = float(t["lr"]), float(t["min_lr"])
            self.beta1, self.beta2 = float(t["beta1"]), float(t["beta2"])
            self.adam_eps, self.weight_decay = float(t["adam_eps"]), float(t["weight_decay"])
            self.clip, self.seed = float(t["clip"]), int(t["seed"], 0)
            self.data_path = self.data.get("path", "")
            self.val_fraction = float(self.data.get("val_fraction", 0))
        except (KeyError, ValueError) as e:
            raise BadInput(f"{path}: the model/run/train lines lack or garble {e}")

        # how each projection is parametrised: dense W, or A [d_in, r] -> sigma -> B [r, d_out]
        self.proj = {}
        if any(re.fullmatch(r"L\d+\.router\.W", n) for n in self.canons):
            raise BadInput(f"{path}: {self.name} has MoE layers (a router and experts), which this PyTorch model "
                           "does not implement: compare a dense or low-rank model")
        for i in range(self.layers):
            for p in PROJS:
                pre = f"L{i}.{p}"
                if pre + ".W" in self.canons:
                    self.proj[i, p] = ("full", 0)
                elif pre + ".A" in self.canons and pre + ".B" in self.canons:
                    self.proj[i, p] = ("lowrank", self.canons[pre + ".A"]["cols"])
                else:
                    raise BadInput(f"{path}: no canonical tensor for projection {pre} (neither {pre}.W nor {pre}.A/.B)")
        # sigma of each bottleneck: the bottleneck_act after the GEMM with that projection's A
        self.act = {}
        for a in acts:
            h = _base(a.get("h", ""))
            for g in gemms:
                if _base(g.get("C", "")) != h:
                    continue
                for op in (g.get("A", ""), g.get("B", "")):
                    for canon in parts.get(_base(op), []):
                        mm = re.fullmatch(r"L(\d+)\.(\w+)\.A", canon)
                        if mm:
                            self.act[int(mm.group(1)), mm.group(2)] = int(a.get("act", 0)) == 1
        default_act = self.family not in ("svd", "usv")
        self.act_guessed = []
        for key, (kind, _) in self.proj.items():
            if kind == "lowrank" and key not in self.act:
                self.act[key] = default_act
                self.act_guessed.append(f"L{key[0]}.{key[1]}")
        if self.act_guessed:
            print(f"torch_model.py: {path}: no bottleneck_act step names the sigma of {', '.join(self.act_guessed[:4])}"
                  f"{' ...' if len(self.act_guessed) > 4 else ''}: taking the {self.family} default "
                  f"({'silu' if default_act else 'identity'})", file=sys.stderr)
        # the MLP gate's activation (SwiGLU for dense models, none for CoLA's gate * up)
        self.gate_act = {}
        for g in glus:
            mm = re.match(r"L(\d+)\.", g.get("gate", ""))
            if mm:
                self.gate_act[int(mm.group(1))] = int(g.get("act", 0)) == 1
        for i in range(self.layers):
            if i not in self.gate_act:
                self.gate_act[i] = self.family == "full"

    def lr_at(self, step):
        """The schedule of runtime/exec.c engine_lr_at: linear warmup, then cosine to min_lr."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        span = self.steps - self.warmup
        if span <= 0:
            return self.min_lr
        progress = min(1.0, (step - self.warmup) / span)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * progress))

    def describe(self):
        kinds = sorted({f"{k}{'' if k == 'full' else ' r=' + str(r)}" for (k, r) in self.proj.values()})
        sig = sorted({"silu" if a else "identity" for a in self.act.values()})
        if sig:
            kinds.append("sigma " + "/".join(sig))
        kinds.append("gate " + "/".join(sorted({"silu" if a else "identity" for a in self.gate_act.values()})))
        return (f"{self.name} ({self.family}, {self.layers} layers, hidden {self.hidden}, heads {self.heads}/"
                f"{self.kv_heads} kv, ffn {self.ffn}, vocab {self.vocab}; {', '.join(kinds)}"
                f"{', LaX' if self.lax else ''})")


# ---------------------------------------------------------------- checkpoints (safetensors)
def read_safetensors(torch, path, names=None):
    """{name: float32 tensor} of an F32 safetensors file (only `names` when given)."""
    out = {}
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            base = 8 + n
            for name, info in header.items():
                if name == "__metadata__" or (names is not None and name not in names):
                    continue
                if info.get("dtype") != "F32":
                    raise BadInput(f"{path}: tensor {name} is {info.get('dtype')}, expected F32")
                b, e = info["data_offsets"]
                f.seek(base + b)
                buf = bytearray(f.read(e - b))
                out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(info["shape"]).clone()
    except (OSError, ValueError, KeyError, struct.error) as e:
        raise BadInput(f"{path}: not a readable safetensors file ({e})")
    return out


# ---------------------------------------------------------------- data (runtime/data.c's order)
def splitmix64_next(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def resolve_data(path):
    if path == "corpus":
        return os.path.join(ROOT, "build", "corpus.txt")
    if not os.path.isabs(path) and not os.path.exists(path) and os.path.exists(os.path.join(ROOT, path)):
        return os.path.join(ROOT, path)
    return path


def load_tokens(path):
    """A token list from an llm.c .bin token file or from text through the byte tokenizer."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise BadInput(f"{path}: cannot read the training data ({e.strerror})")
    if not path.endswith(".bin"):
        return list(raw)
    if len(raw) < 1024:
        raise BadInput(f"{path}: shorter than the 1024-byte header of a token file")
    magic, version, count = struct.unpack_from("<3i", raw, 0)
    if magic != 20240520 or version != 1 or len(raw) != 1024 + 2 * count:
        raise BadInput(f"{path}: not an llm.c token file (magic {magic}, version {version}, {count} tokens)")
    return list(struct.unpack_from(f"<{count}H", raw, 1024))


def write_token_file(path, tokens):
    head = struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253))
    with open(path, "wb") as f:
        f.write(head + struct.pack(f"<{len(tokens)}H", *tokens))


def permute(x, n, seed, epoch):
    """Window x's place in epoch's order: runtime/data.c permute, a 4-round Feistel network over the
    smallest even number of bits that holds n (keys from seed and epoch), cycle-walked into [0, n)."""
    bits = 2
    while bits < 62 and (1 << bits) < n:
        bits += 1
    bits += bits & 1
    half = bits // 2
    mask = (1 << half) - 1
    state = (seed ^ ((0xD1B54A32D192ED03 * (epoch + 1)) & MASK64)) & MASK64
    keys = []
    for _ in range(4):
        state, z = splitmix64_next(state)
        keys.append(z)
    y = x
    while True:
        left, right = y >> half, y & mask
        for k in keys:
            _, f = splitmix64_next((right ^ k) & MASK64)
            left, right = right, left ^ (f & mask)
        y = (left << half) | right
        if y < n:
            return y


def train_batches(tokens, val_fraction, micro_batch, seq, seed, positions):
    """[(inputs, targets)] of the training micro-batches at these data positions (in micro-batches),
    each a list of micro_batch*seq ints: windows of seq+1 tokens every seq tokens, stream position k
    reading window permute(k mod windows) of epoch k div windows (runtime/data.c batcher_global)."""
    n = len(tokens)
    train_len = n - int(n * val_fraction)
    windows = (train_len - 1) // seq if train_len > 1 else 0
    if windows < micro_batch:
        raise BadInput(f"the data holds {windows} training windows of {seq + 1} tokens, fewer than micro_batch {micro_batch}")
    out = []
    for pos in positions:
        inputs, targets = [], []
        for b in range(micro_batch):
            k = pos * micro_batch + b
            epoch, idx = divmod(k, windows)
            start = permute(idx, windows, seed, epoch) * seq
            inputs += tokens[start:start + seq]
            targets += tokens[start + 1:start + seq + 1]
        out.append((inputs, targets))
    return out


# ---------------------------------------------------------------- the model
def build_model(torch, cfg, mutant=None):
    nn, F = torch.nn, torch.nn.functional
    d, H, KV, HD = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim
    eps = cfg.eps
    has_gqa_flag = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")

    def rmsnorm(x, g):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), g, eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    def rope(x, cos, sin):   # x [B, S, heads, HD]; cos, sin [S, HD/2]: pairs (i, i + HD/2)
        half = x.shape[-1] // 2
        if mutant == "rope_interleaved":
            x = x.unflatten(-1, (half, 2)).transpose(-1, -2).flatten(-2)
        c, s = cos.to(x.dtype)[:, None, :], sin.to(x.dtype)[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * c - b * s, b * c + a * s], dim=-1)

    def new(rows, cols):
        return nn.Parameter(torch.empty(rows, cols))

    class Block(nn.Module):
        """One decoder layer; parameters named like the canonical tensors with '.' -> '_'."""

        def __init__(self, i):
            super().__init__()
            self.attn_norm, self.mlp_norm = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
            self.kind, self.sigma, self.gate_silu = {}, {}, cfg.gate_act[i] or mutant == "gate_silu"
            for p in PROJS:
                c = cfg.canons
                kind, _ = cfg.proj[i, p]
                self.kind[p] = kind
                if kind == "full":
                    w = c[f"L{i}.{p}.W"]
                    setattr(self, p + "_W", new(w["rows"], w["cols"]))
                else:
                    a, b = c[f"L{i}.{p}.A"], c[f"L{i}.{p}.B"]
                    setattr(self, p + "_A", new(a["rows"], a["cols"]))
                    setattr(self, p + "_B", new(b["rows"], b["cols"]))
                    self.sigma[p] = cfg.act[i, p]
                    if f"L{i}.{p}.S" in c:           # U S V^T: an r x r core after sigma
                        s = c[f"L{i}.{p}.S"]
                        setattr(self, p + "_S", new(s["rows"], s["cols"]))

        def latent(self, p, x):                      # z = sigma(x @ A) (@ S)  [.., r]; dense: x
            if self.kind[p] == "full":
                return x
            h = x @ getattr(self, p + "_A")
            h = F.silu(h) if self.sigma[p] else h
            core = getattr(self, p + "_S", None)
            return h if core is None else h @ core

        def up(self, p, z, z_prev=None):             # (z + z_prev under LaX) @ B; dense: x @ W
            if self.kind[p] == "full":
                return z @ getattr(self, p + "_W")
            if cfg.lax and z_prev is not None:
                z = z + z_prev
            return z @ getattr(self, p + "_B")

        def forward(self, x, cos, sin):              # x [B, S, d]
            B, S, _ = x.shape
            n1 = rmsnorm(x, self.attn_norm)
            zv = self.latent("v", n1)
            q = rope(self.up("q", self.latent("q", n1)).view(B, S, H, HD), cos, sin).transpose(1, 2)
            k = rope(self.up("k", self.latent("k", n1)).view(B, S, KV, HD), cos, sin).transpose(1, 2)
            v = self.up("v", zv).view(B, S, KV, HD).transpose(1, 2)
            if KV != H and has_gqa_flag:              # query head h reads kv head h // (H/KV)
                att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                if KV != H:
                    k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
                att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            att = att.transpose(1, 2).reshape(B, S, H * HD)
            zo = self.latent("o", att)
            x = x + self.up("o", zo, zv)
            n2 = rmsnorm(x, self.mlp_norm)
            gate = self.up("gate", self.latent("gate", n2), zo)
            if self.gate_silu:
                gate = F.silu(gate)
            zu = self.latent("up", n2)
            hidden = gate * self.up("up", zu, zo)
            return x + self.up("down", self.latent("down", hidden), zu)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = new(cfg.vocab, d)
            self.layers = nn.ModuleList(Block(i) for i in range(cfg.layers))
            self.final_norm = nn.Parameter(torch.ones(d))
            self.head = new(d, cfg.vocab)
            half = HD // 2
            inv = cfg.rope_theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / HD)
            ang = torch.arange(cfg.seq, dtype=torch.float64)[:, None] * inv[None, :]
            self.register_buffer("cos", ang.cos().float(), persistent=False)
            self.register_buffer("sin", ang.sin().float(), persistent=False)

        def canon(self, name):
            """The parameter holding canonical tensor `name` (norms are [d] here, 1 x d in the plan)."""
            if name in ("embed", "head", "final_norm"):
                return getattr(self, name)
            i, rest = name[1:].split(".", 1)
            return getattr(self.layers[int(i)], rest.replace(".", "_"))

        def body(self, tokens):                      # tokens [B, S] -> final hidden [B, S, d]
            x = F.embedding(tokens, self.embed)
            for blk in self.layers:
                x = blk(x, self.cos[:tokens.shape[1]], self.sin[:tokens.shape[1]])
            return x

        def head_loss(self, x, targets):             # mean cross-entropy over the tokens
            if mutant != "no_final_norm":
                x = rmsnorm(x, self.final_norm)
            logits = x @ self.head
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

        def forward(self, tokens, targets):
            return self.head_loss(self.body(tokens), targets)

    return Model()


def init_params(torch, cfg, model, generator=None):
    """Fresh weights with the plan's init (the distribution, not BOOST's exact values)."""
    with torch.no_grad():
        for name, c in cfg.canons.items():
            p = model.canon(name)
            if c["init"] == "normal":
                p.normal_(0.0, c["std"], generator=generator)
            elif c["init"] == "ones":
                p.fill_(1.0)
            else:
                p.zero_()


def load_params(torch, cfg, model, tensors, path):
    with torch.no_grad():
        for name, c in cfg.canons.items():
            if name not in tensors:
                raise BadInput(f"{path}: no tensor {name}")
            t = tensors[name]
            p = model.canon(name)
            if t.numel() != p.numel():
                raise BadInput(f"{path}: {name} has {tuple(t.shape)}, the plan says {c['rows']}x{c['cols']}")
            p.copy_(t.reshape(p.shape))


class Trainer:
    """Forward/backward over grad_accum micro-batches, global-norm clipping and AdamW with the
    plan's hyper-parameters and schedule (docs/plan-format.md, "optimizer section")."""

    def __init__(self, torch, cfg, model, device, dtype, mutant=None, compile_scope=None, compile_opts=None):
        self.torch, self.cfg, self.model, self.device = torch, cfg, model, device
        self.autocast = dtype == "bf16"
        decay, no_decay = [], []
        for name, c in cfg.canons.items():
            (decay if (c["decay"] or mutant == "decay_all") else no_decay).append(model.canon(name))
        self.params = decay + no_decay
        kw = {"fused": True} if device.type == "cuda" else {"foreach": True}
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps, **kw)
        self.body, self.head_loss = model.body, model.head_loss
        if compile_scope == "model":
            self.body = torch.compile(model.body, **compile_opts)
            self.head_loss = torch.compile(model.head_loss, **compile_opts)
        elif compile_scope == "block":             # regional: one compiled layer reused by all layers
            for blk in model.layers:
                blk.compile(**compile_opts)
            self.head_loss = torch.compile(model.head_loss, **compile_opts)

    def forward_backward(self, batches):
        """batches: [(tokens [B, S], targets [B, S])] * grad_accum; returns the mean loss (tensor)."""
        torch, total = self.torch, 0.0
        for tokens, targets in batches:
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                loss = self.head_loss(self.body(tokens), targets)
            (loss / len(batches)).backward()
            total = total + loss.detach()
        return total / len(batches)

    def grads(self):
        return [p.grad if p.grad is not None else self.torch.zeros_like(p) for p in self.params]

    def optimizer_step(self, step):
        """Clip by the global norm (scale clip/norm when norm > clip), AdamW at lr_at(step), zero
        the gradients; returns the pre-clip norm (tensor, no host sync)."""
        torch = self.torch
        grads = self.grads()
        for p, g in zip(self.params, grads):
            p.grad = g
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        if self.cfg.clip > 0:
            scale = torch.where(norm > self.cfg.clip, self.cfg.clip / norm, torch.ones_like(norm))
            torch._foreach_mul_(grads, scale)
        lr = self.cfg.lr_at(step)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return norm


# ---------------------------------------------------------------- helpers
def import_torch(threads=None):
    import warnings
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    warnings.filterwarnings("ignore", message=".*numpy.*")
    try:
        import torch
    except ImportError:
        raise Failure("PyTorch is not importable here (pip install torch)")
    if threads:
        torch.set_num_threads(threads)
    return torch


def run_boost(boost, args, what):
    cmd = [boost] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    except OSError as e:
        raise Failure(f"{boost}: cannot run it ({e.strerror}): build it with 'make bin/boost'")
    if p.returncode != 0:
        tail = " | ".join((p.stderr.strip() or p.stdout.strip()).splitlines()[-3:])
        err = BadInput if p.returncode == 2 else Failure
        raise err(f"{what} failed (exit {p.returncode}): {' '.join(shlex.quote(a) for a in cmd)}: {tail}")
    return p.stdout


def defines(ds):
    out = []
    for d in ds or []:
        out += ["-D", d]
    return out


def plan_for(args, run, tmp):
    """Generate the run's plan into tmp/plan (or use --plan) and read it."""
    if args.plan:
        path = args.plan if args.plan.endswith(".txt") else os.path.join(args.plan, "plan.txt")
        return Config(path), os.path.dirname(path)
    out = os.path.join(tmp, "plan")
    run_boost(args.boost, ["gen", run] + defines(args.define) + ["-o", out], f"boost gen {run}")
    return Config(os.path.join(out, "plan.txt")), out


def gpu_peak_tflops(name):
    path = os.path.join(ROOT, "specs", "gpus", name + ".lua")
    try:
        with open(path) as f:
            m = re.search(r"^\s*bf16_tflops\s*=\s*([0-9.eE+]+)", f.read(), re.M)
    except OSError:
        raise BadInput(f"{path}: no such GPU spec (see specs/gpus/)")
    if not m:
        raise BadInput(f"{path}: no bf16_tflops")
    return float(m.group(1))


def rel(a, b):
    """Norm-wise relative difference |a - b| / |b| (0 when both are 0)."""
    nb = float(b.double().norm())
    nd = float((a.double() - b.double()).norm())
    return nd / nb if nb > 0 else (0.0 if nd == 0 else math.inf)


def update_rel(torch, w1, w1_boost, w0):
    """Relative difference of two updates of the same fp32 weights w0 (w1 - w0 against w1_boost - w0),
    counting per element only what exceeds one fp32 spacing of the new weight: both sides round
    the new weight to fp32, and near |w| = 1 that rounding is 1e-7, about 1e-3 of a typical update."""
    spacing = (torch.nextafter(w1_boost.abs(), torch.tensor(math.inf)) - w1_boost.abs()).double()
    err = ((w1.double() - w1_boost.double()).abs() - spacing).clamp(min=0)
    nb = float((w1_boost.double() - w0.double()).norm())
    ne = float(err.norm())
    return ne / nb if nb > 0 else (0.0 if ne == 0 else math.inf)


# ---------------------------------------------------------------- --check
# Tolerances, norm-wise relative: (loss, each gradient, AdamW on BOOST's gradients, the whole step).
# fp32 (BOOST's CPU backend against PyTorch in fp32): fixed, a few hundred times the rounding seen.
# bf16 (BOOST's CUDA backend, bf16 activations): against PyTorch in fp32, each tensor allowed
# BF16_NOISE times the difference PyTorch's own bf16 autocast makes from fp32 on the same step, and
# at least the floor given here (BOOST keeps the residual stream in bf16 too, PyTorch's autocast in
# fp32, so BOOST's own rounding is the larger; a wrong model differs by 0.1 to 1, see the mutants). The whole step is not judged in bf16: Adam's first update is about
# lr * sign(g), and bf16 flips the sign of the many gradients that are at its noise level.
TOLERANCES = {"fp32": (1e-5, 1e-4, 1e-4, 1e-2), "bf16": (2e-3, 3e-2, 2e-2, None)}
BF16_NOISE = 8.0


def check_one(args, run, mutant, tmp):
    label = run + (f" [mutant {mutant}]" if mutant else "")
    cfg, plan_dir = plan_for(args, run, tmp)
    torch = import_torch(args.threads)               # after the plan: a bad run fails fast
    if args.device == "cuda" and not torch.cuda.is_available():
        raise Failure("--device cuda: PyTorch sees no CUDA device here")
    print(f"# torch_model {label}: {cfg.describe()}")
    device = torch.device(args.device)
    # data: a small token file of random tokens (every id of the vocabulary can occur), or --data
    if args.data:
        data_path = resolve_data(args.data)
        tokens = load_tokens(data_path)
        val_fraction = cfg.val_fraction
    else:
        rng = random.Random(cfg.seed)
        windows = max(2 * cfg.micro_batch * cfg.grad_accum, 4)
        tokens = [rng.randrange(min(cfg.vocab, 65536)) for _ in range(windows * cfg.seq + 1)]
        data_path = os.path.join(tmp, "data.bin")
        write_token_file(data_path, tokens)
        val_fraction = 0.0
    common = ["--plan", plan_dir, "-D", f"data={data_path}", "-D", f"val_fraction={val_fraction}",
              "-D", "steps=1", "-D", "eval_every=0", "--backend", args.backend, "--quiet"]
    zero, one = os.path.join(tmp, "zero"), os.path.join(tmp, "one")
    # lr must be > 0 (common/train_settings.h): 1e-30 moves no weight of this model's scale by one ulp,
    # so this step's checkpoint holds the initial weights and the first step's AdamW moments
    run_boost(args.boost, ["train"] + common + ["-D", "lr=1e-30", "-D", "min_lr=0", "-D", "clip=0", "-o", zero,
                                               "--log", zero + ".jsonl"], f"boost train {run} (lr 1e-30)")
    run_boost(args.boost, ["train"] + common + ["-o", one, "--log", one + ".jsonl"], f"boost train {run} (one step)")
    with open(zero + ".jsonl") as f:
        boost_log = [json.loads(x) for x in f if x.strip().startswith("{")]
    first = next((r for r in boost_log if "grad_norm" in r and "loss" in r), None)   # step 1 (not a validation line)
    if first is None:
        raise Failure(f"{zero}.jsonl: BOOST logged no training step")
    boost_loss, log_norm = float(first["loss"]), float(first["grad_norm"])
    cfg.steps = 1                                   # the schedule of the one-step run
    names = list(cfg.canons)
    w0 = read_safetensors(torch, os.path.join(zero, "step-000001", "model.safetensors"), set(names))
    m1 = read_safetensors(torch, os.path.join(zero, "step-000001", "optimizer.safetensors"),
                          {"m." + n for n in names})
    w1 = read_safetensors(torch, os.path.join(one, "step-000001", "model.safetensors"), set(names))
    boost_grads = {n: m1["m." + n] / (1.0 - cfg.beta1) for n in names}   # m = (1 - beta1) g at step 1

    batches = train_batches(tokens, val_fraction, cfg.micro_batch, cfg.seq, cfg.seed, range(cfg.grad_accum))
    shape = (cfg.micro_batch, cfg.seq)
    batches = [(torch.tensor(i, dtype=torch.long, device=device).view(shape),
                torch.tensor(t, dtype=torch.long, device=device).view(shape)) for i, t in batches]

    def fresh(dtype):
        with device:
            model = build_model(torch, cfg, mutant)
        load_params(torch, cfg, model, {n: w.to(device) for n, w in w0.items()}, zero)
        return model, Trainer(torch, cfg, model, device, dtype, mutant)

    def loss_and_grads(dtype):
        model, tr = fresh(dtype)
        loss = float(tr.forward_backward(batches))
        grads = {}
        for n in names:
            g = model.canon(n).grad                 # None: the model never uses the tensor (a mutant)
            g = torch.zeros_like(model.canon(n)) if g is None else g
            grads[n] = g.detach().float().cpu().reshape(boost_grads[n].shape).clone()   # the step clips in place
        return loss, grads, model, tr

    def flat(gs):
        return torch.cat([gs[n].reshape(-1) for n in names])

    # 1. the model: loss and gradients on BOOST's weights and first batch (in --dtype, and the fp32
    #    reference that bf16 is judged against)
    loss, grads, model, tr = loss_and_grads(args.dtype)
    per = {n: {"grad_norm": float(grads[n].norm()), "grad_norm_boost": float(boost_grads[n].norm()),
               "grad_rel": rel(boost_grads[n], grads[n])} for n in names}
    # 2. the whole step: AdamW on its own gradients
    tr.optimizer_step(0)
    for n in names:
        per[n]["update_rel"] = update_rel(torch, model.canon(n).detach().float().cpu().reshape(w0[n].shape), w1[n], w0[n])
    del model, tr
    tol_loss, tol_grad, tol_adamw, tol_step = TOLERANCES[args.dtype]
    if args.tol_grad is not None:
        tol_grad = args.tol_grad
    if args.dtype == "fp32":
        ref_loss, ref = loss, grads
        for n in names:
            per[n]["grad_tol"] = tol_grad
        loss_tol = tol_loss
    else:
        ref_loss, ref, _, _ = loss_and_grads("fp32")
        for n in names:
            noise = rel(grads[n], ref[n])            # what bf16 autocast does to PyTorch's own gradient
            per[n]["grad_rel_torch_bf16_vs_fp32"] = noise
            per[n]["grad_rel"] = rel(boost_grads[n], ref[n])
            per[n]["grad_rel_boost_vs_torch_bf16"] = rel(boost_grads[n], grads[n])
            per[n]["grad_tol"] = max(tol_grad, BF16_NOISE * noise)
        loss_tol = max(tol_loss, BF16_NOISE * abs(loss - ref_loss) / abs(ref_loss))
    # 3. the optimizer alone: AdamW on BOOST's gradients, from BOOST's weights
    model, tr = fresh(args.dtype)
    for n in names:
        model.canon(n).grad = boost_grads[n].to(device).reshape(model.canon(n).shape).clone()
    tr.optimizer_step(0)
    for n in names:
        per[n]["adamw_rel"] = update_rel(torch, model.canon(n).detach().float().cpu().reshape(w0[n].shape), w1[n], w0[n])
    del model, tr

    flat_t, flat_b, flat_r = flat(grads), flat(boost_grads), flat(ref)
    # the worst tensor of each measure; a NaN counts as worse than any number (max() alone would skip
    # it, and the verdicts below, written `x <= tol`, fail on a NaN)
    nan_high = lambda v: math.inf if v != v else v
    worst = {k: max(names, key=lambda n: nan_high(per[n][k])) for k in ("update_rel", "adamw_rel")}
    worst["grad_rel"] = max(names, key=lambda n: nan_high(per[n]["grad_rel"] / per[n]["grad_tol"]))
    wg = per[worst["grad_rel"]]
    ref_note = "" if args.dtype == "fp32" else " fp32"
    rec = {"run": run, "model": cfg.name, "mutant": mutant, "boost_backend": args.backend, "device": args.device,
           "dtype": args.dtype, "micro_batch": cfg.micro_batch, "seq": cfg.seq,
           "loss": loss, "loss_ref_fp32": ref_loss, "loss_boost": boost_loss,
           "loss_rel": abs(boost_loss - ref_loss) / abs(ref_loss), "loss_tol": loss_tol,
           "grad_norm": float(flat_t.norm()), "grad_norm_boost": float(flat_b.norm()), "grad_norm_boost_log": log_norm,
           "grads_rel_all": rel(flat_b, flat_r), "grads_rel_all_torch_dtype": rel(flat_b, flat_t),
           "worst": {k: [n, per[n][k]] for k, n in worst.items()},
           "tolerances": {"loss": loss_tol, "grad": tol_grad, "adamw": tol_adamw, "step": tol_step,
                          "bf16_noise_factor": BF16_NOISE if args.dtype == "bf16" else None},
           "tensors": per}
    verdicts = [
        ("loss", rec["loss_rel"] <= loss_tol,
         f"BOOST {boost_loss:.6g} vs PyTorch{ref_note} {ref_loss:.6g} (relative {rec['loss_rel']:.2g}, tolerance "
         f"{loss_tol:.2g}{'' if args.dtype == 'fp32' else f'; PyTorch bf16 {loss:.6g}'})"),
        ("gradient norm", abs(float(flat_b.norm()) - log_norm) <= 1e-4 * log_norm,
         f"BOOST's gradients as read from its AdamW moment {float(flat_b.norm()):.6g}, its log {log_norm:.6g} "
         f"(tolerance 1e-4 relative); PyTorch{ref_note} {float(flat_r.norm()):.6g}"),
        ("gradients", wg["grad_rel"] <= wg["grad_tol"],
         f"{len(names)} gradients, worst relative difference {wg['grad_rel']:.2g} ({worst['grad_rel']}, tolerance "
         f"{wg['grad_tol']:.2g}); all together {rec['grads_rel_all']:.2g}"
         + ("" if args.dtype == "fp32" else f" (PyTorch bf16 vs fp32: {rel(flat_t, flat_r):.2g})")),
        ("AdamW on BOOST's gradients", per[worst["adamw_rel"]]["adamw_rel"] <= tol_adamw,
         f"weights after one step, largest relative difference of the update {per[worst['adamw_rel']]['adamw_rel']:.2g} "
         f"({worst['adamw_rel']}; tolerance {tol_adamw:g})"),
    ]
    step_msg = (f"weights after one step, largest relative difference of the update "
                f"{per[worst['update_rel']]['update_rel']:.2g} ({worst['update_rel']}")
    if tol_step is not None:
        verdicts.append(("one training step", per[worst["update_rel"]]["update_rel"] <= tol_step,
                         step_msg + f"; tolerance {tol_step:g})"))
    else:
        print(f"# torch_model {label}: one training step: {step_msg}; not judged in {args.dtype})")
    rec["pass"] = all(v for _, v, _ in verdicts)
    for what, good, msg in verdicts:
        print(f"{'ok' if good else 'FAIL'} - torch_model {label} ({args.dtype}, BOOST {args.backend}): {what}: {msg}")
    return rec


def do_check(args):
    mutants = [m for m in (args.mutant or "").split(",") if m] or [None]
    for m in mutants:
        if m and m not in MUTANTS:
            raise BadInput(f"--mutant {m}: unknown; choose from {', '.join(MUTANTS)}")
    recs = []
    for run in args.runs:
        for m in mutants:
            with tempfile.TemporaryDirectory(prefix="torch-model.") as tmp:
                if args.keep:
                    tmp = os.path.join(args.keep, run + (f"-{m}" if m else ""))
                    os.makedirs(tmp, exist_ok=True)
                try:
                    rec = check_one(args, run, m, tmp)
                except Failure as e:
                    print(f"FAIL - torch_model {run}: {e}")
                    rec = {"run": run, "mutant": m, "pass": False, "error": str(e)}
            recs.append(rec)
            line = json.dumps(rec if args.tensors else {k: v for k, v in rec.items() if k != "tensors"})
            print(line)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    return 0 if all(r["pass"] for r in recs) else 1


# ---------------------------------------------------------------- --bench
def bench_mode(torch, args, cfg, mode, flops_per_token, peak):
    device = torch.device(args.device)
    gen = torch.Generator(device="cpu").manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)      # eager and compile start from the same weights and data: their
    with device:                                 # first losses agree when they compute the same model
        model = build_model(torch, cfg)
    init_params(torch, cfg, model)
    scope = args.compile_scope if mode == "compile" else None
    opts = {"backend": args.compile_backend}
    if args.compile_mode:
        opts["mode"] = args.compile_mode
    tr = Trainer(torch, cfg, model, device, args.dtype, compile_scope=scope, compile_opts=opts)
    shape = (cfg.micro_batch, cfg.seq + 1)
    data = [torch.randint(0, cfg.vocab, shape, generator=gen).to(device) for _ in range(4)]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    budget_end = time.time() + args.max_seconds if args.max_seconds else None
    for s in range(args.steps):
        batches = []
        for a in range(cfg.grad_accum):
            d = data[(s * cfg.grad_accum + a) % len(data)]
            batches.append((d[:, :-1], d[:, 1:]))
        sync()
        t0 = time.perf_counter()
        loss = tr.forward_backward(batches)
        tr.optimizer_step(s)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        if budget_end and time.time() > budget_end and s + 1 > args.warmup_steps + 1:
            break
    losses = [float(x) for x in losses]
    steady = times[args.warmup_steps:] or times[-1:]
    step_s = statistics.median(steady)
    tokens = cfg.micro_batch * cfg.seq * cfg.grad_accum
    tps = tokens / step_s
    rec = {"run": cfg.run_name, "model": cfg.name, "mode": mode, "device": args.device, "dtype": args.dtype,
           "compile_backend": args.compile_backend if mode == "compile" else None,
           "compile_scope": scope, "micro_batch": cfg.micro_batch, "seq": cfg.seq, "grad_accum": cfg.grad_accum,
           "tokens_per_step": tokens, "steps": len(times), "steady_steps": len(steady),
           "first_step_s": round(times[0], 3), "step_ms_median": round(step_s * 1e3, 3), "tokens_per_s": round(tps, 1),
           "flops_per_token": flops_per_token, "gpu": args.gpu or cfg.gpu, "peak_tflops": peak,
           "mfu": round(flops_per_token * tps / (peak * 1e12), 4) if device.type == "cuda" and peak else None,
           "loss_first": losses[0], "loss_last": losses[-1],
           "max_mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.type == "cuda" else None,
           "torch": torch.__version__,
           "cmd": "python3 tests/gpu/torch_model.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])}
    del tr, model, data
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec


def do_bench(args):
    if len(args.runs) != 1:
        raise BadInput("--bench takes one run")
    torch = import_torch(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise Failure("--device cuda: PyTorch sees no CUDA device here")
    run = args.runs[0]
    with tempfile.TemporaryDirectory(prefix="torch-bench.") as tmp:
        cfg, _ = plan_for(args, run, tmp)
    report = json.loads(run_boost(args.boost, ["report", run, "--json"] + defines(args.define), f"boost report {run}"))
    fpt = float(report["flops_per_token"])
    peak = gpu_peak_tflops(args.gpu or cfg.gpu) if (args.gpu or cfg.gpu) else None
    modes = ["eager", "compile"] if args.mode == "both" else [args.mode]
    for mode in modes:
        try:
            rec = bench_mode(torch, args, cfg, mode, fpt, peak)
        except Exception as e:   # one mode failing (out of memory, a compile error) leaves the other
            rec = {"run": run, "mode": mode, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        print(json.dumps(rec), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if "error" in rec:
            return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description="BOOST's models in PyTorch: --check against BOOST, --bench tokens/s and MFU")
    job = ap.add_mutually_exclusive_group(required=True)
    job.add_argument("--check", action="store_true", help="one step against BOOST's (runs: the positional RUNs)")
    job.add_argument("--bench", action="store_true", help="tokens/s and MFU of training the RUN")
    ap.add_argument("runs", nargs="+", metavar="RUN", help="run specs (names under specs/runs/ or paths)")
    ap.add_argument("-D", dest="define", action="append", metavar="name=value", help="passed to boost gen/report")
    ap.add_argument("--boost", default=os.path.join(ROOT, "bin", "boost"), help="the boost binary")
    ap.add_argument("--plan", help="use this generated plan (plan.txt or its folder) instead of generating one")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="PyTorch's device")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), help="fp32, or bf16 autocast over fp32 weights "
                    "(default: bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--threads", type=int, help="CPU threads for PyTorch")
    ap.add_argument("--json", help="append the JSON records to this file too")
    ch = ap.add_argument_group("--check")
    ch.add_argument("--backend", default="cpu", choices=("cpu", "cuda"), help="BOOST's backend (default cpu)")
    ch.add_argument("--data", help="train on this data (the run's loader order) instead of a random token file")
    ch.add_argument("--mutant", help="comma-separated deliberate mistakes (" + ", ".join(MUTANTS) + ")")
    ch.add_argument("--tol-grad", type=float, help="tolerance of the per-tensor gradient difference")
    ch.add_argument("--tensors", action="store_true", help="print every tensor's figures on the JSON line")
    ch.add_argument("--keep", help="keep BOOST's plan, data and checkpoints under this folder")
    be = ap.add_argument_group("--bench")
    be.add_argument("--mode", default="both", choices=("eager", "compile", "both"))
    be.add_argument("--steps", type=int, default=12, help="training steps per mode (default 12)")
    be.add_argument("--warmup-steps", type=int, default=3, help="steps left out of the median (default 3)")
    be.add_argument("--max-seconds", type=float, help="stop a mode's steps after this long (after warm-up)")
    be.add_argument("--gpu", help="GPU spec under specs/gpus/ for the MFU peak (default: the run's)")
    be.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    be.add_argument("--compile-mode", help="torch.compile mode (default: torch's default)")
    be.add_argument("--compile-scope", default="block", choices=("block", "model"),
                    help="compile each decoder layer (default; one compile reused by every layer) or the whole model")
    args = ap.parse_args()
    if args.dtype is None:
        args.dtype = "bf16" if args.device == "cuda" else "fp32"
    if args.bench and args.warmup_steps >= args.steps:
        ap.error("--warmup-steps must be smaller than --steps")
    try:
        return do_check(args) if args.check else do_bench(args)
    except BadInput as e:
        print(f"torch_model.py: {e}", file=sys.stderr)
        return 2
    except Failure as e:
        print(f"torch_model.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
