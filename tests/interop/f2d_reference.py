"""PyTorch-side reference for the full-to-dcp interop test (test_full_to_dcp.py).

Pure functions, no process groups:

  load_input(path)              a fixture as torch/safetensors read it (nested dict)
  reference(sd, ...)            the transforms of `fsdpconv full-to-dcp`, done in PyTorch,
                                in this order (the tests give the CLI its rules in the same
                                order): select, strip-prefix, rename, drop,
                                conv2d-to-linear, tie, dtype, add-prefix -> flat {key: tensor}
  nest(flat, under)             {"model.x": t} -> {"model": {"x": t}} (under="model")
  chunk_box(L, n, r)            torch.chunk / DTensor Shard(0) box of rank r: (offset, size)
  chunk_rows(t, n, r)           the rows rank r holds under Shard(0) over n ranks
  expected_boxes(shape, n, whole)
                                the non-empty (offsets, sizes) boxes a writer of the
                                FSDP2 layout must store
  poisoned(t)                   a tensor of t's shape/dtype differing from t in EVERY
                                element (NaN / x+1 / ~x), used to pre-fill load targets so
                                that anything the loader leaves untouched is a mismatch
  same_bits(a, b)               dtype, shape and bytes equal (bit-exact, NaN-safe)
  diff(a, b)                    a one-line description of how a differs from b, or None
  short_exc()                   the end of the current traceback on one line
  conv_patch_as_linear(x, W, b, p)
                                BAGEL's packed-patch Linear applied to pixels (for the
                                sanity check that the reference conv2d->linear is right)
"""

import json
import os
import re

import torch
import traceback


def load_input(path):
    """Read a checkpoint the way PyTorch users do: torch.load / safetensors."""
    if os.path.isdir(path):
        idx = [f for f in os.listdir(path) if f.endswith(".safetensors.index.json")]
        if len(idx) != 1:
            raise ValueError("%s: expected one *.safetensors.index.json" % path)
        path = os.path.join(path, idx[0])
    if path.endswith(".index.json"):
        from safetensors.torch import load_file
        with open(path) as f:
            wm = json.load(f)["weight_map"]
        out = {}
        base = os.path.dirname(path)
        for fname in sorted(set(wm.values())):
            part = load_file(os.path.join(base, fname))
            for k, v in part.items():
                if wm.get(k) == fname:
                    out[k] = v
        missing = [k for k in wm if k not in out]
        if missing:
            raise ValueError("index names tensors no shard holds: %s" % missing[:5])
        return out
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file
        return load_file(path)
    return torch.load(path, map_location="cpu", weights_only=True)


def _flatten(obj, prefix, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, "%s%s." % (prefix, k), out)
    elif isinstance(obj, torch.Tensor):
        out[prefix[:-1]] = obj
    else:
        raise ValueError("reference: non-tensor leaf %r at %s (not used by these tests)"
                         % (type(obj).__name__, prefix[:-1]))


def _repl(repl):
    """fsdpconv's \\1..\\9 replacement syntax -> a Python re replacement function."""
    def f(m):
        return re.sub(r"\\([1-9])", lambda g: m.group(int(g.group(1))) or "", repl)
    return f


def conv2d_to_linear(w):
    """BAGEL convert_conv2d_to_linear: [O, C, kh, kw] -> [O, kh*kw*C], channel fastest."""
    if w.dim() != 4:
        return w
    return w.permute(0, 2, 3, 1).reshape(w.shape[0], -1).contiguous()


def reference(sd, select=None, strip_prefix=None, renames=(), drops=(), conv=(), ties=(),
              dtype=None, add_prefix=None):
    """Apply the full-to-dcp transforms in PyTorch; returns a flat {key: contiguous tensor}."""
    if select is not None:
        sd = sd[select]
    flat = {}
    _flatten(sd, "", flat)
    if strip_prefix:
        flat = {(k[len(strip_prefix):] if k.startswith(strip_prefix) else k): v
                for k, v in flat.items()}
    for pat, repl in renames:
        flat = {re.sub(pat, _repl(repl), k): v for k, v in flat.items()}
    for pat in drops:
        flat = {k: v for k, v in flat.items() if not re.search(pat, k)}
    for key in conv:
        flat[key] = conv2d_to_linear(flat[key])
    for dst, src in ties:
        flat[dst] = flat[src]
    if dtype is not None:
        flat = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in flat.items()}
    if add_prefix:
        flat = {add_prefix + k: v for k, v in flat.items()}
    return {k: v.detach().clone().contiguous() for k, v in flat.items()}


def nest(flat, under):
    """Load-target structure: flat keys, or everything under one top-level name."""
    if not under:
        return dict(flat)
    pre = under + "."
    bad = [k for k in flat if not k.startswith(pre)]
    if bad:
        raise ValueError("keys outside %r: %s" % (under, bad[:5]))
    return {under: {k[len(pre):]: v for k, v in flat.items()}}


def chunk_box(length, n, r):
    """(offset, size) of rank r's piece of a dim of `length` under Shard over n ranks."""
    c = -(-length // n) if length else 0
    off = min(c * r, length)
    size = max(0, min(c, length - c * r))
    return off, size


def chunk_rows(t, n, r):
    pieces = torch.chunk(t, n, dim=0)
    if r < len(pieces):
        return pieces[r]
    return t[t.shape[0]:]


def expected_boxes(shape, n, whole):
    """Set of non-empty (offsets, sizes) tuples for a tensor stored Shard(0) over n ranks
    (or whole: one box)."""
    shape = tuple(shape)
    if whole or len(shape) == 0:
        if 0 in shape:
            return set()
        return {((0,) * len(shape), shape)}
    out = set()
    for r in range(n):
        off, size = chunk_box(shape[0], n, r)
        if size and all(shape[1:]):
            out.add(((off,) + (0,) * (len(shape) - 1), (size,) + shape[1:]))
    return out


def poisoned(t):
    if t.dtype == torch.bool:
        return ~t
    if t.is_floating_point() or t.is_complex():
        return torch.full_like(t, float("nan"))
    return t + 1


def _bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bits(a, b):
    return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
            and torch.equal(_bytes(a), _bytes(b)))


def diff(got, want):
    if not isinstance(got, torch.Tensor):
        return "got %s, want a tensor" % type(got).__name__
    if got.dtype != want.dtype:
        return "dtype %s, want %s" % (got.dtype, want.dtype)
    if tuple(got.shape) != tuple(want.shape):
        return "shape %s, want %s" % (list(got.shape), list(want.shape))
    if same_bits(got, want):
        return None
    g = _bytes(got)
    w = _bytes(want)
    nbad = int((g != w).sum())
    first = int((g != w).nonzero()[0]) // max(1, want.element_size())
    return "%d differing bytes; first differing element (flat index %d): %s, want %s" % (
        nbad, first, got.reshape(-1)[first].item(), want.reshape(-1)[first].item())


def short_exc(lines=3):
    """The last lines of the current traceback (where the error is), one line."""
    tb = [ln.strip() for ln in traceback.format_exc().strip().splitlines()
          if ln.strip() and not re.match(r"^[\^~ ]+$", ln)]
    return " | ".join(tb[-lines:])


def conv_patch_as_linear(x, w_lin, b, p):
    """BAGEL's NaViT packing: patches flattened (kh, kw, c) with channel fastest."""
    n, c, h, wd = x.shape
    patches = x.reshape(n, c, h // p, p, wd // p, p).permute(0, 2, 4, 3, 5, 1)
    patches = patches.reshape(n, (h // p) * (wd // p), p * p * c)
    return torch.nn.functional.linear(patches, w_lin, b)
