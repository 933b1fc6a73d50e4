#!/usr/bin/env python3
# torch_ref.py: an independent PyTorch (float64, CPU) implementation of the tiny CoLA model and its
# GQA, LaX and SVD variants, written from docs/plan-format.md and the CoLA math; it writes the
# reference states tests/data/torch_ref*_v1.bin that tests/unit/test_torch_ref.c compares the engine
# against (tp=1/2/4, btp/naive layouts, feature variants).
#
# Regenerate the committed files (deterministic; needs only torch, runs in a few seconds):
#     python3 tests/torch_ref.py                      # writes every tests/data/torch_ref_*v1.bin
#     python3 tests/torch_ref.py --model tiny-lax     # one of them (MODELS below)
#     python3 tests/torch_ref.py -o /tmp/x.bin        # tiny-cola (or --model) somewhere else
#     python3 tests/torch_ref.py --outdir /tmp/refs   # all of them somewhere else
#     python3 tests/torch_ref.py --compare A.bin B.bin   # decode two files, report differences
#     python3 tests/torch_ref.py --mutant NAME -o X.bin  # a deliberately wrong reference (tests)
# Regenerate whenever specs/models/tiny-*.lua change a size (the C test checks each plan's model
# line against the config stored here and says so when they disagree).
#
# The model (CoLA, every projection low rank): for each of q,k,v,o,gate,up,down
#     proj(x) = silu(x @ A) @ B                     A: [d_in, r], B: [r, d_out]
# decoder layer: h = x + o(attn(rope(q(n1)), rope(k(n1)), v(n1))),  n1 = rmsnorm(x, attn_norm)
#                y = h + down(gate(n2) * up(n2)),                      n2 = rmsnorm(h, mlp_norm)
# then logits = rmsnorm(x_L, final_norm) @ head; loss = mean cross-entropy over the M tokens.
# Variants (MODELS below): tiny-cola-gqa (2 kv heads: query head h uses kv head h // 2), tiny-svd
# (identity instead of silu), tiny-lax (B's input z_p + z_prev(p), z = sigma(x @ A): prev(o) = v,
# prev(gate) = prev(up) = o, prev(down) = up, as gen/model.h defines it), tiny-llama (dense
# projections x @ W, W: [d_in, d_out], init std 0.02, and the SwiGLU MLP down(silu(gate) * up)).
# RMSNorm: x * (mean(x^2) + eps)^-1/2 * gamma; RoPE: rotate_half pairs (i, i + head_dim/2) at
# angle p * theta^(-2i/head_dim), p = position in the sequence; attention causal, scale head_dim^-1/2.
#
# File format (all little-endian), version 1:
#     char magic[8] = "BOOSTREF"; int32 version = 1
#     int32 n_ints;   n_ints   x { int32 len; char name[len]; int64 value }
#     int32 n_floats; n_floats x { int32 len; char name[len]; float64 value }
#     int32 n_tensors; n_tensors x tensor
# tensor: int32 len; char name[len]; int32 rows; int32 cols; int32 enc; int32 nsel;
#     nsel >= 0: nsel int32 row indices follow; only those rows are stored, all other rows are 0
#     nsel == -1: every row is stored, in order
#     enc 0 (f32): stored rows x cols float32, row-major
#     enc 1 (f24): the same, 3 bytes each: the upper 24 bits of the float32 (rounded to nearest),
#                  the lower 8 bits are zero (relative precision 2^-16: well below the tolerances)
#     enc 2 (normal): no data; uint64 seed; float64 mean; float64 std; element (i, j) is
#                  float32(mean + std * N(seed, i*cols + j)), N the counter-based normal of
#                  docs/plan-format.md (splitmix64, Box-Muller). Weights are stored this way: the
#                  file stays small and any block of a weight can be rebuilt exactly.
# Tensors: tokens, targets [micro_batch, seq]; every canonical weight (by its canonical name;
# matrices with the plan's seed rule FNV-1a64(name) ^ seed and the doc's init std, norm gammas
# random around 1 so that the gamma paths are exercised); logits [M, vocab]; loss [1, 1];
# grad.NAME for every weight (all_grads=1) or a chosen subset; opt.lr, opt.grad_norm (pre-clip),
# opt.loss (loss on the same batch after each AdamW step) [1, opt_steps]; opt.delta.NAME [1, 1] =
# |W after opt_steps - W before|. AdamW as the doc's optimizer section: global-norm clip, bias
# correction, decay on every matrix but embed and head.
import argparse
import math
import os
import struct
import sys

