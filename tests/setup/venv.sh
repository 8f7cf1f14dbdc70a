#!/bin/sh
# Create (or reuse) the Python venv with PyTorch 2.x, numpy, safetensors,
# zstandard, transformers and torch-checkpointing used by fixture generation and
# the interop tests (transformers builds the tiny Qwen2/SigLIP models of
# test_recipes.py; torch_checkpointing judges the torch-checkpointing format; both
# pinned to a release that works with the venv's torch).  A venv that lacks one of them is
# completed in place.  Lives outside the
# clone (default ~/.cache/fsdpconv/venv) so CI runs and fresh clones reuse it.
set -eu
venv="${1:-$HOME/.cache/fsdpconv/venv}"
stamp="$venv/.fsdpconv-ready"
if [ -f "$stamp" ] && "$venv/bin/python" -c 'import torch, numpy, safetensors, transformers, torch_checkpointing' 2>/dev/null; then
    echo "venv: reusing $venv (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"
    exit 0
fi
py=""
for c in python3.11 python3.12 python3.10 python3; do
    if command -v "$c" >/dev/null 2>&1; then py="$c"; break; fi
done
[ -n "$py" ] || { echo "venv: no python3 found (make deps installs it)" >&2; exit 1; }
echo "venv: creating $venv with $py"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# PyTorch from PyPI; the CPU-only index is tried first because it is 10x smaller.
"$venv/bin/pip" install -q --index-url https://download.pytorch.org/whl/cpu "torch>=2.4" 2>/dev/null ||
    "$venv/bin/pip" install -q "torch>=2.4"
"$venv/bin/pip" install -q numpy safetensors zstandard "transformers==4.57.1" "torch-checkpointing==0.1.1"
"$venv/bin/python" -c 'import torch, numpy, safetensors, transformers, torch_checkpointing; print("venv: torch", torch.__version__, "transformers", transformers.__version__)'
touch "$stamp"
