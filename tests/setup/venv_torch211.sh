#!/bin/sh
# Create (or reuse) the third Python venv, with torch 2.11 -- the oldest torch the
# torch-checkpointing package supports -- and that package (default
# ~/.cache/fsdpconv/venv-torch211).  tests/interop/run.sh runs every
# tests/interop/test_tcp_*.py once more with it (FSDPCONV_TCP_PY211): the default
# torch_checkpointing layout pickles torch's private DeviceMesh, whose form differs
# between releases, so fsdpconv's output is checked against two torches.
set -eu
venv="${1:-$HOME/.cache/fsdpconv/venv-torch211}"
stamp="$venv/.fsdpconv-ready"
check='import torch, numpy, safetensors, torch_checkpointing; assert torch.__version__.startswith("2.11.")'
if [ -f "$stamp" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
    echo "venv-torch211: reusing $venv (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"
    exit 0
fi
py=""
for c in python3.11 python3.12 python3.10 python3; do
    if command -v "$c" >/dev/null 2>&1; then py="$c"; break; fi
done
[ -n "$py" ] || { echo "venv-torch211: no python3 found (make deps installs it)" >&2; exit 1; }
echo "venv-torch211: creating $venv with $py"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q --index-url https://download.pytorch.org/whl/cpu "torch==2.11.*" 2>/dev/null ||
    "$venv/bin/pip" install -q "torch==2.11.*"
"$venv/bin/pip" install -q numpy safetensors "torch-checkpointing==0.1.1"
"$venv/bin/python" -c "$check"'
print("venv-torch211: torch", torch.__version__)'
touch "$stamp"
