"""Interop: `fsdpconv inspect` of per-rank safetensors directories written by torch itself.

4 gloo ranks build a seeded model (odd dims: 5- and 3-row tensors leave the last ranks an
empty chunk, a 0-d buffer), shard it and save it with dcp.save(storage_writer=
HuggingFaceStorageWriter(dir, save_distributed=True)):
  fsdp   fully_shard on a 1-D mesh of 4
  hsdp   fully_shard on a (replicate=2, shard=2) mesh
  tp     RowwiseParallel on `proj` over tp=2, then fully_shard over dp=2 (2-D boxes)
Rank 0 also writes the full state dict (torch.save) before sharding.

Then, per directory, `fsdpconv inspect --json --checksum --verify` must give: format
"safetensors-sharded"; every key with torch's dtype and shape; sha256 of each tensor equal
to hashlib's over torch's C-contiguous bytes; per key exactly the chunks the files hold as
read here from each file's raw header and its __metadata__ DCP_SHARDING_INFO (offsets, sizes,
file, absolute byte offset and length); files = every *.safetensors with its size; coverage
ok with no problems.  Then in a copy with rank 1's file removed, exactly the keys whose
remaining chunks leave a gap in the shape inferred from them are coverage problems (exit 3),
none when there are none (exit 0); the fsdp and tp cases have some.

usage: FSDPCONV=./fsdpconv PYTHON test_inspect_sharded_st.py     exit 0 pass, 1 fail
"""

import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import warnings  # noqa: E402
warnings.filterwarnings("ignore")

import torch  # noqa: E402

import common  # noqa: E402
import f2d_reference as ref  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 6)
        self.proj = torch.nn.Linear(6, 10)
        self.norm = torch.nn.LayerNorm(3)
        self.out = torch.nn.Linear(10, 7, bias=False)
        self.register_buffer("scale", torch.tensor(0.5))


CASES = {"fsdp": [4], "hsdp": [2, 2], "tp": [2, 2]}


def build(case, mesh):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(20)
    model = Net()
    if case == "tp":
        from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module
        parallelize_module(model, mesh["tp"], {"proj": RowwiseParallel()})
        fully_shard(model, mesh=mesh["dp"])
    else:
        fully_shard(model, mesh=mesh)
    return model


def run_rank(rank, world, port, job):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    from torch.distributed.device_mesh import init_device_mesh
    try:
        common.rank_init(rank, world, port, 120)
    except Exception:
        common.write_rank_results(job["result_dir"], rank, [{"case": "*", "problems": [
            "rank %d: process group setup failed: %s" % (rank, ref.short_exc())]}])
        return
    results = []
    for case, shape in CASES.items():
        problems = []
        try:
            names = {"fsdp": ("shard",), "hsdp": ("replicate", "shard"),
                     "tp": ("dp", "tp")}[case]
            mesh = init_device_mesh("cpu", tuple(shape), mesh_dim_names=names)
            if rank == 0 and case == "fsdp":
                torch.manual_seed(20)
                torch.save(Net().state_dict(), job["expected"])
            model = build(case, mesh)
            dcp.save(model.state_dict(), storage_writer=HuggingFaceStorageWriter(
                os.path.join(job["tmp"], case), save_distributed=True))
        except Exception:
            problems.append("rank %d raised: %s" % (rank, ref.short_exc()))
        results.append({"case": case, "problems": problems})
        common.write_rank_results(job["result_dir"], rank, results)
    common.rank_finish()