MAGIC = b"BOOSTREF"
VERSION = 1
ENC_F32, ENC_F24, ENC_NORMAL = 0, 1, 2
MASK64 = (1 << 64) - 1

# The tiny CoLA model (specs/models/tiny-cola.lua) and the run settings the C test passes as -D.
CONFIG_INTS = {
    "hidden": 128, "layers": 2, "heads": 4, "kv_heads": 4, "head_dim": 32, "ffn": 352,
    "vocab": 256, "rank": 32,
    "micro_batch": 2, "seq": 16,
    "seed": 1234,          # the run's seed: weight seeds are FNV-1a64(name) ^ seed
    "data_seed": 7,        # torch RNG seed of the tokens, targets and norm gammas
    "opt_steps": 3, "warmup": 4, "steps": 100,
    "silu": 1,             # sigma between A and B: silu (CoLA) or identity (SVD)
    "lax": 0,              # LaX crossings: B's input = z_p + z_prev(p), prev(o)=v, prev(gate/up)=o, prev(down)=up
    "all_grads": 1,        # 1: grad.NAME for every weight; 0: a chosen subset (the smaller extra files)
    "full": 0,             # 1: dense projections L{i}.{p}.W and a SwiGLU MLP down(silu(gate) * up)
}
CONFIG_FLOATS = {
    "eps": 1e-5, "rope_theta": 10000.0, "init_std": 0.02,
    # warmup > opt_steps: lr(step) = lr * (step+1) / warmup, no cosine part involved
    "lr": 0.01, "min_lr": 0.001, "beta1": 0.9, "beta2": 0.95, "adam_eps": 1e-8,
    "weight_decay": 0.5, "clip": 3.0,   # clip: the first step is clipped, the next ones not
}
PROJS = ("q", "k", "v", "o", "gate", "up", "down")


def _layer0_grads(*projs):
    """Gradient subset of the extra files: embed, the norms and the named factors of layer 0 (whose
    gradients come back through every later layer's backward)."""
    return lambda name: (name == "embed" or name.endswith("norm") or
                         any(name == "L0." + p for p in projs))


# The specs this script mirrors: file in tests/data/, config changes, which gradients to store.
# tiny-cola carries every gradient; the others (kept small) carry logits, loss, the optimizer record
# and the gradients along the paths where they differ from tiny-cola.
MODELS = {
    "tiny-cola": ("torch_ref_v1.bin", {}, None),
    "tiny-cola-gqa": ("torch_ref_gqa_v1.bin", {"kv_heads": 2, "all_grads": 0},
                      _layer0_grads("k.A", "k.B", "v.A", "v.B")),
    "tiny-lax": ("torch_ref_lax_v1.bin", {"lax": 1, "all_grads": 0},
                 _layer0_grads("v.A", "o.A", "up.A")),
    "tiny-svd": ("torch_ref_svd_v1.bin", {"silu": 0, "all_grads": 0},
                 _layer0_grads("q.A", "gate.A")),
    "tiny-llama": ("torch_ref_llama_v1.bin", {"full": 1, "silu": 0, "all_grads": 0},
                   _layer0_grads("q.W")),
}
# Deliberate mistakes (--mutant, for tests/sh/torch_mutants.sh: the C test must catch each one),
# each with the model it is made in
MUTANTS = {
    "norm_eps": "tiny-cola",             # RMSNorm eps 100 times the spec's
    "gate_silu": "tiny-cola",            # an extra silu on the gate (SwiGLU instead of CoLA's gate*up)
    "rope_interleaved": "tiny-cola",     # RoPE pairs (2i, 2i+1)
    "decay_all": "tiny-cola",            # weight decay on embed and head too
    "no_bias_correction": "tiny-cola",   # AdamW without 1 - beta^t
    "lax_pre_act": "tiny-lax",           # the crossing adds the previous latent before sigma
    "gqa_kv_tiled": "tiny-cola-gqa",     # query head h reads kv head h % kv_heads
}
MUTANT = None


