"""Interop test: `--format safetensors` output (one file per rank) loaded by real FSDP2 through
torch's HuggingFaceStorageReader, and torch's own HuggingFaceStorageWriter output read back.

Input: a seeded random state dict of OddNet (odd dims: 5- and 3-row tensors leave the last
ranks an empty chunk, a 0-d buffer, one 4 MiB weight) saved as one plain safetensors file.

Conversions (fsdpconv, this process):
  ws4    full-to-dcp --format safetensors --world-size 4
  bf16   the same with --dtype bfloat16
  hsdp   full-to-dcp --format safetensors --mesh replicate=2,shard=2
  plain  reshard --format safetensors --world-size 4 of a plain HF directory
  torch  torch's HuggingFaceStorageWriter(save_distributed=True) of the live FSDP2 state of the
         plain case (saved by its 4 ranks, empty shards included), then `fsdpconv diff torch
         input` (equal), `fsdpconv inspect torch`, and ws3 = `fsdpconv reshard --format
         safetensors --world-size 3 torch`
  dtypes fixtures/full/dtypes.pt less the four dtypes fsdpconv refuses, --world-size 2, loaded
         in one process (no_dist) into byte-inverted targets: bit-exact
Per fsdpconv output: torch's file names and nothing else, no partial directory left, and
`fsdpconv diff OUT input` equal (fsdpconv reads its own output back).

Loads (4 gloo ranks: meshes [4] and [2, 2]; then 3 gloo ranks): meta-init OddNet,
fully_shard, poison every local tensor, dcp.load(sd, storage_reader=
HuggingFaceStorageReader(out)), then every local shard and full_tensor() bit-equal the
expected tensors (bf16: the input cast by torch).  ws4 loads the sharded tensors only (the 0-d
buffer is stored once, so every rank would read its file): each rank's read plan names only
its own file, and with the files evicted from the page cache after the metadata was read,
/proc/self/io read_bytes while reading the data is at least the rank's payload and at most its
own file plus page rounding - any other rank's file is larger than that margin.
At 3 ranks: ws4 (written for 4) and ws3 (the reshard of torch's output) load bit-exact.
Exits 0 when every case passes, 1 otherwise.  ST_OUT_KEEP=1 keeps the temp directory.
"""

import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import warnings  # noqa: E402
warnings.filterwarnings("ignore")

import torch  # noqa: E402

import common  # noqa: E402
import f2d_reference as ref  # noqa: E402

BIG = (1024, 1024)   # the 4 MiB weight: 1 MiB of payload per rank at 4 ranks
PAGE_SLACK = 64 << 10  # page rounding; any other rank's file is > 1 MiB


class OddNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 6)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(13, 7) for _ in range(2)])
        self.norm = torch.nn.LayerNorm(3)
        self.big = torch.nn.Linear(BIG[1], BIG[0], bias=False)
        self.register_buffer("scale", torch.tensor(0.5))


def file_name(rank):
    return "shard-%05d-model-00001-of-00001.safetensors" % (rank + 1)


def make_input(path):
    with torch.device("meta"):
        m = OddNet()
    g = torch.Generator().manual_seed(14)
    sd = {k: torch.randn(v.shape, generator=g, dtype=torch.float32)
          for k, v in m.state_dict().items()}
    from safetensors.torch import save_file
    save_file(sd, path)
    return sd


# ------------------------------------------------------------------------ ranks

class RecordingReader:
    """HuggingFaceStorageReader that remembers which file each read item came from and, with
    measure_io, how many bytes this rank read from disk while reading its data: the files
    are evicted from the page cache after the metadata was read (rank 0 reads every file's
    header, and the device's readahead would pull whole small files in with them)."""

    @staticmethod
    def make(path, measure_io):
        import torch.distributed as dist
        from torch.distributed.checkpoint import HuggingFaceStorageReader

        class R(HuggingFaceStorageReader):
            def read_data(self, plan, planner):
                self.files_read = {}
                for it in plan.items:
                    rel = os.path.basename(self.storage_data[it.storage_index].relative_path)
                    self.files_read.setdefault(it.storage_index.fqn, set()).add(rel)
                if measure_io:
                    dist.barrier()
                    if dist.get_rank() == 0:
                        evict(path)
                    dist.barrier()
                before = read_bytes()
                fut = super().read_data(plan, planner)
                self.data_bytes = read_bytes() - before
                return fut
        return R(path)


