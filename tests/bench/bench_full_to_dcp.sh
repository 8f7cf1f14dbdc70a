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
# Load side, BENCH_LOAD_REPS (default 2) interleaved rounds after one --world-size 4 conversion
# to each format (fsdpconv_ws4, fsdpconv_ws4_safetensors) and one save of the same sharded state
# by torch's HuggingFaceStorageWriter(save_distributed=True) (torch_hf_save, bench_load.py
# --save-hf): 4 gloo ranks dcp.load into Shard(0) DTensors (bench_load.py), page cache dropped
# before each job, from
#   load_fsdpconv_ws4     fsdpconv's DCP (torch's default FileSystemReader)
#   load_fsdpconv_ws4_st  fsdpconv's --format safetensors output (HuggingFaceStorageReader)
#   load_torch            torch_save_to_dcp's DCP (torch's own dcp.save)
#   load_hf_original      the unsharded model.safetensors (HuggingFaceStorageReader)
#   load_torch_hf         torch_hf_save's safetensors files (information only)
#   load_*_prefault       the first two with the target shards written before the timed load
#                         (--prefault; information only: the format's own cost)
# Results are appended to BENCH_DIR/results.jsonl; outputs are removed at the end.
set -eu
if [ $# -ne 3 ]; then
    echo "usage: $0 FSDPCONV PYTHON BENCH_DIR" >&2
    exit 2
fi
bin=$1
py=$2
dir=$3
here=$(cd "$(dirname "$0")" && pwd)
reps=${BENCH_REPS:-3}
load_reps=${BENCH_LOAD_REPS:-2}
res="$dir/results.jsonl"
pt="$dir/model/model.pt"
st="$dir/model/model.safetensors"
out="$dir/out"
logs="$dir/logs"
mkdir -p "$out" "$logs"

m() {
    name=$1
    shift
    "$py" "$here/measure.py" --results "$res" --name "$name" --reps 1 \
        --log "$logs/$name.log" "$@"
}

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

echo "load side (4 gloo ranks, Shard(0) DTensors), $load_reps rounds:"
m fsdpconv_ws4 --clean "$out/ws4" -- \
    "$bin" full-to-dcp --world-size 4 -o "$out/ws4" "$pt"
m fsdpconv_ws4_safetensors --clean "$out/ws4_st" -- \
    "$bin" full-to-dcp --format safetensors --world-size 4 -o "$out/ws4_st" "$pt"
"$py" "$here/bench_load.py" --ckpt "$out/ws4" --world 4 --name torch_hf_save \
    --save-hf "$out/torch_hf" --results "$res"
r=0
while [ $r -lt "$load_reps" ]; do
    r=$((r + 1))
    "$py" "$here/bench_load.py" --ckpt "$out/ws4" --world 4 --name load_fsdpconv_ws4 \
        --results "$res"
    "$py" "$here/bench_load.py" --ckpt "$out/ws4_st" --world 4 --name load_fsdpconv_ws4_st \
        --reader hf --results "$res"
    "$py" "$here/bench_load.py" --ckpt "$out/torch" --world 4 --name load_torch \
        --results "$res"
    "$py" "$here/bench_load.py" --ckpt "$dir/model" --world 4 --name load_hf_original \
        --reader hf --results "$res"
    "$py" "$here/bench_load.py" --ckpt "$out/torch_hf" --world 4 --name load_torch_hf \
        --reader hf --results "$res"
    "$py" "$here/bench_load.py" --ckpt "$out/ws4" --world 4 --name load_fsdpconv_ws4_prefault \
        --prefault --results "$res"
    "$py" "$here/bench_load.py" --ckpt "$out/ws4_st" --world 4 \
        --name load_fsdpconv_ws4_st_prefault --reader hf --prefault --results "$res"
done
rm -rf "$out"
