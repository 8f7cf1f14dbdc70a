#!/bin/sh
# Interop tests against real PyTorch.
# usage: tests/interop/run.sh FSDPCONV PYTHON [TF5_PYTHON]
# Runs every tests/interop/test_*.py as `PYTHON test_x.py` with env FSDPCONV set to the
# binary, then every tests/interop/tf5_*.py as `TF5_PYTHON tf5_x.py` (the transformers 5
# venv, make venv-tf5; env TF4_PYTHON=PYTHON) or, without TF5_PYTHON, reports them skipped;
# prints one line per test (PASS/FAIL/SKIP, seconds); a failing test's output
# follows its line. Full logs: tests/interop/out/<test>.log. Exit status 77 from a test
# means skipped. Exits 1 if any test failed (or none ran), else 0.
set -u
if [ $# -ne 2 ] && [ $# -ne 3 ]; then
    echo "usage: $0 FSDPCONV PYTHON [TF5_PYTHON]" >&2
    exit 2
fi
bin=$1
py=$2
tf5py=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
out="$here/out"
mkdir -p "$out"
case "$bin" in /*) ;; *) bin="$(pwd)/$bin" ;; esac
if [ ! -x "$bin" ]; then
    echo "interop: fsdpconv binary not found: $bin" >&2
    exit 1
fi
if ! "$py" -c 'import torch' >/dev/null 2>&1; then
    echo "interop: $py cannot import torch (run make venv)" >&2
    exit 1
fi
pass=0
fail=0
skip=0
for t in "$here"/test_*.py "$here"/tf5_*.py; do
    [ -e "$t" ] || continue
    name=$(basename "$t" .py)
    log="$out/$name.log"
    start=$(date +%s)
    case "$name" in
    tf5_*)
        if [ -z "$tf5py" ]; then
            echo "no transformers 5 python given (run.sh's third argument)" >"$log"
            rc=77
        else
            FSDPCONV="$bin" TF4_PYTHON="$py" PYTHONDONTWRITEBYTECODE=1 "$tf5py" "$t" >"$log" 2>&1
            rc=$?
        fi
        ;;
    *)
        FSDPCONV="$bin" PYTHONDONTWRITEBYTECODE=1 "$py" "$t" >"$log" 2>&1
        rc=$?
        ;;
    esac
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1))
        echo "PASS $name (${secs}s)"
    elif [ $rc -eq 77 ]; then
        skip=$((skip + 1))
        echo "SKIP $name ($(tail -n 1 "$log"))"
    else
        fail=$((fail + 1))
        echo "FAIL $name (exit $rc, ${secs}s)"
        sed 's/^/    /' "$log"
    fi
done
echo "interop: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
