# fsdpconv - single non-recursive Makefile.
#
# Define CUDA=1 to build the CUDA kernels (needs nvcc; see CUDA_HOME).
# Define NCCL=1 (with CUDA=1) to build the NCCL transport (see NCCL_HOME).
# Define URING=1 for direct writes through io_uring (needs liburing-dev; see URING below).
# Define CUDA_HOME=/path to use another CUDA toolkit (default /usr/local/cuda).
# Define NVCC_GENCODE="-gencode ..." to override the GPU architectures.
# Define SANITIZE=address,undefined to build with sanitizers.
# Define WERROR=1 to turn warnings into errors (CI does).
# Define DEBUG=1 for -O0 -g3 -DFC_DEBUG.
# Define V=1 for full command lines.
# Define PREFIX, DESTDIR, BINDIR, MANDIR for `make install`.
# Define VENV=/path for the Python venv used by fixtures and interop tests.
# Define TF5_VENV=/path for the second venv, with transformers 5 (make venv-tf5, test-interop).
# Define T211_VENV=/path for the third venv, torch 2.11 + torch-checkpointing (make venv-torch211,
#   test-interop reruns tests/interop/test_tcp_*.py with it).
# Define WHEEL_VENV=/path for the venv that builds and checks the wheel (make wheel, test-wheel).
# Define WHEEL=1 for the self-contained CPU binary of the Python wheel (build/wheel/, see
#   pyproject.toml): compiled and linked by zig cc against glibc $(WHEEL_GLIBC) symbol
#   versions, with zstd, libdeflate, jansson, PCRE2 and libcrypto linked statically.
#   WHEEL_PYTHON is the Python that has the ziglang package (WHEEL_CC overrides the compiler).
# Put local settings in config.mak (not committed).
#
# Dependency rules between layers (checked by `make check-deps`):
#   lib/      libc + libzstd, libdeflate, jansson, libcrypto; no convert/, kernels/, cmd/.
#             Inside lib/, one folder per layer, each using only the ones before it:
#             util/ <- pickle/ <- format/ <- source/
#   kernels/  only fc_error.h, fc_dtype.h, fc_tensor.h of lib/util/ (+ CUDA in .cu/cuda files)
#   convert/  lib/ and kernels/fc_kernels.h; only convert/comm_nccl.c may include nccl.h
#   cmd/      convert/fc_convert.h and lib/ public headers; never *_internal.h

-include config.mak

CC ?= cc
CFLAGS ?= -O2 -g
LDFLAGS ?=
CUDA ?= 0
NCCL ?= 0
# URING=1: the direct writer keeps up to 4 writes in flight through io_uring (liburing: Debian's
# liburing-dev, which make deps installs; where the kernel refuses io_uring it falls back at run
# time). Off by default: on the 2-core VM it measured no faster than one synchronous pwrite at a
# time per worker (README, "Direct I/O"; tests/bench/RESULTS_io.md, run 4).
URING ?= 0
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
NVCC_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NCCL_HOME ?= $(CUDA_HOME)
SANITIZE ?=
WERROR ?= 0
DEBUG ?= 0
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
VENV ?= $(HOME)/.cache/fsdpconv/venv
TF5_VENV ?= $(HOME)/.cache/fsdpconv/venv-tf5
T211_VENV ?= $(HOME)/.cache/fsdpconv/venv-torch211
WHEEL_VENV ?= $(HOME)/.cache/fsdpconv/wheel-venv
PYTHON := $(VENV)/bin/python

WHEEL ?= 0
WHEEL_GLIBC ?= 2.17
WHEEL_PYTHON ?= python3

ifeq ($(NCCL),1)
ifneq ($(CUDA),1)
$(error NCCL=1 requires CUDA=1)
endif
endif
ifeq ($(WHEEL),1)
ifneq ($(filter 1,$(CUDA) $(NCCL) $(DEBUG) $(GC_SECTIONS) $(URING))$(SANITIZE),)
$(error WHEEL=1 is the plain CPU build: no CUDA, NCCL, URING, SANITIZE, DEBUG or GC_SECTIONS)
endif
endif

# One build directory per configuration, so toggling a knob never links stale objects.
CFG := cpu
ifeq ($(CUDA),1)
CFG := cuda
ifeq ($(NCCL),1)
CFG := cuda-nccl
endif
endif
ifneq ($(SANITIZE),)
CFG := $(CFG)-san
endif
ifeq ($(DEBUG),1)
CFG := $(CFG)-debug
endif
ifeq ($(GC_SECTIONS),1)
CFG := $(CFG)-gc
endif
ifeq ($(URING),1)
CFG := $(CFG)-uring
endif
ifeq ($(WHEEL),1)
CFG := wheel
endif
B := build/$(CFG)

