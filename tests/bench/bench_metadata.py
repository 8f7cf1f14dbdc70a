#!/usr/bin/env python3
"""Reading a huge DCP .metadata: peak RSS and time of `fsdpconv inspect` (reported, never asserted).

usage: bench_metadata.py FSDPCONV DIR [--tensors T] [--ranks R]

Writes DIR/.metadata with torch's own classes (pickle.dump, as dcp.save does): T tensors
(default 1000), each Shard(0) over R ranks (default 1000), so T * R chunks (1,000,000), plus
sparse rank files of the right sizes so every item range checks out.  Then runs
`fsdpconv inspect` on it once: it reads and checks the whole metadata, then fails parsing the
(all-zero) items, exit 3, which is expected.  Reports the child's peak RSS, bytes per chunk
(issue 11's target is <= 200), and the wall time; the .metadata size is the yardstick.
"""

import argparse
import os
import pickle
import resource
import subprocess
import sys
import time

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex,
                                                   TensorProperties, TensorStorageMetadata)

ITEM = 1577  # bytes of one stored item (a small torch.save blob)


def write(dirpath, ntensors, nranks):
    os.makedirs(dirpath, exist_ok=True)
    sdm, storage, planner = {}, {}, {}
    pos = [0] * nranks
    for t in range(ntensors):
        fqn = "model.layers.%d.weight" % t
        chunks = []
        for r in range(nranks):
            off, size = torch.Size([r * 4, 0]), torch.Size([4, 8])
            chunks.append(ChunkStorageMetadata(offsets=off, sizes=size))
            storage[MetadataIndex(fqn, off, r)] = _StorageInfo("__%d_0.distcp" % r, pos[r], ITEM)
            pos[r] += ITEM
        sdm[fqn] = TensorStorageMetadata(TensorProperties(dtype=torch.float32),
                                         torch.Size([nranks * 4, 8]), chunks)
        planner[fqn] = ("model", "layers.%d.weight" % t)
    md = Metadata(state_dict_metadata=sdm, planner_data=planner, storage_data=storage)
    with open(os.path.join(dirpath, ".metadata"), "wb") as f:
        pickle.dump(md, f)
    for r in range(nranks):
        with open(os.path.join(dirpath, "__%d_0.distcp" % r), "wb") as f:
            f.truncate(pos[r])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fsdpconv")
    ap.add_argument("dir")
    ap.add_argument("--tensors", type=int, default=1000)
    ap.add_argument("--ranks", type=int, default=1000)
    a = ap.parse_args()
    nchunks = a.tensors * a.ranks
    if not os.path.exists(os.path.join(a.dir, ".metadata")):
        write(a.dir, a.tensors, a.ranks)
    msize = os.path.getsize(os.path.join(a.dir, ".metadata"))
    t0 = time.monotonic()
    r = subprocess.run([a.fsdpconv, "inspect", a.dir], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    wall = time.monotonic() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print("inspect of a %d-chunk .metadata (%d tensors x %d ranks, %.1f MiB): exit %d"
          % (nchunks, a.tensors, a.ranks, msize / 2**20, r.returncode))
    print("  %s" % r.stderr.decode("utf-8", "replace").strip()[:200])
    print("  peak RSS %.1f MiB = %.0f bytes per chunk (target <= 200), %.2f x the file; "
          "wall %.2f s" % (peak / 2**20, peak / nchunks, peak / msize, wall))


if __name__ == "__main__":
    sys.exit(main())
