#!/usr/bin/env bash
# build.sh: builds what tests/gpu/run.sh needs: bin/boost (make) and build/gpu/check (check.c +
# check_steps.c + check_model.c linked with the runtime), and build/gpu/check_syncs (host waits per
# training step on the CUDA stand-in, for tests/sh/nvrtc_mock_overlap.sh). Run it on the build
# machine and carry bin/ and build/gpu/ to the GPU machine (it has no Lua or OpenBLAS packages to build with).
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
echo "built bin/boost and build/gpu/check"