ifeq ($(V),1)
Q :=
else
Q := @
endif

PKGS := libzstd libdeflate jansson libcrypto libpcre2-8
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_CFLAGS := $(shell pkg-config --cflags cmocka 2>/dev/null)
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)

# The wheel's binary runs on any x86_64 Linux with glibc >= WHEEL_GLIBC: zig cc links
# against stubs of that glibc's symbol versions (the system's glibc would stamp its own,
# newer ones), and the five libraries are the -dev packages' static archives, found where the
# host compiler finds them. Their headers come after zig's libc headers, never before.
ifeq ($(WHEEL),1)
WHEEL_LIBNAMES := libzstd.a libdeflate.a libjansson.a libpcre2-8.a libcrypto.a
WHEEL_ARCHIVES := $(foreach a,$(WHEEL_LIBNAMES),$(shell cc -print-file-name=$(a) 2>/dev/null))
WHEEL_CC ?= $(WHEEL_PYTHON) -m ziglang cc -target $(shell uname -m)-linux-gnu.$(WHEEL_GLIBC)
CC := $(WHEEL_CC)
PKG_CFLAGS := $(patsubst -I%,-idirafter %,$(PKG_CFLAGS)) -idirafter /usr/local/include \
              -idirafter /usr/include -idirafter /usr/include/$(shell cc -print-multiarch 2>/dev/null)
PKG_LIBS := $(filter /%,$(WHEEL_ARCHIVES))
LDFLAGS += -s
endif

WARN := -Wall -Wextra -Wcast-qual -Wcast-align -Wshadow -Wstrict-aliasing=1 \
        -Wstrict-prototypes -Wundef -Wpointer-arith -Wformat-security -Wvla -Wformat=2 \
        -Wno-format-nonliteral -Wmissing-prototypes
ifeq ($(WERROR),1)
WARN += -Werror
endif

# lib/'s layers, lowest first; each folder is on the include path, so #include "fc_x.h"
# names a header wherever it lives.
LIB_DIRS := lib/util lib/pickle lib/format lib/source

FC_CPPFLAGS := $(addprefix -I,$(LIB_DIRS)) -Iconvert -Ikernels -D_POSIX_C_SOURCE=200809L \
               -D_DEFAULT_SOURCE \
               -DFC_VERSION=\"$(shell cat VERSION 2>/dev/null || echo 0.0.0)\"
FC_CFLAGS := -std=c11 $(WARN) -MMD -MP -pthread
FC_LDLIBS := $(PKG_LIBS) -pthread -lm
ifeq ($(DEBUG),1)
FC_CFLAGS += -O0 -g3 -DFC_DEBUG
endif
ifeq ($(GC_SECTIONS),1)
FC_CFLAGS += -ffunction-sections -fdata-sections -fno-inline
endif
ifneq ($(SANITIZE),)
FC_CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

