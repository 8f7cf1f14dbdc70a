#!/bin/sh
# torch_checkpointing output (issue 23) on the model written by make_model.py in BENCH_DIR.
# usage: sh tests/bench/bench_tcp.sh FSDPCONV PYTHON BENCH_DIR
# For each layout (pt: the package's default, model_<rank>.pt; st: its safetensors layout):
# Write side, BENCH_REPS (default 3) interleaved rounds:
#   fsdpconv_ws4_tcp_<l>  full-to-dcp --format torch-checkpointing --tcp-layout <l>
#                         --world-size 4 --mesh-device cpu of model.pt
#   cp_fsync_tcp_<l>      yardstick: cp -r of that output + sync of every copied file
# Load side, BENCH_LOAD_REPS (default 2) rounds, page cache dropped before each job: 4 gloo
# ranks load into Shard(0) DTensors through the package's CheckpointManager (bench_load.py
# --reader tcp) from
#   load_fsdpconv_ws4_tcp_<l> fsdpconv's output
#   load_pkg_tcp_<l>          the package's own save of the same state (bench_load.py --save-tcp,
#                             after a load of fsdpconv's DCP of model.pt)
# pt loads take the package's fast path (each rank reads metadata.pkl and its own file); st
# loads always reshard.  Skipped when the venv lacks torch_checkpointing.  Results go to
# BENCH_DIR/results.jsonl.
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
rm -rf "$out"
mkdir -p "$out"

"$bin" full-to-dcp --world-size 4 -o "$out/dcp" "$pt" >/dev/null 2>&1
for l in pt st; do
    layout=$l
    [ "$l" = st ] && layout=safetensors
    echo "torch_checkpointing --tcp-layout $layout (world size 4), $reps rounds:"
    r=0
    while [ $r -lt "$reps" ]; do
        r=$((r + 1))
        rm -rf "$out/ws4_$l"
        m "fsdpconv_ws4_tcp_$l" --clean "$out/ws4_$l" -- \
            "$bin" full-to-dcp --format torch-checkpointing --tcp-layout "$layout" \
            --mesh-device cpu --world-size 4 -o "$out/ws4_$l" "$pt"
        m "cp_fsync_tcp_$l" --clean "$out/copy" -- \
            sh -c 'cp -r "$1" "$2" && sync "$2"/*' sh "$out/ws4_$l" "$out/copy"
        rm -rf "$out/copy"
    done
    "$py" "$here/bench_load.py" --ckpt "$out/dcp" --world 4 --name "pkg_tcp_save_$l" \
        --save-tcp "$out/pkg_$l" --tcp-layout "$l" --results "$res"
    r=0
    while [ $r -lt "$load_reps" ]; do
        r=$((r + 1))
        "$py" "$here/bench_load.py" --ckpt "$out/ws4_$l" --world 4 \
            --name "load_fsdpconv_ws4_tcp_$l" --reader tcp --tcp-layout "$l" --results "$res"
        "$py" "$here/bench_load.py" --ckpt "$out/pkg_$l" --world 4 --name "load_pkg_tcp_$l" \
            --reader tcp --tcp-layout "$l" --results "$res"
    done
done
rm -rf "$out"
