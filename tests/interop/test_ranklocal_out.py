"""--metadata rank-local against real PyTorch (gloo, CPU): loads that plan without collectives.

A tiny Llama-like model (tp_worker.py; uneven rows, and a 1-element parameter that leaves
empty shards) plus a non-tensor value ("step") is converted for 4 ranks on three meshes:
  - 1-D world 4 (FSDP2 Shard(0)), by full-to-dcp --world-size 4 --metadata rank-local;
  - HSDP replicate=2 x shard=2, by reshard --metadata rank-local of a plain 1-D output;
  - dp_shard=2 x tp=2, by full-to-dcp --tp-plan (the README's Llama plan).
For each, on 4 gloo ranks:
  - the output has __0..__3.metadata and no .metadata, and torch's FileSystemReader reads
    each __{r}.metadata: every key, of each tensor exactly the chunk rank r's DTensor holds;
  - the README's load-rank-local recipe (dcp.load(no_dist=True) with a FileSystemReader on
    the rank's own __{rank}.metadata) loads into the parallelized model (other weights) with
    every torch.distributed collective, barrier included, made to raise: each rank's local
    shards and the value are bit-exact against the original model's;
  - a plain dcp.load of the output is bit-exact too (the collectives it still calls, torch
    2.15 planning through gather_object/scatter_object_list, are printed);
  - a plain dcp.load of the global-metadata output under the same guard does call one,
    so the guard catches planning collectives;
and fsdpconv itself reads the output back: inspect, diff against the original, dcp-to-full,
and reshard to world 2, bit-exact.  A safetensors output refuses --metadata rank-local.
"""

import json
import os
import re
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Report, run_fsdpconv  # noqa: E402
import tp_worker  # noqa: E402

CFG = dict(vocab=37, dim=10, hidden=9, kv=1, layers=1, positions=3)
STEP = 7

# label, torch mesh shape and dim names, how the output is made
CASES = [
    ("1-D world 4", (4,), ("dp_shard",), "f2d", ["--world-size", "4"]),
    ("HSDP replicate=2 x shard=2", (2, 2), ("dp_replicate", "dp_shard"), "reshard",
     ["--mesh", "replicate=2,shard=2"]),
    ("dp_shard=2 x tp=2", (2, 2), ("dp_shard", "tp"), "tp", ["--mesh", "shard=2,tp=2"]),
]

# Everything torch.distributed could plan or finish a load with.
COLLECTIVES = ["all_gather_object", "gather_object", "scatter_object_list",
               "broadcast_object_list", "all_reduce", "all_gather", "all_gather_into_tensor",
               "broadcast", "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather",
               "scatter", "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv",
               "barrier", "monitored_barrier"]


def readme_tp_plan():
    with open(os.path.join(common.ROOT, "README.md")) as f:
        m = re.search(r"<!-- tp-plan: llama -->\n```text\n(.*?)```", f.read(), re.S)
    if m is None:
        raise SystemExit("README.md lacks the tp-plan: llama block")
    return m.group(1) + "^pos_embeddings\\.weight$   1  # ColwiseParallel (nn.Embedding)\n"


def parallelize(model, mesh, kind):
    if kind == "tp":
        return tp_worker.parallelize(model, mesh, hsdp=False)
    from torch.distributed.fsdp import fully_shard
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def state(seed, mesh, kind):
    sd = dict(parallelize(tp_worker.build(CFG, seed), mesh, kind).state_dict())
    sd["step"] = STEP if seed == 0 else 0
    return sd


class Guard:
    """Record every torch.distributed collective called while active; with refuse, raise."""

    def __init__(self, refuse):
        import torch.distributed as dist
        self.dist, self.refuse, self.called, self.saved = dist, refuse, [], {}

    def __enter__(self):
        for name in COLLECTIVES:
            if hasattr(self.dist, name):
                self.saved[name] = getattr(self.dist, name)
                setattr(self.dist, name, self._wrap(name, self.saved[name]))
        return self

    def _wrap(self, name, real):
        def wrapped(*a, **k):
            self.called.append(name)
            if self.refuse:
                raise RuntimeError("collective %s called" % name)
            return real(*a, **k)
        return wrapped

    def __exit__(self, *exc):
        for name, f in self.saved.items():
            setattr(self.dist, name, f)


