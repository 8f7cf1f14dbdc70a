"""Interop test: `fsdpconv full-to-dcp` output loaded by real PyTorch, bit-exact.

For every case (input fixture, transforms, mesh) the expected full state dict is built in
PyTorch (f2d_reference.reference: torch.load / safetensors + the same transforms), the
fixture is converted with fsdpconv, and then:

  metadata   .metadata read by torch's FileSystemReader: key set, global shapes, dtypes,
             planner_data equal to what torch's own dcp.save writes for the expected state
             dict; non-empty chunk boxes == exactly the torch.chunk boxes of the shard mesh
             dim (one whole box for 0-d and --replicate tensors); empty chunks at offset
             dim0; every chunk's blob (torch.load of its byte range) has the chunk's shape,
             the tensor's dtype and bit-equal data; --tie targets point at the source's
             bytes (stored once)
  no_dist    dcp.load(..., no_dist=True) into plain poisoned tensors == expected
  to_torch   torch's format_utils.dcp_to_torch_save on the output, torch.load == expected
             (nested under "model" for --add-prefix model.)
  fsdp2      N gloo ranks (fsdp_worker.py): FSDP2 fully_shard (HSDP for 2-D meshes) on a
             meta-device bf16 model, to_empty, dcp.load, local shard == torch.chunk rows,
             full_tensor() == expected, 1-D: rank r's rows in __r_0.distcp; for the plain
             tiny_vitlm.pt cases and the --add-prefix case the ranks then dcp.save the same
             live state and fsdpconv's chunks/sizes/dtypes/planner_data must equal torch's
             (DTensor entries; torch stores plain buffers whole)

Ranks are forked from this process (torch is imported once; F2D_START=spawn to use
spawn instead); one process group per mesh runs all of that mesh's cases.  Prints one
PASS/FAIL line per case and check; exits 1 on any failure.  F2D_KEEP=1 keeps the temp dir.
"""

import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import torch
from torch.distributed.checkpoint.api import CheckpointException

import common
import f2d_reference as ref
import fsdp_worker
from common import fsdpconv_path

FIX = common.FIXTURES

BF16 = torch.bfloat16
STD = ["--conv2d-to-linear", "patch_embed.weight", "--tie", "lm_head.weight=embed_tokens.weight",
       "--dtype", "bfloat16"]
STD_REF = dict(conv=["patch_embed.weight"], ties=[("lm_head.weight", "embed_tokens.weight")],
               dtype=BF16)
PT = os.path.join(FIX, "full", "tiny_vitlm.pt")
TRAIN = os.path.join(FIX, "full", "tiny_vitlm_train.pt")
ST = os.path.join(FIX, "safetensors", "tiny_vitlm.safetensors")
ST_DIR = os.path.join(FIX, "safetensors", "sharded")


def mesh_args(mesh):
    if len(mesh) == 1:
        return ["--world-size", str(mesh[0])]
    return ["--mesh", "replicate=%d,shard=%d" % tuple(mesh)]


def mesh_label(mesh):
    return "ws=%d" % mesh[0] if len(mesh) == 1 else "mesh=%dx%d" % tuple(mesh)


def make_cases():
    """(name, input, mesh, extra CLI args, reference kwargs, nest, replicate regexes)."""
    cases = []

    def add(name, inp, mesh, args, rkw, nest=None, replicate=(), torch_save=False):
        cases.append(dict(name="%s %s" % (name, mesh_label(mesh)), input=inp, mesh=list(mesh),
                          args=list(args), ref=rkw, nest=nest, replicate=list(replicate),
                          torch_save=torch_save))

    for mesh in ([1], [2], [3], [4], [8], [2, 2], [2, 3], [7]):
        add("tiny_vitlm.pt", PT, mesh, STD, STD_REF, torch_save=True)
    add("safetensors", ST, [3], STD, STD_REF)
    add("safetensors-index-dir", ST_DIR, [3], STD, STD_REF)
    add("train.pt --select model", TRAIN, [2], ["--select", "model"] + STD,
        dict(STD_REF, select="model"))
    add("train.pt --select model --add-prefix model.", TRAIN, [2],
        ["--select", "model"] + STD + ["--add-prefix", "model."],
        dict(STD_REF, select="model", add_prefix="model."), nest="model", torch_save=True)
    # a tie whose two tensors differ: the destination must take the source's data
    add("tie-distinct-data", PT, [3],
        STD + ["--tie", "blocks.1.attn.qkv.weight=blocks.0.attn.qkv.weight"],
        dict(STD_REF, ties=STD_REF["ties"] + [("blocks.1.attn.qkv.weight",
                                               "blocks.0.attn.qkv.weight")]))
    # buffers stored whole; FSDP2 keeps them as plain tensors, so they load either way
    add("--replicate buffers", PT, [4], STD + ["--replicate", "^(position_ids|attn_mask)$"],
        STD_REF, replicate=["^(position_ids|attn_mask)$"])
    add("--replicate buffers", PT, [2, 2], STD + ["--replicate", "^(position_ids|attn_mask)$"],
        STD_REF, replicate=["^(position_ids|attn_mask)$"])
    return cases


