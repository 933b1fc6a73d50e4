#!/usr/bin/env bash
# nvrtc_mock_groups.sh: reduce_scatter and allgather on any group (common/collective_catalog.h) on
# the CUDA backend without a GPU. tiny-cola plans (dp=2 x tp=2, and tp=2 for one process) get probe
# buffers P.* and, at the end of the backward, reduce_scatter over group=tp and group=dp (op=sum
# and avg, fp32 and bf16, shards of unequal size), allgather over group=tp and group=dp (row
# pitches wider than the rows) and allreduce over group=tp (op=sum and avg); a tiny-cola-moe plan
# of dp=4 x ep=2 gets the same with group=ep in tp's place and group=edp (dp/ep = 2 members) in
# dp's; tests/gpu/coll_probe.c fills each rank's probe buffers with known
# values, runs a forward and backward and prints them. The cpu backend (threads), the cuda backend
# as 4 processes on the CUDA and NCCL stand-ins and as one process (ranks as threads) must each
# give what is computed here from the catalog's placement: member i's shard [i*s, min((i+1)*s, n))
# of the group's sum (s = ceil(n/size)), every member's src as dst's column block i, an allreduce's
# sum (op=avg: the mean) in the whole buffer; with the
# collectives issued by the executor (overlapped, and waited for at once: BOOST_NO_OVERLAP=1) and
# through the backend's synchronous entry (coll_probe direct).
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread \
     2>"$TMP/cc.log" ||
   ! cc -O1 -shared -fPIC tests/gpu/mock_nccl.c -o "$TMP/mock_nccl.so" -lrt 2>>"$TMP/cc.log"; then
  fail "build the CUDA and NCCL stand-ins" "$(head -3 "$TMP/cc.log")"; exit 0
fi
LIB=/usr/lib/x86_64-linux-gnu
BLAS=$(ls $LIB/openblas-pthread/libopenblas.a $LIB/libopenblas.a 2>/dev/null | head -1)
if ! cc -O1 -std=gnu11 -pthread -I. tests/gpu/coll_probe.c build/libruntime.a build/libcommon.a \
     $BLAS $LIB/liblua5.4.a "$(cc -print-file-name=libgomp.a)" -lm -ldl -o "$TMP/probe" \
     2>"$TMP/pcc.log"; then
  fail "build tests/gpu/coll_probe.c (make tests-build first)" "$(grep -m2 error "$TMP/pcc.log")"
  exit 0