# ---- counter-based normal (docs/plan-format.md, "Parameters") ----
def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def counter_normal(seed, idx):
    u1 = (splitmix64(seed ^ (2 * idx)) >> 11) * 2.0 ** -53
    u2 = (splitmix64(seed ^ (2 * idx + 1)) >> 11) * 2.0 ** -53
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for byte in name.encode():
        h = ((h ^ byte) * 0x100000001B3) & MASK64
    return h


def normal_tensor(torch, rows, cols, seed, mean, std):
    """float32 values of an enc-2 tensor, [rows, cols]."""
    vals = [mean + std * counter_normal(seed, i) for i in range(rows * cols)]
    return torch.tensor(vals, dtype=torch.float32).reshape(rows, cols)


# ---- the model's weights ----
def weight_table(c):
    """[(name, rows, cols, kind)] in canonical order; kind 'norm' or (d_in, d_out) for init std."""
    d, r, hd = c["hidden"], c["rank"], c["head_dim"]
    dq, dkv, ff = c["heads"] * hd, c["kv_heads"] * hd, c["ffn"]
    io = {"q": (d, dq), "k": (d, dkv), "v": (d, dkv), "o": (dq, d),
          "gate": (d, ff), "up": (d, ff), "down": (ff, d)}
    table = [("embed", c["vocab"], d, "dense")]
    for i in range(c["layers"]):
        table.append((f"L{i}.attn_norm", 1, d, "norm"))
        for p in PROJS:
            din, dout = io[p]
            if c["full"]:
                table.append((f"L{i}.{p}.W", din, dout, "dense"))
                continue
            table.append((f"L{i}.{p}.A", din, r, (din, dout)))
            table.append((f"L{i}.{p}.B", r, dout, (din, dout)))
        table.append((f"L{i}.mlp_norm", 1, d, "norm"))
    table.append(("final_norm", 1, d, "norm"))
    table.append(("head", d, c["vocab"], "dense"))
    return table


def decays(name, kind):
    """AdamW decay per the doc: every matrix but embed and head; norms never."""
    return kind != "norm" and (MUTANT == "decay_all" or name not in ("embed", "head"))


_WEIGHT_CACHE = {}


def make_weights(torch, c, cf):
    """{name: (float32 tensor, (seed, mean, std))}: the doc's init for matrices, gammas ~ 1."""
    key = (tuple(sorted(c.items())), tuple(sorted(cf.items())))
    if key not in _WEIGHT_CACHE:
        _WEIGHT_CACHE[key] = _draw_weights(torch, c, cf)
    return {n: (w.clone(), rec) for n, (w, rec) in _WEIGHT_CACHE[key].items()}


def _draw_weights(torch, c, cf):
    out = {}
    for name, rows, cols, kind in weight_table(c):
        seed = fnv1a64(name) ^ c["seed"]
        if kind == "norm":
            mean, std = 1.0, 0.1
        elif kind == "dense":
            mean, std = 0.0, cf["init_std"]
        else:
            din, dout = kind
            mean, std = 0.0, c["rank"] ** -0.25 * (din + dout) ** -0.25
        out[name] = (normal_tensor(torch, rows, cols, seed, mean, std), (seed, mean, std))
    return out


