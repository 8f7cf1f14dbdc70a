"""Run one case of the reshard / dcp-to-full benchmarks and append its figures to a JSON-lines file.

usage: python reshard_measure.py --results FILE --name NAME [--group G] [--gb GB]
                                 [--clean PATH]... [--log FILE] -- CMD [ARG]...

Before the run every --clean PATH is removed (rm -rf), the file system is synced and the page
cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches, needs root: "cache": "cold"); without
root CMD first runs once unmeasured, so its input is in the page cache ("cache": "warm"), and
the output is cleaned again.

Figures are CMD's own: wall seconds (perf_counter around spawn..reap), peak RSS, user/sys CPU and
block-layer bytes read/written, all taken by GNU time (/usr/bin/time or $BENCH_TIME), whose fork
carries ~1.5 MiB into ru_maxrss instead of this Python process's ~12 MiB. ru_maxrss of a shell
wrapper is the largest of its reaped children. Without GNU time the figures come from os.wait4 and
"rss_method" says so. If CMD's last stdout line is a JSON object it is kept as "child" (the torch
yardstick reports its in-process phases that way). Exits 1 if CMD fails, showing its log's tail.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

GNU_TIME = os.environ.get("BENCH_TIME", "/usr/bin/time")


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def clean(paths):
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)
    os.sync()


def run_once(cmd, log):
    use_time = os.access(GNU_TIME, os.X_OK)
    tfile = None
    argv = cmd
    if use_time:
        fd, tfile = tempfile.mkstemp(prefix="reshard_measure.", suffix=".time")
        os.close(fd)
        argv = [GNU_TIME, "-f", "%M %U %S %I %O", "-o", tfile, "--"] + cmd
    try:
        with open(log, "wb") as out:
            t0 = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
        rec = {
            "rc": os.waitstatus_to_exitcode(status),
            "wall_s": wall,
            "maxrss_kib": ru.ru_maxrss,
            "user_s": ru.ru_utime,
            "sys_s": ru.ru_stime,
            "disk_read_bytes": ru.ru_inblock * 512,
            "disk_write_bytes": ru.ru_oublock * 512,
            "rss_method": "os.wait4 (includes ~12 MiB of the forking Python process)",
        }
        if use_time:
            with open(tfile) as f:
                lines = f.read().strip().splitlines()
            fields = lines[-1].split() if lines else []
            if len(fields) == 5:
                rec["maxrss_kib"] = int(fields[0])
                rec["user_s"] = float(fields[1])
                rec["sys_s"] = float(fields[2])
                rec["disk_read_bytes"] = int(fields[3]) * 512
                rec["disk_write_bytes"] = int(fields[4]) * 512
                rec["rss_method"] = "GNU time (%s)" % GNU_TIME
    finally:
        if tfile:
            os.unlink(tfile)
    return rec


def last_json(log):
    try:
        with open(log, "rb") as f:
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return None
    if lines and lines[-1].startswith("{"):
        try:
            return json.loads(lines[-1])
        except ValueError:
            return None
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--name", required=True)
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

    clean(args.clean)
    if drop_caches():
        mode = "cold"
    else:
        mode = "warm"
        warm = run_once(cmd, log)
        clean(args.clean)
        if warm["rc"] != 0:
            print("reshard_measure: %s (warm-up) failed with exit status %d"
                  % (args.name, warm["rc"]), file=sys.stderr)
            return 1
    with open("/proc/loadavg") as f:
        load_before = float(f.read().split()[0])
    rec = run_once(cmd, log)
    if rec["rc"] != 0:
        print("reshard_measure: %s failed with exit status %d: %s"
              % (args.name, rec["rc"], " ".join(cmd)), file=sys.stderr)
        if log != os.devnull:
            with open(log, "rb") as f:
                tail = f.read().decode("utf-8", "replace").splitlines()[-20:]
            print("\n".join(tail), file=sys.stderr)
        return 1
    rec["child"] = last_json(log)
    rec["name"] = args.name
    rec["group"] = args.group
    rec["gb"] = args.gb
    rec["cache"] = mode
    rec["loadavg_1m_before"] = load_before
    rec["cmd"] = cmd
    with open(args.results, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print("  %-26s %8.2f s  %9.1f MiB peak RSS  (%s cache, load %.1f)"
          % (args.name, rec["wall_s"], rec["maxrss_kib"] / 1024.0, mode, load_before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
