"""Interop test: stacking experts does not copy them into memory.

Per-expert Mixtral-style safetensors (w1/w3 [I, H], w2 [H, I] per expert, 4 MiB each,
float32, written by the safetensors library) are converted with the mixtral-hf5 rules
(--stack, --concat) at --max-memory 2M on one thread, once with 4 experts and once with 16:
the stacked gate_up_proj of the large case is 128 MiB, 64x the budget, and one expert's
slice of it (8 MiB) is 4x the budget.  Then exported back with --split and --unstack at the
same budget.

Checks:
  flat        peak RSS (GNU time) of the 16-expert runs is within 8 MiB of the 4-expert
              runs' and below half of one stacked tensor: each rank's box is read in slabs,
              each slab from the parts it overlaps, never a whole tensor
  bounded     and at most 4x the budget above fsdpconv's own (a one-tensor conversion):
              an expert's slice bigger than the budget streams in runs of its rows, and
              direct I/O's buffers shrink to fit beside the slabs (fc_slab_budget())
  values      dcp.load (no process group) of the large DCP: gate_up_proj[e] is
              cat(w1_e, w3_e) and down_proj[e] is w2_e, bit-exact; the export is the input
              (fsdpconv diff)
"""

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import common  # noqa: E402

H, I = 2048, 512   # one w1/w3/w2 = 4 MiB
BUDGET, BUDGET_KIB = "2M", 2048
IMPORT = [
    "--stack", r"^(.*)\.block_sparse_moe\.experts\.(\d+)\.(w[13])\.weight$=\1.mlp.experts.\3",
    "--concat", r"^(.*)\.mlp\.experts\.w1$,\1.mlp.experts.w3=\1.mlp.experts.gate_up_proj:1",
    "--stack", r"^(.*)\.block_sparse_moe\.experts\.(\d+)\.w2\.weight$=\1.mlp.experts.down_proj",
]
EXPORT = [
    "--split", r"^(.*)\.mlp\.experts\.gate_up_proj$=\1.mlp.experts.w1,\1.mlp.experts.w3:1",
    "--unstack", r"^(.*)\.mlp\.experts\.(w[13])$=\1.block_sparse_moe.experts.{}.\2.weight",
    "--unstack", r"^(.*)\.mlp\.experts\.down_proj$=\1.block_sparse_moe.experts.{}.w2.weight",
]


def experts(n):
    g = torch.Generator().manual_seed(n)
    p = "model.layers.0.block_sparse_moe.experts.%d.%s.weight"
    sd = {}
    for e in range(n):
        sd[p % (e, "w1")] = torch.randn(I, H, generator=g)
        sd[p % (e, "w2")] = torch.randn(H, I, generator=g)
        sd[p % (e, "w3")] = torch.randn(I, H, generator=g)
    return sd


def convert(tmp, n):
    """Import and export n experts; the two runs' figures and the paths."""
    src = os.path.join(tmp, "moe%d.safetensors" % n)
    save_file(experts(n), src)
    dcp_dir, back = os.path.join(tmp, "dcp%d" % n), os.path.join(tmp, "back%d.safetensors" % n)
    bin_ = common.fsdpconv_path()
    runs = {}
    for what, cmd in (("import", [bin_, "full-to-dcp", "--world-size", "2", "-o", dcp_dir,
                                  "--threads", "1", "--max-memory", BUDGET]
                       + IMPORT + [src]),
                      ("export", [bin_, "dcp-to-full", "-o", back, "--max-memory", BUDGET] +
                       EXPORT + [dcp_dir])):
        runs[what] = common.run_measured(cmd, os.path.join(tmp, "%s%d.log" % (what, n)))
        if runs[what]["rc"] != 0:
            with open(os.path.join(tmp, "%s%d.log" % (what, n))) as f:
                raise RuntimeError("%s of %d experts: exit %d: %s" % (
                    what, n, runs[what]["rc"], f.read()[-800:]))
    return runs, src, dcp_dir, back


def check_values(src, dcp_dir, back, n):
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    inp = load_file(src)
    p = "model.layers.0.block_sparse_moe.experts.%d.%s.weight"
    want = {
        "model.layers.0.mlp.experts.gate_up_proj":
            torch.stack([torch.cat([inp[p % (e, "w1")], inp[p % (e, "w3")]]) for e in range(n)]),
        "model.layers.0.mlp.experts.down_proj": torch.stack([inp[p % (e, "w2")] for e in range(n)]),
    }
    got = {k: torch.full_like(v, float("nan")) for k, v in want.items()}
    dcp.load(got, checkpoint_id=dcp_dir, no_dist=True)
    probs = ["%s differs" % k for k in want if not torch.equal(got[k], want[k])]
    rc, out, err = common.run_fsdpconv("diff", src, back)
    if rc != 0:
        probs.append("export differs from the input: %s" % (out + err)[-400:])
    return probs


def main():
    if not os.access(common.GNU_TIME, os.X_OK):
        print("GNU time (%s) is needed to measure peak RSS" % common.GNU_TIME)
        return 77
    torch.set_num_threads(1)
    rep = common.Report("layout-memory")
    tmp = tempfile.mkdtemp(prefix="layout_mem_")
    try:
        small, _, _, _ = convert(tmp, 4)
        big, src, dcp_dir, back = convert(tmp, 16)
        stacked_kib = 16 * 2 * I * H * 4 // 1024
        tiny = os.path.join(tmp, "tiny.safetensors")
        save_file({"w": torch.zeros(4, 4)}, tiny)
        base = common.run_measured([common.fsdpconv_path(), "full-to-dcp", "--world-size", "2",
                                    "-o", os.path.join(tmp, "tiny"), tiny],
                                   os.path.join(tmp, "tiny.log"))["maxrss_kib"]
        print("fsdpconv's own peak RSS (one [4, 4] tensor): %d KiB" % base)
        for what in ("import", "export"):
            s, b = small[what]["maxrss_kib"], big[what]["maxrss_kib"]
            print("%s: peak RSS %d KiB with 4 experts, %d KiB with 16 (one stacked tensor "
                  "%d KiB, --max-memory %s)" % (what, s, b, stacked_kib, BUDGET))
            probs = []
            if b > s + 8 * 1024:
                probs.append("peak RSS grew from %d to %d KiB" % (s, b))
            if b > stacked_kib // 2:
                probs.append("peak RSS %d KiB is over half a stacked tensor" % b)
            if b > base + 4 * BUDGET_KIB:
                probs.append("peak RSS %d KiB is more than 4x --max-memory over %d KiB" % (
                    b, base))
            rep.case("%s of 16 experts: peak RSS flat at --max-memory %s" % (what, BUDGET), probs)
        rep.case("16 experts: stacked bit-exact under dcp.load; export equals the input",
                 check_values(src, dcp_dir, back, 16))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
