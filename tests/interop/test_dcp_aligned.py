"""Interop test: 4 KiB-aligned DCP items (issue 25) are what torch reads, bit-exact.

fsdpconv starts every uncompressed DCP tensor item whose chunk holds >= 256 KiB on a 4 KiB
boundary of its rank file and pads the item's zip head ("FB" extra field of data/0's local
header) so the tensor bytes start 4096 bytes into the item (convert/dcp_sink.h); smaller
items stay packed.  For a torch.save'd bf16 model whose tensors fall on both sides of the
floor (one tensor's two chunks straddle it), converted by full-to-dcp (--world-size 2, and
--nproc 2, which writes file by file) and resharded to 3 ranks:

  layout   from torch's own FileSystemReader metadata: each item's data/0 local header
           (found through the item's central directory with zipfile) puts the payload at
           offset % 4096 == 0 for chunks >= 256 KiB and right after the item before for the
           others; chunks of both kinds exist
  blobs    torch.load of every item's bytes alone (BytesIO, and a file with mmap=True, which
           takes the payload offset from the local header) == the chunk, bit-exact
  single   dcp.load(no_dist=True) into NaN-filled tensors, and torch's dcp_to_torch_save
  fsdp2    2 (and 3) gloo ranks: fully_shard per layer and root on a meta-device model,
           to_empty, dcp.load; every local shard == its torch.chunk rows and full_tensor()
           == the input, bit-exact

Exits 1 on any failure.
"""

import io
import os
import shutil
import struct
import sys
import tempfile
import zipfile

import torch
from torch import nn

import common
import f2d_reference as ref

ALIGN = 4096
FLOOR = 256 << 10


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(600, 1024)             # 600 x 1024 bf16: 600 KiB chunks on 2
        self.up = nn.Linear(1001, 261, bias=False)     # 261 x 1001: 262262 / 260260 B on 2
        self.norm = nn.LayerNorm(1001)                 # small: packed
        self.down = nn.Linear(1024, 64)                # 64 x 1024: 64 KiB chunks, packed


def build(device):
    with torch.device(device):
        return Model().to(torch.bfloat16)


def expected_state():
    torch.manual_seed(25)
    m = build("cpu")
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, dtype=torch.float32).to(torch.bfloat16))
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def check_layout(out, expected, nranks):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import MetadataIndex
    md = dcp.FileSystemReader(out).read_metadata()
    probs, files, kinds = [], {}, set()
    items = {}
    for k, tm in md.state_dict_metadata.items():
        for ch in tm.chunks:
            info = md.storage_data[MetadataIndex(k, ch.offsets)]
            nbytes = ch.sizes.numel() * expected[k].element_size()
            items.setdefault(info.relative_path, []).append((info.offset, info.length, k,
                                                             tuple(ch.offsets),
                                                             tuple(ch.sizes), nbytes))
    for rel, its in sorted(items.items()):
        path = os.path.join(out, rel)
        with open(path, "rb") as f:
            raw = f.read()
        end = 0
        for off, length, k, offs, sizes, nbytes in sorted(its):
            blob = raw[off:off + length]
            with zipfile.ZipFile(io.BytesIO(blob)) as z:
                name = next(n for n in z.namelist() if n.endswith("/data/0"))
                hdr = z.getinfo(name).header_offset
            sig, = struct.unpack_from("<I", blob, hdr)
            nlen, elen = struct.unpack_from("<HH", blob, hdr + 26)
            data = off + hdr + 30 + nlen + elen
            where = "%s %s (%s@%d+%d, %d B)" % (k, list(offs), rel, off, length, nbytes)
            if sig != 0x04034B50:
                probs.append("%s: no local header at %d" % (where, hdr))
            if nbytes >= FLOOR:
                kinds.add("aligned")
                if data % ALIGN or off % ALIGN:
                    probs.append("%s: data/0 at %d, item at %d: not 4 KiB-aligned"
                                 % (where, data, off))
            else:
                kinds.add("packed")
                if off != end:
                    probs.append("%s: at %d, the item before ends at %d" % (where, off, end))
            end = off + length
            # the item alone, as torch reads it: from memory and mmap'd from a file
            sl = tuple(slice(o, o + s) for o, s in zip(offs, sizes))
            want = expected[k][sl]
            d = ref.diff(torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True),
                         want)
            if d:
                probs.append("%s: torch.load of the item: %s" % (where, d))
            one = out + ".item.pt"
            with open(one, "wb") as f:
                f.write(blob)
            d = ref.diff(torch.load(one, mmap=True, weights_only=True), want)
            os.unlink(one)
            if d:
                probs.append("%s: torch.load(mmap=True) of the item: %s" % (where, d))
    if kinds != {"aligned", "packed"}:
        probs.append("only %s items: the model should give both" % sorted(kinds))
    if len(items) != nranks:
        probs.append("items in %d files, want %d" % (len(items), nranks))
    return probs


