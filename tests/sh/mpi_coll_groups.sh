#!/usr/bin/env bash
# mpi_coll_groups.sh: reduce_scatter (op=sum, op=avg) and allgather on group=tp and group=dp of a
# dp=2 x tp=2 grid, and on group=ep and group=edp of a dp=4 x ep=2 grid, with one rank per process
# under mpirun -np 4 (the CPU backend's MPI transport):
# build/tests/test_coll_groups checks each process's rank against values it computes itself.
# Without mpirun it prints a skip line.
. tests/sh/lib.sh
bin=build/tests/test_coll_groups
if ! command -v mpirun >/dev/null; then
  ok "mpi_coll_groups # SKIP mpirun is not installed (Debian's openmpi-bin, tools/install-deps.sh)"; exit 0
fi
[ -x "$bin" ] || { fail mpi_coll_groups "$bin is not built: run make tests-build"; exit 0; }
BOOST_THREADS=1 timeout 300 mpirun --oversubscribe --allow-run-as-root -np 4 "$bin" >"$TMP/out" 2>&1
rc=$?
[ $rc = 0 ] && ok mpi_coll_groups_exit || fail mpi_coll_groups_exit "mpirun exited $rc: $(tail -3 "$TMP/out")"
for r in 0 1 2 3; do
  n=$(grep -c "^ok - rank $r: \(reduce_scatter\|allgather\)" "$TMP/out")
  if grep -q "^rank $r: 0 checks failed" "$TMP/out" && [ "$n" = 12 ]; then
    ok "mpi_coll_groups_rank$r (4 reduce_scatters, 2 allgathers on tp/dp and on ep/edp, MPI)"
  else
    fail "mpi_coll_groups_rank$r" \
      "$n of 12 checks passed: $(grep "FAIL - rank $r\|^rank $r" "$TMP/out" | head -3)"
  fi
done
