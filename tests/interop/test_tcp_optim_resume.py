"""Interop: a torch-written DCP with AdamW state migrates to torch_checkpointing and resumes.

4 gloo ranks train the seeded model of tcp_common.py (fsdp 4 and HSDP 2x2) with AdamW in two
parameter groups (norm.* at another lr, no weight decay) for two steps, then save
  dcp_<save>: torch's dcp.save({"model", "optimizer"}) of get_state_dict(model, optim), the
      optimizer dict flattened (flatten_optimizer_state_dict=True: torchtitan's DCP layout) for
      saves fsdp and hsdp, nested (the DCP tutorial's AppState) for fsdp_nested
  pkg_<save>: the package's own save of the same dicts (CheckpointManager, items model and
      optimizer with DefaultResharder, the default .pt layout; flat: torchtitan's
      TorchCheckpointingManager's layout) -- what fsdpconv's output must equal
  full_fsdp.pt: get_state_dict(full_state_dict=True) of the fsdp run (FQN-keyed optimizer)
and take a third step: the un-migrated run, whose parameters and optimizer state (every leaf of
the flattened optimizer state dict, full tensors) are the expected values; the state saved
(before that step) is kept too.  fsdpconv (--mesh-device cpu --mesh-dim-names NAMES) writes:
  fsdp, hsdp, fsdp_nested   reshard --format torch-checkpointing of dcp_<save>, same mesh
  fsdp_to_hsdp              reshard of dcp_fsdp for HSDP 2x2
  full_to_fsdp              full-to-dcp --format torch-checkpointing --optim-select optimizer
                            of full_fsdp.pt, for fsdp 4
  tcp_to_dcp                the way back: reshard --format dcp --world-size 4 of pkg_fsdp,
                            loaded by dcp.load + set_state_dict (flattened), then one more
                            step bit-exact against the un-migrated run
then
  - same mesh: the output holds what the package's save holds (tcp_common.compare_dirs: files,
    metadata.pkl, and per rank file records, globals, keys, tensors and storages, param_groups
    values); keys in the package's order from the full state dict, in any order from a DCP, whose
    metadata does not keep the state-dict order (torch's dedup_save_plans moves replicated items
    -- each `step`, HSDP's replica shards -- to other ranks' plans);
  - same mesh, 4 ranks: a fresh meta-init model, to_empty(cpu), AdamW with wrong
    hyper-parameters and NaN state, loaded by the README's load_training_tcp (recipe
    load-tcp-optim) exec()ed as printed (the nested form: the same with get_state_dict's nested
    dicts), each rank reading only metadata.pkl, model_<rank>.pt and optimizer_<rank>.pt; one
    more step: every parameter and every optimizer leaf (step, exp_avg, exp_avg_sq, lr, betas,
    ...) bit-exact against the un-migrated run's third step;
  - fsdp_to_hsdp: loads into an HSDP model with every parameter and optimizer tensor bit-exact
    against the saved state (a step after it would reduce gradients in another order); the
    package's resharding load copies tensors only (param_groups keep the live optimizer's
    values), so that optimizer is made with the training hyper-parameters.
`--self-check` uses the package's saves (tcp_to_dcp: torch's DCP) in place of fsdpconv's
outputs: it proves the harness (every check must pass) without running fsdpconv.

usage: FSDPCONV=./fsdpconv PYTHON test_tcp_optim_resume.py [--self-check]
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

CASES = ("fsdp", "hsdp")
MESH_ARGS = {"fsdp": ["--world-size", "4"], "hsdp": ["--mesh", "replicate=2,shard=2"]}
# save -> (the case trained, the optimizer dict: get_state_dict's "flat" one, torchtitan's, or
# its "nested" one, the DCP tutorial's AppState's)
SAVES = {"fsdp": ("fsdp", "flat"), "hsdp": ("hsdp", "flat"), "fsdp_nested": ("fsdp", "nested")}
# migration label -> (save, loaded into); across meshes the resumed step reduces gradients
# differently, so there the loaded state itself is compared with the saved one
MIGRATIONS = {"fsdp": ("fsdp", "fsdp"), "hsdp": ("hsdp", "hsdp"),
              "fsdp_nested": ("fsdp_nested", "fsdp"), "fsdp_to_hsdp": ("fsdp", "hsdp"),
              "full_to_fsdp": ("fsdp", "fsdp"), "tcp_to_dcp": ("fsdp", "fsdp")}
# How fsdpconv writes out_<label>: reshard of dcp_<save>; full_*: full-to-dcp --optim of the
# full state dict (get_state_dict's full_state_dict=True: the optimizer keyed by FQN) of the
# fsdp run, which fsdpconv writes in torchtitan's flat form, pkg_fsdp's; tcp_to_dcp: reshard
# --format dcp of the package's own save pkg_<save>, loaded by dcp.load.
TRAIN_HP = dict(lr=0.01, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
WRONG_HP = dict(lr=0.5, betas=(0.5, 0.5), eps=1e-3, weight_decay=0.5)
STEPS_BEFORE_SAVE = 2


def make_adamw(model, hp):
    """Two groups, as a training run has them: norm.* at twice the lr without weight decay."""
    norm = [p for n, p in model.named_parameters() if n.startswith("norm.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("norm.")]
    return torch.optim.AdamW([{"params": rest},
                              {"params": norm, "lr": 2 * hp["lr"], "weight_decay": 0.0}], **hp)


def batch(rank, i):
    g = torch.Generator().manual_seed(1000 * i + rank)
    return torch.randint(0, 5, (8,), generator=g)


def train_step(model, optim, rank, i):
    model(batch(rank, i)).backward()
    optim.step()
    optim.zero_grad()


def flat_options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    return StateDictOptions(flatten_optimizer_state_dict=True)


def snapshot(model, optim):
    """Full parameters and every flattened optimizer leaf (collective)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    from torch.distributed.tensor import DTensor
    osd = get_optimizer_state_dict(model, optim, options=flat_options())
    full = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in osd.items()}
    full.update(("model." + k, v) for k, v in tc.full_state(model.state_dict()).items())
    return {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in full.items()}


