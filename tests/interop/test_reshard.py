"""Interop test: `fsdpconv reshard` of a real FSDP2 training checkpoint, checked against
PyTorch's own load-time resharding, bit-exact.

Input: fixtures/dcp_train/{plain,zstd} (fixtures/gen/gen_dcp_train.py: FSDP2 fully_shard on
4 gloo ranks, AdamW 3 steps, dcp.save of {"model", "optim"} from get_state_dict + "extra";
zstd = FileSystemWriter(_extensions=[ZStandard()])).  RESHARD_FRESH=1 regenerates both into
the temp dir with the installed torch and uses those instead (and, when the torch version is
the committed fixture's, requires the same values as the committed files).

For every world size M in 1, 2, 3, 8, cases:
  plain                 fsdpconv reshard --world-size M  plain input
  plain --compress zstd the same, compressed output
  zstd                  zstd input (output stays compressed)
  zstd --decompress     zstd input, plain output
Per case, in this process:
  * fsdpconv reshard exits 0; `fsdpconv inspect --checksum --verify OUT` exits 0;
  * .metadata (torch's FileSystemReader): same keys, kinds, global shapes, dtypes and
    planner_data as the original; every tensor with dim >= 1 stored as exactly the
    Shard(0) torch.chunk boxes of M ranks, rank r's box in __r_0.distcp; 0-d tensors one
    whole chunk; every item's transform_descriptors ["stream.zstd/1"] (compressed output,
    zstd frame magic at its offset) or none (plain output); no orphan storage entries;
  * every chunk's blob (torch.load of its decompressed byte range) has the chunk's shape
    and dtype and equals the original tensor's box; every bytes item's (decompressed)
    payload is byte-identical to the original's (carried verbatim);
  * no_dist dcp.load of the whole output into poisoned flat targets == the same load of the
    original (every tensor bit-exact, every value equal);
then in M gloo processes (reshard_worker.py; one process group per M runs all its cases):
  FSDP2 model + AdamW at M ranks load the output with dcp.load + set_state_dict and
  must match loading the ORIGINAL checkpoint the same way (every tensor and value,
  bit-exact), match it again after one more AdamW step, and find each rank's rows in
  __<rank>_0.distcp.
Prints one PASS/FAIL line per case (problems below a FAIL); exits 1 on any failure.
Ranks are forked (RESHARD_START=spawn to spawn).  RESHARD_KEEP=1 keeps the temp dir.
"""

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

import common  # noqa: E402
import gen_dcp_train as gen  # noqa: E402
import reshard_worker as rw  # noqa: E402
from common import ROOT, fsdpconv_path  # noqa: E402

FIX = common.FIXTURES

WORLD_SIZES = (1, 2, 3, 8)
ZSTD_DESC = ["stream.zstd/1"]
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
RANK_TIMEOUT = 120       # gloo collective timeout, seconds
MAX_LISTED = 12


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def line(self, label, problems, detail=""):
        problems = [p for p in problems if p]
        if problems:
            self.failed += 1
            print("FAIL %s: %d problem(s)%s" % (label, len(problems),
                                                 " (%s)" % detail if detail else ""))
            for p in problems[:MAX_LISTED]:
                print("     %s" % str(p).replace("\n", "\n     "))
            if len(problems) > MAX_LISTED:
                print("     ... %d more" % (len(problems) - MAX_LISTED))
        else:
            self.passed += 1
            print("PASS %s%s" % (label, ": " + detail if detail else ""))
        sys.stdout.flush()


# --------------------------------------------------------------------------- single process

def read_md(path):
    import torch.distributed.checkpoint as dcp
    return dcp.FileSystemReader(path).read_metadata()


