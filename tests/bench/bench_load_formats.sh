#!/bin/sh
# Load side of the output formats (issue 14) on the model written by make_model.py in BENCH_DIR.
# usage: sh tests/bench/bench_load_formats.sh FSDPCONV PYTHON BENCH_DIR
# One --world-size 4 conversion to each format (fsdpconv_ws4, fsdpconv_ws4_safetensors), one
# torch_save_to_dcp of model.pt (torch's own dcp.save; reused when the conversion bench left it in
# BENCH_DIR/out/torch) and one save of the loaded sharded state by torch's
# HuggingFaceStorageWriter(save_distributed=True) (torch_hf_save, bench_load.py --save-hf). Then
# BENCH_LOAD_REPS (default 2) interleaved rounds in which 4 gloo ranks dcp.load into Shard(0)
# DTensors (bench_load.py), page cache dropped before each job, from
#   load_fsdpconv_ws4     fsdpconv's DCP (torch's default FileSystemReader)
#   load_fsdpconv_ws4_st  fsdpconv's --format safetensors output (HuggingFaceStorageReader)
#   load_torch            torch_save_to_dcp's DCP (torch's own dcp.save)
#   load_hf_original      the unsharded model.safetensors (HuggingFaceStorageReader)
#   load_torch_hf         torch_hf_save's safetensors files (information only)
#   load_*_prefault       the first two with the target shards written before the timed load
#                         (--prefault; information only: the format's own cost)
# Results are appended to BENCH_DIR/results.jsonl; the outputs are removed at the end.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_args "$@"
load_reps=${BENCH_LOAD_REPS:-2}
res="$dir/results.jsonl"
pt="$dir/model/model.pt"
out="$dir/out"
mkdir -p "$out"

echo "load side in $dir (4 gloo ranks, Shard(0) DTensors), $load_reps rounds:"
m fsdpconv_ws4 --clean "$out/ws4" -- \
    "$bin" full-to-dcp --world-size 4 -o "$out/ws4" "$pt"
m fsdpconv_ws4_safetensors --clean "$out/ws4_st" -- \
    "$bin" full-to-dcp --format safetensors --world-size 4 -o "$out/ws4_st" "$pt"
if [ ! -f "$out/torch/.metadata" ]; then
    rm -rf "$out/torch"
    "$py" "$here/torch_convert.py" "$pt" "$out/torch" >"$logs/torch_load_input.log" 2>&1
fi
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
