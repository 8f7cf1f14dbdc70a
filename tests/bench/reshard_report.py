"""Summarise the reshard / dcp-to-full benchmark figures as Markdown tables.

usage: python reshard_report.py BENCH_DIR [reshard|dcp_to_full]...

Reads BENCH_DIR/reshard_results.jsonl and BENCH_DIR/dcp_to_full_results.jsonl (one record per
case and round, from measure.py), keeps each case's fastest round (peak RSS: the largest
over the rounds) and prints every figure as a ratio against the yardstick measured in the same
run: cp -r + fsync of the same DCP directory for reshard, dcp_to_torch_save for dcp-to-full.
Targets are printed beside the ratios with "met" or "MISSED"; nothing is asserted. The tables also
go to BENCH_DIR/summary_<group>.md.
"""

import json
import os
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import common  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30


def load(path):
    return {name: common.best_round(rs) for name, rs in common.read_rounds(path).items()}


def verdict(ok):
    return "met" if ok else "MISSED"


def model_bytes(dirpath, gb):
    try:
        with open(os.path.join(dirpath, "model_%s" % fmt_gb(gb), "model.json")) as f:
            return json.load(f)["bytes"]
    except (OSError, ValueError, KeyError):
        return None


def fmt_gb(gb):
    """The size as the shell scripts spelled it in directory names (2.0 -> 2, 0.75 -> 0.75)."""
    return ("%g" % gb)


def dir_size(path):
    total = 0
    for root, _, files in os.walk(path):
        for n in files:
            total += os.path.getsize(os.path.join(root, n))
    return total


def machine(dirpath):
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = "%.1f GiB" % (int(line.split()[1]) / (1 << 20))
    try:
        import torch
        tv = torch.__version__
    except ImportError:
        tv = "?"
    return ("%s, %d cores, %s RAM, Linux %s, Python %s, torch %s"
            % (cpu, os.cpu_count(), mem, platform.release(), platform.python_version(), tv))


def walls(rec):
    return ", ".join("%.2f" % w for w in rec["walls_s"])


def cpu(rec):
    """User + system CPU seconds of the fastest round."""
    return "%.2f" % (rec["user_s"] + rec["sys_s"])


def loads(rec):
    return ", ".join("%.1f" % x for x in rec["loads"] if x is not None)