fi
# probe NAME MODEL G1 G2 -D ...: a plan of MODEL with the probe buffers and collectives added at the
# end of its backward (the steps' indices before them, and so the buffers' live ranges, stay as
# they are); the collectives named tp below run on group G1, those named dp on group G2
probe_plan() {
  local name=$1 model=$2 g1=$3 g2=$4; shift 4
  "$BOOST" gen "$model" -D micro_batch=1 -D seq=16 "$@" -o "$TMP/$name" >"$TMP/gen.log" 2>&1 ||
    { fail "generate $model $*" "$(tail -2 "$TMP/gen.log")"; exit 0; }
  python3 - "$TMP/$name/plan.txt" "$g1" "$g2" <<'PY'
import re, sys
path, grp = sys.argv[1], {'tp': sys.argv[2], 'dp': sys.argv[3]}
lines = open(path).read().split('\n')
arena = next(i for i, l in enumerate(lines) if l.startswith('arena act bytes='))
base = -(-int(lines[arena].split('=')[1]) // 256) * 256
bufs = [('rs_tp_sum', 'fp32', 1, 7), ('rs_tp_avg', 'fp32', 1, 7), ('rs_dp_sum', 'fp32', 1, 7),
        ('rs_dp_avg', 'fp32', 1, 7), ('rs_tp_b16', 'bf16', 1, 9), ('rs_dp_b16', 'bf16', 1, 9),
        ('ag_src', 'fp32', 3, 5), ('ag_tp', 'fp32', 3, 5), ('ag_dp', 'fp32', 3, 5),
        ('ag16_src', 'bf16', 2, 3), ('ag16_dp', 'bf16', 2, 7), ('ag16_tp', 'bf16', 2, 7),
        ('ar_tp_sum', 'fp32', 1, 7), ('ar_tp_avg', 'fp32', 1, 7)]
lines[arena] = 'arena act bytes=%d' % (base + 256 * len(bufs))
last_buf = max(i for i, l in enumerate(lines) if l.startswith('buffer '))
decl = ['buffer P.%s dtype=%s shape=%dx%d offset=%d live=0:1000000' % (n, d, r, c, base + 256 * k)
        for k, (n, d, r, c) in enumerate(bufs)]
steps = []
RS = [('rs_tp_sum', 'sum', 'tp', 'fp32', 7), ('rs_tp_avg', 'avg', 'tp', 'fp32', 7),
      ('rs_dp_sum', 'sum', 'dp', 'fp32', 7), ('rs_dp_avg', 'avg', 'dp', 'fp32', 7),
      ('rs_tp_b16', 'sum', 'tp', 'bf16', 9), ('rs_dp_b16', 'avg', 'dp', 'bf16', 9)]
for n, op, g, dt, e in RS:
    steps.append('reduce_scatter buf=P.%s elems=%d dtype=%s op=%s dir=bwd group=%s tag=P.%s'
                 % (n, e, dt, op, grp[g], n))
for n, op in [('ar_tp_sum', 'sum'), ('ar_tp_avg', 'avg')]:
    steps.append('allreduce buf=P.%s elems=7 dtype=fp32 op=%s dir=bwd group=%s tag=P.%s'
                 % (n, op, grp['tp'], n))
for src, dst, g, dt, r, c, lds, ldd in [('ag_src', 'ag_tp', 'tp', 'fp32', 3, 2, 5, 5),
                                        ('ag_src', 'ag_dp', 'dp', 'fp32', 3, 2, 5, 5),
                                        ('ag16_src', 'ag16_dp', 'dp', 'bf16', 2, 3, 3, 7),
                                        ('ag16_src', 'ag16_tp', 'tp', 'bf16', 2, 3, 3, 7)]:
    steps.append('allgather src=P.%s dst=P.%s rows=%d cols=%d ld_src=%d ld_dst=%d dtype=%s dir=bwd '
                 'group=%s tag=P.%s' % (src, dst, r, c, lds, ldd, dt, grp[g], dst))
bwd = lines.index('section optimizer')
lines[bwd:bwd] = ['# probe collectives'] + steps + ['']
lines[last_buf + 1:last_buf + 1] = decl
open(path, 'w').write('\n'.join(lines))
PY
}
probe_plan d2t2 tiny-cola tp dp -D dp=2 -D tp=2
probe_plan d1t2 tiny-cola tp dp -D tp=2
probe_plan d4e2 specs/runs/tiny-cola-moe.lua ep edp -D dp=4 -D ep=2 -D tp=1
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so"
export BOOST_LIBNCCL="$TMP/mock_nccl.so" BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp"
export BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}" BOOST_EMU_CACHE="${BOOST_EMU_CACHE:-$TMP/emu}"
export BOOST_NCCL_TIMEOUT=120 MOCK_NCCL_TIMEOUT=120
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS BOOST_RANK
unset BOOST_WORLD_SIZE BOOST_NCCL_ID_FILE