class Blobs:
    """Item bytes of a DCP dir, after the item's transforms (zstd only)."""

    def __init__(self, path):
        self.path = path
        self.files = {}

    def raw(self, info):
        if info.relative_path not in self.files:
            with open(os.path.join(self.path, info.relative_path), "rb") as f:
                self.files[info.relative_path] = f.read()
        data = self.files[info.relative_path][info.offset:info.offset + info.length]
        if len(data) != info.length:
            raise ValueError("%s@%d+%d beyond the end of the file" % (
                info.relative_path, info.offset, info.length))
        return data

    def item(self, info):
        data = self.raw(info)
        descs = list(getattr(info, "transform_descriptors", None) or [])
        for d in descs:
            if d.split("/")[0] != "stream.zstd" or not d.endswith("/1"):
                raise ValueError("unknown transform %r" % d)
            import zstandard
            data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
        return data


def load_flat(path, byte):
    """no_dist dcp.load of every entry into poisoned flat targets built from .metadata."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    md = read_md(path)
    target = {}
    for k, m in md.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            t = torch.empty(tuple(m.size), dtype=m.properties.dtype)
            rw.poison_tensor_(t, byte)
            target[k] = t
        else:
            target[k] = rw.SENTINEL
    dcp.load(target, checkpoint_id=path, no_dist=True)
    return md, target


_orig_cache = {}


def original(path):
    if path not in _orig_cache:
        _orig_cache[path] = load_flat(path, rw.POISON_REF)
    return _orig_cache[path]


def check_output(case, world):
    """Single-process checks of one reshard output; list of problems."""
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
    probs = []
    omd, ofull = original(case["input"])
    md = read_md(case["out"])
    obl, bl = Blobs(case["input"]), Blobs(case["out"])

    # keys, kinds, shapes, dtypes, planner_data
    ok, gk = set(omd.state_dict_metadata), set(md.state_dict_metadata)
    if ok != gk:
        probs.append("keys: missing %s, unexpected %s" % (sorted(ok - gk)[:6],
                                                          sorted(gk - ok)[:6]))
    opd, gpd = omd.planner_data or {}, md.planner_data or {}
    for k in sorted(ok & gk):
        om, gm = omd.state_dict_metadata[k], md.state_dict_metadata[k]
        if type(om) is not type(gm):
            probs.append("%s: %s, original %s" % (k, type(gm).__name__, type(om).__name__))
            continue
        if opd.get(k) != gpd.get(k):
            probs.append("%s: planner_data %r, original %r" % (k, gpd.get(k), opd.get(k)))
        if isinstance(om, TensorStorageMetadata):
            if tuple(gm.size) != tuple(om.size):
                probs.append("%s: size %s, original %s" % (k, list(gm.size), list(om.size)))
            if gm.properties.dtype != om.properties.dtype:
                probs.append("%s: dtype %s, original %s" % (k, gm.properties.dtype,
                                                            om.properties.dtype))

    # storage entries: transforms, chunk layout, blob contents
    want_desc = ZSTD_DESC if case["compressed"] else []
    used = set()
    n_chunks = 0
    for k in sorted(ok & gk):
        gm = md.state_dict_metadata[k]
        if not isinstance(gm, TensorStorageMetadata):
            idx = MetadataIndex(k)
            info = md.storage_data.get(idx)
            oinfo = omd.storage_data.get(idx)
            if info is None:
                probs.append("%s: bytes entry has no storage_data" % k)
                continue
            used.add(idx)
            probs += check_storage(k, info, want_desc, bl)
            try:
                if bl.item(info) != obl.item(oinfo):
                    probs.append("%s: bytes payload differs from the original's" % k)
            except Exception as e:
                probs.append("%s: bytes item unreadable: %s" % (k, e))
            continue
        full = ofull.get(k)
        size = tuple(gm.size)
        if len(size) == 0:
            want_boxes = {(): ((), -1)}
        else:
            want_boxes = {}
            for r in range(world):
                off0, n0 = rw.chunk_box(size[0], world, r)
                if n0 and all(size[1:]):
                    want_boxes[(off0,) + (0,) * (len(size) - 1)] = ((n0,) + size[1:], r)
        got_nonempty = {}
        for ch in gm.chunks:
            off, sz = tuple(ch.offsets), tuple(ch.sizes)
            n_chunks += 1
            if len(off) != len(size) or len(sz) != len(size):
                probs.append("%s: chunk of rank %d/%d, tensor %d-d" % (k, len(off), len(sz),
                                                                       len(size)))
                continue
            if any(o < 0 or s < 0 or o + s > d for o, s, d in zip(off, sz, size)):
                probs.append("%s: chunk %s+%s outside %s" % (k, list(off), list(sz),
                                                             list(size)))
                continue
            idx = MetadataIndex(k, torch.Size(off))
            info = md.storage_data.get(idx)
            if info is None:
                probs.append("%s: chunk %s has no storage_data" % (k, list(off)))
                continue
            used.add(idx)
            probs += check_storage("%s %s" % (k, list(off)), info, want_desc, bl)
            if size and 0 in sz:
                continue
            if off in got_nonempty:
                probs.append("%s: two non-empty chunks at offsets %s" % (k, list(off)))
            got_nonempty[off] = sz
            if off in want_boxes and want_boxes[off][1] >= 0:
                r = want_boxes[off][1]
                if info.relative_path != "__%d_0.distcp" % r:
                    probs.append("%s: rank %d's rows [%d, %d) are in %s, want __%d_0.distcp"
                                 % (k, r, off[0], off[0] + sz[0], info.relative_path, r))
            try:
                blob = torch.load(io.BytesIO(bl.item(info)), map_location="cpu",
                                  weights_only=True)
            except Exception as e:
                probs.append("%s %s: blob does not torch.load: %s" % (k, list(off), e))
                continue
            if full is not None:
                box = full[tuple(slice(o, o + s) for o, s in zip(off, sz))] if size else full
                d = rw.tensor_diff(blob, box)
                if d:
                    probs.append("%s chunk %s (%s@%d): %s" % (k, list(off), info.relative_path,
                                                             info.offset, d))
        want_nonempty = {o: v[0] for o, v in want_boxes.items()}
        if got_nonempty != want_nonempty:
            probs.append("%s %s: non-empty chunks %s, want the torch.chunk boxes of %d ranks %s"
                         % (k, list(size), sorted(got_nonempty.items()), world,
                            sorted(want_nonempty.items())))
    orphans = [i for i in md.storage_data if i not in used]
    if orphans:
        probs.append("storage_data entries no chunk/bytes entry names: %s" % orphans[:4])

    # whole-checkpoint load, compared with the original's
    _, full_out = load_flat(case["out"], rw.POISON_CASE)
    for k in sorted(ofull):
        if k not in full_out:
            continue
        a, b = full_out[k], ofull[k]
        d = rw.tensor_diff(a, b) if isinstance(b, torch.Tensor) else rw.value_diff(a, b)
        if d:
            probs.append("no_dist load %s: %s" % (k, d))
    case["n_tensors"] = sum(isinstance(m, TensorStorageMetadata)
                            for m in md.state_dict_metadata.values())
    case["n_values"] = len(md.state_dict_metadata) - case["n_tensors"]
    case["n_chunks"] = n_chunks
    case["n_files"] = len({i.relative_path for i in md.storage_data.values()})
    return probs


def check_storage(label, info, want_desc, bl):
    probs = []
    descs = list(getattr(info, "transform_descriptors", None) or [])
    if descs != want_desc:
        probs.append("%s: transform_descriptors %s, want %s" % (label, descs, want_desc))
    try:
        raw = bl.raw(info)
        if want_desc and raw[:4] != ZSTD_MAGIC:
            probs.append("%s: compressed item does not start with a zstd frame" % label)
        if not want_desc and raw[:2] != b"PK":
            probs.append("%s: plain item does not start with a zip header" % label)
    except Exception as e:
        probs.append("%s: %s" % (label, e))
    return probs


def fresh_vs_committed(fresh, manifest):
    """With the committed fixture's torch version, regeneration must give the same values."""
    committed = os.path.join(FIX, "dcp_train")
    try:
        with open(os.path.join(committed, "manifest.json")) as f:
            cm = json.load(f)
    except (OSError, ValueError) as e:
        return ["fixtures/dcp_train/manifest.json: %s" % e]
    if cm.get("torch_version") != manifest["torch_version"]:
        print("note: committed fixture from torch %s, this torch %s: values not compared"
              % (cm.get("torch_version"), manifest["torch_version"]))
        return []
    probs = []
    for name in ("plain", "zstd"):
        if not os.path.isdir(os.path.join(committed, name)) or not os.path.isdir(
                os.path.join(fresh, name)):
            continue
        _, a = load_flat(os.path.join(fresh, name), rw.POISON_CASE)
        _, b = load_flat(os.path.join(committed, name), rw.POISON_REF)
        if set(a) != set(b):
            probs.append("%s: keys differ: %s" % (name, sorted(set(a) ^ set(b))[:6]))
        for k in sorted(set(a) & set(b)):
            d = (rw.tensor_diff(a[k], b[k]) if isinstance(b[k], torch.Tensor)
                 else rw.value_diff(a[k], b[k]))
            if d:
                probs.append("%s %s: %s" % (name, k, d))
    return probs


