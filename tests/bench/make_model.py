"""Write a synthetic transformer-like checkpoint of about GB GiB for the benchmarks.

usage: python make_model.py OUTDIR [--gb GB] [--seed S]

Writes OUTDIR/model.pt (torch.save, default zip format) and OUTDIR/model.safetensors (safetensors
0.x, same keys and bytes) plus OUTDIR/model.json (manifest: keys, dtypes, shapes, bytes). Content
is deterministic (torch.manual_seed) and random (randn), so nothing compresses or deduplicates.
If OUTDIR/model.json already describes the same GB and seed and both files exist, nothing is
rewritten (BENCH_DIR reuse).

The mix: per layer four [H, H] attention matrices and two [H, H] MLP matrices (fp32, H = 4096 for
GB >= 0.75, else 1024) with 1-D biases and norm weights; around them an embedding with an odd
first dimension (H + 1 rows), an 11-row classifier head, a [1, H] class token (fewer rows than
ranks), a 4-D conv patch embedding, an int64 position-id buffer and one 0-d fp32 scalar. The
number of layers is chosen so the total is about GB GiB (at least one layer). Needs about
2 x GB GiB of RAM (safetensors serialises in memory).
"""

import argparse
import json
import os
import sys
import time

import torch

GIB = 1 << 30


def build_specs(gb):
    """Return [(key, shape, dtype)] in state-dict order."""
    h = 4096 if gb >= 0.75 else 1024
    head = [
        ("patch_embed.weight", (h, 3, 14, 14), torch.float32),
        ("patch_embed.bias", (h,), torch.float32),
        ("cls_token", (1, h), torch.float32),
        ("position_ids", (1, 577), torch.int64),
        ("embed_tokens.weight", (h + 1, h), torch.float32),
    ]
    layer = [
        ("self_attn.q_proj.weight", (h, h)),
        ("self_attn.q_proj.bias", (h,)),
        ("self_attn.k_proj.weight", (h, h)),
        ("self_attn.k_proj.bias", (h,)),
        ("self_attn.v_proj.weight", (h, h)),
        ("self_attn.v_proj.bias", (h,)),
        ("self_attn.o_proj.weight", (h, h)),
        ("self_attn.o_proj.bias", (h,)),
        ("input_layernorm.weight", (h,)),
        ("input_layernorm.bias", (h,)),
        ("mlp.fc1.weight", (h, h)),
        ("mlp.fc1.bias", (h,)),
        ("mlp.fc2.weight", (h, h)),
        ("mlp.fc2.bias", (h,)),
        ("post_attention_layernorm.weight", (h,)),
        ("post_attention_layernorm.bias", (h,)),
    ]
    tail = [
        ("norm.weight", (h,), torch.float32),
        ("classifier.weight", (11, h), torch.float32),
        ("classifier.bias", (11,), torch.float32),
        ("logit_scale", (), torch.float32),
    ]

    def nbytes(specs):
        total = 0
        for _, shape, dt in specs:
            n = 1
            for d in shape:
                n *= d
            total += n * torch.empty((), dtype=dt).element_size()
        return total

    fixed = nbytes(head) + nbytes(tail)
    per_layer = nbytes([(k, s, torch.float32) for k, s in layer])
    layers = max(1, round((gb * GIB - fixed) / per_layer))
    specs = list(head)
    for i in range(layers):
        specs += [("layers.%d.%s" % (i, k), s, torch.float32) for k, s in layer]
    specs += tail
    return specs, layers, h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    pt = os.path.join(args.outdir, "model.pt")
    st = os.path.join(args.outdir, "model.safetensors")
    man = os.path.join(args.outdir, "model.json")

    if os.path.exists(pt) and os.path.exists(st) and os.path.exists(man):
        with open(man) as f:
            old = json.load(f)
        if old.get("gb") == args.gb and old.get("seed") == args.seed:
            print("make_model: reusing %s (%.3f GiB)" % (pt, old["bytes"] / GIB))
            return 0

    specs, layers, h = build_specs(args.gb)
    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    sd = {}
    for key, shape, dt in specs:
        if dt == torch.int64:
            sd[key] = torch.randint(0, 1 << 40, shape, dtype=dt)
        else:
            sd[key] = torch.randn(shape, dtype=dt)
    total = sum(t.numel() * t.element_size() for t in sd.values())
    t1 = time.perf_counter()
    torch.save(sd, pt + ".tmp")
    os.replace(pt + ".tmp", pt)
    t2 = time.perf_counter()
    from safetensors.torch import save_file
    save_file(sd, st + ".tmp", metadata={"format": "pt"})
    os.replace(st + ".tmp", st)
    t3 = time.perf_counter()
    manifest = {
        "gb": args.gb, "seed": args.seed, "hidden": h, "layers": layers,
        "tensors": len(sd), "bytes": total,
        "pt_file_bytes": os.path.getsize(pt), "st_file_bytes": os.path.getsize(st),
        "keys": [{"key": k, "dtype": str(t.dtype).replace("torch.", ""),
                  "shape": list(t.shape)} for k, t in sd.items()],
    }
    with open(man + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(man + ".tmp", man)
    print("make_model: %d tensors, %d layers of H=%d, %.3f GiB of data; "
          "randn %.1fs, torch.save %.1fs, safetensors %.1fs"
          % (len(sd), layers, h, total / GIB, t1 - t0, t2 - t1, t3 - t2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
