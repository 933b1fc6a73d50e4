#!/usr/bin/env bash
# house_rules.sh: the layout rules README.md states, checked on the built objects of gen/, runtime/,
# common/ and cli/ (make builds them): no circle between the project's files (a file X.c with its
# header X.h is one module; X uses Y when it includes Y.h or calls what Y.c defines), and no mutable
# state at file or function scope (.data/.bss of an object) outside the process-wide tables below,
# and one header per .c (X.h declares only functions X.c defines) outside the headers listed below.
# (gen/ includes nothing of runtime/: tests/sh/gen_layers.sh.)
cd "$(dirname "$0")/../.." || exit 2
. tests/sh/lib.sh

# Circles known today, each "module module ..." in sorted order, with why it is still allowed.
# Delete an entry once its circle is gone (the script says so).
ALLOWED_CIRCLES=(
  # one backend split by job over files that share cuda_internal.h (runtime/cuda.c's head comment)
  "runtime/cuda runtime/cuda_adamw runtime/cuda_coll runtime/cuda_gemm runtime/cuda_graph runtime/cuda_internal runtime/cuda_jit runtime/cuda_libs runtime/cuda_mem runtime/cuda_pipe runtime/cuda_world runtime/cuda_zero2"
)

# Mutable process-wide state allowed, "file symbol: why" (a function-scope static by its name).
ALLOWED_STATE=(
  "runtime/comm_mpi.c M: libmpi's entry points, loaded once per process with dlopen"
  "runtime/comm_mpi.c world: MPI_COMM_WORLD, one per process"
  "runtime/comm_mpi.c initialised: MPI_Init is called once per process"
  "runtime/comm_mpi.c finished: MPI_Finalize is called once per process"
  "runtime/comm_mpi.c last_err: the last MPI error text, for comm_mpi_error"
  "runtime/comm_mpi.c agreed_status: the status all ranks agreed on before MPI_Finalize"
  "runtime/comm_mpi.c finish_status: the exit status a signal handler passes to MPI_Abort"
  "runtime/cpu_gemm.c blas_once: OpenBLAS's thread count is set once per process"
  "runtime/cpu_gemm.c g_threads: the CPU backend's thread count (BOOST_THREADS), per process"
  "runtime/cpu_kernels.c rope_tables: RoPE sin/cos tables shared by all ranks, under rope_mu"
  "runtime/cpu_kernels.c rope_ntables: the number of rope_tables filled"
  "runtime/cpu_kernels.c rope_mu: guards rope_tables"
  "runtime/cuda_libs.c api: the CUDA driver and cuBLAS entry points, loaded once per process"
  "runtime/cuda_libs.c api_once: api is loaded once"
  "runtime/cuda_libs.c api_ok: whether api loaded"
  "runtime/cuda_libs.c api_why: why api did not load"
  "runtime/cuda_libs.c nccl: NCCL's entry points, loaded once per process"
  "runtime/cuda_libs.c nccl_once: nccl is loaded once"
  "runtime/cuda_libs.c nccl_ok: whether nccl loaded"
  "runtime/cuda_libs.c nccl_why: why nccl did not load"
  "runtime/cuda_jit.c shared: the device context and module the ranks of one process share"
  "runtime/cuda_jit.c shared_mu: guards shared"
  "runtime/cuda_gemm.c mu: guards the once-per-process note of a grouped-GEMM refusal"
  "runtime/cuda_gemm.c seen: the grouped-GEMM refusals already noted"
  "runtime/cuda_gemm.c nseen: the number of seen entries"
  "runtime/data.c map_notes: the mapped token files, named by the SIGBUS handler"
  "runtime/data.c last_checkpoint: the last checkpoint, named by the SIGBUS handler"
  "runtime/data.c installed: the SIGBUS handler is installed once"
  "runtime/train.c stop_signal: the signal that asked the run to stop (a handler sets it)"
  "runtime/train.c old_int: the SIGINT action to restore"
  "runtime/train.c old_term: the SIGTERM action to restore"
  "runtime/train.c int_caught: whether the handlers are installed"
  "runtime/train.c moe_json: the MoE log fields of a step (64 KiB, too big for the stack)"
  "common/env.c env_read: the runtime's environment variables, read once per process"
  "common/env.c env_once: env_read is read once"
  "common/crc32c.c table: the CRC-32C table, filled once"
  "common/crc32c.c table_once: table is filled once"
  "common/crc32c.c have: whether the CPU has SSE4.2's crc32, asked once"
  "common/cudalibs.c wheel_roots: the Python wheels' nvidia/ folders, found once"
  "common/cudalibs.c wheel_once: wheel_roots is found once"
  "common/nvrtc.c nv: NVRTC's entry points, loaded once per process"
  "common/nvrtc.c nv_lock: guards nv"
  "cli/kernels.c st: a kernel's NVRTC figures (too big for the stack)"
  "cli/plot_moe.c v: the plotted table (too big for the stack)"
  "cli/train.c lock_path: the run's lock file, removed at exit"
  "cli/train.c names: -D names kept for the whole run"
)

