#!/bin/sh
# full-to-dcp benchmark on the model written by make_model.py.
# usage: sh tests/bench/bench_full_to_dcp.sh FSDPCONV PYTHON BENCH_DIR
# Every run starts with the page cache dropped (warm fallback without root, see measure.py); all
# three writers fsync their output. The cases run in BENCH_REPS (default 3) interleaved rounds, so
# load from other jobs on the machine hits every case alike; report.py keeps each case's fastest
# round (peak RSS: the largest).
#   cp_fsync           yardstick 1: cp model.pt + fsync of the copy (`sync FILE`)
#   cp                 plain cp, no fsync (information only)
#   fsdpconv_ws8       fsdpconv full-to-dcp --world-size 8 of model.pt
#   fsdpconv_ws8_st    the same from model.safetensors (information only)
#   fsdpconv_ws8_bf16  --dtype bfloat16 (information only)
#   torch_save_to_dcp  yardstick 2: torch_save_to_dcp(model.pt, out) (torch_convert.py)
# Results are appended to BENCH_DIR/results.jsonl. The outputs are removed, but for the last
# round's torch_save_to_dcp output (BENCH_DIR/out/torch), which bench_load_formats.sh loads.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_args "$@"
reps=${BENCH_REPS:-3}
res="$dir/results.jsonl"
pt="$dir/model/model.pt"
st="$dir/model/model.safetensors"
out="$dir/out"
mkdir -p "$out"

echo "full-to-dcp (world size 8), $reps rounds:"
r=0
while [ $r -lt "$reps" ]; do
    r=$((r + 1))
    m cp_fsync --clean "$out/copy.pt" -- \
        sh -c 'cp "$1" "$2" && sync "$2"' sh "$pt" "$out/copy.pt"
    m cp --clean "$out/copy.pt" -- cp "$pt" "$out/copy.pt"
    rm -f "$out/copy.pt"
    m fsdpconv_ws8 --clean "$out/ws8" -- \
        "$bin" full-to-dcp --world-size 8 -o "$out/ws8" "$pt"
    rm -rf "$out/ws8"
    m fsdpconv_ws8_st --clean "$out/ws8_st" -- \
        "$bin" full-to-dcp --world-size 8 -o "$out/ws8_st" "$st"
    rm -rf "$out/ws8_st"
    m fsdpconv_ws8_bf16 --clean "$out/ws8_bf16" -- \
        "$bin" full-to-dcp --world-size 8 --dtype bfloat16 -o "$out/ws8_bf16" "$pt"
    rm -rf "$out/ws8_bf16"
    # the last round's output stays for the load side
    m torch_save_to_dcp --clean "$out/torch" -- \
        "$py" "$here/torch_convert.py" "$pt" "$out/torch"
done