def report_reshard(dirpath, p):
    recs = load(os.path.join(dirpath, "reshard_results.jsonl"))
    if not recs:
        p("(no reshard figures in %s)" % dirpath)
        return
    sizes = sorted({r["gb"] for r in recs.values()})
    p("### reshard: world size 8 -> 4 vs cp -r of the same DCP directory")
    p("")
    p("Cache: %s. Fastest of %d rounds; peak RSS is the largest over the rounds."
      % (",".join(sorted({r["cache"] for r in recs.values()})),
         max(len(r["walls_s"]) for r in recs.values())))
    p("")
    p("| size | case | wall s (best) | rounds s | 1-min load before | CPU s (user+sys) | "
      "peak RSS MiB | wall / cp_r_fsync |")
    p("|---|---|---|---|---|---|---|---|")
    rows = []
    for gb in sizes:
        nb = model_bytes(dirpath, gb)
        dcp = dir_size(os.path.join(dirpath, "dcp8_%s" % fmt_gb(gb)))
        label = "%s GiB (%.3f GiB of tensors, DCP %.3f GiB)" % (
            fmt_gb(gb), (nb or 0) / GIB, dcp / GIB)
        y = recs.get("cp_r_fsync@%s" % fmt_gb(gb))
        for case in ("cp_r_fsync", "cp_r", "reshard_ws4", "reshard_ws4_no_verify"):
            r = recs.get("%s@%s" % (case, fmt_gb(gb)))
            if r is None:
                continue
            ratio = r["wall_s"] / y["wall_s"] if y else None
            p("| %s | %s | %.2f | %s | %s | %s | %.1f | %s |"
              % (label, case, r["wall_s"], walls(r), loads(r), cpu(r), r["maxrss_kib"] / 1024.0,
                 "%.2fx" % ratio if ratio is not None else "n/a"))
        rows.append((gb, recs.get("reshard_ws4@%s" % fmt_gb(gb)), y, recs.get("cp_r@%s" % fmt_gb(gb))))
    p("")
    p("| size | reshard / cp_r_fsync (target <= 1.3x) | reshard / cp_r (no fsync, info) | "
      "reshard throughput | reshard peak RSS |")
    p("|---|---|---|---|---|")
    for gb, rs, y, c in rows:
        if rs is None or y is None:
            continue
        ratio = rs["wall_s"] / y["wall_s"]
        nb = model_bytes(dirpath, gb) or 0
        p("| %s GiB | %.2fx (%s) | %s | %.2f GiB/s | %.1f MiB |"
          % (fmt_gb(gb), ratio, verdict(ratio <= 1.3),
             "%.2fx" % (rs["wall_s"] / c["wall_s"]) if c else "n/a",
             nb / GIB / rs["wall_s"], rs["maxrss_kib"] / 1024.0))
    for gb, rs, _, _ in rows:
        nv = recs.get("reshard_ws4_no_verify@%s" % fmt_gb(gb))
        if rs is not None and nv is not None:
            p("")
            p("%s GiB: CRC-32 check of every item read costs %.3fx the wall time of --no-verify "
              "(%.2f s vs %.2f s)." % (fmt_gb(gb), rs["wall_s"] / nv["wall_s"], rs["wall_s"],
                                      nv["wall_s"]))
    have = [(gb, rs) for gb, rs, _, _ in rows if rs is not None]
    if len(have) >= 2:
        (g0, r0), (g1, r1) = have[0], have[-1]
        p("")
        p("Peak RSS as the checkpoint grows %.2fx (%s -> %s GiB): %.1f -> %.1f MiB, %.2fx."
          % (g1 / g0, fmt_gb(g0), fmt_gb(g1), r0["maxrss_kib"] / 1024.0,
             r1["maxrss_kib"] / 1024.0, r1["maxrss_kib"] / r0["maxrss_kib"]))
    vpath = os.path.join(dirpath, "reshard_verify.jsonl")
    if os.path.exists(vpath):
        with open(vpath) as f:
            for line in f:
                v = json.loads(line)
                p("")
                p("Check (PyTorch DCP load, 4 rank files, torch.equal to model.pt): %d tensors, "
                  "%.3f GiB: %s." % (v["tensors"], v["bytes"] / GIB,
                                    "all equal" if v["equal"] else "MISMATCH"))


