# edge0 — build, test, sanitize, fuzz.  `make help` lists the targets.
#
# Out-of-tree builds: `build/` (default), `build-asan/` (make asan).
# Every C file under src/ except src/cli/ goes into libedge0.a; src/cli/ makes
# the `edge0` binary; each tests/test_*.c is one test program.

CC      ?= cc
BUILD   ?= build
SHARED  ?= ../shared
OPT     ?= -O2 -g
SAN     ?=
WARN    = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
          -Wno-unused-parameter -Wformat=2 -Wvla
CFLAGS  = -std=c11 -D_GNU_SOURCE $(OPT) $(SAN) $(WARN) -Iinclude -Isrc -MMD -MP -pthread
LDLIBS  = -lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -ledit -luring -lm -lpthread -ldl
LDFLAGS = $(SAN) -pthread

LIB_SRC  := $(sort $(filter-out src/cli/%,$(wildcard src/*/*.c)))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
# the GPU kernels' PTX, embedded by src/gpu/ptx.S (scripts/gpu_ptx.sh makes it)
LIB_ASM  := $(sort $(wildcard src/*/*.S))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(LIB_ASM:%.S=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TESTLIB_OBJ := $(BUILD)/tests/testutil.o $(BUILD)/tests/srvutil.o

.PHONY: all deps test test-clients test-gpu graph demo asan tsan tsan-build fuzz bench format help clean FORCE
all: $(BUILD)/edge0

# `edge0 --version`: the release and the git revision the binary was built
# from, rewritten only when they change (so main.o rebuilds only then).
E0_VERSION := 0.5.0
GIT_REV := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)
$(BUILD)/version.h: FORCE
	@mkdir -p $(BUILD)
	@printf '#define E0_VERSION "%s"\n#define E0_GIT_REV "%s"\n' "$(E0_VERSION)" "$(GIT_REV)" > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(BUILD)/src/cli/main.o: $(BUILD)/version.h
$(BUILD)/src/cli/main.o: CFLAGS += -I$(BUILD)

deps:
	@scripts/deps.sh

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.S
	@mkdir -p $(dir $@)
	$(CC) -c $< -o $@
$(BUILD)/src/gpu/ptx.o: src/gpu/kernels.ptx

$(BUILD)/libedge0.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/edge0: $(CLI_OBJ) $(BUILD)/libedge0.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TESTLIB_OBJ) $(BUILD)/libedge0.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -lcmocka -o $@

# The concurrency tests also run under ThreadSanitizer (build-tsan/). test_cbatch's
# servers are $(E0_BIN) processes; its in-process server (the scheduler thread
# and the connection threads over one engine) is what TSan sees (~20 s).
TSAN_TESTS := build-tsan/tests/test_xcache build-tsan/tests/test_stream build-tsan/tests/test_batch \
              build-tsan/tests/test_prefix build-tsan/tests/test_cbatch build-tsan/tests/test_mprefill

# The shape of the tree first (scripts/include_graph.py: floors, cycles of
# includes and of calls, file and function sizes; about a second).
test: deps
	@scripts/include_graph.py
	@scripts/gpu_ptx.sh --check
	@$(MAKE) --no-print-directory $(BUILD)/edge0 $(TESTS)
	@scripts/include_graph.py --objects $(BUILD)
	@$(MAKE) --no-print-directory tsan-build
	@E0_BIN=$(BUILD)/edge0 E0_SHARED=$(SHARED) TSAN_OPTIONS=halt_on_error=1 tests/run.sh $(TESTS) $(TSAN_TESTS)

# The real clients (openai, @anthropic-ai/sdk, codex, claude, the Agents SDK,
# the AI SDK, LangChain) against `edge0 serve` on the demo model; their pinned
# versions and a Node to run them come from the npm registry into ~/.cache
# (scripts/clients_deps.sh). tests/clients/run.sh lists the cases expected to fail.
test-clients: deps
	@$(MAKE) --no-print-directory $(BUILD)/edge0
	@E0_BIN=$(BUILD)/edge0 tests/clients/run.sh

# On a machine with an NVIDIA GPU: the GPU tests must run, not skip.
test-gpu: $(BUILD)/edge0 $(BUILD)/tests/test_gpu
	@E0_BIN=$(BUILD)/edge0 E0_SHARED=$(SHARED) E0_REQUIRE_GPU=1 tests/run.sh $(BUILD)/tests/test_gpu

