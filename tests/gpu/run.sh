#!/usr/bin/env bash
# run.sh: every check and measurement that needs a GPU, in one call on the device machine, the most
# important first, each part with its own timeout inside one time budget (BUDGET_S seconds, default
# 330: the call's timeout_s is 360, docs/cuda.md; a part that no longer fits is skipped with a SKIP
# line, and what earlier parts wrote stays). The device call returns at most 8 files, so $OUT gets
# two, rewritten after every part (a call cut short still returns what was done):
#   results-DATE-GPU.md   the summary so far, every FAIL/SKIP line, the PyTorch and bench tables;
#   gpu-out.tar.xz        every result file below and run.log (tar -xJf gpu-out.tar.xz).
# The parts:
#   1. the machine, and that the carried bin/boost and build/gpu/check start there (summary.md);
#   2. check model tiny-cola: 3 training steps CUDA vs the CPU backend, every gradient (model.md);
#   3. PyTorch: one training step of tiny-cola, tiny-cola-gqa, tiny-llama and cola-60m on CUDA in
#      bf16 against tests/gpu/torch_model.py on the same weights and batch (torch.md);
#   4. bench: tokens/s and MFU of cola-1b-h200 and cola-350m-h100 at tp=1, BOOST against PyTorch
#      torch.compile and eager in this same run, and the ratio (bench.md, bench.jsonl);
#   5. check steps: every step of the tiny plans (all kernel kinds, GEMMs) on CUDA vs CPU (steps.md);
#   6. check model: the other variants, determinism, tp=2 / tp=4 local mode vs tp=1, and pipeline
#      stages in one process (pp=2 x tp=2) against the CPU backend (model.md);
#      then compute-sanitizer memcheck, racecheck and synccheck on one tiny-cola step, each with a
#      zero-error verdict (sanitize.md);
#   7. the kernels' registers and spills on this GPU's arch (kernels.md);
#   8. tokens/s of BOOST alone on more runs (bench.md, second table), and the CUDA backend's switches
#      (BOOST_CUDA_GRAPH, BOOST_NO_OVERLAP) off and on (switches.md).
# At the end results-DATE-GPU.md gathers summary.md, torch.md and bench.md: commit it as
# bench/results/DATE-GPU.md (bench/README.md).
# Build first on the build machine: bash tests/gpu/build.sh, then carry build/gpu-carry (one xz
# archive of the stripped bin/boost, build/gpu/check and build/corpus.txt): this script unpacks it
# first when bin/boost or build/gpu/check is missing (UNPACK=1: always).
# Usage (device machine): bash tests/gpu/run.sh
#   PARTS=a,b,..      only these parts of 2-8: model torch bench steps variants sanitize kernels extra
#   GPU_STEPS_ONLY=1  only the checks (PARTS=model,torch,steps,variants)
#   BUDGET_S=N        the time budget in seconds           TORCH=0  no PyTorch parts
#   BENCH_QUICK=1     bench tiny-cola only, no cola-60m check
# Dry run without a GPU (checks this script): DUT=cpu BENCH_QUICK=1 bash tests/gpu/run.sh (BOOST's
# CPU backend on both sides, PyTorch on the CPU in fp32, torch.compile with the aot_eager backend).
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
export BOOST_CACHE=${BOOST_CACHE:-/tmp/boost-cache}
TMP=$(mktemp -d /tmp/boost-gpu.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
RES="$TMP/results"   # every result file; published to $OUT as one archive (publish)
mkdir -p "$RES"
CARRY=build/gpu-carry/carry.tar.xz
if [ -f "$CARRY" ] && { [ "${UNPACK:-0}" = 1 ] || [ ! -x bin/boost ] || [ ! -x build/gpu/check ]; }; then
  tar -xJf "$CARRY" || echo "FAIL - unpacking $CARRY (run tests/gpu/build.sh again on the build machine)"
fi
BOOST=./bin/boost
CHECK=./build/gpu/check
DUT=${DUT:-cuda}
BUDGET_S=${BUDGET_S:-330}
PY=${PYTHON:-python3}
fails=0
synced=0
# sync_rerun WHAT CMD...: the first failing check runs once more with BOOST_CUDA_SYNC=1 (a sync
# after every step), so an asynchronous fault is reported at the step and kernel that caused it
sync_rerun() {
  local what=$1 t; shift
  [ "$synced" = 0 ] && [ "$DUT" = cuda ] || return 0
  synced=1
  t=$(budget 120 20) || { skip "rerun of $what with BOOST_CUDA_SYNC=1"; return 0; }
  BOOST_CUDA_SYNC=1 timeout "$t" "$@" >"$RES/sync-rerun.txt" 2>&1
  say "rerun of $what with BOOST_CUDA_SYNC=1: exit $?: $(grep -v '^ok - ' "$RES/sync-rerun.txt" | tail -3 | tr '\n' ' ' | cut -c1-400)"
}
say() { echo "$*" | tee -a "$RES/run.log"; }
section() { publish; say ""; say "== $* ($(date -u +%H:%M:%S), ${SECONDS}s of ${BUDGET_S}s)"; }
results_name() {
  if [ "$DUT" = cuda ]; then echo "results-$(date -u +%Y-%m-%d)-${GPU:-gpu}.md"; else echo "results-$(date -u +%Y-%m-%d)-dryrun.md"; fi
}
# publish [final]: $OUT/results-*.md (written first) and $OUT/gpu-out.tar.xz (everything else), each
# through a temp file and a rename, so a call stopped at any moment returns at most 4 files
publish() {
  local res; res=$(results_name)
  {
    cat "$RES/summary.md" 2>/dev/null
    [ "${1:-}" = final ] || echo "(stopped before the end: the last part started is the last == line of run.log)"
    if grep -q -E '^(FAIL|SKIP) - ' "$RES/run.log" 2>/dev/null; then
      echo; echo "FAIL and SKIP lines (run.log):"; echo; echo '```'; grep -E '^(FAIL|SKIP) - ' "$RES/run.log" | head -60 | cut -c1-400; echo '```'
    fi
    for f in torch.md bench.md switches.md; do [ -s "$RES/$f" ] && { echo; sed 's/^# /## /' "$RES/$f"; }; done
    true
  } >"$OUT/.$res.tmp" && mv "$OUT/.$res.tmp" "$OUT/$res"
  tar -C "$RES" -cJf "$OUT/.gpu-out.tar.xz.tmp" . 2>/dev/null && mv "$OUT/.gpu-out.tar.xz.tmp" "$OUT/gpu-out.tar.xz"
}
# budget WANT [MIN]: the timeout for a part that would like WANT seconds: WANT, or what is left of
# the budget (less 10 s for the summary); fails (the part is skipped) when less than MIN is left
budget() {
  local want=$1 min=${2:-15} left=$((BUDGET_S - SECONDS - 10))
  [ "$left" -ge "$min" ] || return 1
  echo $((want < left ? want : left))
}
skip() { say "SKIP - $1: not started, ${SECONDS}s of the ${BUDGET_S}s budget used"; }
PARTS=${PARTS:-model,torch,bench,steps,variants,sanitize,kernels,extra}
[ "${GPU_STEPS_ONLY:-0}" = 1 ] && PARTS=model,torch,steps,variants
part() { case ",$PARTS," in *",$1,"*) return 0;; *) return 1;; esac; }
: >"$RES/run.log"