def forward(torch, c, cf, W, tokens, targets, builtins=False):
    """W: {name: float64 tensor}; tokens/targets: [B, S] long. Returns (logits [M, V], loss).
    builtins=True: the same model through torch's own rms_norm and scaled_dot_product_attention
    (a second formulation the written file is checked against before it is written)."""
    F = torch.nn.functional
    B, S = tokens.shape
    H, KV, HD = c["heads"], c["kv_heads"], c["head_dim"]
    eps = cf["eps"] * (100 if MUTANT == "norm_eps" else 1)

    def rmsnorm(x, g):
        if builtins:
            return F.rms_norm(x, (x.shape[-1],), g.reshape(-1), eps=eps)
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g.reshape(-1)

    pre = {}                                               # pre-activations (the lax_pre_act mutant)

    def latent(x, name):                                   # z = sigma(x @ A)   [.., r]
        if c["full"]:                                      # dense: no bottleneck, z is the input
            return x
        h = pre[name] = x @ W[name + ".A"]
        return F.silu(h) if c["silu"] else h

    def up(z, name, z_prev=None):                          # z (+ z_prev under LaX) @ B
        if c["full"]:
            return z @ W[name + ".W"]
        return (z + z_prev if c["lax"] and z_prev is not None else z) @ W[name + ".B"]

    def cross(name, z):                                    # what a later B's input adds under LaX
        return pre[name] if MUTANT == "lax_pre_act" else z

    def proj(x, name):
        return up(latent(x, name), name)

    half = HD // 2
    inv_freq = cf["rope_theta"] ** (-2.0 * torch.arange(half, dtype=torch.float64) / HD)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv_freq[None, :]   # [S, HD/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]

    def rope(x):  # [B, S, heads, HD]
        if MUTANT == "rope_interleaved":   # pairs (2i, 2i+1) instead of (i, i + HD/2)
            x = x.reshape(*x.shape[:-1], half, 2).transpose(-1, -2).reshape(x.shape)
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    causal = torch.ones(S, S, dtype=torch.bool).tril()
    x = W["embed"][tokens]                                            # [B, S, d]
    for i in range(c["layers"]):
        n1 = rmsnorm(x, W[f"L{i}.attn_norm"])
        zv = latent(n1, f"L{i}.v")
        q = rope(proj(n1, f"L{i}.q").reshape(B, S, H, HD)).transpose(1, 2)    # [B, H, S, HD]
        k = rope(proj(n1, f"L{i}.k").reshape(B, S, KV, HD)).transpose(1, 2)
        v = up(zv, f"L{i}.v").reshape(B, S, KV, HD).transpose(1, 2)
        if MUTANT == "gqa_kv_tiled":
            k, v = k.repeat(1, H // KV, 1, 1), v.repeat(1, H // KV, 1, 1)
        else:                                              # query head h reads kv head h // (H/KV)
            k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        if builtins:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) * HD ** -0.5
            scores = scores.masked_fill(~causal, float("-inf"))
            att = torch.softmax(scores, dim=-1) @ v                  # [B, H, S, HD]
        att = att.transpose(1, 2).reshape(B, S, H * HD)
        zo = latent(att, f"L{i}.o")
        x = x + up(zo, f"L{i}.o", cross(f"L{i}.v", zv))
        n2 = rmsnorm(x, W[f"L{i}.mlp_norm"])
        zu = latent(n2, f"L{i}.up")
        gate = up(latent(n2, f"L{i}.gate"), f"L{i}.gate", cross(f"L{i}.o", zo))
        if MUTANT == "gate_silu" or c["full"]:           # SwiGLU for dense models only
            gate = F.silu(gate)
        hidden = gate * up(zu, f"L{i}.up", cross(f"L{i}.o", zo))
        x = x + up(latent(hidden, f"L{i}.down"), f"L{i}.down", cross(f"L{i}.up", zu))
    logits = (rmsnorm(x, W["final_norm"]) @ W["head"]).reshape(B * S, -1)
    loss = F.cross_entropy(logits, targets.reshape(-1), reduction="mean")
    return logits, loss


