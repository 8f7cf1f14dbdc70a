#!/usr/bin/env python3
"""Write the hostile-input corpus for tests/hostile/run.sh.

Usage: gen.py FIXTURES OUTDIR

Every input is made here, from the committed fixtures and byte-level edits
(standard library only, no torch): each one is invalid in one way and every
command must refuse it with exit 2 or 3 and one stderr line naming it.
Inputs that point outside their own directory point at ../canary*, which
run.sh places beside them; reading one is a failure.

Each case is OUTDIR/<name>/in (a file or a directory); OUTDIR/<name>/readers
lists the commands that may succeed on it because they never read the broken
part (e.g. `inspect` without --verify on a flipped data bit).
"""
import copyreg
import io
import json
import os
import pickle
import shutil
import struct
import sys
import types
import zipfile

# --------------------------------------------------------------------------
# Raw pickle opcodes, for what pickle.dumps would never write.

PROTO2 = b"\x80\x02"
STOP = b"."


def short_str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b  # BINUNICODE, as torch.save writes


def binput(i):
    return b"r" + struct.pack("<I", i)  # LONG_BINPUT


def binget(i):
    return b"j" + struct.pack("<I", i)  # LONG_BINGET


def dag_pickle(levels):
    """{'l0': 7, ..., 'l40': t40} where t(i+1) = (t(i), t(i)) through the memo: 2**40 leaves."""
    p = PROTO2 + b"}" + short_str("l0") + b"K\x07" + binput(0) + b"s"
    for i in range(levels):
        p += short_str("l%d" % (i + 1)) + binget(i) + binget(i) + b"\x86" + binput(i + 1) + b"s"
    return p + STOP


def deep_pickle(depth):
    """{'x': [[[...]]]} nested depth times (MARK ... LIST)."""
    return PROTO2 + b"}" + short_str("x") + b"(" * depth + b"l" * depth + b"s" + STOP


def huge_memo_pickle():
    return PROTO2 + b"}" + short_str("x") + b"K\x01" + binput(0xFFFFFFF0) + b"s" + STOP


def huge_get_pickle():
    return PROTO2 + b"}" + short_str("x") + binget(0xFFFFFFF0) + b"s" + STOP


def long4_pickle():
    return PROTO2 + b"}" + short_str("x") + b"\x8b" + struct.pack("<i", 0x7FFFFFF0) + b"\1" + b"s" + STOP


def binunicode8_pickle():
    return b"\x80\x04}" + short_str("x") + b"\x8d" + struct.pack("<Q", 1 << 62) + b"ab" + b"s" + STOP