# ------------------------------------------------------------------------------ fsdpconv

def run_fsdpconv(args):
    cmd = [fsdpconv_path()] + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, timeout=300)
    return r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace"), " ".join(cmd)


def make_cases(inputs, tmp):
    cases = []
    os.makedirs(os.path.join(tmp, "out"), exist_ok=True)
    for m in WORLD_SIZES:
        variants = [("plain", inputs["plain"], [], False),
                    ("plain --compress zstd", inputs["plain"], ["--compress", "zstd"], True)]
        if inputs.get("zstd"):
            variants += [("zstd", inputs["zstd"], [], True),
                         ("zstd --decompress", inputs["zstd"], ["--decompress"], False)]
        for label, inp, extra, compressed in variants:
            name = "M=%d %s" % (m, label)
            out = os.path.join(tmp, "out", "ws%d_%s" % (m, label.replace(" ", "_")
                                                          .replace("-", "")))
            cases.append(dict(name=name, world=m, input=inp, out=out, compressed=compressed,
                              args=["reshard", "--world-size", m, "-o", out] + extra + [inp]))
    return cases


def prepare(case):
    """Run fsdpconv reshard and inspect; list of problems."""
    rc, text, cmd = run_fsdpconv(case["args"])
    case["cmd"] = cmd
    if rc != 0:
        return ["fsdpconv reshard exit %d: %s" % (rc, text.strip()[-1500:])]
    rc, text, icmd = run_fsdpconv(["inspect", "--checksum", "--verify", case["out"]])
    if rc != 0:
        return ["fsdpconv inspect --checksum --verify exit %d: %s\n$ %s"
                % (rc, text.strip()[-1500:], icmd)]
    return []