def adamw_run(torch, c, cf, W, kinds, tokens, targets):
    """opt_steps AdamW steps on the same batch: per step (lr, pre-clip norm, loss after)."""
    P = {n: w.clone().requires_grad_(True) for n, w in W.items()}
    m = {n: torch.zeros_like(w) for n, w in W.items()}
    v = {n: torch.zeros_like(w) for n, w in W.items()}
    b1, b2, eps, wd = cf["beta1"], cf["beta2"], cf["adam_eps"], cf["weight_decay"]
    lrs, norms, losses = [], [], []
    for step in range(c["opt_steps"]):
        for p in P.values():
            p.grad = None
        _, loss = forward(torch, c, cf, P, tokens, targets)
        loss.backward()
        norm = math.sqrt(sum(float((p.grad * p.grad).sum()) for p in P.values()))
        scale = min(1.0, cf["clip"] / norm)
        lr = cf["lr"] * (step + 1) / c["warmup"]
        assert step < c["warmup"], "the schedule here covers the warmup only"
        t = step + 1
        with torch.no_grad():
            for n, p in P.items():
                g = p.grad * scale
                m[n].mul_(b1).add_((1 - b1) * g)
                v[n].mul_(b2).add_((1 - b2) * g * g)
                mhat, vhat = m[n] / (1 - b1 ** t), v[n] / (1 - b2 ** t)
                if MUTANT == "no_bias_correction":
                    mhat, vhat = m[n], v[n]
                dec = wd if decays(n, kinds[n]) else 0.0
                p -= lr * (mhat / (vhat.sqrt() + eps) + dec * p)
        with torch.no_grad():
            _, after = forward(torch, c, cf, P, tokens, targets)
        lrs.append(lr); norms.append(norm); losses.append(float(after))
    deltas = {n: float((P[n].detach() - W[n]).norm()) for n in W}
    return lrs, norms, losses, deltas


# ---- the file ----
def f24_bytes(torch, t):
    """float32 tensor -> 3 bytes per element (upper 24 bits, round to nearest even)."""
    bits = t.contiguous().reshape(-1).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    low = bits & 0xFF
    up = bits >> 8
    up = up + ((low > 0x80) | ((low == 0x80) & ((up & 1) == 1))).to(torch.int64)
    out = bytearray()
    for u in up.tolist():
        out += struct.pack("<I", u)[:3]
    return bytes(out)


class Writer:
    def __init__(self):
        self.parts, self.count = [], 0

    @staticmethod
    def _name(name):
        b = name.encode()
        return struct.pack("<i", len(b)) + b

    def tensor(self, torch, name, t, enc=ENC_F32, sparse_rows=False):
        t = t.detach().to(torch.float32).reshape(t.shape[0] if t.dim() == 2 else 1, -1)
        rows, cols = t.shape
        sel = None
        if sparse_rows:
            sel = [i for i in range(rows) if bool((t[i] != 0).any())]
            t = t[sel]
        head = self._name(name) + struct.pack("<iiii", rows, cols, enc, -1 if sel is None else len(sel))
        if sel is not None:
            head += struct.pack(f"<{len(sel)}i", *sel)
        data = f24_bytes(torch, t) if enc == ENC_F24 else struct.pack(f"<{t.numel()}f", *t.reshape(-1).tolist())
        self.parts.append(head + data); self.count += 1

    def normal(self, name, rows, cols, seed, mean, std):
        self.parts.append(self._name(name) + struct.pack("<iiiiQdd", rows, cols, ENC_NORMAL, -1, seed, mean, std))
        self.count += 1

    def write(self, path, ints, floats):
        blob = bytearray(MAGIC + struct.pack("<i", VERSION))
        blob += struct.pack("<i", len(ints))
        for k, val in ints.items():
            blob += self._name(k) + struct.pack("<q", val)
        blob += struct.pack("<i", len(floats))
        for k, val in floats.items():
            blob += self._name(k) + struct.pack("<d", val)
        blob += struct.pack("<i", self.count)
        for p in self.parts:
            blob += p
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)   # never leave a partial file behind
        return len(blob)


