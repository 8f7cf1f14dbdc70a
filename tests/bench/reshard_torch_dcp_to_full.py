"""Yardstick of bench_dcp_to_full.sh: PyTorch's own offline DCP -> torch.save converter.

usage: python reshard_torch_dcp_to_full.py DCP_DIR OUT.pt

Runs torch.distributed.checkpoint.format_utils.dcp_to_torch_save(DCP_DIR, OUT.pt) (a no_dist
DCP load of every tensor into memory, then torch.save), then fsyncs OUT.pt, as fsdpconv
dcp-to-full fsyncs its output, so both sides pay for durability. Prints one JSON line with the
seconds spent importing torch, inside the call, and in the fsync.
"""

import json
import os
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402,F401
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402

t1 = time.perf_counter()
dcp_to_torch_save(sys.argv[1], sys.argv[2])
t2 = time.perf_counter()
fd = os.open(sys.argv[2], os.O_RDONLY)
try:
    os.fsync(fd)
finally:
    os.close(fd)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "convert_s": t2 - t1, "fsync_s": t3 - t2}))
