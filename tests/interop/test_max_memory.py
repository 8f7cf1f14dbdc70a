"""Every command within --max-memory, for a tensor 4x bigger than it.

A safetensors file written by the safetensors library holds one 1 GiB tensor (4x the
256 MiB --max-memory of every run here) and a small one. full-to-dcp cuts it into row
chunks (--world-size 2) and into row and column chunks (--mesh shard=2,tp=2 with the big
tensor on tp dim 1, whose chunks a row slab only partly covers); reshard re-cuts the
latter; dcp-to-full exports both to safetensors and to torch.save. Each run's peak RSS
(GNU time, see common.run_measured) must stay within --max-memory + 64 MiB, and every
export must hold the input's tensors bit for bit (read by safetensors and torch.load).
"""

import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

from common import Report, fsdpconv_path, run_measured

BUDGET_MIB = 256
SLACK_MIB = 64


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def main():
    rep = Report("test_max_memory")
    tmp = tempfile.mkdtemp(prefix="max_memory_")
    try:
        src = os.path.join(tmp, "model.safetensors")
        # 16384 x 16384 float32: every element distinct (the index's bits), no two rows alike.
        big = torch.arange(1 << 28, dtype=torch.int32).view(torch.float32).reshape(16384, 16384)
        save_file({"big.weight": big, "small.bias": torch.randn(10)}, src)
        del big

        def measured(label, *args):
            log = os.path.join(tmp, "run.log")
            rec = run_measured([fsdpconv_path()] + [str(a) for a in args]
                               + ["--max-memory", "%dMiB" % BUDGET_MIB], log)
            problems = []
            if rec["rc"] != 0:
                with open(log) as f:
                    problems.append("exit %d: %s" % (rec["rc"], f.read()[-2000:]))
            peak = rec["maxrss_kib"] / 1024.0
            print("  %s: peak RSS %.1f MiB (%s)" % (label, peak, rec["rss_method"]))
            if peak > BUDGET_MIB + SLACK_MIB:
                problems.append("peak RSS %.1f MiB > --max-memory %d MiB + %d MiB"
                                % (peak, BUDGET_MIB, SLACK_MIB))
            rep.case(label, problems)
            return not problems

        def same_as_source(label, tensors):
            ref = load_file(src)
            problems = []
            if sorted(ref) != sorted(tensors):
                problems.append("keys %s, expected %s" % (sorted(tensors), sorted(ref)))
            for k in sorted(set(ref) & set(tensors)):
                if ref[k].dtype != tensors[k].dtype or ref[k].shape != tensors[k].shape:
                    problems.append("%s: %s%s vs %s%s" % (k, tensors[k].dtype,
                                    tuple(tensors[k].shape), ref[k].dtype, tuple(ref[k].shape)))
                elif not torch.equal(bits(ref[k]), bits(tensors[k])):
                    problems.append("%s: data differs" % k)
            rep.case(label, problems)

        rows = os.path.join(tmp, "rows")
        cols = os.path.join(tmp, "cols")
        measured("full-to-dcp --world-size 2", "full-to-dcp", "-q", "-o", rows,
                 "--world-size", "2", src)
        measured("full-to-dcp tp dim 1", "full-to-dcp", "-q", "-o", cols,
                 "--mesh", "shard=2,tp=2", "--tp", r"big\.weight=1", src)
        resh = os.path.join(tmp, "resh")
        measured("reshard tp chunks -> --world-size 3", "reshard", "-q", "-o", resh,
                 "--world-size", "3", cols)
        shutil.rmtree(resh, ignore_errors=True)
        for name, ckpt in (("rows", rows), ("cols", cols)):
            out = os.path.join(tmp, name + ".safetensors")
            if measured("dcp-to-full %s -> safetensors" % name, "dcp-to-full", "-q", "-o", out,
                        ckpt):
                same_as_source("export of %s: safetensors bits" % name, load_file(out))
            if os.path.exists(out):
                os.unlink(out)
        out = os.path.join(tmp, "cols.pt")
        if measured("dcp-to-full cols -> torch.save", "dcp-to-full", "-q", "-o", out, cols):
            same_as_source("export of cols: torch.save bits",
                           torch.load(out, map_location="cpu", weights_only=True, mmap=True))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
