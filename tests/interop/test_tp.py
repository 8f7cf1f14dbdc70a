"""Tensor-parallel meshes against real PyTorch (gloo, CPU).

For dp=2 x tp=2, dp=3 x tp=2 and replicate=2 x shard=2 x tp=2, a tiny Llama-like model
(tp_worker.py) is parallelized with parallelize_module + fully_shard, and
  - fsdpconv full-to-dcp --mesh ... --tp-plan gives the chunk list torch's own dcp.save
    writes for that model (keys, offsets, sizes), each chunk stored in a file of a rank
    that holds it;
  - dcp.load of fsdpconv's checkpoint into the parallelized model is bit-exact on every
    rank, and each rank reads only the items of its own boxes: its own file, plus the one
    file holding each tp-replicated box it shares (stored once, as torch stores it); every
    byte range dcp.load asks of a .distcp file lies in such an item (/proc/self/io rchar,
    which includes buffered read-ahead, is printed);
  - torch's TP checkpoint reads bit-exactly (fsdpconv diff against the full state dict),
    exports with dcp-to-full, and reshards to FSDP-only and back to the same chunk list,
    bit-exact; on dp=2 x tp=2
    also with AdamW state (get_state_dict), whose keys take their parameters' placements;
  - layouts torch 2.15 cannot round-trip (vocab 37 or 7 rows on dp=3 x tp=2; the boxes
    compute_local_shape_and_global_offset records are in tests/unit/test_mesh.c) are
    refused with exit 2 naming the key.
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


def readme_tp_plan():
    """The README's torchtitan Llama plan, exactly as printed (rules with \\d+ and (?:...))."""
    with open(os.path.join(common.ROOT, "README.md")) as f:
        m = re.search(r"<!-- tp-plan: llama -->\n```text\n(.*?)```", f.read(), re.S)
    if m is None:
        raise SystemExit("README.md lacks the tp-plan: llama block")
    return m.group(1)


# The README's plan, plus the one module torchtitan's Llama lacks and tp_worker's model has.
TP_PLAN = readme_tp_plan() + "^pos_embeddings\\.weight$   1  # ColwiseParallel (nn.Embedding)\n"

CASES = [
    # mesh (torch order), --mesh, model: uneven vocab / rows / cols, empty shards
    ((2, 2), "shard=2,tp=2", dict(vocab=37, dim=10, hidden=9, kv=1, layers=1, positions=3)),
    ((3, 2), "shard=3,tp=2", dict(vocab=38, dim=10, hidden=9, kv=1, layers=1, positions=5)),
    ((2, 2, 2), "replicate=2,shard=2,tp=2",
     dict(vocab=13, dim=6, hidden=5, kv=1, layers=1, positions=3)),
]


def run_ranks(world, job, timeout=240):
    """Every rank's result record and the problems of all ranks."""
    problems = common.launch_ranks(tp_worker.run_rank, world, job, ["load"], timeout)["load"]
    out = []
    for r in range(world):
        path = os.path.join(job["result_dir"], "rank%d.json" % r)
        rec = {}
        if os.path.exists(path):
            with open(path) as f:
                rec = json.load(f)[0]
        out.append(rec)
    return out, problems


def metadata(path):
    import torch.distributed.checkpoint as dcp
    return dcp.FileSystemReader(path).read_metadata()


def chunk_lists(md):
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    return {k: sorted((tuple(c.offsets), tuple(c.sizes)) for c in v.chunks)
            for k, v in md.state_dict_metadata.items()
            if isinstance(v, TensorStorageMetadata)}


def compare_chunks(ours, theirs):
    a, b = chunk_lists(ours), chunk_lists(theirs)
    out = []
    if set(a) != set(b):
        out.append("keys: only ours %s, only torch %s" % (sorted(set(a) - set(b)),
                                                           sorted(set(b) - set(a))))
    for k in sorted(set(a) & set(b)):
        if a[k] != b[k]:
            out.append("%s: ours %s, torch's dcp.save %s" % (k, a[k], b[k]))
    return out


def check_storage(md, ranks):
    """Each chunk in a file of a rank holding it; each rank reads only items of its boxes."""
    out = []
    holders = {}
    for r, res in enumerate(ranks):
        for k, (off, size, _) in res.get("boxes", {}).items():
            holders.setdefault((k, tuple(off)), set()).add(r)
    mine = [dict() for _ in ranks]   # rank -> file -> [(offset, length)] of items it holds
    held_bytes = [0] * len(ranks)
    for idx, info in md.storage_data.items():
        owner = int(info.relative_path.split("_")[2])
        hs = holders.get((idx.fqn, tuple(idx.offset)), set())
        if owner not in hs:
            out.append("%s %s stored in %s, held by ranks %s"
                       % (idx.fqn, list(idx.offset), info.relative_path, sorted(hs)))
        for r in hs:
            mine[r].setdefault(info.relative_path, []).append((info.offset, info.length))
            held_bytes[r] += info.length
    asked = [0] * len(ranks)
    for r, res in enumerate(ranks):
        for name, ranges in res.get("ranges", {}).items():
            items = mine[r].get(name, [])
            for pos, n in ranges:
                asked[r] += n
                if n and not any(o <= pos and pos + n <= o + ln for o, ln in items):
                    out.append("rank %d read [%d, +%d) of %s, outside the items of its boxes"
                               % (r, pos, n, name))
    print("     per rank: files read %s; bytes of its boxes %s; rchar %s"
          % ([sorted(res.get("ranges", {})) for res in ranks], held_bytes,
             [res.get("read") for res in ranks]))
    return out


def placements_seen(ranks):
    return sorted({b[2] for res in ranks for b in res.get("boxes", {}).values()})