# world PLAN OUT [direct]: the probe as dp*tp processes on the stand-ins (rank 0 first, the
# others once its NCCL id is written); every rank's lines into OUT; sets rc (0: all succeeded)
world() {
  local plan=$1 out=$2 how=$3 n=4 pids=() r t=0
  export BOOST_NCCL_ID_FILE="$TMP/$plan.$RANDOM.id" BOOST_EMU_SOURCE="$TMP/$plan/kernels.cu"
  BOOST_WORLD_SIZE=$n BOOST_RANK=0 timeout 400 "$TMP/probe" "$TMP/$plan" cuda $how \
    >"$out.0" 2>"$out.0.err" &
  local pid0=$!
  while [ ! -e "$BOOST_NCCL_ID_FILE" ] && [ $t -lt 3000 ] && kill -0 $pid0 2>/dev/null; do
    sleep 0.1; t=$((t + 1))
  done
  for ((r = 1; r < n; r++)); do
    BOOST_WORLD_SIZE=$n BOOST_RANK=$r timeout 400 "$TMP/probe" "$TMP/$plan" cuda $how \
      >"$out.$r" 2>"$out.$r.err" &
    pids+=($!)
  done
  wait $pid0; rc=$?
  for p in "${pids[@]}"; do wait $p || rc="$rc/$?"; done
  [ "${rc//[\/0]/}" = "" ] && rc=0
  cat "$out".[0-9] >"$out"
  unset BOOST_NCCL_ID_FILE
}
# local_run PLAN BACKEND OUT [direct]: the probe in one process (ranks as threads)
local_run() {
  BOOST_EMU_SOURCE="$TMP/$1/kernels.cu" timeout 400 "$TMP/probe" "$TMP/$1" $2 $4 >"$3" 2>"$3.err"
  rc=$?
}
# expect PLAN OUT: every rank's probe buffers in OUT hold what the catalog says (only the defined
# parts: a reduce_scatter's shard, an allgather's column blocks)
expect() {
  python3 - "$TMP/$1/plan.txt" "$2" >"$TMP/expect.log" 2>&1 <<'PY'
import sys
plan, out = sys.argv[1], sys.argv[2]
kv = lambda l: dict(x.split('=', 1) for x in l.split()[1:] if '=' in x)
run = kv(next(l for l in open(plan) if l.startswith('run ')))
dp, tp, ep = int(run['dp']), int(run['tp']), int(run.get('ep', 1))
got = {}
for l in open(out):
    w = l.split()
    if w and w[0] == 'rank': got[(int(w[1]), w[2])] = [float(x) for x in w[3:]]
if len(got) == 0: print('no probe lines'); sys.exit(1)
inp = lambda g, n: [g * 16 + i + 1 for i in range(n)]
def members(g, grp):   # the group's ranks in member order, this rank's index (runtime/grid.c)
    d, t = divmod(g, tp)
    if grp == 'tp': return [d * tp + j for j in range(tp)], t
    dps = {'dp': range(dp), 'ep': range(d - d % ep, d - d % ep + ep),
           'edp': range(d % ep, dp, ep)}[grp]
    m = [k * tp + t for k in dps]
    return m, m.index(g)
bad, checked = [], 0
for l in open(plan):
    if not (l.startswith('reduce_scatter buf=P.') or l.startswith('allgather src=P.') or
            l.startswith('allreduce buf=P.')): continue
    a = kv(l)
    for g in range(dp * tp):
        m, me = members(g, a['group'])
        n = len(m)
        if not l.startswith('allgather'):
            name, e = a['buf'], int(a['elems'])
            s = -(-e // n)
            whole = l.startswith('allreduce')   # every element; a reduce_scatter: the shard
            for i in (range(e) if whole else range(me * s, min((me + 1) * s, e))):
                want = sum(inp(q, e)[i] for q in m) / (n if a['op'] == 'avg' else 1)
                have = got[(g, name)][i]; checked += 1
                if abs(have - want) > 1e-6 * abs(want):
                    bad.append('rank %d %s[%d] %g, want %g' % (g, name, i, have, want))
        else:
            name, rows, cols = a['dst'], int(a['rows']), int(a['cols'])
            lds, ldd = int(a['ld_src']), int(a['ld_dst'])
            src = lambda q: inp(q, len(got[(q, a['src'])]))   # as written (the gather leaves it)
            for q in range(n):
                for r in range(rows):
                    for c in range(cols):
                        want = src(m[q])[r * lds + c]
                        have = got[(g, name)][r * ldd + q * cols + c]
                        checked += 1
                        if have != want:
                            bad.append('rank %d %s[%d,%d] %g, want %g' % (g, name, r, q * cols + c,
                                                                          have, want))
print('%d values checked, %d wrong%s' % (checked, len(bad), bad and ': ' + '; '.join(bad[:4])
                                         or ''))
sys.exit(1 if bad or checked == 0 else 0)
PY
}
verdict() {   # verdict WHAT PLAN OUT
  if [ "$rc" = 0 ] && expect "$2" "$3"; then ok "$1: $(cat "$TMP/expect.log")"
  else fail "$1" "exit $rc: $(cat "$TMP/expect.log") $(tail -q -n 2 "$3"*.err 2>/dev/null |
    tr '\n' ' ' | cut -c1-600)"; fi
}