objs=() stale=""
for c in gen/*.c runtime/*.c common/*.c cli/*.c; do
  o=build/${c%.c}.o
  [ -f "$o" ] && [ ! "$c" -nt "$o" ] || stale="$stale $c"
  objs+=("$o")
done
if [ -n "$stale" ]; then
  ok "no circle between files # SKIP objects missing or older than their source (make first):$stale"
  ok "no mutable state outside the listed tables # SKIP objects missing or out of date"
  exit 0
fi

# ---- circles: modules that reach each other through includes and calls
edges() {
  for o in "${objs[@]}"; do
    m=${o#build/}; m=${m%.o}
    nm "$o" | awk -v m="$m" '$1 == "U" { print "U", m, $2 }
                             NF == 3 && $2 ~ /^[TDBRC]$/ { print "D", m, $3 }'
  done
  grep -HE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(gen|runtime|common|cli)/' \
    gen/*.[ch] runtime/*.[ch] common/*.[ch] cli/*.[ch] |
    sed -E 's/^([^:]+)\.[ch]:.*"([^"]+)\.h".*/I \1 \2/'
}
circles=$(edges | awk '
  $1 == "D" { def[$3] = $2; next }
  $1 == "I" { if ($2 != $3) e[$2 " " $3] = 1; next }
  { nu++; ufrom[nu] = $2; usym[nu] = $3 }
  END {
    for (i = 1; i <= nu; i++)
      if ((usym[i] in def) && def[usym[i]] != ufrom[i]) e[ufrom[i] " " def[usym[i]]] = 1
    for (k in e) { split(k, p, " "); adj[p[1]] = adj[p[1]] " " p[2]; node[p[1]]; node[p[2]] }
    for (s in node) {
      delete seen; n = 0; q[n++] = s; seen[s] = 1
      for (h = 0; h < n; h++) {
        c = split(adj[q[h]], nb, " ")
        for (j = 1; j <= c; j++) if (!(nb[j] in seen)) { seen[nb[j]] = 1; q[n++] = nb[j] }
      }
      for (t in seen) reach[s " " t] = 1
    }
    for (s in node) {
      grp = ""
      for (t in node) if (reach[s " " t] && reach[t " " s]) grp = grp " " t
      if (split(grp, parts, " ") > 1) print grp
    }
  }' | while read -r line; do tr ' ' '\n' <<<"$line" | sort | paste -sd' '; done | sort -u)

bad="" allowed_seen=""
while read -r grp; do
  [ -z "$grp" ] && continue
  found=0
  for a in "${ALLOWED_CIRCLES[@]}"; do [ "$a" = "$grp" ] && found=1; done
  [ $found = 1 ] && allowed_seen="$allowed_seen|$grp" || bad="$bad [$grp]"
done <<<"$circles"
[ -z "$bad" ] && ok "no circle between files (besides the ${#ALLOWED_CIRCLES[@]} listed)" \
  || fail "no circle between files" "these modules use each other:$bad (a header declares what \
its own .c defines; a piece both need goes into a module of its own)"
for a in "${ALLOWED_CIRCLES[@]}"; do
  case "$allowed_seen|" in
    *"|$a|"*) ;;
    *) echo "# the circle [$a] is gone: delete its ALLOWED_CIRCLES entry" ;;
  esac
done

