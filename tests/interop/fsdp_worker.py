"""One rank of the full-to-dcp interop test: FSDP2 (fully_shard) on CPU/gloo loads fsdpconv's
DCP output with the real torch.distributed.checkpoint.load and checks every tensor.

Started by test_full_to_dcp.py, one process per rank and one process group per mesh,
running every case of that mesh in turn:

    run_rank(rank, world, port, job)         (multiprocessing target; fork or spawn)
    python fsdp_worker.py JOB.json            (torchrun-style: env RANK, WORLD_SIZE,
                                               MASTER_ADDR, MASTER_PORT)

job = {"mesh": [S] or [R, S], "timeout": seconds, "result_dir": dir,
       "cases": [{"name", "out" (DCP dir), "expected" (torch.save'd flat dict),
                  "nest" (None or "model": load under {"model": state_dict}),
                  "torch_save" (bool)}]}

Per case, on every rank:
  * build the BAGEL-style variant of fixtures/gen/tiny_model.py (patch embedding is a
    Linear(C*kh*kw, D), as after convert_conv2d_to_linear) on the meta device in bfloat16,
    fully_shard every block and the root on the mesh (2-D mesh: HSDP), to_empty("cpu");
  * keys of the expected dict the model does not have ("extra.*" tensors of the fixture)
    become DTensors with the FSDP2 placements (Shard(0); (Replicate(), Shard(0)) for HSDP;
    Replicate() for 0-d);
  * every live local tensor is pre-filled with values differing from the expected ones in
    every element (NaN, x+1, ~x), so any byte the load leaves untouched is a mismatch;
  * dcp.load(state, checkpoint_id=out) (strict default planner);
  * checks: placements are the FSDP2 ones; the local shard bit-equals the torch.chunk rows
    of the rank's shard coordinate; full_tensor() (and plain buffers) bit-equal the expected
    full tensors, every key; on 1-D meshes the rank's own non-empty box is stored in
    __<rank>_0.distcp;
  * with "torch_save": true in the case, dcp.save of the same live state into
    <out>.torch_fsdp2 and (rank 0) fsdpconv's .metadata compared with torch's: keys, sizes,
    dtypes, planner_data, and for DTensor entries the exact chunk list (empty chunks too).
Results go to result_dir/rank<R>.json ([{"case", "problems": [...]}]), rewritten after
every case so a hang still leaves the finished cases' results.
"""

import json
import os
import sys

import torch
from torch.distributed.checkpoint.api import CheckpointException

import common
import f2d_reference as ref
import tiny_model


class LinearPatchTinyVitLM(tiny_model.TinyVitLM):
    """tiny_model.TinyVitLM after BAGEL's convert_conv2d_to_linear: the Conv2d(3, D, 4, 4)
    patch embedding becomes Linear(3*4*4, D).  Built on the meta device: no init."""

    def __init__(self, dim=8, vocab=11):
        super().__init__(dim=dim, vocab=vocab)
        conv = self.patch_embed
        self.patch_embed = torch.nn.Linear(
            conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1], conv.out_channels)

    def _init_weights(self):
        pass


def build_fsdp_model(mesh):
    from torch.distributed.fsdp import fully_shard
    with torch.device("meta"):
        model = LinearPatchTinyVitLM()
    model = model.to(torch.bfloat16)
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    return model


def fsdp_placements(mesh, ndim):
    from torch.distributed.tensor import Replicate, Shard
    inner = Shard(0) if ndim >= 1 else Replicate()
    if mesh.ndim == 2:
        return (Replicate(), inner)
    return (inner,)


