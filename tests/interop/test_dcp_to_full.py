"""dcp-to-full and diff against real PyTorch.

For DCP checkpoints written by torch itself (fixtures/dcp, fixtures/dcp_train: model,
AdamW state, non-tensor values, zstd items) and by fsdpconv, the torch.save export must
equal torch's own dcp_to_torch_save (same nesting, dtypes, bits, values and value
types); the safetensors exports (one file, and shards + index.json) must hold exactly
its tensors, readable by the safetensors library; `fsdpconv diff` must call the export
equal to the checkpoint and must notice a one-bit change. Fails on any difference.
"""

import json
import os
import shutil
import sys
import tempfile
import warnings

import torch
from safetensors.torch import load_file
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from common import FIXTURES, Report, run_fsdpconv

warnings.filterwarnings("ignore")


def flatten(x, prefix=""):
    """DCP's flattening: dicts always, lists only when they hold containers or tensors."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from flatten(v, prefix + str(k) + ".")
    elif isinstance(x, list) and any(isinstance(v, (dict, list, torch.Tensor)) for v in x):
        for i, v in enumerate(x):
            yield from flatten(v, prefix + str(i) + ".")
    else:
        yield prefix[:-1], x


def same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return "tensor vs %s" % type(b if isinstance(a, torch.Tensor) else a).__name__
        if a.dtype != b.dtype or a.shape != b.shape:
            return "%s%s vs %s%s" % (a.dtype, tuple(a.shape), b.dtype, tuple(b.shape))
        ab, bb = a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
        return None if torch.equal(ab, bb) else "data differs"
    if type(a) is not type(b):
        return "type %s vs %s" % (type(a).__name__, type(b).__name__)
    return None if a == b else "%r vs %r" % (a, b)


def compare(ref, ours, only_tensors=False):
    problems = []
    if only_tensors:
        ref = {k: v for k, v in ref.items() if isinstance(v, torch.Tensor)}
    for k in sorted(set(ref) | set(ours)):
        if k not in ours:
            problems.append("%s: missing from fsdpconv's export" % k)
        elif k not in ref:
            problems.append("%s: not in torch's export" % k)
        else:
            why = same(ref[k], ours[k])
            if why:
                problems.append("%s: %s" % (k, why))
    return problems


def main():
    rep = Report("test_dcp_to_full")
    tmp = tempfile.mkdtemp(prefix="dcp_to_full_")
    try:
        ckpts = {
            "torch model_ws2": os.path.join(FIXTURES, "dcp", "model_ws2"),
            "torch model_optim_ws2": os.path.join(FIXTURES, "dcp", "model_optim_ws2"),
            "torch zstd_ws1": os.path.join(FIXTURES, "dcp", "zstd_ws1"),
            "torch FSDP2 train (plain)": os.path.join(FIXTURES, "dcp_train", "plain"),
            "torch FSDP2 train (zstd)": os.path.join(FIXTURES, "dcp_train", "zstd"),
        }
        ours_dir = os.path.join(tmp, "f2d")
        rc, _, err = run_fsdpconv("full-to-dcp", "--world-size", "3", "--conv2d-to-linear",
                                  "model.patch_embed.weight", "--dtype", "bfloat16", "-o", ours_dir,
                                  os.path.join(FIXTURES, "full", "tiny_vitlm_train.pt"))
        rep.case("full-to-dcp of the training checkpoint", [err.strip()] if rc else [])
        ckpts["fsdpconv train ws3 bf16"] = ours_dir
        for label, d in ckpts.items():
            if not os.path.isdir(d):
                rep.case(label, ["missing fixture %s" % d])
                continue
            tag = label.replace(" ", "_").replace("(", "").replace(")", "")
            ref_pt = os.path.join(tmp, tag + ".ref.pt")
            dcp_to_torch_save(d, ref_pt)
            ref = dict(flatten(torch.load(ref_pt, weights_only=False)))

            pt = os.path.join(tmp, tag + ".pt")
            rc, _, err = run_fsdpconv("dcp-to-full", "-o", pt, d)
            probs = [err.strip()] if rc else compare(
                ref, dict(flatten(torch.load(pt, weights_only=True))))
            rep.case("%s: torch.save export == dcp_to_torch_save" % label, probs)

            st = os.path.join(tmp, tag + ".safetensors")
            rc, _, err = run_fsdpconv("dcp-to-full", "-o", st, d)
            probs = [err.strip()] if rc else compare(ref, load_file(st), only_tensors=True)
            rep.case("%s: safetensors export == its tensors" % label, probs)

            shards = os.path.join(tmp, tag + ".shards")
            rc, _, err = run_fsdpconv("dcp-to-full", "--max-shard-size", "2K", "-o", shards, d)
            probs = [err.strip()] if rc else []
            if not rc:
                idx = json.load(open(os.path.join(shards, "model.safetensors.index.json")))
                got = {}
                for f in sorted(set(idx["weight_map"].values())):
                    part = load_file(os.path.join(shards, f))
                    for k in part:
                        if idx["weight_map"].get(k) != f:
                            probs.append("%s: in %s but the index says %s" % (k, f, idx["weight_map"].get(k)))
                    got.update(part)
                total = sum(t.numel() * t.element_size() for t in got.values())
                if idx["metadata"]["total_size"] != total:
                    probs.append("total_size %s != %d" % (idx["metadata"]["total_size"], total))
                probs += compare(ref, got, only_tensors=True)
            rep.case("%s: sharded safetensors + index.json" % label, probs)

            rc, out, err = run_fsdpconv("diff", d, pt)
            rep.case("%s: diff says equal" % label,
                     [] if rc == 0 else ["diff exit %d: %s %s" % (rc, out[-300:], err.strip())])

        # diff must notice a single flipped bit in an exported tensor.
        src = os.path.join(tmp, "torch_model_optim_ws2.pt")
        sd = torch.load(src, weights_only=True)
        w = sd["model"]["emb.weight"]
        w.view(torch.int32).view(-1)[0] ^= 1
        bad = os.path.join(tmp, "flipped.pt")
        torch.save(sd, bad)
        rc, out, err = run_fsdpconv("diff", "--json", ckpts["torch model_optim_ws2"], bad)
        probs = []
        if rc != 1:
            probs.append("diff exit %d, want 1 (%s)" % (rc, err.strip()))
        else:
            res = json.loads(out)
            keys = [d["key"] for d in res["differences"]]
            if keys != ["model.emb.weight"] or res["differences"][0]["ndiff"] != 1:
                probs.append("differences %r" % res["differences"])
        rep.case("diff finds one flipped bit", probs)
    finally:
        if os.environ.get("DCP_TO_FULL_KEEP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
