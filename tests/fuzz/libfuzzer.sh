#!/bin/sh
# Build every fuzz target with clang + libFuzzer + ASan/UBSan and run each for
# FUZZ_SECONDS (default 60) over its corpus.  New crashes land in
# build/libfuzzer/crash-*; minimise and commit them to tests/fuzz/corpus/<target>/.
# Inputs libFuzzer finds interesting are kept in build/libfuzzer/corpus_<target>/.
set -eu
secs="${FUZZ_SECONDS:-60}"
out=build/libfuzzer
mkdir -p "$out"
flags="-fsanitize=fuzzer,address,undefined -g -O1 -std=c11 -Ilib -Iconvert -Ikernels -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -DFC_VERSION=\"fuzz\""
srcs="$(ls lib/*.c convert/*.c kernels/*_cpu.c kernels/dispatch.c kernels/cuda_stub.c 2>/dev/null | grep -v 'comm_nccl\.c' || true)"
libs="$(pkg-config --libs libzstd libdeflate jansson libcrypto libpcre2-8) -lm -pthread"
for f in tests/fuzz/fuzz_*.c; do
    name=$(basename "$f" .c)
    # shellcheck disable=SC2086
    clang $flags -o "$out/$name" "$f" $srcs $libs
    corpus="tests/fuzz/corpus/${name#fuzz_}"
    # New inputs go to a scratch corpus first in the list; the committed seeds stay as they are.
    mkdir -p "$corpus" "$out/corpus_${name#fuzz_}"
    "$out/$name" -max_total_time="$secs" -artifact_prefix="$out/" "$out/corpus_${name#fuzz_}" \
        "$corpus" fixtures || exit 1
done