class Results:
    def __init__(self):
        self.failed = 0
        self.passed = 0

    def line(self, case, check, problems, secs=None):
        problems = [p for p in problems if p]
        tag = "FAIL" if problems else "PASS"
        extra = "" if secs is None else " (%.1fs)" % secs
        if problems:
            self.failed += 1
            print("FAIL %s: %s: %d problem(s)%s" % (case, check, len(problems), extra))
            for p in problems[:12]:
                print("     %s" % p.replace("\n", "\n     "))
            if len(problems) > 12:
                print("     ... %d more" % (len(problems) - 12))
        else:
            self.passed += 1
            print("%s %s: %s%s" % (tag, case, check, extra))
        sys.stdout.flush()


def convert(case, tmp):
    out = os.path.join(tmp, re.sub(r"[^A-Za-z0-9_.=-]+", "_", case["name"]))
    cmd = ([fsdpconv_path(), "full-to-dcp"] + mesh_args(case["mesh"]) + ["-o", out]
           + case["args"] + [case["input"]])
    r = subprocess.run(cmd, capture_output=True, timeout=300)
    case["out"] = out
    case["cmd"] = " ".join(("OUT" if a == out else a) for a in cmd)
    if r.returncode != 0:
        return ["fsdpconv exit %d: %s\n$ %s" % (r.returncode,
                                               (r.stdout + r.stderr).decode("utf-8",
                                                                            "replace")[-1500:],
                                               case["cmd"])]
    return []


# ----------------------------------------------------------------------------- metadata

_torch_md_cache = {}


def torch_planner_data(expected, nest, tmp):
    """planner_data torch's own dcp.save writes for this state dict."""
    import torch.distributed.checkpoint as dcp
    key = (tuple(sorted(expected)), nest)
    if key not in _torch_md_cache:
        d = tempfile.mkdtemp(dir=tmp, prefix="torchsave_")
        dcp.save(ref.nest(expected, nest), checkpoint_id=d, no_dist=True)
        _torch_md_cache[key] = dcp.FileSystemReader(d).read_metadata().planner_data
        shutil.rmtree(d, ignore_errors=True)
    return _torch_md_cache[key]


