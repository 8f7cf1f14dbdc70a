#!/bin/sh
# Run the parts of a test suite in order and say how long each took.
# usage: tests/run_parts.sh SUITE "MAKE [VAR=VALUE]..." TARGET...
# Runs `MAKE --no-print-directory TARGET` for each TARGET in turn and prints
# "== TARGET: ok, S s" after it. The first failing part stops the suite: the
# parts after it do not run. Ends with one line naming every part and its
# seconds, and exits with the failing part's status (0 when all passed).
set -u
if [ $# -lt 3 ]; then
    echo "usage: $0 SUITE \"MAKE [VAR=VALUE]...\" TARGET..." >&2
    exit 2
fi
suite=$1
make=$2
shift 2
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
t0=$(now)
summary=""
while [ $# -gt 0 ]; do
    part=$1
    shift
    start=$(now)
    # shellcheck disable=SC2086  # $make is a command line: make and its variables
    $make --no-print-directory "$part"
    rc=$?
    s=$(secs "$start" "$(now)")
    if [ $rc -ne 0 ]; then
        echo "== $part: FAILED (exit $rc) after $s s"
        echo "== $suite: ${summary}$part FAILED after $s s${1+; not run: $*}"
        exit $rc
    fi
    echo "== $part: ok, $s s"
    summary="$summary$part $s s, "
done
echo "== $suite: ${summary}all passed in $(secs "$t0" "$(now)") s"