section "machine"
{
  echo "# GPU checks: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo '```'
  if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>&1 | head -3
  else echo "no nvidia-smi: no GPU here"; fi
  echo "commit: $(cat build/gpu/commit.txt 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "C compiler (torch.compile's Triton needs one): $( (cc --version || gcc --version) 2>/dev/null | head -1 || true)"
  echo '```'
} >"$RES/summary.md"
cat "$RES/summary.md" | tee -a "$RES/run.log"
if [ ! -x "$BOOST" ] || [ ! -x "$CHECK" ]; then
  say "bin/boost or build/gpu/check missing: trying to build here"
  bash tests/gpu/build.sh >>"$RES/run.log" 2>&1 || { say "FAIL - build (see run.log): carry build/gpu-carry"; publish final; exit 1; }
fi
if ! "$BOOST" --help >/dev/null 2>&1; then say "FAIL - bin/boost does not start here: $(ldd "$BOOST" 2>&1 | grep 'not found')"; publish final; exit 1; fi
# what the CUDA libraries and the GPUs look like to bin/boost (boost doctor; exit 1 = no GPU run)
"$BOOST" doctor >"$RES/doctor.txt" 2>&1; say "boost doctor: exit $? ($(tail -1 "$RES/doctor.txt"))"
# the GPU spec for MFU (specs/gpus/NAME.lua), from the device's name: any shipped spec's NAME
SPEC_GPUS=$(ls specs/gpus/ | grep -v '\.tuning\.lua$' | sed -n 's/\.lua$//p' | paste -sd '|')
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z' 'a-z' | grep -o -E "$SPEC_GPUS" | head -1)
# PyTorch: bf16 on the GPU; the dry run: fp32 on one CPU thread (more threads on a busy machine
# only wait for each other), torch.compile's aot_eager backend (no C++ compiles)
if [ "$DUT" = cuda ]; then TDEV=cuda; TDTYPE=bf16; CBACKEND=${TORCH_COMPILE_BACKEND:-inductor}; TM=("$PY" tests/gpu/torch_model.py)
else TDEV=cpu; TDTYPE=fp32; CBACKEND=${TORCH_COMPILE_BACKEND:-aot_eager}; TM=("$PY" tests/gpu/torch_model.py --threads 1); fi
TORCH=${TORCH:-1}
if [ "$TORCH" = 1 ]; then
  if tv=$("$PY" -c 'import warnings; warnings.filterwarnings("ignore"); import torch; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else "(no CUDA)")' 2>/dev/null); then
    say "PyTorch $tv; MFU peak from specs/gpus/${GPU:-?}.lua"
  else
    say "SKIP - PyTorch parts: $PY cannot import torch here"
    TORCH=0
  fi
fi

section "plans"
gen() {   # gen NAME RUN [-D ...]
  local name=$1; shift
  if ! timeout 60 "$BOOST" gen "$@" -o "$TMP/$name" >>"$RES/run.log" 2>&1; then
    say "FAIL - generate $name ($*)"; fails=$((fails + 1)); return 1
  fi
}
gen cola1 tiny-cola -D tp=1
gen cola1-sync tiny-cola -D tp=1 -D online_rmsnorm=0 -D group_linears=0
gen llama1 tiny-llama -D tp=1
gen gqa1 tiny-cola-gqa -D tp=1
gen svd1 tiny-svd -D tp=1
gen lax1 tiny-lax -D tp=1
gen cola2 tiny-cola -D tp=2
gen cola4 tiny-cola -D tp=4
gen cola2-sync tiny-cola -D tp=2 -D online_rmsnorm=0
gen llama2 tiny-llama -D tp=2
gen llama1-meg tiny-llama -D tp=1 -D layout=megatron
gen moe1 tiny-cola-moe -D tp=1
gen moe2 tiny-cola-moe -D tp=2

: >"$RES/model.md"
model() {   # model DIR [--tp-ref DIR]
  local d=$1; shift
  [ -f "$TMP/$d/plan.txt" ] || return
  local args=() t
  [ $# -ge 1 ] && args=(--tp-ref "$TMP/$1")
  t=$(budget 300 20) || { skip "check model $d"; return; }
  timeout "$t" "$CHECK" model "$TMP/$d" --against "$DUT" "${args[@]}" >"$TMP/model-$d.txt" 2>&1
  local rc=$?
  sed "s#$TMP/##g" "$TMP/model-$d.txt" | tee -a "$RES/run.log" >>"$RES/model.md"
  [ "$rc" = 0 ] || { fails=$((fails + 1)); say "FAIL - model $d: exit $rc"; sync_rerun "model $d" "$CHECK" model "$TMP/$d" --against "$DUT" "${args[@]}"; }
}
if part model; then
  section "check model: tiny-cola training steps, $DUT vs cpu"
  model cola1
fi

if [ "$TORCH" = 1 ] && part torch; then
  section "PyTorch: one training step, BOOST ($DUT) vs tests/gpu/torch_model.py ($TDEV, $TDTYPE)"
  torch_check() {   # torch_check WANT_S RUN... [-D ...]
    local want=$1 t; shift
    t=$(budget "$want" 30) || { skip "PyTorch check $*"; return; }
    timeout "$t" "${TM[@]}" --check "$@" --backend "$DUT" --device "$TDEV" --dtype "$TDTYPE" \
      --tensors --json "$RES/torch-check.jsonl" >"$TMP/torch-check.txt" 2>&1
    local rc=$?
    grep -E '^(ok|FAIL|#) ' "$TMP/torch-check.txt" | tee -a "$RES/run.log" >/dev/null
    grep -E '^(ok|FAIL) ' "$TMP/torch-check.txt" | sed 's/^/    /' | cut -c1-220
    if [ "$rc" != 0 ]; then
      fails=$((fails + 1))
      say "FAIL - PyTorch check $* (exit $rc$([ "$rc" = 124 ] && echo ": timed out after ${t}s")): $(grep -v '^{' "$TMP/torch-check.txt" | grep -v -E '^(ok|#) ' | tail -2)"
    fi
  }
  : >"$RES/torch-check.jsonl"
  torch_check 150 tiny-cola tiny-cola-gqa tiny-llama -D tp=1
  [ "${BENCH_QUICK:-0}" = 1 ] || torch_check 150 cola-60m-h100 -D tp=1
  "$PY" - "$RES/torch-check.jsonl" >"$RES/torch.md" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("# One training step: BOOST against tests/gpu/torch_model.py\n")
print("BOOST trains one step with lr 0 (its initial weights, and its gradients in AdamW's first moment) and one")
print("real step; PyTorch loads those weights and takes the same first batch. In bf16 each gradient may differ")
print("from PyTorch fp32 by 8x what PyTorch's own bf16 autocast does to it (and at least the floor).\n")
print("| run | BOOST | PyTorch | loss BOOST | loss PyTorch fp32 | rel | worst gradient (tolerance) | all gradients | AdamW on BOOST's grads | whole step | verdict |")
print("|---|---|---|---:|---:|---:|---|---:|---:|---:|---|")
for r in recs:
    if "error" in r:
        print(f"| {r['run']} | | | | | | {r['error'][:80]} | | | | FAIL |"); continue
    w = r["worst"]; t = r["tensors"][w["grad_rel"][0]]
    print(f"| {r['run']} | {r['boost_backend']} | {r['device']} {r['dtype']} | {r['loss_boost']:.5f} | {r['loss_ref_fp32']:.5f} | "
          f"{r['loss_rel']:.1e} | {w['grad_rel'][0]} {w['grad_rel'][1]:.2g} ({t['grad_tol']:.2g}) | {r['grads_rel_all']:.2g} | "
          f"{w['adamw_rel'][1]:.1e} | {w['update_rel'][1]:.2g} | {'ok' if r['pass'] else 'FAIL'} |")
PY
fi

if part bench || part extra; then
  section "bench: tokens/s and MFU, BOOST ($DUT) vs PyTorch ($TDEV: torch.compile and eager)"
  : >"$RES/bench.jsonl"
  : >"$TMP/commands.txt"
  data=()
  if [ ! -f build/corpus.txt ]; then
    "$PY" -c "import random; r=random.Random(1); w=[''.join(r.choice('etaoinshrdlu') for _ in range(r.randint(2,8))) for _ in range(5000)]; print(' '.join(r.choice(w) for _ in range(600000)))" >"$TMP/data.txt"
    data=(-D data="$TMP/data.txt")
  fi
  render_bench() {
    "$PY" - "$RES/bench.jsonl" "$TMP/commands.txt" "$DUT" "$TDTYPE" "$CBACKEND" >"$RES/bench.md" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
dut, tdtype, cbackend = sys.argv[3:6]
runs = []
for r in recs:
    if r["run"] not in runs and r.get("table", "main") == "main":
        runs.append(r["run"])
def get(run, mode):
    return next((r for r in recs if r["run"] == run and r["mode"] == mode and r.get("table", "main") == "main"), None)
def tps(r):
    if r is None: return "not run"
    if "error" in r: return r["error"][:60]
    return f"{r['tokens_per_s']:,.0f}"
def mfu(r):
    return f"{100 * r['mfu']:.1f}%" if r and r.get("mfu") is not None else "-"
def ratio(a, b):
    if a and b and "tokens_per_s" in a and "tokens_per_s" in b and b["tokens_per_s"] > 0:
        return f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}x"
    return "-"
print(f"# Training throughput: BOOST ({dut}) against PyTorch ({tdtype}; torch.compile backend {cbackend})\n")
print("Same model, same micro-batch and sequence length, tp=1, in the same run. tokens/s: median of the steady")
print("steps (BOOST: the last half of its steps; PyTorch: after its warm-up steps, each timed to a CUDA sync).")
print("MFU = FLOPs per token (boost report --json: 6 x matmul parameters per token + attention, the same")
print("figure for both sides) x tokens/s / the GPU's dense bf16 peak (specs/gpus). Target: BOOST >= 1.3x torch.compile.")
print("PyTorch side (tests/gpu/torch_model.py, built from the run's plan): fp32 master weights under bf16 autocast, one")
print("matmul per factor, scaled_dot_product_attention (causal), fused AdamW with global-norm clipping, no activation")
print("checkpointing, random tokens; torch.compile per decoder layer (one compile shared by all layers) and the loss.\n")
print("| run | tokens/step | BOOST tok/s | BOOST MFU | compile tok/s | compile MFU | eager tok/s | eager MFU | BOOST/compile | BOOST/eager |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for run in runs:
    b, c, e = get(run, "boost"), get(run, "compile"), get(run, "eager")
    tok = next((r["tokens_per_step"] for r in (b, c, e) if r and "tokens_per_step" in r), "")
    print(f"| {run} | {tok} | {tps(b)} | {mfu(b)} | {tps(c)} | {mfu(c)} | {tps(e)} | {mfu(e)} | {ratio(b, c)} | {ratio(b, e)} |")
extra = [r for r in recs if r.get("table") == "boost-only"]
if extra:
    print("\n## BOOST alone\n")
    print("| run | steps | tokens/step | tokens/s | MFU | final loss |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in extra:
        if "error" in r:
            print(f"| {r['run']} | | | {r['error'][:60]} | | |"); continue
        print(f"| {r['run']} | {r['steps']} | {r['tokens_per_step']} | {r['tokens_per_s']:,.0f} | {mfu(r)} | {r['loss_last']:.4f} |")
details = [r for r in recs if r["mode"] in ("eager", "compile") and "tokens_per_s" in r]
if details:
    print("\nPyTorch details (eager and compile start from the same weights and batch: the same loss at step 1): " + "; ".join(
        f"{r['run']} {r['mode']}: first step {r['first_step_s']} s{' (compiling)' if r['mode'] == 'compile' else ''}, "
        f"{r['steady_steps']} steady steps of {r['step_ms_median']} ms, loss at step 1 {r['loss_first']:.5f}"
        + (f", peak memory {r['max_mem_gb']} GiB" if r.get("max_mem_gb") is not None else "") for r in details) + ".")
print("\nCommands:\n\n```")
print(open(sys.argv[2]).read().rstrip())
print("```")
PY
  }
  boost_bench() {   # boost_bench TABLE RUN STEPS WANT_S [-D ...]: BOOST's tokens/s of a run
    local table=$1 run=$2 steps=$3 want=$4 t; shift 4
    local log="$TMP/bench-$run.jsonl" cmd
    t=$(budget "$want" 30) || { skip "bench BOOST $run"; return; }
    cmd=("$BOOST" train "$run" -D steps="$steps" -D eval_every=0 "${data[@]}" "$@" --backend "$DUT" --quiet --val-batches 1 --log "$log")
    echo "${cmd[*]}" | sed "s#$TMP/#\$TMP/#g" >>"$TMP/commands.txt"
    rm -f "$log"
    timeout "$t" "${cmd[@]}" >"$TMP/bench-$run.txt" 2>&1
    local rc=$?
    "$PY" - "$log" "$run" "$table" "$rc" "$BOOST" "$GPU" "$DUT" "$@" >>"$RES/bench.jsonl" <<'PY'
import json, re, statistics, subprocess, sys
log, run, table, rc, boost, gpu, dut = sys.argv[1:8]
defs = sys.argv[8:]
rec = {"run": run, "mode": "boost", "table": table}
try:
    rows = [json.loads(l) for l in open(log) if l.strip().startswith("{")]
    rows = [r for r in rows if "tokens_per_s" in r]
except OSError:
    rows = []
if not rows:
    rec["error"] = f"exit {rc}" + (" (timed out)" if rc == "124" else "") + ", no steps logged"
else:
    half = rows[len(rows) // 2:]
    tps = statistics.median(r["tokens_per_s"] for r in half)
    rep = json.loads(subprocess.run([boost, "report", run, "--json"] + defs, capture_output=True, text=True).stdout)
    peak = None
    if gpu and dut == "cuda":
        peak = float(re.search(r"bf16_tflops\s*=\s*([0-9.]+)", open(f"specs/gpus/{gpu}.lua").read()).group(1))
    rec.update({"steps": len(rows), "tokens_per_step": rep["tokens_per_microbatch"], "tokens_per_s": tps,
                "flops_per_token": rep["flops_per_token"], "peak_tflops": peak,
                "mfu": rep["flops_per_token"] * tps / (peak * 1e12) if peak else None, "loss_last": rows[-1]["loss"]})
    if rc != "0":
        rec["note"] = f"exit {rc}"
print(json.dumps(rec))
PY
    local last; last=$(tail -1 "$RES/bench.jsonl")
    case "$last" in *'"error"'*) say "FAIL - bench BOOST $run: $last: $(tail -2 "$TMP/bench-$run.txt" | tr '\n' ' ')"; fails=$((fails + 1));;
                    *) say "bench BOOST $run: $last";; esac
  }
  torch_bench() {   # torch_bench RUN MODE STEPS WARMUP WANT_S MIN_S [-D ...]
    local run=$1 mode=$2 steps=$3 warm=$4 want=$5 min=$6 t; shift 6
    [ "$TORCH" = 1 ] || return
    t=$(budget "$want" "$min") || { skip "bench PyTorch $mode $run"; echo "{\"run\": \"$run\", \"mode\": \"$mode\", \"error\": \"skipped: out of time\"}" >>"$RES/bench.jsonl"; return; }
    local cmd=("${TM[@]}" --bench "$run" "$@" --mode "$mode" --device "$TDEV" --dtype "$TDTYPE" --steps "$steps"
               --warmup-steps "$warm" --max-seconds $((t / 2)) --compile-backend "$CBACKEND" ${GPU:+--gpu "$GPU"})
    echo "${cmd[*]}" >>"$TMP/commands.txt"
    timeout "$t" "${cmd[@]}" >"$TMP/tbench.txt" 2>&1
    local rc=$?
    if grep -q '^{' "$TMP/tbench.txt"; then
      grep '^{' "$TMP/tbench.txt" | tail -1 >>"$RES/bench.jsonl"
    else
      echo "{\"run\": \"$run\", \"mode\": \"$mode\", \"error\": \"exit $rc$([ "$rc" = 124 ] && echo ", timed out after ${t}s")\"}" >>"$RES/bench.jsonl"
    fi
    if [ "$rc" = 0 ]; then say "bench PyTorch $mode $run: $(tail -1 "$RES/bench.jsonl" | cut -c1-400)"
    else fails=$((fails + 1)); say "FAIL - bench PyTorch $mode $run (exit $rc): $(grep -v '^{' "$TMP/tbench.txt" | tail -2 | tr '\n' ' ' | cut -c1-300)"; fi
  }
  if ! part bench; then :
  elif [ "${BENCH_QUICK:-0}" = 1 ]; then
    boost_bench main tiny-cola 30 120 -D tp=1; render_bench
    torch_bench tiny-cola compile 6 2 120 20 -D tp=1; render_bench
    torch_bench tiny-cola eager 6 2 120 20 -D tp=1; render_bench
  else
    boost_bench main cola-1b-h200 10 150; render_bench
    torch_bench cola-1b-h200 compile 10 3 240 90; render_bench
    torch_bench cola-1b-h200 eager 10 3 120 40; render_bench
    boost_bench main cola-350m-h100 16 120; render_bench
    torch_bench cola-350m-h100 compile 16 4 200 80; render_bench
    torch_bench cola-350m-h100 eager 16 4 90 30; render_bench
  fi
  sed -n '/^| run/,/^$/p' "$RES/bench.md" | tee -a "$RES/run.log"
fi

if part steps; then
  section "check steps: every step on $DUT vs cpu"
  : >"$RES/steps.md"
  for d in cola1 cola1-sync llama1 gqa1 svd1 lax1 llama1-meg moe1; do
    [ -f "$TMP/$d/plan.txt" ] || continue
    t=$(budget 300 20) || { skip "check steps $d"; continue; }
    timeout "$t" "$CHECK" steps "$TMP/$d" --against "$DUT" >"$TMP/steps-$d.txt" 2>&1
    rc=$?
    grep -E '^(ok|FAIL) - ' "$TMP/steps-$d.txt" | tee -a "$RES/run.log" >/dev/null
    if t=$(budget 120 20); then
      { echo "## $d"; echo; timeout "$t" "$CHECK" steps "$TMP/$d" --against "$DUT" --md 2>&1 | grep '^|' | sed "s#$TMP/##g"; echo; } >>"$RES/steps.md"
    fi
    n=$(grep -c '^FAIL' "$TMP/steps-$d.txt")
    say "steps $d: exit $rc, $(grep -c '^ok' "$TMP/steps-$d.txt") ok, $n FAIL"
    [ "$rc" = 0 ] || { fails=$((fails + 1)); sync_rerun "steps $d" "$CHECK" steps "$TMP/$d" --against "$DUT"; }
    grep '^FAIL' "$TMP/steps-$d.txt" | head -5 | tee -a "$RES/run.log"
  done
fi

if part variants; then
  section "check model: variants, determinism, tp local mode"
  model cola1-sync
  model llama1
  model gqa1
  model lax1
  model cola2 cola1
  model cola4 cola1
  model cola2-sync cola1-sync
  model llama2 llama1
  model moe1
  model moe2 moe1
  # pipeline stages in one process (tiny-cola-pp2 with the GQA model: pp=2 x tp=2, 1F1B over 4
  # micro-batches, 2 activation slots on stage 0): 2 training steps on the device against the CPU
  # backend, losses and gradient norms within bf16 tolerance (one GPU cannot hold a world of them)
  if t=$(budget 180 40); then
    pp=(tiny-cola-pp2 -D model=tiny-cola-gqa -D tp=2 -D micro_batch=1 -D seq=16 -D grad_accum=4 -D steps=2 -D eval_every=0
        --val-batches 1 --quiet)
    timeout "$t" "$BOOST" train "${pp[@]}" --backend "$DUT" --log "$TMP/pp-dut.jsonl" >"$TMP/pp-dut.out" 2>&1; rc1=$?
    timeout "$t" "$BOOST" train "${pp[@]}" --backend cpu --log "$TMP/pp-cpu.jsonl" >"$TMP/pp-cpu.out" 2>&1; rc2=$?
    ppf() { grep "\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
    good=$([ $rc1 = 0 ] && [ $rc2 = 0 ] && echo 1 || echo 0); detail=""
    for s in 1 2; do for k in loss:0.01 grad_norm:0.03; do
      a=$(ppf "$TMP/pp-dut.jsonl" $s ${k%%:*}); b=$(ppf "$TMP/pp-cpu.jsonl" $s ${k%%:*}); detail="$detail ${k%%:*}@$s $a/$b"
      awk -v a="$a" -v b="$b" -v r="${k#*:}" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
        exit !(a != "" && b != "" && d <= r * m + 1e-3) }' || good=0
    done; done
    if [ "$good" = 1 ]; then say "ok - pipeline pp=2 x tp=2 in one process, $DUT vs cpu:$detail" | tee -a "$RES/model.md"
    else fails=$((fails + 1)); say "FAIL - pipeline pp=2 x tp=2 in one process, $DUT vs cpu (exit $rc1/$rc2):$detail $(tail -n 1 "$TMP/pp-dut.out")"; fi
  else skip "pipeline pp=2 x tp=2 in one process"; fi
fi

if part sanitize; then
  # compute-sanitizer (CUDA toolkit) on one tiny-cola training step: memcheck, racecheck, synccheck,
  # each with a zero-error verdict. DUT=cpu (the dry run): the same command without the sanitizer.
  section "compute-sanitizer: memcheck, racecheck, synccheck on one tiny-cola step"
  : >"$RES/sanitize.md"
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
  for tool in memcheck racecheck synccheck; do
    t=$(budget 120 30) || { skip "compute-sanitizer $tool"; continue; }
    cmd=("$BOOST" train tiny-cola -D steps=1 -D eval_every=0 --backend "$DUT" --quiet --val-batches 1)
    if [ "$DUT" = cuda ]; then
      if [ -z "$CS" ]; then say "FAIL - compute-sanitizer $tool: compute-sanitizer not found (CUDA toolkit bin/)"; fails=$((fails + 1)); continue; fi
      cmd=("$CS" --tool "$tool" --report-api-errors no --error-exitcode 99 "${cmd[@]}")
    fi
    timeout "$t" "${cmd[@]}" >"$TMP/sanitize-$tool.txt" 2>&1
    rc=$?
    if grep -q -i 'Device not supported' "$TMP/sanitize-$tool.txt"; then
      say "SKIP - compute-sanitizer $tool: this compute-sanitizer does not support the device: $(grep -m1 -i 'Device not supported' "$TMP/sanitize-$tool.txt" | cut -c1-200)"
      { echo "## $tool"; echo; echo "skipped: Device not supported"; echo; } >>"$RES/sanitize.md"
      continue
    fi
    errs=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$TMP/sanitize-$tool.txt" | grep -o '[0-9][0-9]*' | tail -1)
    [ "$DUT" = cuda ] || errs=0
    { echo "## $tool"; echo; echo '```'; echo "${cmd[*]}"; tail -5 "$TMP/sanitize-$tool.txt"; echo '```'; echo; } >>"$RES/sanitize.md"
    if [ "$rc" = 0 ] && [ "${errs:-none}" = 0 ]; then say "ok - compute-sanitizer $tool: 0 errors on one tiny-cola step ($DUT)"
    else
      say "FAIL - compute-sanitizer $tool: exit $rc, ${errs:-no} errors reported (sanitize.md)"; fails=$((fails + 1))
      grep -m3 -E '^========= (Invalid|Race|Barrier|ERROR|Error)' "$TMP/sanitize-$tool.txt" | tee -a "$RES/run.log"
    fi
  done
fi

if part kernels; then
  section "kernels on this arch"
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  arch=sm_${arch:-90}
  : >"$RES/kernels.md"
  if budget 60 40 >/dev/null; then
    gen k-cola1b cola-1b-h200
    gen k-cola7b cola-7b-tp4
  fi
  for d in cola1 k-cola1b k-cola7b; do
    [ -f "$TMP/$d/kernels.cu" ] || continue
    t=$(budget 120 20) || { skip "kernels $d"; continue; }
    { echo "## $d ($arch)"; echo; timeout "$t" "$BOOST" kernels "$TMP/$d" --arch "$arch" --md 2>&1; echo; } >>"$RES/kernels.md"
  done
fi

if part extra; then
  section "bench: BOOST alone on more runs"
  if [ "${BENCH_QUICK:-0}" != 1 ]; then
    boost_bench boost-only cola-60m-h100 20 60; render_bench
    boost_bench boost-only llama-60m-h100 20 60; render_bench
    boost_bench boost-only llama-350m-h100 10 90; render_bench
    boost_bench boost-only llama-1b-h200 6 120; render_bench
  fi
  # switches of the CUDA backend, each timed on and off in the same run (docs/cuda.md)
  switch_bench() {   # switch_bench VAR RUN STEPS WANT_S [-D ...]: tokens/s with VAR=0 and VAR=1
    local var=$1 run=$2 steps=$3 want=$4 v t; shift 4
    for v in 0 1; do
      t=$(budget "$want" 30) || { skip "$var=$v $run"; continue; }
      local log="$TMP/switch-$var-$v.jsonl"
      rm -f "$log"
      env "$var=$v" timeout "$t" "$BOOST" train "$run" -D steps="$steps" -D eval_every=0 "${data[@]}" "$@" --backend "$DUT" \
        --quiet --val-batches 1 --log "$log" >"$TMP/switch-$var-$v.txt" 2>&1
      local rc=$? tps
      tps=$("$PY" -c 'import json,statistics,sys; r=[json.loads(l) for l in open(sys.argv[1]) if "tokens_per_s" in l]; r=r[len(r)//2:]; print("%.0f" % statistics.median(x["tokens_per_s"] for x in r) if r else "none")' "$log" 2>/dev/null)
      echo "| $run $* | $var=$v | $steps | ${tps:-none} | exit $rc |" >>"$RES/switches.md"
      say "switch $var=$v $run: exit $rc, tokens/s ${tps:-none}"
      [ "$rc" = 0 ] || { fails=$((fails + 1)); say "FAIL - $var=$v $run: $(tail -2 "$TMP/switch-$var-$v.txt" | tr '\n' ' ')"; }
    done
  }
  { echo "# CUDA backend switches, off and on in the same run"; echo
    echo "| run | switch | steps | tokens/s (median of the last half) | |"; echo "|---|---|---:|---:|---|"; } >"$RES/switches.md"
  if [ "${BENCH_QUICK:-0}" != 1 ]; then
    switch_bench BOOST_CUDA_GRAPH cola-60m-h100 40 60
    switch_bench BOOST_NO_OVERLAP cola-350m-h100 10 90 -D tp=2
  else
    switch_bench BOOST_NO_OVERLAP tiny-cola 5 60 -D tp=2
  fi
fi

section "summary"
{
  echo
  echo "checks passed: $(grep -c '^ok - ' "$RES/run.log"), failed: $(grep -c '^FAIL - ' "$RES/run.log"), skipped (out of time, no PyTorch, sanitizer without the device): $(grep -c '^SKIP - ' "$RES/run.log"), failing parts: $fails; ${SECONDS}s"
  echo
  [ -s "$RES/bench.md" ] && sed -n '/^| run/,/^$/p' "$RES/bench.md"
  echo "Details in gpu-out.tar.xz: model.md (training steps $DUT vs cpu, determinism, TP), torch.md (one step vs PyTorch),"
  echo "bench.md (tokens/s and MFU vs PyTorch), switches.md (CUDA graphs, overlap on/off), steps.md (per step kind),"
  echo "kernels.md (registers/spills), sanitize.md (compute-sanitizer), doctor.txt (boost doctor),"
  echo "run.log (everything)."
} >>"$RES/summary.md"
publish final   # the file to commit as bench/results/DATE-GPU.md: $OUT/results-DATE-GPU.md
RESULTS="$OUT/$(results_name)"
tail -12 "$RES/summary.md"
if [ "$DUT" = cuda ]; then echo "results file: $RESULTS (commit it as bench/results/$(basename "$RESULTS" | sed 's/^results-//'))"
else echo "results file: $RESULTS (a dry run: not for bench/results/)"; fi
[ "$fails" = 0 ]
