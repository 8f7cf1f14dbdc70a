"""The headline figure: how long a training start takes, the FSDP1 way against fsdpconv's.

usage: python bench_train_start.py FSDPCONV DIR [--ranks 1,4] [--rounds 3] [--layers 22]
                                   [--results FILE]

A Llama-shaped transformers model (TinyLlama's shape: hidden 2048, 22 layers, GQA 32/4 heads,
vocabulary 32,000, untied: 1.10 B parameters) with random weights is saved once in bf16 as a
Hugging Face directory (save_pretrained: sharded, with an index and config.json) under DIR/hf and
converted once with `fsdpconv full-to-dcp --world-size N` to DIR/dcp-N and (--format safetensors)
DIR/st-N. Then, per round and per rank count, the three ways of starting are run interleaved, each
from a cold page cache (dropped when this runs as root; else warm, and the report says so):

  fsdp1  every rank builds the whole model on the CPU from its config (random init, bf16), reads
         the checkpoint (safetensors load_file of every shard), load_state_dict, then fully_shard
         on every decoder layer and the root: the start fsdpconv exists to replace;
  dcp    meta-device init (the README's build_sharded: init_empty_weights, fully_shard, to_empty,
         non-persistent buffers kept), then dcp.load of fsdpconv's DCP: the README's load_model;
  st     the same, dcp.load through HuggingFaceStorageReader of fsdpconv's per-rank safetensors:
         the README's load_model_st.

The README's loading code is executed as printed (tests/interop/common.readme_recipes), so the
benchmark times what users are told to run. A start's time is from the process start (python,
torch import) until every rank holds its sharded model: the orchestrator's wall from spawning the
ranks to their exit, and, apart, the ranks' own time after the import (max over ranks). Each rank
then sums the bits of its local shards (int64, exact) and the sums are reduced to one digest, so
that every way of starting must give the same model: a differing digest fails the run (exit 1).
One JSON line per start goes to --results; a table goes to stdout.  Reported, never asserted.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "interop"))
import common  # noqa: E402

SHAPE = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
             tie_word_embeddings=False)
WAYS = ("fsdp1", "dcp", "st")


def config(layers):
    from transformers import LlamaConfig
    return LlamaConfig(num_hidden_layers=layers, **SHAPE)


def make_model(d, layers):
    """DIR/hf once: random bf16 weights, as save_pretrained writes them."""
    hf = os.path.join(d, "hf")
    if os.path.exists(os.path.join(hf, "config.json")):
        return hf
    import torch
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config(layers), dtype=torch.bfloat16)
    model.save_pretrained(hf + ".tmp", max_shard_size="1GB")
    os.rename(hf + ".tmp", hf)
    return hf


def convert(fsdpconv, hf, d, world):
    """fsdpconv's outputs for this world size (kept between runs), with their conversion time."""
    out = {}
    for way, extra in (("dcp", []), ("st", ["--format", "safetensors"])):
        path = os.path.join(d, "%s-%d" % (way, world))
        t0 = time.perf_counter()
        if not os.path.exists(path):
            subprocess.run([fsdpconv, "full-to-dcp", "-q", "--world-size", str(world), "-o", path]
                           + extra + [hf], check=True)
        out[way] = (path, time.perf_counter() - t0)
    return out


# ---------------------------------------------------------------------------------- a rank

def rank_main(rank, world, port, way, ckpt, hf, layers, result):
    t_start = time.time()
    import glob
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import LlamaForCausalLM
    torch.set_num_threads(1)
    common.rank_init(rank, world, port, 600)
    t_imported = time.time()
    cfg = config(layers)

    def build():
        return LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16)

    if way == "fsdp1":
        from safetensors.torch import load_file
        model = build()                      # the whole model, randomly initialised, on the CPU
        sd = {}
        for f in sorted(glob.glob(os.path.join(hf, "*.safetensors"))):
            sd.update(load_file(f))
        model.load_state_dict(sd)
        del sd
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    else:
        ns = {"__name__": "readme"}
        found = common.readme_recipes("python")
        for name in ("load-model", "load-safetensors"):
            exec(compile(found[name], "README.md recipe %s" % name, "exec"), ns)
        model = ns["load_model" if way == "dcp" else "load_model_st"](build, ckpt, "cpu")
    dist.barrier()
    t_ready = time.time()
    digest = 0
    for _, t in sorted(model.state_dict().items()):
        local = t.to_local() if hasattr(t, "to_local") else t
        if local.numel():
            bits = local.detach().contiguous().view(-1).view(torch.int16).to(torch.int64)
            digest = (digest + int(bits.sum())) % (1 << 62)
    sums = torch.tensor([digest], dtype=torch.int64)
    dist.all_reduce(sums)
    if rank == 0:
        with open(result, "w") as f:
            json.dump({"after_import_s": t_ready - t_imported, "from_start_s": t_ready - t_start,
                       "digest": int(sums[0]) % (1 << 62)}, f)
    common.rank_finish()


