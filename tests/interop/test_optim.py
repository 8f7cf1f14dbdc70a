"""Interop test: `fsdpconv full-to-dcp --optim` resumes a real FSDP2 training job exactly.

Reference (one process, full CPU model, torch.set_num_threads(1)): fixtures/gen/tiny_model.py,
AdamW(lr 1e-3, betas (0.9, 0.95), weight_decay 0.01) trained 2 steps on two different
batches (vit_pos_embed is frozen: no state; embed_tokens/lm_head tied: state once).  Saved
with torch.save in the two forms fsdpconv reads:
  ids   optim.state_dict() (integer ids), inside {"model", "optimizer", "epoch"} (read with
        --select model --optim-select optimizer) or alone (--optim FILE); the ids are mapped
        to model keys in parameter order, which needs --optim-skip for the frozen parameter
        and the float buffer `temperature`
  fqn   FSDP1's FQN-keyed full optim state dict (what FSDP.full_optim_state_dict /
        FSDP.optim_state_dict return: {"state": {fqn: ...}, "param_groups": [{...,
        "params": [fqn, ...]}]}), alone (--optim FILE) or inside a dict (--optim-select)
Scenarios: base (one param group); groups2 (two groups with different lr/betas/eps/
weight_decay, contiguous in parameter order, so the ids form is still well defined);
conv (--conv2d-to-linear patch_embed.weight: parameter and exp_avg/exp_avg_sq reshaped;
the FSDP2 job runs BAGEL's Linear patch embedding); untied (the model file stores
lm_head.weight as a separate copy; --tie lm_head.weight=embed_tokens.weight); mot (the
vocabulary grown to 16 rows with --resize-rows and a --copy of the final norm: the FSDP2 job
runs optim_reference.MotTinyVitLM, the reference does the same edits to the model and its
AdamW state in PyTorch: mean rows, zero moments, copied state).

Each case converts with fsdpconv for --world-size N (N = 2, 3) and --layout app|torchtitan,
then checks:
  metadata  .metadata keys == the flattened keys of get_state_dict on the full reference
            (no missing or extra keys), tensor sizes and dtypes, bytes entries for values
  fsdp2     N gloo ranks (optim_worker.py): meta-device model, fully_shard, to_empty, AdamW
            with wrong hyper-parameters, get_state_dict, poison, dcp.load, every loaded key
            bit-exact / equal (types included) to the reference, set_state_dict, every
            parameter, buffer, optimizer state tensor (full_tensor()) and per-group
            hyper-parameter equal, torch's own dcp.save of the same state has the same keys/
            sizes/dtypes/planner_data/chunk boxes; then one more step on the same batch on
            every rank: loss, parameters and optimizer state bit-exact against the full
            reference.  Bit-exactness is possible: each rank computes the same gradient g
            from all-gathered (identical) parameters; FSDP2 averages fp32 gradients with
            ReduceOp.AVG, which gloo computes as the sum followed by a division by N; the
            reference applies the same rounding (optim_reference.average_like_fsdp2_gloo):
            (g+g)/2 == g exactly for N = 2, ((g+g)+g)/3 differs from g in some elements for
            N = 3, and a plain single-process step would NOT match there.
Negative cases: ids form without --optim-skip, the common decay/no-decay grouping (param
groups not in parameter order), and an FQN the model lacks must exit 2 with a message naming
the keys, and leave no output directory.

Prints one line per case; exits 1 on any failure.  OPTIM_KEEP=1 keeps the temp dir.
"""

import copy
import os
import shutil
import sys
import tempfile
import time

import torch
from torch.distributed.checkpoint.api import CheckpointException

import common
import f2d_reference as ref
import optim_reference as oref
import optim_worker

HP = dict(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01)
HP2 = [HP, dict(lr=2e-3, betas=(0.85, 0.99), eps=1e-6, weight_decay=0.0)]
SKIP = ["--optim-skip", "^vit_pos_embed$", "--optim-skip", "^temperature$"]
TIE = ["--tie", "lm_head.weight=embed_tokens.weight"]
MOT = ["--resize-rows", "embed_tokens.weight=16", "--resize-rows", "lm_head.weight=16",
       "--copy", r"^norm\.(weight|bias)$=norm_moe_gen.\1"]
CONV = ["--conv2d-to-linear", "patch_embed.weight"]


# ------------------------------------------------------------------------- reference