def read_file(path):
    """Decode a reference file: (ints, floats, {name: (rows, cols, list of floats)})."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from(fmt, buf, pos); pos += struct.calcsize(fmt)
        return vals

    def name():
        nonlocal pos
        (n,) = take("<i"); s = buf[pos:pos + n].decode(); pos += n
        return s

    if buf[:8] != MAGIC:
        raise ValueError(f"{path}: not a BOOSTREF file")
    pos = 8
    (ver,) = take("<i")
    if ver != VERSION:
        raise ValueError(f"{path}: version {ver}, this script reads {VERSION}")
    ints = {name(): take("<q")[0] for _ in range(take("<i")[0])}
    floats = {name(): take("<d")[0] for _ in range(take("<i")[0])}
    tensors = {}
    for _ in range(take("<i")[0]):
        nm = name()
        rows, cols, enc, nsel = take("<iiii")
        if enc == ENC_NORMAL:
            seed, mean, std = take("<Qdd")
            vals = [struct.unpack("<f", struct.pack("<f", mean + std * counter_normal(seed, i)))[0]
                    for i in range(rows * cols)]
            tensors[nm] = (rows, cols, vals)
            continue
        sel = list(take(f"<{nsel}i")) if nsel >= 0 else list(range(rows))
        n = len(sel) * cols
        if enc == ENC_F32:
            data = list(take(f"<{n}f"))
        else:
            data = [struct.unpack("<f", b"\0" + buf[pos + 3 * e:pos + 3 * e + 3])[0] for e in range(n)]
            pos += 3 * n
        vals = [0.0] * (rows * cols)
        for k, r in enumerate(sel):
            vals[r * cols:(r + 1) * cols] = data[k * cols:(k + 1) * cols]
        tensors[nm] = (rows, cols, vals)
    return ints, floats, tensors


def compare(a, b, tol):
    """Report per-tensor norm-wise relative differences of two files; True when all <= tol."""
    ia, fa, ta = read_file(a)
    ib, fb, tb = read_file(b)
    ok = ia == ib and fa == fb and ta.keys() == tb.keys()
    if not ok:
        print(f"{a} and {b}: different configs or tensor lists")
        return False
    worst = 0.0
    for n, (r, c, va) in ta.items():
        vb = tb[n][2]
        if (r, c) != tb[n][:2]:
            print(f"{n}: shape {r}x{c} vs {tb[n][0]}x{tb[n][1]}"); return False
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(va, vb)))
        ref = math.sqrt(sum(x * x for x in va)) or 1.0
        worst = diff / ref if not diff / ref <= worst else worst   # a NaN becomes the worst
        if not diff / ref <= tol:
            print(f"{n}: relative difference {diff / ref:.3g} > {tol:g}"); ok = False
    print(f"largest norm-wise relative difference {worst:.3g}")
    return ok


def build(torch, model, path):
    """Compute the reference of one model (a key of MODELS) and write it to path."""
    fname, changes, grad_subset = MODELS[model]
    c, cf = dict(CONFIG_INTS), dict(CONFIG_FLOATS)
    c.update(changes)
    gen = torch.Generator().manual_seed(c["data_seed"])
    B, S, V = c["micro_batch"], c["seq"], c["vocab"]
    tokens = torch.randint(0, V, (B, S), generator=gen)
    targets = torch.randint(0, V, (B, S), generator=gen)

    weights = make_weights(torch, c, cf)
    kinds = {name: kind for name, _, _, kind in weight_table(c)}
    W = {n: w.to(torch.float64).requires_grad_(True) for n, (w, _) in weights.items()}
    logits, loss = forward(torch, c, cf, W, tokens, targets)
    loss.backward()
    grads = {n: w.grad for n, w in W.items()}
    W0 = {n: w.detach() for n, w in W.items()}
    if hasattr(torch.nn.functional, "rms_norm") and MUTANT is None:
        W2 = {n: w.clone().requires_grad_(True) for n, w in W0.items()}
        logits2, loss2 = forward(torch, c, cf, W2, tokens, targets, builtins=True)
        loss2.backward()
        diffs = [float((W2[n].grad - grads[n]).norm() / grads[n].norm()) for n in W0]
        diffs.append(float((logits2 - logits).detach().norm() / logits.detach().norm()))
        worst = max(diffs, key=lambda v: math.inf if v != v else v)   # a NaN is the worst
        if not worst <= 1e-10:                                    # a NaN disagrees too
            print(f"torch_ref.py: {model}: the two formulations disagree (relative {worst:.3g}): fix the "
                  "model code", file=sys.stderr)
            return 1
    lrs, norms, losses, deltas = adamw_run(torch, c, cf, W0, kinds, tokens, targets)

    out = Writer()
    out.tensor(torch, "tokens", tokens.to(torch.float32))
    out.tensor(torch, "targets", targets.to(torch.float32))
    for n, (_, (seed, mean, std)) in weights.items():
        out.normal(n, W0[n].shape[0], W0[n].shape[1], seed, mean, std)
    out.tensor(torch, "logits", logits)
    out.tensor(torch, "loss", loss.reshape(1, 1))
    for n, g in grads.items():
        if grad_subset is None or grad_subset(n):
            out.tensor(torch, "grad." + n, g, ENC_F24, sparse_rows=(n == "embed"))
    out.tensor(torch, "opt.lr", torch.tensor([lrs]))
    out.tensor(torch, "opt.grad_norm", torch.tensor([norms]))
    out.tensor(torch, "opt.loss", torch.tensor([losses]))
    for n, dn in deltas.items():
        out.tensor(torch, "opt.delta." + n, torch.tensor([[dn]]))
    size = out.write(path, c, cf)
    print(f"{model}: wrote {path}: {size} bytes; loss {loss.item():.6f}, grad norms "
          f"{', '.join(f'{x:.4f}' for x in norms)}, losses after steps {', '.join(f'{x:.6f}' for x in losses)}")
    return 0


def main():
    data_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    ap = argparse.ArgumentParser(description="write the PyTorch reference states of the tiny models")
    ap.add_argument("--model", choices=MODELS, help="only this model (default: all, or tiny-cola with -o)")
    ap.add_argument("-o", "--output", help="the file to write (one model; default tests/data/<its file>)")
    ap.add_argument("--outdir", default=data_dir, help="folder for the files when -o is not given")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two reference files")
    ap.add_argument("--tol", type=float, default=1e-6, help="relative tolerance for --compare")
    ap.add_argument("--mutant", choices=tuple(MUTANTS) + ("all",), help="write a reference with this "
                    "deliberate mistake (for the test that checks the C test catches it): needs -o, or "
                    "with 'all' --outdir, which gets one file NAME.bin per mistake")
    args = ap.parse_args()
    global MUTANT
    MUTANT = args.mutant
    if MUTANT and not (args.output or (MUTANT == "all" and os.path.realpath(args.outdir) != os.path.realpath(data_dir))):
        print("torch_ref.py: --mutant needs -o PATH, or with 'all' --outdir DIR (never overwrite the "
              "committed reference)", file=sys.stderr)
        return 2
    if args.compare:
        try:
            return 0 if compare(args.compare[0], args.compare[1], args.tol) else 1
        except (OSError, ValueError, struct.error) as e:
            print(f"torch_ref.py: {e}", file=sys.stderr); return 2

    import warnings
    warnings.filterwarnings("ignore", message=".*NumPy.*")   # torch without numpy is fine here
    import torch
    torch.set_num_threads(1)          # fixed reduction order: the files are reproducible bit for bit
    if MUTANT == "all":
        for MUTANT, model in MUTANTS.items():
            rc = build(torch, model, os.path.join(args.outdir, MUTANT + ".bin"))
            if rc:
                return rc
        return 0
    if MUTANT:
        return build(torch, MUTANTS[MUTANT], args.output)
    if args.output:
        return build(torch, args.model or "tiny-cola", args.output)
    for model in ([args.model] if args.model else MODELS):
        rc = build(torch, model, os.path.join(args.outdir, MODELS[model][0]))
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
