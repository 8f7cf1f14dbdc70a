"""Interop test under transformers 5 (the venv-tf5 venv): optimizer state follows the
mixtral-hf5 recipe's --stack/--concat/--rename.

A transformers 5 MixtralForCausalLM (2 layers, 4 experts, float32; its state_dict() holds
stacked, fused experts) takes one AdamW step; save_pretrained writes mixtral-hf (one tensor per
expert) and torch cuts its AdamW state the same way into optim.pt: an id-keyed
optimizer.state_dict() whose ids count mixtral-hf's tensors in fsdpconv's order (inspect
--json), w1_e/w3_e = gate_up_proj[e] halves, w2_e = down_proj[e], block_sparse_moe.gate =
mlp.gate.  The README's mixtral-hf5 recipe runs as printed plus `--optim optim.pt`.

On 4 gloo ranks, twice: (A) the model meta-initialised, fully_shard per decoder layer and at the
root, to_empty, AdamW with wrong hyper-parameters; get_state_dict(flatten_optimizer_state_dict=
True) poisoned, dcp.load of fsdpconv's DCP, set_state_dict; (B) the same model and optimizer
given the trained model's own (stacked) state through set_state_dict(full_state_dict=True): the
reference.  Checks: A's loaded state (every parameter, exp_avg, exp_avg_sq, step, lr/betas/
weight_decay) bit-exact with B's; then one more step on the same batch: the loss and every
parameter and state tensor bit-exact between A and B.

Exits 0 when every check passes, 1 otherwise.  RECIPES_KEEP=1 keeps the temp dir.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import common  # noqa: E402
import f2d_reference as ref  # noqa: E402

import transformers  # noqa: E402
from tf5_test_recipes import build, run_recipe  # noqa: E402

HP = dict(lr=1e-2, betas=(0.8, 0.9), weight_decay=0.1)
WRONG_HP = dict(lr=0.5, betas=(0.5, 0.5), weight_decay=0.5)


def batch():
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, 64, (2, 8), generator=g)


def stacked_of(key):
    """(FQN of the stacked parameter, expert, projection) that per-expert key of mixtral-hf
    goes into; expert and projection None for the keys only renamed."""
    p = key.split(".")
    if ".block_sparse_moe.experts." not in key:
        return key.replace(".block_sparse_moe.", ".mlp."), None, None
    base = ".".join(p[:3]) + ".mlp.experts."
    return base + ("down_proj" if p[6] == "w2" else "gate_up_proj"), int(p[5]), p[6]


def per_expert(stacked, key, inter):
    """The slice of stacked (FQN -> tensor) that per-expert key of mixtral-hf is."""
    fqn, e, w = stacked_of(key)
    if e is None or w == "w2":
        return stacked[fqn] if e is None else stacked[fqn][e]
    gu = stacked[fqn][e]
    return gu[:inter] if w == "w1" else gu[inter:]


def write_inputs(tmp):
    """mixtral-hf and optim.pt after one AdamW step; the reference state; fsdpconv's order."""
    cls, cfg = build("mixtral")
    torch.manual_seed(0)
    m = cls(cfg)
    opt = torch.optim.AdamW(m.parameters(), **HP)
    ids = torch.randint(0, 64, (2, 8))
    m(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    src = os.path.join(tmp, "mixtral-hf")
    m.save_pretrained(src)
    names = {p: n for n, p in m.named_parameters()}
    full = {"state": {names[p]: {k: v.clone() for k, v in s.items()} for p, s in opt.state.items()},
            "param_groups": [dict({k: v for k, v in g.items() if k != "params"},
                                  params=[names[p] for p in g["params"]])
                             for g in opt.param_groups]}
    r = subprocess.run([common.fsdpconv_path(), "inspect", "--json", src], capture_output=True,
                       check=True)
    keys = [t["key"] for t in json.loads(r.stdout)["tensors"]]
    state = {}
    for i, k in enumerate(keys):
        one = {w: per_expert({n: s[w] for n, s in full["state"].items()}, k,
                             cfg.intermediate_size).clone() for w in ("exp_avg", "exp_avg_sq")}
        one["step"] = full["state"][stacked_of(k)[0]]["step"].clone()
        state[i] = one
    groups = [dict({k: v for k, v in full["param_groups"][0].items() if k != "params"},
                   params=list(range(len(keys))))]
    torch.save({"state": state, "param_groups": groups}, os.path.join(tmp, "optim.pt"))
    exp = os.path.join(tmp, "expected.pt")
    torch.save({"model": {k: v.detach().clone() for k, v in m.state_dict().items()},
                "optim": full}, exp)
    return exp


# ------------------------------------------------------------------------------ FSDP2 ranks

def fsdp_model(mesh):
    from torch.distributed.fsdp import fully_shard
    cls, cfg = build("mixtral")
    with torch.device("meta"):
        m = cls(cfg)
    for layer in m.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    m.to_empty(device="cpu")
    # Non-persistent buffers (rotary inv_freq) are in no checkpoint: computed as from_pretrained.
    with torch.no_grad():
        for (n, b), (_, want) in zip(m.named_buffers(), cls(cfg).named_buffers()):
            b.copy_(want)
    return m, torch.optim.AdamW(m.parameters(), **WRONG_HP)


def snapshot(m, opt):
    """FQN -> full tensor of every parameter and state tensor, and the group hyper-parameters."""
    from torch.distributed.tensor import DTensor

    def full(t):
        return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()
    out = {n: full(p) for n, p in m.named_parameters()}
    for n, p in m.named_parameters():
        for k, v in opt.state.get(p, {}).items():
            out["%s.%s" % (n, k)] = full(v)
    for k in ("lr", "betas", "weight_decay"):  # betas: a tuple as saved, a list via DSD
        v = opt.param_groups[0][k]
        out["hp." + k] = tuple(v) if isinstance(v, (list, tuple)) else v
    return out


def compare(a, b, what):
    probs = []
    if set(a) != set(b):
        probs.append("%s: keys differ: %s" % (what, sorted(set(a) ^ set(b))[:5]))
    for k in sorted(set(a) & set(b)):
        if isinstance(b[k], torch.Tensor):
            d = ref.diff(a[k], b[k])
            if d:
                probs.append("%s: %s: %s" % (what, k, d))
        elif a[k] != b[k]:
            probs.append("%s: %s = %r, want %r" % (what, k, a[k], b[k]))
    return probs


def step(m, opt):
    opt.zero_grad()
    ids = batch()
    loss = m(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    return loss.detach()


def rank_check(mesh, case):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict,
                                                         set_state_dict)
    from torch.distributed.tensor import DTensor

    want = torch.load(case["expected"], weights_only=False)
    am, aopt = fsdp_model(mesh)
    flat = StateDictOptions(flatten_optimizer_state_dict=True)
    msd, osd = get_state_dict(am, aopt, options=flat)
    with torch.no_grad():
        for t in list(msd.values()) + [v for v in osd.values() if isinstance(v, torch.Tensor)]:
            loc = t.to_local() if isinstance(t, DTensor) else t
            loc.copy_(ref.poisoned(loc))
    state = {"model": msd, "optimizer": osd}
    dcp.load(state, checkpoint_id=case["out"])
    set_state_dict(am, aopt, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                   options=flat)
    bm, bopt = fsdp_model(mesh)
    set_state_dict(bm, bopt, model_state_dict=want["model"], optim_state_dict=want["optim"],
                   options=StateDictOptions(full_state_dict=True))
    probs = compare(snapshot(am, aopt), snapshot(bm, bopt), "loaded")
    la, lb = step(am, aopt), step(bm, bopt)
    if not torch.equal(la, lb):
        probs.append("loss %r, want %r" % (la.item(), lb.item()))
    return probs + compare(snapshot(am, aopt), snapshot(bm, bopt), "after one more step")


def run_rank(rank, world, port, job):
    from torch.distributed.device_mesh import init_device_mesh

    results = []
    try:
        common.rank_init(rank, world, port, job["timeout"])
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("shard",))
        for case in job["cases"]:
            try:
                probs = rank_check(mesh, case)
            except (Exception, CheckpointException):
                probs = ["raised: %s" % ref.short_exc()]
            results.append({"case": case["name"], "problems": common.cap_problems(probs)})
            common.write_rank_results(job["result_dir"], rank, results)
    except (Exception, CheckpointException):
        results.append({"case": "*", "problems": ["setup failed: %s" % ref.short_exc()]})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def main():
    if not transformers.__version__.startswith("5."):
        print("transformers %s, not 5.x (run with the venv-tf5 python)" % transformers.__version__)
        return 1
    torch.set_num_threads(1)
    t0 = time.time()
    rep = common.Report("moe-optim-tf5")
    tmp = tempfile.mkdtemp(prefix="moe_optim_tf5_")
    bindir = tempfile.mkdtemp(dir=tmp, prefix="bin_")
    os.symlink(common.fsdpconv_path(), os.path.join(bindir, "fsdpconv"))
    try:
        exp = write_inputs(tmp)
        cmd = common.readme_recipes("sh").get("mixtral-hf5", "false")
        cmd = cmd.replace("fsdpconv full-to-dcp ", "fsdpconv full-to-dcp --optim optim.pt ", 1)
        p = run_recipe(cmd, tmp, bindir)
        rep.case("mixtral-hf5 recipe as printed plus --optim optim.pt (per-expert AdamW state)", p)
        if not p:
            case = {"name": "moe-optim", "out": os.path.join(tmp, "mixtral-dcp"), "expected": exp}
            job = {"cases": [case], "timeout": 240,
                   "result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_")}
            res = common.launch_ranks(run_rank, 4, job, [case["name"]], 240)
            rep.case("transformers %s Mixtral, fully_shard on 4 gloo ranks, dcp.load + "
                     "set_state_dict: model and AdamW state bit-exact with the stacked state "
                     "torch set, and after one more step" % transformers.__version__,
                     res[case["name"]])
    finally:
        if os.environ.get("RECIPES_KEEP"):
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("(%.0fs, torch %s, transformers %s)" % (time.time() - t0, torch.__version__,
                                                 transformers.__version__))
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
