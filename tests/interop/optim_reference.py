"""PyTorch-side reference for the optimizer interop test (test_optim.py, optim_worker.py).

Everything here runs in one process on CPU with full (unsharded) modules; no process group.

  LinearPatchTinyVitLM      tiny_model.TinyVitLM after BAGEL's convert_conv2d_to_linear: the
                            patch embedding is a Linear(3*4*4, 8) applied to packed patches
                            (channel fastest), so the model still runs forward
  MotTinyVitLM, to_mot_state(model, optim)
                            TinyVitLM grown to 16 vocabulary rows with a norm_moe_gen copy, and
                            the same edits done to a trained model and its AdamW state
  build_model(kind, meta)   "conv" (tiny_model.TinyVitLM), "linear" (LinearPatchTinyVitLM) or
                            "mot" (MotTinyVitLM)
  trainable_names(model)    FQNs of the parameters an optimizer gets: named_parameters()
                            order (shared parameters once, first name), requires_grad only
  make_adamw(model, groups, hp)
                            AdamW over the named parameters, one param group per FQN list;
                            hp: a dict of hyper-parameters per group (list) or one for all
  train_inputs(i)           the i-th training batch (i = 0 is tiny_model.example_inputs())
  loss_of(model, batch)     the scalar loss all tests use
  fsdp1_optim_state_dict(model, optim)
                            what FSDP.full_optim_state_dict / FSDP.optim_state_dict (FULL)
                            return for this optimizer: state and param_groups keyed by FQN
  expected_flat(model, optim, layout)
                            the flattened DCP keys -> values that dcp.load must produce
                            from a correct conversion: get_state_dict(model, optim) on the
                            full model, nested as {"app": {"model", "optim"}} (layout
                            "app", the DCP tutorial's AppState) or {"model", "optimizer"}
                            with flatten_optimizer_state_dict=True ("torchtitan"), then
                            flattened the way dcp.save flattens it
  live_expected(model, optim)
                            {"model": state_dict, "state": {fqn: {name: tensor}},
                             "groups": [{hp..., "params": [fqn, ...]}]}
  step_reference(model, optim, world)
                            one more step of a data-parallel job of `world` ranks that all
                            see train_inputs(0): gradients averaged the way FSDP2 on gloo
                            does it (see the docstring), then optim.step()
  same_value(a, b)          exact equality of hyper-parameter values, types included
  value_diff(got, want)     None or a one-line description (tensors via f2d_reference.diff)
"""

import copy
import math

import torch
import torch.nn as nn

import common  # noqa: F401  (puts fixtures/gen on sys.path, for tiny_model)
import f2d_reference as ref
import tiny_model

PATCH = 4


class PackedPatchLinear(nn.Linear):
    """BAGEL's Linear patch embedding, fed with pixels: packs the patches channel-fastest
    (f2d_reference.conv_patch_as_linear) and returns [N, D, h, w] like the Conv2d did, so
    TinyVitLM.forward runs unchanged."""

    def forward(self, x):
        n, _, h, w = x.shape
        y = ref.conv_patch_as_linear(x, self.weight, self.bias, PATCH)   # [N, L, D]
        return y.transpose(1, 2).reshape(n, self.out_features, h // PATCH, w // PATCH)


class LinearPatchTinyVitLM(tiny_model.TinyVitLM):
    def __init__(self, dim=8, vocab=11):
        super().__init__(dim=dim, vocab=vocab)
        conv = self.patch_embed
        # same slot in _modules: state_dict() and parameters() order are unchanged
        self.patch_embed = PackedPatchLinear(
            conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1], conv.out_channels)

    def _init_weights(self):
        pass   # values come from a checkpoint


class MotTinyVitLM(tiny_model.TinyVitLM):
    """tiny_model.TinyVitLM after a BAGEL-style start: vocabulary grown to 16 rows
    (--resize-rows) and a MoT copy norm_moe_gen of the final norm (--copy), used in forward
    so that it gets gradients and optimizer state."""

    VOCAB = 16

    def __init__(self, dim=8):
        super().__init__(dim=dim, vocab=self.VOCAB)
        self.register_buffer("position_ids", torch.arange(11).expand((1, -1)))
        self.norm_moe_gen = nn.LayerNorm(dim)

    def _init_weights(self):
        pass   # values come from a checkpoint

    def forward(self, pixel_values, input_ids):
        v = self.patch_embed(pixel_values).flatten(2).transpose(1, 2)
        v = v + self.vit_pos_embed + self.modality_embed[0]
        for blk in self.blocks:
            v = blk(v)
        v = self.connector(v)
        t = self.embed_tokens(input_ids) + self.modality_embed[1]
        x = torch.cat([v, t], dim=1)
        x = (self.norm(x) + self.norm_moe_gen(x)) * (self.logit_scale.exp() / self.temperature)
        return self.lm_head(x)