# ----------------------------------------------------------------------- negative controls

CONTROL_WORLD = 3
FLIP_FQN = "optim.state.block.fc1.weight.exp_avg"   # (7, 5): rank 1 of 3 holds rows 3..5


def flip_bit(out, fqn, offsets):
    """Flip the lowest bit of the first data byte of one stored (plain) chunk, in place."""
    import zipfile
    from torch.distributed.checkpoint.metadata import MetadataIndex
    info = read_md(out).storage_data[MetadataIndex(fqn, torch.Size(offsets))]
    path = os.path.join(out, info.relative_path)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    blob = bytes(data[info.offset:info.offset + info.length])
    zf = zipfile.ZipFile(io.BytesIO(blob))
    zi = [z for z in zf.infolist() if z.filename.endswith("/data/0")][0]
    name_len, extra_len = struct.unpack_from("<HH", blob, zi.header_offset + 26)
    pos = info.offset + zi.header_offset + 30 + name_len + extra_len
    data[pos] ^= 0x01
    with open(path, "wb") as f:
        f.write(bytes(data))


def make_controls(cases, tmp):
    """Outputs the checks must reject (so a passing run means the checks can fail):
    a 2-rank output checked as a 3-rank one (loads correctly, wrong boxes and files) and a
    3-rank output with one flipped bit in one chunk (wrong data)."""
    by = {c["name"]: c for c in cases}
    c2, c3 = by.get("M=2 plain"), by.get("M=3 plain")
    if not c2 or not c3 or c2["problems"] or c3["problems"]:
        return None
    flipped = os.path.join(tmp, "out", "control_bitflip")
    shutil.copytree(c3["out"], flipped)
    off0, _ = rw.chunk_box(7, CONTROL_WORLD, 1)
    flip_bit(flipped, FLIP_FQN, (off0, 0))
    return [dict(name="control: M=2 output used at 3 ranks", world=CONTROL_WORLD,
                 input=c2["input"], out=c2["out"], compressed=False, kind="boxes"),
            dict(name="control: M=3 output with one flipped bit", world=CONTROL_WORLD,
                 input=c3["input"], out=flipped, compressed=False, kind="data")]


