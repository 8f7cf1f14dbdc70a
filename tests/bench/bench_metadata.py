#!/usr/bin/env python3
"""A DCP with a huge .metadata: peak RSS and wall time of inspect, reshard and dcp-to-full.

usage: bench_metadata.py FSDPCONV DIR [--tensors T] [--ranks R] [--only CMD]

Writes DIR/ckpt once (kept for later runs): T tensors (default 1000) of shape [4R, 8] float32,
each Shard(0) over R ranks (default 1000), so T * R chunks (1,000,000), described by a
.metadata pickled with torch's own classes (pickle.dump, as dcp.save does) and stored as real
torch.save items (each chunk's [4, 8] block) in one __{rank}_0.distcp file per rank.  Then runs,
one at a time, each reading the whole metadata:
  inspect DIR/ckpt                          (reads and checks the metadata: "the time to read it")
  reshard DIR/ckpt --world-size 8 -o ...    (reads every chunk once)
  dcp-to-full DIR/ckpt -o full.safetensors  (reads every chunk once)
and reports each command's peak RSS (through /usr/bin/time), bytes per chunk (issue 11's target: <= 200 at
peak) and wall time; the .metadata size is the yardstick.  Figures are printed, never asserted.
"""

import argparse
import io
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

ROWS, COLS = 4, 8  # each chunk's block


def item_blob(r):
    """One stored item as dcp.save writes it: torch.save of a chunk tensor (rank r's values)."""
    import torch
    buf = io.BytesIO()
    torch.save(torch.full((ROWS, COLS), float(r)), buf)
    return buf.getvalue()


def write(dirpath, ntensors, nranks):
    """Runs in a child process: torch stays out of the measuring process (see run())."""
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata,
                                                       MetadataIndex, TensorProperties,
                                                       TensorStorageMetadata)
    tmp = dirpath + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    sdm, storage, planner = {}, {}, {}
    files = [open(os.path.join(tmp, "__%d_0.distcp" % r), "wb") for r in range(nranks)]
    pos = [0] * nranks
    names = ["__%d_0.distcp" % r for r in range(nranks)]
    blobs = [item_blob(r) for r in range(nranks)]  # one torch.save per rank keeps this fast
    for t in range(ntensors):
        fqn = "model.layers.%d.weight" % t
        chunks = []
        for r in range(nranks):
            off, size = torch.Size([r * ROWS, 0]), torch.Size([ROWS, COLS])
            blob = blobs[r]
            files[r].write(blob)
            chunks.append(ChunkStorageMetadata(offsets=off, sizes=size))
            storage[MetadataIndex(fqn, off, r)] = _StorageInfo(names[r], pos[r], len(blob))
            pos[r] += len(blob)
        sdm[fqn] = TensorStorageMetadata(TensorProperties(dtype=torch.float32),
                                         torch.Size([nranks * ROWS, COLS]), chunks)
        planner[fqn] = ("model", "layers.%d.weight" % t)
    for f in files:
        f.close()
    md = Metadata(state_dict_metadata=sdm, planner_data=planner, storage_data=storage)
    with open(os.path.join(tmp, ".metadata"), "wb") as f:
        pickle.dump(md, f)
    os.rename(tmp, dirpath)


def run(cmd):
    """Run cmd under GNU time; return (exit code, wall seconds, peak RSS bytes, stderr tail).

    The peak comes from /usr/bin/time, a small C parent: a child's ru_maxrss also counts the
    memory of the process that forked it (Linux records the old address space's peak at exec),
    so measured straight from Python it would include the interpreter.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        t0 = time.monotonic()
        p = subprocess.run(["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name] + cmd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.monotonic() - t0
        peak = int(rss.read().split()[-1]) * 1024
    return p.returncode, wall, peak, p.stderr.decode("utf-8", "replace").strip()[-300:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fsdpconv")
    ap.add_argument("dir")
    ap.add_argument("--tensors", type=int, default=1000)
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--only", choices=["inspect", "reshard", "dcp-to-full"])
    ap.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    nchunks = a.tensors * a.ranks
    ckpt = os.path.join(a.dir, "ckpt-%dx%d" % (a.tensors, a.ranks))
    if a.write_only:
        write(ckpt, a.tensors, a.ranks)
        return 0
    if not os.path.exists(os.path.join(ckpt, ".metadata")):
        t0 = time.monotonic()
        subprocess.run([sys.executable, __file__, a.fsdpconv, a.dir, "--tensors", str(a.tensors),
                        "--ranks", str(a.ranks), "--write-only"], check=True)
        print("wrote %s in %.1f s" % (ckpt, time.monotonic() - t0))
    msize = os.path.getsize(os.path.join(ckpt, ".metadata"))
    out = os.path.join(a.dir, "out")
    runs = [
        ("inspect", [a.fsdpconv, "-q", "inspect", ckpt]),
        ("reshard", [a.fsdpconv, "-q", "reshard", ckpt, "--world-size", "8", "-o",
                     os.path.join(out, "resharded"), "--force"]),
        ("dcp-to-full", [a.fsdpconv, "-q", "dcp-to-full", ckpt, "-o",
                         os.path.join(out, "full.safetensors"), "--force"]),
    ]
    print("a %d-chunk DCP (%d tensors x %d ranks); .metadata %.1f MiB = %.0f bytes per chunk"
          % (nchunks, a.tensors, a.ranks, msize / 2**20, msize / nchunks))
    _, _, floor, _ = run([a.fsdpconv, "--version"])
    print("  (a bare 'fsdpconv --version' peaks at %.1f MiB)" % (floor / 2**20))
    failed = 0
    for name, cmd in runs:
        if a.only and name != a.only:
            continue
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        rc, wall, peak, err = run(cmd)
        failed |= rc != 0
        print("  %-12s exit %d  peak RSS %7.1f MiB = %5.0f bytes/chunk (target <= 200), "
              "%.2f x the .metadata; wall %6.2f s" % (name, rc, peak / 2**20, peak / nchunks,
                                                       peak / msize, wall))
        if rc != 0:
            print("    " + err)
    shutil.rmtree(out, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