def start(way, world, ckpt, hf, layers, d):
    """One training start on `world` fresh processes; its figures."""
    cache = common.cache_mode("auto")
    result = os.path.join(d, "rank0-result.json")
    if os.path.exists(result):
        os.unlink(result)
    port = common.free_port()
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world", str(world),
                               "--port", str(port), "--way", way, "--ckpt", ckpt or "",
                               "--hf", hf, "--layers", str(layers), "--result", result])
             for r in range(world)]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    if any(codes) or not os.path.exists(result):
        raise SystemExit("bench_train_start: %s on %d ranks failed (exit codes %s)"
                         % (way, world, codes))
    with open(result) as f:
        got = json.load(f)
    got.update(way=way, ranks=world, wall_s=wall, cache=cache)
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fsdpconv", nargs="?")
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--ranks", default="1,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--results")
    # one rank of a start (spawned by main itself)
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--port", type=int)
    ap.add_argument("--way")
    ap.add_argument("--ckpt")
    ap.add_argument("--hf")
    ap.add_argument("--result")
    a = ap.parse_args()
    if a.rank is not None:
        rank_main(a.rank, a.world, a.port, a.way, a.ckpt, a.hf, a.layers, a.result)
        return
    if not a.fsdpconv or not a.dir:
        ap.error("FSDPCONV and DIR are required")
    os.makedirs(a.dir, exist_ok=True)
    fsdpconv = os.path.abspath(a.fsdpconv)
    load = open("/proc/loadavg").read().split()[:3]
    hf = make_model(a.dir, a.layers)
    size = sum(os.path.getsize(os.path.join(hf, f)) for f in os.listdir(hf)
               if f.endswith(".safetensors"))
    ranks = [int(r) for r in a.ranks.split(",")]
    outs = {w: convert(fsdpconv, hf, a.dir, w) for w in ranks}
    records = []
    for rnd in range(a.rounds):
        for w in ranks:
            # interleaved, and the order turned every round, so no way always runs first
            order = WAYS[rnd % 3:] + WAYS[:rnd % 3]
            for way in order:
                ckpt = None if way == "fsdp1" else outs[w][way][0]
                rec = start(way, w, ckpt, hf, a.layers, a.dir)
                rec["round"] = rnd
                records.append(rec)
                print("round %d  %-5s %d rank(s)  %6.2f s (%.2f s after import)  %s"
                      % (rnd, way, w, rec["wall_s"], rec["after_import_s"], rec["cache"]),
                      flush=True)
    if a.results:
        with open(a.results, "a") as f:
            for rec in records:
                f.write(json.dumps(rec) + "\n")
    bad = False
    print("\ntraining start, %.2f GB bf16 Llama (%d layers), %d cores, load %s at the start, "
          "best of %d rounds (range)" % (size / 1e9, a.layers, os.cpu_count(), " ".join(load),
                                         a.rounds))
    print("| ranks | FSDP1 way | meta + dcp.load (DCP) | meta + dcp.load (safetensors) "
          "| FSDP1 / DCP | FSDP1 / safetensors |")
    print("|---|---|---|---|---|---|")
    for w in ranks:
        best, rng = {}, {}
        for way in WAYS:
            walls = [r["wall_s"] for r in records if r["ranks"] == w and r["way"] == way]
            best[way], rng[way] = min(walls), (min(walls), max(walls))
        digests = {r["digest"] for r in records if r["ranks"] == w}
        if len(digests) != 1:
            print("ranks %d: the ways of starting gave different models: digests %s"
                  % (w, sorted(digests)))
            bad = True
        cells = ["%.1f s (%.1f–%.1f)" % (best[k], *rng[k]) for k in WAYS]
        print("| %d | %s | %s | %s | **%.1f×** | **%.1f×** |"
              % (w, *cells, best["fsdp1"] / best["dcp"], best["fsdp1"] / best["st"]))
        after = {k: min(r["after_import_s"] for r in records if r["ranks"] == w and r["way"] == k)
                 for k in WAYS}
        print("| %d, after the import | %.1f s | %.1f s | %.1f s | %.1f× | %.1f× |"
              % (w, after["fsdp1"], after["dcp"], after["st"], after["fsdp1"] / after["dcp"],
                 after["fsdp1"] / after["st"]))
    print("conversion, once and offline: " + ", ".join(
        "%s ws%d %.1f s" % (way, w, outs[w][way][1]) for w in ranks for way in ("dcp", "st")))
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
