"""Interop test: the README's Recipes, run exactly as printed, on models nobody in the project
wrote (real `transformers` classes), checked against PyTorch doing the same steps.

Inputs, built in a temp dir under the names the recipes use:
  qwen2-tiny/   Qwen2ForCausalLM (2 layers, vocab 64, tie_word_embeddings=True) saved with
                save_pretrained as sharded safetensors + model.safetensors.index.json (tied:
                the files hold no lm_head.weight)
  siglip-tiny/  SigLIP's vision transformer (3 layers, Conv2d patch embedding) as BAGEL's
                checkpoints name it (vision_model.*: transformers 4's SiglipVisionModel
                layout, whichever transformers runs), one model.safetensors
  extras.pt     BAGEL's freshly initialised modules (connector, time embedder, frozen
                position embedding, zero llm2vae), dumped once with torch.save
  fsdp1-full.pt {"model": the Qwen2 state dict under wrapper names (module., _orig_mod.,
                _checkpoint_wrapped_module.), "optimizer": FSDP1's FQN-keyed full optimizer
                state dict after one AdamW step}

Checks:
  recipes       every ```sh block after a "<!-- recipe: NAME -->" line of README.md is also in
                man/fsdpconv-full-to-dcp.1 (mdoc \\e unescaped), and runs with `fsdpconv` on PATH
                in the temp dir, exit 0
  bagel         BAGEL's steps done in PyTorch on the full state dicts (from_pretrained; vocab
                grown to 70 with the float64 mean row; lm_head untied as a copy; init_moe():
                every *_moe_gen parameter of the final model a copy of the one named without
                _moe_gen; last ViT layer dropped; conv2d->linear; bf16; EMA = a copy).  Then in
                4 gloo processes: the final model (Qwen2ForCausalLM with MoT copies, the SigLIP
                ViT with a Linear patch embedding, the extras) and its EMA meta-initialised,
                fully_shard per decoder layer and at the root, to_empty, local shards poisoned,
                dcp.load({"model", "ema_model"}); every full_tensor() bit-exact with the
                reference and placements FSDP2's, for --world-size 4 (the recipe) and
                --mesh replicate=2,shard=2 (the recipe with that one option swapped)
  fsdp1         dcp.load (no process group) of the keys torch's own get_state_dict gives the
                unwrapped model + AdamW in torchtitan's layout (flattened optimizer state):
                every key present, tensors bit-exact, hyper-parameters equal
  pad-vocab     dcp.load into Qwen2ForCausalLM(vocab 128, tied)'s state dict: embed_tokens is
                the original rows then zeros, lm_head the same bytes

Exits 0 when every check passes, 1 otherwise.  RECIPES_KEEP=1 keeps the temp dir.
"""

import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import common  # noqa: E402
import f2d_reference as ref  # noqa: E402

try:
    from transformers import (Qwen2Config, Qwen2ForCausalLM, SiglipVisionConfig,  # noqa: E402
                              SiglipVisionModel)
    from transformers.utils import logging as hf_logging  # noqa: E402
    hf_logging.set_verbosity_error()
except ImportError:
    Qwen2ForCausalLM = None

BF16 = torch.bfloat16
VOCAB, VOCAB_GROWN, DIM = 64, 70, 32
VIT_LAYERS, PATCH = 3, 4


# ------------------------------------------------------------------------------ models

def qwen2_config(vocab=VOCAB, tied=True):
    return Qwen2Config(vocab_size=vocab, hidden_size=DIM, intermediate_size=48,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=64, tie_word_embeddings=tied)


def siglip_config(layers=VIT_LAYERS):
    return SiglipVisionConfig(hidden_size=DIM, intermediate_size=48, num_hidden_layers=layers,
                              num_attention_heads=4, num_channels=3, image_size=16,
                              patch_size=PATCH)


class PositionEmbedding(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(n, dim), requires_grad=False)


