"""Interop test: the README's Python loading snippets, run exactly as printed, load fsdpconv's
output into FSDP2 models that then compute what the original model computes.

The snippets are README.md's ```python blocks after "<!-- recipe: NAME -->" lines
(common.readme_recipes): load-model (build_sharded, load_model), load-optim (load_training,
--optim's default torchtitan layout), load-app (the DCP tutorial's AppState, --layout app) and
load-safetensors (load_model_st, --format safetensors).
Every rank exec()s their text, unchanged and in README order, into one namespace and calls the
functions they define.

Input: a transformers Qwen2ForCausalLM (rotary embeddings: its inv_freq is a non-persistent
buffer, in no checkpoint) built from a config, two AdamW steps taken, then saved the ways users
have it: save_pretrained (an HF dir) and torch.save({"model", "optimizer"}) (integer-keyed
optimizer state).  fsdpconv converts them for --world-size 2: the HF dir alone, and the
training file with --select model --optim-select optimizer, once in the default layout and once
with --layout app; and the HF dir again with --format safetensors.

The whole test runs with torch.use_deterministic_algorithms(True), which makes torch.empty (and
so to_empty) fill new tensors with NaN: whatever the snippets do not overwrite shows up, and
never holds a right value by chance.

Checks, on 2 gloo ranks, each model built by the snippets from Qwen2ForCausalLM(config) on CPU:
  model        load_model of the HF-dir conversion: the logits of a fixed batch bit-exact with
               the original model's (same ops on the same all-gathered fp32 values, one thread)
  safetensors  load_model_st of the --format safetensors conversion: the same logits
  no-fix       load_model with the snippet's buffer restore line replaced by `pass`: the logits
               must differ (the check above can fail; inv_freq is left as to_empty made it)
  optim        build_sharded + AdamW with wrong hyper-parameters, load_training of the default
               layout: every parameter (full_tensor()), every optimizer state tensor
               (exp_avg, exp_avg_sq, step) and every hyper-parameter equal to the original's,
               bit-exact
  app          the same through load_app and the --layout app conversion
  unflattened  the README's claim: get_state_dict without flatten_optimizer_state_dict makes
               dcp.load of the default layout fail with "Missing key ... param_groups"

Exits 0 when every check passes, 1 otherwise.  SNIPPETS_KEEP=1 keeps the temp dir.
"""

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
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import common  # noqa: E402
import f2d_reference as ref  # noqa: E402

try:
    from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
    from transformers.utils import logging as hf_logging  # noqa: E402
    hf_logging.set_verbosity_error()
except ImportError:
    Qwen2ForCausalLM = None

SNIPPETS = ("load-model", "load-optim", "load-app", "load-safetensors")
HP = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
WRONG_HP = dict(lr=0.5, betas=(0.5, 0.5), eps=1e-3, weight_decay=0.5)
WORLD = 2


def qwen2():
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


def batch(i):
    return torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(100 + i))


def write_inputs(tmp):
    """The trained original, its files, and what a load must give back."""
    torch.manual_seed(1234)
    m = qwen2()
    opt = torch.optim.AdamW(m.parameters(), **HP)
    for i in (0, 2):   # two steps: get_state_dict's own state init leaves step == 1
        m(input_ids=batch(i)).logits.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    m.eval()
    with torch.no_grad():
        logits = m(input_ids=batch(1)).logits
    m.save_pretrained(os.path.join(tmp, "qwen2"))
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict()},
               os.path.join(tmp, "train.pt"))
    names = {id(p): n for n, p in m.named_parameters()}
    want = {"logits": logits,
            "params": {n: p.detach().clone() for n, p in m.named_parameters()},
            "state": {names[id(p)]: dict(s) for p, s in opt.state.items()},
            "hp": {k: v for k, v in opt.param_groups[0].items() if k != "params"}}
    path = os.path.join(tmp, "expected.pt")
    torch.save(want, path)
    return path


def without_buffer_fix(code):
    """load-model with its one buffer-restoring line replaced by `pass`."""
    fixed, n = re.subn(r"(?m)^(\s*)model\.get_buffer\(name\)\.copy_\(buf\)$", r"\1pass", code)
    if n != 1:
        raise ValueError("load-model has %d get_buffer(name).copy_(buf) lines, want 1" % n)
    return fixed


# ------------------------------------------------------------------------------ ranks

def _full(t):
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


def run_snippets(codes):
    ns = {"__name__": "readme"}
    for name, code in codes:
        exec(compile(code, "README.md recipe %s" % name, "exec"), ns)
    return ns


def logits_of(model):
    model.eval()
    with torch.no_grad():
        return model(input_ids=batch(1)).logits


def check_model(ns, case, want):
    got = logits_of(ns[case["load"]](qwen2, case["ckpt"], "cpu"))
    d = ref.diff(got, want["logits"])
    if case["expect_equal"]:
        return ["logits: %s" % d] if d else []
    return [] if d else ["logits equal the original's without the buffer fix: the check "
                         "cannot fail"]


