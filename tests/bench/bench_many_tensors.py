#!/usr/bin/env python3
"""dcp-to-full of many small tensors: .pt against .safetensors (reported, never asserted).

usage: bench_many_tensors.py FSDPCONV DIR [--tensors N] [--reps R]

Writes N (default 40000) 4-element float32 tensors to DIR/many.safetensors, converts them to a
world-size-2 DCP with fsdpconv, then exports that DCP R times (default 3, interleaved) to .pt and
to .safetensors.  Reports the best user+system CPU time and wall time of each and the .pt /
.safetensors ratio; the issue-11 target is a ratio <= 1.5 (time linear in the tensor count, as
the safetensors export is).  The last .pt is checked with torch.load: every tensor equal.
"""

import argparse
import os
import resource
import subprocess
import sys
import time

import torch
from safetensors.torch import save_file


def run(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fsdpconv")
    ap.add_argument("dir")
    ap.add_argument("--tensors", type=int, default=40000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    n = a.tensors
    src = os.path.join(a.dir, "many.safetensors")
    dcp = os.path.join(a.dir, "many_dcp")
    state = {f"layers.{i}.w": torch.full((4,), float(i)) for i in range(n)}
    save_file(state, src)
    subprocess.run([a.fsdpconv, "full-to-dcp", "--force", "--world-size", "2", "-o", dcp, src],
                   check=True, stdout=subprocess.DEVNULL)
    best = {}
    for _ in range(a.reps):
        for ext in ("pt", "safetensors"):
            out = os.path.join(a.dir, "out." + ext)
            cpu, wall = run([a.fsdpconv, "dcp-to-full", "--force", "-o", out, dcp])
            b = best.setdefault(ext, [cpu, wall])
            b[0], b[1] = min(b[0], cpu), min(b[1], wall)
    got = torch.load(os.path.join(a.dir, "out.pt"), weights_only=True)
    if set(got) != set(state) or not all(torch.equal(got[k], state[k]) for k in state):
        sys.exit("bench_many_tensors: the .pt export does not load equal to the input")
    pt, st = best["pt"], best["safetensors"]
    print(f"dcp-to-full of {n} small tensors (world size 2 DCP), best of {a.reps}:")
    print(f"  .pt           cpu {pt[0]:.2f} s  wall {pt[1]:.2f} s")
    print(f"  .safetensors  cpu {st[0]:.2f} s  wall {st[1]:.2f} s")
    print(f"  .pt / .safetensors cpu ratio {pt[0] / max(st[0], 1e-9):.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
