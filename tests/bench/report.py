"""Summarise BENCH_DIR/results.jsonl as Markdown tables (stdout and BENCH_DIR/summary.md).

usage: python report.py BENCH_DIR FSDPCONV

Figures are reported, never asserted: each target is printed next to the measured ratio with
"met" or "MISSED". Every ratio is against a yardstick measured in the same run (cp of the input,
torch_save_to_dcp, the checkpoint's own size).
"""

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import common  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30


def slowest_rank(rec):
    return max(r["wall_s"] for r in rec["ranks"])


def load(dirpath):
    """Merge the records of each case (one per round): see common.best_round; a load case's
    fastest round is the one with the fastest slowest rank."""
    recs = {}
    for name, rs in common.read_rounds(os.path.join(dirpath, "results.jsonl")).items():
        if rs[0].get("kind") == "load":
            best = dict(min(rs, key=slowest_rank))
            best["rounds_slowest_s"] = [slowest_rank(r) for r in rs]
        else:
            best = common.best_round(rs)
        recs[name] = best
    return recs


def fmt(x, spec="%.3f"):
    return "n/a" if x is None else spec % x


def verdict(value, op, target):
    if value is None:
        return "n/a"
    ok = value <= target if op == "<=" else value >= target
    return "met" if ok else "MISSED"


def load_formats(p, recs):
    """Output formats compared on the load side, against fsdpconv's safetensors output."""
    st = recs.get("load_fsdpconv_ws4_st")
    if not st:
        return
    rows = [("fsdpconv --format safetensors (HuggingFaceStorageReader)", st),
            ("fsdpconv DCP (FileSystemReader)", recs.get("load_fsdpconv_ws4")),
            ("torch dcp.save DCP (torch_save_to_dcp)", recs.get("load_torch")),
            ("original model.safetensors (HuggingFaceStorageReader)",
             recs.get("load_hf_original")),
            ("torch HuggingFaceStorageWriter(save_distributed=True) output (information)",
             recs.get("load_torch_hf")),
            ("fsdpconv --format safetensors, targets prefaulted (information)",
             recs.get("load_fsdpconv_ws4_st_prefault")),
            ("fsdpconv DCP, targets prefaulted (information)",
             recs.get("load_fsdpconv_ws4_prefault"))]
    p("### Output formats on the load side (4 gloo ranks, cold cache, best round)")
    p("")
    p("| checkpoint | slowest-rank wall s | cpu s (user+sys, all ranks) | user / sys s "
      "| max read_bytes / total | wall / safetensors | cpu / safetensors |")
    p("|---|---|---|---|---|---|---|")
    for label, rec in rows:
        if not rec:
            continue
        w = slowest_rank(rec)
        c = sum(r.get("cpu_s", float("nan")) for r in rec["ranks"])
        rb = max(r["read_bytes"] for r in rec["ranks"]) / rec["total_bytes"]
        us = "%.2f / %.2f" % (sum(r.get("user_s", float("nan")) for r in rec["ranks"]),
                              sum(r.get("sys_s", float("nan")) for r in rec["ranks"]))
        p("| %s | %.3f | %.2f | %s | %.3f | %.2f | %.2f |"
          % (label, w, c, us, rb, w / slowest_rank(st), c / sum(r["cpu_s"] for r in st["ranks"])))
    p("")
    dcp_, orig = recs.get("load_fsdpconv_ws4"), recs.get("load_hf_original")
    st_w, st_c = slowest_rank(st), sum(r["cpu_s"] for r in st["ranks"])
    figs = []
    if dcp_:
        figs.append(("fsdpconv DCP cpu / safetensors cpu",
                     sum(r["cpu_s"] for r in dcp_["ranks"]) / st_c, ">=", 1.8))
        figs.append(("fsdpconv DCP wall / safetensors wall", slowest_rank(dcp_) / st_w, ">=", 1.3))
    if orig:
        figs.append(("original safetensors wall / safetensors wall", slowest_rank(orig) / st_w,
                     ">=", 1.0))
    figs.append(("max per-rank read_bytes / total, safetensors output",
                 max(r["read_bytes"] for r in st["ranks"]) / st["total_bytes"], "<=",
                 1.0 / st["world"] + 0.02))
    p("| figure | measured | target | |")
    p("|---|---|---|---|")
    for label, val, op, target in figs:
        p("| %s | %.2f | %s %.2f | %s |" % (label, val, op, target, verdict(val, op, target)))
    dpf = recs.get("load_fsdpconv_ws4_prefault")
    spf = recs.get("load_fsdpconv_ws4_st_prefault")
    if dpf and spf:
        p("| fsdpconv DCP cpu / safetensors cpu, targets prefaulted (information) | %.2f | | |"
          % (sum(r["cpu_s"] for r in dpf["ranks"]) / sum(r["cpu_s"] for r in spf["ranks"])))
    digests = {r["digest"] for r in (st, dcp_, orig, dpf, spf, recs.get("load_torch_hf")) if r}
    p("| loaded values (bit sums of every local shard) | %s | equal | |"
      % ("identical" if len(digests) == 1 and "MISMATCH" not in digests else "DIFFER"))
    p("")