def raw_header(path):
    """The JSON header of a safetensors file, and where its byte buffer starts."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def torch_chunks(d):
    """key -> sorted chunks [(offsets, sizes, file, offset, length)] from the files themselves."""
    out = {}
    for name in sorted(os.listdir(d)):
        if not name.endswith(".safetensors"):
            continue
        hdr, start = raw_header(os.path.join(d, name))
        info = json.loads(hdr["__metadata__"]["DCP_SHARDING_INFO"])
        for key, t in hdr.items():
            if key == "__metadata__":
                continue
            b, e = t["data_offsets"]
            out.setdefault(key, []).append(
                (list(info[key]["saved_offsets"]), list(t["shape"]), name, start + b, e - b))
    return {k: sorted(v) for k, v in out.items()}


def tensor_sha256(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()
                          if t.dim() > 0 else t.reshape(1).view(torch.uint8).numpy().tobytes()
                          ).hexdigest()


def inspect_json(path, *extra):
    rc, out, err = common.run_fsdpconv("inspect", "--json", *extra, path)
    try:
        return rc, json.loads(out), err
    except ValueError:
        return rc, None, err


def check_dir(d, want):
    rc, got, err = inspect_json(d, "--checksum", "--verify")
    if rc != 0 or got is None:
        return ["inspect exit %d: %s" % (rc, err.strip()[-400:])]
    probs = []
    if got["format"] != "safetensors-sharded":
        probs.append("format %r" % got["format"])
    if got.get("coverage") != {"ok": True, "problems": []}:
        probs.append("coverage %r" % got.get("coverage"))
    files = sorted(n for n in os.listdir(d) if n.endswith(".safetensors"))
    want_files = [{"name": n, "bytes": os.path.getsize(os.path.join(d, n))} for n in files]
    if got.get("files") != want_files:
        probs.append("files %r, want %r" % (got.get("files"), want_files))
    chunks = torch_chunks(d)
    seen = set()
    for t in got["tensors"]:
        k = t["key"]
        seen.add(k)
        if k not in want:
            probs.append("%s: not in torch's state dict" % k)
            continue
        w = want[k]
        if t["dtype"] != str(w.dtype).replace("torch.", "") or t["shape"] != list(w.shape):
            probs.append("%s: %s %r, torch %s %r" % (k, t["dtype"], t["shape"], w.dtype,
                                                     list(w.shape)))
        if t.get("sha256") != tensor_sha256(w):
            probs.append("%s: sha256 differs from torch's bytes" % k)
        mine = sorted((c["offsets"], c["sizes"], c["file"], c["offset"], c["length"])
                      for c in t.get("chunks", []))
        if mine != chunks.get(k):
            probs.append("%s: chunks %r, the files hold %r" % (k, mine, chunks.get(k)))
    probs += ["%s: missing from inspect" % k for k in sorted(set(want) - seen)]
    return probs


def numel(sizes):
    n = 1
    for s in sizes:
        n *= s
    return n


def check_gap(d, tmp):
    """Rank 1's file removed: a key has a gap exactly when its remaining chunks (torch saves
    no overlaps) hold fewer elements than the shape inferred from them, as torch's reader
    infers it (the furthest chunk end on every dim: losing the last chunk of a dim shrinks
    the shape instead, for torch too)."""
    broken = os.path.join(tmp, os.path.basename(d) + "_gap")
    shutil.copytree(d, broken)
    os.unlink(os.path.join(broken, "shard-00002-model-00001-of-00001.safetensors"))
    gaps = set()
    for k, cs in torch_chunks(broken).items():
        shape = [max(o[i] + s[i] for o, s, *_ in cs) for i in range(len(cs[0][0]))]
        if sum(numel(s) for _, s, *_ in cs) < numel(shape):
            gaps.add(k)
    rc, got, err = inspect_json(broken)
    if rc != (3 if gaps else 0) or got is None:
        return ["inspect of %s: exit %d (want %d), stderr %s"
                % (broken, rc, 3 if gaps else 0, err.strip())]
    cov = got.get("coverage", {"ok": None, "problems": []})
    # one problem line per tensor, naming it in quotes ("chunks of 'k' leave [..] uncovered")
    named = {p.split("'")[1] for p in cov["problems"] if "'" in p}
    probs = [] if cov["ok"] == (not gaps) else ["coverage ok=%r, gaps in %s" % (cov["ok"], gaps)]
    probs += ["%s: a gap, but no coverage problem" % k for k in sorted(gaps - named)]
    probs += ["%s: a coverage problem, but no gap" % k for k in sorted(named - gaps)]
    return probs


def main():
    torch.set_num_threads(1)
    rep = common.Report("inspect_sharded_st")
    tmp = tempfile.mkdtemp(prefix="inspect_sst_")
    try:
        job = {"result_dir": tempfile.mkdtemp(dir=tmp, prefix="ranks_"), "tmp": tmp,
               "expected": os.path.join(tmp, "expected.pt")}
        saved = common.launch_ranks(run_rank, 4, job, list(CASES), wait_s=300)
        want = torch.load(job["expected"], weights_only=True) if os.path.exists(
            job["expected"]) else {}
        for case in CASES:
            d = os.path.join(tmp, case)
            if not rep.case("torch saves %s (HuggingFaceStorageWriter, save_distributed)"
                            % case, saved[case]):
                continue
            rep.case("inspect %s agrees with torch's files and tensors" % case,
                     check_dir(d, want))
            rep.case("inspect %s without rank 1's file: its gaps" % case, check_gap(d, tmp))
        # the cases must exercise the report, not only the all-clear
        rc, got, _ = inspect_json(os.path.join(tmp, "fsdp_gap"))
        rep.case("fsdp without rank 1's file has gaps", [] if rc == 3 else ["exit %d" % rc])
    finally:
        if os.environ.get("INSPECT_SST_KEEP") != "1":
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept %s" % tmp)
    return rep.finish()


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print("%.1fs" % (time.time() - t0))
    sys.exit(rc)
