"""Load side: N gloo processes (CPU) dcp.load a checkpoint directory into FSDP2-style DTensors.

usage: python bench_load.py --ckpt DIR --world N --name NAME --results FILE [--cache auto|cold|warm]
                            [--timeout S] [--reader dcp|hf|tcp] [--prefault] [--save-hf OUT]
                            [--save-tcp OUT] [--tcp-layout pt|st]

--reader dcp (default): a DCP directory through torch's default FileSystemReader; --reader hf:
a safetensors directory (one file per rank with DCP_SHARDING_INFO, or a plain Hugging Face
directory) through torch's HuggingFaceStorageReader (metadata and data); --reader tcp: a
torch_checkpointing directory (item "model": fsdpconv's --format torch-checkpointing or the
package's own save) through the package's CheckpointManager.load with DefaultResharder, the
tensors listed by its metadata.pkl, on a mesh named ("dp_shard",) as fsdpconv records it; with
--tcp-layout pt (default) the load takes the package's one-file-per-rank path when the metadata
matches (fsdpconv's --mesh-device cpu output, the package's own save), st reshards every load.

The orchestrator drops the page cache (cold; or, without root, runs the whole job once unmeasured
first: warm), then starts N copies of this script as workers (env RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT; init_process_group("gloo")). Each worker reads the checkpoint's .metadata, and for
every tensor builds a local torch.empty shard -- rows torch.chunk(global, N)[rank] for Shard(0),
the whole value for a 0-d tensor (Replicate()) -- wrapped with DTensor.from_local(local, mesh,
placements, shape=global, stride=contiguous) on a 1-D CPU mesh; then a full gc.collect() (so no
rank starts the timed load with a pending collection), barrier, dcp.load(state, checkpoint_id=DIR),
barrier. --prefault writes zeros into every local shard before the barrier, taking the first touch
of the target memory (page faults and zeroing, the same for every format) out of the timed load:
information only, it isolates what the checkpoint format costs. Around dcp.load it records wall
seconds and the deltas of /proc/self/io: rchar (bytes returned by read syscalls, page cache or
not), read_bytes (bytes this process made the block layer fetch: meaningful only with a cold cache,
and charged to the first reader of a shared page) and syscr. Afterwards each rank sums every local
shard's bits (elements viewed as same-width integers, int64 sum: exact, order-independent) and rank
0 gathers them into one digest, so two loads of the same values give the same digest. --save-hf
OUT then saves the loaded state with torch's own HuggingFaceStorageWriter(OUT,
save_distributed=True) (untimed): the same model and sharding as PyTorch writes it, for comparison
with fsdpconv's --format safetensors; --save-tcp OUT likewise saves it with the
torch-checkpointing package (CheckpointManager in the --tcp-layout layout; its CUDA-only
metadata all-gather replaced by all_gather_object, tests/interop/tcp_common.py).

One JSON line goes to FILE: total DCP bytes (all files) and, per rank, wall_s, rchar, read_bytes,
syscr, cpu_s (user + sys seconds of the process around dcp.load, all threads; also user_s and
sys_s apart), local_bytes (bytes of its shards) and peak RSS, plus the digest. total_bytes counts
the files the reader reads (hf: *.safetensors only).  Exits 1 on any failure.
"""

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import common  # noqa: E402


def proc_io():
    out = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            out[k.strip()] = int(v)
    return out


def bits_sum(t):
    import torch
    t = t.contiguous()
    if t.numel() == 0:
        return 0
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return int(t.view(view).sum(dtype=torch.int64))