def train_rank(rank, world, port, job):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    try:
        common.rank_init(rank, world, port, 120)
        tc.patch_metadata_gather()
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: setup failed: %s" % (rank, ref.short_exc())]}])
        return
    results = []
    for case in CASES:
        problems = []
        try:
            model = tc.build(case, tc.mesh_for(case))
            optim = make_adamw(model, TRAIN_HP)
            for i in range(STEPS_BEFORE_SAVE):
                train_step(model, optim, rank, i)
            for save, (trained, form) in SAVES.items():
                if trained != case:
                    continue
                msd, osd = get_state_dict(model, optim,
                                          options=flat_options() if form == "flat" else None)
                dcp.save({"model": msd, "optimizer": osd},
                         checkpoint_id=os.path.join(job["tmp"], "dcp_" + save))
                mgr = tc.manager("pt", items=("model", "optimizer"))
                mgr.save(os.path.join(job["tmp"], "pkg_" + save),
                         {"model": msd, "optimizer": osd})
                mgr.close()
                # rank 0 renames the staged save into place after the package's barrier
                torch.distributed.barrier()
            if case == "fsdp":
                full_msd, full_osd = get_state_dict(model, optim, options=StateDictOptions(
                    full_state_dict=True, cpu_offload=True))
                if rank == 0:
                    torch.save({"model": full_msd, "optimizer": full_osd},
                               os.path.join(job["tmp"], "full_fsdp.pt"))
            saved = snapshot(model, optim)
            if rank == 0:
                torch.save(saved, os.path.join(job["tmp"], "saved_%s.pt" % case))
            train_step(model, optim, rank, STEPS_BEFORE_SAVE)
            want = snapshot(model, optim)
            if rank == 0:
                torch.save(want, os.path.join(job["tmp"], "want_%s.pt" % case))
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": case, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def poison_(model, optim):
    """What the load must overwrite: every parameter, every state tensor (the hyper-parameters
    are WRONG_HP already)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    from torch.distributed.tensor import DTensor
    get_optimizer_state_dict(model, optim)  # creates the state (a zero-lr step)
    tensors = list(model.parameters()) + [v for st in optim.state.values() for v in st.values()]
    with torch.no_grad():
        for t in tensors:
            (t._local_tensor if isinstance(t, DTensor) else t).fill_(float("nan"))


def same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b))
    return type(a) is type(b) and a == b


def compare_snapshot(rank, got, what, want):
    probs = []
    if sorted(got) != sorted(want):
        probs.append("rank %d: state keys %s missing, %s extra" % (
            rank, sorted(set(want) - set(got)), sorted(set(got) - set(want))))
    return probs + ["rank %d: %s after %s is %r, the un-migrated run's %r"
                    % (rank, k, what, got[k], want[k]) if not isinstance(want[k], torch.Tensor)
                    else "rank %d: %s differs after %s" % (rank, k, what)
                    for k in sorted(want) if k in got and not same(got[k], want[k])]


def load_nested_tcp(model, optim, ckpt):
    """load_training_tcp for get_state_dict's nested optimizer dict."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model_sd, optim_sd = get_state_dict(model, optim)
    mgr = tc.manager("pt", items=("model", "optimizer"))
    loaded = mgr.load(ckpt, into={"model": model_sd, "optimizer": optim_sd})
    mgr.close()
    set_state_dict(model, optim, model_state_dict=loaded["model"],
                   optim_state_dict=loaded["optimizer"])