class Extras(nn.Module):
    """BAGEL's modules that start from a fresh init (connector, time embedder, ...)."""

    def __init__(self):
        super().__init__()
        self.connector = nn.Sequential(nn.Linear(DIM, 48), nn.GELU(), nn.Linear(48, DIM))
        self.time_embedder = nn.Sequential(nn.Linear(16, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.vit_pos_embed = PositionEmbedding(16, DIM)
        self.llm2vae = nn.Linear(DIM, 8)


class SiglipViT(nn.Module):
    """BAGEL's ViT: SigLIP's vision transformer under `vision_model`, the names BAGEL's
    checkpoints hold (transformers 4's SiglipVisionModel nests it there; 5's is it)."""

    def __init__(self, cfg):
        super().__init__()
        vm = SiglipVisionModel(cfg)
        self.vision_model = getattr(vm, "vision_model", vm)


def bagel_model():
    """The final model of recipe (a): what BAGEL trains (structure only; values come from
    the checkpoint)."""
    m = Extras()
    llm = Qwen2ForCausalLM(qwen2_config(VOCAB_GROWN, tied=False))
    for layer in llm.model.layers:   # Qwen2MoTDecoderLayer's extra parameters
        for p in "qkvo":
            setattr(layer.self_attn, p + "_proj_moe_gen",
                    copy.deepcopy(getattr(layer.self_attn, p + "_proj")))
        layer.mlp_moe_gen = copy.deepcopy(layer.mlp)
        layer.input_layernorm_moe_gen = copy.deepcopy(layer.input_layernorm)
        layer.post_attention_layernorm_moe_gen = copy.deepcopy(layer.post_attention_layernorm)
    llm.model.norm_moe_gen = copy.deepcopy(llm.model.norm)
    m.language_model = llm
    vit = SiglipViT(siglip_config(VIT_LAYERS - 1))   # the last layer dropped
    emb = vit.vision_model.embeddings
    emb.patch_embedding = nn.Linear(3 * PATCH * PATCH, DIM)  # convert_conv2d_to_linear
    m.vit_model = vit
    return m


def write_inputs(tmp):
    torch.manual_seed(1234)
    llm = Qwen2ForCausalLM(qwen2_config())
    llm.save_pretrained(os.path.join(tmp, "qwen2-tiny"), max_shard_size="40KB")
    os.makedirs(os.path.join(tmp, "siglip-tiny"))
    save_file(SiglipViT(siglip_config()).state_dict(),
              os.path.join(tmp, "siglip-tiny", "model.safetensors"), metadata={"format": "pt"})
    ex = Extras()
    with torch.no_grad():
        ex.llm2vae.weight.zero_()
        ex.llm2vae.bias.zero_()
        ex.vit_pos_embed.pos_embed.copy_(torch.randn(16, DIM))
    torch.save(ex.state_dict(), os.path.join(tmp, "extras.pt"))
    # recipe (b): one AdamW step on the LLM, saved as an FSDP1 FULL_STATE_DICT with wrappers
    opt = torch.optim.AdamW(llm.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01)
    ids = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(5))
    llm(input_ids=ids).logits.float().pow(2).mean().backward()
    opt.step()
    names = {id(p): n for n, p in llm.named_parameters()}   # tied: named once
    osd = opt.state_dict()
    plist = [p for g in opt.param_groups for p in g["params"]]
    fsd = {"state": {names[id(plist[i])]: v for i, v in osd["state"].items()},
           "param_groups": [dict({k: v for k, v in g.items() if k != "params"},
                                 params=[names[id(plist[i])] for i in g["params"]])
                            for g in osd["param_groups"]]}
    wrapped = {}
    for k, v in llm.state_dict().items():
        k = re.sub(r"^model\.layers\.(\d+)\.", r"model.layers.\1._checkpoint_wrapped_module.", k)
        wrapped["module._orig_mod." + k] = v
    torch.save({"model": wrapped, "optimizer": fsd}, os.path.join(tmp, "fsdp1-full.pt"))
    return llm, opt


def bagel_reference(tmp):
    """BAGEL's start done in PyTorch: {"model.<fqn>": t, "ema_model.<fqn>": t}, bf16."""
    llm = Qwen2ForCausalLM.from_pretrained(os.path.join(tmp, "qwen2-tiny")).state_dict()
    vit = load_file(os.path.join(tmp, "siglip-tiny", "model.safetensors"))
    sd = {"language_model." + k: v for k, v in llm.items()}
    emb = sd["language_model.model.embed_tokens.weight"]
    mean = emb.double().mean(0).to(emb.dtype)      # resize_token_embeddings, mean rows
    grown = torch.cat([emb, mean.expand(VOCAB_GROWN - VOCAB, -1)])
    sd["language_model.model.embed_tokens.weight"] = grown
    sd["language_model.lm_head.weight"] = grown.clone()   # untied (tie_word_embeddings=False)
    for k, v in vit.items():
        if ".encoder.layers.%d." % (VIT_LAYERS - 1) not in k:
            sd["vit_model." + k] = v
    pe = "vit_model.vision_model.embeddings.patch_embedding.weight"
    sd[pe] = ref.conv2d_to_linear(sd[pe])
    sd.update(torch.load(os.path.join(tmp, "extras.pt"), weights_only=True))
    with torch.device("meta"):
        final = bagel_model().state_dict()
    for name in final:                              # init_moe()
        if "_moe_gen" in name:
            sd[name] = sd[name.replace("_moe_gen", "")].clone()
    problems = []
    if set(sd) != set(final):
        problems.append("reference keys != model keys: extra %s, missing %s" % (
            sorted(set(sd) - set(final))[:5], sorted(set(final) - set(sd))[:5]))
    for k in set(sd) & set(final):
        if tuple(sd[k].shape) != tuple(final[k].shape):
            problems.append("%s: reference %s, model %s" % (k, list(sd[k].shape),
                                                             list(final[k].shape)))
    out = {}
    for k, v in sd.items():
        v = v.to(BF16) if v.is_floating_point() else v
        out["model." + k] = v
        out["ema_model." + k] = v.clone()
    return out, problems


# ------------------------------------------------------------------------------ recipes

def check_man(recipes):
    with open(os.path.join(common.ROOT, "man", "fsdpconv-full-to-dcp.1")) as f:
        man = f.read().replace("\\e", "\\")
    return ["recipe %s is not in man/fsdpconv-full-to-dcp.1 as printed in README.md" % name
            for name, cmd in recipes.items() if cmd not in man]


def run_recipe(cmd, tmp, bindir):
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run(["sh", "-c", cmd], cwd=tmp, env=env, capture_output=True, timeout=300)
    if r.returncode != 0:
        return ["exit %d: %s" % (r.returncode, (r.stdout + r.stderr).decode()[-1500:])]
    return []


# ------------------------------------------------------------------------------ FSDP2 ranks

def fsdp_placements(mesh, ndim):
    from torch.distributed.tensor import Replicate, Shard
    if ndim == 0:
        return tuple(Replicate() for _ in range(mesh.ndim))
    return (Replicate(), Shard(0)) if mesh.ndim == 2 else (Shard(0),)


def bagel_rank_check(mesh, case):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    want = torch.load(case["expected"], weights_only=True)
    live = {}
    for name in ("model", "ema_model"):
        with torch.device("meta"):
            m = bagel_model()
        m = m.to(BF16)
        for layer in m.language_model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
        m.to_empty(device="cpu")
        live[name] = m
    state = {name: m.state_dict() for name, m in live.items()}
    problems = []
    with torch.no_grad():
        for name, sd in state.items():
            for k, t in sd.items():
                loc = t.to_local() if isinstance(t, DTensor) else t
                loc.copy_(ref.poisoned(loc))
    dcp.load(state, checkpoint_id=case["out"])
    for name, sd in state.items():
        for k in sorted(sd):
            t, key = sd[k], "%s.%s" % (name, k)
            if key not in want:
                problems.append("%s: not in the reference" % key)
                continue
            if isinstance(t, DTensor):
                if tuple(t.placements) != fsdp_placements(mesh, t.dim()):
                    problems.append("%s: placements %s" % (key, t.placements))
                t = t.full_tensor()
            d = ref.diff(t, want[key])
            if d:
                problems.append("%s: %s" % (key, d))
    return problems


def run_rank(rank, world, port, job):
    from torch.distributed.device_mesh import init_device_mesh

    results = []
    try:
        common.rank_init(rank, world, port, job["timeout"])
        for case in job["cases"]:
            shape = tuple(case["mesh"])
            names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
            mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
            try:
                probs = bagel_rank_check(mesh, case)
            except (Exception, CheckpointException):
                probs = ["raised: %s" % ref.short_exc()]
            results.append({"case": case["name"], "problems": common.cap_problems(probs)})
            common.write_rank_results(job["result_dir"], rank, results)
    except (Exception, CheckpointException):
        results.append({"case": "*", "problems": ["setup failed: %s" % ref.short_exc()]})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def run_fsdp(cases, tmp, world=4, timeout=180):
    job = {"cases": cases, "timeout": timeout,
           "result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_")}
    return common.launch_ranks(run_rank, world, job, [c["name"] for c in cases], timeout)