def train(groups_of, hp, steps=2):
    m = oref.build_model("conv")
    groups = groups_of(oref.trainable_names(m))
    o = oref.make_adamw(m, groups, hp)
    for i in range(steps):
        oref.loss_of(m, oref.train_inputs(i)).backward()
        o.step()
        o.zero_grad(set_to_none=True)
    return m, o, groups


def write_forms(tmp, tag, m, o):
    """The checkpoint files of one trained reference; returns their paths."""
    msd = m.state_dict()
    osd = o.state_dict()
    fsd = oref.fsdp1_optim_state_dict(m, o)
    files = {}

    def save(name, obj):
        files[name] = os.path.join(tmp, "%s_%s.pt" % (tag, name))
        torch.save(obj, files[name])

    save("ids", {"model": msd, "optimizer": osd, "epoch": 2})
    save("fqn", {"model": msd, "optimizer": fsd, "epoch": 2})
    save("model", msd)
    save("optim_ids", osd)
    save("optim_fqn", fsd)
    untied = dict(msd)
    untied["lm_head.weight"] = msd["lm_head.weight"].clone()
    save("untied", untied)
    return files


def to_linear_state(names, msd, osd):
    """The reference after BAGEL's convert_conv2d_to_linear: parameter and its Adam moments."""
    msd = dict(msd)
    msd["patch_embed.weight"] = ref.conv2d_to_linear(msd["patch_embed.weight"])
    osd = copy.deepcopy(osd)
    i = names.index("patch_embed.weight")
    for k in ("exp_avg", "exp_avg_sq"):
        osd["state"][i][k] = ref.conv2d_to_linear(osd["state"][i][k])
    return msd, osd


def make_scenarios(tmp):
    torch.set_num_threads(1)
    base_m, base_o, base_g = train(lambda n: [n], HP)
    split = None

    def two(names):
        nonlocal split
        split = names.index("blocks.1.norm1.weight")
        return [names[:split], names[split:]]

    g2_m, g2_o, g2_g = train(two, HP2)
    names = oref.trainable_names(base_m)
    lin_msd, lin_osd = to_linear_state(names, base_m.state_dict(), base_o.state_dict())
    mot_msd, mot_osd = oref.to_mot_state(base_m, base_o)
    with torch.device("meta"):
        mot_names = oref.trainable_names(oref.MotTinyVitLM())
    return {
        "base": dict(kind="conv", groups=base_g, hp=HP, files=write_forms(tmp, "base", base_m,
                                                                          base_o),
                     msd=base_m.state_dict(), osd=base_o.state_dict()),
        "groups2": dict(kind="conv", groups=g2_g, hp=HP2,
                        files=write_forms(tmp, "groups2", g2_m, g2_o),
                        msd=g2_m.state_dict(), osd=g2_o.state_dict()),
        "conv": dict(kind="linear", groups=base_g, hp=HP, files=None, msd=lin_msd,
                     osd=lin_osd),
        "mot": dict(kind="mot", groups=[mot_names], hp=HP, files=None, msd=mot_msd,
                    osd=mot_osd),
    }


def expected_for(sc, layout, world, cache):
    key = (id(sc), layout, world)
    if key not in cache:
        m, o = oref.rebuild(sc["kind"], sc["msd"], sc["groups"], sc["hp"], sc["osd"])
        flat = oref.expected_flat(m, o, layout)
        live = oref.live_expected(m, o)
        after = oref.step_reference(m, o, world)
        cache[key] = dict(flat=flat, live=live, after=after)
    return cache[key]


# ------------------------------------------------------------------------------ cases

def make_cases(sc):
    """(N, layout, scenario, form label, input, fsdpconv args)."""
    base = sc["base"]["files"]
    g2 = sc["groups2"]["files"]
    sel = ["--select", "model", "--optim-select", "optimizer"]
    cases = []

    def add(world, layout, scen, label, inp, args):
        name = "ws=%d %-10s %-7s %s" % (world, layout, scen, label)
        cases.append(dict(name=name, world=world, layout=layout, scen=scen, input=inp,
                          args=list(args) + ["--layout", layout]))

    for layout in ("app", "torchtitan"):
        add(2, layout, "base", "ids via --optim-select", base["ids"], sel + SKIP)
        add(2, layout, "base", "fqn via --optim FILE", base["model"],
            ["--optim", base["optim_fqn"]])
        add(3, layout, "base", "ids via --optim FILE", base["model"],
            ["--optim", base["optim_ids"]] + SKIP)
        add(3, layout, "base", "fqn via --optim-select", base["fqn"], sel)
    add(2, "torchtitan", "conv", "ids via --optim-select + --conv2d-to-linear", base["ids"],
        sel + SKIP + CONV)
    add(3, "app", "conv", "fqn via --optim FILE + --conv2d-to-linear", base["model"],
        ["--optim", base["optim_fqn"]] + CONV)
    add(2, "app", "base", "ids via --optim FILE, untied storage + --tie", base["untied"],
        ["--optim", base["optim_ids"]] + SKIP + TIE)
    add(3, "torchtitan", "groups2", "fqn via --optim FILE, 2 param groups", g2["model"],
        ["--optim", g2["optim_fqn"]])
    add(3, "app", "groups2", "ids via --optim-select, 2 param groups", g2["ids"], sel + SKIP)
    # state follows --resize-rows (zero rows) and --copy (copied state), then one more step
    for world, layout in ((2, "torchtitan"), (3, "app")):
        add(world, layout, "mot", "ids + --resize-rows + --copy", base["ids"], sel + SKIP + MOT)
    return cases