def load_training_dcp(model, optim, ckpt):
    """The way back: torchtitan's DCP load (the README's load-optim recipe does the same)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model_sd, optim_sd = get_state_dict(model, optim, options=flat_options())
    state = {"model": model_sd, "optimizer": optim_sd}
    dcp.load(state, checkpoint_id=ckpt)
    set_state_dict(model, optim, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"], options=flat_options())


def resume_rank(rank, world, port, job):
    try:
        common.rank_init(rank, world, port, 120)
        opened = []
        tc.trace_reads(opened)
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: setup failed: %s" % (rank, ref.short_exc())]}])
        return
    ns = {}
    exec(compile(job["snippet"], "README.md recipe load-tcp-optim", "exec"), ns)
    results = []
    for label, (save, case) in MIGRATIONS.items():
        trained, form = SAVES[save]
        problems = []
        try:
            torch.manual_seed(999)
            model = tc.build(case, tc.mesh_for(case), device="meta")
            model.to_empty(device="cpu")
            # The package's resharding load (another mesh) copies tensors only: param_groups
            # keep the live optimizer's values, so there it is made as the training run made it.
            optim = make_adamw(model, WRONG_HP if trained == case else TRAIN_HP)
            poison_(model, optim)
            del opened[:]
            load = {"flat": ns["load_training_tcp"], "nested": load_nested_tcp}[form]
            if label == "tcp_to_dcp":
                load = load_training_dcp
            load(model, optim, os.path.join(job["tmp"], "out_" + label))
            reads = sorted(set(opened))
            own = sorted(["metadata.pkl", "model_%d.pt" % rank, "optimizer_%d.pt" % rank])
            if reads != own and trained == case and label != "tcp_to_dcp":
                problems.append("rank %d read %s, not only %s" % (rank, reads, own))
            if trained == case:
                train_step(model, optim, rank, STEPS_BEFORE_SAVE)
                what, want = "the resumed step", "want_%s.pt" % trained
            else:
                what, want = "the load", "saved_%s.pt" % trained
            problems += compare_snapshot(rank, snapshot(model, optim), what, torch.load(
                os.path.join(job["tmp"], want), weights_only=True))
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": label, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def main():
    try:
        import torch_checkpointing  # noqa: F401
    except ImportError:
        print("skip: torch_checkpointing is not installed (make venv)")
        return 77
    self_check = "--self-check" in sys.argv[1:]
    torch.set_num_threads(1)
    rep = common.Report("tcp_optim_resume")
    print("torch %s%s" % (torch.__version__, ", SELF-CHECK: the package's saves stand in for "
                          "fsdpconv's" if self_check else ""))
    tmp = tempfile.mkdtemp(prefix="tcp_optim_")
    try:
        job = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp}
        trained = common.launch_ranks(train_rank, 4, job, list(CASES), wait_s=600)
        if not all(rep.case("train 2 steps, dcp.save and the package's save (%s)" % c,
                            trained[c]) for c in CASES):
            return rep.finish()
        ok = True
        for label, (save, case) in MIGRATIONS.items():
            out = os.path.join(tmp, "out_" + label)
            if self_check:  # across meshes the package's own load reshards
                shutil.copytree(os.path.join(
                    tmp, ("dcp_" if label == "tcp_to_dcp" else "pkg_") + save), out)
                continue
            if label == "tcp_to_dcp":
                src = ["reshard", os.path.join(tmp, "pkg_" + save)]
                args = ["--format", "dcp"] + MESH_ARGS[case]
            else:
                src = (["full-to-dcp", "--select", "model", "--optim-select", "optimizer",
                        os.path.join(tmp, "full_%s.pt" % save)] if label.startswith("full_")
                       else ["reshard", os.path.join(tmp, "dcp_" + save)])
                args = ["--format", "torch-checkpointing"] + MESH_ARGS[case] + [
                    "--mesh-device", "cpu", "--mesh-dim-names", ",".join(tc.MESH_NAMES[case])
                ] + tc.pt_version_args()
            rc, _, err = common.run_fsdpconv(src[0], *args, "-o", out, *src[1:])
            ok &= rep.case("%s %s of the AdamW run's %s (%s)" % (
                               src[0], " ".join(args[:2]), "full state dict"
                               if src[0] == "full-to-dcp" else "package save"
                               if label == "tcp_to_dcp" else "DCP", label),
                           [] if rc == 0 else ["exit %d: %s" % (rc, err.strip()[-400:])])
        if not ok:
            return rep.finish()
        for label, (save, case) in MIGRATIONS.items():
            if SAVES[save][0] == case and label != "tcp_to_dcp":
                rep.case("%s: files, records, storages, tensors, param_groups and metadata "
                         "equal the package's save" % label,
                         tc.compare_dirs(os.path.join(tmp, "out_" + label),
                                         os.path.join(tmp, "pkg_" + save),
                                         label.startswith("full_")))
        snippet = common.readme_recipes("python").get("load-tcp-optim")
        if not rep.case("README has the load-tcp-optim recipe", [] if snippet else ["missing"]):
            return rep.finish()
        job2 = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp,
                "snippet": snippet}
        resumed = common.launch_ranks(resume_rank, 4, job2, list(MIGRATIONS), wait_s=600)
        for label, (save, case) in MIGRATIONS.items():
            rep.case("%s: %s, and one more step bit-exact against the un-migrated run" % (
                         label, "dcp.load of the way back" if label == "tcp_to_dcp" else
                         "%s, each rank reading only its own files" % (
                             "README load_training_tcp" if SAVES[save][1] == "flat"
                             else "the nested optimizer dict's load"))
                     if SAVES[save][0] == case else
                     "%s: README load_training_tcp, every parameter and optimizer tensor "
                     "bit-exact against the saved state" % label, resumed[label])
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
