#!/bin/sh
# Create (or reuse) the second Python venv, with the newest transformers 5.x
# (default ~/.cache/fsdpconv/venv-tf5): torch, numpy, safetensors, zstandard,
# transformers 5 and accelerate (init_empty_weights, which transformers 5 no
# longer copies, for the README's load snippets).  tests/interop/run.sh runs
# tests/interop/tf5_*.py and the test_*.py of transformers models with it.
# The main venv (venv.sh) keeps the pinned transformers 4.57.1; the two are
# never mixed.
set -eu
venv="${1:-$HOME/.cache/fsdpconv/venv-tf5}"
stamp="$venv/.fsdpconv-ready"
check='import torch, numpy, safetensors, zstandard, accelerate, transformers; assert transformers.__version__.split(".")[0] == "5"'
if [ -f "$stamp" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
    echo "venv-tf5: reusing $venv (transformers $("$venv/bin/python" -c 'import transformers; print(transformers.__version__)'))"
    exit 0
fi
py=""
for c in python3.11 python3.12 python3.10 python3; do
    if command -v "$c" >/dev/null 2>&1; then py="$c"; break; fi
done
[ -n "$py" ] || { echo "venv-tf5: no python3 found (make deps installs it)" >&2; exit 1; }
echo "venv-tf5: creating $venv with $py"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q --index-url https://download.pytorch.org/whl/cpu "torch>=2.4" 2>/dev/null ||
    "$venv/bin/pip" install -q "torch>=2.4"
"$venv/bin/pip" install -q numpy safetensors zstandard accelerate "transformers>=5,<6"
"$venv/bin/python" -c "$check"'
print("venv-tf5: torch", torch.__version__, "transformers", transformers.__version__)'
touch "$stamp"
