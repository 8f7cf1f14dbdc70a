#!/usr/bin/env python3
"""Interop: `fsdpconv inspect --json --checksum` agrees with real torch on every fixture.

1. Regenerates every good fixture with the installed torch (gen_fixtures.py) into a temp
   dir and compares inspect's output with torch's view (the freshly written manifests):
   key set, dtype, shape, nbytes, sha256, shared flag, value keys/types, totals.  The
   folder holding the sharded index.json is inspected too and must read like the index.
2. Does the same for the committed fixtures against their committed manifests (this covers
   the torch 1.13 files), and checks that the installed torch still reads each committed
   file to its committed manifest.
3. Runs inspect on every bad fixture (committed, and regenerated with the installed torch)
   and requires exit status 3 and exactly one stderr line naming the file and containing
   one of the message substrings listed in bad/expected.json.

usage: FSDPCONV=./fsdpconv PYTHON test_inspect.py     exit 0 pass, 1 fail
"""

import glob
import json
import os
import shutil
import sys
import tempfile

import common


def manifests(root):
    """relpath -> manifest for every expected/**/*.json under root."""
    out = {}
    base = os.path.join(root, "expected")
    for p in sorted(glob.glob(os.path.join(base, "**", "*.json"), recursive=True)):
        rel = os.path.relpath(p, base)[:-len(".json")].replace(os.sep, "/")
        with open(p) as f:
            out[rel] = json.load(f)
    return out


def inspect_case(report, label, root, rel, exp, as_dir=False):
    path = os.path.join(root, rel)
    if as_dir:      # the folder holding an index.json reads the same as the index
        path = os.path.dirname(path)
    if not os.path.exists(path):
        return report.case(label, ["fixture file %s is missing" % path])
    rc, out, err = common.run_fsdpconv("inspect", "--json", "--checksum", path)
    if rc != 0:
        return report.case(label, ["exit status %d (want 0); stderr: %s" % (rc, err.strip())])
    try:
        got = json.loads(out)
    except ValueError as e:
        return report.case(label, ["stdout is not one JSON object: %s; first bytes %r"
                                   % (e, out[:120])])
    problems = common.compare_inspect(
        exp, got, path=path, values_metadata_ok=exp["format"].startswith("safetensors"))
    return report.case(label, problems)


def torch_reads_committed(report, rel, exp):
    """The installed torch reads a committed file to its committed manifest."""
    import torchview
    label = "torch %s reads %s as committed" % (torch_version(), rel)
    try:
        now = torchview.view(os.path.join(common.FIXTURES, rel), rel)
    except Exception as e:  # noqa: BLE001 (e.g. an older torch without float8)
        return report.case(label, ["installed torch cannot read it: %s: %s"
                                   % (type(e).__name__, str(e).splitlines()[0][:200])])
    problems = []
    for kind in ("tensors", "values"):
        a = {x["key"]: x for x in exp[kind]}
        b = {x["key"]: x for x in now[kind]}
        if a.keys() != b.keys():
            problems.append("%s keys differ: only committed %s, only now %s" % (
                kind, sorted(a.keys() - b.keys())[:5], sorted(b.keys() - a.keys())[:5]))
        for k in a.keys() & b.keys():
            if kind == "tensors" and a[k] != b[k]:
                problems.append("%s: committed %r, now %r" % (k, a[k], b[k]))
            if kind == "values" and a[k]["type"] != b[k]["type"]:
                problems.append("value %s: committed type %s, now %s"
                                % (k, a[k]["type"], b[k]["type"]))
    return report.case(label, problems)


def bad_case(report, label, root, rel, spec):
    path = os.path.join(root, "bad", rel)
    if not os.path.exists(path):
        return report.case(label, ["fixture file %s is missing" % path])
    rc, out, err = common.run_fsdpconv("inspect", "--json", "--checksum", path)
    problems = []
    if rc != spec.get("exit", 3):
        problems.append("exit status %d (want %d)" % (rc, spec.get("exit", 3)))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if len(lines) != 1:
        problems.append("want exactly one stderr line, got %d: %r" % (len(lines), err[:400]))
    elif rc != 0:
        line = lines[0]
        if not any(n in line for n in spec["names"]):
            problems.append("stderr does not name the file (%s): %r"
                            % (" or ".join(spec["names"]), line))
        if not any(s.lower() in line.lower() for s in spec["any_of"]):
            problems.append("stderr contains none of %s: %r" % (spec["any_of"], line))
    return report.case(label, problems)


def torch_version():
    import torch
    return torch.__version__


def main():
    report = common.Report("test_inspect")
    if not os.access(common.fsdpconv_path(), os.X_OK):
        print("FAIL fsdpconv binary not found at %s (set FSDPCONV)" % common.fsdpconv_path())
        return 1
    tmp = tempfile.mkdtemp(prefix="fsdpconv-inspect-")
    try:
        # 1. fresh fixtures from the installed torch
        try:
            common.run_python(os.path.join(common.GEN, "gen_fixtures.py"), tmp)
            common.run_python(os.path.join(common.GEN, "gen_bad.py"), tmp)
        except RuntimeError as e:
            report.case("generate fixtures with torch %s" % torch_version(), [str(e)])
            return report.finish()
        fresh = manifests(tmp)
        report.case("generate fixtures with torch %s (%d manifests)"
                    % (torch_version(), len(fresh)), [] if fresh else ["no manifests written"])
        for rel, exp in fresh.items():
            inspect_case(report, "inspect fresh %s" % rel, tmp, rel, exp)
            if rel.endswith(".index.json"):
                inspect_case(report, "inspect fresh %s/" % os.path.dirname(rel), tmp, rel,
                             exp, as_dir=True)

        # 2. committed fixtures and manifests (torch 1.13 files included)
        committed = manifests(common.FIXTURES)
        for rel, exp in committed.items():
            inspect_case(report, "inspect committed %s (torch %s)"
                         % (rel, exp.get("torch_version", "?")), common.FIXTURES, rel, exp)
            torch_reads_committed(report, rel, exp)

        # 3. bad inputs: committed, then regenerated
        for root, tag in ((common.FIXTURES, "committed"), (tmp, "fresh")):
            with open(os.path.join(root, "bad", "expected.json")) as f:
                spec = json.load(f)["files"]
            for rel, s in spec.items():
                bad_case(report, "reject %s bad/%s" % (tag, rel), root, rel, s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
