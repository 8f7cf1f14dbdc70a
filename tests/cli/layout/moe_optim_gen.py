"""Training checkpoints for the optimizer-follows-layout tests, written by torch.

  moe_optim_gen.py OUTDIR

Writes OUTDIR/moe_train.pt: {"model", "optimizer"} of a tiny Mixtral-like model
with per-expert weights (layers.N.block_sparse_moe.experts.E.w1/w2/w3.weight,
as Hugging Face checkpoints hold them) after two AdamW steps in two param
groups; and OUTDIR/moe_train_stacked.pt: the same training state for the
stacked model (transformers 5's layers.N.mlp.experts.gate_up_proj [E, 2I, H]
= cat(w1_e, w3_e), down_proj [E, H, I] = w2_e, mlp.gate.weight), its AdamW
state stacked by torch and loaded through AdamW.load_state_dict, so that
optimizer.state_dict() numbers and groups the parameters as torch does.
Hostile variants of moe_train.pt: moe_train_nograd.pt (expert 2 of layer 0
never got a gradient, so AdamW holds no state for its w1), moe_train_fqn.pt
(the state keyed by parameter names, as FSDP1's full_optim_state_dict keys
it) and moe_train_groups.pt (the layer 0 experts' w3 in two param groups).
"""
import os
import sys

import torch
from torch import nn

L, E, H, I = 2, 4, 4, 6


class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(H, I, bias=False)
        self.w2 = nn.Linear(I, H, bias=False)
        self.w3 = nn.Linear(H, I, bias=False)


class Moe(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(E))

    def forward(self, x):
        w = torch.softmax(self.gate(x), -1)  # every expert gets a gradient
        return sum(w[..., e:e + 1] * ex.w2(nn.functional.silu(ex.w1(x)) * ex.w3(x))
                   for e, ex in enumerate(self.experts))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.block_sparse_moe = Moe()


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = Norm()  # a module: its parameter comes after the layers'

    def forward(self, x):
        for layer in self.layers:
            x = x + layer.block_sparse_moe(x)
        return x * self.norm.weight


class StackedMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = nn.Module()
        self.experts.gate_up_proj = nn.Parameter(torch.empty(E, 2 * I, H))
        self.experts.down_proj = nn.Parameter(torch.empty(E, H, I))


class StackedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = StackedMlp()


class StackedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(StackedLayer() for _ in range(L))
        self.norm = Norm()


def groups(params_layers, norm):
    # Two groups in parameter order (ids index model.parameters()), different hyper-parameters.
    return [{"params": params_layers, "lr": 1e-2, "weight_decay": 0.1},
            {"params": [norm], "lr": 3e-3, "weight_decay": 0.0}]


def stack_layer(t, n):
    """Per layer n: (gate, gate_up_proj, down_proj) of per-expert tensors t(key)."""
    p = "layers.%d.block_sparse_moe." % n
    gu = torch.stack([torch.cat([t(p + "experts.%d.w1.weight" % e), t(p + "experts.%d.w3.weight" % e)])
                      for e in range(E)])
    dn = torch.stack([t(p + "experts.%d.w2.weight" % e) for e in range(E)])
    return t(p + "gate.weight"), gu, dn


def train(split=None, nograd=None):
    """The per-expert model after two AdamW steps; its groups cut at parameter `split`."""
    torch.manual_seed(0)
    m = Model()
    layer_params = [p for n, p in m.named_parameters() if n != "norm.weight"]
    gs = groups(layer_params, m.norm.weight)
    if split is not None:
        gs = [dict(gs[0], params=layer_params[:split]),
              dict(gs[0], params=layer_params[split:], lr=2e-2), gs[1]]
    opt = torch.optim.AdamW(gs, betas=(0.8, 0.9))
    for _ in range(2):
        opt.zero_grad()
        m(torch.randn(3, H)).pow(2).mean().backward()
        if nograd is not None:
            dict(m.named_parameters())[nograd].grad = None
        opt.step()
    return m, opt


def main():
    out = sys.argv[1]
    m, opt = train()
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict()},
               os.path.join(out, "moe_train.pt"))
    names = [n for n, _ in m.named_parameters()]
    sd = opt.state_dict()
    sd["state"] = {names[i]: v for i, v in sd["state"].items()}
    for g in sd["param_groups"]:
        g["params"] = [names[i] for i in g["params"]]
    torch.save({"model": m.state_dict(), "optimizer": sd}, os.path.join(out, "moe_train_fqn.pt"))
    nm, nopt = train(nograd="layers.0.block_sparse_moe.experts.2.w1.weight")
    torch.save({"model": nm.state_dict(), "optimizer": nopt.state_dict()},
               os.path.join(out, "moe_train_nograd.pt"))
    gm, gopt = train(split=1 + 3 * 2 + 2)  # expert 2's w3 starts the second group
    torch.save({"model": gm.state_dict(), "optimizer": gopt.state_dict()},
               os.path.join(out, "moe_train_groups.pt"))

    s = StackedModel()
    by_name = dict(m.named_parameters())
    with torch.no_grad():
        for n, layer in enumerate(s.layers):
            g, gu, dn = stack_layer(lambda k: by_name[k], n)
            layer.mlp.gate.weight.copy_(g)
            layer.mlp.experts.gate_up_proj.copy_(gu)
            layer.mlp.experts.down_proj.copy_(dn)
        s.norm.weight.copy_(m.norm.weight)
    slayer = [p for n, p in s.named_parameters() if n != "norm.weight"]
    sopt = torch.optim.AdamW(groups(slayer, s.norm.weight), betas=(0.8, 0.9))
    state = {by_name[k]: v for k, v in ((n, opt.state[p]) for n, p in m.named_parameters())}
    new = {}
    for n, layer in enumerate(s.layers):
        for what in ("step", "exp_avg", "exp_avg_sq"):
            g, gu, dn = stack_layer(lambda k: state[by_name[k]][what], n) if what != "step" \
                else (None, None, None)
            for p, v in ((layer.mlp.gate.weight, g), (layer.mlp.experts.gate_up_proj, gu),
                         (layer.mlp.experts.down_proj, dn)):
                src = state[by_name["layers.%d.block_sparse_moe.gate.weight" % n]]
                new.setdefault(p, {})[what] = v if v is not None else src["step"].clone()
    new[s.norm.weight] = {k: v.clone() for k, v in state[m.norm.weight].items()}
    sd = sopt.state_dict()  # its numbering: the ids of the stacked parameters
    ids = {p: i for i, p in enumerate(slayer + [s.norm.weight])}
    sd["state"] = {ids[p]: v for p, v in new.items()}
    sopt.load_state_dict(sd)
    torch.save({"model": s.state_dict(), "optimizer": sopt.state_dict()},
               os.path.join(out, "moe_train_stacked.pt"))


main()
