"""Interop: the facts docs/torch-checkpointing.md states about the package's default layout.

fsdpconv does not write the default (torch.save of DTensors) layout yet; a writer will have
to reproduce these bytes from C for each torch version, so this test pins what the running
torch and torch_checkpointing write, and what their loader needs.

4 gloo ranks build the seeded model of tcp_common.py for each case (fsdp 4, hsdp 2 x 2,
tp dp2 x tp2) and save model.state_dict() with CheckpointManager in the default layout.
Per rank file (main process):
  records: data.pkl, .format_version "1", .storage_alignment "64", byteorder, data/0..n-1,
      version "3\\n", .data/serialization_id
  globals: exactly the documented set for the case, with _FlatLayout iff this torch has it
  DeviceMesh.__dict__ and DTensorSpec.__dict__: the documented fields in the documented order
      (torch 2.15: with _preserve_rank_order and a _MeshLayout of _FlatLayout axes; 2.11:
      without it, a _MeshLayout of shape and stride; a sliced mesh, as in the tp case, only
      documented fields, in an order that varies)
  storages (fsdp, hsdp): in state-dict order with the mesh's int32 rank map right after the
      first DTensor's storage; every DTensor's storage is FSDP2's padded shard,
      ceil(dim0 / dp_shard) rows, zero past the rank's rows
Load (4 ranks, each case): the save, and a copy whose rank files carry values a writer
cannot know (process-group names, DeviceMesh._hash, DTensorSpec._hash = None), load with
CheckpointManager into a meta-init + fully_shard + to_empty model bit-exactly, each rank
reading only metadata.pkl and its own model_<rank>.pt (traced through the package's storage).

usage: PYTHON test_tcp_pt_layout.py     exit 0 pass, 1 fail, 77 skip
"""

import os
import shutil
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import warnings  # noqa: E402
warnings.filterwarnings("ignore")

import torch  # noqa: E402

import common  # noqa: E402
import f2d_reference as ref  # noqa: E402
import tcp_common as tc  # noqa: E402

DP_SHARD = {"fsdp": 4, "hsdp": 2}
BASE_GLOBALS = {
    "collections OrderedDict", "torch FloatStorage", "torch IntStorage", "torch Size",
    "torch device", "torch float32", "torch._tensor _rebuild_from_type_v2",
    "torch._utils _rebuild_tensor_v2", "torch._utils _rebuild_wrapper_subclass",
    "torch.distributed._mesh_layout _MeshLayout", "torch.distributed.device_mesh DeviceMesh",
    "torch.distributed.tensor DTensor", "torch.distributed.tensor._dtensor_spec DTensorSpec",
    "torch.distributed.tensor._dtensor_spec ShardOrderEntry",
    "torch.distributed.tensor._dtensor_spec TensorMeta",
    "torch.distributed.tensor.placement_types Shard", "torch.serialization _get_layout"}
CASE_GLOBALS = {"fsdp": set(),
                "hsdp": {"torch.distributed.tensor.placement_types Replicate"},
                "tp": {"torch.distributed.tensor.placement_types Replicate",
                       "torch.distributed.tensor.placement_types _StridedShard"}}
MESH_FIELDS = ["_device_type", "_layout", "_rank_map", "_mesh_dim_names", "_root_mesh",
               "_preserve_rank_order", "_flatten_rank_map", "_thread_id", "_flatten_mapping",
               "_dim_group_names", "_rank", "_coordinate_on_dim", "_hash", "_pg_registry"]
SPEC_FIELDS = ["mesh", "placements", "tensor_meta", "shard_order",
               "use_strided_shard_as_shard_order", "_hash"]


def has_flat_layout():
    import torch.distributed._mesh_layout as ml
    return hasattr(ml, "_FlatLayout")


