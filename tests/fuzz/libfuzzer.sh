#!/bin/sh
# Build every fuzz target with clang + libFuzzer + ASan/UBSan and run each for
# FUZZ_SECONDS over its corpus.  New crashes land in build/libfuzzer/crash-*;
# minimise and commit them to tests/fuzz/corpus/<target>/.  Inputs libFuzzer
# finds interesting are kept in build/libfuzzer/corpus_<target>/.
#   libfuzzer.sh        (make fuzz)       FUZZ_SECONDS default 60; stops at the first crash
#   libfuzzer.sh long   (make fuzz-long)  FUZZ_SECONDS default 600 per target; a crash is
#                       recorded and fuzzing goes on for the rest of the target's time; prints
#                       executions and crashes per target and fails if any target crashed
#   FUZZ_TARGETS="fuzz_a fuzz_b" limits either mode to those targets
set -eu
mode="${1:-short}"
if [ "$mode" = long ]; then
    secs="${FUZZ_SECONDS:-600}"
else
    secs="${FUZZ_SECONDS:-60}"
fi
out=build/libfuzzer
mkdir -p "$out"
flags="-fsanitize=fuzzer,address,undefined -g -O1 -std=c11 -Ilib/util -Ilib/pickle -Ilib/format -Ilib/source -Iconvert -Ikernels -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -DFC_VERSION=\"fuzz\""
srcs="$(ls lib/*/*.c convert/*.c kernels/*_cpu.c kernels/dispatch.c kernels/cuda_stub.c 2>/dev/null | grep -v 'comm_nccl\.c' || true)"
libs="$(pkg-config --libs libzstd libdeflate jansson libcrypto libpcre2-8) -lm -pthread"
summary=""
crashed=0
for f in tests/fuzz/fuzz_*.c; do
    name=$(basename "$f" .c)
    # FUZZ_TARGETS="fuzz_a fuzz_b" runs only those targets
    case " ${FUZZ_TARGETS:-$name} " in *" $name "*) ;; *) continue ;; esac
    # shellcheck disable=SC2086
    clang $flags -o "$out/$name" "$f" $srcs $libs
    corpus="tests/fuzz/corpus/${name#fuzz_}"
    # New inputs go to a scratch corpus first in the list; the committed seeds stay as they are.
    mkdir -p "$corpus" "$out/corpus_${name#fuzz_}"
    if [ "$mode" != long ]; then
        "$out/$name" -max_total_time="$secs" -artifact_prefix="$out/" \
            "$out/corpus_${name#fuzz_}" "$corpus" fixtures || exit 1
        continue
    fi
    # long: run until the target's time is used up, restarting after each crash
    execs=0
    crashes=0
    start=$(date +%s)
    left=$secs
    while [ "$left" -gt 0 ]; do
        log="$out/$name.log"
        if "$out/$name" -max_total_time="$left" -print_final_stats=1 -artifact_prefix="$out/$name-" \
            "$out/corpus_${name#fuzz_}" "$corpus" fixtures >"$log" 2>&1; then
            :
        else
            crashes=$((crashes + 1))
            grep -m1 -E 'ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error' \
                "$log" || true
        fi
        n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        execs=$((execs + ${n:-0}))
        left=$((secs - ($(date +%s) - start)))
    done
    summary="$summary$(printf '%-20s %12d executions %4d crashes in %ds' "$name" "$execs" \
        "$crashes" "$secs")
"
    [ "$crashes" -eq 0 ] || crashed=1
done
if [ "$mode" = long ]; then
    printf 'fuzz-long (FUZZ_SECONDS=%s per target):\n%s' "$secs" "$summary"
    [ "$crashed" -eq 0 ] || { echo "crash inputs: $out/fuzz_*-crash-*"; exit 1; }
fi
