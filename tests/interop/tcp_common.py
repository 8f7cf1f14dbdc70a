"""Helpers for the torch_checkpointing interop tests (the real torch-checkpointing package).

  Net, CASES, MESH_NAMES, build(case, mesh)
      the seeded test model (odd dims leave ranks empty shards; a 0-d buffer; a
      ColwiseParallel `out` that FSDP then shards as StridedShard) and how each case
      shards it: fsdp (4), hsdp (2 x 2), tp (dp 2 x tp 2)
  manager(layout)        a CheckpointManager saving synchronously, model item with
                         DefaultResharder, in the default ("pt") or safetensors ("st") layout
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


def patch_metadata_gather():
    import torch.distributed as dist
    from torch_checkpointing.metadata_manager import DefaultMetadataManager

    def gather(self, data, process_group=None):
        out = [None] * dist.get_world_size(process_group)
        dist.all_gather_object(out, data, group=process_group)
        return dict(enumerate(out))

    DefaultMetadataManager._all_gather_pickled_data = gather


def manager(layout):
    from torch_checkpointing import CheckpointManager, ItemSpec
    from torch_checkpointing.checkpoint_layout import LayoutInfo, SafetensorsSerialization
    from torch_checkpointing.config import SyncCheckpointSaverConfig
    from torch_checkpointing.default_resharder import DefaultResharder
    from torch_checkpointing.storage.filesystem import LocalFileSystemStorageConfig
    spec = ItemSpec(resharder=DefaultResharder())
    if layout == "st":
        spec = ItemSpec(resharder=DefaultResharder(), layout=LayoutInfo(
            "model_{rank}.safetensors", SafetensorsSerialization()))
    return CheckpointManager(CheckpointManager.Config(
        items={"model": spec}, save=SyncCheckpointSaverConfig(),
        storage_config=LocalFileSystemStorageConfig(use_direct_io=False)))


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