# ------------------------------------------------------------------------------ no-dist checks

def load_flat(out, want):
    """dcp.load (no process group) of want's keys into fresh tensors; problems."""
    import torch.distributed.checkpoint as dcp
    state = {k: ref.poisoned(v.clone()) if isinstance(v, torch.Tensor) else None
             for k, v in want.items()}
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    values = {k: v for k, v in want.items() if not isinstance(v, torch.Tensor)}
    dcp.load(dict(tensors, **{k: copy.deepcopy(v) for k, v in values.items()}),
             checkpoint_id=out, no_dist=True)
    probs = []
    for k, v in tensors.items():
        d = ref.diff(v, want[k])
        if d:
            probs.append("%s: %s" % (k, d))
    meta = dcp.FileSystemReader(out).read_metadata()
    missing = sorted(set(want) - set(meta.state_dict_metadata))
    extra = sorted(set(meta.state_dict_metadata) - set(want))
    if missing or extra:
        probs.append("keys: missing %s, extra %s" % (missing[:5], extra[:5]))
    return probs


def fsdp1_expected(llm, opt):
    """torchtitan's layout of the unwrapped model + optimizer, from torch's get_state_dict."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(llm, opt,
                              options=StateDictOptions(flatten_optimizer_state_dict=True))
    flat = {}
    for top, d in (("model", msd), ("optimizer", osd)):
        for k, v in d.items():
            flat["%s.%s" % (top, k)] = v
    return flat


def check_fsdp1(tmp, llm, opt):
    import torch.distributed.checkpoint as dcp
    want = fsdp1_expected(llm, opt)
    out = os.path.join(tmp, "step-1000")
    tensors = {k: v for k, v in want.items() if isinstance(v, torch.Tensor)}
    probs = load_flat(out, tensors)
    meta = dcp.FileSystemReader(out).read_metadata()
    missing = sorted(set(want) - set(meta.state_dict_metadata))
    extra = sorted(set(meta.state_dict_metadata) - set(want))
    probs = [p for p in probs if not p.startswith("keys:")]
    if missing or extra:
        probs.append("keys vs get_state_dict: missing %s, extra %s" % (missing[:5], extra[:5]))
    values = {k: v for k, v in want.items() if not isinstance(v, torch.Tensor)}
    got = {k: None for k in values}
    dcp.load(got, checkpoint_id=out, no_dist=True)
    for k, v in values.items():
        if got[k] != v:
            probs.append("%s: %r, torch %r" % (k, got[k], v))
    return probs


def check_pad_vocab(tmp):
    llm = Qwen2ForCausalLM.from_pretrained(os.path.join(tmp, "qwen2-tiny")).state_dict()
    emb = llm["model.embed_tokens.weight"]
    padded = torch.cat([emb, emb.new_zeros(128 - VOCAB, DIM)])
    want = dict(llm)
    want["model.embed_tokens.weight"] = padded
    want["lm_head.weight"] = padded
    with torch.device("meta"):
        keys = set(Qwen2ForCausalLM(qwen2_config(128)).state_dict())
    probs = [] if keys == set(want) else ["reference keys differ from the model's"]
    return probs + load_flat(os.path.join(tmp, "padded"), want)


# ------------------------------------------------------------------------------ main

def main():
    if Qwen2ForCausalLM is None:
        print("transformers is not installed in this venv (make venv installs it)")
        return 1
    torch.set_num_threads(1)
    t0 = time.time()
    rep = common.Report("recipes")
    tmp = tempfile.mkdtemp(prefix="recipes_interop_")
    bindir = tempfile.mkdtemp(dir=tmp, prefix="bin_")
    os.symlink(common.fsdpconv_path(), os.path.join(bindir, "fsdpconv"))
    try:
        recipes = common.readme_recipes("sh")
        rep.case("README has recipes bagel, fsdp1, pad-vocab, also in the man page",
                 (["README.md lacks recipe %s" % n for n in ("bagel", "fsdp1", "pad-vocab")
                   if n not in recipes] + check_man(recipes)))
        llm, opt = write_inputs(tmp)
        expected, probs = bagel_reference(tmp)
        rep.case("bagel: reference state dict matches the final model's keys and shapes",
                 probs)
        exp_path = os.path.join(tmp, "bagel_expected.pt")
        torch.save(expected, exp_path)
        bagel = recipes.get("bagel", "")
        hsdp = bagel.replace("--world-size 4", "--mesh replicate=2,shard=2").replace(
            "-o bagel-start", "-o bagel-start-hsdp")
        cases = []
        for name, cmd, out, mesh in (("--world-size 4", bagel, "bagel-start", [4]),
                                     ("--mesh replicate=2,shard=2", hsdp, "bagel-start-hsdp",
                                      [2, 2])):
            p = run_recipe(cmd, tmp, bindir)
            rep.case("bagel %s: fsdpconv run as printed" % name, p)
            if not p:
                cases.append({"name": "bagel %s" % name, "out": os.path.join(tmp, out),
                              "mesh": mesh, "expected": exp_path})
        if cases:
            res = run_fsdp(cases, tmp)
            for c in cases:
                rep.case("%s: %d tensors of model + EMA loaded into FSDP2 on 4 gloo ranks, every "
                         "full_tensor() bit-exact" % (c["name"], len(expected)), res[c["name"]])
        for name, check in (("fsdp1", lambda: check_fsdp1(tmp, llm, opt)),
                            ("pad-vocab", lambda: check_pad_vocab(tmp))):
            p = run_recipe(recipes.get(name, "false"), tmp, bindir)
            if not p:
                try:
                    p = check()
                except (Exception, CheckpointException):
                    p = ["raised: %s" % ref.short_exc()]
            rep.case("%s: run as printed, dcp.load gives torch's reference bit-exact" % name, p)
    finally:
        if os.environ.get("RECIPES_KEEP"):
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("(%.0fs, torch %s)" % (time.time() - t0, torch.__version__))
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