def judge_control(ctl, single, ranks):
    """Problems of a control = what the checks failed to detect."""
    out = []
    if ctl["kind"] == "boxes":
        if not any("torch.chunk boxes" in p for p in single):
            out.append("metadata check did not notice the 2-rank chunk layout")
        if not any(("not a stored chunk" in p or "stored chunk(s)" in p) for p in ranks):
            out.append("rank box/file check did not notice the 2-rank chunk layout")
        bad = [p for p in ranks if "after " in p]
        if bad:
            out.append("torch loads a 2-rank output correctly at 3 ranks, yet the load "
                       "comparison reported: %s" % bad[:3])
    else:
        if not any(FLIP_FQN in p and "differ" in p for p in single):
            out.append("blob / no_dist comparison did not notice the flipped bit")
        if not any("after dcp.load" in p and FLIP_FQN in p for p in ranks):
            out.append("rank load comparison did not notice the flipped bit")
        rc, text, cmd = run_fsdpconv(["inspect", "--checksum", "--verify", ctl["out"]])
        if rc == 0:
            out.append("fsdpconv inspect --verify exits 0 on a chunk whose CRC-32 no longer "
                       "matches: $ %s" % cmd)
    return out


# --------------------------------------------------------------------------- ranks

def run_world(world, inputs, cases, tmp):
    """All cases of one world size in one process group; ({label: problems}, seconds)."""
    t0 = time.time()
    rdir = tempfile.mkdtemp(dir=tmp, prefix="ranks%d_" % world)
    job = {"timeout": RANK_TIMEOUT, "result_dir": rdir,
           "orig": {"plain": inputs["plain"], "zstd": inputs.get("zstd")},
           "cases": [{"name": c["name"], "out": c["out"]} for c in cases]}
    labels = ["reference"] + (["zstd original == plain original"] if inputs.get("zstd")
                              else []) + [c["name"] for c in cases]
    out = common.launch_ranks(rw.run_rank, world, job, labels,
                              RANK_TIMEOUT * 2 + 30 * len(labels),
                              os.environ.get("RESHARD_START", "fork"))
    return out, time.time() - t0


# ---------------------------------------------------------------------------------- main

