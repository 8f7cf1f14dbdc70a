#!/bin/sh
# Replay every fuzz target over its seed corpus (tests/fuzz/corpus/<target>/)
# and over fixtures/ (every fixture is a valid or deliberately broken input).
set -eu
bindir="$1"
status=0
for t in "$bindir"/fuzz_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t" | sed 's/^fuzz_//')
    dirs="fixtures"
    [ -d "tests/fuzz/corpus/$name" ] && dirs="tests/fuzz/corpus/$name $dirs"
    # shellcheck disable=SC2086
    "$t" $dirs || status=1
done
exit $status