def check_optimizer(rep, label, job, world):
    """torch's TP save of model + AdamW state: reads bit-exactly, reshards to FSDP-only and back.

    Its keys are get_state_dict's ("model.<fqn>", "optim.state.<fqn>.exp_avg"), so the plan is
    the README's anchored at "model." as the README says; state follows its parameter's key.
    """
    d = job["result_dir"]
    plan = os.path.join(d, "plan_model.txt")
    with open(plan, "w") as f:
        f.write(TP_PLAN.replace("^", "^model\\."))
    flat, back = os.path.join(d, "optim_flat"), os.path.join(d, "optim_back")
    problems = []
    for args in [("diff", job["optim_full"], job["optim_dir"]),
                 ("reshard", "--world-size", str(world), "-o", flat, job["optim_dir"]),
                 ("reshard", "--mesh", label.split()[1], "--tp-plan", plan, "-o", back, flat),
                 ("diff", back, job["optim_dir"])]:
        rc, out, err = run_fsdpconv(*args)
        if rc != 0:
            problems.append("%s exit %d: %s%s" % (" ".join(args[:3]), rc, out[-600:], err))
            break
    if not problems:
        problems = compare_chunks(metadata(back), metadata(job["optim_dir"]))
    rep.case(label + ": torch's TP model + AdamW save reads bit-exactly, reshards and back "
             "to torch's chunk list", problems)


def run_case(rep, tmp, mesh, mesh_arg, cfg, with_optim):
    label = "mesh %s" % mesh_arg
    world = 1
    for d in mesh:
        world *= d
    d = tempfile.mkdtemp(dir=tmp)
    full = os.path.join(d, "full.pt")
    torch.save(tp_worker.build(cfg, 0).state_dict(), full)
    plan = os.path.join(d, "plan.txt")
    with open(plan, "w") as f:
        f.write(TP_PLAN)
    ours = os.path.join(d, "ours")
    rc, _, err = run_fsdpconv("full-to-dcp", "--mesh", mesh_arg, "--tp-plan", plan, "-o", ours,
                              full)
    if not rep.case(label + ": full-to-dcp", ["exit %d: %s" % (rc, err)] if rc else []):
        return
    job = {"mesh": list(mesh), "cfg": cfg, "ours": ours, "torch_dir": os.path.join(d, "torch"),
           "result_dir": d}
    if with_optim:
        job["optim_dir"], job["optim_full"] = os.path.join(d, "optim"), os.path.join(d, "optim.pt")
    ranks, problems = run_ranks(world, job)
    rep.case(label + ": dcp.load bit-exact on every rank", problems)
    if problems:
        return
    print("     placements torch used: %s" % "; ".join(placements_seen(ranks)))
    md_ours, md_torch = metadata(ours), metadata(job["torch_dir"])
    rep.case(label + ": chunk list equals torch's dcp.save", compare_chunks(md_ours, md_torch))
    rep.case(label + ": chunks in holders' files, ranks read only their boxes",
             check_storage(md_ours, ranks))
    rc, out, err = run_fsdpconv("diff", full, job["torch_dir"])
    rep.case(label + ": torch's TP checkpoint reads bit-exactly",
             [] if rc == 0 else ["diff exit %d: %s%s" % (rc, out[-800:], err)])
    flat, back = os.path.join(d, "flat"), os.path.join(d, "back")
    export = os.path.join(d, "export.safetensors")
    steps = [("reshard", "--world-size", str(world), "-o", flat, job["torch_dir"]),
             ("reshard", "--mesh", mesh_arg, "--tp-plan", plan, "-o", back, flat),
             ("diff", back, job["torch_dir"]), ("diff", flat, full),
             ("dcp-to-full", "-o", export, job["torch_dir"]), ("diff", export, full)]
    problems = []
    for args in steps:
        rc, out, err = run_fsdpconv(*args)
        if rc != 0:
            problems.append("%s exit %d: %s%s" % (" ".join(args[:3]), rc, out[-400:], err))
            break
    if not problems:
        problems = compare_chunks(metadata(back), md_torch)
    rep.case(label + ": torch's TP checkpoint -> FSDP-only -> back, and exported, bit-exact",
             problems)
    if with_optim:
        check_optimizer(rep, label, job, world)


def check_refusals(rep, tmp):
    """dp=3 x tp=2 with 37 or 7 rows on a tp-sharded dim 0: fsdpconv refuses, exit 2."""
    d = tempfile.mkdtemp(dir=tmp)
    full = os.path.join(d, "emb.pt")
    torch.save({"tok_embeddings.weight": torch.randn(37, 4), "rows7": torch.randn(7, 3)}, full)
    problems = []
    for key in ("tok_embeddings.weight", "rows7"):
        rc, _, err = run_fsdpconv("full-to-dcp", "--mesh", "shard=3,tp=2", "--tp",
                                  "^%s$=0" % key.replace(".", r"\."), "--dry-run", full)
        lines = [ln for ln in err.splitlines() if ln]
        if rc != 2 or len(lines) != 1 or key not in lines[0] or "round-trip" not in lines[0]:
            problems.append("%s: exit %d, stderr %r" % (key, rc, err))
    rep.case("dp=3 x tp=2: layouts torch cannot round-trip are refused", problems)


def main():
    rep = Report("test_tp")
    tmp = tempfile.mkdtemp(prefix="fsdpconv_tp_")
    try:
        for i, (mesh, mesh_arg, cfg) in enumerate(CASES):
            run_case(rep, tmp, mesh, mesh_arg, cfg, with_optim=i == 0)
        check_refusals(rep, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