def report_dcp_to_full(dirpath, p):
    recs = load(os.path.join(dirpath, "dcp_to_full_results.jsonl"))
    if not recs:
        p("(no dcp-to-full figures in %s)" % dirpath)
        return
    gb = next(iter(recs.values()))["gb"]
    nb = model_bytes(dirpath, gb) or 0
    y = recs.get("torch_dcp_to_torch_save")
    p("### dcp-to-full: %s GiB DCP (world size 8, %.3f GiB of tensors) vs dcp_to_torch_save"
      % (fmt_gb(gb), nb / GIB))
    p("")
    p("Cache: %s. Fastest of %d rounds; peak RSS is the largest over the rounds."
      % (",".join(sorted({r["cache"] for r in recs.values()})),
         max(len(r["walls_s"]) for r in recs.values())))
    p("")
    p("| case | wall s (best) | rounds s | 1-min load before | CPU s (user+sys) | peak RSS MiB | "
      "speed-up vs torch (target >= 5x) | peak RSS / torch's (target <= 0.10) |")
    p("|---|---|---|---|---|---|---|---|")
    for case in ("torch_dcp_to_torch_save", "fsdpconv_pt", "fsdpconv_safetensors",
                 "fsdpconv_safetensors_no_verify"):
        r = recs.get(case)
        if r is None:
            continue
        if y is None or case == "torch_dcp_to_torch_save":
            sp = rr = "(yardstick)" if y is not None else "n/a"
        else:
            s = y["wall_s"] / r["wall_s"]
            q = r["maxrss_kib"] / y["maxrss_kib"]
            sp = "%.2fx (%s)" % (s, verdict(s >= 5.0))
            rr = "%.3f (%s)" % (q, verdict(q <= 0.10))
        p("| %s | %.2f | %s | %s | %s | %.1f | %s | %s |"
          % (case, r["wall_s"], walls(r), loads(r), cpu(r), r["maxrss_kib"] / 1024.0, sp, rr))
    on, off = recs.get("fsdpconv_safetensors"), recs.get("fsdpconv_safetensors_no_verify")
    if on is not None and off is not None:
        p("")
        p("CRC-32 check of every item read: %.3fx the wall time of --no-verify "
          "(%.2f s vs %.2f s, best rounds)." % (on["wall_s"] / off["wall_s"], on["wall_s"],
                                                off["wall_s"]))
    if y is not None and y.get("child"):
        c = y["child"]
        p("")
        p("Inside the torch process (fastest round): import %.2f s, dcp_to_torch_save %.2f s, "
          "fsync %.2f s." % (c["import_s"], c["convert_s"], c["fsync_s"]))
        inproc = c["convert_s"] + c["fsync_s"]
        for case in ("fsdpconv_pt", "fsdpconv_safetensors"):
            r = recs.get(case)
            if r is not None:
                p("Against only the call and the fsync (no interpreter start, no torch import), "
                  "%s is %.2fx faster (%.2f s vs %.2f s)."
                  % (case, inproc / r["wall_s"], r["wall_s"], inproc))
    cp = load(os.path.join(dirpath, "reshard_results.jsonl")).get("cp_r_fsync@%s" % fmt_gb(gb))
    if cp is not None and y is not None:
        p("")
        p("Copy floor (cp -r + fsync of the same DCP, from bench_reshard.sh in this BENCH_DIR): "
          "%.2f s; dcp_to_torch_save takes %.2fx that, so a %.0fx speed-up needs an export that "
          "takes at most %.2fx the copy's time."
          % (cp["wall_s"], y["wall_s"] / cp["wall_s"], 5.0, y["wall_s"] / cp["wall_s"] / 5.0))
        for case in ("fsdpconv_pt", "fsdpconv_safetensors"):
            r = recs.get(case)
            if r is not None:
                p("%s takes %.2fx the copy floor." % (case, r["wall_s"] / cp["wall_s"]))
    vpath = os.path.join(dirpath, "dcp_to_full_verify.jsonl")
    if os.path.exists(vpath):
        p("")
        p("Check (PyTorch loads, keys/dtypes/shapes and torch.equal of every tensor vs model.pt):")
        with open(vpath) as f:
            for line in f:
                v = json.loads(line)
                p("- %s: %d tensors, %.3f GiB: %s" % (
                    os.path.basename(v["path"]), v["tensors"], v["bytes"] / GIB,
                    "all equal" if v["equal"] else "MISMATCH"))


def main():
    if len(sys.argv) < 2:
        print("usage: %s BENCH_DIR [reshard|dcp_to_full]..." % sys.argv[0], file=sys.stderr)
        return 2
    dirpath = sys.argv[1]
    groups = sys.argv[2:] or ["reshard", "dcp_to_full"]
    for g in groups:
        out = []
        p = out.append
        p("")
        p("Machine: %s." % machine(dirpath))
        p("")
        if g == "reshard":
            report_reshard(dirpath, p)
        elif g == "dcp_to_full":
            report_dcp_to_full(dirpath, p)
        else:
            print("reshard_report: unknown group %s" % g, file=sys.stderr)
            return 2
        text = "\n".join(out) + "\n"
        sys.stdout.write(text)
        with open(os.path.join(dirpath, "summary_%s.md" % g), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
