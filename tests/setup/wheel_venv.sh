#!/bin/sh
# Create (or reuse) the venv that builds and checks the wheel (make wheel, make test-wheel):
# pyproject.toml's build requirements (setuptools, ziglang) and auditwheel. Lives outside the
# clone (default ~/.cache/fsdpconv/wheel-venv) like the torch venv, so runs reuse it.
# usage: tests/setup/wheel_venv.sh [VENV]   (run from the repository root)
set -eu
venv="${1:-$HOME/.cache/fsdpconv/wheel-venv}"
stamp="$venv/.fsdpconv-ready"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# The build requirements are pyproject.toml's, read with the venv's own Python (3.11+).
reqs=$("$venv/bin/python" -c 'import tomllib
with open("pyproject.toml", "rb") as f:
    print(" ".join(tomllib.load(f)["build-system"]["requires"]))') ||
    { echo "wheel-venv: $venv/bin/python cannot read pyproject.toml (needs Python 3.11+)" >&2; exit 1; }
want="$reqs auditwheel"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
echo "wheel-venv: installing $want into $venv"
# shellcheck disable=SC2086  # one argument per requirement
"$venv/bin/pip" install -q --disable-pip-version-check $want
echo "$want" >"$stamp"
