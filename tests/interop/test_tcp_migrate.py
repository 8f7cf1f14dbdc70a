"""Interop: a torch-written DCP migrates to torch_checkpointing and back, loaded by real torch.

4 gloo ranks save the seeded model of tcp_common.py with torch's own dcp.save({"model": sd})
for each case's mesh (fsdp, hsdp, tp).  Then, per case:
  reshard --format torch-checkpointing --mesh replicate=2,shard=2   (another mesh for fsdp and
      tp; the same for hsdp): the package's CheckpointManager.load (the README's load_model_tcp)
      into a meta-init HSDP 2x2 model is bit-exact against the full state dict
  reshard --format dcp --world-size 4 of that torch_checkpointing output: dcp.load into the
      case's model is bit-exact
Optimizer state: test_tcp_optim_resume.py.

usage: FSDPCONV=./fsdpconv PYTHON test_tcp_migrate.py     exit 0 pass, 1 fail, 77 skip
"""

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


def save_rank(rank, world, port, job):
    import torch.distributed.checkpoint as dcp
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
            sd = tc.build(case, tc.mesh_for(case)).state_dict()
            dcp.save({"model": sd}, checkpoint_id=os.path.join(job["tmp"], "dcp_" + case))
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": case, "problems": problems})
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
    full = torch.load(job["full"], weights_only=True)
    ns = {}
    exec(compile(job["snippet"], "README.md recipe load-tcp", "exec"), ns)
    results = []
    for case in tc.CASES:
        problems = []
        try:
            model = tc.build("hsdp", tc.mesh_for("hsdp"), device="meta")
            model.to_empty(device="cpu")
            ns["load_model_tcp"](model, os.path.join(job["tmp"], "tcp_" + case))
            problems += tc.full_diff(rank, model.state_dict(), full, "the package's load")
            model = tc.build(case, tc.mesh_for(case))
            sd = model.state_dict()
            for v in sd.values():
                (v._local_tensor if isinstance(v, DTensor) else v).detach().zero_()
            dcp.load({"model": sd}, checkpoint_id=os.path.join(job["tmp"], "back_" + case))
            problems += tc.full_diff(rank, sd, full, "dcp.load of the way back")
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": case, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def main():
    try:
        import torch_checkpointing  # noqa: F401
    except ImportError:
        print("skip: torch_checkpointing is not installed (make venv)")
        return 77
    torch.set_num_threads(1)
    rep = common.Report("tcp_migrate")
    tmp = tempfile.mkdtemp(prefix="tcp_migrate_")
    try:
        torch.manual_seed(20)
        full = os.path.join(tmp, "full.pt")
        torch.save(tc.Net().state_dict(), full)
        job = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp}
        saved = common.launch_ranks(save_rank, 4, job, list(tc.CASES), wait_s=600)
        ok = True
        for case in tc.CASES:
            if not rep.case("torch dcp.save %s" % case, saved[case]):
                ok = False
                continue
            for args, out, what in (
                    (["--format", "torch-checkpointing", "--mesh", "replicate=2,shard=2",
                      "--mesh-device", "cpu", *tc.pt_version_args(),
                      os.path.join(tmp, "dcp_" + case)],
                     "tcp_" + case, "DCP -> torch_checkpointing"),
                    (["--world-size", "4", os.path.join(tmp, "tcp_" + case)],
                     "back_" + case, "torch_checkpointing -> DCP")):
                rc, _, err = common.run_fsdpconv("reshard", "-o", os.path.join(tmp, out), *args)
                ok &= rep.case("reshard %s (%s)" % (what, case),
                               [] if rc == 0 else ["exit %d: %s" % (rc, err.strip()[-400:])])
        if not ok:
            return rep.finish()
        job2 = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp,
                "full": full, "snippet": common.readme_recipes("python")["load-tcp"]}
        loaded = common.launch_ranks(load_rank, 4, job2, list(tc.CASES), wait_s=600)
        for case in tc.CASES:
            rep.case("%s: migrated checkpoint loads bit-exactly both ways" % case, loaded[case])
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