def readme_loader():
    """load_rank_local from the README's load-rank-local recipe, run as printed."""
    code = common.readme_recipes("python").get("load-rank-local")
    if code is None:
        raise SystemExit("README.md lacks the load-rank-local recipe")
    ns = {}
    exec(compile(code, "README.md:load-rank-local", "exec"), ns)
    return ns["load_rank_local"]


def local(v):
    from torch.distributed.tensor import DTensor
    t = v.to_local() if isinstance(v, DTensor) else v
    return t.view(torch.uint8) if t.numel() else t


def compare(want, got, rank, how):
    problems = []
    for k, v in want.items():
        if k == "step":
            if got[k] != STEP:
                problems.append("%s: step %r after load, want %d" % (how, got[k], STEP))
        elif local(got[k]).shape != local(v).shape or not torch.equal(local(got[k]), local(v)):
            problems.append("%s: %s: rank %d's local shard differs" % (how, k, rank))
    return problems


def guarded_load(sd, refuse, problems, how, **kwargs):
    """dcp.load(sd, **kwargs) under a Guard; the collectives it called."""
    import torch.distributed.checkpoint as dcp
    with Guard(refuse) as g:
        try:
            dcp.load(sd, **kwargs)
        except BaseException as e:   # torch's CheckpointException is a BaseException
            if problems is not None:
                problems.append("%s raised %s: %s" % (how, type(e).__name__, str(e)[:300]))
    return g.called


def run(rank, job):
    import logging
    # dcp.load logs the missing .metadata with a traceback, on the root logger, on every
    # fallback to __{rank}.metadata: expected here (this is a rank's own process).
    logging.getLogger().setLevel(logging.ERROR)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    mesh = init_device_mesh("cpu", tuple(job["shape"]), mesh_dim_names=tuple(job["names"]))
    kind = job["kind"]
    want = state(0, mesh, kind)
    boxes = {k: [list(c.offsets), list(c.sizes)] for k, v in want.items()
             if isinstance(v, DTensor) for c in v.__create_chunk_list__()}
    problems = []
    # The control: dcp.load of the global-metadata output gathers plans; the guard sees it.
    if not guarded_load(state(2, mesh, kind), True, None, "", checkpoint_id=job["global"]):
        problems.append("the guard saw no collective in dcp.load of the global output")
    # Collectives off: the README's recipe (no_dist, each rank's own __{rank}.metadata).
    how = "README's load_rank_local"
    got = state(1, mesh, kind)
    with Guard(True) as g:
        try:
            readme_loader()(got, job["out"])
        except BaseException as e:
            problems.append("%s raised %s: %s" % (how, type(e).__name__, str(e)[:300]))
    called = g.called
    if called:
        problems.append("%s called collectives %s" % (how, sorted(set(called))))
    problems += compare(want, got, rank, how)
    # Plain dcp.load finds __{rank}.metadata by itself (and still plans collectively).
    got = state(3, mesh, kind)
    default_calls = guarded_load(got, False, problems, "dcp.load", checkpoint_id=job["out"])
    problems += compare(want, got, rank, "dcp.load")
    return {"problems": problems, "boxes": boxes, "default_calls": sorted(set(default_calls))}


def run_rank(rank, world, port, job):
    try:
        common.rank_init(rank, world, port, 60)
        res = run(rank, job)
    except Exception as e:  # reported, not raised: the orchestrator collects every rank
        res = {"problems": ["rank %d raised %s: %s" % (rank, type(e).__name__, e)]}
    res["case"] = "load"
    res["problems"] = common.cap_problems(res["problems"])
    common.write_rank_results(job["result_dir"], rank, [res])
    common.rank_finish()


