#!/bin/sh
# Two inputs with copies: the BAGEL-shaped start (issue 9), reported, never asserted.
# usage: sh tests/bench/bench_multi_input.sh FSDPCONV PYTHON BENCH_DIR
# Inputs: model.pt of make_model.py and a small second input (extras.safetensors, 1/64 of it,
# under the prefix extras.).  `--copy` gives every layer's MLP a _moe_gen twin, so copies are a
# quarter of the output bytes (each layer has 6 equal matrices, 2 of them MLP).  Cases, in
# BENCH_REPS (default 3) interleaved rounds, page cache dropped before each (measure.py):
#   multi_cp_fsync      yardstick: cp + fsync of a file as large as the two-input output
#   multi_input_copies  fsdpconv full-to-dcp --world-size 8, two inputs, the copies
#   single_input        fsdpconv full-to-dcp --world-size 8 of model.pt alone (peak RSS baseline)
# Prints the best wall times, the ratio to the yardstick (target <= 1.10) and both peak RSS.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_args "$@"
reps=${BENCH_REPS:-3}
res="$dir/results_multi.jsonl"
pt="$dir/model/model.pt"
extras="$dir/model/extras.safetensors"
out="$dir/out_multi"
mkdir -p "$out"
rm -f "$res"

"$py" - "$pt" "$extras" <<'PY'
import os, sys, torch
from safetensors.torch import save_file
n = os.path.getsize(sys.argv[1]) // 64 // 4 // 4096       # fp32 rows of 4096
torch.manual_seed(1)
save_file({"connector.weight": torch.randn(max(n, 1), 4096)}, sys.argv[2])
PY
copy='^(layers\.\d+)\.mlp\.(.*)$=\1.mlp_moe_gen.\2'
"$bin" full-to-dcp --world-size 8 -o "$out/probe" --copy "$copy" "$pt" extras.="$extras" >/dev/null
outbytes=$(du -sb "$out/probe" | cut -f1)
rm -rf "$out/probe"
cat "$pt" "$extras" "$pt" | head -c "$outbytes" >"$out/yard.bin"

echo "two inputs + copies (world size 8), $reps rounds:"
r=0
while [ $r -lt "$reps" ]; do
    r=$((r + 1))
    m multi_cp_fsync --clean "$out/copy.bin" -- \
        sh -c 'cp "$1" "$2" && sync "$2"' sh "$out/yard.bin" "$out/copy.bin"
    rm -f "$out/copy.bin"
    m multi_input_copies --clean "$out/multi" -- \
        "$bin" full-to-dcp --world-size 8 -o "$out/multi" --copy "$copy" "$pt" \
        extras.="$extras"
    rm -rf "$out/multi"
    m single_input --clean "$out/single" -- "$bin" full-to-dcp --world-size 8 -o "$out/single" "$pt"
    rm -rf "$out/single"
done
rm -rf "$out"

"$py" - "$res" "$outbytes" "$pt" "$extras" "$here/../interop" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[5])
import common
best = {n: common.best_round(rs) for n, rs in common.read_rounds(sys.argv[1]).items()}
out, x = int(sys.argv[2]), os.path.getsize(sys.argv[3]) + os.path.getsize(sys.argv[4])
m, y, s = best["multi_input_copies"], best["multi_cp_fsync"], best["single_input"]
print("| figure | measured | target |")
print("|---|---|---|")
print("| two inputs + copies (%.2f GiB out, %.0f%% copies) / cp+fsync of as many bytes | "
      "**%.2fx** (%.2f s / %.2f s) | <= 1.10 |"
      % (out / 2**30, 100.0 * (out - x) / out, m["wall_s"] / y["wall_s"], m["wall_s"],
         y["wall_s"]))
print("| peak RSS: two inputs + copies / model.pt alone | %.0f MiB / %.0f MiB | unchanged |"
      % (m["maxrss_kib"] / 1024, s["maxrss_kib"] / 1024))
PY
rm -f "$extras"
