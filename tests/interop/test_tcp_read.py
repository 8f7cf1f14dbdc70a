"""Interop: fsdpconv reads torch_checkpointing checkpoints the real package saved.

4 gloo ranks build the seeded model of tcp_common.py for each case (fsdp: 1-D mesh of 4;
hsdp: 2 x 2; tp: proj RowwiseParallel and out ColwiseParallel over tp=2, then fully_shard
over dp_shard=2, which makes out.weight a StridedShard) and save model.state_dict() plus a
non-tensor item "step" with torch_checkpointing's CheckpointManager (DefaultResharder, so
metadata.pkl is written) in both layouts: pt (torch.save of DTensors per rank, the default)
and st (safetensors per rank).  Each rank also records torch's own box of each of its
shards (compute_local_shape_and_global_offset) and rank 0 the full tensors.

Per directory:
  inspect --json --checksum --verify: format torch-checkpointing, coverage ok, every
      "model.<key>" with torch's dtype, shape and sha256, and exactly the chunks torch's
      boxes give (each distinct non-empty box once, from the lowest rank holding it, in
      that rank's file)
  dcp-to-full: every tensor bit-exact against the full tensors
  diff of the pt and st directories of a case: equal
  reshard --world-size 4 to DCP, then dcp.load({"model": sd}) into the case's freshly
      built model on 4 ranks: bit-exact against the full tensors
  a copy without rank 1's model file: exit 3 naming the missing file

usage: FSDPCONV=./fsdpconv PYTHON test_tcp_read.py     exit 0 pass, 1 fail, 77 skip
"""

import hashlib
import json
import os
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
import tcp_common as tc  # noqa: E402

LAYOUTS = {"pt": ".pt", "st": ".safetensors"}
LABELS = ["%s_%s" % (c, l) for c in tc.CASES for l in LAYOUTS]


def save_rank(rank, world, port, job):
    try:
        common.rank_init(rank, world, port, 120)
        tc.patch_metadata_gather()
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: setup failed: %s" % (rank, ref.short_exc())]}])
        return
    results = []
    for case in tc.CASES:
        for layout in LAYOUTS:
            problems = []
            try:
                model = tc.build(case, tc.mesh_for(case))
                sd = model.state_dict()
                full = tc.full_state(sd)
                if rank == 0:
                    torch.save(full, os.path.join(job["tmp"], "%s_full.pt" % case))
                with open(os.path.join(job["tmp"], "%s_boxes_%d.json" % (case, rank)), "w") as f:
                    json.dump(tc.torch_boxes(sd), f)
                mgr = tc.manager(layout)
                mgr.save(os.path.join(job["tmp"], "%s_%s" % (case, layout)),
                         {"model": sd, "step": 7})
                mgr.close()
            except Exception:
                problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
            results.append({"case": "%s_%s" % (case, layout), "problems": problems})
            common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def load_rank(rank, world, port, job):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor
    try:
        common.rank_init(rank, world, port, 120)
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: setup failed: %s" % (rank, ref.short_exc())]}])
        return
    results = []
    for case in tc.CASES:
        problems = []
        try:
            full = torch.load(os.path.join(job["tmp"], "%s_full.pt" % case), weights_only=True)
            model = tc.build(case, tc.mesh_for(case))
            sd = model.state_dict()
            for v in sd.values():
                (v._local_tensor if isinstance(v, DTensor) else v).detach().zero_()
            dcp.load({"model": sd}, checkpoint_id=os.path.join(job["tmp"], "%s_dcp" % case))
            got = tc.full_state(sd)
            for k, want in full.items():
                if got[k].dtype != want.dtype or not torch.equal(got[k], want):
                    problems.append("rank %d: %s differs after dcp.load" % (rank, k))
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": case, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def sha256(t):
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                          ).hexdigest()


def want_chunks(tmp, case, ext):
    """key -> sorted [(offsets, sizes, file)]: each distinct non-empty box, lowest rank."""
    out = {}
    for rank in range(4):
        with open(os.path.join(tmp, "%s_boxes_%d.json" % (case, rank))) as f:
            boxes = json.load(f)
        for k, (off, size) in boxes.items():
            if any(s == 0 for s in size):
                continue
            have = out.setdefault("model." + k, {})
            have.setdefault((tuple(off), tuple(size)), "model_%d%s" % (rank, ext))
    return {k: sorted((list(o), list(s), f) for (o, s), f in v.items()) for k, v in out.items()}


