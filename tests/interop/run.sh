#!/bin/sh
# Interop tests against real PyTorch.
# usage: tests/interop/run.sh FSDPCONV PYTHON [TF5_PYTHON]
# Runs every tests/interop/test_*.py as `PYTHON test_x.py` with env FSDPCONV set to the
# binary, then with TF5_PYTHON (the transformers 5 venv, make venv-tf5) every test_*.py
# that imports transformers once more and every tf5_*.py (env TF4_PYTHON=PYTHON); without
# TF5_PYTHON those are reported skipped; with env FSDPCONV_TCP_PY211 set to a torch 2.11 venv's
# python (torch-checkpointing pinned, as make venv; e.g. /tmp/tcp-venv211/bin/python) every
# test_tcp_*.py runs once more under it (torch_checkpointing's .pt files pickle torch-version
# specific DeviceMesh internals), else those reruns are reported skipped; prints one line per
# test (PASS/FAIL/SKIP, seconds); a failing test's output follows its line. Full logs:
# tests/interop/out/<test>.log. Exit status 77 from a test means skipped. Exits 1 if any test failed (or none ran), else 0.
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
# run_one NAME LABEL PYTHON SCRIPT [WHY]: one test, its log in $out/NAME.log; PYTHON "" =
# skipped (WHY says why; default: no transformers 5 python).
run_one() {
    log="$out/$1.log"
    start=$(date +%s)
    if [ -z "$3" ]; then
        echo "${5:-no transformers 5 python given (run.sh's third argument)}" >"$log"
        rc=77
    else
        FSDPCONV="$bin" TF4_PYTHON="$py" PYTHONDONTWRITEBYTECODE=1 "$3" "$4" >"$log" 2>&1
        rc=$?
    fi
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1))
        echo "PASS $2 (${secs}s)"
    elif [ $rc -eq 77 ]; then
        skip=$((skip + 1))
        echo "SKIP $2 ($(tail -n 1 "$log"))"
    else
        fail=$((fail + 1))
        echo "FAIL $2 (exit $rc, ${secs}s)"
        sed 's/^/    /' "$log"
    fi
}
for t in "$here"/test_*.py; do
    [ -e "$t" ] || continue
    name=$(basename "$t" .py)
    run_one "$name" "$name" "$py" "$t"
done
# Tests of transformers models run under transformers 5 as well; tf5_*.py only there.
for t in "$here"/test_*.py "$here"/tf5_*.py; do
    [ -e "$t" ] || continue
    name=$(basename "$t" .py)
    case "$name" in
    tf5_*) run_one "$name" "$name" "$tf5py" "$t" ;;
    *) grep -q '^ *from transformers import' "$t" &&
        run_one "$name.tf5" "$name (transformers 5)" "$tf5py" "$t" ;;
    esac
done
# torch_checkpointing tests once more under torch 2.11 (the oldest torch the package supports).
tcp211=${FSDPCONV_TCP_PY211:-}
for t in "$here"/test_tcp_*.py; do
    [ -e "$t" ] || continue
    name=$(basename "$t" .py)
    run_one "$name.torch211" "$name (torch 2.11)" "$tcp211" "$t" \
        "not run: FSDPCONV_TCP_PY211 (a torch 2.11 venv's python) is not set"
done
echo "interop: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
