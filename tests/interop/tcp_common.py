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
  pt_version_args()      fsdpconv's --torch-version for the running torch (none: the newest
                         form, 2.15's)
  trace_reads(opened)    append the basename of every file the package's storage reads
  full_diff(rank, sd, full, what)  problems where full_state(sd) is not bit-exact `full`
  pickle_globals(data)   the set of "module name" globals a pickle names
  compare_dirs(ours, pkg, key_order)
                         problems where a default-layout (.pt) checkpoint directory differs
                         from the package's own save: files, metadata.pkl, each rank file's
                         records, globals, keys, tensors and storages (padding included)
  canon_meta(path)       metadata.pkl with each path's groups as a sorted list (the package
                         orders them by set iteration)
  patch_metadata_gather()
      torch-checkpointing 0.1.1 all-gathers save metadata through CUDA tensors; gloo CPU
      ranks use dist.all_gather_object instead (the same dict of pickled values)
  torch_boxes(sd)        {key: [offsets, sizes]} of this rank's shards, torch's own geometry
  full_state(sd)         the full tensors (collective: every rank calls it)
"""

import os
import zipfile

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


def pt_version_args():
    v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return [] if v >= (2, 15) else ["--torch-version", "%d.%d" % v]


def trace_reads(opened):
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


def zip_records(path):
    """[(record name without the archive prefix, size)], and data.pkl's bytes."""
    z = zipfile.ZipFile(path)
    recs = [(i.filename.split("/", 1)[1], i.file_size) for i in z.infolist()]
    prefix = z.infolist()[0].filename.split("/", 1)[0]
    return recs, z.read(prefix + "/data.pkl")


def describe(v):
    """[(what, value)] that must match between two rank files' values for one key (a tensor's
    storage with its padding; a non-tensor value by type and ==)."""
    from torch.distributed.tensor import DTensor
    out = [("kind", type(v).__name__)]
    if not isinstance(v, torch.Tensor):
        return out + [("value", v)]
    lt = v
    if isinstance(v, DTensor):
        m = v.device_mesh
        lt = v._local_tensor
        out += [("global shape", tuple(v.shape)), ("placements", tuple(v.placements)),
                ("mesh dim names", m.mesh_dim_names), ("rank map", m._rank_map.tolist())]
    out += [("dtype", str(lt.dtype)), ("local shape", tuple(lt.shape)),
            ("stride", lt.stride()), ("storage offset", lt.storage_offset()),
            ("bytes", bytes(lt.detach().contiguous().reshape(-1).view(torch.uint8).numpy())),
            ("storage (padding included)", bytes(lt.untyped_storage()))]
    return out


def leaves(v, path=""):
    """(dotted path, leaf) of nested dicts and lists, in order (a tuple is a leaf)."""
    if isinstance(v, dict):
        for k, x in v.items():
            yield from leaves(x, "%s%s%s" % (path, "." if path else "", k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from leaves(x, "%s[%d]" % (path, i))
    else:
        yield path, v


def compare_rank_file(ours, pkg, key_order):
    """key_order: the keys (so the storages) must come in the package's order; reshard from a
    torch_checkpointing input orders them as its metadata.pkl does (set iteration), which no
    loader depends on. data.pkl's bytes may differ (fsdpconv writes a GLOBAL at every use and
    one DTensorSpec per tensor, torch memoizes both): its size is not compared."""
    probs = []
    (ra, pa), (rb, pb) = zip_records(ours), zip_records(pkg)
    # serialization_id is random per file; data/<n>'s size depends on the key order
    names = [[n for n, _ in r if not n.startswith("data/")] for r in (ra, rb)]
    sizes = [[z for n, z in r if n.startswith("data/")] for r in (ra, rb)]
    if names[0] != names[1]:
        probs.append("%s: records %s, the package's %s" % (ours, names[0], names[1]))
    if (sizes[0] if key_order else sorted(sizes[0])) != \
            (sizes[1] if key_order else sorted(sizes[1])):
        probs.append("%s: storage sizes %s, the package's %s" % (ours, sizes[0], sizes[1]))
    small = [(n, z) for n, z in ra if n in (".format_version", ".storage_alignment",
                                           "byteorder", "version")]
    if small != [(n, z) for n, z in rb if n in dict(small)]:
        probs.append("%s: small records %s differ from the package's" % (ours, small))
    ga, gb = pickle_globals(pa), pickle_globals(pb)
    if ga != gb:
        probs.append("%s: pickle globals %s more, %s fewer than the package's" % (
            ours, sorted(ga - gb), sorted(gb - ga)))
    a = dict(leaves(torch.load(ours, weights_only=False)))
    b = dict(leaves(torch.load(pkg, weights_only=False)))
    if (list(a) if key_order else sorted(a)) != (list(b) if key_order else sorted(b)):
        return probs + ["%s: keys %s, the package's %s" % (ours, list(a), list(b))]
    for k in b:
        for (what, x), (_, y) in zip(describe(a[k]), describe(b[k])):
            if x != y:
                if isinstance(x, bytes):
                    x, y = "%d bytes" % len(x), "%d bytes" % len(y)
                probs.append("%s %s: %s %s, the package's %s" % (ours, k, what, x, y))
                break
    return probs


def compare_dirs(ours, pkg, key_order):
    a, b = sorted(os.listdir(ours)), sorted(os.listdir(pkg))
    if a != b:
        return ["files %r, the package wrote %r" % (a, b)]
    probs = []
    if canon_meta(os.path.join(ours, "metadata.pkl")) != \
            canon_meta(os.path.join(pkg, "metadata.pkl")):
        probs.append("metadata.pkl differs from the package's")
    for name in a:
        if name != "metadata.pkl":
            probs += compare_rank_file(os.path.join(ours, name), os.path.join(pkg, name),
                                       key_order)
    return probs
