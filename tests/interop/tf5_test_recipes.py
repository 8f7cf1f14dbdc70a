"""Interop test under transformers 5 (the venv-tf5 venv): the README's MoE recipes, run
exactly as printed, on real transformers 5 models whose state_dict() holds stacked, fused
experts while save_pretrained writes (as every Hub MoE checkpoint holds) one tensor per
expert.  run.sh runs tests/interop/tf5_*.py with the transformers 5 python; env TF4_PYTHON
names the main venv's python (transformers 4.57.1) for the export check.

Inputs, built in a temp dir under the names the recipes use (random init, float32):
  mixtral-hf/     MixtralForCausalLM (2 layers, 4 experts) via save_pretrained:
                  block_sparse_moe.experts.E.w1/w2/w3.weight, block_sparse_moe.gate.weight
  qwen3-moe-hf/   Qwen3MoeForCausalLM (2 layers, 4 experts) via save_pretrained:
                  mlp.experts.E.gate_proj/up_proj/down_proj.weight

Checks:
  recipes         mixtral-hf5, qwen3-moe-hf5 and mixtral-export are README blocks also printed
                  in the man pages (full-to-dcp's; the export in dcp-to-full's), and run with
                  `fsdpconv` on PATH in the temp dir, exit 0
  hf5             for each model: 4 gloo ranks, the transformers 5 model meta-initialised,
                  fully_shard per decoder layer and at the root, to_empty, local shards
                  poisoned, dcp.load(model.state_dict()); every full_tensor() bit-exact with
                  the same model loaded by from_pretrained (the reference, whose
                  conversion_mapping stacks and fuses the experts), placements Shard(0)
  export          mixtral-export (dcp-to-full back to the per-expert layout) loads with
                  from_pretrained under transformers 5 (bit-exact with from_pretrained of
                  mixtral-hf) and, in TF4_PYTHON, under transformers 4.57 (bit-exact with
                  4.57's from_pretrained of mixtral-hf); its safetensors hold the per-expert
                  keys of mixtral-hf, byte for byte

Exits 0 when every check passes, 1 otherwise.  RECIPES_KEEP=1 keeps the temp dir.
"""

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
from transformers import (MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig,  # noqa: E402
                          Qwen3MoeForCausalLM)
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

IMPORTS = {"mixtral-hf5": ("mixtral-hf", "mixtral-dcp", "mixtral"),
           "qwen3-moe-hf5": ("qwen3-moe-hf", "qwen3-moe-dcp", "qwen3_moe")}
MAN = {"mixtral-hf5": "fsdpconv-full-to-dcp.1", "qwen3-moe-hf5": "fsdpconv-full-to-dcp.1",
       "mixtral-export": "fsdpconv-dcp-to-full.1"}


def build(kind):
    common_cfg = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, num_experts_per_tok=2)
    if kind == "mixtral":
        return MixtralForCausalLM, MixtralConfig(intermediate_size=48, num_local_experts=4,
                                                 **common_cfg)
    return Qwen3MoeForCausalLM, Qwen3MoeConfig(intermediate_size=48, moe_intermediate_size=24,
                                               num_experts=4, head_dim=8, **common_cfg)


def write_inputs(tmp):
    torch.manual_seed(0)
    for hf_dir, _, kind in IMPORTS.values():
        cls, cfg = build(kind)
        cls(cfg).save_pretrained(os.path.join(tmp, hf_dir))


def reference(path, kind):
    cls, _ = build(kind)
    m = cls.from_pretrained(path, dtype=torch.float32)
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def check_man(recipes):
    probs = []
    for name, page in MAN.items():
        with open(os.path.join(common.ROOT, "man", page)) as f:
            man = f.read().replace("\\e", "\\")
        if name not in recipes:
            probs.append("README.md lacks recipe %s" % name)
        elif recipes[name] not in man:
            probs.append("recipe %s is not in man/%s as printed in README.md" % (name, page))
    return probs


def run_recipe(cmd, tmp, bindir):
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run(["sh", "-c", cmd], cwd=tmp, env=env, capture_output=True, timeout=300)
    if r.returncode != 0:
        return ["exit %d: %s" % (r.returncode, (r.stdout + r.stderr).decode()[-1500:])]
    return []


# ------------------------------------------------------------------------------ FSDP2 ranks

