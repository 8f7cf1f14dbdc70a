"""Check benchmark outputs against the source model with PyTorch (independent of fsdpconv).

usage: python reshard_verify.py dcp  REF.pt DCP_DIR [--world-size N]
       python reshard_verify.py full REF.pt OUT.pt|OUT.safetensors...

dcp:  loads DCP_DIR with torch.distributed.checkpoint (no_dist, every tensor whole) and compares
      it with REF.pt; with --world-size, also checks that the metadata places chunks in exactly
      the rank files __0_0.distcp .. __{N-1}_0.distcp.
full: loads each OUT (torch.load(mmap=True) or safetensors safe_open) and compares it with REF.pt.
Compared: the key sets, then per key dtype, shape and torch.equal of the values. Prints one JSON
line per checked path ({"path", "tensors", "bytes", "equal"}) and exits 1 on any mismatch.
"""

import argparse
import json
import os
import sys

import torch


def load_ref(path):
    return torch.load(path, map_location="cpu", mmap=True, weights_only=True)


def compare(ref, got, label):
    bad = []
    if set(ref) != set(got):
        missing = sorted(set(ref) - set(got))[:5]
        extra = sorted(set(got) - set(ref))[:5]
        bad.append("%s: key sets differ (missing %s, extra %s)" % (label, missing, extra))
    nbytes = 0
    for k in sorted(set(ref) & set(got)):
        a, b = ref[k], got[k]
        b = b() if callable(b) else b
        if a.dtype != b.dtype or a.shape != b.shape:
            bad.append("%s: %s is %s%s, reference %s%s"
                       % (label, k, b.dtype, list(b.shape), a.dtype, list(a.shape)))
        elif not torch.equal(a, b):
            bad.append("%s: %s differs from the reference" % (label, k))
        nbytes += a.numel() * a.element_size()
    return bad, nbytes


def load_dcp(path):
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    sd = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(path),
                     planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    return sd


def rank_files(path):
    from torch.distributed.checkpoint import FileSystemReader

    md = FileSystemReader(path).read_metadata()
    return sorted({os.path.basename(str(v.relative_path))
                   for v in md.storage_data.values()})


class LazySafetensors(dict):
    """Key -> zero-argument callable returning the tensor, so one tensor is live at a time."""

    def __init__(self, f):
        super().__init__((k, (lambda k=k: f.get_tensor(k))) for k in f.keys())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("dcp", "full"))
    ap.add_argument("ref")
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--world-size", type=int)
    args = ap.parse_args()
    ref = load_ref(args.ref)
    failed = False
    for path in args.paths:
        bad = []
        if args.mode == "dcp":
            if args.world_size:
                want = ["__%d_0.distcp" % r for r in range(args.world_size)]
                files = rank_files(path)
                if files != want:
                    bad.append("%s: chunks in %s, expected %s" % (path, files, want))
            got = load_dcp(path)
            b, nbytes = compare(ref, got, path)
            del got
        elif path.endswith(".safetensors"):
            from safetensors import safe_open

            with safe_open(path, framework="pt") as f:
                b, nbytes = compare(ref, LazySafetensors(f), path)
        else:
            got = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
            b, nbytes = compare(ref, got, path)
            del got
        bad += b
        for line in bad[:10]:
            print("reshard_verify: " + line, file=sys.stderr)
        failed = failed or bool(bad)
        print(json.dumps({"path": path, "tensors": len(ref), "bytes": nbytes,
                          "equal": not bad}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