def check_metadata_files(out, ranks):
    """__0..__3.metadata, no .metadata; each lists every key and only its rank's boxes."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    names = sorted(n for n in os.listdir(out) if n.endswith(".metadata"))
    want = ["__%d.metadata" % r for r in range(len(ranks))]
    if names != want:
        return ["metadata files %s, want %s" % (names, want)]
    problems = []
    for r, res in enumerate(ranks):
        md = FileSystemReader(out).read_metadata(rank=r)
        for k, (off, size) in res.get("boxes", {}).items():
            m = md.state_dict_metadata.get(k)
            got = [[list(c.offsets), list(c.sizes)] for c in m.chunks] \
                if isinstance(m, TensorStorageMetadata) else None
            if got != [[off, size]]:
                problems.append("__%d.metadata %s: chunks %s, rank %d holds %s"
                                % (r, k, got, r, [off, size]))
        if "step" not in md.state_dict_metadata:
            problems.append("__%d.metadata lacks the value 'step'" % r)
    return problems


def check_fsdpconv_reads(out, full, tmp):
    export, back = os.path.join(tmp, "export.pt"), os.path.join(tmp, "back")
    problems = []
    for args in [("inspect", out), ("diff", full, out), ("dcp-to-full", "-o", export, out),
                 ("diff", full, export), ("reshard", "--world-size", "2", "-o", back, out),
                 ("diff", full, back)]:
        rc, o, err = run_fsdpconv(*args)
        if rc != 0:
            problems.append("%s exit %d: %s%s" % (" ".join(args), rc, o[-400:], err))
            break
    return problems


def run_case(rep, tmp, label, shape, names, kind, mesh_args):
    d = tempfile.mkdtemp(dir=tmp)
    full = os.path.join(d, "full.pt")
    sd = dict(tp_worker.build(CFG, 0).state_dict())
    sd["step"] = STEP
    torch.save(sd, full)
    extra = []
    if kind == "tp":
        plan = os.path.join(d, "plan.txt")
        with open(plan, "w") as f:
            f.write(readme_tp_plan())
        extra = ["--tp-plan", plan]
    glob, out = os.path.join(d, "global"), os.path.join(d, "ranklocal")
    if kind == "reshard":   # the 1-D global output, resharded onto the HSDP mesh
        steps = [["full-to-dcp", "--world-size", "4", "-o", glob, full],
                 ["reshard"] + mesh_args + ["--metadata", "rank-local", "-o", out, glob]]
        glob = os.path.join(d, "global_hsdp")
        steps.append(["full-to-dcp"] + mesh_args + ["-o", glob, full])
    else:
        steps = [["full-to-dcp"] + mesh_args + extra + ["-o", glob, full],
                 ["full-to-dcp"] + mesh_args + extra + ["--metadata", "rank-local", "-o",
                                                        out, full]]
    for args in steps:
        rc, _, err = run_fsdpconv(*args)
        if not rep.case("%s: %s" % (label, " ".join(args[:3])),
                        ["exit %d: %s" % (rc, err)] if rc else []):
            return
    job = {"shape": list(shape), "names": list(names), "kind": kind, "global": glob,
           "out": out, "result_dir": d}
    world = 1
    for n in shape:
        world *= n
    problems = common.launch_ranks(run_rank, world, job, ["load"], 120)["load"]
    ranks = []
    for r in range(world):
        with open(os.path.join(d, "rank%d.json" % r)) as f:
            ranks.append(json.load(f)[0])
    print("     plain dcp.load of it called %s" % sorted({c for res in ranks
                                                     for c in res.get("default_calls", [])}))
    rep.case("%s: README's rank-local load on every rank: no collective, bit-exact; plain "
             "dcp.load bit-exact" % label, problems)
    rep.case("%s: one __{r}.metadata per rank, each with that rank's boxes" % label,
             check_metadata_files(out, ranks))
    rep.case("%s: fsdpconv inspect, diff, dcp-to-full, reshard read it bit-exactly" % label,
             check_fsdpconv_reads(out, full, d))


def check_safetensors_refused(rep, tmp):
    full = os.path.join(tmp, "small.pt")
    torch.save({"w": torch.ones(4, 2)}, full)
    out = os.path.join(tmp, "st")
    rc, _, err = run_fsdpconv("full-to-dcp", "--world-size", "2", "--format", "safetensors",
                              "--metadata", "rank-local", "-o", out, full)
    lines = [ln for ln in err.splitlines() if ln]
    bad = rc == 0 or len(lines) != 1 or "--metadata" not in lines[0] or os.path.exists(out)
    rep.case("--format safetensors --metadata rank-local is refused, nothing written",
             ["exit %d, stderr %r" % (rc, err)] if bad else [])


def main():
    rep = Report("test_ranklocal_out")
    tmp = tempfile.mkdtemp(prefix="fsdpconv_ranklocal_")
    try:
        for case in CASES:
            run_case(rep, tmp, *case)
        check_safetensors_refused(rep, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