def check_inspect(d, full, chunks):
    rc, out, err = common.run_fsdpconv("inspect", "--json", "--checksum", "--verify", d)
    if rc != 0:
        return ["inspect exit %d: %s" % (rc, err.strip()[-400:])]
    got = json.loads(out)
    probs = []
    if got.get("format") != "torch-checkpointing":
        probs.append("format %r" % got.get("format"))
    if got.get("coverage") != {"ok": True, "problems": []}:
        probs.append("coverage %r" % got.get("coverage"))
    seen = set()
    for t in got["tensors"]:
        k = t["key"]
        seen.add(k)
        w = full.get(k[len("model."):]) if k.startswith("model.") else None
        if w is None:
            probs.append("%s: not in torch's state dict" % k)
            continue
        if t["dtype"] != str(w.dtype).replace("torch.", "") or t["shape"] != list(w.shape):
            probs.append("%s: %s %r, torch %s %r" % (k, t["dtype"], t["shape"], w.dtype,
                                                     list(w.shape)))
        if t.get("sha256") != sha256(w):
            probs.append("%s: sha256 differs from torch's full tensor" % k)
        mine = sorted((c["offsets"], c["sizes"], c["file"]) for c in t.get("chunks", []))
        if mine != chunks.get(k):
            probs.append("%s: chunks %r, torch's boxes %r" % (k, mine, chunks.get(k)))
    probs += ["%s: missing from inspect" % k for k in sorted(set(chunks) - seen)]
    return probs


def check_full(d, full, tmp):
    out = os.path.join(tmp, os.path.basename(d) + "_full.safetensors")
    rc, _, err = common.run_fsdpconv("dcp-to-full", "-o", out, d)
    if rc != 0:
        return ["dcp-to-full exit %d: %s" % (rc, err.strip()[-400:])]
    from safetensors.torch import load_file
    got = load_file(out)
    probs = []
    for k, w in full.items():
        g = got.get("model." + k)
        if g is None or g.dtype != w.dtype or not torch.equal(g, w):
            probs.append("model.%s differs from torch's full tensor" % k)
    if len(got) != len(full):
        probs.append("%d tensors exported, torch has %d" % (len(got), len(full)))
    return probs


def check_missing_file(d, tmp):
    broken = os.path.join(tmp, os.path.basename(d) + "_broken")
    shutil.copytree(d, broken)
    name = [n for n in os.listdir(broken) if n.startswith("model_1.")][0]
    os.unlink(os.path.join(broken, name))
    rc, _, err = common.run_fsdpconv("inspect", broken)
    if rc != 3 or name not in err or "missing" not in err:
        return ["without %s: exit %d, stderr %r (want 3 naming it missing)"
                % (name, rc, err.strip())]
    return []


def main():
    try:
        import torch_checkpointing  # noqa: F401
    except ImportError:
        print("skip: torch_checkpointing is not installed (make venv)")
        return 77
    torch.set_num_threads(1)
    rep = common.Report("tcp_read")
    tmp = tempfile.mkdtemp(prefix="tcp_read_")
    try:
        job = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp}
        saved = common.launch_ranks(save_rank, 4, job, LABELS, wait_s=600)
        for case in tc.CASES:
            full = torch.load(os.path.join(tmp, "%s_full.pt" % case), weights_only=True) \
                if os.path.exists(os.path.join(tmp, "%s_full.pt" % case)) else {}
            for layout, ext in LAYOUTS.items():
                label = "%s_%s" % (case, layout)
                d = os.path.join(tmp, label)
                if not rep.case("torch_checkpointing saves %s" % label, saved[label]):
                    continue
                rep.case("inspect %s: torch's tensors and boxes" % label,
                         check_inspect(d, full, want_chunks(tmp, case, ext)))
                rep.case("dcp-to-full %s bit-exact" % label, check_full(d, full, tmp))
                rep.case("inspect %s without rank 1's file" % label, check_missing_file(d, tmp))
            pt, st = (os.path.join(tmp, "%s_%s" % (case, l)) for l in LAYOUTS)
            rc, out, err = common.run_fsdpconv("diff", pt, st)
            rep.case("diff %s pt st: equal" % case,
                     [] if rc == 0 and "equal" in out else
                     ["exit %d: %s %s" % (rc, out.strip()[-300:], err.strip()[-300:])])
            rc, _, err = common.run_fsdpconv("reshard", "--world-size", "4", "-o",
                                             os.path.join(tmp, "%s_dcp" % case), pt)
            rep.case("reshard %s to DCP" % case, [] if rc == 0 else
                     ["exit %d: %s" % (rc, err.strip()[-400:])])
        job2 = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp}
        loaded = common.launch_ranks(load_rank, 4, job2, list(tc.CASES), wait_s=600)
        for case in tc.CASES:
            rep.case("dcp.load of the reshard of %s bit-exact" % case, loaded[case])
    finally:
        if os.environ.get("TCP_KEEP") != "1":
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept %s" % tmp)
    return rep.finish()


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print("%.1fs" % (time.time() - t0))
    sys.exit(rc)
