"""One rank of the optimizer interop test (test_optim.py): an FSDP2 training job on CPU/gloo
resumes from fsdpconv's DCP output and must continue exactly like the full reference.

    run_rank(rank, world, port, job)     multiprocessing target (fork or spawn)

job = {"timeout": seconds, "result_dir": dir,
       "cases": [{"name", "out" (DCP dir), "kind" ("conv"|"linear"), "layout"
                  ("app"|"torchtitan"), "groups" ([[fqn, ...], ...]), "expected" (file:
                  {"flat": {dcp key: value}, "live": ..., "after": ...})}]}

Per case, on every rank:
  1. build the model on the meta device (fp32), fully_shard each block and the root,
     to_empty("cpu"); AdamW over the same FQN groups as the reference but with WRONG
     hyper-parameters (lr 0.5, betas (0.5, 0.5), eps 1e-3, weight_decay 0.5), so values
     that the load does not set are caught;
  2. (msd, osd) = get_state_dict(model, optim) -- torchtitan: flatten_optimizer_state_dict=
     True under {"model", "optimizer"}; app: {"app": {"model", "optim"}} (the DCP
     tutorial's AppState.state_dict(), nested dicts flattened by DCP); every tensor is
     poisoned in place (NaN / x+1 / ~x: differs in every element) and app's
     param_groups[*].params lists are replaced by a sentinel;
  3. dcp.load(state, checkpoint_id=out) (strict default planner);
  4. raw check: every loaded DCP key (model, optimizer state, hyper-parameters, params
     lists) equals what get_state_dict gives the full reference (tensors: full_tensor()
     bit-exact; 0-d step whole; values: equal with types); key sets equal;
  5. set_state_dict(model, optim, ...); live check: every parameter and buffer bit-exact,
     tie kept, each optim.state[param] (exp_avg/exp_avg_sq with the parameter's
     placements, step) bit-exact, per-group hyper-parameters and membership equal;
  6. dcp.save of the live state (torch's own FSDP2 save) into <out>.torch_fsdp2; rank 0:
     fsdpconv's .metadata has the same keys, kinds (tensor/bytes), sizes, dtypes and
     planner_data, and for DTensor entries the same chunk boxes;
  7. one more step on train_inputs(0) on every rank: the loss, then every parameter and
     every optimizer state tensor after optim.step() bit-exact against the full reference
     of a `world`-rank data-parallel step (optim_reference.step_reference).
Results go to result_dir/rank<R>.json ([{"case", "problems": [...]}]), rewritten after
every case so a hang still leaves the finished cases' results.
"""

import torch
from torch.distributed.checkpoint.api import CheckpointException

import common
import f2d_reference as ref
import optim_reference as oref

WRONG_HP = dict(lr=0.5, betas=(0.5, 0.5), eps=1e-3, weight_decay=0.5)
NOT_LOADED = ["<params list not loaded>"]


def build_fsdp_model(kind, mesh):
    from torch.distributed.fsdp import fully_shard
    model = oref.build_model(kind, meta=True)
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    return model


def _poison_(state):
    """Poison every tensor in place; app param lists get a sentinel."""
    from torch.distributed.tensor import DTensor
    with torch.no_grad():
        for k, v in oref.flatten(state).items():
            if isinstance(v, DTensor):
                loc = v.to_local()
                loc.copy_(ref.poisoned(loc))
            elif isinstance(v, torch.Tensor):
                v.copy_(ref.poisoned(v))
    app = state.get("app")
    if app is not None:
        for g in app["optim"]["param_groups"]:
            g["params"] = list(NOT_LOADED)


def _full(v):
    from torch.distributed.tensor import DTensor
    return v.full_tensor() if isinstance(v, DTensor) else v


def check_raw(state, want, rank):
    """Step 4.  Collective (full_tensor) in sorted key order on every rank."""
    from torch.distributed.tensor import DTensor, Shard
    probs = []
    got = oref.flatten(state)
    if set(got) != set(want):
        probs.append("get_state_dict keys differ from the full reference's (test setup?): "
                     "FSDP2 only %s, reference only %s" % (sorted(set(got) - set(want))[:5],
                                                          sorted(set(want) - set(got))[:5]))
    for k in sorted(set(got) & set(want)):
        v, w = got[k], want[k]
        if isinstance(v, DTensor) and tuple(v.placements) != (Shard(0),):
            probs.append("%s: live placements %s (FSDP2 changed?)" % (k, v.placements))
        g = _full(v)
        if rank == 0:
            d = oref.value_diff(g, w)
            if d:
                probs.append("loaded %s: %s" % (k, d))
    return probs


