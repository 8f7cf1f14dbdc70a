"""Rank side of the reshard interop test (test_reshard.py), plus the comparison helpers the
parent shares.

    run_rank(rank, world, port, job)    multiprocessing target (fork or spawn)

job = {"timeout": seconds, "result_dir": dir,
       "orig": {"plain": DCP dir, "zstd": DCP dir or None},   (the N-rank originals)
       "cases": [{"name", "out"}]}                             (fsdpconv reshard outputs)

On every rank of the 1-D gloo mesh of `world` ranks (one process group runs every case):

  reference  gen_dcp_train.build_model(mesh) (FSDP2 fully_shard) + make_optimizer, the app
             state {"model", "optim"} from get_state_dict plus "extra", every local tensor
             pre-filled with byte pattern 0xA5 and every non-tensor leaf replaced by a
             sentinel; dcp.load of the ORIGINAL checkpoint (torch reshards at load time);
             snapshot; set_state_dict; one more AdamW step on a fixed batch; snapshot.
             The zstd original is loaded the same way and must give the same snapshots.
  each case  the same with the fsdpconv output (pre-fill 0x5A), and then
               * loaded state == reference loaded state: every key, DTensor placements,
                 global shape, local shard bytes (bit-exact, NaN-safe), plain tensors,
                 non-tensor values (type and value; floats by bit pattern);
               * parameters and optimizer state after the extra step == reference's;
               * the live DTensor boxes are FSDP2's Shard(0) torch.chunk boxes and each
                 non-empty box is a stored chunk of exactly that shape in __<rank>_0.distcp
                 (checked on the output's .metadata read by torch's FileSystemReader).
Results: result_dir/rank<R>.json = [{"case", "problems": [...]}], rewritten after each case.
"""

import copy
import math
import struct
import traceback

import torch

import common
import gen_dcp_train as gen

POISON_REF = 0xA5
POISON_CASE = 0x5A
SENTINEL = "<not loaded>"
STEP_AFTER_LOAD = 100     # batch index of the extra step


# ------------------------------------------------------------------------------- helpers