def check_training(model, optim, want):
    probs = []
    for n, p in model.named_parameters():
        d = ref.diff(_full(p.detach()), want["params"][n])
        if d:
            probs.append("%s: %s" % (n, d))
    names = {id(p): n for n, p in model.named_parameters()}
    got_state = {names[id(p)]: s for p, s in optim.state.items()}
    if set(got_state) != set(want["state"]):
        probs.append("optimizer state for %s, want %s" % (sorted(got_state),
                                                         sorted(want["state"])))
    for n, ws in want["state"].items():
        gs = got_state.get(n, {})
        for k, v in ws.items():
            d = ref.diff(_full(gs[k]), v) if k in gs else "missing"
            if d:
                probs.append("state %s.%s: %s" % (n, k, d))
    for g in optim.param_groups:
        for k, v in want["hp"].items():
            if g.get(k) != v:
                probs.append("param_groups %s: %r, want %r" % (k, g.get(k), v))
    return probs


def check_optim(ns, case, want):
    model = ns["build_sharded"](qwen2, "cpu")
    optim = torch.optim.AdamW(model.parameters(), **WRONG_HP)
    ns[case["load"]](model, optim, case["ckpt"])
    return check_training(model, optim, want)


def check_unflattened(ns, case, want):
    """README: get_state_dict's default (unflattened) optimizer keys fail on this layout."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model = ns["build_sharded"](qwen2, "cpu")
    optim = torch.optim.AdamW(model.parameters(), **WRONG_HP)
    msd, osd = get_state_dict(model, optim)
    try:
        dcp.load({"model": msd, "optimizer": osd}, checkpoint_id=case["ckpt"])
    except (Exception, CheckpointException) as e:
        msg = str(e)
        if "Missing key in checkpoint state_dict: optimizer.param_groups.0.lr" in msg:
            return []
        return ["failed, but not with the README's message: %s" % msg[-300:]]
    return ["dcp.load succeeded: the README's warning is wrong"]


CHECKS = {"model": check_model, "optim": check_optim, "unflattened": check_unflattened}


def run_rank(rank, world, port, job):
    results = []
    try:
        common.rank_init(rank, world, port, job["timeout"])
        want = torch.load(job["expected"], weights_only=True)
        for case in job["cases"]:
            try:
                probs = CHECKS[case["check"]](run_snippets(case["codes"]), case, want)
            except (Exception, CheckpointException):
                probs = ["raised: %s" % ref.short_exc()]
            results.append({"case": case["name"], "problems": common.cap_problems(probs)})
            common.write_rank_results(job["result_dir"], rank, results)
    except (Exception, CheckpointException):
        results.append({"case": "*", "problems": ["setup failed: %s" % ref.short_exc()]})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


# ------------------------------------------------------------------------------ main

def main():
    if Qwen2ForCausalLM is None:
        print("transformers is not installed in this venv (make venv installs it)")
        return 1
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)   # torch.empty / to_empty fill with NaN
    t0 = time.time()
    rep = common.Report("load_snippets")
    tmp = tempfile.mkdtemp(prefix="snippets_interop_")
    try:
        found = common.readme_recipes("python")
        rep.case("README has python recipes %s" % ", ".join(SNIPPETS),
                 ["README.md lacks recipe %s" % n for n in SNIPPETS if n not in found])
        codes = [(n, found.get(n, "")) for n in SNIPPETS]
        expected = write_inputs(tmp)
        optim = ["--select", "model", "--optim-select", "optimizer"]
        convert = {"model": ["qwen2"], "tt": optim + ["train.pt"],
                   "app": optim + ["--layout", "app", "train.pt"],
                   "st": ["--format", "safetensors", "qwen2"]}
        for name, args in convert.items():   # run in tmp, where the inputs are
            r = subprocess.run([common.fsdpconv_path(), "full-to-dcp", "--world-size",
                                str(WORLD), "-o", name] + args, cwd=tmp, capture_output=True,
                               timeout=300)
            rep.case("fsdpconv full-to-dcp -o %s %s" % (name, " ".join(args)),
                     [r.stderr.decode()] if r.returncode else [])
        try:
            no_fix = [(n, without_buffer_fix(c) if n == "load-model" else c) for n, c in codes]
            probs = []
        except ValueError as e:
            no_fix, probs = codes, [str(e)]
        rep.case("no-fix: the buffer restore line found in load-model", probs)
        path = lambda n: os.path.join(tmp, n)  # noqa: E731
        cases = [
            dict(name="model: load_model gives the original's logits bit-exact",
                 check="model", codes=codes, ckpt=path("model"), load="load_model",
                 expect_equal=True),
            dict(name="safetensors: load_model_st gives the original's logits bit-exact",
                 check="model", codes=codes, ckpt=path("st"), load="load_model_st",
                 expect_equal=True),
            dict(name="no-fix: without the buffer restore the logits differ",
                 check="model", codes=no_fix, ckpt=path("model"), load="load_model",
                 expect_equal=False),
            dict(name="optim: load_training (default layout) restores parameters and AdamW "
                 "state bit-exact", check="optim", codes=codes, ckpt=path("tt"),
                 load="load_training"),
            dict(name="app: load_app (--layout app) restores parameters and AdamW state "
                 "bit-exact", check="optim", codes=codes, ckpt=path("app"), load="load_app"),
            dict(name="unflattened: get_state_dict's default keys fail with the README's "
                 "Missing key", check="unflattened", codes=codes, ckpt=path("tt")),
        ]
        job = {"cases": cases, "timeout": 120, "expected": expected,
               "result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_")}
        res = common.launch_ranks(run_rank, WORLD, job, [c["name"] for c in cases], 180)
        for c in cases:
            rep.case(c["name"], res[c["name"]])
    finally:
        if os.environ.get("SNIPPETS_KEEP"):
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("(%.0fs, torch %s)" % (time.time() - t0, torch.__version__))
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