def check_metadata(case, expected, tmp):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
    probs = []
    md = dcp.FileSystemReader(case["out"]).read_metadata()
    n = case["mesh"][-1]
    got_keys, want_keys = set(md.state_dict_metadata), set(expected)
    if got_keys != want_keys:
        probs.append("keys: missing %s, unexpected %s" % (sorted(want_keys - got_keys)[:8],
                                                          sorted(got_keys - want_keys)[:8]))
    tpd = torch_planner_data(expected, case["nest"], tmp)
    pd = md.planner_data or {}
    for k in sorted(want_keys & got_keys):
        if pd.get(k) != tpd.get(k):
            probs.append("%s: planner_data %r, torch writes %r" % (k, pd.get(k), tpd.get(k)))
    blobs = {}
    used = set()
    for k in sorted(want_keys & got_keys):
        tm, w = md.state_dict_metadata[k], expected[k]
        if not isinstance(tm, TensorStorageMetadata):
            probs.append("%s: stored as %s, want a tensor" % (k, type(tm).__name__))
            continue
        if tuple(tm.size) != tuple(w.shape):
            probs.append("%s: size %s, want %s" % (k, list(tm.size), list(w.shape)))
            continue
        if tm.properties.dtype != w.dtype:
            probs.append("%s: properties.dtype %s, want %s" % (k, tm.properties.dtype, w.dtype))
        whole = any(re.search(p, k[len(case["nest"]) + 1:] if case["nest"] else k)
                    for p in case["replicate"])
        want_boxes = ref.expected_boxes(w.shape, n, whole)
        got_boxes = []
        for ch in tm.chunks:
            off, size = tuple(ch.offsets), tuple(ch.sizes)
            if len(off) != w.dim() or len(size) != w.dim():
                probs.append("%s: chunk rank %d/%d, tensor %d-d" % (k, len(off), len(size),
                                                                    w.dim()))
                continue
            if any(o < 0 or o + s > d for o, s, d in zip(off, size, w.shape)):
                probs.append("%s: chunk %s+%s out of bounds of %s" % (k, off, size,
                                                                      list(w.shape)))
                continue
            empty = w.dim() > 0 and 0 in size
            if empty:
                if w.dim() and (off[0] != w.shape[0] or any(off[1:])):
                    probs.append("%s: empty chunk at offsets %s, torch puts it at (%d, 0..)"
                                 % (k, list(off), w.shape[0]))
            else:
                got_boxes.append((off, size))
            info = md.storage_data.get(MetadataIndex(k, torch.Size(off)))
            if info is None:
                probs.append("%s: chunk %s has no storage_data entry" % (k, list(off)))
                continue
            used.add(MetadataIndex(k, torch.Size(off)))
            try:
                path = os.path.join(case["out"], info.relative_path)
                if path not in blobs:
                    with open(path, "rb") as f:
                        blobs[path] = f.read()
                raw = blobs[path][info.offset:info.offset + info.length]
                if len(raw) != info.length:
                    probs.append("%s %s: blob %s@%d+%d beyond end of file" % (
                        k, list(off), info.relative_path, info.offset, info.length))
                    continue
                t = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
            except Exception as e:
                probs.append("%s %s: blob does not torch.load: %s" % (k, list(off), e))
                continue
            sl = tuple(slice(o, o + s) for o, s in zip(off, size))
            d = ref.diff(t, w[sl] if sl else w)
            if d:
                probs.append("%s chunk %s (blob %s@%d): %s" % (k, list(off), info.relative_path,
                                                              info.offset, d))
        if sorted(got_boxes) != sorted(want_boxes):
            probs.append("%s %s: non-empty chunks %s, want the torch.chunk boxes %s" % (
                k, list(w.shape), sorted(got_boxes), sorted(want_boxes)))
    extra = [i for i in md.storage_data if i not in used]
    if extra:
        probs.append("storage_data entries no chunk names: %s" % [
            "%s@%s" % (i.fqn, list(i.offset)) for i in extra[:6]])
    # --tie: stored once (the destination's entries name the source's bytes)
    pre = case["nest"] + "." if case["nest"] else ""
    for dst, src in case["ref"].get("ties", ()):
        a, b = md.state_dict_metadata.get(pre + dst), md.state_dict_metadata.get(pre + src)
        if a is None or b is None:
            continue
        for ch in a.chunks:
            ia = md.storage_data.get(MetadataIndex(pre + dst, ch.offsets))
            ib = md.storage_data.get(MetadataIndex(pre + src, ch.offsets))
            if ia is None or ib is None:
                continue
            if (ia.relative_path, ia.offset, ia.length) != (ib.relative_path, ib.offset,
                                                            ib.length):
                probs.append("--tie %s=%s: chunk %s stored twice (%s@%d vs %s@%d)" % (
                    dst, src, list(ch.offsets), ia.relative_path, ia.offset,
                    ib.relative_path, ib.offset))
    return probs


# ------------------------------------------------------------------ single-process loads

def check_no_dist(case, expected):
    import torch.distributed.checkpoint as dcp
    target = {k: ref.poisoned(v) for k, v in expected.items()}
    dcp.load(ref.nest(target, case["nest"]), checkpoint_id=case["out"], no_dist=True)
    return ["%s: %s" % (k, d) for k in sorted(expected)
            for d in [ref.diff(target[k], expected[k])] if d]


def check_to_torch(case, expected, tmp):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    path = os.path.join(tmp, "to_torch.pt")
    dcp_to_torch_save(case["out"], path)
    got = torch.load(path, map_location="cpu", weights_only=True)
    os.unlink(path)
    want = ref.nest(expected, case["nest"])
    probs = []
    if case["nest"]:
        if set(got) != set(want):
            return ["top-level keys %s, want %s" % (sorted(got), sorted(want))]
        got, want = got[case["nest"]], want[case["nest"]]
    if set(got) != set(want):
        probs.append("keys: missing %s, unexpected %s" % (sorted(set(want) - set(got))[:8],
                                                          sorted(set(got) - set(want))[:8]))
    for k in sorted(set(got) & set(want)):
        d = ref.diff(got[k], want[k])
        if d:
            probs.append("%s: %s" % (k, d))
    return probs


