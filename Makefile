# Makefile: builds bin/boost (generator + runtime, Lua and OpenBLAS linked statically, CUDA loaded
# at run time), generates generated/, runs the tests and the demo. Installs missing Debian
# packages itself (tools/install-deps.sh) when run as root.
CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -pthread \
           -I. -I/usr/include/lua5.4 -I/usr/include/x86_64-linux-gnu/openblas-pthread \
           -DBOOST_CUDA_HOME=\"$(CUDA_HOME)\"
CUDA_HOME ?= /usr/local/cuda
LIBDIR  := /usr/lib/x86_64-linux-gnu
LUA_A   := $(LIBDIR)/liblua5.4.a
BLAS_A  := $(firstword $(wildcard $(LIBDIR)/openblas-pthread/libopenblas.a $(LIBDIR)/libopenblas.a))
# OpenMP's runtime linked statically too, so bin/boost runs where libgomp is not installed
GOMP_A  := $(shell $(CC) -print-file-name=libgomp.a)
LDLIBS  := $(LUA_A) $(BLAS_A) $(GOMP_A) -lm -lpthread -ldl
# the CPU backend's kernels: vectorised (-O3; sqrt without errno; -fno-trapping-math lets the compares
# of exp's range clamps become selects, so those loops vectorise: same bits) and split over threads (OpenMP)
CPU_FAST := -O3 -fno-math-errno -fno-trapping-math -fopenmp