def cpu_seconds():
    """(user, sys) seconds of this process so far, all threads."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def tcp_tensors(ckpt):
    """{key: (shape, dtype)} of item "model" of a torch_checkpointing metadata.pkl."""
    import pickle

    import torch
    with open(os.path.join(ckpt, "metadata.pkl"), "rb") as f:
        md = pickle.load(f)  # a checkpoint this benchmark just wrote
    out = {}
    for path, groups in md["metadata"]["model"]["nested_path_to_metadata"].items():
        data = groups[0]["sharding_metadata"]["data"]
        out[".".join(str(p) for p in json.loads(path))] = (
            tuple(data["global_shape"]), getattr(torch, data["dtype"].split(".", 1)[1]))
    return out


def dcp_tensors(ckpt, reader):
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    md = make_reader(ckpt, reader).read_metadata()
    return {k: (tuple(m.size), m.properties.dtype) for k, m in md.state_dict_metadata.items()
            if isinstance(m, TensorStorageMetadata)}


def make_reader(ckpt, reader):
    from torch.distributed.checkpoint import FileSystemReader, HuggingFaceStorageReader
    return HuggingFaceStorageReader(ckpt) if reader == "hf" else FileSystemReader(ckpt)


def worker(ckpt, reader, out_path, prefault, save_hf, save_tcp, tcp_layout):
    import gc

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    names = ("dp_shard",) if reader == "tcp" or save_tcp else None  # fsdpconv's default name
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=names)
    tensors = tcp_tensors(ckpt) if reader == "tcp" else dcp_tensors(ckpt, reader)
    state = {}
    local_bytes = 0
    for key, (shape, dtype) in tensors.items():
        stride = []
        acc = 1
        for d in reversed(shape):
            stride.append(acc)
            acc *= d
        stride = tuple(reversed(stride))
        if len(shape) == 0:
            local = torch.empty((), dtype=dtype)
            placements = [Replicate()]
        else:
            n = shape[0]
            c = math.ceil(n / world) if n else 0
            start = min(rank * c, n)
            end = min(start + c, n)
            local = torch.empty((end - start,) + shape[1:], dtype=dtype)
            placements = [Shard(0)]
        local_bytes += local.numel() * local.element_size()
        state[key] = DTensor.from_local(local, mesh, placements, run_check=False,
                                        shape=torch.Size(shape), stride=stride)
    if prefault:
        for t in state.values():
            t.to_local().zero_()
    gc.collect()
    dist.barrier()
    io0 = proc_io()
    c0 = cpu_seconds()
    if reader == "tcp":
        import tcp_common
        mgr = tcp_common.manager(tcp_layout)
        t0 = time.perf_counter()
        mgr.load(ckpt, into={"model": state})
        t1 = time.perf_counter()
        mgr.close()
    else:
        t0 = time.perf_counter()
        dcp.load(state, storage_reader=make_reader(ckpt, reader))
        t1 = time.perf_counter()
    c1 = cpu_seconds()
    io1 = proc_io()
    dist.barrier()
    sums = torch.tensor([bits_sum(state[k].to_local()) for k in sorted(state)], dtype=torch.int64)
    gathered = [torch.empty_like(sums) for _ in range(world)]
    dist.all_gather(gathered, sums)
    digest = hashlib.sha256(b"".join(g.numpy().tobytes() for g in gathered)).hexdigest()[:16]
    if save_hf:
        from torch.distributed.checkpoint import HuggingFaceStorageWriter
        dcp.save(state, storage_writer=HuggingFaceStorageWriter(save_hf, save_distributed=True))
    if save_tcp:
        import tcp_common
        tcp_common.patch_metadata_gather()
        mgr = tcp_common.manager(tcp_layout)
        mgr.save(save_tcp, {"model": state})
        mgr.close()
    user, sys_ = c1[0] - c0[0], c1[1] - c0[1]
    res = {
        "rank": rank, "wall_s": t1 - t0, "tensors": len(state), "local_bytes": local_bytes,
        "rchar": io1["rchar"] - io0["rchar"], "read_bytes": io1["read_bytes"] - io0["read_bytes"],
        "syscr": io1["syscr"] - io0["syscr"], "cpu_s": user + sys_, "user_s": user,
        "sys_s": sys_, "digest": digest,
    }
    with open(out_path, "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()
    return 0


def run_job(ckpt, reader, world, timeout, tmp, extra):
    port = common.free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        log = open(os.path.join(tmp, "rank%d.log" % r), "wb")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", ckpt,
                              reader, os.path.join(tmp, "rank%d.json" % r)] + extra,
                             env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        procs.append(p)
    deadline = time.monotonic() + timeout
    rss = {}
    failed = []
    pending = {p.pid: r for r, p in enumerate(procs)}
    while pending:
        for pid, r in list(pending.items()):
            got, status, ru = os.wait4(pid, os.WNOHANG)
            if got == 0:
                continue
            del pending[pid]
            rss[r] = ru.ru_maxrss
            if os.waitstatus_to_exitcode(status) != 0:
                failed.append(r)
        if pending and time.monotonic() > deadline:
            for pid in pending:
                os.kill(pid, 9)
            for pid in pending:
                os.waitpid(pid, 0)
            failed += list(pending.values())
            pending = {}
        time.sleep(0.05)
    if failed:
        for r in sorted(set(failed)):
            with open(os.path.join(tmp, "rank%d.log" % r), "rb") as f:
                tail = f.read().decode("utf-8", "replace").splitlines()[-15:]
            print("bench_load: rank %d failed:\n%s" % (r, "\n".join(tail)), file=sys.stderr)
        return None
    ranks = []
    for r in range(world):
        with open(os.path.join(tmp, "rank%d.json" % r)) as f:
            res = json.load(f)
        res["maxrss_kib"] = rss[r]
        ranks.append(res)
    return ranks


def main():
    if len(sys.argv) == 9 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1", sys.argv[6],
                      sys.argv[7], sys.argv[8])
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--name", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--cache", choices=("auto", "cold", "warm"), default="auto")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--reader", choices=("dcp", "hf", "tcp"), default="dcp")
    ap.add_argument("--prefault", action="store_true")
    ap.add_argument("--save-hf", default="")
    ap.add_argument("--save-tcp", default="")
    ap.add_argument("--tcp-layout", choices=("pt", "st"), default="pt")
    args = ap.parse_args()
    ckpt = os.path.abspath(args.ckpt)
    extra = ["1" if args.prefault else "0",
             os.path.abspath(args.save_hf) if args.save_hf else "",
             os.path.abspath(args.save_tcp) if args.save_tcp else "", args.tcp_layout]
    total = 0
    data = 0
    files = 0
    for name in os.listdir(ckpt):
        if args.reader == "hf" and not name.endswith(".safetensors"):
            continue
        size = os.path.getsize(os.path.join(ckpt, name))
        total += size
        files += 1
        if name.endswith(".distcp"):
            data += size
    mode = common.cache_mode(args.cache)
    if mode is None:
        print("bench_load: cannot drop the page cache", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench_load.") as tmp:
        if mode == "warm" and run_job(ckpt, args.reader, args.world, args.timeout, tmp,
                                      extra[:1] + ["", ""]) is None:
            return 1
        t0 = time.perf_counter()
        ranks = run_job(ckpt, args.reader, args.world, args.timeout, tmp, extra)
        job_wall = time.perf_counter() - t0
    if ranks is None:
        return 1
    digests = {r["digest"] for r in ranks}
    rec = {
        "name": args.name, "kind": "load", "reader": args.reader, "cache": mode,
        "world": args.world, "ckpt": ckpt, "prefault": args.prefault,
        "total_bytes": total, "distcp_bytes": data, "files": files, "job_wall_s": job_wall,
        "digest": digests.pop() if len(digests) == 1 else "MISMATCH", "ranks": ranks,
    }
    with open(args.results, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print("  %-28s load max %.3f s/rank, cpu %.2f s (user %.2f, sys %.2f), rchar/total %s "
          "(%s cache, digest %s)"
          % (args.name, max(r["wall_s"] for r in ranks), sum(r["cpu_s"] for r in ranks),
             sum(r["user_s"] for r in ranks), sum(r["sys_s"] for r in ranks),
             " ".join("%.3f" % (r["rchar"] / total) for r in ranks), mode, rec["digest"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
