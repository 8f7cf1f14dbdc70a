"""Summarise bench_io.sh's BENCH_DIR/io_results.jsonl (stdout and BENCH_DIR/io_summary.md).

usage: python io_report.py BENCH_DIR

Each case's fastest round (common.best_round), its wall, user and system CPU seconds, system CPU
per GB moved, and its ratios to the two yardsticks of the same bytes: cp + fsync and the
direct-I/O dd copy. Issue 25's targets are printed beside the ratios with "met" or "MISSED";
nothing is asserted.
"""

import os
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import common  # noqa: E402

# case, yardsticks (cp, dd), label, target vs dd, target vs cp
ROWS = [
    ("f2d_buffered", "st", "full-to-dcp ws8 --io buffered", None, None),
    ("f2d_direct", "st", "full-to-dcp ws8 --io direct", None, None),
    ("f2d_auto", "st", "full-to-dcp ws8 --io auto (default)", 1.1, 0.7),
    ("f2d_auto_base", "st", "full-to-dcp ws8 --io auto, BENCH_IO_BASE", None, None),
    ("f2d_st_buffered", "st", "full-to-dcp ws8 --format safetensors, buffered", None, None),
    ("f2d_st_auto", "st", "full-to-dcp ws8 --format safetensors, auto", 1.1, 0.7),
    ("reshard_buffered", "dcp", "reshard ws8 -> ws6, buffered", None, None),
    ("reshard_auto", "dcp", "reshard ws8 -> ws6, auto", 1.1, 0.7),
    ("reshard_auto_base", "dcp", "reshard ws8 -> ws6, auto, BENCH_IO_BASE", None, None),
    ("d2f_buffered", "dcp", "dcp-to-full -> .safetensors, buffered", None, None),
    ("d2f_auto", "dcp", "dcp-to-full -> .safetensors, auto", 1.2, None),
    ("d2f_auto_base", "dcp", "dcp-to-full -> .safetensors, auto, BENCH_IO_BASE", None, None),
    ("d2f_auto_noverify", "dcp", "dcp-to-full, auto, --no-verify", None, None),
]


def main():
    d = sys.argv[1]
    runs = common.read_rounds(os.path.join(d, "io_results.jsonl"))
    recs = {k: common.best_round(v) for k, v in runs.items()}
    out = []
    p = out.append

    def load(name):
        try:
            with open(os.path.join(d, name)) as f:
                return f.read().strip()
        except OSError:
            return "?"

    gb = next(iter(recs.values()))["gb"] if recs else 0
    p("### Direct I/O (`sh tests/bench/bench_io.sh`, %s GiB)" % gb)
    p("")
    p("%s, %d cores, kernel %s; load average (1, 5, 15 min) %s at the start, %s at the end; "
      "cache: %s; best of %d interleaved rounds."
      % (platform.node() or "this machine", os.cpu_count(), platform.release(),
         load("io_loadavg.start"), load("io_loadavg.end"),
         ",".join(sorted({r["cache"] for r in recs.values()})),
         max(len(v) for v in runs.values()) if runs else 0))
    p("")
    p("| case | wall s (rounds) | user s | sys s | sys s/GB | / cp+fsync | / dd direct | target |")
    p("|---|---|---|---|---|---|---|---|")
    for name, bytes_of in (("cp_st", "st"), ("dd_st", "st"), ("cp_dcp", "dcp"),
                           ("dd_dcp", "dcp")):
        r = recs.get(name)
        if r:
            p("| yardstick %s | %.2f (%s) | %.2f | %.2f | %.3f | | | |"
              % (name, r["wall_s"], " ".join("%.1f" % w for w in r["walls_s"]), r["user_s"],
                 r["sys_s"], r["sys_s"] / (gb * 1.073741824)))
    for name, ys, label, t_dd, t_cp in ROWS:
        r = recs.get(name)
        if r is None:
            continue
        cp, dd = recs.get("cp_" + ys), recs.get("dd_" + ys)
        rcp = r["wall_s"] / cp["wall_s"] if cp else float("nan")
        rdd = r["wall_s"] / dd["wall_s"] if dd else float("nan")
        tgt = []
        if t_dd is not None:
            tgt.append("≤ %.1f× dd: %s" % (t_dd, "met" if rdd <= t_dd else "MISSED"))
        if t_cp is not None:
            tgt.append("≤ %.1f× cp: %s" % (t_cp, "met" if rcp <= t_cp else "MISSED"))
        p("| %s | %.2f (%s) | %.2f | %.2f | %.3f | %.2f× | %.2f× | %s |"
          % (label, r["wall_s"], " ".join("%.1f" % w for w in r["walls_s"]), r["user_s"],
             r["sys_s"], r["sys_s"] / (gb * 1.073741824), rcp, rdd, "; ".join(tgt)))
    a, b = recs.get("d2f_auto"), recs.get("d2f_auto_noverify")
    if a and b:
        p("")
        p("CRC-32 verification in dcp-to-full: %.3f× the wall of --no-verify (target ≤ 1.05), "
          "%.2f s more CPU." % (a["wall_s"] / b["wall_s"],
                                a["user_s"] + a["sys_s"] - b["user_s"] - b["sys_s"]))
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    with open(os.path.join(d, "io_summary.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