def convert(case, tmp):
    out = os.path.join(tmp, "out_%d" % case["idx"])
    args = ["full-to-dcp", "--world-size", str(case["world"]), "-o", out] + case["args"] + [
        case["input"]]
    rc, so, se = common.run_fsdpconv(*args)
    case["out"] = out
    case["cmd"] = "fsdpconv " + " ".join(a.replace(tmp + os.sep, "$TMP/") for a in args)
    if rc != 0:
        return ["fsdpconv exit %d: %s" % (rc, (so + se).strip()[-1500:])]
    return []


def check_metadata(case, flat):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import (BytesStorageMetadata,
                                                       TensorStorageMetadata)
    md = dcp.FileSystemReader(case["out"]).read_metadata()
    got, want = set(md.state_dict_metadata), set(flat)
    probs = []
    if got != want:
        probs.append("metadata keys: missing %s, unexpected %s" % (sorted(want - got)[:6],
                                                                 sorted(got - want)[:6]))
    for k in sorted(got & want):
        m, w = md.state_dict_metadata[k], flat[k]
        if isinstance(w, torch.Tensor):
            if not isinstance(m, TensorStorageMetadata):
                probs.append("metadata %s: %s, want a tensor" % (k, type(m).__name__))
            elif tuple(m.size) != tuple(w.shape) or m.properties.dtype != w.dtype:
                probs.append("metadata %s: %s %s, want %s %s" % (
                    k, list(m.size), m.properties.dtype, list(w.shape), w.dtype))
        elif not isinstance(m, BytesStorageMetadata):
            probs.append("metadata %s: %s, want a bytes entry (%s value)"
                         % (k, type(m).__name__, type(w).__name__))
    return probs


# ------------------------------------------------------------------------ FSDP2 ranks

def run_world(world, cases, tmp, timeout):
    """All cases of one world size in one process group; {case name: [problems]}."""
    rdir = tempfile.mkdtemp(dir=tmp, prefix="ranks_")
    job = {"timeout": timeout, "result_dir": rdir,
           "cases": [{k: c[k] for k in ("name", "out", "expected", "layout", "kind", "groups")}
                     for c in cases]}
    return common.launch_ranks(optim_worker.run_rank, world, job, [c["name"] for c in cases],
                               timeout * (len(cases) + 1))


# -------------------------------------------------------------------- negative cases

def negative_cases(sc, tmp):
    """(label, args, input, substrings the message must contain)."""
    base = sc["base"]["files"]
    # decay / no-decay grouping (torchtitan/nanoGPT style): ids are not in parameter order
    m = oref.build_model("conv")
    named = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    o = torch.optim.AdamW([{"params": [p for n, p in named if p.dim() >= 2]},
                           {"params": [p for n, p in named if p.dim() < 2],
                            "weight_decay": 0.0}], **HP)
    oref.loss_of(m, oref.train_inputs(0)).backward()
    o.step()
    nd = os.path.join(tmp, "decay_nodecay_optim.pt")
    torch.save(o.state_dict(), nd)
    # an FQN-keyed state naming a tensor the model does not have
    fsd = torch.load(base["optim_fqn"], weights_only=True)
    fsd["state"]["blocks.9.attn.qkv.weight"] = fsd["state"].pop("blocks.1.attn.qkv.weight")
    for g in fsd["param_groups"]:
        g["params"] = ["blocks.9.attn.qkv.weight" if p == "blocks.1.attn.qkv.weight" else p
                       for p in g["params"]]
    bad_fqn = os.path.join(tmp, "bad_fqn_optim.pt")
    torch.save(fsd, bad_fqn)
    sel = ["--select", "model", "--optim-select", "optimizer"]
    return [
        ("ids without --optim-skip (frozen vit_pos_embed, float buffer temperature)",
         sel, base["ids"], ["state.0", "vit_pos_embed"]),
        ("ids without --optim-skip '^temperature$' (float buffer)",
         sel + ["--optim-skip", "^vit_pos_embed$"], base["ids"], ["state.2", "temperature"]),
        ("ids of decay/no-decay param groups (not in parameter order)",
         ["--optim", nd] + SKIP, base["model"], ["state.1", "logit_scale"]),
        ("fqn naming a tensor the model lacks", ["--optim", bad_fqn], base["model"],
         ["blocks.9.attn.qkv.weight"]),
    ]


