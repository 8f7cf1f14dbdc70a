"""Shared helpers for the interop tests and the benchmarks (plain Python, no pytest).

Each tests/interop/test_*.py is run by run.sh as `PYTHON test_x.py` with the fsdpconv
binary in env FSDPCONV, and exits 0 (pass), 1 (fail) or 77 (skip).  Scripts in
tests/interop import this as `import common` (their own directory is on sys.path);
tests/bench puts tests/interop on sys.path first.  Importing it puts fixtures/gen on
sys.path.

Paths and the binary
  ROOT, FIXTURES, GEN          repository paths; GEN is put on sys.path (tiny_model,
                               torchview, torchzip, gen_fixtures, gen_bad, gen_dcp_train
                               importable)
  fsdpconv_path()              the binary under test (env FSDPCONV, else ROOT/fsdpconv)
  run_fsdpconv(*args)          -> (rc, stdout, stderr) as text
  run_python(script, *args)    run a script with this interpreter, raise on failure
  readme_recipes(lang)         {name: code} of README.md's ```lang blocks that follow a
                               "<!-- recipe: NAME -->" line (the blocks the tests run as
                               printed: sh in test_recipes.py, python in
                               test_load_snippets.py)

Reporting
  Report                       per-case "ok"/"FAIL" lines and the exit status
  compare_inspect(exp, got)    differences between torch's view and inspect --json

gloo ranks (one process group runs every case of a job; see fsdp_worker.py)
  free_port()                  a free TCP port on 127.0.0.1 (for init_method / MASTER_PORT)
  launch_ranks(target, world, job, labels, wait_s, start="fork")
                               parent side: forks (or spawns) `world` processes running
                               target(rank, world, port, job), joins them for at most
                               wait_s seconds, kills the rest, and returns {label:
                               [problems]} from job["result_dir"]/rank<R>.json, adding
                               "rank R hung", "rank R exited with S" and "rank R reported
                               no result" problems
  rank_init(rank, world, port, timeout_s)
                               rank side: one torch thread, gloo over loopback,
                               init_process_group over tcp://127.0.0.1:port
  rank_finish()                rank side: destroy the process group, ignoring errors
  write_rank_results(result_dir, rank, results)
                               rank side: atomically (re)write rank<R>.json, a list of
                               {"case": label or "*" (every label), "problems": [...]}
  cap_problems(problems)       the first MAX_RANK_PROBLEMS problems plus "... N more"
  compare_with_torch_save(ours, theirs, live)
                               differences between fsdpconv's .metadata and that of torch's
                               own FSDP2 dcp.save of the same state

Measuring (tests/bench/measure.py is the command-line front end)
  drop_caches()                sync and drop the page cache; False when not allowed
  cache_mode(wanted)           "auto"|"cold"|"warm" -> "cold" (cache just dropped), "warm",
                               or None ("cold" wanted, cache cannot be dropped)
  clean_paths(paths)           rm -rf each path, then sync
  run_measured(cmd, log)       run cmd once (output to log) under GNU time: wall, peak
                               RSS, user/sys CPU, block-layer bytes read/written
  last_json(log)               the log's last line parsed as a JSON object, or None
  read_rounds(path)            a JSON-lines results file as {name: [record, ...]}
  best_round(records)          one case's rounds merged: the fastest record, with every
                               round's wall in "walls_s", the largest "maxrss_kib", the
                               caches joined in "cache" and "loadavg_1m_before" of each
                               round in "loads"
"""

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "fixtures")
GEN = os.path.join(FIXTURES, "gen")
if GEN not in sys.path:
    sys.path.insert(0, GEN)

MAX_LISTED = 12   # differences printed per case
MAX_RANK_PROBLEMS = 40   # problems a rank reports per case


def fsdpconv_path():
    return os.path.abspath(os.environ.get("FSDPCONV") or os.path.join(ROOT, "fsdpconv"))


def run_fsdpconv(*args, timeout=300):
    r = subprocess.run([fsdpconv_path()] + [str(a) for a in args], capture_output=True,
                       timeout=timeout)
    return (r.returncode, r.stdout.decode("utf-8", "replace"),
            r.stderr.decode("utf-8", "replace"))


