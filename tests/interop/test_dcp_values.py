#!/usr/bin/env python3
"""DCPs that real PyTorch loads although weights_only refuses their values (issue 11).

Fixtures from fixtures/gen/gen_dcp_values.py (real torch):
  values_ws1         io.BytesIO, TorchVersion, numpy scalar/array, np.random state,
                     argparse.Namespace (opaque to fsdpconv), and a tuple holding a tensor
  opaque_tensor_ws1  a Namespace holding a tensor: not even readable symbolically
  ranklocal_ws2      use_collectives=False: __0/__1.metadata with replicated 'step' and 'n'
and, made here with real torch, a rank-local save whose replicas of 'step' differ.

Checks, each against torch's own loads (torch.load(weights_only=False), and
dcp_to_torch_save of the original as PyTorch's reference):
  - dcp-to-full -o x.pt embeds the values: torch.load of x.pt equals the reference, every
    tensor bit for bit and every value (BytesIO contents and position, numpy dtypes and
    bytes, Namespace fields, TorchVersion);
  - reshard copies the bytes items verbatim: dcp_to_torch_save of the output equals the
    reference, fsdpconv diff says equal, and the items are byte-identical;
  - inspect shows each opaque value's type without running it, and --verify checks replicas;
  - an unreadable opaque value is refused for .pt naming the key and --drop, and --drop works;
  - the comparison itself fails on a changed value (negative control).
"""

import argparse
import io
import os
import shutil
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402

from common import FIXTURES, Report, run_fsdpconv  # noqa: E402
import gen_dcp_values  # noqa: E402  (fixtures/gen, on sys.path via common)

DCP = os.path.join(FIXTURES, "dcp")


def same(a, b, path="root"):
    """Differences between two loaded objects, [] when equal bit for bit."""
    if type(a) is not type(b):
        return ["%s: %s vs %s" % (path, type(a).__name__, type(b).__name__)]
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
            return ["%s: tensor %s %s vs %s %s" % (path, a.dtype, tuple(a.shape), b.dtype,
                                                   tuple(b.shape))]
        if a.numel() and a.reshape(-1).contiguous().view(torch.uint8).ne(
                b.reshape(-1).contiguous().view(torch.uint8)).any():
            return ["%s: tensor bytes differ" % path]
        return []
    if isinstance(a, io.BytesIO):
        if a.getvalue() != b.getvalue() or a.tell() != b.tell():
            return ["%s: BytesIO %r@%d vs %r@%d" % (path, a.getvalue(), a.tell(), b.getvalue(),
                                                    b.tell())]
        return []
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            return ["%s: ndarray differs" % path]
        return []
    if isinstance(a, np.generic):
        return [] if a.dtype == b.dtype and a.tobytes() == b.tobytes() else [
            "%s: %r vs %r" % (path, a, b)]
    if isinstance(a, argparse.Namespace):
        return same(vars(a), vars(b), path)
    if isinstance(a, dict):
        if list(a) != list(b):
            return ["%s: keys %s vs %s" % (path, list(a), list(b))]
        return [p for k in a for p in same(a[k], b[k], "%s.%s" % (path, k))]
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return ["%s: length %d vs %d" % (path, len(a), len(b))]
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in same(x, y, "%s[%d]" % (path, i))]
    return [] if a == b and str(a) == str(b) else ["%s: %r vs %r" % (path, a, b)]


def torch_view(ckpt, tmp, name):
    """PyTorch's reference: dcp_to_torch_save, then torch.load(weights_only=False)."""
    out = os.path.join(tmp, name + ".ref.pt")
    dcp_to_torch_save(ckpt, out)
    return torch.load(out, weights_only=False)


def fsdpconv_ok(problems, *args):
    rc, out, err = run_fsdpconv(*args)
    if rc != 0:
        problems.append("fsdpconv %s: exit %d: %s" % (" ".join(map(str, args)), rc,
                                                       err.strip()[-500:]))
    return rc == 0, out, err


def reshard_checked(problems, src, world, want, tmp):
    """reshard src to `world` ranks; torch's load of the output must equal want, diff equal."""
    out = os.path.join(tmp, "%s_ws%d" % (os.path.basename(src), world))
    if not fsdpconv_ok(problems, "reshard", "--world-size", world, "-o", out, src)[0]:
        return None
    problems += same(want, torch_view(out, tmp, os.path.basename(out)))
    ok, text, _ = fsdpconv_ok(problems, "diff", src, out)
    if ok and "equal" not in text:
        problems.append("diff: %s" % text.strip())
    return out


