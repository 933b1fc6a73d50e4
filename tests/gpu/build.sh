#!/usr/bin/env bash
# build.sh: builds what tests/gpu/run.sh needs: bin/boost (make) and build/gpu/check (check.c +
# check_steps.c + check_model.c linked with the runtime), and build/gpu/check_syncs (host waits per
# training step on the CUDA stand-in, for tests/sh/nvrtc_mock_overlap.sh); then packs what the GPU
# machine needs into build/gpu-carry/carry.tar.xz: bin/boost and build/gpu/check stripped, and
# build/corpus.txt, xz with a 48 MiB window (the two binaries share most bytes: ~3.5 MiB in all).
# Run it on the build machine and carry build/gpu-carry (the only folder to name; docs/cuda.md
# gives the call): the GPU machine has no Lua or OpenBLAS packages to build with.
set -e
cd "$(dirname "$0")/../.."
make --no-print-directory -j"$(nproc)" bin/boost build/libruntime.a build/libcommon.a >/dev/null
mkdir -p build/gpu
CFLAGS="-O2 -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -pthread -I."
BLAS=$(ls /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a /usr/lib/x86_64-linux-gnu/libopenblas.a 2>/dev/null | head -1)
BLAS="$BLAS $(cc -print-file-name=libgomp.a)"   # the CPU kernels' OpenMP runtime, linked statically
cc $CFLAGS -Dmain=check_steps_main -c tests/gpu/check_steps.c -o build/gpu/check_steps.o.$$
mv build/gpu/check_steps.o.$$ build/gpu/check_steps.o
cc $CFLAGS -Dmain=check_model_main -c tests/gpu/check_model.c -o build/gpu/check_model.o.$$
mv build/gpu/check_model.o.$$ build/gpu/check_model.o
# linked under a temporary name and renamed: a test running the old binary keeps running it
cc $CFLAGS tests/gpu/check.c build/gpu/check_steps.o build/gpu/check_model.o build/libruntime.a build/libcommon.a \
   $BLAS -lm -lpthread -ldl -o build/gpu/check.$$
mv build/gpu/check.$$ build/gpu/check
cc $CFLAGS tests/gpu/check_syncs.c build/libruntime.a build/libcommon.a $BLAS -lm -lpthread -ldl -o build/gpu/check_syncs.$$
mv build/gpu/check_syncs.$$ build/gpu/check_syncs
rm -f build/gpu/check_steps build/gpu/check_model
# the carry: repacked only when an input is newer than it (the dry-run test calls this script often)
CARRY=build/gpu-carry/carry.tar.xz
inputs=(bin/boost build/gpu/check)
[ -f build/corpus.txt ] && inputs+=(build/corpus.txt)
fresh=1
[ -f "$CARRY" ] || fresh=0
for f in "${inputs[@]}"; do [ "$f" -nt "$CARRY" ] && fresh=0; done
if [ "$fresh" = 0 ]; then
  stage=$(mktemp -d build/gpu-carry-stage.XXXXXX)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/bin" "$stage/build/gpu" build/gpu-carry
  strip -o "$stage/bin/boost" bin/boost
  strip -o "$stage/build/gpu/check" build/gpu/check
  [ -f build/corpus.txt ] && cp build/corpus.txt "$stage/build/corpus.txt"
  echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo +changes)" \
    >"$stage/build/gpu/commit.txt"
  tar -C "$stage" -cf - bin build | xz -T1 --lzma2=preset=1,dict=48MiB >"$CARRY.tmp$$"
  mv "$CARRY.tmp$$" "$CARRY"
fi
echo "built bin/boost and build/gpu/check; carry build/gpu-carry ($(du -k "$CARRY" | cut -f1) KiB)"