def read_bytes():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def run_case(rank, mesh, case):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    dtype = getattr(torch, case["dtype"])
    want = {k: v.to(dtype) for k, v in torch.load(case["expected"]).items()}
    with torch.device("meta"):
        model = OddNet()
    model = model.to(dtype)
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    sd = model.state_dict()
    n_shard, coord = mesh.size(mesh.ndim - 1), mesh.get_coordinate()[-1]
    problems = []
    with torch.no_grad():
        for k, v in sd.items():
            (v.to_local() if isinstance(v, DTensor) else v).copy_(
                ref.poisoned(ref.chunk_rows(want[k], n_shard, coord)
                             if isinstance(v, DTensor) else want[k]))
    if case.get("own_file"):
        # a replicated tensor (the 0-d buffer) is stored once: every rank reads that file
        sd = {k: v for k, v in sd.items() if isinstance(v, DTensor)}
    reader = RecordingReader.make(case["out"], case.get("own_file"))
    dcp.load(sd, storage_reader=reader)
    for k in sorted(sd):
        v = sd[k]
        if isinstance(v, DTensor):
            d = ref.diff(v.to_local(), ref.chunk_rows(want[k], n_shard, coord))
            if d:
                problems.append("%s: rank %d local shard: %s" % (k, rank, d))
            d = ref.diff(v.full_tensor(), want[k])   # collective: same order on every rank
        else:
            d = ref.diff(v, want[k])
        if d:
            problems.append("%s: %s" % (k, d))
    if case.get("own_file"):
        own = file_name(rank)
        for k, files in sorted(reader.files_read.items()):
            if files != {own}:
                problems.append("%s: rank %d read %s, want only %s" % (k, rank, sorted(files), own))
        size = os.path.getsize(os.path.join(case["out"], own))
        payload = BIG[0] * BIG[1] * 4 // mesh.size()
        if not payload <= reader.data_bytes <= size + PAGE_SLACK:
            problems.append("rank %d read_bytes %d while reading its data: want >= its payload "
                            "%d and <= its own file %d + %d" % (rank, reader.data_bytes, payload,
                                                                size, PAGE_SLACK))
    if case.get("torch_save"):
        from torch.distributed.checkpoint import HuggingFaceStorageWriter
        dcp.save(sd, storage_writer=HuggingFaceStorageWriter(case["torch_save"],
                                                             save_distributed=True))
    return problems


def run_rank(rank, world, port, job):
    from torch.distributed.device_mesh import init_device_mesh
    try:
        common.rank_init(rank, world, port, 120)
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: process group setup failed: %s" % (rank, ref.short_exc())]}])
        return
    results = []
    meshes = {}
    for case in job["cases"]:
        shape = tuple(case["mesh"])
        if shape not in meshes:
            names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
            meshes[shape] = init_device_mesh("cpu", shape, mesh_dim_names=names)
        try:
            problems = run_case(rank, meshes[shape], case)
        except Exception:
            problems = ["rank %d raised: %s" % (rank, ref.short_exc())]
        results.append({"case": case["name"], "problems": common.cap_problems(problems)})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def run_ranks(world, cases, tmp):
    job = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "cases": cases}
    return common.launch_ranks(run_rank, world, job, [c["name"] for c in cases], wait_s=300)


# ------------------------------------------------------------------------ this process

def fsdpconv(*args):
    rc, out, err = common.run_fsdpconv(*args)
    return [] if rc == 0 else ["fsdpconv %s: exit %d: %s" % (" ".join(map(str, args)), rc,
                                                            err.strip()[-600:])]


def check_output(out, world, src):
    """torch's file names, nothing else in the directory, no partial left, reads back equal."""
    want = sorted(file_name(r) for r in range(world))
    if not os.path.isdir(out):
        return ["%s was not created" % out]
    got = sorted(os.listdir(out))
    probs = [] if got == want else ["files %s, want %s" % (got, want)]
    parent = os.path.dirname(out)
    probs += ["partial left: %s" % n for n in os.listdir(parent) if ".partial-" in n]
    return probs + fsdpconv("diff", out, src)