def save_rank(rank, world, port, job):
    try:
        common.rank_init(rank, world, port, 120)
        tc.patch_metadata_gather()
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: setup failed: %s" % (rank, ref.short_exc())]}])
        return
    results = []
    for case in tc.CASES:
        problems = []
        try:
            sd = tc.build(case, tc.mesh_for(case)).state_dict()
            full = tc.full_state(sd)
            if rank == 0:
                torch.save(full, os.path.join(job["tmp"], "%s_full.pt" % case))
            mgr = tc.manager("pt")
            mgr.save(os.path.join(job["tmp"], case), {"model": sd})
            mgr.close()
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": case, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def load_rank(rank, world, port, job):
    from torch.distributed.tensor import DTensor
    try:
        common.rank_init(rank, world, port, 120)
        opened = []
        tc.trace_reads(opened)
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: setup failed: %s" % (rank, ref.short_exc())]}])
        return
    results = []
    for label in job["labels"]:
        case = label.split("_")[0]
        problems = []
        try:
            want = torch.load(os.path.join(job["tmp"], "%s_full.pt" % case), weights_only=True)
            model = tc.build(case, tc.mesh_for(case), device="meta")
            model.to_empty(device="cpu")
            sd = model.state_dict()
            for v in sd.values():
                (v._local_tensor if isinstance(v, DTensor) else v).detach().zero_()
            del opened[:]
            mgr = tc.manager("pt")
            mgr.load(os.path.join(job["tmp"], label), into={"model": sd})
            mgr.close()
            reads = sorted(set(opened))
            if reads != sorted(["metadata.pkl", "model_%d.pt" % rank]):
                problems.append("rank %d read %s" % (rank, reads))
            got = tc.full_state(sd)
            for k, w in want.items():
                if got[k].dtype != w.dtype or not torch.equal(got[k], w):
                    problems.append("rank %d: %s differs" % (rank, k))
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": label, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def check_records(path):
    """The archive's record list and small records; (problems, zip, prefix, storages)."""
    z = zipfile.ZipFile(path)
    names = [i.filename.split("/", 1)[1] for i in z.infolist()]
    nstorages = sum(1 for n in names if n.startswith("data/"))
    want = ["data.pkl", ".format_version", ".storage_alignment", "byteorder"] + \
        ["data/%d" % i for i in range(nstorages)] + ["version", ".data/serialization_id"]
    probs = [] if names == want else ["%s: records %s, documented %s" % (path, names, want)]
    prefix = z.infolist()[0].filename.split("/", 1)[0]
    for rec, val in ((".format_version", b"1"), (".storage_alignment", b"64"),
                     ("byteorder", b"little"), ("version", b"3\n")):
        got = z.read(prefix + "/" + rec)
        if got != val:
            probs.append("%s: %s is %r, documented %r" % (path, rec, got, val))
    return probs, z, prefix, nstorages