local_run d2t2 cpu "$TMP/cpu22"
verdict "cpu dp=2 x tp=2 (threads): reduce_scatter and allgather over tp and dp" d2t2 "$TMP/cpu22"
world d2t2 "$TMP/w22"
verdict "cuda dp=2 x tp=2 as 4 processes, overlapped: reduce_scatter, allgather over tp and dp" \
  d2t2 "$TMP/w22"
BOOST_NO_OVERLAP=1 world d2t2 "$TMP/w22n"
verdict "cuda dp=2 x tp=2 as 4 processes, issued and waited for at once (BOOST_NO_OVERLAP=1)" \
  d2t2 "$TMP/w22n"
world d2t2 "$TMP/w22d" direct
verdict "cuda dp=2 x tp=2 as 4 processes, the backend's synchronous collective" d2t2 "$TMP/w22d"
local_run d1t2 cuda "$TMP/l12"
verdict "cuda tp=2 in one process, overlapped: group=tp over the threads, group=dp of one" \
  d1t2 "$TMP/l12"
BOOST_NO_OVERLAP=1 local_run d1t2 cuda "$TMP/l12n"
verdict "cuda tp=2 in one process, issued and waited for at once (BOOST_NO_OVERLAP=1)" \
  d1t2 "$TMP/l12n"
local_run d1t2 cuda "$TMP/l12d" direct
verdict "cuda tp=2 in one process, the backend's synchronous collective" d1t2 "$TMP/l12d"
local_run d1t2 cpu "$TMP/cpu12"
verdict "cpu tp=2 (threads): group=tp, group=dp of one" d1t2 "$TMP/cpu12"
local_run d4e2 cpu "$TMP/cpu42"
verdict "cpu dp=4 x ep=2 (threads): reduce_scatter, allgather, allreduce over ep and edp" \
  d4e2 "$TMP/cpu42"
world d4e2 "$TMP/w42"
verdict "cuda dp=4 x ep=2 as 4 processes, overlapped: the same over ep and edp" d4e2 "$TMP/w42"
BOOST_NO_OVERLAP=1 world d4e2 "$TMP/w42n"
verdict "cuda dp=4 x ep=2 as 4 processes, issued and waited for at once (BOOST_NO_OVERLAP=1)" \
  d4e2 "$TMP/w42n"
world d4e2 "$TMP/w42d" direct
verdict "cuda dp=4 x ep=2 as 4 processes, the backend's synchronous collective" d4e2 "$TMP/w42d"
# one process: a tp allreduce op=avg of a bf16 buffer is refused (the mean would be rounded twice),
# naming the buffer, as a reduce_scatter's is
rm -rf "$TMP/d1t2b" && cp -r "$TMP/d1t2" "$TMP/d1t2b"
line='allreduce buf=P.rs_tp_b16 elems=9 dtype=bf16 op=avg dir=bwd group=tp tag=P.x'
sed -i "s/^# probe collectives\$/&\\n$line/" "$TMP/d1t2b/plan.txt"
local_run d1t2b cuda "$TMP/l12b"
want="allreduce of P.rs_tp_b16 over group=tp in one process.*op=avg needs an fp32"
if [ "$rc" != 0 ] && grep -q "$want" "$TMP/l12b.err"; then
  ok "cuda tp=2 in one process: allreduce op=avg of a bf16 buffer is refused with a message"
else
  fail "cuda tp=2 in one process: allreduce op=avg of a bf16 buffer is refused" \
    "exit $rc: $(tail -2 "$TMP/l12b.err" | cut -c1-300)"
fi
