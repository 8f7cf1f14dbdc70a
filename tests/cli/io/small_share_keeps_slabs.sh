# A small --max-memory share keeps slabs of half of it at least: the direct-I/O buffers and
# the read scratch (32 MiB at full size) shrink to fit beside them instead of leaving slabs of
# one row at a time.  full-to-dcp, dcp-to-full and reshard at --max-memory 8M on one thread,
# --io direct, of a 16 MiB tensor of 16384 rows of 1 KiB: each process's read calls
# (/proc/PID/io syscr, read when it exits) number a few per slab, not thousands; -v says
# the data went direct, and the bytes are those of --io buffered.
python3 - <<'PY'
import json, os, struct, subprocess

rows, cols = 16384, 256
hdr = json.dumps({"w": {"dtype": "F32", "shape": [rows, cols],
                        "data_offsets": [0, rows * cols * 4]}}).encode()
hdr += b" " * (-len(hdr) % 8)
with open("in.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(hdr)) + hdr + os.urandom(rows * cols * 4))

def reads(mode, args):
    if args[0] != "dcp-to-full":
        args += ["--threads", "1"]
    os.makedirs(mode, exist_ok=True)
    p = subprocess.Popen(["fsdpconv", "-v"] + args + ["--max-memory", "8M", "--io", mode],
                         cwd=mode, stderr=subprocess.PIPE, text=True)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    with open(f"/proc/{p.pid}/io") as f:
        syscr = int(dict(line.split(": ") for line in f.read().splitlines())["syscr"])
    err = p.stderr.read()
    p.wait()
    assert p.returncode == 0, (args, err)
    return syscr, err

for mode in ("direct", "buffered"):
    for args in (["full-to-dcp", "--world-size", "2", "-o", "dcp", "../in.safetensors"],
                 ["reshard", "--world-size", "3", "-o", "resh", "dcp"],
                 ["dcp-to-full", "-o", "out.safetensors", "dcp"]):
        syscr, err = reads(mode, args)
        if mode == "direct":
            direct = "io direct: read 16.0 MiB direct" in err
            print(f"{args[0]}: {'few' if syscr < 300 else 'MANY'} reads; "
                  f"{'direct' if direct else 'NOT direct'}")
            if syscr >= 300 or not direct:
                print(f"  {syscr} read calls; {err.strip()}")
PY
diff -r direct buffered >/dev/null && echo "same bytes as buffered"
# A share too small for direct requests of 256 KiB (the buffers would take more than half of
# it) runs buffered, and -v says why.
fsdpconv -v full-to-dcp --world-size 2 --threads 1 --max-memory 1M --io direct -o tiny \
    in.safetensors 2>&1 | grep -o "16.0 MiB buffered; wrote 0 bytes direct, 16.0 MiB buffered.*$"