def main():
    if not os.path.exists(fsdpconv_path()):
        print("FAIL fsdpconv binary not found: %s" % fsdpconv_path())
        return 1
    torch.set_num_threads(1)
    t_start = time.time()
    res = Results()
    tmp = tempfile.mkdtemp(prefix="reshard_interop_")
    try:
        if os.environ.get("RESHARD_FRESH"):
            try:
                m = gen.generate(os.path.join(tmp, "fresh"),
                                 start=os.environ.get("RESHARD_START", "fork"))
                res.line("fixture: regenerated with torch %s" % m["torch_version"], [])
            except Exception:
                res.line("fixture: regenerate", [traceback.format_exc()[-2000:]])
                return 1
            base = os.path.join(tmp, "fresh")
            res.line("fixture: fresh == committed fixtures/dcp_train (same torch version)",
                     fresh_vs_committed(base, m))
        else:
            base = os.path.join(FIX, "dcp_train")
        inputs = {"plain": os.path.join(base, "plain")}
        if os.path.isdir(os.path.join(base, "zstd")):
            inputs["zstd"] = os.path.join(base, "zstd")
        probs = []
        for name, path in inputs.items():
            try:
                md = read_md(path)
                if name == "zstd" and not all(
                        list(getattr(i, "transform_descriptors", None) or []) == ZSTD_DESC
                        for i in md.storage_data.values()):
                    probs.append("%s: not every item is zstd-compressed" % path)
                files = {i.relative_path for i in md.storage_data.values()}
                if files != {"__%d_0.distcp" % r for r in range(gen.WORLD)}:
                    probs.append("%s: files %s, want %d ranks' files" % (path, sorted(files),
                                                                         gen.WORLD))
            except Exception:
                probs.append("%s: %s" % (path, traceback.format_exc()[-1000:]))
        if "zstd" not in inputs:
            print("note: no zstd fixture (torch without ZStandard); zstd cases skipped")
        res.line("fixture %s (%s)" % (os.path.relpath(base, ROOT) if base.startswith(ROOT)
                                      else base, ", ".join(sorted(inputs))), probs)
        if probs:
            return 1

        cases = make_cases(inputs, tmp)
        for c in cases:
            try:
                c["problems"] = prepare(c)
                if not c["problems"]:
                    c["problems"] = check_output(c, c["world"])
            except Exception:
                c["problems"] = ["single-process checks raised: %s"
                                 % traceback.format_exc()[-2000:]]
        controls = make_controls(cases, tmp)
        if controls is None:
            res.line("negative controls", ["not built: the M=2/M=3 plain outputs failed"])
            controls = []
        for ctl in controls:
            try:
                ctl["single"] = check_output(ctl, ctl["world"])
            except Exception:
                ctl["single"] = ["raised: %s" % traceback.format_exc()[-1500:]]
        for world in WORLD_SIZES:
            wcases = [c for c in cases + controls if c["world"] == world and os.path.isfile(
                os.path.join(c["out"], ".metadata"))]
            ranks, secs = run_world(world, inputs, wcases, tmp)
            for ctl in controls:
                if ctl["world"] == world:
                    got = ranks.pop(ctl["name"], [])
                    res.line(ctl["name"], judge_control(ctl, ctl["single"], got),
                             "detected: %d metadata/blob and %d rank problem(s)"
                             % (len(ctl["single"]), len(got)))
            for label in ("reference", "zstd original == plain original"):
                if label in ranks:
                    res.line("M=%d %s (torch loads the %d-rank original at %d ranks)"
                             % (world, label, gen.WORLD, world), ranks.pop(label))
            for c in cases:
                if c["world"] != world:
                    continue
                probs = list(c["problems"]) + ranks.get(c["name"], [])
                if probs and "cmd" in c:
                    probs.append("reproduce: %s" % c["cmd"])
                detail = ("%d tensors in %d chunks, %d values, %d files; inspect --verify ok; "
                          "chunks/blobs/no_dist load == original; %d ranks: dcp.load + "
                          "set_state_dict + 1 step == torch's resharding (%.1fs)"
                          % (c.get("n_tensors", 0), c.get("n_chunks", 0), c.get("n_values", 0),
                             c.get("n_files", 0), world, secs)) if not probs else c.get("cmd", "")
                res.line("reshard %s" % c["name"], probs, detail)
    finally:
        if os.environ.get("RESHARD_KEEP"):
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("test_reshard: %d passed, %d failed (%.0fs)" % (res.passed, res.failed,
                                                          time.time() - t_start))
    return 1 if res.failed or res.passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
