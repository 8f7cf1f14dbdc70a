"""Interop: fsdpconv's `--format torch-checkpointing` loads through the real package.

The seeded model of tcp_common.py (full state dict saved once by torch.save) is converted by
`fsdpconv full-to-dcp --format torch-checkpointing --tcp-layout safetensors --mesh-device cpu`
for each case (the default .pt layout: test_tcp_pt_write.py):
  fsdp  --world-size 4
  hsdp  --mesh replicate=2,shard=2
  tp    --mesh shard=2,tp=2 with proj RowwiseParallel (weight dim 1, bias replicate: a
        DTensor on the tp mesh) and out ColwiseParallel (weight dim 0): FSDP2 over TP,
        out.weight a StridedShard
and once more with the defaults (device cuda, torchtitan's names) for fsdp.  Then 4 gloo ranks,
per case:
  - build the model on the meta device, parallelize_module / fully_shard it, to_empty(cpu), and
    CheckpointManager(...).load(dir, into={"model": model.state_dict()}) with DefaultResharder
    (the package's own load of a safetensors-layout checkpoint): every tensor bit-exact against
    the full state dict, on every rank
  - save the same (seeded, materialized) model with the package itself; the parent then compares
    the two directories: the same files, each rank file the same safetensors tensors (names,
    dtypes, shapes, bytes), metadata.pkl equal as the package reads it (groups compared as
    sets, since the package orders them by set iteration)
  - the files each rank opens while loading fsdpconv's output are the files it opens while
    loading the package's own save (both traced through the package's storage)
  - the README's loading snippet (recipe load-tcp), exec()ed as printed, loads it into a
    meta-init model: every parameter and buffer of model.state_dict() bit-exact
The cuda/torchtitan-named fsdp output loads bit-exactly too (the metadata differs from the
live model's, so the resharder reads it; the package reshards every safetensors-layout load).

usage: FSDPCONV=./fsdpconv PYTHON test_tcp_write.py     exit 0 pass, 1 fail, 77 skip
"""

import json
import os
import shutil
import struct
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

MESH_ARGS = {"fsdp": ["--world-size", "4"],
             "hsdp": ["--mesh", "replicate=2,shard=2"],
             "tp": ["--mesh", "shard=2,tp=2", "--tp", r"proj\.weight=1",
                    "--tp", r"proj\.bias=replicate", "--tp", r"out\.weight=0"]}
DIRS = {"fsdp": "fsdp", "hsdp": "hsdp", "tp": "tp", "fsdp_cuda": "fsdp"}  # dir -> case


def load_into_meta_model(case, path, full, rank, opened):
    from torch.distributed.tensor import DTensor
    model = tc.build(case, tc.mesh_for(case), device="meta")
    model.to_empty(device="cpu")
    sd = model.state_dict()
    del opened[:]
    mgr = tc.manager("st")
    mgr.load(path, into={"model": sd})
    mgr.close()
    problems = []
    got = tc.full_state(sd)
    for k, want in full.items():
        g = got.get(k)
        if g is None or g.dtype != want.dtype or not torch.equal(g, want):
            problems.append("rank %d: %s differs from the full state dict after load" % (rank, k))
    del DTensor
    return problems, sorted(set(n for n in opened if n != "metadata.pkl"))


def run_rank(rank, world, port, job):
    try:
        common.rank_init(rank, world, port, 120)
        tc.patch_metadata_gather()
        opened = []
        tc.trace_reads(opened)
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: setup failed: %s" % (rank, ref.short_exc())]}])
        return
    full = torch.load(job["full"], weights_only=True)
    results = []
    reads = {}
    for name, case in DIRS.items():
        problems = []
        try:
            out = os.path.join(job["tmp"], "out_" + name)
            p, reads[name] = load_into_meta_model(case, out, full, rank, opened)
            problems += p
            if name in tc.CASES:
                model = tc.build(case, tc.mesh_for(case))
                mgr = tc.manager("st")
                mgr.save(os.path.join(job["tmp"], "pkg_" + name), {"model": model.state_dict()})
                mgr.close()
                # rank 0 renames the staged save into place after the package's barrier
                torch.distributed.barrier()
                _, reads["pkg_" + name] = load_into_meta_model(
                    case, os.path.join(job["tmp"], "pkg_" + name), full, rank, opened)
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": name, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
        if name not in tc.CASES:
            continue
        problems = []
        try:
            ns = {}
            exec(compile(job["snippet"], "README.md recipe load-tcp", "exec"), ns)
            model = tc.build(case, tc.mesh_for(case), device="meta")
            model.to_empty(device="cpu")
            ns["load_model_tcp"](model, os.path.join(job["tmp"], "out_" + name))
            got = tc.full_state(model.state_dict())
            problems += ["rank %d: %s differs after the README's load" % (rank, k)
                         for k, w in full.items() if not torch.equal(got[k], w)]
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": "readme_" + name, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    with open(os.path.join(job["tmp"], "reads_%d.json" % rank), "w") as f:
        json.dump(reads, f)
    common.rank_finish()


