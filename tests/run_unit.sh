#!/bin/sh
# Run each cmocka binary given on the command line, keep its summary lines,
# and finish with one total line "N passed, N failed".  Exit non-zero if any
# test failed or a binary crashed.
passed=0
failed=0
crashed=0
for t in "$@"; do
    out=$("$t" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -E '^\[==========\]|^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]|^\[  ERROR   \]|^\[  FAILED  \] [a-z_]+' 
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -n1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -n1)
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    if [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then
        printf '%s\n' "$out" | tail -n 20
        echo "CRASH: $t exited with status $rc"
        crashed=$((crashed + 1))
    fi
done
echo "$passed passed, $((failed + crashed)) failed"
[ "$failed" -eq 0 ] && [ "$crashed" -eq 0 ]