def chunk_box(length, n, r):
    """torch.chunk / DTensor Shard(0) box of rank r over n ranks: (offset, size)."""
    c = -(-length // n) if length else 0
    off = min(c * r, length)
    return off, max(0, min(c, length - off))


def tensor_bits(t):
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.contiguous().reshape(-1).view(torch.uint8)


def tensor_diff(got, want):
    """None if dtype, shape and bytes are equal, else a short description."""
    if got.dtype != want.dtype:
        return "dtype %s, want %s" % (got.dtype, want.dtype)
    if tuple(got.shape) != tuple(want.shape):
        return "shape %s, want %s" % (list(got.shape), list(want.shape))
    a, b = tensor_bits(got), tensor_bits(want)
    if torch.equal(a, b):
        return None
    es = got.element_size()
    bad = (a != b).reshape(-1, es).any(dim=1).nonzero().reshape(-1)
    i = int(bad[0])
    g, w = got.reshape(-1)[i].item(), want.reshape(-1)[i].item()
    return "%d of %d elements differ (first at flat index %d: %r, want %r)" % (
        bad.numel(), got.numel(), i, g, w)


def value_diff(got, want):
    """None if two non-tensor values are equal (same types, floats bit-equal)."""
    if type(got) is not type(want):
        return "type %s (%r), want %s (%r)" % (type(got).__name__, got, type(want).__name__,
                                               want)
    if isinstance(want, float):
        if struct.pack("<d", got) != struct.pack("<d", want) and not (
                math.isnan(got) and math.isnan(want)):
            return "%r, want %r" % (got, want)
        return None
    if isinstance(want, (list, tuple)):
        if len(got) != len(want):
            return "length %d, want %d (%r vs %r)" % (len(got), len(want), got, want)
        for i, (a, b) in enumerate(zip(got, want)):
            d = value_diff(a, b)
            if d:
                return "[%d]: %s" % (i, d)
        return None
    if isinstance(want, dict):
        if list(got) != list(want):
            return "keys %s, want %s" % (list(got), list(want))
        for k in want:
            d = value_diff(got[k], want[k])
            if d:
                return "[%r]: %s" % (k, d)
        return None
    if isinstance(want, torch.Tensor):
        return tensor_diff(got, want)
    return None if got == want else "%r, want %r" % (got, want)


def walk(obj, path=()):
    """(path tuple, leaf) in DCP's flattening order: dicts and lists of containers are
    descended, everything else (tensors, tuples, lists of scalars) is a leaf."""
    from torch.distributed.tensor import DTensor
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk(v, path + (str(k),))
    elif isinstance(obj, list) and any(isinstance(v, (dict, list, torch.Tensor, DTensor))
                                       for v in obj):
        for i, v in enumerate(obj):
            yield from walk(v, path + (str(i),))
    else:
        yield path, obj


def snapshot(state):
    """{fqn: ("dtensor", placements, global shape, local clone) | ("tensor", clone) |
    ("value", deepcopy)} of a (nested) state dict."""
    from torch.distributed.tensor import DTensor
    out = {}
    for path, v in walk(state):
        fqn = ".".join(path)
        if isinstance(v, DTensor):
            out[fqn] = ("dtensor", tuple(str(p) for p in v.placements), tuple(v.shape),
                        v.to_local().detach().clone())
        elif isinstance(v, torch.Tensor):
            out[fqn] = ("tensor", v.detach().clone())
        else:
            out[fqn] = ("value", copy.deepcopy(v))
    return out


def snapshot_diff(got, want):
    """Problems (list of str) between two snapshots."""
    probs = []
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    if missing:
        probs.append("keys missing (%d): %s" % (len(missing), missing[:6]))
    if extra:
        probs.append("unexpected keys (%d): %s" % (len(extra), extra[:6]))
    for k in want:
        if k not in got:
            continue
        g, w = got[k], want[k]
        if g[0] != w[0]:
            probs.append("%s: %s, want %s" % (k, g[0], w[0]))
        elif g[0] == "dtensor":
            if g[1] != w[1]:
                probs.append("%s: placements %s, want %s" % (k, g[1], w[1]))
            if g[2] != w[2]:
                probs.append("%s: global shape %s, want %s" % (k, g[2], w[2]))
            d = tensor_diff(g[3], w[3])
            if d:
                probs.append("%s (local shard): %s" % (k, d))
        elif g[0] == "tensor":
            d = tensor_diff(g[1], w[1])
            if d:
                probs.append("%s: %s" % (k, d))
        else:
            d = value_diff(g[1], w[1])
            if d:
                probs.append("%s: %s" % (k, d))
    return probs


def poison_tensor_(t, byte):
    """Fill t with a byte pattern (bool: all True) in place."""
    with torch.no_grad():
        if t.numel() == 0:
            return
        if t.dtype == torch.bool:
            t.fill_(True)
            return
        es = t.element_size() * (2 if t.is_complex() else 1)
        src = torch.full((t.numel() * es,), byte, dtype=torch.uint8)
        if t.is_complex():
            src = torch.view_as_complex(src.view(torch.float32 if es == 8 else torch.float64)
                                        .reshape(-1, 2))
        else:
            src = src.view(t.dtype)
        t.copy_(src.reshape(t.shape))


def poison_state_(obj, byte):
    """Poison every local tensor in place; return obj with non-tensor leaves replaced by
    SENTINEL (containers that DCP descends are kept, so the flattened keys do not change)."""
    from torch.distributed.tensor import DTensor
    if isinstance(obj, dict):
        for k in list(obj):
            obj[k] = poison_state_(obj[k], byte)
        return obj
    if isinstance(obj, list) and any(isinstance(v, (dict, list, torch.Tensor, DTensor))
                                     for v in obj):
        for i in range(len(obj)):
            obj[i] = poison_state_(obj[i], byte)
        return obj
    if isinstance(obj, DTensor):
        poison_tensor_(obj.to_local(), byte)
        return obj
    if isinstance(obj, torch.Tensor):
        poison_tensor_(obj, byte)
        return obj
    return SENTINEL


# ------------------------------------------------------------------------------ rank side

def load_and_step(mesh, rank, ckpt, byte):
    """Fresh FSDP2 model + AdamW, dcp.load(ckpt), set_state_dict, one step.
    Returns (loaded snapshot, snapshot after the step, the live state dict)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model = gen.build_model(mesh)
    optim = gen.make_optimizer(model)
    msd, osd = get_state_dict(model, optim)
    state = {"model": msd, "optim": osd, "extra": copy.deepcopy(gen.EXTRA)}
    poison_state_(state, byte)
    dcp.load(state, checkpoint_id=ckpt)
    loaded = snapshot(state)
    set_state_dict(model, optim, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    gen.train_step(model, optim, gen.batch(rank, STEP_AFTER_LOAD))
    msd2, osd2 = get_state_dict(model, optim)
    stepped = snapshot({"model": msd2, "optim": osd2})
    return loaded, stepped, state


def check_boxes(state, out, rank, world):
    """Live DTensor boxes are the Shard(0) torch.chunk boxes; this rank's non-empty boxes
    are stored, with that shape, in __<rank>_0.distcp."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.tensor import DTensor, Shard
    probs = []
    md = dcp.FileSystemReader(out).read_metadata()
    want_file = "__%d_0.distcp" % rank
    n_checked = 0
    for path, v in walk(state):
        if not isinstance(v, DTensor):
            continue
        fqn = ".".join(path)
        if tuple(v.placements) != (Shard(0),):
            probs.append("%s: live placements %s, FSDP2 should give (Shard(0),)"
                         % (fqn, v.placements))
            continue
        off0, size0 = chunk_box(v.shape[0], world, rank)
        want_off = (off0,) + (0,) * (v.dim() - 1)
        want_size = (size0,) + tuple(v.shape[1:])
        for ch in v.__create_chunk_list__():
            if tuple(ch.sizes) != want_size or (size0 and tuple(ch.offsets) != want_off):
                probs.append("%s: live box %s+%s, torch.chunk box %s+%s" % (
                    fqn, list(ch.offsets), list(ch.sizes), list(want_off), list(want_size)))
                continue
            if size0 == 0 or ch.sizes.numel() == 0:
                continue
            n_checked += 1
            idx = MetadataIndex(fqn, torch.Size(ch.offsets))
            info = md.storage_data.get(idx)
            if info is None:
                probs.append("%s: rank %d's rows [%d, %d) (offsets %s) are not a stored chunk"
                             % (fqn, rank, off0, off0 + size0, list(ch.offsets)))
                continue
            if info.relative_path != want_file:
                probs.append("%s: rank %d's rows [%d, %d) are in %s, want %s" % (
                    fqn, rank, off0, off0 + size0, info.relative_path, want_file))
            tmd = md.state_dict_metadata.get(fqn)
            stored = [c for c in getattr(tmd, "chunks", [])
                      if tuple(c.offsets) == tuple(ch.offsets)]
            if len(stored) != 1 or tuple(stored[0].sizes) != want_size:
                probs.append("%s: stored chunk(s) at %s: %s, want one of sizes %s" % (
                    fqn, list(ch.offsets), [list(c.sizes) for c in stored], list(want_size)))
    if n_checked == 0 and rank == 0:
        probs.append("no DTensor box checked on rank 0 (test setup?)")
    return probs


def run_case(mesh, rank, world, case, ref_loaded, ref_stepped):
    probs = []
    loaded, stepped, state = load_and_step(mesh, rank, case["out"], POISON_CASE)
    probs += ["after dcp.load: %s" % p for p in snapshot_diff(loaded, ref_loaded)]
    probs += ["after set_state_dict + 1 AdamW step: %s" % p
              for p in snapshot_diff(stepped, ref_stepped)]
    try:
        probs += check_boxes(state, case["out"], rank, world)
    except Exception:
        probs.append("box check raised: %s" % traceback.format_exc()[-1500:])
    return probs


def run_rank(rank, world, port, job):
    import warnings
    warnings.filterwarnings("ignore")
    from torch.distributed.device_mesh import init_device_mesh

    results = []
    rdir = job["result_dir"]
    try:
        common.rank_init(rank, world, port, job.get("timeout", 120))
        mesh = init_device_mesh("cpu", (world,))
        ref_loaded, ref_stepped, _ = load_and_step(mesh, rank, job["orig"]["plain"],
                                                   POISON_REF)
        # the reference must hold real values, not the poison, and the extra dict
        probs = []
        d = value_diff(ref_loaded.get("extra.epoch", (None, None))[1], gen.EXTRA["epoch"])
        if d:
            probs.append("reference extra.epoch: %s" % d)
        for k, v in ref_loaded.items():
            if v[0] == "value" and v[1] == SENTINEL:
                probs.append("reference: %s not loaded by torch" % k)
        results.append({"case": "reference", "problems": common.cap_problems(probs)})
    except Exception:
        results.append({"case": "*", "problems": [
            "rank %d: setup/reference load failed: %s" % (rank, traceback.format_exc()[-2000:])]})
        common.write_rank_results(rdir, rank, results)
        return
    common.write_rank_results(rdir, rank, results)
    if job["orig"].get("zstd"):
        try:
            zl, zs, _ = load_and_step(mesh, rank, job["orig"]["zstd"], POISON_CASE)
            probs = (["loaded: %s" % p for p in snapshot_diff(zl, ref_loaded)]
                     + ["stepped: %s" % p for p in snapshot_diff(zs, ref_stepped)])
        except Exception:
            probs = ["rank %d raised: %s" % (rank, traceback.format_exc()[-2000:])]
        results.append({"case": "zstd original == plain original",
                        "problems": common.cap_problems(probs)})
        common.write_rank_results(rdir, rank, results)
    for case in job["cases"]:
        try:
            probs = run_case(mesh, rank, world, case, ref_loaded, ref_stepped)
        except Exception:
            probs = ["rank %d raised: %s" % (rank, traceback.format_exc()[-2500:])]
        results.append({"case": case["name"], "problems": common.cap_problems(probs)})
        common.write_rank_results(rdir, rank, results)
    common.rank_finish()