def st_tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, t in hdr.items():
        if k == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[k] = (t["dtype"], t["shape"], data[b:e])
    return out, hdr.get("__metadata__")


def compare_dirs(ours, pkg):
    probs = []
    a, b = sorted(os.listdir(ours)), sorted(os.listdir(pkg))
    if a != b:
        return ["files %r, the package wrote %r" % (a, b)]
    for name in a:
        if name == "metadata.pkl":
            if tc.canon_meta(os.path.join(ours, name)) != tc.canon_meta(os.path.join(pkg, name)):
                probs.append("metadata.pkl differs from the package's")
            continue
        x, y = st_tensors(os.path.join(ours, name)), st_tensors(os.path.join(pkg, name))
        if x != y:
            diff = sorted(k for k in set(x[0]) | set(y[0]) if x[0].get(k) != y[0].get(k))
            probs.append("%s: tensors %s differ from the package's" % (name, diff[:6]))
    return probs


def main():
    try:
        import torch_checkpointing  # noqa: F401
    except ImportError:
        print("skip: torch_checkpointing is not installed (make venv)")
        return 77
    torch.set_num_threads(1)
    rep = common.Report("tcp_write")
    tmp = tempfile.mkdtemp(prefix="tcp_write_")
    try:
        torch.manual_seed(20)
        full_path = os.path.join(tmp, "full.pt")
        torch.save(tc.Net().state_dict(), full_path)
        ok = True
        for name, case in DIRS.items():
            args = MESH_ARGS[case] + ([] if name == "fsdp_cuda" else ["--mesh-device", "cpu"])
            rc, _, err = common.run_fsdpconv("full-to-dcp", "--format", "torch-checkpointing",
                                             "--tcp-layout", "safetensors", *args, "-o", os.path.join(tmp, "out_" + name),
                                             full_path)
            ok &= rep.case("full-to-dcp --format torch-checkpointing %s" % name,
                           [] if rc == 0 else ["exit %d: %s" % (rc, err.strip()[-400:])])
        if not ok:
            return rep.finish()
        snippet = common.readme_recipes("python").get("load-tcp")
        if not rep.case("README has the load-tcp recipe", [] if snippet else ["missing"]):
            return rep.finish()
        job = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp,
               "full": full_path, "snippet": snippet}
        labels = list(DIRS) + ["readme_" + c for c in tc.CASES]
        loaded = common.launch_ranks(run_rank, 4, job, labels, wait_s=600)
        reads = {}
        for r in range(4):
            p = os.path.join(tmp, "reads_%d.json" % r)
            if os.path.exists(p):
                with open(p) as f:
                    reads[r] = json.load(f)
        for name in DIRS:
            rep.case("CheckpointManager.load of %s into a meta-init model, bit-exact" % name,
                     loaded[name])
        for case in tc.CASES:
            rep.case("README load_model_tcp of %s, bit-exact" % case, loaded["readme_" + case])
        for case in tc.CASES:
            ours, pkg = (os.path.join(tmp, p + case) for p in ("out_", "pkg_"))
            rep.case("%s: files, shards and metadata equal the package's own save" % case,
                     compare_dirs(ours, pkg))
            probs = []
            for r in range(4):
                if r not in reads or case not in reads[r] or "pkg_" + case not in reads[r]:
                    probs.append("rank %d: no trace" % r)
                elif reads[r][case] != reads[r]["pkg_" + case]:
                    probs.append("rank %d read %s, with the package's save %s"
                                 % (r, reads[r][case], reads[r]["pkg_" + case]))
            rep.case("%s: each rank reads the files it reads from the package's save" % case,
                     probs)
        if 3 in reads:
            print("files rank 3 read (fsdp): %s" % reads[3].get("fsdp"))
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
