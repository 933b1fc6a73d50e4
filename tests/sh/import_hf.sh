#!/usr/bin/env bash
# import_hf.sh: `boost import` of small random LlamaForCausalLM checkpoints saved by transformers
# in the test (GQA: 4 heads, 2 key/value heads; one file, sharded with an index, tied embeddings).
# At full rank (F32 and BF16 files), and factorized by SVD at full rank, the logits of `boost eval`
# on the imported step-0 checkpoint equal transformers' within 1e-4; at rank 8 each projection's
# ||W - A B|| equals numpy's truncated-SVD error (so does CoLA's start at rank 16); --energy picks
# numpy's smallest rank; a CoLA import resumes training. Bad checkpoints (RoPE scaling, another
# architecture, a missing tensor) exit 2 naming what is wrong. The full-rank and SVD imports,
# exported, load in transformers with the original's logits. Counted skips where torch or
# transformers is not installed.
. tests/sh/lib.sh
export TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1

names="import_full_logits import_svd_full_rank_logits import_tied_logits import_bf16_logits
       import_sharded_same import_rank_error import_energy_ranks import_cola_svd_start import_cola_resume
       import_export_round_trip import_rope_scaling_refused import_arch_refused import_missing_tensor"
if ! python3 -c "import torch, transformers, numpy" 2>/dev/null; then
  for n in $names; do ok "$n # SKIP torch, transformers or numpy is not installed"; done
  exit 0
fi

# the checkpoints: base (untied, GQA), tied, sharded (base in 100 KB shards), and three broken copies of base
python3 - "$TMP" <<'PY' >"$TMP/make.out" 2>&1 || { for n in $names; do fail $n "making the checkpoints: $(tail -3 "$TMP/make.out")"; done; exit 0; }
import json, os, shutil, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
from safetensors.torch import load_file, save_file
t = sys.argv[1]
for name, tied in (("base", False), ("tied", True)):
    torch.manual_seed(1 if tied else 0)
    cfg = LlamaConfig(hidden_size=128, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=64, rms_norm_eps=1e-5,
                      tie_word_embeddings=tied)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():   # norms away from 1, so a swapped or missing norm shows
        for n, p in m.named_parameters():
            if "norm" in n: p.add_(0.2 * torch.randn_like(p))
    m.save_pretrained(f"{t}/{name}")
    if not tied:
        m.save_pretrained(f"{t}/sharded", max_shard_size="100KB")
        m.to(torch.bfloat16).save_pretrained(f"{t}/bf16")
