"""Load side on a dp=2 x tp=2 mesh: fsdpconv's TP-layout DCP against a plain --world-size 4 DCP.

usage: python bench_tp_load.py FSDPCONV DIR [--rounds N]

A ~1 GiB fp32 Llama-like model (tests/interop/tp_worker.py's TinyLM: vocab 32000, dim 2048,
hidden 5632, 3 layers) is saved once with torch.save in DIR, then converted twice by fsdpconv:
--mesh shard=2,tp=2 with torchtitan's plan (test_tp.py's TP_PLAN), and --world-size 4. Each round
loads both, interleaved, into the same parallelized model (parallelize_module + fully_shard on a
(dp_shard=2, tp=2) gloo CPU mesh, 4 processes), the page cache dropped before each load when
possible (root), else warm (said in the output). Every rank times dcp.load between barriers and
records /proc/self/io rchar (bytes its read syscalls returned) and read_bytes (bytes it made the
disk fetch; cold cache only). The two loads must give the same bits on every rank (digest).
Prints, per layout, the best-of-N slowest-rank wall time and each rank's rchar, and one JSON
line per round to DIR/tp_load.jsonl.
"""

import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "interop"))
import common  # noqa: E402
from bench_load import bits_sum, proc_io  # noqa: E402

# BENCH_TP_CFG='{"vocab": 64, ...}' shrinks the model for a smoke run.
CFG = json.loads(os.environ.get("BENCH_TP_CFG", "null")) or dict(
    vocab=32000, dim=2048, hidden=5632, kv=512, layers=3, positions=2048)
MESH = (2, 2)


def worker(ckpt, out_path):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    import tp_worker

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", MESH, mesh_dim_names=("dp_shard", "tp"))
    with torch.device("meta"):
        model = tp_worker.TinyLM(**CFG)
    tp_worker.parallelize(model, mesh, False)
    model.to_empty(device="cpu")
    sd = model.state_dict()
    dist.barrier()
    io0 = proc_io()
    t0 = time.perf_counter()
    dcp.load(sd, checkpoint_id=ckpt)
    t1 = time.perf_counter()
    io1 = proc_io()
    dist.barrier()
    local = [v.to_local() if isinstance(v, DTensor) else v for _, v in sorted(sd.items())]
    digest = hashlib.sha256(str([bits_sum(t) for t in local]).encode()).hexdigest()[:16]
    res = {"rank": dist.get_rank(), "wall_s": t1 - t0, "rchar": io1["rchar"] - io0["rchar"],
           "read_bytes": io1["read_bytes"] - io0["read_bytes"], "digest": digest,
           "local_bytes": sum(t.numel() * t.element_size() for t in local)}
    with open(out_path, "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()
    return 0


def load(ckpt, tmp):
    world = MESH[0] * MESH[1]
    port = common.free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                       ckpt, os.path.join(tmp, "rank%d.json" % r)], env=env))
    if any(p.wait(timeout=900) != 0 for p in procs):
        raise RuntimeError("a load worker failed (%s)" % ckpt)
    out = []
    for r in range(world):
        with open(os.path.join(tmp, "rank%d.json" % r)) as f:
            out.append(json.load(f))
    return out


def prepare(fsdpconv, d):
    import torch
    import test_tp
    import tp_worker
    full = os.path.join(d, "model.pt")
    if not os.path.exists(full):
        with torch.device("meta"):
            shapes = {k: v.shape for k, v in tp_worker.TinyLM(**CFG).state_dict().items()}
        g = torch.Generator().manual_seed(0)
        torch.save({k: torch.randn(s, generator=g) for k, s in shapes.items()}, full + ".tmp")
        os.replace(full + ".tmp", full)
    plan = os.path.join(d, "llama.tp")
    with open(plan, "w") as f:
        f.write(test_tp.TP_PLAN)
    outs = {"tp": os.path.join(d, "dcp_tp"), "flat": os.path.join(d, "dcp_ws4")}
    args = {"tp": ["--mesh", "shard=%d,tp=%d" % MESH, "--tp-plan", plan],
            "flat": ["--world-size", str(MESH[0] * MESH[1])]}
    for name, out in outs.items():
        subprocess.run([fsdpconv, "full-to-dcp", "--force", "-q", "-o", out, full] + args[name],
                       check=True)
    return full, outs


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3])
    if len(sys.argv) < 3:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    fsdpconv, d = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--rounds" else 3
    os.makedirs(d, exist_ok=True)
    full, outs = prepare(fsdpconv, d)
    gib = os.path.getsize(full) / 2**30
    best, seen = {}, {}
    cache = "cold" if common.drop_caches() else "warm"
    with open(os.path.join(d, "tp_load.jsonl"), "a") as log:
        for i in range(rounds + (cache == "warm")):
            for name in ("tp", "flat"):
                if cache == "cold":
                    common.drop_caches()
                ranks = load(outs[name], d)
                if cache == "warm" and i == 0:
                    continue   # the unmeasured warm-up round
                slow = max(r["wall_s"] for r in ranks)
                log.write(json.dumps({"layout": name, "round": i, "cache": cache,
                                      "ranks": ranks}) + "\n")
                if name not in best or slow < best[name][0]:
                    best[name] = (slow, ranks)
                seen.setdefault(name, set()).update(r["digest"] + str(r["rank"]) for r in ranks)
    if seen["tp"] != seen["flat"]:
        print("bench_tp_load: the two loads gave different bits", file=sys.stderr)
        return 1
    print("model %.3f GiB fp32, dp=2 x tp=2 (4 gloo CPU processes), page cache %s, best of %d"
          % (gib, cache, rounds))
    for name, label in (("tp", "fsdpconv --mesh shard=2,tp=2 --tp-plan"),
                        ("flat", "fsdpconv --world-size 4")):
        slow, ranks = best[name]
        print("  %-40s slowest rank %.3f s; rchar per rank MiB %s; own boxes MiB %.1f"
              % (label, slow, [round(r["rchar"] / 2**20, 1) for r in ranks],
                 ranks[0]["local_bytes"] / 2**20))
    print("  ratio flat/tp slowest-rank wall %.2fx" % (best["flat"][0] / best["tp"][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
