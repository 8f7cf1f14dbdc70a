"""Yardstick 2: PyTorch's own offline converter.

usage: python torch_convert.py INPUT.pt OUTDIR

Runs torch.distributed.checkpoint.format_utils.torch_save_to_dcp(INPUT, OUTDIR) (torch.load of
the whole file, then a single-process DCP save with fsync) and prints one JSON line with the
seconds spent importing torch and inside the call.
"""

import json
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402,F401
from torch.distributed.checkpoint.format_utils import torch_save_to_dcp  # noqa: E402

t1 = time.perf_counter()
torch_save_to_dcp(sys.argv[1], sys.argv[2])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "convert_s": t2 - t1}))