# The rooms of src/ and who includes whom (scripts/include_graph.py checks
# the floors, the cycles and the size limits; build/include_graph.dot for dot).
graph:
	@scripts/include_graph.py --graph --dot $(BUILD)/include_graph.dot

tsan-build:
	@$(MAKE) --no-print-directory BUILD=build-tsan OPT="-O1 -g" SAN="-fsanitize=thread" $(TSAN_TESTS)

tsan: deps tsan-build
	@TSAN_OPTIONS=halt_on_error=1 tests/run.sh $(TSAN_TESTS)

demo: deps
	@$(MAKE) --no-print-directory $(BUILD)/edge0
	$(BUILD)/edge0 demo

# AddressSanitizer + UndefinedBehaviorSanitizer over the whole suite.
asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" test

# libFuzzer targets, one per parser, each for a fixed time budget.
FUZZ_TIME ?= 20
FUZZ_TARGETS := $(patsubst fuzz/%.c,build-fuzz/%,$(sort $(wildcard fuzz/fuzz_*.c)))
FUZZ_LIB := $(filter-out src/server/%,$(LIB_SRC))
# The library is compiled once for every target. The SIMD kernels (arithmetic
# on buffers the tested code sized, no input parsing; make asan covers them)
# are built without instrumentation: with ASan and UBSan clang spends over
# ten minutes on their intrinsics, with libFuzzer's coverage too over an hour.
FUZZ_OBJ := $(FUZZ_LIB:%.c=build-fuzz/obj/%.o) $(LIB_ASM:%.S=build-fuzz/obj/%.o)
FUZZ_CC := clang -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc -MMD -MP
build-fuzz/obj/src/quant/kernels%.o: src/quant/kernels%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -c $< -o $@
build-fuzz/obj/%.o: %.S
	@mkdir -p $(dir $@)
	clang -c $< -o $@
build-fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -fsanitize=fuzzer-no-link,address,undefined -c $< -o $@
build-fuzz/fuzz_%: fuzz/fuzz_%.c $(FUZZ_OBJ)
	$(FUZZ_CC) -fsanitize=fuzzer,address,undefined $^ $(LDLIBS) -o $@
.SECONDARY: $(FUZZ_OBJ) # kept between targets, not removed as intermediates
-include $(FUZZ_OBJ:.o=.d)
fuzz: deps
	@$(MAKE) --no-print-directory $(FUZZ_TARGETS)
	@set -e; for t in $(FUZZ_TARGETS); do \
	    n=$$(basename $$t); mkdir -p build-fuzz/corpus-$$n; \
	    echo "== $$n ($(FUZZ_TIME)s)"; \
	    $$t -max_total_time=$(FUZZ_TIME) -max_len=65536 -print_final_stats=1 \
	        build-fuzz/corpus-$$n fuzz/seeds/$${n#fuzz_} 2>&1 | tail -4; \
	done

# Benchmarks (not tests): each bench/*.c is one program.
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(sort $(wildcard bench/*.c)))
$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libedge0.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
bench: $(BUILD)/edge0 $(BENCHES)

format:
	clang-format -i include/*.h src/*/*.c src/*/*.h tests/*.c tests/*.h fuzz/*.c

clean:
	rm -rf build build-asan build-tsan build-fuzz

help:
	@echo "make          build build/edge0"
	@echo "make demo     install missing packages, build, run the built-in demo"
	@echo "make test     install missing packages, build, run every test"
	@echo "make test-clients  the npm clients, codex and claude against edge0 serve (tests/clients)"
	@echo "make test-gpu the GPU tests, which must find a GPU (skipped by make test without one)"
	@echo "make asan     the test suite under AddressSanitizer + UBSan"
	@echo "make graph    the include graph of src/ by room (and $(BUILD)/include_graph.dot)"
	@echo "make tsan     the concurrency tests under ThreadSanitizer (also part of make test)"
	@echo "make fuzz     each libFuzzer target for FUZZ_TIME seconds (default $(FUZZ_TIME))"
	@echo "make bench    build the benchmark programs in build/bench/"
	@echo "make format   clang-format the tree"
	@echo "make clean    remove build directories"
	@echo "variables: SHARED=$(SHARED) (fixtures), OPT, CC, BUILD"

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