def evict(out):
    for n in os.listdir(out):
        fd = os.open(os.path.join(out, n), os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def flipped(t):
    """t with every byte inverted (ref.poisoned has no + 1 for uint16/32/64)."""
    if t.dtype == torch.bool:
        return ~t
    out = t.clone()
    out.view(torch.uint8).bitwise_not_()
    return out


def check_dtypes(tmp):
    """Every dtype fsdpconv lets through loads bit-exact (one process, no_dist)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    src = os.path.join(common.FIXTURES, "full", "dtypes.pt")
    out = os.path.join(tmp, "dtypes")
    refused = "^(complex128|complex32|float8_e8m0fnu|float4_e2m1fn_x2)$"
    p = fsdpconv("full-to-dcp", "--format", "safetensors", "--world-size", "2", "--drop",
                 refused, src, "-o", out)
    if p:
        return p
    want = torch.load(src, weights_only=True)
    sd = {k: flipped(v) for k, v in want.items() if not re.match(refused, k)}
    dcp.load(sd, storage_reader=HuggingFaceStorageReader(out), no_dist=True)
    return ["%s: %s" % (k, d) for k in sorted(sd) for d in [ref.diff(sd[k], want[k])] if d]


def main():
    torch.set_num_threads(1)
    rep = common.Report("safetensors_out")
    tmp = tempfile.mkdtemp(prefix="st_out_")
    try:
        src = os.path.join(tmp, "input.safetensors")
        sd = make_input(src)
        expected = os.path.join(tmp, "expected.pt")
        torch.save(sd, expected)
        outs = {n: os.path.join(tmp, n) for n in ("ws4", "bf16", "hsdp", "torch", "ws3",
                                                   "plain", "hfdir")}
        conv = {
            "ws4": ["--world-size", "4"],
            "bf16": ["--world-size", "4", "--dtype", "bfloat16"],
            "hsdp": ["--mesh", "replicate=2,shard=2"],
        }
        for name, args in conv.items():
            p = fsdpconv("full-to-dcp", "--format", "safetensors", *args, src, "-o", outs[name])
            if name != "bf16":   # bf16 output differs from the fp32 input by design
                p = p or check_output(outs[name], 4, src)
            rep.case("convert %s" % name, p)
        os.mkdir(outs["hfdir"])
        shutil.copy(src, os.path.join(outs["hfdir"], "model.safetensors"))
        p = fsdpconv("reshard", "--format", "safetensors", "--world-size", "4", outs["hfdir"],
                     "-o", outs["plain"])
        rep.case("reshard plain HF directory", p or check_output(outs["plain"], 4, src))
        rep.case("every dtype torch's reader holds, no_dist load", check_dtypes(tmp))
        evict(outs["ws4"])
        cases = [
            {"name": "ws4", "mesh": [4], "out": outs["ws4"], "expected": expected,
             "dtype": "float32", "own_file": True},
            {"name": "bf16", "mesh": [4], "out": outs["bf16"], "expected": expected,
             "dtype": "bfloat16"},
            {"name": "hsdp", "mesh": [2, 2], "out": outs["hsdp"], "expected": expected,
             "dtype": "float32"},
            {"name": "plain", "mesh": [4], "out": outs["plain"], "expected": expected,
             "dtype": "float32", "torch_save": outs["torch"]},
        ]
        for name, probs in run_ranks(4, cases, tmp).items():
            rep.case("load %s at 4 ranks (HuggingFaceStorageReader)" % name, probs)
        p = fsdpconv("diff", outs["torch"], src) + fsdpconv("inspect", outs["torch"])
        rep.case("read torch's HuggingFaceStorageWriter output", p)
        p = fsdpconv("reshard", "--format", "safetensors", "--world-size", "3", outs["torch"],
                     "-o", outs["ws3"])
        rep.case("reshard torch's output to 3 ranks", p or check_output(outs["ws3"], 3, src))
        cases = [
            {"name": "ws4", "mesh": [3], "out": outs["ws4"], "expected": expected,
             "dtype": "float32"},
            {"name": "ws3", "mesh": [3], "out": outs["ws3"], "expected": expected,
             "dtype": "float32"},
        ]
        for name, probs in run_ranks(3, cases, tmp).items():
            rep.case("load %s at 3 ranks" % name, probs)
    finally:
        if os.environ.get("ST_OUT_KEEP") != "1":
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept %s" % tmp)
    return rep.finish()


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print("%.1fs" % (time.time() - t0))
    sys.exit(rc)
