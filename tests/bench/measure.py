"""Run one benchmark case and append its figures to a JSON-lines results file.

usage: python measure.py --results FILE --name NAME [--cache auto|cold|warm] [--reps N]
                         [--clean PATH]... [--log FILE] -- CMD [ARG]...

Each repetition removes every --clean PATH (rm -rf) and syncs, then
  cold: drops the page cache (sync; echo 3 > /proc/sys/vm/drop_caches; needs root),
  warm: first runs CMD once unmeasured (then cleans again), so its input is in the page cache;
auto picks cold when the page cache can be dropped, else warm.
Wall seconds are perf_counter around spawn..reap. Peak RSS (ru_maxrss), user/sys CPU seconds and
bytes read from / written to the block layer (ru_inblock/ru_oublock x 512) are CMD's own, its
reaped children included, taken by GNU time (/usr/bin/time, or $BENCH_TIME): a child forked from
this Python process would carry Python's ~12 MiB into ru_maxrss (the high-water mark survives
exec), GNU time's fork carries ~1.5 MiB. Without GNU time the figures come from os.wait4 on CMD
itself and "rss_method" says so. The repetition with the smallest wall time is reported; peak RSS is the maximum over the
repetitions. If CMD's last stdout line is a JSON object it is kept as "child" (scripts report
in-process timings that way). stdout/stderr go to --log (default: discarded, last lines shown
on failure). Exits 1 if CMD fails.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


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


GNU_TIME = os.environ.get("BENCH_TIME", "/usr/bin/time")
TIME_FMT = "%M %U %S %I %O"


def run_once(cmd, log):
    use_time = os.access(GNU_TIME, os.X_OK)
    tfile = None
    argv = cmd
    if use_time:
        fd, tfile = tempfile.mkstemp(prefix="measure.", suffix=".time")
        os.close(fd)
        argv = [GNU_TIME, "-f", TIME_FMT, "-o", tfile, "--"] + cmd
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
            "rss_method": "os.wait4 (includes the ~12 MiB of the forking Python process)",
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
    ap.add_argument("--cache", choices=("auto", "cold", "warm"), default="auto")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--clean", action="append", default=[])
    ap.add_argument("--log")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command")
    log = args.log or os.devnull

    mode = args.cache
    if mode in ("auto", "cold"):
        if drop_caches():
            mode = "cold"
        elif mode == "cold":
            print("measure: cannot drop the page cache (not root?)", file=sys.stderr)
            return 1
        else:
            mode = "warm"

    reps = []
    for _ in range(max(1, args.reps)):
        clean(args.clean)
        if mode == "cold":
            drop_caches()
        else:
            warm = run_once(cmd, log)
            if warm["rc"] != 0:
                reps.append(warm)
                break
            clean(args.clean)
        r = run_once(cmd, log)
        r["child"] = last_json(log)
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
    rec["cache"] = mode
    rec["maxrss_kib"] = max(r["maxrss_kib"] for r in reps)
    rec["walls_s"] = [round(r["wall_s"], 4) for r in reps]
    rec["cmd"] = cmd
    with open(args.results, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print("  %-28s %9.3f s  %9.1f MiB peak RSS  (%s cache, walls %s)"
          % (args.name, best["wall_s"], rec["maxrss_kib"] / 1024.0, mode,
             ", ".join("%.3f" % w for w in rec["walls_s"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