def run_negative(label, args, inp, needles, tmp, n):
    out = os.path.join(tmp, "neg_%d" % n)
    full = ["full-to-dcp", "--world-size", "2", "-o", out] + args + [inp]
    rc, so, se = common.run_fsdpconv(*full)
    cmd = "fsdpconv " + " ".join(a.replace(tmp + os.sep, "$TMP/") for a in full)
    msg = (so + se).strip()
    probs = []
    if rc != 2:
        probs.append("exit %d, want 2" % rc)
    missing = [s for s in needles if s not in msg]
    if missing:
        probs.append("message does not name %s" % missing)
    if os.path.exists(out):
        probs.append("output directory left behind")
    if probs:
        probs += ["message: %s" % (msg[-600:] or "(none)"), "reproduce: %s" % cmd]
    return probs, msg


# ------------------------------------------------------------------------------- main

def main():
    if not os.path.exists(common.fsdpconv_path()):
        print("fsdpconv binary not found: %s" % common.fsdpconv_path())
        return 1
    torch.set_num_threads(1)
    t0 = time.time()
    rep = common.Report("optim")
    tmp = tempfile.mkdtemp(prefix="optim_interop_")
    try:
        sc = make_scenarios(tmp)
        cases = make_cases(sc)
        cache = {}
        notes = {}
        for i, c in enumerate(cases):
            c["idx"] = i
            s = sc[c["scen"]]
            c["kind"], c["groups"] = s["kind"], s["groups"]
            c["probs"] = convert(c, tmp)
            if c["probs"]:
                continue
            e = expected_for(s, c["layout"], c["world"], cache)
            notes.setdefault(c["world"], e["after"]["grad_differs"])
            c["expected"] = os.path.join(tmp, "expected_%d.pt" % i)
            torch.save(e, c["expected"])
            c["nkeys"] = len(e["flat"])
            try:
                c["probs"] += check_metadata(c, e["flat"])
            except (Exception, CheckpointException):
                c["probs"].append("reading .metadata raised: %s" % ref.short_exc())
        for w in sorted(notes):
            print("note ws=%d: the %d-rank averaged gradient differs from the single-process "
                  "one in %d elements (base); the reference applies gloo's sum-then-divide, "
                  "so the resumed step is compared bit-exact" % (w, w, notes[w]))
        timeout = int(os.environ.get("OPTIM_TIMEOUT", "120"))
        for world in sorted({c["world"] for c in cases}):
            group = [c for c in cases if c["world"] == world and not c["probs"]]
            if not group:
                continue
            try:
                res = run_world(world, group, tmp, timeout)
            except (Exception, CheckpointException):
                res = {c["name"]: ["launch failed: %s" % ref.short_exc()] for c in group}
            for c in group:
                c["probs"] += res.get(c["name"], ["no result"])
        for c in cases:
            probs = list(c["probs"])
            if probs:
                probs.append("reproduce: %s" % c["cmd"])
                rep.case(c["name"], probs)
            else:
                rep.case("%s: %d keys loaded bit-exact into FSDP2, state/hyper-params set, "
                         "next step bit-exact" % (c["name"], c["nkeys"]), [])
        for n, (label, args, inp, needles) in enumerate(negative_cases(sc, tmp)):
            probs, msg = run_negative(label, args, inp, needles, tmp, n)
            rep.case("negative: %s -> exit 2: %s" % (label, msg.splitlines()[-1][:150]
                                                    if msg else ""), probs)
    finally:
        if os.environ.get("OPTIM_KEEP"):
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("(%.0fs, torch %s)" % (time.time() - t0, torch.__version__))
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