def rank_check(mesh, case):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Shard

    want = torch.load(case["expected"], weights_only=True)
    cls, cfg = build(case["kind"])
    with torch.device("meta"):
        m = cls(cfg)
    for layer in m.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    m.to_empty(device="cpu")
    sd = m.state_dict()
    with torch.no_grad():
        for t in sd.values():
            loc = t.to_local() if isinstance(t, DTensor) else t
            loc.copy_(ref.poisoned(loc))
    dcp.load(sd, checkpoint_id=case["out"])
    problems = []
    if set(sd) != set(want):
        problems.append("model keys != from_pretrained keys: %s" % sorted(set(sd) ^ set(want))[:5])
    for k in sorted(set(sd) & set(want)):
        t = sd[k]
        if isinstance(t, DTensor) and tuple(t.placements) != (Shard(0),):
            problems.append("%s: placements %s" % (k, t.placements))
        d = ref.diff(t.full_tensor() if isinstance(t, DTensor) else t, want[k])
        if d:
            problems.append("%s: %s" % (k, d))
    return problems


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


# ------------------------------------------------------------------------------ export

TF4_CHECK = r"""
import sys, torch, transformers
from transformers import MixtralForCausalLM
src, out = sys.argv[1], sys.argv[2]
a = MixtralForCausalLM.from_pretrained(src, torch_dtype=torch.float32).state_dict()
b = MixtralForCausalLM.from_pretrained(out, torch_dtype=torch.float32).state_dict()
bad = sorted(set(a) ^ set(b)) + [k for k in set(a) & set(b) if not (
    a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and
    torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)))]
print("transformers", transformers.__version__, "keys", len(a), "bad", bad[:5])
sys.exit(1 if bad or not a else 0)
"""


def check_export(tmp):
    from safetensors.torch import load_file
    src, out = os.path.join(tmp, "mixtral-hf"), os.path.join(tmp, "mixtral-export")
    probs = []
    a = load_file(os.path.join(src, "model.safetensors"))
    b = load_file(os.path.join(out, "model.safetensors"))
    if set(a) != set(b):
        probs.append("export keys != mixtral-hf keys: %s" % sorted(set(a) ^ set(b))[:5])
    probs += ["%s: %s" % (k, ref.diff(b[k], a[k])) for k in sorted(set(a) & set(b))
              if ref.diff(b[k], a[k])]
    want, got = reference(src, "mixtral"), reference(out, "mixtral")
    probs += ["transformers 5 from_pretrained %s: %s" % (k, ref.diff(got[k], want[k]))
              for k in sorted(want) if k not in got or ref.diff(got[k], want[k])]
    tf4 = os.environ.get("TF4_PYTHON", os.path.expanduser("~/.cache/fsdpconv/venv/bin/python"))
    r = subprocess.run([tf4, "-c", TF4_CHECK, src, out], capture_output=True, timeout=300)
    print("    export under %s: %s" % (tf4, r.stdout.decode().strip()))
    if r.returncode != 0:
        probs.append("transformers 4.57 from_pretrained of the export (%s): exit %d: %s" % (
            tf4, r.returncode, (r.stdout + r.stderr).decode()[-800:]))
    return probs


# ------------------------------------------------------------------------------ main

def main():
    if not transformers.__version__.startswith("5."):
        print("transformers %s, not 5.x (run with the venv-tf5 python)" % transformers.__version__)
        return 1
    torch.set_num_threads(1)
    t0 = time.time()
    rep = common.Report("recipes-tf5")
    tmp = tempfile.mkdtemp(prefix="recipes_tf5_")
    bindir = tempfile.mkdtemp(dir=tmp, prefix="bin_")
    os.symlink(common.fsdpconv_path(), os.path.join(bindir, "fsdpconv"))
    try:
        recipes = common.readme_recipes("sh")
        rep.case("README has recipes %s, also in the man pages" % ", ".join(MAN),
                 check_man(recipes))
        write_inputs(tmp)
        cases = []
        for name, (hf_dir, out, kind) in IMPORTS.items():
            p = run_recipe(recipes.get(name, "false"), tmp, bindir)
            rep.case("%s: fsdpconv run as printed" % name, p)
            if p:
                continue
            exp = os.path.join(tmp, "%s_expected.pt" % kind)
            torch.save(reference(os.path.join(tmp, hf_dir), kind), exp)
            cases.append({"name": name, "kind": kind, "out": os.path.join(tmp, out),
                          "expected": exp})
        if cases:
            job = {"cases": cases, "timeout": 180,
                   "result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_")}
            res = common.launch_ranks(run_rank, 4, job, [c["name"] for c in cases], 180)
            for c in cases:
                rep.case("%s: transformers %s model, fully_shard on 4 gloo ranks, dcp.load: every "
                         "full_tensor() bit-exact with from_pretrained" % (
                             c["name"], transformers.__version__), res[c["name"]])
        p = run_recipe(recipes.get("mixtral-export", "false"), tmp, bindir)
        if not p:
            try:
                p = check_export(tmp)
            except Exception:
                p = ["raised: %s" % ref.short_exc()]
        rep.case("mixtral-export: run as printed; from_pretrained under transformers 5 and "
                 "4.57 bit-exact, per-expert keys as save_pretrained wrote them", p)
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