def check_single_process(out, expected):
    """dcp.load(no_dist=True) into NaN-filled tensors and torch's dcp_to_torch_save."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    target = {k: torch.full_like(v, float("nan")) for k, v in expected.items()}
    dcp.load(target, checkpoint_id=out, no_dist=True)
    probs = ["dcp.load no_dist %s: %s" % (k, d) for k in sorted(expected)
             for d in [ref.diff(target[k], expected[k])] if d]
    path = out + ".full.pt"
    dcp_to_torch_save(out, path)
    got = torch.load(path, weights_only=True)
    os.unlink(path)
    if sorted(got) != sorted(expected):
        probs.append("dcp_to_torch_save: keys %s" % sorted(got))
    probs += ["dcp_to_torch_save %s: %s" % (k, d) for k in sorted(set(got) & set(expected))
              for d in [ref.diff(got[k], expected[k])] if d]
    return probs


def run_rank(rank, world, port, job):
    problems = []
    try:
        common.rank_init(rank, world, port, 120)
        import torch.distributed.checkpoint as dcp
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        expected = torch.load(job["expected"], weights_only=True)
        m = build("meta")
        for sub in (m.emb, m.up, m.norm, m.down):
            fully_shard(sub, mesh=mesh)
        fully_shard(m, mesh=mesh)
        m.to_empty(device="cpu")
        with torch.no_grad():
            for p in m.parameters():
                p.to_local().fill_(float("nan"))
        state = m.state_dict()
        dcp.load(state, checkpoint_id=job["out"])
        for k, v in state.items():
            rows = torch.chunk(expected[k], world, dim=0)
            want = rows[rank] if rank < len(rows) else expected[k][:0]
            for what, got, w in (("local shard", v.to_local(), want),
                                 ("full_tensor()", v.full_tensor(), expected[k])):
                d = ref.diff(got.contiguous(), w)
                if d:
                    problems.append("%s %s: %s" % (k, what, d))
    except BaseException:
        problems.append("raised: %s" % ref.short_exc())
    common.write_rank_results(job["result_dir"], rank,
                              [{"case": "*", "problems": common.cap_problems(problems)}])
    common.rank_finish()


def main():
    torch.set_num_threads(1)
    rep = common.Report("dcp_aligned")
    tmp = tempfile.mkdtemp(prefix="dcp_aligned_")
    try:
        expected = expected_state()
        src = os.path.join(tmp, "model.pt")
        torch.save(expected, src)
        exp_path = os.path.join(tmp, "expected.pt")
        torch.save(expected, exp_path)
        f2d = os.path.join(tmp, "f2d")
        jobs = [("full-to-dcp ws=2", 2, ["full-to-dcp", "--world-size", "2"], src, f2d),
                ("full-to-dcp --nproc 2 ws=2", 2,
                 ["full-to-dcp", "--nproc", "2", "--world-size", "2"], src,
                 os.path.join(tmp, "nproc")),
                ("reshard ws=2 -> 3", 3, ["reshard", "--world-size", "3"], f2d,
                 os.path.join(tmp, "reshard"))]
        for name, world, args, inp, out in jobs:
            rc, so, se = common.run_fsdpconv(*args, "-o", out, inp)
            if rc != 0:
                rep.case(name, ["fsdpconv exit %d: %s" % (rc, (so + se)[-800:])])
                continue
            rep.case(name + ": layout and torch.load of each item", check_layout(
                out, expected, world))
            rep.case(name + ": dcp.load no_dist, dcp_to_torch_save",
                     check_single_process(out, expected))
            rdir = tempfile.mkdtemp(dir=tmp, prefix="ranks_")
            res = common.launch_ranks(run_rank, world, {"out": out, "expected": exp_path,
                                                        "result_dir": rdir}, [name], 300)
            rep.case(name + ": FSDP2 fully_shard + dcp.load on %d gloo ranks" % world,
                     res[name])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