def check_live(model, optim, live, rank, what):
    """Parameters, buffers, optimizer state and param groups against `live`
    (optim_reference.live_expected).  Collective in a fixed order."""
    from torch.distributed.tensor import DTensor
    probs = []
    if model.lm_head.weight is not model.embed_tokens.weight:
        probs.append("%s: lm_head.weight is no longer tied to embed_tokens.weight" % what)
    msd = live["model"]
    seen = set()
    for n, p in model.named_parameters(remove_duplicate=False):
        seen.add(n)
        g = _full(p.detach())
        if rank == 0:
            d = ref.diff(g, msd[n]) if n in msd else "not in the reference state dict"
            if d:
                probs.append("%s parameter %s: %s" % (what, n, d))
    for n, b in model.named_buffers():
        seen.add(n)
        if rank == 0:
            d = ref.diff(b, msd[n]) if n in msd else "not in the reference state dict"
            if d:
                probs.append("%s buffer %s: %s" % (what, n, d))
    if set(msd) - seen:
        probs.append("%s: reference keys the model lacks: %s" % (what, sorted(set(msd) - seen)))

    name_of = {}
    for n, p in model.named_parameters():
        name_of.setdefault(p, n)
    if len(optim.param_groups) != len(live["groups"]):
        return probs + ["%s: %d param groups, want %d" % (what, len(optim.param_groups),
                                                         len(live["groups"]))]
    in_groups = set()
    for gi, (grp, wgrp) in enumerate(zip(optim.param_groups, live["groups"])):
        names = [name_of[p] for p in grp["params"]]
        in_groups.update(names)
        if names != wgrp["params"]:
            probs.append("%s: param_groups[%d] params %s, want %s" % (what, gi, names,
                                                                     wgrp["params"]))
        hp = {k: v for k, v in grp.items() if k != "params"}
        whp = {k: v for k, v in wgrp.items() if k != "params"}
        if set(hp) != set(whp):
            probs.append("%s: param_groups[%d] keys %s, want %s" % (what, gi, sorted(hp),
                                                                   sorted(whp)))
        for k in sorted(set(hp) & set(whp)):
            d = oref.value_diff(hp[k], whp[k])
            if d:
                probs.append("%s: param_groups[%d].%s: %s" % (what, gi, k, d))
        for p, n in zip(grp["params"], names):
            st = optim.state.get(p, {})
            wst = live["state"].get(n, {})
            if set(st) != set(wst):
                probs.append("%s: state of %s has %s, want %s" % (what, n, sorted(st),
                                                                 sorted(wst)))
            for s in sorted(set(st) & set(wst)):
                v = st[s]
                if isinstance(v, DTensor) and (tuple(v.placements) != tuple(p.placements) or
                                               v.to_local().shape != p.to_local().shape):
                    probs.append("%s: state %s.%s placements %s local %s, parameter %s %s"
                                 % (what, n, s, v.placements, list(v.to_local().shape),
                                    p.placements, list(p.to_local().shape)))
                g = _full(v)
                if rank == 0:
                    d = oref.value_diff(g, wst[s])
                    if d:
                        probs.append("%s: state %s.%s: %s" % (what, n, s, d))
    extra = [name_of.get(p, "?") for p in optim.state if name_of.get(p) not in in_groups]
    if extra:
        probs.append("%s: optimizer state for parameters in no group: %s" % (what, extra))
    return probs


def run_case(rank, world, mesh, case):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    exp = torch.load(case["expected"], map_location="cpu", weights_only=True)
    layout = case["layout"]
    opts = oref.state_dict_options(layout)
    problems = []

    model = build_fsdp_model(case["kind"], mesh)
    optim = oref.make_adamw(model, case["groups"], WRONG_HP)
    msd, osd = get_state_dict(model, optim, options=opts)
    state = oref.nest_layout(msd, osd, layout)
    _poison_(state)

    dcp.load(state, checkpoint_id=case["out"])
    problems += check_raw(state, exp["flat"], rank)

    set_state_dict(model, optim, model_state_dict=msd, optim_state_dict=osd, options=opts)
    problems += check_live(model, optim, exp["live"], rank, "after set_state_dict")

    msd2, osd2 = get_state_dict(model, optim, options=opts)
    state2 = oref.nest_layout(msd2, osd2, layout)
    tdir = case["out"] + ".torch_fsdp2"
    dcp.save(state2, checkpoint_id=tdir)
    if rank == 0:
        try:
            problems += common.compare_with_torch_save(case["out"], tdir, oref.flatten(state2))
        except (Exception, CheckpointException):
            problems.append("comparing with torch's save raised: %s" % ref.short_exc())

    after = exp["after"]
    loss = oref.loss_of(model, oref.train_inputs(0))
    d = ref.diff(loss.detach(), after["loss"])
    if d:
        problems.append("loss of the resumed FSDP2 model: %s" % d)
    loss.backward()
    optim.step()
    optim.zero_grad(set_to_none=True)
    problems += check_live(model, optim, after, rank, "after one more step")
    return problems


def run_rank(rank, world, port, job):
    from torch.distributed.device_mesh import init_device_mesh

    results = []
    try:
        common.rank_init(rank, world, port, job.get("timeout", 120))
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("shard",))
    except (Exception, CheckpointException):
        results.append({"case": "*", "problems": [
            "rank %d: process group/mesh setup failed: %s" % (rank, ref.short_exc())]})
        common.write_rank_results(job["result_dir"], rank, results)
        return
    for case in job["cases"]:
        try:
            problems = run_case(rank, world, mesh, case)
        except (Exception, CheckpointException):
            problems = ["rank %d raised: %s" % (rank, ref.short_exc(6))]
        results.append({"case": case["name"], "problems": common.cap_problems(problems)})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()
