"""One rank of test_tp.py: a tiny Llama-like model under tensor parallelism + FSDP2.

The model is parallelized as torchtitan does it (parallelize_module with ColwiseParallel /
RowwiseParallel on the tp mesh dim, then fully_shard over the data-parallel dims), saved with
torch's own dcp.save, and then a second copy with different weights loads fsdpconv's
checkpoint. Each rank writes rank<r>.json: problems, its box of every key, the byte ranges
dcp.load asked of each .distcp file, and the bytes its read syscalls returned (/proc/self/io rchar,
buffered read-ahead and the metadata included).
"""

import os
import sys

import torch
import torch.nn as nn

import common

# torchtitan's Llama plan, on our module names (see TP_PLAN in test_tp.py for the same as
# fsdpconv rules): embeddings Rowwise (vocab dim 0), a positional embedding Colwise (dim 1),
# q/k/v and w1/w3 Colwise (dim 0, with bias), wo and w2 Rowwise (dim 1; wo's bias is
# replicated), output Colwise (dim 0); norms stay plain parameters.


class Block(nn.Module):
    def __init__(self, dim, hidden, kv):
        super().__init__()
        self.attention_norm = nn.LayerNorm(dim)
        self.attention = nn.Module()
        self.attention.wq = nn.Linear(dim, dim)
        self.attention.wk = nn.Linear(dim, kv)
        self.attention.wv = nn.Linear(dim, kv, bias=False)
        self.attention.wo = nn.Linear(dim, dim)
        self.ffn_norm = nn.LayerNorm(dim)
        self.feed_forward = nn.Module()
        self.feed_forward.w1 = nn.Linear(dim, hidden, bias=False)
        self.feed_forward.w2 = nn.Linear(hidden, dim, bias=False)
        self.feed_forward.w3 = nn.Linear(dim, hidden, bias=False)


class TinyLM(nn.Module):
    def __init__(self, vocab, dim, hidden, kv, layers, positions):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.pos_embeddings = nn.Embedding(positions, dim)
        self.layers = nn.ModuleList(Block(dim, hidden, kv) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.scale = nn.Parameter(torch.ones(1))


def build(cfg, seed):
    torch.manual_seed(seed)
    m = TinyLM(**cfg)
    with torch.no_grad():
        for p in m.parameters():   # every value distinct and exact in float32
            p.copy_(torch.randn(p.shape))
    return m


def parallelize(model, mesh, hsdp):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    tp = mesh["tp"]
    parallelize_module(model, tp, {
        "tok_embeddings": RowwiseParallel(),
        "pos_embeddings": ColwiseParallel(),
        "output": ColwiseParallel(),
    })
    for block in model.layers:
        parallelize_module(block, tp, {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
        })
    dp = mesh["dp_replicate", "dp_shard"] if hsdp else mesh["dp_shard"]
    for block in model.layers:
        fully_shard(block, mesh=dp)
    fully_shard(model, mesh=dp)
    return model


class _CountingStream:
    """A read stream that records the byte ranges torch asks for (logical, not read-ahead)."""

    def __init__(self, cm, ranges):
        self._cm = cm   # the context manager that owns the file
        self._s = cm.__enter__()
        self._ranges = ranges

    def read(self, n=-1):
        pos = self._s.tell()
        b = self._s.read(n)
        self._ranges.append((pos, len(b)))
        return b

    def readinto(self, buf):
        pos = self._s.tell()
        n = self._s.readinto(buf)
        self._ranges.append((pos, n or 0))
        return n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._s, name)


def record_reads(reads):
    """Make every DCP FileSystemReader stream record its reads into reads[file name]."""
    from torch.distributed.checkpoint import filesystem
    orig = filesystem.FileSystem.create_stream

    def create_stream(self, path, mode):
        cm = orig(self, path, mode)
        if "r" not in mode or not str(path).endswith(".distcp"):
            return cm
        return _CountingStream(cm, reads.setdefault(os.path.basename(str(path)), []))

    filesystem.FileSystem.create_stream = create_stream


def rchar():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return -1


def save_optimizer(model, rank, job):
    """One AdamW step on the parallelized model; torch saves it sharded and (rank 0) full."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    for p in model.parameters():
        p.grad = torch.ones_like(p) * 0.5
    opt.step()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=job["optim_dir"])
    fm, fo = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True,
                                                                   cpu_offload=True))
    if rank == 0:
        torch.save({"model": fm, "optim": fo}, job["optim_full"])


def run(rank, job):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    shape = tuple(job["mesh"])
    hsdp = len(shape) == 3
    names = ("dp_replicate", "dp_shard", "tp") if hsdp else ("dp_shard", "tp")
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    problems = []

    model = parallelize(build(job["cfg"], 0), mesh, hsdp)
    sd = model.state_dict()
    dcp.save(sd, checkpoint_id=job["torch_dir"])

    boxes = {}
    for k, v in sd.items():
        if isinstance(v, DTensor):
            ch = v.__create_chunk_list__()[0]
            boxes[k] = [list(ch.offsets), list(ch.sizes), str(tuple(v.placements))]

    other = parallelize(build(job["cfg"], 1), mesh, hsdp)
    sd2 = other.state_dict()
    dcp.load(sd2, checkpoint_id=job["torch_dir"])   # warm-up: modules dcp.load imports
    reads = {}
    record_reads(reads)
    before = rchar()
    dcp.load(sd2, checkpoint_id=job["ours"])
    read = rchar() - before
    for k, v in sd.items():
        a = v.to_local() if isinstance(v, DTensor) else v
        b = sd2[k].to_local() if isinstance(sd2[k], DTensor) else sd2[k]
        if a.shape != b.shape:
            problems.append("%s: local shape %s after load, %s before"
                            % (k, list(b.shape), list(a.shape)))
        elif not torch.equal(a.view(torch.uint8) if a.numel() else a,
                             b.view(torch.uint8) if b.numel() else b):
            problems.append("%s: rank %d's local shard differs after dcp.load" % (k, rank))
    if job.get("optim_dir"):   # last: the step changes the model's weights
        save_optimizer(model, rank, job)
    return {"problems": problems, "boxes": boxes, "read": read, "ranges": reads}


def run_rank(rank, world, port, job):
    """launch_ranks target: one case "load" with problems, boxes, read ranges and rchar."""
    try:
        common.rank_init(rank, world, port, job.get("timeout", 120))
        res = run(rank, job)
    except Exception as e:  # reported, not raised: the orchestrator collects every rank
        res = {"problems": ["rank %d raised %s: %s" % (rank, type(e).__name__, e)]}
    res["case"] = "load"
    res["problems"] = common.cap_problems(res["problems"])
    common.write_rank_results(job["result_dir"], rank, [res])
    common.rank_finish()


if __name__ == "__main__":
    sys.exit("run by test_tp.py")
