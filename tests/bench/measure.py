"""Run one benchmark case and append its figures to a JSON-lines results file.

usage: python measure.py --results FILE --name NAME [--cache auto|cold|warm] [--reps N]
                         [--group G] [--gb GB] [--clean PATH]... [--log FILE] -- CMD [ARG]...

Each repetition removes every --clean PATH (rm -rf) and syncs, then
  cold: drops the page cache (sync; echo 3 > /proc/sys/vm/drop_caches; needs root),
  warm: first runs CMD once unmeasured (then cleans again), so its input is in the page cache;
auto picks cold when the page cache can be dropped, else warm.
Wall seconds are perf_counter around spawn..reap. Peak RSS (ru_maxrss), user/sys CPU seconds and
bytes read from / written to the block layer (ru_inblock/ru_oublock x 512) are CMD's own, its
reaped children included (ru_maxrss of a shell wrapper is the largest of its children), taken by
GNU time (/usr/bin/time, or $BENCH_TIME; see common.run_measured). The repetition with the
smallest wall time is reported, with every repetition's wall in "walls_s"; peak RSS is the maximum
over the repetitions. "loadavg_1m_before" is the 1-minute load average before the first measured
run; --group and --gb are copied into the record for the reports. If CMD's last stdout line is a
JSON object it is kept as "child" (scripts report in-process timings that way). stdout/stderr go
to --log (default: discarded, last lines shown on failure). Exits 1 if CMD fails.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import common  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--cache", choices=("auto", "cold", "warm"), default="auto")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--group", default="")
    ap.add_argument("--gb", type=float)
    ap.add_argument("--clean", action="append", default=[])
    ap.add_argument("--log")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command")
    log = args.log or os.devnull

    mode = common.cache_mode(args.cache)
    if mode is None:
        print("measure: cannot drop the page cache (not root?)", file=sys.stderr)
        return 1

    reps = []
    load_before = None
    for _ in range(max(1, args.reps)):
        common.clean_paths(args.clean)
        if mode == "cold":
            common.drop_caches()
        else:
            warm = common.run_measured(cmd, log)
            if warm["rc"] != 0:
                reps.append(warm)
                break
            common.clean_paths(args.clean)
        if load_before is None:
            with open("/proc/loadavg") as f:
                load_before = float(f.read().split()[0])
        r = common.run_measured(cmd, log)
        r["child"] = common.last_json(log)
        reps.append(r)
        if r["rc"] != 0:
            break

    bad = [r for r in reps if r["rc"] != 0]
    if bad:
        print("measure: %s failed with exit status %d: %s"
              % (args.name, bad[0]["rc"], " ".join(cmd)), file=sys.stderr)
        if log != os.devnull:
            with open(log, "rb") as f:
                tail = f.read().decode("utf-8", "replace").splitlines()[-20:]
            print("\n".join(tail), file=sys.stderr)
        return 1

    best = min(reps, key=lambda r: r["wall_s"])
    rec = dict(best)
    rec["name"] = args.name
    rec["group"] = args.group
    rec["gb"] = args.gb
    rec["cache"] = mode
    rec["loadavg_1m_before"] = load_before
    rec["maxrss_kib"] = max(r["maxrss_kib"] for r in reps)
    rec["walls_s"] = [round(r["wall_s"], 4) for r in reps]
    rec["cmd"] = cmd
    with open(args.results, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print("  %-28s %9.3f s  %9.1f MiB peak RSS  (%s cache, load %.1f, walls %s)"
          % (args.name, best["wall_s"], rec["maxrss_kib"] / 1024.0, mode, load_before,
             ", ".join("%.3f" % w for w in rec["walls_s"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
