"""Shared helpers for the interop tests (plain Python, no pytest).

Each tests/interop/test_*.py is run by run.sh as `PYTHON test_x.py` with the fsdpconv
binary in env FSDPCONV, and exits 0 (pass), 1 (fail) or 77 (skip).

  ROOT, FIXTURES, GEN          repository paths; GEN is put on sys.path (tiny_model,
                               torchview, torchzip, gen_fixtures, gen_bad importable)
  fsdpconv_path()              the binary under test
  run_fsdpconv(*args)          -> (rc, stdout, stderr) as text
  run_python(script, *args)    run a script with this interpreter, raise on failure
  Report                       per-case "ok"/"FAIL" lines and the exit status
  compare_inspect(exp, got)    differences between torch's view and inspect --json
"""

import math
import os
import subprocess
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "fixtures")
GEN = os.path.join(FIXTURES, "gen")
if GEN not in sys.path:
    sys.path.insert(0, GEN)

MAX_LISTED = 12   # differences printed per case


def fsdpconv_path():
    p = os.environ.get("FSDPCONV") or os.path.join(ROOT, "fsdpconv")
    return os.path.abspath(p)


def run_fsdpconv(*args, timeout=300):
    r = subprocess.run([fsdpconv_path()] + [str(a) for a in args], capture_output=True,
                       timeout=timeout)
    return (r.returncode, r.stdout.decode("utf-8", "replace"),
            r.stderr.decode("utf-8", "replace"))


def run_python(script, *args, timeout=600):
    r = subprocess.run([sys.executable, script] + [str(a) for a in args],
                       capture_output=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("%s %s failed (%d):\n%s" % (
            os.path.basename(script), " ".join(map(str, args)), r.returncode,
            (r.stdout + r.stderr).decode("utf-8", "replace")[-4000:]))
    return r.stdout.decode("utf-8", "replace")


class Report:
    """Collects case results; finish() prints the summary and returns the exit status."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = []

    def case(self, label, problems):
        problems = [p for p in problems if p]
        if problems:
            self.failed.append(label)
            print("FAIL %s" % label)
            for p in problems[:MAX_LISTED]:
                print("     %s" % p)
            if len(problems) > MAX_LISTED:
                print("     ... %d more" % (len(problems) - MAX_LISTED))
        else:
            self.passed += 1
            print("ok   %s" % label)
        sys.stdout.flush()
        return not problems

    def finish(self):
        print("%s: %d passed, %d failed" % (self.name, self.passed, len(self.failed)))
        return 1 if self.failed or self.passed == 0 else 0


def _same_number(a_repr, b_repr, kind):
    try:
        if kind == "int":
            return int(a_repr) == int(b_repr)
        a, b = float(a_repr), float(b_repr)
        return a == b or (math.isnan(a) and math.isnan(b))
    except (TypeError, ValueError):
        return False


def compare_inspect(exp, got, path=None, values_metadata_ok=False):
    """List of differences between a torch-view manifest and inspect --json output.

    Compared: format, path (when given), tensor key set, dtype, shape, nbytes, sha256
    (when the manifest has it), shared, value key set and type, numeric value reprs
    (int/float), totals; plus internal consistency of fsdpconv's own storage/shared
    fields for torch.save files.  values_metadata_ok: tolerate extra str values named
    __metadata__.* (safetensors header metadata) in fsdpconv's output.
    """
    out = []
    if not isinstance(got, dict):
        return ["output is not a JSON object"]
    for field in ("format", "tensors", "values", "total_tensors", "total_bytes",
                  "total_values"):
        if field not in got:
            out.append("missing field %r" % field)
    if out:
        return out
    if got["format"] != exp["format"]:
        out.append("format: torch %r, fsdpconv %r" % (exp["format"], got["format"]))
    if path is not None and got.get("path") != path:
        out.append("path: expected %r, fsdpconv %r" % (path, got.get("path")))

    et = {t["key"]: t for t in exp["tensors"]}
    gl = [t.get("key") for t in got["tensors"]]
    dups = [k for k, n in Counter(gl).items() if n > 1]
    if dups:
        out.append("tensor keys listed twice by fsdpconv: %s" % dups[:5])
    gt = {t.get("key"): t for t in got["tensors"]}
    missing = [k for k in et if k not in gt]
    extra = [k for k in gt if k not in et]
    if missing:
        out.append("tensors missing in fsdpconv (%d): %s" % (len(missing), missing[:8]))
    if extra:
        out.append("tensors fsdpconv has but torch does not (%d): %s" % (len(extra), extra[:8]))
    for k, e in et.items():
        g = gt.get(k)
        if g is None:
            continue
        for f in ("dtype", "shape", "nbytes", "shared", "sha256"):
            if f == "sha256" and f not in e:
                continue
            if g.get(f) != e[f]:
                out.append("%s: %s torch %r, fsdpconv %r" % (k, f, e[f], g.get(f)))
        if "storage" not in g:
            out.append("%s: no 'storage' field" % k)

    ev = {v["key"]: v for v in exp["values"]}
    gv_all = {v.get("key"): v for v in got["values"]}
    gv = {k: v for k, v in gv_all.items()
          if not (values_metadata_ok and isinstance(k, str) and k.startswith("__metadata__"))}
    missing = [k for k in ev if k not in gv]
    extra = [k for k in gv if k not in ev]
    if missing:
        out.append("values missing in fsdpconv (%d): %s" % (len(missing), missing[:8]))
    if extra:
        out.append("values fsdpconv has but torch does not (%d): %s" % (len(extra), extra[:8]))
    for k, e in ev.items():
        g = gv.get(k)
        if g is None:
            continue
        if g.get("type") != e["type"]:
            out.append("value %s: type torch %r, fsdpconv %r" % (k, e["type"], g.get("type")))
        elif e["type"] in ("int", "float") and not _same_number(e["repr"], g.get("repr"),
                                                               e["type"]):
            out.append("value %s: torch %s, fsdpconv %r" % (k, e["repr"], g.get("repr")))
        elif e["type"] == "bool" and str(g.get("repr")).lower() != e["repr"].lower():
            out.append("value %s: torch %s, fsdpconv %r" % (k, e["repr"], g.get("repr")))

    n_meta = len(gv_all) - len(gv)
    for f in ("total_tensors", "total_bytes", "total_values"):
        want, have = exp[f], got[f]
        if have != want and not (f == "total_values" and n_meta and have == want + n_meta):
            out.append("%s: torch %r, fsdpconv %r" % (f, want, have))

    if exp["format"] == "torch.save":
        use = Counter(t.get("storage") for t in got["tensors"])
        for t in got["tensors"]:
            if "storage" in t and bool(t.get("shared")) != (use[t["storage"]] > 1):
                out.append("%s: fsdpconv's shared=%r disagrees with its storage %r used %d "
                           "times" % (t.get("key"), t.get("shared"), t["storage"],
                                      use[t["storage"]]))
    return out