def conversion_sections(p, recs, man):
    """The conversion cases (bench_inspect.sh, bench_full_to_dcp.sh) and their ratios."""

    def row(name, note=""):
        r = recs.get(name)
        if r is None:
            p("| %s | - | - | - | - | - | not run |" % name)
            return
        thr = ""
        if r["wall_s"] > 0 and name.startswith(("cp", "fsdpconv", "torch")):
            src = man["st_file_bytes"] if name.endswith("_st") else man["pt_file_bytes"]
            thr = "%.2f" % (src / GIB / r["wall_s"])
        p("| %s | %.3f | %s | %.1f | %.1f | %s | %s |"
          % (name, r["wall_s"], " ".join("%.3f" % w for w in r["walls_s"]),
             r["maxrss_kib"] / 1024.0, r["user_s"] + r["sys_s"], thr, r["cache"]
             + ("; " + note if note else "")))

    p("## Cases")
    p("")
    p("| case | wall s (best) | all runs s | peak RSS MiB | CPU s | GiB/s | cache; note |")
    p("|---|---|---|---|---|---|---|")
    for name in ("inspect_pt_cold", "inspect_pt_warm", "inspect_st_cold", "inspect_st_warm"):
        row(name)
    row("cp_fsync", "yardstick 1")
    row("cp", "no fsync, information only")
    row("fsdpconv_ws8")
    row("fsdpconv_ws8_st", "safetensors input")
    row("fsdpconv_ws8_bf16", "--dtype bfloat16")
    tc = recs.get("torch_save_to_dcp")
    note = "yardstick 2"
    if tc and tc.get("child"):
        note += "; import %.1f s, call %.1f s" % (tc["child"]["import_s"],
                                                  tc["child"]["convert_s"])
    row("torch_save_to_dcp", note)
    row("fsdpconv_ws4", "input of the load side")
    p("")

    def wall(n):
        r = recs.get(n)
        return r["wall_s"] if r else None

    def rss(n):
        r = recs.get(n)
        return r["maxrss_kib"] * 1024 if r else None

    def ratio(a, b):
        return a / b if a is not None and b else None

    p("## Ratios")
    p("")
    p("| figure | measured | target | |")
    p("|---|---|---|---|")
    rows = []
    f_cp = ratio(wall("fsdpconv_ws8"), wall("cp_fsync"))
    rows.append(("fsdpconv ws8 wall / cp+fsync wall", f_cp, "<=", 1.10))
    rows.append(("fsdpconv ws8 (safetensors) wall / cp+fsync wall",
                 ratio(wall("fsdpconv_ws8_st"), wall("cp_fsync")), "<=", 1.10))
    rows.append(("torch_save_to_dcp wall / fsdpconv ws8 wall",
                 ratio(wall("torch_save_to_dcp"), wall("fsdpconv_ws8")), ">=", 5.0))
    if tc and tc.get("child"):
        rows.append(("torch_save_to_dcp in-call wall (no import) / fsdpconv ws8 wall",
                     ratio(tc["child"]["convert_s"], wall("fsdpconv_ws8")), ">=", None))
    rows.append(("fsdpconv ws8 peak RSS / torch_save_to_dcp peak RSS",
                 ratio(rss("fsdpconv_ws8"), rss("torch_save_to_dcp")), "<=", 0.10))
    for ext, label in (("pt", "model.pt"), ("st", "model.safetensors")):
        for cache in ("cold", "warm"):
            n = "inspect_%s_%s" % (ext, cache)
            rows.append(("inspect %s (%s) wall s" % (label, recs.get(n, {}).get("cache", cache)),
                         wall(n), "<=", 1.0))
            rows.append(("inspect %s (%s) peak RSS MB" % (label,
                                                          recs.get(n, {}).get("cache", cache)),
                         None if rss(n) is None else rss(n) / 1e6, "<=", 50.0))
    rows.append(("inspect model.pt cold wall / cp+fsync wall",
                 ratio(wall("inspect_pt_cold"), wall("cp_fsync")), "<=", None))
    for label, val, op, target in rows:
        if target is None:
            p("| %s | %s | (information) | |" % (label, fmt(val, "%.5f")))
        else:
            p("| %s | %s | %s %g | %s |" % (label, fmt(val), op, target,
                                           verdict(val, op, target)))
    p("")


