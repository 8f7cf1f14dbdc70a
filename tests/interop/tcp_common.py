"""Helpers for the torch_checkpointing interop tests (the real torch-checkpointing package).

  Net, CASES, MESH_NAMES, build(case, mesh)
      the seeded test model (odd dims leave ranks empty shards; a 0-d buffer; a
      ColwiseParallel `out` that FSDP then shards as StridedShard) and how each case
      shards it: fsdp (4), hsdp (2 x 2), tp (dp 2 x tp 2); Net(idx) is a scalar loss
      (fsdp and hsdp only: the tp plan is for checkpoint layout, not for running)
  mesh_for(case)         the case's CPU mesh, with MESH_NAMES
  manager(layout, items) a CheckpointManager saving synchronously, each of `items` (default
                         model) with DefaultResharder, in the default ("pt") or safetensors
                         ("st") layout
  trace_reads(opened)    append the basename of every file the package's storage reads
  full_diff(rank, sd, full, what)  problems where full_state(sd) is not bit-exact `full`
  pickle_globals(data)   the set of "module name" globals a pickle names
  canon_meta(path)       metadata.pkl with each path's groups as a sorted list (the package
                         orders them by set iteration)
  patch_metadata_gather()
      torch-checkpointing 0.1.1 all-gathers save metadata through CUDA tensors; gloo CPU
      ranks use dist.all_gather_object instead (the same dict of pickled values)
  torch_boxes(sd)        {key: [offsets, sizes]} of this rank's shards, torch's own geometry
  full_state(sd)         the full tensors (collective: every rank calls it)
"""

import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 6)
        self.proj = torch.nn.Linear(6, 10)
        self.norm = torch.nn.LayerNorm(3)
        self.out = torch.nn.Linear(10, 7, bias=False)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, idx):
        h = self.proj(self.emb(idx))
        return self.out(h).square().mean() + self.norm(h[:, :3]).sum() * self.scale


CASES = {"fsdp": (4,), "hsdp": (2, 2), "tp": (2, 2)}
MESH_NAMES = {"fsdp": ("dp_shard",), "hsdp": ("dp_replicate", "dp_shard"),
              "tp": ("dp_shard", "tp")}


def build(case, mesh, device=None):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(20)
    if device is not None:
        with torch.device(device):
            model = Net()
    else:
        model = Net()
    if case == "tp":
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        parallelize_module(model, mesh["tp"], {"proj": RowwiseParallel(),
                                               "out": ColwiseParallel()})
        fully_shard(model, mesh=mesh["dp_shard"])
    else:
        fully_shard(model, mesh=mesh)
    return model


def mesh_for(case):
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", CASES[case], mesh_dim_names=MESH_NAMES[case])


def patch_metadata_gather():
    import torch.distributed as dist
    from torch_checkpointing.metadata_manager import DefaultMetadataManager

    def gather(self, data, process_group=None):
        out = [None] * dist.get_world_size(process_group)
        dist.all_gather_object(out, data, group=process_group)
        return dict(enumerate(out))

    DefaultMetadataManager._all_gather_pickled_data = gather


def manager(layout, items=("model",)):
    from torch_checkpointing import CheckpointManager, ItemSpec
    from torch_checkpointing.checkpoint_layout import LayoutInfo, SafetensorsSerialization
    from torch_checkpointing.config import SyncCheckpointSaverConfig
    from torch_checkpointing.default_resharder import DefaultResharder
    from torch_checkpointing.storage.filesystem import LocalFileSystemStorageConfig
    specs = {}
    for item in items:
        specs[item] = ItemSpec(resharder=DefaultResharder())
        if layout == "st":
            specs[item] = ItemSpec(resharder=DefaultResharder(), layout=LayoutInfo(
                item + "_{rank}.safetensors", SafetensorsSerialization()))
    return CheckpointManager(CheckpointManager.Config(
        items=specs, save=SyncCheckpointSaverConfig(),
        storage_config=LocalFileSystemStorageConfig(use_direct_io=False)))


def trace_reads(opened):
    import os
    from torch_checkpointing.storage.filesystem import LocalFileSystemStorage

    def wrap(name):
        orig = getattr(LocalFileSystemStorage, name)

        def traced(self, path, *a, **kw):
            opened.append(os.path.basename(str(path)))
            return orig(self, path, *a, **kw)
        setattr(LocalFileSystemStorage, name, traced)
    for name in ("stream_read", "read", "getsize"):
        if hasattr(LocalFileSystemStorage, name):
            wrap(name)


def torch_boxes(sd):
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    out = {}
    for k, v in sd.items():
        if isinstance(v, DTensor):
            shape, off = compute_local_shape_and_global_offset(v.shape, v.device_mesh,
                                                               v.placements)
            out[k] = [list(off), list(shape)]
        else:
            out[k] = [[0] * v.dim(), list(v.shape)]
    return out


def full_state(sd):
    from torch.distributed.tensor import DTensor
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
            for k, v in sd.items()}


def full_diff(rank, sd, full, what):
    got = full_state(sd)
    return ["rank %d: %s differs after %s" % (rank, k, what)
            for k, w in full.items()
            if k not in got or got[k].dtype != w.dtype or not torch.equal(got[k], w)]


def canon_meta(path):
    import pickle
    with open(path, "rb") as f:
        m = pickle.load(f)
    for item in m["metadata"].values():
        for k, groups in item["nested_path_to_metadata"].items():
            item["nested_path_to_metadata"][k] = sorted(repr(g) for g in groups)
    return m


def pickle_globals(data):
    import pickletools
    return {str(arg) for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"}