def check_reference_conv():
    """The reference conv2d->linear really is BAGEL's: same outputs as the Conv2d."""
    import tiny_model
    m = tiny_model.build_model()
    x, _ = tiny_model.example_inputs()
    w = m.patch_embed.weight.detach()
    conv = m.patch_embed(x).flatten(2).transpose(1, 2)
    lin = ref.conv_patch_as_linear(x, ref.conv2d_to_linear(w), m.patch_embed.bias.detach(),
                                   w.shape[-1])
    if not torch.allclose(conv, lin, atol=1e-5, rtol=1e-5):
        return ["conv2d_to_linear reference differs from Conv2d: max |diff| %g"
                % (conv - lin).abs().max().item()]
    return []


# ------------------------------------------------------------------------ FSDP2 ranks

def run_mesh(mesh, cases, tmp, timeout):
    """All cases of one mesh in one process group; {case name: [problems]}."""
    world = 1
    for d in mesh:
        world *= d
    rdir = tempfile.mkdtemp(dir=tmp, prefix="ranks_")
    job = {"mesh": mesh, "timeout": timeout, "result_dir": rdir,
           "cases": [{"name": c["name"], "out": c["out"], "expected": c["expected"],
                      "nest": c["nest"], "torch_save": c["torch_save"]} for c in cases]}
    return common.launch_ranks(fsdp_worker.run_rank, world, job, [c["name"] for c in cases],
                               timeout * (len(cases) + 1), os.environ.get("F2D_START", "fork"))


def main():
    if not os.path.exists(fsdpconv_path()):
        print("fsdpconv binary not found: %s" % fsdpconv_path())
        return 1
    torch.set_num_threads(1)
    t_start = time.time()
    res = Results()
    tmp = tempfile.mkdtemp(prefix="f2d_interop_")
    try:
        res.line("reference", "conv2d->linear == Conv2d forward", check_reference_conv())
        cases = make_cases()
        # conversions and expected state dicts up front
        inputs = {}
        for c in cases:
            probs = convert(c, tmp)
            c["ok"] = not probs
            if probs:
                res.line(c["name"], "convert", probs)
                continue
            if c["input"] not in inputs:
                inputs[c["input"]] = ref.load_input(c["input"])
            expected = ref.reference(inputs[c["input"]], **c["ref"])
            c["expected"] = os.path.join(c["out"] + ".expected.pt")
            torch.save(expected, c["expected"])
            c["exp"] = expected
        # single-process checks
        for c in cases:
            if not c["ok"]:
                continue
            for label, fn in (("metadata", lambda: check_metadata(c, c["exp"], tmp)),
                              ("dcp.load no_dist", lambda: check_no_dist(c, c["exp"])),
                              ("dcp_to_torch_save", lambda: check_to_torch(c, c["exp"], tmp))):
                try:
                    probs = fn()
                except (Exception, CheckpointException):
                    probs = ["raised: %s" % ref.short_exc()]
                if probs:
                    probs.append("reproduce: %s" % c["cmd"])
                res.line(c["name"], label, probs)
        # multi-process FSDP2 loads, one process group per mesh
        meshes = []
        for c in cases:
            c.pop("exp", None)
            if c["ok"] and c["mesh"] not in meshes:
                meshes.append(c["mesh"])
        for mesh in meshes:
            group = [c for c in cases if c["ok"] and c["mesh"] == mesh]
            t0 = time.time()
            try:
                per_case = run_mesh(mesh, group, tmp, timeout=int(os.environ.get(
                    "F2D_TIMEOUT", "180")))
            except (Exception, CheckpointException):
                per_case = {c["name"]: ["launch failed: %s" % ref.short_exc()]
                            for c in group}
            secs = time.time() - t0
            for i, c in enumerate(group):
                probs = per_case.get(c["name"], [])
                if probs:
                    probs.append("reproduce: %s" % c["cmd"])
                res.line(c["name"], "FSDP2 fully_shard + dcp.load on %d gloo ranks"
                         % (mesh[0] * (mesh[1] if len(mesh) > 1 else 1)), probs,
                         secs if i == len(group) - 1 else None)
    finally:
        if os.environ.get("F2D_KEEP"):
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("full_to_dcp: %d passed, %d failed (%.0fs, torch %s)" % (
        res.passed, res.failed, time.time() - t_start, torch.__version__))
    return 1 if res.failed or not res.passed else 0


if __name__ == "__main__":
    sys.exit(main())
