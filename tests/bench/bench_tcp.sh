#!/bin/sh
# torch_checkpointing output (issue 23) on the model written by make_model.py in BENCH_DIR.
# usage: sh tests/bench/bench_tcp.sh FSDPCONV PYTHON BENCH_DIR
# Write side, BENCH_REPS (default 3) interleaved rounds:
#   fsdpconv_ws4_tcp      full-to-dcp --format torch-checkpointing --world-size 4 of model.pt
#   cp_fsync_tcp          yardstick: cp -r of that output + sync of every copied file
# Load side, BENCH_LOAD_REPS (default 2) rounds, page cache dropped before each job: 4 gloo
# ranks load into Shard(0) DTensors through the package's CheckpointManager (bench_load.py
# --reader tcp) from
#   load_fsdpconv_ws4_tcp fsdpconv's output
#   load_pkg_tcp          the package's own save of the same state (bench_load.py --save-tcp,
#                         after a load of fsdpconv's DCP of model.pt)
# Skipped when the venv lacks torch_checkpointing.  Results go to BENCH_DIR/results.jsonl.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_args "$@"
if ! "$py" -c 'import torch_checkpointing' >/dev/null 2>&1; then
    echo "torch_checkpointing: skipped ($py cannot import torch_checkpointing; make venv)"
    exit 0
fi
reps=${BENCH_REPS:-3}
load_reps=${BENCH_LOAD_REPS:-2}
res="$dir/results.jsonl"
pt="$dir/model/model.pt"
out="$dir/out_tcp"
mkdir -p "$out"

echo "torch_checkpointing (world size 4), $reps rounds:"
r=0
while [ $r -lt "$reps" ]; do
    r=$((r + 1))
    rm -rf "$out/ws4"
    m fsdpconv_ws4_tcp --clean "$out/ws4" -- \
        "$bin" full-to-dcp --format torch-checkpointing --world-size 4 -o "$out/ws4" "$pt"
    m cp_fsync_tcp --clean "$out/copy" -- \
        sh -c 'cp -r "$1" "$2" && sync "$2"/*' sh "$out/ws4" "$out/copy"
    rm -rf "$out/copy"
done
"$bin" full-to-dcp --world-size 4 -o "$out/dcp" "$pt" >/dev/null 2>&1
"$py" "$here/bench_load.py" --ckpt "$out/dcp" --world 4 --name pkg_tcp_save \
    --save-tcp "$out/pkg" --results "$res"
rm -rf "$out/dcp"
r=0
while [ $r -lt "$load_reps" ]; do
    r=$((r + 1))
    "$py" "$here/bench_load.py" --ckpt "$out/ws4" --world 4 --name load_fsdpconv_ws4_tcp \
        --reader tcp --results "$res"
    "$py" "$here/bench_load.py" --ckpt "$out/pkg" --world 4 --name load_pkg_tcp \
        --reader tcp --results "$res"
done
rm -rf "$out"