# ---- mutable state: objects' symbols in .data/.bss (.data.rel.ro is read-only after loading)
state=$(for o in "${objs[@]}"; do
  c=${o#build/}; c=${c%.o}.c
  objdump -t "$o" | awk -v c="$c" '$0 ~ /[ \t]O[ \t]/ {
      for (i = 1; i <= NF; i++) if ($i ~ /^\.(data|bss|tdata|tbss)/ && $i !~ /rel\.ro/) {
        s = $NF; sub(/\.[0-9]+$/, "", s); print c, s } }'
done | sort -u)
unlisted=""
while read -r file sym; do
  [ -z "$file" ] && continue
  found=0
  for a in "${ALLOWED_STATE[@]}"; do [ "${a%%:*}" = "$file $sym" ] && found=1; done
  [ $found = 1 ] || unlisted="$unlisted $file:$sym"
done <<<"$state"
n=${#ALLOWED_STATE[@]}
[ -z "$unlisted" ] && ok "no mutable state outside the $n listed process-wide tables" \
  || fail "no mutable state outside the listed process-wide tables" "found:$unlisted (keep it in \
the caller's structs, or make it const; a process-wide table goes into ALLOWED_STATE with a reason)"
gone=""
for a in "${ALLOWED_STATE[@]}"; do
  key=${a%%:*}
  grep -qxF "$key" <<<"$state" || gone="$gone ${key/ /:}"
done
[ -z "$gone" ] || echo "# listed but gone (delete their ALLOWED_STATE entries):$gone"

# ---- headers: X.h declares only functions X.c defines; a header without a .c declares none.
# Headers that still declare other files' functions, "header: why" (issue 22: to be split one
# header per .c); delete the entry once the header keeps to the rule (the script says so).
ALLOWED_HEADERS=(
  "gen/gen.h: the generator's public API for cli/ and the tests (spec.c, write.c, infer_plan.c)"
  "gen/project.h: the cost model's API (project_model.c, project_sched.c)"
  "runtime/runtime.h: the runtime's public API (the engine, runtime/exec.c)"
  "runtime/cuda_internal.h: shared by the files of the one CUDA backend (runtime/cuda_*.c)"
  "runtime/cuda.h: the CUDA backend's offers besides backend_cuda (runtime/cuda_jit.c)"
  "runtime/bpe.h: declares bpe_train.c too"
  "cli/commands.h: the subcommands' entry points, one per cli/*.c, for cli/main.c"
  "cli/plot_moe.h: declares cli/plot.c's gnuplot helpers too"
)
# declared: "header name" for every function a header declares (gcc -aux-info; static inline
# functions are definitions, not declarations). Standard headers come first for the few headers
# that lean on their includer's.
declared() {
  local h aux=$TMP/decl.aux
  for h in gen/*.h runtime/*.h common/*.h cli/*.h; do
    gcc -std=gnu11 -I. -I/usr/include/lua5.4 -include stddef.h -include stdint.h -include stdio.h \
      -fsyntax-only -aux-info "$aux" -x c "$h" 2>/dev/null || { echo "$h ?"; continue; }
    awk -v h="$h" '{ f = $2; sub(/^\.\//, "", f); sub(/:.*/, "", f) }
      f == h && $4 == "extern" { s = $0; sub(/^\/\*[^*]*\*\/ */, "", s); sub(/ *\(.*/, "", s)
                                 n = split(s, w, /[ *]+/); print h, w[n] }' "$aux"
  done
}
strays="" unreadable="" offenders=""
defined=$(nm -A --defined-only "${objs[@]}" | awk '{ sub(/:.*/, "", $1); print $1, $3 }')
while read -r h name; do
  [ -z "$h" ] && continue
  if [ "$name" = "?" ]; then unreadable="$unreadable $h"; continue; fi
  grep -qxF "build/${h%.h}.o $name" <<<"$defined" && continue
  offenders="$offenders $h"
  for a in "${ALLOWED_HEADERS[@]}"; do [ "${a%%:*}" = "$h" ] && continue 2; done
  strays="$strays $h:$name"
done < <(declared)
[ -z "$unreadable" ] || echo "# headers that do not compile on their own (not checked):$unreadable"
[ -z "$strays" ] && ok "one header per .c (besides the ${#ALLOWED_HEADERS[@]} listed)" \
  || fail "one header per .c" "declared in a header whose .c does not define them:$strays (X.h \
declares what X.c defines: move each declaration into the header of the .c that defines it)"
for a in "${ALLOWED_HEADERS[@]}"; do
  case "$offenders " in
    *" ${a%%:*} "*) ;;
    *) echo "# ${a%%:*} keeps to the rule now: delete its ALLOWED_HEADERS entry" ;;
  esac
done