def run_case(rank, mesh, case):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor import empty as dt_empty

    problems = []
    expected = torch.load(case["expected"], map_location="cpu", weights_only=True)
    nest = case.get("nest")
    pre = (nest + ".") if nest else ""
    want = {k[len(pre):]: v for k, v in expected.items()}
    n_shard = mesh.size(mesh.ndim - 1)
    coord = mesh.get_coordinate()[-1]

    model = build_fsdp_model(mesh)
    sd = model.state_dict()
    for k in [k for k in sd if k not in want]:
        problems.append("model key %s not in the expected state dict (test setup?)" % k)
        del sd[k]
    for k, v in want.items():
        if k not in sd:
            sd[k] = dt_empty(*v.shape, dtype=v.dtype, device_mesh=mesh,
                             placements=fsdp_placements(mesh, v.dim()))

    keys = sorted(sd)
    local_want = {}
    for k in keys:
        v, w = sd[k], want[k]
        if isinstance(v, DTensor):
            exp_pl = fsdp_placements(mesh, w.dim())
            if tuple(v.placements) != exp_pl:
                problems.append("%s: live placements %s, expected %s (FSDP2 changed?)"
                                % (k, v.placements, exp_pl))
            lw = ref.chunk_rows(w, n_shard, coord) if w.dim() else w
            local_want[k] = lw
            loc = v.to_local()
            if tuple(loc.shape) != tuple(lw.shape):
                problems.append("%s: FSDP2 local shape %s, torch.chunk rows %s"
                                % (k, list(loc.shape), list(lw.shape)))
            else:
                with torch.no_grad():
                    loc.copy_(ref.poisoned(lw.to(loc.dtype)))
        elif isinstance(v, torch.Tensor):
            if tuple(v.shape) == tuple(w.shape):
                with torch.no_grad():
                    v.copy_(ref.poisoned(w.to(v.dtype)))
        else:
            problems.append("%s: live value is %s" % (k, type(v).__name__))

    state = {nest: sd} if nest else sd
    dcp.load(state, checkpoint_id=case["out"])

    # local checks (no collectives, must not raise between collectives)
    try:
        md = dcp.FileSystemReader(case["out"]).read_metadata() if mesh.ndim == 1 else None
        for k in keys:
            v, w = sd[k], want[k]
            if isinstance(v, DTensor):
                d = ref.diff(v.to_local(), local_want[k])
                if d:
                    problems.append("%s: rank %d local shard (shard coord %d of %d): %s"
                                    % (k, rank, coord, n_shard, d))
                if md is not None:
                    for ch in v.__create_chunk_list__():
                        if ch.sizes.numel() == 0 or w.dim() == 0:
                            continue
                        idx = MetadataIndex(pre + k, torch.Size(ch.offsets))
                        info = md.storage_data.get(idx)
                        file_want = "__%d_0.distcp" % rank
                        if info is None:
                            problems.append("%s: rank %d box offsets %s has no storage entry"
                                            % (k, rank, list(ch.offsets)))
                        elif info.relative_path != file_want:
                            problems.append("%s: rank %d's rows %s are in %s, want %s"
                                            % (k, rank, list(ch.offsets), info.relative_path,
                                               file_want))
            else:
                d = ref.diff(v, w)
                if d:
                    problems.append("%s (plain tensor): %s" % (k, d))
    except (Exception, CheckpointException):
        problems.append("rank %d check raised: %s" % (rank, ref.short_exc()))

    # gathered checks (collective: same key order on every rank)
    for k in keys:
        v = sd[k]
        if isinstance(v, DTensor):
            full = v.full_tensor()
            if rank == 0:
                d = ref.diff(full, want[k])
                if d:
                    problems.append("%s: full_tensor(): %s" % (k, d))

    # what real FSDP2 writes for the same live state: same chunk boxes for every DTensor
    # (empty ones included), same sizes, dtypes and planner_data as fsdpconv's .metadata
    if case.get("torch_save"):
        tdir = case["out"] + ".torch_fsdp2"
        dcp.save(state, checkpoint_id=tdir)
        if rank == 0:
            try:
                problems.extend(common.compare_with_torch_save(
                    case["out"], tdir, {pre + k: v for k, v in sd.items()}))
            except (Exception, CheckpointException):
                problems.append("comparing with torch's save raised: %s" % ref.short_exc())
    return problems


def run_rank(rank, world, port, job):
    from torch.distributed.device_mesh import init_device_mesh

    results = []
    try:
        common.rank_init(rank, world, port, job.get("timeout", 120))
        shape = tuple(job["mesh"])
        names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    except (Exception, CheckpointException):
        results.append({"case": "*", "problems": [
            "rank %d: process group/mesh setup failed: %s" % (rank, ref.short_exc())]})
        common.write_rank_results(job["result_dir"], rank, results)
        return
    for case in job["cases"]:
        try:
            problems = run_case(rank, mesh, case)
        except (Exception, CheckpointException):
            problems = ["rank %d raised: %s" % (rank, ref.short_exc())]
        results.append({"case": case["name"], "problems": common.cap_problems(problems)})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def main():
    if len(sys.argv) != 2:
        print("usage: RANK=r WORLD_SIZE=n MASTER_PORT=p %s JOB.json" % sys.argv[0],
              file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        job = json.load(f)
    run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
             int(os.environ["MASTER_PORT"]), job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