def run_python(script, *args, timeout=600):
    r = subprocess.run([sys.executable, script] + [str(a) for a in args],
                       capture_output=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("%s %s failed (%d):\n%s" % (
            os.path.basename(script), " ".join(map(str, args)), r.returncode,
            (r.stdout + r.stderr).decode("utf-8", "replace")[-4000:]))
    return r.stdout.decode("utf-8", "replace")


def readme_recipes(lang):
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    return dict(re.findall(r"<!-- recipe: (\S+) -->\n```%s\n(.*?)```" % re.escape(lang), text,
                           re.S))


class Report:
    """Collects case results; finish() prints the summary and returns the exit status."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = []

    def case(self, label, problems):
        problems = [p for p in problems if p]
        if problems:
            self.failed.append(label)
            print("FAIL %s" % label)
            for p in problems[:MAX_LISTED]:
                print("     %s" % p)
            if len(problems) > MAX_LISTED:
                print("     ... %d more" % (len(problems) - MAX_LISTED))
        else:
            self.passed += 1
            print("ok   %s" % label)
        sys.stdout.flush()
        return not problems

    def finish(self):
        print("%s: %d passed, %d failed" % (self.name, self.passed, len(self.failed)))
        return 1 if self.failed or self.passed == 0 else 0


def _same_number(a_repr, b_repr, kind):
    try:
        if kind == "int":
            return int(a_repr) == int(b_repr)
        a, b = float(a_repr), float(b_repr)
        return a == b or (math.isnan(a) and math.isnan(b))
    except (TypeError, ValueError):
        return False


def compare_inspect(exp, got, path=None, values_metadata_ok=False):
    """List of differences between a torch-view manifest and inspect --json output.

    Compared: format, path (when given), tensor key set, dtype, shape, nbytes, sha256
    (when the manifest has it), shared, value key set and type, numeric value reprs
    (int/float), totals; plus internal consistency of fsdpconv's own storage/shared
    fields for torch.save files.  values_metadata_ok: tolerate extra str values named
    __metadata__.* (safetensors header metadata) in fsdpconv's output.
    """
    out = []
    if not isinstance(got, dict):
        return ["output is not a JSON object"]
    for field in ("format", "tensors", "values", "total_tensors", "total_bytes",
                  "total_values"):
        if field not in got:
            out.append("missing field %r" % field)
    if out:
        return out
    if got["format"] != exp["format"]:
        out.append("format: torch %r, fsdpconv %r" % (exp["format"], got["format"]))
    if path is not None and got.get("path") != path:
        out.append("path: expected %r, fsdpconv %r" % (path, got.get("path")))

    et = {t["key"]: t for t in exp["tensors"]}
    gl = [t.get("key") for t in got["tensors"]]
    dups = [k for k, n in Counter(gl).items() if n > 1]
    if dups:
        out.append("tensor keys listed twice by fsdpconv: %s" % dups[:5])
    gt = {t.get("key"): t for t in got["tensors"]}
    missing = [k for k in et if k not in gt]
    extra = [k for k in gt if k not in et]
    if missing:
        out.append("tensors missing in fsdpconv (%d): %s" % (len(missing), missing[:8]))
    if extra:
        out.append("tensors fsdpconv has but torch does not (%d): %s" % (len(extra), extra[:8]))
    for k, e in et.items():
        g = gt.get(k)
        if g is None:
            continue
        for f in ("dtype", "shape", "nbytes", "shared", "sha256"):
            if f == "sha256" and f not in e:
                continue
            if g.get(f) != e[f]:
                out.append("%s: %s torch %r, fsdpconv %r" % (k, f, e[f], g.get(f)))
        if "storage" not in g:
            out.append("%s: no 'storage' field" % k)

    ev = {v["key"]: v for v in exp["values"]}
    gv_all = {v.get("key"): v for v in got["values"]}
    gv = {k: v for k, v in gv_all.items()
          if not (values_metadata_ok and isinstance(k, str) and k.startswith("__metadata__"))}
    missing = [k for k in ev if k not in gv]
    extra = [k for k in gv if k not in ev]
    if missing:
        out.append("values missing in fsdpconv (%d): %s" % (len(missing), missing[:8]))
    if extra:
        out.append("values fsdpconv has but torch does not (%d): %s" % (len(extra), extra[:8]))
    for k, e in ev.items():
        g = gv.get(k)
        if g is None:
            continue
        if g.get("type") != e["type"]:
            out.append("value %s: type torch %r, fsdpconv %r" % (k, e["type"], g.get("type")))
        elif e["type"] in ("int", "float") and not _same_number(e["repr"], g.get("repr"),
                                                               e["type"]):
            out.append("value %s: torch %s, fsdpconv %r" % (k, e["repr"], g.get("repr")))
        elif e["type"] == "bool" and str(g.get("repr")).lower() != e["repr"].lower():
            out.append("value %s: torch %s, fsdpconv %r" % (k, e["repr"], g.get("repr")))

    n_meta = len(gv_all) - len(gv)
    for f in ("total_tensors", "total_bytes", "total_values"):
        want, have = exp[f], got[f]
        if have != want and not (f == "total_values" and n_meta and have == want + n_meta):
            out.append("%s: torch %r, fsdpconv %r" % (f, want, have))

    if exp["format"] == "torch.save":
        use = Counter(t.get("storage") for t in got["tensors"])
        for t in got["tensors"]:
            if "storage" in t and bool(t.get("shared")) != (use[t["storage"]] > 1):
                out.append("%s: fsdpconv's shared=%r disagrees with its storage %r used %d "
                           "times" % (t.get("key"), t.get("shared"), t["storage"],
                                      use[t["storage"]]))
    return out


# ---------------------------------------------------------------------------- gloo ranks

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_ranks(target, world, job, labels, wait_s, start="fork"):
    """Run target(rank, world, port, job) in `world` processes; {label: [problems]}.

    fork (the default) imports torch once, in this process.  A rank still running after
    wait_s seconds is killed.  Every label gets the problems each rank wrote for it (or
    for "*") into job["result_dir"]/rank<R>.json, prefixed "rank R: " unless they name
    their rank already; a label some rank gave no result for fails too.
    """
    import torch.multiprocessing as mp
    ctx = mp.get_context(start)
    port = free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, job)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.time() + wait_s
    for p in procs:
        p.join(max(1, deadline - time.time()))
    out = {name: [] for name in labels}
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            p.join()
            for name in out:
                out[name].append("rank %d hung (killed after the timeout)" % r)
        elif p.exitcode != 0:
            for name in out:
                out[name].append("rank %d exited with %s" % (r, p.exitcode))
    for r in range(world):
        path = os.path.join(job["result_dir"], "rank%d.json" % r)
        seen = set()
        if os.path.exists(path):
            with open(path) as f:
                for res in json.load(f):
                    seen.add(res["case"])
                    for name in (out if res["case"] == "*" else [res["case"]]):
                        out.setdefault(name, []).extend(
                            q if q.startswith("rank") else "rank %d: %s" % (r, q)
                            for q in res["problems"])
        for name in out:
            if name not in seen and "*" not in seen:
                out[name].append("rank %d reported no result" % r)
    return out


def rank_init(rank, world, port, timeout_s):
    import datetime
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=timeout_s))


def rank_finish():
    import torch.distributed as dist
    try:
        dist.destroy_process_group()
    except BaseException:   # torch's CheckpointException is a BaseException
        pass


def write_rank_results(result_dir, rank, results):
    """Written after every case, so a rank that hangs later still leaves its results."""
    path = os.path.join(result_dir, "rank%d.json" % rank)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f)
    os.replace(tmp, path)


def cap_problems(problems):
    if len(problems) > MAX_RANK_PROBLEMS:
        return problems[:MAX_RANK_PROBLEMS] + ["... %d more"
                                               % (len(problems) - MAX_RANK_PROBLEMS)]
    return problems


def compare_with_torch_save(ours, theirs, live):
    """Differences between the .metadata of fsdpconv's DCP directory `ours` and of torch's
    own FSDP2 dcp.save `theirs` of the same state: key sets, kind (tensor or bytes), sizes,
    dtypes, planner_data, and for the keys whose value in `live` ({DCP key: loaded value})
    is a DTensor the exact chunk list (torch stores plain tensors whole, fsdpconv shards
    them)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    from torch.distributed.tensor import DTensor
    a = dcp.FileSystemReader(ours).read_metadata()
    b = dcp.FileSystemReader(theirs).read_metadata()
    out = []
    ka, kb = set(a.state_dict_metadata), set(b.state_dict_metadata)
    if ka != kb:
        out.append("keys differ from torch's FSDP2 save: only fsdpconv %s, only torch %s" % (
            sorted(ka - kb)[:6], sorted(kb - ka)[:6]))
    for k in sorted(ka & kb):
        ta, tb = a.state_dict_metadata[k], b.state_dict_metadata[k]
        if isinstance(ta, BytesStorageMetadata) or isinstance(tb, BytesStorageMetadata):
            if type(ta) is not type(tb):
                out.append("%s: fsdpconv stores %s, torch %s" % (k, type(ta).__name__,
                                                                 type(tb).__name__))
            continue
        if tuple(ta.size) != tuple(tb.size) or ta.properties.dtype != tb.properties.dtype:
            out.append("%s: fsdpconv %s %s, torch's FSDP2 save %s %s" % (
                k, list(ta.size), ta.properties.dtype, list(tb.size), tb.properties.dtype))
            continue
        if (a.planner_data or {}).get(k) != (b.planner_data or {}).get(k):
            out.append("%s: planner_data %r, torch's FSDP2 save %r" % (
                k, (a.planner_data or {}).get(k), (b.planner_data or {}).get(k)))
        if not isinstance(live.get(k), DTensor):
            continue
        ca = sorted((tuple(c.offsets), tuple(c.sizes)) for c in ta.chunks)
        cb = sorted((tuple(c.offsets), tuple(c.sizes)) for c in tb.chunks)
        if ca != cb:
            out.append("%s: chunks %s, torch's FSDP2 save writes %s" % (k, ca, cb))
    return out


# ----------------------------------------------------------------------------- measuring

GNU_TIME = os.environ.get("BENCH_TIME", "/usr/bin/time")
TIME_FMT = "%M %U %S %I %O"


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def cache_mode(wanted):
    """"cold" once the page cache is dropped; "warm" when wanted is "warm", or "auto" and the
    cache cannot be dropped (not root); None when "cold" was wanted and cannot be had."""
    if wanted in ("auto", "cold"):
        if drop_caches():
            return "cold"
        if wanted == "cold":
            return None
    return "warm"


def clean_paths(paths):
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)
    os.sync()


def run_measured(cmd, log):
    """One run of cmd, stdout and stderr to the file log; the figures as a dict.

    Peak RSS, CPU and block-layer bytes are cmd's own (its reaped children included),
    taken by GNU time: a child forked straight from this Python process would carry
    Python's ~12 MiB into ru_maxrss (the high-water mark survives exec), GNU time's
    fork carries ~1.5 MiB.  Without GNU time they come from os.wait4 and "rss_method"
    says so.  Wall seconds are perf_counter around spawn..reap.
    """
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


def read_rounds(path):
    runs = {}
    if not os.path.exists(path):
        return runs
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                runs.setdefault(r["name"], []).append(r)
    return runs


def best_round(records):
    best = dict(min(records, key=lambda r: r["wall_s"]))
    best["walls_s"] = [w for r in records for w in r.get("walls_s", [r["wall_s"]])]
    best["maxrss_kib"] = max(r["maxrss_kib"] for r in records)
    best["cache"] = ",".join(sorted({r["cache"] for r in records}))
    best["loads"] = [r.get("loadavg_1m_before") for r in records]
    return best