def main():
    dirpath, binpath = sys.argv[1], sys.argv[2]
    recs = load(dirpath)
    with open(os.path.join(dirpath, "model", "model.json")) as f:
        man = json.load(f)
    out = []
    p = out.append

    try:
        ver = subprocess.run([binpath, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        ver = "?"
    try:
        with open(os.path.join(dirpath, "loadavg.start")) as f:
            la0 = f.read().split()[:3]
    except OSError:
        la0 = ["?"]
    with open("/proc/loadavg") as f:
        la1 = f.read().split()[:3]
    mem = "?"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = "%.1f GiB" % (int(line.split()[1]) / (1 << 20))
    warm = sorted(n for n, r in recs.items() if r.get("cache") != "cold")
    if all(r.get("cache") == "cold" for n, r in recs.items() if not n.endswith("_warm")):
        caches = ("cold for every case but %s (one unmeasured run first)"
                  % ", ".join(n for n in warm) if warm else "cold for every case")
    else:
        caches = "warm (page cache could not be dropped) for %s" % ", ".join(warm)

    p("## Environment")
    p("")
    p("- date: %s" % datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"))
    p("- machine: %s, %d CPU cores, %s RAM, %s" % (platform.machine(), os.cpu_count(), mem,
                                                   platform.platform()))
    p("- load average at start / end: %s / %s (cores shared with other jobs)"
      % (" ".join(la0), " ".join(la1)))
    p("- %s; torch %s; safetensors %s" % (ver, importlib.metadata.version("torch"),
                                          importlib.metadata.version("safetensors")))
    p("- page cache: %s; cold = `sync; echo 3 > /proc/sys/vm/drop_caches` before every run"
      % caches)
    p("- model: %d tensors, %d layers of H=%d, %.3f GiB of tensor data; model.pt %.3f GiB, "
      "model.safetensors %.3f GiB" % (man["tensors"], man["layers"], man["hidden"],
                                      man["bytes"] / GIB, man["pt_file_bytes"] / GIB,
                                      man["st_file_bytes"] / GIB))
    p("")

    conversion = ("cp_fsync", "fsdpconv_ws8", "torch_save_to_dcp", "inspect_pt_cold")
    if any(n in recs for n in conversion):
        conversion_sections(p, recs, man)
    loads = [recs.get("load_fsdpconv_ws4"), recs.get("load_torch")]
    formats = [recs.get(n) for n in ("load_fsdpconv_ws4_st", "load_hf_original")]
    if any(loads + formats):
        p("## Load side: 4 gloo ranks, dcp.load into Shard(0) DTensors")
        p("")
        p("Each checkpoint's fastest round (by its slowest rank) is shown. "
          "Per-rank bytes are deltas of /proc/self/io around dcp.load, as a fraction of all bytes "
          "in the checkpoint directory (.metadata included). rchar counts every byte returned by "
          "read(2), page cache or not; read_bytes counts bytes fetched from the device (cache "
          "dropped before the job; a page shared by several ranks is charged to the first "
          "reader). Target for fsdpconv: about 1/N = 0.25 per rank.")
        p("")
        p("| checkpoint | files | total MiB | rank | load wall s | cpu s | rchar MiB | rchar / total "
          "| read_bytes / total | local shard / total | peak RSS MiB |")
        p("|---|---|---|---|---|---|---|---|---|---|---|")
        for rec in loads + formats:
            if not rec:
                continue
            for r in rec["ranks"]:
                p("| %s | %d | %.1f | %d | %.3f | %s | %.1f | %.3f | %.3f | %.3f | %.1f |"
                  % (rec["name"], rec["files"], rec["total_bytes"] / MIB, r["rank"], r["wall_s"],
                     fmt(r.get("cpu_s"), "%.3f"), r["rchar"] / MIB,
                     r["rchar"] / rec["total_bytes"], r["read_bytes"] / rec["total_bytes"],
                     r["local_bytes"] / rec["total_bytes"], r["maxrss_kib"] / 1024.0))
        p("")
        load_formats(p, recs)
        a, b = loads
        if a and b:
            wa = max(r["wall_s"] for r in a["ranks"])
            wb = max(r["wall_s"] for r in b["ranks"])
            ra = max(r["rchar"] for r in a["ranks"]) / a["total_bytes"]
            rb = max(r["rchar"] for r in b["ranks"]) / b["total_bytes"]
            p("| figure | measured |")
            p("|---|---|")
            p("| max per-rank rchar / total, fsdpconv ws4 | %.3f (1/N = %.3f) |"
              % (ra, 1.0 / a["world"]))
            p("| max per-rank rchar / total, torch_save_to_dcp | %.3f |" % rb)
            p("| slowest-rank dcp.load wall s per round, fsdpconv ws4 | %s |"
              % " ".join("%.3f" % w for w in a["rounds_slowest_s"]))
            p("| slowest-rank dcp.load wall s per round, torch_save_to_dcp | %s |"
              % " ".join("%.3f" % w for w in b["rounds_slowest_s"]))
            p("| slowest-rank dcp.load wall (best rounds), torch output / fsdpconv output | %.2f |"
              % (wb / wa if wa else float("nan")))
            p("| loaded values (bit sums of every local shard) | %s |"
              % ("identical (digest %s)" % a["digest"] if a["digest"] == b["digest"]
                 and a["digest"] != "MISMATCH" else "DIFFER: %s vs %s"
                 % (a["digest"], b["digest"])))
            p("")

    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    with open(os.path.join(dirpath, "summary.md"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
