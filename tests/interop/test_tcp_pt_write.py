"""Interop: fsdpconv's default `--format torch-checkpointing` layout (model_<rank>.pt) against
the real package, for the torch running this test.

The seeded model of tcp_common.py (its full state dict saved once by torch.save) is written by
`fsdpconv full-to-dcp --format torch-checkpointing --mesh-device cpu --mesh-dim-names NAMES`
(the pt layout, the default; `--torch-version X.Y` of the running torch when it is older than
the newest form, 2.15) for each case:
  fsdp  --world-size 4
  hsdp  --mesh replicate=2,shard=2
  tp    --mesh shard=2,tp=2 with test_tcp_write.py's --tp rules (out.weight a StridedShard)
and by `fsdpconv reshard --format torch-checkpointing` from the package's own saves to another
mesh: fsdp -> hsdp 2x2 (rs_fsdp_hsdp) and tp -> fsdp 4 (rs_tp_fsdp).
4 gloo ranks save the same model with the package itself (CheckpointManager, DefaultResharder,
default layout) for each case; then:
  - each output directory holds the files of the package's save of the target mesh, and
    metadata.pkl equal as the package reads it (groups as sets);
  - each rank file: the same zip records, storages of the same sizes (FSDP2's padded ones),
    the same pickle globals (the running torch's DeviceMesh form), and under
    torch.load(weights_only=False) the same keys in the same order (reshard from a
    torch_checkpointing input: in its metadata.pkl's order), DTensor where the
    package has one (same placements, global shape, mesh names and rank map), local tensors
    with the same shape, stride, offset, dtype and bytes, and untyped storages with the same
    bytes, padding included;
  - 4 ranks: meta-init + fully_shard/parallelize_module + to_empty(cpu), zeroed, then
    CheckpointManager.load(dir, into={"model": model.state_dict()}) is bit-exact against the
    full state dict, each rank reading only metadata.pkl and its own model_<rank>.pt (traced
    through the package's storage); the README's load_model_tcp (recipe load-tcp) too, for fsdp;
  - the other torch's form: under torch < 2.13 (no _FlatLayout), fsdpconv's default (2.15) form
    must fail torch.load with the missing _FlatLayout, as docs/torch-checkpointing.md says;
    under 2.15, the --torch-version 2.11 form loads through the package bit-exactly.
`--self-check` uses the package's own saves in place of fsdpconv's outputs: it proves the
harness (every check must pass), without running fsdpconv.

usage: FSDPCONV=./fsdpconv PYTHON test_tcp_pt_write.py [--self-check]
       exit 0 pass, 1 fail, 77 skip
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

FLAT_LAYOUT_SINCE = (2, 13)
MESH_ARGS = {"fsdp": ["--world-size", "4"],
             "hsdp": ["--mesh", "replicate=2,shard=2"],
             "tp": ["--mesh", "shard=2,tp=2", "--tp", r"proj\.weight=1",
                    "--tp", r"proj\.bias=replicate", "--tp", r"out\.weight=0"]}
# output dir -> (how fsdpconv writes it, the case whose package save it must equal)
OUTPUTS = {"out_" + c: (("full-to-dcp", c), c) for c in tc.CASES}
OUTPUTS.update({"rs_fsdp_hsdp": (("reshard", "fsdp"), "hsdp"),
                "rs_tp_fsdp": (("reshard", "tp"), "fsdp")})


def running_torch():
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


def target_args(case):
    return MESH_ARGS[case] + ["--mesh-device", "cpu",
                              "--mesh-dim-names", ",".join(tc.MESH_NAMES[case])]


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
        problems = []
        try:
            sd = tc.build(case, tc.mesh_for(case)).state_dict()
            mgr = tc.manager("pt")
            mgr.save(os.path.join(job["tmp"], "pkg_" + case), {"model": sd})
            mgr.close()
            # rank 0 renames the staged save into place after the package's barrier
            torch.distributed.barrier()
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": case, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def load_rank(rank, world, port, job):
    from torch.distributed.tensor import DTensor
    try:
        common.rank_init(rank, world, port, 120)
        opened = []
        tc.trace_reads(opened)
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: setup failed: %s" % (rank, ref.short_exc())]}])
        return
    full = torch.load(job["full"], weights_only=True)
    results = []
    for label, case in job["loads"].items():
        problems = []
        try:
            path = os.path.join(job["tmp"], label.replace("readme_", "out_"))
            model = tc.build(case, tc.mesh_for(case), device="meta")
            model.to_empty(device="cpu")
            sd = model.state_dict()
            for v in sd.values():
                (v._local_tensor if isinstance(v, DTensor) else v).detach().zero_()
            del opened[:]
            if label.startswith("readme_"):
                ns = {}
                exec(compile(job["snippet"], "README.md recipe load-tcp", "exec"), ns)
                ns["load_model_tcp"](model, path)
            else:
                mgr = tc.manager("pt")
                mgr.load(path, into={"model": sd})
                mgr.close()
            reads = sorted(set(opened))
            if reads != sorted(["metadata.pkl", "model_%d.pt" % rank]):
                problems.append("rank %d read %s, not only its own file" % (rank, reads))
            problems += tc.full_diff(rank, model.state_dict(), full, "the package's load")
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": label, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def write_outputs(tmp, rep, self_check):
    ok = True
    for out, ((cmd, src), target) in OUTPUTS.items():
        dst = os.path.join(tmp, out)
        if self_check:
            shutil.copytree(os.path.join(tmp, "pkg_" + target), dst)
            continue
        src_path = os.path.join(tmp, "full.pt" if cmd == "full-to-dcp" else "pkg_" + src)
        rc, _, err = common.run_fsdpconv(cmd, "--format", "torch-checkpointing",
                                         *(target_args(target) + tc.pt_version_args()),
                                         "-o", dst, src_path)
        ok &= rep.case("%s --format torch-checkpointing %s -> %s" % (cmd, src, target),
                       [] if rc == 0 else ["exit %d: %s" % (rc, err.strip()[-400:])])
    return ok


def other_form(tmp, rep, self_check):
    """The form for the other torch: (load label, its dir) to load, or None."""
    if self_check:
        return None
    older = running_torch() < FLAT_LAYOUT_SINCE
    dst = os.path.join(tmp, "other_form")
    rc, _, err = common.run_fsdpconv(
        "full-to-dcp", "--format", "torch-checkpointing", *target_args("fsdp"),
        "--torch-version", "2.15" if older else "2.11", "-o", dst, os.path.join(tmp, "full.pt"))
    if not rep.case("full-to-dcp --torch-version %s" % ("2.15" if older else "2.11"),
                    [] if rc == 0 else ["exit %d: %s" % (rc, err.strip()[-400:])]):
        return None
    if not older:
        return "other_form"
    try:
        torch.load(os.path.join(dst, "model_0.pt"), weights_only=False)
        probs = ["torch %s loaded the 2.15 form" % torch.__version__]
    except AttributeError as e:
        probs = [] if "_FlatLayout" in str(e) else ["AttributeError without _FlatLayout: %s" % e]
    rep.case("torch %s refuses the 2.15 form (no _FlatLayout)" % torch.__version__, probs)
    return None


def main():
    try:
        import torch_checkpointing  # noqa: F401
    except ImportError:
        print("skip: torch_checkpointing is not installed (make venv)")
        return 77
    self_check = "--self-check" in sys.argv[1:]
    torch.set_num_threads(1)
    rep = common.Report("tcp_pt_write")
    print("torch %s, fsdpconv args %s%s" % (torch.__version__, tc.pt_version_args() or "(default)",
                                            ", SELF-CHECK: the package's saves stand in for "
                                            "fsdpconv's" if self_check else ""))
    tmp = tempfile.mkdtemp(prefix="tcp_pt_write_")
    try:
        torch.manual_seed(20)
        full = os.path.join(tmp, "full.pt")
        torch.save(tc.Net().state_dict(), full)
        job = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp}
        saved = common.launch_ranks(save_rank, 4, job, list(tc.CASES), wait_s=600)
        if not all(rep.case("the package saves %s" % c, saved[c]) for c in tc.CASES):
            return rep.finish()
        if not write_outputs(tmp, rep, self_check):
            return rep.finish()
        for out, (_, target) in OUTPUTS.items():
            rep.case("%s: files, records, storages, tensors and metadata equal the package's "
                     "save of %s" % (out, target),
                     tc.compare_dirs(os.path.join(tmp, out), os.path.join(tmp, "pkg_" + target),
                                  out.startswith("out_")))
        loads = {out: target for out, (_, target) in OUTPUTS.items()}
        loads["readme_fsdp"] = "fsdp"
        extra = other_form(tmp, rep, self_check)
        if extra:
            loads[extra] = "fsdp"
        snippet = common.readme_recipes("python").get("load-tcp")
        if not rep.case("README has the load-tcp recipe", [] if snippet else ["missing"]):
            return rep.finish()
        job2 = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp,
                "full": full, "loads": loads, "snippet": snippet}
        loaded = common.launch_ranks(load_rank, 4, job2, list(loads), wait_s=600)
        for label, case in loads.items():
            rep.case("load %s into a meta-init %s model: bit-exact, each rank reads only its "
                     "own file" % (label, case), loaded[label])
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