LIB_SRC := $(sort $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)))
LIB_HDR := $(sort $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.h)))
CONVERT_SRC := $(sort $(filter-out convert/comm_nccl.c convert/comm_nccl_stub.c,$(wildcard convert/*.c)))
KERNEL_SRC := $(sort $(filter-out kernels/cuda_stub.c,$(wildcard kernels/*.c)))
CUDA_SRC :=
ifeq ($(CUDA),1)
FC_CPPFLAGS += -DFC_HAVE_CUDA -isystem $(CUDA_HOME)/include
CUDA_SRC := $(sort $(wildcard kernels/*.cu))
FC_LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart -lstdc++
else
KERNEL_SRC += $(wildcard kernels/cuda_stub.c)
endif
ifeq ($(NCCL),1)
FC_CPPFLAGS += -DFC_HAVE_NCCL -isystem $(NCCL_HOME)/include
CONVERT_SRC += $(wildcard convert/comm_nccl.c)
FC_LDLIBS += -L$(NCCL_HOME)/lib64 -L$(NCCL_HOME)/lib -lnccl
else
CONVERT_SRC += $(wildcard convert/comm_nccl_stub.c)
endif
ifeq ($(URING),1)
FC_CPPFLAGS += -DFC_HAVE_LIBURING $(shell pkg-config --cflags liburing)
FC_LDLIBS += $(shell pkg-config --libs liburing)
endif
CMD_SRC := $(sort $(wildcard cmd/*.c))

CORE_OBJ := $(patsubst %.c,$(B)/%.o,$(LIB_SRC) $(CONVERT_SRC) $(KERNEL_SRC)) \
            $(patsubst %.cu,$(B)/%.cu.o,$(CUDA_SRC))
CMD_OBJ := $(patsubst %.c,$(B)/%.o,$(CMD_SRC))
LIBFC := $(B)/libfc.a
BIN := $(B)/fsdpconv

UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(FUZZ_SRC))
GPU_SRC := $(sort $(wildcard tests/gpu/test_*.c))
GPU_BIN := $(patsubst tests/gpu/%.c,$(B)/gpu/%,$(GPU_SRC))

.PHONY: all fsdpconv wheel-bin wheel test-wheel check-unused unused-list deps venv venv-tf5 venv-torch211 demo test test-unit test-cli test-hostile test-interop test-gpu bench-gpu bench-workers fuzz fuzz-long fuzz-regress \
        asan ubsan valgrind check check-deps check-banned man-lint format format-check \
        install clean bench fixtures config-summary
.DEFAULT_GOAL := all

all: config-summary fsdpconv

config-summary:
ifeq ($(WHEEL),1)
	@missing=""; for a in $(WHEEL_LIBNAMES); do p=$$(cc -print-file-name=$$a 2>/dev/null); \
	  [ -f "$$p" ] && [ -s "$$p" ] || missing="$$missing $$a"; done; \
	  test -z "$$missing" || { echo "fsdpconv: the source build needs the static libraries$$missing (Debian: libzstd-dev libdeflate-dev libjansson-dev libpcre2-dev libssl-dev); without them, pip install the prebuilt fsdpconv wheel instead" >&2; exit 1; }
	@$(CC) -E -x c /dev/null >/dev/null 2>&1 || { echo "fsdpconv: the wheel build needs zig cc: pip install ziglang into $(WHEEL_PYTHON)'s environment (pip wheel . does)" >&2; exit 1; }
else
	@printf 'fsdpconv build %s: CPU ✓  CUDA %s  NCCL %s  io_uring %s  sanitizers %s\n' "$(B)" \
	  "$(if $(filter 1,$(CUDA)),✓,✗)" "$(if $(filter 1,$(NCCL)),✓,✗)" \
	  "$(if $(filter 1,$(URING)),✓,✗)" "$(if $(SANITIZE),$(SANITIZE),✗)"
	@pkg-config --exists $(PKGS) || { echo "missing libraries: install libzstd-dev libdeflate-dev libjansson-dev libssl-dev libpcre2-dev pkg-config (or run: make deps)" >&2; exit 1; }
endif
ifeq ($(URING),1)
	@pkg-config --exists liburing || { echo "URING=1 needs liburing: install liburing-dev (or run: make deps)" >&2; exit 1; }
endif
ifeq ($(CUDA),1)
	@test -x "$(NVCC)" || { echo "CUDA=1 but $(NVCC) is missing; set CUDA_HOME or NVCC" >&2; exit 1; }
endif

# The wheel's binary (WHEEL=1, build/wheel/fsdpconv); pyproject.toml's build step runs this.
wheel-bin: config-summary $(BIN)

# Phony, so the link always follows the configuration just built (`make` after
# `make CUDA=1` points it back at build/cpu): the link is older than neither binary.
fsdpconv: $(BIN)
	$(Q)ln -sfn $(BIN) fsdpconv

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(FC_CPPFLAGS) $(PKG_CFLAGS) $(FC_CFLAGS) $(CFLAGS) $(HOT_CFLAGS) -c -o $@ $<

# The CPU kernels are the hot loops: let gcc vectorise the casts (it does not at -O2).
ifneq ($(DEBUG),1)
$(B)/kernels/%_cpu.o: HOT_CFLAGS := -O3 -fno-trapping-math
endif

$(B)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $@")
	$(Q)$(NVCC) -std=c++17 -O2 $(NVCC_GENCODE) $(filter -I% -D%,$(FC_CPPFLAGS)) -Xcompiler -fPIC \
	  -MMD -MP -c -o $@ $<

$(LIBFC): $(CORE_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(BIN): $(CMD_OBJ) $(LIBFC)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(FC_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(CMD_OBJ) $(LIBFC) $(FC_LDLIBS)

# cmocka unit tests: one binary per module.
$(B)/tests/%: tests/unit/%.c tests/unit/fc_test.h tests/unit/dcp_meta_diff.h $(LIBFC)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(FC_CPPFLAGS) -Itests/unit $(PKG_CFLAGS) $(CMOCKA_CFLAGS) $(FC_CFLAGS) $(CFLAGS) \
	  -DFC_SOURCE_DIR=\"$(CURDIR)\" $(LDFLAGS) -o $@ $< $(LIBFC) $(CMOCKA_LIBS) $(FC_LDLIBS)

# test_exec counts the executor's CRC-32s through a wrapper of fc_crc32.
$(B)/tests/test_exec: LDFLAGS += -Wl,--wrap=fc_crc32
# test_source counts the bytes a source reads through a wrapper of fc_file_pread.
$(B)/tests/test_source: LDFLAGS += -Wl,--wrap=fc_file_pread

# Fuzz targets with the standalone replay driver (gcc); `make fuzz` uses libFuzzer.
$(B)/fuzz/%: tests/fuzz/%.c tests/fuzz/driver.c tests/unit/dcp_meta_diff.h $(LIBFC)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZ    $@")
	$(Q)$(CC) $(FC_CPPFLAGS) $(PKG_CFLAGS) $(FC_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< \
	  tests/fuzz/driver.c $(LIBFC) $(FC_LDLIBS)

$(B)/gpu/bench_%: tests/gpu/bench_%.c $(LIBFC)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(FC_CPPFLAGS) $(PKG_CFLAGS) $(FC_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIBFC) \
	  $(FC_LDLIBS)

$(B)/gpu/%: tests/gpu/%.c tests/unit/fc_test.h $(LIBFC)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(FC_CPPFLAGS) -Itests/unit $(PKG_CFLAGS) $(CMOCKA_CFLAGS) $(FC_CFLAGS) $(CFLAGS) \
	  -DFC_SOURCE_DIR=\"$(CURDIR)\" $(LDFLAGS) -o $@ $< $(LIBFC) $(CMOCKA_LIBS) $(FC_LDLIBS)

-include $(shell find build/$(CFG) -name '*.d' 2>/dev/null)

deps:
	@sh tests/setup/deps.sh

venv:
	@sh tests/setup/venv.sh "$(VENV)"

venv-tf5:
	@sh tests/setup/venv_tf5.sh "$(TF5_VENV)"

venv-torch211:
	@sh tests/setup/venv_torch211.sh "$(T211_VENV)"

demo: deps
	@$(MAKE) --no-print-directory all
	@sh tests/setup/demo.sh ./fsdpconv

# Build first, so that each part's time is its tests'; the cheapest parts run first and the
# first failing part stops the suite (tests/run_parts.sh).
test: deps venv
	@$(MAKE) --no-print-directory all test-build
	@$(MAKE) --no-print-directory check-deps check-banned man-lint
	@sh tests/run_parts.sh test "$(MAKE)" test-unit fuzz-regress test-cli test-hostile test-interop \
	  test-wheel

.PHONY: test-build
test-build: $(BIN) $(UNIT_BIN) $(FUZZ_BIN)

test-unit: $(UNIT_BIN)
	@sh tests/run_unit.sh $(UNIT_BIN)

test-cli: $(BIN)
	@sh tests/cli/run.sh "$(CURDIR)/$(BIN)"

# Every command on every hostile input (tests/hostile/gen.py): exit 2/3, one line, nothing left.
test-hostile: $(BIN)
	@sh tests/hostile/run.sh "$(CURDIR)/$(BIN)" "$(PYTHON)"

test-interop: $(BIN) venv-tf5 venv-torch211
	@FSDPCONV_TCP_PY211="$${FSDPCONV_TCP_PY211:-$(T211_VENV)/bin/python}" \
	  sh tests/interop/run.sh "$(CURDIR)/$(BIN)" "$(PYTHON)" "$(TF5_VENV)/bin/python"

# The wheel: built, installed into a fresh venv and run where only glibc is left (tests/wheel/).
test-wheel: $(BIN)
	@sh tests/wheel/run.sh "$(WHEEL_VENV)" "$(PYTHON)" "$(BIN)"

# The wheel with the build venv's pip: build/wheel/dist/fsdpconv-<version>-py3-none-*.whl.
wheel:
	@sh tests/setup/wheel_venv.sh "$(WHEEL_VENV)"
	@$(WHEEL_VENV)/bin/pip wheel --no-build-isolation --no-deps \
	  --disable-pip-version-check -w build/wheel/dist .

test-gpu: $(GPU_BIN)
ifneq ($(CUDA),1)
	$(error test-gpu needs CUDA=1)
endif
	@sh tests/run_unit.sh $(GPU_BIN)

fuzz-regress: $(FUZZ_BIN)
	@sh tests/fuzz/regress.sh $(B)/fuzz

fuzz:
	@sh tests/fuzz/libfuzzer.sh

# Every libFuzzer target for FUZZ_SECONDS each (default 600): executions and crashes per target.
fuzz-long:
	@sh tests/fuzz/libfuzzer.sh long

asan:
	@$(MAKE) --no-print-directory SANITIZE=address,undefined test-build
	@sh tests/run_parts.sh asan "$(MAKE) SANITIZE=address,undefined" test-unit fuzz-regress test-cli \
	  test-hostile

ubsan:
	@$(MAKE) --no-print-directory SANITIZE=undefined test-unit

valgrind: $(UNIT_BIN)
	@for t in $(UNIT_BIN); do valgrind -q --error-exitcode=9 --leak-check=full $$t || exit 1; done

# GPU benchmarks (CUDA=1): kernel throughput vs a device copy, and end-to-end engines.
bench-gpu: $(BIN) $(B)/gpu/bench_kernels_cuda
	@$(B)/gpu/bench_kernels_cuda
	@sh tests/bench/bench_gpu.sh "$(CURDIR)/$(BIN)" "$(PYTHON)"

bench: $(BIN)
	@sh tests/bench/run.sh "$(CURDIR)/$(BIN)" "$(PYTHON)"

# Independent workers (1, 2, 4) against cp + fsync on a BENCH_GB (default 4) GiB model.
bench-workers: $(BIN)
	@python3 tests/bench/bench_workers.py "$(CURDIR)/$(BIN)" --gb $${BENCH_GB:-4}

fixtures: venv
	@$(PYTHON) fixtures/gen/gen_fixtures.py fixtures
	@$(PYTHON) fixtures/gen/gen_bad.py fixtures

check: test check-deps check-banned man-lint format-check

# Functions the binary never uses: every object (not the archive, which would hide whole
# unused files) linked with --gc-sections, and the .text sections the linker drops listed.
# tests/setup/unused.allow names the accepted ones, each with its reason.
check-unused:
	@$(MAKE) --no-print-directory GC_SECTIONS=1 unused-list

unused-list: $(CMD_OBJ) $(CORE_OBJ)
	@$(CC) $(FC_CFLAGS) $(CFLAGS) $(LDFLAGS) -Wl,--gc-sections,--print-gc-sections \
	  -o $(B)/fsdpconv-gc $(CMD_OBJ) $(CORE_OBJ) $(FC_LDLIBS) 2>$(B)/gc-sections.log || \
	  { cat $(B)/gc-sections.log; exit 1; }
	@nm -g --defined-only $(CMD_OBJ) $(CORE_OBJ) | awk '$$2 == "T" { print $$3 }' >$(B)/globals.txt
	@sh tests/setup/check_unused.sh $(B)/gc-sections.log $(B)/globals.txt tests/setup/unused.allow

check-deps:
	@sh tests/setup/check_deps.sh

# curl's banned-function list, for lib/.
check-banned:
	@if grep -nE '\b(sprintf|strcpy|strcat|strncpy|strtok|sscanf|atoi|atol|gets)[[:space:]]*\(' $(LIB_SRC) $(LIB_HDR); then \
	  echo "banned function used in lib/ (see house-style.md)"; exit 1; fi

man-lint: $(BIN)
	@mandoc -Tlint -W warning man/*.1 && sh tests/setup/check_man.sh $(BIN) && echo "man-lint: ok"

format:
	@clang-format -i $(LIB_SRC) $(CONVERT_SRC) $(KERNEL_SRC) $(CMD_SRC) $(LIB_HDR) convert/*.h kernels/*.h cmd/*.h

format-check:
	@clang-format --dry-run -Werror $(LIB_SRC) $(CONVERT_SRC) $(KERNEL_SRC) $(CMD_SRC) $(LIB_HDR) convert/*.h kernels/*.h cmd/*.h

install: fsdpconv
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1
	install -m 755 $(BIN) $(DESTDIR)$(BINDIR)/fsdpconv
	install -m 644 man/*.1 $(DESTDIR)$(MANDIR)/man1/

clean:
	rm -rf build fsdpconv python/fsdpconv.egg-info