def to_mot_state(model, optim):
    """The reference of `--resize-rows embed_tokens.weight=16 --resize-rows lm_head.weight=16
    --copy '^norm\\.(weight|bias)$=norm_moe_gen.\\1'` done in PyTorch on a trained TinyVitLM:
    new vocabulary rows are the float64 mean of the old ones rounded once, their Adam moments
    zero and step unchanged; norm_moe_gen.* and its state are copies of norm.*.
    Returns (model state dict, optimizer state dict in ids form for MotTinyVitLM)."""
    msd = dict(model.state_dict())
    emb = msd["embed_tokens.weight"]
    mean = emb.double().mean(0).to(emb.dtype)
    grown = torch.cat([emb, mean.expand(MotTinyVitLM.VOCAB - emb.shape[0], -1)])
    msd["embed_tokens.weight"] = grown
    msd["lm_head.weight"] = grown
    for k in ("weight", "bias"):
        msd["norm_moe_gen." + k] = msd["norm." + k].clone()
    fsd = fsdp1_optim_state_dict(model, optim)
    state = {k: {n: t.clone() for n, t in v.items()} for k, v in fsd["state"].items()}
    for n in ("exp_avg", "exp_avg_sq"):
        t = state["embed_tokens.weight"][n]
        state["embed_tokens.weight"][n] = torch.cat(
            [t, t.new_zeros(MotTinyVitLM.VOCAB - t.shape[0], t.shape[1])])
    for k in ("weight", "bias"):
        state["norm_moe_gen." + k] = {n: t.clone() for n, t in state["norm." + k].items()}
    with torch.device("meta"):
        names = trainable_names(MotTinyVitLM())
    groups = [dict({k: v for k, v in g.items() if k != "params"}) for g in fsd["param_groups"]]
    groups[0]["params"] = list(range(len(names)))
    return msd, {"state": {i: state[n] for i, n in enumerate(names)}, "param_groups": groups}


def build_model(kind, meta=False):
    cls = {"conv": tiny_model.TinyVitLM, "linear": LinearPatchTinyVitLM, "mot": MotTinyVitLM}[kind]
    if meta:
        with torch.device("meta"):
            return cls()
    torch.manual_seed(tiny_model.SEED)
    return cls()


def trainable_names(model):
    return [n for n, p in model.named_parameters() if p.requires_grad]


def make_adamw(model, groups, hp):
    params = dict(model.named_parameters())
    per = hp if isinstance(hp, list) else [hp] * len(groups)
    return torch.optim.AdamW([dict(per[i], params=[params[n] for n in g])
                              for i, g in enumerate(groups)])


def train_inputs(i):
    if i == 0:
        return tiny_model.example_inputs()
    g = torch.Generator().manual_seed(tiny_model.SEED + 100 + i)
    return (torch.randn(tiny_model.IMAGE, generator=g),
            torch.randint(0, 11, tiny_model.TOKENS, generator=g))


def loss_of(model, batch):
    return model(*batch).float().pow(2).mean()


def _names_by_id(model, optim):
    """Parameter index in optim.state_dict() -> first FQN (named_parameters dedups)."""
    first = {}
    for n, p in model.named_parameters():
        first.setdefault(id(p), n)
    return [first[id(p)] for g in optim.param_groups for p in g["params"]]


def fsdp1_optim_state_dict(model, optim):
    osd = optim.state_dict()
    names = _names_by_id(model, optim)
    return {"state": {names[i]: dict(v) for i, v in osd["state"].items()},
            "param_groups": [dict({k: v for k, v in g.items() if k != "params"},
                                  params=[names[i] for i in g["params"]])
                             for g in osd["param_groups"]]}


def nest_layout(msd, osd, layout):
    if layout == "app":
        return {"app": {"model": msd, "optim": osd}}
    return {"model": msd, "optimizer": osd}


def state_dict_options(layout):
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    return StateDictOptions(flatten_optimizer_state_dict=(layout == "torchtitan"))


def flatten(state):
    """dcp.save's flattening: {dotted key: value} (torch's own flatten_state_dict)."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    return flatten_state_dict(state)[0]


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    return copy.deepcopy(v)


def expected_flat(model, optim, layout):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, optim, options=state_dict_options(layout))
    return {k: _clone(v) for k, v in flatten(nest_layout(msd, osd, layout)).items()}


def live_expected(model, optim):
    fsd = fsdp1_optim_state_dict(model, optim)
    return {"model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "state": {n: {k: _clone(v) for k, v in st.items()}
                      for n, st in fsd["state"].items()},
            "groups": copy.deepcopy(fsd["param_groups"])}


def average_like_fsdp2_gloo(g, world):
    """The gradient every rank holds after FSDP2's reduce-scatter when all `world` ranks
    computed the same local gradient g.  For fp32 gradients FSDP2 asks for ReduceOp.AVG
    (_get_gradient_divide_factors); gloo computes it as the sum of the ranks' tensors
    followed by a division by world.  With identical addends any summation order gives
    ((g + g) + g ...) for world <= 3, so this is reproducible bit for bit: (g+g)/2 == g
    exactly, but ((g+g)+g)/3 differs from g in the last bit for some elements."""
    if world == 1:
        return g
    s = g.clone()
    for _ in range(world - 1):
        s = s + g
    return s / world


def step_reference(model, optim, world, batch=None):
    """One data-parallel step on the full model (mutates model and optim); returns
    {"loss", "model", "state", "groups", "grad_differs"}: grad_differs counts gradient
    elements where the averaged gradient is not bit-equal to the single-process one."""
    loss = loss_of(model, batch or train_inputs(0))
    loss.backward()
    differs = 0
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                avg = average_like_fsdp2_gloo(p.grad, world)
                differs += int((avg != p.grad).sum())
                p.grad = avg
    optim.step()
    optim.zero_grad(set_to_none=True)
    out = live_expected(model, optim)
    out["loss"] = loss.detach().clone()
    out["grad_differs"] = differs
    return out


def rebuild(kind, model_sd, groups, hp, optim_sd):
    """A fresh full model + AdamW in the state described by (model_sd, optim_sd)."""
    m = build_model(kind)
    m.load_state_dict(model_sd)
    o = make_adamw(m, groups, hp)
    o.load_state_dict(copy.deepcopy(optim_sd))
    return m, o


def same_value(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, torch.Tensor):
        return ref.same_bits(a, b)
    return a == b


def value_diff(got, want):
    if isinstance(want, torch.Tensor):
        return ref.diff(got, want)
    if not same_value(got, want):
        return "%r (%s), want %r (%s)" % (got, type(got).__name__, want, type(want).__name__)
    return None
