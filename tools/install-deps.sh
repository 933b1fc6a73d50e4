#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages the build and tests need, only those missing.
# Needs root (apt-get); as another user it only says what is missing.
set -euo pipefail
need=()
[ -f /usr/lib/x86_64-linux-gnu/liblua5.4.a ] || need+=(liblua5.4-dev)
[ -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || need+=(libopenblas-dev)
[ -d /usr/share/games/fortunes ] || need+=(fortunes)
command -v gnuplot >/dev/null || need+=(gnuplot-nox)
command -v python3 >/dev/null || need+=(python3)
command -v mpirun >/dev/null || need+=(openmpi-bin)
[ -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || need+=(libopenmpi-dev)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${need[*]}; run as root: apt-get install ${need[*]}" >&2
  exit 1
fi
echo "installing: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
