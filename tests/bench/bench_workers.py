"""Independent workers: 1, 2 and 4 processes converting the same model, against cp + fsync.

usage: python3 bench_workers.py FSDPCONV [--gb GB] [--dir DIR] [--reps N]   (`make bench-workers`)

Writes DIR/model.safetensors (GB GiB of random float32 [4096, 4096] tensors, written in a
stream: no torch, little RAM) unless it is there with that size, then runs interleaved rounds of
  cp_fsync   cp of the model and `sync` of the copy (the bytes moved once, durably)
  workers_P  fsdpconv full-to-dcp --world-size 8 --threads 1 started as P torchrun-style ranks
             (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) for P = 1, 2, 4
and prints, per case, the best round's wall time, the total CPU time of all its processes, and
per worker the bytes it read: rchar (every byte read() and pread() returned) and read_bytes
(bytes the disk delivered).  The model's pages are dropped from the page cache before every run
with posix_fadvise(DONTNEED) on that file alone, so reads are cold without disturbing anything
else on the machine.  The load average is printed before and after.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

GIB = 1 << 30
TENSOR = 4096 * 4096 * 4


def make_model(path, gb):
    n = max(1, int(gb * GIB // TENSOR))
    hdr = {f"layers.{i}.weight": {"dtype": "F32", "shape": [4096, 4096],
                                  "data_offsets": [i * TENSOR, (i + 1) * TENSOR]} for i in range(n)}
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    want = 8 + len(h) + n * TENSOR
    if os.path.exists(path) and os.path.getsize(path) == want:
        return want
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for _ in range(n):
            f.write(os.urandom(TENSOR))
        f.flush()
        os.fsync(f.fileno())
    return want


def drop(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def io_of(pid):
    with open(f"/proc/{pid}/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f.read().splitlines())}


def run_ranks(argvs, envs):
    """Start every argv at once; at each exit read its /proc io, then reap it with its rusage."""
    t0 = time.monotonic()
    procs = [subprocess.Popen(a, env=e, stderr=subprocess.PIPE) for a, e in zip(argvs, envs)]
    ranks = []
    for p in procs:
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
        io = io_of(p.pid)
        _, status, ru = os.wait4(p.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"bench: {' '.join(argvs[0])} failed: {p.stderr.read().decode()}")
        ranks.append({"cpu_s": ru.ru_utime + ru.ru_stime, "rchar": io["rchar"],
                      "read_bytes": io["read_bytes"], "write_bytes": io["write_bytes"],
                      "maxrss_kib": ru.ru_maxrss})
    return time.monotonic() - t0, ranks


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def case_workers(fsdpconv, model, out, p):
    argv = [fsdpconv, "-q", "full-to-dcp", "--world-size", "8", "--threads", "1", "-o", out, model]
    port = free_port()
    envs = [dict(os.environ, RANK=str(r), WORLD_SIZE=str(p), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port)) for r in range(p)]
    return run_ranks([argv] * p, envs)


def case_cp(model, out):
    return run_ranks([["sh", "-c", 'cp "$1" "$2" && sync "$2"', "sh", model, out]], [os.environ])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fsdpconv")
    ap.add_argument("--gb", type=float, default=4)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    d = a.dir or "/tmp/fsdpconv-bench-workers"
    os.makedirs(d, exist_ok=True)
    model = os.path.join(d, "model.safetensors")
    out = os.path.join(d, "out")
    size = make_model(model, a.gb)
    print(f"model: {size / GIB:.2f} GiB, {size // TENSOR} tensors; {os.cpu_count()} CPUs; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cases = {"cp_fsync": lambda: case_cp(model, out)}
    for p in (1, 2, 4):
        cases[f"workers_{p}"] = lambda p=p: case_workers(a.fsdpconv, model, out, p)
    best = {}
    for _ in range(a.reps):
        for name, fn in cases.items():
            shutil.rmtree(out, ignore_errors=True)
            if os.path.exists(out):
                os.unlink(out)
            drop(model)
            wall, ranks = fn()
            if name not in best or wall < best[name][0]:
                best[name] = (wall, ranks)
    shutil.rmtree(out, ignore_errors=True)
    if os.path.isfile(out):
        os.unlink(out)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print("| case | wall s | CPU s (all processes) | GiB/s | per worker: rchar GiB / read_bytes GiB |")
    print("|---|---|---|---|---|")
    for name, (wall, ranks) in best.items():
        cpu = sum(r["cpu_s"] for r in ranks)
        reads = ", ".join(f"{r['rchar'] / GIB:.2f} / {r['read_bytes'] / GIB:.2f}" for r in ranks)
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {size / GIB / wall:.2f} | {reads} |")
    with open(os.path.join(d, "workers.json"), "w") as f:
        json.dump({k: {"wall_s": v[0], "ranks": v[1]} for k, v in best.items()}, f, indent=1)


if __name__ == "__main__":
    main()