for bad in ("rope", "arch", "missing"):
    shutil.copytree(f"{t}/base", f"{t}/{bad}")
    cfg = json.load(open(f"{t}/{bad}/config.json"))
    if bad == "rope":
        cfg["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    if bad == "arch":
        cfg["architectures"] = ["GPT2LMHeadModel"]; cfg["model_type"] = "gpt2"
    json.dump(cfg, open(f"{t}/{bad}/config.json", "w"))
    if bad == "missing":
        w = load_file(f"{t}/{bad}/model.safetensors")
        del w["model.layers.1.mlp.up_proj.weight"]
        save_file(w, f"{t}/{bad}/model.safetensors", metadata={"format": "pt"})
assert os.path.exists(f"{t}/sharded/model.safetensors.index.json")
PY

imp() { local name=$1; shift; $BOOST import "$@" >"$TMP/$name.out" 2>&1; echo $? >"$TMP/$name.rc"; }
imp full "$TMP/base" -o "$TMP/full"
imp svdfull "$TMP/base" -o "$TMP/svdfull" --family svd
imp tied "$TMP/tied" -o "$TMP/tiedimp"
imp bf16 "$TMP/bf16" -o "$TMP/bf16imp"
imp sharded "$TMP/sharded" -o "$TMP/shardimp" --name full
imp rank8 "$TMP/base" -o "$TMP/rank8" --family svd --rank 8
imp energy "$TMP/base" -o "$TMP/energy" --family svd --energy 0.8
imp cola "$TMP/base" -o "$TMP/cola" --family cola --rank 16
for n in full svdfull tied bf16; do
  d=$n; [ $n = tied ] || [ $n = bf16 ] && d=${n}imp
  [ "$(cat "$TMP/$n.rc")" = 0 ] && $BOOST eval "$TMP/$d" --batches 2 --logits "$TMP/$n-logits.st" --backend cpu \
    >"$TMP/$n-eval.out" 2>&1 || echo "import or eval failed: $(tail -3 "$TMP/$n.out" "$TMP/$n-eval.out" | tr '\n' ' ')" >"$TMP/$n.bad"
done

# export hands the imports back to transformers: the full-rank one as LlamaForCausalLM, the SVD one
# through modeling_boost.py
for n in full svdfull; do
  [ "$(cat "$TMP/$n.rc")" = 0 ] && $BOOST export "$TMP/$n" --format hf -o "$TMP/$n-hf" >"$TMP/$n-x.out" 2>&1 \
    || echo "export failed: $(tail -2 "$TMP/$n-x.out")" >"$TMP/roundtrip.bad"
done

# the sharded import writes the same step-0 tensors as the one-file import (the plan and names are the same)
if [ "$(cat "$TMP/sharded.rc")" = 0 ] && cmp -s "$TMP/full/step-000000/model.safetensors" \
     "$TMP/shardimp/step-000000/model.safetensors"; then ok import_sharded_same
else fail import_sharded_same "$(tail -2 "$TMP/sharded.out")"; fi

python3 - "$TMP" <<'PY' 2>&1 | sed 's/^/# /; s/^# \(ok\|FAIL\) - /\1 - /'
import os, sys, numpy as np, torch
from transformers import AutoModelForCausalLM
from safetensors.numpy import load_file
t = sys.argv[1]
def verdict(name, good, why):
    print(f"ok - {name}" if good else f"FAIL - {name}: {why}")
for run, src, name in (("full", "base", "import_full_logits"), ("svdfull", "base", "import_svd_full_rank_logits"),
                       ("tied", "tied", "import_tied_logits"), ("bf16", "bf16", "import_bf16_logits")):
    if os.path.exists(f"{t}/{run}.bad"):
        verdict(name, False, open(f"{t}/{run}.bad").read().strip()); continue
    m = AutoModelForCausalLM.from_pretrained(f"{t}/{src}", dtype=torch.float64).eval()
    ref = load_file(f"{t}/{run}-logits.st")
    toks = torch.tensor(ref["tokens"].reshape(-1, 64).astype(np.int64))
    with torch.no_grad():
        got = m(toks).logits.reshape(-1, 256).numpy()
    err = np.abs(got - ref["logits"].astype(np.float64)).max()
    verdict(name, err <= 1e-4, f"max |logit difference| {err:.3g} against transformers")
# the original model and the exports of its imports, on the same random tokens
try:
    if os.path.exists(f"{t}/roundtrip.bad"):
        raise RuntimeError(open(f"{t}/roundtrip.bad").read().strip())
    toks = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(f"{t}/base", dtype=torch.float64)(toks).logits
        errs = []
        for run in ("full", "svdfull"):
            m = AutoModelForCausalLM.from_pretrained(f"{t}/{run}-hf", trust_remote_code=True,
                                                     dtype=torch.float64).eval()
            errs.append((m(toks).logits - want).abs().max().item())
    verdict("import_export_round_trip", max(errs) <= 1e-4, f"max |logit difference| full, svd: {errs}")
except Exception as e:
    verdict("import_export_round_trip", False, f"{type(e).__name__}: {e}")
# rank 8 and energy 0.8: each projection against numpy's SVD of the HF weight
hf = load_file(f"{t}/base/model.safetensors")
names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
         "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
for run, name in (("rank8", "import_rank_error"), ("energy", "import_energy_ranks"), ("cola", "import_cola_svd_start")):
    if open(f"{t}/{run}.rc").read().strip() != "0":
        verdict(name, False, open(f"{t}/{run}.out").read()[-300:]); continue
    ck = load_file(f"{t}/{run}/step-000000/model.safetensors")
    worst, bad = 0.0, []
    for i in range(2):
        for p, hn in names.items():
            W = hf[f"model.layers.{i}.{hn}.weight"].astype(np.float64).T        # [d_in, d_out], x @ W
            s = np.linalg.svd(W, compute_uv=False)
            A, B = ck[f"L{i}.{p}.A"].astype(np.float64), ck[f"L{i}.{p}.B"].astype(np.float64)
            r = A.shape[1]
            if run != "energy":
                want = 8 if run == "rank8" else 16
            else:
                share = np.cumsum(s ** 2) / np.sum(s ** 2)
                want = int(np.searchsorted(share, 0.8 - 1e-12) + 1)
            if r != want:
                bad.append(f"L{i}.{p} rank {r}, numpy says {want}")
            err, ref = np.linalg.norm(W - A @ B), np.sqrt(np.sum(s[r:] ** 2))
            worst = max(worst, abs(err - ref) / ref)
    verdict(name, not bad and worst <= 1e-4,
            f"{'; '.join(bad[:3])} worst relative difference of ||W - A B|| from numpy's {worst:.3g}")
PY

# CoLA with the SVD split as its start: the run spec import wrote resumes at step 0 and trains 3 steps
if [ "$(cat "$TMP/cola.rc")" = 0 ] && $BOOST train "$TMP/cola/cola-run.lua" --backend cpu --resume "$TMP/cola" -o "$TMP/cola" \
     -D steps=3 -D eval_every=0 -D seq=32 --quiet >"$TMP/cola-train.out" 2>&1 && grep -q "resumed from .*step 0" "$TMP/cola-train.out" \
     && [ -d "$TMP/cola/step-000003" ]; then ok import_cola_resume
else fail import_cola_resume "$(tail -3 "$TMP/cola.out" "$TMP/cola-train.out" | tr '\n' ' ')"; fi

bad() {   # bad NAME DIR PATTERN: import exits 2 with PATTERN in its message
  $BOOST import "$TMP/$2" -o "$TMP/$2-out" >"$TMP/$2.out" 2>&1
  local rc=$?
  [ $rc = 2 ] && grep -q "$3" "$TMP/$2.out" && ok "$1" || fail "$1" "exit $rc: $(head -c 300 "$TMP/$2.out")"
}
bad import_rope_scaling_refused rope 'RoPE scaling "linear" is not supported'
bad import_arch_refused arch 'architecture GPT2LMHeadModel (model_type gpt2) is not supported'
bad import_missing_tensor missing 'tensor model.layers.1.mlp.up_proj.weight is missing'
