# Each worker reads about its share of the input, never the whole, and its peak RSS stays
# bounded by --max-memory whatever the model size.  Four torchrun-style ranks convert a 64 MiB
# checkpoint (16 tensors) onto 8 ranks; each is measured by the launcher below when it exits
# (waitid WNOWAIT, then /proc/PID/io and wait4's ru_maxrss).  rchar, not read_bytes: read_bytes
# counts only disk reads and the page cache cannot be dropped here, while rchar counts every
# byte read() and pread() returned, cached or not (fsdpconv reads inputs with pread, no mmap).
# A share also reads its own output files back once to record their CRC-32s: their sizes
# (DCP items of 256 KiB or more start on 4 KiB boundaries) are taken from the output.
# --io auto whatever $FSDPCONV_IO says: forced direct I/O reads whole 4 KiB blocks around
# every unaligned row (3x the bytes of this test's 4 KiB rows), which says nothing of shares.
python3 - <<'PY'
import json, os, shutil, socket, struct, subprocess

def model(path, n):
    size = 1024 * 1024 * 4
    hdr = {f"layers.{i}.weight": {"dtype": "F32", "shape": [1024, 1024],
                                  "data_offsets": [i * size, (i + 1) * size]} for i in range(n)}
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for i in range(n):
            f.write(os.urandom(size))
    return os.path.getsize(path)

def run(path, out, world):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(world):
        env = dict(quiet_asan, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            ["fsdpconv", "full-to-dcp", "--world-size", "8", "--dtype", "bf16", "--threads", "1",
             "--max-memory", "4M", "--io", "auto", "-o", out, path], env=env,
            stderr=subprocess.DEVNULL))
    stats = []
    for p in procs:
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
        with open(f"/proc/{p.pid}/io") as f:
            io = dict(line.split(": ") for line in f.read().splitlines())
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        assert p.returncode == 0, p.returncode
        stats.append((int(io["rchar"]), ru.ru_maxrss * 1024))
    return stats

MiB = 1 << 20
# Under ASan (make asan) freed slabs stay in its quarantine and count in RSS: without one,
# peak RSS measures fsdpconv's own buffers there too.  Ignored by other builds.
quiet_asan = dict(os.environ, ASAN_OPTIONS=(os.environ.get("ASAN_OPTIONS", "")
                                             + ":quarantine_size_mb=0").lstrip(":"))
# fsdpconv's own peak RSS (the small dtypes fixture, one process): the bound below is above
# it, so that a sanitizer build's larger footprint (ASan: about 40 MiB more) measures the same.
tiny = subprocess.Popen(["fsdpconv", "full-to-dcp", "--world-size", "8", "--nproc", "1",
                         "-o", "tiny_out", f"{os.environ['FIXTURES']}/full/dtypes.pt"],
                        env=quiet_asan, stderr=subprocess.DEVNULL)
_, status, ru = os.wait4(tiny.pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
base_rss = ru.ru_maxrss * 1024
asan = b"libasan" in subprocess.run(["ldd", shutil.which("fsdpconv")], capture_output=True).stdout
slack = (3 if asan else 2) * MiB
small_rss = None
for n, name in ((16, "small"), (48, "large")):
    total = model(f"{name}.safetensors", n)
    stats = run(f"{name}.safetensors", f"{name}_out", 4)
    share_in = total / 4            # each rank owns 2 of the 8 rank files: a quarter of every tensor
    for r, (rchar, rss) in enumerate(stats):
        # the files it wrote (r and r + 4; bf16: about half of its input share), read back once
        share_out = sum(os.path.getsize(f"{name}_out/__{f}_0.distcp") for f in (r, r + 4))
        ok = share_in <= rchar <= share_in + share_out + MiB and rchar < total / 2
        # 4 MiB of buffers and the direct-I/O ones over the program's own; a model 3 times
        # larger adds nothing but its plan (a few hundred KiB; ASan's allocator bookkeeping
        # makes that about 2.5 MiB), less than one of its 4 MiB tensors
        small = rss < base_rss + 32 * MiB and (small_rss is None or rss < small_rss + slack)
        print(f"{name} rank {r}: reads its share {'yes' if ok else 'NO'}; "
              f"peak RSS bounded: {'yes' if small else 'NO'}")
        if not ok or not small:
            print(f"  rchar {rchar} (share {share_in:.0f} + {share_out:.0f} out of {total}), rss {rss}")
    small_rss = small_rss or max(rss for _, rss in stats)
PY