def torch_zip(pkl, extra=None):
    """A torch.save archive (stored records under archive/) around data.pkl."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", b"little")
        for name, data in (extra or {}).items():
            z.writestr("archive/" + name, data)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def zip_entry_outside(pkl):
    """Central directory says data.pkl starts past the end of the file."""
    data = bytearray(torch_zip(pkl))
    cd = data.find(b"PK\x01\x02")
    struct.pack_into("<I", data, cd + 42, len(data) + 4096)  # local header offset
    return bytes(data)


# --------------------------------------------------------------------------
# DCP .metadata: load with stand-in classes, edit, dump with the same names.

class Stub:
    """An instance of any pickled class: how it was built, and its state."""

    def __reduce_ex__(self, proto):
        if hasattr(self, "_args"):
            return (type(self), self._args)
        return (copyreg.__newobj__, (type(self),), getattr(self, "_state", None))

    def __setstate__(self, state):
        self._state = state


_classes = {}


def stub_class(module, name):
    key = (module, name)
    if key not in _classes:
        def init(self, *args):
            self._args = args
        cls = type(name, (Stub,), {"__init__": init, "__module__": module, "__qualname__": name})
        _classes[key] = cls
        mod = sys.modules.get(module)
        if mod is None:
            mod = types.ModuleType(module)
            sys.modules[module] = mod
        setattr(mod, name, cls)
    return _classes[key]


class StubUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return stub_class(module, name)


def load_meta(path):
    with open(path, "rb") as f:
        return StubUnpickler(f).load()


def dump_meta(meta, path):
    with open(path, "wb") as f:
        pickle.dump(meta, f, protocol=2)


def sdm(meta):
    return meta._state["state_dict_metadata"]


def storage(meta):
    return meta._state["storage_data"]


def first_tensor(meta, ndim=0):
    for k, v in sdm(meta).items():
        if type(v).__name__ == "TensorStorageMetadata" and len(v._state["size"]._args[0]) >= ndim:
            return k, v
    raise SystemExit("fixture has no tensor")


def first_bytes(meta):
    for k, v in sdm(meta).items():
        if type(v).__name__ == "BytesStorageMetadata":
            return k
    raise SystemExit("fixture has no bytes item")


def size_stub(dims):
    return stub_class("torch", "Size")(tuple(dims))


def storage_infos(meta, fqn=None):
    for idx, info in storage(meta).items():
        if fqn is None or idx._state["fqn"] == fqn:
            yield idx, info


def set_info(info, **kw):
    st = info._state
    if isinstance(st, tuple):  # (dict, slots) of a slotted dataclass
        st[0].update(kw) if st[0] else st[1].update(kw)
    else:
        st.update(kw)


def get_info(info, key):
    st = info._state
    if isinstance(st, tuple):
        return (st[0] or st[1])[key]
    return st[key]


# --------------------------------------------------------------------------
# Chunks whose element counts add up but that do not tile their tensor: an
# overlap in one place cancels a gap in another.  A reader that only counts
# would leave the gap's bytes uninitialised in its output.

def safetensors_rank(path, tensors):
    """A per-rank file as torch's HuggingFaceStorageWriter(save_distributed=True) writes it:
    tensors is [(name, local shape, global offsets)], float32 values 1, 2, ..."""
    header, data, info = {}, b"", {}
    for name, shape, offsets in tensors:
        n = 1
        for d in shape:
            n *= d
        blob = struct.pack("<%df" % n, *range(1, n + 1))
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
        info[name] = {"saved_offsets": offsets}
    header["__metadata__"] = {"DCP_SHARDING_INFO": json.dumps(info)}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def move_chunk(m, fqn, old, new, size=None):
    """Chunk `old` of tensor fqn (and its storage key) to offsets `new`; optionally a new global size."""
    t = sdm(m)[fqn]
    if size is not None:
        t._state["size"] = size_stub(size)
    for c in t._state["chunks"]:
        if tuple(c._state["offsets"]._args[0]) == tuple(old):
            c._state["offsets"] = size_stub(new)
    for idx, _ in storage_infos(m, fqn):
        if tuple(idx._state["offset"]._args[0]) == tuple(old):
            idx._state["offset"] = size_stub(new)


def overlap_gap_cases(fixtures, case):
    """Per-rank safetensors, DCP and rank-local DCP checkpoints with cancelling overlaps and gaps:
    every command refuses them as invalid input (exit 3)."""

    def case3(name):
        p = case(name)
        with open(os.path.join(os.path.dirname(p), "exit"), "w") as f:
            f.write("3\n")
        return p
    # 1-D: [0:3] + [2:5] + [6:8] of 8: row 2 twice, row 5 never.
    p = case3("st_ranks_overlap_gap_1d")
    os.mkdir(p)
    for r, (shape, off) in enumerate((([3], [0]), ([3], [2]), ([2], [6]))):
        safetensors_rank(os.path.join(p, "shard-%05d.safetensors" % (r + 1)), [("w", shape, off)])
    # 2-D: [0:2, 0:2] + [0:2, 1:3] + [2:4, 0:4] of [4, 4]: column 1 twice, column 3 never.
    p = case3("st_ranks_overlap_gap_2d")
    os.mkdir(p)
    for r, (shape, off) in enumerate((([2, 2], [0, 0]), ([2, 2], [0, 1]), ([2, 4], [2, 0]))):
        safetensors_rank(os.path.join(p, "shard-%05d.safetensors" % (r + 1)),
                         [("w", shape, off), ("b", [1], [r])])

    train = os.path.join(fixtures, "dcp_train", "plain")

    def edit(name, base, meta, fn):
        p = case3(name)
        shutil.copytree(base, p)
        m = load_meta(os.path.join(p, meta))
        fn(m)
        dump_meta(m, os.path.join(p, meta))

    # torch's FSDP2 save of fc1.bias (7,): [0:2] [2:4] [4:6] [6:7]; the third moved to [3:5].
    edit("dcp_overlap_gap_1d", train, ".metadata",
         lambda m: move_chunk(m, "model.block.fc1.bias", (4,), (3,)))

    # proj.weight (4, 5): four (1, 5) rows; as a (2, 10) tensor they would tile it as a 2 x 2
    # grid, but the second box of row 0 sits at column 4: [0:1, 4:5] twice, [0:1, 9:10] never.
    def columns(m):
        fqn = "model.proj.weight"
        for old, new in (((1, 0), (0, 4)), ((2, 0), (1, 0)), ((3, 0), (1, 5))):
            move_chunk(m, fqn, old, new, size=[2, 10])
    edit("dcp_overlap_gap_2d", train, ".metadata", columns)

    # Rank-local metadata (a save without collectives): rank 1's w (5, 2) rows [3:5] claim [2:4].
    edit("dcp_ranklocal_overlap_gap", os.path.join(fixtures, "dcp", "ranklocal_ws2"),
         "__1.metadata", lambda m: move_chunk(m, "w", (3, 0), (2, 0)))


# --------------------------------------------------------------------------

def output_safety_cases(case, write, fixtures):
    """Inputs whose names or offsets no output may carry (issue 20 items 9 and 12)."""
    # A key holding a lone surrogate, which pickle carries (surrogatepass) but no UTF-8 text can:
    # full-to-dcp refuses it as invalid input (exit 3) before writing anything.
    src = zipfile.ZipFile(os.path.join(fixtures, "full", "tiny_vitlm.pt"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name in src.namelist():
            data = src.read(name)
            if name.endswith("/data.pkl"):
                old = short_str("logit_scale")
                assert data.count(old) == 1
                data = data.replace(old, b"X" + struct.pack("<I", 11) + b"logit_s\xed\xb3\xbf_")
            z.writestr(name, data)
    write(case("key_surrogate_pt", readers="inspect\nverify\nchecksum\ndiff\n"), buf.getvalue())

    # data_offsets past 2**64 and up to 2**63-1: exit 3 naming the file, never a usage error.
    def st(entries, data):
        hdr = ("{" + ",".join('"%s":%s' % kv for kv in entries.items()) + "}").encode()
        return struct.pack("<Q", len(hdr)) + hdr + data

    t = '{"dtype":"U8","shape":[4],"data_offsets":[%d,%d]}'
    write(case("st_offsets_past_u64_safetensors"),
          st({"a": t % (0, 4), "b": t % (4, 2**64 + 3)}, b"abcdefgh"))
    write(case("st_offsets_int64_max_safetensors"),
          st({"a": t % (2**63 - 5, 2**63 - 1)}, b"abcd"))


def sharded_st_file(tensors, offsets_json=None):
    """One file of a sharded safetensors checkpoint (torch's HuggingFaceStorageWriter
    with save_distributed=True): tensors maps name -> (shape, saved_offsets), all
    F32 and zero-filled.  offsets_json replaces DCP_SHARDING_INFO verbatim."""
    import json
    header, data, info = {}, b"", {}
    for name, (shape, offs) in tensors.items():
        n = 4
        for s in shape:
            n *= s
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + n]}
        data += b"\0" * n
        info[name] = {"saved_offsets": offs}
    header["__metadata__"] = {
        "DCP_SHARDING_INFO": offsets_json if offsets_json is not None else json.dumps(info),
        "DCP_VERSION": "1.0", "format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def sharded_st_offset_cases(case, write):
    """Sharded safetensors directories whose saved_offsets put a chunk so far out
    that the global shape torch's reader infers (the furthest chunk end on every
    dim) has an element count or byte size past int64."""
    big = {
        # two ranks, the second 2^62 rows down: (2^62 + 2) * 4 elements
        "st_sharded_offset_2p62": [{"w": ([2, 4], [0, 0])}, {"w": ([2, 4], [1 << 62, 0])}],
        # 2^61 + 2 elements fit int64; their 4-byte size does not
        "st_sharded_bytes_2p61": [{"w": ([2], [0])}, {"w": ([2], [1 << 61])}],
        # one chunk ending at 2^63 - 1
        "st_sharded_offset_2p63": [{"b": ([4], [0]), "w": ([1], [(1 << 63) - 2])}],
        # each dim fits, their product (2^64) does not
        "st_sharded_grid_2p32": [{"w": ([1, 1], [1 << 32, 1 << 32])}],
        # no elements, but the row size (strides) overflows
        "st_sharded_empty_rows_2p40": [{"w": ([0, 2, 2], [0, 1 << 40, 1 << 40])}],
    }
    for name, ranks in big.items():
        p = case(name)
        os.mkdir(p)
        for r, tensors in enumerate(ranks):
            write(os.path.join(p, "shard-%05d-model-00001-of-00001.safetensors" % (r + 1)),
                  sharded_st_file(tensors))
    # offsets the JSON itself cannot give as an int64 (2^63 and 2^64)
    for name, text in (("st_sharded_offset_json_2p63", '{"w": {"saved_offsets": [9223372036854775808]}}'),
                       ("st_sharded_offset_json_2p64", '{"w": {"saved_offsets": [18446744073709551616]}}')):
        p = case(name)
        os.mkdir(p)
        write(os.path.join(p, "shard-00001-model-00001-of-00001.safetensors"),
              sharded_st_file({"w": ([2], [0])}, text))


def tcp_meta(world=2, shape=(4, 3), placements=None, mesh=None, version="2.0", layouts=None):
    """metadata.pkl of a torch_checkpointing checkpoint (docs/torch-checkpointing.md): item
    "model" with one float32 tensor "w", sharded Shard(0) over a 1-D mesh of all ranks,
    each rank's shard in model_<rank>.safetensors (the package's safetensors layout)."""
    mesh = mesh or {"device_type": "cuda", "mesh_shape": (world,),
                    "mesh_data": tuple(range(world)), "mesh_dim_names": ("dp_shard",)}
    strides, acc = [], 1
    for d in reversed(shape):
        strides.insert(0, acc)
        acc *= d
    data = {"global_shape": list(shape), "dtype": "torch.float32", "stride": strides,
            "mesh_spec": mesh, "placements": placements or [{"type": "Shard", "dim": 0}]}
    st = {"type": "SafetensorsSerialization"}
    return {"metadata": {"model": {
        "nested_path_to_metadata": {'["w"]': [{
            "sharding_metadata": {"type": "DTensorShardingMetadata", "data": data},
            "ranks": tuple(range(world))}]},
        "rank_to_layout_info": layouts if layouts is not None else {
            r: {"file_path": "model_%d.safetensors" % r, "serialization_format": st}
            for r in range(world)}}},
        "world_size": world, "version": version}


def tcp_cases(case, write):
    """torch_checkpointing directories (issue 23): metadata.pkl is a pickle of builtin values
    only, naming files each rank holds; every way it can lie is refused before a read."""
    def tcp_dir(name, meta=None, raw=None, shards=((2, 3), (2, 3)), readers=""):
        p = case(name, readers)
        os.mkdir(p)
        write(os.path.join(p, "metadata.pkl"), raw if raw is not None else pickle.dumps(meta))
        for r, shape in enumerate(shards):
            n = 4
            for d in shape:
                n *= d
            h = json.dumps({"w": {"dtype": "F32", "shape": list(shape),
                                  "data_offsets": [0, n]}}).encode()
            write(os.path.join(p, "model_%d.safetensors" % r),
                  struct.pack("<Q", len(h)) + h + b"\0" * n)
        return p

    # A global in the metadata (the package pickles none): never called, refused.
    tcp_dir("tcp_global", raw=PROTO2 + b"cos\nsystem\n" + short_str("true") + b"\x85R" + STOP)
    # File paths that leave the directory, or hide a NUL.
    st = {"type": "SafetensorsSerialization"}
    for name, path in (("tcp_path_dotdot", "../canary.safetensors"),
                       ("tcp_path_abs", "/etc/passwd"),
                       ("tcp_path_inner_dotdot", "x/../../canary.safetensors"),
                       ("tcp_path_nul", "model_0.safetensors\x00x")):
        tcp_dir(name, tcp_meta(layouts={0: {"file_path": path, "serialization_format": st},
                                        1: {"file_path": "model_1.safetensors",
                                            "serialization_format": st}}))
    # Two ranks naming one file, a rank without a layout, a version we do not know.
    tcp_dir("tcp_same_file", tcp_meta(layouts={r: {"file_path": "model_0.safetensors",
                                                   "serialization_format": st}
                                               for r in range(2)}))
    tcp_dir("tcp_rank_missing", tcp_meta(layouts={0: {"file_path": "model_0.safetensors",
                                                      "serialization_format": st}}))
    tcp_dir("tcp_version_1", tcp_meta(version="1.0"))
    # Meshes: a rank twice, more ranks than the shape, a world of 2**40 ranks.
    tcp_dir("tcp_mesh_dup_rank", tcp_meta(mesh={"device_type": "cuda", "mesh_shape": (2,),
                                                "mesh_data": (0, 0), "mesh_dim_names": None}))
    tcp_dir("tcp_mesh_short", tcp_meta(mesh={"device_type": "cuda", "mesh_shape": (2,),
                                             "mesh_data": (0, 1, 1), "mesh_dim_names": None}))
    m = tcp_meta()
    m["world_size"] = 2**40
    tcp_dir("tcp_world_huge", m)
    # A shape whose byte size overflows int64; a shard file of another shape than its box.
    tcp_dir("tcp_shape_overflow", tcp_meta(shape=(2**62, 2**62)))
    tcp_dir("tcp_shard_shape", tcp_meta(), shards=((2, 3), (3, 3)))
    # StridedShard alone leaves each rank two pieces of dim 0: not one box.
    tcp_dir("tcp_strided_pieces", tcp_meta(shape=(8, 3), placements=[
        {"type": "StridedShard", "dim": 0, "split_factor": 2}]), shards=((4, 3), (4, 3)))
    # Placements on a dim the tensor lacks, of an unknown type; a path that is not JSON.
    tcp_dir("tcp_place_dim", tcp_meta(placements=[{"type": "Shard", "dim": 5}]))
    tcp_dir("tcp_place_partial", tcp_meta(placements=[{"type": "Partial"}]))
    m = tcp_meta()
    md = m["metadata"]["model"]["nested_path_to_metadata"]
    md["w]"] = md.pop('["w"]')
    tcp_dir("tcp_path_not_json", m)
    # A shard file gone; the memo describing 2**40 nodes.
    p = tcp_dir("tcp_file_missing", tcp_meta())
    os.unlink(os.path.join(p, "model_1.safetensors"))
    tcp_dir("tcp_dag", raw=dag_pickle(40))


def main():
    fixtures, out = sys.argv[1], sys.argv[2]
    dcp = os.path.join(fixtures, "dcp", "model_optim_ws2")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cases = []

    def case(name, readers=""):
        d = os.path.join(out, name)
        os.makedirs(d)
        with open(os.path.join(d, "readers"), "w") as f:
            f.write(readers)
        cases.append(name)
        return os.path.join(d, "in")

    def write(path, data):
        with open(path, "wb") as f:
            f.write(data)

    def dcp_copy(name, readers=""):
        p = case(name, readers)
        shutil.copytree(dcp, p)
        os.unlink(os.path.join(p, "expected.json"))
        return p

    def edit_meta(p, fn):
        m = load_meta(os.path.join(p, ".metadata"))
        fn(m)
        dump_meta(m, os.path.join(p, ".metadata"))

    # Special files where a file is expected.
    os.mkfifo(case("fifo_pt"))
    os.makedirs(os.path.join(case("dir_pt"), "model.pt"))
    p = dcp_copy("dcp_fifo_distcp")
    os.unlink(os.path.join(p, "__1_0.distcp"))
    os.mkfifo(os.path.join(p, "__1_0.distcp"))
    p = dcp_copy("dcp_fifo_metadata")
    os.unlink(os.path.join(p, ".metadata"))
    os.mkfifo(os.path.join(p, ".metadata"))
    p = dcp_copy("dcp_dir_distcp")
    os.unlink(os.path.join(p, "__0_0.distcp"))
    os.mkdir(os.path.join(p, "__0_0.distcp"))
    p = case("st_index_fifo_shard")
    os.mkdir(p)
    os.mkfifo(os.path.join(p, "model-00001-of-00001.safetensors"))
    write(os.path.join(p, "model.safetensors.index.json"),
          b'{"metadata": {}, "weight_map": {"w": "model-00001-of-00001.safetensors"}}')

    # Paths that escape the input directory.
    for name, target in (("st_index_dotdot", "../canary.safetensors"),
                         ("st_index_abs", "/etc/passwd")):
        p = case(name)
        os.mkdir(p)
        write(os.path.join(p, "model.safetensors.index.json"),
              b'{"metadata": {}, "weight_map": {"w": "%s"}}' % target.encode())
    for name, rel in (("dcp_relpath_dotdot", "../canary.distcp"),
                      ("dcp_relpath_abs", "/etc/passwd"),
                      ("dcp_relpath_nul", "__0_0.distcp\x00x")):
        p = dcp_copy(name)

        def escape(m, rel=rel):
            for _, info in storage_infos(m):
                set_info(info, relative_path=rel)
        edit_meta(p, escape)

    # Sizes that overflow int64.
    p = dcp_copy("dcp_shape_overflow")

    def big_shape(m):
        _, t = first_tensor(m, 2)
        t._state["size"] = size_stub([1 << 40, 1 << 40])
    edit_meta(p, big_shape)
    p = dcp_copy("dcp_bytes_overflow")

    def big_bytes(m):
        _, t = first_tensor(m, 2)
        # the element count fits int64; the byte count (4 bytes each) does not
        t._state["size"] = size_stub([1 << 62, 1])
    edit_meta(p, big_bytes)
    p = dcp_copy("dcp_chunk_offset_overflow")

    def big_offset(m):
        fqn, t = first_tensor(m, 2)
        c = t._state["chunks"][-1]
        old = c._state["offsets"]._args[0]
        new = size_stub([(1 << 63) - 1] + list(old[1:]))
        c._state["offsets"] = new
        for idx, _ in storage_infos(m, fqn):
            if tuple(idx._state["offset"]._args[0]) == tuple(old):
                idx._state["offset"] = new
    edit_meta(p, big_offset)

    # .metadata but no data files (UBSan once saw qsort(NULL, 0)).
    p = dcp_copy("dcp_no_distcp")
    for f in os.listdir(p):
        if f.endswith(".distcp"):
            os.unlink(os.path.join(p, f))

    # Pickles that are small but expand, nest or index without bound.
    write(case("pickle_dag_bomb_pt"), torch_zip(dag_pickle(40)))
    write(case("pickle_deep_nesting_pt"), torch_zip(deep_pickle(200000)))
    write(case("pickle_huge_memo_pt"), torch_zip(huge_memo_pickle()))
    write(case("pickle_huge_get_pt"), torch_zip(huge_get_pickle()))
    write(case("pickle_long4_pt"), torch_zip(long4_pickle()))
    write(case("pickle_binunicode8_pt"), torch_zip(binunicode8_pickle()))
    write(case("zip_entry_outside_pt"), zip_entry_outside(dag_pickle(1)))
    p = dcp_copy("dcp_bytes_dag_bomb")

    def bomb_item(m):
        fqn = first_bytes(m)
        blob = torch_zip(dag_pickle(40))
        for _, info in storage_infos(m, fqn):
            rel = get_info(info, "relative_path")
            path = os.path.join(p, rel)
            off = os.path.getsize(path)
            with open(path, "ab") as f:
                f.write(blob)
            set_info(info, offset=off, length=len(blob))
    edit_meta(p, bomb_item)

    # Files that are not what their name says.
    p = case("st_text_safetensors")
    os.mkdir(p)
    write(os.path.join(p, "model.safetensors"), b"this is a text file, not safetensors\n" * 4)
    p = dcp_copy("dcp_text_distcp")
    write(os.path.join(p, "__1_0.distcp"), b"hello, I am a text file pretending to be a shard\n" * 8)

    # A flipped bit in stored tensor bytes: only commands that read data see it.
    p = dcp_copy("dcp_bitflip", readers="inspect")
    m = load_meta(os.path.join(p, ".metadata"))
    fqn, t = first_tensor(m, 2)
    for _, info in storage_infos(m, fqn):
        path = os.path.join(p, get_info(info, "relative_path"))
        off, length = get_info(info, "offset"), get_info(info, "length")
        with open(path, "rb") as f:
            f.seek(off)
            blob = f.read(length)
        z = zipfile.ZipFile(io.BytesIO(blob))
        rec = [i for i in z.infolist() if "/data/" in i.filename][0]
        # local header: 30 bytes + name + extra, then the data
        lh = rec.header_offset
        nlen, xlen = struct.unpack_from("<HH", blob, lh + 26)
        at = off + lh + 30 + nlen + xlen
        with open(path, "r+b") as f:
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x10]))
        break

    output_safety_cases(case, write, fixtures)
    overlap_gap_cases(fixtures, case)
    sharded_st_offset_cases(case, write)
    tcp_cases(case, write)

    with open(os.path.join(out, "CASES"), "w") as f:
        f.write("\n".join(cases) + "\n")


if __name__ == "__main__":
    main()
