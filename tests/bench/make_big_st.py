"""Write a big safetensors file of random fp32 [4096, 4096] tensors, streamed (little RAM).

usage: python make_big_st.py OUT.safetensors --gb GB

For the direct-I/O benchmark (bench_io.sh), whose model is larger than make_model.py can build
in memory: ceil(GB * 16) tensors of 64 MiB ("layers.K.weight"), random bytes (numpy's PCG64,
seed 0), so nothing compresses. An existing OUT of the same size is kept.
"""

import argparse
import json
import os
import struct

import numpy as np

ROWS = COLS = 4096
NBYTES = ROWS * COLS * 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gb", type=float, required=True)
    args = ap.parse_args()
    n = max(1, int(args.gb * (1 << 30) / NBYTES + 0.999))
    header = {"__metadata__": {"format": "pt"}}
    for k in range(n):
        header["layers.%d.weight" % k] = {"dtype": "F32", "shape": [ROWS, COLS],
                                          "data_offsets": [k * NBYTES, (k + 1) * NBYTES]}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    size = 8 + len(h) + n * NBYTES
    if os.path.exists(args.out) and os.path.getsize(args.out) == size:
        print("make_big_st: %s exists (%d tensors)" % (args.out, n))
        return
    rng = np.random.default_rng(0)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _ in range(n):
            f.write(rng.bytes(NBYTES))
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, args.out)
    print("make_big_st: wrote %s: %d tensors, %.2f GiB" % (args.out, n, size / (1 << 30)))


if __name__ == "__main__":
    main()