GEN_SRC := $(wildcard gen/*.c)
RT_SRC  := $(wildcard runtime/*.c)
COM_SRC := $(wildcard common/*.c)
CLI_SRC := $(wildcard cli/*.c)
GEN_OBJ := $(GEN_SRC:%.c=build/%.o)
RT_OBJ  := $(RT_SRC:%.c=build/%.o)
COM_OBJ := $(COM_SRC:%.c=build/%.o)
CLI_OBJ := $(CLI_SRC:%.c=build/%.o)
TEST_SRC := $(wildcard tests/unit/*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=build/tests/%)

# the runs `make generate` writes under generated/ (RUN [-D ...] -> generated/NAME)
GENERATE_LIST := specs/generate.txt

.PHONY: all deps generate test test-sanitize demo bench clean check-generated
all: bin/boost

deps:
	@bash tools/install-deps.sh

build/%.o: %.c $(wildcard gen/*.h runtime/*.h cli/*.h common/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

build/runtime/cpu_kernels.o build/runtime/cpu.o build/runtime/cpu_gemm.o: CFLAGS += $(CPU_FAST)

build/libgen.a: $(GEN_OBJ)
	@mkdir -p build; rm -f $@; ar rcs $@ $^

build/libruntime.a: $(RT_OBJ)
	@mkdir -p build; rm -f $@; ar rcs $@ $^

build/libcommon.a: $(COM_OBJ)
	@mkdir -p build; rm -f $@; ar rcs $@ $^

LIBS := build/libgen.a build/libruntime.a build/libcommon.a

bin/boost: $(CLI_OBJ) $(LIBS)
	@mkdir -p bin
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

build/tests/%: tests/unit/%.c $(LIBS) tests/unit/testlib.h
	@mkdir -p build/tests
	$(CC) $(CFLAGS) $< $(LIBS) -o $@ $(LDLIBS)

# fexp's NaN path under UBSan: an undefined shift or float->int conversion stops the test
build/tests/test_cpu_fexp: private CFLAGS += $(CPU_FAST) -fsanitize=shift,float-cast-overflow -fno-sanitize-recover=all

# unit tests that #include a stand-in's source are rebuilt when it changes
build/tests/test_mock_refusals: tests/gpu/mock_cuda.c
build/tests/test_mock_nccl_refusals build/tests/test_mock_nccl_split: tests/gpu/mock_nccl.c

tests-build: bin/boost $(TEST_BIN)

# ---- the sanitizer lane: the same sources built with AddressSanitizer and
# UndefinedBehaviorSanitizer under build/san/ (objects, libraries, boost and the chosen test programs of its own), then
# tests/sanitize.sh runs the file readers' unit tests, their seeded fuzzers and a few shell tests
# against that build. Measured from scratch: 116 s wall on a busy shared 2-core machine, 40 s of CPU
# (build 75 s wall, runs 42 s); the budget is 200 s, so add programs by their cost.
# -O0 (the build is most of the lane's time) but the CPU kernels, which the shell tests' training runs;
# -w: the normal build reports warnings (at -O0 gcc's truncation analysis only repeats them louder)
SAN_FLAGS  := -O0 -g -w -fsanitize=address,undefined -fno-omit-frame-pointer \
              -fno-sanitize-recover=undefined
SAN_CFLAGS  = $(filter-out -O2,$(CFLAGS)) $(SAN_FLAGS)
SAN_TESTS  := test_crafted_files test_fuzz_files test_plan_bad_files test_plan_load test_ckpt \
              test_data test_train_log test_files
SAN_LIBS   := build/san/libgen.a build/san/libruntime.a build/san/libcommon.a

build/san/%.o: %.c $(wildcard gen/*.h runtime/*.h cli/*.h common/*.h)
	@mkdir -p $(dir $@)
	@$(CC) $(SAN_CFLAGS) $(SAN_EXTRA) -c $< -o $@

build/san/runtime/cpu_kernels.o build/san/runtime/cpu.o build/san/runtime/cpu_gemm.o: SAN_EXTRA = -O1 -fopenmp

build/san/libgen.a: $(GEN_SRC:%.c=build/san/%.o)
	@rm -f $@; ar rcs $@ $^
build/san/libruntime.a: $(RT_SRC:%.c=build/san/%.o)
	@rm -f $@; ar rcs $@ $^
build/san/libcommon.a: $(COM_SRC:%.c=build/san/%.o)
	@rm -f $@; ar rcs $@ $^

build/san/boost: $(CLI_SRC:%.c=build/san/%.o) $(SAN_LIBS)
	@$(CC) $(SAN_CFLAGS) $^ -o $@ $(LDLIBS)

build/san/tests/%: tests/unit/%.c $(SAN_LIBS) tests/unit/testlib.h
	@mkdir -p build/san/tests
	@$(CC) $(SAN_CFLAGS) $< $(SAN_LIBS) -o $@ $(LDLIBS)

test-sanitize:
	@t0=$$(date +%s); \
	  $(MAKE) --no-print-directory -j2 build/san/boost $(SAN_TESTS:%=build/san/tests/%) && \
	  echo "test-sanitize: built build/san/ in $$(( $$(date +%s) - t0 )) s"
	@SAN_TESTS="$(SAN_TESTS)" bash tests/sanitize.sh

generate: bin/boost
	@bash tools/generate.sh

test: deps
	@$(MAKE) --no-print-directory tests-build
	@bash tests/run.sh

# demo: tiny-cola on the fortunes corpus, two tensor-parallel ranks (cpu threads unless a GPU is
# there), 2000 steps (63 s of CPU time over its two threads, so about 35 s on 2 idle cores; 3 min
# measured on a busy shared one; it prints its time), checkpoints in build/demo, the loss curve
# drawn into build/demo/train.png when gnuplot is installed, then a short sample from the trained model
demo: deps
	@$(MAKE) --no-print-directory bin/boost
	@rm -f build/demo/train.jsonl
	@date +%s >build/demo-start
	./bin/boost train specs/runs/tiny-cola.lua -D tp=2 -D steps=2000 -D eval_every=250 --backend auto \
	    --save-every 500 --log build/demo/train.jsonl -o build/demo
	@echo "demo: 2000 steps in $$(( $$(date +%s) - $$(cat build/demo-start) )) s"
	@./bin/boost plot build/demo/train.jsonl -o build/demo/train.png --title "tiny-cola, tp=2, btp" \
	    || echo "(no plot: $$(command -v gnuplot >/dev/null && echo 'boost plot failed' || echo 'gnuplot is not installed'))"
	@echo "--- what the trained model writes (boost sample build/demo --prompt 'The ' --temperature 0.7):"
	@./bin/boost sample build/demo --prompt "The " --tokens 200 --temperature 0.7 --seed 1 --backend auto 2>/dev/null

bench: bin/boost
	@bash bench/run.sh

clean:
	rm -rf build bin