def case_values(rep, tmp):
    src = os.path.join(DCP, "values_ws1")
    ref = torch_view(src, tmp, "values")
    rep.case("torch's load of values_ws1 is the state gen_dcp_values saved",
             same(gen_dcp_values.values_state(), ref))
    bad = dict(ref)
    bad["extra"] = io.BytesIO(b"extra state\x00\x02")
    rep.case("negative control: a changed BytesIO is a difference",
             [] if same(ref, bad) else ["the comparison missed a changed value"])

    problems = []
    ok, out, _ = fsdpconv_ok(problems, "inspect", src)
    for key, typ in (("extra", "_io.BytesIO"), ("torch_version", "torch.torch_version.TorchVersion"),
                     ("np_array", "numpy.ndarray"), ("args", "argparse.Namespace")):
        if ok and not any(l.startswith(key + "  opaque " + typ + " (") for l in out.splitlines()):
            problems.append("inspect does not show %s as opaque %s" % (key, typ))
    rep.case("inspect names each opaque value's type, executing nothing", problems)

    problems = []
    pt = os.path.join(tmp, "values.pt")
    if fsdpconv_ok(problems, "dcp-to-full", "-o", pt, src)[0]:
        problems += same(ref, torch.load(pt, weights_only=False))
    rep.case("dcp-to-full -o x.pt: torch.load(weights_only=False) == dcp_to_torch_save's", problems)

    problems = []
    out2 = reshard_checked(problems, src, 2, ref, tmp)
    if out2 is not None:
        item = open(os.path.join(src, "__0_0.distcp"), "rb").read()[0:1325]
        copied = b"".join(open(os.path.join(out2, f), "rb").read() for f in sorted(os.listdir(out2))
                          if f.endswith(".distcp"))
        if item not in copied:
            problems.append("the BytesIO item is not in the output byte for byte")
    rep.case("reshard copies the values verbatim: torch loads the output equal, diff equal",
             problems)


def case_opaque_tensor(rep, tmp):
    src = os.path.join(DCP, "opaque_tensor_ws1")
    ref = torch_view(src, tmp, "opaque_tensor")
    problems = []
    pt = os.path.join(tmp, "ot.pt")
    rc, _, err = run_fsdpconv("dcp-to-full", "-o", pt, src)
    if rc != 3 or "'ns'" not in err or "--drop" not in err or os.path.exists(pt):
        problems.append("expected exit 3 naming 'ns' and --drop, no output; got %d: %s"
                        % (rc, err.strip()))
    if fsdpconv_ok(problems, "dcp-to-full", "--drop", "^ns$", "-o", pt, src)[0]:
        got = torch.load(pt, weights_only=False)
        problems += same({"w": ref["w"]}, got)
    reshard_checked(problems, src, 2, ref, tmp)
    rep.case("an unreadable opaque value: .pt refused naming it, --drop works, reshard carries it",
             problems)


def case_ranklocal(rep, tmp):
    src = os.path.join(DCP, "ranklocal_ws2")
    want = {"w": torch.arange(10.0).reshape(5, 2), "step": torch.tensor(3.0), "n": 7}
    problems = []
    ok, out, _ = fsdpconv_ok(problems, "inspect", "--verify", src)
    if ok and "1 replica chunks" not in out:
        problems.append("inspect does not report the replica of 'step'")
    pt = os.path.join(tmp, "rl.pt")
    if fsdpconv_ok(problems, "dcp-to-full", "-o", pt, src)[0]:
        problems += same(want, torch.load(pt, weights_only=False))
    reshard_checked(problems, src, 3, want, tmp)
    rep.case("rank-local metadata with replicas: export and reshard load as saved", problems)

    bad = os.path.join(tmp, "diverged")
    gen_dcp_values.gen_ranklocal(bad, diverge=True)
    rc, _, err = run_fsdpconv("inspect", "--verify", bad)
    rep.case("inspect --verify: replicas holding other bytes are an error",
             [] if rc == 3 and "replicas of 'step' differ" in err else
             ["expected exit 3 naming the replicas of 'step'; got %d: %s" % (rc, err.strip())])


def main():
    rep = Report("test_dcp_values")
    tmp = tempfile.mkdtemp(prefix="dcp_values_")
    try:
        case_values(rep, tmp)
        case_opaque_tensor(rep, tmp)
        case_ranklocal(rep, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