def padded_nbytes(v, shards):
    g = v.shape
    rows = -(-g[0] // shards)
    n = rows * v.element_size()
    for s in g[1:]:
        n *= s
    return n


def check_file(case, path):
    from torch.distributed.tensor import DTensor
    sd = torch.load(path, weights_only=False)
    probs, z, prefix, nst = check_records(path)
    want_g = BASE_GLOBALS | CASE_GLOBALS[case]
    if has_flat_layout():
        want_g = want_g | {"torch.distributed._mesh_layout _FlatLayout"}
    got_g = tc.pickle_globals(z.read(prefix + "/data.pkl"))
    if got_g != want_g:
        probs.append("%s: globals %s more, %s fewer than documented" % (
            path, sorted(got_g - want_g), sorted(want_g - got_g)))
    mesh_fields = [f for f in MESH_FIELDS if has_flat_layout() or f != "_preserve_rank_order"]

    def mesh_ok(m):
        # A sliced mesh (the tp case's root and submeshes) varies by version: _hash set
        # before _dim_group_names, or (2.11's root) no _hash at all; only unknown fields count.
        f = list(m.__dict__)
        return f == mesh_fields if case != "tp" else set(f) <= set(mesh_fields)
    sizes = []
    seen_mesh = False
    for k, v in sd.items():
        if not isinstance(v, DTensor):
            sizes.append(v.untyped_storage().nbytes())
            continue
        spec, mesh = v._spec, v._spec.mesh
        if list(spec.__dict__) != SPEC_FIELDS:
            probs.append("%s %s: DTensorSpec fields %s" % (path, k, list(spec.__dict__)))
        for m in (mesh, mesh._root_mesh):
            if m is not None and not mesh_ok(m):
                probs.append("%s %s: DeviceMesh fields %s" % (path, k, list(m.__dict__)))
        lay = mesh._layout.__dict__
        if has_flat_layout() != ("axes" in lay) or has_flat_layout() == ("shape" in lay):
            probs.append("%s %s: _MeshLayout state %r" % (path, k, lay))
        if mesh._rank_map.dtype != torch.int32 or mesh._rank_map.tolist() != [0, 1, 2, 3]:
            probs.append("%s %s: rank map %r" % (path, k, mesh._rank_map))
        lt = v._local_tensor
        sizes.append(lt.untyped_storage().nbytes())
        if not seen_mesh:
            sizes.append(16)
            seen_mesh = True
        if case in DP_SHARD:
            want = padded_nbytes(v, DP_SHARD[case])
            raw = bytes(lt.untyped_storage())
            used = lt.numel() * lt.element_size()
            if len(raw) != want or raw[used:] != bytes(len(raw) - used):
                probs.append("%s %s: storage %d bytes (%d used), FSDP2's padded %d, zero pad"
                             % (path, k, len(raw), used, want))
    got = [z.getinfo("%s/data/%d" % (prefix, i)).file_size for i in range(nst)]
    if case in DP_SHARD and got != sizes:
        probs.append("%s: storage records %s, state-dict order with the rank map after the "
                     "first DTensor gives %s" % (path, got, sizes))
    return probs


def blind_copy(src, dst):
    """A copy whose rank files carry values no offline writer can know."""
    from torch.distributed.tensor import DTensor
    shutil.copytree(src, dst)
    for rank in range(4):
        p = os.path.join(dst, "model_%d.pt" % rank)
        sd = torch.load(p, weights_only=False)
        for v in sd.values():
            if isinstance(v, DTensor):
                v._spec.__dict__["_hash"] = None
                for m in (v._spec.mesh, v._spec.mesh._root_mesh):
                    if m is not None:
                        m.__dict__["_dim_group_names"] = [
                            "fsdpconv%d" % i for i in range(len(m._dim_group_names))]
                        m.__dict__["_hash"] = 1
        torch.save(sd, p)


def main():
    try:
        import torch_checkpointing  # noqa: F401
    except ImportError:
        print("skip: torch_checkpointing is not installed (make venv)")
        return 77
    torch.set_num_threads(1)
    rep = common.Report("tcp_pt_layout")
    print("torch %s" % torch.__version__)
    tmp = tempfile.mkdtemp(prefix="tcp_pt_")
    try:
        job = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp}
        saved = common.launch_ranks(save_rank, 4, job, list(tc.CASES), wait_s=600)
        labels = []
        for case in tc.CASES:
            if not rep.case("torch_checkpointing saves %s" % case, saved[case]):
                continue
            d = os.path.join(tmp, case)
            probs = []
            for rank in range(4):
                probs += check_file(case, os.path.join(d, "model_%d.pt" % rank))
            rep.case("%s rank files as documented" % case, probs)
            blind_copy(d, os.path.join(tmp, case + "_blind"))
            labels += [case, case + "_blind"]
        job2 = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp,
                "labels": labels}
        loaded = common.launch_ranks(load_rank, 4, job2, labels, wait_s=600)
        for label in labels:
            rep.case("load %s: bit-exact, each rank reads only its own file" % label,
                     loaded[label])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep.finish()


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print("%.1fs" % (time.time() - t0))
    sys.exit(rc)
